// Activation bytes of a transformer layer (Korthikanti et al. 2022). Internal to model/.
#pragma once

#include <array>

#include "dims.hpp"

namespace pipetab::detail {

struct LayerActivation {
  double total = 0.0;      ///< bytes one layer holds for one microbatch, per device
  double attention = 0.0;  ///< of which the attention core (freed by the input gradient)
  /// Of `total`, what the weight gradients need once the input gradient has run, where the
  /// layer's accounting knows it (a Mamba layer's two projections' inputs); < 0: a GPT layer's
  /// share (stage_work's `kept`).
  double weight_inputs = -1.0;
};

LayerActivation layer_activation_bytes(const Workload& run, const Dims& d);

/// Whether the GEMMs keep their weight gradients' inputs in FP8 (Stack::fp8_saved_inputs under
/// an FP8 job: Transformer Engine's saved_inputmat).
bool fp8_saved_inputs(const Workload& run);

/// Whether the dense layers' MLP runs again in the backward: Job::dense_mlp_recompute (Megatron's
/// module mlp), or a mixture of experts' moe_recompute mlp, which takes the dense MLPs along.
inline bool dense_mlp_recomputed(const Workload& run) {
  return run.job.dense_mlp_recompute ||
         (run.model.moe && run.job.moe.recompute == MoeRecompute::Mlp);
}

/// Bytes per element the fused attention keeps of Q, K and V and of its output: `e`, or under
/// Job::fp8_attention its FP8 copies' (memory.cpp).
struct SavedAttentionBytes {
  double qkv = 0.0, out = 0.0;
};
SavedAttentionBytes saved_attention_bytes(const Workload& run, double e);

/// Under Job::fp8_attention, the bytes the FP8 attention kernel's saved tensors add against their
/// 16-bit copies (`e` bytes each; < 0: fewer), for `qkv` elements of Q, K and V and `out` of its
/// output. 0 otherwise.
double fp8_attention_saved_delta(const Workload& run, double e, double qkv, double out);

/// The same for a mixture-of-experts layer: the dense layer's attention part, the router's
/// probabilities, the busiest rank's dispatched rows and expert intermediates, the shared experts'.
LayerActivation moe_layer_activation_bytes(const Workload& run);

/// Parameters of a dense layer of `m` (its dense_layer_model), and of a mixture-of-experts layer.
LayerParams dense_layer_params(const Workload& run);
LayerParams moe_layer_params(const Workload& run);

/// A hybrid model's layers by kind (BlockKind order; zeros for kinds the model lacks): an
/// attention layer is the dense layer's attention half with its norm and residual (without the
/// pre-MLP norm's input and the MLP's input), an MLP layer the rest of the dense layer, an E layer
/// the MoE layer less that attention half, an M layer the Mamba mixer's own (mamba.cpp).
std::array<LayerActivation, kBlockKinds> block_activation_bytes(const Workload& run);
std::array<LayerParams, kBlockKinds> block_params(const Workload& run);
LayerActivation mamba_block_activation_bytes(const Workload& run);
LayerParams mamba_block_params(const Workload& run);

/// An MTP module's own parameters per device (eh_proj and its three norms; mtp.cpp), and the
/// activation bytes they keep for one microbatch; its transformer layer is counted apart.
double mtp_params(const Workload& run);
double mtp_activation_bytes(const Workload& run);

}  // namespace pipetab::detail
