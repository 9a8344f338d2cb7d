// The job: what a training run does with a model, apart from its architecture (the model),
// its parallel layout (parallel/layout.hpp) and its hardware (the system). Sequence and batch,
// the precision recipe, recomputation, the MoE dispatcher, the optimizer and the overlaps: what
// a torchtitan job TOML's [training], [activation_checkpoint] and [float8] tables and a
// Megatron-LM launch script's batch, --recompute-*, --fp8-*, --moe-* and overlap flags say.
// One value, read once where a command, a study, a runs file, `plan` or the Python API takes its
// options (sim/options.hpp), and passed down whole. Machine-free.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "pipetab/model/stack.hpp"
#include "pipetab/names.hpp"
#include "pipetab/precision.hpp"

namespace pipetab {

/// Activation recomputation. Selective and Full as Megatron-LM does them (Korthikanti et al.,
/// MLSys 2023): the attention core (Megatron-Core's --recompute-modules core_attn), or the whole
/// layer. SelectiveOp and EveryOtherLayer as torchtitan does them (parallelize_llama.py @9dec370,
/// `mode = "selective"`): its per-op policy keeps the outputs of attention and of every other
/// matrix multiply and recomputes the rest (selective_ac_option = "op"), or it checkpoints every
/// other block whole (option "2"). Lgd as PipeOffload does it (Wan et al. 2025, arXiv
/// 2503.01328 §4, `--recompute-lgd`): LayerNorm, the MLP's activation (GeLU) and dropout are
/// recomputed, cutting a GPT layer's 34·sbh to 20·sbh (the norms' outputs, the activation's
/// output and the dropout masks are not kept).
enum class Recompute : std::uint8_t { None, Selective, Full, SelectiveOp, EveryOtherLayer, Lgd };

/// "none", "selective", "full", "selective-op", "every-other-layer", "lgd": the names model
/// files, job files and the CLI use.
inline constexpr std::array<std::string_view, 6> kRecomputeNames{
    "none", "selective", "full", "selective-op", "every-other-layer", "lgd"};

constexpr std::string_view to_string(Recompute r) {
  return name_of(kRecomputeNames, r);
}

constexpr std::optional<Recompute> parse_recompute(std::string_view name) {
  return parse_name<Recompute>(kRecomputeNames, name);
}

/// A module whose saved inputs Megatron-Core's fine-grained activation offload copies to host
/// memory after its forward and back before its backward (--offload-modules;
/// fine_grained_activation_offload.py, docs/user-guide/features/
/// fine_grained_activation_offloading.md @d98e8a64). One bit each in Job::offload_modules.
/// Megatron-Core's eighth, fused_group_mlp (Transformer Engine's op fuser), is not modelled.
enum class OffloadModule : std::uint8_t {
  AttnNorm,   ///< the attention's input norm, where it is its own module (latent attention)
  QkvLinear,  ///< the QKV projection (latent attention: the down- and up-projections)
  CoreAttn,   ///< the fused attention's Q, K, V, output and log-sum-exp
  AttnProj,   ///< the output projection's input (with CoreAttn only)
  MlpNorm,    ///< the pre-MLP norm, where it is its own module (mixture-of-experts layers)
  ExpertFc1,  ///< the experts' fc1 input (the dispatched rows)
  MoeAct,     ///< the experts' activation input (fc1's output)
};

inline constexpr std::array<std::string_view, 7> kOffloadModuleNames{
    "attn_norm", "qkv_linear", "core_attn", "attn_proj", "mlp_norm", "expert_fc1", "moe_act"};

constexpr std::string_view to_string(OffloadModule m) {
  return name_of(kOffloadModuleNames, m);
}

constexpr std::optional<OffloadModule> parse_offload_module(std::string_view name) {
  return parse_name<OffloadModule>(kOffloadModuleNames, name);
}

/// Job::offload_modules's bit for `m`.
constexpr std::uint8_t offload_bit(OffloadModule m) {
  return static_cast<std::uint8_t>(1u << static_cast<unsigned>(m));
}

/// What the backward pass recomputes of a mixture-of-experts layer (Megatron-Core's
/// --recompute-modules): nothing, the experts' activation function (`moe_act`: the output of
/// SwiGLU is not kept, it is recomputed from fc1's output), or the whole MLP (`mlp`: the MoE
/// block from its router to its combine, all-to-alls included; the dense MLP in dense layers).
enum class MoeRecompute : std::uint8_t { None, MoeAct, Mlp };

inline constexpr std::array<std::string_view, 3> kMoeRecomputeNames{"none", "moe_act", "mlp"};

constexpr std::string_view to_string(MoeRecompute r) {
  return name_of(kMoeRecomputeNames, r);
}

constexpr std::optional<MoeRecompute> parse_moe_recompute(std::string_view name) {
  return parse_name<MoeRecompute>(kMoeRecomputeNames, name);
}

/// How a mixture-of-experts layer moves tokens to their experts' ranks and back (Megatron-Core's
/// --moe-token-dispatcher-type).
enum class MoeDispatcher : std::uint8_t {
  /// NCCL all-to-all (Megatron's `alltoall`): every (token, expert) pair is its own row, so a
  /// token routed to k experts on one remote node crosses the network k times; the received rows
  /// are sorted by local expert before the grouped GEMMs and back after them.
  AllToAll,
  /// DeepEP (DeepSeek-V3 report §3.2.2; deepseek-ai/DeepEP): a token crosses the network once
  /// per destination node and is forwarded to that node's experts over NVLink; its kernels write
  /// the rows already grouped by expert.
  DeepEp,
  /// HybridEP (Megatron-Core's flex dispatcher with --moe-flex-dispatcher-backend hybridep;
  /// deepseek-ai/DeepEP branch hybrid-ep): DeepEP's node-deduplicated movement, preceded on every
  /// forward dispatch by an NCCL all-gather of the routing map (one byte per token and expert over
  /// the EP group: Executor::allgather_routing_map, csrc/hybrid_ep/executor/executor.cu @94a9f8f).
  HybridEp,
};

inline constexpr std::array<std::string_view, 3> kMoeDispatcherNames{"alltoall", "deepep",
                                                                     "hybridep"};

/// Whether a dispatcher is one of Megatron-Core's flex backends (DeepEP, HybridEP): tokens cross
/// the network once per destination node and are permuted after the dispatch, in its kernels.
constexpr bool is_flex(MoeDispatcher d) {
  return d != MoeDispatcher::AllToAll;
}

constexpr std::string_view to_string(MoeDispatcher d) {
  return name_of(kMoeDispatcherNames, d);
}

constexpr std::optional<MoeDispatcher> parse_moe_dispatcher(std::string_view name) {
  return parse_name<MoeDispatcher>(kMoeDispatcherNames, name);
}

/// How FP8 training scales its tensors (Transformer Engine's recipes: DelayedScaling from the
/// amax history, Float8CurrentScaling per tensor, Float8BlockScaling per 1×128 / 128×128 block,
/// MXFP8BlockScaling per 1×32 block with E8M0 scales; torchao's tensorwise and rowwise). The
/// cost model prices the per-tensor, per-row and 128-block recipes alike (their quantisation
/// kernels are Transformer Engine's fused cast-transpose, or torchao's eager casts;
/// model/builder.hpp). MXFP8 differs where the hardware does: its GEMMs are block-scaled ones
/// that only Blackwell's tensor cores run ([device.gemm_mxfp8], their own efficiency), and each
/// tensor is quantised twice, along rows and along columns, with a one-byte scale per 32
/// elements each way, since a transpose needs its own blocks (Transformer Engine's MXFP8Tensor
/// keeps rowwise and columnwise data; the OCP Microscaling Formats spec v1.0). NVFP4
/// (Transformer Engine's NVFP4BlockScaling, passed to fp8_autocast like the others) runs the
/// layer linears' GEMMs on Blackwell's FP4 tensor cores: E2M1 elements with an E4M3 scale per
/// 16 and an FP32 scale per tensor, two copies each way as MXFP8 ([device.gemm_nvfp4], the FP4
/// peak), and heavier quantisation (the per-tensor amax first, a Hadamard transform and
/// stochastic rounding where the recipe asks).
enum class Fp8Recipe : std::uint8_t { Tensorwise, Delayed, Rowwise, Blockwise, Mxfp8, Nvfp4 };

inline constexpr std::array<std::string_view, 6> kFp8RecipeNames{"tensorwise", "delayed", "rowwise",
                                                                 "blockwise",  "mxfp8",   "nvfp4"};

/// MXFP8's E8M0 scale bytes per element, one way (a byte per block of 32: OCP MX spec v1.0).
inline constexpr double kMxfp8ScaleBytes = 1.0 / 32.0;

/// NVFP4's bytes per element, one way: half a byte of E2M1 and an E4M3 scale byte per 16
/// (NVIDIA's NVFP4 format; the per-tensor FP32 scale is negligible).
inline constexpr double kNvfp4Bytes = 0.5 + 1.0 / 16.0;

/// Quantising one element to NVFP4, as bytes of memory traffic: MXFP8's fused cast (2 bytes read,
/// two 1-byte copies, their scales: 4.0625) times what NVFP4's quantisation took over MXFP8's on
/// the same GEMMs of a 5B model's layer on a B300 — autocast less pre-quantised GEMM time, 2.689
/// against 1.823 ms (NVIDIA/TransformerEngine docs/examples/gemm_profiling/gemm_profiling.rst
/// @d0067d0): the amax pass its per-tensor scale needs, the Hadamard transform and stochastic
/// rounding make it heavier than its smaller output suggests.
inline constexpr double kNvfp4QuantizeBytes = (2.0 + 2.0 + 2.0 * kMxfp8ScaleBytes) * 2.689 / 1.823;

constexpr std::string_view to_string(Fp8Recipe r) {
  return name_of(kFp8RecipeNames, r);
}

constexpr std::optional<Fp8Recipe> parse_fp8_recipe(std::string_view name) {
  return parse_name<Fp8Recipe>(kFp8RecipeNames, name);
}

/// When a tensor-parallel collective may run while a GEMM computes. Megatron-LM ran them all
/// synchronously until 2021-09, then overlapped the backward ones (the input-gradient
/// all-reduce or reduce-scatter during the weight-gradient GEMM, sequence parallelism's
/// re-gather of the input during the input-gradient GEMM); Megatron-Core's --tp-comm-overlap
/// overlaps the others with the GEMM next to them too.
enum class Overlap : std::uint8_t { Never, Backward, All };

inline constexpr std::array<std::string_view, 3> kOverlapNames{"none", "backward", "all"};

constexpr std::string_view to_string(Overlap o) {
  return name_of(kOverlapNames, o);
}

constexpr std::optional<Overlap> parse_overlap(std::string_view name) {
  return parse_name<Overlap>(kOverlapNames, name);
}

/// A mixture of experts as the job runs it (the experts themselves are the model's [moe]).
struct MoeJob {
  MoeDispatcher dispatcher = MoeDispatcher::AllToAll;
  /// Tokens an expert takes, as a multiple of its balanced share (Megatron-Core's
  /// --moe-expert-capacity-factor; padded to it); absent: dropless.
  std::optional<double> capacity_factor;
  /// The busiest expert-parallel rank's tokens over the mean (1: balanced, as benchmarks force).
  double imbalance = 1.0;
  /// The forward dispatch in FP8 (DeepSeek-V3 §3.3: e4m3 with one fp32 scale per 128 values);
  /// the combine and the backward stay in BF16.
  bool fp8_dispatch = false;
  /// The shared experts' fc1 runs while the dispatch moves tokens and their fc2 while the combine
  /// does (Megatron-Core's --moe-shared-expert-overlap).
  bool shared_expert_overlap = false;
  MoeRecompute recompute = MoeRecompute::None;
  /// The norm before the experts recomputed in the backward instead of its output kept
  /// (Megatron-Core's recompute module `layernorm`, transformer_layer.py: it recomputes the norms
  /// that are modules of their own; under Transformer Engine's layer spec a dense layer's norms
  /// are fused into LayerNormLinear and LayerNormMLP, so the MoE layers' pre-MLP norm is the one
  /// it touches). With recompute none or selective.
  bool recompute_norm = false;

