// Megatron-LM's arguments (io/job_file.hpp): the reader, which turns the flags a launch script
// passes to pretrain_gpt.py into settings, and the writer back. Sources, read at NVIDIA/Megatron-LM
// @67f3515c8a05 (2026-01-29, the last commit before arguments.py generated most flags from
// TransformerConfig; the flags' names and meanings are unchanged by it), unless a line says
// otherwise:
//   megatron/training/arguments.py      the flags, which take values, defaults, validate_args
//   megatron/training/training_config.py  --micro-batch-size, --global-batch-size
//   megatron/core/transformer/transformer_config.py  recomputation's rules, --cp-comm-type
//   megatron/core/transformer/transformer_layer.py  what --recompute-modules mlp recomputes
//   megatron/core/distributed/distributed_data_parallel_config.py  --ddp-bucket-size's unit
//   megatron/core/transformer/pipeline_parallel_layer_layout.py  the layout's stage count
// Older flags, read too: --virtual-pipeline-model-parallel-size (before
// --num-virtual-stages-per-pipeline-rank), --use-custom-fsdp (before --use-megatron-fsdp).
// torchrun's --nproc_per_node and --nnodes, when the file has them, give the GPU count.
#include <algorithm>
#include <array>
#include <charconv>
#include <cmath>
#include <map>
#include <set>
#include <span>
#include <tuple>

#include "job_file_common.hpp"
#include "text.hpp"
#include <fmt/format.h>
#include <fmt/ranges.h>

#include "pipetab/error.hpp"
#include "pipetab/io/job_file.hpp"
#include "pipetab/model/offload_groups.hpp"
#include "pipetab/numeric.hpp"
#include "pipetab/schedules/registry.hpp"

