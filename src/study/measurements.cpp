#include "pipetab/study/measurements.hpp"

#include <algorithm>
#include <array>
#include <filesystem>
#include <map>

#include "../io/config_reader.hpp"
#include "../io/toml_reader.hpp"
#include "option_reader.hpp"
#include <fmt/format.h>
#include <fmt/ranges.h>

#include "pipetab/error.hpp"
#include "pipetab/io/config.hpp"
#include "pipetab/io/table_file.hpp"
#include "pipetab/model/flops.hpp"
#include "pipetab/names.hpp"
#include "pipetab/numeric.hpp"
#include "pipetab/schedules/registry.hpp"
#include "pipetab/sim/options.hpp"

namespace pipetab {

const char* to_string(MeasurementKind kind) {
  switch (kind) {
    case MeasurementKind::Layer:
      return "layer";
    case MeasurementKind::Profile:
      return "profile";
    case MeasurementKind::Iteration:
      break;
  }
  return "iteration";
}

namespace {

using io::Reader;

constexpr double kHuge = 1e30;
// Measured times are at least a nanosecond (numeric.hpp): 4e-320 s, a subnormal, was accepted and
// then divided into +inf %.
constexpr double kMinMs = kMinMeasuredSeconds * 1e3;

class MeasurementParser {
 public:
  MeasurementParser(std::string_view text, const std::string& file) : r_(text, file), file_(file) {}

  Measurements parse() {
    const auto& root = r_.root();
    r_.only(root, "", {"models", "defaults", "run", "layer", "profile"});
    if (const auto* models = r_.table(root, "", "models")) {
      for (auto&& [name, node] : *models) {
        const auto* t = r_.table(*models, "models", name.str());
        // A fragment may carry its experts as [models.NAME.moe], a hybrid model's mixer as
        // [models.NAME.mamba].
        static constexpr std::array<std::string_view, 2> kMoe{"moe", "mamba"};
        io::only_transformer_keys(r_, *t, Reader::join("models", name.str()), kMoe);
        models_.emplace(std::string(name.str()), t);
      }
    }
    if (const auto* defaults = r_.table(root, "", "defaults")) {
      for (auto&& [name, node] : *defaults) {
        const auto* t = r_.table(*defaults, "defaults", name.str());
        only_run_keys(*t, Reader::join("defaults", name.str()));
        defaults_.emplace(std::string(name.str()), t);
      }
    }
    Measurements m;
    m.file = file_;
    entries(root, "run", MeasurementKind::Iteration, m);
    entries(root, "layer", MeasurementKind::Layer, m);
    entries(root, "profile", MeasurementKind::Profile, m);
    if (m.runs.empty()) r_.fail(root.source(), "", "no [[run]], [[layer]] or [[profile]] entries");
    return m;
  }

 private:
  void only_run_keys(const toml::table& t, const std::string& path) const {
    r_.only(t, path,
            {"id",
             "source",
             "defaults",
             "system",
             "models",
             "model",
             "schedule",
             "devices",
             "microbatches",
             "chunks",
             "measured_iteration_s",
             "measured_tflops_per_gpu",
             "flops_count",
             "measured_tokens_per_s_per_gpu",
             "measured_memory_gib",
             "measured_forward_ms",
             "measured_backward_ms",
             "stage_layers",
             "measured_input_grad_ms",
             "measured_weight_grad_ms",
             "measured_p2p_ms",
             "p2p"},
            option_keys_);
  }

