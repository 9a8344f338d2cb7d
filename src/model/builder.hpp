// The operator builder shared by the model's operator files (operators.cpp: the dense layer,
// the embedding and the output; moe.cpp: the mixture-of-experts MLP). Internal to model/.
#pragma once

#include <algorithm>
#include <string_view>
#include <utility>
#include <vector>

#include "dims.hpp"

#include "pipetab/model/operators.hpp"

namespace pipetab::detail {

inline std::vector<Operator>& pass_of(PassOperators& ops, PassId id) {
  return const_cast<std::vector<Operator>&>(std::as_const(ops).pass(id));
}

// A collective's partner GEMM, named while the passes are built and resolved to an index after.
struct Pending {
  PassId pass;
  std::size_t op;
  PassId hidden_pass;
  std::string_view hidden_name;
};

// Appends the operators of one pass; byte counts follow the kernels Megatron-LM runs (fused
// scale-mask-softmax, fused bias-GeLU, fused bias-dropout-add; reference schedules.md §12).
class Builder {
 public:
  Builder(const Workload& run, PassOperators& out, PassId pass, std::vector<Pending>& pending)
      : run_(run), d_(detail::dims(run)), out_(out), pass_(pass), pending_(pending) {}

  std::vector<Operator>& ops() { return pass_of(out_, pass_); }

  void gemm(std::string_view name, double m, double n, double k, double batch = 1.0) {
    ops().push_back(gemm_operator(name, {m, n, k, batch}, d_.e));
  }

  bool fp8() const { return run_.job.precision == Precision::FP8; }

  /// While it lives, the operators this builder adds are `module`'s (Operator::graph_module),
  /// unless an inner Capture named theirs first.
  class Capture {
   public:
    Capture(Builder& b, GraphModule module)
        : b_(b), first_(b.ops().size()), bit_(graph_bit(module)) {}
    Capture(const Capture&) = delete;
    Capture& operator=(const Capture&) = delete;
    ~Capture() {
      auto& ops = b_.ops();
      for (std::size_t i = first_; i < ops.size(); ++i)
        if (ops[i].graph_module == 0) ops[i].graph_module = bit_;
    }

   private:
    Builder& b_;
    std::size_t first_;
    std::uint8_t bit_;
  };

  // A layer's linear: in FP8 training its inputs are quantised first (`quantize` names that
  // kernel; "": none) and the product runs in FP8. Quantising an [m×k] input reads it in 16 bits
  // and writes it and its transpose in FP8 (Transformer Engine's fused cast-transpose: e + 2
  // bytes per element, one kernel, with delayed scaling's previous amax); eager torchao adds an
  // amax pass and casts the transpose apart (3e + 2 bytes, three kernels) and casts the weight
  // every forward too. MXFP8 writes a scale byte per 32 elements beside each of the two copies.
  // Current scaling (tensorwise) on the fused stacks: see current_scaling_amax.
  void linear(std::string_view name, std::string_view quantize, double m, double n, double k,
              bool weight_in_forward, double batch = 1.0) {
    quantized_linear(name, quantize, m, n, k, weight_in_forward, batch, false);
  }
  // Transformer Engine's LayerNormLinear (Megatron-Core's TELayerNormColumnParallelLinear: the
  // attention's QKV after the input norm, a dense MLP's fc1 after the pre-MLP norm, a Mamba
  // mixer's in_proj): the norm runs in the linear's module, so under current scaling it finds
  // the amax of what it writes.
  void norm_linear(std::string_view name, std::string_view quantize, double m, double n, double k) {
    quantized_linear(name, quantize, m, n, k, true, 1.0, true);
  }

