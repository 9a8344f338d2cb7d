#include "pipetab/study/accuracy.hpp"

#include <cmath>
#include <map>

#include "parallel.hpp"
#include <fmt/format.h>
#include <fmt/ranges.h>

#include "pipetab/cost/stage_cost.hpp"
#include "pipetab/error.hpp"
#include "pipetab/io/config.hpp"
#include "pipetab/schedules/registry.hpp"
#include "pipetab/sim/simulation.hpp"

namespace pipetab {
namespace {

void predict_layer(Prediction& p, const SystemConfig& system) {
  const auto& run = p.run;
  StageWork layer;
  layer.layers = 1;
  const auto costs = cost::stage_costs(run.model, run.job, run.layout, std::span(&layer, 1), system,
                                       run.lowering.cost);
  p.predicted_forward_s = costs.front().forward.seconds;
  p.predicted_backward_s = costs.front().backward.seconds;
  p.forward_error = p.predicted_forward_s / run.measured_forward_s - 1.0;
  p.backward_error = p.predicted_backward_s / run.measured_backward_s - 1.0;
}

// A profiled stage: each pass as the simulation prices it alone (its kernels, or the host's
// issuing when slower; no step overhead), and one activation over the link class's
// point-to-point latency and bandwidth.
void predict_profile(Prediction& p, const SystemConfig& system) {
  const auto& run = p.run;
  StageWork stage;
  stage.layers = run.stage_layers;
  const auto c = cost::stage_costs(run.model, run.job, run.layout, std::span(&stage, 1), system,
                                   run.lowering.cost);
  const auto pass = [&](const cost::PassCost& cost) {
    return run.lowering.overheads ? cost::host_bound_seconds(cost, system.device, run.job.stack)
                                  : cost.seconds;
  };
  const auto add = [&](const char* name, double measured, double predicted) {
    p.parts.push_back({name, measured, predicted, predicted / measured - 1.0});
  };
  add("forward", run.measured_forward_s, pass(c.front().forward));
  if (run.measured_backward_s > 0.0)
    add("backward", run.measured_backward_s, pass(c.front().backward));
  if (run.measured_input_grad_s) {
    add("input_grad", *run.measured_input_grad_s, pass(c.front().input_grad));
    add("weight_grad", *run.measured_weight_grad_s, pass(c.front().weight_grad));
  }
  if (run.measured_p2p_s) {
    const std::int32_t halves[] = {1, 1};
    const double bytes =
        stage_work(run.model, run.job, run.layout, halves, 2).front().message_bytes;
    const LinkSpec& link = run.p2p_across_nodes ? system.inter : system.intra;
    add("p2p", *run.measured_p2p_s, link.p2p_latency() + bytes / link.p2p_bandwidth());
  }
}

void predict_iteration(Prediction& p, const SystemConfig& system) {
  const auto& run = p.run;
  ScheduleParams params;
  params.devices = run.devices;
  params.microbatches = run.microbatches;
  params.chunks = run.chunks;
  const ScheduleInfo& info = find_schedule(run.schedule);
  const auto table = info.generate(resolve(info, job_schedule_params(params, info, run.job)));
  const SimulationSetup setup{run.model, run.job, run.layout, system, run.lowering, SimOptions{}};
  const auto sim = simulate_table(table, setup, run.schedule);
  p.predicted_s = sim.metrics.runtime_s;
  p.error = p.predicted_s / run.measured_s - 1.0;
  p.mfu = sim.metrics.mfu;
  p.regime = std::string(regime_of(setup));
  p.gpus = sim.metrics.gpus;
  p.predicted_memory_bytes = sim.metrics.peak_memory_max();
  p.usable_memory_bytes = sim.metrics.memory_capacity_bytes;
  p.over_capacity = sim.metrics.any_over_capacity();
  if (run.measured_memory_bytes)
    p.memory_error = p.predicted_memory_bytes / *run.measured_memory_bytes - 1.0;
}

}  // namespace

void summarize(AccuracyReport& report) {
  report.summaries.clear();
  std::map<std::string, ErrorSummary> by_source;
  std::vector<std::string> order;
  ErrorSummary all{"all iterations"}, layers{"layers (forward and backward)"},
      profiles{"profiles (each pass and send)"}, memory{"peak memory per GPU"};
  const auto add = [](ErrorSummary& s, double error) {
    ++s.count;
    s.mean_abs += std::abs(error);
    s.max_abs = std::max(s.max_abs, std::abs(error));
  };
  for (const auto& p : report.predictions) {
    if (!p.failure.empty()) continue;
    if (p.run.kind == MeasurementKind::Layer) {
      add(layers, p.forward_error);
      add(layers, p.backward_error);
      continue;
    }
    if (p.run.kind == MeasurementKind::Profile) {
      for (const auto& part : p.parts)
        add(profiles, part.error);
      continue;
    }
    if (!by_source.contains(p.run.source)) {
      order.push_back(p.run.source);
      by_source[p.run.source].group = p.run.source;
    }
    add(by_source[p.run.source], p.error);
    add(all, p.error);
    if (p.memory_error) add(memory, *p.memory_error);
  }
  for (const auto& source : order)
    report.summaries.push_back(by_source[source]);
  report.summaries.push_back(all);
  if (layers.count > 0) report.summaries.push_back(layers);
  if (profiles.count > 0) report.summaries.push_back(profiles);
  if (memory.count > 0) report.summaries.push_back(memory);
  for (auto& s : report.summaries)
    s.mean_abs = s.count > 0 ? s.mean_abs / s.count : 0.0;
}

namespace {

// "TP 8, PP 8 (interleaved, v 3), DP 1, M 64 × 1, selective + SP".
std::string configuration(const MeasuredRun& run) {
  const auto& m = *run.model.transformer();
  const Job& j = run.job;
  const Layout& l = run.layout;
  // Megatron-Core's recompute modules beside the granularity: "recompute moe_act, layernorm".
  std::vector<std::string_view> modules;
  if (j.mla_recompute_up_proj) modules.emplace_back("mla_up_proj");
  if (j.dense_mlp_recompute) modules.emplace_back("dense mlp");
  if (j.moe.recompute != MoeRecompute::None) modules.push_back(to_string(j.moe.recompute));
  if (j.moe.recompute_norm) modules.emplace_back("layernorm");
  std::string recompute = j.recompute == Recompute::None
                              ? std::string(modules.empty() ? "no recompute" : "recompute")
                              : fmt::format("{} recompute", to_string(j.recompute));
  if (!modules.empty())
    recompute +=
        fmt::format("{} {}", j.recompute == Recompute::None ? "" : " +", fmt::join(modules, ", "));
  if (run.kind == MeasurementKind::Layer) {
    return fmt::format("h {}, TP {}, micro batch {}, {}{}", m.hidden, l.tp, j.micro_batch,
                       recompute, l.sequence_parallel ? " + SP" : "");
  }
  if (run.kind == MeasurementKind::Profile) {
    return fmt::format(
        "h {}, TP {}, {} layers per stage, micro batch {}, {}{}{}", m.hidden, l.tp,
        run.stage_layers, j.micro_batch, recompute, l.sequence_parallel ? " + SP" : "",
        run.measured_p2p_s ? (run.p2p_across_nodes ? ", p2p across nodes" : ", p2p in a node")
                           : "");
  }
  const auto cp =
      l.cp > 1 ? fmt::format(", CP {} ({})", l.cp, to_string(l.cp_method)) : std::string();
  return fmt::format("h {}, TP {}{}, PP {} ({}{}), {} {}, M {} × {}, {}{}", m.hidden, l.tp, cp,
                     run.devices, run.schedule,
                     run.chunks ? fmt::format(" v {}", *run.chunks) : std::string(),
                     l.fsdp.enabled ? "FSDP" : "DP", l.dp, run.microbatches, j.micro_batch,
                     recompute, l.sequence_parallel ? " + SP" : "");
}

std::string percent(double error) {
  return fmt::format("{:+.1f}%", 100 * error);
}

}  // namespace

AccuracyReport predict(const Measurements& measurements, const std::optional<SystemConfig>& system,
                       unsigned threads) {
  AccuracyReport report;
  report.file = measurements.file;
  for (const auto kind :
       {MeasurementKind::Iteration, MeasurementKind::Layer, MeasurementKind::Profile}) {
    for (const auto& run : measurements.runs) {
      if (run.kind != kind) continue;
      Prediction p;
      p.run = run;
      report.predictions.push_back(std::move(p));
    }
  }
  // Each system once, before the parallel part.
  std::map<std::string, SystemConfig> systems;
  for (auto& p : report.predictions) {
    if (system) {
      p.system = system->name;
    } else if (!systems.contains(p.run.system)) {
      systems.emplace(p.run.system, load_run_system(measurements, p.run));
    }
  }
  detail::parallel_for(report.predictions.size(), threads, [&](std::size_t i) {
    auto& p = report.predictions[i];
    const SystemConfig& s = system ? *system : systems.at(p.run.system);
    p.system = s.name;
    try {
      if (p.run.kind == MeasurementKind::Layer) {
        predict_layer(p, s);
      } else if (p.run.kind == MeasurementKind::Profile) {
        predict_profile(p, s);
      } else {
        predict_iteration(p, s);
      }
    } catch (const ParamError& e) {
      p.failure = e.what();
    }
  });
  summarize(report);
  return report;
}

namespace {

// A cell of the Markdown table: control bytes (an ESC that recolours the terminal, a CR that
// overwrites the row) as \xNN, and '|' escaped so that it cannot split the row.
std::string markdown_cell(std::string_view text) {
  std::string out;
  for (const char c : text) {
    const auto byte = static_cast<unsigned char>(c);
    if (byte < 0x20 || byte == 0x7f) {
      out += fmt::format("\\x{:02x}", byte);
    } else if (c == '|') {
      out += "\\|";
    } else {
      out += c;
    }
  }
  return out;
}

}  // namespace

std::string accuracy_markdown(const AccuracyReport& r) {
  std::string out = "| run | source | configuration | system | measured | predicted | error |\n";
  out += "|---|---|---|---|---:|---:|---:|\n";
  for (const auto& prediction : r.predictions) {
    Prediction p = prediction;
    p.run.id = markdown_cell(p.run.id);
    p.run.source = markdown_cell(p.run.source);
    p.system = markdown_cell(p.system);
    const auto& run = p.run;
    if (!p.failure.empty()) {
      out += fmt::format("| {} | {} | {} | {} | | not predicted: {} | |\n", run.id, run.source,
                         configuration(run), p.system, p.failure);
    } else if (run.kind == MeasurementKind::Profile) {
      std::vector<std::string> measured, predicted, errors;
      for (const auto& part : p.parts) {
        measured.push_back(fmt::format("{} {:.3g}", part.name, 1e3 * part.measured_s));
        predicted.push_back(fmt::format("{:.3g}", 1e3 * part.predicted_s));
        errors.push_back(percent(part.error));
      }
      out += fmt::format("| {} | {} | {} | {} | {} ms | {} ms | {} |\n", run.id, run.source,
                         configuration(run), p.system, fmt::join(measured, " / "),
                         fmt::join(predicted, " / "), fmt::join(errors, " / "));
    } else if (run.kind == MeasurementKind::Layer) {
      out += fmt::format(
          "| {} | {} | {} | {} | {:.1f} / {:.1f} ms | {:.2f} / {:.2f} ms | {} / {} |\n", run.id,
          run.source, configuration(run), p.system, 1e3 * run.measured_forward_s,
          1e3 * run.measured_backward_s, 1e3 * p.predicted_forward_s, 1e3 * p.predicted_backward_s,
          percent(p.forward_error), percent(p.backward_error));
    } else {
      out += fmt::format("| {} | {} | {} | {} | {:.2f} s{} | {:.2f} s | {} |\n", run.id, run.source,
                         configuration(run), p.system, run.measured_s,
                         run.measured_tflops_per_gpu
                             ? fmt::format(" ({:g} TF/s)", *run.measured_tflops_per_gpu)
                             : std::string(),
                         p.predicted_s, percent(p.error));
    }
  }
  out += "\n| group | runs | mean absolute error | max absolute error |\n|---|---:|---:|---:|\n";
  for (const auto& s : r.summaries) {
    out += fmt::format("| {} | {} | {:.2f}% | {:.2f}% |\n", s.group, s.count, 100 * s.mean_abs,
                       100 * s.max_abs);
  }
  // Peak memory where the source published it: the fullest GPU as predicted (the workload's
  // allocations, no allocator reserve) against what the framework reported.
  std::string memory;
  for (const auto& p : r.predictions) {
    if (!p.failure.empty() || !p.memory_error) continue;
    memory += fmt::format("| {} | {:.1f} GiB | {:.1f} GiB | {} |\n", markdown_cell(p.run.id),
                          *p.run.measured_memory_bytes / kGiB, p.predicted_memory_bytes / kGiB,
                          percent(*p.memory_error));
  }
  if (!memory.empty()) {
    out += "\n| run | measured peak memory | predicted | error |\n|---|---:|---:|---:|\n" + memory;
  }
  // Every published run ran: one predicted over a device's memory (or its host's) is a miss.
  std::vector<std::string> over;
  std::int32_t iterations = 0;
  for (const auto& p : r.predictions) {
    if (!p.failure.empty() || p.run.kind != MeasurementKind::Iteration) continue;
    ++iterations;
    if (!p.over_capacity) continue;
    // The GPU's figures where it is the GPU that is over (else it is the offload's host).
    over.push_back(p.predicted_memory_bytes > p.usable_memory_bytes
                       ? fmt::format("{}: {:.1f} GB of {:.1f} usable", markdown_cell(p.run.id),
                                     p.predicted_memory_bytes / 1e9, p.usable_memory_bytes / 1e9)
                       : fmt::format("{}: its host's memory", markdown_cell(p.run.id)));
  }
  if (!over.empty()) {
    out += fmt::format(
        "\nPredicted over a GPU's usable memory or its host's, though every run ran: {} of {} "
        "iterations ({}).\n",
        over.size(), iterations, fmt::join(over, "; "));
  }
  return out;
}

std::string accuracy_csv(const AccuracyReport& r) {
  std::string out =
      "id,source,kind,system,measured_s,predicted_s,error,measured_forward_s,predicted_forward_s,"
      "forward_error,measured_backward_s,predicted_backward_s,backward_error,mfu,regime,gpus,"
      "stack,a2a_overlap,measured_memory_gib,predicted_memory_gib,memory_error,over_capacity,"
      "failure,parts\n";
  const auto cell = [](const std::string& text) {
    std::string quoted = "\"";
    for (const char c : text)
      quoted += c == '"' ? std::string("\"\"") : std::string(1, c);
    return quoted + "\"";
  };
  for (const auto& p : r.predictions) {
    const auto& run = p.run;
    const bool layer = run.kind == MeasurementKind::Layer;
    const bool iteration = run.kind == MeasurementKind::Iteration;
    const bool ok = p.failure.empty();
    // Profiles: "part=measured/predicted" in seconds, ';' between parts.
    std::vector<std::string> parts;
    for (const auto& part : p.parts)
      parts.push_back(
          fmt::format("{}={:.6g}/{:.6g}", part.name, part.measured_s, part.predicted_s));
    const auto number = [&](double value, bool shown) {
      return shown ? fmt::format("{:.6g}", value) : std::string();
    };
    // One field per header column, joined: a count that cannot drift from the header's (a
    // format string with fewer placeholders than arguments drops the last silently).
    const std::vector<std::string> fields{
        cell(run.id),
        cell(run.source),
        std::string(to_string(run.kind)),
        cell(p.system),
        number(run.measured_s, iteration),
        number(p.predicted_s, ok && iteration),
        number(p.error, ok && iteration),
        number(run.measured_forward_s, layer),
        number(p.predicted_forward_s, ok && layer),
        number(p.forward_error, ok && layer),
        number(run.measured_backward_s, layer),
        number(p.predicted_backward_s, ok && layer),
        number(p.backward_error, ok && layer),
        number(p.mfu.value_or(0.0), ok && p.mfu.has_value()),
        ok && iteration ? p.regime : "",
        ok && iteration ? std::to_string(p.gpus) : "",
        cell(run.job.stack.name),
        run.job.a2a_overlap ? "true" : "false",
        number(run.measured_memory_bytes.value_or(0.0) / kGiB,
               run.measured_memory_bytes.has_value()),
        number(p.predicted_memory_bytes / kGiB, ok && iteration),
        number(p.memory_error.value_or(0.0), ok && p.memory_error.has_value()),
        ok && iteration ? (p.over_capacity ? "true" : "false") : "",
        cell(p.failure),
        cell(fmt::format("{}", fmt::join(parts, ";")))};
    out += fmt::format("{}\n", fmt::join(fields, ","));
  }
  return out;
}

nlohmann::json to_json(const AccuracyReport& r) {
  nlohmann::json predictions = nlohmann::json::array();
  for (const auto& p : r.predictions) {
    nlohmann::json j{{"id", p.run.id},
                     {"source", p.run.source},
                     {"kind", to_string(p.run.kind)},
                     {"system", p.system},
                     {"configuration", configuration(p.run)}};
    if (!p.failure.empty()) {
      j["failure"] = p.failure;
    } else if (p.run.kind == MeasurementKind::Profile) {
      nlohmann::json parts = nlohmann::json::array();
      for (const auto& part : p.parts) {
        parts.push_back({{"part", part.name},
                         {"measured_s", part.measured_s},
                         {"predicted_s", part.predicted_s},
                         {"error", part.error}});
      }
      j["parts"] = std::move(parts);
    } else if (p.run.kind == MeasurementKind::Layer) {
      j["measured_forward_s"] = p.run.measured_forward_s;
      j["predicted_forward_s"] = p.predicted_forward_s;
      j["forward_error"] = p.forward_error;
      j["measured_backward_s"] = p.run.measured_backward_s;
      j["predicted_backward_s"] = p.predicted_backward_s;
      j["backward_error"] = p.backward_error;
    } else {
      j["measured_s"] = p.run.measured_s;
      j["predicted_s"] = p.predicted_s;
      j["error"] = p.error;
      if (p.mfu) j["mfu"] = *p.mfu;
      j["regime"] = p.regime;
      j["gpus"] = p.gpus;
      j["stack"] = p.run.job.stack.name;
      j["predicted_memory_bytes"] = p.predicted_memory_bytes;
      if (p.run.measured_memory_bytes) j["measured_memory_bytes"] = *p.run.measured_memory_bytes;
      if (p.memory_error) j["memory_error"] = *p.memory_error;
      j["usable_memory_bytes"] = p.usable_memory_bytes;
      j["over_capacity"] = p.over_capacity;
      if (p.run.measured_tflops_per_gpu)
        j["measured_tflops_per_gpu"] = *p.run.measured_tflops_per_gpu;
    }
    predictions.push_back(std::move(j));
  }
  nlohmann::json summaries = nlohmann::json::array();
  for (const auto& s : r.summaries) {
    summaries.push_back({{"group", s.group},
                         {"count", s.count},
                         {"mean_abs_error", s.mean_abs},
                         {"max_abs_error", s.max_abs}});
  }
  return {{"file", r.file}, {"predictions", predictions}, {"summaries", summaries}};
}

}  // namespace pipetab
