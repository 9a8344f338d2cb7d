#include "pipetab/model/workload.hpp"

#include <algorithm>
#include <numeric>

#include <fmt/format.h>

#include "pipetab/error.hpp"

namespace pipetab {
namespace {

struct Dims {
  double s, b, h, a, kv, ffn, V, t;
  double sbh() const { return s * b * h; }
};

Dims dims(const TransformerConfig& m) {
  const double heads = static_cast<double>(m.heads);
  const double kv_heads = static_cast<double>(m.kv_heads > 0 ? m.kv_heads : m.heads);
  const double h = static_cast<double>(m.hidden);
  return {static_cast<double>(m.seq_len),
          static_cast<double>(m.micro_batch),
          h,
          heads,
          h * kv_heads / heads,  // width of K and V
          static_cast<double>(m.ffn_hidden > 0 ? m.ffn_hidden : 4 * m.hidden),
          static_cast<double>(m.vocab),
          static_cast<double>(m.tensor_parallel)};
}

// Weights of the matrix multiplies of one layer (all devices): Q and the output projection
// h×h each, K and V h×kv each, the MLP two (gated: three) h×ffn matrices.
double matmul_params(const Dims& d, bool gated) {
  return 2 * d.h * d.h + 2 * d.h * d.kv + (gated ? 3 : 2) * d.h * d.ffn;
}

// Activation bytes one layer holds for one microbatch, per device (Korthikanti et al. §4,
// reference schedules.md §12; 16-bit activations, 1-byte dropout masks). For a GPT layer
// without parallelism: 34·sbh + 5·a·s²·b. The generalization to GQA and other FFN widths keeps
// Korthikanti's split: 10·sbh that tensor parallelism does not divide (LayerNorm inputs, the
// QKV and fc1 inputs, two dropout masks) and the rest that it does. `attention` is the part of
// the attention core (softmax and its dropout, or FlashAttention's log-sum-exp).
struct LayerActivation {
  double total = 0.0;
  double attention = 0.0;
};

LayerActivation layer_activation_bytes(const TransformerConfig& m, const Dims& d) {
  const double sbh = d.sbh();
  if (m.recompute == Recompute::Full)
    return {2 * sbh / (m.sequence_parallel ? d.t : 1), 0.0};  // layer input
  const double unsplit = 10 * sbh;
  // Q (2sbh), K and V (2·s·b·kv each), the output-projection input (2sbh); the MLP's
  // activation input and fc2 input (2·s·b·ffn each), a third for the gate.
  const double split = 4 * sbh + 4 * d.s * d.b * d.kv + (m.gated_mlp ? 6 : 4) * d.s * d.b * d.ffn;
  // Softmax output (2·a·s²·b), its dropout mask (a·s²·b), the dropout output (2·a·s²·b); with
  // FlashAttention only a row-wise log-sum-exp (fp32) per head; selective recomputation drops
  // the attention core altogether.
  double attention = 0.0;
  if (m.flash_attention) {
    attention = 4 * d.a * d.s * d.b;
  } else if (m.recompute != Recompute::Selective) {
    attention = 5 * d.a * d.s * d.s * d.b;
  }
  if (m.sequence_parallel) return {(unsplit + split + attention) / d.t, attention / d.t};
  return {unsplit + (split + attention) / d.t, attention / d.t};
}

void require_positive(std::int64_t value, const char* what) {
  if (value < 1) throw ParamError(fmt::format("model: {} = {} must be at least 1", what, value));
}

}  // namespace

double layer_params(const TransformerConfig& m) {
  const Dims d = dims(m);
  // Tensor parallelism splits the matrices; the two LayerNorms (4h) are replicated on every
  // device (Megatron-LM, Shoeybi et al. 2019).
  return matmul_params(d, m.gated_mlp) / d.t + 4 * d.h;
}

double total_params(const TransformerConfig& m) {
  const Dims d = dims(m);
  const double embedding = d.V * d.h + (m.learned_positions ? d.s * d.h : 0.0);
  return static_cast<double>(m.layers) * (matmul_params(d, m.gated_mlp) + 4 * d.h) + embedding +
         d.V * d.h + 2 * d.h;
}

std::vector<std::int64_t> partition_layers(const TransformerConfig& m,
                                           std::span<const std::int32_t> units) {
  const auto n = units.size();
  const std::int64_t extra = m.balance_embedding ? 2 : 0;
  const std::int64_t slots = m.layers + extra;
  const double total_units = std::accumulate(units.begin(), units.end(), 0.0);
  std::vector<std::int64_t> layers(n);
  std::vector<std::pair<double, std::size_t>> remainder(n);
  std::int64_t given = 0;
  for (std::size_t s = 0; s < n; ++s) {
    const double ideal = static_cast<double>(slots) * units[s] / total_units;
    layers[s] = static_cast<std::int64_t>(ideal);
    given += layers[s];
    remainder[s] = {ideal - static_cast<double>(layers[s]), s};
  }
  // Largest remainders first; ties to the earlier stage, so the split is deterministic.
  std::stable_sort(remainder.begin(), remainder.end(),
                   [](const auto& x, const auto& y) { return x.first > y.first; });
  for (std::size_t k = 0; given < slots; ++k, ++given)
    ++layers[remainder[k % n].second];
  if (m.balance_embedding) {
    --layers.front();
    --layers.back();
  }
  for (std::size_t s = 0; s < n; ++s) {
    const bool carries_embedding_or_output = m.balance_embedding && (s == 0 || s + 1 == n);
    if (layers[s] < (carries_embedding_or_output ? 0 : 1)) {
      throw ParamError(fmt::format(
          "model: {} layers cannot fill {} stages{}: stage {} would hold {} layers", m.layers, n,
          m.balance_embedding ? " (embedding and output balanced)" : "", s, layers[s]));
    }
  }
  return layers;
}

std::vector<StageWork> stage_work(const ModelConfig& model, std::span<const std::int32_t> units,
                                  std::int32_t devices) {
  const auto n = units.size();
  std::vector<StageWork> work(n);
  const double total_units = std::accumulate(units.begin(), units.end(), 0.0);

  if (const auto* e = std::get_if<ExplicitWorkload>(&model.spec)) {
    for (std::size_t s = 0; s < n; ++s) {
      const double share = units[s] * static_cast<double>(devices) / total_units;
      auto& w = work[s];
      w.embedding = s == 0;
      w.output = s + 1 == n;
      w.forward_s = e->forward_s * share;
      w.input_grad_s = e->input_grad_s * share;
      w.weight_grad_s = e->weight_grad_s * share;
      w.message_bytes = e->message_bytes;
      w.activation_bytes = e->activation_bytes * share;
      w.activation_kept_for_weight_grad = e->activation_kept_for_weight_grad * share;
      w.weight_bytes = e->weight_bytes * share;
      w.grad_bytes = e->grad_bytes * share;
      w.optimizer_bytes = e->optimizer_bytes * share;
    }
    return work;
  }

  const auto& m = std::get<TransformerConfig>(model.spec);
  require_positive(m.layers, "layers");
  require_positive(m.hidden, "hidden");
  require_positive(m.heads, "heads");
  require_positive(m.seq_len, "seq_len");
  require_positive(m.micro_batch, "micro_batch");
  require_positive(m.vocab, "vocab");
  require_positive(m.tensor_parallel, "tensor_parallel");
  const Dims d = dims(m);
  const auto layers = partition_layers(m, units);
  const double bs = d.b * d.s;

  // Per layer (reference schedules.md §13): forward 2·bs·(matmul weights) + 4·b·s²·h for the
  // attention scores and values; the input-gradient pass repeats the matmuls and doubles the
  // attention term (8·b·s²·h; FlashAttention recomputes QKᵀ: 10); the weight-gradient pass
  // repeats the matmuls once more, so I + W = 2F. Recomputation adds forward work to I.
  const double matmul = 2 * bs * matmul_params(d, m.gated_mlp);
  const double scores = 4 * bs * d.s * d.h;
  const double layer_forward = (matmul + scores) / d.t;
  double layer_input_grad = (matmul + (m.flash_attention ? 2.5 : 2.0) * scores) / d.t;
  const double layer_weight_grad = matmul / d.t;
  if (m.recompute == Recompute::Full) layer_input_grad += layer_forward;
  if (m.recompute == Recompute::Selective) layer_input_grad += scores / d.t;

  const auto [layer_act, layer_attention] = layer_activation_bytes(m, d);
  // After I, W still needs the inputs of the weight matrices: the zero-bubble runtime keeps
  // 32·sbh of a GPT layer's 34·sbh outside the attention core (reference §7 cost model), so I
  // frees the attention core and 2/34 of the rest; with full recomputation W needs all of the
  // layer's input.
  const double layer_kept =
      m.recompute == Recompute::Full ? layer_act : (layer_act - layer_attention) * 32.0 / 34.0;
  const double message =
      static_cast<double>(m.dtype_bytes) * d.sbh() / d.t;  // Megatron scatter/gather

  const double act_scale = m.sequence_parallel ? d.t : 1.0;
  for (std::size_t s = 0; s < n; ++s) {
    auto& w = work[s];
    const double l = static_cast<double>(layers[s]);
    w.layers = layers[s];
    w.embedding = s == 0;
    w.output = s + 1 == n;
    w.forward_flops = l * layer_forward;
    w.input_grad_flops = l * layer_input_grad;
    w.weight_grad_flops = l * layer_weight_grad;
    w.activation_bytes = l * layer_act;
    w.activation_kept_for_weight_grad = l * layer_kept;
    w.params = l * layer_params(m);
    w.message_bytes = w.output ? 0.0 : message;
    if (w.embedding) {
      // Token ids (int64) and the embedding-dropout mask (Korthikanti, first stage).
      w.activation_bytes += 8 * bs + d.sbh() / act_scale;
      // The word embedding is split over the vocabulary; the position table is replicated.
      w.params += d.V * d.h / d.t + (m.learned_positions ? d.s * d.h : 0.0);
    }
    if (w.output) {
      // Logits 2·b·s·h·V FLOPs each way; the output layer's input and the fp32 logits for the
      // loss, 4·s·b·(h + V) bytes (Korthikanti's output-layer term).
      const double logits = 2 * bs * d.h * d.V / d.t;
      w.forward_flops += logits;
      w.input_grad_flops += logits;
      w.weight_grad_flops += logits;
      w.activation_bytes += 4 * bs * (d.h + d.V) / d.t;
      // The output projection (an untied copy, split over the vocabulary) and the final
      // LayerNorm (replicated).
      w.params += d.V * d.h / d.t + 2 * d.h;
    }
    w.weight_bytes = w.params * static_cast<double>(m.dtype_bytes);
    w.grad_bytes = w.params * m.grad_bytes_per_param;
    w.optimizer_bytes = w.params * m.optimizer_bytes_per_param;
  }
  return work;
}

}  // namespace pipetab
