// FLOP counts of a whole iteration, from the operators (machine-free): the numerators of model
// and hardware FLOP/s utilization (Korthikanti et al. 2022, §6: MFU counts the model's FLOPs
// without recomputation, HFU those executed, recomputation included).
#pragma once

#include <cstdint>

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

/// How Megatron-LM's count takes attention's s² part: the causal half (since MR !2789, commit
/// 8873b55d6a, 2025-03-06) or the full square (before it; the count MosaicML also uses).
enum class CausalCount : std::uint8_t { Half, FullSquare };

/// The FLOPs of `sequences` sequences of the job's seq_len tokens, forward and backward, as
/// Megatron-LM counts them for its logged TFLOP/s and MFU: `num_floating_point_operations`
/// (transformer_flops) in megatron/training/training.py @001b00c2. Three GEMMs per weight (forward,
/// data and weight gradients) of 2·m·n·k, no recomputation; the dense layers' MLP, the routed
/// experts' MLP at top_k of them per token (active parameters) and the shared experts; attention
/// with GQA or MLA (the latents' norms count one FLOP per latent element, as Megatron's "+ 1");
/// each MTP module's layer (of the last layer's kind), norms and eh_proj; the output layer once per
/// MTP module more; the vocabulary padded to a multiple of 128 × the layout's TP (Megatron's
/// --make-vocab-size-divisible-by 128, _vocab_size_with_padding). Not counted, as Megatron does
/// not: the embedding lookup, norms and element-wise work, the router. The rest of the job and
/// layout (recomputation, micro batch, CP, EP) does not change the count.
double megatron_flops(const Workload& run, double sequences,
                      CausalCount causal = CausalCount::Half);

}  // namespace pipetab
