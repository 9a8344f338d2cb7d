#include "pipetab/sim/options.hpp"

#include <algorithm>
#include <array>
#include <charconv>
#include <cmath>

#include <fmt/format.h>

#include "pipetab/error.hpp"
#include "pipetab/model/stack.hpp"
#include "pipetab/names.hpp"
#include "pipetab/numeric.hpp"

namespace pipetab {
namespace {

// The values of the Choice options (each enum's names where it has them).
constexpr std::array<std::string_view, 5> kPrecisions{"fp32", "tf32", "fp16", "bf16", "fp8"};
constexpr std::array<std::string_view, 5> kAttentionKernelChoices{"auto", "flash2", "flash3",
                                                                  "cudnn", "triton"};
static_assert(kAttentionKernels == 4, "kAttentionKernelChoices lists every kernel after auto");
constexpr std::array<std::string_view, 5> kRuntimes{"auto", "async", "megatron", "pytorch",
                                                    "dualpipe"};

std::string text_of(std::int64_t v) {
  return std::to_string(v);
}
std::string text_of(bool v) {
  return v ? "true" : "false";
}
std::string text_of(double v) {
  return fmt::format("{}", v);  // the shortest text that reads back to v
}
std::string text_of(std::string_view v) {
  return std::string(v);
}
// A C string (to_string(Runtime)) is text, not the pointer-to-bool conversion text_of(bool) would
// otherwise win with.
std::string text_of(const char* v) {
  return std::string(v);
}
std::string text_of(const std::optional<bool>& v) {
  return v ? text_of(*v) : "auto";
}
std::optional<bool> tristate(const OptionValue& v) {
  if (v.text == "auto") return std::nullopt;
  return v.text == "true";
}

using Set = void (*)(SimulationSetup&, const OptionValue&);
using Get = std::string (*)(const SimulationSetup&);

// One option whose value is a field of the setup: `field` is an expression of `s`, converted
// from the value's `as` member and back with text_of.
#define PIPETAB_FIELD(field, as)                                                  \
  static_cast<Set>([](SimulationSetup& s, const OptionValue& v) { field = as; }), \
      static_cast<Get>([](const SimulationSetup& s) { return text_of(field); })
// An enumeration set from its name (parse) and named back (to_string).
#define PIPETAB_ENUM(field, parse)                                                            \
  static_cast<Set>([](SimulationSetup& s, const OptionValue& v) { field = *parse(v.text); }), \
      static_cast<Get>([](const SimulationSetup& s) { return text_of(to_string(field)); })

constexpr auto kJob = OptionGroup::Job;
constexpr auto kLayout = OptionGroup::Layout;
constexpr auto kSim = OptionGroup::Simulation;
constexpr double kMaxSize = static_cast<double>(std::int64_t{1} << 20);

const RunOption kOptions[] = {
    // The job.
    {"seq_len",
     "--seq-len",
     kJob,
     OptionType::Integer,
     "tokens per sequence (the model file's seq_len where it has one)",
     1,
     1 << 26,
     {},
     true,
     1,
     "",
     PIPETAB_FIELD(s.job.seq_len, v.integer)},
    {"micro_batch",
     "--micro-batch",
     kJob,
     OptionType::Integer,
     "sequences per microbatch",
     1,
     1 << 20,
     {},
     true,
     1,
     "",
     PIPETAB_FIELD(s.job.micro_batch, v.integer)},
    {"global_batch",
     "--global-batch",
     kJob,
     OptionType::Integer,
     "sequences per iteration over all data-parallel replicas (sets the microbatches: global "
     "batch / (micro batch × DP); checked against -M when both are given)",
     1,
     1e12,
     {},
     true,
     1,
     "",
     PIPETAB_FIELD(s.job.global_batch, v.integer)},
    {"precision", "--precision", kJob, OptionType::Choice,
     "the matrix multiplies' format: fp8 runs the layer linears in FP8 and the rest in BF16", 0, 0,
     kPrecisions, true, 1, "", PIPETAB_ENUM(s.job.precision, parse_precision)},
    {"fp8_recipe", "--fp8-recipe", kJob, OptionType::Choice,
     "how FP8 scales its tensors (Transformer Engine's delayed, tensorwise (current) or blockwise; "
     "torchao's tensorwise or rowwise); carried and reported, priced alike today",
     0, 0, kFp8RecipeNames, true, 1, "", PIPETAB_ENUM(s.job.fp8_recipe, parse_fp8_recipe)},
    {"fp8_params",
     "--fp8-params",
     kJob,
     OptionType::Boolean,
     "keep the layer linears' weights in FP8 only (Megatron-Core's --fp8-param-gather, Transformer "
     "Engine's fp8_model_init): no 16-bit copy, and the distributed optimizer all-gathers them in "
     "FP8 (MXFP8, NVFP4: in BF16, then quantised)",
     0,
     0,
     {},
     true,
     1,
     "",
     PIPETAB_FIELD(s.job.fp8_params, v.boolean)},
    {"fp8_attention",
     "--fp8-attention",
     kJob,
     OptionType::Boolean,
     "run the fused attention in FP8 too (Transformer Engine's fp8_dpa, Megatron-Core's "
     "--fp8-dot-product-attention): cuDNN's FP8 kernel, with the tensorwise, delayed or mxfp8 "
     "recipe",
     0,
     0,
     {},
     true,
     1,
     "",
     PIPETAB_FIELD(s.job.fp8_attention, v.boolean)},
    {"dtype_bytes",
     "--dtype-bytes",
     kJob,
     OptionType::Integer,
     "bytes of an activation, weight or message element (0: the precision's; 2 for fp8)",
     0,
     16,
     {},
     true,
     1,
     "",
     PIPETAB_FIELD(s.job.dtype_bytes, v.integer)},
    {"recompute", "--recompute", kJob, OptionType::Choice,
     "activation recomputation: none, selective (the attention core), full (the layer), "
     "selective-op and every-other-layer (torchtitan's)",
     0, 0, kRecomputeNames, true, 1, "", PIPETAB_ENUM(s.job.recompute, parse_recompute)},
    {"mla_recompute_up_proj",
     "--mla-recompute-up-proj",
     kJob,
     OptionType::Boolean,
     "recompute latent attention's up-projections in the backward instead of keeping the heads' "
     "Q, K and V (Megatron-Core's --recompute-modules mla_up_proj; with recompute none or "
     "selective)",
     0,
     0,
     {},
     true,
     1,
     "",
     PIPETAB_FIELD(s.job.mla_recompute_up_proj, v.boolean)},
    {"dense_mlp_recompute",
     "--dense-mlp-recompute",
     kJob,
     OptionType::Boolean,
     "recompute the dense layers' MLP in the backward (Megatron-Core's --recompute-modules mlp: "
     "every layer of a dense model, a mixture of experts' dense layers; with recompute none or "
     "selective)",
     0,
     0,
     {},
     true,
     1,
     "",
     PIPETAB_FIELD(s.job.dense_mlp_recompute, v.boolean)},
    {"moe_recompute", "--moe-recompute", kJob, OptionType::Choice,
     "what a mixture of experts recomputes (Megatron-Core's --recompute-modules): none, moe_act, "
     "mlp",
     0, 0, kMoeRecomputeNames, true, 1, "", PIPETAB_ENUM(s.job.moe.recompute, parse_moe_recompute)},
    {"moe_recompute_norm",
     "--moe-recompute-norm",
     kJob,
     OptionType::Boolean,
     "recompute the norm before the experts in the backward instead of keeping its output "
     "(Megatron-Core's --recompute-modules layernorm; with recompute none or selective)",
     0,
     0,
     {},
     true,
     1,
     "",
     PIPETAB_FIELD(s.job.moe.recompute_norm, v.boolean)},
    {"moe_dispatcher", "--moe-dispatcher", kJob, OptionType::Choice,
     "how tokens reach their experts: alltoall (NCCL, a row per expert), deepep (once per node "
     "and GPU, then NVLink) or hybridep (deepep's movement after an all-gather of the routing map)",
     0, 0, kMoeDispatcherNames, true, 1, "",
     PIPETAB_ENUM(s.job.moe.dispatcher, parse_moe_dispatcher)},
    {"moe_capacity_factor",
     "--moe-capacity-factor",
     kJob,
     OptionType::Number,
     "tokens an expert takes as a multiple of its balanced share, padded to it (default: "
     "dropless)",
     0,
     1e3,
     {},
     true,
     1,
     "",
     static_cast<Set>(
         [](SimulationSetup& s, const OptionValue& v) { s.job.moe.capacity_factor = v.number; }),
     static_cast<Get>([](const SimulationSetup& s) {
       return s.job.moe.capacity_factor ? text_of(*s.job.moe.capacity_factor) : std::string();
     }),
     true},
    {"moe_imbalance",
     "--moe-imbalance",
     kJob,
     OptionType::Number,
     "the busiest expert-parallel rank's tokens over the mean (1: balanced)",
     1,
     1e6,
     {},
     true,
     1,
     "",
     PIPETAB_FIELD(s.job.moe.imbalance, v.number)},
    {"moe_fp8_dispatch",
     "--moe-fp8-dispatch",
     kJob,
     OptionType::Boolean,
     "the forward dispatch in FP8 (DeepSeek-V3 §3.3)",
     0,
     0,
     {},
     true,
     1,
     "",
     PIPETAB_FIELD(s.job.moe.fp8_dispatch, v.boolean)},
    {"moe_shared_expert_overlap",
     "--moe-shared-expert-overlap",
     kJob,
     OptionType::Boolean,
     "the shared experts run beside the all-to-alls (Megatron-Core's --moe-shared-expert-overlap)",
     0,
     0,
     {},
     true,
     1,
     "",
     PIPETAB_FIELD(s.job.moe.shared_expert_overlap, v.boolean)},
    {"grad_bytes_per_param",
     "--grad-bytes-per-param",
     kJob,
     OptionType::Number,
     "bytes of main gradient per parameter (4: fp32)",
     0,
     64,
     {},
     true,
     1,
     "",
     PIPETAB_FIELD(s.job.grad_bytes_per_param, v.number)},
    {"optimizer_bytes_per_param",
     "--optimizer-bytes-per-param",
     kJob,
     OptionType::Number,
     "bytes of optimizer state per parameter (12: fp32 master weights and Adam moments)",
     0,
     64,
     {},
     true,
     1,
     "",
     PIPETAB_FIELD(s.job.optimizer_bytes_per_param, v.number)},
    {"offload_activations",
     "--offload-activations",
     kJob,
     OptionType::Number,
     "the share of each device's activations copied to host memory after their forward and "
     "reloaded before their backward (PipeOffload's ratio: the longest-lived stages first); needs "
     "a system with [host]",
     0,
     1,
     {},
     true,
     1,
     "",
     PIPETAB_FIELD(s.job.offload_activations, v.number)},
    {"offload_layers",
     "--offload-layers",
     kJob,
     OptionType::Integer,
     "layers per stage whose activations Transformer Engine's CPU offload copies to host memory "
     "as each layer's forward ends and back a layer ahead of its backward (Megatron-LM's "
     "--cpu-offloading-num-layers); needs a system with [host]",
     0,
     1 << 20,
     {},
     true,
     1,
     "",
     PIPETAB_FIELD(s.job.offload_layers, v.integer)},
    {"offload_modules",
     "--offload-modules",
     kJob,
     OptionType::Text,
     "modules whose saved inputs Megatron-Core's fine-grained activation offload copies to host "
     "memory after their forward and back one module ahead of their backward, joined by '+': "
     "attn_norm, qkv_linear, core_attn, attn_proj, mlp_norm, expert_fc1, moe_act, or none "
     "(--fine-grained-activation-offloading --offload-modules); needs a system with [host]",
     0,
     0,
     {},
     true,
     1,
     "",
     static_cast<Set>([](SimulationSetup& s, const OptionValue& v) {
       const OffloadModulesParse parsed = parse_offload_modules(v.text);
       if (!parsed.error.empty()) throw Error(parsed.error);
       s.job.offload_modules = parsed.modules;
     }),
     static_cast<Get>(
         [](const SimulationSetup& s) { return offload_modules_text(s.job.offload_modules); })},
    {"offload_streams",
     "--offload-streams",
     kJob,
     OptionType::Integer,
     "copy streams per device for activation offload: 2, one each way (Megatron-Core's), or 1, "
     "both ways on one in issue order (PipeOffload's)",
     1,
     2,
     {},
     true,
     1,
     "",
     PIPETAB_FIELD(s.job.offload_streams, v.integer)},
    {"distributed_optimizer",
     "--distributed-optimizer",
     kJob,
     OptionType::Boolean,
     "shard the optimizer over the data-parallel replicas (reduce-scatter the gradients, "
     "all-gather the parameters)",
     0,
     0,
     {},
     true,
     1,
     "",
     PIPETAB_FIELD(s.job.distributed_optimizer, v.boolean)},
    {"tp_overlap", "--tp-overlap", kJob, OptionType::Choice,
     "tensor-parallel collectives that run beside a GEMM: none (Megatron-LM until 2021-09), "
     "backward (Megatron-LM since), all (Megatron-Core --tp-comm-overlap)",
     0, 0, kOverlapNames, true, 1, "", PIPETAB_ENUM(s.job.tp_overlap, parse_overlap)},
    {"a2a_overlap",
     "--a2a-overlap",
     kJob,
     OptionType::Boolean,
     "Megatron-Core's 1F1B all-to-all overlap (--overlap-moe-expert-parallel-comm): the "
     "interleaved schedule's steady-state forward and the backward after it (without pipelining, "
     "1F1B's: each forward and the previous microbatch's backward) run as one step, each one's "
     "expert all-to-alls under the other's compute (DualPipe's F&B pairs always do)",
     0,
     0,
     {},
     true,
     1,
     "",
     PIPETAB_FIELD(s.job.a2a_overlap, v.boolean)},
    {"dp_overlap",
     "--dp-overlap",
     kJob,
     OptionType::Boolean,
     "reduce data-parallel gradients in buckets while the last backward passes run (torch DDP, "
     "Megatron-Core overlap_grad_reduce)",
     0,
     0,
     {},
     true,
     1,
     "",
     PIPETAB_FIELD(s.job.dp_overlap, v.boolean)},
    {"dp_bucket_bytes",
     "--dp-bucket-mb",
     kJob,
     OptionType::Number,
     "gradient bucket size for --dp-overlap (torch DDP's default 25 MB)",
     1e3,
     1e15,
     {},
     true,
     1e6,
     "MB",
     PIPETAB_FIELD(s.job.dp_bucket_bytes, v.number)},
    {"stack", "--stack", kJob, OptionType::Choice,
     "a named software stack (`pipetab list stacks`): sets the stack's options below, under any "
     "of them given beside it",
     0, 0, stack_names(), true, 1, "", PIPETAB_FIELD(s.job.stack.name, v.text)},
    {"flash_attention",
     "--flash-attention",
     kJob,
     OptionType::Boolean,
     "fused attention (FlashAttention, cuDNN, SDPA): no s×s tensors kept, the backward recomputes "
     "QKᵀ",
     0,
     0,
     {},
     true,
     1,
     "",
     PIPETAB_FIELD(s.job.stack.flash_attention, v.boolean)},
    {"fused_elementwise",
     "--fused-elementwise",
     kJob,
     OptionType::Boolean,
     "element-wise work in fused kernels (Megatron-LM, Transformer Engine, torch.compile); off: "
     "eager PyTorch",
     0,
     0,
     {},
     true,
     1,
     "",
     PIPETAB_FIELD(s.job.stack.fused_elementwise, v.boolean)},
    {"fused_loss",
     "--fused-loss",
     kJob,
     OptionType::Boolean,
     "the loss's cross entropy fused (Megatron, flash-attn's xentropy: 4 bytes per logit kept); "
     "off: eager F.cross_entropy on fp32 logits (torchtitan, compiled or not: 10 bytes)",
     0,
     0,
     {},
     true,
     1,
     "",
     PIPETAB_FIELD(s.job.stack.fused_loss, v.boolean)},
    {"fp8_saved_inputs",
     "--fp8-saved-inputs",
     kJob,
     OptionType::Boolean,
     "under FP8, the GEMMs keep their inputs for the weight gradient in FP8 (Transformer "
     "Engine); off: in 16 bits, cast again in the backward (torchao's Float8Linear)",
     0,
     0,
     {},
     true,
     1,
     "",
     PIPETAB_FIELD(s.job.stack.fp8_saved_inputs, v.boolean)},
    {"fused_multihot",
     "--fused-multihot",
     kJob,
     OptionType::Boolean,
     "DeepEP's received expert indices made a multi-hot map in one fused kernel (Megatron-Core "
     "with --enable-experimental, NeMo AutoModel); off: Megatron-Core's default, which waits for "
     "the device three times after every forward dispatch",
     0,
     0,
     {},
     true,
     1,
     "",
     PIPETAB_FIELD(s.job.stack.fused_multihot, v.boolean)},
    {"grad_accumulation_fusion",
     "--grad-accumulation-fusion",
     kJob,
     OptionType::Boolean,
     "weight-gradient GEMMs add into the main gradients themselves (Megatron-LM since late 2021)",
     0,
     0,
     {},
     true,
     1,
     "",
     PIPETAB_FIELD(s.job.stack.grad_accumulation_fusion, v.boolean)},
    {"attention_kernel", "--attention-kernel", kJob, OptionType::Choice,
     "the fused attention kernel: flash2, flash3, cudnn, triton, or auto (Transformer Engine's "
     "choice: cuDNN from compute capability 9.0, FlashAttention-2 before)",
     0, 0, kAttentionKernelChoices, true, 1, "",
     static_cast<Set>([](SimulationSetup& s, const OptionValue& v) {
       s.job.stack.attention_kernel = parse_attention_kernel(v.text);
     }),
     static_cast<Get>([](const SimulationSetup& s) {
       return s.job.stack.attention_kernel ? text_of(to_string(*s.job.stack.attention_kernel))
                                           : std::string("auto");
     })},
    {"autocast",
     "--autocast",
     kJob,
     OptionType::Boolean,
     "torch.autocast around the model: the math path's softmax in fp32, cast to and from it",
     0,
     0,
     {},
     true,
     1,
     "",
     PIPETAB_FIELD(s.job.stack.autocast, v.boolean)},
    {"cuda_graphs",
     "--cuda-graphs",
     kJob,
     OptionType::Boolean,
     "passes replayed as CUDA graphs: the host never holds the GPU back",
     0,
     0,
     {},
     true,
     1,
     "",
     PIPETAB_FIELD(s.job.stack.cuda_graphs, v.boolean)},
    {"cuda_graph_scope",
     "--cuda-graph-scope",
     kJob,
     OptionType::Text,
     "modules Transformer Engine's per-layer CUDA graphs replay, joined by '+': attn, mlp, "
     "moe_router, moe_preprocess (with moe_router), mamba, or none (Megatron-Core's "
     "--cuda-graph-impl transformer_engine --cuda-graph-scope); the host issues each captured "
     "stretch as one call",
     0,
     0,
     {},
     true,
     1,
     "",
     static_cast<Set>([](SimulationSetup& s, const OptionValue& v) {
       const NameSetParse parsed = parse_name_set(kGraphModuleNames, v.text, "module");
       if (!parsed.error.empty()) throw Error(parsed.error);
       s.job.stack.graph_modules = static_cast<std::uint8_t>(parsed.bits);
     }),
     static_cast<Get>([](const SimulationSetup& s) {
       return name_set_text(kGraphModuleNames, s.job.stack.graph_modules);
     })},
    {"nccl_nvls",
     "--nccl-nvls",
     kJob,
     OptionType::Boolean,
     "NCCL may run NVLink SHARP where the node has it (NCCL_NVLS_ENABLE); off, NVLS's buffers "
     "are not held",
     0,
     0,
     {},
     true,
     1,
     "",
     PIPETAB_FIELD(s.job.stack.nccl_nvls, v.boolean)},

    // The layout.
    {"tensor_parallel",
     "--tp",
     kLayout,
     OptionType::Integer,
     "tensor-parallel ranks per stage",
     1,
     kMaxSize,
     {},
     true,
     1,
     "",
     PIPETAB_FIELD(s.layout.tp, v.integer)},
    {"sequence_parallel",
     "--sequence-parallel",
     kLayout,
     OptionType::Boolean,
     "sequence parallelism with --tp (Korthikanti et al. 2022): norms and dropouts on 1/tp of the "
     "sequence, all-gathers and reduce-scatters instead of all-reduces",
     0,
     0,
     {},
     true,
     1,
     "",
     PIPETAB_FIELD(s.layout.sequence_parallel, v.boolean)},
    {"context_parallel",
     "--cp",
     kLayout,
     OptionType::Integer,
     "context-parallel ranks per stage: each runs seq_len/cp tokens of every sequence and "
     "exchanges keys and values in attention",
     1,
     kMaxSize,
     {},
     true,
     1,
     "",
     PIPETAB_FIELD(s.layout.cp, v.integer)},
    {"cp_method", "--cp-method", kLayout, OptionType::Choice,
     "how context-parallel ranks exchange keys and values: ring (Transformer Engine's p2p, "
     "Megatron's default), allgather (torchtitan's default, Llama 3), a2a (Ulysses all-to-all)",
     0, 0, kCpMethodNames, true, 1, "", PIPETAB_ENUM(s.layout.cp_method, parse_cp_method)},
    {"expert_parallel",
     "--ep",
     kLayout,
     OptionType::Integer,
     "expert-parallel ranks: each MoE layer's experts spread over them, drawn from a stage's --tp "
     "× --cp × --dp ranks (Megatron-Core's parallel folding); tokens reach them by all-to-all",
     1,
     kMaxSize,
     {},
     true,
     1,
     "",
     PIPETAB_FIELD(s.layout.ep, v.integer)},
    {"expert_tensor_parallel",
     "--etp",
     kLayout,
     OptionType::Integer,
     "expert-tensor-parallel ranks: each expert's matrices split over them (--ep × --etp must "
     "divide --tp × --cp × --dp)",
     1,
     kMaxSize,
     {},
     true,
     1,
     "",
     PIPETAB_FIELD(s.layout.etp, v.integer)},
    {"data_parallel",
     "--dp",
     kLayout,
     OptionType::Integer,
     "data-parallel replicas of the pipeline (gradient all-reduce; with --fsdp the ranks "
     "parameters are sharded over)",
     1,
     kMaxDataParallel,
     {},
     true,
     1,
     "",
     PIPETAB_FIELD(s.layout.dp, v.integer)},
    {"fsdp",
     "--fsdp",
     kLayout,
     OptionType::Boolean,
     "fully sharded data parallelism (FSDP2, ZeRO-3): parameters, gradients and optimizer state "
     "sharded over the --dp × --cp ranks, each unit (a stage when pipelined, a transformer block "
     "without) all-gathered before use and its gradients reduce-scattered after",
     0,
     0,
     {},
     true,
     1,
     "",
     PIPETAB_FIELD(s.layout.fsdp.enabled, v.boolean)},
    {"fsdp_shard",
     "--fsdp-shard",
     kLayout,
     OptionType::Integer,
     "HSDP: shard over groups of this many ranks and replicate across them (default: shard over "
     "all --dp × --cp ranks)",
     2,
     1 << 30,
     {},
     true,
     1,
     "",
     PIPETAB_FIELD(s.layout.fsdp.shard, v.integer)},
    {"reshard_after_forward",
     "--reshard-after-forward",
     kLayout,
     OptionType::Tristate,
     "FSDP: free a unit's gathered parameters after its forward and gather them again for the "
     "backward (true), or keep them (false); auto: torchtitan's default, true without pipelining "
     "and false with it",
     0,
     0,
     {},
     true,
     1,
     "",
     static_cast<Set>([](SimulationSetup& s, const OptionValue& v) {
       s.layout.fsdp.reshard_after_forward = tristate(v);
     }),
     static_cast<Get>(
         [](const SimulationSetup& s) { return text_of(s.layout.fsdp.reshard_after_forward); })},
    {"fsdp_grad_sync", "--fsdp-grad-sync", kLayout, OptionType::Choice,
     "FSDP: reduce-scatter gradients once per step after a unit's last backward, holding them "
     "unsharded in the reduce dtype until then (step: FSDP2's set_requires_gradient_sync(False)), "
     "or after every microbatch's (microbatch); auto: torchtitan's, step with pipelining and "
     "microbatch without",
     0, 0, kGradSyncNames, true, 1, "", PIPETAB_ENUM(s.layout.fsdp.grad_sync, parse_grad_sync)},
    {"fsdp_fp8_all_gather",
     "--fsdp-fp8-all-gather",
     kLayout,
     OptionType::Boolean,
     "FSDP: all-gather parameters in FP8 (torchtitan's enable_fsdp_float8_all_gather): one byte "
     "per parameter",
     0,
     0,
     {},
     true,
     1,
     "",
     PIPETAB_FIELD(s.layout.fsdp.fp8_all_gather, v.boolean)},
    {"fsdp_impl", "--fsdp-impl", kLayout, OptionType::Choice,
     "FSDP: whose — fsdp2 (PyTorch, torchtitan) copies each gathered unit out of the all-gather's "
     "buffer on the compute stream and the gradients into the reduce-scatter's; megatron "
     "(Megatron-FSDP) gathers and reduces in place; fsdp1 (PyTorch's FullyShardedDataParallel) "
     "gathers into the flat parameter its parameters view",
     0, 0, kFsdpImplNames, true, 1, "", PIPETAB_ENUM(s.layout.fsdp.impl, parse_fsdp_impl)},
    {"pipeline_layout",
     "--pipeline-layout",
     kLayout,
     OptionType::Text,
     "the stages' contents in Megatron-Core's notation: E embedding, t transformer layer, m MTP "
     "module, L loss, | between stages, X*n and (...)*n repeat, e.g. \"Ett|(ttt|)*30ttL\" "
     "(default: layers split evenly, MTP modules last)",
     0,
     0,
     {},
     true,
     1,
     "",
     PIPETAB_FIELD(s.layout.pipeline_layout, v.text)},
    {"balance_embedding",
     "--balance-embedding",
     kLayout,
     OptionType::Boolean,
     "count the embedding and the output layer as one layer each when splitting the layers "
     "(Megatron-LM's --account-for-embedding-in-pipeline-split and ...-loss-...)",
     0,
     0,
     {},
     true,
     1,
     "",
     PIPETAB_FIELD(s.layout.balance_embedding, v.boolean)},
    // The pipeline as job files name it; commands give it as -S, -v and the schedule's name.
    {"pipeline_parallel",
     "",
     kLayout,
     OptionType::Integer,
     "pipeline stages per replica (the command line's -S)",
     1,
     kMaxSize,
     {},
     true,
     1,
     "",
     PIPETAB_FIELD(s.layout.pp, v.integer)},
    {"chunks",
     "",
     kLayout,
     OptionType::Integer,
     "virtual chunks per device (the command line's -v)",
     1,
     1 << 16,
     {},
     true,
     1,
     "",
     PIPETAB_FIELD(s.layout.chunks, v.integer)},
    {"schedule",
     "",
     kLayout,
     OptionType::Text,
     "the pipeline schedule's name (pipetab list; PyTorch's names too)",
     0,
     0,
     {},
     true,
     1,
     "",
     PIPETAB_FIELD(s.layout.schedule, v.text)},

    // How the simulation runs.
    {"runtime", "--runtime", kSim, OptionType::Choice,
     "how the runtime waits on pipeline transfers: auto (the table's own runtime: megatron for "
     "1f1b and interleaved, pytorch for any other table PyTorch runs, a file's own communication "
     "order included, dualpipe for DualPipe's two pipelines, async for other two-pipeline "
     "schedules), megatron (blocking batched send/receive after each op), dualpipe (DeepSeek's "
     "DualPipe code: a chunk waits for the previous one's sends, receives posted ahead, F&B pairs "
     "overlapped), pytorch (PyTorch's runtime: sends and receives posted in its action order, "
     "receives waited by the op that needs them, one transfer at a time per pair of ranks), async "
     "(the idealisation: eager, only the consumer waits)",
     0, 0, kRuntimes, true, 1, "", static_cast<Set>([](SimulationSetup& s, const OptionValue& v) {
       s.lowering.runtime = *parse_runtime(v.text);
     }),
     static_cast<Get>(
         [](const SimulationSetup& s) { return text_of(to_string(s.lowering.runtime)); })},
    {"contention",
     "--no-contention",
     kSim,
     OptionType::Boolean,
     "transfers do not share link bandwidth (each takes latency + bytes/bandwidth alone)",
     0,
     0,
     {},
     false,
     1,
     "",
     PIPETAB_FIELD(s.options.contention, v.boolean)},
    {"blocking_send",
     "--blocking-send",
     kSim,
     OptionType::Boolean,
     "a device's compute waits for the activations and gradients it sends",
     0,
     0,
     {},
     true,
     1,
     "",
     PIPETAB_FIELD(s.options.blocking_send, v.boolean)},
    {"overheads",
     "--no-overheads",
     kSim,
     OptionType::Boolean,
     "leave out the device's overheads no kernel carries: the host's time per pipeline step and "
     "per kernel launch, and compute slowed by communication (system keys step_overhead_s, "
     "host_launch_s, comm_slowdown)",
     0,
     0,
     {},
     false,
     1,
     "",
     PIPETAB_FIELD(s.lowering.overheads, v.boolean)},
    {"optimizer",
     "--no-optimizer",
     kSim,
     OptionType::Boolean,
     "simulate the pipeline and its gradient reductions only: no end-of-iteration synchronisation "
     "and optimizer step",
     0,
     0,
     {},
     false,
     1,
     "",
     PIPETAB_FIELD(s.lowering.iteration.optimizer, v.boolean)},
    {"nccl_buffsize",
     "--nccl-buffsize",
     kSim,
     OptionType::Number,
     "NCCL's buffer per pair of ranks in bytes (NCCL_BUFFSIZE): under the pytorch runtime a "
     "pipeline message of at most this size is sent without waiting for its receive; a larger one "
     "waits until the receive is posted",
     0,
     1e18,
     {},
     true,
     1,
     "",
     PIPETAB_FIELD(s.lowering.nccl.buffsize, v.number)},
    {"nccl_p2p_net_chunksize",
     "--nccl-p2p-net-chunksize",
     kSim,
     OptionType::Number,
     "NCCL's chunk for sends and receives across nodes in bytes (NCCL_P2P_NET_CHUNKSIZE, 131072 by "
     "default): each GPU holds two shared pools of 16 chunks per network channel outside the "
     "caching allocator, which the memory account counts",
     1,
     1e12,
     {},
     true,
     1,
     "",
     PIPETAB_FIELD(s.lowering.nccl.p2p_net_chunksize, v.number)},
    {"memory_reserve",
     "--memory-reserve",
     kSim,
     OptionType::Number,
     "share of each device's memory kept back instead of the modelled CUDA context and NCCL "
     "buffers: simulate's warnings, compare's ranks, plan and tune judge a fit against the "
     "rest (unset: the system's [device] memory_reserve, else what its [device] context_bytes "
     "and [nccl] channels hold outside the allocator for the layout, else 0.05)",
     0,
     0.9,
     {},
     true,
     1,
     "",
     static_cast<Set>([](SimulationSetup& s, const OptionValue& v) {
       s.system.device.memory_reserve = v.number;
     }),
     static_cast<Get>([](const SimulationSetup& s) {
       const auto& reserve = s.system.device.memory_reserve;
       return reserve ? text_of(*reserve) : std::string();
     })},
    {"flop_count", "--flop-count", kSim, OptionType::Choice,
     "how MFU counts the model's FLOPs: palm (6N + 12·L·h·s per token, attention over the full "
     "square, as PaLM and torchtitan count them) or causal (6N + 6·L·h·s, the causal mask's half, "
     "as Megatron-LM counts since 2025-03); N the parameters a token passes through, never "
     "recomputation. HFU counts the FLOPs executed",
     0, 0, kFlopCountNames, true, 1, "", PIPETAB_ENUM(s.flop_count, parse_flop_count)},
    {"collective_scale",
     "--collective-scale",
     kSim,
     OptionType::Number,
     "multiply the bytes of every gradient collective (a sensitivity knob, e.g. 0.7 for a "
     "compressed all-reduce)",
     1e-6,
     1e6,
     {},
     true,
     1,
     "",
     PIPETAB_FIELD(s.lowering.collective_scale, v.number)},
};

#undef PIPETAB_FIELD
#undef PIPETAB_ENUM

std::string range_text(const RunOption& o) {
  if (o.type == OptionType::Integer) {
    return fmt::format("{} to {}", static_cast<std::int64_t>(o.min),
                       static_cast<std::int64_t>(o.max));
  }
  return o.above_min ? fmt::format("above {:g}, up to {:g}", o.min, o.max)
                     : fmt::format("{:g} to {:g}", o.min, o.max);
}

}  // namespace

std::span<const RunOption> run_options() {
  return kOptions;
}

const RunOption* find_run_option(std::string_view key) {
  for (const auto& o : kOptions) {
    if (o.key == key) return &o;
  }
  return nullptr;
}

std::string_view to_string(OptionGroup group) {
  switch (group) {
    case OptionGroup::Job:
      return "job";
    case OptionGroup::Layout:
      return "layout";
    case OptionGroup::Simulation:
      return "simulation";
  }
  return "";
}

std::string default_text(const RunOption& option, const SimulationSetup& defaults) {
  std::string text = option.get(defaults);
  try {
    if (!text.empty()) (void)parse_option_value(option, text);
  } catch (const Error&) {
    text.clear();
  }
  return text;
}

std::string_view to_string(OptionType type) {
  switch (type) {
    case OptionType::Integer:
      return "integer";
    case OptionType::Number:
      return "number";
    case OptionType::Boolean:
      return "boolean";
    case OptionType::Tristate:
      return "tristate";
    case OptionType::Choice:
      return "choice";
    case OptionType::Text:
      return "text";
  }
  return "";
}

OptionValue parse_option_value(const RunOption& o, std::string_view text) {
  OptionValue v;
  switch (o.type) {
    case OptionType::Integer: {
      const auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), v.integer);
      if (text.empty() || ec != std::errc{} || ptr != text.data() + text.size() ||
          static_cast<double>(v.integer) < o.min || static_cast<double>(v.integer) > o.max) {
        throw Error(fmt::format("expected a whole number from {}", range_text(o)));
      }
      v.number = static_cast<double>(v.integer);
      return v;
    }
    case OptionType::Number: {
      const auto [ptr, ec] = parse_double(text.data(), text.data() + text.size(), v.number);
      if (text.empty() || ec != std::errc{} || ptr != text.data() + text.size() ||
          !(v.number >= o.min && v.number <= o.max) || (o.above_min && !(v.number > o.min))) {
        throw Error(
            fmt::format("expected a number {}{}", o.above_min ? "" : "from ", range_text(o)));
      }
      return v;
    }
    case OptionType::Boolean:
    case OptionType::Tristate: {
      if (text == "true" || text == "on" || text == "yes" || text == "1") {
        v.boolean = true;
        v.text = "true";
      } else if (text == "false" || text == "off" || text == "no" || text == "0") {
        v.text = "false";
      } else if (o.type == OptionType::Tristate && text == "auto") {
        v.text = "auto";
      } else {
        throw Error(o.type == OptionType::Boolean ? "expected true or false"
                                                  : "expected auto, true or false");
      }
      return v;
    }
    case OptionType::Choice: {
      if (std::find(o.choices.begin(), o.choices.end(), text) == o.choices.end()) {
        std::string names;
        for (const auto c : o.choices)
          names += fmt::format("{}{}", names.empty() ? "" : ", ", c);
        throw Error(fmt::format("expected one of {}", names));
      }
      v.text = std::string(text);
      return v;
    }
    case OptionType::Text:
      // Empty text once passed as "unset" silently (--pipeline-layout ""): leaving the option
      // out says that.
      if (text.empty())
        throw Error("expected text, not nothing (leave the option out for its default)");
      v.text = std::string(text);
      return v;
  }
  return v;
}

