// One schedule evaluated at every level (docs/design.md §2): formula, table and, when asked for,
// simulation.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "pipetab/formulas/formulas.hpp"
#include "pipetab/report/simulation.hpp"
#include "pipetab/schedules/params.hpp"
#include "pipetab/table/costs.hpp"
#include "pipetab/table/memory.hpp"
#include "pipetab/table/schedule_table.hpp"

namespace pipetab {

/// The parameters reported with an evaluation (docs/design.md §7.1 "params").
struct ScheduleShape {
  std::int32_t devices = 0;
  std::int32_t stages = 0;
  std::int32_t microbatches = 0;
  std::optional<std::int32_t> chunks;  ///< stages per device per pipeline; unset if S ∤ stages
  std::int32_t waves = 1;
  std::int32_t pipelines = 1;
  std::string variant;  ///< empty when the schedule has none
  std::string split;    ///< "E:L" stage-size split (chimera-asym); empty when none
};

/// Results of the table level (idealized timing, zero communication).
struct TableMetrics {
  double makespan = 0.0;
  double bubble_ratio = 0.0;                 ///< global, Def-B (timing.hpp)
  double span_bubble_ratio = 0.0;            ///< per-device span, Def-A (timing.hpp)
  std::vector<double> busy;                  ///< per device: time computing
  std::vector<double> idle;                  ///< per device: makespan - busy
  std::vector<double> peak_activation;       ///< per device, M_a
  std::vector<double> peak_activation_time;  ///< per device: first time at the peak
  /// Per device, activation memory over time (M_a); filled only when asked for (it holds one
  /// sample per op).
  std::vector<std::vector<MemorySample>> activation_curves;
  std::int64_t ops = 0;
  double peak_activation_max() const;
};

/// A schedule evaluated at the formula, table and simulation levels.
struct Evaluation {
  std::string schedule;  ///< registry name, or the file name of a user table
  ScheduleShape shape;
  Costs costs;
  MemoryOptions memory;
  std::optional<Formula> formula;  ///< unset for user tables (no schedule family)
  TableMetrics table;
  std::optional<SimulationMetrics> simulation;  ///< unset when not simulated
  /// Why the simulation level could not run on this table (e.g. more stages than the model
  /// has layers); empty otherwise. The other levels are still reported.
  std::string simulation_error;
};

/// What to compute beyond the defaults.
struct EvaluationOptions {
  MemoryOptions memory;
  bool activation_curves = false;               ///< keep every device's activation memory over time
  const SimulationSetup* simulation = nullptr;  ///< run the simulation level on this setup
};

/// Evaluates a valid table. `params` names the schedule family (for the formula level); pass
/// nullptr for a user table, whose name is then `name`. A ParamError of the simulation level
/// is kept in `simulation_error` rather than thrown.
Evaluation evaluate(const ScheduleTable& table, const ResolvedParams* params,
                    const std::string& name, const Costs& costs,
                    const EvaluationOptions& options = {});

/// The shape of a table; `params` (for a generated one) adds its waves and variant.
ScheduleShape shape_of(const ScheduleTable& table, const ResolvedParams* params);

}  // namespace pipetab
