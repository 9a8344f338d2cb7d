#include "pipetab/study/study.hpp"

#include <algorithm>
#include <filesystem>
#include <stdexcept>
#include <tuple>

#include "../io/config_reader.hpp"
#include "../io/toml_reader.hpp"
#include "option_reader.hpp"
#include <fmt/format.h>
#include <fmt/ranges.h>

#include "pipetab/error.hpp"
#include "pipetab/io/config.hpp"
#include "pipetab/io/table_file.hpp"
#include "pipetab/schedules/registry.hpp"
#include "pipetab/study/sweep.hpp"
#include "pipetab/table/costs.hpp"

namespace pipetab {
namespace {

using io::Reader;

// Integer axes stay within the table limits' 32-bit sizes; a range may not explode the grid.
constexpr std::int64_t kMaxAxisValue = std::int64_t{1} << 31;
constexpr std::int64_t kMaxRangeValues = 1 << 20;

// The folder relative paths in the study are read against.
std::filesystem::path base_dir(const std::string& file) {
  return std::filesystem::path(file).parent_path();
}

class StudyParser {
 public:
  // [simulation]: the run's options (sim/options.hpp), as the flags of `simulate` set them: the
  // job's, the layout's and the simulation's, each checked where it is written.
  void read_simulation(const toml::table& sim, Study& s) {
    const std::string p = "simulation";
    SimulationSetup scratch;
    for (auto&& [key, node] : sim) {
      const std::string path = Reader::join(p, key.str());
      const RunOption* option = find_run_option(key.str());
      if (option == nullptr) {
        std::string keys;
        for (const auto& o : run_options())
          keys += fmt::format("{}{}", keys.empty() ? "" : ", ", o.key);
        r_.fail(key.source(), path, fmt::format("unknown key (expected: {})", keys));
      }
      s.settings.push_back(detail::option_setting(r_, node, path, *option));
      apply_setting(scratch, s.settings.back());
    }
    if (scratch.layout.fsdp.enabled && scratch.job.distributed_optimizer) {
      r_.fail(sim.get("fsdp")->source(), Reader::join(p, "fsdp"),
              "FSDP already shards the optimizer state: give fsdp or distributed_optimizer");
    }
    for (const char* key : {"fsdp_shard", "reshard_after_forward", "fsdp_grad_sync",
                            "fsdp_fp8_all_gather", "fsdp_impl"}) {
      if (!scratch.layout.fsdp.enabled && sim.get(key) != nullptr)
        r_.fail(sim.get(key)->source(), Reader::join(p, key), "needs fsdp = true");
    }
  }

  StudyParser(std::string_view text, const std::string& file) : r_(text, file), file_(file) {}

  Study parse() {
    const auto& root = r_.root();
    r_.only(root, "",
            {"name", "description", "simulate", "record", "grid", "simulation", "memory"});
    Study s;
    s.file = file_;
    s.name = r_.string(root, "", "name").value_or(std::filesystem::path(file_).stem().string());
    (void)r_.string(root, "", "description");
    s.simulate = r_.boolean(root, "", "simulate", true);

    const auto* grid = r_.table(root, "", "grid");
    if (grid == nullptr)
      r_.fail(root.source(), "grid", "missing (the [grid] table names the schedules)");
    read_grid(*grid, s);

    if (const auto* sim = r_.table(root, "", "simulation")) {
      if (!s.simulate) r_.fail(sim->source(), "simulation", "given, but simulate = false");
      read_simulation(*sim, s);
    }
    if (const auto* memory = r_.table(root, "", "memory")) {
      r_.only(*memory, "memory", {"input_grad_frees"});
      s.memory.input_grad_frees =
          r_.number(*memory, "memory", "input_grad_frees", 0.0, 0.0, 1.0, false);
    }
    if (const auto* record = root.get("record")) {
      const auto columns = sweep_columns();
      s.record = strings(*record, "record");
      const auto* array = record->as_array();
      for (std::size_t i = 0; i < s.record.size(); ++i) {
        if (std::find(columns.begin(), columns.end(), s.record[i]) == columns.end()) {
          r_.fail((*array)[i].source(), "record",
                  fmt::format("unknown column '{}' (columns: {})", s.record[i],
                              fmt::join(columns, ", ")));
        }
        if (!s.simulate && s.record[i].rfind("simulation.", 0) == 0) {
          r_.fail((*array)[i].source(), "record",
                  fmt::format("column '{}' needs simulate = true", s.record[i]));
        }
      }
    }
    return s;
  }

