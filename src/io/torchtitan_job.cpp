// torchtitan job TOMLs (io/job_file.hpp): the reader, which turns a file's [training],
// [parallelism], [activation_checkpoint], [compile] and float8 keys into settings, and the writer
// back. Sources, read at pytorch/torchtitan @238fa9953e4a (2026-02-23, the last commit before the
// TOML files gave way to Python config registries), unless a line says otherwise:
//   torchtitan/config/job_config.py       the keys, their types and defaults
//   torchtitan/distributed/parallel_dims.py  the degrees' rules: -1 shard, the product, ETP
//   torchtitan/models/llama3/infra/parallelize.py  TP (sequence-parallel norms), FSDP, DDP
//   torchtitan/distributed/pipeline_parallel.py  stages per rank, microbatches
//   torchtitan/distributed/activation_checkpoint.py  "op" and block-interval checkpointing
//   torchtitan/distributed/tensor_parallel.py  async TP needs torch.compile
//   torchtitan/train.py                   the global batch and gradient accumulation
//   torchtitan/components/quantization/   the converters' names
// Older spellings, read too: the parallelism keys in [training] and [experimental] (before
// [parallelism], 785c34c, 2025-03) with pipeline_parallel_microbatches (before 8b737fe, 2025-04),
// [training] batch_size (before 8570415, 2025-06) and compile (before [compile]), [float8]
// (before [quantize.linear.float8], 5b5d468, 2025-09) with converters = ["float8"] or its
// enable_float8_linear (2024).
#include <algorithm>
#include <array>
#include <map>
#include <set>

#include "job_file_common.hpp"
#include "toml_reader.hpp"
#include <fmt/format.h>
#include <toml++/toml.h>

#include "pipetab/error.hpp"
#include "pipetab/io/job_file.hpp"
#include "pipetab/schedules/registry.hpp"

namespace pipetab::io {
namespace {

constexpr std::int64_t kMaxDegree = 1 << 20;
constexpr std::int64_t kTitanMaxBatch = std::int64_t{1} << 30;

std::string lower(std::string_view s) {
  std::string out(s);
  for (auto& c : out) {
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  }
  return out;
}

// PyTorch's schedule names, as torch.distributed.pipelining's get_schedule_class matches them
// (case-insensitively), and whether each runs one stage per rank (PipelineScheduleSingle) or a
// V of two (torchtitan's pipeline_module_split: "v schedules assume 2 stages per rank").
struct TorchSchedule {
  std::string_view name;
  bool single;
  bool v_shape;
};
constexpr std::array<TorchSchedule, 7> kTorchSchedules{{{"1F1B", true, false},
                                                        {"GPipe", true, false},
                                                        {"Interleaved1F1B", false, false},
                                                        {"LoopedBFS", false, false},
                                                        {"InterleavedZeroBubble", false, false},
                                                        {"ZBVZeroBubble", false, true},
                                                        {"DualPipeV", false, true}}};

// A value the file gave (line > 0) or torchtitan's default (line 0).
template <class T>
struct Got {
  T value;
  int line = 0;
  bool given() const { return line > 0; }
};

class TitanReader {
 public:
  TitanReader(std::string_view text, const std::string& file)
      : r_(text, file), out_("torchtitan", file) {}

  detail::Collector& out() { return out_; }
  const std::string& file() const { return out_.file(); }

  // The table at a dotted path, or null when the file has none.
  const toml::table* table(std::string_view path) const {
    const toml::table* t = &r_.root();
    std::string prefix;
    std::size_t start = 0;
    while (start <= path.size()) {
      const auto dot = path.find('.', start);
      const auto part = path.substr(start, dot == std::string_view::npos ? dot : dot - start);
      t = r_.table(*t, prefix, part);
      if (t == nullptr) return nullptr;
      prefix = Reader::join(prefix, part);
      if (dot == std::string_view::npos) break;
      start = dot + 1;
    }
    return t;
  }

  // Where the file keeps `table`.`key`: torchtitan before 785c34c (2025-03) kept the
  // parallelism keys in [training] (the data-parallel and TP degrees) and [experimental] (the
  // pipeline, context parallelism, async TP); they are read there when [parallelism] lacks them.
  std::string home(std::string_view tp, std::string_view key) const {
    if (tp != "parallelism") return std::string(tp);
    if (const toml::table* t = table(tp); t != nullptr && t->get(key) != nullptr)
      return std::string(tp);
    static constexpr std::string_view kTraining[] = {
        "data_parallel_replicate_degree", "data_parallel_shard_degree", "tensor_parallel_degree",
        "fsdp_reshard_after_forward", "disable_loss_parallel"};
    const bool training =
        std::find(std::begin(kTraining), std::end(kTraining), key) != std::end(kTraining);
    const char* old = training ? "training" : "experimental";
    if (const toml::table* t = table(old); t != nullptr && t->get(key) != nullptr) return old;
    return std::string(tp);
  }

  // The node at `table`.`key` (or its older home), marked as used (so that it is not listed as
  // ignored).
  const toml::node* node(std::string_view table_path, std::string_view key) {
    const std::string h = home(table_path, key);
    const toml::table* t = table(h);
    if (t == nullptr) return nullptr;
    const toml::node* n = t->get(key);
    if (n != nullptr) {
      used_.insert(path(h, key));
      if (h != table_path) legacy_.insert(path(h, key));
    }
    return n;
  }

  // The keys read from their homes before [parallelism], for a note.
  const std::set<std::string>& legacy() const { return legacy_; }

  static std::string path(std::string_view table_path, std::string_view key) {
    return Reader::join(std::string(table_path), key);
  }

  static int line(const toml::node* n) {
    return n == nullptr ? 0 : std::max(1, static_cast<int>(n->source().begin.line));
  }

  Got<std::int64_t> integer(std::string_view tp, std::string_view key, std::int64_t fallback,
                            std::int64_t lo, std::int64_t hi) {
    const toml::node* n = node(tp, key);
    if (n == nullptr) return {fallback, 0};
    const std::string h = home(tp, key);
    return {r_.integer(*table(h), h, key, std::nullopt, lo, hi), line(n)};
  }

  Got<bool> boolean(std::string_view tp, std::string_view key, bool fallback) {
    const toml::node* n = node(tp, key);
    if (n == nullptr) return {fallback, 0};
    const std::string h = home(tp, key);
    return {r_.boolean(*table(h), h, key, fallback), line(n)};
  }

  Got<std::string> choice(std::string_view tp, std::string_view key, std::string fallback,
                          std::initializer_list<std::string_view> choices) {
    const toml::node* n = node(tp, key);
    if (n == nullptr) return {std::move(fallback), 0};
    const std::string h = home(tp, key);
    return {r_.choice(*table(h), h, key, fallback, choices), line(n)};
  }

  Got<std::string> string(std::string_view tp, std::string_view key, std::string fallback) {
    const toml::node* n = node(tp, key);
    if (n == nullptr) return {std::move(fallback), 0};
    const std::string h = home(tp, key);
    return {*r_.string(*table(h), h, key), line(n)};
  }

