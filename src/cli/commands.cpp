#include "commands.hpp"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <limits>

#include "options.hpp"
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include "pipetab/error.hpp"
#include "pipetab/io/config.hpp"
#include "pipetab/io/table_export.hpp"
#include "pipetab/io/table_file.hpp"
#include "pipetab/model/stack.hpp"
#include "pipetab/report/block.hpp"
#include "pipetab/report/compare.hpp"
#include "pipetab/report/evaluation.hpp"
#include "pipetab/report/grid.hpp"
#include "pipetab/report/output.hpp"
#include "pipetab/report/text.hpp"
#include "pipetab/report/trace.hpp"
#include "pipetab/sim/error_bar.hpp"
#include "pipetab/sim/options.hpp"
#include "pipetab/study/plan.hpp"
#include "pipetab/table/comm_order.hpp"
#include "pipetab/table/timing.hpp"
#include "pipetab/table/validate.hpp"

namespace pipetab::cli {

void emit(const std::string& path, const std::string& text) {
  emit(path, [&text](std::ostream& out) {
    out.write(text.data(), static_cast<std::streamsize>(text.size()));
  });
}

void emit(const std::string& path, const std::function<void(std::ostream&)>& write) {
  if (!path.empty() && path != "-") {
    io::write_file(path, write);
    return;
  }
  write(std::cout);
  std::cout.flush();
  if (!std::cout) {
    std::cout.clear();
    throw Error(fmt::format("cannot write to standard output: {}", std::strerror(errno)));
  }
}

const std::vector<std::string>& paper_schedules() {
  static const std::vector<std::string> names = {"gpipe",   "1f1b",         "interleaved",
                                                 "chimera", "chimera-asym", "hanayo"};
  return names;
}

CLI::Option* add_format(CLI::App& command, std::string& format, std::vector<std::string> choices) {
  format = choices.front();
  return command
      .add_option("--format", format, fmt::format("output format: {}", fmt::join(choices, ", ")))
      ->check(CLI::IsMember(choices))
      ->capture_default_str();
}

std::string table_format_for(const std::string& path, const std::string& format) {
  if (!format.empty()) return format;
  return io::detect_format(path, "") == io::TableFormat::Json ? "json" : "csv";
}

void add_search_export_options(CLI::App& command, std::string& table_format, bool& force,
                               std::string& runnable_by, const std::string& searched) {
  command
      .add_option("--table-format", table_format,
                  "format of -t: csv, pytorch, pytorch-comms or json (default: by extension)")
      ->check(CLI::IsMember(io::export_formats()));
  command.add_flag("--force", force,
                   "write -t even where PyTorch cannot run the table as written (with a warning)");
  command
      .add_option("--runnable-by", runnable_by,
                  searched +
                      " only what this runtime can run: pytorch (each stage on one rank) "
                      "or megatron (its 1F1B and interleaved 1F1B)")
      ->check(CLI::IsMember({"pytorch", "megatron"}));
}

void export_table(const std::string& path, const ScheduleTable& table, const std::string& format,
                  const io::TableSource& source, bool force) {
  io::TableExport out;
  emit(path,
       [&](std::ostream& text) { out = io::export_table(table, format, source, force, text); });
  for (const auto& problem : out.forced)
    std::cerr << "warning: written with --force although " << problem << "\n";
  if (out.compute_only)
    std::cerr << "note: written compute-only: the table's communication order is left out\n";
  std::cerr << out.pytorch_note;
}

namespace {

// The paper's three systems (Figure 4), as pipetab defines them (configs/systems).
const std::vector<std::string> kRegimes = {"compute-bound", "balanced", "network-bound"};

// A JSON table whose "source" regenerates exactly this table is evaluated as that schedule.
void recognize(Subject& subject) {
  if (subject.file) subject.params = io::recognized_params(*subject.file);
}

Evaluation evaluate_subject(const Subject& s, const ScheduleOptions& o,
                            const SimulationSetup* simulation = nullptr, bool curves = false) {
  return evaluate(s.table, s.params ? &*s.params : nullptr, s.name, o.parsed_costs(),
                  {o.memory(), curves, simulation});
}

bool use_color(const std::string& mode, const std::string& output) {
  if (mode == "always") return true;
  if (mode == "never" || !(output.empty() || output == "-")) return false;
  const char* term = std::getenv("TERM");
  return isatty(fileno(stdout)) && std::getenv("NO_COLOR") == nullptr &&
         !(term != nullptr && std::string(term) == "dumb");
}

// The width to fold `show`'s grid to (docs/simulation.md "Pictures"): --width when given (0: no
// folding); otherwise, on a terminal, its width from COLUMNS or the TIOCGWINSZ ioctl; never when
// the output is a file or a pipe, so that what scripts read does not depend on a window's size.
std::int64_t grid_fold_width(std::int64_t width_option, const std::string& output) {
  if (width_option >= 0) return width_option;
  if (!(output.empty() || output == "-") || !isatty(fileno(stdout))) return 0;
  if (const char* columns = std::getenv("COLUMNS")) {
    char* end = nullptr;
    const long value = std::strtol(columns, &end, 10);
    if (end != columns && *end == '\0' && value > 0) return value;
  }
  winsize size{};
  if (ioctl(fileno(stdout), TIOCGWINSZ, &size) == 0 && size.ws_col > 0) return size.ws_col;
  return 0;
}

// A table row whose last column, `text`, folds under itself within kTextWidth columns.
std::string aligned(const std::string& row, std::string_view text) {
  return wrap(text, kTextWidth, row, std::string(text_columns(row), ' '));
}

// `pipetab list options`: every option of a run from its one definition (sim/options.hpp), with
// its key (files, settings, Python keywords, plan --search), flag, values and default.
std::string options_listing(bool json) {
  const SimulationSetup defaults = default_setup({}, {});
  nlohmann::json all = nlohmann::json::array();
  std::string out;
  OptionGroup group{};
  bool first = true;
  for (const RunOption& o : run_options()) {
    const bool numeric = o.type == OptionType::Integer || o.type == OptionType::Number;
    std::string values;
    if (o.type == OptionType::Choice) {
      values = fmt::format("{}", fmt::join(o.choices, "|"));
      // A long list wraps at its bars.
      if (values.size() > 60) values = fmt::format("{}", fmt::join(o.choices, " | "));
    } else if (o.type == OptionType::Boolean) {
      values = "true|false";
    } else if (o.type == OptionType::Tristate) {
      values = "auto|true|false";
    } else if (numeric) {
      values = fmt::format("{} {}{}..{}", to_string(o.type), o.above_min ? ">" : "", o.min, o.max);
    } else {
      values = std::string(to_string(o.type));
    }
    const std::string fallback = default_text(o, defaults);
    const auto plan_rule = unsearchable_option(o.key);
    if (json) {
      all.push_back(
          {{"key", o.key},
           {"flag", o.flag.empty() ? nlohmann::json(nullptr) : nlohmann::json(o.flag)},
           {"group", to_string(o.group)},
           {"type", to_string(o.type)},
           {"values", values},
           {"default", fallback},
           {"help", o.help},
           {"plan_search", plan_rule ? nlohmann::json(*plan_rule) : nlohmann::json(true)}});
      continue;
    }
    if (first || o.group != group) {
      out += fmt::format("{}{} options\n", first ? "" : "\n", to_string(o.group));
      group = o.group;
      first = false;
    }
    out += aligned(fmt::format("  {:<27} {:<28} ", o.key, o.flag.empty() ? "-" : o.flag),
                   values + (fallback.empty() ? "" : fmt::format(" (default {})", fallback)));
    out += aligned(std::string(30, ' '),
                   std::string(o.help) +
                       (o.flag_unit.empty() ? "" : fmt::format(" (the flag in {})", o.flag_unit)));
  }
  if (json) return all.dump(2) + "\n";
  out += "\n" + wrap(
                    "KEY is the option's name in job, study and runs files, in Python keywords and "
                    "in plan --search KEY=A,B (every option but plan's own dimensions, the degrees "
                    "it derives, runtime, pipeline_layout, balance_embedding and memory_reserve)");
  return out;
}

// A preset's title: its file's first comment line up to the first colon or parenthesis
// ("# Llama 3.1 70B (the Llama 3 70B architecture; ...": "Llama 3.1 70B").
std::string preset_title(std::string_view toml) {
  if (!toml.starts_with("# ")) return {};
  auto line = toml.substr(2, toml.find('\n') - 2);
  // A calibrated preset is calibrate's output, which begins with its command line.
  if (line.starts_with("Calibrated by pipetab calibrate"))
    return "fitted by pipetab calibrate on published runs";
  line = line.substr(0, std::min(line.find(':'), line.find(" (")));
  return std::string(line.substr(0, 60));
}

// `pipetab list models|systems`: each preset with what it is, one line each; JSON adds its
// whole TOML. Models: parameters (all experts; active for a mixture), layers, widths, experts,
// the default sequence. Systems: the GPU, its memory and dense BF16 peak, GPUs per node and the
// link bandwidths per direction.
std::string preset_listing(const std::string& kind, bool json) {
  const bool models = kind == "models";
  nlohmann::json all = nlohmann::json::array();
  std::string out =
      models
          ? fmt::format("{:<16}{:>9}{:>9}{:>7}{:>7}{:>6}{:>4}  {:<13}{:>7}  {}\n", "name", "params",
                        "active", "layers", "hidden", "heads", "kv", "experts", "seq", "what")
          : fmt::format("{:<18}{:<22}{:>7}{:>8}{:>6}{:>11}{:>11}  {}\n", "name", "GPU", "mem GB",
                        "BF16 TF", "/node", "intra GB/s", "inter GB/s", "what");
  for (const auto& name : models ? io::model_presets() : io::system_presets()) {
    const auto toml = io::preset_text(kind, name);
    nlohmann::json row = {{"name", name}, {"toml", toml}};
    const auto titled = [&](const std::string& description) {
      row["description"] = description.empty() ? preset_title(toml) : description;
      return row["description"].get<std::string>();
    };
    if (models) {
      const auto model = io::load_model(name);
      const auto title = titled(model.description);
      const auto* t = model.transformer();
      if (t == nullptr) continue;
      const Job job;
      const Layout layout;
      const Workload w{*t, job, layout};
      const double params = total_params(w);
      // Active: the same model with only top_k routed experts (the router's columns shrink
      // with them, 0.02% of DeepSeek-V3's active parameters).
      auto routed = *t;
      if (routed.moe) routed.moe->experts = routed.moe->top_k;
      const double active = total_params({routed, job, layout});
      std::string seq = "-";
      for (const auto& s : model.defaults)
        if (s.key == "seq_len") seq = s.value;
      const std::string experts =
          t->moe ? fmt::format("{} top-{}", t->moe->experts, t->moe->top_k) : "-";
      row.update({{"params", params},
                  {"active_params", active},
                  {"layers", t->layers},
                  {"hidden", t->hidden},
                  {"experts", t->moe ? t->moe->experts : 0}});
      out += aligned(fmt::format("{:<16}{:>8.3g}B{:>8.3g}B{:>7}{:>7}{:>6}{:>4}  {:<13}{:>7}  ",
                                 name, params / 1e9, active / 1e9, t->layers, t->hidden, t->heads,
                                 t->kv_heads > 0 ? t->kv_heads : t->heads, experts, seq),
                     title);
    } else {
      const auto system = io::load_system(name);
      const auto title = titled(system.description);
      const auto& d = system.device;
      const auto gbps = [](const LinkSpec& l) {
        return std::isfinite(l.bandwidth) ? fmt::format("{:.4g}", l.bandwidth / 1e9)
                                          : std::string("inf");
      };
      row.update({{"gpu", d.name},
                  {"memory_bytes", d.memory_bytes},
                  {"peak_bf16_flops", d.peak(Precision::BF16)},
                  {"devices_per_node", system.devices_per_node},
                  {"devices_per_host", system.host_size()}});
      out += aligned(
          fmt::format("{:<18}{:<22}{:>7.4g}{:>8.4g}{:>6}{:>11}{:>11}  ", name, d.name.substr(0, 21),
                      d.memory_bytes / 1e9, d.peak(Precision::BF16) / 1e12, system.devices_per_node,
                      gbps(system.intra), gbps(system.inter)),
          title);
    }
    all.push_back(std::move(row));
  }
  if (json) return all.dump(2) + "\n";
  out += "\n";
  out += wrap(
      models ? "params: all of them (a mixture's every expert); active: per token (top-k "
               "experts and the shared ones), as Megatron-LM counts them; seq: the preset's "
               "default --seq-len. --model also takes a Hugging Face id "
               "(meta-llama/Llama-3.1-70B), a config.json or a TOML file"
             : "mem: per GPU (a run uses it less what the CUDA context and NCCL hold outside the "
               "caching allocator, or less --memory-reserve); BF16 TF: dense peak; intra: "
               "per GPU and direction inside a node, inter: per GPU between nodes");
  return out;
}

}  // namespace

// The error bars' residuals and how their intervals fare with each run left out
// (docs/accuracy.md, "Error bars").
std::string error_bar_listing(bool json) {
  const auto residuals = builtin_residuals();
  const auto checks = check_intervals(residuals);
  if (json) {
    nlohmann::json out = nlohmann::json::array();
    for (const auto& c : checks) {
      out.push_back({{"regime", c.regime},
                     {"from", c.system},
                     {"low_factor", c.low_factor},
                     {"high_factor", c.high_factor},
                     {"runs", c.runs},
                     {"covered", c.covered}});
    }
    return out.dump(2) + "\n";
  }
  const auto fitted = std::count_if(residuals.begin(), residuals.end(),
                                    [](const Residual& r) { return r.fitted_on; });
  std::string out =
      wrap(fmt::format("90% intervals of a predicted runtime, from the {} published runs of "
                       "data/residuals.csv ({} a preset's constant was fitted on alone left out): "
                       "each as factors of the prediction, and how many runs, each predicted "
                       "without itself, fall inside theirs (on their own preset: from its other "
                       "runs; transferred, each preset's bias one draw of the presets': from the "
                       "other presets' runs; unchecked where those are too few to make one)",
                       residuals.size(), fitted));
  out += fmt::format("\n{:<20}{:<18}{:>22}{:>16}\n", "regime", "from", "interval", "inside");
  for (const auto& c : checks) {
    out += fmt::format(
        "{:<20}{:<18}{:>22}{:>16}\n", regime_words(c.regime), c.system,
        c.high_factor > 0 ? fmt::format("× {:.3f} to × {:.3f}", c.low_factor, c.high_factor)
                          : std::string("none"),
        c.runs > 0 ? fmt::format("{} of {}", c.covered, c.runs) : std::string("unchecked"));
  }
  return out;
}

// `pipetab list stacks`: each named stack, what it is, and the settings it stands for.
std::string stack_listing(bool json) {
  nlohmann::json all = nlohmann::json::array();
  std::string out = fmt::format("{:<20}{}\n", "name", "what");
  for (const auto& preset : stack_presets()) {
    nlohmann::json settings = nlohmann::json::object();
    std::vector<std::string> pairs;
    for (const auto& s : preset.settings) {
      settings[s.key] = s.value;
      pairs.push_back(fmt::format("{}={}", s.key, s.value));
    }
    all.push_back({{"name", preset.name},
                   {"description", preset.description},
                   {"source", preset.source},
                   {"settings", settings}});
    out += aligned(fmt::format("{:<20}", preset.name), std::string(preset.description));
    out += aligned(std::string(20, ' '), fmt::format("{}", fmt::join(pairs, " ")));
    out += aligned(std::string(20, ' '), fmt::format("from: {}", preset.source));
  }
  if (json) return all.dump(2) + "\n";
  out += "\n" + wrap(
                    "--stack NAME sets these options; any of them given beside it (a flag, a key "
                    "of the same file) wins over the stack's. Without --stack: pipetab's "
                    "defaults (`pipetab list options`), Megatron-Core's but for unfused "
                    "attention");
  return out;
}

Subcommand add_list(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "list",
      "List the schedules pipetab can generate, the model or system presets, or a run's options");
  auto format = std::make_shared<std::string>();
  auto what = std::make_shared<std::string>("schedules");
  cmd->add_option("what", *what,
                  "schedules, models or systems (the presets --model and --system take; JSON "
                  "gives each preset's TOML), options (every option of a run: its key, flag, "
                  "values and default), stacks (the named software stacks --stack takes), or "
                  "error-bars (the published runs each runtime's 90% interval comes from, and how "
                  "often a run left out falls inside it)")
      ->check(CLI::IsMember({"schedules", "models", "systems", "options", "stacks", "error-bars"}))
      ->capture_default_str();
  add_format(*cmd, *format, {"text", "json"});
  return {
      cmd, [format, what] {
        if (*what == "options") {
          emit("", options_listing(*format == "json"));
          return;
        }
        if (*what == "error-bars") {
          emit("", error_bar_listing(*format == "json"));
          return;
        }
        if (*what == "stacks") {
          emit("", stack_listing(*format == "json"));
          return;
        }
        if (*what != "schedules") {
          emit("", preset_listing(*what, *format == "json"));  // the presets' folders
          return;
        }
        if (*format == "json") {
          emit("", schedules_json().dump(2) + "\n");
          return;
        }
        std::string out;
        for (const auto* info : all_schedules()) {
          out += fmt::format("{:<16}{}\n", info->name, info->title);
          std::vector<std::string> options;
          if (info->default_chunks)
            options.push_back(fmt::format("-v (default {})", info->default_chunks));
          if (info->default_waves)
            options.push_back(fmt::format("-W (default {})", info->default_waves));
          if (info->takes_group_size) options.push_back("--group-size G (default S)");
          if (!info->variants.empty()) {
            options.push_back(fmt::format("--variant {} (default {})",
                                          fmt::join(info->variants, "|"), info->variants.front()));
          }
          if (!info->default_split.empty()) {
            options.push_back(fmt::format("--split E:L (default {})", info->default_split));
          }
          if (!options.empty())
            out += fmt::format("{:<16}options: {}\n", "", fmt::join(options, ", "));
          out += wrap(fmt::format("constraints: {}", info->constraints), kTextWidth,
                      std::string(16, ' '), std::string(18, ' '));
          out += wrap(fmt::format("source: {}", info->source), kTextWidth, std::string(16, ' '),
                      std::string(18, ' '));
        }
        emit("", out);
      }};
}