  // The experts' linear and weight-gradient GEMM over their `experts` local groups, priced as one
  // kernel. Transformer Engine's GroupedLinear (the fused stacks') launches one cuBLAS GEMM per
  // expert over up to four side streams, an event recorded before and, per stream used, a wait,
  // a record and a wait back (transformer_engine/common/gemm/cublaslt_gemm.cu, multi-stream GEMM,
  // TE v2.12-v2.14), and its FP8 current scaling (tensorwise) quantises each expert's rows apart,
  // four kernels each (zero the amax, the amax, the scale, the cast: split_quantize,
  // csrc/extensions/cast.cpp): launches from inside one call. Delayed scaling's multi-tensor cast
  // is one kernel; MXFP8's and blockwise's per-expert quantisation is not counted.
  void grouped_linear(std::string_view name, std::string_view quantize, double m, double n,
                      double k, bool weight_in_forward, double experts) {
    const std::size_t at = ops().size();
    linear(name, quantize, m, n, k, weight_in_forward, experts);
    ops().back().gemm.grouped = true;
    grouped_launches(at, experts, true);
  }
  void grouped_weight_gemm(std::string_view name, std::string_view accumulate, double m, double n,
                           double k, double experts) {
    const std::size_t at = ops().size();  // the GEMM, before its accumulation's kernel
    weight_gemm(name, accumulate, m, n, k, experts);
    ops()[at].gemm.grouped = true;
    grouped_launches(at, experts, false);
  }

  // A weight-gradient GEMM dW[m×n] = Xᵀ[m×k]·dY[k×n]. Megatron-LM adds each microbatch's
  // gradient into the main gradient: fused into the GEMM (it reads and writes the accumulator),
  // or (before late 2021, v2.5) as a separate `main_grad.add_` over the parameters.
  void weight_gemm(std::string_view name, std::string_view accumulate, double m, double n, double k,
                   double batch = 1.0) {
    gemm(name, m, n, k, batch);
    auto& op = ops().back();
    op.fp8 = fp8() && fp8_weight_grads_;
    const double g = run_.job.grad_bytes_per_param;
    if (run_.job.stack.grad_accumulation_fusion) {
      op.bytes = (d_.e * (m * k + k * n) + 2 * g * m * n) * batch;
    } else {
      memory(accumulate, m * n * batch * (d_.e + 2 * g));
    }
  }

  // A norm over `elements` (RMSNorm or LayerNorm), forward or backward. Fused: one pass, read
  // and write (backward: read the input, the output gradient and, a layer's norms, the
  // residual's gradient (`residual`); write the input gradient). Eager PyTorch (torchtitan's
  // RMSNorm @9dec370: x.float(), pow(2), mean, + eps, rsqrt, ·x, type_as, ·weight): forward
  // 4e + 28 bytes per element in 8 kernels; its autograd backward about 5e + 56 in 10.
  void norm(std::string_view name, double elements, bool backward, bool residual = true) {
    const double e = d_.e;
    if (run_.job.stack.fused_elementwise) {
      memory(name, (backward ? (residual ? 4 : 3) : 2) * e * elements);
    } else {
      memory(name, (backward ? 5 * e + 56 : 4 * e + 28) * elements, backward ? 10 : 8);
    }
  }

  // Rotary embeddings of Q and K over `elements` of them, forward or backward. Eager
  // (torchtitan's apply_rotary_emb: float(), a complex product with the frequencies, type_as):
  // 2e + 16 bytes per element, three kernels each for Q and K. Fused: Megatron-Core applies them
  // to Q and to K apart, outside the attention kernel (SelfAttention.forward's
  // apply_rotary_pos_emb, @d728871), under apply_rope_fusion with Transformer Engine's
  // FusedRoPEFunc (tex.fused_rope_forward and fused_rope_backward, TE v2.12): one kernel each,
  // reading and writing every element, 2e bytes.
  void rotary(std::string_view name, double elements) {
    if (!run_.model.rotary_positions()) return;
    if (run_.job.stack.fused_elementwise) return memory(name, 2 * d_.e * elements, 2);
    memory(name, (2 * d_.e + 16) * elements, 6);
  }

