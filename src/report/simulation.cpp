#include "pipetab/report/simulation.hpp"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "pipetab/error.hpp"
#include "pipetab/report/text.hpp"

namespace pipetab {

namespace {

// "op 1F3 on device 1" or "activation 0 -> 1 (stage 1, 33.55 MB)".
std::string describe(const ScheduleTable& table, const Simulation& sim, std::int32_t node) {
  const auto& g = sim.graph;
  const auto n = static_cast<std::size_t>(node);
  if (g.is_table_op(node))
    return fmt::format("op {} on device {}", to_string(table.ops[n]), g.device[n]);
  if (!g.is_transfer(node)) return fmt::format("optimizer step on device {}", g.device[n]);
  const auto t = static_cast<std::size_t>(node - g.compute_nodes);
  return fmt::format("{} {} -> {} (stage {}, {:.4g} MB)", to_string(g.kind[t]), g.device[n],
                     g.receiver[t], g.stage[t], g.bytes[t] / 1e6);
}

}  // namespace

namespace {
nlohmann::json optional_number(const std::optional<double>& value) {
  return value ? nlohmann::json(*value) : nlohmann::json(nullptr);
}

nlohmann::json to_json(const OutsideAllocator& o) {
  auto communicators = nlohmann::json::array();
  for (const auto& c : o.communicators) {
    communicators.push_back({{"group", c.group},
                             {"ranks", c.ranks},
                             {"per_node", c.per_node},
                             {"ring_bytes", c.ring_bytes},
                             {"nvls_bytes", c.nvls_bytes},
                             {"p2p_bytes", c.p2p_bytes},
                             {"deepep_bytes", c.deepep_bytes},
                             {"userbuffer_bytes", c.userbuffer_bytes}});
  }
  return {{"flat_reserve", optional_number(o.flat_reserve)},
          {"context_bytes", o.context_bytes},
          {"communicator_bytes", o.communicator_bytes()},
          {"device", o.device},
          {"communicators", communicators}};
}
}  // namespace

// The memory line: what a GPU may use and what is held outside the allocator, by part.
std::string describe_memory(const SimulationMetrics& m) {
  const auto& o = m.outside_allocator;
  const double outside = m.device_memory_bytes - m.memory_capacity_bytes;
  if (o.flat_reserve) {
    return fmt::format(
        "memory: {:.4g} GB usable of {:.4g} GB per GPU, a flat {:g}% kept back for the CUDA "
        "context, NCCL's buffers and the allocator ({})",
        m.memory_capacity_bytes / 1e9, m.device_memory_bytes / 1e9, 100 * *o.flat_reserve,
        m.memory_reserve_given ? "--memory-reserve"
                               : "the system describes no [nccl] channels to model them by");
  }
  std::string parts = fmt::format("CUDA context {:.3g}", o.context_bytes / 1e9);
  for (const auto& c : o.communicators) {
    parts += fmt::format(", {} {:.3g}", c.group, c.bytes() / 1e9);
    if (c.deepep_bytes > 0.0) parts += fmt::format(" (DeepEP {:.3g})", c.deepep_bytes / 1e9);
    if (c.userbuffer_bytes > 0.0)
      parts += fmt::format(" (TE userbuffers {:.3g})", c.userbuffer_bytes / 1e9);
  }
  return fmt::format(
      "memory: {:.4g} GB usable of {:.4g} GB per GPU, {:.3g} GB held outside the caching "
      "allocator by device {}'s ranks ({} GB: communicators by group{})",
      m.memory_capacity_bytes / 1e9, m.device_memory_bytes / 1e9, outside / 1e9, o.device, parts,
      m.nccl_nvls ? "" : ", NCCL without NVLS");
}

nlohmann::json to_json(const std::optional<RuntimeInterval>& i) {
  if (!i) return nullptr;
  return {{"low", i->low_s},
          {"high", i->high_s},
          {"level", i->level},
          {"runs", i->runs},
          {"regime", i->regime},
          {"basis", i->basis},
          {"largest_gpus", i->largest_gpus}};
}

std::string interval_text(const SimulationMetrics& m) {
  if (!m.runtime_interval) return {};
  const auto& i = *m.runtime_interval;
  return fmt::format("{:.4g}–{:.4g} s, {:.0f}%, from {} published {} runs on {}", i.low_s, i.high_s,
                     100 * i.level, i.runs, regime_words(i.regime), i.basis);
}

nlohmann::json to_json(const SimulationMetrics& m) {
  return {{"system", m.system},
          {"model", m.model},
          {"runtime_s", m.runtime_s},
          {"runtime_interval_s", to_json(m.runtime_interval)},
          {"runtime_interval_note", m.interval_note},
          {"pipeline_end_s", m.pipeline_end_s},
          {"tokens_per_s", optional_number(m.tokens_per_s)},
          {"mfu", optional_number(m.mfu)},
          {"hfu", optional_number(m.hfu)},
          {"model_flops", optional_number(m.model_flops)},
          {"hardware_flops", optional_number(m.hardware_flops)},
          {"flop_count", m.flop_count},
          {"stack", m.stack},
          {"stack_description", m.stack_description},
          {"sequences", optional_number(m.sequences)},
          {"gpus", m.gpus},
          {"idle_ratio", m.idle_ratio},
          {"span_idle_ratio", m.span_idle_ratio},
          {"peak_memory_bytes", m.peak_memory_bytes},
          {"peak_memory_max_bytes", m.peak_memory_max()},
          {"peak_memory_time_s", m.peak_memory_time_s},
          {"peak_activation_bytes", m.peak_activation_bytes()},
          {"static_bytes", m.static_bytes},
          {"over_capacity", m.over_capacity},
          {"memory_capacity_bytes", m.memory_capacity_bytes},
          {"memory_outside_allocator", to_json(m.outside_allocator)},
          {"device_memory_bytes", m.device_memory_bytes},
          {"offload_activations", m.offload_activations},
          {"offload_layers", m.offload_layers},
          {"offload_modules", m.offload_modules},
          {"peak_host_bytes", m.peak_host_bytes},
          {"host_peak_bytes", m.host_peak_bytes},
          {"host_memory_bytes", m.host_memory_bytes},
          {"host_over_capacity", m.host_over_capacity},
          {"compute_s", m.compute_s},
          {"tp_comm_s", m.tp_comm_s},
          {"expert_comm_s", m.expert_comm_s},
          {"overhead_s", m.overhead_s},
          {"interference_s", m.interference_s},
          {"optimizer_s", m.optimizer_s},
          {"exposed_comm_s", m.exposed_comm_s},
          {"exposed_pipeline_s", m.exposed_pipeline_s},
          {"exposed_collective_s", m.exposed_collective_s},
          {"breakdown",
           [&] {
             const auto b = m.breakdown();
             return nlohmann::json{{"compute", b.compute},
                                   {"tp_comm", b.tp_comm},
                                   {"expert_comm", b.expert_comm},
                                   {"host_overhead", b.host_overhead},
                                   {"comm_interference", b.comm_interference},
                                   {"bubble", b.bubble},
                                   {"exposed_pipeline", b.exposed_pipeline},
                                   {"reductions", b.reductions},
                                   {"optimizer", b.optimizer}};
           }()},
          {"idle_s", m.idle_s},
          {"contention", m.contention},
          {"blocking_send", m.blocking_send},
          {"runtime", m.runtime},
          {"runtime_chosen_by", m.runtime_chosen_by},
          {"overheads", m.overheads},
          {"tp_overlap", m.tp_overlap},
          {"a2a_overlap", m.a2a_overlap},
          {"dp_overlap", m.dp_overlap},
          {"distributed_optimizer", m.distributed_optimizer},
          {"optimizer", m.optimizer},
          {"data_parallel", m.data_parallel},
          {"tensor_parallel", m.tensor_parallel},
          {"context_parallel", m.context_parallel},
          {"cp_method", m.cp_method},
          {"expert_parallel", m.expert_parallel},
          {"expert_tensor_parallel", m.expert_tensor_parallel},
          {"fsdp", m.fsdp},
          {"fsdp_shard", m.fsdp_shard},
          {"reshard_after_forward", m.reshard_after_forward},
          {"grad_sync", m.grad_sync},
          {"fsdp_impl", m.fsdp_impl},
          {"explicit_costs", m.explicit_costs},
          {"graph_nodes", m.nodes},
          {"transfers", m.transfers},
          {"events", m.events},
          {"transfer_bytes", m.transfer_bytes}};
}

nlohmann::json simulation_json(const ScheduleTable& table, const Simulation& sim) {
  const auto& r = sim.result;
  nlohmann::json links = nlohmann::json::array();
  for (std::size_t l = 0; l < r.links.size(); ++l) {
    if (r.links[l].bytes <= 0.0) continue;
    links.push_back({{"link", sim.network.link_name(l)},
                     {"bytes", r.links[l].bytes},
                     {"busy_s", r.links[l].busy_s},
                     {"max_utilization", r.links[l].max_utilization}});
  }
  nlohmann::json path = nlohmann::json::array();
  for (const auto node : r.critical_path) {
    const auto n = static_cast<std::size_t>(node);
    path.push_back({{"node", node},
                    {"kind", sim.graph.is_transfer(node) ? "transfer" : "compute"},
                    {"what", describe(table, sim, node)},
                    {"start_s", r.start[n]},
                    {"end_s", r.end[n]}});
  }
  auto j = to_json(sim.metrics);
  j["links"] = std::move(links);
  j["critical_path"] = std::move(path);
  return j;
}

std::string simulation_text(const ScheduleTable& table, const Simulation& sim) {
  const auto& m = sim.metrics;
  const auto& r = sim.result;
  std::string out =
      fmt::format("simulated on {} with model {}{}{}{}; runtime {} ({})\n", m.system, m.model,
                  m.explicit_costs ? " (op times from --costs, in seconds)" : "",
                  m.contention ? "" : ", no contention", m.blocking_send ? ", blocking sends" : "",
                  m.runtime, m.runtime_chosen_by);
  if (!m.stack_description.empty())
    out += wrap("stack " + m.stack_description, kTextWidth, "", "  ");
  out += fmt::format(
      "runtime {:.6g} s (pipeline {:.6g} s), idle ratio {:.4f} (span {:.4f}); {} ops and {} "
      "transfers ({:.4g} GB), {} events\n",
      m.runtime_s, m.pipeline_end_s, m.idle_ratio, m.span_idle_ratio, sim.graph.table_ops,
      m.transfers, m.transfer_bytes / 1e9, m.events);
  // The error bar (docs/accuracy.md "Error bars"), or why there is none.
  if (m.runtime_interval || !m.interval_note.empty()) {
    std::string bar = m.runtime_interval ? "error bar: " + interval_text(m) : "error bar: none, ";
    if (!m.interval_note.empty()) bar += (m.runtime_interval ? "; " : "") + m.interval_note;
    out += wrap(bar, kTextWidth, "", "  ");
  }
  if (m.tokens_per_s) {
    std::string more;
    if (m.context_parallel > 1)
      more += fmt::format(", context parallel {} ({})", m.context_parallel, m.cp_method);
    if (m.expert_parallel > 1 || m.expert_tensor_parallel > 1)
      more +=
          fmt::format(", expert parallel {} (ETP {})", m.expert_parallel, m.expert_tensor_parallel);
    if (m.fsdp) {
      more += fmt::format(", {} over {} ranks{}, gradients reduce-scattered per {}",
                          m.fsdp_impl == "megatron" ? "Megatron-FSDP" : "FSDP", m.fsdp_shard,
                          m.reshard_after_forward ? ", resharding after forward" : "", m.grad_sync);
    }
    out += wrap(
        fmt::format(
            "{} GPUs (tensor parallel {}, data parallel {}{}), {:g} sequences: {:.6g} tokens/s, "
            "MFU {:.1f}% ({}), HFU {:.1f}% (FLOPs executed)",
            m.gpus, m.tensor_parallel, m.data_parallel, more, *m.sequences, *m.tokens_per_s,
            100 * *m.mfu, describe(parse_flop_count(m.flop_count).value_or(FlopCount::Palm)),
            100 * *m.hfu),
        kTextWidth, "", "  ");
    // PaLM's count is a convention, not work done: at long sequences it can pass the peak.
    if (*m.mfu > 1 && m.flop_count == to_string(FlopCount::Palm)) {
      out += wrap(
          "MFU above 100%: PaLM's count credits causal attention with the full s x s square, "
          "twice the FLOPs FlashAttention executes for it; --flop-count causal counts the half",
          kTextWidth, "  ", "  ");
    }
  }
  const auto b = m.breakdown();
  // The experts' all-to-alls get their own share where they run (EP or ETP above 1).
  const std::string experts = m.expert_parallel > 1 || m.expert_tensor_parallel > 1
                                  ? fmt::format(", expert all-to-all {:.1f}%", 100 * b.expert_comm)
                                  : "";
  out += wrap(
      fmt::format(
          "breakdown (mean per device): compute {:.1f}%, tensor-parallel comm {:.1f}%{}, host "
          "overhead {:.1f}%, compute slowed by communication {:.1f}%, pipeline bubble {:.1f}%, "
          "exposed pipeline transfers {:.1f}%, gradient reductions {:.1f}%, optimizer {:.1f}%{}",
          100 * b.compute, 100 * b.tp_comm, experts, 100 * b.host_overhead,
          100 * b.comm_interference, 100 * b.bubble, 100 * b.exposed_pipeline, 100 * b.reductions,
          100 * b.optimizer, m.overheads ? "" : " (overheads off)"),
      kTextWidth, "", "  ");
  out += '\n';
  if (m.device_memory_bytes > 0.0) {
    out += wrap(describe_memory(m), kTextWidth, "", "  ");
    out += '\n';
  }
  if (std::find(m.over_capacity.begin(), m.over_capacity.end(), true) != m.over_capacity.end()) {
    // A run that cannot happen is said once, with what its memory is made of, before the rows
    // that mark each device.
    const auto over = std::count(m.over_capacity.begin(), m.over_capacity.end(), true);
    const auto worst = static_cast<std::size_t>(
        std::max_element(m.peak_memory_bytes.begin(), m.peak_memory_bytes.end()) -
        m.peak_memory_bytes.begin());
    out += wrap(
        fmt::format(
            "warning: {} of {} devices need more than their {:.4g} GB usable (of {:.4g} GB, the "
            "rest held outside the caching allocator: the memory line above), so this run "
            "does "
            "not fit as configured; device {} peaks at {:.4g} GB ({:.4g} GB weights, gradients and "
            "optimizer "
            "state, {:.4g} GB activations). Fewer layers per device (more devices with -S, or "
            "--tp), "
            "--fsdp or --distributed-optimizer with --dp, --cp for long sequences, recompute or "
            "flash_attention in the model file, or a schedule with fewer microbatches in flight "
            "fit "
            "more",
            over, m.over_capacity.size(), m.memory_capacity_bytes / 1e9,
            m.device_memory_bytes / 1e9, worst, m.peak_memory_bytes[worst] / 1e9,
            m.static_bytes[worst] / 1e9,
            (m.peak_memory_bytes[worst] - m.static_bytes[worst]) / 1e9),
        kTextWidth, "", "  ");
    out += '\n';
  }
  if (m.offloads()) {
    const auto what = m.offload_layers > 0
                          ? fmt::format("offload of {} layers per stage", m.offload_layers)
                      : m.offload_modules != "none"
                          ? fmt::format("offload of modules {}", m.offload_modules)
                          : fmt::format("activation offload {:.4g}", m.offload_activations);
    out += wrap(fmt::format("{}: a host holds at most {:.4g} GB of its GPUs' activations (of "
                            "{:.4g} GB){}",
                            what, m.host_peak_bytes / 1e9, m.host_memory_bytes / 1e9,
                            m.host_over_capacity ? ": over the host's memory, so this run does "
                                                   "not fit as configured"
                                                 : ""),
                kTextWidth, "", "  ");
    out += '\n';
  }
  // "in-op comm s": of the compute time, the communication inside ops that they wait for
  // (tensor-parallel collectives, context-parallel exchanges, the experts' all-to-alls).
  out +=
      "device   compute s   in-op comm s  optimizer s  exposed comm s      idle s   peak GB        "
      "at s\n";
  for (std::size_t d = 0; d < r.devices.size(); ++d) {
    const auto& dev = r.devices[d];
    out += fmt::format("{:<6}{:>12.6g}{:>15.6g}{:>13.6g}{:>16.6g}{:>12.6g}{:>10.4g}{:>12.6g}{}\n",
                       d, dev.compute_s, dev.tp_comm_s, dev.optimizer_s, dev.exposed_comm_s,
                       dev.idle_s, dev.peak_memory_bytes / 1e9, dev.peak_memory_time_s,
                       m.over_capacity[d] ? "  over capacity" : "");
  }
  out += "\nlink                      GB moved      busy s   max utilization\n";
  for (std::size_t l = 0; l < r.links.size(); ++l) {
    if (r.links[l].bytes <= 0.0) continue;
    out += fmt::format("{:<22}{:>12.4g}{:>12.6g}{:>18.3f}\n", sim.network.link_name(l),
                       r.links[l].bytes / 1e9, r.links[l].busy_s, r.links[l].max_utilization);
  }
  std::size_t ops = 0;
  double op_time = 0.0, transfer_time = 0.0;
  for (const auto node : r.critical_path) {
    const auto n = static_cast<std::size_t>(node);
    if (sim.graph.is_transfer(node)) {
      transfer_time += r.end[n] - r.start[n];
    } else {
      ++ops;
      op_time += r.end[n] - r.start[n];
    }
  }
  out += fmt::format("\ncritical path: {} steps, {} ops ({:.6g} s) and {} transfers ({:.6g} s)\n",
                     r.critical_path.size(), ops, op_time, r.critical_path.size() - ops,
                     transfer_time);
  constexpr std::size_t kShown = 8;
  for (std::size_t k = 0; k < r.critical_path.size(); ++k) {
    if (k == kShown && r.critical_path.size() > 2 * kShown) {
      out += fmt::format("  ... {} more steps\n", r.critical_path.size() - 2 * kShown);
      k = r.critical_path.size() - kShown;
    }
    const auto node = r.critical_path[k];
    const auto n = static_cast<std::size_t>(node);
    out += fmt::format("  {:>12.6g} - {:<12.6g} {}\n", r.start[n], r.end[n],
                       describe(table, sim, node));
  }
  return out;
}

}  // namespace pipetab