Subcommand add_show(CLI::App& app) {
  auto* cmd =
      app.add_subcommand("show",
                         "Draw a schedule as a device x time grid, or export its table (--format "
                         "csv|pytorch|pytorch-comms|json)");
  struct State {
    SubjectOptions subject;
    std::string format, color = "auto";
    bool force = false;
    std::int64_t width = -1;
  };
  auto s = std::make_shared<State>();
  add_subject_options(*cmd, s->subject);
  add_format(*cmd, s->format, {"text", "csv", "pytorch", "pytorch-comms", "json"});
  cmd->add_flag("--force", s->force,
                "export a table PyTorch cannot run as written, or losing what the format cannot "
                "hold (with a warning)");
  cmd->add_option("--color", s->color, "colour the grid: auto (on a terminal), always, never")
      ->check(CLI::IsMember({"auto", "always", "never"}))
      ->capture_default_str();
  cmd->add_option("--width", s->width,
                  "fold the grid into blocks at most N characters wide (0: never; default: the "
                  "terminal's width on a terminal, no folding into a file or pipe)")
      ->check(CLI::NonNegativeNumber);
  return {cmd, [s] {
            Subject subject = one_subject(s->subject);
            recognize(subject);
            const auto& output = s->subject.output;
            if (s->format != "text") {
              io::TableSource source;
              if (subject.params)
                source = {subject.params->schedule, io::params_json(*subject.params)};
              export_table(output, subject.table, s->format, source, s->force);
              return;
            }
            const auto evaluation = evaluate_subject(subject, s->subject.schedule);
            const auto timing = idealized_timing(subject.table, evaluation.costs);
            GridOptions grid;
            grid.color = use_color(s->color, output);
            grid.fold_width = grid_fold_width(s->width, output);
            std::string text = grid_header(evaluation) + "\n" +
                               render_grid(subject.table, timing, grid) + "\n" +
                               grid_legend(subject.table);
            // Schedules built from a repeated block (V-Half, V-Min) also show the block and
            // the lifespans that bound their memory.
            if (subject.params) {
              const auto& info = find_schedule(subject.params->schedule);
              if (info.block != nullptr) {
                text += "\n" + render_building_block(info.block(*subject.params),
                                                     evaluation.table.peak_activation);
              }
            }
            emit(output, text);
          }};
}

