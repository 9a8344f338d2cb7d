// The workload model (docs/design.md §5 `model/`): what one microbatch asks of each pipeline stage
// — its operators (operators.hpp), the message at a stage boundary, the activations it holds, and
// the parameters, gradients and optimizer state the stage keeps. Machine-free: cost/ turns it
// into time. Facts: reference schedules.md §12–§14.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <variant>
#include <vector>

#include "pipetab/model/transformer.hpp"
#include "pipetab/setting.hpp"

namespace pipetab {

/// Per-op costs given directly instead of by a transformer, all per device share (L/S layers)
/// and per microbatch: a stage of share x costs x times as much (messages do not scale).
struct ExplicitWorkload {
  double forward_s = 0.0;
  double input_grad_s = 0.0;   ///< I; the full backward B costs I + W
  double weight_grad_s = 0.0;  ///< W
  double message_bytes = 0.0;  ///< activation (forward) or gradient (backward) at a stage boundary
  double activation_bytes = 0.0;
  double activation_kept_for_weight_grad = 0.0;  ///< of activation_bytes, held from I until W
  double weight_bytes = 0.0;
  double grad_bytes = 0.0;
  double optimizer_bytes = 0.0;
};

/// A named workload: a transformer or explicit costs.
struct ModelConfig {
  std::string name;
  std::variant<TransformerConfig, ExplicitWorkload> spec;
  /// Job and layout keys the model's file carries (seq_len, micro_batch, recompute,
  /// tensor_parallel, ... in older model files), applied as defaults under what a job file and
  /// the flags give (sim/options.hpp).
  std::vector<Setting> defaults{};
  /// What the reader wants the user to know: the fields of a Hugging Face config.json it did not
  /// use, the job keys of a model file read as defaults. Commands print them as notes.
  std::vector<std::string> notes{};
  std::string description{};  ///< one line of what it is (`pipetab list models`)