namespace {

const char* type_name(SettingType type) {
  switch (type) {
    case SettingType::Text:
      return "text";
    case SettingType::Integer:
      return "an integer";
    case SettingType::Float:
      return "a floating-point number";
    case SettingType::Boolean:
      return "a boolean";
    case SettingType::String:
      return "a string";
  }
  return "a value";
}

// A typed value of a file must be of a type the option takes, as the file's own reader would
// have checked it; text (a flag, an argument list) is read as the option takes it.
void require_type(const RunOption& o, const Setting& setting) {
  const SettingType t = setting.type;
  if (t == SettingType::Text) return;
  bool admitted = false;
  const char* expected = "";
  switch (o.type) {
    case OptionType::Integer:
      admitted = t == SettingType::Integer;
      expected = "an integer";
      break;
    case OptionType::Number:
      admitted = t == SettingType::Integer || t == SettingType::Float;
      expected = "a number";
      break;
    case OptionType::Boolean:
      admitted = t == SettingType::Boolean;
      expected = "true or false";
      break;
    case OptionType::Tristate:
      admitted = t == SettingType::Boolean || (t == SettingType::String && setting.value == "auto");
      expected = "true, false or \"auto\"";
      break;
    case OptionType::Choice:
    case OptionType::Text:
      admitted = t == SettingType::String;
      expected = "a string";
      break;
  }
  if (!admitted) throw Error(fmt::format("expected {}, got {}", expected, type_name(t)));
}

}  // namespace

