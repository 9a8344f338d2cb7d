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

/// Every key of `t` must be a [transformer] key.
void only_transformer_keys(const Reader& r, const toml::table& t, const std::string& prefix,
                           std::span<const std::string_view> more = {});

/// The TransformerConfig of `t` (a toml::table or a LayeredTable), whose keys are reported as
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
  m.seq_len = r.integer(t, p, "seq_len", std::nullopt, 1, 1 << 26);
  m.micro_batch = r.integer(t, p, "micro_batch", 1, 1, 1 << 20);
  m.vocab = r.integer(t, p, "vocab", std::nullopt, 1, kBig);
  m.precision = *parse_precision(
      r.choice(t, p, "precision", "bf16", {"fp32", "tf32", "fp16", "bf16", "fp8"}));
  // FP8 training keeps activations and weights between layers in 16 bits (Transformer Engine).
  m.dtype_bytes = r.integer(t, p, "dtype_bytes",
                            m.precision == Precision::FP8 ? 2 : element_bytes(m.precision), 1, 16);
  m.tensor_parallel = r.integer(t, p, "tensor_parallel", 1, 1, 1 << 16);
  m.sequence_parallel = r.boolean(t, p, "sequence_parallel", false);
  m.recompute = *parse_recompute(
      r.choice(t, p, "recompute", "none",
               {"none", "selective", "full", "selective-op", "every-other-layer"}));
  m.flash_attention = r.boolean(t, p, "flash_attention", false);
  m.gated_mlp = r.boolean(t, p, "gated_mlp", false);
  m.learned_positions = r.boolean(t, p, "learned_positions", true);
  m.dropout = r.boolean(t, p, "dropout", true);
  m.fused_elementwise = r.boolean(t, p, "fused_elementwise", true);
  m.tie_embeddings = r.boolean(t, p, "tie_embeddings", true);
  m.balance_embedding = r.boolean(t, p, "balance_embedding", false);
  m.mtp_layers = r.integer(t, p, "mtp_layers", 0, 0, 64);
  m.grad_accumulation_fusion = r.boolean(t, p, "grad_accumulation_fusion", true);
  m.grad_bytes_per_param = r.number(t, p, "grad_bytes_per_param", 4.0, 0.0, 64.0, false);
  m.optimizer_bytes_per_param = r.number(t, p, "optimizer_bytes_per_param", 12.0, 0.0, 64.0, false);
  m.attention = r.choice(t, p, "attention", "multi-head", {"multi-head", "latent"}) == "latent"
                    ? AttentionKind::Latent
                    : AttentionKind::MultiHead;
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
    if (!m.flash_attention) {
      r.fail(t.get("attention")->source(), Reader::join(p, "attention"),
             "latent needs flash_attention = true (MLA runs in fused attention kernels)");
    }
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
  // Tensor parallelism splits the heads, the key-value groups and the MLP over the ranks
  // (Megatron-LM requires each to divide evenly).
  if (const auto* tp = t.get("tensor_parallel")) {
    if (const auto misfit = tensor_parallel_misfit(m, m.tensor_parallel)) {
      r.fail(tp->source(), Reader::join(p, "tensor_parallel"),
             fmt::format("{} does not divide {} = {}: each rank needs whole heads and an equal "
                         "share of the MLP",
                         m.tensor_parallel, misfit->what, misfit->value));
    }
  }
  if (m.sequence_parallel && m.tensor_parallel == 1) {
    r.fail(
        t.get("sequence_parallel")->source(), Reader::join(p, "sequence_parallel"),
        "needs tensor_parallel > 1: sequence parallelism splits along the tensor-parallel ranks");
  }
  return m;
}

/// The keys read_layout reads, for the callers' lists of allowed keys.
inline constexpr std::array<std::string_view, 12> kLayoutKeys{
    "context_parallel",  "cp_method",
    "expert_parallel",   "expert_tensor_parallel",
    "sequence_parallel", "fsdp",
    "fsdp_shard",        "reshard_after_forward",
    "fsdp_grad_sync",    "fsdp_fp8_all_gather",
    "fsdp_impl",         "pipeline_layout"};