  void entries(const toml::table& root, std::string_view key, MeasurementKind kind,
               Measurements& out) {
    const toml::node* node = root.get(key);
    if (node == nullptr) return;
    const auto* array = node->as_array();
    if (array == nullptr || !array->is_homogeneous(toml::node_type::table)) {
      r_.fail(node->source(), std::string(key),
              fmt::format("expected [[{}]] entries (an array of tables)", key));
    }
    for (std::size_t i = 0; i < array->size(); ++i) {
      const auto path = fmt::format("{}[{}]", key, i);
      const toml::table& raw = *(*array)[i].as_table();
      out.runs.push_back(entry(raw, path, kind));
      // Runs are named by id (accuracy's rows, calibrate --exclude, plan --from-run): a second
      // entry with the same id was planned and reported as if it were the first.
      const auto& id = out.runs.back().id;
      const auto [seen, fresh] = ids_.emplace(id, std::make_pair(path, out.runs.back().line));
      if (!fresh) {
        const toml::node* id_node = raw.get("id");
        r_.fail(id_node != nullptr ? id_node->source() : raw.source(), Reader::join(path, "id"),
                fmt::format("'{}' is already the id of {} (line {}): ids must be unique", id,
                            seen->second.first, seen->second.second));
      }
    }
  }

  // The run's keys over its defaults' keys, each where it was written.
  io::LayeredTable with_defaults(const toml::table& raw, const std::string& path) const {
    io::LayeredTable t{{&raw}, &raw.source()};
    if (const auto name = r_.string(raw, path, "defaults")) {
      const auto it = defaults_.find(*name);
      if (it == defaults_.end())
        r_.fail(raw.get("defaults")->source(), Reader::join(path, "defaults"),
                fmt::format("no [defaults.{}] table", *name));
      t.layers.push_back(it->second);
    }
    return t;
  }

  // The model: the inline `model` table over the named fragments, later fragments over earlier.
  ModelConfig model(const toml::table& raw, const io::LayeredTable& t,
                    const std::string& path) const {
    io::LayeredTable m{{}, &raw.source()};
    if (const auto* inline_model = r_.table(t, path, "model")) {
      io::only_transformer_keys(r_, *inline_model, Reader::join(path, "model"));
      m.layers.push_back(inline_model);
    }
    if (const auto* list = t.get("models")) {
      const auto* array = list->as_array();
      if (array == nullptr)
        r_.fail(list->source(), Reader::join(path, "models"), "expected an array of names");
      for (std::size_t k = array->size(); k-- > 0;) {
        const toml::node& item = (*array)[k];
        const auto* name = item.as_string();
        if (name == nullptr)
          r_.fail(item.source(), Reader::join(path, "models"), "expected model fragment names");
        const auto it = models_.find(name->get());
        if (it == models_.end()) {
          r_.fail(item.source(), Reader::join(path, "models"),
                  fmt::format("no [models.{}] table", name->get()));
        }
        m.layers.push_back(it->second);
      }
    }
    // A fragment's [models.NAME.moe] table makes the model a mixture of experts.
    io::LayeredTable moe{{}, &raw.source()};
    for (const auto* layer : m.layers) {
      if (const auto* table = layer->get_as<toml::table>("moe")) {
        r_.only(*table, Reader::join(path, "model.moe"), {}, io::kMoeKeys);
        moe.layers.push_back(table);
      }
    }
    io::LayeredTable mamba{{}, &raw.source()};
    for (const auto* layer : m.layers) {
      if (const auto* table = layer->get_as<toml::table>("mamba")) {
        r_.only(*table, Reader::join(path, "model.mamba"), {}, io::kMambaKeys);
        mamba.layers.push_back(table);
      }
    }
    ModelConfig out;
    auto arch = io::read_transformer(r_, m, Reader::join(path, "model"));
    if (!mamba.layers.empty())
      arch.mamba = io::read_mamba(r_, mamba, Reader::join(path, "model.mamba"), arch, raw.source());
    out.defaults = io::transformer_settings(r_, m, Reader::join(path, "model"));
    if (!moe.layers.empty()) {
      arch.moe = io::read_moe(r_, moe, Reader::join(path, "model.moe"), arch);
      const auto more = io::moe_settings(r_, moe, Reader::join(path, "model.moe"));
      out.defaults.insert(out.defaults.end(), more.begin(), more.end());
    }
    out.spec = std::move(arch);
    return out;
  }