 private:
  void read_grid(const toml::table& g, Study& s) {
    const std::string p = "grid";
    r_.only(g, p,
            {"schedules", "devices", "microbatches", "chunks", "waves", "variants", "splits",
             "costs", "systems", "models", "bandwidth_scale", "latency_scale", "collective_scale"});
    const auto& list = r_.require(g, p, "schedules");
    const auto* array = list.as_array();
    if (array == nullptr || array->empty()) {
      r_.fail(list.source(), "grid.schedules",
              "expected a non-empty array of schedule names or tables like { name = \"hanayo\", "
              "waves = [1, 2] } or { table = \"mine.csv\" }");
    }
    for (std::size_t i = 0; i < array->size(); ++i)
      s.schedules.push_back(schedule((*array)[i], fmt::format("grid.schedules[{}]", i)));

    if (const auto* n = g.get("devices")) s.devices = integers(*n, "grid.devices");
    if (const auto* n = g.get("microbatches")) s.microbatches = integers(*n, "grid.microbatches");
    option_axis(g, "chunks", s, &ScheduleInfo::default_chunks, s.chunks);
    option_axis(g, "waves", s, &ScheduleInfo::default_waves, s.waves);
    if (const auto* n = g.get("variants")) {
      s.variants = strings(*n, "grid.variants");
      require_taken(*n, "grid.variants", s,
                    [](const ScheduleInfo& i) { return !i.variants.empty(); });
      for (const auto& entry : s.schedules) {
        if (entry.name.empty()) continue;
        const auto& info = find_schedule(entry.name);
        if (info.variants.empty() || !entry.variants.empty()) continue;
        for (std::size_t k = 0; k < s.variants.size(); ++k)
          check_variant(info, s.variants[k], (*n->as_array())[k], "grid.variants");
      }
    }
    if (const auto* n = g.get("splits")) {
      s.splits = strings(*n, "grid.splits");
      require_taken(*n, "grid.splits", s,
                    [](const ScheduleInfo& i) { return !i.default_split.empty(); });
    }
    if (const auto* n = g.get("costs")) {
      s.costs = strings(*n, "grid.costs");
      for (std::size_t k = 0; k < s.costs.size(); ++k) {
        try {
          (void)parse_costs(s.costs[k]);
        } catch (const Error& e) {
          r_.fail((*n->as_array())[k].source(), "grid.costs", e.what());
        }
      }
    }
    const bool network_axes = g.get("systems") || g.get("models") || g.get("bandwidth_scale") ||
                              g.get("latency_scale") || g.get("collective_scale");
    if (!s.simulate && network_axes) {
      for (const char* key :
           {"systems", "models", "bandwidth_scale", "latency_scale", "collective_scale"}) {
        if (const auto* n = g.get(key)) {
          r_.fail(n->source(), fmt::format("grid.{}", key),
                  "applies to the simulation level, and simulate = false");
        }
      }
    }
    if (const auto* n = g.get("systems")) s.systems = configs(*n, "grid.systems", "systems");
    if (const auto* n = g.get("models")) s.models = configs(*n, "grid.models", "models");
    if (const auto* n = g.get("bandwidth_scale"))
      s.bandwidth_scale = scales(*n, "grid.bandwidth_scale");
    if (const auto* n = g.get("latency_scale")) s.latency_scale = scales(*n, "grid.latency_scale");
    if (const auto* n = g.get("collective_scale"))
      s.collective_scale = scales(*n, "grid.collective_scale");
    // Pipeline depths and microbatch counts have no default: a study that left them out used to
    // run S = 4, M = 8 without a word (issue 14). A table file brings its own.
    for (std::size_t i = 0; i < s.schedules.size(); ++i) {
      const auto& entry = s.schedules[i];
      if (entry.name.empty()) continue;
      for (const auto& [key, own, grid] :
           {std::tuple{"devices", &entry.devices, &s.devices},
            std::tuple{"microbatches", &entry.microbatches, &s.microbatches}}) {
        if (own->empty() && grid->empty()) {
          r_.fail(g.source(), fmt::format("grid.{}", key),
                  fmt::format("missing: say which {} to run (e.g. {} = [4, 8]), in the grid or "
                              "in the entry of schedule '{}'",
                              std::string_view(key) == "devices" ? "pipeline depths S"
                                                                 : "microbatch counts M",
                              key, entry.name));
        }
      }
    }
  }

