// The one rule for every collective (docs/design.md §10): a collective's kind, its group (ranks
// from placement.hpp), its bytes and its algorithm give one rank's side of it as flows over that
// rank's links — over its node's switch and over its NIC — which the simulation runs (sharing the
// links with everything else), and the closed form the cost layer and plan's bounds use: each
// flow's latency plus its bytes at its link's rate, the two at once. A new algorithm (a tree,
// NVLink SHARP) is a new case here; a new use (a parallel dimension) is a new group in
// placement.hpp, not a new mechanism.
#pragma once

#include <array>
#include <cstdint>
#include <string_view>

#include "pipetab/names.hpp"
#include "pipetab/parallel/placement.hpp"
#include "pipetab/system/system.hpp"

namespace pipetab {

/// What a collective computes.
enum class CollectiveKind : std::uint8_t { AllReduce, ReduceScatter, AllGather, AllToAll };

/// "all-reduce", "reduce-scatter", "all-gather", "all-to-all".
const char* to_string(CollectiveKind kind);

/// How a collective moves its bytes.
enum class CollectiveAlgorithm : std::uint8_t {
  /// NCCL's ring (Thakur, Rabenseifner and Gropp 2005; NCCL's bus bandwidth, nccl-tests
  /// PERFORMANCE.md): p−1 steps (2(p−1) for an all-reduce), each sending bytes/p to the next
  /// rank. Across nodes NCCL runs one ring per NIC (its channels; rail-optimised clusters give
  /// each GPU its NIC), so a node's group members share the inter-node traffic: each rank's NIC
  /// carries 1/per_node of its side. Its latency is NCCL's: a network hop per node boundary a
  /// chunk crosses (2(nodes − 1) for an all-reduce), an NVLink hop for each other step.
  Ring,
  /// A ring of point-to-point sends, each step to the next rank (Transformer Engine's p2p
  /// context parallelism): the same steps and bytes as Ring, but no channels spread them — the
  /// rank whose neighbour is on another node sends its whole side over its own NIC, and that rank
  /// bounds the exchange.
  Neighbour,
  /// Every rank sends each peer its part at once (NCCL's all-to-all as grouped send/receive;
  /// bytes = one rank's buffer, its own part included): (per_node − 1)/p of it to the peers on its
  /// node over the switch and (p − per_node)/p to the others over its NIC, the two at once, each
  /// after the link's all-to-all latency and at its all-to-all share of the bandwidth
  /// (LinkSpec::alltoall_*: nccl-tests' alltoall_perf).
  Direct,
  /// DeepEP's dispatch (DeepSeek-V3 report §3.2.2; deepseek-ai/DeepEP): as Direct, but a token
  /// crosses the network once per destination node (of `top_k` rows, to at most `node_limit`
  /// nodes), what arrives over the NIC is forwarded to the node's GPUs over NVLink, and each GPU
  /// receives a token once however many of its experts the token chose.
  NodeDedup,
  /// NCCL's double binary tree for an all-reduce across nodes (NCCL 2.4; src/graph/tuning.cc,
  /// ncclTopoTuneModel): a chain of the node's per_node ranks, then a tree over the nodes,
  /// reduced up and broadcast down. Its latency is 2((per_node − 1) intra + ⌊log2 nodes⌋ inter)
  /// hops where a ring's grows with its 2(p − 1) steps; it moves the buffer up and down, each
  /// node's NICs carrying 2·bytes among them, at 92 % of the ring's bus bandwidth (NCCL's
  /// `busBw * .92` for a tree all-reduce). NCCL picks it where it is the faster (nccl_algorithm).
  Tree,
  /// NCCL's NVLink SHARP all-reduce inside one node (NCCL 2.17; NVSwitch 3 and later): the
  /// switch reduces and multicasts, so each rank sends and receives (p − 1)/p of the buffer once
  /// where a ring moves it twice, at the link's `nvls_efficiency`; NCCL's model gives it a fixed
  /// 25 µs latency and no protocol but Simple. Only where the node's links offer it.
  Nvls,
};

inline constexpr std::array<std::string_view, 6> kCollectiveAlgorithmNames{
    "ring", "neighbour", "direct", "node-dedup", "tree", "nvls"};

/// NCCL's protocols (tuning.cc; NCCL's "LL128" design notes in src/device/prims_ll128.h): LL
/// sends 8-byte lines of 4 data and 4 flag bytes, at half the bandwidth but the least latency;
/// LL128 128-byte lines of 120 data bytes, only over NVLink; Simple whole chunks behind a memory
/// fence, the full bandwidth and the most latency. NCCL picks, per call, the algorithm and
/// protocol its model says is the fastest for the message size (nccl_algorithm).
enum class CollectiveProtocol : std::uint8_t { Simple, LL128, LL };

inline constexpr std::array<std::string_view, 3> kCollectiveProtocolNames{"simple", "ll128", "ll"};

constexpr std::string_view to_string(CollectiveProtocol p) {
  return name_of(kCollectiveProtocolNames, p);
}

/// The share of the ring's bus bandwidth NCCL's tuning model gives a tree all-reduce
/// (src/graph/tuning.cc: `busBw = std::min(busBw*.92, …)` for NCCL_ALGO_TREE, ncclFuncAllReduce).
inline constexpr double kTreeBandwidthShare = 0.92;

constexpr std::string_view to_string(CollectiveAlgorithm a) {
  return name_of(kCollectiveAlgorithmNames, a);
}

/// The rate a collective's flows run at on a link: the collective bandwidth NCCL reaches on it
/// (β × collective_efficiency: the tensor-parallel collectives, the context-parallel and expert
/// exchanges), or the link's own β (the data-parallel and FSDP rings of the simulation, whose
/// contention with the other traffic on the link stands in for the rest: reference
/// measurements.md; the Selene fit was made so).
enum class CollectiveRate : std::uint8_t { Achieved, Link };

/// One collective of a run.
struct Collective {
  CollectiveKind kind = CollectiveKind::AllReduce;
  Group group;
  /// The buffer: all ranks' parts together (all-reduce, reduce-scatter, all-gather: NCCL's
  /// "size"); for an all-to-all one rank's buffer, its own part included.
  double bytes = 0.0;
  CollectiveAlgorithm algorithm = CollectiveAlgorithm::Ring;
  CollectiveRate rate = CollectiveRate::Achieved;
  /// Used by Ring, Tree and Nvls where the node's links name their medium (LinkSpec::medium).
  CollectiveProtocol protocol = CollectiveProtocol::Simple;
  double top_k = 1.0;       ///< NodeDedup: rows per token
  double node_limit = 0.0;  ///< NodeDedup: at most this many nodes per token (0: no limit)
  /// NCCL may run NVLink SHARP where the node offers it (Stack::nccl_nvls; NCCL_NVLS_ENABLE=0
  /// turns it off): the Nvls algorithm and the NVLS-Tree's doubled bandwidth at two nodes.
  bool nvls = true;
};

/// Whether `c` may run NVLS on a node with links `intra`: its stack lets NCCL and the switch has
/// SHARP.
inline bool nvls_available(const Collective& c, const LinkSpec& intra) {
  return c.nvls && intra.nvls_efficiency > 0.0;
}

/// One flow of a rank's side: its bytes after its latency, over the rank's switch port or NIC;
/// and one of its steps (a ring's, each a latency and bytes/p; the whole flow for the others),
/// for a lowering that runs them one by one.
struct CollectiveFlow {
  double bytes = 0.0;
  double latency_s = 0.0;
  double steps = 0.0;
  double step_bytes = 0.0;
  double step_latency_s = 0.0;
};

/// A rank's side of a collective: what it moves over its node's switch and over its NIC, at once.
struct CollectiveFlows {
  CollectiveFlow local, remote;
};

/// A ring's steps: p−1, or 2(p−1) for an all-reduce (reduce-scatter, then all-gather); an
/// all-to-all's p−1 messages. 0 for one rank.
double collective_steps(CollectiveKind kind, double ranks);

/// The rule: a rank's side of `c` as flows (none for one rank; a ring of no bytes still its
/// latencies, the other algorithms nothing).
CollectiveFlows collective_flows(const Collective& c, const LinkSpec& intra, const LinkSpec& inter);

/// The rate flow `nic` (the NIC's, else the switch port's) of `c` runs at on `link`.
double collective_rate(const Collective& c, const LinkSpec& link);

/// Its closed form alone on its links: the longer of its two flows, each its latency plus its
/// bytes at its rate.
double collective_seconds(const Collective& c, const LinkSpec& intra, const LinkSpec& inter);

/// NCCL's choice of algorithm and protocol for a ring collective, as its tuning model makes it
/// (the one with the least latency plus bytes over bandwidth): a ring all-reduce across nodes
/// becomes a tree where the tree is the faster — small buffers, many nodes (a 25 MB bucket over
/// 1,024 ranks pays a ring's 2,046 latencies, a tree's 2·(7 + 7)); an all-reduce inside an
/// NVSwitch node with SHARP becomes NVLS where that is the faster (large buffers); and where the
/// node's links name their medium, the protocol by message size (LL for a few kilobytes, LL128
/// over NVLink in between, Simple for large buffers). Every other collective is returned as it is.
Collective nccl_algorithm(Collective c, const LinkSpec& intra, const LinkSpec& inter);

/// nccl-tests run with -g N drives N GPUs from one thread, which launches each call's kernels one
/// GPU after the other: the last starts (N − 1) launches late. Fitted with NCCL's latencies on the
/// two published single-process sweeps of data/nccl-tests (2.4 µs per GPU on the A100 node, 2.8 on
/// the PCIe server; experiments/nccl-tests). Training runs a process per GPU and never pays it:
/// `pipetab collective -g N` adds it to compare with such a sweep.
inline constexpr double kNcclTestsLaunchPerGpuS = 2.6e-6;

/// NCCL's latency of `c` by its tuning model (tuning.cc, ncclTopoTuneModel and
/// ncclTopoGetAlgoTime), in seconds: the algorithm's and protocol's base latency plus a hop's
/// for each step — the intra medium's hops within the node, the network's for each node boundary
/// a chunk crosses. For Ring, Tree and Nvls where `intra.medium` is set.
double nccl_latency_s(const Collective& c, const LinkSpec& intra);

}  // namespace pipetab
