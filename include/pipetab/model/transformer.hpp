// A decoder-only transformer as it is trained: its shape, its parallel layout inside a stage
// (tensor and sequence parallelism), recomputation and number formats. Machine-free.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "pipetab/model/job.hpp"
#include "pipetab/parallel/layout.hpp"
#include "pipetab/names.hpp"
#include "pipetab/precision.hpp"

namespace pipetab {

/// A mixture-of-experts MLP (a model file's [moe] table; docs/simulation.md): each token goes to
/// `top_k` of `experts` routed experts of `expert_ffn_hidden` width, plus `shared_experts`
/// always-on ones; the first `dense_layers` layers keep a dense MLP of `dense_ffn_hidden`
/// (DeepSeek-V3's first three).
struct MoeConfig {
  std::int64_t experts = 0;
  std::int64_t top_k = 0;
  std::int64_t expert_ffn_hidden = 0;
  std::int64_t shared_experts = 0;
  std::int64_t shared_expert_ffn_hidden = 0;  ///< 0 = expert_ffn_hidden
  std::int64_t dense_layers = 0;
  std::int64_t dense_ffn_hidden = 0;  ///< 0 = the model's ffn_hidden
  /// Tokens an expert takes, as a multiple of its balanced share; absent: dropless.
  std::optional<double> capacity_factor;
  /// The busiest expert-parallel rank's tokens over the mean (1: balanced, as benchmarks force).
  double imbalance = 1.0;
  MoeDispatcher dispatcher = MoeDispatcher::AllToAll;
  /// Node-limited routing (DeepSeek-V3 §2.1.2: each token's experts on at most 4 nodes); 0: none.
  /// With DeepEP it bounds the nodes a token is sent to.
  std::int64_t node_limit = 0;
  /// The forward dispatch in FP8 (DeepSeek-V3 §3.3: e4m3 with one fp32 scale per 128 values);
  /// the combine and the backward stay in BF16.
  bool fp8_dispatch = false;
  /// The shared experts' fc1 runs while the dispatch moves tokens and their fc2 while the combine
  /// does (Megatron-Core's --moe-shared-expert-overlap).
  bool shared_expert_overlap = false;
  MoeRecompute recompute = MoeRecompute::None;

