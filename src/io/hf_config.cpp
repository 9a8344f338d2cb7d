#include "pipetab/io/hf_config.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <set>
#include <vector>

#include "json_locate.hpp"
#include "text.hpp"
#include <fmt/format.h>
#include <fmt/ranges.h>

#include "pipetab/error.hpp"

// Sources of the defaults and rules below, each cited where it is used:
//   [T] huggingface/transformers' configuration_*.py and modeling_*.py, as indexed at
//       008e5743 (llama, qwen2, qwen3, qwen3_moe, mixtral), 001f85b3 (deepseek_v3), 02b8f42b
//       (gpt_oss), 05699a76 and 0206c7b0 (mpt);
//   [D] deepseek-ai/DeepSeek-V3's configuration_deepseek.py / modeling_deepseek.py, the remote
//       code its config.json's auto_map names (moe_layer_freq, num_nextn_predict_layers);
//   [M] mosaicml/mpt-7b's remote code and llm-foundry's llmfoundry/models/mpt/
//       configuration_mpt.py (attn_config and ffn_config defaults; "alibi or rope is turned on,
//       setting learned_pos_emb to False").
// A config.json written by save_pretrained carries every field that differs from
// PretrainedConfig's defaults, so the released files give all the sizes; a size missing from a
// file is refused rather than taken from the class default, which is the size of one reference
// checkpoint (Qwen3Config's 32 key-value heads), not of the model at hand. Fields that transformers
// derives when absent (Llama's head_dim = hidden / heads) and flags (tie_word_embeddings,
// attention_dropout) take transformers' defaults.

namespace pipetab::io {
namespace {

using detail::JsonPath;
using detail::JsonStep;
using nlohmann::json;

// The model file reader's bounds (config_reader.hpp read_transformer and read_moe), so that a
// config.json is held to what a [transformer] and a [moe] table accept.
constexpr std::int64_t kMaxLayers = std::int64_t{1} << 20;
constexpr std::int64_t kMaxHidden = std::int64_t{1} << 24;
constexpr std::int64_t kMaxHeads = std::int64_t{1} << 20;
constexpr std::int64_t kMaxHeadDim = std::int64_t{1} << 20;
constexpr std::int64_t kMaxFfn = std::int64_t{1} << 26;
constexpr std::int64_t kMaxVocab = std::int64_t{1} << 40;
constexpr std::int64_t kMaxMtp = 64;
constexpr std::int64_t kMaxExperts = std::int64_t{1} << 20;
constexpr std::int64_t kMaxSharedExperts = std::int64_t{1} << 10;
constexpr std::int64_t kMaxRank = std::int64_t{1} << 20;
constexpr std::int64_t kMaxRopeDim = std::int64_t{1} << 16;

enum class Arch : std::uint8_t {
  Llama,
  Qwen2,
  Qwen3,
  Qwen3Moe,
  Mixtral,
  DeepseekV3,
  GptOss,
  NemotronH,  // hybrid Mamba-2, attention and experts (NemotronHForCausalLM)
  Mpt,        // transformers' port (MptForCausalLM, modeling_mpt.py)
  MptRemote,  // MosaicML's own code (MPTForCausalLM, trust_remote_code; llm-foundry)
};

struct Known {
  std::string_view architecture;
  std::string_view model_type;
  Arch arch;
};

// `architectures[0]` and `model_type` as transformers' auto classes name them. A model_type
// alone picks the first row with it (AutoConfig maps "mpt" to transformers' MptConfig).
constexpr std::array<Known, 10> kKnown{{
    {"LlamaForCausalLM", "llama", Arch::Llama},
    {"Qwen2ForCausalLM", "qwen2", Arch::Qwen2},
    {"Qwen3ForCausalLM", "qwen3", Arch::Qwen3},
    {"Qwen3MoeForCausalLM", "qwen3_moe", Arch::Qwen3Moe},
    {"MixtralForCausalLM", "mixtral", Arch::Mixtral},
    {"DeepseekV3ForCausalLM", "deepseek_v3", Arch::DeepseekV3},
    {"GptOssForCausalLM", "gpt_oss", Arch::GptOss},
    {"NemotronHForCausalLM", "nemotron_h", Arch::NemotronH},
    {"MptForCausalLM", "mpt", Arch::Mpt},
    {"MPTForCausalLM", "mpt", Arch::MptRemote},
}};

std::string supported_architectures() {
  std::vector<std::string> names;
  for (const auto& k : kKnown)
    names.push_back(fmt::format("{} ({})", k.architecture, k.model_type));
  return fmt::format("{}", fmt::join(names, ", "));
}

// A member of the document, or of an object in it, as the reader asked for it: where it is (or
// would be) and its value, nullptr when the file leaves it out.
struct HfField {
  JsonPath path;
  const json* value = nullptr;
  bool given() const { return value != nullptr && !value->is_null(); }
};

class HfReader {
 public:
  HfReader(std::string_view text, const std::string& file) : text_(text), file_(file) {}

  ModelConfig read() {
    doc_ = detail::parse_json(text_, file_, "a config.json needs 3 or 4");
    if (!doc_.is_object()) {
      fail(HfField{{}, &doc_},
           fmt::format("expected a JSON object (a Hugging Face config.json), got {}",
                       detail::json_type_name(doc_)));
    }
    arch_ = architecture();
    TransformerConfig m;
    if (arch_ == Arch::Mpt || arch_ == Arch::MptRemote) {
      read_mpt(m);
    } else if (arch_ == Arch::NemotronH) {
      read_nemotron_h(m);
    } else {
      read_decoder(m);
    }
    ModelConfig model;
    model.name = name();
    model.spec = std::move(m);
    // The one job default a config.json implies: transformers' models, and the frameworks that
    // train them (torchtitan, Megatron-Core, Transformer Engine), run fused attention.
    model.defaults.push_back(
        Setting{"flash_attention", "true",
                fmt::format("{}: a Hugging Face model trains with fused attention (PyTorch SDPA, "
                            "FlashAttention, Transformer Engine)",
                            file_)});
    model.notes = std::move(notes_);
    if (const auto unused = unused_fields(); !unused.empty()) {
      model.notes.push_back(fmt::format(
          "{}: not used by pipetab's model: {} (they do not change the work or the memory of "
          "training)",
          file_, fmt::join(unused, ", ")));
    }
    return model;
  }

