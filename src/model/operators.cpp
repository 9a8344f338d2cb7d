#include "pipetab/model/operators.hpp"

#include <algorithm>
#include <numeric>
#include <utility>

#include "builder.hpp"
#include "memory.hpp"
#include <fmt/format.h>

#include "pipetab/error.hpp"

namespace pipetab {

const std::vector<Operator>& PassOperators::pass(PassId id) const {
  switch (id) {
    case PassId::Forward:
      return forward;
    case PassId::InputGrad:
      return input_grad;
    case PassId::WeightGrad:
      return weight_grad;
  }
  return forward;
}

double matmul_flops(std::span<const Operator> operators) {
  return std::accumulate(operators.begin(), operators.end(), 0.0,
                         [](double sum, const Operator& op) { return sum + op.flops; });
}

double executed_flops(std::span<const Operator> operators) {
  return std::accumulate(operators.begin(), operators.end(), 0.0,
                         [](double sum, const Operator& op) { return sum + executed_flops(op); });
}

namespace {

using detail::Builder;
using detail::Dims;
using detail::dropout_add_bytes;
using detail::LayerSizes;
using detail::pass_of;
using detail::Pending;

// Forward of the attention core: QKᵀ, softmax, dropout, ·V (or FlashAttention's one kernel).
void attention_core_forward(Builder& f, const Workload& run, const Dims& d, const LayerSizes& z) {
  const TransformerConfig& m = run.model;
  if (m.attention == AttentionKind::Latent) {
    detail::mla_core_forward(f, run, d, z);
    return;
  }
  if (run.job.stack.flash_attention) {
    // Reads Q, K, V and writes the output; the s×s tiles stay on chip (Dao 2023). With
    // context parallelism the device's s/cp queries attend over all s keys.
    const detail::AttentionWidths w{d.q / d.t, d.kv / d.t, d.kv / d.t, d.q / d.t};
    detail::context_exchange_forward(f, run, d, w);
    f.attention_quantize("attention.quantize", z.T * (d.q + 2 * d.kv) / d.t);
    f.fused_attention("attention.flash", OperatorKind::FusedAttention, 4 * z.T * d.keys * d.q / d.t,
                      d.e * (z.T * 2 * d.q + d.b * d.keys * 2 * d.kv) / d.t, z.head_dim);
    detail::context_output_forward(f, run, d, w);
    return;
  }
  f.gemm("attention.scores", d.s, d.s, z.head_dim, z.heads);
  if (run.job.stack.autocast) {
    // torch.autocast runs softmax in fp32 (its fp32 op list): the scores cast up, the softmax
    // read and written in fp32, its output cast back down for ·V — three kernels, e + 4, 8 and
    // 4 + e bytes per score (llm-foundry's attn_impl "torch": torch.softmax, then .to(v.dtype)).
    f.memory("attention.softmax", (2 * d.e + 16) * z.scores, 3);
  } else {
    // Fused scale, causal mask and softmax: read and write the scores.
    f.memory("attention.softmax", 2 * d.e * z.scores);
  }
  // Dropout: read, write, and a one-byte mask.
  if (m.dropout) f.memory("attention.dropout", (2 * d.e + 1) * z.scores);
  f.gemm("attention.values", d.s, z.head_dim, d.s, z.heads);
}

// The attention's projections and core differ between multi-head attention (QKV) and latent
// attention (mla.cpp's down- and up-projections); the shell around them — the norms, the SP
// collectives, the output projection and the dropout-add — is the same. What the shell needs of
// the inside: the linear its collectives pair with, and the output projection's input width.
struct AttentionInside {
  std::string_view first_linear, first_linear_input_grad, first_linear_weight_grad;
  double projection_in;
};

AttentionInside attention_inside(const Workload& run, const Dims& d) {
  const TransformerConfig& m = run.model;
  if (m.attention == AttentionKind::Latent) {
    return {"mla.kv_down", "mla.kv_down.input_grad", "mla.kv_down.weight_grad",
            d.a / d.t * static_cast<double>(m.latent.v_head_dim)};
  }
  return {"qkv", "qkv.input_grad", "qkv.weight_grad", d.q / d.t};
}

// `mlp_norm`: the pre-MLP norm after the residual add, as a layer of attention and an MLP has it
// (a hybrid model's attention layer has none: its MLP is a layer of its own, with its own norm).
void attention_forward(Builder& f, const Workload& run, const Dims& d, const LayerSizes& z,
                       bool mlp_norm = true) {
  const Builder::Capture graph(f, GraphModule::Attn);
  const TransformerConfig& m = run.model;
  const AttentionInside in = attention_inside(run, d);
  const bool sp = run.layout.sequence_parallel;
  f.norm("layernorm1", z.x, false);
  if (sp)
    f.collective("attention.all_gather", CollectiveKind::AllGather, d.e * z.full, Overlap::All,
                 PassId::Forward, in.first_linear);
  if (m.attention == AttentionKind::Latent) {
    detail::mla_projections_forward(f, run, d, z);
  } else {
    f.norm_linear("qkv", "qkv.quantize", z.T, z.qkv_out, d.h);
    f.qk_norms("attention.q_norm", "attention.k_norm", z.T * d.q / d.t, z.T * d.kv / d.t, false);
    f.rotary("rotary", z.T * (d.q + d.kv) / d.t);
  }
  attention_core_forward(f, run, d, z);
  f.linear("projection", "projection.quantize", z.T, d.h, in.projection_in, true);
  f.collective(sp ? "attention.reduce_scatter" : "attention.all_reduce",
               sp ? CollectiveKind::ReduceScatter : CollectiveKind::AllReduce, d.e * z.full,
               Overlap::All, PassId::Forward, "projection");
  f.memory("attention.dropout_add", dropout_add_bytes(run, d, z, false));
  if (mlp_norm) f.norm("layernorm2", z.x, false);
}

}  // namespace

namespace detail {

// Context parallelism's exchange before FlashAttention's forward, per the method (reference
// modern-runs.md §C.2; Megatron-Core docs/user-guide/features/context_parallel.md). Buffers are
// all CP ranks' parts together, per tensor-parallel rank: K and V of the whole sequence.
//  ring: CP−1 steps, each moving one rank's K,V block on while attention runs on the block
//    held; with causal load balancing (2·CP chunks) every step has an equal share of the
//    attention, so the transfers hide under (CP−1)/CP of it.
//  allgather: K and V gathered while the local block's attention (1/CP of it) runs (torchtitan
//    all-gathers the remaining shards after the first local sub-SDPA).
//  a2a: Q, K and V from sequence- to head-sharded before attention, the output back after
//    (Ulysses); nothing to hide under. An all-to-all counts one rank's buffer: its own tokens'
//    (s = the sequence / CP) heads.
void context_exchange_forward(Builder& f, const Workload& run, const Dims& d,
                              const AttentionWidths& w) {
  const double kv = d.e * d.b * d.keys * (w.k + w.v);
  switch (run.layout.cp_method) {
    case CpMethod::Ring:
      f.context_exchange("attention.cp_ring", CollectiveKind::AllGather, kv, "attention.flash",
                         (d.cp - 1) / d.cp);
      break;
    case CpMethod::AllGather:
      f.context_exchange("attention.cp_all_gather", CollectiveKind::AllGather, kv,
                         "attention.flash", 1 / d.cp);
      break;
    case CpMethod::AllToAll:
      f.context_exchange("attention.cp_all_to_all", CollectiveKind::AllToAll,
                         d.e * d.b * d.s * (w.q + w.k + w.v), "", 0.0);
      break;
  }
}

void context_output_forward(Builder& f, const Workload& run, const Dims& d,
                            const AttentionWidths& w) {
  if (run.layout.cp_method == CpMethod::AllToAll)
    f.context_exchange("attention.cp_all_to_all.output", CollectiveKind::AllToAll,
                       d.e * d.b * d.s * w.out, "", 0.0);
}

// Its backward: a2a first moves the output's gradient back to head-sharded; then the ring
// circulates K, V and their gradients dK, dV (twice the forward's bytes); allgather gathers K
// and V again and reduce-scatters dK, dV; a2a moves dQ, dK, dV back.
void context_exchange_backward(Builder& i, const Workload& run, const Dims& d,
                               const AttentionWidths& w) {
  const double kv = d.e * d.b * d.keys * (w.k + w.v);
  const std::string_view attention = "attention.flash.backward";
  switch (run.layout.cp_method) {
    case CpMethod::Ring:
      i.context_exchange("attention.cp_ring.backward", CollectiveKind::AllGather, 2 * kv, attention,
                         (d.cp - 1) / d.cp);
      break;
    case CpMethod::AllGather:
      i.context_exchange("attention.cp_all_gather.backward", CollectiveKind::AllGather, kv,
                         attention, 1 / d.cp);
      i.context_exchange("attention.cp_reduce_scatter.backward", CollectiveKind::ReduceScatter, kv,
                         "", 0.0);
      break;
    case CpMethod::AllToAll:
      i.context_exchange("attention.cp_all_to_all.output.backward", CollectiveKind::AllToAll,
                         d.e * d.b * d.s * w.out, "", 0.0);
      i.context_exchange("attention.cp_all_to_all.backward", CollectiveKind::AllToAll,
                         d.e * d.b * d.s * (w.q + w.k + w.v), "", 0.0);
      break;
  }
}

// Fused bias-dropout-add: read the projection's output and the residual, write the sum and the
// mask (without dropout: a bias-add with the residual); its backward reads the gradient and the
// mask and writes the gradient.
double dropout_add_bytes(const Workload& run, const Dims& d, const LayerSizes& z, bool backward) {
  const TransformerConfig& m = run.model;
  return ((backward ? 2 : 3) * d.e + (m.dropout ? 1 : 0)) * z.x;
}

void mlp_forward(Builder& f, const Workload& run, const Dims& d, const LayerSizes& z) {
  const Builder::Capture graph(f, GraphModule::Mlp);
  const TransformerConfig& m = run.model;
  const bool sp = run.layout.sequence_parallel;
  if (sp)
    f.collective("mlp.all_gather", CollectiveKind::AllGather, d.e * z.full, Overlap::All,
                 PassId::Forward, "fc1");
  f.norm_linear("fc1", "fc1.quantize", z.T, z.ffn_out, d.h);
  // Fused bias-GeLU reads and writes the hidden activation; SwiGLU reads two halves, writes one.
  // Eager SwiGLU runs silu and the product as two kernels: 5e bytes per element, not 3e.
  const bool eager_glu = m.gated_mlp && !run.job.stack.fused_elementwise;
  f.memory("mlp.activation",
           (eager_glu     ? 5
            : m.gated_mlp ? 3
                          : 2) *
               d.e * z.T * z.ffn,
           eager_glu ? 2 : 1);
  f.linear("fc2", "fc2.quantize", z.T, d.h, z.ffn, true);
  f.collective(sp ? "mlp.reduce_scatter" : "mlp.all_reduce",
               sp ? CollectiveKind::ReduceScatter : CollectiveKind::AllReduce, d.e * z.full,
               Overlap::All, PassId::Forward, "fc2");
}

void mlp_input_grad(Builder& i, const Workload& run, const Dims& d, const LayerSizes& z) {
  const Builder::Capture graph(i, GraphModule::Mlp);
  const TransformerConfig& m = run.model;
  const bool sp = run.layout.sequence_parallel;
  if (dense_mlp_recomputed(run)) mlp_forward(i, run, d, z);
  if (sp)
    i.collective("mlp.reduce_scatter.backward", CollectiveKind::AllGather, d.e * z.full,
                 Overlap::All, PassId::InputGrad, "fc2.input_grad");
  i.linear("fc2.input_grad", "fc2.quantize_grad", z.T, z.ffn, d.h, false);
  // GeLU backward reads its input and the gradient, writes the gradient; SwiGLU reads two
  // halves and the gradient, writes two halves.
  // Eager: the product's two gradients (6e) and silu's backward (3e), in five kernels.
  const bool eager_glu = m.gated_mlp && !run.job.stack.fused_elementwise;
  i.memory("mlp.activation.backward",
           (eager_glu     ? 9
            : m.gated_mlp ? 5
                          : 3) *
               d.e * z.T * z.ffn,
           eager_glu ? 5 : 1);
  i.linear("fc1.input_grad", "fc1.quantize_grad", z.T, d.h, z.ffn_out, false);
  // Megatron's asynchronous backward communication runs it during the weight-gradient GEMM of
  // the same linear, when that GEMM runs in the same op (B = I + W).
  i.collective(sp ? "mlp.all_gather.backward" : "mlp.all_reduce.backward",
               sp ? CollectiveKind::ReduceScatter : CollectiveKind::AllReduce, d.e * z.full,
               Overlap::Backward, PassId::WeightGrad, "fc1.weight_grad");
}

void mlp_weight_grad(Builder& w, const Workload& run, const Dims& d, const LayerSizes& z) {
  const Builder::Capture graph(w, GraphModule::Mlp);
  if (run.layout.sequence_parallel) {
    // fc1's weight gradient needs its whole input again: Megatron all-gathers it a second time,
    // during the input-gradient GEMM.
    w.collective("mlp.all_gather.regather", CollectiveKind::AllGather, d.e * z.full,
                 Overlap::Backward, PassId::InputGrad, "fc1.input_grad");
  }
  w.fp8_weight_grads(true);
  w.weight_gemm("fc1.weight_grad", "fc1.weight_grad.accumulate", d.h, z.ffn_out, z.T);
  w.weight_gemm("fc2.weight_grad", "fc2.weight_grad.accumulate", z.ffn, d.h, z.T);
}

}  // namespace detail

namespace {

void attention_input_grad(Builder& i, const Workload& run, const Dims& d, const LayerSizes& z,
                          bool mlp_norm = true) {
  const Builder::Capture graph(i, GraphModule::Attn);
  const TransformerConfig& m = run.model;
  const AttentionInside in = attention_inside(run, d);
  const bool sp = run.layout.sequence_parallel;
  if (mlp_norm) i.norm("layernorm2.backward", z.x, true);
  i.memory("attention.dropout_add.backward", dropout_add_bytes(run, d, z, true));
  if (sp)
    i.collective("attention.reduce_scatter.backward", CollectiveKind::AllGather, d.e * z.full,
                 Overlap::All, PassId::InputGrad, "projection.input_grad");
  i.linear("projection.input_grad", "projection.quantize_grad", z.T, in.projection_in, d.h, false);
  if (m.attention == AttentionKind::Latent) {
    detail::mla_projections_input_grad(i, run, d, z);
  } else {
    if (run.job.stack.flash_attention) {
      // Recomputes QKᵀ and the softmax: five products against the forward's two (Dao 2023).
      detail::context_exchange_backward(i, run, d, {d.q / d.t, d.kv / d.t, d.kv / d.t, d.q / d.t});
      i.attention_quantize("attention.quantize_grad", z.T * d.q / d.t);
      i.fused_attention("attention.flash.backward", OperatorKind::FusedAttentionBackward,
                        10 * z.T * d.keys * d.q / d.t,
                        d.e * (z.T * 4 * d.q + d.b * d.keys * 4 * d.kv) / d.t, z.head_dim);
    } else {
      i.gemm("attention.values.input_grad", d.s, d.s, z.head_dim, z.heads);  // dP = dO·Vᵀ
      i.gemm("attention.values.value_grad", d.s, z.head_dim, d.s, z.heads);  // dV = Pᵀ·dO
      if (m.dropout) i.memory("attention.dropout.backward", (2 * d.e + 1) * z.scores);
      if (run.job.stack.autocast) {
        // In fp32 (the forward's casts, backward): dy cast up (e + 4), the softmax's backward
        // reads y and dy and writes dx (12), dx cast down (4 + e).
        i.memory("attention.softmax.backward", (2 * d.e + 20) * z.scores, 3);
      } else {
        i.memory("attention.softmax.backward", 3 * d.e * z.scores);  // read y, dy; write dx
      }
      i.gemm("attention.scores.query_grad", d.s, z.head_dim, d.s, z.heads);  // dQ = dS·K
      i.gemm("attention.scores.key_grad", d.s, z.head_dim, d.s, z.heads);    // dK = dSᵀ·Q
    }
    i.rotary("rotary.backward", z.T * (d.q + d.kv) / d.t);
    i.qk_norms("attention.q_norm.backward", "attention.k_norm.backward", z.T * d.q / d.t,
               z.T * d.kv / d.t, true);
    i.linear("qkv.input_grad", "qkv.quantize_grad", z.T, d.h, z.qkv_out, false);
  }
  // Megatron's asynchronous backward communication: the input gradient's reduction runs during
  // the first linear's weight-gradient GEMM when that runs in the same op (B = I + W). (Latent
  // attention's up-projections' input gradients are partial sums over the heads' ranks, reduced
  // the same way.)
  i.collective(sp ? "attention.all_gather.backward" : "attention.all_reduce.backward",
               sp ? CollectiveKind::ReduceScatter : CollectiveKind::AllReduce, d.e * z.full,
               Overlap::Backward, PassId::WeightGrad, in.first_linear_weight_grad);
  i.norm("layernorm1.backward", z.x, true);
}

void attention_weight_grad(Builder& w, const Workload& run, const Dims& d, const LayerSizes& z) {
  const Builder::Capture graph(w, GraphModule::Attn);
  const TransformerConfig& m = run.model;
  const AttentionInside in = attention_inside(run, d);
  if (run.layout.sequence_parallel) {
    // As fc1's: the first linear's weight gradient needs the gathered input again.
    w.collective("attention.all_gather.regather", CollectiveKind::AllGather, d.e * z.full,
                 Overlap::Backward, PassId::InputGrad, in.first_linear_input_grad);
  }
  w.fp8_weight_grads(true);
  if (m.attention == AttentionKind::Latent) {
    detail::mla_projections_weight_grad(w, run, d, z);
  } else {
    w.weight_gemm("qkv.weight_grad", "qkv.weight_grad.accumulate", d.h, z.qkv_out, z.T);
  }
  w.weight_gemm("projection.weight_grad", "projection.weight_grad.accumulate", in.projection_in,
                d.h, z.T);
}

// One layer's passes: attention, then the MLP (dense, or the experts), the MLP's backward first.
using MlpPass = void (*)(Builder&, const Workload&, const Dims&, const LayerSizes&);
struct MlpPasses {
  MlpPass forward, input_grad, weight_grad;
};

void build_layer(PassOperators& out, const Workload& run, const Dims& d, const LayerSizes& z,
                 const MlpPasses& mlp, std::vector<Pending>& pending) {
  Builder f(run, out, PassId::Forward, pending);
  attention_forward(f, run, d, z);
  mlp.forward(f, run, d, z);
  f.memory("mlp.dropout_add", dropout_add_bytes(run, d, z, false));
  Builder i(run, out, PassId::InputGrad, pending);
  i.memory("mlp.dropout_add.backward", dropout_add_bytes(run, d, z, true));
  mlp.input_grad(i, run, d, z);
  attention_input_grad(i, run, d, z);
  Builder w(run, out, PassId::WeightGrad, pending);
  attention_weight_grad(w, run, d, z);
  mlp.weight_grad(w, run, d, z);
}

void embedding(PassOperators& out, const Workload& run, const Dims& d, const LayerSizes& z,
               std::vector<Pending>& pending) {
  const TransformerConfig& m = run.model;
  Builder f(run, out, PassId::Forward, pending);
  // Each rank looks up its part of the vocabulary and writes the [s, b, h] result (zeros for
  // tokens outside it); the ranks' results are summed (VocabParallelEmbedding).
  f.memory("embedding.lookup", 2 * d.e * z.T * d.h);
  if (m.learned_positions) f.memory("embedding.positions", 3 * d.e * z.T * d.h);
  f.collective(
      run.layout.sequence_parallel ? "embedding.reduce_scatter" : "embedding.all_reduce",
      run.layout.sequence_parallel ? CollectiveKind::ReduceScatter : CollectiveKind::AllReduce,
      d.e * z.full, Overlap::Never, PassId::Forward, "");
  if (m.dropout) f.memory("embedding.dropout", (2 * d.e + 1) * z.x);
  Builder i(run, out, PassId::InputGrad, pending);
  if (m.dropout) i.memory("embedding.dropout.backward", (2 * d.e + 1) * z.x);
  if (run.layout.sequence_parallel)
    i.collective("embedding.reduce_scatter.backward", CollectiveKind::AllGather, d.e * z.full,
                 Overlap::Never, PassId::InputGrad, "");
  // The weight gradient scatters the output gradient into the rows of the tokens, accumulated
  // in the main gradient (read the gradient, read and write the rows).
  Builder w(run, out, PassId::WeightGrad, pending);
  w.memory("embedding.weight_grad", z.T * d.h * (d.e + 2 * run.job.grad_bytes_per_param));
}

void output(PassOperators& out, const Workload& run, const Dims& d, const LayerSizes& z,
            std::vector<Pending>& pending) {
  const bool sp = run.layout.sequence_parallel;
  const double logits = z.T * d.V / d.t;  // fp32 logits' elements per device
  Builder f(run, out, PassId::Forward, pending);
  f.norm("final_layernorm", z.x, false);
  if (sp)
    f.collective("logits.all_gather", CollectiveKind::AllGather, d.e * z.full, Overlap::All,
                 PassId::Forward, "logits");
  f.gemm("logits", z.T, d.V / d.t, d.h);
  // Vocabulary-parallel cross entropy (Megatron): the logits read and cast to fp32, the max,
  // the exponentials and their sum, the normalized softmax kept for backward: about four fp32
  // passes over the logits, and three all-reduces of s·b fp32 values (max, predicted logit, sum).
  f.memory("cross_entropy", (d.e + 16) * logits, 4);
  f.collective("cross_entropy.all_reduce", CollectiveKind::AllReduce, 3 * 4 * z.T, Overlap::Never,
               PassId::Forward, "");
  Builder i(run, out, PassId::InputGrad, pending);
  i.memory("cross_entropy.backward", (4 + d.e) * logits);  // read the softmax, write the gradient
  i.gemm("logits.input_grad", z.T, d.h, d.V / d.t);
  i.collective(sp ? "logits.all_gather.backward" : "logits.all_reduce.backward",
               sp ? CollectiveKind::ReduceScatter : CollectiveKind::AllReduce, d.e * z.full,
               Overlap::Backward, PassId::WeightGrad, "logits.weight_grad");
  i.norm("final_layernorm.backward", z.x, true);
  Builder w(run, out, PassId::WeightGrad, pending);
  w.weight_gemm("logits.weight_grad", "logits.weight_grad.accumulate", d.V / d.t, d.h, z.T);
}

// Full recomputation runs the whole forward again at the start of the input-gradient pass;
// selective recomputation the attention core (Korthikanti et al. §5). Copies keep their indices,
// so a recomputed collective's partner GEMM is the recomputed one. torchtitan's per-op policy
// recomputes the forward's element-wise kernels and every other matrix multiply in its order
// (wq, wk, wv, wo, w1, w3, w2 gated; wq, wk, wv, wo, w1, w2 not: the second, fourth and sixth),
// never attention nor the collectives; every-other-layer recomputation is a full one for half
// the layers, so each layer carries half of it.
// `attention`: whether the layer has attention (a hybrid model's M, - and E layers do not, and
// selective recomputation leaves them alone).
void recompute(PassOperators& layer, const Workload& run, const Dims& d, const LayerSizes& z,
               bool experts, std::vector<Pending>& pending, bool attention = true) {
  const TransformerConfig& m = run.model;
  if (run.job.recompute == Recompute::None) return;
  if (run.job.recompute == Recompute::Selective && !attention) return;
  std::vector<Operator> head;
  if (run.job.recompute == Recompute::Lgd) {
    // PipeOffload's LGD: the norms, the activation and the dropouts run again, taken as the
    // forward's element-wise kernels.
    for (const Operator& op : layer.forward) {
      if (op.kind == OperatorKind::Memory) head.push_back(op);
    }
    for (auto& p : pending) {
      if (p.pass == PassId::InputGrad) p.op += head.size();
    }
  } else if (run.job.recompute == Recompute::SelectiveOp) {
    for (const Operator& op : layer.forward) {
      if (op.kind == OperatorKind::Memory) head.push_back(op);
    }
    // (With latent attention, the key-value up-projection's product stands in for K's.)
    head.push_back(
        m.attention == AttentionKind::Latent
            ? gemm_operator(
                  "mla.kv_up.recompute",
                  {z.T, d.a / d.t * d.head_dim(), static_cast<double>(m.latent.kv_lora_rank)}, d.e)
            : gemm_operator("qkv.recompute_key", {z.T, d.kv / d.t, d.h}, d.e));
    head.push_back(gemm_operator("projection.recompute", {z.T, d.h, d.q / d.t}, d.e));
    // The MLP's recomputed product of a dense layer; a mixture-of-experts layer's expert GEMMs
    // are kept (torchtitan's policy saves its grouped GEMMs' outputs, _op_sac_save_list).
    if (!experts) {
      head.push_back(m.gated_mlp ? gemm_operator("fc1.recompute_up", {z.T, z.ffn, d.h}, d.e)
                                 : gemm_operator("fc2.recompute", {z.T, d.h, z.ffn}, d.e));
    }
    for (auto it = head.end() - (experts ? 2 : 3); it != head.end(); ++it)
      it->fp8 = run.job.precision == Precision::FP8;
    for (auto& p : pending) {
      if (p.pass == PassId::InputGrad) p.op += head.size();
    }
  } else if (run.job.recompute == Recompute::Full ||
             run.job.recompute == Recompute::EveryOtherLayer) {
    head = layer.forward;
    if (run.job.recompute == Recompute::EveryOtherLayer) {
      for (Operator& op : head) {
        op.flops *= 0.5;
        op.bytes *= 0.5;
        op.collective_bytes *= 0.5;
        op.host_sync = false;  // half the layers wait again: not a whole wait per layer
      }
    }
    for (auto& p : pending) {
      if (p.pass == PassId::InputGrad) p.op += head.size();
    }
    std::vector<Pending> copies;
    for (const auto& p : pending) {
      if (p.pass == PassId::Forward)
        copies.push_back({PassId::InputGrad, p.op, PassId::InputGrad, p.hidden_name});
    }
    pending.insert(pending.end(), copies.begin(), copies.end());
  } else {
    PassOperators core;
    std::vector<Pending> core_pending;  // a CP exchange hides under the recomputed attention
    Builder b(run, core, PassId::Forward, core_pending);
    attention_core_forward(b, run, d, z);
    head = std::move(core.forward);
    for (auto& p : pending) {
      if (p.pass == PassId::InputGrad) p.op += head.size();
    }
    for (const auto& p : core_pending)
      pending.push_back({PassId::InputGrad, p.op, PassId::InputGrad, p.hidden_name});
  }
  layer.input_grad.insert(layer.input_grad.begin(), head.begin(), head.end());
}

// Resolves every collective's partner GEMM by name (the first with that name in its pass; a
// recomputed copy's partner is looked up among the operators before the copy's end).
void resolve(PassOperators& ops, const std::vector<Pending>& pending) {
  for (const auto& p : pending) {
    auto& list = pass_of(ops, p.pass);
    const auto& target = ops.pass(p.hidden_pass);
    const auto it = std::find_if(target.begin(), target.end(),
                                 [&](const Operator& op) { return op.name == p.hidden_name; });
    if (it == target.end()) continue;  // no such GEMM in this model (cannot happen when valid)
    list[p.op].hidden_pass = p.hidden_pass;
    list[p.op].hidden_index = static_cast<std::int32_t>(it - target.begin());
  }
}

// A hybrid model's layers, one of each kind it has (docs/simulation.md, "Hybrid models"):
// Megatron-Core's MambaLayer, and TransformerLayers with attention alone, an MLP alone, or the
// experts alone, each with its own pre-norm and residual add.
void build_blocks(ModelOperators& out, const Workload& run, const Dims& d, const LayerSizes& z) {
  const TransformerConfig& m = run.model;
  using Pass = void (*)(Builder&, const Workload&, const Dims&, const LayerSizes&);
  const auto block = [&](BlockKind kind, const Workload& r, const Dims& bd, const LayerSizes& bz,
                         Pass forward, Pass input_grad, Pass weight_grad, bool experts,
                         bool attention) {
    PassOperators& ops = out.blocks[index(kind)];
    std::vector<Pending> pending;
    Builder f(r, ops, PassId::Forward, pending);
    forward(f, r, bd, bz);
    Builder i(r, ops, PassId::InputGrad, pending);
    input_grad(i, r, bd, bz);
    Builder w(r, ops, PassId::WeightGrad, pending);
    weight_grad(w, r, bd, bz);
    recompute(ops, r, bd, bz, experts, pending, attention);
    resolve(ops, pending);
  };
  const auto counts = block_counts(m.hybrid_pattern, 0, m.layers);
  const auto has = [&](BlockKind k) { return counts[index(k)] > 0; };
  if (has(BlockKind::Mamba) && m.mamba) {
    block(BlockKind::Mamba, run, d, z, detail::mamba_forward, detail::mamba_input_grad,
          detail::mamba_weight_grad, false, false);
  }
  if (has(BlockKind::Attention)) {
    block(
        BlockKind::Attention, run, d, z,
        [](Builder& f, const Workload& r, const Dims& bd, const LayerSizes& bz) {
          attention_forward(f, r, bd, bz, false);
        },
        [](Builder& i, const Workload& r, const Dims& bd, const LayerSizes& bz) {
          attention_input_grad(i, r, bd, bz, false);
        },
        attention_weight_grad, false, true);
  }
  // The MLP layers and the experts: the pre-MLP norm, the MLP, the residual add.
  const auto mlp_block = [&](BlockKind kind, const Workload& r, const Dims& bd,
                             const LayerSizes& bz, const MlpPasses& mlp, bool experts) {
    PassOperators& ops = out.blocks[index(kind)];
    std::vector<Pending> pending;
    Builder f(r, ops, PassId::Forward, pending);
    f.norm("layernorm2", bz.x, false);
    mlp.forward(f, r, bd, bz);
    f.memory("mlp.dropout_add", dropout_add_bytes(r, bd, bz, false));
    Builder i(r, ops, PassId::InputGrad, pending);
    i.memory("mlp.dropout_add.backward", dropout_add_bytes(r, bd, bz, true));
    mlp.input_grad(i, r, bd, bz);
    i.norm("layernorm2.backward", bz.x, true);
    Builder w(r, ops, PassId::WeightGrad, pending);
    mlp.weight_grad(w, r, bd, bz);
    recompute(ops, r, bd, bz, experts, pending, false);
    resolve(ops, pending);
  };
  if (has(BlockKind::Mlp)) {
    const TransformerConfig dense = detail::dense_layer_model(m);
    const Workload dense_run{dense, run.job, run.layout};
    const Dims dense_d = detail::dims(dense_run);
    mlp_block(BlockKind::Mlp, dense_run, dense_d, sizes(dense_run, dense_d),
              {detail::mlp_forward, detail::mlp_input_grad, detail::mlp_weight_grad}, false);
  }
  if (has(BlockKind::Moe) && m.moe) {
    mlp_block(BlockKind::Moe, run, d, z,
              {detail::moe_forward, detail::moe_input_grad, detail::moe_weight_grad}, true);
  }
}

}  // namespace

Operator gemm_operator(std::string_view name, const GemmShape& shape, double element_bytes) {
  Operator op;
  op.name = name;
  op.kind = OperatorKind::Gemm;
  op.gemm = shape;
  op.flops = 2 * shape.m * shape.n * shape.k * shape.batch;
  op.bytes =
      element_bytes * (shape.m * shape.k + shape.k * shape.n + shape.m * shape.n) * shape.batch;
  return op;
}

ModelOperators model_operators(const Workload& run) {
  const TransformerConfig& m = run.model;
  const Dims d = detail::dims(run);
  const LayerSizes z = sizes(run, d);
  ModelOperators out;
  std::vector<Pending> pending;
  if (m.hybrid()) {
    build_blocks(out, run, d, z);
  } else {
    // A mixture of experts' dense layers have their own MLP width.
    const TransformerConfig dense = detail::dense_layer_model(m);
    const Workload dense_run{dense, run.job, run.layout};
    const Dims dense_d = detail::dims(dense_run);
    const LayerSizes dense_z = sizes(dense_run, dense_d);
    build_layer(out.layer, dense_run, dense_d, dense_z,
                {detail::mlp_forward, detail::mlp_input_grad, detail::mlp_weight_grad}, pending);
    recompute(out.layer, dense_run, dense_d, dense_z, false, pending);
    resolve(out.layer, pending);
    if (m.moe) {
      pending.clear();
      build_layer(out.moe_layer, run, d, z,
                  {detail::moe_forward, detail::moe_input_grad, detail::moe_weight_grad}, pending);
      recompute(out.moe_layer, run, d, z, true, pending);
      resolve(out.moe_layer, pending);
    }
  }

  pending.clear();
  embedding(out.embedding, run, d, z, pending);
  resolve(out.embedding, pending);
  pending.clear();
  output(out.output, run, d, z, pending);
  resolve(out.output, pending);
  if (m.mtp_layers > 0) {
    // An MTP module looks up the next tokens' embeddings as the first stage does, then runs its
    // own operators (mtp.cpp).
    pending.clear();
    embedding(out.mtp, run, d, z, pending);
    Builder f(run, out.mtp, PassId::Forward, pending);
    detail::mtp_forward(f, run, d, z);
    Builder i(run, out.mtp, PassId::InputGrad, pending);
    detail::mtp_input_grad(i, run, d, z);
    Builder w(run, out.mtp, PassId::WeightGrad, pending);
    detail::mtp_weight_grad(w, d, z);
    resolve(out.mtp, pending);
  }
  // Only the modules the stack's per-layer CUDA graphs capture keep their tag (cost::host_calls);
  // a full-iteration graph (cuda_graphs) leaves the host out of every pass anyway.
  const std::uint8_t captured = run.job.stack.cuda_graphs ? 0 : run.job.stack.graph_modules;
  const auto keep_captured = [captured](PassOperators& p) {
    for (auto* list : {&p.forward, &p.input_grad, &p.weight_grad})
      for (Operator& op : *list)
        op.graph_module &= captured;
  };
  for (auto* p : {&out.layer, &out.moe_layer, &out.embedding, &out.output, &out.mtp})
    keep_captured(*p);
  for (auto& p : out.blocks)
    keep_captured(p);
  return out;
}

}  // namespace pipetab
