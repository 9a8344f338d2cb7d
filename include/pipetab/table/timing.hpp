// Idealized timing of a table (the "table level" of docs/design.md §2): zero communication, each
// device runs its ops in order, each op as soon as its dependencies have finished.
#pragma once

#include <cstdint>
#include <vector>

#include "pipetab/table/costs.hpp"
#include "pipetab/table/schedule_table.hpp"

namespace pipetab {

/// Start and end time of every op, and per-device aggregates.
struct Timing {
  std::vector<double> start;        ///< per op, parallel to ScheduleTable::ops
  std::vector<double> end;          ///< per op
  std::vector<double> busy;         ///< per device: sum of its op durations
  std::vector<double> first_start;  ///< per device: start of its first op (0 if none)
  std::vector<double> last_end;     ///< per device: end of its last op (0 if none)
  double makespan = 0.0;            ///< from global time 0 to the last op's end
};

/// Duration of each op: its kind's cost times its stage's share (ScheduleTable::stage_shares);
/// an overlapped pair costs Costs::pair() times the mean share of its halves.
std::vector<double> op_durations(const ScheduleTable& table, const Costs& costs);

/// Idealized timing. Precondition: validate(table).ok().
Timing idealized_timing(const ScheduleTable& table, const Costs& costs);

/// Global bubble ratio (reference §0 Def-B): 1 − Σ busy / (devices × makespan). This is the
/// table's structural bubble ratio and the idle ratio of docs/design.md §6.
double bubble_ratio(const Timing& timing);

/// Per-device-span bubble ratio (reference §0 Def-A, the zero-bubble papers' "bubble rate"):
/// 1 − mean busy / longest device span (first start to last end). It ignores start-up skew.
double span_bubble_ratio(const Timing& timing);

/// The lock-step grid: the column of every op when every op takes one slot (PyTorch's
/// "timestep-normalised" table). Precondition: validate(table).ok().
std::vector<std::int32_t> unit_slots(const ScheduleTable& table);

}  // namespace pipetab
