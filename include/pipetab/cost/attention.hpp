// A fused attention kernel's efficiency by head width (docs/simulation.md, "Software stacks"):
// the device curves ([device.attention.KERNEL]) are measured at head dim 128; a narrower or wider
// head runs at another share of the peak.
#pragma once

#include "pipetab/attention_kernel.hpp"

namespace pipetab::cost {

/// The kernel's throughput at `head_dim` over its throughput at 128, at `seq` tokens: the
/// FlashAttention-3 paper's H100 BF16 forward figures without a causal mask (Shah et al. 2024,
/// arXiv 2407.08608), at head dims 64, 128 and 256 and 1K to 16K tokens, for FlashAttention-2,
/// FlashAttention-3 and cuDNN. Linear in log2(head_dim) and log2(seq) between them, flat beyond
/// (no figure below 64 or above 256); 1 at 128 and for the Triton kernel (the paper times it at
/// 64 and 128 alone, 2% apart). The backward takes the forward's ratio (the paper's backward
/// figures were not transcribed), and every device H100's.
double attention_head_dim_scale(AttentionKernel kernel, double head_dim, double seq);

}  // namespace pipetab::cost
