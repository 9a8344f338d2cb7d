// FLOP counts of a whole iteration, from the operators (machine-free): the numerators of model
// and hardware FLOP/s utilization (Korthikanti et al. 2022, §6: MFU counts the model's FLOPs
// without recomputation, HFU those executed, recomputation included).
#pragma once

#include "pipetab/model/workload.hpp"

namespace pipetab {

struct IterationFlops {
  double model = 0.0;     ///< matrix-multiply FLOPs without recomputation
  double hardware = 0.0;  ///< with the recomputed forward work
};

/// FLOPs of `sequences` sequences through the whole model (every layer, the logits; all
/// tensor-parallel ranks together), forward and backward.
IterationFlops iteration_flops(const Workload& run, double sequences);

/// The iteration FLOPs of Narayanan et al. (SC'21), Eq. 3, for a GPT with full recomputation:
/// 96·B·s·l·h²·(1 + s/(6h) + V/(16·l·h)), B = global batch in sequences. The paper's measured
/// teraFLOP/s per GPU are this over the iteration time.
double narayanan_eq3_flops(const Workload& run, double global_batch);

}  // namespace pipetab
