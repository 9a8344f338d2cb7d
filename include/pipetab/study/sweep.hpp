// Running a study: every configuration evaluated at the formula, table and (when the study asks)
// simulation levels, on several threads, rows delivered in the study's order whatever the
// thread count.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "pipetab/model/workload.hpp"
#include "pipetab/study/study.hpp"
#include "pipetab/system/system.hpp"
#include "pipetab/table/schedule_table.hpp"

namespace pipetab {

/// Every column a sweep row can hold: first the configuration (index, status, reason, system,
/// model, bandwidth_scale, latency_scale, collective_scale), then the evaluation's flattened
/// names (csv_header(): schedule, params.*, costs.*, formula.*, table.*, simulation.*).
std::vector<std::string> sweep_columns();

/// One row: values in SweepPlan::columns() order (null where unknown).
using SweepRow = std::vector<nlohmann::json>;

/// How rows are written.
enum class SweepFormat { Csv, JsonLines };

/// A study ready to run: its configurations, the systems, models and table files loaded once,
/// and the columns to write.
class SweepPlan {
 public:
  /// Loads what the study names; throws Error for a missing or broken file.
  explicit SweepPlan(Study study);

  const Study& study() const noexcept { return study_; }
  /// The configurations, each computed from its index on demand (none is held).
  const ConfigurationSpace& configurations() const noexcept { return configurations_; }
  /// index, status and reason, then the study's `record` columns (all when it has none).
  const std::vector<std::string>& columns() const noexcept { return columns_; }

  /// Evaluates one configuration. Parameters the schedule cannot run with (its constraints)
  /// give status "skipped" and the reason; the configuration's own values are still filled in.
  SweepRow run(const Configuration& configuration) const;

  /// The columns that identify a configuration and are written (used to check a file that a
  /// sweep resumes).
  std::vector<std::size_t> identity_columns() const;
  /// The values a configuration's row holds in identity_columns(), computed without running it.
  SweepRow identity(const Configuration& configuration) const;

 private:
  Study study_;
  ConfigurationSpace configurations_;
  std::vector<std::string> columns_;
  std::vector<std::size_t> picked_;  ///< for each column, its position in sweep_columns()
  std::vector<SystemConfig> systems_;
  std::vector<ModelConfig> models_;
  std::vector<ScheduleTable> tables_;  ///< per study schedule: the file's table, or empty
};

/// Runs configurations [begin, end) of `plan` on `threads` threads and hands each row to `sink`
/// on the calling thread, in index order. When `stop` becomes true no new configuration is
/// started; those started are finished and delivered, so the rows delivered are always
/// begin .. begin + count − 1. Returns the count. An internal error in a worker is rethrown here.
std::int64_t run_sweep(const SweepPlan& plan, std::int64_t begin, std::int64_t end, int threads,
                       const std::function<void(std::int64_t index, SweepRow&& row)>& sink,
                       const std::atomic<bool>* stop = nullptr);

/// The CSV header line of the plan's columns (with its newline).
std::string sweep_header(const SweepPlan& plan);

/// One row as a line (with its newline): a CSV record, or a JSON object keyed by column name.
std::string format_row(const SweepPlan& plan, const SweepRow& row, SweepFormat format);

/// Configurations [begin, end) of shard `k` of `n` (1-based): contiguous slices in order, so that
/// the shards' outputs concatenated in order are the whole study's output.
std::pair<std::int64_t, std::int64_t> shard_range(std::int64_t total, std::int64_t k,
                                                  std::int64_t n);

}  // namespace pipetab
