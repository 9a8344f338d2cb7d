#include "pipetab/report/output.hpp"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "pipetab/report/simulation.hpp"
#include "pipetab/report/text.hpp"
#include "pipetab/schedules/registry.hpp"

namespace pipetab {

using nlohmann::json;

json schedules_json() {
  json all = json::array();
  for (const auto* info : all_schedules()) {
    json j = {{"name", info->name},
              {"title", info->title},
              {"source", info->source},
              {"constraints", info->constraints}};
    if (info->default_chunks) j["default_chunks"] = info->default_chunks;
    if (info->default_waves) j["default_waves"] = info->default_waves;
    if (info->takes_group_size) j["takes_group_size"] = true;
    if (!info->variants.empty()) j["variants"] = info->variants;
    if (!info->default_split.empty()) j["default_split"] = info->default_split;
    all.push_back(std::move(j));
  }
  return all;
}

std::string format_number(double value) {
  return fmt::format("{}", value);
}

namespace {

// Numbers in the text report: whole values as integers and others with four decimals, in fixed
// notation, so that a column never mixes "24" with "23.999999999999996" or 17 digits with 4
// (issue 14). JSON and CSV keep format_number's exact values.
std::string text_number(double value) {
  const double whole = std::round(value);
  if (std::abs(value - whole) <= 1e-9 * std::max(1.0, std::abs(value)))
    return fmt::format("{:.0f}", whole == 0.0 ? 0.0 : whole);
  return fmt::format("{:.4f}", value);
}

template <class T>
json optional_json(const std::optional<T>& value) {
  return value ? json(*value) : json(nullptr);
}

}  // namespace

json to_json(const Evaluation& e) {
  json params = {{"devices", e.shape.devices},
                 {"stages", e.shape.stages},
                 {"microbatches", e.shape.microbatches},
                 {"chunks", optional_json(e.shape.chunks)},
                 {"waves", e.shape.waves},
                 {"pipelines", e.shape.pipelines},
                 {"variant", e.shape.variant.empty() ? json(nullptr) : json(e.shape.variant)},
                 {"split", e.shape.split.empty() ? json(nullptr) : json(e.shape.split)}};
  json costs = {{"F", e.costs.F},
                {"B", e.costs.B},
                {"I", e.costs.I},
                {"W", e.costs.W},
                {"FB", optional_json(e.costs.FB)}};
  json formula = nullptr;
  if (e.formula) {
    const Formula& f = *e.formula;
    formula = {
        {"bubble_ratio", optional_json(f.bubble_ratio)},
        {"span_bubble_ratio", optional_json(f.span_bubble_ratio)},
        {"peak_activation", optional_json(f.peak_activation_max())},
        {"makespan", optional_json(f.makespan)},
        {"peak_activation_per_device", optional_json(f.peak_activation)},
        {"published_bubble_ratio", optional_json(f.published_bubble_ratio)},
        {"published_bubble_definition",
         f.published_bubble_ratio ? json(std::string(to_string(f.published_kind))) : json(nullptr)},
        {"source", f.source.empty() ? json(nullptr) : json(std::string(f.source))},
        {"note", f.note.empty() ? json(nullptr) : json(f.note)}};
  }
  json table = {{"makespan", e.table.makespan},
                {"bubble_ratio", e.table.bubble_ratio},
                {"span_bubble_ratio", e.table.span_bubble_ratio},
                {"peak_activation", e.table.peak_activation},
                {"peak_activation_max", e.table.peak_activation_max()},
                {"peak_activation_time", e.table.peak_activation_time},
                {"busy", e.table.busy},
                {"idle", e.table.idle},
                {"ops", e.table.ops},
                {"input_grad_frees", e.memory.input_grad_frees},
                {"offload_activations", e.memory.offload},
                {"offload_kept", e.memory.kept}};
  if (!e.table.activation_curves.empty()) {
    json curves = json::array();
    for (const auto& curve : e.table.activation_curves) {
      json points = json::array();
      for (const auto& sample : curve)
        points.push_back({sample.time, sample.value});
      curves.push_back(std::move(points));
    }
    table["activation_curve"] = std::move(curves);
  }
  json out = {{"schedule", e.schedule},
              {"params", params},
              {"costs", costs},
              {"formula", formula},
              {"table", table},
              {"simulation", e.simulation ? to_json(*e.simulation) : json(nullptr)}};
  if (!e.simulation_error.empty()) out["simulation_error"] = e.simulation_error;
  return out;
}

FlatRecord flat_record(const Evaluation& e) {
  const Formula none;
  const Formula& f = e.formula ? *e.formula : none;
  const SimulationMetrics* m = e.simulation ? &*e.simulation : nullptr;
  auto text = [](const std::string& s) { return s.empty() ? json(nullptr) : json(s); };
  auto sim = [m](auto&& get) { return m ? json(get(*m)) : json(nullptr); };
  FlatRecord row;
  row.emplace_back("schedule", e.schedule);
  row.emplace_back("params.devices", e.shape.devices);
  row.emplace_back("params.stages", e.shape.stages);
  row.emplace_back("params.microbatches", e.shape.microbatches);
  row.emplace_back("params.chunks", optional_json(e.shape.chunks));
  row.emplace_back("params.waves", e.shape.waves);
  row.emplace_back("params.pipelines", e.shape.pipelines);
  row.emplace_back("params.variant", text(e.shape.variant));
  row.emplace_back("params.split", text(e.shape.split));
  row.emplace_back("costs.F", e.costs.F);
  row.emplace_back("costs.B", e.costs.B);
  row.emplace_back("costs.I", e.costs.I);
  row.emplace_back("costs.W", e.costs.W);
  row.emplace_back("costs.FB", optional_json(e.costs.FB));
  row.emplace_back("formula.bubble_ratio", optional_json(f.bubble_ratio));
  row.emplace_back("formula.span_bubble_ratio", optional_json(f.span_bubble_ratio));
  row.emplace_back("formula.peak_activation", optional_json(f.peak_activation_max()));
  row.emplace_back("formula.makespan", optional_json(f.makespan));
  row.emplace_back("formula.published_bubble_ratio", optional_json(f.published_bubble_ratio));
  row.emplace_back(
      "formula.published_bubble_definition",
      f.published_bubble_ratio ? json(std::string(to_string(f.published_kind))) : json(nullptr));
  row.emplace_back("table.makespan", e.table.makespan);
  row.emplace_back("table.bubble_ratio", e.table.bubble_ratio);
  row.emplace_back("table.span_bubble_ratio", e.table.span_bubble_ratio);
  row.emplace_back("table.peak_activation", e.table.peak_activation);
  row.emplace_back("table.peak_activation_max", e.table.peak_activation_max());
  row.emplace_back("table.ops", e.table.ops);
  row.emplace_back("simulation.system", sim([](auto& s) { return s.system; }));
  row.emplace_back("simulation.model", sim([](auto& s) { return s.model; }));
  row.emplace_back("simulation.runtime", sim([](auto& s) { return s.runtime; }));
  row.emplace_back("simulation.tp_overlap", sim([](auto& s) { return s.tp_overlap; }));
  row.emplace_back("simulation.optimizer", sim([](auto& s) { return s.optimizer; }));
  row.emplace_back("simulation.dp_overlap", sim([](auto& s) { return s.dp_overlap; }));
  row.emplace_back("simulation.distributed_optimizer",
                   sim([](auto& s) { return s.distributed_optimizer; }));
  // The layout it ran (a study's [simulation] keys, a runs file's entry).
  row.emplace_back("simulation.tensor_parallel", sim([](auto& s) { return s.tensor_parallel; }));
  row.emplace_back("simulation.context_parallel", sim([](auto& s) { return s.context_parallel; }));
  row.emplace_back("simulation.cp_method", sim([](auto& s) { return s.cp_method; }));
  row.emplace_back("simulation.expert_parallel", sim([](auto& s) { return s.expert_parallel; }));
  row.emplace_back("simulation.expert_tensor_parallel",
                   sim([](auto& s) { return s.expert_tensor_parallel; }));
  row.emplace_back("simulation.data_parallel", sim([](auto& s) { return s.data_parallel; }));
  row.emplace_back("simulation.fsdp", sim([](auto& s) { return s.fsdp; }));
  row.emplace_back("simulation.gpus", sim([](auto& s) { return s.gpus; }));
  row.emplace_back("simulation.runtime_s", sim([](auto& s) { return s.runtime_s; }));
  // The error bar (sim/error_bar.hpp): empty where no published runs give one.
  row.emplace_back("simulation.runtime_low_s", sim([](auto& s) {
                     return s.runtime_interval ? nlohmann::json(s.runtime_interval->low_s)
                                               : nlohmann::json(nullptr);
                   }));
  row.emplace_back("simulation.runtime_high_s", sim([](auto& s) {
                     return s.runtime_interval ? nlohmann::json(s.runtime_interval->high_s)
                                               : nlohmann::json(nullptr);
                   }));
  row.emplace_back("simulation.pipeline_end_s", sim([](auto& s) { return s.pipeline_end_s; }));
  row.emplace_back("simulation.tokens_per_s",
                   sim([](auto& s) { return optional_json(s.tokens_per_s); }));
  row.emplace_back("simulation.mfu", sim([](auto& s) { return optional_json(s.mfu); }));
  row.emplace_back("simulation.hfu", sim([](auto& s) { return optional_json(s.hfu); }));
  row.emplace_back("simulation.flop_count", sim([](auto& s) { return s.flop_count; }));
  row.emplace_back("simulation.idle_ratio", sim([](auto& s) { return s.idle_ratio; }));
  row.emplace_back("simulation.span_idle_ratio", sim([](auto& s) { return s.span_idle_ratio; }));
  row.emplace_back("simulation.peak_memory_bytes",
                   sim([](auto& s) { return s.peak_memory_bytes; }));
  row.emplace_back("simulation.peak_memory_max_bytes",
                   sim([](auto& s) { return s.peak_memory_max(); }));
  row.emplace_back("simulation.peak_activation_bytes",
                   sim([](auto& s) { return s.peak_activation_bytes(); }));
  row.emplace_back("simulation.peak_activation_max_bytes",
                   sim([](auto& s) { return s.peak_activation_max_bytes(); }));
  row.emplace_back("simulation.over_capacity", sim([](auto& s) { return s.any_over_capacity(); }));
  row.emplace_back("simulation.exposed_comm_s", sim([](auto& s) { return s.exposed_comm_s; }));
  // The breakdown as shares of the runtime (per-device seconds are in the JSON).
  const auto breakdown = m ? m->breakdown() : SimulationMetrics::Breakdown{};
  const auto share = [&](double SimulationMetrics::Breakdown::*part) {
    return m ? json(breakdown.*part) : json(nullptr);
  };
  using B = SimulationMetrics::Breakdown;
  row.emplace_back("simulation.breakdown.compute", share(&B::compute));
  row.emplace_back("simulation.breakdown.tp_comm", share(&B::tp_comm));
  row.emplace_back("simulation.breakdown.expert_comm", share(&B::expert_comm));
  row.emplace_back("simulation.breakdown.host_overhead", share(&B::host_overhead));
  row.emplace_back("simulation.breakdown.comm_interference", share(&B::comm_interference));
  row.emplace_back("simulation.breakdown.bubble", share(&B::bubble));
  row.emplace_back("simulation.breakdown.exposed_pipeline", share(&B::exposed_pipeline));
  row.emplace_back("simulation.breakdown.reductions", share(&B::reductions));
  row.emplace_back("simulation.breakdown.optimizer", share(&B::optimizer));
  row.emplace_back("simulation.transfer_bytes", sim([](auto& s) { return s.transfer_bytes; }));
  row.emplace_back("simulation.error", text(e.simulation_error));
  return row;
}

std::vector<std::string> csv_header() {
  std::vector<std::string> names;
  for (auto& [key, value] : flat_record(Evaluation{}))
    names.push_back(std::move(key));
  return names;
}

namespace {

// The text of a flat value, unquoted.
void append_csv_value(std::string& out, const json& value) {
  switch (value.type()) {
    case json::value_t::null:
      return;
    case json::value_t::string:
      out += value.get_ref<const std::string&>();
      return;
    case json::value_t::boolean:
      out += value.get<bool>() ? "true" : "false";
      return;
    case json::value_t::number_float:
      fmt::format_to(std::back_inserter(out), "{}", value.get<double>());
      return;
    case json::value_t::array:
      for (std::size_t i = 0; i < value.size(); ++i) {
        if (i) out += ';';
        append_csv_value(out, value[i]);
      }
      return;
    default:
      out += value.dump();
  }
}

}  // namespace

std::string csv_cell(const json& value) {
  std::string out;
  append_csv_value(out, value);
  return out;
}

namespace {

// RFC 4180: a field with a comma, a quote or a line break is quoted, its quotes doubled.
void append_field(std::string& out, std::string_view field) {
  if (field.find_first_of(",\"\n\r") == std::string_view::npos) {
    out += field;
    return;
  }
  out += '"';
  for (char ch : field) {
    if (ch == '"') out += '"';
    out += ch;
  }
  out += '"';
}

}  // namespace

void append_csv_cell(std::string& line, const json& value) {
  const auto start = line.size();
  append_csv_value(line, value);
  if (line.find_first_of(",\"\n\r", start) == std::string::npos) return;
  const std::string cell = line.substr(start);
  line.resize(start);
  append_field(line, cell);
}

std::vector<std::string> csv_row(const Evaluation& e) {
  std::vector<std::string> cells;
  for (const auto& [key, value] : flat_record(e))
    cells.push_back(csv_cell(value));
  return cells;
}

std::string csv_line(const std::vector<std::string>& cells) {
  std::string out;
  for (std::size_t i = 0; i < cells.size(); ++i) {
    if (i) out += ',';
    append_field(out, cells[i]);
  }
  return out + '\n';
}

std::string summary(const Evaluation& e) {
  std::string out = fmt::format("{}: {} devices, {} stages, {} microbatches", e.schedule,
                                e.shape.devices, e.shape.stages, e.shape.microbatches);
  if (e.shape.chunks && *e.shape.chunks > 1) out += fmt::format(", {} chunks", *e.shape.chunks);
  if (e.shape.waves > 1) out += fmt::format(", {} waves", e.shape.waves);
  if (e.shape.pipelines > 1) out += fmt::format(", {} pipelines", e.shape.pipelines);
  if (!e.shape.variant.empty()) out += fmt::format(", variant {}", e.shape.variant);
  return out + fmt::format("; costs {} per device share", to_string(e.costs));
}

std::string to_text(const Evaluation& e) {
  std::string out = summary(e) + "\n\n";

  out += "formula (closed form)\n";
  if (!e.formula) {
    out += "  none: a user table has no schedule family\n";
  } else {
    const Formula& f = *e.formula;
    auto line = [&](const char* what, const std::optional<double>& value) {
      out += fmt::format("  {:<24}{}\n", what, value ? text_number(*value) : "-");
    };
    line("makespan", f.makespan);
    line("bubble ratio (global)", f.bubble_ratio);
    line("span bubble ratio", f.span_bubble_ratio);
    out += fmt::format("  {:<24}{}\n", "published bubble ratio",
                       f.published_bubble_ratio
                           ? fmt::format("{} ({})", text_number(*f.published_bubble_ratio),
                                         to_string(f.published_kind))
                           : "-");
    line("peak activation (M_a)", f.peak_activation_max());
    if (!f.source.empty()) out += fmt::format("  source: {}\n", f.source);
    if (!f.note.empty()) out += fmt::format("  note: {}\n", f.note);
  }
  out += "\ntable (idealized timing, zero communication)\n";
  out += fmt::format("  {:<24}{}\n", "makespan", text_number(e.table.makespan));
  out += fmt::format("  {:<24}{:.4f}\n", "bubble ratio (global)", e.table.bubble_ratio);
  out += fmt::format("  {:<24}{:.4f}\n", "span bubble ratio", e.table.span_bubble_ratio);
  out += fmt::format("  {:<24}{}\n", "peak activation (M_a)",
                     text_number(e.table.peak_activation_max()));
  // Offload counted at this level, its copies taken as on time.
  if (e.memory.offload > 0.0)
    out += fmt::format("  {:<24}{} of each stage's\n", "offloaded", text_number(e.memory.offload));
  if (e.memory.kept < 1.0) {
    out += fmt::format("  {:<24}{:.4f} of each forward's (offload inside the passes)\n", "kept",
                       e.memory.kept);
  }
  out += "  per device:   busy      idle  peak M_a   at time\n";
  for (std::size_t d = 0; d < e.table.busy.size(); ++d) {
    out += fmt::format("    dev {:<6}{:>8}  {:>8}  {:>8}  {:>8}\n", d, text_number(e.table.busy[d]),
                       text_number(e.table.idle[d]), text_number(e.table.peak_activation[d]),
                       text_number(e.table.peak_activation_time[d]));
  }
  if (e.simulation) {
    const auto& m = *e.simulation;
    out += fmt::format("\nsimulation (system {}, model {}{}{}{}; runtime {}: {})\n", m.system,
                       m.model, m.explicit_costs ? ", op times from --costs in seconds" : "",
                       m.contention ? "" : ", no contention",
                       m.blocking_send ? ", blocking sends" : "", m.runtime, m.runtime_chosen_by);
    out += fmt::format("  {:<24}{:.4f} s\n", "runtime", m.runtime_s);  // as the columns below
    if (m.runtime_interval) {
      out += wrap(interval_text(m) + (m.interval_note.empty() ? "" : "; " + m.interval_note),
                  kTextWidth, fmt::format("  {:<24}", "error bar"), std::string(26, ' '));
    } else if (!m.interval_note.empty()) {
      out += wrap(m.interval_note, kTextWidth, fmt::format("  {:<24}", "error bar"),
                  std::string(26, ' '));
    }
    out += fmt::format("  {:<24}{:.4f}\n", "idle ratio (global)", m.idle_ratio);
    out += fmt::format("  {:<24}{:.4f}\n", "span idle ratio", m.span_idle_ratio);
    out +=
        fmt::format("  {:<24}{:.4g} GB{}\n", "peak memory", m.peak_memory_max() / 1e9,
                    m.any_over_capacity() ? fmt::format("  (over the {:.4g} GB usable of a device)",
                                                        m.memory_capacity_bytes / 1e9)
                                          : "");
    out += "  per device:   compute s   exposed comm s   idle s   peak GB\n";
    for (std::size_t d = 0; d < m.compute_s.size(); ++d) {
      out += fmt::format("    dev {:<6}{:>10.4f}  {:>14.4f}  {:>7.4f}  {:>8.1f}{}\n", d,
                         m.compute_s[d], m.exposed_comm_s[d], m.idle_s[d],
                         m.peak_memory_bytes[d] / 1e9, m.over_capacity[d] ? "  over capacity" : "");
    }
  }
  if (!e.simulation_error.empty())
    out += fmt::format("\nsimulation not run: {}\n", e.simulation_error);
  return out;
}

}  // namespace pipetab