 private:
  // --- access and errors ---

  HfField field(std::string_view key) {
    used_.emplace(key);
    const auto it = doc_.find(key);
    return HfField{JsonPath{JsonStep{std::string(key)}}, it == doc_.end() ? nullptr : &*it};
  }

  // A member of the object `parent` (given, and an object: see object()).
  HfField field(const HfField& parent, std::string_view key) {
    used_.insert(fmt::format("{}.{}", parent.path.back().key, key));
    JsonPath path = parent.path;
    path.push_back(JsonStep{std::string(key)});
    const auto it = parent.value->find(key);
    return HfField{std::move(path), it == parent.value->end() ? nullptr : &*it};
  }

  // One of two names of a field (transformers' attribute_map aliases): the one given.
  HfField either(std::string_view name, std::string_view alias) {
    HfField a = field(name);
    HfField b = field(alias);
    if (a.given() && b.given() && *a.value != *b.value) {
      fail(b, fmt::format("{} here but {} = {}: they are one field, give it once", b.value->dump(),
                          name, a.value->dump()));
    }
    return a.given() || !b.given() ? a : b;
  }

  // Errors point at the value, or, for a missing one, at the object that should hold it.
  [[noreturn]] void fail(const HfField& f, const std::string& message) const {
    JsonPath at = f.path;
    if (f.value == nullptr && !at.empty()) at.pop_back();
    const auto [line, column] = detail::line_column(text_, detail::locate(text_, at));
    throw ParseError(
        file_, line, column,
        f.path.empty() ? message : fmt::format("{}: {}", detail::to_string(f.path), message));
  }

  [[noreturn]] void missing(const HfField& f, std::string_view what) const {
    fail(f, fmt::format("missing: a {} config.json gives {}", arch_name_, what));
  }

  std::int64_t whole(const HfField& f, std::int64_t lo, std::int64_t hi) const {
    const json& v = *f.value;
    const auto out_of_range = [&] {
      fail(f, fmt::format("{} is out of range (expected {}..{})", v.dump(), lo, hi));
    };
    if (v.is_number_float()) {
      // Whole numbers beyond 64 bits arrive as floating point, and so does "32.0".
      const double d = v.get<double>();
      const bool is_whole = std::isfinite(d) && d == std::floor(d);
      if (is_whole && (d < static_cast<double>(lo) || d > static_cast<double>(hi))) out_of_range();
      fail(f, fmt::format("expected a whole number{}, got {}",
                          is_whole ? " written without a fraction or exponent" : "", v.dump()));
    }
    if (!v.is_number_integer()) {
      fail(f, fmt::format("expected a whole number, got {}", detail::json_type_name(v)));
    }
    const bool huge =
        v.is_number_unsigned() && v.get<std::uint64_t>() > static_cast<std::uint64_t>(INT64_MAX);
    const auto value = huge ? INT64_MAX : v.get<std::int64_t>();
    if (value < lo || value > hi) out_of_range();
    return value;
  }

  // A required whole number; `what` says what it is, for the message when it is missing.
  std::int64_t integer(const HfField& f, std::int64_t lo, std::int64_t hi, std::string_view what) {
    if (f.value == nullptr) missing(f, what);
    return whole(f, lo, hi);
  }

  // A whole number the file may leave out or set to null.
  std::optional<std::int64_t> optional_integer(const HfField& f, std::int64_t lo, std::int64_t hi) {
    if (!f.given()) return std::nullopt;
    return whole(f, lo, hi);
  }

  bool boolean(const HfField& f, bool fallback) const {
    if (!f.given()) return fallback;
    if (!f.value->is_boolean()) {
      fail(f, fmt::format("expected true or false, got {}", detail::json_type_name(*f.value)));
    }
    return f.value->get<bool>();
  }

  // A dropout probability; absent: none (every architecture here defaults its dropouts to 0).
  double probability(const HfField& f) const {
    if (!f.given()) return 0.0;
    if (!f.value->is_number()) {
      fail(f, fmt::format("expected a probability (a number from 0 to 1), got {}",
                          detail::json_type_name(*f.value)));
    }
    const double p = f.value->get<double>();
    if (!(p >= 0.0 && p <= 1.0)) {
      fail(f, fmt::format("{} is out of range (expected a probability, 0..1)", f.value->dump()));
    }
    return p;
  }

  std::optional<std::string> string(const HfField& f) const {
    if (!f.given()) return std::nullopt;
    if (!f.value->is_string())
      fail(f, fmt::format("expected a string, got {}", detail::json_type_name(*f.value)));
    return f.value->get<std::string>();
  }

  // An object the file may leave out: nullopt when absent or null.
  std::optional<HfField> object(const HfField& f) const {
    if (!f.given()) return std::nullopt;
    if (!f.value->is_object())
      fail(f, fmt::format("expected an object, got {}", detail::json_type_name(*f.value)));
    return f;
  }

  // --- which architecture ---

