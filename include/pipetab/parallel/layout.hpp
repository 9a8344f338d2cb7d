// The parallel layout of a training run: tensor (with sequence), context, expert, pipeline and
// data parallelism, and whether data parallelism is fully sharded (FSDP / ZeRO-3, HSDP). One
// value, read once where a command, a study, a runs file, a job file, `plan` or the Python API
// takes its options (sim/options.hpp), and passed down whole. Machine-free. Sources: reference
// modern-runs.md part (c).
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "pipetab/names.hpp"

namespace pipetab {

/// Most data-parallel replicas a layout takes (--dp).
inline constexpr std::int32_t kMaxDataParallel = 65536;

/// How context-parallel ranks exchange keys and values in each attention layer (Megatron-Core's
/// --cp-comm-type; torchtitan's context_parallel_rotate_method).
enum class CpMethod : std::uint8_t {
  /// Transformer Engine's p2p ring (Megatron's default): CP steps, each sending the KV block a
  /// rank holds on while it computes attention against the one it has.
  Ring,
  /// K and V all-gathered before attention, dK and dV reduce-scattered after its backward
  /// (torchtitan's default rotate method; Llama 3's CP).
  AllGather,
  /// Ulysses: all-to-alls from sequence-sharded to head-sharded Q, K, V and back for the output.
  AllToAll,
};

inline constexpr std::array<std::string_view, 3> kCpMethodNames{"ring", "allgather", "a2a"};

constexpr std::string_view to_string(CpMethod m) {
  return name_of(kCpMethodNames, m);
}

constexpr std::optional<CpMethod> parse_cp_method(std::string_view name) {
  return parse_name<CpMethod>(kCpMethodNames, name);
}

/// When FSDP reduce-scatters the gradients of a unit during gradient accumulation.
enum class GradSync : std::uint8_t {
  /// As torchtitan runs it (grad_sync(FsdpOptions, pipelined) resolves it): PerStep with
  /// pipelining, PerMicrobatch without.
  Auto,
  /// Once per step, after the unit's last backward: gradients accumulate unsharded between
  /// microbatches (torchtitan's pipelined FSDP: set_requires_gradient_sync(False) for every
  /// microbatch but the last; FSDP2's no_sync).
  PerStep,
  /// After every microbatch's backward (FSDP2 without deferring the sync): M reduce-scatters.
  PerMicrobatch,
};

inline constexpr std::array<std::string_view, 3> kGradSyncNames{"auto", "step", "microbatch"};

constexpr std::string_view to_string(GradSync g) {
  return name_of(kGradSyncNames, g);
}

constexpr std::optional<GradSync> parse_grad_sync(std::string_view name) {
  return parse_name<GradSync>(kGradSyncNames, name);
}

/// Whose FSDP runs: how the gathered parameters and the gradients meet the collectives' buffers.
enum class FsdpImpl : std::uint8_t {
  /// PyTorch's FSDP2 (torchtitan): each gathered unit is copied out of the all-gather's flat
  /// buffer into its parameters on the compute stream (foreach_all_gather_copy_out), and its
  /// 16-bit gradients into the reduce-scatter's input in the reduce dtype first
  /// (foreach_reduce_scatter_copy_in; torch/distributed/fsdp/_fully_shard/_fsdp_collectives.py).
  Fsdp2,
  /// Megatron-Core's Megatron-FSDP: parameters and gradients are views into the collectives'
  /// bucket buffers (megatron_fsdp's param_and_grad_buffer.py), no copies.
  Megatron,
  /// PyTorch's FSDP1 (FullyShardedDataParallel, llm-foundry 2023 through composer): each unit's
  /// parameters are one flat parameter whose fp32 shard is cast to a 16-bit shard and gathered
  /// straight into the unsharded flat buffer the parameters view (torch/distributed/fsdp/
  /// _flat_param.py: _mp_shard, _full_param_padded), so no copy-out; the copies it does make
  /// are of the shard (1/N of the unit) and not priced.
  Fsdp1,
};

inline constexpr std::array<std::string_view, 3> kFsdpImplNames{"fsdp2", "megatron", "fsdp1"};

constexpr std::string_view to_string(FsdpImpl f) {
  return name_of(kFsdpImplNames, f);
}

constexpr std::optional<FsdpImpl> parse_fsdp_impl(std::string_view name) {
  return parse_name<FsdpImpl>(kFsdpImplNames, name);
}

/// Fully sharded data parallelism as PyTorch's FSDP2 runs it (torchtitan; reference
/// modern-runs.md §C.1): parameters, gradients and optimizer state sharded over the data- and
/// context-parallel ranks; each unit's parameters all-gathered before use and its gradients
/// reduce-scattered after. A unit is one transformer block without pipelining and the whole
/// stage with it, as torchtitan wraps them.
struct FsdpOptions {
  bool enabled = false;
  /// HSDP: shard over groups of this many ranks (inside a node) and replicate across them, the
  /// shards' gradients all-reduced over the replicas. 0: shard over all DP × CP ranks.
  std::int64_t shard = 0;
  /// Free the unsharded parameters after each unit's forward and all-gather them again for its
  /// backward (ZeRO-3 traffic); off keeps them to the backward (ZeRO-2 traffic). Unset: as
  /// torchtitan (parallelize_llama.py @9dec370): on without pipelining, off with it.
  std::optional<bool> reshard_after_forward;
  GradSync grad_sync = GradSync::Auto;
  /// Float8 all-gather of the parameters (torchtitan's enable_fsdp_float8_all_gather): one byte
  /// per parameter instead of the parameter dtype's two.
  bool fp8_all_gather = false;
  FsdpImpl impl = FsdpImpl::Fsdp2;
  friend bool operator==(const FsdpOptions&, const FsdpOptions&) = default;
};

/// The whole layout. TP, CP, EP and ETP split each stage's work; DP and FSDP replicate or shard
/// whole pipelines; PP and the schedule cut the model into the pipeline's stages.
struct Layout {
  /// Tensor-parallel size: FLOPs, activations and weights per rank divide by it.
  std::int64_t tp = 1;
  /// Sequence parallelism with TP (Korthikanti et al. 2022): activations divide by tp entirely.
  bool sequence_parallel = false;
  /// Context-parallel size: each rank runs seq_len / cp tokens of every sequence through every
  /// operator; attention's queries are its tokens and its keys the whole sequence, exchanged by
  /// `cp_method` (reference modern-runs.md §C.2).
  std::int64_t cp = 1;
  CpMethod cp_method = CpMethod::Ring;
  /// Data-parallel replicas (or FSDP ranks) of the pipeline.
  std::int64_t dp = 1;
  /// Expert parallelism: the ranks each MoE layer's experts are spread over, and the ranks each
  /// expert's matrices are split over; drawn from the TP × CP × DP ranks of a stage (Megatron-
  /// Core's MoE parallel folding: ETP × EP × EDP = TP × CP × DP). 1 and 1 for a dense model.
  std::int64_t ep = 1;
  std::int64_t etp = 1;
  FsdpOptions fsdp;
  /// The pipeline: stages per replica (PP, the table's devices), the schedule by its registry
  /// name (`pipetab list`; "": the command's own), and its virtual chunks per device (0: the
  /// schedule's default). Commands take them from -S, the schedule name and -v; job files from
  /// their pipeline keys.
  std::int64_t pp = 1;
  std::string schedule;
  std::int64_t chunks = 0;
  /// Count the embedding and the output layer as one transformer layer each when cutting the
  /// model into stages, so that the first and last stages hold one layer fewer (Megatron-LM's
  /// --account-for-embedding-in-pipeline-split and --account-for-loss-in-pipeline-split).
  bool balance_embedding = false;
  /// Megatron-Core's --pipeline-model-parallel-layout: the stages' contents in model order, `E`
  /// the embedding, `t` a transformer layer, `m` an MTP module, `L` the loss (output layer), `|`
  /// between stages, `X*n` and `(...)*n` repetition, commas ignored, e.g. "Ett|(ttt|)*30ttL".
  /// Empty: layers split evenly, MTP modules on the last stage.
  std::string pipeline_layout;
  friend bool operator==(const Layout&, const Layout&) = default;
};

/// What each stage of a pipeline layout holds: its transformer layers and its MTP modules.
struct PipelineStages {
  std::vector<std::int64_t> layers;
  std::vector<std::int64_t> mtp_layers;
};

/// The stages a pipeline layout names (Layout::pipeline_layout), for a model of `layers` layers
/// and `mtp_layers` MTP modules. Throws ParamError naming the position and the rule: unknown or
/// unbalanced symbols, the embedding anywhere but the first stage or the loss anywhere but the
/// last, a transformer layer after an MTP layer, a middle stage with no layer, or a layer or
/// MTP count that is not the model's.
PipelineStages parse_pipeline_layout(std::string_view text, std::int64_t layers,
                                     std::int64_t mtp_layers);

/// The balanced pipeline layout Megatron-Core's notation allows where the layers do not split
/// into equal stages: the embedding, each MTP module and the loss counted as a layer each, every
/// stage holding k = (layers + mtp_layers + 2) / stages of those units — the first `E` and k − 1
/// layers, the last k − 1 − mtp_layers layers, the MTP modules and `L`. DeepSeek-V3's 61 layers
/// and one MTP module over 32 stages give "Et|(tt|)*30mL", the layout DeepSeek-V3 is trained with
/// on PP 8 × VP 4 in Megatron-Core (Megatron-LM's DeepSeek-V3 GB200 write-up runs it without MTP
/// as "Et|(tt|)*30L"). Unset when the units do not split over `stages`, when the last stage could
/// not hold its MTP modules and the loss, or with fewer than two stages.
std::optional<std::string> balanced_pipeline_layout(std::int64_t layers, std::int64_t mtp_layers,
                                                    std::int64_t stages);

/// The stages a pipeline layout names (its '|'-separated parts, a trailing '|' closing the last),
/// whatever the model: what a job file's layout says of the pipeline before any model is read.
/// Throws ParamError naming the position and the rule for text that does not parse.
std::int64_t pipeline_layout_stages(std::string_view text);

/// The ranks a unit's parameters are sharded over: DP × CP (torchtitan folds CP into FSDP's
/// mesh), or the HSDP shard group.
constexpr std::int64_t fsdp_shard_size(const Layout& l) {
  return l.fsdp.shard > 0 ? l.fsdp.shard : l.dp * l.cp;
}

/// Expert data parallelism: the ranks an expert's gradients are reduced over (EDP = TP × CP ×
/// DP / (EP × ETP)).
constexpr std::int64_t expert_data_parallel(const Layout& l) {
  return l.tp * l.cp * l.dp / (l.ep * l.etp);
}

/// torchtitan's reshard_after_forward default: on without pipelining, off with it.
constexpr bool reshard_after_forward(const FsdpOptions& f, bool pipelined) {
  return f.reshard_after_forward.value_or(!pipelined);
}

/// torchtitan's gradient sync: deferred to a stage's last backward with pipelining
/// (torch.distributed.pipelining's backward_maybe_with_nosync calls
/// set_requires_gradient_sync(False) for every microbatch but the last), after every microbatch
/// without (torchtitan's accumulation loop calls backward once per microbatch, and FSDP2
/// reduce-scatters each: requires_gradient_sync defaults to True).
constexpr GradSync grad_sync(const FsdpOptions& f, bool pipelined) {
  if (f.grad_sync != GradSync::Auto) return f.grad_sync;
  return pipelined ? GradSync::PerStep : GradSync::PerMicrobatch;
}

}  // namespace pipetab