  // Qwen3's per-head norms of Q and K (TransformerConfig::qk_norm; Megatron-Core's q_layernorm
  // and k_layernorm, a norm module each): two norms over the heads' widths, whose backward reads
  // no residual gradient.
  void qk_norms(std::string_view q, std::string_view k, double q_elements, double k_elements,
                bool backward) {
    if (!run_.model.qk_norm) return;
    norm(q, q_elements, backward, false);
    norm(k, k_elements, backward, false);
  }

  // The layer's weight gradients are FP8 products (of the inputs' and output gradients' FP8
  // transposes); the output layer's are not.
  void fp8_weight_grads(bool on) { fp8_weight_grads_ = on; }

  void memory(std::string_view name, double bytes, std::int32_t kernels = 1) {
    Operator op;
    op.name = name;
    op.kind = OperatorKind::Memory;
    op.bytes = bytes;
    op.kernels = kernels;
    ops().push_back(op);
  }

  // A fused attention kernel over heads `head_dim` wide, in FP8 under Job::fp8_attention (its
  // bytes counted as 16-bit reads: the kernel is bound by its FLOPs either way).
  void fused_attention(std::string_view name, OperatorKind kind, double flops, double bytes,
                       double head_dim) {
    Operator op;
    op.name = name;
    op.kind = kind;
    op.flops = flops;
    op.bytes = bytes;
    op.head_dim = head_dim;
    op.fp8 = run_.job.fp8_attention;
    ops().push_back(op);
  }

  // Under Job::fp8_attention, the quantisation of `elements` 16-bit values before the FP8
  // attention kernel (Q, K and V forward; dO backward), as Transformer Engine's quantizers run
  // it (DotProductAttention's get_attention_quantizers and combine_and_quantize, TE @d0067d0):
  // delayed scaling casts with the previous amax (read e, write 1 byte); current scaling finds
  // the amax first (one more read, two kernels); MXFP8 writes a row-wise and a column-wise copy,
  // each with a scale byte per 32 values. No-op otherwise.
  void attention_quantize(std::string_view name, double elements) {
    if (!run_.job.fp8_attention) return;
    switch (run_.job.fp8_recipe) {
      case Fp8Recipe::Delayed:
        memory(name, (d_.e + 1) * elements);
        return;
      case Fp8Recipe::Mxfp8:
        memory(name, (d_.e + 2 * (1 + kMxfp8ScaleBytes)) * elements);
        return;
      default:
        memory(name, (2 * d_.e + 1) * elements, 2);
        return;
    }
  }

  // A tensor-parallel collective over the full [s, b, h] buffer (e bytes per element). No-op
  // without tensor parallelism.
  void collective(std::string_view name, CollectiveKind kind, double bytes, Overlap overlap,
                  PassId hidden_pass, std::string_view hidden_by) {
    if (d_.t <= 1.0) return;
    push_collective(name, CollectiveGroup::Tensor, kind, bytes, hidden_pass, hidden_by).overlap =
        overlap;
  }

  // A mixture-of-experts layer's exchange of tokens: an all-to-all over the expert-parallel
  // group (`bytes`: the rows the busiest rank receives, its own included), or an all-gather or
  // reduce-scatter of the dispatched rows over the expert-tensor-parallel group. Runs beside
  // `hidden_by` of this pass ("": exposed). No-op (null) when the group has one rank.
  Operator* expert_exchange(std::string_view name, CollectiveGroup group, CollectiveKind kind,
                            double bytes, std::string_view hidden_by) {
    const auto ranks = group == CollectiveGroup::Expert ? run_.layout.ep : run_.layout.etp;
    if (ranks <= 1) return nullptr;
    return &push_collective(name, group, kind, bytes, pass_, hidden_by);
  }

