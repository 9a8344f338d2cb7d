// Reading a model's [transformer] keys from a TOML table, or from layers of tables
// (LayeredTable): the model files and the measured-run files (study/measurements.cpp) share it.
// Internal to the library.
#pragma once

#include <array>
#include <string>

#include "toml_reader.hpp"
#include <fmt/format.h>

#include "pipetab/model/transformer.hpp"

namespace pipetab::io {

/// The keys of a model's [transformer] table that are the job's or the layout's: older model
/// files and measured-run fragments carry them. Each is read as a setting of the option of the
/// same key (sim/options.hpp), a default under what a job file and the flags give.
inline constexpr std::array<std::string_view, 13> kTransformerJobKeys{"seq_len",
                                                                      "micro_batch",
                                                                      "precision",
                                                                      "dtype_bytes",
                                                                      "tensor_parallel",
                                                                      "sequence_parallel",
                                                                      "recompute",
                                                                      "flash_attention",
                                                                      "fused_elementwise",
                                                                      "balance_embedding",
                                                                      "grad_accumulation_fusion",
                                                                      "grad_bytes_per_param",
                                                                      "optimizer_bytes_per_param"};

/// Every key of `t` must be a [transformer] key (the architecture's or kTransformerJobKeys).
void only_transformer_keys(const Reader& r, const toml::table& t, const std::string& prefix,
                           std::span<const std::string_view> more = {});

/// The architecture of `t` (a toml::table or a LayeredTable), whose keys are reported as
/// `prefix.key`. Wrong types, out-of-range values and impossible shapes throw ParseError (check
/// the keys with only_transformer_keys first).
template <class Table>
TransformerConfig read_transformer(const Reader& r, const Table& t, const std::string& p) {
  constexpr std::int64_t kBig = std::int64_t{1} << 40;
  TransformerConfig m;
  m.layers = r.integer(t, p, "layers", std::nullopt, 1, 1 << 20);
  m.hidden = r.integer(t, p, "hidden", std::nullopt, 1, 1 << 24);
  m.heads = r.integer(t, p, "heads", std::nullopt, 1, 1 << 20);
  m.kv_heads = r.integer(t, p, "kv_heads", m.heads, 1, m.heads);
  m.head_dim = r.integer(t, p, "head_dim", 0, 1, 1 << 20);
  m.ffn_hidden = r.integer(t, p, "ffn_hidden", 4 * m.hidden, 1, 1 << 26);
  m.vocab = r.integer(t, p, "vocab", std::nullopt, 1, kBig);
  m.gated_mlp = r.boolean(t, p, "gated_mlp", false);
  m.learned_positions = r.boolean(t, p, "learned_positions", true);
  m.rotary = r.boolean(t, p, "rotary", !m.learned_positions);
  if (m.rotary && m.learned_positions) {
    r.fail(t.get("rotary")->source(), Reader::join(p, "rotary"),
           "a model with learned_positions = true has no rotary embeddings");
  }
  m.qk_norm = r.boolean(t, p, "qk_norm", false);
  m.dropout = r.boolean(t, p, "dropout", true);
  m.tie_embeddings = r.boolean(t, p, "tie_embeddings", true);
  m.mtp_layers = r.integer(t, p, "mtp_layers", 0, 0, 64);
  m.attention = r.choice(t, p, "attention", "multi-head", {"multi-head", "latent"}) == "latent"
                    ? AttentionKind::Latent
                    : AttentionKind::MultiHead;
  if (m.qk_norm && m.attention == AttentionKind::Latent) {
    r.fail(t.get("qk_norm")->source(), Reader::join(p, "qk_norm"),
           "needs attention = \"multi-head\": latent attention's norms are its own (q_lora_rank, "
           "kv_lora_rank)");
  }
  // Multi-head latent attention's ranks and head widths (DeepSeek-V3 §2.1.1); head_dim is the
  // heads' unrotated query-key width.
  for (const char* key : {"q_lora_rank", "kv_lora_rank", "qk_rope_head_dim", "v_head_dim"}) {
    if (m.attention != AttentionKind::Latent && t.get(key) != nullptr)
      r.fail(t.get(key)->source(), Reader::join(p, key), "needs attention = \"latent\"");
  }
  if (m.attention == AttentionKind::Latent) {
    m.latent.q_lora_rank = r.integer(t, p, "q_lora_rank", 0, 1, 1 << 20);
    m.latent.kv_lora_rank = r.integer(t, p, "kv_lora_rank", std::nullopt, 1, 1 << 20);
    m.latent.qk_rope_head_dim = r.integer(t, p, "qk_rope_head_dim", std::nullopt, 1, 1 << 16);
    m.latent.v_head_dim = r.integer(t, p, "v_head_dim", std::nullopt, 1, 1 << 16);
  }
  if (m.head_dim == 0 && m.hidden % m.heads != 0) {
    r.fail(t.get("hidden")->source(), Reader::join(p, "hidden"),
           fmt::format("{} is not a multiple of heads = {}: set head_dim if the heads' width is "
                       "not hidden / heads",
                       m.hidden, m.heads));
  }
  if (m.heads % m.kv_heads != 0) {
    r.fail(t.get("kv_heads")->source(), Reader::join(p, "kv_heads"),
           fmt::format("heads = {} is not a multiple of {}", m.heads, m.kv_heads));
  }
  // A hybrid model's layers, one of Megatron-Core's symbols each (kBlockSymbols).
  if (const auto pattern = r.string(t, p, "hybrid_pattern")) {
    const auto* node = t.get("hybrid_pattern");
    const std::string key = Reader::join(p, "hybrid_pattern");
    if (const auto misfit = hybrid_pattern_misfit(*pattern, m.layers))
      r.fail(node->source(), key, *misfit);
    m.hybrid_pattern = *pattern;
  }
  return m;
}

/// The keys of a [mamba] table: a hybrid model's Mamba-2 mixer (MambaConfig).
inline constexpr std::array<std::string_view, 6> kMambaKeys{"heads",  "head_dim",    "state",
                                                            "groups", "conv_kernel", "chunk"};

/// [mamba]: the mixer of `model`'s M layers, whose keys are reported as `p.key`.
template <class Table>
MambaConfig read_mamba(const Reader& r, const Table& t, const std::string& p,
                       const TransformerConfig& model, const toml::source_region& where) {
  if (block_counts(model.hybrid_pattern, 0, model.layers)[index(BlockKind::Mamba)] == 0) {
    r.fail(where, p,
           "a Mamba mixer needs Mamba layers: give the transformer a hybrid_pattern with M");
  }
  MambaConfig x;
  x.heads = r.integer(t, p, "heads", std::nullopt, 1, 1 << 20);
  x.head_dim = r.integer(t, p, "head_dim", x.head_dim, 1, 1 << 16);
  x.state = r.integer(t, p, "state", x.state, 1, 1 << 16);
  x.groups = r.integer(t, p, "groups", x.groups, 1, x.heads);
  x.conv_kernel = r.integer(t, p, "conv_kernel", x.conv_kernel, 1, 1 << 10);
  x.chunk = r.integer(t, p, "chunk", x.chunk, 1, 1 << 16);
  if (x.heads % x.groups != 0) {
    r.fail(t.get("groups")->source(), Reader::join(p, "groups"),
           fmt::format("{} groups for heads = {}: the heads share B and C by group, and the "
                       "groups must divide them",
                       x.groups, x.heads));
  }
  return x;
}

/// The job and layout keys of `t` (kTransformerJobKeys) as settings, in that order.
template <class Table>
std::vector<Setting> transformer_settings(const Reader& r, const Table& t, const std::string& p) {
  std::vector<Setting> out;
  for (const auto key : kTransformerJobKeys) {
    if (const auto* node = t.get(key)) out.push_back(r.setting(*node, Reader::join(p, key), key));
  }
  return out;
}

/// The keys of a [moe] table, for the callers' checks of unknown keys.
inline constexpr std::array<std::string_view, 17> kMoeKeys{"experts",
                                                           "top_k",
                                                           "expert_ffn_hidden",
                                                           "shared_experts",
                                                           "shared_expert_ffn_hidden",
                                                           "dense_layers",
                                                           "dense_ffn_hidden",
                                                           "capacity_factor",
                                                           "imbalance",
                                                           "dispatcher",
                                                           "node_limit",
                                                           "expert_bias",
                                                           "activation_clamp",
                                                           "fp8_dispatch",
                                                           "shared_expert_overlap",
                                                           "recompute",
                                                           "recompute_norm"};

/// The keys of a [moe] table that are the job's, and the options they set.
inline constexpr std::array<std::pair<std::string_view, std::string_view>, 7> kMoeJobKeys{{
    {"capacity_factor", "moe_capacity_factor"},
    {"imbalance", "moe_imbalance"},
    {"dispatcher", "moe_dispatcher"},
    {"fp8_dispatch", "moe_fp8_dispatch"},
    {"shared_expert_overlap", "moe_shared_expert_overlap"},
    {"recompute", "moe_recompute"},
    {"recompute_norm", "moe_recompute_norm"},
}};

/// [moe]: the experts that replace a transformer's MLP (MoeConfig), of `model`, whose keys are
/// reported as `p.key`.
template <class Table>
MoeConfig read_moe(const Reader& r, const Table& t, const std::string& p,
                   const TransformerConfig& model) {
  MoeConfig moe;
  moe.experts = r.integer(t, p, "experts", std::nullopt, 1, 1 << 20);
  moe.top_k = r.integer(t, p, "top_k", std::nullopt, 1, moe.experts);
  moe.expert_ffn_hidden = r.integer(t, p, "expert_ffn_hidden", std::nullopt, 1, 1 << 26);
  moe.shared_experts = r.integer(t, p, "shared_experts", 0, 0, 1 << 10);
  moe.shared_expert_ffn_hidden =
      r.integer(t, p, "shared_expert_ffn_hidden", moe.expert_ffn_hidden, 1, 1 << 26);
  if (moe.shared_experts == 0 && t.get("shared_expert_ffn_hidden") != nullptr) {
    r.fail(t.get("shared_expert_ffn_hidden")->source(), Reader::join(p, "shared_expert_ffn_hidden"),
           "set with shared_experts = 0: give shared_experts too, or leave it out");
  }
  // At least one layer has experts: a model whose every layer is dense has no [moe].
  moe.dense_layers = r.integer(t, p, "dense_layers", 0, 0, model.layers - 1);
  moe.dense_ffn_hidden = r.integer(t, p, "dense_ffn_hidden", model.ffn_hidden, 1, 1 << 26);
  if (moe.dense_layers == 0 && t.get("dense_ffn_hidden") != nullptr) {
    r.fail(t.get("dense_ffn_hidden")->source(), Reader::join(p, "dense_ffn_hidden"),
           "set with dense_layers = 0: no layer is dense");
  }
  moe.node_limit = r.integer(t, p, "node_limit", 0, 0, 1 << 20);
  moe.expert_bias = r.boolean(t, p, "expert_bias", false);
  moe.activation_clamp = r.number(t, p, "activation_clamp", 0.0, 0.0, 1e6, true);
  if (moe.activation_clamp > 0.0 && !model.gated_mlp) {
    r.fail(t.get("activation_clamp")->source(), Reader::join(p, "activation_clamp"),
           "set on a model without gated_mlp: the clamp is the gated quick-GEGLU's "
           "(Megatron-Core's activation_func_clamp_value), which needs gated_mlp = true");
  }
  return moe;
}

/// The job keys of a [moe] table (kMoeJobKeys) as settings of their options.
template <class Table>
std::vector<Setting> moe_settings(const Reader& r, const Table& t, const std::string& p) {
  std::vector<Setting> out;
  for (const auto& [key, option] : kMoeJobKeys) {
    if (const auto* node = t.get(key))
      out.push_back(r.setting(*node, Reader::join(p, key), option));
  }
  return out;
}

}  // namespace pipetab::io
