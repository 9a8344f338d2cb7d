// Breadth-First Pipeline Parallelism, "looped BFS" (Lamy-Poirier 2022, arXiv 2211.05953;
// reference schedules.md §10). Placement as in interleaved 1F1B: device d holds the v chunks
// d, d+S, ..., d+(v-1)S (looping). Order of PyTorch's ScheduleLoopedBFS
// (torch/distributed/pipelining/schedules.py, _calculate_single_rank_operations; pytorch-interop
// §2), idle padding removed: when microbatches are ready for several local stages, the earliest
// stage runs for all of them first —
//   for each local stage, ascending:  F of microbatches 0 .. M-1;
//   for each local stage, descending: B of microbatches M-1 .. 0.
// PyTorch states no constraint and none is needed: every (S, M, v) gives a valid table. With
// M < S a device idles at each loop turn (the first microbatch has not come around yet); the
// makespan is then set by one microbatch's chain, not by the device's work (docs/schedules.md).
#include "common.hpp"

#include "pipetab/schedules/registry.hpp"

namespace pipetab::schedules {
namespace {

ScheduleTable generate_looped_bfs(const ResolvedParams& p) {
  const std::int64_t S = p.devices, M = p.microbatches, v = p.chunks;
  require_size(p, v * S, 2 * v * S * M);
  const auto stages = static_cast<int>(v * S);
  TableBuilder table(p.devices, stages, p.microbatches, looping_placement(p.devices, stages),
                     2 * v * S * M);
  for (std::int64_t d = 0; d < S; ++d) {
    for (std::int64_t k = 0; k < v; ++k) {
      for (std::int32_t m = 0; m < p.microbatches; ++m)
        table.push(PassKind::F, m, static_cast<int>(k * S + d));
    }
    for (std::int64_t k = v - 1; k >= 0; --k) {
      for (std::int32_t m = p.microbatches - 1; m >= 0; --m)
        table.push(PassKind::B, m, static_cast<int>(k * S + d));
    }
    table.end_row();
  }
  return std::move(table).finish();
}

}  // namespace

constexpr std::string_view kLoopedBfsAliases[] = {"LoopedBFS"};  // PyTorch's name

extern const ScheduleInfo kLoopedBfs{
    .name = "looped-bfs",
    .aliases = kLoopedBfsAliases,
    .title = "Breadth-first looped pipeline: v chunks per device, all microbatches per stage",
    .source = "Lamy-Poirier, Breadth-First PP (arXiv 2211.05953); PyTorch ScheduleLoopedBFS",
    .constraints = "none (M < S idles at each loop turn)",
    .default_chunks = 2,
    .generate = generate_looped_bfs,
};

}  // namespace pipetab::schedules
