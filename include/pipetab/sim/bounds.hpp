// What a lowered graph guarantees before it is simulated: a lower bound on its runtime and its
// devices' exact memory peaks. `pipetab plan` uses them to reject and skip layouts without
// running the engine (branch and bound).
#pragma once

#include <vector>

#include "pipetab/sim/graph.hpp"
#include "pipetab/system/system.hpp"

namespace pipetab {

struct GraphBounds {
  /// No simulation of the graph ends earlier: the longest path through the compute nodes (each
  /// device's stream in order) and the transfers between them, each transfer alone on its route
  /// (latency + bytes at the route's smallest bandwidth, no contention), ignoring the
  /// constraints that only delay (Megatron's blocking sends, buckets released early).
  double runtime_lower_bound_s = 0.0;
  /// Per device: static bytes plus the peak of activation memory, walking its stream in order
  /// (each node allocates when it starts and frees when it ends, as the engine does): what the
  /// simulation reports as peak_memory_bytes.
  std::vector<double> peak_memory_bytes;
};

/// Computes the bounds in one pass over the graph (O(nodes + edges)).
GraphBounds graph_bounds(const ExecGraph& graph, const Network& network);

}  // namespace pipetab
