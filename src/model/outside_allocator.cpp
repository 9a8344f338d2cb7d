#include "pipetab/model/outside_allocator.hpp"

#include <algorithm>
#include <array>
#include <cmath>

#include "pipetab/parallel/placement.hpp"

namespace pipetab {

namespace {

// NCCL 2.30.7's buffers (github.com/NVIDIA/nccl @5067397c). A connection's buffers hold one FIFO
// per protocol: LL 8 lines × 512 threads × 8 steps × 16 bytes, LL128 120 elements × 640 threads ×
// 8 steps × 8 bytes, Simple NCCL_BUFFSIZE = 4 MiB (src/init.cc:810-813, src/include/device.h),
// beside a control structure padded to 4 KiB (src/include/comm.h:45-77).
// Whole bytes, so that the sizes are constants on every compiler (std::ceil is not constexpr).
constexpr std::int64_t kMiB = 1024 * 1024;
constexpr std::int64_t kLlBytes = 8 * 512 * 8 * 16;
constexpr std::int64_t kLl128Bytes = 120 * 640 * 8 * 8;
constexpr std::int64_t kControlBytes = 4096;
// Each connection's buffers are one allocation rounded up to CUDA_IPC_MIN, 2 MiB (comm.h:46; the
// cuMem granularity on these GPUs).
constexpr std::int64_t kGranule = 2 * kMiB;

constexpr std::int64_t round_up(std::int64_t bytes) {
  return (bytes + kGranule - 1) / kGranule * kGranule;
}

// What NCCL allocates by: one connection's buffers each way, for a Simple FIFO of `simple` bytes
// (NCCL_BUFFSIZE), and a step of the network's shared pools.
struct Connections {
  // Over NVLink or PCIe (the P2P transport, src/transport/p2p.cc:407-410 and 486-491) the
  // receiver holds the three FIFOs, 10 MiB, and the sender its control structure, 2 MiB (where
  // A100's P2P read moves Simple to the sender it is 6 + 6 MiB, the same 12). nccl#1685 logs
  // exactly these two sizes, 10485760 and 2097152 bytes, for an all-to-all on 8 H100s.
  double local = 0.0;
  // Over the network with GPUDirect RDMA (src/transport/net.cc:914-919, 1098-1103) the
  // receiver keeps the three FIFOs on the GPU and the sender LL128 and Simple (LL in host
  // memory): 10 MiB each after rounding.
  double net = 0.0;
  // A step of the network's shared send and receive pools (NCCL_P2P_NET_CHUNKSIZE).
  double net_chunk = 0.0;
};

constexpr Connections connections(std::int64_t simple, double net_chunk = kNcclP2pNetChunksize) {
  return {static_cast<double>(round_up(kControlBytes + kLlBytes + kLl128Bytes + simple) +
                              round_up(kControlBytes)),
          static_cast<double>(round_up(kControlBytes + kLlBytes + kLl128Bytes + simple) +
                              round_up(kControlBytes + kLl128Bytes + simple)),
          net_chunk};
}
static_assert(connections(4 * kMiB).local == 12 * kMiB && connections(4 * kMiB).net == 20 * kMiB);
// Sends and receives across nodes share one pool per direction: channels × 16 steps ×
// NCCL_P2P_NET_CHUNKSIZE (NcclSizes::p2p_net_chunksize; net.cc:646-668).
constexpr double kNetSharedSteps = 16.0;
// NVLS: per channel two buffers of NCCL_NVLS_CHUNKSIZE × 8 steps (128 KiB × 8 = 1 MiB), one for
// each head, a head per GPU of the node up to 32 (src/transport/nvls.cc:159-160 and 427-430,
// src/graph/search.cc:1126-1127, NCCL_MAX_NVLS_ARITY in device.h:213). 256 MiB on 8 H100s.
constexpr double kNvlsChannelBytes = 2.0 * 128 * 1024 * 8;
constexpr std::int64_t kMaxNvlsHeads = 32;

// One rank's side of a communicator whose collectives run as rings (and NVLS where they may).
// Inside a node every ring connection is a local one; across nodes a channel enters and leaves
// each node once, through a different GPU per channel, so 1/per_node of a rank's connections are
// network ones.
void collective_buffers(CommunicatorBuffers& c, const NcclSpec& nccl, const Connections& each,
                        bool nvls) {
  if (c.ranks <= 1) return;
  if (c.per_node >= c.ranks) {
    c.ring_bytes = nccl.channels * each.local;
  } else {
    const double boundary = 1.0 / static_cast<double>(c.per_node);
    c.ring_bytes = nccl.inter_channels * ((1.0 - boundary) * each.local + boundary * each.net);
  }
  if (nvls && nccl.nvls_channels > 0 && c.per_node >= 2) {
    c.nvls_bytes = nccl.nvls_channels * kNvlsChannelBytes *
                   static_cast<double>(std::min(kMaxNvlsHeads, c.per_node));
  }
}

// Send/receive connections to `local` peers on the node (p2p_channels_per_peer each, a receive
// and a send each way) and, where any peer is on another node, the network's two shared pools.
double p2p_buffers(const NcclSpec& nccl, const Connections& each, std::int64_t local,
                   std::int64_t remote) {
  double bytes = static_cast<double>(local) * nccl.p2p_channels_per_peer * each.local;
  if (remote > 0) bytes += 2.0 * nccl.inter_p2p_channels * kNetSharedSteps * each.net_chunk;
  return bytes;
}

CommunicatorBuffers buffers_of(const Layout& layout, CollectiveGroup kind, std::int64_t device,
                               std::int64_t gpus_per_node) {
  const Group g = group_of(layout, kind, device, gpus_per_node);
  return {to_string(kind), g.ranks, g.per_node};
}

// The communicators pipeline device `device`'s first rank uses, into `out`.
void communicators(const SystemConfig& system, const TransformerConfig* model, const Job& job,
                   const Layout& layout, const Connections& each, std::int64_t device,
                   std::vector<CommunicatorBuffers>& out) {
  const NcclSpec& nccl = system.nccl;
  const std::int64_t node = node_size(system, layout);
  const bool nvls = job.stack.nccl_nvls;
  const bool moe = model != nullptr && model->moe.has_value();
  out.clear();
  // A group whose collectives run as rings; `large` where they move enough for NCCL to pick NVLS.
  const auto collective = [&](CollectiveGroup kind, bool large = true) {
    auto c = buffers_of(layout, kind, device, node);
    if (c.ranks <= 1) return;
    collective_buffers(c, nccl, each, nvls && large);
    out.push_back(std::move(c));
  };
  // Peers reached by sends, of a group: all of them (an all-to-all), or the two neighbours of a
  // ring of sends.
  const auto peers = [&](CollectiveGroup kind, bool neighbours) {
    auto c = buffers_of(layout, kind, device, node);
    if (c.ranks <= 1) return c;
    const std::int64_t all = neighbours ? std::min<std::int64_t>(2, c.ranks - 1) : c.ranks - 1;
    const std::int64_t local = std::min(all, c.per_node - 1);
    c.p2p_bytes = p2p_buffers(nccl, each, local, all - local);
    return c;
  };
  if (layout.tp > 1) {
    collective(CollectiveGroup::Tensor);
    if (job.tp_overlap == Overlap::All && model != nullptr) {
      out.back().userbuffer_bytes =
          te_userbuffer_bytes(job.seq_len * job.micro_batch / layout.cp, model->hidden,
                              job.precision == Precision::FP8);
    }
  }
  if (layout.cp > 1) {
    // Transformer Engine's ring sends K and V to the next rank (p2p); the all-gather method
    // all-gathers and reduce-scatters them; Ulysses all-to-alls.
    if (layout.cp_method == CpMethod::AllGather) {
      collective(CollectiveGroup::Context);
    } else {
      out.push_back(peers(CollectiveGroup::Context, layout.cp_method == CpMethod::Ring));
    }
  }
  if (moe && layout.ep > 1) {
    if (is_flex(job.moe.dispatcher)) {
      // HybridEP's buffers (hybrid-ep @94a9f8f, csrc/hybrid_ep) are priced at DeepEP's size: its
      // registered receive buffers hold the same tokens per rank at the same hidden width.
      // DeepEP's Buffer exchanges its IPC handles with dist.all_gather_object over the group
      // (deep_ep/buffers/legacy.py), which connects the NCCL communicator's rings (a few bytes:
      // no NVLS); its own buffers carry the tokens.
      collective(CollectiveGroup::Expert, false);
      out.back().deepep_bytes = deepep_buffer_bytes(layout.ep, model->hidden);
    } else {
      // Megatron-Core's alltoall dispatcher: all_to_all_single, NCCL's grouped sends.
      out.push_back(peers(CollectiveGroup::Expert, false));
    }
  }
  if (moe && layout.etp > 1) collective(CollectiveGroup::ExpertTensor);
  if (layout.fsdp.enabled) {
    collective(CollectiveGroup::FsdpShard);
    collective(CollectiveGroup::HsdpReplicas);
    if (moe) collective(CollectiveGroup::ExpertShard);
  } else {
    collective(CollectiveGroup::Gradient);
    if (moe) collective(CollectiveGroup::ExpertData);
  }
  if (layout.pp > 1) {
    // The stages' sends go to the previous and the next stage (around the ring for interleaved
    // schedules), layout.tp · cp · dp ranks apart.
    const std::int64_t stride = layout.tp * layout.cp * layout.dp;
    const std::int64_t rank = device * stride;
    std::int64_t local = 0, remote = 0;
    const std::array<std::int64_t, 2> neighbours{(device + layout.pp - 1) % layout.pp,
                                                 (device + 1) % layout.pp};
    for (std::size_t i = 0; i < neighbours.size(); ++i) {
      if (i == 1 && neighbours[1] == neighbours[0]) break;  // two stages: one peer
      const bool same = rank / node == neighbours[i] * stride / node;
      ++(same ? local : remote);
    }
    CommunicatorBuffers c{"pipeline", layout.pp, 1};
    c.per_node = 1 + local;
    c.p2p_bytes = p2p_buffers(nccl, each, local, remote);
    out.push_back(std::move(c));
  }
}

double total(const std::vector<CommunicatorBuffers>& communicators) {
  double bytes = 0.0;
  for (const auto& c : communicators)
    bytes += c.bytes();
  return bytes;
}

// DeepEP's recommended configurations by group size (deep_ep/buffers/legacy.py,
// get_dispatch_config and get_combine_config @dd758ca), what its size hints read of them: the
// tokens each channel receives from a peer over NVLink and over RDMA (the same in both
// configurations), and the RDMA send chunk of each, to which the receive count is rounded up.
struct DeepEpConfig {
  std::int64_t ranks;
  std::int64_t nvl_recv, rdma_recv;
  std::array<std::int64_t, 2> rdma_send;  // dispatch, combine
};
constexpr std::array<DeepEpConfig, 12> kDeepEp{{{2, 256, 128, {6, 6}},
                                                {4, 256, 128, {6, 6}},
                                                {8, 256, 128, {6, 6}},
                                                {16, 288, 128, {20, 12}},
                                                {24, 288, 128, {8, 8}},
                                                {32, 288, 128, {8, 8}},
                                                {48, 288, 128, {8, 8}},
                                                {64, 288, 128, {8, 8}},
                                                {96, 480, 128, {12, 8}},
                                                {128, 560, 128, {12, 8}},
                                                {144, 720, 128, {12, 8}},
                                                {160, 720, 128, {12, 8}}}};

// The configuration for `ranks`: DeepEP's own, or for a size it has none for (it asserts), the
// next larger one's (the largest's beyond 160), so that the buffer grows with the group.
const DeepEpConfig& deepep_config(std::int64_t ranks) {
  for (const auto& c : kDeepEp) {
    if (c.ranks >= ranks) return c;
  }
  return kDeepEp.back();
}

}  // namespace

double OutsideAllocator::communicator_bytes() const noexcept {
  return total(communicators);
}

double OutsideAllocator::bytes(double device_bytes) const noexcept {
  if (flat_reserve) return device_bytes * *flat_reserve;
  return context_bytes + communicator_bytes();
}

double deepep_buffer_bytes(std::int64_t ranks, std::int64_t hidden, std::int32_t num_sms) {
  if (ranks <= 1) return 0.0;
  // Config::get_nvl_buffer_size_hint and get_rdma_buffer_size_hint (csrc/legacy/config.hpp
  // @dd758ca): per channel (num_sms / 2) and peer, the received tokens' hidden bytes, their
  // 8-byte source metadata, up to 128 top-k indices (8 bytes) and weights (4 bytes) and 128
  // scales (4 bytes), plus a few counters; the RDMA buffer twice (send and receive) with a
  // 16-byte header per token, each rounded up to 128 bytes. NVLink peers are at most 8
  // (LEGACY_NUM_MAX_NVL_PEERS); the rest are RDMA ranks. Megatron-Core's get_hidden_bytes sizes
  // a token as hidden × max(element size, 2): FP8 tokens as BF16 ones (fused_a2a.py), and its
  // get_buffer takes the larger of the two configurations' hints.
  constexpr double kTopK = 128, kScales = 128, kMeta = 8, kIndex = 8, kFloat = 4, kInt = 4;
  const auto align = [](double bytes) { return std::ceil(bytes / 128.0) * 128.0; };
  const DeepEpConfig& c = deepep_config(ranks);
  const double channels = num_sms / 2;
  const double rdma_ranks = static_cast<double>(std::max<std::int64_t>(ranks / 8, 1));
  const double nvl_ranks = static_cast<double>(std::min<std::int64_t>(ranks, 8));
  const double per_token = 2.0 * static_cast<double>(hidden) + kMeta + kTopK * kIndex +
                           kTopK * kFloat + kScales * kFloat;
  const double nvl = align(channels * nvl_ranks * (2 * rdma_ranks + 3) * kInt +
                           channels * nvl_ranks * static_cast<double>(c.nvl_recv) * per_token);
  if (ranks <= 8) return nvl;
  double recv = 0.0;
  for (const std::int64_t send : c.rdma_send) {
    const auto chunk = static_cast<double>(send);
    recv = std::max(recv, std::ceil(static_cast<double>(c.rdma_recv) / chunk) * chunk);
  }
  const double rdma = align(channels * rdma_ranks * (8 * 2 + 2) * 2 * kInt +
                            channels * rdma_ranks * recv * (per_token + 16.0) * 2);
  // NVSHMEM's heap grows in NVSHMEM_CUMEM_GRANULARITY = 2^29 bytes, which DeepEP sets ("NVSHMEM
  // initialization requires at least 256 MiB", deep_ep/buffers/legacy.py).
  constexpr double kNvshmemGranule = 536870912.0;
  return nvl + std::ceil(rdma / kNvshmemGranule) * kNvshmemGranule;
}

double te_userbuffer_bytes(std::int64_t tokens, std::int64_t hidden, bool fp8) {
  // transformer_engine/pytorch/module/base.py @d0067d0 (initialize_ub): the overlapped GEMMs
  // are qkv, proj, fc1 and fc2, each fprop, dgrad and wgrad; the all-gathered eight
  // (layers_all_gather_overlap) take a uint8 buffer under an FP8 recipe (fp8_buf), the four
  // reduce-scattered (layers_reduce_scatter_overlap) the model's BF16. Every one registers a
  // buffer of the shape given, register_user_buffer_collective in
  // common/comm_gemm_overlap/comm_gemm_overlap.cpp:419 and 813 (ring exchange for all-gathers
  // only by default, so none takes the (2·TP − 1)/TP of a ring-exchange reduce-scatter):
  // cudaMalloc or cuMem, outside the caching allocator.
  constexpr double kGathered = 8, kScattered = 4, kBf16 = 2;
  const double values = static_cast<double>(tokens) * static_cast<double>(hidden);
  return values * (kGathered * (fp8 ? 1.0 : kBf16) + kScattered * kBf16);
}

OutsideAllocator outside_allocator(const SystemConfig& system, const ModelConfig& model,
                                   const Job& job, const Layout& layout, NcclSizes sizes) {
  OutsideAllocator out;
  const DeviceSpec& device = system.device;
  if (device.memory_reserve || !system.nccl.modelled()) {
    out.flat_reserve = device.memory_reserve.value_or(kDefaultMemoryReserve);
    return out;
  }
  out.context_bytes = device.context_bytes;
  // The fullest device: the first and last stages have one pipeline neighbour fewer, and
  // groups may straddle nodes differently from one stage to the next.
  double most = -1.0;
  const Connections each =
      connections(static_cast<std::int64_t>(sizes.buffsize), sizes.p2p_net_chunksize);
  std::vector<CommunicatorBuffers> held;
  for (std::int64_t d = 0; d < std::max<std::int64_t>(1, layout.pp); ++d) {
    communicators(system, model.transformer(), job, layout, each, d, held);
    const double bytes = total(held);
    if (bytes > most) {
      most = bytes;
      out.device = d;
      out.communicators = held;
    }
  }
  return out;
}

double usable_memory_bytes(const SystemConfig& system, const OutsideAllocator& outside) {
  const double memory = system.device.memory_bytes;
  return std::max(0.0, memory - outside.bytes(memory));
}

}  // namespace pipetab