  StudySchedule schedule(const toml::node& node, const std::string& path) {
    StudySchedule entry;
    if (const auto* name = node.as_string()) {
      entry.name = name->get();
      known(entry.name, node, path);
      return entry;
    }
    const auto* t = node.as_table();
    if (t == nullptr) {
      r_.fail(node.source(), path,
              fmt::format("expected a schedule name or a table, got {}", io::type_name(node)));
    }
    r_.only(*t, path,
            {"name", "table", "devices", "microbatches", "chunks", "waves", "variants", "splits"});
    const auto name = r_.string(*t, path, "name");
    const auto table = r_.string(*t, path, "table");
    if (name.has_value() == table.has_value())
      r_.fail(t->source(), path, "expected exactly one of the keys 'name' and 'table'");
    if (table) {
      for (const char* key : {"devices", "microbatches", "chunks", "waves", "variants", "splits"}) {
        if (const auto* n = t->get(key)) {
          r_.fail(n->source(), fmt::format("{}.{}", path, key),
                  "a table file sets its own sizes and options");
        }
      }
      entry.table = resolve_path(*table);
      try {
        (void)io::load_table(entry.table);
      } catch (const Error& e) {
        r_.fail(t->get("table")->source(), path + ".table", e.what());
      }
      return entry;
    }
    entry.name = *name;
    const auto& info = known(entry.name, *t->get("name"), path + ".name");
    auto takes = [&](const char* key, bool taken) {
      const auto* n = t->get(key);
      if (n != nullptr && !taken) {
        r_.fail(n->source(), fmt::format("{}.{}", path, key),
                fmt::format("{} does not take {}", entry.name, key));
      }
      return n;
    };
    if (const auto* n = t->get("devices")) entry.devices = integers(*n, path + ".devices");
    if (const auto* n = t->get("microbatches"))
      entry.microbatches = integers(*n, path + ".microbatches");
    if (const auto* n = takes("chunks", info.default_chunks > 0))
      entry.chunks = integers(*n, path + ".chunks");
    if (const auto* n = takes("waves", info.default_waves > 0))
      entry.waves = integers(*n, path + ".waves");
    if (const auto* n = takes("variants", !info.variants.empty())) {
      entry.variants = strings(*n, path + ".variants");
      for (std::size_t k = 0; k < entry.variants.size(); ++k)
        check_variant(info, entry.variants[k], (*n->as_array())[k], path + ".variants");
    }
    if (const auto* n = takes("splits", !info.default_split.empty()))
      entry.splits = strings(*n, path + ".splits");
    return entry;
  }

  const ScheduleInfo& known(const std::string& name, const toml::node& node,
                            const std::string& path) const {
    try {
      return find_schedule(name);
    } catch (const Error& e) {
      r_.fail(node.source(), path, e.what());
    }
  }

