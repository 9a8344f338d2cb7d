// The discrete-event engine (docs/design.md §6): runs an execution graph over a network.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "pipetab/error.hpp"
#include "pipetab/sim/graph.hpp"
#include "pipetab/system/system.hpp"

namespace pipetab {

struct SimOptions {
  /// Concurrent transfers on a link share its bandwidth max-min fairly, recomputed whenever a
  /// transfer starts or ends. Without contention every transfer takes α + bytes/β alone.
  bool contention = true;
  /// A device's compute stream waits for the transfers its ops send (pipeline activations and
  /// gradients), as a runtime without communication overlap would. (The Megatron runtime of
  /// LoweringOptions marks its transfers so in the graph.)
  bool blocking_send = false;
  /// Keep each device's memory over time (for traces).
  bool record_memory = false;
};

/// Per device results.
struct DeviceResult {
  /// time running the table's ops, but their waits for FSDP's per-block collectives
  double compute_s = 0.0;
  /// of compute_s, exposed communication inside the ops: tensor-parallel collectives, context-
  /// parallel exchanges, all-to-alls
  double tp_comm_s = 0.0;
  double expert_comm_s = 0.0;   ///< of tp_comm_s, the experts' all-to-alls
  double overhead_s = 0.0;      ///< of compute_s, the host's time per pipeline step
  double interference_s = 0.0;  ///< of compute_s, compute slowed by communication beside it
  double optimizer_s = 0.0;     ///< time in the optimizer step
  /// Not computing while a transfer from or to it is in flight: pipeline transfers first, then
  /// collectives (gradient reductions, parameter all-gather) while no pipeline transfer is; the
  /// collectives include the ops' waits for FSDP's per-block gathers and reduce-scatters.
  double exposed_comm_s = 0.0;
  double exposed_pipeline_s = 0.0;
  double exposed_collective_s = 0.0;
  double idle_s = 0.0;        ///< none of these: runtime − compute − optimizer − exposed comm
  double static_bytes = 0.0;  ///< weights, gradients, optimizer state
  double peak_memory_bytes = 0.0;  ///< static + activations at the peak
  double peak_memory_time_s = 0.0;
  /// Activation offload: the most of its activations in host memory at once (one GPU's).
  double peak_host_bytes = 0.0;
};

/// Per link results.
struct LinkResult {
  double bytes = 0.0;
  double busy_s = 0.0;  ///< time with at least one transfer moving data on it
  /// Largest Σ rates / bandwidth that lasted a positive time: ≤ 1 with contention; without it
  /// transfers ignore each other and it may exceed 1 (how oversubscribed the link would be).
  double max_utilization = 0.0;
};

/// A point of a device's memory curve.
struct MemoryPoint {
  double time_s = 0.0;
  double bytes = 0.0;
};

/// The outcome of a simulation.
struct SimResult {
  double runtime_s = 0.0;       ///< the iteration: from the first event to the last
  double pipeline_end_s = 0.0;  ///< when the last op of the table ended
  double idle_ratio = 0.0;      ///< 1 − Σ (compute + optimizer) / (devices × runtime)
  /// Per-device-span idle ratio (Def-A, the zero-bubble papers' bubble rate, with communication):
  /// 1 − mean compute / the longest span from a device's first compute start to its last end.
  double span_idle_ratio = 0.0;
  std::vector<DeviceResult> devices;
  std::vector<LinkResult> links;
  std::vector<double> start, end;  ///< per node; a transfer starts when it is issued
  /// Per compute node, the time it waited inside itself for its exchanges (ExecGraph::steps;
  /// empty when no op has steps): its exposed all-to-alls and context-parallel exchanges.
  std::vector<double> waited;
  /// Of `waited`, the waits for copies from host memory (offload inside the passes): the op's
  /// stall, counted as its compute and not as communication. Empty when `waited` is.
  std::vector<double> waited_host;
  /// Nodes from the first to the last event, each the one that held up the next.
  std::vector<std::int32_t> critical_path;
  std::vector<std::vector<MemoryPoint>> memory;  ///< per device, if recorded
  std::int64_t events = 0;
};

/// A run whose waits form a cycle: `ran` of `total` compute nodes ran, and each device in
/// `stuck` waits before `node`, its `position`-th compute node (1-based) of `count`.
/// simulate_table restates it in the table's terms.
class DeadlockError : public ParamError {
 public:
  struct Stuck {
    std::int32_t device = 0, node = 0;
    std::int64_t position = 0, count = 0;
  };
  DeadlockError(const std::string& message, std::int64_t ran_nodes, std::int64_t total_nodes,
                std::vector<Stuck> stuck_devices)
      : ParamError(message), ran(ran_nodes), total(total_nodes), stuck(std::move(stuck_devices)) {}
  std::int64_t ran = 0, total = 0;
  std::vector<Stuck> stuck;
};

/// Runs the graph. Deterministic: events at equal times are taken in the order they were
/// scheduled. O(events · log events) plus, with contention, the water-filling of the transfers
/// that share links with one that starts or ends. Throws Error for a route that lists a link
/// twice, and DeadlockError when the graph deadlocks (a runtime's waits can make a table's order
/// impossible), naming where each stuck device waits.
SimResult simulate(const ExecGraph& graph, const Network& network, const SimOptions& options = {});

}  // namespace pipetab
