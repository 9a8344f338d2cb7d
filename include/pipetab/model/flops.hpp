// FLOP counts of a whole iteration, from the operators (machine-free): the numerators of model
// and hardware FLOP/s utilization (Korthikanti et al. 2022, §6: MFU counts the model's FLOPs
// without recomputation, HFU those executed, recomputation included).
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string_view>

#include "pipetab/model/workload.hpp"
#include "pipetab/names.hpp"

namespace pipetab {

/// The published convention MFU's model FLOPs are counted by; every output names it. Both count
/// three matrix multiplies per weight (forward, data and weight gradients) of 2 FLOPs per
/// multiply-add over the parameters a token passes through (a mixture of experts' active ones;
/// not the embedding lookup), and never recomputation: neither the recompute a job chooses nor
/// FlashAttention's recomputed QKᵀ in its backward.
enum class FlopCount : std::uint8_t {
  /// 6N + 12·L·h·s per token: attention's QKᵀ and ·V over the full s × s square (PaLM, Chowdhery
  /// et al. 2022, App. B; torchtitan's get_num_flop_per_token; MosaicML's llm-foundry).
  Palm,
  /// 6N + 6·L·h·s: the s² part over the causal mask's half (Megatron-LM since 2025-03).
  Causal,
};

inline constexpr std::array<std::string_view, 2> kFlopCountNames{"palm", "causal"};

constexpr std::string_view to_string(FlopCount c) {
  return name_of(kFlopCountNames, c);
}

constexpr std::optional<FlopCount> parse_flop_count(std::string_view name) {
  return parse_name<FlopCount>(kFlopCountNames, name);
}

/// The count as outputs name it: "PaLM's 6N + 12·L·h·s".
std::string_view describe(FlopCount c);

struct IterationFlops {
  double model = 0.0;  ///< by the FlopCount: no recomputation, attention's square as it says
  /// The FLOPs the GPUs execute: the operators' matrix multiplies with the job's recomputation
  /// and FlashAttention's backward recompute, its causal tiles skipped (executed_flops).
  double hardware = 0.0;
};

/// FLOPs of `sequences` sequences through the whole model (every layer, the logits; all
/// tensor-parallel ranks together), forward and backward.
IterationFlops iteration_flops(const Workload& run, double sequences,
                               FlopCount count = FlopCount::Palm);

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
