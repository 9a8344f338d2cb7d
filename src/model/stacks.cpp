// The named software stacks (model/stack.hpp). Each value is read in the framework's code or
// docs, cited beside it; adding a stack is one entry here.
#include <algorithm>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "pipetab/error.hpp"
#include "pipetab/model/stack.hpp"
#include "pipetab/names.hpp"
#include "pipetab/system/system.hpp"

namespace pipetab {
namespace {

Setting set(std::string_view key, std::string_view value) {
  return {std::string(key), std::string(value), "", SettingType::Text};
}

// Megatron-Core with Transformer Engine (Megatron-LM since core_r0.5, NeMo 2, Megatron-Bridge):
// TE's fused attention (DotProductAttention picks the kernel: resolve_attention_kernel), TE's
// fused norms, bias-GeLU/SwiGLU and RoPE and Megatron's fused cross entropy; weight-gradient
// GEMMs accumulate into main_grad (--gradient-accumulation-fusion, on by default); no autocast:
// Float16Module casts the model to bf16 itself. CUDA graphs are opt-in (--enable-cuda-graph).
// Under FP8, TE's linear modules save their quantised inputs for the weight gradient
// (transformer_engine/pytorch/module/linear.py, `saved_inputmat`). NCCL without NVLink SHARP:
// Megatron-Bridge's recipes set NCCL_NVLS_ENABLE=0 unless NCCL's user buffers are asked for
// (docs/recipe-usage.md's env_vars, scripts/performance/utils/overrides.py @ its mirror's HEAD;
// its performance guide: NVLS "when not used" raises memory), as Megatron-LM's MoE guide
// (megatron/core/transformer/moe/README.md, "Disable NVLS to prevent memory overhead") and
// functional tests do. DeepEP's received indices become the multi-hot map through PyTorch's
// boolean indexing: the fused converter is experimental (ENABLE_EXPERIMENTAL, a constant False in
// megatron/core/config.py @1e05700, the --enable-experimental flag from 6782fe4), which no recipe
// of the runs here turns on.
std::vector<Setting> megatron_core() {
  return {set("flash_attention", "true"),   set("attention_kernel", "auto"),
          set("fused_elementwise", "true"), set("grad_accumulation_fusion", "true"),
          set("fused_loss", "true"),        set("autocast", "false"),
          set("cuda_graphs", "false"),      set("fp8_saved_inputs", "true"),
          set("nccl_nvls", "false"),        set("fused_multihot", "false")};
}

// Megatron-LM before Transformer Engine (2021-2022, the Selene runs of data/published-runs.toml):
// the math path for attention with its fused scale-mask-softmax kernel, fused bias-GeLU and
// bias-dropout-add (megatron/model/fused_*.py), fp16/bf16 through Float16Module.
std::vector<Setting> megatron_lm() {
  return {set("flash_attention", "false"), set("fused_elementwise", "true"),
          set("autocast", "false"), set("fused_loss", "true"), set("cuda_graphs", "false")};
}

// torchtitan without compile (parallelize_llama.py @9dec370): PyTorch's
// scaled_dot_product_attention, whose flash backend runs FlashAttention-2's kernels and comes
// first in SDPA's priority (torch 2.5.1 lowered cuDNN's); every element-wise op its own kernel
// (RMSNorm, RoPE, SwiGLU in eager PyTorch); FSDP2's MixedPrecisionPolicy keeps bf16 parameters,
// so no autocast; the loss is eager cross entropy on fp32 logits (compiled or not: torch.compile
// wraps the blocks). One backward per step: autograd's AccumulateGrad takes the gradient without
// an add, as grad_accumulation_fusion prices it. Float8 is torchao's, whose Float8Linear saves
// the 16-bit input and casts it again in the backward (float8_linear.py,
// matmul_with_hp_or_float8_args: save_for_backward(input_hp, weight_hp_t)).
std::vector<Setting> torchtitan() {
  return {set("flash_attention", "true"),    set("attention_kernel", "flash2"),
          set("fused_elementwise", "false"), set("grad_accumulation_fusion", "true"),
          set("fused_loss", "false"),        set("autocast", "false"),
          set("cuda_graphs", "false"),       set("fsdp_impl", "fsdp2"),
          set("fp8_saved_inputs", "false")};
}

// torchtitan with torch.compile on each block (`[compile] enable = true`): Inductor fuses the
// element-wise work into Triton kernels; attention stays SDPA's flash backend, the loss eager.
std::vector<Setting> torchtitan_compile() {
  auto settings = torchtitan();
  for (auto& s : settings) {
    if (s.key == "fused_elementwise") s.value = "true";
  }
  return settings;
}

// NeMo AutoModel (NVIDIA-NeMo/Automodel): PyTorch FSDP2 around Transformer Engine layers (TE's
// attention, norms and fused MLP kernels); gradients accumulate in the parameters' .grad across
// microbatches (FSDP2 without gradient sync), a separate add each. TE's modules save their FP8
// inputs, as under Megatron-Core. Its DeepEP experts build their dispatcher with
// moe_permute_fusion=True (components/moe/layers.py, GroupedExpertsDeepEP.init_token_dispatcher),
// under which its copy of Megatron-Core's _DeepepManager converts the received indices in the
// fused kernel, with no experimental gate (components/moe/megatron/token_dispatcher.py).
std::vector<Setting> nemo_automodel() {
  return {set("flash_attention", "true"),   set("attention_kernel", "auto"),
          set("fused_elementwise", "true"), set("grad_accumulation_fusion", "false"),
          set("fused_loss", "true"),        set("autocast", "false"),
          set("cuda_graphs", "false"),      set("fsdp_impl", "fsdp2"),
          set("fp8_saved_inputs", "true"),  set("fused_multihot", "true")};
}

// llm-foundry as its 2023 MPT throughput benchmark ran it (scripts/train/benchmarking/
// submit_benchmarks.py and sweep.sh @v0.2.0 and @v0.4.0; the model llmfoundry/models/mpt, the
// trainer composer 0.13-0.17):
//  - attention: attn_impl = "triton", the script's default and every pretrain yaml's: Tri Dao's
//    Triton FlashAttention (llmfoundry/models/layers/flash_attn_triton.py), not FlashAttention-2
//    (an opt-in extra from v0.4.0, the default install only from v0.6.0, 2024-03);
//  - element-wise work: ATen's layer_norm in bf16 (LPLayerNorm, the benchmark forces
//    low_precision_layernorm), exact GELU, flash-attn's fused cross entropy (xentropy): each one
//    kernel, and the models have no RoPE or SwiGLU for eager PyTorch to split, so the fused
//    prices hold; no torch.compile;
//  - precision: amp_bf16 = torch.autocast(bf16) over FSDP's bf16 parameters;
//  - FSDP1 (composer's FullyShardedDataParallel, FULL_SHARD, limit_all_gathers), which
//    reduce-scatters after every microbatch (composer's no_sync is a no-op for FSDP) and adds
//    into the sharded gradient, so no add over the whole parameters.
std::vector<Setting> llm_foundry() {
  return {set("flash_attention", "true"),   set("attention_kernel", "triton"),
          set("fused_elementwise", "true"), set("grad_accumulation_fusion", "true"),
          set("fused_loss", "true"),        set("autocast", "true"),
          set("cuda_graphs", "false"),      set("fsdp_impl", "fsdp1")};
}

// Built on first use from the functions above, never from namespace-scope vectors: the option
// table (sim/options.cpp) asks for stack_names() during static initialisation, before another
// translation unit's globals are guaranteed to exist (the Python module saw empty stacks).
const std::vector<StackPreset>& presets() {
  static const std::vector<StackPreset> all{
      {"megatron-core",
       "Megatron-Core with Transformer Engine (Megatron-LM, NeMo 2, Megatron-Bridge)",
       "Megatron-LM megatron/core (TE DotProductAttention, fused kernels, "
       "--gradient-accumulation-fusion); NeMo memory_optimizations.rst (TE's kernel choice)",
       megatron_core()},
      {"megatron-lm",
       "Megatron-LM before Transformer Engine (2021-2022): unfused attention, fused "
       "scale-mask-softmax",
       "Megatron-LM megatron/model/fused_softmax.py, fused_bias_gelu.py (2021-08..2022-06)",
       megatron_lm()},
      {"torchtitan",
       "torchtitan, eager: SDPA's flash backend (FlashAttention-2), unfused "
       "element-wise ops, FSDP2",
       "torchtitan parallelize_llama.py @9dec370; torch SDPA backend priority (2.5.1)",
       torchtitan()},
      {"torchtitan-compile",
       "torchtitan with torch.compile per block: fused element-wise work, "
       "SDPA's flash backend, FSDP2",
       "torchtitan parallelize_llama.py @9dec370 ([compile] enable)", torchtitan_compile()},
      {"llm-foundry",
       "llm-foundry 2023 (MPT benchmark): Triton FlashAttention, autocast, "
       "FSDP1",
       "llm-foundry scripts/train/benchmarking @v0.2.0/@v0.4.0, llmfoundry/models/mpt; composer "
       "0.13-0.17 (FSDP, amp_bf16)",
       llm_foundry()},
      {"nemo-automodel", "NeMo AutoModel: FSDP2 around Transformer Engine layers",
       "NVIDIA-NeMo/Automodel (FSDP2 with TE modules)", nemo_automodel()},
  };
  return all;
}

}  // namespace

std::span<const StackPreset> stack_presets() {
  return presets();
}

std::span<const std::string_view> stack_names() {
  static const std::vector<std::string_view> names = [] {
    std::vector<std::string_view> out;
    for (const auto& p : presets())
      out.push_back(p.name);
    return out;
  }();
  return names;
}

const StackPreset* find_stack_preset(std::string_view name) {
  const auto& all = presets();
  const auto it =
      std::find_if(all.begin(), all.end(), [&](const StackPreset& p) { return p.name == name; });
  return it == all.end() ? nullptr : &*it;
}

AttentionKernel resolve_attention_kernel(const Stack& stack, const DeviceSpec& device,
                                         std::string_view system_name) {
  const AttentionKernel kernel = stack.attention_kernel.value_or(
      device.compute_capability >= 9.0 ? AttentionKernel::Cudnn : AttentionKernel::Flash2);
  if (!device.attention_of(kernel).given()) {
    std::vector<std::string_view> given;
    for (std::size_t k = 0; k < kAttentionKernels; ++k) {
      if (device.attention[k].given()) given.push_back(kAttentionKernelNames[k]);
    }
    throw ParamError(fmt::format(
        "system '{}' gives no figures for the attention kernel '{}' ([device.attention.{}]){}; "
        "it gives: {}. Name one with --attention-kernel",
        system_name, to_string(kernel), to_string(kernel),
        stack.attention_kernel ? ""
                               : fmt::format(", Transformer Engine's choice at compute capability "
                                             "{:g}",
                                             device.compute_capability),
        given.empty() ? std::string("none") : fmt::format("{}", fmt::join(given, ", "))));
  }
  return kernel;
}

std::string describe_stack(const Stack& stack, const DeviceSpec& device,
                           std::string_view system_name) {
  std::string attention = "attention by the math path (scores in memory)";
  if (stack.flash_attention) {
    const AttentionKernel k = resolve_attention_kernel(stack, device, system_name);
    attention = fmt::format("attention {}{}", to_string(k),
                            stack.attention_kernel ? "" : " (Transformer Engine's choice)");
  }
  std::vector<std::string> parts{
      attention, stack.fused_elementwise ? "fused element-wise kernels" : "eager element-wise ops"};
  if (stack.fused_elementwise && !stack.fused_loss) parts.emplace_back("eager loss");
  if (!stack.grad_accumulation_fusion) parts.emplace_back("gradients added apart");
  if (stack.autocast) parts.emplace_back("autocast");
  if (stack.cuda_graphs) {
    parts.emplace_back("CUDA graphs");
  } else if (stack.graph_modules != 0) {
    parts.push_back(
        fmt::format("CUDA graphs of {}", name_set_text(kGraphModuleNames, stack.graph_modules)));
  }
  return fmt::format("{}: {}", stack.name.empty() ? "pipetab's defaults" : stack.name,
                     fmt::join(parts, ", "));
}

}  // namespace pipetab
