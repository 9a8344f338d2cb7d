// `pipetab sweep` and `pipetab sensitivity`: many configurations at once, on every core.
#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <thread>

#include "commands.hpp"
#include "options.hpp"
#include "output_paths.hpp"
#include "progress.hpp"
#include "sweep_output.hpp"
#include <fmt/format.h>
#include <unistd.h>

#include "pipetab/error.hpp"
#include "pipetab/io/data_table.hpp"
#include "pipetab/io/table_file.hpp"
#include "pipetab/numeric.hpp"
#include "pipetab/report/output.hpp"
#include "pipetab/study/sensitivity.hpp"
#include "pipetab/study/sweep.hpp"
#include "pipetab/threads.hpp"

namespace pipetab::cli {

namespace {

// Set by SIGINT/SIGTERM (Ctrl-C, or a cluster scheduler's time limit): the sweep stops starting
// configurations, finishes those running and writes them. The handler resets itself, so a
// second signal ends the process at once.
std::atomic<bool> g_interrupted{false};
static_assert(std::atomic<bool>::is_always_lock_free);

extern "C" void on_interrupt(int) {
  g_interrupted.store(true);
}

class InterruptGuard {
 public:
  InterruptGuard() {
    g_interrupted.store(false);
    struct sigaction action {};
    action.sa_handler = on_interrupt;
    sigemptyset(&action.sa_mask);
    action.sa_flags = static_cast<int>(SA_RESETHAND);
    sigaction(SIGINT, &action, &old_int_);
    sigaction(SIGTERM, &action, &old_term_);
  }
  ~InterruptGuard() {
    sigaction(SIGINT, &old_int_, nullptr);
    sigaction(SIGTERM, &old_term_, nullptr);
  }
  InterruptGuard(const InterruptGuard&) = delete;
  InterruptGuard& operator=(const InterruptGuard&) = delete;

 private:
  struct sigaction old_int_ {};
  struct sigaction old_term_ {};
};

int default_threads() {
  return static_cast<int>(hardware_threads());
}

}  // namespace

Subcommand add_sweep(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "sweep",
      "Run a study (a grid of schedules, sizes, systems, models, cost ratios and network scale "
      "factors) in parallel; one row per configuration");
  struct State {
    std::string study, output, format, shard;
    int threads = default_threads();
    bool resume = false;
  };
  auto s = std::make_shared<State>();
  cmd->add_option("study", s->study, "the study file (TOML; see docs/studies.md)")->required();
  cmd->add_option("-o,--output", s->output,
                  "results file: CSV, or JSON Lines when it ends in .jsonl (- for stdout)")
      ->required();
  cmd->add_option("-j,--jobs", s->threads, "configurations run at once (default: all cores)")
      ->check(CLI::Range(1, 4096));
  cmd->add_option("--format", s->format, "csv or jsonl (default: from the output's extension)")
      ->check(CLI::IsMember({"csv", "jsonl"}));
  cmd->add_flag("--resume", s->resume,
                "continue an interrupted sweep: keep the rows in the output, run the rest");
  cmd->add_option("--shard", s->shard,
                  "run slice K of N (1-based, e.g. 3/8) of the study, for job arrays; the shards' "
                  "outputs concatenated in order equal the whole study's output");
  return {cmd, [s] {
            const auto& out = s->output;
            const bool to_stdout = out == "-";
            if (s->resume && to_stdout) throw Error("--resume needs an output file, not -");
            const std::string extension = std::filesystem::path(out).extension().string();
            const bool jsonl = s->format.empty() ? extension == ".jsonl" || extension == ".ndjson"
                                                 : s->format == "jsonl";
            const auto format = jsonl ? SweepFormat::JsonLines : SweepFormat::Csv;

            const SweepPlan plan(load_study(s->study));
            const auto total = static_cast<std::int64_t>(plan.configurations().size());
            const auto [k, n] = s->shard.empty() ? std::pair<std::int64_t, std::int64_t>{1, 1}
                                                 : parse_shard(s->shard);
            const auto [begin, end] = shard_range(total, k, n);
            const bool header = format == SweepFormat::Csv && k == 1;

            const auto inputs = study_inputs(plan.study());
            std::vector<std::string> sources;
            for (const auto& input : inputs)
              sources.push_back(input.source);
            refuse_output_over("--output", out, sources, "a file the study names");
            refuse_output_over("--output", sweep_record_path(out), sources,
                               "a file the study names (as its sweep record)");
            SweepOutput output(out, {format, fmt::format("{}/{}", k, n), inputs});
            std::int64_t done = 0;
            if (s->resume) {
              done = output.resume(plan, header, begin, end);
            } else {
              output.start();
            }
            // A resumed file that holds no byte yet (not even the header) starts like a new one.
            if (header && done == 0 && output.empty()) output.write(sweep_header(plan));

            Progress progress(end - begin, done);
            std::int64_t skipped = 0;
            const InterruptGuard guard;
            const auto ran = run_sweep(
                plan, begin + done, end, s->threads,
                [&](std::int64_t, SweepRow&& row) {
                  if (row[1] == "skipped") ++skipped;
                  output.write(format_row(plan, row, format));
                  progress.update(++done);
                },
                &g_interrupted);
            output.flush();
            progress.update(done, true);
            if (g_interrupted.load()) {
              throw Interrupted(fmt::format(
                  "interrupted: {} of {} rows in {}; run the same command with --resume to finish",
                  done, end - begin, to_stdout ? "standard output" : out));
            }
            if (progress.tty()) {
              std::fprintf(stderr,
                           "sweep: %lld configurations run (%lld skipped) in %.1f s -> %s\n",
                           static_cast<long long>(ran), static_cast<long long>(skipped),
                           progress.seconds(), to_stdout ? "stdout" : out.c_str());
            }
          }};
}

