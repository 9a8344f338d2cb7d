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
  CollectiveFlows f;
  switch (c.algorithm) {
    case CollectiveAlgorithm::Ring:
    case CollectiveAlgorithm::Neighbour: {
      const double steps = collective_steps(c.kind, p);
      // Each step sends bytes/p (an all-to-all as a ring would: bytes/p² a message); across
      // nodes the ring's channels share the node's NICs, a neighbour exchange does not.
      const double buffer = c.kind == CollectiveKind::AllToAll ? c.bytes / p : c.bytes;
      const bool ring = c.algorithm == CollectiveAlgorithm::Ring;
      const double share = spans && ring ? 1.0 / per_node : 1.0;
      // A chunk's path around NCCL's ring leaves each node once: of its steps, only one per node
      // boundary crossed (2(nodes − 1) for an all-reduce) pays the network's latency, the others
      // NVLink's (NCCL's tuning model, src/graph/tuning.cc: (nsteps − nInterSteps)·intraLat +
      // nInterSteps·interLat). A neighbour exchange steps in lockstep: each step waits for the
      // rank that sends over its NIC.
      const double inter_steps = !spans ? 0.0
                                 : ring ? collective_steps(c.kind, p / per_node)
                                        : steps;
      const double latency =
          (steps - inter_steps) * intra.latency_s + inter_steps * inter.latency_s;
      (spans ? f.remote : f.local) = {steps * buffer / p * share, latency, steps,
                                      buffer / p * share, latency / steps};
      return f;
    }
    case CollectiveAlgorithm::Direct:
    case CollectiveAlgorithm::NodeDedup: {
      f.local = {c.bytes * (per_node - 1.0) / p, intra.latency_s, 1.0, 0.0, intra.latency_s};
      f.remote = {c.bytes * (p - per_node) / p, inter.latency_s, 1.0, 0.0, inter.latency_s};
      const double nodes = p / per_node;
      if (c.algorithm == CollectiveAlgorithm::NodeDedup && nodes > 1.0) {
        // ranks_nodes·(1 − (1 − 1/nodes)^k) distinct nodes per token, at most node_limit, of which
        // (nodes − 1)/nodes remote; every row not the receiver's own crosses its node's NVLink
        // once: from a peer of its node, or forwarded from the GPU whose NIC took it in.
        double distinct = nodes * (1.0 - std::pow(1.0 - 1.0 / nodes, c.top_k));
        if (c.node_limit > 0.0) distinct = std::min(distinct, c.node_limit);
        f.remote.bytes = c.bytes / c.top_k * distinct * (nodes - 1.0) / nodes;
        f.local.bytes = c.bytes * (per_node - 1.0) / per_node;
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
      if (!spans) {
        Collective ring = c;
        ring.algorithm = CollectiveAlgorithm::Ring;
        return collective_flows(ring, intra, inter);
      }
      const double nodes = p / per_node;
      const double depth = std::floor(std::log2(nodes));  // NCCL's log2i
      const double latency = 2.0 * ((per_node - 1.0) * intra.latency_s + depth * inter.latency_s);
      const double bytes = 2.0 * c.bytes / per_node / kTreeBandwidthShare;
      f.remote = {bytes, latency, 1.0, bytes, latency};
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
  // NCCL's tree serves all-reduces only; other collectives keep the algorithm their use gives.
  if (c.kind != CollectiveKind::AllReduce || c.algorithm != CollectiveAlgorithm::Ring ||
      !c.group.spans_nodes())
    return c;
  Collective tree = c;
  tree.algorithm = CollectiveAlgorithm::Tree;
  return collective_seconds(tree, intra, inter) < collective_seconds(c, intra, inter) ? tree : c;
}

}  // namespace pipetab