  void check_variant(const ScheduleInfo& info, const std::string& variant, const toml::node& node,
                     const std::string& path) const {
    if (std::find(info.variants.begin(), info.variants.end(), variant) == info.variants.end()) {
      r_.fail(node.source(), path,
              fmt::format("{} has no variant '{}' (variants: {})", info.name, variant,
                          fmt::join(info.variants, ", ")));
    }
  }

  // A grid-level option axis must be taken by at least one listed schedule, or it is a mistake.
  template <class Taken>
  void require_taken(const toml::node& node, const std::string& path, const Study& s,
                     Taken&& taken) const {
    for (const auto& entry : s.schedules) {
      if (!entry.name.empty() && taken(find_schedule(entry.name))) return;
    }
    r_.fail(node.source(), path, "no schedule of the study takes this option");
  }

  void option_axis(const toml::table& g, const char* key, const Study& s,
                   std::int32_t ScheduleInfo::*default_value, std::vector<std::int64_t>& out) {
    const auto* n = g.get(key);
    if (n == nullptr) return;
    const auto path = fmt::format("grid.{}", key);
    out = integers(*n, path);
    require_taken(*n, path, s, [&](const ScheduleInfo& i) { return i.*default_value > 0; });
  }

  const toml::array& array_of(const toml::node& node, const std::string& path) const {
    const auto* array = node.as_array();
    if (array == nullptr) {
      r_.fail(node.source(), path, fmt::format("expected an array, got {}", io::type_name(node)));
    }
    if (array->empty()) r_.fail(node.source(), path, "expected at least one value");
    return *array;
  }

  // An array of whole numbers ≥ 1, or a range { from, to, step } (arithmetic) or
  // { from, to, times } (geometric, e.g. microbatches 8, 16, ..., 256).
  std::vector<std::int64_t> integers(const toml::node& node, const std::string& path) const {
    std::vector<std::int64_t> out;
    if (const auto* t = node.as_table()) {
      r_.only(*t, path, {"from", "to", "step", "times"});
      const auto from = r_.integer(*t, path, "from", std::nullopt, 1, kMaxAxisValue);
      const auto to = r_.integer(*t, path, "to", std::nullopt, from, kMaxAxisValue);
      const bool step = t->get("step") != nullptr, times = t->get("times") != nullptr;
      if (step == times) r_.fail(t->source(), path, "expected exactly one of 'step' and 'times'");
      const auto by = step ? r_.integer(*t, path, "step", std::nullopt, 1, kMaxAxisValue)
                           : r_.integer(*t, path, "times", std::nullopt, 2, 1 << 20);
      for (std::int64_t v = from; v <= to; v = step ? v + by : v * by) {
        out.push_back(v);
        if (static_cast<std::int64_t>(out.size()) > kMaxRangeValues) {
          r_.fail(t->source(), path,
                  fmt::format("the range has more than {} values", kMaxRangeValues));
        }
      }
      return out;
    }
    const auto& array = array_of(node, path);
    for (const auto& element : array) {
      if (!element.is_integer()) {
        r_.fail(element.source(), path,
                fmt::format("expected whole numbers, got {}", io::type_name(element)));
      }
      const auto v = element.as_integer()->get();
      if (v < 1 || v > kMaxAxisValue) {
        r_.fail(element.source(), path,
                fmt::format("{} is out of range (1..{})", v, kMaxAxisValue));
      }
      out.push_back(v);
    }
    return out;
  }

  std::vector<std::string> strings(const toml::node& node, const std::string& path) const {
    std::vector<std::string> out;
    for (const auto& element : array_of(node, path)) {
      if (!element.is_string()) {
        r_.fail(element.source(), path,
                fmt::format("expected strings, got {}", io::type_name(element)));
      }
      out.push_back(element.as_string()->get());
    }
    return out;
  }

