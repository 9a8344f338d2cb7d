// Interleaved zero bubble, PyTorch's ZB1P (torch/distributed/pipelining/schedules.py,
// ScheduleInterleavedZeroBubble at commit 00722e64; pytorch-interop.md §2): the interleaved order
// of ScheduleInterleaved1F1B (interleaved.cpp) on the looping placement, with
//  - PyTorch's rounds: r = max(1, M div S) rounds of g = M / r microbatches (M a multiple of r);
//  - warm-up w = min(vM, (S-d-1) + (v-1)g) forwards: one per hop instead of Megatron's two;
//  - the backward split: I in the place of B; from device d's (d+1)-th I on, each I is followed
//    by the W of the oldest I without one (W delayed by d, as ZB-H1 does), the remaining W last.
// PyTorch then pads the rows with idle slots (_add_bubbles_to_actions), which changes no order.
// With one chunk the order is ZB-H1's.
#include "common.hpp"

#include "pipetab/schedules/registry.hpp"

namespace pipetab::schedules {
namespace {

ScheduleTable generate_interleaved_zb(const ResolvedParams& p) {
  const std::int64_t S = p.devices, M = p.microbatches;
  const std::int64_t rounds = std::max<std::int64_t>(1, M / S);
  require(M % rounds == 0, p,
          "M = {} must be a multiple of its number of rounds max(1, M div S) = {} (PyTorch's "
          "ScheduleInterleavedZeroBubble rule)",
          M, rounds);
  return interleaved_table(p, {.group = M / rounds, .warmup_factor = 1, .split_backward = true});
}

}  // namespace

constexpr std::string_view kInterleavedZbAliases[] = {"InterleavedZeroBubble"};  // PyTorch's name

extern const ScheduleInfo kInterleavedZb{
    .name = "interleaved-zb",
    .aliases = kInterleavedZbAliases,
    .title = "Interleaved zero bubble (ZB1P): interleaved 1F1B with I/W split, W fills bubbles",
    .source = "Qi et al., ICLR 2024 (ZB1P); order of PyTorch ScheduleInterleavedZeroBubble",
    .constraints = "M a multiple of its rounds max(1, M div S) (PyTorch), groups of M/rounds",
    .default_chunks = 2,
    .generate = generate_interleaved_zb,
};

}  // namespace pipetab::schedules