  Arch architecture() {
    const HfField architectures = field("architectures");
    const HfField model_type = field("model_type");
    std::optional<HfField> named;  // architectures[0]
    if (architectures.given()) {
      if (!architectures.value->is_array()) {
        fail(architectures, fmt::format("expected an array of class names, got {}",
                                        detail::json_type_name(*architectures.value)));
      }
      if (!architectures.value->empty()) {
        JsonPath path = architectures.path;
        path.push_back(JsonStep{{}, 0});
        named = HfField{std::move(path), &(*architectures.value)[0]};
      }
    }
    const auto type = string(model_type);
    if (named) {
      const auto name = string(*named);
      if (!name) fail(*named, "expected a class name such as \"LlamaForCausalLM\", got null");
      const auto known = std::find_if(kKnown.begin(), kKnown.end(),
                                      [&](const Known& k) { return k.architecture == *name; });
      if (known == kKnown.end()) {
        fail(*named, fmt::format("{} is not an architecture pipetab reads (it reads {}); describe "
                                 "other models in a pipetab model file",
                                 detail::quoted(*name), supported_architectures()));
      }
      if (type && *type != known->model_type) {
        fail(model_type,
             fmt::format("{} does not match architectures[0] = {} (model_type {})",
                         detail::quoted(*type), known->architecture, known->model_type));
      }
      arch_name_ = std::string(known->architecture);
      return known->arch;
    }
    if (!type) {
      fail(HfField{{}, &doc_},
           fmt::format("architectures, model_type: missing: a config.json names "
                       "its architecture (pipetab reads {})",
                       supported_architectures()));
    }
    const auto known = std::find_if(kKnown.begin(), kKnown.end(),
                                    [&](const Known& k) { return k.model_type == *type; });
    if (known == kKnown.end()) {
      fail(model_type, fmt::format("{} is not a model_type pipetab reads (it reads {}); describe "
                                   "other models in a pipetab model file",
                                   detail::quoted(*type), supported_architectures()));
    }
    arch_name_ = std::string(known->architecture);
    return known->arch;
  }

  // --- the decoders with transformers' Llama-style fields ---

  void read_decoder(TransformerConfig& m) {
    m.layers = integer(field("num_hidden_layers"), 1, kMaxLayers, "the number of layers");
    m.hidden = integer(field("hidden_size"), 1, kMaxHidden, "the hidden size");
    m.heads = integer(field("num_attention_heads"), 1, kMaxHeads, "the number of attention heads");
    read_kv_heads(m);
    read_head_dim(m);
    m.ffn_hidden = integer(field("intermediate_size"), 1, kMaxFfn, "the MLP width");
    m.vocab = integer(field("vocab_size"), 1, kMaxVocab, "the vocabulary size");
    // Every one of these architectures has a gated MLP whatever its activation: down(act(gate(x))
    // · up(x)) (LlamaMLP, Qwen2MLP, Qwen3MLP, Qwen3MoeMLP, MixtralBlockSparseTop2MLP /
    // MixtralExperts, DeepseekV3MLP, GptOssExperts [T]); hidden_act only names `act`, an
    // element-wise function, and the released configs say "silu" (SwiGLU).
    (void)string(field("hidden_act"));
    m.gated_mlp = true;
    // Rotary positions in every one of them (LlamaRotaryEmbedding and its copies [T]): no
    // position table.
    m.learned_positions = false;
    // Their only dropout is attention_dropout, on the attention probabilities [T] (default 0.0).
    m.dropout = probability(field("attention_dropout")) > 0.0;
    // tie_word_embeddings: False is every one of these classes' default [T].
    m.tie_embeddings = boolean(field("tie_word_embeddings"), false);
    read_biases();
    read_windows(m);
    // Qwen3Attention and Qwen3MoeAttention norm each head of Q and K (q_norm, k_norm: Qwen3RMSNorm
    // over head_dim) before the rotary embedding [T]; no field turns it off.
    m.qk_norm = arch_ == Arch::Qwen3 || arch_ == Arch::Qwen3Moe;
    switch (arch_) {
      case Arch::Qwen3Moe:
        read_qwen3_moe(m);
        break;
      case Arch::Mixtral:
      case Arch::GptOss:
        read_every_layer_moe(m);
        break;
      case Arch::DeepseekV3:
        read_latent(m);
        read_deepseek_moe(m);
        break;
      default:
        break;
    }
    check_heads(m);
  }

  void read_kv_heads(TransformerConfig& m) {
    const HfField kv = field("num_key_value_heads");
    switch (arch_) {
      case Arch::Llama:
        // LlamaConfig: None -> num_attention_heads [T].
        m.kv_heads = optional_integer(kv, 1, m.heads).value_or(m.heads);
        break;
      case Arch::DeepseekV3:
        // Multi-head latent attention up-projects a key and a value for every head (kv_b_proj
        // [T]); the field is kept "for backward compatibility" [T] and equals the heads in the
        // released configs.
        (void)optional_integer(kv, 1, m.heads);
        m.kv_heads = m.heads;
        break;
      default:
        // Qwen2Config and Qwen3Config default to 32, Qwen3MoeConfig to 4, MixtralConfig and
        // GptOssConfig to 8 [T]: one checkpoint's sizes, so the file must say.
        m.kv_heads = integer(kv, 1, m.heads, "the number of key-value heads");
        break;
    }
  }

  void read_head_dim(TransformerConfig& m) {
    std::optional<std::int64_t> head_dim;
    switch (arch_) {
      case Arch::Qwen3:
      case Arch::GptOss:
        // Qwen3Config defaults head_dim to 128 and GptOssConfig to 64 [T], not hidden / heads.
        head_dim = integer(field("head_dim"), 1, kMaxHeadDim, "the width of an attention head");
        break;
      case Arch::DeepseekV3:
        // pipetab's head_dim is MLA's unrotated query-key width (transformer.hpp); transformers
        // sets its own head_dim to qk_rope_head_dim [T], which qk_rope_head_dim gives.
        (void)field("head_dim");
        head_dim = integer(field("qk_nope_head_dim"), 1, kMaxHeadDim,
                           "the query-key heads' unrotated width");
        break;
      default:
        // Llama, Qwen2, Qwen3-MoE and Mixtral: absent means hidden / heads (LlamaConfig's
        // __post_init__, getattr(config, "head_dim", hidden_size // num_attention_heads) [T]).
        head_dim = optional_integer(field("head_dim"), 1, kMaxHeadDim);
        break;
    }
    // 0 = hidden / heads (transformer.hpp), as the model files write it.
    if (head_dim && (m.hidden % m.heads != 0 || *head_dim != m.hidden / m.heads)) {
      m.head_dim = *head_dim;
    }
  }

