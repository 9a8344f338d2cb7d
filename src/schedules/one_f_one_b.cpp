// 1F1B = PipeDream-Flush (Narayanan et al., ICML 2021) = DAPPLE (Fan et al., PPoPP 2021).
// Order on device d (reference schedules.md §3, Megatron's non-interleaved schedule):
// w = min(S-d-1, M) warm-up forwards; then M-w pairs "F(i+w), B(i)"; then the last w backwards.
// Megatron-Core's combined 1F1B without pipelining (--overlap-moe-expert-parallel-comm at
// PP 1; pipetab's --a2a-overlap, ScheduleParams::combined_1f1b) warms up one forward, so that
// each step runs one microbatch's forward with the previous one's backward
// (combined_1f1b_schedule_for_no_pipelining in megatron/core/pipeline_parallel/combined_1f1b.py
// @d98e8a6). With pipelining Megatron-Core combines only the interleaved schedule's steps: its
// TransformerConfig requires virtual pipeline stages when PP > 1 (transformer_config.py).
#include "common.hpp"

#include "pipetab/schedules/registry.hpp"

namespace pipetab::schedules {

ScheduleTable one_f_one_b(const ResolvedParams& p) {
  const int S = p.devices, M = p.microbatches;
  require(!p.combined_1f1b || S == 1, p,
          "--a2a-overlap with {} pipeline stages and no model chunks: Megatron-Core combines the "
          "interleaved schedule's steps when PP > 1 (it requires virtual pipeline stages), and "
          "1F1B's only without pipelining (S = 1); use interleaved with v >= 2",
          S);
  const int extra = p.combined_1f1b ? 1 : 0;
  require_size(p, S, std::int64_t{2} * S * M);
  TableBuilder table(S, S, M, looping_placement(S, S), std::int64_t{2} * S * M);
  for (int d = 0; d < S; ++d) {
    const int warmup = std::min(S - d - 1 + extra, M);
    for (int m = 0; m < warmup; ++m)
      table.push(PassKind::F, m, d);
    for (int i = 0; i < M - warmup; ++i) {
      table.push(PassKind::F, i + warmup, d);
      table.push(PassKind::B, i, d);
    }
    for (int m = M - warmup; m < M; ++m)
      table.push(PassKind::B, m, d);
    table.end_row();
  }
  return std::move(table).finish();
}

extern const ScheduleInfo kOneFOneB{
    .name = "1f1b",
    .title = "1F1B (PipeDream-Flush / DAPPLE): one forward, one backward in the steady phase",
    .source = "Narayanan et al., ICML 2021; Fan et al., PPoPP 2021",
    .constraints = "none (M < S degenerates to fill-drain)",
    .takes_combined_1f1b = true,
    .generate = one_f_one_b,
};

}  // namespace pipetab::schedules