  const TransformerConfig* transformer() const { return std::get_if<TransformerConfig>(&spec); }
};

/// A transformer as a run trains it: the architecture, the job and the layout, each whole. A view
/// over the three values, which live where the run was read (a command's setup, a study row,
/// plan's candidate); model/ and cost/ read them through it.
struct Workload {
  const TransformerConfig& model;
  const Job& job;
  const Layout& layout;
};

/// What one microbatch asks of one stage, per device (a tensor-parallel rank). Compute is
/// counted in matrix-multiply FLOPs for reports; its time comes from the operators (cost/).
/// Explicit workloads give seconds instead.
struct StageWork {
  /// Transformer layers on the stage, the MTP modules' included (0 for explicit workloads).
  std::int64_t layers = 0;
  std::int64_t moe_layers = 0;  ///< of them, mixture-of-experts layers (the rest are dense)
  std::int64_t mtp_layers = 0;  ///< MTP modules on the stage (each adds one of `layers`)
  /// A hybrid model's layers on the stage by kind (BlockKind order, Σ = layers; the E ones are
  /// also moe_layers); zeros for other models.
  std::array<std::int64_t, kBlockKinds> blocks{};
  bool embedding = false;  ///< holds the input embedding (first stage)
  bool output = false;     ///< holds the output layer and the loss (last stage)
  double forward_flops = 0.0, input_grad_flops = 0.0, weight_grad_flops = 0.0;
  double forward_s = 0.0, input_grad_s = 0.0, weight_grad_s = 0.0;  ///< explicit workloads
  double message_bytes = 0.0;     ///< sent to the next stage (forward) and back (backward)
  double activation_bytes = 0.0;  ///< allocated by F, freed by B (or by I and W)
  double activation_kept_for_weight_grad = 0.0;  ///< the part I leaves for W
  /// Of activation_bytes, the transformer layers' (without the embedding's and the output
  /// layer's): what offloading whole layers moves, layer_activation_bytes / layers each.
  double layer_activation_bytes = 0.0;
  /// Transient working sets, reserved only while the pass runs, on top of what is held: eager
  /// PyTorch's loss in fp32 (its forward's 16-bit and fp32 copies of the logits; its backward's
  /// gradients of log-softmax's output and input and the part of the forward's hole they cannot
  /// reuse). 0 where nothing beyond the kept activations is modelled.
  double forward_working_bytes = 0.0, backward_working_bytes = 0.0;
  double params = 0.0;  ///< parameters per device
  /// Of them, those outside the transformer layers: the embedding, the output layer, the final
  /// norm (FSDP wraps them in the root unit, torchtitan's `fully_shard(model)`).
  double outer_params = 0.0;
  /// Of them, the routed experts' (reduced over the expert-data-parallel ranks, EDP, not DP × CP).
  double expert_params = 0.0;
  double weight_bytes = 0.0, grad_bytes = 0.0, optimizer_bytes = 0.0;
  /// FP8 training's cached FP8 copy of the layer linears' weights (Transformer Engine), held
  /// beside the 16-bit weights (with Job::fp8_params, instead of theirs: weight_bytes leaves
  /// them out).
  double fp8_weight_copy_bytes = 0.0;
  /// Bytes of the weights the distributed optimizer all-gathers after its step: weight_bytes,
  /// or with Job::fp8_params the FP8 linears' one byte each (MXFP8, NVFP4: their 16 bits).
  double param_gather_bytes = 0.0;
  /// Bytes the optimizer step reads and writes per iteration (optimizer_step_bytes_per_param).
  double optimizer_step_bytes = 0.0;
  /// The gradient of the stage's copy of the word embedding, all-reduced over the stages that
  /// hold one (Megatron's embedding group: the first, the last when embeddings are tied, and
  /// those with MTP modules) when there are two or more; 0 otherwise.
  double tied_embedding_grad_bytes = 0.0;
};

/// Why Megatron-Core refuses its combined 1F1B (--overlap-moe-expert-parallel-comm, pipetab's
/// a2a_overlap) for `model` run by `job` over `ep` expert-parallel ranks (TransformerConfig's
/// checks, transformer_config.py @d98e8a6): it needs a mixture of experts over EP above 1, a 16-bit
/// model, no full-layer recomputation or recompute method, no MoE block among the recomputed
/// modules, no shared-expert overlap, and at most one MTP layer. Empty when it runs (or
/// a2a_overlap is off). The schedule's own rule (model chunks when PP > 1) is the generator's.
std::string a2a_overlap_conflict(const ModelConfig& model, const Job& job, std::int64_t ep);

/// Throws ParamError, naming the rule, when `model` cannot be run by `job` under `layout`: the
/// layout's own rules (data parallelism 1 to kMaxDataParallel replicas; FSDP and the distributed
/// optimizer both shard the optimizer state; an HSDP shard group needs FSDP and must divide DP ×
/// CP), then a transformer's (require_trainable); a model of explicit costs takes no TP, CP, EP,
/// sequence parallelism or pipeline layout. Every command checks its run with it once, where the
/// four values are read.
void require_runnable(const ModelConfig& model, const Job& job, const Layout& layout);

/// The work of each stage of one pipeline when the model is cut into stages of the given
/// relative sizes (a schedule's ScheduleTable::stage_units for one pipeline); `devices` is the
/// pipeline depth S, which fixes a device share for explicit workloads. Throws ParamError if the
/// model cannot be cut that way (fewer layers than stages).
std::vector<StageWork> stage_work(const ModelConfig& model, const Job& job, const Layout& layout,
                                  std::span<const std::int32_t> stage_units, std::int32_t devices);

/// Layers on each stage: the layout's pipeline layout's, or the layer count split in proportion
/// to `stage_units` (largest remainders), the embedding and the output counting as one layer each
/// when balanced.
std::vector<std::int64_t> partition_layers(const TransformerConfig& model, const Layout& layout,
                                           std::span<const std::int32_t> stage_units);

/// MTP modules on each stage: the pipeline layout's, or all on the last stage (Megatron-Core
/// without a layout puts them with the loss).
std::vector<std::int64_t> partition_mtp_layers(const TransformerConfig& model, const Layout& layout,
                                               std::size_t stages);

/// Parameters of one transformer layer per device: the matrices divided by the tensor-parallel
/// size, the LayerNorms replicated.
double layer_params(const Workload& w);

/// Total parameters of the model (all devices, no tensor-parallel split; an untied output layer
/// counted once more), MTP modules left out as models are named (DeepSeek-V3's 671B; its
/// released weights, 685B, include the module).
double total_params(const Workload& w);

/// Bytes the optimizer step moves per parameter: Megatron-LM's mixed-precision Adam (apex
/// FusedAdam, multi_tensor_adam) reads the fp32 gradient, master weight and both moments and
/// writes the last three; the gradient norm reads the gradients once more; the master weights
/// are copied to the 16-bit model weights. 16-bit main gradients are first copied to fp32, and
/// fp16 training unscales them (read and write). bf16 with fp32 gradients: 38 B.
double optimizer_step_bytes_per_param(const Job& job);

}  // namespace pipetab
