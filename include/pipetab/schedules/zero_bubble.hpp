// The zero-bubble heuristic scheduler (Qi, Wan, Huang, Lin — "Zero Bubble Pipeline
// Parallelism", ICLR 2024, §3 automatic scheduling; reference schedules.md §7 "ZB-1p/2p").
// With the backward split into I (input gradient, on the critical path) and W (weight
// gradient, off it), W passes can fill the waits of a 1F1B-like order, and a per-device memory
// limit decides how many forwards run ahead. `zb-h2` is this scheduler at a limit of 2S−1
// microbatches; `pipetab tune` searches it with the real costs and communication.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "pipetab/table/schedule_table.hpp"

namespace pipetab {

/// What the heuristic schedules: one stage per device, S devices, M microbatches, each pass
/// with its own time per stage, a fixed delay per cross-device transfer, and a cap on the
/// activations a device may hold.
struct ZeroBubbleProblem {
  std::int32_t devices = 4;
  std::int32_t microbatches = 8;
  std::vector<double> forward;      ///< F time of each stage (size S)
  std::vector<double> input_grad;   ///< I time of each stage
  std::vector<double> weight_grad;  ///< W time of each stage
  double comm = 0.0;  ///< delay between a pass ending and its consumer on the next device
  /// Activations a device may hold, in M_a (F adds 1, I frees `input_grad_frees`, W the rest).
  /// At least 1.
  double memory_limit = 1.0;
  double input_grad_frees = 0.0;  ///< in [0, 1], as MemoryOptions

  /// S devices, M microbatches, equal stages with these per-pass times.
  static ZeroBubbleProblem uniform(std::int32_t devices, std::int32_t microbatches, double forward,
                                   double input_grad, double weight_grad, double memory_limit);
};

/// The heuristic's choices. Each is a yes/no decision the ZB paper's scheduler explores
/// (it keeps the best of its combinations); `all()` lists every combination.
struct ZeroBubbleFlags {
  /// Warm-up: start another forward while the first input-gradient has not yet arrived, even
  /// if that forward ends after it arrives (fewer idle slots, a later first I).
  bool warmup_overshoot = true;
  /// While waiting for a forward or input gradient from a neighbour, run one more W even if it
  /// delays the awaited pass (no idle time, a later critical pass).
  bool gap_overshoot = true;
  /// Run each W right after its I when memory is at the limit's last slot, instead of only
  /// when the limit forces it (lower memory, fewer W to fill waits).
  bool eager_weight = false;

  static std::vector<ZeroBubbleFlags> all();
  friend bool operator==(const ZeroBubbleFlags&, const ZeroBubbleFlags&) = default;
};

/// One schedule of the heuristic and the times it predicted for it.
struct ZeroBubbleSchedule {
  ScheduleTable table;
  double makespan = 0.0;  ///< predicted, from global time 0
  double max_span = 0.0;  ///< predicted longest first-start-to-last-end span of a device
  /// The V-shape scheduler's objective: the largest idle time of a device after its first
  /// forward (0 for the others).
  double max_bubble = 0.0;
};

/// Throws ParamError for an invalid problem (sizes, a limit below 1, negative times).
void validate(const ZeroBubbleProblem& problem);

/// Runs the heuristic once. O(S·M). Throws ParamError for an invalid problem (sizes, a limit
/// below 1, negative times).
ZeroBubbleSchedule zero_bubble_schedule(const ZeroBubbleProblem& problem,
                                        const ZeroBubbleFlags& flags);

/// Every flag combination; the schedule with the shortest longest span (the ZB papers'
/// objective, Def-A), ties broken by makespan, then by the order of ZeroBubbleFlags::all().
ZeroBubbleSchedule best_zero_bubble_schedule(const ZeroBubbleProblem& problem);

/// The choices of the zero-bubble authors' own greedy scheduler (`manual_order` of their
/// scheduler/zb.py; zb_authors.cpp), which they try in all eight combinations.
struct ZeroBubbleAuthorsFlags {
  /// Warm-up: one more forward may end after the first input gradient arrives.
  bool allow_bubble_before_first_i = true;
  /// A stage two forwards ahead of its successor holds back its forward when the successor's
  /// next forward and input gradient would come sooner.
  bool prioritize_i = true;
  /// A W that overruns a short wait (shorter than the largest bubble so far) is placed anyway.
  bool no_bubble_greedy = true;

  /// The authors' order: allow_bubble_before_first_i, then prioritize_i, then no_bubble_greedy,
  /// each true before false.
  static std::vector<ZeroBubbleAuthorsFlags> all();
  friend bool operator==(const ZeroBubbleAuthorsFlags&, const ZeroBubbleAuthorsFlags&) = default;
};

/// Runs the authors' scheduler once; empty when a pass cannot be placed within the memory limit
/// (their "Cannot fit memory"). O(S·M). Throws ParamError for an invalid problem.
std::optional<ZeroBubbleSchedule> zero_bubble_authors_schedule(const ZeroBubbleProblem& problem,
                                                               const ZeroBubbleAuthorsFlags& flags);

/// The authors' choice among the eight: the shortest longest span, the first in all()'s order on
/// a tie; empty when none fits the memory limit.
std::optional<ZeroBubbleSchedule> best_zero_bubble_authors_schedule(
    const ZeroBubbleProblem& problem);

/// The choices of the zero-bubble authors' V-shape scheduler (`try_v_schedule` of their
/// scheduler/zbv.py; zb_authors_v.cpp): whether a W that overruns a long wait is placed before a
/// forward (fill_f) and before a first-chunk input gradient (fill_b).
struct ZeroBubbleVFlags {
  bool fill_f = true;
  bool fill_b = true;
  /// The authors' order: fill_b true then false, within each fill_f true then false.
  static std::vector<ZeroBubbleVFlags> all();
  friend bool operator==(const ZeroBubbleVFlags&, const ZeroBubbleVFlags&) = default;
};

/// Runs the authors' V-shape scheduler once for S devices holding stages d and 2S−1−d: the
/// problem's pass times are those of one stage (half a device share; the largest over the
/// entries is used), its memory limit in M_a of a device share (a stage's forward holds half).
/// Empty when a pass cannot be placed (the memory limit). The table has 2S stages, ZB-V's
/// placement. Throws ParamError for an invalid problem.
std::optional<ZeroBubbleSchedule> zero_bubble_v_schedule(const ZeroBubbleProblem& problem,
                                                         const ZeroBubbleVFlags& flags);

/// The authors' choice among the four: the smallest largest bubble, the first in all()'s order
/// on a tie; empty when none can be placed.
std::optional<ZeroBubbleSchedule> best_zero_bubble_v_schedule(const ZeroBubbleProblem& problem);

}  // namespace pipetab