  // A dispatcher's routing metadata (the alltoall dispatcher's token counts per expert, HybridEP's
  // routing map), all-gathered over the expert-parallel ranks on NCCL's ring (a plain
  // all-gather, whatever carries the tokens).
  // No-op (nullptr) without expert parallelism.
  Operator* token_counts(std::string_view name, double bytes) {
    if (run_.layout.ep <= 1) return nullptr;
    Operator& op =
        push_collective(name, CollectiveGroup::Expert, CollectiveKind::AllGather, bytes, pass_, "");
    op.algorithm = CollectiveAlgorithm::Ring;
    return &op;
  }

  // A context-parallel exchange of keys and values (or, for Ulysses, of Q, K, V and the output)
  // over the CP group, running beside `hidden_by` of this pass for `fraction` of its time ("":
  // exposed). No-op without context parallelism.
  void context_exchange(std::string_view name, CollectiveKind kind, double bytes,
                        std::string_view hidden_by, double fraction) {
    if (d_.cp <= 1.0) return;
    push_collective(name, CollectiveGroup::Context, kind, bytes, pass_, hidden_by).hidden_fraction =
        fraction;
  }

 private:
  // Current scaling (tensorwise) needs the whole tensor's amax before it casts an element, so a
  // fused stack reads the input once more (e bytes an element). Transformer Engine runs four
  // kernels from one call: the amax zeroed and the amax pass (nvte_compute_amax_with_config,
  // common/recipe/current_scaling.cu), the scale, the cast-transpose
  // (Float8CurrentScalingQuantizer::quantize_impl, pytorch/csrc/quantizer.cpp @v2.12). After a
  // norm in the same module the norm kernel finds the amax as it writes its 16-bit output
  // (normalization.cpp, FUSED_NORM_AMAX_FP8, then quantize_with_amax): no more reads, the amax
  // zeroed, the scale and the cast. torch.compile's torchao: a reduction, then the cast.
  // Returns {extra bytes per element, kernels launched inside the call}.
  std::pair<double, std::int32_t> current_scaling_amax(bool from_norm) const {
    if (run_.job.fp8_recipe != Fp8Recipe::Tensorwise || !run_.job.stack.fused_elementwise)
      return {0.0, 0};
    if (!run_.job.stack.fp8_saved_inputs) return {d_.e, 1};  // torchao, compiled
    return from_norm ? std::pair<double, std::int32_t>{0.0, 2}
                     : std::pair<double, std::int32_t>{d_.e, 3};
  }

  void quantized_linear(std::string_view name, std::string_view quantize, double m, double n,
                        double k, bool weight_in_forward, double batch, bool from_norm) {
    if (fp8() && !quantize.empty()) {
      const bool fused = run_.job.stack.fused_elementwise;
      double elements = m * k * batch;
      if (!fused && weight_in_forward) elements += n * k * batch;
      const double scales = run_.job.fp8_recipe == Fp8Recipe::Mxfp8 ? 2 * kMxfp8ScaleBytes : 0.0;
      const auto [amax_bytes, amax_kernels] = current_scaling_amax(from_norm);
      const double per_element = run_.job.fp8_recipe == Fp8Recipe::Nvfp4
                                     ? kNvfp4QuantizeBytes
                                     : (fused ? d_.e + 2 + amax_bytes : 3 * d_.e + 2) + scales;
      memory(quantize, per_element * elements, fused ? 1 : 3);
      ops().back().inner_launches = amax_kernels;
    }
    gemm(name, m, n, k, batch);
    ops().back().fp8 = fp8();
    if (fp8())
      ops().back().bytes =
          gemm_operator(name, {m, n, k, batch}, 1.0).bytes + m * n * batch * (d_.e - 1);
  }

  // The launches inside a grouped GEMM (from `at`: its quantisation, if `quantised` and any, then
  // the GEMM) over `experts` groups on a fused stack (Transformer Engine's GroupedLinear; see
  // grouped_linear).
  void grouped_launches(std::size_t at, double experts, bool quantised) {
    if (!run_.job.stack.fused_elementwise) return;
    const auto n = static_cast<std::int32_t>(experts);
    const std::int32_t streams = std::min(n, 4);
    for (std::size_t i = at; i < ops().size(); ++i) {
      Operator& op = ops()[i];
      if (op.kind == OperatorKind::Gemm) {
        op.inner_launches = n + 3 * streams;  // n − 1 more GEMMs, an event, 3 a stream
      } else if (quantised && op.kind == OperatorKind::Memory &&
                 run_.job.fp8_recipe == Fp8Recipe::Tensorwise) {
        op.inner_launches = 4 * n - 1;
      }
    }
  }