Subcommand add_analyze(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "analyze", "Evaluate one schedule at the formula, table and simulation levels");
  struct State {
    SubjectOptions subject;
    std::string format;
    bool curves = false;
  };
  auto s = std::make_shared<State>();
  add_subject_options(*cmd, s->subject);
  add_simulation_options(*cmd, s->subject.schedule);
  add_format(*cmd, s->format, {"text", "json", "csv"});
  cmd->add_flag(
      "--memory-curves", s->curves,
      "with --format json: add each device's activation memory over time (table.activation_curve: "
      "[time, M_a] points)");
  return {cmd, [s] {
            Subject subject = one_subject(s->subject);
            recognize(subject);
            const auto setup = s->subject.schedule.simulation();
            const auto e = evaluate_subject(subject, s->subject.schedule, &setup, s->curves);
            const auto& output = s->subject.output;
            if (s->format == "json") {
              emit(output, to_json(e).dump(2) + "\n");
            } else if (s->format == "csv") {
              emit(output, csv_line(csv_header()) + csv_line(csv_row(e)));
            } else {
              emit(output, to_text(e));
            }
          }};
}

Subcommand add_simulate(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "simulate",
      "Run a schedule over a modelled cluster: runtime, breakdown, memory, links, critical path");
  struct State {
    SubjectOptions subject;
    std::string format, trace, svg;
  };
  auto s = std::make_shared<State>();
  add_subject_options(*cmd, s->subject);
  add_simulation_options(*cmd, s->subject.schedule);
  add_format(*cmd, s->format, {"text", "json", "csv"});
  cmd->add_option("--trace", s->trace,
                  "write a Chrome Trace Event file (open in ui.perfetto.dev or chrome://tracing; "
                  "gzip-compressed when FILE ends in .gz)");
  cmd->add_option("--svg", s->svg, "write an SVG timeline of the run");
  return {cmd, [s] {
            Subject subject = one_subject(s->subject);
            recognize(subject);
            // Output limits are checked before the work, from the table alone (issue 14).
            if (!s->svg.empty()) {
              if (const auto refusal = timeline_svg_refusal(subject.table))
                throw Error(fmt::format("--svg {}: {}", s->svg, *refusal));
            }
            auto setup = s->subject.schedule.simulation();
            setup.options.record_memory = !s->trace.empty();
            const auto simulation = simulate_table(
                subject.table, setup,
                subject.params ? std::string_view(subject.params->schedule) : std::string_view());
            // The report first: a picture that fails to write does not lose it.
            const auto& output = s->subject.output;
            if (s->format == "json") {
              emit(output, simulation_json(subject.table, simulation).dump(2) + "\n");
            } else if (s->format == "csv") {
              auto e = evaluate_subject(subject, s->subject.schedule);
              e.simulation = simulation.metrics;
              emit(output, csv_line(csv_header()) + csv_line(csv_row(e)));
            } else {
              emit(output, simulation_text(subject.table, simulation));
            }
            if (!s->trace.empty()) {
              // Streamed to the file: memory bounded by a buffer, not by the trace's size.
              const auto stats = write_chrome_trace(s->trace, subject.table, simulation);
              std::fputs(trace_size_warning(s->trace, stats).c_str(), stderr);
            }
            if (!s->svg.empty()) {
              io::write_file(
                  s->svg,
                  timeline_svg(subject.table, simulation,
                               fmt::format("{} on {} ({}), S={} M={}", subject.name,
                                           setup.system.name, setup.model.name,
                                           subject.table.devices, subject.table.microbatches)));
            }
          }};
}

