#include "pipetab/model/flops.hpp"

#include "pipetab/model/operators.hpp"

namespace pipetab {
namespace {

// Matrix-multiply FLOPs of one microbatch through the whole model on one tensor-parallel rank.
double microbatch_flops(const TransformerConfig& m) {
  const ModelOperators ops = model_operators(m);
  const auto all = [](const PassOperators& p) {
    return matmul_flops(p.forward) + matmul_flops(p.input_grad) + matmul_flops(p.weight_grad);
  };
  double dense = static_cast<double>(m.moe ? m.moe->dense_layers : m.layers);
  double moe = static_cast<double>(m.layers) - dense;
  // Each MTP module: its own operators, a transformer layer of the last layer's kind, and the
  // output layer once more (Megatron's num_floating_point_operations counts the same).
  const auto mtp = static_cast<double>(m.mtp_layers);
  (mtp_layer_is_moe(m) ? moe : dense) += mtp;
  return dense * all(ops.layer) + (moe > 0 ? moe * all(ops.moe_layer) : 0.0) + all(ops.embedding) +
         (1 + mtp) * all(ops.output) + (mtp > 0 ? mtp * all(ops.mtp) : 0.0);
}

}  // namespace

IterationFlops iteration_flops(const TransformerConfig& model, double sequences) {
  // Each tensor- and context-parallel rank does its share of a microbatch. A mixture of experts
  // is counted at its balanced load (the busiest rank's extra rows are another rank's fewer);
  // the hardware also runs the capacity's padding, the model only the routed rows.
  const double ranks = static_cast<double>(model.tensor_parallel * model.context_parallel);
  const double microbatches = sequences / static_cast<double>(model.micro_batch);
  TransformerConfig run = model;
  if (run.moe) run.moe->imbalance = 1.0;
  const double hardware = microbatch_flops(run) * ranks * microbatches;
  TransformerConfig plain = run;
  plain.recompute = Recompute::None;
  if (plain.moe) {
    plain.moe->capacity_factor.reset();
    plain.moe->recompute = MoeRecompute::None;
  }
  if (plain.recompute == run.recompute && !run.moe) return {hardware, hardware};
  return {microbatch_flops(plain) * ranks * microbatches, hardware};
}

double narayanan_eq3_flops(const TransformerConfig& m, double global_batch) {
  const double s = static_cast<double>(m.seq_len), l = static_cast<double>(m.layers),
               h = static_cast<double>(m.hidden), V = static_cast<double>(m.vocab);
  return 96 * global_batch * s * l * h * h * (1 + s / (6 * h) + V / (16 * l * h));
}

}  // namespace pipetab