void apply_setting(SimulationSetup& setup, const Setting& setting) {
  const std::string where = setting.origin.empty() ? "" : setting.origin + ": ";
  const RunOption* option = find_run_option(setting.key);
  if (option == nullptr) {
    std::vector<std::string_view> keys;
    for (const auto& o : kOptions)
      keys.push_back(o.key);
    std::vector<std::string> nearest;
    for (const auto i : nearest_names(keys, std::array{std::string_view(setting.key)}, 2))
      nearest.emplace_back(keys[i]);
    throw Error(fmt::format("{}unknown option '{}'{}", where, setting.key, did_you_mean(nearest)));
  }
  try {
    require_type(*option, setting);
  } catch (const Error& e) {
    throw Error(fmt::format("{}{}", where, e.what()));
  }
  try {
    option->set(setup, parse_option_value(*option, setting.value));
  } catch (const Error& e) {
    throw Error(fmt::format("{}{} = '{}': {}", where, setting.key, setting.value, e.what()));
  }
  if (option->key == "stack") {
    // A named stack is its settings (model/stacks.cpp), applied where it is named.
    const StackPreset* preset = find_stack_preset(setting.value);
    for (Setting s : preset->settings) {
      s.origin = fmt::format("{}stack '{}'", where, preset->name);
      apply_setting(setup, s);
    }
  }
}