  // Scale factors: positive, finite, at most 10^6.
  std::vector<double> scales(const toml::node& node, const std::string& path) const {
    std::vector<double> out;
    for (const auto& element : array_of(node, path)) {
      double v = 0.0;
      if (element.is_integer()) {
        v = static_cast<double>(element.as_integer()->get());
      } else if (element.is_floating_point()) {
        v = element.as_floating_point()->get();
      } else {
        r_.fail(element.source(), path,
                fmt::format("expected numbers, got {}", io::type_name(element)));
      }
      if (!(v > 0.0 && v <= 1e6))
        r_.fail(element.source(), path, fmt::format("{} is out of range (above 0 .. 1e6)", v));
      out.push_back(v);
    }
    return out;
  }

  // Presets or TOML files (relative to the study); each is loaded now, so that a broken one is
  // reported before anything runs.
  std::vector<std::string> configs(const toml::node& node, const std::string& path,
                                   std::string_view kind) const {
    auto values = strings(node, path);
    const auto& array = *node.as_array();
    for (std::size_t k = 0; k < values.size(); ++k) {
      if (io::preset_text(kind, values[k]).empty()) values[k] = resolve_path(values[k]);
      try {
        if (kind == "systems") {
          (void)io::load_system(values[k]);
        } else {
          (void)io::load_model(values[k]);
        }
      } catch (const Error& e) {
        r_.fail(array[k].source(), path, e.what());
      }
    }
    return values;
  }

  std::string resolve_path(const std::string& path) const {
    const std::filesystem::path p(path);
    if (p.is_absolute() || file_.empty()) return path;
    return (base_dir(file_) / p).lexically_normal().string();
  }