  // An array of strings (model.converters, split points, compile.components).
  std::optional<Got<std::vector<std::string>>> strings(std::string_view tp, std::string_view key) {
    const toml::node* n = node(tp, key);
    if (n == nullptr) return std::nullopt;
    const std::string p = path(home(tp, key), key);
    const auto* array = n->as_array();
    if (array == nullptr)
      fail(n, p, fmt::format("expected an array of strings, got {}", io::type_name(*n)));
    Got<std::vector<std::string>> out{{}, line(n)};
    for (const auto& item : *array) {
      if (!item.is_string())
        fail(&item, p,
             fmt::format("expected an array of strings, got {} in it", io::type_name(item)));
      out.value.push_back(item.as_string()->get());
    }
    return out;
  }

  [[noreturn]] void fail(const toml::node* n, const std::string& key, const std::string& message) {
    if (n != nullptr) r_.fail(n->source(), key, message);
    // A default: the rule is about a key the file leaves out; point at its table, else the top.
    const auto dot = key.rfind('.');
    const toml::table* t = dot == std::string::npos ? nullptr : table(key.substr(0, dot));
    if (t != nullptr) r_.fail(t->source(), key, message);
    throw ParseError(file(), 1, 1, fmt::format("key '{}': {}", key, message));
  }

  // A key read and deliberately not used, or every key under a table, with why: listed as
  // ignored, whether or not a rule read it.
  void why(std::string key, std::string reason) {
    if (key.starts_with("parallelism."))
      key = path(home("parallelism", key.substr(12)), key.substr(12));
    used_.erase(key);
    reasons_[std::move(key)] = std::move(reason);
  }

  // Every key the file has that no rule used, with the reason given for it or its table.
  void list_ignored() { walk(r_.root(), ""); }

 private:
  void walk(const toml::table& t, const std::string& prefix) {
    for (auto&& [k, n] : t) {
      const std::string p = Reader::join(prefix, k.str());
      if (const auto* sub = n.as_table()) {
        walk(*sub, p);
        continue;
      }
      if (used_.contains(p)) continue;
      std::string entry = p;
      for (std::string q = p;;) {
        if (const auto it = reasons_.find(q); it != reasons_.end()) {
          entry += ": " + it->second;
          break;
        }
        const auto dot = q.rfind('.');
        if (dot == std::string::npos) break;
        q.resize(dot);
      }
      out_.ignore(std::max(1, static_cast<int>(k.source().begin.line)), std::move(entry));
    }
  }

  Reader r_;
  detail::Collector out_;
  std::set<std::string> used_;
  std::set<std::string> legacy_;
  std::map<std::string, std::string> reasons_;
};

// torchtitan's module_fqns_per_model_part in Megatron-Core's layout notation, where every module
// is one pipetab places: the embedding (tok_embeddings: E), blocks (layers.N, in order: t), the
// final norm and output layer (norm, output: L). Empty when a part names anything else.
std::string layout_of_parts(const std::vector<std::vector<std::string>>& parts) {
  std::string out;
  std::int64_t next = 0;
  for (std::size_t i = 0; i < parts.size(); ++i) {
    if (i > 0) out += '|';
    bool loss = false;
    for (const auto& fqn : parts[i]) {
      if (fqn == "tok_embeddings" && i == 0 && out.empty()) {
        out += 'E';
      } else if (fqn.starts_with("layers.") && !loss) {
        std::int64_t n = -1;
        const auto digits = std::string_view(fqn).substr(7);
        if (!digits.empty() && digits.size() < 8 &&
            std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; }))
          n = std::stoll(std::string(digits));
        if (n != next) return "";
        ++next;
        out += 't';
      } else if ((fqn == "norm" || fqn == "output") && i + 1 == parts.size()) {
        if (!loss) out += 'L';
        loss = true;
      } else {
        return "";
      }
    }
  }
  return out;
}

}  // namespace

