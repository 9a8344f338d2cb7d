// GPipe (Huang et al., NeurIPS 2019): every device runs all forwards, then all backwards.
// Reference schedules.md §2: the backward order is implementation-defined; we run it LIFO
// (last microbatch first), which changes neither the bubble nor the peak.
#include "common.hpp"

#include "pipetab/schedules/registry.hpp"

namespace pipetab::schedules {
namespace {

ScheduleTable generate_gpipe(const ResolvedParams& p) {
  const int S = p.devices, M = p.microbatches;
  require_size(p, S, std::int64_t{2} * S * M);
  TableBuilder table(S, S, M, looping_placement(S, S), std::int64_t{2} * S * M);
  for (int d = 0; d < S; ++d) {
    for (int m = 0; m < M; ++m)
      table.push(PassKind::F, m, d);
    for (int m = M - 1; m >= 0; --m)
      table.push(PassKind::B, m, d);
    table.end_row();
  }
  return std::move(table).finish();
}

}  // namespace

extern const ScheduleInfo kGPipe{
    .name = "gpipe",
    .title = "GPipe: all forwards, then all backwards (fill-drain)",
    .source = "Huang et al., GPipe, NeurIPS 2019",
    .constraints = "none",
    .generate = generate_gpipe,
};

}  // namespace pipetab::schedules
