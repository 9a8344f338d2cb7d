// pipetab accuracy and pipetab calibrate: predictions against measured runs, and a device's
// efficiencies fitted to a user's own measurements.
#include <algorithm>
#include <memory>
#include <thread>

#include "commands.hpp"
#include "options.hpp"
#include <fmt/format.h>
#include <fmt/ranges.h>

#include "pipetab/cost/breakdown.hpp"
#include "pipetab/io/config.hpp"
#include "pipetab/sim/graph.hpp"
#include "pipetab/study/accuracy.hpp"
#include "pipetab/study/calibrate.hpp"

namespace pipetab::cli {

namespace {
// The published runs of reference measurements.md (data/published-runs.toml, compiled in).
constexpr const char* kDefaultRuns = "published-runs";
}  // namespace

Subcommand add_accuracy(CLI::App& app) {
  struct Options {
    std::string file = kDefaultRuns;
    std::string runs = "all";
    std::string system;
    std::string format = "markdown";
    std::string output;
    unsigned threads = 0;
  };
  auto o = std::make_shared<Options>();
  auto* cmd = app.add_subcommand(
      "accuracy",
      "Predict measured training runs (a TOML file of runs; default: the published runs) from "
      "their system presets and report each run's error");
  cmd->add_option("runs", o->file,
                  "measured runs: a TOML file (format: data/published-runs.toml), or "
                  "published-runs, the built-in copy of that file")
      ->capture_default_str();
  cmd->add_option("--runs", o->runs,
                  "which runs: all, layers, profiles, iterations, ids:ID,ID,..., source:TEXT or "
                  "system:NAME (the runs on that system)")
      ->capture_default_str();
  cmd->add_option("--system", o->system,
                  "predict every run on this system preset or file instead of its own");
  add_format(*cmd, o->format, {"markdown", "csv", "json"});
  cmd->add_option("-o,--output", o->output, "write to this file instead of stdout");
  cmd->add_option("-j,--threads", o->threads, "threads (default: all cores)");
  return {cmd, [o] {
            const auto runs = select_runs(load_measurements(o->file), o->runs);
            std::optional<SystemConfig> system;
            if (!o->system.empty()) system = io::load_system(o->system);
            const auto report = predict(runs, system, o->threads);
            if (o->format == "json") {
              emit(o->output, to_json(report).dump(2) + "\n");
            } else if (o->format == "csv") {
              emit(o->output, accuracy_csv(report));
            } else {
              // Which errors these are: the built-in runs are the ones the presets' fitted
              // efficiencies were fitted on (experiments/accuracy), so their errors are in sample.
              const bool published = o->system.empty() && (o->file == "published-runs" ||
                                                           o->file == "data/published-runs.toml");
              emit(o->output,
                   accuracy_markdown(report) +
                       (published
                            ? "\nIn sample: the presets' fitted efficiencies (gemm.max_efficiency, "
                              "gemm.k_overhead, memory_efficiency) were fitted on these runs. Out "
                              "of sample, each run predicted from a fit on the others: pipetab "
                              "calibrate published-runs --system data/dgx-a100-datasheet.toml "
                              "--fit-on all --leave-one-out (results/accuracy-leave-one-out.txt).\n"
                            : "\nThese errors are in sample if the system was calibrated on "
                              "these runs; pipetab calibrate RUNS --leave-one-out gives the "
                              "out-of-sample error.\n"));
            }
          }};
}

namespace {

template <class Options>
void calibrate_gemm_command(const Options& o) {
  const auto probe = io::read_gemm_probe(o.gemm_probe);
  const SystemConfig base = io::load_system(o.system);
  GemmCalibrationOptions options;
  options.fit_on = o.fit_on;
  options.max_evaluations = o.max_evaluations;
  options.fit = o.fit;
  const auto c = calibrate_gemm(probe, base, options);
  const auto fit_label = [&](const GemmErrorSummary& s) {
    return o.max_evaluations == 0 ? "not fitted" : s.fitted ? "fitted" : "out of sample";
  };
  const auto& g = c.system.device.gemm;
  std::string values = fmt::format(
      "  gemm.max_efficiency  {:.4g}  (was {:.4g})\n  gemm.k_overhead      {:.4g}  (was {:.4g})\n",
      g.max_efficiency, base.device.gemm.max_efficiency, g.k_overhead, base.device.gemm.k_overhead);
  std::string errors;
  for (const auto& s : c.summaries) {
    errors += fmt::format("  {:<42} {:>5}  {:>6.2f}%  {:>7.2f}%  {}\n", s.group, s.count,
                          100 * s.mean_abs, 100 * s.max_abs, fit_label(s));
  }
  emit("", fmt::format("calibrated the GEMM model of {} on {} of the {} GEMMs of {}{} (fit on "
                       "{}; {} evaluations)\n{}\nerror of predicted GEMM times, |predicted / "
                       "measured - 1|:\n  {:<42} {:>5}  {:>7}  {:>8}\n{}",
                       base.name, c.fitted_samples, probe.gemms.size(), o.gemm_probe,
                       probe.device.empty() ? "" : " (" + probe.device + ")", o.fit_on,
                       c.evaluations, values, "group", "GEMMs", "mean", "max", errors));
  if (o.output.empty()) return;
  SystemConfig fitted = c.system;
  if (!o.name.empty()) fitted.name = o.name;
  std::string comment = fmt::format(
      "GEMM model calibrated by pipetab calibrate --gemm-probe {} --system {} --fit-on {}\n"
      "Every other constant as in {}, whose comments cite them.\nfitted values:\n{}"
      "error of predicted GEMM times:",
      o.gemm_probe, o.system, o.fit_on, base.name, values);
  for (const auto& s : c.summaries) {
    comment += fmt::format("\n  {}: mean {:.2f}%, max {:.2f}% ({} GEMMs, {})", s.group,
                           100 * s.mean_abs, 100 * s.max_abs, s.count, fit_label(s));
  }
  emit(o.output, io::system_toml(fitted, comment));
}

}  // namespace

Subcommand add_calibrate(CLI::App& app) {
  struct Options {
    std::string file = kDefaultRuns;
    std::string runs = "all";
    std::string system;
    std::vector<std::string> fit{"gemm.max_efficiency", "gemm.k_overhead", "memory_efficiency"};
    std::string fit_on = "all";
    bool leave_one_out = false;
    bool leave_one_source_out = false;
    std::string output;
    std::string name;
    int max_evaluations = 400;
    unsigned threads = 0;
    std::string gemm_probe;
  };
  auto o = std::make_shared<Options>();
  // Names padded to the longest and two spaces more, so none runs into its meaning.
  std::size_t width = 0;
  for (const auto& p : calibration_parameters())
    width = std::max(width, p.name.size() + 2);
  std::string parameters;
  for (const auto& p : calibration_parameters())
    parameters += fmt::format("\n  {:<{}}{}", p.name, width, p.meaning);
  auto* cmd = app.add_subcommand(
      "calibrate",
      "Fit a system's device efficiencies to measured runs (per-layer times or whole iterations) "
      "and write the calibrated system file");
  cmd->footer("Parameters (--fit):" + parameters);
  cmd->add_option("runs", o->file,
                  "measured runs: a TOML file (format: data/published-runs.toml), or "
                  "published-runs, the built-in copy of that file")
      ->capture_default_str();
  cmd->add_option("--runs", o->runs,
                  "which runs to consider at all (fitted on or reported): a selector as --fit-on "
                  "takes, or system:NAME, e.g. system:grand-teton-h100")
      ->capture_default_str();
  cmd->add_option("--system", o->system, "the system to start from (preset or file)")->required();
  cmd->add_option("--fit", o->fit, "parameters to fit, comma-separated")
      ->delimiter(',')
      ->capture_default_str();
  cmd->add_option("--fit-on", o->fit_on,
                  "which measurements to fit on: all, layers, profiles, iterations, ids:ID,ID,... "
                  "(the runs with those ids), source:TEXT (the runs whose source contains TEXT) "
                  "or system:NAME (the runs on that system)")
      ->capture_default_str();
  cmd->add_flag("--leave-one-out", o->leave_one_out,
                "also refit without each run and report its error out of sample");
  cmd->add_flag("--leave-one-source-out", o->leave_one_source_out,
                "also refit without each source's runs (their `source`: one paper's table, one "
                "framework's benchmark) and report their errors out of sample");
  cmd->add_option("-o,--output", o->output, "write the calibrated system file here");
  cmd->add_option("--name", o->name, "name of the calibrated system (default: the base's)");
  cmd->add_option("--max-evaluations", o->max_evaluations,
                  "evaluations of the fit at most (0: no fit, report the system's own errors)")
      ->check(CLI::Range(0, 100000))
      ->capture_default_str();
  cmd->add_option("-j,--threads", o->threads, "threads (default: all cores)");
  cmd->add_option("--gemm-probe", o->gemm_probe,
                  "instead of runs, fit the device's GEMM model (gemm.max_efficiency and "
                  "gemm.k_overhead, with the system's tiles and split-K) to a GPU probe's timed "
                  "matrix multiplies "
                  "(bench/gpu/run-device-probe; e.g. data/gpu/h100-sxm-probe.csv); --fit-on then "
                  "takes all, forward, input_grad or weight_grad, and --fit the GEMM parameters "
                  "of its list (the others keep the system's values)");
  return {cmd, [o] {
            if (!o->gemm_probe.empty()) return calibrate_gemm_command(*o);
            const auto runs = select_runs(load_measurements(o->file), o->runs);
            SystemConfig base = io::load_system(o->system);
            CalibrationOptions options;
            options.fit = o->fit;
            options.fit_on = o->fit_on;
            options.leave_one_out = o->leave_one_out;
            options.leave_one_source_out = o->leave_one_source_out;
            options.max_evaluations = o->max_evaluations;
            options.threads = o->threads;
            const auto c = calibrate(runs, base, options);
            std::string report =
                fmt::format("calibrated {} on {} measurements of {} (fit on {}; {} evaluations)\n",
                            base.name, c.measurements, o->file, o->fit_on, c.evaluations);
            for (const auto& [name, value] : c.values) {
              report += fmt::format("  {:<30} {:.6g}  (was {:.6g})\n", name, value,
                                    parameter_value(base, name));
            }
            for (const auto& u : c.unidentified) {
              report += fmt::format("  {:<30} not identified, kept at {:.6g}: {}\n", u.name,
                                    parameter_value(base, u.name), u.reason);
            }
            report += "\n" + accuracy_markdown(c.fit);
            if (!c.left_out.predictions.empty()) {
              report += "\nleave-one-out: each run predicted by a fit made without it\n\n" +
                        accuracy_markdown(c.left_out);
            }
            if (!c.sources_left_out.predictions.empty()) {
              report +=
                  "\nleave-one-source-out: each run predicted by a fit made without its "
                  "source's runs\n\n" +
                  accuracy_markdown(c.sources_left_out);
            }
            emit("", report);
            if (!o->output.empty()) {
              SystemConfig fitted = c.system;
              if (!o->name.empty()) fitted.name = o->name;
              std::string comment = fmt::format(
                  "Calibrated by pipetab calibrate {} --system {} --fit {} --fit-on {}\n"
                  "Every other constant as in {}, whose comments cite them.\n"
                  "from {}: {} measurements, fitted values:",
                  o->file, o->system, fmt::join(o->fit, ","), o->fit_on, o->system, base.name,
                  c.measurements);
              for (const auto& [name, value] : c.values)
                comment += fmt::format("\n  {} = {:.6g} (was {:.6g})", name, value,
                                       parameter_value(base, name));
              for (const auto& u : c.unidentified)
                comment += fmt::format("\n  {} not identified by these runs, kept at {:.6g}",
                                       u.name, parameter_value(base, u.name));
              for (const auto& s : c.fit.summaries) {
                comment += fmt::format("\nerror on {}: mean {:.2f}%, max {:.2f}% ({} runs)",
                                       s.group, 100 * s.mean_abs, 100 * s.max_abs, s.count);
              }
              emit(o->output, io::system_toml(fitted, comment));
            }
          }};
}

Subcommand add_cost(CLI::App& app) {
  struct Options {
    std::string model = io::kDefaultModel;
    std::string system = "dgx-h100";
    std::string format = "text";
    RunFlags run;
  };
  auto o = std::make_shared<Options>();
  auto* cmd = app.add_subcommand(
      "cost",
      "Show what one microbatch costs per operator on a system: each kernel of a transformer "
      "layer, the embedding and the output layer, per pass, with its FLOPs, bytes, efficiency "
      "and time");
  cmd->add_option("--model", o->model, "model preset or TOML file (a transformer)")
      ->capture_default_str();
  cmd->add_option("--system", o->system, "system preset or TOML file")->capture_default_str();
  add_run_flags(*cmd, o->run);
  add_format(*cmd, o->format, {"text", "json"});
  return {cmd, [o] {
            const auto setup = run_setup(o->run, o->model, o->system);
            const auto breakdown =
                cost::operator_breakdown(setup.model, setup.job, setup.layout, setup.system);
            emit("", o->format == "json" ? cost::to_json(breakdown).dump(2) + "\n"
                                         : cost::breakdown_text(breakdown));
          }};
}

}  // namespace pipetab::cli
