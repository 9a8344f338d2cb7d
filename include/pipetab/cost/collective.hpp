// Collectives inside a stage (tensor parallelism), costed analytically on a link class.
#pragma once

#include "pipetab/model/operators.hpp"
#include "pipetab/system/system.hpp"

namespace pipetab::cost {

/// Seconds of a ring collective over `ranks` ranks on `link`, of a buffer of `bytes` (all
/// ranks' parts together): an all-reduce is 2(p−1) steps, a reduce-scatter or an all-gather p−1
/// steps, each α plus bytes/p (an all-to-all, p−1 messages of bytes/p² each) at the link's
/// collective bandwidth (β · collective_efficiency; Thakur, Rabenseifner and Gropp 2005; NCCL's bus
/// bandwidth, nccl-tests PERFORMANCE.md). 0 for one rank.
double collective_seconds(CollectiveKind kind, double bytes, double ranks, const LinkSpec& link);

/// That collective's steps, and the bytes one rank sends over them all (each step's bytes/p, or
/// bytes/p² for an all-to-all): the flow the simulation runs for it.
double collective_steps(CollectiveKind kind, double ranks);
double collective_flow_bytes(CollectiveKind kind, double bytes, double ranks);

}  // namespace pipetab::cost

namespace pipetab::cost {

/// A mixture-of-experts layer's all-to-all over its expert-parallel group, from the busiest
/// receiver's side (reference modern-runs.md §C.3: the all-to-all is bounded by it).
struct ExpertAllToAll {
  double bytes = 0.0;     ///< the rows the rank receives, its own share included
  double ranks = 1.0;     ///< EP
  double per_node = 1.0;  ///< of them, on one node (the group spans ranks / per_node nodes)
  double top_k = 1.0;     ///< rows per routed token
  /// DeepEP: a token crosses the network once per destination node, then NVLink forwards it.
  bool per_node_dedup = false;
  double node_limit = 0.0;  ///< at most this many nodes per token (0: no limit)
};

/// Seconds of that all-to-all. With uniform routing a rank receives (per_node − 1)/ranks of its
/// rows from the other GPUs of its node, over its switch port, and (ranks − per_node)/ranks from
/// other nodes, over its NIC; the two run at once, so the longer bounds it, each at the link's
/// collective bandwidth plus one latency (NCCL posts every peer's send and receive in one group).
/// With per_node_dedup a token's rows bound for a node arrive once: ranks_nodes·(1 − (1 −
/// 1/nodes)^k) distinct nodes per token, at most node_limit, of which (nodes − 1)/nodes remote;
/// what arrives from the network is then forwarded inside the node.
double expert_all_to_all_seconds(const ExpertAllToAll& a2a, const LinkSpec& intra,
                                 const LinkSpec& inter);

/// What the busiest rank of that all-to-all receives over its node's links (`local`) and over its
/// NIC (`remote`), as above: the two flows the simulation runs (each at most the link's
/// collective bandwidth, after the link's latency), sharing the links with the other traffic.
struct AllToAllFlows {
  double local = 0.0, remote = 0.0;
};
AllToAllFlows expert_all_to_all_flows(const ExpertAllToAll& a2a);

}  // namespace pipetab::cost
