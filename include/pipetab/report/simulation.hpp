// The simulation level of an evaluation presented: its metrics as JSON, and what `pipetab
// simulate` prints (docs/design.md §6, §7.1 "simulation"). The run itself: sim/simulation.hpp.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "pipetab/sim/simulation.hpp"
#include "pipetab/table/schedule_table.hpp"

namespace pipetab {

/// The simulation section of an evaluation (docs/design.md §7.1 "simulation"): the metrics,
/// per-device values as arrays indexed by device.
nlohmann::json to_json(const SimulationMetrics& metrics);

/// A runtime's error bar as JSON: {"low", "high", "level", "runs", "regime", "basis",
/// "largest_gpus"}, or null.
nlohmann::json to_json(const std::optional<RuntimeInterval>& interval);

/// "15.9–19.8 s, 90%, from 27 published dense runs on dgx-a100"; empty without an interval.
std::string interval_text(const SimulationMetrics& metrics);

/// "memory: 78.5 GB usable of 80 GB per GPU, 1.48 GB held outside the caching allocator ...":
/// the usable memory and what the rest holds (model/outside_allocator.hpp), or the flat reserve.
std::string describe_memory(const SimulationMetrics& metrics);

/// Everything `pipetab simulate` reports: the simulation section plus the links that carried
/// data (bytes, busy time, peak utilization) and the critical path, step by step.
nlohmann::json simulation_json(const ScheduleTable& table, const Simulation& simulation);

/// The same for reading: the critical path summarized (ops and transfers on it, their time) with
/// its first and last steps.
std::string simulation_text(const ScheduleTable& table, const Simulation& simulation);

}  // namespace pipetab