void apply_settings(SimulationSetup& setup, std::span<const Setting> settings) {
  // A stack first, so that the settings given beside it win over its own whatever their order.
  for (const auto& s : settings) {
    if (s.key == "stack") apply_setting(setup, s);
  }
  for (const auto& s : settings) {
    if (s.key != "stack") apply_setting(setup, s);
  }
}

void rethrow_with_origin(const OptionError& e, std::span<const Setting> applied) {
  for (auto it = applied.rbegin(); it != applied.rend(); ++it) {
    if (it->key != e.key()) continue;
    // A flag's or a keyword's message names it already; a file's line is worth naming.
    if (it->origin.find(':') != std::string::npos)
      throw ParamError(fmt::format("{}: {}", it->origin, e.what()));
    break;
  }
  throw e;
}

void require_valid(const SimulationSetup& setup, std::span<const Setting> applied) {
  try {
    require_runnable(setup.model, setup.job, setup.layout);
    require_supported(setup.system, setup.job, setup.layout, setup.lowering);
  } catch (const OptionError& e) {
    rethrow_with_origin(e, applied);
  }
}

SimulationSetup default_setup(ModelConfig model, SystemConfig system) {
  SimulationSetup setup;
  setup.lowering.runtime = Runtime::Auto;
  apply_settings(setup, model.defaults);
  setup.model = std::move(model);
  setup.system = std::move(system);
  return setup;
}

std::vector<Setting> changed_settings(const SimulationSetup& setup) {
  SimulationSetup defaults;
  defaults.lowering.runtime = Runtime::Auto;
  std::vector<Setting> out;
  for (const auto& o : kOptions) {
    const std::string value = o.get(setup);
    if (value != o.get(defaults)) out.push_back({std::string(o.key), value, ""});
  }
  return out;
}

}  // namespace pipetab
