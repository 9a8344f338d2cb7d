// Private to table/: runs every device's ops in table order, each as soon as its dependencies
// (docs/design.md §3) have finished. One traversal serves the deadlock check (validate), the unit
// slot grid and the idealized timing. O(ops + microbatches·stages): each device is woken only
// by the completion of the pass it waits for.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "pipetab/table/schedule_table.hpp"

namespace pipetab::detail {

/// A dependency slot: the forward of (microbatch, stage) or its input-gradient backward (the B
/// or I pass). Encoded as key * 2 + (0 forward, 1 backward) with key = stage * microbatches +
/// microbatch: stage-major, because a device mostly runs consecutive microbatches of a stage,
/// so its lookups stream through memory.
using Slot = std::int64_t;
inline constexpr Slot kNoSlot = -1;

inline std::int64_t pass_key(const ScheduleTable& t, std::int32_t microbatch, int stage) {
  return static_cast<std::int64_t>(stage) * t.microbatches + microbatch;
}
inline Slot forward_slot(const ScheduleTable& t, std::int32_t microbatch, int stage) {
  return pass_key(t, microbatch, stage) * 2;
}
inline Slot backward_slot(const ScheduleTable& t, std::int32_t microbatch, int stage) {
  return forward_slot(t, microbatch, stage) + 1;
}

/// Calls fn(slot) for each pass `pass` depends on.
template <class Fn>
inline void for_each_dependency(const ScheduleTable& t, const Pass& pass, Fn&& fn) {
  const int s = pass.stage;
  switch (pass.kind) {
    case PassKind::F:
      if (s > 0) fn(forward_slot(t, pass.microbatch, s - 1));
      break;
    case PassKind::B:
    case PassKind::I:
      fn(forward_slot(t, pass.microbatch, s));
      if (s + 1 < t.stages) fn(backward_slot(t, pass.microbatch, s + 1));
      break;
    case PassKind::W:
      fn(backward_slot(t, pass.microbatch, s));
      break;
    case PassKind::None:
      break;
  }
}

/// The slot a pass completes (W completes none: nothing depends on it).
inline Slot produced_slot(const ScheduleTable& t, const Pass& pass) {
  if (pass.kind == PassKind::F) return forward_slot(t, pass.microbatch, pass.stage);
  if (is_input_backward(pass.kind)) return backward_slot(t, pass.microbatch, pass.stage);
  return kNoSlot;
}

/// Where a traversal ended: `complete` is false on deadlock, and then `next[d]` is the first
/// op device d could not run and `blocked_on[d]` the slot it waits for.
struct Execution {
  bool complete = true;
  std::vector<std::int64_t> next;
  std::vector<Slot> blocked_on;
};

/// Runs the table. `duration(op_index)` gives each op's duration; `on_run(op_index, start, end)`
/// sees every op once, in an order that respects all dependencies. Requires a structurally
/// valid table (every referenced pass exists once, on its placed device).
template <class Duration, class OnRun>
Execution execute(const ScheduleTable& t, Duration&& duration, OnRun&& on_run) {
  const auto devices = static_cast<std::size_t>(t.devices);
  const auto slots =
      static_cast<std::size_t>(t.microbatches) * static_cast<std::size_t>(t.stages) * 2;
  Execution ex;
  ex.next.assign(t.row_begin.begin(), t.row_begin.end() - 1);
  ex.blocked_on.assign(devices, kNoSlot);
  std::vector<double> done_at(slots, -1.0);  // end time of each slot's pass, -1 until it ran
  std::vector<double> free_at(devices, 0.0);
  std::vector<std::int32_t> ready;
  ready.reserve(devices);
  for (std::size_t d = devices; d-- > 0;)
    ready.push_back(static_cast<std::int32_t>(d));

  auto wake = [&](Slot slot, std::int32_t device) {
    if (ex.blocked_on[static_cast<std::size_t>(device)] == slot) {
      ex.blocked_on[static_cast<std::size_t>(device)] = kNoSlot;
      ready.push_back(device);
    }
  };

  while (!ready.empty()) {
    const auto d = static_cast<std::size_t>(ready.back());
    ready.pop_back();
    const auto row_end = t.row_begin[d + 1];
    auto& i = ex.next[d];
    for (; i < row_end; ++i) {
      const Op& op = t.ops[static_cast<std::size_t>(i)];
      double ready_at = free_at[d];
      Slot missing = kNoSlot;
      for (const Pass& pass : op.passes()) {
        for_each_dependency(t, pass, [&](Slot slot) {
          const double at = done_at[static_cast<std::size_t>(slot)];
          if (at < 0.0) {
            if (missing == kNoSlot) missing = slot;
          } else {
            ready_at = std::max(ready_at, at);
          }
        });
      }
      if (missing != kNoSlot) {
        ex.blocked_on[d] = missing;
        break;
      }
      const double finish = ready_at + duration(static_cast<std::size_t>(i));
      on_run(static_cast<std::size_t>(i), ready_at, finish);
      free_at[d] = finish;
      for (const Pass& pass : op.passes()) {
        const Slot slot = produced_slot(t, pass);
        if (slot == kNoSlot) continue;
        done_at[static_cast<std::size_t>(slot)] = finish;
        // The consumers on other devices: the next stage's forward, the previous stage's
        // backward. Consumers on this device come later in its own order.
        const int pipeline = t.pipeline_of_microbatch(pass.microbatch);
        if (pass.kind == PassKind::F) {
          if (pass.stage + 1 < t.stages)
            wake(slot, t.placement.device_of(pipeline, pass.stage + 1));
        } else if (pass.stage > 0) {
          wake(slot, t.placement.device_of(pipeline, pass.stage - 1));
        }
      }
    }
  }
  for (std::size_t d = 0; d < devices; ++d) {
    if (ex.next[d] < t.row_begin[d + 1]) ex.complete = false;
  }
  return ex;
}

}  // namespace pipetab::detail