  MeasuredRun entry(const toml::table& raw, const std::string& path, MeasurementKind kind) {
    only_run_keys(raw, path);
    const io::LayeredTable t = with_defaults(raw, path);
    MeasuredRun run;
    run.kind = kind;
    run.line = static_cast<std::int32_t>(raw.source().begin.line);
    run.path = path;
    const auto id = r_.string(t, path, "id");
    if (!id) r_.fail(raw.source(), Reader::join(path, "id"), "missing");
    run.id = *id;
    run.source = r_.string(t, path, "source").value_or("");
    const auto system = r_.string(t, path, "system");
    if (!system) r_.fail(raw.source(), Reader::join(path, "system"), "missing");
    run.system = resolve(*system);
    run.model = model(raw, t, path);
    run.model.name = run.id;
    // The run's options: the model fragments' job keys, then the entry's (and its defaults').
    SimulationSetup setup = default_setup(run.model, {});
    std::vector<Setting> applied = run.model.defaults;
    for (const auto& o : run_options()) {
      if (const auto* node = t.get(o.key)) {
        applied.push_back(detail::option_setting(r_, *node, Reader::join(path, o.key), o));
        apply_setting(setup, applied.back());
      }
    }
    run.job = setup.job;
    run.layout = setup.layout;
    run.lowering = setup.lowering;
    try {
      require_runnable(run.model, run.job, run.layout);
    } catch (const OptionError& e) {
      try {
        rethrow_with_origin(e, applied);
      } catch (const OptionError&) {
        r_.fail(raw.source(), path, e.what());  // no file set it: the entry's defaults did
      }
    } catch (const ParamError& e) {
      r_.fail(raw.source(), path, e.what());
    }
    const auto refuse = [&](std::initializer_list<const char*> keys, const char* entry) {
      for (const auto* key : keys) {
        if (t.get(key) != nullptr)
          r_.fail(t.get(key)->source(), Reader::join(path, key),
                  fmt::format("not for a [[{}]] entry", entry));
      }
    };
    if (kind != MeasurementKind::Profile) {
      refuse({"stage_layers", "measured_input_grad_ms", "measured_weight_grad_ms",
              "measured_p2p_ms", "p2p"},
             kind == MeasurementKind::Layer ? "layer" : "run");
    }
    if (kind == MeasurementKind::Profile) {
      refuse({"schedule", "devices", "microbatches", "chunks", "data_parallel", "runtime",
              "measured_iteration_s", "measured_tflops_per_gpu", "flops_count",
              "measured_tokens_per_s_per_gpu", "measured_memory_gib"},
             "profile");
      return profile(run, t, raw, path);
    }
    if (kind == MeasurementKind::Layer) {
      refuse({"schedule", "devices", "microbatches", "chunks", "data_parallel", "runtime",
              "measured_iteration_s", "measured_tflops_per_gpu", "flops_count",
              "measured_tokens_per_s_per_gpu", "measured_memory_gib"},
             "layer");
      run.measured_forward_s =
          r_.number(t, path, "measured_forward_ms", std::nullopt, kMinMs, kHuge, false) / 1e3;
      run.measured_backward_s =
          r_.number(t, path, "measured_backward_ms", std::nullopt, kMinMs, kHuge, false) / 1e3;
      return run;
    }
    const auto schedule = r_.string(t, path, "schedule");
    if (!schedule) r_.fail(raw.source(), Reader::join(path, "schedule"), "missing");
    try {
      (void)find_schedule(*schedule);
    } catch (const Error& e) {
      r_.fail(t.get("schedule")->source(), Reader::join(path, "schedule"), e.what());
    }
    run.schedule = *schedule;
    run.devices = r_.integer(t, path, "devices", std::nullopt, 1, 1 << 20);
    run.layout.pp = run.devices;  // the layout carries its stages, as the commands' do
    run.microbatches = r_.integer(t, path, "microbatches", std::nullopt, 1, 1 << 24);
    if (t.get("chunks") != nullptr) run.chunks = r_.integer(t, path, "chunks", 1, 1, 1 << 16);
    const auto& mt = *run.model.transformer();
    const auto dp = static_cast<double>(run.layout.dp);
    const bool seconds = t.get("measured_iteration_s") != nullptr;
    const bool tflops = t.get("measured_tflops_per_gpu") != nullptr;
    const bool tokens = t.get("measured_tokens_per_s_per_gpu") != nullptr;
    if (static_cast<int>(seconds) + static_cast<int>(tflops) + static_cast<int>(tokens) != 1) {
      r_.fail(raw.source(), path,
              "expected exactly one of measured_iteration_s, measured_tflops_per_gpu and "
              "measured_tokens_per_s_per_gpu");
    }
    if (!tflops && t.get("flops_count") != nullptr) {
      r_.fail(t.get("flops_count")->source(), Reader::join(path, "flops_count"),
              "only with measured_tflops_per_gpu: it says how those TF/s were counted");
    }
    if (tokens) {
      // Tokens per step over the published rate of all GPUs (torchtitan reports tokens per
      // second per GPU; a context-parallel group shares its sequences' tokens).
      run.measured_tokens_per_s_per_gpu =
          r_.number(t, path, "measured_tokens_per_s_per_gpu", std::nullopt, 1e-9, kHuge, false);
      const double tokens_per_step = static_cast<double>(run.microbatches) *
                                     static_cast<double>(run.job.micro_batch) *
                                     static_cast<double>(run.job.seq_len) * dp;
      const double gpus = static_cast<double>(run.devices) *
                          static_cast<double>(run.layout.tp * run.layout.cp) * dp;
      run.measured_s = tokens_per_step / (*run.measured_tokens_per_s_per_gpu * gpus);
      require_time(t, path, "measured_tokens_per_s_per_gpu", *run.measured_tokens_per_s_per_gpu,
                   run.measured_s);
    } else if (seconds) {
      run.measured_s = r_.number(t, path, "measured_iteration_s", std::nullopt, kMinMeasuredSeconds,
                                 kHuge, false);
    } else {
      // Published TF/s are the source's own FLOP count over the step time: flops_count names it.
      // Narayanan et al.'s Eq. 3 (the default) counts a dense GPT with full recomputation;
      // Megatron-LM's num_floating_point_operations counts active parameters, GQA, MLA and MTP,
      // the s² term halved since 2025-03 (modern-runs.md caveat 2). A mixture of experts has no
      // default: Eq. 3 would count every expert.
      const auto count = r_.string(t, path, "flops_count");
      if (count && *count != "narayanan-eq3" && *count != "megatron" &&
          *count != "megatron-full-square") {
        r_.fail(t.get("flops_count")->source(), Reader::join(path, "flops_count"),
                fmt::format("'{}': expected narayanan-eq3, megatron (Megatron-LM's "
                            "num_floating_point_operations, causal half) or megatron-full-square "
                            "(its count before 2025-03)",
                            *count));
      }
      if (mt.moe && !count) {
        r_.fail(raw.source(), path,
                "measured_tflops_per_gpu: a mixture of experts' TFLOPS follow its source's own "
                "FLOP count: say which with flops_count = \"megatron\" (or "
                "\"megatron-full-square\"), or give measured_iteration_s or "
                "measured_tokens_per_s_per_gpu");
      }
      run.measured_tflops_per_gpu =
          r_.number(t, path, "measured_tflops_per_gpu", std::nullopt, 1e-9, kHuge, false);
      // The iteration's FLOPs (global batch B sequences) over every GPU of the run: a
      // context-parallel group shares its sequences.
      const double sequences =
          static_cast<double>(run.microbatches) * static_cast<double>(run.job.micro_batch) * dp;
      const double gpus = static_cast<double>(run.devices) *
                          static_cast<double>(run.layout.tp * run.layout.cp) * dp;
      const double flops =
          !count || *count == "narayanan-eq3"
              ? narayanan_eq3_flops({mt, run.job, run.layout}, sequences)
              : megatron_flops({mt, run.job, run.layout}, sequences,
                               *count == "megatron" ? CausalCount::Half : CausalCount::FullSquare);
      run.measured_s = flops / (*run.measured_tflops_per_gpu * 1e12 * gpus);
      require_time(t, path, "measured_tflops_per_gpu", *run.measured_tflops_per_gpu,
                   run.measured_s);
    }
    // The peak memory a GPU's framework reported, in GiB as torchtitan prints it (its
    // "memory: X GiB", the caching allocator's peak reserved bytes).
    if (t.get("measured_memory_gib") != nullptr) {
      run.measured_memory_bytes =
          r_.number(t, path, "measured_memory_gib", std::nullopt, 1e-3, 1e6, false) * kGiB;
    }
    return run;
  }