Subcommand add_compare(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "compare",
      "Compare schedules on the same S and M, ranked at each level (default: the paper's "
      "schedules, S = M = 8, on the compute-bound, balanced and network-bound systems)");
  struct State {
    std::vector<std::string> names, schedules, tables;
    std::string format, output;
    ScheduleOptions options;
  };
  auto s = std::make_shared<State>();
  cmd->add_option(
      "names", s->names,
      "schedules to compare (default: gpipe 1f1b interleaved chimera chimera-asym hanayo)");
  // plan's spelling of the same list, so a line moves between the two commands.
  cmd->add_option("--schedules", s->schedules,
                  "schedules to compare, as plan takes them (a,b,...), after those named")
      ->delimiter(',');
  cmd->add_option("--table", s->tables,
                  "table files to compare (repeatable), beside the schedules named; with --table "
                  "and no names, only the tables are compared");
  add_schedule_options(*cmd, s->options);
  add_simulation_options(*cmd, s->options);
  // Without --system, compare runs the three regimes: say so instead of "=balanced".
  s->options.system_opt->default_str("")->description(
      "system preset or TOML file (default: each of " +
      fmt::format("{}", fmt::join(kRegimes, ", ")) + ", one comparison each)");
  add_format(*cmd, s->format, {"text", "json", "csv"});
  cmd->add_option("-o,--output", s->output, "write to this file instead of stdout");
  return {
      cmd, [s] {
        s->names.insert(s->names.end(), s->schedules.begin(), s->schedules.end());
        const auto& names = s->names.empty() && s->tables.empty() ? paper_schedules() : s->names;
        for (const auto& name : names)
          find_schedule(name);  // unknown names are usage errors
        // One comparison per system: the one given, or the paper's three regimes.
        const std::vector<std::string> systems =
            s->options.system_opt->count() ? std::vector<std::string>{s->options.system} : kRegimes;
        std::vector<Comparison> comparisons;
        for (const auto& system : systems) {
          const auto setup = s->options.simulation(&system);
          std::vector<Evaluation> rows;
          std::vector<Skipped> skipped;
          for (const auto& name : names) {
            try {
              rows.push_back(
                  evaluate_subject(generated_subject(name, s->options, true), s->options, &setup));
            } catch (const ParamError& e) {
              std::string reason = e.what();
              if (reason.rfind(name + ": ", 0) == 0) reason = reason.substr(name.size() + 2);
              skipped.push_back({name, reason});
            }
          }
          for (const auto& path : s->tables) {
            Subject subject = file_subject(path);
            recognize(subject);
            const auto& t = subject.table;
            if (t.devices != s->options.devices || t.microbatches != s->options.microbatches) {
              skipped.push_back(
                  {path,
                   fmt::format("has S = {}, M = {}; the comparison is at S = {}, M = {}", t.devices,
                               t.microbatches, s->options.devices, s->options.microbatches)});
              continue;
            }
            rows.push_back(evaluate_subject(subject, s->options, &setup));
          }
          comparisons.push_back(compare(std::move(rows), std::move(skipped)));
        }
        std::string out;
        if (s->format == "json") {
          nlohmann::json all = nlohmann::json::array();
          for (const auto& c : comparisons)
            all.push_back(to_json(c));
          out = nlohmann::json{{"comparisons", std::move(all)}}.dump(2) + "\n";
        } else {
          for (std::size_t i = 0; i < comparisons.size(); ++i) {
            if (s->format == "csv") {
              out += to_csv(comparisons[i], i == 0);
            } else {
              out += fmt::format("{}== {}\n", i ? "\n" : "", comparisons[i].system) +
                     to_text(comparisons[i], i + 1 == comparisons.size());
            }
          }
        }
        emit(s->output, out);
      }};
}

