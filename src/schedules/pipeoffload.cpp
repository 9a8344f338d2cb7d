// PipeOffload's offloading schedule (Wan et al., ICML 2025, arXiv 2503.01328 §2-3.2, Table 1;
// reference offload.md §1.2): GIS-H's building block repeated uniformly, one microbatch every
// period of 3v slots, instead of GIS-H's bi-level repeating (groups of ⌈S/2⌉ interleaved over
// the chunks). The paper runs it as PO-H (⌈v/2⌉ of each device's v stages offloaded) and PO-F
// (all of them); here the schedule is the order, and `--offload-activations 0.5` or `1` the
// offload, so the same order is also timed and sized without it.
//
// Our own implementation of the authors' construction, GroupBuildingBlockScheduler with
// group_size 1 in sail-sg/zero-bubble-pipeline-parallelism, megatron/core/pipeline_parallel/
// zerobubble/scheduler/group_interleaved_1f1b.py (@39f2c18), whose orders tests/test_po.cpp
// compares op for op. Slots are passes at unit costs (F = I = W per chunk); device d holds
// stages d, d+S, ... (looping placement); m = ⌈S/2⌉ is GIS-H's smallest group, the value their
// create_schedule takes when F, I and W cost the same (it grows m only where one pass kind
// summed over the devices outlasts m whole F+I+W rounds, which unit costs never do).
//  1. Block: device d runs chunk c's F at slot 3mc + d + 3⌊c/q⌋ (q = v / gcd(v, m): the
//     extra 3 every q chunks keeps two chunks off one slot modulo the period). Its backward
//     starts 3(S-1-d) + 1 slots after its last chunk's F, chunk v-1 first, each chunk's I
//     3m(+3) slots after the previous one's, its W in the next slot. F falls on slots ≡ d, I on
//     d+1, W on d+2 (mod 3), so the block fills each slot of the period once.
//  2. Repeat: microbatch k's passes 3v·k slots after microbatch 0's.
//  3. Shift: device d starts min(d, e) slots late, e = min(S-1, the slack between device S-1's
//     F of chunk c-1 and device 0's F of chunk c): the slack the wrap-around leaves spreads the
//     first devices' forwards two slots apart, and their backwards in step (I on device d+1
//     two slots before device d's, W between).
// Each device runs its passes in slot order, which the period makes a walk over the block's
// passes once per period.
#include <algorithm>
#include <numeric>
#include <stdexcept>

#include "common.hpp"

#include "pipetab/schedules/registry.hpp"

namespace pipetab::schedules {
namespace {

// A pass of the block on one device: its slot for microbatch 0, and what it runs.
struct BlockSlot {
  std::int64_t slot;
  PassKind kind;
  std::int32_t chunk;
};

ScheduleTable generate_po(const ResolvedParams& p) {
  const std::int64_t S = p.devices, M = p.microbatches, v = p.chunks;
  const std::int64_t stages = v * S;
  require_size(p, stages, 3 * stages * M);
  const std::int64_t m = (S + 1) / 2;
  const std::int64_t q = v / std::gcd(v, m);
  const std::int64_t period = 3 * v;
  const auto forward_slot = [&](std::int64_t chunk, std::int64_t device) {
    return 3 * m * chunk + device + 3 * (chunk / q);
  };
  std::int64_t shift_limit = S - 1;
  for (std::int64_t c = 1; c < v; ++c)
    shift_limit = std::min(shift_limit, forward_slot(c, 0) - 1 - forward_slot(c - 1, S - 1));

  TableBuilder table(p.devices, static_cast<int>(stages), p.microbatches,
                     looping_placement(p.devices, static_cast<int>(stages)), 3 * stages * M);
  std::vector<BlockSlot> block;
  block.reserve(static_cast<std::size_t>(period));
  for (std::int64_t d = 0; d < S; ++d) {
    block.clear();
    const std::int64_t shift = std::min(d, shift_limit);
    const std::int64_t first_backward = forward_slot(v - 1, d) + 3 * (S - 1 - d) + 1;
    for (std::int64_t c = 0; c < v; ++c) {
      block.push_back({shift + forward_slot(c, d), PassKind::F, static_cast<std::int32_t>(c)});
      const std::int64_t input = shift + first_backward + 3 * m * c + 3 * (c / q);
      const auto back = static_cast<std::int32_t>(v - 1 - c);
      block.push_back({input, PassKind::I, back});
      block.push_back({input + 1, PassKind::W, back});
    }
    // Microbatch k's copy of a pass sits at slot + period·k: write slot = period·r + o
    // (0 <= o < period), and the device's passes in slot order are, for r = 0, 1, ..., the
    // block's passes in order of o whose microbatch k = r − ⌊slot/period⌋ exists. Linear in the
    // passes and the block's span, where sorting every pass took 17 times GIS-H's time.
    std::sort(block.begin(), block.end(), [&](const BlockSlot& a, const BlockSlot& b) {
      return a.slot % period < b.slot % period;
    });
    std::int64_t rounds = 0;
    for (std::size_t i = 0; i < block.size(); ++i) {
      if (i > 0 && block[i].slot % period == block[i - 1].slot % period)
        throw std::logic_error("po: two passes share a slot");
      rounds = std::max(rounds, block[i].slot / period);
    }
    for (std::int64_t r = 0; r < rounds + M; ++r) {
      for (const BlockSlot& pass : block) {
        const std::int64_t k = r - pass.slot / period;
        if (k >= 0 && k < M)
          table.push(pass.kind, static_cast<std::int32_t>(k), static_cast<int>(pass.chunk * S + d));
      }
    }
    table.end_row();
  }
  return std::move(table).finish();
}

}  // namespace

extern const ScheduleInfo kPo{
    .name = "po",
    .title =
        "PO (PipeOffload): GIS-H's block repeated uniformly; PO-H, PO-F: --offload-activations",
    .source =
        "Wan et al., ICML 2025 (PipeOffload) §2-3.2, Table 1; sail-sg group_interleaved_1f1b.py",
    .constraints = "none (one microbatch every 3v slots)",
    .default_chunks = 2,
    .generate = generate_po,
    .planned_by_default = false,
};

}  // namespace pipetab::schedules
