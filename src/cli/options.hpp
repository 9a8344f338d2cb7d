// The flags every schedule-taking subcommand shares (docs/design.md §7.3), and turning them into
// the table to evaluate.
#pragma once

#include <optional>
#include <span>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "pipetab/io/config.hpp"
#include "pipetab/io/job_file.hpp"
#include "pipetab/io/table_file.hpp"
#include "pipetab/report/simulation.hpp"
#include "pipetab/schedules/registry.hpp"
#include "pipetab/table/costs.hpp"
#include "pipetab/table/memory.hpp"

namespace pipetab::cli {

/// The options of a run (sim/options.hpp) given as flags, each as a setting in the order given.
struct RunFlags {
  std::vector<Setting> settings;
  /// --job FILE: a torchtitan job TOML or a Megatron-LM argument list (io/job_file.hpp), applied
  /// under the flags; --gpus: the GPU count, for a job file that leaves it implicit and to derive
  /// the data-parallel replicas.
  std::string job_path;
  std::optional<std::int64_t> gpus;

  /// The job file, read once (null without --job); what it read, ignored and noted is printed on
  /// stderr the first time.
  const io::JobFile* job() const;
  /// The job file's settings (but its GPU count), then the flags'.
  std::vector<Setting> all() const;

 private:
  mutable std::optional<io::JobFile> job_;
};

/// The subcommand this process runs (its name; "" when unknown): add_run_flags registers its ~50
/// flags on it alone, since CLI11 checks each new option against every option of its command and
/// registering them on every subcommand took a quarter of a short command's time. run() sets it.
void set_running_subcommand(std::string_view name);

/// Adds a flag for every option of sim/options.hpp that has one, but those in `except` (plan
/// searches them with flags of its own): each given flag appends its setting to `flags`; and
/// --job FILE, and --gpus unless `gpus` is false (plan has its own).
void add_run_flags(CLI::App& command, RunFlags& flags,
                   std::span<const std::string_view> except = {}, bool gpus = true);

/// `model` on `system` with the user-facing defaults, the model's own defaults (its notes printed
/// on stderr), the job file's settings and the flags applied, checked (require_runnable,
/// require_supported).
SimulationSetup run_setup(const RunFlags& flags, const std::string& model,
                          const std::string& system);

/// Values of the common flags, and which were given.
struct ScheduleOptions {
  std::int64_t devices = 4;
  std::int64_t microbatches = 8;
  std::int64_t chunks = 0;
  std::int64_t waves = 0;
  std::int64_t group_size = 0;
  std::string variant;
  std::string split;
  std::string costs;
  double input_grad_frees = 0.0;

  CLI::Option* devices_opt = nullptr;
  CLI::Option* microbatches_opt = nullptr;
  CLI::Option* chunks_opt = nullptr;
  CLI::Option* waves_opt = nullptr;
  CLI::Option* group_size_opt = nullptr;
  CLI::Option* variant_opt = nullptr;
  CLI::Option* split_opt = nullptr;
  CLI::Option* costs_opt = nullptr;

  // The simulation level (analyze, compare, simulate): the model and system, the run's options
  // (sim/options.hpp) as flags, the links scaled.
  std::string system = "balanced";
  std::string model = io::kDefaultModel;
  RunFlags run;
  double bandwidth_scale = 1.0, latency_scale = 1.0;  // of the system's links
  CLI::Option* system_opt = nullptr;

  /// The model and system loaded, the model's defaults, a job file's and the run's flags and
  /// --costs (op times in seconds) applied, the links scaled; the pipeline's depth the table's
  /// (-S, or a job file's pipeline_parallel), the data-parallel replicas from --gpus where no
  /// option gives them; checked (require_runnable, require_supported). `system` overrides
  /// --system.
  SimulationSetup simulation(const std::string* system = nullptr) const;

  /// The job and layout the model's defaults, a job file and the flags give (no system), with
  /// the pipeline's depth and the data-parallel replicas resolved as simulation() does.
  SimulationSetup run_values() const;

  /// The parameters as given; for schedules that do not take an option it is left out when
  /// `only_applicable` (compare applies -v to the schedules that have chunks, and so on).
  ScheduleParams params(const ScheduleInfo* info = nullptr, bool only_applicable = false) const;
  Costs parsed_costs() const;
  MemoryOptions memory() const;
  /// True if any of -S, -M, -v, -W, --group-size, --variant, --split was given.
  bool any_shape_flag() const;

 private:
  /// -S, or a job file's pipeline_parallel; and whether either gave it.
  std::int64_t pipeline_devices() const;
};

/// Every command's S and M when -S and -M are not given: the tabular-schedule paper's setting
/// (S = M = 8). One default for all commands: show, analyze and simulate used S = 4 while
/// compare and sensitivity used S = 8 (issue 14).
inline constexpr std::int64_t kDefaultDevices = 8, kDefaultMicrobatches = 8;

/// Adds -S -M -v -W --group-size --variant --split --costs --input-grad-frees to `command`.
void add_schedule_options(CLI::App& command, ScheduleOptions& options);

/// Adds --system, --model, every run option's flag (add_run_flags) and --bandwidth-scale,
/// --latency-scale to `command`.
void add_simulation_options(CLI::App& command, ScheduleOptions& options);

/// A table to evaluate: generated from a schedule name, or read from --table FILE.
struct Subject {
  std::string name;  ///< schedule name, or the file's path
  ScheduleTable table;
  std::optional<ResolvedParams> params;  ///< set for generated tables
  std::optional<io::TableFile> file;     ///< set for file tables
};

/// Generates the named schedule. Throws ParamError for impossible parameters.
Subject generated_subject(const std::string& name, const ScheduleOptions& options,
                          bool only_applicable);

/// Reads and validates a table file; -S/-M/... must not be given with it. Throws Error with
/// "FILE:LINE:COLUMN: ..." for the first problem.
Subject file_subject(const std::string& path, const ScheduleOptions& options);

/// Reads and validates a table file (whatever flags were given).
Subject file_subject(const std::string& path);

/// What show and analyze take: a schedule NAME or --table FILE, the common flags, -o FILE.
struct SubjectOptions {
  std::string name;
  std::string table;
  std::string output;
  ScheduleOptions schedule;
};

/// Adds NAME, --table, the common flags and -o to `command`.
void add_subject_options(CLI::App& command, SubjectOptions& options);

/// The subject of show/analyze: exactly one of NAME and --table must be given.
Subject one_subject(const SubjectOptions& options);

}  // namespace pipetab::cli
