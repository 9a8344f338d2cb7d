// Zero-bubble schedules with one stage per device (Qi, Wan, Huang, Lin — ICLR 2024; reference
// schedules.md §7). The backward is split into I (input gradient) and W (weight gradient).
//  - 1f1b-split: 1F1B with every B replaced by I then W, the baseline the split starts from.
//  - zb-h1: 1F1B's order of F and I; device d delays its W passes by d positions, so it holds
//    d pending W besides 1F1B's S−d in-flight microbatches: at most S on every device, and the
//    W fill 1F1B's cool-down bubble (bubble (S−1)(F+I−W) instead of (S−1)(F+I+W)). Order of
//    the authors' `zb-h1-quick-start` branch ("delay W by rank"), reference §16.
//  - zb-h2: the zero-bubble heuristic at a memory limit of 2S−1 microbatches with equal F, I, W
//    (zb_heuristic.cpp): 2(S−1−d)+1 warm-up forwards on device d fill the bubble before the
//    first I, and W passes fill the waits after it (reference §7 "ZB-H2", §15: the authors'
//    scheduler at this limit gives ZB-H2).
#include "pipetab/schedules/zero_bubble.hpp"

#include "common.hpp"

#include "pipetab/schedules/registry.hpp"

namespace pipetab::schedules {
namespace {

// 1F1B's order of F and I on every device, with device d's W(k) placed after I(k + delay(d)),
// and the W not yet placed at the end.
ScheduleTable split_one_f_one_b(const ResolvedParams& p, bool delay_by_rank) {
  const int S = p.devices, M = p.microbatches;
  require_size(p, S, std::int64_t{3} * S * M);
  TableBuilder table(S, S, M, looping_placement(S, S), std::int64_t{3} * S * M);
  for (int d = 0; d < S; ++d) {
    const int warmup = std::min(S - d - 1, M);
    const int delay = delay_by_rank ? d : 0;
    int next_w = 0;
    const auto backward = [&](int k) {
      table.push(PassKind::I, k, d);
      if (k >= delay) table.push(PassKind::W, next_w++, d);
    };
    for (int m = 0; m < warmup; ++m)
      table.push(PassKind::F, m, d);
    for (int i = 0; i < M - warmup; ++i) {
      table.push(PassKind::F, i + warmup, d);
      backward(i);
    }
    for (int m = M - warmup; m < M; ++m)
      backward(m);
    while (next_w < M)
      table.push(PassKind::W, next_w++, d);
    table.end_row();
  }
  return std::move(table).finish();
}

ScheduleTable generate_one_f_one_b_split(const ResolvedParams& p) {
  return split_one_f_one_b(p, false);
}

ScheduleTable generate_zb_h1(const ResolvedParams& p) {
  return split_one_f_one_b(p, true);
}

ScheduleTable generate_zb_h2(const ResolvedParams& p) {
  require_size(p, p.devices, std::int64_t{3} * p.devices * p.microbatches);
  const auto problem =
      ZeroBubbleProblem::uniform(p.devices, p.microbatches, 1.0, 1.0, 1.0, 2.0 * p.devices - 1.0);
  return best_zero_bubble_schedule(problem).table;
}

}  // namespace

extern const ScheduleInfo kOneFOneBSplit{
    .name = "1f1b-split",
    .title = "1F1B with the backward split into I and W, each W right after its I",
    .source = "Qi et al., Zero Bubble PP (ICLR 2024): the 1F1B baseline with B = I + W",
    .constraints = "none",
    .generate = generate_one_f_one_b_split,
};

extern const ScheduleInfo kZbH1{
    .name = "zb-h1",
    .title = "ZB-H1: 1F1B's memory, device d delays its W passes by d to fill the bubbles",
    .source = "Qi et al., ICLR 2024 §2.1; order of the zb-h1-quick-start branch",
    .constraints = "none (M < S degenerates to fill-drain)",
    .generate = generate_zb_h1,
};

extern const ScheduleInfo kZbH2{
    .name = "zb-h2",
    .title = "ZB-H2: 2S-1 in-flight microbatches, zero per-device-span bubble for equal F, I, W",
    .source = "Qi et al., ICLR 2024 §2.2; built by the zero-bubble heuristic (§3) at limit 2S-1",
    .constraints = "none (zero span bubble needs M >= 2S-1 and F = I = W)",
    .generate = generate_zb_h2,
};

}  // namespace pipetab::schedules
