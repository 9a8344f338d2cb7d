#include "pipetab/sim/simulation.hpp"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "pipetab/error.hpp"
#include "pipetab/model/flops.hpp"
#include "pipetab/model/offload_groups.hpp"
#include "pipetab/sim/engine.hpp"

namespace pipetab {

SimulationMetrics::Breakdown SimulationMetrics::breakdown() const {
  const auto mean = [](const std::vector<double>& v) {
    double sum = 0.0;
    for (const double x : v)
      sum += x;
    return v.empty() ? 0.0 : sum / static_cast<double>(v.size());
  };
  const double total = runtime_s > 0.0 ? runtime_s : 1.0;
  const double tp = mean(tp_comm_s), experts = mean(expert_comm_s);
  const double host = mean(overhead_s), slowed = mean(interference_s);
  return {(mean(compute_s) - tp - host - slowed) / total,
          (tp - experts) / total,
          experts / total,
          host / total,
          slowed / total,
          mean(idle_s) / total,
          mean(exposed_pipeline_s) / total,
          mean(exposed_collective_s) / total,
          mean(optimizer_s) / total};
}

double SimulationMetrics::peak_memory_max() const {
  return peak_memory_bytes.empty()
             ? 0.0
             : *std::max_element(peak_memory_bytes.begin(), peak_memory_bytes.end());
}

std::vector<double> SimulationMetrics::peak_activation_bytes() const {
  std::vector<double> out(peak_memory_bytes.size());
  for (std::size_t d = 0; d < out.size(); ++d)
    out[d] = peak_memory_bytes[d] - static_bytes[d];
  return out;
}

double SimulationMetrics::peak_activation_max_bytes() const {
  const auto peaks = peak_activation_bytes();
  return peaks.empty() ? 0.0 : *std::max_element(peaks.begin(), peaks.end());
}

bool SimulationMetrics::any_over_capacity() const {
  return host_over_capacity ||
         std::find(over_capacity.begin(), over_capacity.end(), true) != over_capacity.end();
}

namespace {

// Activation offload's host memory: a host of host_size() GPUs holds the offloaded activations
// of its GPUs (a pipeline device stands for gpus_per_device GPUs, each holding what it does).
void host_memory(const Simulation& s, const SimulationSetup& setup, SimulationMetrics& m) {
  m.offload_activations = setup.job.offload_activations;
  m.offload_layers = setup.job.offload_layers;
  m.offload_modules = offload_modules_text(setup.job.offload_modules);
  if (!m.offloads()) return;
  const auto& system = setup.system;
  m.host_memory_bytes = system.host.memory_bytes;
  const std::int64_t g = gpus_per_device(setup.layout);
  const std::int64_t host = std::max<std::int32_t>(1, system.host_size());
  std::vector<double> per_host;
  for (std::size_t d = 0; d < s.result.devices.size(); ++d) {
    const double peak = s.graph.layer_offload_host_bytes.empty()
                            ? s.result.devices[d].peak_host_bytes
                            : s.graph.layer_offload_host_bytes[d];
    m.peak_host_bytes.push_back(peak);
    const auto h = static_cast<std::size_t>(static_cast<std::int64_t>(d) * g / host);
    if (per_host.size() <= h) per_host.resize(h + 1, 0.0);
    per_host[h] += static_cast<double>(std::min(g, host)) * peak;
  }
  m.host_peak_bytes = per_host.empty() ? 0.0 : *std::max_element(per_host.begin(), per_host.end());
  m.host_over_capacity = m.host_peak_bytes > m.host_memory_bytes;
}

}  // namespace

OutsideAllocator outside_allocator(const SimulationSetup& setup) {
  return outside_allocator(setup.system, setup.model, setup.job, setup.layout, setup.lowering.nccl);
}

double usable_memory_bytes(const SimulationSetup& setup) {
  return usable_memory_bytes(setup.system, outside_allocator(setup));
}

double in_pass_kept_share(const ScheduleTable& table, const SimulationSetup& setup) {
  const TransformerConfig* transformer = setup.model.transformer();
  if (!offloads_in_passes(setup.job) || transformer == nullptr) return 1.0;
  const Workload run{*transformer, setup.job, setup.layout};
  double held = 0.0, offloaded = 0.0;
  for (const StageWork& w : table_work(table, setup.model, setup.job, setup.layout)) {
    held += w.activation_bytes;
    offloaded += stage_offloaded_bytes(w, run);
  }
  return held > 0.0 ? std::clamp(1.0 - offloaded / held, 1e-9, 1.0) : 1.0;
}

ScheduleParams job_schedule_params(ScheduleParams params, const ScheduleInfo& info,
                                   const Job& job) {
  params.combined_1f1b = job.a2a_overlap && info.takes_combined_1f1b;
  return params;
}

Simulation simulate_table(const ScheduleTable& table, const SimulationSetup& setup,
                          std::string_view schedule) {
  Simulation s{Network(setup.system, table.devices, gpus_per_device(setup.layout)), {}, {}, {}};
  const auto runtime = resolve_runtime(setup.lowering.runtime, table, schedule);
  LoweringOptions lowering = setup.lowering;
  lowering.runtime = runtime.runtime;
  s.graph = lower(table, setup.model, setup.job, setup.layout, s.network, lowering);
  try {
    s.result = simulate(s.graph, s.network, setup.options);
  } catch (const DeadlockError& e) {
    // In the table's terms: each stuck device's op as the table writes it, counted in its row.
    std::string stuck;
    for (const auto& w : e.stuck) {
      const auto d = static_cast<std::size_t>(w.device);
      const auto row = table.row_begin[d + 1] - table.row_begin[d];
      const bool op = w.node < table.row_begin[d + 1] && w.node >= table.row_begin[d];
      stuck += fmt::format("{}device {} waits before {}", stuck.empty() ? "" : "; ", w.device,
                           op ? fmt::format("{} (its op {} of {})",
                                            to_string(table.ops[static_cast<std::size_t>(w.node)]),
                                            w.node - table.row_begin[d] + 1, row)
                              : std::string("its optimizer step"));
    }
    // Name what made the waits blocking, so the user knows which flag to drop.
    std::string cause;
    if (setup.options.blocking_send)
      cause = "; --blocking-send makes every pipeline send wait for its receive";
    const auto refusal = runtime_refuses(table, schedule, runtime.runtime);
    const auto fallback = default_runtime(table, schedule);
    if (setup.lowering.runtime != Runtime::Auto &&
        (refusal || fallback.runtime != runtime.runtime)) {
      cause += fmt::format("; --runtime {} was given{}{} (--runtime auto picks {}: {})",
                           to_string(runtime.runtime), refusal ? ": " : "", refusal.value_or(""),
                           to_string(fallback.runtime), fallback.reason);
    }
    throw ParamError(fmt::format(
        "the simulation deadlocks under the {} runtime: {} (its waits on transfers make this "
        "order impossible{})",
        to_string(runtime.runtime), stuck, cause));
  }
  if (!std::isfinite(s.result.runtime_s)) {
    throw ParamError(fmt::format(
        "the simulated runtime overflows ({}): the model's work is too large for the system's "
        "speeds",
        s.result.runtime_s));
  }
  auto& m = s.metrics;
  m.system = setup.system.name;
  m.model = setup.model.name;
  m.runtime_s = s.result.runtime_s;
  m.pipeline_end_s = s.result.pipeline_end_s;
  m.idle_ratio = s.result.idle_ratio;
  m.span_idle_ratio = s.result.span_idle_ratio;
  m.outside_allocator = outside_allocator(setup);
  m.memory_capacity_bytes = usable_memory_bytes(setup.system, m.outside_allocator);
  m.memory_reserve_given = setup.system.device.memory_reserve.has_value();
  m.nccl_nvls = setup.job.stack.nccl_nvls;
  for (const auto& d : s.result.devices) {
    m.compute_s.push_back(d.compute_s);
    m.tp_comm_s.push_back(d.tp_comm_s);
    m.expert_comm_s.push_back(d.expert_comm_s);
    m.overhead_s.push_back(d.overhead_s);
    m.interference_s.push_back(d.interference_s);
    m.optimizer_s.push_back(d.optimizer_s);
    m.exposed_comm_s.push_back(d.exposed_comm_s);
    m.exposed_pipeline_s.push_back(d.exposed_pipeline_s);
    m.exposed_collective_s.push_back(d.exposed_collective_s);
    m.idle_s.push_back(d.idle_s);
    m.peak_memory_bytes.push_back(d.peak_memory_bytes);
    m.peak_memory_time_s.push_back(d.peak_memory_time_s);
    m.static_bytes.push_back(d.static_bytes);
    m.over_capacity.push_back(d.peak_memory_bytes > m.memory_capacity_bytes);
  }
  m.device_memory_bytes = setup.system.device.memory_bytes;
  host_memory(s, setup, m);
  m.contention = setup.options.contention;
  m.blocking_send = setup.options.blocking_send;
  m.runtime = to_string(lowering.runtime);
  m.runtime_chosen_by = runtime.reason;
  m.overheads = lowering.overheads && !lowering.costs;
  const Job& job = setup.job;
  const Layout& layout = setup.layout;
  m.tp_overlap = std::string(to_string(job.tp_overlap));
  m.a2a_overlap = job.a2a_overlap;
  m.dp_overlap = job.dp_overlap;
  m.distributed_optimizer = job.distributed_optimizer;
  m.optimizer = lowering.iteration.optimizer;
  m.data_parallel = static_cast<std::int32_t>(layout.dp);
  m.tensor_parallel = layout.tp;
  m.context_parallel = layout.cp;
  m.cp_method = std::string(to_string(layout.cp_method));
  m.expert_parallel = layout.ep;
  m.expert_tensor_parallel = layout.etp;
  m.fsdp = layout.fsdp.enabled;
  m.fsdp_shard = m.fsdp ? fsdp_shard_size(layout) : 0;
  m.reshard_after_forward = m.fsdp && reshard_after_forward(layout.fsdp, table.devices > 1);
  m.grad_sync = std::string(to_string(grad_sync(layout.fsdp, table.devices > 1)));
  m.fsdp_impl = std::string(to_string(layout.fsdp.impl));
  if (const auto* model = setup.model.transformer()) {
    const double microbatches = table.microbatches;
    const double sequences =
        microbatches * static_cast<double>(job.micro_batch) * static_cast<double>(layout.dp);
    const auto flops = iteration_flops({*model, job, layout}, sequences, setup.flop_count);
    const double gpus = static_cast<double>(table.devices) *
                        static_cast<double>(layout.tp * layout.cp) * static_cast<double>(layout.dp);
    // FP8 training's utilisation against the BF16 peak, as torchtitan and NeMo report it.
    const double peak = setup.system.device.peak(compute_precision(job)) * gpus * m.runtime_s;
    m.sequences = sequences;
    m.tokens_per_s = sequences * static_cast<double>(job.seq_len) / m.runtime_s;
    m.flop_count = std::string(to_string(setup.flop_count));
    m.stack = job.stack.name;
    if (!setup.lowering.costs)
      m.stack_description = describe_stack(job.stack, setup.system.device, setup.system.name);
    m.model_flops = flops.model;
    m.hardware_flops = flops.hardware;
    m.mfu = flops.model / peak;
    m.hfu = flops.hardware / peak;
  }
  m.gpus = static_cast<std::int64_t>(table.devices) * m.tensor_parallel * m.context_parallel *
           m.data_parallel;
  m.explicit_costs = setup.lowering.costs.has_value();
  if (setup.model.transformer() != nullptr && !m.explicit_costs) {
    auto bar = runtime_interval(setup, m.runtime_s, m.gpus);
    m.runtime_interval = std::move(bar.interval);
    m.interval_note = std::move(bar.note);
  }
  m.nodes = s.graph.nodes();
  m.transfers = s.graph.transfers();
  m.events = s.result.events;
  for (const double bytes : s.graph.bytes)
    m.transfer_bytes += bytes;
  return s;
}

}  // namespace pipetab