  std::int64_t shared_ffn() const {
    return shared_experts *
           (shared_expert_ffn_hidden > 0 ? shared_expert_ffn_hidden : expert_ffn_hidden);
  }
  /// The tokens an expert-parallel rank's experts take, over the balanced share: the capacity
  /// (padded to it) when tokens are dropped, the imbalance when none is.
  double load() const { return capacity_factor ? *capacity_factor : imbalance; }
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

/// One microbatch is `micro_batch` sequences of `seq_len` tokens. Defaults of 0 mean "derived":
/// kv_heads = heads, ffn_hidden = 4·hidden, head_dim = hidden / heads.
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
  std::int64_t seq_len = 0;
  std::int64_t micro_batch = 1;
  std::int64_t vocab = 0;
  Precision precision = Precision::BF16;  ///< the matrix multiplies' format (device peak)
  std::int64_t dtype_bytes = 2;           ///< activations, weights and messages (bf16)
  std::int64_t tensor_parallel = 1;  ///< t: FLOPs, activations and weights per device divide by it
  bool sequence_parallel = false;    ///< with t > 1, activations divide by t entirely
  /// Context parallelism (set by the layout, not the model file): each rank runs seq_len / cp
  /// tokens of every sequence through every operator; attention's queries are its tokens and
  /// its keys the whole sequence, exchanged by `cp_method` (reference modern-runs.md §C.2).
  std::int64_t context_parallel = 1;
  CpMethod cp_method = CpMethod::Ring;
  /// Expert parallelism (set by the layout): each MoE layer's experts spread over this many
  /// ranks drawn from the stage's TP × CP × DP ranks (Megatron-Core's parallel folding), each
  /// expert's matrices split over expert_tensor_parallel ranks.
  std::int64_t expert_parallel = 1;
  std::int64_t expert_tensor_parallel = 1;
  /// Transformer layers per stage in model order, from a pipeline layout (set by the layout, not
  /// the model file); empty: partition_layers splits them evenly.
  std::vector<std::int64_t> stage_layers;
  /// Multi-token prediction (DeepSeek-V3 §2.2; Megatron-Core's --mtp-num-layers): this many MTP
  /// modules after the last layer, each the embedding of the next token and the previous
  /// depth's hidden state normed, concatenated and projected (2h → h, eh_proj), one transformer
  /// layer of the model's last layer's kind, and a final norm; the shared output layer and loss
  /// then run once per module more on the stage that holds the loss.
  std::int64_t mtp_layers = 0;
  /// MTP modules per stage in model order, from a pipeline layout (its `m`); empty: all on the
  /// last stage (Megatron-Core without a layout).
  std::vector<std::int64_t> stage_mtp_layers;
  Recompute recompute = Recompute::None;
  bool flash_attention = false;   ///< no s×s attention tensors kept; backward recomputes QKᵀ
  bool gated_mlp = false;         ///< SwiGLU-style MLP: three weight matrices instead of two
  bool learned_positions = true;  ///< a position-embedding table (GPT) or none (RoPE)
  bool dropout = true;            ///< dropout after attention and the MLP (GPT, Megatron: 0.1)
  /// Element-wise work in fused kernels (Megatron-LM's and Transformer Engine's, or
  /// torch.compile's): each norm and activation one pass over its tensor. false: eager PyTorch,
  /// as torchtitan runs without compile: the RMSNorm in fp32 op by op, rotary embeddings through
  /// complex fp32 products, SwiGLU's silu and product apart (operators.cpp counts the bytes).
  bool fused_elementwise = true;
  /// The output layer shares the input embedding's weights (GPT; Megatron's default). With
  /// more than one stage the last stage keeps a copy, and the two copies' gradients are
  /// all-reduced at the end of the iteration.
  bool tie_embeddings = true;
  /// Count the embedding and the output layer as one transformer layer each when cutting the
  /// model into stages, so that the first and last stages hold one layer fewer.
  bool balance_embedding = false;
  /// The weight-gradient GEMMs add into the main gradients themselves (Megatron-LM since late
  /// 2021); without it every microbatch's gradients are added in a separate pass over the
  /// parameters (`main_grad.add_`, Megatron-LM v2.5).
  bool grad_accumulation_fusion = true;
  double grad_bytes_per_param = 4.0;        ///< fp32 main gradients (Megatron)
  double optimizer_bytes_per_param = 12.0;  ///< fp32 master weights + Adam moments
  AttentionKind attention = AttentionKind::MultiHead;
  LatentAttention latent;        ///< attention = Latent only
  std::optional<MoeConfig> moe;  ///< a mixture of experts ([moe]); none: a dense MLP
};

/// The format a model's matrix multiplies run in apart from FP8 layer linears: FP8 training
/// (Transformer Engine, torchao) keeps attention, the output layer and the rest in BF16.
constexpr Precision compute_precision(const TransformerConfig& m) {
  return m.precision == Precision::FP8 ? Precision::BF16 : m.precision;
}

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
  return std::nullopt;
}

/// Throws ParamError, naming the rule, when `model` cannot run under `layout` (its tp resolved:
/// not 0): tensor parallelism must divide the heads, KV heads and MLP (tensor_parallel_misfit);
/// context parallelism needs fused attention (Transformer Engine and PyTorch run CP inside
/// their fused attention kernels), a sequence that splits into 2·cp equal chunks (the causal
/// load balancing of Megatron-Core and torchtitan), and for a2a (Ulysses) heads and KV heads per
/// TP rank divisible by cp; an HSDP shard group must have at least two ranks.
void require_layout(const TransformerConfig& model, const Layout& layout);

}  // namespace pipetab