  // How a collective over `group` moves its bytes (parallel/collective.hpp): NCCL's ring for
  // tensor parallelism and the experts' tensor parallelism; for context parallelism Transformer
  // Engine's point-to-point ring (ring), NCCL's all-gather (allgather) or all-to-all (a2a,
  // Ulysses); for the experts' all-to-alls NCCL's, or DeepEP's once per node.
  CollectiveAlgorithm algorithm(CollectiveGroup group) const {
    switch (group) {
      case CollectiveGroup::Context:
        switch (run_.layout.cp_method) {
          case CpMethod::Ring:
            return CollectiveAlgorithm::Neighbour;
          case CpMethod::AllGather:
            return CollectiveAlgorithm::Ring;
          case CpMethod::AllToAll:
            return CollectiveAlgorithm::Direct;
        }
        break;
      case CollectiveGroup::Expert:
        return is_flex(run_.job.moe.dispatcher) ? CollectiveAlgorithm::NodeDedup
                                                : CollectiveAlgorithm::Direct;
      default:
        break;
    }
    return CollectiveAlgorithm::Ring;
  }

  // Appends a collective and, when it has a partner ("" none), notes it to be resolved.
  Operator& push_collective(std::string_view name, CollectiveGroup group, CollectiveKind kind,
                            double bytes, PassId hidden_pass, std::string_view hidden_by) {
    Operator op;
    op.name = name;
    op.kind = OperatorKind::Collective;
    op.group = group;
    op.collective = kind;
    op.collective_bytes = bytes;
    op.algorithm = algorithm(group);
    ops().push_back(op);
    if (!hidden_by.empty()) pending_.push_back({pass_, ops().size() - 1, hidden_pass, hidden_by});
    return ops().back();
  }

