// A simulation run (docs/design.md §6): a table lowered with the workload and layout onto a
// modelled cluster, run by the engine, and summarized into the metrics every report and study
// reads. The orchestration lives here, below report/ (which presents) and study/ (which runs
// many).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "pipetab/model/flops.hpp"
#include "pipetab/model/outside_allocator.hpp"
#include "pipetab/model/workload.hpp"
#include "pipetab/schedules/registry.hpp"
#include "pipetab/sim/engine.hpp"
#include "pipetab/sim/error_bar.hpp"
#include "pipetab/sim/graph.hpp"
#include "pipetab/system/system.hpp"
#include "pipetab/table/schedule_table.hpp"

namespace pipetab {

/// What to simulate a table on, and how: the four values of a run (the model, the job, the
/// layout, the system), each whole, and how the simulation runs them. Read once where a command,
/// a study row, a runs file, plan or the Python API takes its options (sim/options.hpp), and
/// checked there (require_runnable, require_supported).
struct SimulationSetup {
  ModelConfig model;
  Job job;
  Layout layout;
  SystemConfig system;
  LoweringOptions lowering;
  SimOptions options;
  FlopCount flop_count = FlopCount::Palm;  ///< how MFU counts the model's FLOPs
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
  std::vector<double> compute_s, tp_comm_s, expert_comm_s, optimizer_s, exposed_comm_s,
      exposed_pipeline_s, exposed_collective_s, idle_s;
  /// Per device, of compute_s: the host's time per pipeline step, and compute slowed by
  /// communication running beside it (DeviceResult).
  std::vector<double> overhead_s, interference_s;
  std::vector<double> peak_memory_bytes;  ///< per device: static + activations
  std::vector<double> peak_memory_time_s;
  std::vector<double> static_bytes;
  std::vector<bool> over_capacity;
  /// What each GPU holds outside the caching allocator (the CUDA context, NCCL's and DeepEP's
  /// buffers), and the memory left to the run: the device's less that.
  OutsideAllocator outside_allocator;
  double memory_capacity_bytes = 0.0;
  bool memory_reserve_given = false;  ///< a flat reserve given (DeviceSpec::memory_reserve)
  bool nccl_nvls = true;              ///< Stack::nccl_nvls
  double device_memory_bytes = 0.0;
  /// Activation offload (Job::offload_activations, 0: none): per device, the most of its GPU's
  /// activations in host memory at once; the most one host holds (the peaks of its GPUs
  /// summed, which need not fall at one time: an upper bound); the host's memory; whether that
  /// is over it (the run does not fit in host memory).
  double offload_activations = 0.0;
  std::int64_t offload_layers = 0;  ///< whole-layer offload (Job::offload_layers; 0: none)
  /// Megatron-Core's fine-grained offload (Job::offload_modules as offload_modules_text; "none").
  std::string offload_modules = "none";
  bool offloads() const {
    return offload_activations > 0.0 || offload_layers > 0 || offload_modules != "none";
  }
  std::vector<double> peak_host_bytes;
  double host_peak_bytes = 0.0, host_memory_bytes = 0.0;
  bool host_over_capacity = false;
  bool contention = true;
  bool blocking_send = false;
  std::string runtime = "async";  ///< Runtime
  /// Why that runtime: "given", or why the default chose it (RuntimeChoice::reason).
  std::string runtime_chosen_by = "given";
  bool overheads = true;                ///< LoweringOptions::overheads (false with explicit costs)
  std::string tp_overlap = "backward";  ///< cost::CostOptions
  bool a2a_overlap = false;             ///< LoweringOptions
  bool dp_overlap = false, distributed_optimizer = false, optimizer = true;
  std::int32_t data_parallel = 1;
  std::int64_t tensor_parallel = 1;
  std::int64_t context_parallel = 1;
  std::string cp_method = "ring";  ///< CpMethod
  std::int64_t expert_parallel = 1, expert_tensor_parallel = 1;
  /// FSDP (LoweringOptions::fsdp): on, its shard group's ranks, whether units reshard after
  /// forward (the default resolved), when gradients are reduce-scattered.
  bool fsdp = false;
  std::int64_t fsdp_shard = 0;
  bool reshard_after_forward = false;
  std::string grad_sync = "step";
  std::string fsdp_impl = "fsdp2";  ///< FsdpImpl: fsdp2 or megatron
  std::int64_t gpus = 0;            ///< pipeline devices × tensor × context × data parallel
  /// For transformer models (unset otherwise): sequences and tokens per iteration (all data-
  /// parallel replicas), their rate, and model and hardware FLOP/s utilization (Korthikanti et
  /// al. §6: model FLOPs by `flop_count`, without recomputation; hardware FLOPs as executed,
  /// recomputation included; over runtime × GPUs × the device's peak in the job's compute
  /// precision, BF16 for FP8 training as torchtitan and NeMo report it).
  std::optional<double> sequences, tokens_per_s, model_flops, hardware_flops, mfu, hfu;
  std::string flop_count = "palm";  ///< FlopCount
  /// The software stack as run (model/stack.hpp's describe_stack); its name ("" none named).
  std::string stack, stack_description;
  /// The runtime's 90 % interval from published runs like this one (sim/error_bar.hpp), unset
  /// with explicit costs or outside every validated regime; the note says why, or what the
  /// interval does not cover.
  std::optional<RuntimeInterval> runtime_interval;
  std::string interval_note;
  bool explicit_costs = false;  ///< op times from --costs (seconds) instead of the model
  std::int64_t nodes = 0, transfers = 0, events = 0;
  double transfer_bytes = 0.0;  ///< all bytes moved

