// Fused attention kernels: which one a software stack runs (model/stack.hpp) and how fast each
// runs on a device (system/system.hpp). Shared by the two, which otherwise know nothing of each
// other (as precision.hpp is).
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string_view>

#include "pipetab/names.hpp"

namespace pipetab {

/// A fused attention kernel (no s×s tensors in memory; the backward recomputes QKᵀ):
///  - flash2: FlashAttention-2 (Dao 2023, arXiv 2307.08691): the flash-attn package 2.x, and
///    PyTorch's scaled_dot_product_attention flash backend, which runs FA2's kernels;
///  - flash3: FlashAttention-3 (Shah et al. 2024, arXiv 2407.08608), Hopper only;
///  - cudnn: cuDNN's fused attention (Transformer Engine's FusedAttention, SDPA's cuDNN backend);
///  - triton: the Triton tutorial's fused attention as MosaicML's MPT ran it (attn_impl =
///    "triton", llm-foundry 2023).
enum class AttentionKernel : std::uint8_t { Flash2, Flash3, Cudnn, Triton };

inline constexpr std::size_t kAttentionKernels = 4;

inline constexpr std::array<std::string_view, kAttentionKernels> kAttentionKernelNames{
    "flash2", "flash3", "cudnn", "triton"};

constexpr std::string_view to_string(AttentionKernel k) {
  return name_of(kAttentionKernelNames, k);
}

constexpr std::optional<AttentionKernel> parse_attention_kernel(std::string_view name) {
  return parse_name<AttentionKernel>(kAttentionKernelNames, name);
}

}  // namespace pipetab