  /// The tokens an expert-parallel rank's experts take, over the balanced share: the capacity
  /// (padded to it) when tokens are dropped, the imbalance when none is.
  double load() const { return capacity_factor ? *capacity_factor : imbalance; }
  friend bool operator==(const MoeJob&, const MoeJob&) = default;
};

/// The whole job. Defaults are pipetab's built-in ones; a model file may carry some of these keys
/// as defaults of its own (older files; io/config.hpp), under what a job file and flags give.
struct Job {
  /// Tokens per sequence; 0: not given (a transformer needs one).
  std::int64_t seq_len = 0;
  /// Sequences per microbatch.
  std::int64_t micro_batch = 1;
  /// Sequences per iteration over all data-parallel replicas; 0: the schedule's microbatches ×
  /// micro_batch × data-parallel replicas (a command given both checks that they agree).
  std::int64_t global_batch = 0;
  /// The matrix multiplies' format (device peak); FP8 keeps attention (unless fp8_attention), the
  /// output layer and the rest in BF16 (compute_precision).
  Precision precision = Precision::BF16;
  Fp8Recipe fp8_recipe = Fp8Recipe::Tensorwise;
  /// The layer linears' weights kept in FP8 only (Megatron-Core's --fp8-param-gather, Transformer
  /// Engine's fp8_model_init; every FP8 recipe of Megatron-Bridge sets it, and its NVFP4 one
  /// fp4_param_gather from v0.5.0): no 16-bit copy of them, the FP8 copy (fp8_weight_copy_bytes)
  /// is the weight. The distributed optimizer all-gathers them in FP8, one byte each, except
  /// under MXFP8 and NVFP4, whose blocks along rows and columns are made from a BF16 all-gather
  /// into the gradient buffer (Megatron-Bridge requires reuse_grad_buf_for_mxfp8_param_ag with
  /// MXFP8 parameters, training/mixed_precision.py; NVFP4 assumed the same).
  bool fp8_params = false;
  /// The fused attention in FP8 too (Transformer Engine's fp8_dpa: Megatron-Core's
  /// --fp8-dot-product-attention, Megatron-Bridge's mixed_precision.fp8_dot_product_attention):
  /// Q, K and V quantised to E4M3 before cuDNN's FP8 kernel, dO before its backward
  /// (DotProductAttention's FusedAttnFunc, TE @d0067d0). With Transformer Engine's tensorwise,
  /// delayed or MXFP8 recipe, under a stack that runs cuDNN's kernel.
  bool fp8_attention = false;
  /// Bytes of activations, weights and messages; 0: the precision's (2 for FP8, whose training
  /// keeps them in 16 bits: Transformer Engine).
  std::int64_t dtype_bytes = 0;
  Recompute recompute = Recompute::None;
  /// Latent attention's up-projections run again in the backward instead of their outputs kept
  /// (Megatron-Core's recompute module `mla_up_proj`, multi_latent_attention.py: the query and
  /// key-value up-projections and RoPE run under CheckpointWithoutOutput, whose outputs, the
  /// heads' Q, K and V, are freed once the fused attention has run and made again when the
  /// backward reaches it). With recompute none or selective, on a latent-attention model.
  bool mla_recompute_up_proj = false;
  /// The dense layers' MLP run again in the backward instead of its insides kept (Megatron-Core's
  /// recompute module `mlp`, transformer_layer.py: every layer's MLP in a dense model; in a
  /// mixture of experts only the dense layers', the MoE blocks being the module `moe`, which is
  /// MoeJob::recompute mlp). With recompute none or selective; not for hybrid models.
  bool dense_mlp_recompute = false;
  MoeJob moe;
  /// The optimizer's state and gradients per parameter (Megatron's fp32 main gradients, fp32
  /// master weights and Adam moments).
  double grad_bytes_per_param = 4.0;
  double optimizer_bytes_per_param = 12.0;
  /// Shard the optimizer over the data-parallel replicas (Megatron's distributed optimizer):
  /// reduce-scatter the gradients, step on 1/R of the parameters, all-gather them after.
  bool distributed_optimizer = false;
  Overlap tp_overlap = Overlap::Backward;
  /// Megatron-Core's 1F1B all-to-all overlap (--overlap-moe-expert-parallel-comm).
  bool a2a_overlap = false;
  /// Data-parallel reduction in buckets while the last backward passes run (torch DDP,
  /// Megatron-Core's --overlap-grad-reduce), of dp_bucket_bytes each.
  bool dp_overlap = false;
  double dp_bucket_bytes = 25e6;  ///< torch DDP's default bucket_cap_mb = 25
  /// The share of each device's activations copied to host memory after their forward and back
  /// before their backward (PipeOffload, arXiv 2503.01328): over the device's stages, the ones
  /// whose activations live longest first, whole stages and the rest of one (its selective
  /// offload); a forward whose backward is the device's next op is not offloaded. 0: none.
  double offload_activations = 0.0;
  /// Transformer Engine's CPU offload of whole layers (Megatron-LM's --cpu-offloading-num-layers):
  /// the activations of each stage's first N layers go to host memory layer by layer inside the
  /// passes (cost/layer_offload.hpp). 0: none. Exclusive with offload_activations.
  std::int64_t offload_layers = 0;
  /// Megatron-Core's fine-grained activation offload (--fine-grained-activation-offloading
  /// --offload-modules): the OffloadModule bits (offload_bit) whose saved inputs every
  /// transformer layer copies to host memory as each module's forward ends, and back one module
  /// ahead of its backward (cost/layer_offload.hpp). 0: none. Exclusive with the other offloads.
  std::uint8_t offload_modules = 0;
  /// Copy streams per device for the offload's copies: 2, one each way (Megatron-Core's
  /// d2h_stream and h2d_stream), or 1, both ways on one in the order they are issued
  /// (PipeOffload's runtime, which found separate streams' latency unstable, §4).
  std::int64_t offload_streams = 2;
  /// How the software stack runs the layers (model/stack.hpp).
  Stack stack;