  // A rate is a step time once divided into the step's work: the same floor as a time given as
  // one (a rate of 1e30 once made a step of 1e-22 s and an error of +7.7e27 %).
  void require_time(const io::LayeredTable& t, const std::string& path, const char* key,
                    double rate, double seconds) const {
    if (seconds >= kMinMeasuredSeconds) return;
    r_.fail(t.get(key)->source(), Reader::join(path, key),
            fmt::format("{:g} makes an iteration of {:g} s, under the {:g} s a measurement may "
                        "give: a unit or export error?",
                        rate, seconds, kMinMeasuredSeconds));
  }

  // A [[profile]]: the forward, the backward as a whole and/or as its input- and weight-gradient
  // halves, and optionally one activation's send, in milliseconds.
  MeasuredRun profile(MeasuredRun run, const io::LayeredTable& t, const toml::table& raw,
                      const std::string& path) {
    const auto ms = [&](const char* key) -> std::optional<double> {
      if (t.get(key) == nullptr) return std::nullopt;
      return r_.number(t, path, key, std::nullopt, kMinMs, kHuge, false) / 1e3;
    };
    run.stage_layers = r_.integer(t, path, "stage_layers", 1, 1, 1 << 20);
    if (run.stage_layers > run.model.transformer()->layers) {
      r_.fail(t.get("stage_layers")->source(), Reader::join(path, "stage_layers"),
              fmt::format("{} layers on the stage, and the model has {}", run.stage_layers,
                          run.model.transformer()->layers));
    }
    const auto forward = ms("measured_forward_ms");
    if (!forward) r_.fail(raw.source(), Reader::join(path, "measured_forward_ms"), "missing");
    run.measured_forward_s = *forward;
    run.measured_backward_s = ms("measured_backward_ms").value_or(0.0);
    run.measured_input_grad_s = ms("measured_input_grad_ms");
    run.measured_weight_grad_s = ms("measured_weight_grad_ms");
    if (run.measured_input_grad_s.has_value() != run.measured_weight_grad_s.has_value()) {
      r_.fail(raw.source(), path,
              "give measured_input_grad_ms and measured_weight_grad_ms together (the two halves "
              "of the backward), or neither");
    }
    if (!(run.measured_backward_s > 0.0) && !run.measured_input_grad_s) {
      r_.fail(raw.source(), path,
              "expected the backward: measured_backward_ms, or measured_input_grad_ms and "
              "measured_weight_grad_ms");
    }
    run.measured_p2p_s = ms("measured_p2p_ms");
    run.p2p_across_nodes = r_.choice(t, path, "p2p", "intra", {"intra", "inter"}) == "inter";
    if (run.measured_p2p_s && run.model.transformer()->layers < 2) {
      r_.fail(t.get("measured_p2p_ms")->source(), Reader::join(path, "measured_p2p_ms"),
              "a send between stages needs a model of at least 2 layers");
    }
    return run;
  }