namespace pipetab::io {
namespace {

constexpr std::int64_t kMaxSize = 1 << 20;
constexpr std::int64_t kMaxMicro = std::int64_t{1} << 30;
constexpr std::int64_t kArgsMaxBatch = std::int64_t{1} << 40;

// One word of the file as a shell splits it: quotes removed, `\` line continuations joined.
struct Word {
  std::string text;
  int line = 0;
  int column = 0;
  bool quoted = false;
};

// The words of each logical line (a line and the lines its trailing `\` continues), shell-style:
// `#` at a word's start comments out the rest of the line, '...' and "..." quote.
std::vector<std::vector<Word>> split_words(std::string_view text, const std::string& file) {
  std::vector<std::vector<Word>> lines(1);
  int line = 1, column = 1;
  std::size_t i = detail::byte_order_mark(text);
  Word word;
  bool in_word = false;
  const auto end_word = [&] {
    if (in_word) lines.back().push_back(std::move(word));
    word = Word{};
    in_word = false;
  };
  const auto start_word = [&] {
    if (!in_word) {
      word.line = line;
      word.column = column;
      in_word = true;
    }
  };
  const auto advance = [&](std::size_t n) {
    for (std::size_t k = 0; k < n && i < text.size(); ++k, ++i) {
      if (text[i] == '\n') {
        ++line;
        column = 1;
      } else {
        ++column;
      }
    }
  };
  while (i < text.size()) {
    const char c = text[i];
    if (c == '\\') {
      // A continuation: `\` then the end of the line (blanks between forgiven).
      std::size_t j = i + 1;
      while (j < text.size() && (text[j] == ' ' || text[j] == '\t' || text[j] == '\r'))
        ++j;
      if (j >= text.size() || text[j] == '\n') {
        end_word();
        advance(j + 1 - i);
        continue;
      }
      start_word();
      word.text += text[i + 1];
      advance(2);
      continue;
    }
    if (c == '\n') {
      end_word();
      lines.emplace_back();
      advance(1);
      continue;
    }
    if (c == ' ' || c == '\t' || c == '\r') {
      end_word();
      advance(1);
      continue;
    }
    if (c == '#' && !in_word) {
      while (i < text.size() && text[i] != '\n')
        advance(1);
      continue;
    }
    if (c == '\'' || c == '"') {
      start_word();
      word.quoted = true;
      const int open_line = line, open_column = column;
      advance(1);
      while (i < text.size() && text[i] != c) {
        if (c == '"' && text[i] == '\\' && i + 1 < text.size() &&
            (text[i + 1] == '"' || text[i + 1] == '\\')) {
          advance(1);
        }
        word.text += text[i];
        advance(1);
      }
      if (i >= text.size())
        throw ParseError(file, open_line, open_column, fmt::format("a {} quote is not closed", c));
      advance(1);
      continue;
    }
    start_word();
    word.text += c;
    advance(1);
  }
  end_word();
  return lines;
}

enum class Kind : std::uint8_t {
  Switch,  ///< store_true: no value
  Int,     ///< one integer
  Float,   ///< one number
  Text,    ///< one word, from `choices` if any
  List,    ///< nargs='+': words, at least one
  AnyList  ///< nargs='*': any number of words
};

struct FlagSpec {
  std::string_view name;
  Kind kind;
  std::span<const std::string_view> choices{};
  std::int64_t lo = 1;
};

constexpr std::string_view kGranularity[] = {"full", "selective"};
constexpr std::string_view kMethod[] = {"uniform", "block"};
constexpr std::string_view kFp8Format[] = {"e4m3", "hybrid"};
constexpr std::string_view kFp8Recipe[] = {"tensorwise", "delayed", "mxfp8", "blockwise", "custom"};
constexpr std::string_view kFp4Format[] = {"e2m1"};
constexpr std::string_view kFp4Recipe[] = {"nvfp4", "custom"};
constexpr std::string_view kDispatcher[] = {"allgather", "alltoall", "flex"};
constexpr std::string_view kFlexBackend[] = {"deepep", "hybridep"};
constexpr std::string_view kAttention[] = {"flash", "fused", "unfused", "local", "auto"};
constexpr std::string_view kSharding[] = {"no_shard", "optim", "optim_grads", "optim_grads_params"};
constexpr std::string_view kCpComm[] = {"p2p", "all_gather", "a2a", "a2a+p2p"};
constexpr std::string_view kModules[] = {"core_attn", "moe_act", "layernorm",     "mla_up_proj",
                                         "mlp",       "moe",     "shared_experts"};
// Megatron-Core's fine-grained offload modules (arguments.py @d98e8a64), fused_group_mlp among
// them so that it is refused by name.
// --cuda-graph-impl and --cuda-graph-scope (arguments.py, transformer/enums.py CudaGraphScope
// @d728871; --cuda-graph-modules is the later spelling of the scope).
constexpr std::string_view kCudaGraphImpl[] = {"none", "local", "transformer_engine",
                                               "full_iteration"};
constexpr std::string_view kCudaGraphScopes[] = {
    "full", "attn", "mlp", "moe", "moe_router", "moe_preprocess", "mamba", "full_iteration"};
constexpr std::string_view kOffloadModules[] = {"attn_norm", "qkv_linear",     "core_attn",
                                                "attn_proj", "mlp_norm",       "expert_fc1",
                                                "moe_act",   "fused_group_mlp"};

// The flags this reader uses, with what argparse takes after each (arguments.py @67f3515).
constexpr FlagSpec kFlags[] = {
    {"--tensor-model-parallel-size", Kind::Int},
    {"--pipeline-model-parallel-size", Kind::Int},
    {"--virtual-pipeline-model-parallel-size", Kind::Int},
    {"--num-layers-per-virtual-pipeline-stage", Kind::Int},
    {"--num-virtual-stages-per-pipeline-rank", Kind::Int},
    {"--pipeline-model-parallel-layout", Kind::Text},
    {"--decoder-first-pipeline-num-layers", Kind::Int, {}, 0},
    {"--decoder-last-pipeline-num-layers", Kind::Int, {}, 0},
    {"--account-for-embedding-in-pipeline-split", Kind::Switch},
    {"--account-for-loss-in-pipeline-split", Kind::Switch},
    {"--context-parallel-size", Kind::Int},
    {"--cp-comm-type", Kind::List, kCpComm},
    {"--expert-model-parallel-size", Kind::Int},
    {"--expert-tensor-parallel-size", Kind::Int},
    {"--sequence-parallel", Kind::Switch},
    {"--micro-batch-size", Kind::Int},
    {"--global-batch-size", Kind::Int},
    {"--seq-length", Kind::Int},
    {"--num-layers", Kind::Int},
    {"--num-experts", Kind::Int},
    {"--recompute-activations", Kind::Switch},
    {"--recompute-granularity", Kind::Text, kGranularity},
    {"--recompute-method", Kind::Text, kMethod},
    {"--recompute-num-layers", Kind::Int},
    {"--recompute-modules", Kind::AnyList, kModules},
    {"--distribute-saved-activations", Kind::Switch},
    {"--bf16", Kind::Switch},
    {"--fp16", Kind::Switch},
    {"--fp8-format", Kind::Text, kFp8Format},
    {"--fp8-recipe", Kind::Text, kFp8Recipe},
    {"--fp4-format", Kind::Text, kFp4Format},
    {"--fp4-recipe", Kind::Text, kFp4Recipe},
    {"--fp8-param-gather", Kind::Switch},
    {"--fp8-dot-product-attention", Kind::Switch},
    {"--grad-reduce-in-bf16", Kind::Switch},
    {"--moe-token-dispatcher-type", Kind::Text, kDispatcher},
    {"--moe-enable-deepep", Kind::Switch},
    {"--moe-flex-dispatcher-backend", Kind::Text, kFlexBackend},
    {"--moe-expert-capacity-factor", Kind::Float},
    {"--moe-pad-expert-input-to-capacity", Kind::Switch},
    {"--moe-shared-expert-overlap", Kind::Switch},
    {"--overlap-moe-expert-parallel-comm", Kind::Switch},
    {"--enable-experimental", Kind::Switch},
    {"--moe-permute-fusion", Kind::Switch},
    {"--use-distributed-optimizer", Kind::Switch},
    {"--overlap-grad-reduce", Kind::Switch},
    {"--ddp-bucket-size", Kind::Int},
    {"--cpu-offloading", Kind::Switch},
    {"--cpu-offloading-num-layers", Kind::Int},
    {"--fine-grained-activation-offloading", Kind::Switch},
    {"--offload-modules", Kind::AnyList, kOffloadModules},
    {"--cuda-graph-impl", Kind::List, kCudaGraphImpl},
    {"--cuda-graph-scope", Kind::AnyList, kCudaGraphScopes},
    {"--cuda-graph-modules", Kind::AnyList, kCudaGraphScopes},
    {"--enable-cuda-graph", Kind::Switch},
    {"--min-offloaded-tensor-size", Kind::Int, {}, 0},
    {"--activation-offload-fraction", Kind::Float},
    {"--delta-offload-bytes-across-pp-ranks", Kind::Int, {}, 0},
    {"--tp-comm-overlap", Kind::Switch},
    {"--use-flash-attn", Kind::Switch},
    {"--attention-backend", Kind::Text, kAttention},
    {"--no-gradient-accumulation-fusion", Kind::Switch},
    {"--no-masked-softmax-fusion", Kind::Switch},
    {"--no-bias-gelu-fusion", Kind::Switch},
    {"--no-bias-swiglu-fusion", Kind::Switch},
    {"--no-bias-dropout-fusion", Kind::Switch},
    {"--no-rope-fusion", Kind::Switch},
    {"--use-torch-fsdp2", Kind::Switch},
    {"--torch-fsdp2-no-reshard-after-forward", Kind::Switch},
    {"--use-megatron-fsdp", Kind::Switch},
    {"--use-custom-fsdp", Kind::Switch},
    {"--data-parallel-sharding-strategy", Kind::Text, kSharding},
    {"--model-name", Kind::Text},
    // torchrun's (--nproc_per_node also spelled with dashes), read from their first word: words
    // such as "gpu" or "1:4" are torchrun's too, and the script and its arguments may follow.
    {"--nproc_per_node", Kind::List},
    {"--nproc-per-node", Kind::List},
    {"--nnodes", Kind::List},
};

// Megatron's element-wise fusions, each on unless its flag turns it off (arguments.py).
constexpr std::string_view kUnfused[] = {"--no-masked-softmax-fusion", "--no-bias-gelu-fusion",
                                         "--no-bias-swiglu-fusion", "--no-bias-dropout-fusion",
                                         "--no-rope-fusion"};

// Flags that shape the model, which pipetab takes from --model instead.
constexpr std::string_view kModelFlags[] = {
    "--num-layers",
    "--hidden-size",
    "--ffn-hidden-size",
    "--num-attention-heads",
    "--num-query-groups",
    "--group-query-attention",
    "--kv-channels",
    "--max-position-embeddings",
    "--position-embedding-type",
    "--vocab-size",
    "--padded-vocab-size",
    "--make-vocab-size-divisible-by",
    "--swiglu",
    "--squared-relu",
    "--normalization",
    "--untie-embeddings-and-output-weights",
    "--disable-bias-linear",
    "--add-qkv-bias",
    "--rotary-base",
    "--rotary-percent",
    "--num-experts",
    "--moe-ffn-hidden-size",
    "--moe-router-topk",
    "--moe-shared-expert-intermediate-size",
    "--moe-layer-freq",
    "--multi-latent-attention",
    "--q-lora-rank",
    "--kv-lora-rank",
    "--qk-head-dim",
    "--qk-pos-emb-head-dim",
    "--v-head-dim",
    "--mtp-num-layers",
    "--encoder-num-layers",
    "--decoder-num-layers",
    "--num-layers-per-stage",
    // A hybrid model's (pretrain_mamba.py, megatron/training/arguments.py): its model file's
    // hybrid_pattern and [mamba] table.
    "--is-hybrid-model",
    "--hybrid-override-pattern",
    "--hybrid-layer-pattern",
    "--hybrid-attention-ratio",
    "--hybrid-mlp-ratio",
    "--mamba-state-dim",
    "--mamba-head-dim",
    "--mamba-num-groups",
    "--mamba-num-heads",
};

const FlagSpec* spec_of(std::string_view name) {
  for (const auto& f : kFlags) {
    if (f.name == name) return &f;
  }
  return nullptr;
}

// A flag as the file gives it: its words after it, and where.
struct Occurrence {
  std::string flag;
  std::vector<std::string> values;
  int line = 0;
  int column = 0;
  std::int64_t integer = 0;  // Kind::Int
  double number = 0.0;       // Kind::Float
};

std::optional<std::int64_t> to_integer(std::string_view s) {
  std::int64_t v = 0;
  const char* first = s.data();
  if (!s.empty() && s.front() == '+') ++first;
  const auto [ptr, ec] = std::from_chars(first, s.data() + s.size(), v);
  if (ec != std::errc() || ptr != s.data() + s.size() || first == s.data() + s.size())
    return std::nullopt;
  return v;
}

std::optional<double> to_number(std::string_view s) {
  double v = 0.0;
  const char* first = s.data();
  if (!s.empty() && s.front() == '+') ++first;
  const auto [ptr, ec] = parse_double(first, s.data() + s.size(), v);
  if (ec != std::errc() || ptr != s.data() + s.size() || first == s.data() + s.size() ||
      !std::isfinite(v))
    return std::nullopt;
  return v;
}

class Args {
 public:
  Args(std::string_view text, const std::string& file) : out_("megatron", file) {
    for (auto& words : split_words(text, file)) {
      Occurrence* current = nullptr;
      for (auto& w : words) {
        const bool flag = !w.quoted && w.text.size() > 2 && w.text.starts_with("--");
        if (!flag) {
          if (current != nullptr) {
            current->values.push_back(std::move(w.text));
          } else {
            // Before any flag on its line: the launcher and script ("torchrun", "pretrain_gpt.py").
            out_.ignore(w.line, fmt::format("{} (a word before any flag)", detail::quoted(w.text)));
          }
          continue;
        }
        Occurrence o;
        o.line = w.line;
        o.column = w.column;
        if (const auto eq = w.text.find('='); eq != std::string::npos) {
          o.flag = w.text.substr(0, eq);
          o.values.push_back(w.text.substr(eq + 1));
        } else {
          o.flag = std::move(w.text);
        }
        occurrences_.push_back(std::move(o));
        current = &occurrences_.back();
      }
    }
    // Checked by the rules argparse applies, then the last of each flag counts (argparse's).
    for (auto& o : occurrences_) {
      check(o);
      if (const auto it = last_.find(o.flag); it != last_.end()) {
        out_.note(fmt::format("{} is given twice: line {} counts", o.flag, o.line));
        out_.ignore(it->second->line, fmt::format("{}: given again on line {}", o.flag, o.line));
      }
      last_[o.flag] = &o;
    }
  }

  detail::Collector& out() { return out_; }
  const std::string& file() const { return out_.file(); }

  // The flag's last occurrence, marked used; null when the file does not give it.
  const Occurrence* use(std::string_view flag) {
    const auto it = last_.find(std::string(flag));
    if (it == last_.end()) return nullptr;
    used_.insert(it->first);
    return it->second;
  }
  // The same, without marking it used (it stays listed as ignored).
  const Occurrence* peek(std::string_view flag) const {
    const auto it = last_.find(std::string(flag));
    return it == last_.end() ? nullptr : it->second;
  }
  bool on(std::string_view flag) { return use(flag) != nullptr; }