Subcommand add_sensitivity(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "sensitivity",
      "Perturb link bandwidth, latency and collective cost around one configuration: runtime "
      "range per schedule and every point where two schedules swap order");
  struct State {
    std::vector<std::string> names, tables;
    ScheduleOptions options;
    std::string format, output, bandwidth = "0.5:2", latency = "0.5:2", collective = "0.7:1.3";
    int steps = 5;
    double tolerance = 1e-3;
    int threads = default_threads();
  };
  auto s = std::make_shared<State>();
  cmd->add_option("names", s->names,
                  "schedules (default: gpipe 1f1b interleaved chimera chimera-asym hanayo)");
  cmd->add_option("--table", s->tables,
                  "table files (repeatable), beside the schedules named; with --table and no "
                  "names, only the tables");
  add_schedule_options(*cmd, s->options);
  add_simulation_options(*cmd, s->options);
  cmd->add_option("--bandwidth", s->bandwidth, "bandwidth factors LO:HI (geometric steps)")
      ->capture_default_str();
  cmd->add_option("--latency", s->latency, "latency factors LO:HI (geometric steps)")
      ->capture_default_str();
  cmd->add_option("--collective", s->collective,
                  "collective (all-reduce) byte factors LO:HI (even steps)")
      ->capture_default_str();
  cmd->add_option("--steps", s->steps, "values per axis (1 is always one of them)")
      ->check(CLI::Range(2, 101))
      ->capture_default_str();
  cmd->add_option("--tolerance", s->tolerance,
                  "runtimes within this relative difference count as tied")
      ->check(CLI::Range(0.0, 0.5))
      ->capture_default_str();
  cmd->add_option("-j,--jobs", s->threads, "simulations run at once (default: all cores)")
      ->check(CLI::Range(1, 4096));
  add_format(*cmd, s->format, {"text", "json", "csv"});
  cmd->add_option("-o,--output", s->output, "write to this file instead of stdout");
  return {cmd, [s] {
            if (s->options.costs_opt->count()) {
              throw Error(
                  "sensitivity: --costs does not apply: op times come from the model (give an "
                  "[explicit] model file for fixed times)");
            }
            auto range = [&](const std::string& text, const char* option, bool geometric) {
              double lo = 0.0, hi = 0.0;
              const auto colon = text.find(':');
              const std::string_view view(text);
              if (colon == std::string::npos ||
                  parse_number_prefix(view.substr(0, colon), lo) != colon ||
                  parse_number_prefix(view.substr(colon + 1), hi) != text.size() - colon - 1)
                throw Error(fmt::format("--{} {}: expected LO:HI, e.g. 0.5:2", option, text));
              try {
                return sensitivity_factors(lo, hi, s->steps, geometric);
              } catch (const Error& e) {
                throw Error(fmt::format("--{} {}", option, e.what()));
              }
            };
            const SensitivityAxes axes{range(s->bandwidth, "bandwidth", true),
                                       range(s->latency, "latency", true),
                                       range(s->collective, "collective", false)};
            Study study;
            for (const auto& name :
                 s->names.empty() && s->tables.empty() ? paper_schedules() : s->names) {
              study.schedules.emplace_back().name = std::string(find_schedule(name).name);
            }
            for (const auto& path : s->tables)
              study.schedules.emplace_back().table = path;
            const auto& o = s->options;
            study.devices = {o.devices};
            study.microbatches = {o.microbatches};
            if (o.chunks_opt->count()) study.chunks = {o.chunks};
            if (o.waves_opt->count()) study.waves = {o.waves};
            if (o.variant_opt->count()) study.variants = {o.variant};
            if (o.split_opt->count()) study.splits = {o.split};
            study.systems = {o.system};
            study.models = {o.model};
            (void)o.simulation();  // the flags checked against the model and system once
            study.settings = o.run.all();
            study.memory = o.memory();
            const auto result = run_sensitivity(std::move(study), axes, s->tolerance, s->threads);
            if (s->format == "json") {
              emit(s->output, to_json(result).dump(2) + "\n");
            } else if (s->format == "csv") {
              emit(s->output, to_csv(result));
            } else {
              emit(s->output, to_text(result));
            }
          }};
}

}  // namespace pipetab::cli
