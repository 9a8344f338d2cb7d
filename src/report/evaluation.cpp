#include "pipetab/report/evaluation.hpp"

#include <algorithm>

#include <fmt/format.h>

#include "pipetab/error.hpp"
#include "pipetab/schedules/registry.hpp"
#include "pipetab/table/timing.hpp"

namespace pipetab {

double TableMetrics::peak_activation_max() const {
  return peak_activation.empty()
             ? 0.0
             : *std::max_element(peak_activation.begin(), peak_activation.end());
}

ScheduleShape shape_of(const ScheduleTable& table, const ResolvedParams* params) {
  ScheduleShape shape;
  shape.devices = table.devices;
  shape.stages = table.stages;
  shape.microbatches = table.microbatches;
  shape.pipelines = table.pipelines();
  // Stages per device in each pipeline: v for interleaved, 2W for Hanayo, 1 for one stage per
  // device; the same whether the table was generated or read from a file.
  if (table.stages % table.devices == 0) shape.chunks = table.stages / table.devices;
  if (params) {
    shape.waves = params->waves;
    shape.variant = params->variant;
    if (!find_schedule(params->schedule).default_split.empty())
      shape.split = fmt::format("{}:{}", params->split_early, params->split_late);
  }
  return shape;
}

Evaluation evaluate(const ScheduleTable& table, const ResolvedParams* params,
                    const std::string& name, const Costs& costs, const EvaluationOptions& options) {
  MemoryOptions memory = options.memory;
  // The run's activation offload reaches the table level too (the copies taken as on time).
  // So does offload inside the passes, as the share of each forward the devices keep.
  if (options.simulation) {
    memory.offload = options.simulation->job.offload_activations;
    try {
      memory.kept = in_pass_kept_share(table, *options.simulation);
    } catch (const ParamError&) {
      // The simulation says why it cannot run (simulation_error, below).
    }
  }
  Evaluation e;
  e.schedule = params ? params->schedule : name;
  e.shape = shape_of(table, params);
  e.costs = costs;
  e.memory = memory;
  if (params) e.formula = formula(*params, costs);

  const Timing timing = idealized_timing(table, costs);
  e.table.makespan = timing.makespan;
  e.table.bubble_ratio = bubble_ratio(timing);
  e.table.span_bubble_ratio = span_bubble_ratio(timing);
  e.table.busy = timing.busy;
  for (double busy : timing.busy)
    e.table.idle.push_back(timing.makespan - busy);
  e.table.peak_activation = activation_peaks(table, memory);
  e.table.peak_activation_time = activation_peak_times(table, timing, memory);
  e.table.ops = static_cast<std::int64_t>(table.ops.size());
  if (options.simulation) {
    try {
      e.simulation =
          simulate_table(table, *options.simulation,
                         params ? std::string_view(params->schedule) : std::string_view())
              .metrics;
    } catch (const ParamError& error) {
      e.simulation_error = error.what();
    }
  }
  if (options.activation_curves) {
    for (std::int32_t d = 0; d < table.devices; ++d) {
      e.table.activation_curves.push_back(activation_curve(table, timing, d, memory));
    }
  }
  return e;
}

}  // namespace pipetab