  // pipetab's layers have no biases; a config that turns them on gets a note.
  void read_biases() {
    std::vector<std::string> on;
    const auto flag = [&](std::string_view key, bool fallback) {
      if (boolean(field(key), fallback)) on.push_back(fmt::format("{} = true", key));
    };
    switch (arch_) {
      case Arch::Llama:
        flag("attention_bias", false);  // LlamaConfig [T]
        flag("mlp_bias", false);
        break;
      case Arch::Qwen3:
      case Arch::Qwen3Moe:
      case Arch::DeepseekV3:
        flag("attention_bias", false);  // Qwen3Config, Qwen3MoeConfig, DeepseekV3Config [T]
        break;
      case Arch::GptOss:
        flag("attention_bias", true);  // GptOssConfig [T]
        break;
      case Arch::Qwen2:
        // No field: Qwen2Attention's q_proj, k_proj and v_proj always have biases [T].
        on.emplace_back("Qwen2's query, key and value projections");
        break;
      default:
        break;
    }
    if (!on.empty()) {
      notes_.push_back(
          fmt::format("{}: {}: biases are not modelled (pipetab's layers have none; they are a few "
                      "thousandths of the parameters, and no GEMM)",
                      file_, fmt::join(on, ", ")));
    }
  }

  // Sliding-window attention: which layers attend over a window of keys, not the whole sequence.
  void read_windows(const TransformerConfig& m) {
    std::int64_t windowed = 0;
    std::vector<std::string_view> fields;
    const auto window = [&]() -> std::optional<std::int64_t> {
      return optional_integer(field("sliding_window"), 1, std::int64_t{1} << 40);
    };
    // layer_types, when given, names each layer's attention (Qwen2Config, Qwen3Config,
    // GptOssConfig [T]): "full_attention" or "sliding_attention".
    const auto layer_types = [&]() -> std::optional<std::int64_t> {
      const HfField types = field("layer_types");
      if (!types.given()) return std::nullopt;
      if (!types.value->is_array()) {
        fail(types, fmt::format("expected an array of \"full_attention\" and "
                                "\"sliding_attention\", got {}",
                                detail::json_type_name(*types.value)));
      }
      std::int64_t sliding = 0;
      for (std::size_t i = 0; i < types.value->size(); ++i) {
        const json& t = (*types.value)[i];
        if (!t.is_string()) {
          JsonPath path = types.path;
          path.push_back(JsonStep{{}, static_cast<std::int64_t>(i)});
          fail(HfField{path, &t},
               fmt::format("expected \"full_attention\" or \"sliding_attention\", got {}",
                           detail::json_type_name(t)));
        }
        if (t.get_ref<const std::string&>() == "sliding_attention") ++sliding;
      }
      return sliding;
    };
    switch (arch_) {
      case Arch::Qwen2:
      case Arch::Qwen3:
      case Arch::Qwen3Moe: {
        // Qwen2/Qwen3(-MoE)Config: without use_sliding_window (default False) sliding_window is
        // set to None; with it, layers from max_window_layers (default 28) on slide [T].
        const bool use = boolean(field("use_sliding_window"), false);
        const auto size = window();
        const auto from = optional_integer(field("max_window_layers"), 0, kMaxLayers);
        const auto types = layer_types();
        if (use) {
          windowed = types ? *types : std::max<std::int64_t>(0, m.layers - from.value_or(28));
          fields = {"use_sliding_window", "sliding_window", "max_window_layers"};
          if (!size) windowed = 0;
        }
        break;
      }
      case Arch::Mixtral:
        // MixtralConfig: sliding_window None (default) is full attention in every layer [T].
        if (window()) {
          windowed = m.layers;
          fields = {"sliding_window"};
        }
        break;
      case Arch::GptOss: {
        // GptOssConfig: sliding_window 128 by default, layer_types alternating sliding and full
        // from layer 0 [T].
        // An explicit null turns the windows off (GptOssAttention's sliding_window None).
        const auto size = window();
        const auto types = layer_types();
        const bool absent = field("sliding_window").value == nullptr;
        if (size || absent) {
          windowed = types ? *types : (m.layers + 1) / 2;
          fields = {"layer_types", "sliding_window"};
        }
        break;
      }
      default:
        break;
    }
    if (windowed > 0) {
      notes_.push_back(fmt::format(
          "{}: {}: {} of the {} layers attend over a sliding window of keys; pipetab prices every "
          "layer's attention over the whole sequence, so it overstates their attention work and "
          "memory",
          file_, fmt::join(fields, ", "), windowed, m.layers));
    }
    if (arch_ == Arch::GptOss) {
      notes_.push_back(fmt::format(
          "{}: gpt-oss's attention sinks (a learned logit per head in the softmax) and its "
          "attention's and router's biases are not modelled (parameters only, and no GEMM); its "
          "experts' biases and clamp are (moe.expert_bias, moe.activation_clamp)",
          file_));
    }
  }

  // --- mixtures of experts ---

