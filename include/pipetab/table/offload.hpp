// Activation offload on a table (PipeOffload, Wan et al. 2025, arXiv 2503.01328 §3-4): which
// forwards' activations leave the device for host memory, how much of them, and when they come
// back. The table's activation peaks (memory.hpp) and the simulation's copies (sim/) both read it.
#pragma once

#include <cstdint>
#include <vector>

#include "pipetab/table/schedule_table.hpp"

namespace pipetab {

/// Per table op of a forward whose activations are offloaded.
struct OffloadPlan {
  /// The share of the op's forward's activations copied out after it ends (0: none).
  std::vector<double> out;
  /// The op whose start brings them back: the one before their backward (B, or I of a split
  /// backward), as runtimes prefetch a reload one step ahead; -1 where none go out.
  std::vector<std::int64_t> back_at;
  bool empty() const noexcept { return out.empty(); }
};

/// The plan for offloading `ratio` (0..1) of each device's activations. Per device, its stages
/// in the order of their activations' lifespan (the mean number of ops from a forward to its
/// backward), longest first, until `ratio` of the device's stages are covered: whole stages,
/// then a share of the next (PipeOffload's selective offload: the short-lived stages stay; with
/// one stage per device, `ratio` of its activations). A forward whose backward runs in the
/// device's next op keeps its activations: no op runs while they would be away. Empty when
/// `ratio` is 0. Throws ParamError outside [0, 1].
OffloadPlan offload_plan(const ScheduleTable& table, double ratio);

}  // namespace pipetab
