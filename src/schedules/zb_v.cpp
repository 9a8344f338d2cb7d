// ZB-V (Qi, Wan, Huang, Lin, "Zero Bubble Pipeline Parallelism", ICLR 2024, arXiv version §6;
// reference schedules.md §7 "ZB-V"), in the handcrafted order of PyTorch's
// ScheduleZBVZeroBubble._calculate_single_rank_operations (torch/distributed/pipelining/
// schedules.py; pytorch-interop.md §2 "ZBVZeroBubble"):
//  - V-shape: 2S stages of L/(2S) layers; device d holds chunk 0 = stage d and chunk 1 = stage
//    2S-1-d, so the forward turns on device S-1 without leaving it and the loss is on device 0;
//  - split backward: I (input gradient, the ZB papers' "B") and W (weight gradient);
//  - the order is generated for M' = max(2S-1, M) microbatches (enough to fill the V) and every
//    op of a microbatch >= M is dropped. Dropping all passes of some microbatches keeps a valid
//    order valid: every dependency links passes of one microbatch.
// Device d (c0 = chunk 0, c1 = chunk 1):
//   2(S-d)-1 × F(c0); d × [F(c1), F(c0)]; (S-d) × [F(c1), I(c1), W(c1)];
//   while forwards remain: [F(c0) while any is left, I(c0), W(c0), F(c1), I(c1), W(c1)];
//   d × [I(c0), I(c1)]; (S-d) × [I(c0), W(c0)]; the remaining W(c1), then the remaining W(c0).
#include <algorithm>
#include <initializer_list>

#include "common.hpp"

#include "pipetab/schedules/registry.hpp"

namespace pipetab::schedules {
namespace {

ScheduleTable generate_zb_v(const ResolvedParams& p) {
  const std::int64_t S = p.devices, M = p.microbatches;
  require_size(p, 2 * S, 6 * S * M);
  const auto stages = static_cast<int>(2 * S);
  const std::int64_t padded = std::max(2 * S - 1, M);
  TableBuilder table(p.devices, stages, p.microbatches, zigzag_placement(p.devices, stages),
                     6 * S * M);
  for (std::int64_t d = 0; d < S; ++d) {
    const auto c0 = static_cast<int>(d), c1 = static_cast<int>(2 * S - 1 - d);
    std::int64_t f0 = 0, f1 = 0, i0 = 0, i1 = 0, w0 = 0, w1 = 0;
    // `count` rounds of the passes `round` (kind, its counter, stage). Ops of the padding
    // microbatches (>= M) only advance their counters; once a whole round is padding, the rest
    // is skipped arithmetically, so that M = 1 with a large S does not cost O(S^2) steps.
    struct Step {
      PassKind kind;
      std::int64_t* counter;
      int stage;
    };
    const auto rounds = [&](std::int64_t count, std::initializer_list<Step> round) {
      for (std::int64_t k = 0; k < count; ++k) {
        bool live = false;
        for (const Step& step : round)
          live = live || *step.counter < M;
        if (!live) {
          for (const Step& step : round)
            *step.counter += count - k;
          return;
        }
        for (const Step& step : round) {
          if (*step.counter < M)
            table.push(step.kind, static_cast<std::int32_t>(*step.counter), step.stage);
          ++*step.counter;
        }
      }
    };
    rounds(2 * (S - d) - 1, {{PassKind::F, &f0, c0}});
    rounds(d, {{PassKind::F, &f1, c1}, {PassKind::F, &f0, c0}});
    rounds(S - d, {{PassKind::F, &f1, c1}, {PassKind::I, &i1, c1}, {PassKind::W, &w1, c1}});
    // Steady phase. f1 starts at or below f0 and gains at most one per round on it, so the loop
    // ends with f0 = f1 = M'; i and w advance with f1.
    while (f1 < f0 || f0 < padded) {
      if (f0 >= M && f1 >= M && i0 >= M && i1 >= M) {
        const std::int64_t rest = padded - f1;
        i0 += rest, w0 += rest, i1 += rest, w1 += rest;
        f0 = f1 = padded;
        break;
      }
      if (f0 < padded) rounds(1, {{PassKind::F, &f0, c0}});
      rounds(1, {{PassKind::I, &i0, c0},
                 {PassKind::W, &w0, c0},
                 {PassKind::F, &f1, c1},
                 {PassKind::I, &i1, c1},
                 {PassKind::W, &w1, c1}});
    }
    rounds(d, {{PassKind::I, &i0, c0}, {PassKind::I, &i1, c1}});
    rounds(S - d, {{PassKind::I, &i0, c0}, {PassKind::W, &w0, c0}});
    rounds(i1 - w1, {{PassKind::W, &w1, c1}});
    rounds(i0 - w0, {{PassKind::W, &w0, c0}});
    table.end_row();
  }
  return std::move(table).finish();
}

}  // namespace

constexpr std::string_view kZbVAliases[] = {"ZBVZeroBubble"};  // PyTorch's name

extern const ScheduleInfo kZbV{
    .name = "zb-v",
    .aliases = kZbVAliases,
    .title = "ZB-V: zero-bubble V-shape (2 chunks per device, split backward I/W)",
    .source = "Qi et al., ICLR 2024 (arXiv 2401.10241 §6); order of PyTorch ScheduleZBVZeroBubble",
    .constraints =
        "exactly 2 chunks per device (no -v); any S, M (M < 2S-1 runs the order "
        "padded to 2S-1 microbatches with the padding dropped)",
    .generate = generate_zb_v,
};

}  // namespace pipetab::schedules
