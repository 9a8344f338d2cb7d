// Megatron-Core's fine-grained activation offload (Job::offload_modules): what each offloaded
// module of a transformer layer keeps for its backward, and which of the layer's operators it
// spans (megatron/core/pipeline_parallel/fine_grained_activation_offload.py and the modules that
// mark its groups, transformer_layer.py, attention.py, multi_latent_attention.py,
// moe/experts.py, @d98e8a64). Machine-free; cost/layer_offload.hpp times the copies.
//
// A group is a module's forward between group_start and group_commit: every tensor autograd
// saves inside it, of at least kMinOffloadedElements elements, is copied to pinned host memory
// on a copy stream as the module's forward ends, and its device memory released; the backward
// of the module waits for the copy back, which the end of the previous group's backward issued.
#pragma once

#include <string_view>
#include <vector>

#include "pipetab/model/workload.hpp"

namespace pipetab {

/// Megatron-Core's --min-offloaded-tensor-size default (1M elements): smaller saved tensors stay
/// on the device (ChunkOffloadHandler::tensor_need_offloading_checker).
inline constexpr double kMinOffloadedElements = 1048576;

/// One module's offload group in one layer, per device and microbatch.
struct OffloadGroup {
  OffloadModule module = OffloadModule::CoreAttn;
  /// Bytes its copies move each way: the tensors saved inside the module.
  double copied_bytes = 0.0;
  /// Of the layer's activation bytes (model/memory.cpp's accounting), those the device no longer
  /// holds once the copy is done: less than copied_bytes where another module keeps the same
  /// tensor (the attention output, saved by the fused attention and the output projection) or
  /// where the module saves a 16-bit copy the accounting keeps in FP8 (the experts' fc1).
  double freed_bytes = 0.0;
  /// The forward operators it spans (model/operators.hpp's names), in order: its copy leaves as
  /// the last ends; its backward is theirs.
  std::vector<std::string_view> operators;
};

/// The groups of one dense layer (`moe_layer` false) or mixture-of-experts layer of `run`, in
/// forward order: Job::offload_modules's, less those that keep nothing to offload (a norm fused
/// into the linear after it, which Megatron-Core skips as an IdentityOp).
std::vector<OffloadGroup> offload_groups(const Workload& run, bool moe_layer);

/// What a forward of stage `w` leaves on the host per microbatch under offload inside the passes
/// (Job::offload_layers: that many of its layers, all but its last at most; Job::offload_modules:
/// each layer's groups' freed bytes, dense and mixture-of-experts layers by their counts); 0
/// without.
double stage_offloaded_bytes(const StageWork& w, const Workload& run);

/// Throws OptionError("offload_modules") naming the rule where the job cannot offload its modules
/// as Megatron-Core does: a model without the module's layers (experts) or given by its costs or
/// a hybrid pattern, attn_proj without core_attn, a module the job's recomputation frees already,
/// recomputation other than none or selective, attention that is not fused. require_runnable
/// calls it.
void require_offload_modules(const ModelConfig& model, const Job& job);

}  // namespace pipetab
