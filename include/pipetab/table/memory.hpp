// Activation memory of a table (docs/design.md §4), in units of M_a: one microbatch's activations
// for one device share (L/S layers). A stage of share x holds x M_a per microbatch in flight.
#pragma once

#include <vector>

#include "pipetab/table/schedule_table.hpp"
#include "pipetab/table/timing.hpp"

namespace pipetab {

/// What a split backward frees at the table level. F allocates its stage's activation when it
/// starts; B frees all of it when it ends; I frees `input_grad_frees` of it and W the rest.
/// The default 0 counts in-flight microbatches the way the zero-bubble papers and PyTorch's
/// liveness analysis do (reference schedules.md §15.1).
struct MemoryOptions {
  double input_grad_frees = 0.0;  ///< in [0, 1]
  /// Activation offload (offload.hpp's plan for this ratio): an offloaded forward's share of
  /// its activation leaves when it ends and is back when the op before its backward starts
  /// (copies on time). 0: none.
  double offload = 0.0;
  /// Offload inside the passes (Transformer Engine's whole layers, Megatron-Core's modules): the
  /// share of each forward's activations the device keeps once its copies are done (copies on
  /// time, the windows of copies in flight left out). 1: none.
  double kept = 1.0;
};

/// Peak activation memory of every device, in M_a. It depends only on the order: a device runs
/// its ops one after another, so its allocations and frees happen in table order.
std::vector<double> activation_peaks(const ScheduleTable& table, const MemoryOptions& options = {});

/// A point of a step function: `value` holds from `time` until the next sample's time.
struct MemorySample {
  double time = 0.0;
  double value = 0.0;
  friend bool operator==(const MemorySample&, const MemorySample&) = default;
};

/// Activation memory of `device` over time under `timing` (M_a), starting at (0, 0), one sample
/// per distinct event time.
std::vector<MemorySample> activation_curve(const ScheduleTable& table, const Timing& timing,
                                           int device, const MemoryOptions& options = {});

/// The first time each device reaches its peak activation memory under `timing`.
std::vector<double> activation_peak_times(const ScheduleTable& table, const Timing& timing,
                                          const MemoryOptions& options = {});

}  // namespace pipetab
