// The dimensions of a transformer as doubles, shared by the model's files. Internal.
#pragma once

#include "pipetab/model/workload.hpp"

namespace pipetab::detail {

struct Dims {
  double s;     ///< tokens of a sequence on the device: seq_len / context_parallel
  double keys;  ///< keys each query attends over: the whole sequence, seq_len
  double cp;    ///< context-parallel size
  double b;     ///< micro-batch size
  double h;     ///< hidden size
  double a;     ///< attention heads
  double q;     ///< width of Q and of the attention output (heads · head_dim; h by default)
  double kv;    ///< width of K and of V (kv_heads · head_dim)
  double ffn;   ///< MLP hidden size
  double V;     ///< vocabulary
  double t;     ///< tensor-parallel size
  double e;     ///< bytes per activation, weight and message element
  double tokens() const { return s * b; }
  double sbh() const { return s * b * h; }
  double head_dim() const { return q / a; }
};

inline Dims dims(const Workload& run) {
  const TransformerConfig& m = run.model;
  const double heads = static_cast<double>(m.heads);
  const double kv_heads = static_cast<double>(m.kv_heads > 0 ? m.kv_heads : m.heads);
  const double h = static_cast<double>(m.hidden);
  const double head_dim = m.head_dim > 0 ? static_cast<double>(m.head_dim) : h / heads;
  const double cp = static_cast<double>(run.layout.cp > 0 ? run.layout.cp : 1);
  return {static_cast<double>(run.job.seq_len) / cp,
          static_cast<double>(run.job.seq_len),
          cp,
          static_cast<double>(run.job.micro_batch),
          h,
          heads,
          heads * head_dim,
          kv_heads * head_dim,
          static_cast<double>(m.ffn_hidden > 0 ? m.ffn_hidden : 4 * m.hidden),
          static_cast<double>(m.vocab),
          static_cast<double>(run.layout.tp),
          static_cast<double>(run.job.element_bytes())};
}

// The model a mixture of experts' dense layers are: its dense_ffn_hidden as the MLP width.
inline TransformerConfig dense_layer_model(const TransformerConfig& m) {
  TransformerConfig dense = m;
  if (m.moe && m.moe->dense_ffn_hidden > 0) dense.ffn_hidden = m.moe->dense_ffn_hidden;
  return dense;
}

// Parameters of one layer per device: all of them, the routed experts' (reduced over the
// expert-data-parallel ranks), and the layer linears' (FP8 training caches their FP8 copy).
struct LayerParams {
  double total = 0.0, experts = 0.0, linears = 0.0;
};

}  // namespace pipetab::detail
