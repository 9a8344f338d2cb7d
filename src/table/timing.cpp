#include "pipetab/table/timing.hpp"

#include <algorithm>

#include "execution.hpp"

namespace pipetab {
namespace {

// The duration of each op, computed on demand from per-stage shares.
class DurationOf {
 public:
  DurationOf(const ScheduleTable& table, const Costs& costs)
      : table_(table), costs_(costs), shares_(table.stage_shares()) {}

  double operator()(std::size_t i) const {
    const Op& op = table_.ops[i];
    return op.is_pair() ? costs_.pair() * (share(op.first()) + share(op.second())) / 2
                        : costs_.of(op.first().kind) * share(op.first());
  }

 private:
  double share(const Pass& pass) const {
    return shares_[static_cast<std::size_t>(table_.pipeline_of_microbatch(pass.microbatch)) *
                       static_cast<std::size_t>(table_.stages) +
                   pass.stage];
  }

  const ScheduleTable& table_;
  const Costs& costs_;
  std::vector<double> shares_;
};

}  // namespace

std::vector<double> op_durations(const ScheduleTable& table, const Costs& costs) {
  const DurationOf duration(table, costs);
  std::vector<double> durations(table.ops.size());
  for (std::size_t i = 0; i < durations.size(); ++i)
    durations[i] = duration(i);
  return durations;
}

Timing idealized_timing(const ScheduleTable& table, const Costs& costs) {
  const DurationOf duration(table, costs);
  Timing timing;
  timing.start.resize(table.ops.size());
  timing.end.resize(table.ops.size());
  detail::execute(table, duration, [&](std::size_t i, double start, double end) {
    timing.start[i] = start;
    timing.end[i] = end;
  });
  const auto devices = static_cast<std::size_t>(table.devices);
  timing.busy.assign(devices, 0.0);
  timing.first_start.assign(devices, 0.0);
  timing.last_end.assign(devices, 0.0);
  for (std::size_t d = 0; d < devices; ++d) {
    const auto b = static_cast<std::size_t>(table.row_begin[d]);
    const auto e = static_cast<std::size_t>(table.row_begin[d + 1]);
    if (b == e) continue;
    double busy = 0.0;
    for (auto i = b; i < e; ++i)
      busy += duration(i);
    timing.busy[d] = busy;
    timing.first_start[d] = timing.start[b];
    timing.last_end[d] = timing.end[e - 1];
    timing.makespan = std::max(timing.makespan, timing.end[e - 1]);
  }
  return timing;
}

double bubble_ratio(const Timing& timing) {
  if (timing.makespan <= 0.0) return 0.0;
  double busy = 0.0;
  for (double b : timing.busy)
    busy += b;
  return 1.0 - busy / (static_cast<double>(timing.busy.size()) * timing.makespan);
}

double span_bubble_ratio(const Timing& timing) {
  double busy = 0.0;
  double span = 0.0;
  for (std::size_t d = 0; d < timing.busy.size(); ++d) {
    busy += timing.busy[d];
    span = std::max(span, timing.last_end[d] - timing.first_start[d]);
  }
  if (span <= 0.0) return 0.0;
  return 1.0 - busy / static_cast<double>(timing.busy.size()) / span;
}

std::vector<std::int32_t> unit_slots(const ScheduleTable& table) {
  std::vector<std::int32_t> slots(table.ops.size());
  detail::execute(
      table, [](std::size_t) { return 1.0; },
      [&](std::size_t i, double start, double) { slots[i] = static_cast<std::int32_t>(start); });
  return slots;
}

}  // namespace pipetab
