// The execution graph (DESIGN.md §6): a table lowered to compute nodes, transfers for every
// cross-device dependency, and collectives decomposed into ring steps over the same links.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "pipetab/model/workload.hpp"
#include "pipetab/system/system.hpp"
#include "pipetab/table/costs.hpp"
#include "pipetab/table/schedule_table.hpp"

namespace pipetab {

/// Most data-parallel replicas a lowering takes (--dp).
inline constexpr std::int32_t kMaxDataParallel = 65536;
/// Most nodes of an execution graph (ops and transfers): node ids are 32-bit. A run takes about
/// 135 bytes per node, so graphs near the limit need tens of GB.
inline constexpr std::int64_t kMaxGraphNodes = std::int64_t{1} << 28;

/// What a transfer carries.
enum class TransferKind : std::uint8_t {
  Activation,        ///< forward, stage s → s+1
  Gradient,          ///< backward, stage s+1 → s
  ReplicaAllReduce,  ///< ring step of the gradient all-reduce between a stage's replicas
  DataAllReduce,     ///< ring step of the data-parallel gradient all-reduce
};

/// "activation", "gradient", "replica all-reduce" or "data-parallel all-reduce".
const char* to_string(TransferKind kind);

/// How a table is lowered.
struct LoweringOptions {
  /// Per-kind op costs in seconds per device share; when set they replace the workload's
  /// compute times (DESIGN.md §7 `--costs` at the simulation level).
  std::optional<Costs> costs;
  /// Data-parallel replicas of the whole pipeline (--dp). Each replica runs the same schedule;
  /// a stage's gradients are all-reduced in a ring over the replicas' NICs (Switched only).
  std::int32_t data_parallel = 1;
  /// Multiplies the bytes of every collective (replica and data-parallel all-reduce): a knob for
  /// sensitivity studies of the gradient traffic, e.g. 0.7 for a compressed or partly overlapped
  /// all-reduce. Must be finite and positive.
  double collective_scale = 1.0;
};

/// Nodes are numbered: compute nodes first (node id = op index in the table), then transfers.
/// Everything is flat arrays; data dependencies are stored by producer (compressed rows).
struct ExecGraph {
  std::int32_t devices = 0;
  std::int64_t compute_nodes = 0;

  // Per node.
  std::vector<std::int32_t> device;         ///< compute: its device; transfer: the sender
  std::vector<std::int32_t> preds;          ///< number of data dependencies (not stream order)
  std::vector<std::int64_t> succ_begin{0};  ///< successors of node n: succ[succ_begin[n] ..]
  std::vector<std::int32_t> succ;

  // Per compute node.
  std::vector<double> duration;         ///< seconds
  std::vector<double> alloc_bytes;      ///< activation allocated when it starts
  std::vector<double> free_bytes;       ///< activation freed when it ends
  std::vector<std::int64_t> row_begin;  ///< device d's stream: compute nodes row_begin[d] ..

  // Per transfer (index = node − compute_nodes).
  std::vector<TransferKind> kind;
  std::vector<std::int32_t> stage;  ///< the stage it serves: the consumer's, or the reduced one
  std::vector<std::int32_t> receiver;
  std::vector<double> bytes;
  std::vector<double> latency_s;
  /// Links of transfer t: route[route_begin[t] ..], each link at most once.
  std::vector<std::int64_t> route_begin{0};
  std::vector<std::int32_t> route;

  // Per device.
  std::vector<double> static_bytes;  ///< weights + gradients + optimizer state of its stages

  std::int64_t nodes() const noexcept { return static_cast<std::int64_t>(device.size()); }
  std::int64_t transfers() const noexcept { return nodes() - compute_nodes; }
  bool is_transfer(std::int64_t node) const noexcept { return node >= compute_nodes; }
};

/// Throws ParamError when `system` cannot take `options`: --dp out of range, or on a chain.
/// lower() checks this too; callers use it to reject a command before any table is built.
void require_supported(const SystemConfig& system, const LoweringOptions& options);

/// The work of every (pipeline, stage) of `table` under `model` ([pipeline * stages + stage]).
std::vector<StageWork> table_work(const ScheduleTable& table, const ModelConfig& model);

/// Lowers a valid table. Compute times come from the workload and the system's achieved FLOP/s,
/// or from `options.costs`; transfers use the workload's message bytes and the network's routes.
/// Two-pipeline tables get a gradient all-reduce between the replicas of each stage, started
/// on each device as soon as its last backward of that stage ends. Throws ParamError for
/// options the system cannot take (require_supported) and for graphs over kMaxGraphNodes.
ExecGraph lower(const ScheduleTable& table, const ModelConfig& model, const Network& network,
                const LoweringOptions& options = {});

}  // namespace pipetab