  [[noreturn]] void fail(const Occurrence* o, const std::string& message) const {
    if (o == nullptr) throw ParseError(file(), 1, 1, message);
    throw ParseError(file(), o->line, o->column, fmt::format("{}: {}", o->flag, message));
  }

  // A flag deliberately not used, with why: listed as ignored, whether or not a rule read it.
  void why(std::string_view flag, std::string reason) {
    used_.erase(std::string(flag));
    reasons_[std::string(flag)] = std::move(reason);
  }

  void list_ignored() {
    for (const auto& [flag, o] : last_) {
      if (used_.contains(flag)) continue;
      std::string entry = flag;
      if (const auto it = reasons_.find(flag); it != reasons_.end()) {
        entry += ": " + it->second;
      } else if (std::find(std::begin(kModelFlags), std::end(kModelFlags), flag) !=
                 std::end(kModelFlags)) {
        entry += ": the model comes from --model";
      }
      out_.ignore(o->line, std::move(entry));
    }
  }

 private:
  void check(Occurrence& o) const {
    const FlagSpec* spec = spec_of(o.flag);
    if (spec == nullptr) return;  // unknown: its words are its own, whatever they are
    const auto count = o.values.size();
    const auto one = [&](const char* what) {
      if (count == 0) fail(&o, fmt::format("expected {} after it", what));
      if (count > 1) {
        fail(&o, fmt::format("takes one value, got {}: {}", count, fmt::join(o.values, " ")));
      }
    };
    const auto allowed = [&](const std::string& v) {
      if (spec->choices.empty() ||
          std::find(spec->choices.begin(), spec->choices.end(), v) != spec->choices.end())
        return;
      fail(&o,
           fmt::format("{} is not one of: {}", detail::quoted(v), fmt::join(spec->choices, ", ")));
    };
    switch (spec->kind) {
      case Kind::Switch:
        if (count > 0) {
          fail(&o, fmt::format("takes no value (it is a switch), got {}",
                               detail::quoted(o.values.front())));
        }
        break;
      case Kind::Int: {
        one("an integer");
        const auto v = to_integer(o.values[0]);
        if (!v) fail(&o, fmt::format("expected an integer, got {}", detail::quoted(o.values[0])));
        // Bounds that keep products (microbatch × data parallel) far from overflowing.
        const std::int64_t hi =
            o.flag == "--micro-batch-size" || o.flag == "--seq-length"         ? kMaxMicro
            : o.flag == "--global-batch-size" || o.flag == "--ddp-bucket-size" ? kArgsMaxBatch
                                                                               : kMaxSize;
        if (*v < spec->lo || *v > hi)
          fail(&o, fmt::format("{} is out of range ({}..{})", *v, spec->lo, hi));
        o.integer = *v;
        break;
      }
      case Kind::Float: {
        one("a number");
        const auto v = to_number(o.values[0]);
        if (!v || *v <= 0)
          fail(&o, fmt::format("expected a positive number, got {}", detail::quoted(o.values[0])));
        o.number = *v;
        break;
      }
      case Kind::Text:
        one("a value");
        allowed(o.values[0]);
        break;
      case Kind::List:
        if (count == 0) fail(&o, "expected one or more values after it");
        for (const auto& v : o.values)
          allowed(v);
        break;
      case Kind::AnyList:
        for (const auto& v : o.values)
          allowed(v);
        break;
    }
  }

