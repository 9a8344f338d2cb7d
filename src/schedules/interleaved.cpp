// Interleaved 1F1B (Megatron-LM, Narayanan et al., SC'21), in Megatron's order (reference
// schedules.md §4; Megatron `forward_backward_pipelining_with_interleaving`):
//  - device d holds v chunks, global stages d, d+S, ..., d+(v-1)S;
//  - there are vM virtual microbatches; virtual k runs its forward on chunk (k mod vS) div S
//    for microbatch (k div vS)·S + (k mod S), its backward on the mirrored chunk v-1-chunk;
//  - warm-up w = min(vM, 2(S-d-1) + (v-1)S) forwards (all vM when M == S), then pairs
//    "F(k+w), B(k)", then the remaining backwards.
// With one chunk Megatron runs the non-interleaved schedule, so -v 1 is 1F1B.
#include "common.hpp"

#include "pipetab/schedules/registry.hpp"

namespace pipetab::schedules {
namespace {

ScheduleTable generate_interleaved(const ResolvedParams& p) {
  if (p.chunks == 1) return one_f_one_b(p);
  const std::int64_t S = p.devices, M = p.microbatches, v = p.chunks;
  require(M % S == 0, p,
          "M = {} must be a multiple of S = {} (Megatron's interleaved schedule walks microbatches "
          "in groups of S)",
          M, S);
  require_size(p, v * S, 2 * v * S * M);
  const auto stages = static_cast<int>(v * S);
  TableBuilder table(p.devices, stages, p.microbatches, looping_placement(p.devices, stages),
                     2 * v * S * M);
  const std::int64_t total = v * M;
  // Virtual microbatch k → (microbatch, forward chunk); the same on every device, so it is
  // computed once instead of with divisions per op.
  std::vector<std::int32_t> microbatch_of(static_cast<std::size_t>(total));
  std::vector<std::int32_t> chunk_of(static_cast<std::size_t>(total));
  for (std::int64_t k = 0; k < total; ++k) {
    microbatch_of[static_cast<std::size_t>(k)] =
        static_cast<std::int32_t>((k / (v * S)) * S + k % S);
    chunk_of[static_cast<std::size_t>(k)] = static_cast<std::int32_t>((k % (v * S)) / S);
  }
  for (std::int64_t d = 0; d < S; ++d) {
    const std::int64_t warmup = M == S ? total : std::min(total, 2 * (S - d - 1) + (v - 1) * S);
    const auto forward = [&](std::int64_t k) {
      const auto i = static_cast<std::size_t>(k);
      table.push(PassKind::F, microbatch_of[i], static_cast<int>(chunk_of[i] * S + d));
    };
    const auto backward = [&](std::int64_t k) {
      const auto i = static_cast<std::size_t>(k);
      table.push(PassKind::B, microbatch_of[i], static_cast<int>((v - 1 - chunk_of[i]) * S + d));
    };
    for (std::int64_t k = 0; k < warmup; ++k)
      forward(k);
    for (std::int64_t k = 0; k < total - warmup; ++k) {
      forward(k + warmup);
      backward(k);
    }
    for (std::int64_t k = total - warmup; k < total; ++k)
      backward(k);
    table.end_row();
  }
  return std::move(table).finish();
}

}  // namespace

extern const ScheduleInfo kInterleaved{
    .name = "interleaved",
    .title = "Interleaved 1F1B (Megatron-LM): v chunks per device, looping placement",
    .source = "Narayanan et al., SC'21; order of Megatron-LM schedules.py",
    .constraints = "M a multiple of S (for v >= 2); v = 1 is 1F1B",
    .default_chunks = 2,
    .generate = generate_interleaved,
};

}  // namespace pipetab::schedules
