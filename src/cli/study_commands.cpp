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
#include "progress.hpp"
#include <fmt/format.h>
#include <unistd.h>

#include "pipetab/error.hpp"
#include "pipetab/io/data_table.hpp"
#include "pipetab/io/table_file.hpp"
#include "pipetab/report/output.hpp"
#include "pipetab/study/sensitivity.hpp"
#include "pipetab/study/sweep.hpp"

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
  return static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
}

// Where the last complete row ends: after the last line break outside a quoted CSV field.
std::size_t complete_rows_end(const std::string& text, bool csv) {
  std::size_t end = 0;
  bool quoted = false;
  for (std::size_t i = 0; i < text.size(); ++i) {
    if (csv && text[i] == '"') quoted = !quoted;
    if (text[i] == '\n' && !quoted) end = i + 1;
  }
  return end;
}

// Checks the rows a previous run of this shard wrote and returns how many there are; drops a
// partly written last row (a run killed mid-line). Throws Error if the file holds anything
// but a prefix of this shard's rows.
std::int64_t resume_point(const std::string& path, const SweepPlan& plan, SweepFormat format,
                          bool header, std::int64_t begin, std::int64_t end) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) return 0;
  std::string text = io::read_file(path);
  const bool csv = format == SweepFormat::Csv;
  const auto cut = complete_rows_end(text, csv);
  if (cut < text.size()) {
    text.resize(cut);
    std::filesystem::resize_file(path, cut, ec);
    if (ec)
      throw Error(fmt::format("{}: cannot drop its unfinished last row: {}", path, ec.message()));
  }
  const auto expected_header = sweep_header(plan);
  if (csv && header && !text.empty() && text.rfind(expected_header, 0) != 0) {
    throw Error(
        fmt::format("{}:1: the header is not this study's (columns: {}): resume only the "
                    "file this study and shard wrote",
                    path, expected_header.substr(0, expected_header.size() - 1)));
  }
  // A CSV shard after the first has no header of its own: read its rows under this study's.
  const auto table = io::parse_data_table(csv && !header ? expected_header + text : text, path);
  if (!table.rows.empty() && table.columns != plan.columns()) {
    throw Error(
        fmt::format("{}: its columns are not this study's: resume only the file this study "
                    "and shard wrote",
                    path));
  }
  const auto rows = static_cast<std::int64_t>(table.rows.size());
  if (rows > end - begin) {
    throw Error(
        fmt::format("{}: holds {} rows, more than the {} of this shard", path, rows, end - begin));
  }
  const auto identity = plan.identity_columns();
  for (std::int64_t i = 0; i < rows; ++i) {
    const auto& cfg = plan.configurations()[static_cast<std::size_t>(begin + i)];
    const auto expected = plan.identity(cfg);
    const auto& cells = table.rows[static_cast<std::size_t>(i)];
    for (std::size_t k = 0; k < identity.size(); ++k) {
      const auto c = identity[k];
      const auto want = csv_cell(expected[k]);
      if (cells[c] != want) {
        const int line = table.lines[static_cast<std::size_t>(i)] - (csv && !header ? 1 : 0);
        throw Error(fmt::format(
            "{}:{}: column '{}' holds '{}' where this study has '{}' (configuration {}): resume "
            "only the file this study and shard wrote, unchanged",
            path, line, plan.columns()[c], cells[c], want, cfg.index));
      }
    }
  }
  return rows;
}

// Appends whole lines to a file (or stdout), flushed one by one so that an interrupted sweep
// leaves only complete rows.
class RowWriter {
 public:
  RowWriter(const std::string& path, bool append) : path_(path) {
    if (path.empty() || path == "-") {
      file_ = stdout;
      return;
    }
    file_ = std::fopen(path.c_str(), append ? "ab" : "wb");
    if (file_ == nullptr)
      throw Error(fmt::format("cannot write {}: {}", path, std::strerror(errno)));
  }
  ~RowWriter() {
    if (file_ != nullptr && file_ != stdout) std::fclose(file_);
  }
  RowWriter(const RowWriter&) = delete;
  RowWriter& operator=(const RowWriter&) = delete;

  // Rows reach the file at least every 100 ms and at the end: a flush per row costs a system
  // call each (a tenth of a 10,000-row table-level sweep on this machine), and a run killed
  // between flushes leaves whole rows and perhaps a partial last one, which --resume drops.
  void write(const std::string& line) {
    if (std::fwrite(line.data(), 1, line.size(), file_) != line.size()) fail();
    const auto now = std::chrono::steady_clock::now();
    if (now - flushed_ >= std::chrono::milliseconds(100)) flush(now);
  }
  void flush(std::chrono::steady_clock::time_point now = std::chrono::steady_clock::now()) {
    if (std::fflush(file_) != 0) fail();
    flushed_ = now;
  }

 private:
  [[noreturn]] void fail() const {
    throw Error(fmt::format("cannot write {}: {}", path_, std::strerror(errno)));
  }
  std::string path_;
  std::FILE* file_ = nullptr;
  std::chrono::steady_clock::time_point flushed_ = std::chrono::steady_clock::now();
};

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

            std::int64_t done = 0;
            if (s->resume) done = resume_point(out, plan, format, header, begin, end);
            RowWriter writer(out, s->resume && done > 0);
            if (header && done == 0) {
              std::error_code ec;
              const bool had_header = s->resume && std::filesystem::exists(out, ec) &&
                                      std::filesystem::file_size(out, ec) > 0;
              if (!had_header) writer.write(sweep_header(plan));
            }

            Progress progress(end - begin, done);
            std::int64_t skipped = 0;
            const InterruptGuard guard;
            const auto ran = run_sweep(
                plan, begin + done, end, s->threads,
                [&](std::int64_t, SweepRow&& row) {
                  if (row[1] == "skipped") ++skipped;
                  writer.write(format_row(plan, row, format));
                  progress.update(++done);
                },
                &g_interrupted);
            writer.flush();
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
  cmd->add_option("--table", s->tables, "table files to add (repeatable)");
  add_schedule_options(*cmd, s->options, 8, 8);
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
              char tail = 0;
              if (std::sscanf(text.c_str(), "%lf:%lf%c", &lo, &hi, &tail) != 2)
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
              find_schedule(name);
              study.schedules.emplace_back().name = name;
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
            const auto setup = o.simulation();
            study.lowering = setup.lowering;
            study.sim = setup.options;
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
