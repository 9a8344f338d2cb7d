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
  return static_cast<double>(m.layers) * all(ops.layer) + all(ops.embedding) + all(ops.output);
}

}  // namespace

IterationFlops iteration_flops(const TransformerConfig& model, double sequences) {
  // Each tensor- and context-parallel rank does its share of a microbatch.
  const double ranks = static_cast<double>(model.tensor_parallel * model.context_parallel);
  const double microbatches = sequences / static_cast<double>(model.micro_batch);
  const double hardware = microbatch_flops(model) * ranks * microbatches;
  if (model.recompute == Recompute::None) return {hardware, hardware};
  TransformerConfig plain = model;
  plain.recompute = Recompute::None;
  return {microbatch_flops(plain) * ranks * microbatches, hardware};
}

double narayanan_eq3_flops(const TransformerConfig& m, double global_batch) {
  const double s = static_cast<double>(m.seq_len), l = static_cast<double>(m.layers),
               h = static_cast<double>(m.hidden), V = static_cast<double>(m.vocab);
  return 96 * global_batch * s * l * h * h * (1 + s / (6 * h) + V / (16 * l * h));
}

}  // namespace pipetab