  // Which layers keep a dense MLP, as pipetab's dense_layers (a leading block) holds them.
  void set_dense_layers(TransformerConfig& m, const std::vector<bool>& dense,
                        std::string_view fields) {
    MoeConfig& moe = *m.moe;
    const auto count = static_cast<std::int64_t>(std::count(dense.begin(), dense.end(), true));
    if (count == m.layers) {
      notes_.push_back(
          fmt::format("{}: {}: no layer has experts; read as a dense model", file_, fields));
      m.moe.reset();
      return;
    }
    moe.dense_layers = count;
    const bool leading =
        std::all_of(dense.begin(), dense.begin() + static_cast<std::ptrdiff_t>(count),
                    [](bool d) { return d; });
    if (!leading) {
      notes_.push_back(fmt::format(
          "{}: {}: the model's {} dense layers are interleaved with its expert layers; pipetab "
          "puts dense layers first (dense_layers = {}), so the totals are the model's but the "
          "stages' shares of expert layers are not",
          file_, fields, count, count));
    }
  }

  // Defaults as a [moe] table reads them (config_reader.hpp read_moe): the shared experts as
  // wide as the routed ones, the dense layers as the model's MLP.
  static MoeConfig moe_defaults(const TransformerConfig& m, std::int64_t expert_ffn_hidden) {
    MoeConfig moe;
    moe.expert_ffn_hidden = expert_ffn_hidden;
    moe.shared_expert_ffn_hidden = expert_ffn_hidden;
    moe.dense_ffn_hidden = m.ffn_hidden;
    return moe;
  }

  void read_qwen3_moe(TransformerConfig& m) {
    // Qwen3MoeConfig: num_experts (attribute_map alias num_local_experts); 0 experts is a dense
    // model (Qwen3MoeDecoderLayer builds experts only with num_experts > 0) [T].
    const auto experts = integer(either("num_experts", "num_local_experts"), 0, kMaxExperts,
                                 "the number of experts");
    const auto top_k = integer(field("num_experts_per_tok"), 1, std::max<std::int64_t>(experts, 1),
                               "the experts per token");
    const auto width = integer(field("moe_intermediate_size"), 1, kMaxFfn, "the experts' width");
    // Qwen2-MoE's one gated shared expert; Qwen3-MoE has none [T].
    const auto shared = optional_integer(field("shared_expert_intermediate_size"), 0, kMaxFfn);
    // Qwen3MoeDecoderLayer: a layer has experts unless it is in mlp_only_layers (None -> []) or
    // (layer + 1) % decoder_sparse_step != 0 (default 1); a dense one is Qwen3MoeMLP of
    // intermediate_size [T].
    const HfField only = field("mlp_only_layers");
    const auto step = optional_integer(field("decoder_sparse_step"), 1, kMaxLayers).value_or(1);
    std::vector<bool> dense(static_cast<std::size_t>(m.layers), false);
    if (only.given()) {
      if (!only.value->is_array()) {
        fail(only, fmt::format("expected an array of layer numbers, got {}",
                               detail::json_type_name(*only.value)));
      }
      for (std::size_t i = 0; i < only.value->size(); ++i) {
        JsonPath path = only.path;
        path.push_back(JsonStep{{}, static_cast<std::int64_t>(i)});
        const auto layer = whole(HfField{path, &(*only.value)[i]}, 0, m.layers - 1);
        dense[static_cast<std::size_t>(layer)] = true;
      }
    }
    for (std::int64_t layer = 0; layer < m.layers; ++layer) {
      if ((layer + 1) % step != 0) dense[static_cast<std::size_t>(layer)] = true;
    }
    if (experts == 0) {
      notes_.push_back(
          fmt::format("{}: num_experts = 0: no layer has experts; read as a dense "
                      "model",
                      file_));
      return;
    }
    m.moe = moe_defaults(m, width);
    m.moe->experts = experts;
    m.moe->top_k = top_k;
    if (shared && *shared > 0) {
      m.moe->shared_experts = 1;
      m.moe->shared_expert_ffn_hidden = *shared;
    }
    set_dense_layers(m, dense, "mlp_only_layers, decoder_sparse_step");
  }

  // Mixtral and gpt-oss: experts in every layer, each as wide as intermediate_size.
  void read_every_layer_moe(TransformerConfig& m) {
    // MixtralConfig and GptOssConfig: num_local_experts (alias num_experts); each expert is an
    // MLP of intermediate_size (MixtralBlockSparseTop2MLP, GptOssExperts' expert_dim) [T].
    const auto experts = integer(either("num_local_experts", "num_experts"), 1, kMaxExperts,
                                 "the number of experts");
    m.moe = moe_defaults(m, m.ffn_hidden);
    m.moe->experts = experts;
    m.moe->top_k = integer(field("num_experts_per_tok"), 1, experts, "the experts per token");
    if (arch_ == Arch::GptOss) {
      // GptOssExperts: gate_up_proj_bias and down_proj_bias always; the gate and linear halves
      // clamped at swiglu_limit (default 7.0) [T].
      m.moe->expert_bias = true;
      m.moe->activation_clamp = 7.0;
      const HfField limit = field("swiglu_limit");
      if (limit.given()) {
        if (!limit.value->is_number() || !(limit.value->get<double>() > 0.0) ||
            !std::isfinite(limit.value->get<double>())) {
          fail(limit, fmt::format("expected a positive number (the experts' clamp), got {}",
                                  limit.value->dump()));
        }
        m.moe->activation_clamp = limit.value->get<double>();
      }
    }
  }

  void read_latent(TransformerConfig& m) {
    // DeepSeek-V3 §2.1.1; DeepseekV3Attention [T]: q_lora_rank None means uncompressed queries
    // (q_proj), pipetab's 0.
    m.attention = AttentionKind::Latent;
    const HfField q = field("q_lora_rank");
    if (q.value == nullptr) missing(q, "the queries' compressed rank (null: not compressed)");
    m.latent.q_lora_rank = optional_integer(q, 1, kMaxRank).value_or(0);
    m.latent.kv_lora_rank =
        integer(field("kv_lora_rank"), 1, kMaxRank, "the keys' and values' compressed rank");
    m.latent.qk_rope_head_dim =
        integer(field("qk_rope_head_dim"), 1, kMaxRopeDim, "the query-key heads' rotary width");
    m.latent.v_head_dim = integer(field("v_head_dim"), 1, kMaxRopeDim, "the value heads' width");
  }

