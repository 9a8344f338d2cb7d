// The simulation level of an evaluation: a table run over a modelled cluster, summarized for
// reports (docs/design.md §6, §7.1 "simulation").
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "pipetab/model/workload.hpp"
#include "pipetab/sim/engine.hpp"
#include "pipetab/sim/graph.hpp"
#include "pipetab/system/system.hpp"
#include "pipetab/table/schedule_table.hpp"

namespace pipetab {

/// What to simulate a table on, and how.
struct SimulationSetup {
  ModelConfig model;
  SystemConfig system;
  LoweringOptions lowering;
  SimOptions options;
};

/// The numbers of a simulation that reports carry.
struct SimulationMetrics {
  std::string system;
  std::string model;
  double runtime_s = 0.0;       ///< the iteration
  double pipeline_end_s = 0.0;  ///< the end of the table's last op
  double idle_ratio = 0.0;
  double span_idle_ratio = 0.0;  ///< Def-A with communication (SimResult::span_idle_ratio)
  /// Per device: table ops (of which exposed tensor-parallel communication), optimizer step,
  /// exposed pipeline transfers, exposed collectives, idle; compute + optimizer + exposed
  /// communication + idle = runtime.
  std::vector<double> compute_s, tp_comm_s, optimizer_s, exposed_comm_s, exposed_pipeline_s,
      exposed_collective_s, idle_s;
  std::vector<double> peak_memory_bytes;  ///< per device: static + activations
  std::vector<double> peak_memory_time_s;
  std::vector<double> static_bytes;
  std::vector<bool> over_capacity;
  double memory_capacity_bytes = 0.0;
  bool contention = true;
  bool blocking_send = false;
  std::string runtime = "async";        ///< Runtime
  std::string tp_overlap = "backward";  ///< cost::CostOptions
  bool dp_overlap = false, distributed_optimizer = false, optimizer = true;
  std::int32_t data_parallel = 1;
  std::int64_t tensor_parallel = 1;
  std::int64_t gpus = 0;  ///< pipeline devices × tensor × data parallel
  /// For transformer models (unset otherwise): sequences and tokens per iteration (all data-
  /// parallel replicas), their rate, and model and hardware FLOP/s utilization (Korthikanti et
  /// al. §6: model FLOPs without recomputation, hardware FLOPs with it, over runtime × GPUs × the
  /// device's peak in the model's precision).
  std::optional<double> sequences, tokens_per_s, model_flops, hardware_flops, mfu, hfu;
  bool explicit_costs = false;  ///< op times from --costs (seconds) instead of the model
  std::int64_t nodes = 0, transfers = 0, events = 0;
  double transfer_bytes = 0.0;  ///< all bytes moved

  /// Where the time went, averaged over the devices, as shares of the runtime: compute (the
  /// table's ops less their exposed TP communication), TP communication, the bubble (idle),
  /// exposed pipeline transfers, exposed gradient reductions, the optimizer step; they add to 1.
  struct Breakdown {
    double compute = 0.0, tp_comm = 0.0, bubble = 0.0, exposed_pipeline = 0.0, reductions = 0.0,
           optimizer = 0.0;
  };
  Breakdown breakdown() const;

  double peak_memory_max() const;
  /// Per device: the peak of activation memory alone (peak memory less the static bytes, which
  /// do not change during a run).
  std::vector<double> peak_activation_bytes() const;
  double peak_activation_max_bytes() const;
  bool any_over_capacity() const;
};

/// A finished simulation: the graph it ran, the raw result and the summary.
struct Simulation {
  Network network;
  ExecGraph graph;
  SimResult result;
  SimulationMetrics metrics;
};

/// The simulation section of an evaluation (docs/design.md §7.1 "simulation"): the metrics,
/// per-device values as arrays indexed by device.
nlohmann::json to_json(const SimulationMetrics& metrics);

/// Everything `pipetab simulate` reports: the simulation section plus the links that carried
/// data (bytes, busy time, peak utilization) and the critical path, step by step.
nlohmann::json simulation_json(const ScheduleTable& table, const Simulation& simulation);

/// The same for reading: the critical path summarized (ops and transfers on it, their time) with
/// its first and last steps.
std::string simulation_text(const ScheduleTable& table, const Simulation& simulation);

/// Lowers and runs a valid table. Throws ParamError when the workload cannot be cut into the
/// table's stages or the system cannot take the options.
Simulation simulate_table(const ScheduleTable& table, const SimulationSetup& setup);

}  // namespace pipetab
