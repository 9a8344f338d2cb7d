// What a lowered graph guarantees before it is simulated: a lower bound on its runtime and its
// devices' memory peaks (exact, or a lower bound with activation offload). `pipetab plan` uses them
// to reject and skip layouts without running the engine (branch and bound).
#pragma once

#include <span>
#include <vector>

#include "pipetab/sim/graph.hpp"
#include "pipetab/system/system.hpp"
#include "pipetab/table/schedule_table.hpp"

namespace pipetab {

struct GraphBounds {
  /// No simulation of the graph ends earlier: the longest path through the compute nodes (each
  /// device's stream in order) and the transfers between them, each transfer alone on its route
  /// (latency + bytes at the route's smallest bandwidth, no contention), ignoring the
  /// constraints that only delay (Megatron's blocking sends, buckets released early).
  double runtime_lower_bound_s = 0.0;
  /// Per device: static bytes plus the peak of activation memory, walking its stream in order
  /// (each node allocates when it starts and frees when it ends, as the engine does): what the
  /// simulation reports as peak_memory_bytes. With activation offload, a lower bound: the
  /// copies taken as on time (offloaded bytes gone when their forward ends, reloaded ones back
  /// when their backward starts), where the simulation reloads an op ahead and waits for copies.
  std::vector<double> peak_memory_bytes;
};

/// What each device's stream alone guarantees: its busy time (the sum of its compute nodes'
/// durations, run one after another on the device) and its memory peak as in GraphBounds. For
/// the whole graph or lower_compute's part of it (the same durations or less, the same memory).
struct DeviceBounds {
  std::vector<double> busy_s;
  std::vector<double> peak_memory_bytes;
  /// With the graph's table: what its passes take on each device in whatever order (the
  /// table's own, or any other of the same passes on the same devices: the authors' schedulers
  /// order a layout's passes themselves, and plan bounds them with a registered table of the same
  /// passes before they are planned). Each device's busy time after the earliest its first op
  /// can start (the forwards of the stages before it) and, where it runs no W, its table ops
  /// before the backwards of the stages before its last one: the pipeline's fill and drain.
  /// 0 without the table.
  double compute_path_s = 0.0;
  /// The largest busy time, or the compute path if longer: no simulation of the graph ends
  /// earlier.
  double runtime_lower_bound_s() const;
};

DeviceBounds device_bounds(const ExecGraph& graph);

/// device_bounds with compute_path_s: `table` is the one the graph was lowered from, or one of
/// the same passes on the same devices in another order (its compute nodes [0, table_ops) are
/// the table's ops).
DeviceBounds device_bounds(const ExecGraph& graph, const ScheduleTable& table);

/// device_bounds(lower_compute(...), table), the same numbers, without the graph where it can:
/// where no op runs steps (exchanges inside its layers), merges with another (--a2a-overlap) or
/// offloads, each op's duration and memory come from its stages' costs in one pass over the
/// table (O(ops), one array). What `plan` checks and orders every layout by.
DeviceBounds compute_bounds(const ScheduleTable& table, const ModelConfig& model, const Job& job,
                            const Layout& layout, const Network& network,
                            const LoweringOptions& options = {});

/// The compute path of DeviceBounds: `durations` per table op (the shortest each can take),
/// `busy` per device.
double any_order_path_s(const ScheduleTable& table, std::span<const double> durations,
                        std::span<const double> busy);

/// Computes the bounds in one pass over the graph (O(nodes + edges)).
GraphBounds graph_bounds(const ExecGraph& graph, const Network& network);

}  // namespace pipetab
