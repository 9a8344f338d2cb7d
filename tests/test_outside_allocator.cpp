// The memory outside PyTorch's caching allocator (model/outside_allocator.hpp): NCCL's buffers
// against NCCL's own sizes and a published measurement, DeepEP's against its size hints by hand,
// and properties over a grid of layouts.
#include "helpers.hpp"
#include <fmt/format.h>
#include <gtest/gtest.h>

#include "pipetab/error.hpp"
#include "pipetab/io/config.hpp"
#include "pipetab/model/outside_allocator.hpp"

namespace pipetab {
namespace {

constexpr double kMiB = 1024.0 * 1024.0;
// nccl#1685 logs the two allocations of one NVLink connection on H100 with
// NCCL_DEBUG_SUBSYS=ALLOC: 10485760 bytes on the receiver, 2097152 on the sender.
constexpr double kConnection = 10485760.0 + 2097152.0;

struct Case {
  ModelConfig model;
  Job job;
  Layout layout;
};

Case run_of(const std::string& model) {
  const test::ModelRun run = io::load_model(model);
  return {run.model, run.job, run.layout};
}

const CommunicatorBuffers* find(const OutsideAllocator& o, std::string_view group) {
  for (const auto& c : o.communicators) {
    if (c.group == group) return &c;
  }
  return nullptr;
}

TEST(OutsideAllocator, TensorParallelInsideANodeHoldsRingsAndNvls) {
  // TP 8 on one DGX H100 node: 24 ring channels of one receive and one send connection each,
  // and NVLS's 16 channels × 2 × (128 KiB × 8) per head, a head per GPU: 256 MiB (nvls.cc:427).
  const auto system = io::load_system("dgx-h100");
  auto c = run_of("llama3-8b");
  c.layout.tp = 8;
  const auto o = outside_allocator(system, c.model, c.job, c.layout);
  ASSERT_FALSE(o.flat_reserve);
  EXPECT_EQ(o.context_bytes, system.device.context_bytes);
  ASSERT_EQ(o.communicators.size(), 1u);
  const auto& tp = o.communicators[0];
  EXPECT_EQ(tp.group, "tensor");
  EXPECT_EQ(tp.ranks, 8);
  EXPECT_EQ(tp.per_node, 8);
  EXPECT_DOUBLE_EQ(tp.ring_bytes, 24 * kConnection);
  EXPECT_DOUBLE_EQ(tp.nvls_bytes, 256 * kMiB);
  EXPECT_DOUBLE_EQ(usable_memory_bytes(system, o),
                   80e9 - system.device.context_bytes - 24 * kConnection - 256 * kMiB);
  // NCCL_BUFFSIZE of 8 MiB (--nccl-buffsize): the receiver's FIFOs round up to 14 MiB, 16 a
  // channel with the sender's 2.
  EXPECT_DOUBLE_EQ(
      outside_allocator(system, c.model, c.job, c.layout, {8 * kMiB}).communicators[0].ring_bytes,
      24 * 16 * kMiB);
  // Where the stack sets NCCL_NVLS_ENABLE=0 (Megatron-Bridge's recipes), no NVLS buffers.
  c.job.stack.nccl_nvls = false;
  EXPECT_DOUBLE_EQ(outside_allocator(system, c.model, c.job, c.layout).communicators[0].nvls_bytes,
                   0.0);
}

TEST(OutsideAllocator, AnAllToAllOverEightH100sHoldsWhatNcclMeasured) {
  // Megatron-Core's alltoall dispatcher over EP 8 inside a node: seven peers, 32 channels each,
  // 12 MiB per channel: 2.82 GB. nccl#1685 measured one all_to_all_single on 8 H100s taking NCCL
  // from 1.06 to 4.34 GB a GPU (+3.28 GB; its context's growth and the first collective's own
  // state beside the connections), so the connections are most of it, and not more.
  const auto system = io::load_system("dgx-h100");
  auto c = run_of("qwen3-30b-a3b");
  c.layout.dp = 8;
  c.layout.ep = 8;
  const auto o = outside_allocator(system, c.model, c.job, c.layout);
  const auto* ep = find(o, "expert");
  ASSERT_NE(ep, nullptr);
  EXPECT_DOUBLE_EQ(ep->p2p_bytes, 7 * 32 * kConnection);
  EXPECT_GT(ep->p2p_bytes, 0.8 * 3.28e9);
  EXPECT_LT(ep->p2p_bytes, 3.28e9);
  // DeepEP instead: its own buffers and the group's rings (all_gather_object at its init).
  c.job.moe.dispatcher = MoeDispatcher::DeepEp;
  const auto deepep = outside_allocator(system, c.model, c.job, c.layout);
  const auto* e = find(deepep, "expert");
  ASSERT_NE(e, nullptr);
  EXPECT_DOUBLE_EQ(e->p2p_bytes, 0.0);
  EXPECT_DOUBLE_EQ(e->ring_bytes, 24 * kConnection);
  EXPECT_DOUBLE_EQ(e->deepep_bytes, deepep_buffer_bytes(8, c.model.transformer()->hidden));
}

TEST(OutsideAllocator, DeepEpBuffersAsItsSizeHintsGiveThem) {
  // By hand from csrc/legacy/config.hpp with Megatron-Core's 20 SMs (10 channels) and hidden
  // 7168 in BF16 (14336 bytes a token; with its 8-byte source metadata, 128 top-k indices of 8
  // bytes and weights of 4 and 128 scales of 4: 16392 bytes per received token).
  // EP 8: NVLink only, 256 received tokens per channel and peer:
  //   10·8·(2·1 + 3)·4 + 10·8·256·16392 = 335,709,760, rounded up to 128: 335,709,824.
  EXPECT_DOUBLE_EQ(deepep_buffer_bytes(8, 7168), 335709824.0);
  // EP 64: 8 NVLink peers and 8 RDMA ranks, 288 tokens over NVLink:
  //   10·8·(2·8 + 3)·4 + 10·8·288·16392 = 377,677,760 → 377,677,824;
  // RDMA 128 tokens, each 16392 + 16 bytes twice: 10·8·18·2·4 + 10·8·128·16408·2 = 335,965,440,
  // a granule of NVSHMEM's heap, 2^29 bytes.
  EXPECT_DOUBLE_EQ(deepep_buffer_bytes(64, 7168), 377677824.0 + 536870912.0);
  EXPECT_DOUBLE_EQ(deepep_buffer_bytes(1, 7168), 0.0);
  // A size DeepEP has no configuration for takes the next larger one's, and the buffer grows.
  EXPECT_GE(deepep_buffer_bytes(12, 7168), deepep_buffer_bytes(8, 7168));
}

TEST(OutsideAllocator, TransformerEngineUserbuffersUnderTpCommOverlap) {
  // Twelve buffers of tokens × hidden: Llama 3.1 405B at 8,192 tokens, hidden 16,384: eight of
  // one byte and four of two under FP8, 16 bytes a value, 2 GiB; 24 bytes in BF16.
  EXPECT_DOUBLE_EQ(te_userbuffer_bytes(8192, 16384, true), 2147483648.0);
  EXPECT_DOUBLE_EQ(te_userbuffer_bytes(8192, 16384, false), 3221225472.0);
  const auto system = io::load_system("dgx-h100");
  auto c = run_of("llama3-8b");
  c.layout.tp = 4;
  c.layout.cp = 2;
  c.layout.sequence_parallel = true;
  const auto userbuffers = [&] {
    return find(outside_allocator(system, c.model, c.job, c.layout), "tensor")->userbuffer_bytes;
  };
  EXPECT_EQ(userbuffers(), 0.0);  // only Megatron-Core's --tp-comm-overlap registers them
  c.job.tp_overlap = Overlap::All;
  // Megatron's input_shape: seq_len × micro_batch / CP tokens.
  EXPECT_DOUBLE_EQ(userbuffers(), te_userbuffer_bytes(c.job.seq_len * c.job.micro_batch / 2,
                                                      c.model.transformer()->hidden, false));
}

TEST(OutsideAllocator, PipelineNeighboursByNode) {
  const auto system = io::load_system("dgx-h100");
  auto c = run_of("llama3-8b");
  const auto pipeline = [&](std::int64_t pp, std::int64_t tp, NcclSizes sizes = {}) {
    c.layout.pp = pp;
    c.layout.tp = tp;
    const auto held = outside_allocator(system, c.model, c.job, c.layout, sizes);
    const auto* p = find(held, "pipeline");
    return p == nullptr ? -1.0 : p->p2p_bytes;
  };
  EXPECT_EQ(pipeline(1, 1), -1.0);
  // Two stages on one node: one peer, 32 channels of 12 MiB.
  EXPECT_DOUBLE_EQ(pipeline(2, 1), 32 * kConnection);
  // Four: a middle stage (and, around the ring, the ends) send to two.
  EXPECT_DOUBLE_EQ(pipeline(4, 1), 2 * 32 * kConnection);
  // TP 8: every neighbour on another node; the network's two shared pools, 16 channels × 16
  // steps × 128 KiB each way (net.cc:646).
  EXPECT_DOUBLE_EQ(pipeline(4, 8), 2 * 16 * 16 * 128 * 1024.0);
  // NCCL_P2P_NET_CHUNKSIZE of 2 MiB (Megatron-Bridge's 70B and 405B pipelines): 16 times the
  // pools, 1 GiB; the NVLink peers' connections do not change.
  const NcclSizes bridge{kNcclBuffsize, 2 * kMiB};
  EXPECT_DOUBLE_EQ(pipeline(4, 8, bridge), 2 * 16 * 16 * 2 * kMiB);
  EXPECT_DOUBLE_EQ(pipeline(4, 1, bridge), 2 * 32 * kConnection);
}

TEST(OutsideAllocator, AFlatReserveWhereGivenOrWhereNcclIsNotDescribed) {
  auto system = io::load_system("dgx-h100");
  auto c = run_of("llama3-8b");
  c.layout.tp = 8;
  system.device.memory_reserve = 0.1;
  auto o = outside_allocator(system, c.model, c.job, c.layout);
  ASSERT_TRUE(o.flat_reserve);
  EXPECT_TRUE(o.communicators.empty());
  EXPECT_DOUBLE_EQ(usable_memory_bytes(system, o), 0.9 * 80e9);
  const auto balanced = io::load_system("balanced");  // a synthetic system: no [nccl]
  ASSERT_FALSE(balanced.nccl.modelled());
  o = outside_allocator(balanced, c.model, c.job, c.layout);
  EXPECT_EQ(o.flat_reserve, kDefaultMemoryReserve);
  EXPECT_DOUBLE_EQ(usable_memory_bytes(balanced, o),
                   (1 - kDefaultMemoryReserve) * balanced.device.memory_bytes);
}

// Over a grid of layouts on every preset that describes its NCCL: every group of more than one
// rank the run communicates over has its communicator and no other does; a group inside one node
// holds only local connections; and NCCL's buffers are linear in its channel counts (each term is
// channels × a fixed size), so doubling every count doubles them.
TEST(OutsideAllocator, GridProperties) {
  const auto dense = run_of("llama3-8b");
  for (const std::string name : {"dgx-h100", "dgx-a100", "gb200-nvl72", "h800"}) {
    const auto system = io::load_system(name);
    ASSERT_TRUE(system.nccl.modelled()) << name;
    auto doubled = system;
    doubled.nccl.channels *= 2;
    doubled.nccl.inter_channels *= 2;
    doubled.nccl.nvls_channels *= 2;
    doubled.nccl.p2p_channels_per_peer *= 2;
    doubled.nccl.inter_p2p_channels *= 2;
    for (const std::int64_t tp : {1, 2, 8})
      for (const std::int64_t cp : {1, 2})
        for (const std::int64_t dp : {1, 4, 16})
          for (const std::int64_t pp : {1, 2, 8})
            for (const bool fsdp : {false, true}) {
              auto c = dense;
              c.layout.tp = tp;
              c.layout.cp = cp;
              c.layout.dp = dp;
              c.layout.pp = pp;
              c.layout.fsdp.enabled = fsdp;
              const auto o = outside_allocator(system, c.model, c.job, c.layout);
              const std::string where =
                  fmt::format("{} TP {} CP {} DP {} PP {} FSDP {}", name, tp, cp, dp, pp, fsdp);
              EXPECT_EQ(find(o, "tensor") != nullptr, tp > 1) << where;
              EXPECT_EQ(find(o, "context") != nullptr, cp > 1) << where;
              EXPECT_EQ(find(o, fsdp ? "fsdp-shard" : "gradient") != nullptr, dp * cp > 1) << where;
              EXPECT_EQ(find(o, "pipeline") != nullptr, pp > 1) << where;
              for (const auto& g : o.communicators) {
                EXPECT_GT(g.bytes(), 0.0) << where << " " << g.group;
                EXPECT_LE(g.per_node, g.ranks) << where << " " << g.group;
                if (g.group != "pipeline" && g.per_node == g.ranks && g.ring_bytes > 0.0) {
                  EXPECT_DOUBLE_EQ(g.ring_bytes, system.nccl.channels * kConnection) << where;
                }
              }
              const auto twice = outside_allocator(doubled, c.model, c.job, c.layout);
              EXPECT_NEAR(twice.communicator_bytes(), 2 * o.communicator_bytes(), 1.0) << where;
            }
  }
}

TEST(OutsideAllocator, PresetFilesReadAndWriteTheirNccl) {
  const auto system = io::load_system("gb200-nvl72");
  EXPECT_EQ(system.nccl.channels, 32);
  EXPECT_EQ(system.nccl.nvls_channels, 24);
  const auto again = io::parse_system(io::system_toml(system), "again.toml");
  EXPECT_EQ(again.nccl, system.nccl);
  EXPECT_EQ(again.device.context_bytes, system.device.context_bytes);
  EXPECT_EQ(again.device.memory_reserve, system.device.memory_reserve);
  const std::string base =
      "name = \"x\"\n[device]\npreset = \"dgx-h100\"\n[network]\n[network.intra]\nlatency_s = "
      "1e-6\nbandwidth = "
      "1e9\n[network.inter]\nlatency_s = 1e-6\nbandwidth = 1e9\n";
  const auto refused = [&](const std::string& nccl, const std::string& what) {
    try {
      (void)io::parse_system(base + nccl, "sys.toml");
      ADD_FAILURE() << nccl;
    } catch (const ParseError& e) {
      EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
    }
  };
  refused("[nccl]\nchannels = 0\np2p_channels_per_peer = 8\n", "nccl.channels");
  refused("[nccl]\nchannels = 65\np2p_channels_per_peer = 8\n", "nccl.channels");
  refused("[nccl]\nchannels = 8\n", "missing key 'p2p_channels_per_peer'");
  refused("[nccl]\nchannels = 8\np2p_channels_per_peer = 8\nbuffsize = 4\n", "buffsize");
  const auto ok =
      io::parse_system(base + "[nccl]\nchannels = 8\np2p_channels_per_peer = 4\n", "sys.toml");
  EXPECT_EQ(ok.nccl.inter_channels, 8);  // the intra count unless given
  EXPECT_EQ(ok.nccl.inter_p2p_channels, 8);
  EXPECT_EQ(ok.nccl.nvls_channels, 0);
}

}  // namespace
}  // namespace pipetab
