// A multi-token-prediction module's own operators (DeepSeek-V3 Technical Report §2.2, eq. 21–25;
// Megatron-Core's MultiTokenPredictionLayer): the next token's embedding and the previous
// depth's hidden state RMSNorm'd (enorm, hnorm), concatenated and projected from 2h to h by
// eh_proj, a column-parallel linear whose output Megatron gathers along the hidden dimension
// (gather_output = False, then all_gather_last_dim_from_tensor_parallel_region) and scatters
// back along the sequence with sequence parallelism; after the module's transformer layer, its
// final norm. operators.cpp adds the embedding lookup in front; the transformer layer and the
// shared output layer are the model's own (workload.cpp counts them).
#include "builder.hpp"
#include "memory.hpp"

namespace pipetab::detail {

void mtp_forward(Builder& f, const Workload& run, const Dims& d, const LayerSizes& z) {
  f.norm("mtp.enorm", z.x, false);
  f.norm("mtp.hnorm", z.x, false);
  f.memory("mtp.concat", 2 * 2 * d.e * z.x);  // read both halves, write the 2h-wide input
  if (run.layout.sequence_parallel)
    f.collective("mtp.eh_proj.all_gather", CollectiveKind::AllGather, 2 * d.e * z.full,
                 Overlap::All, PassId::Forward, "mtp.eh_proj");
  // In 16 bits: the FP8 recipes' linears are the transformer layers' (Builder::linear); whether
  // one quantises eh_proj is not modelled (its FLOPs are 4·h² per token, a sixth of a dense
  // layer's attention projections at DeepSeek-V3's widths).
  f.gemm("mtp.eh_proj", z.T, d.h / d.t, 2 * d.h);
  f.collective("mtp.eh_proj.gather_output", CollectiveKind::AllGather, d.e * z.full, Overlap::Never,
               PassId::Forward, "");
  f.norm("mtp.final_layernorm", z.x, false);  // after the module's transformer layer
}

void mtp_input_grad(Builder& i, const Workload& run, const Dims& d, const LayerSizes& z) {
  i.norm("mtp.final_layernorm.backward", z.x, true);
  // The sequence scatter's backward gathers the gradient along the sequence; the hidden-dimension
  // gather's backward only splits it.
  if (run.layout.sequence_parallel)
    i.collective("mtp.eh_proj.gather_output.backward", CollectiveKind::AllGather, d.e * z.full,
                 Overlap::Never, PassId::InputGrad, "");
  i.gemm("mtp.eh_proj.input_grad", z.T, 2 * d.h, d.h / d.t);
  if (run.layout.sequence_parallel) {
    i.collective("mtp.eh_proj.all_gather.regather", CollectiveKind::AllGather, 2 * d.e * z.full,
                 Overlap::Backward, PassId::InputGrad, "mtp.eh_proj.input_grad");
  }
  i.collective(
      run.layout.sequence_parallel ? "mtp.eh_proj.reduce_scatter" : "mtp.eh_proj.all_reduce",
      run.layout.sequence_parallel ? CollectiveKind::ReduceScatter : CollectiveKind::AllReduce,
      2 * d.e * z.full, Overlap::Backward, PassId::WeightGrad, "mtp.eh_proj.weight_grad");
  i.memory("mtp.concat.backward", 2 * 2 * d.e * z.x);
  i.norm("mtp.hnorm.backward", z.x, true);
  i.norm("mtp.enorm.backward", z.x, true);
}

void mtp_weight_grad(Builder& w, const Dims& d, const LayerSizes& z) {
  w.weight_gemm("mtp.eh_proj.weight_grad", "mtp.eh_proj.weight_grad.accumulate", 2 * d.h, d.h / d.t,
                z.T);
}

double mtp_params(const Workload& run) {
  const Dims d = dims(run);
  return 2 * d.h * d.h / d.t + 3 * d.h;  // eh_proj split over TP; enorm, hnorm, final norm
}

double mtp_activation_bytes(const Workload& run) {
  const Dims d = dims(run);
  const LayerSizes z = sizes(run, d);
  // The norms' inputs (enorm, hnorm, the final norm), eh_proj's 2h-wide input (kept at 1/t with
  // sequence parallelism and gathered again for the weight gradient), the shifted token ids.
  return 5 * d.e * z.x + 8 * z.T;
}

}  // namespace pipetab::detail
