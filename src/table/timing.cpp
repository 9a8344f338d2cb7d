#include "pipetab/table/timing.hpp"

#include <algorithm>

#include "execution.hpp"

namespace pipetab {

std::vector<double> op_durations(const ScheduleTable& table, const Costs& costs) {
  const auto shares = table.stage_shares();
  const auto share_of = [&](const Pass& pass) {
    return shares[static_cast<std::size_t>(table.pipeline_of_microbatch(pass.microbatch)) *
                      static_cast<std::size_t>(table.stages) +
                  pass.stage];
  };
  std::vector<double> durations(table.ops.size());
  for (std::size_t i = 0; i < table.ops.size(); ++i) {
    const Op& op = table.ops[i];
    durations[i] = op.is_pair() ? costs.pair() * (share_of(op.first()) + share_of(op.second())) / 2
                                : costs.of(op.first().kind) * share_of(op.first());
  }
  return durations;
}

Timing idealized_timing(const ScheduleTable& table, const Costs& costs) {
  const auto durations = op_durations(table, costs);
  auto ex = detail::execute(table, [&](std::size_t i) { return durations[i]; });
  Timing timing;
  timing.start = std::move(ex.start);
  timing.end = std::move(ex.end);
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
      busy += durations[i];
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
  const auto ex = detail::execute(table, [](std::size_t) { return 1.0; });
  std::vector<std::int32_t> slots(ex.start.size());
  for (std::size_t i = 0; i < slots.size(); ++i)
    slots[i] = static_cast<std::int32_t>(ex.start[i]);
  return slots;
}

}  // namespace pipetab
