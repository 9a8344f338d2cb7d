// The software stack: how a framework runs the layers of a job on a device, apart from what the
// job asks for (model/job.hpp) and what the hardware can do (system/system.hpp). Its attention
// kernel, whether element-wise work is fused, autocast's casts, CUDA graphs. Named stacks
// (`pipetab list stacks`) are bundles of these settings, each from its framework's code and
// docs; a setting given beside a stack (a flag, a key of the same file) wins over the stack's.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "pipetab/attention_kernel.hpp"
#include "pipetab/setting.hpp"

namespace pipetab {

struct DeviceSpec;

/// A module Transformer Engine's per-layer CUDA graphs capture, forward and backward (Megatron-
/// Core's --cuda-graph-impl transformer_engine --cuda-graph-scope; CudaGraphScope,
/// transformer/enums.py, and TransformerConfig's rules, transformer_config.py @d728871). One bit
/// each in Stack::graph_modules. Megatron-Core's `moe` (the whole MoE layer, drop-padding only)
/// is not modelled.
enum class GraphModule : std::uint8_t {
  Attn,           ///< the attention block: the input norm to the residual add
  Mlp,            ///< a dense layer's MLP block: the pre-MLP norm to the residual add
  MoeRouter,      ///< a mixture-of-experts layer's pre-MLP norm, router, top-k and aux loss
  MoePreprocess,  ///< its dispatcher's work before the dispatch (with moe_router only)
  Mamba,          ///< a Mamba-2 mixer block
};

inline constexpr std::array<std::string_view, 5> kGraphModuleNames{"attn", "mlp", "moe_router",
                                                                   "moe_preprocess", "mamba"};

/// Stack::graph_modules's bit for `m`.
constexpr std::uint8_t graph_bit(GraphModule m) {
  return static_cast<std::uint8_t>(1u << static_cast<unsigned>(m));
}

struct Stack {
  /// The named stack these settings started from ("": none named; pipetab's defaults).
  std::string name;
  /// Fused attention (no s×s tensors kept; the backward recomputes QKᵀ); false: the math path
  /// (QKᵀ, softmax and ·V as separate kernels, the scores in memory).
  bool flash_attention = false;
  /// The fused kernel; none: Transformer Engine's choice (resolve_attention_kernel).
  std::optional<AttentionKernel> attention_kernel;
  /// Element-wise work in fused kernels (Megatron-LM's and Transformer Engine's, or
  /// torch.compile's); false: eager PyTorch, one kernel per op.
  bool fused_elementwise = true;
  /// The loss's cross entropy in fused kernels that keep 4 bytes per logit (Megatron's
  /// vocabulary-parallel cross entropy, flash-attn's xentropy); false: eager F.cross_entropy on
  /// fp32 logits, 10 bytes per logit kept (torchtitan, compiled or not: torch.compile wraps the
  /// transformer blocks, not the loss). Eager element-wise work (fused_elementwise false) runs
  /// the loss eagerly too.
  bool fused_loss = true;
  /// Weight-gradient GEMMs add into the main gradients themselves (Megatron-LM since late 2021);
  /// false: a separate `main_grad.add_`.
  bool grad_accumulation_fusion = true;
  /// torch.autocast around the model: norms and softmax run in fp32 (autocast's fp32 op list),
  /// their outputs written in fp32 and cast back to 16 bits by the next matrix multiply.
  bool autocast = false;
  /// Under an FP8 recipe the GEMMs keep the inputs their weight gradients need in FP8, one byte
  /// per value, as they multiplied them (Transformer Engine's Linear, LayerNormLinear,
  /// LayerNormMLP and GroupedLinear save the quantised input, `saved_inputmat`); false: in 16
  /// bits, cast again in the backward (torchao's Float8Linear saves `input_hp`).
  bool fp8_saved_inputs = true;
  /// DeepEP's received top-k expert indices made the multi-hot routing map in one fused kernel
  /// (Megatron-Core's fused_indices_to_multihot, which needs --enable-experimental; NeMo
  /// AutoModel's DeepEP experts); false: Megatron-Core's default, PyTorch's boolean indexing and
  /// repeat_interleave, whose three outputs are sized on the host, each after a wait for the
  /// device (model/moe.cpp, indices_to_multihot).
  bool fused_multihot = true;
  /// The passes replayed as CUDA graphs: the host issues a graph, not each kernel, so it never
  /// holds the GPU back (Megatron-Core's --enable-cuda-graph, torch.compile's reduce-overhead).
  bool cuda_graphs = false;
  /// Without cuda_graphs: the modules Transformer Engine's per-layer graphs replay (GraphModule
  /// bits): the host issues each captured stretch of a pass as one call, not its kernels.
  std::uint8_t graph_modules = 0;
  /// NCCL may run NVLink SHARP (NVLS) where the node's switch has it: NCCL's default
  /// (NCCL_NVLS_ENABLE=2); false where the framework's recipes set NCCL_NVLS_ENABLE=0, which
  /// spares NVLS's buffers (model/outside_allocator.hpp) and runs the all-reduces as rings.
  bool nccl_nvls = true;
  friend bool operator==(const Stack&, const Stack&) = default;
};

/// A named stack: what it sets, and where each value comes from.
struct StackPreset {
  std::string_view name;
  std::string_view description;  ///< one line (`pipetab list stacks`)
  std::string_view source;       ///< the code and docs its settings are read from
  /// Settings of run options (sim/options.hpp), applied before any other setting of the same
  /// place; options outside the Stack too (fsdp_impl) where the framework fixes them.
  std::vector<Setting> settings;
};

/// Every named stack, in the order `pipetab list stacks` prints them.
std::span<const StackPreset> stack_presets();

/// Their names, in the same order (the `stack` option's choices).
std::span<const std::string_view> stack_names();

/// The named stack `name`, or null.
const StackPreset* find_stack_preset(std::string_view name);

/// The fused attention kernel a stack runs on a device: its own when it names one, else
/// Transformer Engine's choice: cuDNN's fused attention from compute capability 9.0 (Hopper) on,
/// FlashAttention-2 before ("Transformer Engine prefers cuDNN flash attention on Hopper+
/// architectures, and Tri Dao flash attention on pre-Hopper architectures", NeMo
/// docs/source/performance/memory_optimizations.rst, NVIDIA/NeMo#9188). Throws ParamError when
/// the device gives no figures for that kernel.
AttentionKernel resolve_attention_kernel(const Stack& stack, const DeviceSpec& device,
                                         std::string_view system_name);

/// What the stack does on this device, in words (simulate's text and JSON): its name, the
/// attention (the math path, or the fused kernel and who chose it), element-wise work, autocast,
/// CUDA graphs. Throws as resolve_attention_kernel does.
std::string describe_stack(const Stack& stack, const DeviceSpec& device,
                           std::string_view system_name);

}  // namespace pipetab