  Workload run_;
  bool fp8_weight_grads_ = false;
  Dims d_;
  PassOperators& out_;
  PassId pass_;
  std::vector<Pending>& pending_;
};

// Sizes of one layer per device, in elements: the residual stream on a device (all of it, or
// 1/t of the sequence with sequence parallelism), the attention score matrices, the MLP.
struct LayerSizes {
  double T;         // tokens s·b
  double x;         // residual stream elements on the device
  double full;      // s·b·h: the buffer of a tensor-parallel collective
  double scores;    // b·(a/t)·s²
  double qkv_out;   // (q + 2·kv)/t
  double ffn_out;   // fc1's output width per device (gated: two halves)
  double ffn;       // ffn/t
  double heads;     // b·a/t: batched attention products
  double head_dim;  // q/a
};

inline LayerSizes sizes(const Workload& run, const Dims& d) {
  const TransformerConfig& m = run.model;
  LayerSizes z;
  z.T = d.tokens();
  z.full = d.sbh();
  z.x = run.layout.sequence_parallel ? z.full / d.t : z.full;
  z.scores = d.b * (d.a / d.t) * d.s * d.s;
  z.qkv_out = (d.q + 2 * d.kv) / d.t;
  z.ffn = d.ffn / d.t;
  z.ffn_out = (m.gated_mlp ? 2 : 1) * z.ffn;
  z.heads = d.b * d.a / d.t;
  z.head_dim = d.head_dim();
  return z;
}

// A layer's MLP, per pass: the dense one (operators.cpp) and the mixture of experts (moe.cpp).
void mlp_forward(Builder& f, const Workload& run, const Dims& d, const LayerSizes& z);
void mlp_input_grad(Builder& i, const Workload& run, const Dims& d, const LayerSizes& z);
void mlp_weight_grad(Builder& w, const Workload& run, const Dims& d, const LayerSizes& z);
// gpt-oss's experts run their bias and clamp eagerly (moe.cpp says how), except under CUDA graphs,
// whose MoE layers need Transformer Engine's fused experts.
inline bool eager_bias(const Workload& run) {
  return run.model.moe && run.model.moe->expert_bias && !run.job.stack.cuda_graphs;
}
inline bool eager_clamp(const Workload& run) {
  return run.model.moe && run.model.moe->activation_clamp > 0.0 && !run.job.stack.cuda_graphs;
}
void moe_forward(Builder& f, const Workload& run, const Dims& d, const LayerSizes& z);
void moe_input_grad(Builder& i, const Workload& run, const Dims& d, const LayerSizes& z);
void moe_weight_grad(Builder& w, const Workload& run, const Dims& d, const LayerSizes& z);

/// What attention's context-parallel exchanges move per token and tensor-parallel rank, in
/// elements: Q, K and V as FlashAttention takes them, and its output.
struct AttentionWidths {
  double q, k, v, out;
};

// Context parallelism's exchanges around FlashAttention (operators.cpp): before its forward, the
// output's after it (Ulysses), and with its backward.
void context_exchange_forward(Builder& f, const Workload& run, const Dims& d,
                              const AttentionWidths& w);
void context_output_forward(Builder& f, const Workload& run, const Dims& d,
                            const AttentionWidths& w);
void context_exchange_backward(Builder& i, const Workload& run, const Dims& d,
                               const AttentionWidths& w);

// Multi-head latent attention (mla.cpp): the attention's projections per pass (operators.cpp
// builds the shell around them), its fused core, its parameters and activation bytes per device.
void mla_projections_forward(Builder& f, const Workload& run, const Dims& d, const LayerSizes& z);
void mla_projections_input_grad(Builder& i, const Workload& run, const Dims& d,
                                const LayerSizes& z);
void mla_projections_weight_grad(Builder& w, const Workload& run, const Dims& d,
                                 const LayerSizes& z);
void mla_core_forward(Builder& f, const Workload& run, const Dims& d, const LayerSizes& z);
double mla_params(const Workload& run, const Dims& d);
double mla_activation_bytes(const Workload& run, const Dims& d);
/// What latent attention keeps per token and device, in elements: its four latents (the query
/// latent, its normed copy, the key-value latent with the shared rotary key, its normed copy;
/// whole on every tensor-parallel rank), the heads' Q, K and V and the output (split), and the
/// heads, each keeping an fp32 log-sum-exp.
struct MlaKept {
  std::array<double, 4> latents{};
  double q = 0.0, k = 0.0, v = 0.0, out = 0.0, heads = 0.0;
};
MlaKept mla_kept(const Workload& run, const Dims& d);

// A multi-token-prediction module's own operators per pass (mtp.cpp; its parameters and
// activations in memory.hpp).
void mtp_forward(Builder& f, const Workload& run, const Dims& d, const LayerSizes& z);
void mtp_input_grad(Builder& i, const Workload& run, const Dims& d, const LayerSizes& z);
void mtp_weight_grad(Builder& w, const Dims& d, const LayerSizes& z);

// A hybrid model's Mamba-2 layer (mamba.cpp): its operators per pass; its parameters and
// activation bytes in memory.hpp.
void mamba_forward(Builder& f, const Workload& run, const Dims& d, const LayerSizes& z);
void mamba_input_grad(Builder& i, const Workload& run, const Dims& d, const LayerSizes& z);
void mamba_weight_grad(Builder& w, const Workload& run, const Dims& d, const LayerSizes& z);

/// Bytes of the fused bias-dropout-add after attention and after the MLP, or of its backward.
double dropout_add_bytes(const Workload& run, const Dims& d, const LayerSizes& z, bool backward);

}  // namespace pipetab::detail