  detail::Collector out_;
  std::vector<Occurrence> occurrences_;  // complete before last_ points into it
  std::map<std::string, const Occurrence*> last_;
  std::set<std::string> used_;
  std::map<std::string, std::string> reasons_;
};

// "--flag", or what stands for a default.
std::string origin(const Occurrence* o, std::string_view flag, std::string_view otherwise) {
  return o != nullptr ? std::string(flag) : fmt::format("{} ({})", flag, otherwise);
}

int line_of(const Occurrence* o) {
  return o == nullptr ? 0 : o->line;
}

}  // namespace

JobFile parse_megatron_args(std::string_view text, const std::string& file,
                            std::optional<std::int64_t> gpus) {
  if (gpus && (*gpus < 1 || *gpus > detail::kMaxGpus))
    throw ParamError(fmt::format("{}: --gpus {} is not a GPU count", file, *gpus));
  Args a(text, file);
  auto& out = a.out();
  const auto size = [&](std::string_view flag, std::int64_t fallback) {
    const auto* o = a.use(flag);
    return std::pair{o != nullptr ? o->integer : fallback, o};
  };
  if (const auto* o = a.use("--model-name")) out.model(o->values[0]);

  // The GPUs: the caller's, or torchrun's processes per node × nodes in the file.
  std::optional<std::int64_t> world = gpus;
  const Occurrence* nproc = a.use("--nproc_per_node");
  if (nproc == nullptr) nproc = a.use("--nproc-per-node");
  if (nproc != nullptr) {
    const auto* nodes = a.use("--nnodes");
    const auto per_node = to_integer(nproc->values[0]);
    const auto node_count = nodes != nullptr ? to_integer(nodes->values[0]) : std::int64_t{1};
    if (per_node && node_count && *per_node >= 1 && *node_count >= 1 && *per_node <= kMaxSize &&
        *node_count <= kMaxSize) {
      const std::int64_t file_gpus = *per_node * *node_count;
      if (gpus && *gpus != file_gpus) {
        a.fail(nproc, fmt::format("{} × {} nodes = {} GPUs, not the {} given", *per_node,
                                  *node_count, file_gpus, *gpus));
      }
      world = file_gpus;
      out.set("gpus", file_gpus, nproc->line,
              nodes != nullptr ? fmt::format("{} × --nnodes", nproc->flag)
                               : fmt::format("{} (one node)", nproc->flag));
    } else {
      out.note(fmt::format("{} {}{}: not a GPU count; the GPUs are not read from the file",
                           nproc->flag, nproc->values[0],
                           nodes != nullptr ? fmt::format(", --nnodes {}", nodes->values[0]) : ""));
    }
  }

  // The parallel sizes; data parallelism is what the world leaves (validate_args).
  const auto [tp, tp_o] = size("--tensor-model-parallel-size", 1);
  const auto [pp, pp_o] = size("--pipeline-model-parallel-size", 1);
  const auto [cp, cp_o] = size("--context-parallel-size", 1);
  const auto [ep, ep_o] = size("--expert-model-parallel-size", 1);
  const std::int64_t model_size = tp * pp * cp;
  std::optional<std::int64_t> dp;
  if (world) {
    if (*world % model_size != 0) {
      const Occurrence* at = tp_o != nullptr ? tp_o : pp_o != nullptr ? pp_o : cp_o;
      a.fail(at, fmt::format("{} GPUs are not a multiple of tensor {} × pipeline {} × context {} "
                             "= {} (arguments.py: the world size must be)",
                             *world, tp, pp, cp, model_size));
    }
    dp = *world / model_size;
    out.set("data_parallel", *dp, 0,
            fmt::format("--tensor-model-parallel-size, --pipeline-model-parallel-size, "
                        "--context-parallel-size ({} GPUs / {})",
                        *world, model_size));
  } else {
    out.note(
        "data_parallel: Megatron-LM derives it from the world size (GPUs / (TP × PP × CP)), "
        "which the file does not give: pass --gpus");
  }
  out.set("tensor_parallel", tp, line_of(tp_o),
          origin(tp_o, "--tensor-model-parallel-size", "Megatron-LM's default"));
  const Occurrence* sp_o = a.use("--sequence-parallel");
  if (tp > 1) {
    out.set("sequence_parallel", sp_o != nullptr, line_of(sp_o),
            origin(sp_o, "--sequence-parallel", "not given"));
  } else if (sp_o != nullptr) {
    out.note("--sequence-parallel with tensor parallel size 1: Megatron-LM turns it off");
  }
  const bool sp = tp > 1 && sp_o != nullptr;

  // Context parallelism: Transformer Engine's p2p ring, all-gather, or Ulysses all-to-all, the
  // same for every layer.
  out.set("context_parallel", cp, line_of(cp_o),
          origin(cp_o, "--context-parallel-size", "Megatron-LM's default"));
  if (const auto* o = a.use("--cp-comm-type"); cp > 1) {
    const std::string type = o != nullptr ? o->values.front() : "p2p";
    if (o != nullptr && std::any_of(o->values.begin(), o->values.end(),
                                    [&](const std::string& v) { return v != type; })) {
      a.fail(o, fmt::format("{}: a method per layer is not modelled (every layer uses one)",
                            fmt::join(o->values, " ")));
    }
    if (type == "a2a+p2p") {
      a.fail(o,
             "a2a+p2p (hierarchical: all-to-all inside --hierarchical-context-parallel-sizes "
             "groups, a p2p ring across them) is not modelled: use p2p, all_gather or a2a");
    }
    out.set("cp_method",
            type == "p2p"          ? "ring"
            : type == "all_gather" ? "allgather"
                                   : "a2a",
            line_of(o), origin(o, "--cp-comm-type", "Megatron-LM's default p2p"));
  } else if (o != nullptr) {
    a.why("--cp-comm-type", "context parallel size is 1");
  }

  // Experts: ETP is TP unless given (arguments.py: "Default is None, which will be set to the
  // value of --tensor-model-parallel-size").
  out.set("expert_parallel", ep, line_of(ep_o),
          origin(ep_o, "--expert-model-parallel-size", "Megatron-LM's default"));
  const Occurrence* experts = a.peek("--num-experts");
  if (const auto* o = a.use("--expert-tensor-parallel-size")) {
    out.set("expert_tensor_parallel", o->integer, o->line, "--expert-tensor-parallel-size");
  } else if (ep > 1 || experts != nullptr) {
    out.set("expert_tensor_parallel", tp, line_of(tp_o),
            "--tensor-model-parallel-size (Megatron-LM's default --expert-tensor-parallel-size)");
  }

  // The pipeline: 1F1B, or interleaved 1F1B with virtual stages, which one of four flags gives
  // (at most one: arguments.py).
  out.set("pipeline_parallel", pp, line_of(pp_o),
          origin(pp_o, "--pipeline-model-parallel-size", "Megatron-LM's default"));
  std::int64_t chunks = 1;
  {
    const Occurrence* given = nullptr;
    for (const char* flag :
         {"--pipeline-model-parallel-layout", "--num-virtual-stages-per-pipeline-rank",
          "--virtual-pipeline-model-parallel-size", "--num-layers-per-virtual-pipeline-stage"}) {
      const auto* o = a.use(flag);
      if (o == nullptr) continue;
      if (given != nullptr) {
        a.fail(o, fmt::format("beside {}: give only one of the layout and the virtual stages "
                              "(arguments.py)",
                              given->flag));
      }
      given = o;
    }
    if (given != nullptr && given->flag == "--pipeline-model-parallel-layout") {
      std::int64_t stages = 0;
      try {
        stages = pipeline_layout_stages(given->values[0]);
      } catch (const ParamError& e) {
        a.fail(given, e.what());
      }
      if (stages % pp != 0) {
        a.fail(given,
               fmt::format("{} stages are not a multiple of the pipeline size {}", stages, pp));
      }
      chunks = stages / pp;
      out.set("pipeline_layout", given->values[0], given->line, given->flag);
    } else if (given != nullptr && given->flag == "--num-layers-per-virtual-pipeline-stage") {
      const auto* layers = a.use("--num-layers");
      if (layers == nullptr) {
        a.fail(given,
               "needs --num-layers in the file: Megatron-LM derives the virtual stages "
               "from the model's layers");
      }
      std::int64_t count = layers->integer;
      if (a.on("--account-for-embedding-in-pipeline-split")) ++count;
      if (a.on("--account-for-loss-in-pipeline-split")) ++count;
      if (count % pp != 0 || (count / pp) % given->integer != 0) {
        a.fail(given, fmt::format("{} layers over {} pipeline stages are not whole stages of {} "
                                  "layers (arguments.py)",
                                  count, pp, given->integer));
      }
      chunks = count / pp / given->integer;
    } else if (given != nullptr) {
      chunks = given->integer;
    }
    if (pp > 1) {
      const char* name = chunks > 1 ? "interleaved" : "1f1b";
      out.set("schedule", find_schedule(name).name, given != nullptr ? given->line : line_of(pp_o),
              given != nullptr ? given->flag + " (interleaved 1F1B with virtual stages)"
                               : std::string("--pipeline-model-parallel-size (Megatron-LM's "
                                             "1F1B)"));
      if (chunks > 1) out.set("chunks", chunks, given->line, given->flag);
    } else if (given != nullptr) {
      a.why(given->flag, "pipeline parallel size is 1");
      chunks = 1;
    }
    for (const char* flag :
         {"--decoder-first-pipeline-num-layers", "--decoder-last-pipeline-num-layers"}) {
      if (const auto* o = a.use(flag)) {
        out.note(
            fmt::format("{} {}: the first and last stages' layers are not read; pipetab "
                        "splits the layers evenly (a pipeline_layout says otherwise)",
                        flag, o->integer));
      }
    }
    for (const char* flag :
         {"--account-for-embedding-in-pipeline-split", "--account-for-loss-in-pipeline-split"}) {
      if (a.on(flag)) {
        out.note(
            fmt::format("{}: Megatron-LM counts it as a layer when it splits the model; "
                        "pipetab's even split does not (a pipeline_layout can)",
                        flag));
      }
    }
  }

  // The batch: the global one defaults to one microbatch per replica (arguments.py).
  const auto* mbs = a.use("--micro-batch-size");
  const auto* gbs = a.use("--global-batch-size");
  const auto* seq = a.use("--seq-length");
  if (seq != nullptr) {
    out.set("seq_len", seq->integer, seq->line, "--seq-length");
  } else {
    out.note("no --seq-length: the sequence comes from the model or the command");
  }
  if (mbs != nullptr) out.set("micro_batch", mbs->integer, mbs->line, "--micro-batch-size");
  if (gbs != nullptr) {
    if (mbs != nullptr && dp && gbs->integer % (mbs->integer * *dp) != 0) {
      a.fail(gbs, fmt::format("{} is not a multiple of --micro-batch-size {} × data parallel {} "
                              "(Megatron-LM's microbatch calculator)",
                              gbs->integer, mbs->integer, *dp));
    }
    out.set("global_batch", gbs->integer, gbs->line, "--global-batch-size");
  } else if (mbs != nullptr && dp) {
    out.set("global_batch", mbs->integer * *dp, 0,
            "--global-batch-size (Megatron-LM's default: --micro-batch-size × data parallel)");
  }
  a.why("--rampup-batch-size", "the global batch's ramp-up: the final batch is simulated");

  // Precision: FP8 with Transformer Engine's recipes, else the 16-bit format, else fp32.
  const auto* bf16 = a.use("--bf16");
  const auto* fp16 = a.use("--fp16");
  const auto* fp8 = a.use("--fp8-format");
  const auto* recipe = a.use("--fp8-recipe");
  // FP4 (arguments.py: --fp4-format e2m1, --fp4-recipe nvfp4 by default): Transformer Engine's
  // NVFP4 recipe, which pipetab carries as the FP8 job's nvfp4 recipe (model/job.hpp).
  const auto* fp4 = a.use("--fp4-format");
  const auto* fp4_recipe = a.use("--fp4-recipe");
  if (fp4 != nullptr && fp8 != nullptr)
    a.fail(fp4, "beside --fp8-format: give one (a layer runs one recipe)");
  if (fp4_recipe != nullptr && fp4 == nullptr)
    a.why("--fp4-recipe", "no --fp4-format: the run is not FP4");
  if (fp4_recipe != nullptr && fp4_recipe->values[0] == "custom")
    a.fail(fp4_recipe, "custom (a quantizer factory) is not modelled");
  if (bf16 != nullptr && fp16 != nullptr) a.fail(fp16, "beside --bf16: give one (arguments.py)");
  std::string precision = "fp32";
  if (fp4 != nullptr) {
    precision = "fp8";
    out.set("fp8_recipe", "nvfp4", line_of(fp4), "--fp4-format (Transformer Engine's NVFP4)");
  } else if (fp8 != nullptr) {
    precision = "fp8";
    const std::string r = recipe != nullptr ? recipe->values[0] : "delayed";
    if (r == "custom") a.fail(recipe, "custom (a quantizer factory) is not modelled");
    out.set("fp8_recipe", r, line_of(recipe),
            origin(recipe, "--fp8-recipe", "Megatron-LM's default delayed"));
  } else {
    if (recipe != nullptr) a.why("--fp8-recipe", "no --fp8-format: the run is not FP8");
    if (bf16 != nullptr) precision = "bf16";
    if (fp16 != nullptr) precision = "fp16";
  }
  {
    const Occurrence* from = fp4 != nullptr    ? fp4
                             : fp8 != nullptr  ? fp8
                             : bf16 != nullptr ? bf16
                                               : fp16;
    out.set("precision", precision, line_of(from),
            from != nullptr ? from->flag : "--bf16 (neither it nor --fp16 given: fp32)");
  }

  // Recomputation (transformer_config.py): whole layers (uniform: every layer, N to a
  // checkpoint; block: the first N of each model chunk), or the modules --recompute-modules
  // names.
  {
    const auto* granularity = a.use("--recompute-granularity");
    const auto* activations = a.use("--recompute-activations");
    const auto* method = a.use("--recompute-method");
    const auto* count = a.use("--recompute-num-layers");
    const auto* modules = a.use("--recompute-modules");
    const std::string g = granularity != nullptr   ? granularity->values[0]
                          : activations != nullptr ? "selective"
                                                   : "none";
    const Occurrence* g_o = granularity != nullptr ? granularity : activations;
    std::string recompute = "none", moe = "none";
    const Occurrence* moe_o = g_o;
    if (g == "full") {
      if (method == nullptr)
        a.fail(g_o, "full needs --recompute-method uniform or block (transformer_config.py)");
      if (count == nullptr)
        a.fail(g_o, "full needs --recompute-num-layers (transformer_config.py)");
      recompute = "full";
      if (method->values[0] == "uniform") {
        if (count->integer > 1) {
          out.note(
              fmt::format("--recompute-method uniform --recompute-num-layers {}: every "
                          "layer is recomputed, {} to a checkpoint; pipetab keeps each "
                          "layer's input",
                          count->integer, count->integer));
        }
      } else if (const auto* layers = a.peek("--num-layers")) {
        const double per_chunk =
            static_cast<double>(layers->integer) / static_cast<double>(pp * chunks);
        if (static_cast<double>(count->integer) < per_chunk) {
          a.fail(count, fmt::format("block recomputes {} of each model chunk's {:g} layers; "
                                    "recomputing some of a stage's layers is not modelled "
                                    "(pipetab recomputes all or none)",
                                    count->integer, per_chunk));
        }
      } else {
        out.note(
            fmt::format("--recompute-method block --recompute-num-layers {} is read as "
                        "full recomputation: right when {} covers every layer of a model "
                        "chunk (the file has no --num-layers to check)",
                        count->integer, count->integer));
      }
      if (modules != nullptr) a.why("--recompute-modules", "--recompute-granularity is full");
    } else if (g == "selective") {
      if (count != nullptr) {
        a.fail(count,
               "with --recompute-granularity selective: Megatron-LM refuses it "
               "(transformer_config.py)");
      }
      if (method != nullptr) a.why("--recompute-method", "--recompute-granularity is selective");
      // Megatron-LM's default modules: core_attn.
      const std::vector<std::string> names =
          modules != nullptr ? modules->values : std::vector<std::string>{"core_attn"};
      const auto has = [&](std::string_view m) {
        return std::find(names.begin(), names.end(), m) != names.end();
      };
      if (has("core_attn")) recompute = "selective";
      // transformer_layer.py: "mlp" recomputes the dense layers' MLP (every layer's in a dense
      // model), "moe" the MoE layers' block: pipetab's dense_mlp_recompute and moe_recompute mlp,
      // which recomputes the dense layers' MLP too.
      if (has("moe")) {
        moe = "mlp";
        if (!has("mlp")) {
          out.note(
              "--recompute-modules moe: Megatron-LM recomputes only the MoE layers' block; "
              "pipetab's moe_recompute mlp recomputes the dense layers' MLP too");
        }
      } else {
        if (has("moe_act")) moe = "moe_act";
        if (has("mlp")) out.set("dense_mlp_recompute", true, line_of(modules), modules->flag);
      }
      // transformer_layer.py: "layernorm" recomputes the norms that are modules of their own,
      // under Transformer Engine the MoE layers' pre-MLP norm (model/job.hpp).
      if (has("layernorm")) out.set("moe_recompute_norm", true, line_of(modules), modules->flag);
      // multi_latent_attention.py: the up-projections and RoPE, their outputs freed.
      if (has("mla_up_proj"))
        out.set("mla_recompute_up_proj", true, line_of(modules), modules->flag);
      for (const auto& m : names) {
        if (m == "shared_experts") {
          out.note(
              fmt::format("--recompute-modules {}: not modelled (the simulation keeps what "
                          "it would recompute)",
                          m));
        }
      }
      if (modules != nullptr) moe_o = modules;
    } else {
      for (const auto* o : {method, count, modules}) {
        if (o != nullptr) a.why(o->flag, "no --recompute-granularity");
      }
    }
    if (const auto* o = a.use("--distribute-saved-activations"))
      out.note(fmt::format("{}: not modelled", o->flag));
    out.set("recompute", recompute, line_of(g_o),
            g_o != nullptr ? g_o->flag : "--recompute-granularity (not given: none)");
    out.set("moe_recompute", moe, line_of(moe_o),
            moe_o != nullptr ? moe_o->flag : "--recompute-modules (not given: none)");
  }

  // The MoE dispatcher: alltoall, or flex with DeepEP (the default backend at @67f3515; before
  // --moe-flex-dispatcher-backend, --moe-enable-deepep). Megatron-LM's default is allgather.
  {
    const auto* type = a.use("--moe-token-dispatcher-type");
    const auto* deepep = a.use("--moe-enable-deepep");
    const auto* backend = a.use("--moe-flex-dispatcher-backend");
    if (type != nullptr || experts != nullptr) {
      const std::string t = type != nullptr ? type->values[0] : "allgather";
      const Occurrence* at = type != nullptr ? type : experts;
      if (t == "allgather") {
        a.fail(at, fmt::format("{}the allgather dispatcher (every token gathered to every "
                               "expert-parallel rank, each keeping its experts' tokens) is not "
                               "modelled: use alltoall or flex",
                               type != nullptr ? "" : "Megatron-LM's default dispatcher: "));
      }
      std::string dispatcher = "alltoall";
      const Occurrence* from = type;
      if (t == "flex") {
        dispatcher = backend != nullptr && deepep == nullptr ? backend->values[0] : "deepep";
        from = deepep != nullptr ? deepep : backend != nullptr ? backend : type;
      } else {
        for (const auto* o : {deepep, backend}) {
          if (o != nullptr) a.why(o->flag, "--moe-token-dispatcher-type is not flex");
        }
      }
      out.set("moe_dispatcher", dispatcher, from->line,
              from == type && t == "flex"
                  ? "--moe-token-dispatcher-type (flex: DeepEP, the default backend)"
                  : from->flag);
    }
    if (const auto* o = a.use("--moe-expert-capacity-factor")) {
      out.set("moe_capacity_factor", o->number, o->line, o->flag);
      if (!a.on("--moe-pad-expert-input-to-capacity")) {
        out.note(
            "--moe-expert-capacity-factor without --moe-pad-expert-input-to-capacity: "
            "Megatron-LM drops tokens past the capacity but does not pad to it; pipetab "
            "pads (each expert computes its full capacity)");
      }
    } else if (a.on("--moe-pad-expert-input-to-capacity")) {
      a.why("--moe-pad-expert-input-to-capacity", "no --moe-expert-capacity-factor");
    }
    const auto* shared = a.use("--moe-shared-expert-overlap");
    out.set("moe_shared_expert_overlap", shared != nullptr, line_of(shared),
            origin(shared, "--moe-shared-expert-overlap", "not given"));
    const auto* a2a = a.use("--overlap-moe-expert-parallel-comm");
    out.set("a2a_overlap", a2a != nullptr, line_of(a2a),
            origin(a2a, "--overlap-moe-expert-parallel-comm", "not given"));
    // Experimental code paths, of which pipetab models one: DeepEP's received indices made
    // multi-hot in a fused kernel (token_dispatcher.py, get_permuted_hidden_states_by_experts:
    // is_experimental_enabled() and moe_permute_fusion). Without both, the megatron-core stack's
    // PyTorch indexing. pipetab prices the permutation as TE's fused one either way.
    const auto* permute = a.use("--moe-permute-fusion");
    if (const auto* o = a.use("--enable-experimental")) {
      out.set("fused_multihot", permute != nullptr, o->line,
              permute != nullptr ? "--enable-experimental with --moe-permute-fusion"
                                 : "--enable-experimental without --moe-permute-fusion");
    }
  }

  // Data parallelism: FSDP (PyTorch's FSDP2, or Megatron-FSDP sharding all of optimizer state,
  // gradients and parameters), the distributed optimizer, the gradient reduction's overlap.
  bool fsdp = false;
  bool distributed_optimizer = false;
  const Occurrence* distributed_o = a.use("--use-distributed-optimizer");
  distributed_optimizer = distributed_o != nullptr;
  {
    const auto* fsdp2 = a.use("--use-torch-fsdp2");
    const Occurrence* megatron = a.use("--use-megatron-fsdp");
    if (megatron == nullptr) megatron = a.use("--use-custom-fsdp");
    const auto* strategy = a.use("--data-parallel-sharding-strategy");
    const auto* keep = a.use("--torch-fsdp2-no-reshard-after-forward");
    if (fsdp2 != nullptr && megatron != nullptr)
      a.fail(fsdp2, fmt::format("beside {}: give one FSDP", megatron->flag));
    if (fsdp2 != nullptr) {
      // arguments.py's rules for --use-torch-fsdp2.
      if (pp > 1) a.fail(fsdp2, "with pipeline parallelism: Megatron-LM refuses it (arguments.py)");
      if (ep > 1) a.fail(fsdp2, "with expert parallelism: Megatron-LM refuses it (arguments.py)");
      if (distributed_o != nullptr) {
        a.fail(fsdp2, "with --use-distributed-optimizer: Megatron-LM refuses it (arguments.py)");
      }
      if (a.peek("--no-gradient-accumulation-fusion") == nullptr) {
        out.note(
            "--use-torch-fsdp2 without --no-gradient-accumulation-fusion: Megatron-LM "
            "refuses gradient accumulation fusion with FSDP2");
      }
      fsdp = true;
      out.set("fsdp", true, fsdp2->line, fsdp2->flag);
      out.set("fsdp_impl", "fsdp2", fsdp2->line, fsdp2->flag);
      out.set("reshard_after_forward", keep == nullptr, line_of(keep),
              origin(keep, "--torch-fsdp2-no-reshard-after-forward", "not given: resharded"));
    } else if (megatron != nullptr) {
      const std::string s = strategy != nullptr ? strategy->values[0] : "no_shard";
      const Occurrence* from = strategy != nullptr ? strategy : megatron;
      if (s == "optim_grads_params") {
        fsdp = true;
        out.set("fsdp", true, from->line, from->flag);
        out.set("fsdp_impl", "megatron", megatron->line, megatron->flag);
      } else {
        out.set("fsdp", false, from->line,
                fmt::format("{} {} (parameters not sharded)", from->flag, s));
        if (s == "optim" || s == "optim_grads") {
          distributed_optimizer = true;
          distributed_o = from;
          if (s == "optim_grads") {
            out.note(
                "--data-parallel-sharding-strategy optim_grads (ZeRO-2) is read as the "
                "distributed optimizer: its gradient sharding is not modelled (each rank "
                "keeps whole gradients)");
          }
        } else {
          out.note(fmt::format("{} with no_shard: plain data parallelism", megatron->flag));
        }
      }
      if (keep != nullptr) a.why(keep->flag, "no --use-torch-fsdp2");
    } else {
      out.set("fsdp", false, 0, "--use-torch-fsdp2, --use-megatron-fsdp (not given)");
      if (strategy != nullptr) a.why(strategy->flag, "no --use-megatron-fsdp");
      if (keep != nullptr) a.why(keep->flag, "no --use-torch-fsdp2");
    }
    // --fp8-param-gather keeps the FP8 weights alone (model/job.hpp fp8_params) and gathers
    // them in FP8, through FSDP's all-gathers or the distributed optimizer's.
    const auto* fp8_gather = a.use("--fp8-param-gather");
    if (fp8 != nullptr) {
      out.set("fp8_params", fp8_gather != nullptr, line_of(fp8_gather),
              origin(fp8_gather, "--fp8-param-gather", "not given"));
      if (fsdp)
        out.set("fsdp_fp8_all_gather", fp8_gather != nullptr, line_of(fp8_gather),
                origin(fp8_gather, "--fp8-param-gather", "not given"));
    } else if (fp8_gather != nullptr) {
      a.why("--fp8-param-gather", "the run is not FP8");
    }
    // --fp8-dot-product-attention: Transformer Engine's fp8_dpa (model/job.hpp fp8_attention).
    const auto* fp8_dpa = a.use("--fp8-dot-product-attention");
    if (fp8 != nullptr) {
      out.set("fp8_attention", fp8_dpa != nullptr, line_of(fp8_dpa),
              origin(fp8_dpa, "--fp8-dot-product-attention", "not given"));
    } else if (fp8_dpa != nullptr) {
      a.why("--fp8-dot-product-attention", "the run is not FP8");
    }
  }
  // Transformer Engine's CPU offload of whole layers (transformer_config.py's cpu_offloading,
  // cpu_offloading_num_layers; the activations only, as the Blackwell recipes run it).
  if (const auto* layers = a.use("--cpu-offloading-num-layers")) {
    out.set("offload_layers", layers->integer, layers->line, "--cpu-offloading-num-layers");
    a.use("--cpu-offloading");
  } else if (const auto* offload = a.use("--cpu-offloading")) {
    a.fail(offload, "without --cpu-offloading-num-layers: how many layers to offload");
  }
  // CUDA graphs (transformer_config.py @d728871): the whole iteration, or every layer whole
  // (the scope empty or "full": the host issues a graph per layer, as good as the passes
  // captured for its time), are cuda_graphs; named modules (either implementation, Transformer
  // Engine's or Megatron-Core's local one) are cuda_graph_scope. --enable-cuda-graph is the
  // legacy spelling of the local implementation.
  {
    const auto* impl = a.use("--cuda-graph-impl");
    const auto* scope = a.use("--cuda-graph-scope");
    if (const auto* modules = a.use("--cuda-graph-modules")) {
      if (scope != nullptr) a.fail(modules, "give --cuda-graph-scope or --cuda-graph-modules");
      scope = modules;
    }
    const auto* legacy = a.use("--enable-cuda-graph");
    const auto* on = impl != nullptr ? impl : legacy;
    const std::string_view kind = impl != nullptr     ? std::string_view(impl->values[0])
                                  : legacy != nullptr ? std::string_view("local")
                                                      : std::string_view("none");
    const auto named = [&](std::string_view m) {
      return scope != nullptr &&
             std::find(scope->values.begin(), scope->values.end(), m) != scope->values.end();
    };
    if (kind == "none") {
      if (scope != nullptr) a.why(scope->flag, "no CUDA graphs (--cuda-graph-impl none)");
    } else if (named("full_iteration") && kind == "transformer_engine") {
      a.fail(scope, "full_iteration needs --cuda-graph-impl local (Megatron-Core's rule)");
    } else if (kind == "full_iteration" || scope == nullptr || scope->values.empty() ||
               named("full") || named("full_iteration")) {
      out.set("cuda_graphs", "true", on->line, on->flag);
    } else if (named("moe")) {
      a.fail(scope, "moe: the whole MoE layer captured needs drop-padding, not modelled");
    } else {
      out.set("cuda_graph_scope", fmt::format("{}", fmt::join(scope->values, "+")), scope->line,
              scope->flag);
    }
  }
  // Megatron-Core's fine-grained offload (transformer_config.py's
  // fine_grained_activation_offloading, offload_modules): every group of the modules, as its
  // defaults run it.
  {
    const auto* on = a.use("--fine-grained-activation-offloading");
    const auto* modules = a.use("--offload-modules");
    const auto* min_size = a.use("--min-offloaded-tensor-size");
    const auto* fraction = a.use("--activation-offload-fraction");
    const auto* delta = a.use("--delta-offload-bytes-across-pp-ranks");
    if (on != nullptr) {
      if (modules == nullptr || modules->values.empty())
        a.fail(on, "without --offload-modules: which modules to offload");
      out.set("offload_modules", fmt::format("{}", fmt::join(modules->values, "+")), modules->line,
              modules->flag);
      if (min_size != nullptr && static_cast<double>(min_size->integer) != kMinOffloadedElements) {
        a.fail(min_size, fmt::format("{} elements: not modelled (pipetab skips tensors under "
                                     "Megatron-Core's default, {:.0f})",
                                     min_size->integer, kMinOffloadedElements));
      }
      if (fraction != nullptr && fraction->number != 1.0) {
        a.fail(fraction,
               "not modelled: pipetab offloads every group of the modules (Megatron-"
               "Core's default fraction, 1)");
      }
      if (delta != nullptr && delta->integer != 0) {
        a.fail(delta,
               "not modelled: pipetab offloads the same bytes on every pipeline rank "
               "(Megatron-Core's default, 0)");
      }
    } else {
      for (const auto* o : {modules, min_size, fraction, delta}) {
        if (o != nullptr) a.why(o->flag, "no --fine-grained-activation-offloading");
      }
    }
  }
  out.set("distributed_optimizer", distributed_optimizer, line_of(distributed_o),
          origin(distributed_o,
                 distributed_o != nullptr ? distributed_o->flag : "--use-distributed-optimizer",
                 "not given"));
  {
    const auto* overlap = a.use("--overlap-grad-reduce");
    const auto* bucket = a.use("--ddp-bucket-size");
    out.set("dp_overlap", overlap != nullptr, line_of(overlap),
            origin(overlap, "--overlap-grad-reduce", "not given"));
    // --ddp-bucket-size counts parameters (distributed_data_parallel_config.py); their gradients
    // are reduced in fp32 unless --grad-reduce-in-bf16.
    const bool bf16_grads = a.on("--grad-reduce-in-bf16");
    const double grad_bytes = bf16_grads ? 2.0 : 4.0;
    if (overlap != nullptr) {
      if (bucket != nullptr) {
        out.set("dp_bucket_bytes", static_cast<double>(bucket->integer) * grad_bytes, bucket->line,
                fmt::format("--ddp-bucket-size ({} gradients of {:g} bytes)", bucket->integer,
                            grad_bytes));
      } else if (dp) {
        // distributed_data_parallel.py's default: max(40000000, 1000000 × DP) parameters.
        const double params = std::max(4e7, 1e6 * static_cast<double>(*dp));
        out.set("dp_bucket_bytes", params * grad_bytes, 0,
                fmt::format("--ddp-bucket-size (Megatron-Core's default max(4e7, 1e6 × DP) = {:g} "
                            "gradients of {:g} bytes)",
                            params, grad_bytes));
      } else {
        out.note(
            "--overlap-grad-reduce without --ddp-bucket-size: Megatron-Core's bucket "
            "depends on the data-parallel size (pass --gpus); pipetab's default applies");
      }
    } else if (bucket != nullptr) {
      a.why("--ddp-bucket-size", "no --overlap-grad-reduce: the gradients are reduced at once");
    }
  }

  // Tensor parallelism's overlap: the backward collectives always (Megatron-LM since 2021), all
  // of them with --tp-comm-overlap, which needs sequence parallelism (arguments.py).
  {
    const auto* all = a.use("--tp-comm-overlap");
    if (all != nullptr && !sp) {
      a.fail(all,
             "without --sequence-parallel and a tensor parallel size above 1: Megatron-LM "
             "refuses it (arguments.py)");
    }
    if (tp > 1) {
      out.set("tp_overlap", all != nullptr ? "all" : "backward", line_of(all),
              origin(all, "--tp-comm-overlap", "not given: the backward collectives overlap"));
    }
  }

  // The stack: fused attention, element-wise fusions, gradient accumulation fusion.
  {
    const auto* flash = a.use("--use-flash-attn");
    const auto* backend = a.use("--attention-backend");
    const std::string b = backend != nullptr ? backend->values[0] : "auto";
    bool fused = b == "flash" || b == "fused";
    std::string from =
        backend != nullptr ? backend->flag : "--attention-backend (Megatron-LM's default auto)";
    if (b == "auto") {
      // Transformer Engine picks flash or cuDNN fused attention for 16-bit inputs; fp32 falls
      // back to its unfused kernel.
      fused = precision != "fp32";
      from += fused ? ": Transformer Engine's fused kernels" : ": unfused in fp32";
    }
    if (flash != nullptr && backend == nullptr) {
      fused = true;
      from = flash->flag;
    }
    const Occurrence* at = backend != nullptr ? backend : flash;
    // Megatron-Core with Transformer Engine (model/stack.hpp): auto is its kernel choice (cuDNN
    // on Hopper, FlashAttention before); the flags below set the rest of what the stack would.
    out.set("stack", std::string("megatron-core"), 0, "Megatron-LM's arguments");
    out.set("flash_attention", fused, line_of(at), from);
    // Named backends: TE's FusedAttention is cuDNN's kernel; its FlashAttention backend runs
    // flash-attn 2 (FlashAttention-3 only where flash_attn_3 is installed on Hopper, which the
    // arguments do not say).
    if (b == "fused") out.set("attention_kernel", std::string("cudnn"), line_of(at), from);
    if (b == "flash") out.set("attention_kernel", std::string("flash2"), line_of(at), from);
    int unfused = 0;
    const Occurrence* first = nullptr;
    for (const auto flag : kUnfused) {
      if (const auto* o = a.use(flag)) {
        ++unfused;
        if (first == nullptr || o->line < first->line) first = o;
      }
    }
    if (unfused > 0 && unfused < static_cast<int>(std::size(kUnfused))) {
      out.note(
          fmt::format("{} of Megatron-LM's {} element-wise fusions turned off: read as "
                      "fused (all five off is unfused)",
                      unfused, std::size(kUnfused)));
    }
    out.set("fused_elementwise", unfused < static_cast<int>(std::size(kUnfused)), line_of(first),
            first != nullptr ? std::string("--no-*-fusion")
                             : std::string("--no-*-fusion (none given: fused)"));
    const auto* no_gaf = a.use("--no-gradient-accumulation-fusion");
    out.set("grad_accumulation_fusion", no_gaf == nullptr, line_of(no_gaf),
            origin(no_gaf, "--no-gradient-accumulation-fusion", "not given: fused"));
  }

  a.why("--overlap-param-gather", "the distributed optimizer's all-gather is assumed overlapped");
  for (const char* old : {"--checkpoint-activations", "--activations-checkpoint-method",
                          "--activations-checkpoint-num-layers"}) {
    a.why(old,
          "Megatron-LM's recomputation flag before 2022, not read (today's: "
          "--recompute-granularity full --recompute-method uniform)");
  }
  a.list_ignored();
  return out.finish();
}

namespace {

[[noreturn]] void megatron_cannot(const std::string& what) {
  throw ParamError(fmt::format("Megatron-LM arguments: {}", what));
}

}  // namespace

std::string megatron_arguments(const Job& job, const Layout& layout, std::int64_t gpus,
                               std::string_view comment) {
  detail::check_written_layout(job, layout, gpus, "Megatron-LM");
  const bool sp = layout.sequence_parallel == true;
  std::vector<std::string> flags;
  const auto add = [&](std::string flag) { flags.push_back(std::move(flag)); };

  add(fmt::format("--tensor-model-parallel-size {}", layout.tp));
  add(fmt::format("--pipeline-model-parallel-size {}", layout.pp));
  if (layout.pp > 1) {
    const ScheduleInfo& info = layout.schedule.empty()
                                   ? find_schedule(layout.chunks > 1 ? "interleaved" : "1f1b")
                                   : find_schedule(layout.schedule);
    std::int64_t chunks = 1;
    if (info.name == "1f1b") {
      if (layout.chunks > 1)
        megatron_cannot(fmt::format("chunks {}: 1f1b takes none", layout.chunks));
    } else if (info.name == "interleaved") {
      chunks = layout.chunks > 0 ? layout.chunks : info.default_chunks;
    } else {
      megatron_cannot(
          fmt::format("schedule {}: Megatron-LM runs 1F1B and interleaved 1F1B", info.name));
    }
    if (!layout.pipeline_layout.empty()) {
      if (pipeline_layout_stages(layout.pipeline_layout) != layout.pp * chunks) {
        megatron_cannot(
            fmt::format("pipeline_layout '{}' has {} stages, not pipeline_parallel {} × "
                        "chunks {}",
                        layout.pipeline_layout, pipeline_layout_stages(layout.pipeline_layout),
                        layout.pp, chunks));
      }
      add(fmt::format("--pipeline-model-parallel-layout '{}'", layout.pipeline_layout));
    } else if (chunks > 1) {
      add(fmt::format("--num-virtual-stages-per-pipeline-rank {}", chunks));
    }
  } else if (!layout.pipeline_layout.empty()) {
    megatron_cannot("pipeline_layout without pipeline parallelism");
  }
  add(fmt::format("--context-parallel-size {}", layout.cp));
  if (layout.cp > 1) {
    add(fmt::format("--cp-comm-type {}", layout.cp_method == CpMethod::Ring        ? "p2p"
                                         : layout.cp_method == CpMethod::AllGather ? "all_gather"
                                                                                   : "a2a"));
  }
  add(fmt::format("--expert-model-parallel-size {}", layout.ep));
  add(fmt::format("--expert-tensor-parallel-size {}", layout.etp));
  if (layout.tp > 1 && sp) add("--sequence-parallel");
  add(fmt::format("--micro-batch-size {}", job.micro_batch));
  add(fmt::format("--global-batch-size {}", job.global_batch));
  add(fmt::format("--seq-length {}", job.seq_len));

  switch (job.precision) {
    case Precision::FP32:
      break;
    case Precision::BF16:
      add("--bf16");
      break;
    case Precision::FP16:
      add("--fp16");
      break;
    case Precision::FP8:
      if (job.fp8_recipe == Fp8Recipe::Rowwise)
        megatron_cannot(
            "fp8_recipe rowwise: Transformer Engine's recipes are tensorwise, delayed and "
            "blockwise");
      add("--bf16");
      if (job.fp8_recipe == Fp8Recipe::Nvfp4) {
        add("--fp4-format e2m1");
        add("--fp4-recipe nvfp4");
        break;
      }
      add("--fp8-format hybrid");
      add(fmt::format("--fp8-recipe {}", to_string(job.fp8_recipe)));
      break;
    case Precision::TF32:
      megatron_cannot("precision tf32: Megatron-LM trains in fp32, bf16, fp16 or FP8");
      break;
    case Precision::FP4:
      megatron_cannot("precision fp4: FP4 is the nvfp4 recipe of an fp8 job");
  }

  std::vector<std::string> modules;
  switch (job.recompute) {
    case Recompute::None:
      break;
    case Recompute::Selective:
      modules.push_back("core_attn");
      break;
    case Recompute::Full:
      if (job.moe.recompute != MoeRecompute::None)
        megatron_cannot(
            fmt::format("moe_recompute {} with full recomputation, which recomputes the MoE "
                        "blocks already",
                        to_string(job.moe.recompute)));
      // The recompute modules: what full recomputation recomputes already.
      for (const auto& [on, key, what] :
           {std::tuple{job.moe.recompute_norm, "moe_recompute_norm", "the norms"},
            std::tuple{job.dense_mlp_recompute, "dense_mlp_recompute", "the MLPs"},
            std::tuple{job.mla_recompute_up_proj, "mla_recompute_up_proj", "the up-projections"}}) {
        if (on)
          megatron_cannot(
              fmt::format("{} with full recomputation, which recomputes {} already", key, what));
      }
      add("--recompute-granularity full");
      add("--recompute-method uniform");
      add("--recompute-num-layers 1");
      break;
    case Recompute::SelectiveOp:
    case Recompute::EveryOtherLayer:
    case Recompute::Lgd:
      megatron_cannot(
          fmt::format("recompute {}: torchtitan's or PipeOffload's; Megatron-LM recomputes whole "
                      "layers (full) or modules (selective)",
                      to_string(job.recompute)));
  }
  if (job.moe.recompute == MoeRecompute::MoeAct) modules.push_back("moe_act");
  if (job.moe.recompute_norm) modules.push_back("layernorm");
  if (job.mla_recompute_up_proj) modules.push_back("mla_up_proj");
  if (job.dense_mlp_recompute && job.moe.recompute != MoeRecompute::Mlp) modules.push_back("mlp");
  if (job.moe.recompute == MoeRecompute::Mlp) {
    modules.push_back("mlp");
    modules.push_back("moe");
  }
  if (!modules.empty()) {
    add("--recompute-granularity selective");
    add(fmt::format("--recompute-modules {}", fmt::join(modules, " ")));
  }

  if (is_flex(job.moe.dispatcher)) {
    add("--moe-token-dispatcher-type flex");
    add(fmt::format("--moe-flex-dispatcher-backend {}", to_string(job.moe.dispatcher)));
    // The fused multi-hot conversion runs under both (Stack::fused_multihot).
    if (job.moe.dispatcher == MoeDispatcher::DeepEp && job.stack.fused_multihot) {
      add("--moe-permute-fusion");
      add("--enable-experimental");
    }
  } else {
    add("--moe-token-dispatcher-type alltoall");
  }
  if (job.moe.capacity_factor) {
    if (!(*job.moe.capacity_factor > 0) || !std::isfinite(*job.moe.capacity_factor))
      megatron_cannot(
          fmt::format("moe_capacity_factor {} is not a capacity", *job.moe.capacity_factor));
    add(fmt::format("--moe-expert-capacity-factor {}", *job.moe.capacity_factor));
    add("--moe-pad-expert-input-to-capacity");
  }
  if (job.moe.fp8_dispatch)
    megatron_cannot("moe_fp8_dispatch: Megatron-LM has no flag for an FP8 dispatch at @67f3515");
  if (job.moe.shared_expert_overlap) add("--moe-shared-expert-overlap");
  if (job.a2a_overlap) add("--overlap-moe-expert-parallel-comm");

  if (layout.fsdp.enabled) {
    if (layout.fsdp.shard > 0)
      megatron_cannot(
          fmt::format("fsdp_shard {} (HSDP) is not written for Megatron-LM", layout.fsdp.shard));
    if (layout.fsdp.impl == FsdpImpl::Fsdp2) {
      if (layout.pp > 1 || layout.ep > 1 || job.distributed_optimizer ||
          job.stack.grad_accumulation_fusion)
        megatron_cannot(
            "fsdp2 with pipeline or expert parallelism, the distributed optimizer or gradient "
            "accumulation fusion: Megatron-LM refuses --use-torch-fsdp2 beside them");
      add("--use-torch-fsdp2");
      if (layout.fsdp.reshard_after_forward == false) add("--torch-fsdp2-no-reshard-after-forward");
    } else {
      if (layout.fsdp.reshard_after_forward)
        megatron_cannot("reshard_after_forward with Megatron-FSDP: it has no such switch");
      add("--use-megatron-fsdp");
      add("--data-parallel-sharding-strategy optim_grads_params");
    }
  }
  if (layout.fsdp.fp8_all_gather && (!layout.fsdp.enabled || job.precision != Precision::FP8))
    megatron_cannot("fsdp_fp8_all_gather without fsdp and fp8");
  // One flag does both: Megatron-FSDP's FP8 all-gather comes with FP8 weights.
  if (layout.fsdp.fp8_all_gather != (job.fp8_params && layout.fsdp.enabled)) {
    megatron_cannot(layout.fsdp.fp8_all_gather
                        ? "fsdp_fp8_all_gather without fp8_params: --fp8-param-gather does both"
                        : "fp8_params with FSDP but not fsdp_fp8_all_gather: --fp8-param-gather "
                          "does both");
  }
  if (job.fp8_params) add("--fp8-param-gather");
  if (job.fp8_attention) add("--fp8-dot-product-attention");
  if (job.distributed_optimizer) add("--use-distributed-optimizer");
  if (job.offload_layers > 0) {
    add("--cpu-offloading");
    add(fmt::format("--cpu-offloading-num-layers {}", job.offload_layers));
  }
  if (job.stack.cuda_graphs) {
    add("--cuda-graph-impl local");
    add("--cuda-graph-scope full_iteration");
  } else if (job.stack.graph_modules != 0) {
    std::string names = name_set_text(kGraphModuleNames, job.stack.graph_modules);
    std::replace(names.begin(), names.end(), '+', ' ');
    add("--cuda-graph-impl transformer_engine");
    add(fmt::format("--cuda-graph-scope {}", names));
  }
  if (job.offload_modules != 0) {
    add("--fine-grained-activation-offloading");
    std::string names = offload_modules_text(job.offload_modules);
    std::replace(names.begin(), names.end(), '+', ' ');
    add(fmt::format("--offload-modules {}", names));
  }
  if (job.offload_activations > 0.0) {
    megatron_cannot(
        "offload_activations: PipeOffload's share of each stage's activations; Megatron-LM's "
        "fine-grained offload names modules instead");
  }
  if (job.dp_overlap) {
    add("--overlap-grad-reduce");
    // Buckets of fp32 gradients, counted in parameters.
    const double params = job.dp_bucket_bytes / 4.0;
    if (!(params >= 1) || params != std::floor(params) || params > 1e15)
      megatron_cannot(fmt::format("dp_bucket_bytes {} is not a whole number of fp32 gradients",
                                  job.dp_bucket_bytes));
    add(fmt::format("--ddp-bucket-size {}", static_cast<std::int64_t>(params)));
  }
  if (layout.tp > 1) {
    if (job.tp_overlap == Overlap::Never)
      megatron_cannot("tp_overlap none: Megatron-LM always overlaps the backward TP collectives");
    if (job.tp_overlap == Overlap::All) {
      if (!sp) megatron_cannot("tp_overlap all without sequence_parallel: Megatron-LM refuses it");
      add("--tp-comm-overlap");
    }
  }
  // Transformer Engine's backends: auto (its choice), fused (cuDNN), flash (flash-attn 2).
  std::string backend = "unfused";
  if (job.stack.flash_attention) {
    backend = "auto";
    if (const auto k = job.stack.attention_kernel) {
      if (*k == AttentionKernel::Cudnn)
        backend = "fused";
      else if (*k == AttentionKernel::Flash2)
        backend = "flash";
      else
        megatron_cannot(
            fmt::format("attention_kernel {}: Transformer Engine runs cuDNN's "
                        "(fused) or flash-attn 2's (flash) kernels, or picks (auto)",
                        to_string(*k)));
    }
  }
  add(fmt::format("--attention-backend {}", backend));
  if (job.stack.autocast) megatron_cannot("autocast: Megatron-LM casts the model itself");
  if (!job.stack.fused_elementwise) {
    for (const auto flag : kUnfused)
      add(std::string(flag));
  }
  if (!job.stack.grad_accumulation_fusion) add("--no-gradient-accumulation-fusion");

  std::string s = detail::comment_lines(comment);
  s += fmt::format(
      "# For {} GPUs: data parallel {} = GPUs / (TP × PP × CP). Add the model's "
      "flags.\n",
      gpus, layout.dp);
  for (std::size_t i = 0; i < flags.size(); ++i)
    s += flags[i] + (i + 1 < flags.size() ? " \\\n" : "\n");
  return s;
}

}  // namespace pipetab::io
