// A decoder-only transformer's architecture: what a Hugging Face config.json says of it (the
// model of the four values a run is: model, job, layout, system; docs/design.md §5). How a run
// trains it is the job (job.hpp), how it is cut over GPUs the layout (parallel/layout.hpp).
// Machine-free.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "pipetab/model/job.hpp"
#include "pipetab/names.hpp"
#include "pipetab/parallel/layout.hpp"
#include "pipetab/precision.hpp"

namespace pipetab {

/// A mixture-of-experts MLP (a model file's [moe] table; docs/simulation.md): each token goes to
/// `top_k` of `experts` routed experts of `expert_ffn_hidden` width, plus `shared_experts`
/// always-on ones; the first `dense_layers` layers keep a dense MLP of `dense_ffn_hidden`
/// (DeepSeek-V3's first three). How the job dispatches and drops tokens is the job's (MoeJob).
struct MoeConfig {
  std::int64_t experts = 0;
  std::int64_t top_k = 0;
  std::int64_t expert_ffn_hidden = 0;
  std::int64_t shared_experts = 0;
  std::int64_t shared_expert_ffn_hidden = 0;  ///< 0 = expert_ffn_hidden
  std::int64_t dense_layers = 0;
  std::int64_t dense_ffn_hidden = 0;  ///< 0 = the model's ffn_hidden
  /// Node-limited routing (DeepSeek-V3 §2.1.2: each token's experts on at most 4 nodes); 0: none.
  /// With DeepEP it bounds the nodes a token is sent to.
  std::int64_t node_limit = 0;
  /// The experts' linears carry biases (gpt-oss; Megatron-Core's add_bias_linear). fc1's is in
  /// its GEMMs' epilogue; fc2's Megatron-Core adds after the grouped GEMM, weighted by each row's
  /// probability, in a Python loop over the local experts (TEGroupedMLP._apply_bias @b0cc270
  /// and @d728871, the pins of Megatron-Bridge 26.02 and 26.04).
  bool expert_bias = false;
  /// The experts' clamped quick-GEGLU (gpt-oss's swiglu_limit; Megatron-Core's
  /// activation_func_clamp_value, used only with quick_gelu): both halves of fc1's output clamped
  /// at this value before the activation, and the activation's linear offset copied to the device
  /// per call, a host synchronisation (fused_bias_geglu.py weighted_bias_quick_geglu_impl). 0:
  /// the gated activation of gated_mlp, unclamped.
  double activation_clamp = 0.0;
  std::int64_t shared_ffn() const {
    return shared_experts *
           (shared_expert_ffn_hidden > 0 ? shared_expert_ffn_hidden : expert_ffn_hidden);
  }
};

/// How attention projects keys and values: multi-head (with grouped-query heads: kv_heads), or
/// DeepSeek's multi-head latent attention (low-rank compressed queries, keys and values).
enum class AttentionKind : std::uint8_t { MultiHead, Latent };

/// Multi-head latent attention's shape (DeepSeek-V3 §2.1.1; Megatron-Core's MLASelfAttention):
/// queries down-projected to q_lora_rank (0: not compressed) and up to heads × (head_dim +
/// qk_rope_head_dim); keys and values down to kv_lora_rank (plus the shared rotary key of
/// qk_rope_head_dim) and up to heads × (head_dim + v_head_dim). The down-projections are whole on
/// every tensor-parallel rank, the up-projections and the output projection split by heads.
struct LatentAttention {
  std::int64_t q_lora_rank = 0;
  std::int64_t kv_lora_rank = 0;
  std::int64_t qk_rope_head_dim = 0;
  std::int64_t v_head_dim = 0;
};

/// Mamba-2's selective state-space mixer (Dao and Gu, "Transformers are SSMs", ICML 2024, arXiv
/// 2405.21060, §7; Megatron-Core's MambaMixer, megatron/core/ssm/mamba_mixer.py): the layer's
/// input projected to z, x, B, C and the step dt (h → 2·inner + 2·groups·state + heads), x, B and C
/// through a causal depthwise convolution of conv_kernel taps, the state-space dual (SSD) over
/// chunks of `chunk` tokens, a gated RMSNorm by z, and the output projection (inner → h). Tensor
/// parallelism splits the heads and the groups, as attention's.
struct MambaConfig {
  std::int64_t heads = 0;        ///< mamba_num_heads
  std::int64_t head_dim = 64;    ///< mamba_head_dim: P
  std::int64_t state = 128;      ///< mamba_state_dim (d_state): N
  std::int64_t groups = 8;       ///< mamba_num_groups: the heads of a group share B and C
  std::int64_t conv_kernel = 4;  ///< d_conv
  std::int64_t chunk = 128;      ///< mamba_chunk_size: SSD's chunk length Q
  std::int64_t inner() const { return heads * head_dim; }
};

/// A hybrid model's kinds of layer, each its own pre-norm, mixer or MLP, and residual add, in the
/// symbols of Megatron-Core's hybrid pattern (megatron/core/ssm/mamba_hybrid_layer_allocation.py,
/// Symbols): M a Mamba mixer, * self-attention, - an MLP, E a mixture of experts.
enum class BlockKind : std::uint8_t { Mamba, Attention, Mlp, Moe };
inline constexpr std::size_t kBlockKinds = 4;
inline constexpr std::string_view kBlockSymbols = "M*-E";  ///< in BlockKind order
constexpr std::size_t index(BlockKind k) {
  return static_cast<std::size_t>(k);
}

/// What is wrong with a hybrid pattern for a model of `layers` layers, as a sentence ("3 symbols
/// for layers = 4: ..."), or nullopt when each layer has one of kBlockSymbols. The model readers
/// (which add the file's place) and require_trainable apply this one rule.
std::optional<std::string> hybrid_pattern_misfit(std::string_view pattern, std::int64_t layers);

/// Each kind's layers among the hybrid pattern's [begin, end) (BlockKind order).
constexpr std::array<std::int64_t, kBlockKinds> block_counts(std::string_view pattern,
                                                             std::int64_t begin, std::int64_t end) {
  std::array<std::int64_t, kBlockKinds> counts{};
  for (auto i = begin; i < end && i < static_cast<std::int64_t>(pattern.size()); ++i) {
    const auto at = kBlockSymbols.find(pattern[static_cast<std::size_t>(i)]);
    if (at != std::string_view::npos) ++counts[at];
  }
  return counts;
}

/// Defaults of 0 mean "derived": kv_heads = heads, ffn_hidden = 4·hidden, head_dim = hidden /
/// heads.
struct TransformerConfig {
  std::int64_t layers = 0;
  std::int64_t hidden = 0;
  std::int64_t heads = 0;
  std::int64_t kv_heads = 0;  ///< grouped-query attention; 0 = heads
  /// Width of one attention head; 0 = hidden / heads. Models whose heads × head_dim is not the
  /// hidden size set it (Qwen3-32B: 64 heads of 128 on hidden 5120), so that Q and the output
  /// projection are hidden × heads·head_dim and K and V hidden × kv_heads·head_dim.
  std::int64_t head_dim = 0;
  std::int64_t ffn_hidden = 0;  ///< 0 = 4 · hidden
  std::int64_t vocab = 0;
  /// Multi-token prediction (DeepSeek-V3 §2.2; Megatron-Core's --mtp-num-layers): this many MTP
  /// modules after the last layer, each the embedding of the next token and the previous
  /// depth's hidden state normed, concatenated and projected (2h → h, eh_proj), one transformer
  /// layer of the model's last layer's kind, and a final norm; the shared output layer and loss
  /// then run once per module more on the stage that holds the loss.
  std::int64_t mtp_layers = 0;
  bool gated_mlp = false;         ///< SwiGLU-style MLP: three weight matrices instead of two
  bool learned_positions = true;  ///< a position-embedding table (GPT) or none (RoPE)
  /// Without learned positions, rotary embeddings on Q and K (RoPE); false: no positions in the
  /// attention's inputs at all (Nemotron-H's attention layers; MPT's ALiBi, a bias inside the
  /// attention kernel).
  bool rotary = true;
  bool rotary_positions() const { return rotary && !learned_positions; }
  /// An RMSNorm over each head of Q and of K before the rotary embedding (Qwen3's q_norm and
  /// k_norm; Megatron-Core's --qk-layernorm, SelfAttention's q_layernorm and k_layernorm).
  bool qk_norm = false;
  bool dropout = true;  ///< dropout after attention and the MLP (GPT, Megatron: 0.1)
  /// The output layer shares the input embedding's weights (GPT; Megatron's default). With
  /// more than one stage the last stage keeps a copy, and the two copies' gradients are
  /// all-reduced at the end of the iteration.
  bool tie_embeddings = true;
  AttentionKind attention = AttentionKind::MultiHead;
  LatentAttention latent;        ///< attention = Latent only
  std::optional<MoeConfig> moe;  ///< a mixture of experts ([moe]); none: a dense MLP
  /// A hybrid model (Nemotron-H, Nemotron 3): one symbol of kBlockSymbols per layer, `layers` of
  /// them (Megatron-Core's --hybrid-override-pattern); empty: every layer attention and an MLP.
  std::string hybrid_pattern;
  std::optional<MambaConfig> mamba;  ///< the M layers' mixer ([mamba])
  bool hybrid() const { return !hybrid_pattern.empty(); }
};

/// Tensor parallelism splits the heads, the key-value groups and the MLP over its ranks, and
/// Megatron-LM requires each to divide evenly: the first of them `tp` does not divide, as
/// {"heads", 32}, or nullopt if it divides all. The model reader (tensor_parallel = ) and
/// `plan` (its TP candidates) apply this one rule.
struct TensorParallelMisfit {
  std::string_view what;
  std::int64_t value;
};
constexpr std::optional<TensorParallelMisfit> tensor_parallel_misfit(const TransformerConfig& m,
                                                                     std::int64_t tp) {
  const std::int64_t kv = m.kv_heads > 0 ? m.kv_heads : m.heads;
  if (tp < 1) return TensorParallelMisfit{"heads", m.heads};
  if (m.heads % tp != 0) return TensorParallelMisfit{"heads", m.heads};
  if (kv % tp != 0) return TensorParallelMisfit{"kv_heads", kv};
  if (m.ffn_hidden % tp != 0) return TensorParallelMisfit{"ffn_hidden", m.ffn_hidden};
  if (m.mamba && m.mamba->heads % tp != 0)
    return TensorParallelMisfit{"mamba heads", m.mamba->heads};
  if (m.mamba && m.mamba->groups % tp != 0)
    return TensorParallelMisfit{"mamba groups", m.mamba->groups};
  return std::nullopt;
}

/// Throws ParamError, naming the rule, when `model` cannot be trained by `job` under `layout`: a
/// sequence length given; tensor parallelism must divide the heads, KV heads and MLP
/// (tensor_parallel_misfit), and sequence parallelism needs it; context parallelism needs fused
/// attention (Transformer Engine and PyTorch run CP inside their fused attention kernels), a
/// sequence that splits into 2·cp equal chunks (the causal load balancing of Megatron-Core and
/// torchtitan), and for a2a (Ulysses) heads and KV heads per TP rank divisible by cp; latent
/// attention needs fused attention; expert parallelism a mixture of experts whose experts and
/// widths it divides, drawn from TP × CP × DP; the MoE job's options experts and shared experts
/// to act on; an HSDP shard group at least two ranks; a pipeline layout that parses and holds the
/// model's layers.
void require_trainable(const TransformerConfig& model, const Job& job, const Layout& layout);

}  // namespace pipetab
