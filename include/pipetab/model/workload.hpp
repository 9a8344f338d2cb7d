// The workload model (DESIGN.md §5 `model/`): what one microbatch costs on one pipeline stage —
// compute, the message at a stage boundary, the activations it holds, and the parameters,
// gradients and optimizer state the stage keeps. Facts: reference schedules.md §12–§14.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <variant>
#include <vector>

namespace pipetab {

/// Activation recomputation (Korthikanti et al., MLSys 2023).
enum class Recompute { None, Selective, Full };

/// A decoder-only transformer as trained: one microbatch of `micro_batch` sequences of
/// `seq_len` tokens. Defaults of 0 mean "derived": kv_heads = heads, ffn_hidden = 4·hidden.
struct TransformerConfig {
  std::int64_t layers = 0;
  std::int64_t hidden = 0;
  std::int64_t heads = 0;
  std::int64_t kv_heads = 0;    ///< grouped-query attention; 0 = heads
  std::int64_t ffn_hidden = 0;  ///< 0 = 4 · hidden
  std::int64_t seq_len = 0;
  std::int64_t micro_batch = 1;
  std::int64_t vocab = 0;
  std::int64_t dtype_bytes = 2;      ///< activations, weights and messages (bf16)
  std::int64_t tensor_parallel = 1;  ///< t: FLOPs, activations and weights per device divide by it
  bool sequence_parallel = false;    ///< with t > 1, activations divide by t entirely
  Recompute recompute = Recompute::None;
  bool flash_attention = false;   ///< no s×s attention tensors kept; backward recomputes QKᵀ
  bool gated_mlp = false;         ///< SwiGLU-style MLP: three weight matrices instead of two
  bool learned_positions = true;  ///< a position-embedding table (GPT) or none (RoPE)
  /// Count the embedding and the output layer as one transformer layer each when cutting the
  /// model into stages, so that the first and last stages hold one layer fewer.
  bool balance_embedding = false;
  double grad_bytes_per_param = 4.0;        ///< fp32 main gradients (Megatron)
  double optimizer_bytes_per_param = 12.0;  ///< fp32 master weights + Adam moments
};

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
};

/// What one microbatch costs on one stage. Compute is in FLOPs (transformer) or seconds
/// (explicit workload); the simulator turns FLOPs into time with the device's speed.
struct StageWork {
  std::int64_t layers = 0;  ///< transformer layers on the stage (0 for explicit workloads)
  bool embedding = false;   ///< holds the input embedding (first stage)
  bool output = false;      ///< holds the output layer and the loss (last stage)
  double forward_flops = 0.0, input_grad_flops = 0.0, weight_grad_flops = 0.0;
  double forward_s = 0.0, input_grad_s = 0.0, weight_grad_s = 0.0;
  double message_bytes = 0.0;     ///< sent to the next stage (forward) and back (backward)
  double activation_bytes = 0.0;  ///< allocated by F, freed by B (or by I and W)
  double activation_kept_for_weight_grad = 0.0;  ///< the part I leaves for W
  double params = 0.0;                           ///< parameters per device
  double weight_bytes = 0.0, grad_bytes = 0.0, optimizer_bytes = 0.0;
};

/// The work of each stage of one pipeline when the model is cut into stages of the given
/// relative sizes (a schedule's ScheduleTable::stage_units for one pipeline); `devices` is the
/// pipeline depth S, which fixes a device share for explicit workloads. Throws ParamError if the
/// model cannot be cut that way (fewer layers than stages).
std::vector<StageWork> stage_work(const ModelConfig& model,
                                  std::span<const std::int32_t> stage_units, std::int32_t devices);

/// Layers on each stage: the layer count split in proportion to `stage_units` (largest
/// remainders), the embedding and the output counting as one layer each when balanced.
std::vector<std::int64_t> partition_layers(const TransformerConfig& model,
                                           std::span<const std::int32_t> stage_units);

/// Parameters of one transformer layer per device: the matrices divided by the tensor-parallel
/// size, the LayerNorms replicated.
double layer_params(const TransformerConfig& model);

/// Total parameters of the model (all devices, no tensor-parallel split).
double total_params(const TransformerConfig& model);

}  // namespace pipetab
