#include "pipetab/model/flops.hpp"

#include "pipetab/model/operators.hpp"

namespace pipetab {
namespace {

// Matrix-multiply FLOPs of one microbatch through the whole model on one tensor-parallel rank.
double microbatch_flops(const Workload& run) {
  const TransformerConfig& m = run.model;
  const ModelOperators ops = model_operators(run);
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

IterationFlops iteration_flops(const Workload& run, double sequences) {
  // Each tensor- and context-parallel rank does its share of a microbatch. A mixture of experts
  // is counted at its balanced load (the busiest rank's extra rows are another rank's fewer);
  // the hardware also runs the capacity's padding, the model only the routed rows.
  const double ranks = static_cast<double>(run.layout.tp * run.layout.cp);
  const double microbatches = sequences / static_cast<double>(run.job.micro_batch);
  Job balanced = run.job;
  balanced.moe.imbalance = 1.0;
  const double hardware =
      microbatch_flops({run.model, balanced, run.layout}) * ranks * microbatches;
  Job plain = balanced;
  plain.recompute = Recompute::None;
  plain.moe.capacity_factor.reset();
  plain.moe.recompute = MoeRecompute::None;
  if (plain.recompute == run.job.recompute && !run.model.moe) return {hardware, hardware};
  return {microbatch_flops({run.model, plain, run.layout}) * ranks * microbatches, hardware};
}

double narayanan_eq3_flops(const Workload& run, double global_batch) {
  const TransformerConfig& m = run.model;
  const double s = static_cast<double>(run.job.seq_len), l = static_cast<double>(m.layers),
               h = static_cast<double>(m.hidden), V = static_cast<double>(m.vocab);
  return 96 * global_batch * s * l * h * h * (1 + s / (6 * h) + V / (16 * l * h));
}

}  // namespace pipetab