  void read_deepseek_moe(TransformerConfig& m) {
    // DeepseekV3Config: n_routed_experts (alias num_local_experts), each MLP of
    // moe_intermediate_size; n_shared_experts as one MLP of moe_intermediate_size ×
    // n_shared_experts (DeepseekV3MoE), which pipetab's shared_experts × expert width is [T].
    const auto experts = integer(either("n_routed_experts", "num_local_experts"), 1, kMaxExperts,
                                 "the number of routed experts");
    const auto top_k = integer(field("num_experts_per_tok"), 1, experts, "the experts per token");
    const auto width = integer(field("moe_intermediate_size"), 1, kMaxFfn, "the experts' width");
    m.moe = moe_defaults(m, width);
    m.moe->experts = experts;
    m.moe->top_k = top_k;
    m.moe->shared_experts =
        integer(field("n_shared_experts"), 0, kMaxSharedExperts, "the number of shared experts");
    // The first first_k_dense_replace layers are DeepseekV3MLP of intermediate_size [T]; the
    // remote code also makes dense every layer i with i % moe_layer_freq != 0 [D].
    const auto first = integer(field("first_k_dense_replace"), 0, kMaxLayers,
                               "the number of leading dense layers");
    const auto freq = optional_integer(field("moe_layer_freq"), 1, kMaxLayers).value_or(1);
    std::vector<bool> dense(static_cast<std::size_t>(m.layers), false);
    for (std::int64_t layer = 0; layer < m.layers; ++layer)
      dense[static_cast<std::size_t>(layer)] = layer < first || layer % freq != 0;
    set_dense_layers(m, dense, "first_k_dense_replace, moe_layer_freq");
    // Multi-token prediction: num_nextn_predict_layers modules after the last layer (DeepSeek-V3
    // §2.2 [D]); transformers' own class has no such field and builds none.
    m.mtp_layers = optional_integer(field("num_nextn_predict_layers"), 0, kMaxMtp).value_or(0);
    // Group-limited routing (DeepSeek-V3 §2.1.2; MoEGate's n_group, topk_group [T]).
    const auto groups = optional_integer(field("n_group"), 1, kMaxExperts);
    const auto chosen = optional_integer(field("topk_group"), 1, kMaxExperts);
    if (m.moe && groups && chosen && *chosen < *groups) {
      notes_.push_back(fmt::format(
          "{}: n_group = {}, topk_group = {}: each token's experts come from {} of {} expert "
          "groups; not read as moe.node_limit, which bounds the nodes a token reaches: the two "
          "agree only when expert parallelism puts one group on each node (DeepSeek-V3 §2.1.2), "
          "which is the layout's choice (the deepseek-v3 preset leaves node_limit at 0 too)",
          file_, *groups, *chosen, *chosen, *groups));
    }
  }

  // --- Nemotron-H ---