JobFile parse_torchtitan_job(std::string_view text, const std::string& file,
                             std::optional<std::int64_t> gpus) {
  if (gpus && (*gpus < 1 || *gpus > detail::kMaxGpus))
    throw ParamError(fmt::format("{}: --gpus {} is not a GPU count", file, *gpus));
  TitanReader t(text, file);
  auto& out = t.out();
  const std::string P = "parallelism";

  // [model]: the name and flavor for messages; the converters that switch FP8 on.
  const auto name = t.string("model", "name", "");
  const auto flavor = t.string("model", "flavor", "");
  if (name.given() || flavor.given())
    out.model(
        fmt::format("{}{}{}", name.value, name.given() && flavor.given() ? " " : "", flavor.value));
  bool fp8_linear = false, fp8_grouped = false;
  int fp8_line = 0;
  std::string fp8_origin;
  if (const auto converters = t.strings("model", "converters")) {
    for (const auto& c : converters->value) {
      // components/quantization/float8.py registers "quantize.linear.float8" and
      // "quantize.grouped_mm.float8"; "float8" is the name before 5b5d468 (2025-09), which
      // parallelize.py still tests at @238fa99.
      if (c == "float8" || c == "quantize.linear.float8") {
        fp8_linear = true;
      } else if (c == "quantize.grouped_mm.float8") {
        fp8_grouped = true;
      } else if (c == "mx" || c == "mxfp8" || c == "quantize.linear.mx" ||
                 c == "quantize.grouped_mm.mx") {
        t.fail(t.node("model", "converters"), "model.converters",
               fmt::format("'{}' (MXFP8 training: a scale per 32 elements) is not modelled "
                           "yet; use the float8 converter",
                           c));
      } else {
        out.note(fmt::format("model.converters: '{}' changes nothing pipetab models", c));
      }
    }
    fp8_line = converters->line;
    fp8_origin = "model.converters";
  }
  // torchtitan in 2024: [float8] enable_float8_linear, before the converters.
  if (const auto legacy = t.boolean("float8", "enable_float8_linear", false); legacy.value) {
    fp8_linear = true;
    fp8_line = legacy.line;
    fp8_origin = "float8.enable_float8_linear";
  }
  const bool fp8 = fp8_linear || fp8_grouped;
  // The float8 keys: [quantize.linear.float8] today, [float8] before.
  const std::string f8 =
      t.table("quantize.linear.float8") != nullptr ? "quantize.linear.float8" : "float8";
  if (f8 == "quantize.linear.float8" && t.table("float8") != nullptr)
    t.why("float8", "[quantize.linear.float8] is read instead");
  if (!fp8) {
    for (const char* table : {"float8", "quantize.linear.float8", "quantize.grouped_mm.float8"})
      t.why(table, "float8 is off: model.converters does not name it");
  }
  for (const char* table : {"mx", "quantize.linear.mx", "quantize.grouped_mm.mx"})
    t.why(table, "MXFP8 is off: model.converters does not name it");

  // [training].
  const auto seq_len = t.integer("training", "seq_len", 2048, 1, kTitanMaxBatch);
  auto local = t.integer("training", "local_batch_size", 8, 1, kTitanMaxBatch);
  std::string local_key = "training.local_batch_size";
  if (const auto old = t.integer("training", "batch_size", 8, 1, kTitanMaxBatch); old.given()) {
    if (local.given()) {
      t.why("training.batch_size", "local_batch_size replaced it and is read instead");
    } else {
      local = old;
      local_key = "training.batch_size";
    }
  }
  const auto global = t.integer("training", "global_batch_size", -1, -1, std::int64_t{1} << 40);
  if (global.value == 0)
    t.fail(t.node("training", "global_batch_size"), "training.global_batch_size",
           "expected -1 (local_batch_size × the data-parallel degree) or a batch, got 0");
  const auto param_dtype =
      t.choice("training", "mixed_precision_param", "bfloat16", {"bfloat16", "float32"});
  const auto dtype = t.choice("training", "dtype", "float32", {"bfloat16", "float32"});
  const auto old_compile = t.boolean("training", "compile", false);

  // [parallelism].
  const auto replicate = t.integer(P, "data_parallel_replicate_degree", 1, 1, kMaxDegree);
  auto shard = t.integer(P, "data_parallel_shard_degree", -1, -1, kMaxDegree);
  if (shard.value == 0)
    t.fail(t.node(P, "data_parallel_shard_degree"), "parallelism.data_parallel_shard_degree",
           "expected -1 (the GPUs the other degrees leave) or a degree of at least 1, got 0");
  const auto reshard =
      t.choice(P, "fsdp_reshard_after_forward", "default", {"default", "always", "never"});
  const auto tp = t.integer(P, "tensor_parallel_degree", 1, 1, kMaxDegree);
  const auto async_tp = t.boolean(P, "enable_async_tensor_parallel", false);
  const auto pp = t.integer(P, "pipeline_parallel_degree", 1, 1, kMaxDegree);
  const auto schedule = t.string(P, "pipeline_parallel_schedule", "1F1B");
  const auto schedule_csv = t.string(P, "pipeline_parallel_schedule_csv", "");
  const auto pp_micro = t.integer(P, "pipeline_parallel_microbatch_size", 1, 1, kTitanMaxBatch);
  const auto layers_per_stage =
      t.integer(P, "pipeline_parallel_layers_per_stage", 0, 1, kMaxDegree);
  const auto split_points = t.strings(P, "pipeline_parallel_split_points");
  const toml::node* fqns_node = t.node(P, "module_fqns_per_model_part");
  const auto cp = t.integer(P, "context_parallel_degree", 1, 1, kMaxDegree);
  const auto rotate =
      t.choice(P, "context_parallel_rotate_method", "allgather", {"allgather", "alltoall"});
  const auto ep = t.integer(P, "expert_parallel_degree", 1, 1, kMaxDegree);
  const auto etp = t.integer(P, "expert_tensor_parallel_degree", 1, 1, kMaxDegree);
  const auto backend =
      t.choice(P, "expert_parallel_comm_backend", "standard", {"standard", "deepep"});

  // [activation_checkpoint], [compile].
  const auto ac_mode = t.choice("activation_checkpoint", "mode", "selective",
                                {"selective", "full", "memory_budget", "none"});
  Got<std::string> ac_option{"2", 0};
  if (const toml::node* n = t.node("activation_checkpoint", "selective_ac_option")) {
    // A str in job_config.py; an integer is what a TOML writer puts for "2" by mistake, and
    // means the same.
    if (n->is_integer()) {
      ac_option = {fmt::format("{}", n->as_integer()->get()), TitanReader::line(n)};
    } else {
      ac_option = t.string("activation_checkpoint", "selective_ac_option", "2");
    }
  }
  const auto compile = t.boolean("compile", "enable", false);
  const auto components = t.strings("compile", "components");
  const bool compile_model =
      compile.given()
          ? compile.value &&
                (!components || std::find(components->value.begin(), components->value.end(),
                                          "model") != components->value.end())
          : old_compile.value;

  // The degrees (parallel_dims.py _validate): -1 shard takes the GPUs the others leave; the
  // product is the world size.
  const double rest = static_cast<double>(replicate.value) * static_cast<double>(cp.value) *
                      static_cast<double>(tp.value) * static_cast<double>(pp.value);
  const std::string shard_key = "parallelism.data_parallel_shard_degree";
  const toml::node* shard_node = t.node(P, "data_parallel_shard_degree");
  const auto degrees = [&](std::int64_t s) {
    return fmt::format(
        "data_parallel_replicate_degree {} × data_parallel_shard_degree {} × "
        "context_parallel_degree {} × tensor_parallel_degree {} × pipeline_parallel_degree {}",
        replicate.value, s, cp.value, tp.value, pp.value);
  };
  if (shard.value == -1) {
    if (!gpus) {
      t.fail(shard_node, shard_key,
             fmt::format("{} (the GPUs the other degrees leave, {}) needs the GPU count: pass "
                         "--gpus",
                         shard.given() ? "-1" : "the default -1", degrees(-1)));
    }
    if (rest > static_cast<double>(*gpus) || *gpus % static_cast<std::int64_t>(rest) != 0) {
      t.fail(shard_node, shard_key,
             fmt::format("-1 leaves no whole degree: {} GPUs are not a multiple of the other "
                         "degrees' product {:.0f}",
                         *gpus, rest));
    }
    shard.value = *gpus / static_cast<std::int64_t>(rest);
    out.note(fmt::format("{} = -1{}: {} GPUs / {:.0f} (the other degrees) = {}", shard_key,
                         shard.given() ? "" : " (torchtitan's default)", *gpus, rest, shard.value));
  } else {
    const double product = rest * static_cast<double>(shard.value);
    if (product > static_cast<double>(detail::kMaxGpus))
      t.fail(shard_node, shard_key,
             fmt::format("{} = {:.0f} GPUs: too many", degrees(shard.value), product));
    if (gpus && product != static_cast<double>(*gpus)) {
      t.fail(shard_node, shard_key,
             fmt::format("{} = {:.0f} GPUs, not the {} given (torchtitan's parallel_dims.py: "
                         "the degrees multiply to the world size)",
                         degrees(shard.value), product, *gpus));
    }
    out.set("gpus", static_cast<std::int64_t>(product), 0, "parallelism (the degrees' product)");
  }
  const std::int64_t dp = replicate.value * shard.value;
  // FSDP over the shard and CP ranks whenever either is above 1 (ParallelDims.fsdp_enabled); the
  // replicas alone run DDP, which torchtitan refuses beside any other parallelism.
  const bool fsdp = shard.value > 1 || cp.value > 1;
  const bool ddp = replicate.value > 1 && !fsdp;
  if (ddp && (tp.value > 1 || pp.value > 1)) {
    t.fail(t.node(P, "data_parallel_replicate_degree"),
           "parallelism.data_parallel_replicate_degree",
           "replicas without sharding run DDP, which torchtitan does not combine with tensor or "
           "pipeline parallelism (parallelize.py: \"DDP has not supported > 1D parallelism\")");
  }

  out.set("seq_len", seq_len.value, seq_len.line,
          seq_len.given() ? "training.seq_len" : "training.seq_len (torchtitan's default)");

  // Precision: FP8 linears when a float8 converter runs, else the FSDP parameter dtype (or the
  // whole model's, with dtype = "bfloat16").
  if (fp8) {
    out.set("precision", "fp8", fp8_line, fp8_origin);
    if (fp8_grouped && !fp8_linear) {
      out.note(
          "model.converters: quantize.grouped_mm.float8 puts only the experts' grouped "
          "GEMMs in FP8; pipetab's fp8 runs every layer's linears in FP8");
    }
    // torchao's Float8LinearConfig without a recipe: dynamic tensorwise scaling.
    const auto recipe =
        t.choice(f8, "recipe_name", "tensorwise", {"tensorwise", "rowwise", "rowwise_with_gw_hp"});
    if (recipe.value == "rowwise_with_gw_hp") {
      out.note(
          fmt::format("{}.recipe_name rowwise_with_gw_hp (the weight gradient's GEMM in "
                      "high precision) is read as rowwise",
                      f8));
    }
    out.set("fp8_recipe", recipe.value == "tensorwise" ? "tensorwise" : "rowwise", recipe.line,
            recipe.given() ? f8 + ".recipe_name" : f8 + ".recipe_name (torchao's default)");
  } else {
    const bool bf16 = param_dtype.value == "bfloat16" || dtype.value == "bfloat16";
    const auto& from = dtype.value == "bfloat16" ? dtype : param_dtype;
    out.set("precision", bf16 ? "bf16" : "fp32", from.line,
            std::string(&from == &dtype ? "training.dtype" : "training.mixed_precision_param") +
                (from.given() ? "" : " (torchtitan's default)"));
  }

  // Activation checkpointing (activation_checkpoint.py): "op" is the per-op policy, a number N
  // checkpoints every Nth block whole (0 and 1: every block).
  std::string recompute;
  int recompute_line = ac_mode.line;
  std::string recompute_origin = "activation_checkpoint.mode";
  if (ac_mode.value == "none" || ac_mode.value == "full") {
    recompute = ac_mode.value;
    if (ac_option.given())
      t.why("activation_checkpoint.selective_ac_option", "mode is not selective");
  } else if (ac_mode.value == "memory_budget") {
    t.fail(t.node("activation_checkpoint", "mode"), "activation_checkpoint.mode",
           "memory_budget (the compiler's min-cut partitioner chooses what to keep) is not "
           "modelled: use none, full or selective");
  } else {
    recompute_line = ac_option.given() ? ac_option.line : ac_mode.line;
    recompute_origin = ac_option.given() ? "activation_checkpoint.selective_ac_option"
                                         : "activation_checkpoint.selective_ac_option "
                                           "(torchtitan's default \"2\")";
    const auto& o = ac_option.value;
    if (o == "op") {
      recompute = "selective-op";
    } else if (!o.empty() && o.size() < 10 &&
               std::all_of(o.begin(), o.end(), [](char c) { return c >= '0' && c <= '9'; })) {
      const auto every = std::stoll(o);
      if (every <= 1) {
        recompute = "full";
        out.note(
            fmt::format("activation_checkpoint.selective_ac_option \"{}\" checkpoints "
                        "every block whole: full recomputation",
                        o));
      } else if (every == 2) {
        recompute = "every-other-layer";
      } else {
        t.fail(t.node("activation_checkpoint", "selective_ac_option"),
               "activation_checkpoint.selective_ac_option",
               fmt::format("checkpointing every {}th block is not modelled (pipetab has every "
                           "block, \"1\", and every other, \"2\")",
                           every));
      }
    } else {
      t.fail(t.node("activation_checkpoint", "selective_ac_option"),
             "activation_checkpoint.selective_ac_option",
             fmt::format("'{}' is neither \"op\" nor a block interval such as \"2\"", o));
    }
  }
  out.set("recompute", recompute, recompute_line,
          ac_mode.given() || ac_option.given()
              ? recompute_origin
              : "activation_checkpoint.mode (torchtitan's default: selective, option \"2\")");

  // Eager PyTorch runs each element-wise op as its own kernel; torch.compile fuses them.
  {
    const auto& from = compile.given() ? compile : old_compile;
    const std::string_view origin =
        compile.given() ? (components ? "compile.enable, compile.components" : "compile.enable")
        : old_compile.given() ? "training.compile"
                              : "compile.enable (torchtitan's default: eager)";
    // The stack torchtitan is (model/stack.hpp), and the one of its settings the file decides.
    out.set("stack", std::string(compile_model ? "torchtitan-compile" : "torchtitan"), from.line,
            origin);
    out.set("fused_elementwise", compile_model, from.line, origin);
  }

  // Tensor parallelism: its plan shards the norms' sequence (sequence parallelism); its
  // collectives run synchronously unless async TP, which needs the model compiled.
  out.set("tensor_parallel", tp.value, tp.line,
          tp.given() ? "parallelism.tensor_parallel_degree"
                     : "parallelism.tensor_parallel_degree (torchtitan's default)");
  if (tp.value > 1) {
    out.set("sequence_parallel", true, tp.line,
            "parallelism.tensor_parallel_degree (torchtitan's TP plan shards the norms' "
            "sequence)");
    if (async_tp.value && !compile_model) {
      t.fail(t.node(P, "enable_async_tensor_parallel"), "parallelism.enable_async_tensor_parallel",
             "async TP needs the model compiled: set compile.enable = true with \"model\" in "
             "compile.components (tensor_parallel.py)");
    }
    out.set("tp_overlap", async_tp.value ? "all" : "none", async_tp.line,
            async_tp.given() ? "parallelism.enable_async_tensor_parallel"
                             : "parallelism.enable_async_tensor_parallel (torchtitan's default: "
                               "TP collectives not overlapped)");
  } else if (async_tp.given()) {
    t.why("parallelism.enable_async_tensor_parallel", "tensor_parallel_degree is 1");
  }

  // Context parallelism. torchtitan's "alltoall" rotate method is a ring: each step permutes
  // the KV shard to the next rank (torch/distributed/tensor/experimental/_attention.py,
  // _AllToAllRotater), not Ulysses' all-to-all of heads.
  out.set("context_parallel", cp.value, cp.line,
          cp.given() ? "parallelism.context_parallel_degree"
                     : "parallelism.context_parallel_degree (torchtitan's default)");
  if (cp.value > 1) {
    out.set("cp_method", rotate.value == "allgather" ? "allgather" : "ring", rotate.line,
            rotate.given() ? "parallelism.context_parallel_rotate_method"
                           : "parallelism.context_parallel_rotate_method (torchtitan's default)");
    if (rotate.value == "alltoall") {
      out.note(
          "parallelism.context_parallel_rotate_method alltoall passes each KV shard to the "
          "next rank at every step (a ring, done with all-to-all): cp_method ring");
    }
  } else if (rotate.given()) {
    t.why("parallelism.context_parallel_rotate_method", "context_parallel_degree is 1");
  }

  // Expert parallelism: drawn from the shard, CP and (with ETP 1) TP ranks of a replica.
  out.set("expert_parallel", ep.value, ep.line,
          ep.given() ? "parallelism.expert_parallel_degree"
                     : "parallelism.expert_parallel_degree (torchtitan's default)");
  if (ep.value > 1) {
    if (etp.value != 1 && etp.value != tp.value) {
      t.fail(t.node(P, "expert_tensor_parallel_degree"),
             "parallelism.expert_tensor_parallel_degree",
             fmt::format("{}: torchtitan takes 1 or tensor_parallel_degree ({}) (parallel_dims.py)",
                         etp.value, tp.value));
    }
    const std::int64_t pool = shard.value * cp.value * tp.value;
    if (pool % (ep.value * etp.value) != 0) {
      t.fail(t.node(P, "expert_parallel_degree"), "parallelism.expert_parallel_degree",
             fmt::format("{} × expert_tensor_parallel_degree {} does not divide "
                         "data_parallel_shard_degree {} × context_parallel_degree {} × "
                         "tensor_parallel_degree {} = {}, the ranks experts are spread over "
                         "(parallel_dims.py)",
                         ep.value, etp.value, shard.value, cp.value, tp.value, pool));
    }
    out.set("expert_tensor_parallel", etp.value, etp.line,
            etp.given() ? "parallelism.expert_tensor_parallel_degree"
                        : "parallelism.expert_tensor_parallel_degree (torchtitan's default)");
    out.set("moe_dispatcher", backend.value == "deepep" ? "deepep" : "alltoall", backend.line,
            backend.given() ? "parallelism.expert_parallel_comm_backend"
                            : "parallelism.expert_parallel_comm_backend (torchtitan's default: "
                              "all-to-all)");
  } else {
    for (const auto& [got, key] : {std::pair{etp.given(), "expert_tensor_parallel_degree"},
                                   std::pair{backend.given(), "expert_parallel_comm_backend"}}) {
      if (got) t.why(TitanReader::path(P, key), "expert_parallel_degree is 1");
    }
  }

  // Data parallelism: FSDP2, HSDP (replicas of shard × CP groups), or torch DDP.
  out.set("data_parallel", dp, shard.given() ? shard.line : replicate.line,
          "parallelism.data_parallel_replicate_degree × data_parallel_shard_degree");
  out.set("fsdp", fsdp, shard.line,
          "parallelism.data_parallel_shard_degree (FSDP when it or context_parallel_degree is "
          "above 1)");
  if (fsdp) {
    out.set("fsdp_impl", "fsdp2", shard.line, "parallelism (torchtitan runs PyTorch's FSDP2)");
    if (replicate.value > 1) {
      out.set("fsdp_shard", shard.value * cp.value, replicate.line,
              "parallelism.data_parallel_replicate_degree (HSDP: shards over "
              "data_parallel_shard_degree × context_parallel_degree ranks)");
    }
    if (reshard.value != "default") {
      out.set("reshard_after_forward", reshard.value == "always", reshard.line,
              "parallelism.fsdp_reshard_after_forward");
    }
    if (fp8) {
      const auto all_gather = t.boolean(f8, "enable_fsdp_float8_all_gather", false);
      out.set("fsdp_fp8_all_gather", all_gather.value, all_gather.line,
              all_gather.given() ? f8 + ".enable_fsdp_float8_all_gather"
                                 : f8 + ".enable_fsdp_float8_all_gather (torchtitan's default)");
    }
  } else {
    if (reshard.given()) t.why("parallelism.fsdp_reshard_after_forward", "no FSDP");
    if (fp8) t.why(f8 + ".enable_fsdp_float8_all_gather", "no FSDP");
    if (ddp) {
      out.set("dp_overlap", true, replicate.line,
              "parallelism.data_parallel_replicate_degree (torch DDP reduces gradients in "
              "buckets during the backward)");
    }
  }

  // The pipeline (pipeline_parallel.py): torchtitan places one stage per rank for single-stage
  // schedules and two otherwise, unless the split keys say how many.
  std::optional<std::int64_t> total_stages;
  out.set("pipeline_parallel", pp.value, pp.line,
          pp.given() ? "parallelism.pipeline_parallel_degree"
                     : "parallelism.pipeline_parallel_degree (torchtitan's default)");
  if (pp.value > 1) {
    if (!schedule_csv.value.empty()) {
      t.fail(t.node(P, "pipeline_parallel_schedule_csv"),
             "parallelism.pipeline_parallel_schedule_csv",
             "a schedule read from a CSV file is not read here: give the schedule by name, or "
             "simulate the CSV's table itself");
    }
    const toml::node* schedule_node = t.node(P, "pipeline_parallel_schedule");
    const std::string wanted = lower(schedule.value);
    const auto torch =
        std::find_if(kTorchSchedules.begin(), kTorchSchedules.end(),
                     [&](const TorchSchedule& s) { return lower(s.name) == wanted; });
    if (torch == kTorchSchedules.end()) {
      std::string known;
      for (const auto& s : kTorchSchedules)
        known += fmt::format("{}{}", known.empty() ? "" : ", ", s.name);
      t.fail(schedule_node, "parallelism.pipeline_parallel_schedule",
             fmt::format("'{}' is not one of PyTorch's schedules (get_schedule_class: {})",
                         schedule.value, known));
    }
    const ScheduleInfo* info = nullptr;
    try {
      info = &find_schedule(torch->name);
    } catch (const ParamError& e) {
      t.fail(schedule_node, "parallelism.pipeline_parallel_schedule", e.what());
    }
    out.set("schedule", info->name, schedule.line,
            schedule.given() ? "parallelism.pipeline_parallel_schedule"
                             : "parallelism.pipeline_parallel_schedule (torchtitan's default)");

    std::optional<std::int64_t> stages;
    std::string stages_key;
    const toml::node* stages_node = nullptr;
    if (fqns_node != nullptr) {
      const std::string key = "parallelism.module_fqns_per_model_part";
      const auto* parts = fqns_node->as_array();
      if (parts == nullptr || parts->empty())
        t.fail(fqns_node, key, "expected an array of arrays of module names");
      std::vector<std::vector<std::string>> names;
      for (const auto& part : *parts) {
        const auto* list = part.as_array();
        if (list == nullptr) t.fail(&part, key, "expected an array of arrays of module names");
        names.emplace_back();
        for (const auto& fqn : *list) {
          if (!fqn.is_string()) t.fail(&fqn, key, "expected module names (strings)");
          names.back().push_back(fqn.as_string()->get());
        }
      }
      stages = static_cast<std::int64_t>(names.size());
      stages_key = key;
      stages_node = fqns_node;
      if (const auto layout = layout_of_parts(names); !layout.empty()) {
        out.set("pipeline_layout", layout, TitanReader::line(fqns_node), key);
      } else {
        out.note(
            fmt::format("{}: a module other than tok_embeddings, layers.N in order, norm "
                        "and output: no pipeline_layout, layers split evenly",
                        key));
      }
      if (split_points)
        t.why("parallelism.pipeline_parallel_split_points", "module_fqns_per_model_part is read");
      if (layers_per_stage.given())
        t.why("parallelism.pipeline_parallel_layers_per_stage",
              "module_fqns_per_model_part is read");
    } else if (split_points) {
      stages = static_cast<std::int64_t>(split_points->value.size()) + 1;
      stages_key = "parallelism.pipeline_parallel_split_points";
      stages_node = t.node(P, "pipeline_parallel_split_points");
      out.note(
          "parallelism.pipeline_parallel_split_points: the stages' count is read; where "
          "they split is not (pipetab splits the layers evenly)");
    } else if (layers_per_stage.given()) {
      out.note(
          "parallelism.pipeline_parallel_layers_per_stage: the stages it makes depend on the "
          "model's layer count; chunks are left to the schedule's default");
    } else {
      stages = pp.value * (torch->single ? 1 : 2);
      stages_key = "parallelism.pipeline_parallel_schedule";
      stages_node = schedule_node;
    }
    total_stages = stages;
    if (stages) {
      if (*stages % pp.value != 0) {
        t.fail(stages_node, stages_key,
               fmt::format("{} stages are not a multiple of pipeline_parallel_degree {}", *stages,
                           pp.value));
      }
      const std::int64_t per_rank = *stages / pp.value;
      if (torch->single && per_rank != 1) {
        t.fail(stages_node, stages_key,
               fmt::format("{} stages per rank, and {} runs one (a single-stage schedule)",
                           per_rank, torch->name));
      }
      if (!torch->single && per_rank < 2) {
        t.fail(stages_node, stages_key,
               fmt::format("1 stage per rank, and {} runs at least 2 (a multi-stage schedule)",
                           torch->name));
      }
      if (torch->v_shape && per_rank != 2) {
        t.fail(stages_node, stages_key,
               fmt::format("{} stages per rank, and {} runs 2 (a V)", per_rank, torch->name));
      }
      if (info->default_chunks > 0) {
        out.set("chunks", per_rank,
                stages_node == schedule_node ? schedule.line : TitanReader::line(stages_node),
                stages_node == schedule_node
                    ? "parallelism.pipeline_parallel_schedule (torchtitan places 2 stages per "
                      "rank for a multi-stage schedule)"
                    : stages_key);
      }
    }
  } else {
    for (const char* key :
         {"pipeline_parallel_schedule", "pipeline_parallel_schedule_csv",
          "pipeline_parallel_layers_per_stage", "pipeline_parallel_split_points",
          "module_fqns_per_model_part", "pipeline_parallel_first_stage_less_layers",
          "pipeline_parallel_last_stage_less_layers", "pipeline_parallel_expert_parallel_overlap"})
      t.why(TitanReader::path(P, key), "pipeline_parallel_degree is 1");
  }
  // The batch (train.py, pipeline_parallel.py): with pipelining the local batch is cut into
  // microbatches of pipeline_parallel_microbatch_size, or (before 8b737fe, 2025-04) into
  // pipeline_parallel_microbatches of them, by default one per stage.
  const std::int64_t local_dp = local.value * dp;
  std::int64_t micro = local.value;
  if (pp.value > 1) {
    const auto count = t.integer(P, "pipeline_parallel_microbatches", 0, 1, kTitanMaxBatch);
    const bool legacy_pp = t.legacy().contains("experimental.pipeline_parallel_degree");
    if (pp_micro.given() || (!count.given() && !legacy_pp)) {
      if (count.given())
        t.why("parallelism.pipeline_parallel_microbatches",
              "pipeline_parallel_microbatch_size is read instead");
      if (local.value % pp_micro.value != 0) {
        t.fail(t.node(P, "pipeline_parallel_microbatch_size"),
               "parallelism.pipeline_parallel_microbatch_size",
               fmt::format("{} does not divide {} = {} (pipeline_parallel.py: the local batch is "
                           "cut into microbatches of this size)",
                           pp_micro.value, local_key, local.value));
      }
      micro = pp_micro.value;
      out.set("micro_batch", micro, pp_micro.line,
              pp_micro.given() ? "parallelism.pipeline_parallel_microbatch_size"
                               : "parallelism.pipeline_parallel_microbatch_size (torchtitan's "
                                 "default)");
    } else {
      const std::int64_t m = count.given() ? count.value : total_stages.value_or(pp.value);
      if (local.value % m != 0) {
        t.fail(count.given() ? t.node(P, "pipeline_parallel_microbatches")
                             : t.node(P, "pipeline_parallel_degree"),
               "parallelism.pipeline_parallel_microbatches",
               fmt::format("{} microbatches do not divide {} = {}", m, local_key, local.value));
      }
      micro = local.value / m;
      out.set("micro_batch", micro, count.given() ? count.line : pp.line,
              count.given() ? "parallelism.pipeline_parallel_microbatches (the local batch over "
                              "it)"
                            : "parallelism.pipeline_parallel_microbatches (torchtitan's default "
                              "before 2025-04: one per stage)");
    }
  } else {
    out.set("micro_batch", local.value, local.line,
            local.given() ? local_key : local_key + " (torchtitan's default)");
    if (pp_micro.given())
      t.why("parallelism.pipeline_parallel_microbatch_size", "pipeline_parallel_degree is 1");
    t.why("parallelism.pipeline_parallel_microbatches", "pipeline_parallel_degree is 1");
  }
  if (global.value == -1) {
    out.set("global_batch", local_dp, global.line,
            fmt::format("training.global_batch_size ({}-1: {} × the data-parallel degree {})",
                        global.given() ? "" : "the default ", local_key, dp));
  } else {
    if (global.value % local_dp != 0) {
      t.fail(t.node("training", "global_batch_size"), "training.global_batch_size",
             fmt::format("{} is not a multiple of {} {} × the data-parallel degree {} (replicate "
                         "× shard) (train.py)",
                         global.value, local_key, local.value, dp));
    }
    out.set("global_batch", global.value, global.line, "training.global_batch_size");
    if (pp.value > 1 && global.value > local_dp) {
      out.note(fmt::format(
          "training.global_batch_size {} is {} steps of gradient accumulation: torchtitan runs "
          "the pipeline schedule that many times, {} microbatches each, with a flush between; "
          "pipetab simulates one schedule of all {} microbatches",
          global.value, global.value / local_dp, local.value / micro, global.value / (micro * dp)));
    }
  }
  if (!t.legacy().empty()) {
    std::string keys;
    for (const auto& k : t.legacy())
      keys += (keys.empty() ? "" : ", ") + k;
    out.note(
        fmt::format("read where torchtitan kept them before [parallelism] (785c34c, "
                    "2025-03): {}",
                    keys));
  }

  for (const char* key :
       {"pipeline_parallel_first_stage_less_layers", "pipeline_parallel_last_stage_less_layers"}) {
    if (pp.value > 1)
      t.why(TitanReader::path(P, key),
            "how torchtitan weighs the embedding and output in its split: pipetab splits the "
            "layers evenly, or by pipeline_layout");
  }
  t.why("training.mixed_precision_reduce", "gradients are reduced in fp32 as pipetab assumes");
  t.why("parallelism.disable_loss_parallel", "the loss's parallelism is not modelled");
  t.why("parallelism.context_parallel_load_balancer",
        "the causal mask's load balance is assumed even");
  t.list_ignored();
  return out.finish();
}

