// The flags every schedule-taking subcommand shares (docs/design.md §7.3), and turning them into
// the table to evaluate.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "pipetab/io/config.hpp"
#include "pipetab/io/table_file.hpp"
#include "pipetab/report/simulation.hpp"
#include "pipetab/schedules/registry.hpp"
#include "pipetab/table/costs.hpp"
#include "pipetab/table/memory.hpp"

namespace pipetab::cli {

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

  // The simulation level (analyze, compare, simulate).
  std::string system = "balanced";
  std::string model = io::kDefaultModel;
  std::int64_t data_parallel = 1;
  // The layout beyond --dp (one Layout once read: layout()).
  std::int64_t tensor_parallel = 0;  ///< 0: the model file's
  std::int64_t context_parallel = 1;
  bool sequence_parallel = false;
  std::int64_t expert_parallel = 1;
  std::int64_t expert_tensor_parallel = 1;
  std::string cp_method = "ring";
  bool fsdp = false;
  std::int64_t fsdp_shard = 0;
  std::string reshard_after_forward = "auto";
  std::string fsdp_grad_sync = "step";
  bool fsdp_fp8_all_gather = false;
  std::string fsdp_impl = "fsdp2";
  std::string pipeline_layout;
  bool no_contention = false;
  bool blocking_send = false;
  std::string runtime = "auto";
  std::string tp_overlap = "backward";
  bool a2a_overlap = false;
  bool no_optimizer = false;
  bool no_overheads = false;
  bool dp_overlap = false;
  double dp_bucket_mb = 25.0;
  double bandwidth_scale = 1.0, latency_scale = 1.0;  // of the system's links
  double nccl_buffsize = 4194304.0;
  bool distributed_optimizer = false;
  CLI::Option* system_opt = nullptr;
  CLI::Option* runtime_opt = nullptr;

  /// Loads the model and system and applies --dp, --no-contention, --blocking-send, --runtime,
  /// --tp-overlap, the iteration flags, and --costs (op times in seconds) when given. `system`
  /// overrides --system.
  SimulationSetup simulation(const std::string* system = nullptr) const;
  /// --tp, --cp, --cp-method, --dp and the FSDP flags as one value.
  Layout layout() const;

  /// The parameters as given; for schedules that do not take an option it is left out when
  /// `only_applicable` (compare applies -v to the schedules that have chunks, and so on).
  ScheduleParams params(const ScheduleInfo* info = nullptr, bool only_applicable = false) const;
  Costs parsed_costs() const;
  MemoryOptions memory() const;
  /// True if any of -S, -M, -v, -W, --group-size, --variant, --split was given.
  bool any_shape_flag() const;
};

/// Every command's S and M when -S and -M are not given: the tabular-schedule paper's setting
/// (S = M = 8). One default for all commands: show, analyze and simulate used S = 4 while
/// compare and sensitivity used S = 8 (issue 14).
inline constexpr std::int64_t kDefaultDevices = 8, kDefaultMicrobatches = 8;

/// Adds -S -M -v -W --group-size --variant --split --costs --input-grad-frees to `command`.
void add_schedule_options(CLI::App& command, ScheduleOptions& options);

/// Adds --system --model, the layout (--tp --cp --cp-method --dp --fsdp --fsdp-shard
/// --reshard-after-forward --fsdp-grad-sync --fsdp-fp8-all-gather --fsdp-impl), --no-contention
/// --blocking-send --runtime --tp-overlap --no-optimizer --dp-overlap --dp-bucket-mb
/// --distributed-optimizer to `command`.
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