  // NemotronHConfig [T] (transformers' models/nemotron_h; NVIDIA's remote code for Nemotron 3
  // Nano has the same fields): a hybrid pattern of Mamba-2 (M), attention (*), MLP (-) and MoE
  // (E) layers, as hybrid_override_pattern or, in later versions, layers_block_type.
  void read_nemotron_h(TransformerConfig& m) {
    const HfField pattern = field("hybrid_override_pattern");
    const HfField types = field("layers_block_type");
    if (pattern.given() && types.given()) {
      fail(types, "given with hybrid_override_pattern: they are one field, give it once");
    }
    if (pattern.given()) {
      m.hybrid_pattern = *string(pattern);
      // Its length is the layers' count here (num_hidden_layers is checked against it below).
      if (const auto misfit = hybrid_pattern_misfit(
              m.hybrid_pattern, static_cast<std::int64_t>(m.hybrid_pattern.size())))
        fail(pattern, *misfit);
    } else if (types.given()) {
      if (!types.value->is_array()) {
        fail(types, fmt::format("expected an array of \"mamba\", \"attention\", \"mlp\" and "
                                "\"moe\", got {}",
                                detail::json_type_name(*types.value)));
      }
      static constexpr std::array<std::string_view, kBlockKinds> kNames{"mamba", "attention", "mlp",
                                                                        "moe"};
      for (std::size_t i = 0; i < types.value->size(); ++i) {
        const json& t = (*types.value)[i];
        const auto at =
            t.is_string() ? std::find(kNames.begin(), kNames.end(), t.get_ref<const std::string&>())
                          : kNames.end();
        if (at == kNames.end()) {
          JsonPath path = types.path;
          path.push_back(JsonStep{{}, static_cast<std::int64_t>(i)});
          fail(HfField{path, &t}, fmt::format("expected \"mamba\", \"attention\", \"mlp\" or "
                                              "\"moe\", got {}",
                                              t.dump()));
        }
        m.hybrid_pattern += kBlockSymbols[static_cast<std::size_t>(at - kNames.begin())];
      }
    } else {
      missing(pattern, "its layers' kinds (hybrid_override_pattern or layers_block_type)");
    }
    if (m.hybrid_pattern.empty()) fail(pattern.given() ? pattern : types, "no layers");
    m.layers = static_cast<std::int64_t>(m.hybrid_pattern.size());
    const HfField layers = field("num_hidden_layers");
    if (const auto n = optional_integer(layers, 1, kMaxLayers); n && *n != m.layers) {
      fail(layers, fmt::format("{} layers, and the hybrid pattern has {}: expected one kind per "
                               "layer",
                               *n, m.layers));
    }
    m.hidden = integer(field("hidden_size"), 1, kMaxHidden, "the hidden size");
    m.heads = integer(field("num_attention_heads"), 1, kMaxHeads, "the number of attention heads");
    m.kv_heads = integer(field("num_key_value_heads"), 1, m.heads, "the number of key-value heads");
    // head_dim (Megatron-Bridge's exports: attention_head_dim) [T].
    const auto head_dim = integer(either("head_dim", "attention_head_dim"), 1, kMaxHeadDim,
                                  "the width of an attention head");
    if (m.hidden % m.heads != 0 || head_dim != m.hidden / m.heads) m.head_dim = head_dim;
    m.ffn_hidden = integer(field("intermediate_size"), 1, kMaxFfn, "the MLP width");
    m.vocab = integer(field("vocab_size"), 1, kMaxVocab, "the vocabulary size");
    // NemotronHMLP is down(act(up(x))), not gated, whatever its activation (mlp_hidden_act,
    // squared ReLU "relu2" by default) [T].
    (void)string(field("mlp_hidden_act"));
    (void)string(field("hidden_act"));
    m.gated_mlp = false;
    // Its attention layers have no position embedding (NemotronHAttention applies none) [T].
    m.learned_positions = false;
    m.rotary = false;
    m.dropout =
        probability(field("attention_dropout")) > 0.0 || probability(field("hidden_dropout")) > 0.0;
    m.tie_embeddings = boolean(field("tie_word_embeddings"), false);
    const auto counts = block_counts(m.hybrid_pattern, 0, m.layers);
    if (counts[index(BlockKind::Mamba)] > 0) {
      // The mixer: mamba_num_heads of mamba_head_dim, ssm_state_size, n_groups, conv_kernel,
      // chunk_size (defaults 64, 128, 8, 4 and 128 [T]); `expand` is not its width, heads ×
      // head_dim is.
      MambaConfig x;
      x.heads = integer(field("mamba_num_heads"), 1, kMaxHeads, "the Mamba layers' heads");
      x.head_dim = optional_integer(field("mamba_head_dim"), 1, kMaxHeadDim).value_or(x.head_dim);
      x.state = optional_integer(field("ssm_state_size"), 1, kMaxHeadDim).value_or(x.state);
      const HfField groups = field("n_groups");
      x.groups = optional_integer(groups, 1, x.heads).value_or(x.groups);
      x.conv_kernel = optional_integer(field("conv_kernel"), 1, 1 << 10).value_or(x.conv_kernel);
      x.chunk = optional_integer(field("chunk_size"), 1, 1 << 16).value_or(x.chunk);
      (void)field("expand");
      if (x.heads % x.groups != 0) {
        fail(groups, fmt::format("{} groups for mamba_num_heads = {}: the heads share B and C by "
                                 "group, and the groups must divide them",
                                 x.groups, x.heads));
      }
      m.mamba = x;
    }
    if (counts[index(BlockKind::Moe)] > 0) {
      // n_routed_experts of moe_intermediate_size, num_experts_per_tok of them per token, and
      // n_shared_experts (default 1) as one MLP of moe_shared_expert_intermediate_size [T].
      const HfField latent = field("moe_latent_size");
      if (latent.given()) {
        fail(latent,
             "LatentMoE (the experts in a latent width: Nemotron 3 Super and Ultra) is "
             "not modelled");
      }
      const auto experts =
          integer(field("n_routed_experts"), 1, kMaxExperts, "the number of routed experts");
      const auto width = integer(field("moe_intermediate_size"), 1, kMaxFfn, "the experts' width");
      m.moe = moe_defaults(m, width);
      m.moe->experts = experts;
      m.moe->top_k = integer(field("num_experts_per_tok"), 1, experts, "the experts per token");
      m.moe->shared_experts =
          optional_integer(field("n_shared_experts"), 0, kMaxSharedExperts).value_or(1);
      if (m.moe->shared_experts > 0) {
        const auto shared =
            optional_integer(field("moe_shared_expert_intermediate_size"), 1, kMaxFfn)
                .value_or(width);
        // One MLP of that width, whatever n_shared_experts says (NemotronHMOE [T]).
        m.moe->shared_experts = 1;
        m.moe->shared_expert_ffn_hidden = shared;
      }
    }
    // Multi-token prediction of a hybrid model (Nemotron 3 Super's) is not modelled.
    for (const char* key : {"mtp_hybrid_override_pattern", "num_nextn_predict_layers"}) {
      const HfField mtp = field(key);
      if (mtp.given() && !(mtp.value->is_number_integer() && mtp.value->get<std::int64_t>() == 0))
        fail(mtp, "multi-token prediction of a hybrid model is not modelled");
    }
    check_heads(m);
  }

  // --- MPT ---