namespace {

[[noreturn]] void titan_cannot(const std::string& what) {
  throw ParamError(fmt::format("torchtitan job file: {}", what));
}

}  // namespace

std::string torchtitan_job_toml(const Job& job, const Layout& layout, std::int64_t gpus,
                                std::string_view comment) {
  detail::check_written_layout(job, layout, gpus, "torchtitan");
  const bool sp = layout.sequence_parallel == true;
  // Data parallelism as torchtitan's degrees: FSDP shards over shard × CP ranks (HSDP: groups of
  // fsdp.shard of them, replicated), DDP replicates.
  std::int64_t replicate = 1, shard = 1;
  if (layout.fsdp.enabled) {
    if (layout.fsdp.shard > 0) {
      if (layout.fsdp.shard % layout.cp != 0 || layout.dp % (layout.fsdp.shard / layout.cp) != 0) {
        titan_cannot(
            fmt::format("fsdp_shard {} is not context_parallel {} × a divisor of "
                        "data_parallel {} (torchtitan's HSDP shards over "
                        "data_parallel_shard_degree × context_parallel_degree ranks)",
                        layout.fsdp.shard, layout.cp, layout.dp));
      }
      shard = layout.fsdp.shard / layout.cp;
      replicate = layout.dp / shard;
      if (replicate == 1)
        titan_cannot(
            fmt::format("fsdp_shard {} is every rank: that is FSDP, not HSDP", layout.fsdp.shard));
    } else {
      shard = layout.dp;
    }
    if (shard * layout.cp == 1)
      titan_cannot(
          "fsdp over one rank (data_parallel and context_parallel 1): torchtitan does not shard");
  } else {
    if (layout.cp > 1) {
      titan_cannot(
          fmt::format("context_parallel {} without fsdp: torchtitan always shards parameters "
                      "over the context-parallel ranks (FSDP)",
                      layout.cp));
    }
    replicate = layout.dp;
    if (replicate > 1 && (layout.tp > 1 || layout.pp > 1)) {
      titan_cannot(
          "data parallelism without fsdp beside tensor or pipeline parallelism: torchtitan's "
          "DDP runs alone");
    }
    if (replicate > 1 && !job.dp_overlap)
      titan_cannot("dp_overlap false: torch DDP reduces gradients in buckets during the backward");
  }
  if (layout.tp > 1 && !sp)
    titan_cannot(
        "sequence_parallel false with tensor_parallel: torchtitan's TP plan always shards the "
        "norms' sequence");
  if (layout.ep > 1) {
    if (layout.etp != 1 && layout.etp != layout.tp)
      titan_cannot(
          fmt::format("expert_tensor_parallel {}: torchtitan takes 1 or tensor_parallel ({})",
                      layout.etp, layout.tp));
    if ((shard * layout.cp * layout.tp) % (layout.ep * layout.etp) != 0) {
      titan_cannot(
          fmt::format("expert_parallel {} × expert_tensor_parallel {} does not divide the "
                      "shard × context × tensor ranks {}: torchtitan spreads experts within "
                      "a replica",
                      layout.ep, layout.etp, shard * layout.cp * layout.tp));
    }
  }

  std::string precision;
  switch (job.precision) {
    case Precision::FP32:
      precision = "float32";
      break;
    case Precision::BF16:
    case Precision::FP8:
      precision = "bfloat16";
      break;
    default:
      titan_cannot(fmt::format("precision {}: torchtitan trains in bf16 or fp32 (and FP8 linears)",
                               to_string(job.precision)));
  }
  if (job.precision == Precision::FP8 && job.fp8_recipe != Fp8Recipe::Tensorwise &&
      job.fp8_recipe != Fp8Recipe::Rowwise) {
    titan_cannot(fmt::format("fp8_recipe {}: torchao's float8 training has tensorwise and rowwise",
                             to_string(job.fp8_recipe)));
  }
  if (layout.fsdp.fp8_all_gather && (job.precision != Precision::FP8 || !layout.fsdp.enabled))
    titan_cannot("fsdp_fp8_all_gather without fp8 and fsdp: FSDP gathers float8 weights");

  std::string mode, option;
  switch (job.recompute) {
    case Recompute::None:
      mode = "none";
      break;
    case Recompute::Full:
      mode = "full";
      break;
    case Recompute::SelectiveOp:
      mode = "selective";
      option = "op";
      break;
    case Recompute::EveryOtherLayer:
      mode = "selective";
      option = "2";
      break;
    case Recompute::Selective:
      titan_cannot(
          "recompute selective (Megatron's attention-core recomputation): torchtitan has full, "
          "per-op (selective-op) and every-other-block (every-other-layer)");
      break;
    case Recompute::Lgd:
      titan_cannot(
          "recompute lgd (PipeOffload's LayerNorm, GeLU and dropout recomputation): torchtitan "
          "has full, per-op (selective-op) and every-other-block (every-other-layer)");
  }
  if (job.moe.recompute != MoeRecompute::None)
    titan_cannot(fmt::format("moe_recompute {}: torchtitan has no MoE-only recomputation",
                             to_string(job.moe.recompute)));
  if (job.dense_mlp_recompute)
    titan_cannot("dense_mlp_recompute: Megatron-Core's recompute module (mlp)");
  if (job.mla_recompute_up_proj)
    titan_cannot("mla_recompute_up_proj: Megatron-Core's recompute module (mla_up_proj)");
  if (job.moe.capacity_factor)
    titan_cannot("moe_capacity_factor: torchtitan's job has no expert capacity (it is dropless)");
  if (job.moe.fp8_dispatch) titan_cannot("moe_fp8_dispatch: torchtitan dispatches in bf16");
  if (job.moe.shared_expert_overlap)
    titan_cannot("moe_shared_expert_overlap: Megatron-Core's, not torchtitan's");
  if (job.a2a_overlap) titan_cannot("a2a_overlap: Megatron-Core's 1F1B all-to-all overlap");
  if (offloads(job)) titan_cannot("activation offload: torchtitan's job has none");
  if (job.distributed_optimizer)
    titan_cannot("distributed_optimizer: Megatron's; torchtitan shards the optimizer with FSDP");
  if (layout.tp > 1 && job.tp_overlap == Overlap::Backward) {
    titan_cannot(
        "tp_overlap backward: torchtitan's TP collectives run synchronously (none) or, with "
        "async TP, all overlapped (all)");
  }
  // torchtitan's stack (model/stack.hpp) has no switch for these: SDPA's flash backend, no
  // autocast, no CUDA graphs.
  if (!job.stack.flash_attention)
    titan_cannot("flash_attention false: torchtitan's attention is SDPA's fused flash kernel");
  if (job.stack.attention_kernel && *job.stack.attention_kernel != AttentionKernel::Flash2) {
    titan_cannot(fmt::format("attention_kernel {}: torchtitan runs SDPA's flash backend (flash2)",
                             to_string(*job.stack.attention_kernel)));
  }
  if (job.stack.autocast) titan_cannot("autocast: torchtitan's FSDP2 keeps bf16 parameters");
  if (job.stack.fused_loss)
    titan_cannot("fused_loss: torchtitan's loss is eager cross entropy on fp32 logits");
  if (job.stack.cuda_graphs) titan_cannot("cuda_graphs: torchtitan does not capture graphs");
  if (job.fp8_params) titan_cannot("fp8_params: torchao's Float8Linear keeps 16-bit weights");
  if (job.precision == Precision::FP8 && job.stack.fp8_saved_inputs)
    titan_cannot("fp8_saved_inputs: torchao's Float8Linear saves the 16-bit input");
  const bool async_tp = layout.tp > 1 && job.tp_overlap == Overlap::All;
  if (async_tp && !job.stack.fused_elementwise)
    titan_cannot("tp_overlap all without fused_elementwise: async TP needs torch.compile");
  if (layout.cp > 1 && layout.cp_method == CpMethod::AllToAll) {
    titan_cannot(
        "cp_method a2a (Ulysses): torchtitan's context parallelism all-gathers or rings the "
        "keys and values");
  }

  // The batch: without pipelining a rank's batch is one microbatch per accumulation step; with
  // it, the pipeline's microbatches are the local batch, run in one schedule (no accumulation).
  std::int64_t local = job.micro_batch;
  std::string schedule;
  std::int64_t chunks = layout.chunks;
  if (layout.pp > 1) {
    local = job.global_batch / layout.dp;
    const ScheduleInfo* info = nullptr;
    if (!layout.schedule.empty()) {
      info = &find_schedule(layout.schedule);
    } else {
      info = &find_schedule(chunks > 1 ? "interleaved" : "1f1b");
    }
    const auto torch =
        std::find_if(kTorchSchedules.begin(), kTorchSchedules.end(),
                     [&](const TorchSchedule& s) { return &find_schedule(s.name) == info; });
    if (torch == kTorchSchedules.end()) {
      titan_cannot(
          fmt::format("schedule {}: PyTorch runs 1F1B, GPipe, Interleaved1F1B, LoopedBFS, "
                      "InterleavedZeroBubble, ZBVZeroBubble and DualPipeV",
                      info->name));
    }
    schedule = std::string(torch->name);
    if (chunks == 0) chunks = info->default_chunks;
    if (info->default_chunks > 0 && chunks != 2) {
      titan_cannot(
          fmt::format("chunks {} with {}: torchtitan places 2 stages per rank unless "
                      "pipeline_parallel_layers_per_stage says otherwise, which needs the "
                      "model's layer count",
                      chunks, info->name));
    }
    if (info->default_chunks == 0 && layout.chunks > 1)
      titan_cannot(fmt::format("chunks {}: {} takes none", layout.chunks, info->name));
    if (!layout.pipeline_layout.empty()) {
      titan_cannot(
          "pipeline_layout: torchtitan's module_fqns_per_model_part names each stage's "
          "modules, which needs the model's layer count");
    }
  } else if (!layout.pipeline_layout.empty()) {
    titan_cannot("pipeline_layout without pipeline parallelism");
  }

  std::string s = detail::comment_lines(comment);
  s += fmt::format(
      "# For {} GPUs: the degrees below multiply to it. Set [model] name and flavor.\n", gpus);
  if (job.precision == Precision::FP8)
    s += "\n[model]\nconverters = [\"quantize.linear.float8\"]\n";
  s += "\n[training]\n";
  s += fmt::format("seq_len = {}\nlocal_batch_size = {}\nglobal_batch_size = {}\n", job.seq_len,
                   local, job.global_batch);
  s += fmt::format("mixed_precision_param = \"{}\"\n", precision);
  s += "\n[parallelism]\n";
  s += fmt::format("data_parallel_replicate_degree = {}\ndata_parallel_shard_degree = {}\n",
                   replicate, shard);
  if (layout.fsdp.enabled) {
    const auto& r = layout.fsdp.reshard_after_forward;
    s += fmt::format("fsdp_reshard_after_forward = \"{}\"\n",
                     !r ? "default" : (*r ? "always" : "never"));
  }
  s += fmt::format("tensor_parallel_degree = {}\n", layout.tp);
  if (layout.tp > 1) s += fmt::format("enable_async_tensor_parallel = {}\n", async_tp);
  s += fmt::format("pipeline_parallel_degree = {}\n", layout.pp);
  if (layout.pp > 1) {
    s +=
        fmt::format("pipeline_parallel_schedule = \"{}\"\npipeline_parallel_microbatch_size = {}\n",
                    schedule, job.micro_batch);
  }
  s += fmt::format("context_parallel_degree = {}\n", layout.cp);
  if (layout.cp > 1) {
    s += fmt::format("context_parallel_rotate_method = \"{}\"\n",
                     layout.cp_method == CpMethod::AllGather ? "allgather" : "alltoall");
  }
  s += fmt::format("expert_parallel_degree = {}\n", layout.ep);
  // What torchtitan ignores with one expert-parallel rank is left out, as the reader would list it.
  if (layout.ep > 1) {
    // torchtitan's expert_parallel_comm_backend offers standard and deepep (torchtitan
    // config/job_config.py); HybridEP is Megatron-Core's alone.
    if (job.moe.dispatcher == MoeDispatcher::HybridEp)
      titan_cannot(
          "moe_dispatcher hybridep: torchtitan's expert-parallel backends are standard "
          "(all-to-all) and deepep");
    s += fmt::format("expert_tensor_parallel_degree = {}\n", layout.etp);
    s += fmt::format("expert_parallel_comm_backend = \"{}\"\n",
                     job.moe.dispatcher == MoeDispatcher::DeepEp ? "deepep" : "standard");
  }
  s += fmt::format("\n[activation_checkpoint]\nmode = \"{}\"\n", mode);
  if (!option.empty()) s += fmt::format("selective_ac_option = \"{}\"\n", option);
  s += fmt::format("\n[compile]\nenable = {}\ncomponents = [\"model\", \"loss\"]\n",
                   job.stack.fused_elementwise);
  if (job.precision == Precision::FP8) {
    s += fmt::format("\n[quantize.linear.float8]\nrecipe_name = \"{}\"\n",
                     to_string(job.fp8_recipe));
    if (layout.fsdp.enabled)
      s += fmt::format("enable_fsdp_float8_all_gather = {}\n", layout.fsdp.fp8_all_gather);
  }
  return s;
}

}  // namespace pipetab::io