/// The layout keys of a study's [simulation] table or a runs file's entry, as `simulate`'s flags
/// give them: context_parallel, cp_method, expert_parallel, expert_tensor_parallel,
/// sequence_parallel (unset: the model file's), fsdp and its options (each refused without fsdp
/// = true), pipeline_layout. TP and DP are the caller's (tensor_parallel, data_parallel).
template <class Table>
Layout read_layout(const Reader& r, const Table& t, const std::string& p) {
  Layout l;
  l.cp = r.integer(t, p, "context_parallel", 1, 1, 1 << 20);
  l.cp_method = *parse_cp_method(r.choice(t, p, "cp_method", "ring", {"ring", "allgather", "a2a"}));
  l.ep = r.integer(t, p, "expert_parallel", 1, 1, 1 << 20);
  l.etp = r.integer(t, p, "expert_tensor_parallel", 1, 1, 1 << 20);
  if (t.get("sequence_parallel") != nullptr)
    l.sequence_parallel = r.boolean(t, p, "sequence_parallel", false);
  l.fsdp.enabled = r.boolean(t, p, "fsdp", false);
  for (const char* key : {"fsdp_shard", "reshard_after_forward", "fsdp_grad_sync",
                          "fsdp_fp8_all_gather", "fsdp_impl"}) {
    if (!l.fsdp.enabled && t.get(key) != nullptr)
      r.fail(t.get(key)->source(), Reader::join(p, key), "needs fsdp = true");
  }
  l.fsdp.shard = r.integer(t, p, "fsdp_shard", 0, 2, std::int64_t{1} << 30);
  if (t.get("reshard_after_forward") != nullptr)
    l.fsdp.reshard_after_forward = r.boolean(t, p, "reshard_after_forward", false);
  l.fsdp.grad_sync =
      *parse_grad_sync(r.choice(t, p, "fsdp_grad_sync", "step", {"step", "microbatch"}));
  l.fsdp.fp8_all_gather = r.boolean(t, p, "fsdp_fp8_all_gather", false);
  l.fsdp.impl = *parse_fsdp_impl(r.choice(t, p, "fsdp_impl", "fsdp2", {"fsdp2", "megatron"}));
  l.pipeline_layout = r.string(t, p, "pipeline_layout").value_or("");
  return l;
}

/// The keys of a [moe] table, for the callers' checks of unknown keys.
inline constexpr std::array<std::string_view, 14> kMoeKeys{"experts",
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
                                                           "fp8_dispatch",
                                                           "shared_expert_overlap",
                                                           "recompute"};

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
  if (t.get("capacity_factor") != nullptr)
    moe.capacity_factor = r.number(t, p, "capacity_factor", std::nullopt, 0.0, 1e3, true);
  // The busiest rank takes at most every token the layer routes: at most experts / top_k times
  // the balanced share.
  moe.imbalance =
      r.number(t, p, "imbalance", 1.0, 1.0,
               static_cast<double>(moe.experts) / static_cast<double>(moe.top_k), false);
  moe.dispatcher = r.choice(t, p, "dispatcher", "alltoall", {"alltoall", "deepep"}) == "deepep"
                       ? MoeDispatcher::DeepEp
                       : MoeDispatcher::AllToAll;
  moe.node_limit = r.integer(t, p, "node_limit", 0, 0, 1 << 20);
  moe.fp8_dispatch = r.boolean(t, p, "fp8_dispatch", false);
  moe.shared_expert_overlap = r.boolean(t, p, "shared_expert_overlap", false);
  if (moe.shared_expert_overlap && moe.shared_experts == 0) {
    r.fail(t.get("shared_expert_overlap")->source(), Reader::join(p, "shared_expert_overlap"),
           "true with shared_experts = 0: there is no shared expert to run beside the "
           "all-to-alls");
  }
  const std::string recompute = r.choice(t, p, "recompute", "none", {"none", "moe_act", "mlp"});
  moe.recompute = recompute == "moe_act" ? MoeRecompute::MoeAct
                  : recompute == "mlp"   ? MoeRecompute::Mlp
                                         : MoeRecompute::None;
  return moe;
}

}  // namespace pipetab::io
