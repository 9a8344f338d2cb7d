// The building block of a repeated schedule (Qi, Wan, Amar, Lin, "Pipeline Parallelism with
// Controllable Memory", NeurIPS 2024; reference schedules.md §8): the passes of one microbatch on
// every device at fixed slot offsets. The schedule repeats the block every `period` slots and is
// then squeezed; the lifespan of each stage (F start to W end) bounds its activation memory.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "pipetab/table/op.hpp"

namespace pipetab {

/// One pass of the block: `kind` of global stage `stage`, starting `offset` slots after the
/// block starts. A slot is one chunk pass under unit costs (F = I = W per chunk).
struct BlockPass {
  PassKind kind = PassKind::None;
  std::int32_t stage = 0;
  std::int32_t offset = 0;
  friend bool operator==(const BlockPass&, const BlockPass&) = default;
};

/// The building block of one schedule at one (S, M). Devices hold their passes in offset order.
struct BuildingBlock {
  std::int32_t devices = 0;
  std::int32_t stages = 0;
  /// Slots between the blocks of consecutive microbatches (6 on a V-shape: 2 chunks × F, I, W).
  std::int32_t period = 0;
  std::vector<std::int64_t> row_begin{0};  ///< devices + 1 entries into `passes`
  std::vector<BlockPass> passes;           ///< device-major, each device in offset order
  /// Per stage: slots from the start of its F to the end of its W, when its activation is freed.
  std::vector<std::int32_t> lifespan;
  std::vector<double> share;  ///< per stage: its size in device shares (its activation, M_a)
  /// Per device: Σ over its stages of ⌈lifespan / period⌉ · share (M_a), the paper's bound on
  /// the activations a device holds once the block repeats (at most that many microbatches of a
  /// stage are alive at once).
  std::vector<double> implied_peak;
  /// Per device: the exact peak (M_a) of the block repeated forever, the maximum over one
  /// period of Σ_stages (microbatches alive) · share. At most `implied_peak`; smaller when the
  /// stages' rounding slack does not line up in time.
  std::vector<double> steady_peak;

  std::span<const BlockPass> device_passes(int device) const noexcept {
    const auto b = row_begin[static_cast<std::size_t>(device)];
    const auto e = row_begin[static_cast<std::size_t>(device) + 1];
    return {passes.data() + b, static_cast<std::size_t>(e - b)};
  }
  friend bool operator==(const BuildingBlock&, const BuildingBlock&) = default;
};

}  // namespace pipetab
