// `pipetab tune`: the best valid table under a memory limit, by simulated runtime.
#include <memory>

#include "commands.hpp"
#include "options.hpp"
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "pipetab/error.hpp"
#include "pipetab/io/table_file.hpp"
#include "pipetab/io/table_json.hpp"
#include "pipetab/study/tune.hpp"

namespace pipetab::cli {
namespace {

std::string text_report(const TuneRequest& request, const TuneResult& r, std::size_t top,
                        const std::string& output) {
  const double capacity = request.setup.system.device.memory_bytes;
  std::string out =
      fmt::format("tune: S={} M={}, system {}, model {}, memory limit {} per device ({})\n",
                  request.devices, request.microbatches, request.setup.system.name,
                  request.setup.model.name, to_string(request.limit),
                  request.limit.unit == MemoryLimit::Unit::Activations ? "table-level activations"
                                                                       : "simulated total memory");
  out += fmt::format("  {} tables built, {} duplicates, {} simulated, {} within the limit\n",
                     r.generated, r.duplicates, r.candidates.size(),
                     std::count_if(r.candidates.begin(), r.candidates.end(),
                                   [](const TuneCandidate& c) { return c.fits; }));
  if (r.best < 0) {
    out += "  no candidate fits the limit\n";
  } else {
    const auto& best = r.candidates[static_cast<std::size_t>(r.best)];
    out += fmt::format("best: {}\n  runtime {:.6g} s, peak {:g} M_a, {:.4g} GB\n", best.name,
                       best.runtime_s, best.peak_activation, best.peak_memory_bytes / 1e9);
    if (over_device_memory(best, request.setup)) {
      out += fmt::format(
          "  warning: {:.4g} GB is over the {:.4g} GB of a {} device: this schedule cannot run "
          "there (search within it with --memory-limit {:.4g}GB, or use a smaller model)\n",
          best.peak_memory_bytes / 1e9, capacity / 1e9, request.setup.system.name, capacity / 1e9);
    }
    if (r.best_builtin >= 0) {
      const auto& b = r.candidates[static_cast<std::size_t>(r.best_builtin)];
      out += fmt::format("best built-in: {}\n  runtime {:.6g} s ({:+.2f}% for the best)\n", b.name,
                         b.runtime_s, 100.0 * (best.runtime_s / b.runtime_s - 1.0));
    } else {
      out += "best built-in: none fits the limit\n";
    }
    if (!output.empty()) out += fmt::format("table written to {}\n", output);
  }
  out += fmt::format("\n  {:>4}  {:>12}  {:>9}  {:>10}  {}\n", "rank", "runtime s", "peak M_a",
                     "peak GB", "schedule");
  for (std::size_t i = 0; i < r.candidates.size() && i < top; ++i) {
    const auto& c = r.candidates[i];
    out += fmt::format("  {:>4}  {:>12.6g}  {:>9g}  {:>10.4g}  {}{}{}\n", i + 1, c.runtime_s,
                       c.peak_activation, c.peak_memory_bytes / 1e9, c.name,
                       c.fits ? "" : "  (over the limit)",
                       over_device_memory(c, request.setup) ? "  (over device memory)" : "");
  }
  return out;
}

}  // namespace

Subcommand add_tune(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "tune",
      "Search schedule orders (built-ins and the zero-bubble heuristic family) for the shortest "
      "simulated runtime under a per-device memory limit; write the best table");
  struct State {
    ScheduleOptions options;
    std::string limit, format, output, table, table_format, runnable_by;
    std::size_t top = 10;
    bool no_builtins = false, force = false;
  };
  auto s = std::make_shared<State>();
  add_schedule_options(*cmd, s->options);
  add_simulation_options(*cmd, s->options);
  cmd->add_option("--memory-limit", s->limit,
                  "per device: activations in M_a (6, 6Ma; default S, the memory of 1F1B) or "
                  "total simulated bytes (80GB, 80GiB)");
  cmd->add_option("-t,--table-out", s->table,
                  "write the best table to this file (.csv: PyTorch pipelining CSV, .json)");
  add_search_export_options(*cmd, s->table_format, s->force, s->runnable_by, "search");
  cmd->add_option("--top", s->top, "candidates listed")->capture_default_str();
  cmd->add_flag("--no-builtins", s->no_builtins,
                "search the heuristic family only (the best built-in is then not compared)");
  add_format(*cmd, s->format, {"text", "json"});
  cmd->add_option("-o,--output", s->output, "write the report to this file instead of stdout");
  return {
      cmd, [s] {
        for (auto* opt : {s->options.chunks_opt, s->options.waves_opt, s->options.group_size_opt,
                          s->options.variant_opt, s->options.split_opt}) {
          if (opt->count()) {
            throw Error(fmt::format("tune: {} does not apply: the search varies it itself",
                                    opt->get_name()));
          }
        }
        TuneRequest request;
        request.devices = static_cast<std::int32_t>(
            std::clamp<std::int64_t>(s->options.devices, 0, std::int64_t{kMaxDevices} + 1));
        request.microbatches = static_cast<std::int32_t>(
            std::clamp<std::int64_t>(s->options.microbatches, 0, kMaxMicrobatches + 1));
        request.setup = s->options.simulation();
        request.memory = s->options.memory();
        request.limit = s->limit.empty() ? MemoryLimit{MemoryLimit::Unit::Activations,
                                                       static_cast<double>(request.devices)}
                                         : parse_memory_limit(s->limit);
        request.builtins = !s->no_builtins;
        if (!s->runnable_by.empty()) request.runnable_by = parse_runtime(s->runnable_by);
        const auto result = tune(request);
        if (result.best >= 0 && !s->table.empty()) {
          const auto& best = result.candidates[static_cast<std::size_t>(result.best)];
          io::TableSource source{"tune",
                                 {{"devices", request.devices},
                                  {"microbatches", request.microbatches},
                                  {"found", best.name}}};
          export_table(s->table, best.table, table_format_for(s->table, s->table_format), source,
                       s->force);
        }
        if (s->format == "json") {
          emit(s->output, to_json(request, result).dump(2) + "\n");
        } else {
          emit(s->output, text_report(request, result, s->top, s->table));
        }
        if (result.best < 0) {
          throw Error(fmt::format("tune: no schedule fits the memory limit of {}",
                                  to_string(request.limit)));
        }
      }};
}

}  // namespace pipetab::cli
