// The operators of a transformer stage, per pass (docs/design.md §5 `model/`): what each kernel
// computes and moves, machine-free. The cost layer (cost/) turns them into time on a device.
//
// Layout: Megatron-LM's tensor parallelism (Shoeybi et al. 2019; Narayanan et al. SC'21):
// column-parallel QKV and fc1, row-parallel output projection and fc2, an all-reduce after each
// row-parallel linear in forward and after each column-parallel linear's input gradient in
// backward; with sequence parallelism (Korthikanti et al. 2022, §4.2.2) all-gathers before the
// column-parallel linears and reduce-scatters after the row-parallel ones instead, and the
// norms and dropouts run on 1/t of the sequence.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "pipetab/model/workload.hpp"
#include "pipetab/parallel/collective.hpp"

namespace pipetab {

enum class OperatorKind : std::uint8_t {
  Gemm,                    ///< a (batched) matrix multiply
  FusedAttention,          ///< FlashAttention's forward: scores, softmax and values in one kernel
  FusedAttentionBackward,  ///< FlashAttention's backward (recomputes the scores)
  Memory,                  ///< bound by memory traffic: norms, softmax, dropout, activation, adds
  Collective,              ///< a collective over the stage's tensor- or context-parallel group
};

/// The three passes of a stage: forward, input gradient (I) and weight gradient (W).
enum class PassId : std::uint8_t { Forward, InputGrad, WeightGrad };

/// C[m×n] = A[m×k]·B[k×n], `batch` independent products.
struct GemmShape {
  double m = 0.0, n = 0.0, k = 0.0, batch = 1.0;
  /// The experts' grouped GEMM: `batch` groups, each its own expert's weight, in one kernel
  /// (torch._grouped_mm, Transformer Engine's GroupedLinear).
  bool grouped = false;
};

struct Operator {
  std::string_view name;  ///< e.g. "qkv", "fc1.weight_grad", "attention.softmax"
  OperatorKind kind = OperatorKind::Memory;
  GemmShape gemm;      ///< Gemm only
  double flops = 0.0;  ///< matrix-multiply FLOPs: 2·m·n·k·batch, or the fused attention's
  /// A transformer layer's linear in FP8 (precision = "fp8"): it runs at the device's FP8 peak
  /// with its FP8 GEMM model; every other GEMM and attention stay in BF16, as Transformer
  /// Engine's and torchao's FP8 recipes keep them, except the fused attention under
  /// Job::fp8_attention.
  bool fp8 = false;
  /// Bytes to and from device memory: what a memory-bound kernel reads and writes; a GEMM's
  /// operands and result; the fused attention's inputs and outputs.
  double bytes = 0.0;
  /// A fused attention's head width, which its kernel's efficiency depends on
  /// (cost/attention.hpp): head_dim, or latent attention's mean of its query-key and value
  /// widths (the kernel's FLOPs split evenly between QKᵀ and ·V). 0 for other operators.
  double head_dim = 0.0;
  CollectiveKind collective = CollectiveKind::AllReduce;
  /// The buffer as parallel/collective.hpp counts it: all ranks' parts together; for an
  /// all-to-all one rank's buffer, its own part included (the busiest rank's for the experts).
  double collective_bytes = 0.0;
  /// The ranks it runs over (placement.hpp): the tensor-parallel group; the context-parallel one
  /// (the same tensor-parallel rank of each CP rank); the expert-parallel one (a MoE layer's
  /// dispatch and combine all-to-alls, its ranks expert_tensor_parallel apart); or the
  /// expert-tensor-parallel one (the dispatched rows gathered and scattered among the ranks that
  /// split each expert).
  CollectiveGroup group = CollectiveGroup::Tensor;
  /// How it moves its bytes: NCCL's ring for tensor-parallel collectives and the context-parallel
  /// all-gather, Transformer Engine's point-to-point ring for ring context parallelism, direct
  /// all-to-alls for Ulysses and the experts (DeepEP's node deduplication with its dispatcher).
  CollectiveAlgorithm algorithm = CollectiveAlgorithm::Ring;
  /// Tensor-parallel collectives: the least --tp-overlap under which it runs beside its partner.
  /// Context-parallel exchanges run beside theirs whenever they have one (the ring's design).
  Overlap overlap = Overlap::Never;
  /// The operator it can run beside, in `hidden_pass` at `hidden_index` (collectives only), and
  /// the share of that operator's time it can hide under (a CP all-gather only the local
  /// block's attention: 1/cp).
  PassId hidden_pass = PassId::Forward;
  std::int32_t hidden_index = -1;
  double hidden_fraction = 1.0;
  /// Kernel launches, each a framework call the host issues (an op from Python, priced at
  /// DeviceSpec::host_launch_s when the host bounds the pass).
  std::int32_t kernels = 1;
  /// Further kernels launched from inside those calls, in C++ (Transformer Engine's GroupedLinear
  /// issues one cuBLAS GEMM per local expert and the stream events around them; its FP8
  /// split_quantize four kernels per expert): the host pays a launch each
  /// (cost::kInnerLaunchS), not a call. The device pays a kernel's overhead for each of a
  /// memory-bound call's; a grouped GEMM's gaps are in its measured efficiency.
  std::int32_t inner_launches = 0;
  /// The host waits for the device before this operator runs: the MoE dispatchers copy the
  /// token counts to the host before the all-to-all (Megatron-Core's cuda_sync_point, DeepEP's
  /// busy-wait on its received counts, HybridEP's stream synchronisation). The device's queue
  /// drains there, so what follows runs no further ahead than the host has issued it
  /// (cost::host_bound_seconds).
  bool host_sync = false;
  /// An exchange issued inside the next exchange's call, on its stream: that exchange's first
  /// part, not one the compute waits for on its own (cost::layer_program merges the two).
  /// HybridEP's all-gather of the routing map, which its dispatch_with_permute issues before
  /// moving the tokens (Megatron-Core fused_a2a.py HybridEPDispatch @6cd6ea5; DeepEP hybrid-ep
  /// @94a9f8f).
  bool opens_next_exchange = false;
  /// The GraphModule bit (graph_bit) of the module Transformer Engine's per-layer CUDA graphs
  /// capture it in; model_operators keeps it only where the stack captures that module
  /// (Stack::graph_modules), 0 elsewhere.
  std::uint8_t graph_module = 0;
};

/// The operators of each pass, in execution order. Full recomputation puts the whole forward
/// at the head of the input-gradient pass; selective recomputation the attention core.
struct PassOperators {
  std::vector<Operator> forward, input_grad, weight_grad;
  const std::vector<Operator>& pass(PassId id) const;
};

/// A transformer's operators: one layer of each kind, the input embedding (first stage), the
/// output layer with the loss (last stage), and a multi-token-prediction module's own.
struct ModelOperators {
  PassOperators layer;      ///< a dense layer (a mixture of experts' first dense_layers)
  PassOperators moe_layer;  ///< a mixture-of-experts layer; empty for a dense model
  PassOperators embedding;
  PassOperators output;
  /// An MTP module without its transformer layer (a layer of the last layer's kind) and the
  /// output layer it shares: the next tokens' embedding, the norms, eh_proj, the final norm.
  /// Empty without mtp_layers.
  PassOperators mtp;
  /// A hybrid model's layers, one of each kind (BlockKind order), each with its own norm and
  /// residual add; `layer` and `moe_layer` are then empty. Empty for other models.
  std::array<PassOperators, kBlockKinds> blocks;
};

/// The kind of an MTP module's transformer layer: the model's last layer's (Megatron-Core's
/// get_gpt_mtp_block_spec takes the decoder's last layer spec), a mixture of experts' unless
/// every layer is dense.
constexpr bool mtp_layer_is_moe(const TransformerConfig& m) {
  return m.moe.has_value() && m.moe->dense_layers < m.layers;
}

/// One of a MoE layer's routed experts' operators (their grouped linears, activation, bias and
/// their gradients): model/moe.cpp names them `experts.*`, the shared experts `shared_experts.*`.
constexpr bool is_routed_expert(const Operator& op) {
  return op.name.starts_with("experts.");
}

/// The operators of a workload per device (its tensor-parallel share) for one microbatch. The
/// workload is assumed valid (require_trainable checks it).
ModelOperators model_operators(const Workload& run);

/// A matrix multiply of `shape` as the model counts it: 2·m·n·k·batch FLOPs, its operands read
/// and its result written once at `element_bytes` each.
Operator gemm_operator(std::string_view name, const GemmShape& shape, double element_bytes);

/// Σ matrix-multiply FLOPs as the operators count them (a fused attention's over the full square).
double matmul_flops(std::span<const Operator> operators);

/// FlashAttention skips the tiles above the diagonal of a causal mask: it executes about half of
/// the product's FLOPs (Dao 2023, §3.1.1), and its measured throughputs count those.
inline constexpr double kCausalFraction = 0.5;

/// The FLOPs the GPU executes for `op`: a fused attention's causal half, a GEMM's all.
constexpr double executed_flops(const Operator& op) {
  const bool fused =
      op.kind == OperatorKind::FusedAttention || op.kind == OperatorKind::FusedAttentionBackward;
  return fused ? op.flops * kCausalFraction : op.flops;
}

/// Σ executed_flops.
double executed_flops(std::span<const Operator> operators);

}  // namespace pipetab
