// The device memory a training process holds outside PyTorch's caching allocator (issue 42 point
// 4): the CUDA context, the buffers of each NCCL communicator a layout uses, and DeepEP's. The
// workload's memory (model/memory.cpp) is what the allocator reserves; a run fits where that
// peak and these together fit the device. NCCL's buffers are a driver allocation of their own
// (cuMem or cudaMalloc in src/transport/p2p.cc, net.cc, nvls.cc), which
// torch.cuda.max_memory_reserved never sees: "the NCCL buffers are not allocated through the
// PyTorch caching allocator, therefore, you may see GPU OOM even when
// torch.cuda.reserved_memory() is still way below the total amount of GPU memory" (fairscale
// PR #678). docs/simulation.md "Memory outside the allocator" gives the derivation.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

#include "pipetab/model/job.hpp"
#include "pipetab/model/workload.hpp"
#include "pipetab/parallel/layout.hpp"
#include "pipetab/system/system.hpp"

namespace pipetab {

/// The share of a device's memory a run keeps back where the system's preset does not describe
/// its NCCL ([nccl]) and the user gives no --memory-reserve: the 5% pipetab kept back for the
/// context, NCCL and fragmentation before they were modelled (4 GB of an 80 GB GPU).
inline constexpr double kDefaultMemoryReserve = 0.05;

/// NCCL_BUFFSIZE's default: 4 MiB (NCCL src/init.cc:812).
inline constexpr double kNcclBuffsize = 4194304.0;
/// NCCL_P2P_NET_CHUNKSIZE's default: 128 KiB (NCCL src/transport/net.cc:646-668, init.cc:818).
inline constexpr double kNcclP2pNetChunksize = 131072.0;

/// The sizes a run gives NCCL by its environment, which its buffers follow
/// (LoweringOptions::nccl; --nccl-buffsize, --nccl-p2p-net-chunksize).
struct NcclSizes {
  /// NCCL_BUFFSIZE: the Simple protocol's FIFO of each connection.
  double buffsize = kNcclBuffsize;
  /// NCCL_P2P_NET_CHUNKSIZE: a step of the network's shared send and receive pools (2 MiB in
  /// Megatron-Bridge's pipelined Llama 3 70B and 3.1 405B pretraining).
  double p2p_net_chunksize = kNcclP2pNetChunksize;
};

/// One communicator of a rank: its group and what its buffers hold on the rank's GPU.
struct CommunicatorBuffers {
  /// The group (CollectiveGroup's names, and "pipeline" for the stages' sends).
  std::string_view group;
  std::int64_t ranks = 1;
  std::int64_t per_node = 1;  ///< of them on this rank's node
  /// Ring connections of its collectives: one receive and one send per channel.
  double ring_bytes = 0.0;
  /// NVLink SHARP's buffers, where the stack lets NCCL run it and the node has it.
  double nvls_bytes = 0.0;
  /// Send/receive connections to each peer (pipeline sends, all-to-alls, CP's ring of sends).
  double p2p_bytes = 0.0;
  /// DeepEP's NVLink and RDMA buffers (the expert group under --moe-dispatcher deepep).
  double deepep_bytes = 0.0;
  /// Transformer Engine's userbuffers for Megatron-Core's --tp-comm-overlap (the tensor group
  /// under tp_overlap all): one buffer per overlapped GEMM (te_userbuffer_bytes).
  double userbuffer_bytes = 0.0;
  friend bool operator==(const CommunicatorBuffers&, const CommunicatorBuffers&) = default;

  double bytes() const noexcept {
    return ring_bytes + nvls_bytes + p2p_bytes + deepep_bytes + userbuffer_bytes;
  }
};

/// What one GPU holds outside the caching allocator: the fullest pipeline device's, so that one
/// usable capacity holds for every device of the run.
struct OutsideAllocator {
  /// A flat share of the device kept back instead (--memory-reserve, or a system whose NCCL is
  /// not described): then nothing below is modelled.
  std::optional<double> flat_reserve;
  double context_bytes = 0.0;
  std::int64_t device = 0;  ///< the pipeline device whose communicators these are
  std::vector<CommunicatorBuffers> communicators;

  double communicator_bytes() const noexcept;
  /// Everything held outside the allocator: the context and the communicators' buffers, or the
  /// flat reserve's share of `device_bytes`.
  double bytes(double device_bytes) const noexcept;
};

/// The memory outside the allocator for a run of `model` under `job` and `layout` on `system`:
/// the context (DeviceSpec::context_bytes) and, for each group the run communicates over, its
/// communicator's buffers as NCCL 2.30.7 sizes them with the system's channel counts
/// (SystemConfig::nccl). A DeviceSpec::memory_reserve, or a system without [nccl], gives the
/// flat share instead (kDefaultMemoryReserve when none is set). `sizes` are the run's
/// NCCL_BUFFSIZE and NCCL_P2P_NET_CHUNKSIZE.
OutsideAllocator outside_allocator(const SystemConfig& system, const ModelConfig& model,
                                   const Job& job, const Layout& layout, NcclSizes sizes = {});

/// The memory a run may use on each device: its memory less what is held outside the allocator.
double usable_memory_bytes(const SystemConfig& system, const OutsideAllocator& outside);

/// DeepEP's buffers on each rank of an expert group of `ranks` ranks for tokens of `hidden`
/// values (Megatron-Core's fused_a2a.get_buffer: the larger of the dispatch and combine
/// configurations' size hints, `num_sms` SMs), in bytes: the NVLink buffer and the RDMA buffer
/// (NVSHMEM's heap, in granules of 512 MiB where there is one).
double deepep_buffer_bytes(std::int64_t ranks, std::int64_t hidden, std::int32_t num_sms = 20);

/// Transformer Engine's userbuffers on each rank of a tensor-parallel group under Megatron-Core's
/// --tp-comm-overlap, in bytes, for `tokens` tokens a microbatch per CP rank (seq_len ×
/// micro_batch / CP, Megatron's `input_shape`) of `hidden` values: initialize_ub registers one
/// buffer of tokens × hidden for each of the twelve overlapped GEMMs, the eight all-gathered
/// ones in FP8 (one byte) under an FP8 recipe, the four reduce-scattered ones in BF16.
double te_userbuffer_bytes(std::int64_t tokens, std::int64_t hidden, bool fp8);

}  // namespace pipetab
