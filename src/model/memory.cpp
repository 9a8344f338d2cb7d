#include "memory.hpp"

#include "builder.hpp"

#include "pipetab/model/workload.hpp"

namespace pipetab {
namespace detail {

// Activation bytes one layer holds for one microbatch, per device (Korthikanti et al. §4,
// reference schedules.md §12; 16-bit activations, 1-byte dropout masks). For a GPT layer
// without parallelism: 34·sbh + 5·a·s²·b. The generalization to GQA and other FFN widths keeps
// Korthikanti's split: 10·sbh that tensor parallelism does not divide (LayerNorm inputs, the
// QKV and fc1 inputs, two dropout masks) and the rest that it does. `attention` is the part of
// the attention core (softmax and its dropout, or FlashAttention's log-sum-exp). Without
// dropout the masks (2·sbh and a·s²·b) and the dropout's output (2·a·s²·b) are not kept.
// Under FP8 with Transformer Engine (Stack::fp8_saved_inputs) the GEMMs keep the inputs their
// weight gradients need in FP8, one byte per value.
bool fp8_saved_inputs(const Workload& run) {
  return run.job.precision == Precision::FP8 && run.job.stack.fp8_saved_inputs;
}

// What Transformer Engine's FusedAttnFunc saves for an FP8 backward (backends.py @d0067d0): Q, K
// and V as quantised — one byte each under tensorwise or delayed scaling; under MXFP8 a row-wise
// and a column-wise copy, each with a scale byte per 32 values — and the output in 16 bits,
// except under delayed scaling, which keeps its FP8 copy (current scaling keeps the 16-bit one:
// NVTE_DPA_FP8CS_O_in_F16 defaults to 1).
SavedAttentionBytes saved_attention_bytes(const Workload& run, double e) {
  if (!run.job.fp8_attention) return {e, e};
  const Fp8Recipe r = run.job.fp8_recipe;
  return {r == Fp8Recipe::Mxfp8 ? 2 * (1 + kMxfp8ScaleBytes) : 1.0,
          r == Fp8Recipe::Delayed ? 1.0 : e};
}

double fp8_attention_saved_delta(const Workload& run, double e, double qkv, double out) {
  const SavedAttentionBytes kept = saved_attention_bytes(run, e);
  return (kept.qkv - e) * qkv + (kept.out - e) * out;
}

LayerActivation layer_activation_bytes(const Workload& run, const Dims& d) {
  const TransformerConfig& m = run.model;
  const double sbh = d.sbh();
  if (run.job.recompute == Recompute::Full)
    return {2 * sbh / (run.layout.sequence_parallel ? d.t : 1), 0.0};  // layer input
  if (run.job.recompute == Recompute::EveryOtherLayer) {
    // Half the layers keep everything, half only their input.
    Job none = run.job, full = run.job;
    none.recompute = Recompute::None;
    full.recompute = Recompute::Full;
    const auto a = layer_activation_bytes({m, none, run.layout}, d),
               b = layer_activation_bytes({m, full, run.layout}, d);
    return {(a.total + b.total) / 2, (a.attention + b.attention) / 2};
  }
  if (m.attention == AttentionKind::Latent && d.a > 0) {
    // Latent attention: the dense accounting without its heads, and MLA's own tensors.
    Dims rest = d;
    rest.q = rest.kv = rest.a = 0.0;
    LayerActivation a = layer_activation_bytes(run, rest);
    const double mla = mla_activation_bytes(run, d);
    const double lse = 4 * d.a / d.t * d.s * d.b;
    return {a.total + mla, lse};
  }
  const bool per_op = run.job.recompute == Recompute::SelectiveOp;
  const bool lgd = run.job.recompute == Recompute::Lgd;
  // Per-op recomputation (torchtitan) keeps the two residual-stream inputs the recomputed norms
  // start from, instead of the norms' inputs and outputs; so does PipeOffload's LGD, which
  // regenerates the dropout masks too.
  const double unsplit = (m.dropout && !lgd ? 2 : 0) * sbh + (per_op || lgd ? 4 : 8) * sbh;
  // Q (2·s·b·q), K and V (2·s·b·kv each), the output-projection input (2·s·b·q); the MLP's
  // activation input and fc2 input (2·s·b·ffn each), a third for the gate. (q = h unless the
  // model sets head_dim.) Per-op recomputation keeps the outputs of wq, wv, attention and w1 and
  // recomputes K, the gate's other half and the product.
  // LGD recomputes the activation's output (fc2's input) from its input.
  // Qwen3's per-head norms of Q and K (qk_norm) keep their inputs, Q and K as the projection
  // gave them, beside the normed and rotated copies the attention keeps (2·s·b·(q + kv)).
  const double qk_norms = m.qk_norm ? 2 * d.s * d.b * (d.q + d.kv) : 0.0;
  const double split =
      qk_norms + (per_op ? 4 * d.s * d.b * d.q + 2 * d.s * d.b * d.kv + 2 * d.s * d.b * d.ffn
                         : 4 * d.s * d.b * d.q + 4 * d.s * d.b * d.kv +
                               ((m.gated_mlp ? 6 : 4) - (lgd ? 2 : 0)) * d.s * d.b * d.ffn);
  // Softmax output (2·a·s²·b), its dropout mask (a·s²·b), the dropout output (2·a·s²·b); with
  // FlashAttention only a row-wise log-sum-exp (fp32) per head; selective recomputation drops
  // the attention core altogether.
  double attention = 0.0;
  if (run.job.stack.flash_attention) {
    attention = 4 * d.a * d.s * d.b;
  } else if (run.job.recompute != Recompute::Selective) {
    attention = (m.dropout ? 5 : 2) * d.a * d.s * d.s * d.b;
    // Under autocast the softmax runs in fp32 and its output is kept for its backward (4 bytes
    // per score) beside the 16-bit copy the ·V product keeps.
    if (run.job.stack.autocast) attention += 4 * d.a * d.s * d.s * d.b;
  }
  // Under FP8 with Transformer Engine (Stack::fp8_saved_inputs) a GEMM keeps the input its
  // weight gradient needs in FP8, one byte where the accounting above has two: the normalised
  // inputs of QKV and fc1 (unless per-op or LGD recomputation recomputes the norms; fc1's only
  // where the layer has a dense MLP, as a MoE layer's router reads it in 16 bits) and fc2's, the
  // activation's output (unless LGD recomputes it, or per-op recomputation the product). The
  // output projection keeps an FP8 copy of the attention's output: beside the 16-bit one the
  // fused attention's backward reads, or instead of it on the math path.
  double unsplit_fp8 = unsplit, split_fp8 = split;
  if (fp8_saved_inputs(run)) {
    const double sb = d.s * d.b;
    if (!per_op && !lgd) {
      unsplit_fp8 -= (d.ffn > 0 ? 2 : 1) * sbh;
      split_fp8 -= sb * d.ffn;
    }
    split_fp8 += (run.job.stack.flash_attention ? 1 : -1) * sb * d.q;
  }
  split_fp8 += fp8_attention_saved_delta(run, d.e, d.s * d.b * (d.q + 2 * d.kv), d.s * d.b * d.q);
  if (run.layout.sequence_parallel)
    return {(unsplit_fp8 + split_fp8 + attention) / d.t, attention / d.t};
  return {unsplit_fp8 + (split_fp8 + attention) / d.t, attention / d.t};
}

LayerActivation moe_layer_activation_bytes(const Workload& run) {
  const TransformerConfig& m = run.model;
  const Dims d = dims(run);
  // The attention half of a layer: the dense accounting with no MLP width (its unsplit part
  // keeps the MLP's input, which the router, the permutation and the shared experts read).
  Dims attention_dims = d;
  attention_dims.ffn = 0.0;
  LayerActivation a = layer_activation_bytes(run, attention_dims);
  if (run.job.recompute == Recompute::Full || !m.moe) return a;
  // Megatron-Core's recompute module `layernorm` discards the pre-MLP norm's output (the MLP's
  // input above, 2·sbh, split by SP) and recomputes it in the backward (require_runnable keeps
  // it to recompute none or selective, where that output is among the kept).
  if (run.job.moe.recompute_norm)
    a.total -= 2 * d.sbh() / (run.layout.sequence_parallel ? d.t : 1.0);
  const MoeConfig& moe = *m.moe;
  const double half = run.job.recompute == Recompute::EveryOtherLayer ? 0.5 : 1.0;
  if (run.job.moe.recompute == MoeRecompute::Mlp) return a;
  const double t = d.t;
  const double tokens = d.s * d.b / t;  // the rank's tokens (sequence parallel)
  const double k = static_cast<double>(moe.top_k);
  const double rows = run.job.moe.load() * tokens * k;
  const double etp = static_cast<double>(run.layout.etp);
  const double width = static_cast<double>(moe.expert_ffn_hidden) / etp;
  const double up = (m.gated_mlp ? 2 : 1) * width;
  // fp32 probabilities of every expert (the router's backward), the routed rows the combine
  // weighted (the probabilities' gradient), the gathered rows fc1 read, fc1's output, and the
  // activation's output fc2 read unless moe_act recomputes it.
  // Under FP8 with Transformer Engine the grouped GEMMs keep their inputs (the gathered rows,
  // the activation's output) in FP8, one byte each; so do the shared experts' fc2, and their
  // fc1 an FP8 copy of the MLP's input.
  const bool fp8 = fp8_saved_inputs(run);
  const double fp8_e = fp8 ? 1.0 : d.e;
  const bool act_kept = run.job.moe.recompute != MoeRecompute::MoeAct;
  double bytes = 4 * tokens * static_cast<double>(moe.experts) + d.e * tokens * k * d.h;
  bytes += rows * etp * (fp8_e * d.h + d.e * up + (act_kept ? fp8_e * width : 0.0));
  // gpt-oss's eager clamp (moe.cpp): the clamps keep fc1's output for their masks and the fused
  // activation its clamped, concatenated copy, one more of fc1's width, unless moe_act recomputes.
  if (eager_clamp(run) && act_kept) bytes += rows * etp * d.e * up;
  // The shared experts as a dense MLP: fc1's output and the activation's output, split by TP.
  const double shared = static_cast<double>(moe.shared_ffn());
  bytes += d.s * d.b * (d.e * (m.gated_mlp ? 2 : 1) * shared + fp8_e * shared) / t;
  if (fp8 && shared > 0) bytes += d.s * d.b * d.h / (run.layout.sequence_parallel ? t : 1.0);
  a.total += half * bytes;
  return a;
}

// The attention's matrices per device: split by TP, or latent attention's (mla_params).
static double attention_params(const Workload& run, const Dims& d) {
  const TransformerConfig& m = run.model;
  if (m.attention == AttentionKind::Latent) return mla_params(run, d);
  return (2 * d.h * d.q + 2 * d.h * d.kv) / d.t;
}

LayerParams dense_layer_params(const Workload& run) {
  const TransformerConfig dense = dense_layer_model(run.model);
  const Workload dense_run{dense, run.job, run.layout};
  const Dims d = dims(dense_run);
  // Tensor parallelism splits the matrices; the two LayerNorms (4h) are replicated on every
  // device (Megatron-LM, Shoeybi et al. 2019).
  const double linears =
      attention_params(dense_run, d) + (dense.gated_mlp ? 3 : 2) * d.h * d.ffn / d.t;
  return {linears + 4 * d.h, 0.0, linears};
}

LayerParams moe_layer_params(const Workload& run) {
  const TransformerConfig& m = run.model;
  const Dims d = dims(run);
  const MoeConfig& moe = *m.moe;
  const double matrices = m.gated_mlp ? 3 : 2;
  const double attention = attention_params(run, d);
  // Each rank holds E/EP experts, each split over ETP; the shared experts split over TP like a
  // dense MLP; the router's h×E weight is replicated (Megatron-Core's TopKRouter).
  const double experts = static_cast<double>(moe.experts / run.layout.ep) * matrices * d.h *
                         static_cast<double>(moe.expert_ffn_hidden) /
                         static_cast<double>(run.layout.etp);
  const double shared = matrices * d.h * static_cast<double>(moe.shared_ffn()) / d.t;
  const double router = d.h * static_cast<double>(moe.experts);
  const double linears = attention + experts + shared;
  return {linears + router + 4 * d.h, experts, linears};
}

std::array<LayerActivation, kBlockKinds> block_activation_bytes(const Workload& run) {
  const TransformerConfig& m = run.model;
  std::array<LayerActivation, kBlockKinds> out{};
  if (m.mamba) out[index(BlockKind::Mamba)] = mamba_block_activation_bytes(run);
  const TransformerConfig dense = dense_layer_model(m);
  const Workload dense_run{dense, run.job, run.layout};
  const Dims d = dims(dense_run);
  const double unsplit_t = run.layout.sequence_parallel ? d.t : 1.0;
  if (run.job.recompute == Recompute::Full) {
    // Every layer keeps its input alone.
    for (const BlockKind k : {BlockKind::Attention, BlockKind::Mlp, BlockKind::Moe})
      out[index(k)] = {2 * d.sbh() / unsplit_t, 0.0};
    if (!m.moe) out[index(BlockKind::Moe)] = {};
    return out;
  }
  // The dense accounting's unsplit part keeps, for the MLP half, the pre-MLP norm's input and
  // the MLP's input (2·sbh each) and its dropout mask.
  Dims attention_dims = d;
  attention_dims.ffn = 0.0;
  LayerActivation attention = layer_activation_bytes(dense_run, attention_dims);
  attention.total -= (4 + (m.dropout ? 1 : 0)) * d.sbh() / unsplit_t;
  out[index(BlockKind::Attention)] = attention;
  out[index(BlockKind::Mlp)] = {layer_activation_bytes(dense_run, d).total - attention.total, 0.0};
  if (m.moe)
    out[index(BlockKind::Moe)] = {moe_layer_activation_bytes(run).total - attention.total, 0.0};
  return out;
}

std::array<LayerParams, kBlockKinds> block_params(const Workload& run) {
  const TransformerConfig& m = run.model;
  std::array<LayerParams, kBlockKinds> out{};
  const Dims d = dims(run);
  // Each layer's one norm, replicated (2h, as the dense layer counts each of its two).
  const double attention = attention_params(run, d);
  const LayerParams a{attention + 2 * d.h, 0.0, attention};
  out[index(BlockKind::Attention)] = a;
  const LayerParams dense = dense_layer_params(run);
  out[index(BlockKind::Mlp)] = {dense.total - a.total, 0.0, dense.linears - a.linears};
  if (m.moe) {
    const LayerParams moe = moe_layer_params(run);
    out[index(BlockKind::Moe)] = {moe.total - a.total, moe.experts, moe.linears - a.linears};
  }
  if (m.mamba) out[index(BlockKind::Mamba)] = mamba_block_params(run);
  return out;
}

}  // namespace detail

double layer_params(const Workload& run) {
  return detail::dense_layer_params(run).total;
}

double total_params(const Workload& run) {
  const TransformerConfig& m = run.model;
  const detail::Dims d = detail::dims(run);
  const double embedding = d.V * d.h + (m.learned_positions ? d.keys * d.h : 0.0);
  const double outside = embedding + (m.tie_embeddings ? 0.0 : d.V * d.h) + 2 * d.h;
  const Layout none;  // no parallelism: every parameter once
  const Workload whole{m, run.job, none};
  const double layers = static_cast<double>(m.layers);
  if (m.hybrid()) {
    const auto counts = block_counts(m.hybrid_pattern, 0, m.layers);
    const auto params = detail::block_params(whole);
    double total = outside;
    for (std::size_t k = 0; k < kBlockKinds; ++k)
      total += static_cast<double>(counts[k]) * params[k].total;
    return total;
  }
  if (!m.moe) return layers * detail::dense_layer_params(whole).total + outside;
  const double dense = static_cast<double>(m.moe->dense_layers);
  return dense * detail::dense_layer_params(whole).total +
         (layers - dense) * detail::moe_layer_params(whole).total + outside;
}

double optimizer_step_bytes_per_param(const Job& job) {
  const double grad = job.grad_bytes_per_param;
  const double state = job.optimizer_bytes_per_param;  // master weights and moments, fp32
  double bytes = 4;                                    // the gradient norm reads the fp32 gradients
  if (grad < 4) bytes += grad + 4;                     // 16-bit main gradients copied to fp32
  if (job.precision == Precision::FP16) bytes += 8;    // loss-scale unscale, in place
  bytes += 4 + 2 * state;                              // Adam: read g, read and write p, m, v
  bytes += 4 + static_cast<double>(job.element_bytes());  // master weights to model weights
  return bytes;
}

}  // namespace pipetab
