#include "pipetab/model/flops.hpp"

#include <cmath>

#include "dims.hpp"

#include "pipetab/model/operators.hpp"

namespace pipetab {
namespace {

// FLOPs of one microbatch through the whole model on one tensor-parallel rank, as the GPUs execute
// them (executed_flops: a fused attention's causal half).
double microbatch_flops(const Workload& run) {
  const TransformerConfig& m = run.model;
  const ModelOperators ops = model_operators(run);
  const auto all = [](const PassOperators& p) {
    return executed_flops(p.forward) + executed_flops(p.input_grad) + executed_flops(p.weight_grad);
  };
  if (m.hybrid()) {
    const auto counts = block_counts(m.hybrid_pattern, 0, m.layers);
    double layers = 0.0;
    for (std::size_t k = 0; k < kBlockKinds; ++k)
      layers += static_cast<double>(counts[k]) * all(ops.blocks[k]);
    return layers + all(ops.embedding) + all(ops.output);
  }
  double dense = static_cast<double>(m.moe ? m.moe->dense_layers : m.layers);
  double moe = static_cast<double>(m.layers) - dense;
  // Each MTP module: its own operators, a transformer layer of the last layer's kind, and the
  // output layer once more (Megatron's num_floating_point_operations counts the same).
  const auto mtp = static_cast<double>(m.mtp_layers);
  (mtp_layer_is_moe(m) ? moe : dense) += mtp;
  return dense * all(ops.layer) + (moe > 0 ? moe * all(ops.moe_layer) : 0.0) + all(ops.embedding) +
         (1 + mtp) * all(ops.output) + (mtp > 0 ? mtp * all(ops.mtp) : 0.0);
}

// The closed-form count both megatron_flops and the named conventions share: `square` of
// attention's s² part, the vocabulary padded as Megatron pads it or as the model has it.
double transformer_flops(const Workload& run, double sequences, double square, bool pad_vocab);

}  // namespace

std::string_view describe(FlopCount c) {
  switch (c) {
    case FlopCount::Palm:
      return "PaLM's 6N + 12·L·h·s";
    case FlopCount::Causal:
      return "the causal 6N + 6·L·h·s";
  }
  return "";
}

IterationFlops iteration_flops(const Workload& run, double sequences, FlopCount count) {
  // Each tensor- and context-parallel rank executes its share of a microbatch. A mixture of
  // experts is counted at its balanced load (the busiest rank's extra rows are another rank's
  // fewer); the hardware also runs the capacity's padding.
  const double ranks = static_cast<double>(run.layout.tp * run.layout.cp);
  const double microbatches = sequences / static_cast<double>(run.job.micro_batch);
  Job balanced = run.job;
  balanced.moe.imbalance = 1.0;
  const double hardware =
      microbatch_flops({run.model, balanced, run.layout}) * ranks * microbatches;
  const double model =
      transformer_flops(run, sequences, count == FlopCount::Causal ? 0.5 : 1.0, false);
  return {model, hardware};
}

double narayanan_eq3_flops(const Workload& run, double global_batch) {
  const TransformerConfig& m = run.model;
  const double s = static_cast<double>(run.job.seq_len), l = static_cast<double>(m.layers),
               h = static_cast<double>(m.hidden), V = static_cast<double>(m.vocab);
  return 96 * global_batch * s * l * h * h * (1 + s / (6 * h) + V / (16 * l * h));
}

double megatron_flops(const Workload& run, double sequences, CausalCount causal) {
  return transformer_flops(run, sequences, causal == CausalCount::Half ? 0.5 : 1.0, true);
}

namespace {

double transformer_flops(const Workload& run, double sequences, double square, bool pad_vocab) {
  const TransformerConfig& m = run.model;
  const auto d = [](std::int64_t v) { return static_cast<double>(v); };
  const detail::Dims z = detail::dims(run);
  const double h = z.h, s = z.keys, heads = z.a, head_dim = z.head_dim();
  // Megatron's 6: three GEMMs per weight (forward, wgrad, dgrad) of 2 FLOPs per multiply-add.
  constexpr double kPasses = 3 * 2;
  const double gated = m.gated_mlp ? 3 : 2;  // h -> 2·ffn and ffn -> h stacked, or h -> ffn -> h
  // `square`: the s² part's share counted, half under a causal count (QKᵀ and its product with V
  // over the mask's non-zero half), all of it under the full square.
  double dense_layers = d(m.layers), moe_layers = 0;
  const double dense_ffn = detail::dims({detail::dense_layer_model(m), run.job, run.layout}).ffn;
  double expert_ffn = 0, routed = 0, shared_ffn = 0;
  if (m.moe) {
    dense_layers = d(m.moe->dense_layers);
    moe_layers = d(m.layers) - dense_layers;
    expert_ffn = d(m.moe->expert_ffn_hidden);
    routed = d(m.moe->top_k);
    shared_ffn = d(m.moe->shared_ffn());
  }
  // Each MTP module's transformer layer is of the last layer's kind.
  const double mtp = d(m.mtp_layers);
  (mtp_layer_is_moe(m) ? moe_layers : dense_layers) += mtp;
  double attention_layers = d(m.layers) + mtp;
  // A hybrid model: each kind's layers as its pattern has them, and a Mamba layer's in_proj and
  // out_proj at the mixer's width heads × head_dim, and its scan as the SSD's chunked products
  // (Dao and Gu 2024, §6: per token and head the state Bᵀx and C·state, 2·N·P each, and the
  // chunk's own output, 2·Q·P; per group C·Bᵀ, 2·Q·N), forward and backward, the backward's
  // recomputation left out: never more than the GPUs run. Megatron-LM's own count (`pad_vocab`;
  // num_floating_point_operations' mamba_layer_flops) takes the width as 2·h and the scan as
  // 7·d·N, which can exceed the SSD's products (head_dim 80: Nemotron Nano 9B v2).
  double mamba = 0;
  if (m.hybrid()) {
    const auto counts = block_counts(m.hybrid_pattern, 0, m.layers);
    const auto count = [&](BlockKind k) { return d(counts[index(k)]); };
    attention_layers = count(BlockKind::Attention);
    dense_layers = count(BlockKind::Mlp);
    moe_layers = count(BlockKind::Moe);
    if (m.mamba && count(BlockKind::Mamba) > 0) {
      const auto& x = *m.mamba;
      const double inner = pad_vocab ? 2 * h : d(x.inner());
      const double N = d(x.state), P = d(x.head_dim), Q = d(x.chunk), groups = d(x.groups);
      const double scan =
          pad_vocab ? 7 * inner * N : d(x.heads) * (4 * N * P + 2 * Q * P) + groups * 2 * Q * N;
      mamba = count(BlockKind::Mamba) *
              (2 * h * (2 * inner + 2 * groups * N + d(x.heads)) + scan + 2 * inner * h) * 3;
    }
  }

  double attention = 0;
  if (m.attention == AttentionKind::Latent) {
    const auto& l = m.latent;
    const double rope = d(l.qk_rope_head_dim), v = d(l.v_head_dim);
    const double q_lora = d(l.q_lora_rank), kv_lora = d(l.kv_lora_rank);
    const double q =
        q_lora == 0 ? h * heads * (head_dim + rope) : q_lora * (h + heads * (head_dim + rope) + 1);
    attention =
        kPasses * (q + kv_lora * (h + heads * (head_dim + v) + 1) + h * rope + heads * v * h +
                   s * heads * (head_dim + rope) * square + s * heads * v * square);
  } else {
    attention = kPasses * (h * (z.q + 2 * z.kv) + z.q * s * square * 2 + z.q * h);
  }
  const double mlp = kPasses * h *
                     (dense_ffn * gated * dense_layers +
                      (expert_ffn * routed * gated + shared_ffn * gated) * moe_layers);
  const double mtp_extra = kPasses * mtp * (3 * h + 2 * h * h);  // the norms and eh_proj
  const double multiple = 128 * z.t;
  const double vocab = pad_vocab ? std::ceil(d(m.vocab) / multiple) * multiple : d(m.vocab);
  const double logits = kPasses * h * vocab * (mtp + 1);
  return sequences * s * (mlp + attention * attention_layers + mamba + mtp_extra + logits);
}

}  // namespace

}  // namespace pipetab