  void read_mpt(TransformerConfig& m) {
    const bool remote = arch_ == Arch::MptRemote;
    m.layers = integer(field("n_layers"), 1, kMaxLayers, "the number of layers");
    m.hidden = integer(field("d_model"), 1, kMaxHidden, "the hidden size");
    m.heads = integer(field("n_heads"), 1, kMaxHeads, "the number of attention heads");
    m.vocab = integer(field("vocab_size"), 1, kMaxVocab, "the vocabulary size");
    // The MLP: expansion_ratio × d_model wide (MptMLP [T]; llm-foundry's resolve_ffn_hidden_size
    // [M]), GELU unless llm-foundry's ffn_config says "mptglu" (a gated MLP) [M].
    const HfField ratio = field("expansion_ratio");
    if (ratio.value == nullptr) missing(ratio, "the MLP's width over d_model");
    if (!ratio.value->is_number()) {
      fail(ratio, fmt::format("expected a number, got {}", detail::json_type_name(*ratio.value)));
    }
    const double width = ratio.value->get<double>() * static_cast<double>(m.hidden);
    if (!(width >= 1.0 && width <= static_cast<double>(kMaxFfn) && width == std::floor(width))) {
      fail(ratio, fmt::format("{} × d_model = {} is not a whole MLP width in 1..{}",
                              ratio.value->dump(), width, kMaxFfn));
    }
    m.ffn_hidden = static_cast<std::int64_t>(width);
    m.gated_mlp = false;
    if (const auto ffn = object(field("ffn_config"))) {
      const HfField type = field(*ffn, "ffn_type");
      const auto kind = string(type).value_or("mptmlp");
      if (kind != "mptmlp" && kind != "mptglu") {
        fail(type, fmt::format("{} is not an MLP pipetab reads (it reads \"mptmlp\" and "
                               "\"mptglu\")",
                               detail::quoted(kind)));
      }
      m.gated_mlp = kind == "mptglu";
      if (const auto hidden = optional_integer(field(*ffn, "ffn_hidden_size"), 1, kMaxFfn))
        m.ffn_hidden = *hidden;
      nested_.insert("ffn_config");
    }
    // Attention: multi-head, multi-query (one key-value head) or llm-foundry's grouped-query
    // (kv_n_heads, default 1) [T][M].
    m.kv_heads = m.heads;
    double attention_dropout = 0.0;
    bool alibi = !remote;  // MptAttentionConfig's default True [T]; llm-foundry's False [M]
    bool rope = false;
    if (const auto attn = object(field("attn_config"))) {
      nested_.insert("attn_config");
      const HfField type = field(*attn, "attn_type");
      const auto kind = string(type).value_or("multihead_attention");
      if (kind == "multiquery_attention") {
        m.kv_heads = 1;
      } else if (kind == "grouped_query_attention") {
        const HfField kv = field(*attn, "kv_n_heads");
        m.kv_heads = optional_integer(kv, 1, m.heads).value_or(1);
        if (m.heads % m.kv_heads != 0) {
          fail(kv, fmt::format("n_heads = {} is not a multiple of {}", m.heads, m.kv_heads));
        }
      } else if (kind != "multihead_attention") {
        fail(type, fmt::format("{} is not an attention pipetab reads (it reads "
                               "\"multihead_attention\", \"multiquery_attention\" and "
                               "\"grouped_query_attention\")",
                               detail::quoted(kind)));
      }
      attention_dropout = probability(field(*attn, "attn_pdrop"));
      alibi = boolean(field(*attn, "alibi"), alibi);
      rope = boolean(field(*attn, "rope"), false);
    }
    // Positions: transformers' MptModel has no position table (ALiBi always [T]); MosaicML's
    // code keeps one only without ALiBi and RoPE ("alibi or rope is turned on, setting
    // learned_pos_emb to False" [M]).
    const bool learned = boolean(field("learned_pos_emb"), true);
    m.learned_positions = remote && learned && !alibi && !rope;
    m.rotary = rope;
    // Dropouts: resid_pdrop, emb_pdrop and attn_config.attn_pdrop, all 0.0 by default [T][M].
    m.dropout = attention_dropout > 0.0 || probability(field("resid_pdrop")) > 0.0 ||
                probability(field("emb_pdrop")) > 0.0;
    // The output layer is the word embedding (tie_word_embeddings default True [T][M]).
    m.tie_embeddings = boolean(field("tie_word_embeddings"), true);
    // no_bias: MptConfig's default True [T], llm-foundry's False [M].
    if (!boolean(field("no_bias"), !remote)) {
      notes_.push_back(fmt::format(
          "{}: no_bias = false: the linear layers' and LayerNorms' biases are not modelled "
          "(pipetab's layers have none; a few thousandths of the parameters, and no GEMM)",
          file_));
    }
    check_heads(m);
  }

  // The shape rules of a [transformer] table (config_reader.hpp read_transformer).
  void check_heads(const TransformerConfig& m) {
    const bool mpt = arch_ == Arch::Mpt || arch_ == Arch::MptRemote;
    if (m.head_dim == 0 && m.hidden % m.heads != 0) {
      fail(field(mpt ? "d_model" : "hidden_size"),
           fmt::format("{} is not a multiple of {} = {}: give head_dim if the heads' width is not "
                       "hidden / heads",
                       m.hidden, mpt ? "n_heads" : "num_attention_heads", m.heads));
    }
    if (!mpt && m.heads % m.kv_heads != 0) {
      fail(field("num_key_value_heads"),
           fmt::format("num_attention_heads = {} is not a multiple of {}", m.heads, m.kv_heads));
    }
  }

  // --- the rest ---

  std::string name() {
    // _name_or_path is where save_pretrained's model came from: a hub id ("Qwen/Qwen3-32B") or
    // a local folder; "./" and the like say nothing, so the file's own folder names it then.
    if (const auto named = string(field("_name_or_path"))) {
      if (named->find_first_not_of("./\\") != std::string::npos) return *named;
    }
    const std::filesystem::path path(file_);
    const auto folder = path.parent_path().filename().string();
    if (!folder.empty() && folder != "." && folder != "..") return folder;
    return path.stem().string();
  }

  std::vector<std::string> unused_fields() const {
    std::vector<std::string> unused;
    for (const auto& [key, value] : doc_.items()) {
      if (!used_.contains(key)) {
        unused.push_back(key);
      } else if (nested_.contains(key) && value.is_object()) {
        for (const auto& [member, _] : value.items()) {
          const auto dotted = fmt::format("{}.{}", key, member);
          if (!used_.contains(dotted)) unused.push_back(dotted);
        }
      }
    }
    return unused;
  }

  std::string_view text_;
  const std::string& file_;
  json doc_;
  Arch arch_ = Arch::Llama;
  std::string arch_name_;
  std::set<std::string, std::less<>> used_;
  std::set<std::string, std::less<>> nested_;  // objects whose members were read one by one
  std::vector<std::string> notes_;
};

}  // namespace

ModelConfig parse_hf_config(std::string_view text, const std::string& file) {
  return HfReader(text, file).read();
}

}  // namespace pipetab::io
