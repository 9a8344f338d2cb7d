#include "pipetab/cost/collective.hpp"

#include <algorithm>
#include <cmath>

namespace pipetab::cost {

double collective_steps(CollectiveKind kind, double ranks) {
  return (kind == CollectiveKind::AllReduce ? 2.0 : 1.0) * (ranks - 1.0);
}

double collective_flow_bytes(CollectiveKind kind, double bytes, double ranks) {
  if (ranks <= 1.0 || bytes <= 0.0) return 0.0;
  // An all-to-all sends each of the other ranks 1/p of its own part (bytes/p): p−1 messages of
  // bytes/p² each.
  const double per_step = kind == CollectiveKind::AllToAll ? bytes / ranks / ranks : bytes / ranks;
  return collective_steps(kind, ranks) * per_step;
}

double collective_seconds(CollectiveKind kind, double bytes, double ranks, const LinkSpec& link) {
  if (ranks <= 1.0 || bytes <= 0.0) return 0.0;
  return collective_steps(kind, ranks) * link.latency_s +
         collective_flow_bytes(kind, bytes, ranks) / (link.bandwidth * link.collective_efficiency);
}

}  // namespace pipetab::cost

namespace pipetab::cost {

AllToAllFlows expert_all_to_all_flows(const ExpertAllToAll& a) {
  if (a.ranks <= 1.0 || a.bytes <= 0.0) return {};
  const double per_node = std::clamp(a.per_node, 1.0, a.ranks);
  const double nodes = a.ranks / per_node;
  AllToAllFlows f{a.bytes * (per_node - 1.0) / a.ranks, a.bytes * (a.ranks - per_node) / a.ranks};
  if (a.per_node_dedup && nodes > 1.0) {
    double distinct = nodes * (1.0 - std::pow(1.0 - 1.0 / nodes, a.top_k));
    if (a.node_limit > 0.0) distinct = std::min(distinct, a.node_limit);
    f.remote = a.bytes / a.top_k * distinct * (nodes - 1.0) / nodes;
    // Every row that is not the receiver's own crosses its node's NVLink once: from a peer of
    // its node, or forwarded from the GPU whose NIC took it in.
    f.local = a.bytes * (per_node - 1.0) / per_node;
  }
  return f;
}

double expert_all_to_all_seconds(const ExpertAllToAll& a, const LinkSpec& intra,
                                 const LinkSpec& inter) {
  const AllToAllFlows f = expert_all_to_all_flows(a);
  const auto time = [](double bytes, const LinkSpec& link) {
    if (bytes <= 0.0) return 0.0;
    return link.latency_s + bytes / (link.bandwidth * link.collective_efficiency);
  };
  return std::max(time(f.local, intra), time(f.remote, inter));
}

}  // namespace pipetab::cost
