// A study: a grid of configurations (schedules with their parameters × S × M × systems ×
// models × cost ratios × network scale factors) read from a TOML file, and its expansion into
// configurations in a fixed order. `sweep` runs it; `sensitivity` builds one in code.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "pipetab/io/config.hpp"
#include "pipetab/setting.hpp"
#include "pipetab/sim/engine.hpp"
#include "pipetab/sim/graph.hpp"
#include "pipetab/table/memory.hpp"

namespace pipetab {

/// One entry of a study's schedule list: a registered schedule with optional per-schedule axes
/// (empty: the grid's), or a table file.
struct StudySchedule {
  std::string name;   ///< registry name; empty for a table file
  std::string table;  ///< path of a table file (resolved against the study's folder)
  std::vector<std::int64_t> devices, microbatches;
  std::vector<std::int64_t> chunks, waves;
  std::vector<std::string> variants, splits;
};

/// A grid of configurations. Every axis is a list of values; the configurations are their
/// product, expanded by expand() in a fixed order.
struct Study {
  std::string file;  ///< where it was read from (for messages); empty when built in code
  std::string name;
  std::vector<StudySchedule> schedules;
  /// Pipeline depths and microbatch counts; required for named schedules (no default).
  std::vector<std::int64_t> devices, microbatches;
  /// Applied to the schedules that take them; empty: each schedule's default.
  std::vector<std::int64_t> chunks, waves;
  std::vector<std::string> variants, splits;
  std::vector<std::string> costs{""};  ///< table-level --costs strings; "" = the defaults
  bool simulate = true;
  std::vector<std::string> systems{"balanced"}, models{io::kDefaultModel};  ///< presets or paths
  std::vector<double> bandwidth_scale{1.0}, latency_scale{1.0}, collective_scale{1.0};
  /// [simulation]: the options every configuration is simulated with (sim/options.hpp), applied
  /// over each model's own defaults; the grid's collective_scale and costs come on top.
  std::vector<Setting> settings;
  MemoryOptions memory;
  /// Columns to write (see sweep_columns()); empty: all.
  std::vector<std::string> record;
};

/// The most configurations one study may expand to.
inline constexpr std::int64_t kMaxConfigurations = std::int64_t{1} << 26;

/// Reads a study file. Unknown keys, wrong types, out-of-range values, unknown schedules,
/// options a schedule does not take and unknown record columns throw ParseError naming the
/// file, line, column and key. Relative paths (tables, system and model files) are resolved
/// against the study file's folder.
Study parse_study(std::string_view text, const std::string& file);

/// Reads and parses a study file.
Study load_study(const std::string& path);

/// One point of a study's grid.
struct Configuration {
  std::int64_t index = 0;                      ///< position in the expansion order
  std::int32_t schedule = 0;                   ///< into Study::schedules
  std::int64_t devices = 0, microbatches = 0;  ///< 0 for a table file (the file sets them)
  std::optional<std::int64_t> chunks, waves;   ///< unset: the schedule's default
  std::optional<std::string> variant, split;
  std::int32_t costs = 0;                ///< into Study::costs
  std::int32_t system = -1, model = -1;  ///< into Study::systems/models; -1 when not simulated
  double bandwidth_scale = 1.0, latency_scale = 1.0, collective_scale = 1.0;
};

/// The study's configurations, in order: schedule (as listed), system, model, bandwidth scale,
/// latency scale, collective scale, costs, devices, chunks, waves, variant, split, microbatches
/// (the last varies fastest), each computed from its index on demand (mixed radix over the
/// axes), so that a sweep holds none of them: memory does not grow with the grid (2^26
/// configurations built up front took ~12 GB before the first row). Holds copies of the axes,
/// so it outlives the Study it was built from.
class ConfigurationSpace {
 public:
  ConfigurationSpace() = default;
  /// Throws Error when there are more than kMaxConfigurations.
  explicit ConfigurationSpace(const Study& study);

  std::size_t size() const noexcept { return static_cast<std::size_t>(total_); }
  /// Configuration `index` (< size()) of the order above.
  Configuration operator[](std::size_t index) const;

 private:
  // One study schedule: its first index, its count and its own axes (a table file has one
  // devices and microbatches value, 0; an option the schedule does not take, one unset value).
  struct Block {
    std::int64_t first = 0, count = 0;
    std::vector<std::int64_t> devices, microbatches;
    std::vector<std::optional<std::int64_t>> chunks, waves;
    std::vector<std::optional<std::string>> variants, splits;
  };
  std::vector<Block> blocks_;
  std::int64_t total_ = 0;
  bool simulate_ = true;
  std::int32_t systems_ = 1, models_ = 1, costs_ = 1;
  std::vector<double> bandwidth_, latency_, collective_;
};

/// All of ConfigurationSpace(study), materialized (for small studies and tests; a sweep uses
/// the space). Throws Error when there are more than kMaxConfigurations.
std::vector<Configuration> expand(const Study& study);

}  // namespace pipetab