  std::string resolve(const std::string& name) const {
    if (!io::preset_text("systems", name).empty()) return name;
    const std::filesystem::path path(name);
    if (path.is_absolute()) return name;
    return (std::filesystem::path(file_).parent_path() / path).string();
  }

  Reader r_;
  std::string file_;
  // Every option's key (sim/options.hpp): a run entry or its defaults may set any of them.
  // Every option's key (sim/options.hpp) that is not a run key of its own already: a run entry
  // or its defaults may set any of them.
  std::vector<std::string_view> option_keys_ = [] {
    constexpr std::string_view kOwn[] = {"schedule", "chunks"};
    std::vector<std::string_view> keys;
    for (const auto& o : run_options()) {
      if (std::find(std::begin(kOwn), std::end(kOwn), o.key) == std::end(kOwn))
        keys.push_back(o.key);
    }
    return keys;
  }();
  std::map<std::string, const toml::table*> models_, defaults_;
  std::map<std::string, std::pair<std::string, std::int32_t>> ids_;  // id -> entry, its line
};

}  // namespace

SystemConfig load_run_system(const Measurements& file, const MeasuredRun& run) {
  std::error_code ec;
  if (io::preset_text("systems", run.system).empty() && !std::filesystem::exists(run.system, ec)) {
    throw Error(fmt::format(
        "{}:{}: {}.system: '{}' is no system preset and no such file "
        "(presets: {}; a path is relative to the runs file's folder)",
        file.file, run.line, run.path, run.system, fmt::join(io::system_presets(), ", ")));
  }
  return io::load_system(run.system);
}

Measurements parse_measurements(std::string_view text, const std::string& file) {
  return MeasurementParser(text, file).parse();
}

Measurements load_measurements(const std::string& name_or_path) {
  const auto text = io::preset_text("data", name_or_path);
  if (!text.empty()) return parse_measurements(text, fmt::format("(built-in {})", name_or_path));
  return parse_measurements(io::read_file(name_or_path), name_or_path);
}

namespace {

bool is_selector(std::string_view s) {
  return s == "all" || s == "layers" || s == "profiles" || s == "iterations" ||
         s.starts_with("source:") || s.starts_with("ids:") || s.starts_with("system:");
}

}  // namespace

void require_run_selector(std::string_view selector, std::string_view option,
                          const Measurements* file) {
  if (!is_selector(selector)) {
    throw Error(fmt::format(
        "{} {}: expected all, layers, profiles, iterations, source:TEXT, system:NAME or "
        "ids:ID,ID,...",
        option, selector));
  }
  constexpr std::string_view kIds = "ids:";
  if (file == nullptr || !selector.starts_with(kIds)) return;
  std::string_view ids = selector.substr(kIds.size());
  for (;;) {
    const auto comma = ids.find(',');
    const auto id = ids.substr(0, comma);
    const auto known = std::any_of(file->runs.begin(), file->runs.end(),
                                   [&](const MeasuredRun& run) { return run.id == id; });
    if (!known) {
      std::vector<std::string> ids_known, nearest;
      for (const auto& run : file->runs)
        ids_known.push_back(run.id);
      for (const auto i : nearest_names(ids_known, std::array{id}, 2))
        nearest.push_back(ids_known[i]);
      throw Error(fmt::format("{}: {} {}: no run '{}' in the file{}", file->file, option, selector,
                              id, did_you_mean(nearest)));
    }
    if (comma == std::string_view::npos) break;
    ids.remove_prefix(comma + 1);
  }
}

bool run_selected(const MeasuredRun& run, std::string_view selector) {
  constexpr std::string_view kSource = "source:", kIds = "ids:", kSystem = "system:";
  if (selector.starts_with(kSource))
    return run.source.find(selector.substr(kSource.size())) != std::string::npos;
  if (selector.starts_with(kSystem)) return run.system == selector.substr(kSystem.size());
  if (selector.starts_with(kIds)) {
    std::string_view ids = selector.substr(kIds.size());
    while (!ids.empty()) {
      const auto comma = ids.find(',');
      if (ids.substr(0, comma) == run.id) return true;
      if (comma == std::string_view::npos) break;
      ids.remove_prefix(comma + 1);
    }
    return false;
  }
  return selector == "all" || (selector == "layers" && run.kind == MeasurementKind::Layer) ||
         (selector == "profiles" && run.kind == MeasurementKind::Profile) ||
         (selector == "iterations" && run.kind == MeasurementKind::Iteration);
}

Measurements select_runs(const Measurements& all, std::string_view selector) {
  require_run_selector(selector, "--runs", &all);
  Measurements m;
  m.file = all.file;
  for (const auto& run : all.runs) {
    if (run_selected(run, selector)) m.runs.push_back(run);
  }
  if (m.runs.empty()) throw Error(fmt::format("{}: no runs match --runs {}", all.file, selector));
  return m;
}

}  // namespace pipetab
