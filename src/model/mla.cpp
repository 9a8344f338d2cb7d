// The inside of a layer's attention with multi-head latent attention (DeepSeek-V3 §2.1.1;
// Megatron-Core's MLASelfAttention); operators.cpp builds the shell around it (the norms, the SP
// collectives, the output projection). The input is down-projected to the query and key-value
// latents (whole on every tensor-parallel rank), RMSNorm'd, and up-projected to the heads'
// queries, keys and values (split by heads); fused attention runs query-key heads of head_dim +
// qk_rope_head_dim and value heads of v_head_dim. The rotary part of the keys is one head shared
// by all (it comes out of the key-value down-projection), applied inside the fused kernels (not
// counted).
#include "builder.hpp"
#include "memory.hpp"

namespace pipetab::detail {
namespace {

struct MlaSizes {
  double heads;   // per TP rank
  double qk;      // query-key head width: head_dim + qk_rope_head_dim
  double v;       // value head width
  double q_lora;  // 0: the queries are not compressed
  double kv_lora;
  double rope;
};

MlaSizes mla_sizes(const Workload& run, const Dims& d) {
  const TransformerConfig& m = run.model;
  const auto& l = m.latent;
  MlaSizes s;
  s.heads = d.a / d.t;
  s.rope = static_cast<double>(l.qk_rope_head_dim);
  s.qk = d.head_dim() + s.rope;
  s.v = static_cast<double>(l.v_head_dim);
  s.q_lora = static_cast<double>(l.q_lora_rank);
  s.kv_lora = static_cast<double>(l.kv_lora_rank);
  return s;
}

// With context parallelism the exchanges move the heads' Q and K (width qk) and V (v) that the
// up-projections made, as Transformer Engine's attention takes them (Megatron-Core's MLA calls
// it on them), not the latents.
AttentionWidths context_widths(const MlaSizes& s) {
  return {s.heads * s.qk, s.heads * s.qk, s.heads * s.v, s.heads * s.v};
}

}  // namespace

void mla_core_forward(Builder& f, const Workload& run, const Dims& d, const LayerSizes& z) {
  const MlaSizes s = mla_sizes(run, d);
  context_exchange_forward(f, run, d, context_widths(s));
  f.attention_quantize("attention.quantize", z.T * s.heads * (2 * s.qk + s.v));
  // QKᵀ over head width qk and ·V over v: 2·T·keys·heads·(qk + v) FLOPs; reads Q, K, V, writes
  // the output.
  f.fused_attention("attention.flash", OperatorKind::FusedAttention,
                    2 * z.T * d.keys * s.heads * (s.qk + s.v),
                    d.e * (z.T * s.heads * (s.qk + s.v) + d.b * d.keys * s.heads * (s.qk + s.v)),
                    (s.qk + s.v) / 2);
  context_output_forward(f, run, d, context_widths(s));
}

void mla_projections_forward(Builder& f, const Workload& run, const Dims& d, const LayerSizes& z) {
  const MlaSizes s = mla_sizes(run, d);
  if (s.q_lora > 0) {
    f.linear("mla.q_down", "mla.q_down.quantize", z.T, s.q_lora, d.h, true);
    f.norm("mla.q_norm", z.T * s.q_lora, false);
    f.linear("mla.q_up", "mla.q_up.quantize", z.T, s.heads * s.qk, s.q_lora, true);
  } else {
    f.linear("mla.q", "mla.q.quantize", z.T, s.heads * s.qk, d.h, true);
  }
  f.linear("mla.kv_down", "mla.kv_down.quantize", z.T, s.kv_lora + s.rope, d.h, true);
  f.norm("mla.kv_norm", z.T * s.kv_lora, false);
  f.linear("mla.kv_up", "mla.kv_up.quantize", z.T, s.heads * (d.head_dim() + s.v), s.kv_lora, true);
}

void mla_projections_input_grad(Builder& i, const Workload& run, const Dims& d,
                                const LayerSizes& z) {
  const MlaSizes s = mla_sizes(run, d);
  if (run.job.mla_recompute_up_proj) {
    // Megatron-Core's mla_up_proj: the freed Q, K and V made again when the backward reaches the
    // attention's output, the up-projections rerun (quantised again in FP8: the checkpoint
    // reruns them under the forward's recipe) and RoPE applied in the fused kernels (not
    // counted, as in the forward).
    if (s.q_lora > 0) {
      i.linear("mla.q_up.recompute", "mla.q_up.recompute.quantize", z.T, s.heads * s.qk, s.q_lora,
               true);
    } else {
      i.linear("mla.q.recompute", "mla.q.recompute.quantize", z.T, s.heads * s.qk, d.h, true);
    }
    i.linear("mla.kv_up.recompute", "mla.kv_up.recompute.quantize", z.T,
             s.heads * (d.head_dim() + s.v), s.kv_lora, true);
  }
  context_exchange_backward(i, run, d, context_widths(s));
  i.attention_quantize("attention.quantize_grad", z.T * s.heads * s.v);
  // Recomputes QKᵀ: five products against the forward's two (Dao 2023).
  i.fused_attention(
      "attention.flash.backward", OperatorKind::FusedAttentionBackward,
      5 * z.T * d.keys * s.heads * (s.qk + s.v),
      2 * d.e * (z.T * s.heads * (s.qk + s.v) + d.b * d.keys * s.heads * (s.qk + s.v)),
      (s.qk + s.v) / 2);
  i.linear("mla.kv_up.input_grad", "mla.kv_up.quantize_grad", z.T, s.kv_lora,
           s.heads * (d.head_dim() + s.v), false);
  i.norm("mla.kv_norm.backward", z.T * s.kv_lora, true);
  i.linear("mla.kv_down.input_grad", "mla.kv_down.quantize_grad", z.T, d.h, s.kv_lora + s.rope,
           false);
  if (s.q_lora > 0) {
    i.linear("mla.q_up.input_grad", "mla.q_up.quantize_grad", z.T, s.q_lora, s.heads * s.qk, false);
    i.norm("mla.q_norm.backward", z.T * s.q_lora, true);
    i.linear("mla.q_down.input_grad", "mla.q_down.quantize_grad", z.T, d.h, s.q_lora, false);
  } else {
    i.linear("mla.q.input_grad", "mla.q.quantize_grad", z.T, d.h, s.heads * s.qk, false);
  }
}

void mla_projections_weight_grad(Builder& w, const Workload& run, const Dims& d,
                                 const LayerSizes& z) {
  const MlaSizes s = mla_sizes(run, d);
  if (s.q_lora > 0) {
    w.weight_gemm("mla.q_down.weight_grad", "mla.q_down.weight_grad.accumulate", d.h, s.q_lora,
                  z.T);
    w.weight_gemm("mla.q_up.weight_grad", "mla.q_up.weight_grad.accumulate", s.q_lora,
                  s.heads * s.qk, z.T);
  } else {
    w.weight_gemm("mla.q.weight_grad", "mla.q.weight_grad.accumulate", d.h, s.heads * s.qk, z.T);
  }
  w.weight_gemm("mla.kv_down.weight_grad", "mla.kv_down.weight_grad.accumulate", d.h,
                s.kv_lora + s.rope, z.T);
  w.weight_gemm("mla.kv_up.weight_grad", "mla.kv_up.weight_grad.accumulate", s.kv_lora,
                s.heads * (d.head_dim() + s.v), z.T);
}

// Parameters of the attention per device: the down-projections and their norms whole, the
// up-projections and the output projection split by heads.
double mla_params(const Workload& run, const Dims& d) {
  const MlaSizes s = mla_sizes(run, d);
  const double q =
      s.q_lora > 0 ? d.h * s.q_lora + s.q_lora + s.q_lora * s.heads * s.qk : d.h * s.heads * s.qk;
  return q + d.h * (s.kv_lora + s.rope) + s.kv_lora + s.kv_lora * s.heads * (d.head_dim() + s.v) +
         s.heads * s.v * d.h;
}

// Activation bytes of the attention per device: the latents and their normed copies (whole), the
// heads' Q, K, V and output (split), and FlashAttention's log-sum-exp; the layer's input and
// the residual path are the dense accounting's. Under mla_recompute_up_proj the 16-bit Q, K and
// V are freed after the forward (CheckpointWithoutOutput's discard_output_and_register_recompute);
// the checkpoint keeps the normed latents, which the up-projections kept already. FP8 attention
// keeps its own quantised copies of them (TE's FusedAttnFunc), which the discard does not free.
MlaKept mla_kept(const Workload& run, const Dims& d) {
  const MlaSizes s = mla_sizes(run, d);
  const double qk = s.heads * s.qk;
  return {{s.q_lora, s.q_lora, s.kv_lora + s.rope, s.kv_lora},
          qk,
          qk,
          s.heads * s.v,
          s.heads * s.v,
          s.heads};
}

double mla_activation_bytes(const Workload& run, const Dims& d) {
  const MlaKept k = mla_kept(run, d);
  const double T = d.s * d.b;
  const double latents = k.latents[0] + k.latents[1] + k.latents[2] + k.latents[3];
  const double qkv = k.q + k.k + k.v;
  const bool qkv_freed = run.job.mla_recompute_up_proj && !run.job.fp8_attention;
  const double heads = (qkv_freed ? 0.0 : qkv) + k.out;
  return d.e * T * (latents + heads) + 4 * k.heads * T +
         fp8_attention_saved_delta(run, d.e, T * qkv, T * k.out);
}

}  // namespace pipetab::detail