  Reader r_;
  std::string file_;
};

}  // namespace

Study parse_study(std::string_view text, const std::string& file) {
  return StudyParser(text, file).parse();
}

Study load_study(const std::string& path) {
  return parse_study(io::read_file(path), path);
}

ConfigurationSpace::ConfigurationSpace(const Study& study) : simulate_(study.simulate) {
  // Count first, so that an oversized grid is refused before anything is built.
  double total = 0.0;
  auto size = [](const auto& own, const auto& grid) {
    return static_cast<double>(own.empty() ? std::max<std::size_t>(grid.size(), 1) : own.size());
  };
  const double network =
      study.simulate
          ? static_cast<double>(study.systems.size() * study.models.size() *
                                study.bandwidth_scale.size() * study.latency_scale.size() *
                                study.collective_scale.size())
          : 1.0;
  for (const auto& entry : study.schedules) {
    double n = network * static_cast<double>(study.costs.size());
    if (entry.table.empty()) {
      const auto& info = find_schedule(entry.name);
      n *= size(entry.devices, study.devices) * size(entry.microbatches, study.microbatches);
      if (info.default_chunks > 0) n *= size(entry.chunks, study.chunks);
      if (info.default_waves > 0) n *= size(entry.waves, study.waves);
      if (!info.variants.empty()) n *= size(entry.variants, study.variants);
      if (!info.default_split.empty()) n *= size(entry.splits, study.splits);
    }
    total += n;
  }
  if (total > static_cast<double>(kMaxConfigurations)) {
    throw Error(
        fmt::format("{}the study has {:.0f} configurations, more than the {} one study may "
                    "hold: split it into several studies",
                    study.file.empty() ? "" : study.file + ": ", total, kMaxConfigurations));
  }

  // An axis a schedule does not take has the single value "unset".
  auto optional_axis = [](bool taken, const auto& own, const auto& grid) {
    using T = typename std::decay_t<decltype(own)>::value_type;
    std::vector<std::optional<T>> out;
    if (taken) {
      for (const auto& v : own.empty() ? grid : own)
        out.emplace_back(v);
    }
    if (out.empty()) out.emplace_back(std::nullopt);
    return out;
  };
  if (study.simulate) {
    systems_ = static_cast<std::int32_t>(study.systems.size());
    models_ = static_cast<std::int32_t>(study.models.size());
    bandwidth_ = study.bandwidth_scale;
    latency_ = study.latency_scale;
    collective_ = study.collective_scale;
  } else {
    bandwidth_ = latency_ = collective_ = {1.0};
  }
  costs_ = static_cast<std::int32_t>(study.costs.size());
  const auto network_count =
      std::int64_t{systems_} * models_ *
      static_cast<std::int64_t>(bandwidth_.size() * latency_.size() * collective_.size()) * costs_;
  for (const auto& entry : study.schedules) {
    Block block;
    const bool file = !entry.table.empty();
    const ScheduleInfo* info = file ? nullptr : &find_schedule(entry.name);
    if (file) {
      block.devices = block.microbatches = {0};
    } else {
      block.devices = entry.devices.empty() ? study.devices : entry.devices;
      block.microbatches = entry.microbatches.empty() ? study.microbatches : entry.microbatches;
    }
    block.chunks = optional_axis(info && info->default_chunks > 0, entry.chunks, study.chunks);
    block.waves = optional_axis(info && info->default_waves > 0, entry.waves, study.waves);
    block.variants = optional_axis(info && !info->variants.empty(), entry.variants, study.variants);
    block.splits = optional_axis(info && !info->default_split.empty(), entry.splits, study.splits);
    block.first = total_;
    // Exact: every factor is at most kMaxConfigurations once the bound above holds.
    block.count = network_count * static_cast<std::int64_t>(block.devices.size()) *
                  static_cast<std::int64_t>(block.chunks.size() * block.waves.size() *
                                            block.variants.size() * block.splits.size()) *
                  static_cast<std::int64_t>(block.microbatches.size());
    total_ += block.count;
    blocks_.push_back(std::move(block));
  }
}

Configuration ConfigurationSpace::operator[](std::size_t index) const {
  const auto i = static_cast<std::int64_t>(index);
  if (i < 0 || i >= total_) {
    throw std::out_of_range(
        fmt::format("configuration {} of a study of {}", index, static_cast<std::size_t>(total_)));
  }
  // The block holding `index`: the last whose first index is at most it (a block with no
  // configurations shares its first index with the next one, so it is never the last).
  const auto block = std::upper_bound(blocks_.begin(), blocks_.end(), i,
                                      [](std::int64_t x, const Block& b) { return x < b.first; }) -
                     1;
  const Block& b = *block;
  // Mixed radix, the last axis varying fastest (the order of the nested loops of expand()).
  auto rest = static_cast<std::size_t>(i - b.first);
  const auto digit = [&rest](std::size_t radix) {
    const auto d = rest % radix;
    rest /= radix;
    return d;
  };
  Configuration cfg;
  cfg.index = i;
  cfg.schedule = static_cast<std::int32_t>(block - blocks_.begin());
  cfg.microbatches = b.microbatches[digit(b.microbatches.size())];
  cfg.split = b.splits[digit(b.splits.size())];
  cfg.variant = b.variants[digit(b.variants.size())];
  cfg.waves = b.waves[digit(b.waves.size())];
  cfg.chunks = b.chunks[digit(b.chunks.size())];
  cfg.devices = b.devices[digit(b.devices.size())];
  cfg.costs = static_cast<std::int32_t>(digit(static_cast<std::size_t>(costs_)));
  cfg.collective_scale = collective_[digit(collective_.size())];
  cfg.latency_scale = latency_[digit(latency_.size())];
  cfg.bandwidth_scale = bandwidth_[digit(bandwidth_.size())];
  const auto model = static_cast<std::int32_t>(digit(static_cast<std::size_t>(models_)));
  const auto system = static_cast<std::int32_t>(digit(static_cast<std::size_t>(systems_)));
  cfg.model = simulate_ ? model : -1;
  cfg.system = simulate_ ? system : -1;
  return cfg;
}

std::vector<Configuration> expand(const Study& study) {
  const ConfigurationSpace space(study);
  std::vector<Configuration> out;
  out.reserve(space.size());
  for (std::size_t i = 0; i < space.size(); ++i)
    out.push_back(space[i]);
  return out;
}

}  // namespace pipetab
