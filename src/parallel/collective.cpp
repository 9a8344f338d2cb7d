#include "pipetab/parallel/collective.hpp"

#include <algorithm>
#include <cmath>

namespace pipetab {

const char* to_string(CollectiveKind kind) {
  switch (kind) {
    case CollectiveKind::AllReduce:
      return "all-reduce";
    case CollectiveKind::ReduceScatter:
      return "reduce-scatter";
    case CollectiveKind::AllGather:
      return "all-gather";
    case CollectiveKind::AllToAll:
      return "all-to-all";
  }
  return "";
}

namespace {

// NCCL's tuning model's constants (NVIDIA/nccl src/graph/tuning.cc, ncclTunerConstantsDefaults
// and treeCorrectionFactor, at commit 5067397 of June 2026), in µs. Protocols in this file's order
// (Simple, LL128, LL); algorithms [tree, ring].
constexpr double kBaseUs[2][3] = {{8.4, 14.0, 6.8}, {8.4, 14.0, 6.6}};
// A hop's latency: [NVLink, PCIe, network][tree, ring][protocol].
constexpr double kHopUs[3][2][3] = {{{4.0, 1.25, 0.6}, {3.4, 1.9, 0.6}},
                                    {{4.0, 1.9, 1.0}, {5.7, 2.5, 1.0}},
                                    {{14.0, 8.5, 5.0}, {14.0, 4.0, 2.7}}};
// NVLS's latency is its NVLink hop alone (hwLat[NVLINK][NVLS][Simple]; no base latency).
constexpr double kNvlsUs = 25.0;
// What nccl-tests measures against NCCL's model, fitted on the two published single-node
// all_reduce_perf sweeps of data/nccl-tests (an A100 NVSwitch node, a PCIe Gen4 server; each fit
// alone, experiments/nccl-tests, docs/simulation.md "Collectives as NCCL runs them"). LL's
// latency is NCCL's as it stands (the multi-node sweeps, one process per GPU, held out, land on
// it: 25.0 µs measured for 16 H100s where the model says 25.2); Simple's and LL128's come out
// longer, ×1.8 over NVLink and ×1.2 over PCIe; LL and LL128 reach less bandwidth than NCCL's
// 0.5 and 0.92: [NVLink, PCIe].
constexpr double kPipelinedLatencyScale[2] = {1.8, 1.2};
constexpr double kRingLlShare[2] = {0.15, 0.36};
constexpr double kRingLl128Share = 0.70;
// A ring step that crosses nodes costs the host's network post at least (getNetOverhead: 1 µs on
// Intel hosts, 2 on AMD; three posts for Simple). Intel's is taken.
constexpr double kNetOverheadUs = 1.0;
// "Trees are not perfectly sticking to the model for medium sizes": NCCL scales a tree
// all-reduce's bandwidth by size, 64 B to 256 MB in powers of two (index log2(bytes / 64)).
constexpr double kTreeCorrection[3][23] = {
    {.9, .9, .9, .9, .9, .9, .9, .8, .7, .6, .6, .5, .5, .5, .5, .6, .7, .8, .7, .7, .8, .9, .9},
    {1, 1, 1, 1, 1, .9, .8, .8, .8, .7, .6, .6, .6, .6, .6, .6, .8, .9, .9, .9, .9, 1, 1},
    {1, 1, 1, 1, .9, .8, .7, .7, .7, .7, .6, .5, .4, .4, .5, .6, .7, .8, .9, 1, 1, 1, 1}};

std::size_t index(CollectiveProtocol p) {
  return static_cast<std::size_t>(p);
}

std::size_t hop_row(LinkMedium m) {
  return m == LinkMedium::Pcie ? 1 : 0;
}

// `c` run as NCCL's ring: what a tree or NVLS falls back to where it cannot run.
Collective as_ring(Collective c) {
  c.algorithm = CollectiveAlgorithm::Ring;
  return c;
}

// Of the algorithm's bus bandwidth, what the protocol carries: on a ring as fitted above; on a
// tree NCCL's model (tuning.cc's "model refinements": LL 1/3.8, LL128 7/9 inside one node and
// 120/128 across nodes, and its correction by size), which no published sweep here tells apart.
double protocol_share(const Collective& c, double nodes, LinkMedium medium) {
  const auto p = c.protocol;
  if (c.algorithm == CollectiveAlgorithm::Tree) {
    double share = p == CollectiveProtocol::LL      ? 1.0 / 3.8
                   : p == CollectiveProtocol::LL128 ? (nodes <= 1.0 ? 7.0 / 9.0 : 120.0 / 128.0)
                                                    : 1.0;
    const double units = std::floor(c.bytes / 64.0);
    if (units >= 1.0) {
      const auto log_size = static_cast<std::size_t>(std::floor(std::log2(units)));
      if (log_size < 23) share *= kTreeCorrection[index(p)][log_size];
    }
    return share;
  }
  if (c.algorithm == CollectiveAlgorithm::Nvls) return 1.0;
  return p == CollectiveProtocol::LL      ? kRingLlShare[hop_row(medium)]
         : p == CollectiveProtocol::LL128 ? kRingLl128Share
                                          : 1.0;
}

}  // namespace

double nccl_latency_s(const Collective& c, const LinkSpec& intra) {
  const auto p = static_cast<double>(c.group.ranks);
  if (p <= 1.0 || !intra.medium) return 0.0;
  const double per_node = std::clamp(static_cast<double>(c.group.per_node), 1.0, p);
  const double nodes = p / per_node;
  const std::size_t proto = index(c.protocol);
  const std::size_t row = hop_row(*intra.medium);
  // LL as NCCL models it; the others as measured (above).
  const double scale = c.protocol == CollectiveProtocol::LL ? 1.0 : kPipelinedLatencyScale[row];
  if (c.algorithm == CollectiveAlgorithm::Nvls) return scale * kNvlsUs * 1e-6;
  if (c.algorithm == CollectiveAlgorithm::Tree && nodes > 1.0) {
    const double depth = std::floor(std::log2(nodes));  // NCCL's log2i
    return scale *
           (kBaseUs[0][proto] +
            2.0 * ((per_node - 1.0) * kHopUs[row][0][proto] + depth * kHopUs[2][0][proto])) *
           1e-6;
  }
  // A ring (and a tree inside one node, which NCCL runs as its chain: the ring's steps).
  const double steps = collective_steps(c.kind, p);
  const double inter_steps = nodes > 1.0 ? collective_steps(c.kind, nodes) : 0.0;
  double intra_hop = kHopUs[row][1][proto];
  if (nodes > 1.0) {
    const double posts = c.protocol == CollectiveProtocol::Simple ? 3.0 : 1.0;
    intra_hop = std::max(intra_hop, posts * kNetOverheadUs);
  }
  return scale *
         (kBaseUs[1][proto] + (steps - inter_steps) * intra_hop +
          inter_steps * kHopUs[2][1][proto]) *
         1e-6;
}

double collective_steps(CollectiveKind kind, double ranks) {
  return (kind == CollectiveKind::AllReduce ? 2.0 : 1.0) * (ranks - 1.0);
}

CollectiveFlows collective_flows(const Collective& c, const LinkSpec& intra,
                                 const LinkSpec& inter) {
  const auto p = static_cast<double>(c.group.ranks);
  // A ring of no bytes still takes its steps' latencies (NCCL runs them); one rank runs nothing.
  if (p <= 1.0 || !(c.bytes >= 0.0)) return {};
  const double per_node = std::clamp(static_cast<double>(c.group.per_node), 1.0, p);
  const bool spans = per_node < p;
  // The NICs of a node a ring or tree spreads over (LinkSpec::collective_nics): each GPU's NIC
  // is priced with that share of the node's traffic.
  const double nics =
      inter.collective_nics > 0.0 ? std::min(per_node, inter.collective_nics) : per_node;
  CollectiveFlows f;
  switch (c.algorithm) {
    case CollectiveAlgorithm::Ring:
    case CollectiveAlgorithm::Neighbour: {
      const double steps = collective_steps(c.kind, p);
      // Each step sends bytes/p (an all-to-all as a ring would: bytes/p² a message); across
      // nodes the ring's channels share the node's NICs, a neighbour exchange does not.
      const double buffer = c.kind == CollectiveKind::AllToAll ? c.bytes / p : c.bytes;
      const bool ring = c.algorithm == CollectiveAlgorithm::Ring;
      const double share = spans && ring ? 1.0 / nics : 1.0;
      // A chunk's path around NCCL's ring leaves each node once: of its steps, only one per node
      // boundary crossed (2(nodes − 1) for an all-reduce) pays the network's latency, the others
      // NVLink's (NCCL's tuning model, src/graph/tuning.cc: (nsteps − nInterSteps)·intraLat +
      // nInterSteps·interLat). A neighbour exchange steps in lockstep: each step waits for the
      // rank that sends over its NIC.
      const double inter_steps = !spans ? 0.0
                                 : ring ? collective_steps(c.kind, p / per_node)
                                        : steps;
      // On a system whose links name their medium, NCCL's own model prices the ring: its
      // latency and its protocol's share of the bandwidth (as bytes more to move).
      const bool nccl = ring && intra.medium.has_value();
      const double latency =
          nccl ? nccl_latency_s(c, intra)
               : (steps - inter_steps) * intra.latency_s + inter_steps * inter.latency_s;
      const double step_bytes =
          buffer / p * share / (nccl ? protocol_share(c, p / per_node, *intra.medium) : 1.0);
      (spans ? f.remote : f.local) = {steps * step_bytes, latency, steps, step_bytes,
                                      latency / steps};
      return f;
    }
    case CollectiveAlgorithm::Direct:
    case CollectiveAlgorithm::NodeDedup: {
      // NCCL's all-to-all as nccl-tests' alltoall_perf measures it (LinkSpec::alltoall_*): its
      // intercept as the latency, and its share of the bandwidth as bytes more to move at the
      // collective rate every consumer prices (as NVLS does below). DeepEP takes the link's
      // latency and its own share (LinkSpec::deepep_efficiency: a cluster's measured one;
      // unset, the collective rate, which its published benchmarks match; docs/simulation.md).
      const bool nccl = c.algorithm == CollectiveAlgorithm::Direct;
      const auto slower = [&](const LinkSpec& link) {
        return link.collective_efficiency / (nccl ? link.alltoall_share() : link.deepep_share());
      };
      const auto flow = [&](double bytes, const LinkSpec& link) -> CollectiveFlow {
        const double latency = nccl ? link.alltoall_latency() : link.latency_s;
        return {bytes * slower(link), latency, 1.0, 0.0, latency};
      };
      f.local = flow(c.bytes * (per_node - 1.0) / p, intra);
      f.remote = flow(c.bytes * (p - per_node) / p, inter);
      const double nodes = p / per_node;
      if (c.algorithm == CollectiveAlgorithm::NodeDedup) {
        // DeepEP sends a token once to each GPU that holds any of its experts, not once per
        // expert (deepseek-ai/DeepEP get_dispatch_layout: num_tokens_per_rank, is_token_in_rank;
        // the combine returns one row per token and GPU): of a token's top_k rows over experts
        // spread evenly, reach·(1 − (1 − 1/reach)^k) distinct GPUs, reach the group's ranks or
        // those of the node_limit nodes it may use. Each crosses its node's NVLink unless it is
        // the GPU that holds the token there (1 in per_node): its sender, or the GPU whose NIC
        // took it in.
        const double reach = c.node_limit > 0.0 ? std::min(p, c.node_limit * per_node) : p;
        const double k = std::max(c.top_k, 1.0);
        const double per_gpu = c.bytes / k * reach * (1.0 - std::pow(1.0 - 1.0 / reach, k));
        f.local.bytes = per_gpu * (per_node - 1.0) / per_node * slower(intra);
        if (nodes > 1.0) {
          // And its RDMA pipeline once per destination node, its own node included:
          // nodes·(1 − (1 − 1/nodes)^k) distinct nodes per token, at most node_limit. DeepEP's
          // and HybridEP's published internode bandwidths count those bytes (DeepEP
          // tests/test_internode.py num_rdma_token_sent, which deepseek-ai/DeepEP#51 and #285
          // confirm includes the own node; HybridEP tests/utils.py
          // count_rdma_send_from_routing_map, "to align with DeepEP"), and at those bytes the
          // kernels reach about the NIC's rate at every EP size: 43, 58, 51 GB/s at EP 16, 32,
          // 64 on H800, HybridEP's 41-54 on H100 at 16 SMs. Counted over the remote nodes alone
          // they would reach 21.5 to 45 GB/s, half the NIC at two nodes (docs/simulation.md).
          double distinct = nodes * (1.0 - std::pow(1.0 - 1.0 / nodes, k));
          if (c.node_limit > 0.0) distinct = std::min(distinct, c.node_limit);
          f.remote.bytes = c.bytes / k * distinct * slower(inter);
        }
      }
      f.local.step_bytes = f.local.bytes;
      f.remote.step_bytes = f.remote.bytes;
      if (!(f.local.bytes > 0.0)) f.local = {};
      if (!(f.remote.bytes > 0.0)) f.remote = {};
      return f;
    }
    case CollectiveAlgorithm::Tree: {
      // Up the tree and down again: the node's NICs send and receive the buffer once each way,
      // per_node of them sharing it, at 92 % of the ring's rate; one step, its latency the
      // chain's hops inside the node and the tree's between nodes, both ways. Within one node
      // NCCL's tree is its chain (the ring's step count at a lower rate): a ring.
      if (!spans || c.kind != CollectiveKind::AllReduce)
        return collective_flows(as_ring(c), intra, inter);
      const double nodes = p / per_node;
      const double depth = std::floor(std::log2(nodes));  // NCCL's log2i
      const bool nccl = intra.medium.has_value();
      const double latency =
          nccl ? nccl_latency_s(c, intra)
               : 2.0 * ((per_node - 1.0) * intra.latency_s + depth * inter.latency_s);
      // Where the node runs NVLS, NCCL's tree across nodes is NVLS-Tree, whose network bandwidth
      // its model doubles at two nodes (tuning.cc: interBw × 2 when nNodes ≤ 2). That holds where
      // NCCL's channels, not the NICs, bound it: two GB200 racks reach 810 GB/s of bus bandwidth
      // where twenty reach 406 (data/nccl-tests); two DGX H100 nodes, every NIC in use, stay near
      // what their NICs carry one way (468 GB/s measured, about 700 doubled).
      const double nvls_pair =
          nvls_available(c, intra) && nodes <= 2.0 && nics < per_node ? 2.0 : 1.0;
      const double bytes = 2.0 * c.bytes / nics / kTreeBandwidthShare / nvls_pair /
                           (nccl ? protocol_share(c, nodes, *intra.medium) : 1.0);
      f.remote = {bytes, latency, 1.0, bytes, latency};
      return f;
    }
    case CollectiveAlgorithm::Nvls: {
      if (spans || c.kind != CollectiveKind::AllReduce || !nvls_available(c, intra))
        return collective_flows(as_ring(c), intra, inter);
      // (p − 1)/p of the buffer each way at nvls_efficiency of the link, carried as bytes at the
      // ring's rate (collective_efficiency), so that under either CollectiveRate NVLS stands to
      // the ring as NCCL's bus bandwidths do.
      const double bytes =
          c.bytes * (p - 1.0) / p * intra.collective_efficiency / intra.nvls_efficiency;
      const double latency = intra.medium ? nccl_latency_s(c, intra) : intra.latency_s;
      f.local = {bytes, latency, 1.0, bytes, latency};
      return f;
    }
  }
  return f;
}

double collective_rate(const Collective& c, const LinkSpec& link) {
  return link.bandwidth * (c.rate == CollectiveRate::Achieved ? link.collective_efficiency : 1.0);
}

double collective_seconds(const Collective& c, const LinkSpec& intra, const LinkSpec& inter) {
  const CollectiveFlows f = collective_flows(c, intra, inter);
  const auto time = [&](const CollectiveFlow& flow, const LinkSpec& link) {
    if (!(flow.bytes > 0.0)) return 0.0;
    return flow.latency_s + flow.bytes / collective_rate(c, link);
  };
  return std::max(time(f.local, intra), time(f.remote, inter));
}

Collective nccl_algorithm(Collective c, const LinkSpec& intra, const LinkSpec& inter) {
  // Only NCCL's ring collectives have a choice; the others keep what their use gives.
  if (c.algorithm != CollectiveAlgorithm::Ring || c.group.ranks <= 1) return c;
  const bool all_reduce = c.kind == CollectiveKind::AllReduce;
  const bool spans = c.group.spans_nodes();
  // NCCL's tree and NVLS serve all-reduces only (NVLS inside one node: across nodes it needs
  // CollNet or NVLS-Tree, not modelled) and NVLS only Simple; LL128 runs only where the node's
  // links are NVLink (tuning.cc: typeIntra ≤ PATH_NVB); protocols only where the links name their
  // medium.
  const auto runs = [&](CollectiveAlgorithm a, CollectiveProtocol p) {
    if (a == CollectiveAlgorithm::Tree && !(all_reduce && spans)) return false;
    if (a == CollectiveAlgorithm::Nvls &&
        !(all_reduce && !spans && nvls_available(c, intra) && p == CollectiveProtocol::Simple))
      return false;
    if (p == CollectiveProtocol::Simple) return true;
    return intra.medium && (p == CollectiveProtocol::LL || *intra.medium == LinkMedium::NvLink);
  };
  Collective best = c;
  best.protocol = CollectiveProtocol::Simple;
  double best_s = collective_seconds(best, intra, inter);
  for (const auto a :
       {CollectiveAlgorithm::Ring, CollectiveAlgorithm::Tree, CollectiveAlgorithm::Nvls}) {
    for (const auto p :
         {CollectiveProtocol::Simple, CollectiveProtocol::LL128, CollectiveProtocol::LL}) {
      if (!runs(a, p)) continue;
      Collective candidate = c;
      candidate.algorithm = a;
      candidate.protocol = p;
      const double s = collective_seconds(candidate, intra, inter);
      if (s < best_s) {
        best = candidate;
        best_s = s;
      }
    }
  }
  return best;
}

}  // namespace pipetab