  /// Bytes of one activation, weight or message element (dtype_bytes resolved).
  constexpr std::int64_t element_bytes() const {
    if (dtype_bytes > 0) return dtype_bytes;
    return precision == Precision::FP8 ? 2 : pipetab::element_bytes(precision);
  }
  friend bool operator==(const Job&, const Job&) = default;
};

/// Whether the job offloads activations inside its passes: whole layers (offload_layers) or
/// modules (offload_modules), priced per stage (cost/layer_offload.hpp).
constexpr bool offloads_in_passes(const Job& job) {
  return job.offload_layers > 0 || job.offload_modules != 0;
}

/// Whether the job offloads activations at all (PipeOffload's share included).
constexpr bool offloads(const Job& job) {
  return job.offload_activations > 0.0 || offloads_in_passes(job);
}

/// Job::offload_modules as its names joined by '+' in OffloadModule order ("none" for 0), and
/// back: names joined by '+' or ',' (any order, each once; "none" alone for 0).
std::string offload_modules_text(std::uint8_t modules);
struct OffloadModulesParse {
  std::uint8_t modules = 0;
  std::string error;  ///< empty when parsed
};
OffloadModulesParse parse_offload_modules(std::string_view text);

/// The format a job's matrix multiplies run in apart from FP8 layer linears: FP8 training
/// (Transformer Engine, torchao) keeps attention, the output layer and the rest in BF16.
constexpr Precision compute_precision(const Job& job) {
  return job.precision == Precision::FP8 ? Precision::BF16 : job.precision;
}

/// The peak an FP8 job's layer linears run at: FP8's, or FP4's under the NVFP4 recipe.
constexpr Precision low_precision(const Job& job) {
  return job.fp8_recipe == Fp8Recipe::Nvfp4 ? Precision::FP4 : Precision::FP8;
}

}  // namespace pipetab