// The reader ran the point-to-point check with every message within NCCL's buffer; whether a
// compute+comms file also runs with larger messages depends on the model's sizes.
static std::string large_message_note(const ScheduleTable& t) {
  SendSizes large;
  large.bytes = [](const CommAction&) { return std::numeric_limits<double>::infinity(); };
  const auto issue = check_p2p(t, t.comms, large, true);
  if (!issue) return "";
  return fmt::format(
      "note: it runs while each message fits NCCL's buffer (NCCL_BUFFSIZE, 4 MiB by default); "
      "with larger messages {}; simulate --table with the model checks its sizes\n",
      issue->message);
}

Subcommand add_validate(CLI::App& app) {
  auto* cmd = app.add_subcommand("validate", "Check a table file (PyTorch CSV or pipetab JSON)");
  struct State {
    std::string file, format;
  };
  auto s = std::make_shared<State>();
  cmd->add_option("file", s->file, "the table file")->required();
  add_format(*cmd, s->format, {"text", "json"});
  return {cmd, [s] {
            const auto file = io::load_table(s->file);
            const auto report = validate(file.table, 50);
            const auto& t = file.table;
            if (s->format == "json") {
              emit("", io::validation_json(s->file, file, report).dump(2) + "\n");
            } else {
              std::string out;
              for (const auto& issue : report.issues) {
                out += fmt::format("{}: {}\n", io::issue_location(file, issue), to_string(issue));
              }
              if (report.total > static_cast<std::int64_t>(report.issues.size())) {
                out += fmt::format("... and {} more\n",
                                   report.total - static_cast<std::int64_t>(report.issues.size()));
              }
              if (report.ok()) {
                out += fmt::format("{}: valid: {} devices, {} stages, {} microbatches, {} ops",
                                   s->file, t.devices, t.stages, t.microbatches, t.ops.size());
                if (t.pipelines() > 1) {
                  out += fmt::format(
                      ", {} pipelines{}", t.pipelines(),
                      file.format == io::TableFormat::Csv
                          ? " (read from the placement: microbatches whose stages sit on "
                            "different devices run in different pipelines)"
                          : "");
                }
                out += '\n' + large_message_note(t);
              }
              emit("", out);
            }
            if (!report.ok()) {
              throw Error(fmt::format("{}: invalid table ({} issue{})", s->file, report.total,
                                      report.total == 1 ? "" : "s"));
            }
          }};
}

Subcommand add_convert(CLI::App& app) {
  auto* cmd =
      app.add_subcommand("convert", "Convert a table file between PyTorch CSV and pipetab JSON");
  struct State {
    std::string file, to, output;
    bool force = false;
  };
  auto s = std::make_shared<State>();
  cmd->add_option("file", s->file, "the table file")->required();
  cmd->add_option("--to", s->to,
                  "target format: csv (PyTorch CSV, keeping a communication order), pytorch "
                  "(compute-only), pytorch-comms (with PyTorch's sends and receives), json")
      ->required()
      ->check(CLI::IsMember(io::export_formats()));
  cmd->add_option("-o,--output", s->output, "write to this file instead of stdout");
  cmd->add_flag("--force", s->force,
                "export a table PyTorch cannot run as written, or losing what the format cannot "
                "hold (with a warning)");
  return {cmd, [s] {
            const auto file = io::load_table(s->file);
            io::require_valid(file);
            export_table(s->output, file.table, s->to, file.source, s->force);
          }};
}

}  // namespace pipetab::cli