  /// Where the time went, averaged over the devices, as shares of the runtime: compute (the
  /// table's ops less their exposed TP communication and overheads), TP communication, the host's
  /// time per pipeline step, compute slowed by communication beside it, the bubble (idle),
  /// exposed pipeline transfers, exposed gradient reductions, the optimizer step; they add to 1.
  struct Breakdown {
    double compute = 0.0, tp_comm = 0.0, expert_comm = 0.0, host_overhead = 0.0,
           comm_interference = 0.0, bubble = 0.0, exposed_pipeline = 0.0, reductions = 0.0,
           optimizer = 0.0;
  };
  Breakdown breakdown() const;

  double peak_memory_max() const;
  /// Per device: the peak of activation memory alone (peak memory less the static bytes, which
  /// do not change during a run).
  std::vector<double> peak_activation_bytes() const;
  double peak_activation_max_bytes() const;
  /// A device over its usable memory, or a host over its memory (activation offload).
  bool any_over_capacity() const;
};

/// A finished simulation: the graph it ran, the raw result and the summary.
struct Simulation {
  Network network;
  ExecGraph graph;
  SimResult result;
  SimulationMetrics metrics;
};

/// The schedule's parameters as the job runs it: Megatron-Core's combined 1F1B order
/// (ScheduleParams::combined_1f1b) where the job overlaps the experts' all-to-alls
/// (Job::a2a_overlap) and the schedule has that order. Every place that generates a table for a
/// job goes through here, so the table and the lowering's combined steps agree.
ScheduleParams job_schedule_params(ScheduleParams params, const ScheduleInfo& info, const Job& job);

/// Lowers and runs a valid table generated by `schedule` ("" for a file), under the setup's
/// runtime or, when that is Auto, the table's own (default_runtime). Throws ParamError when the
/// workload cannot be cut into the table's stages or the system cannot take the options.
Simulation simulate_table(const ScheduleTable& table, const SimulationSetup& setup,
                          std::string_view schedule = {});

/// What each GPU of the setup's run holds outside PyTorch's caching allocator, its NCCL buffers
/// sized with the run's NCCL_BUFFSIZE (model/outside_allocator.hpp), and the memory left to the
/// run: the one capacity simulate, compare, plan and tune judge a fit against.
OutsideAllocator outside_allocator(const SimulationSetup& setup);
double usable_memory_bytes(const SimulationSetup& setup);

/// The table level's view of offload inside the passes (Job::offload_layers, offload_modules):
/// the share of its activations a forward keeps once its copies are done, over the table's
/// stages, 1 − Σ offloaded / Σ held per microbatch (MemoryOptions::kept); 1 without such
/// offload or without a transformer. Throws ParamError as table_work does.
double in_pass_kept_share(const ScheduleTable& table, const SimulationSetup& setup);

}  // namespace pipetab
