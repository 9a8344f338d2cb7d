// The execution graph (DESIGN.md §6): a table lowered to compute nodes, transfers for every
// cross-device dependency, collectives decomposed into ring steps over the same links, and the
// end of the iteration (gradient reductions, synchronisation, optimizer step).
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

#include "pipetab/cost/stage_cost.hpp"
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
  Activation,          ///< forward, stage s → s+1
  Gradient,            ///< backward, stage s+1 → s
  ReplicaAllReduce,    ///< ring step of the gradient all-reduce between a stage's replicas
  DataAllReduce,       ///< ring step of the data-parallel gradient reduction
  EmbeddingAllReduce,  ///< ring step of the tied word embedding's gradient all-reduce
  ParamAllGather,      ///< ring step of the distributed optimizer's parameter all-gather
  Sync,                ///< end-of-iteration synchronisation of all stages: latency, no bytes
};

/// "activation", "gradient", "replica all-reduce", "data-parallel reduction", "embedding
/// all-reduce", "parameter all-gather", "synchronisation".
const char* to_string(TransferKind kind);

/// Pipeline traffic (activations and gradients) as opposed to collectives and the sync.
constexpr bool is_pipeline(TransferKind kind) {
  return kind == TransferKind::Activation || kind == TransferKind::Gradient;
}

/// How a runtime waits on pipeline transfers (DESIGN.md §6).
enum class Runtime : std::uint8_t {
  /// Fully asynchronous: a transfer starts when its producer ends; only its consumer waits.
  Async,
  /// Megatron-LM (p2p_communication.py): after each op a rank posts its sends and the receives
  /// of its next op as one batch and blocks until all of them are done (batch_isend_irecv,
  /// wait, cuda.synchronize); a transfer moves only once the receiver has posted its receive.
  /// Its interleaved schedule (tables with more stages than devices) pairs each steady-state
  /// forward with the backward after it and communicates once after the pair.
  Megatron,
  /// PyTorch pipelining's runtime (_PipelineScheduleRuntime): sends are posted after their
  /// producer and not waited by the compute stream, receives are posted ahead and waited by the
  /// op that needs them; transfers between one pair of ranks run one at a time, in order (one
  /// NCCL communicator and stream per pair).
  PyTorch,
};

/// "async", "megatron", "pytorch"; and back.
const char* to_string(Runtime runtime);
std::optional<Runtime> parse_runtime(std::string_view text);

/// The end of an iteration.
struct IterationOptions {
  /// Synchronise all stages (Megatron's gradient-norm and overflow all-reduces over the
  /// model-parallel group), then run each device's optimizer step. false: the pipeline and its
  /// gradient reductions alone.
  bool optimizer = true;
  /// Data-parallel reduction in buckets, each started while the last backward of its stage
  /// still runs (torch DDP, Megatron-Core's overlap_grad_reduce); false: one reduction after
  /// the stage's last backward (Megatron-LM's local DDP).
  bool dp_overlap = false;
  double dp_bucket_bytes = 25e6;  ///< torch DDP's default bucket_cap_mb = 25
  /// Shard the optimizer over the data-parallel replicas (Megatron's distributed optimizer):
  /// reduce-scatter the gradients, step on 1/R of the parameters, all-gather them after.
  bool distributed_optimizer = false;
};

/// How a table is lowered.
struct LoweringOptions {
  /// Per-kind op costs in seconds per device share; when set they replace the workload's
  /// compute times (DESIGN.md §7 `--costs` at the simulation level), and the optimizer step,
  /// which has no time on that scale, is left out.
  std::optional<Costs> costs;
  /// Data-parallel replicas of the whole pipeline (--dp). Each replica runs the same schedule;
  /// a stage's gradients are reduced in a ring over the replicas (Switched only).
  std::int32_t data_parallel = 1;
  /// Multiplies the bytes of every collective (replica and data-parallel all-reduce): a knob for
  /// sensitivity studies of the gradient traffic, e.g. 0.7 for a compressed or partly overlapped
  /// all-reduce. Must be finite and positive.
  double collective_scale = 1.0;
  Runtime runtime = Runtime::Async;
  IterationOptions iteration;
  cost::CostOptions cost;
};

/// What a compute node runs.
enum class ComputeKind : std::uint8_t { TableOp, OptimizerStep };

/// Nodes are numbered: the table's ops first (node id = op index in the table), then the other
/// compute nodes (one optimizer step per device), then transfers. Everything is flat arrays;
/// data dependencies are stored by producer (compressed rows).
struct ExecGraph {
  std::int32_t devices = 0;
  std::int64_t table_ops = 0;      ///< compute nodes [0, table_ops) are the table's ops
  std::int64_t compute_nodes = 0;  ///< compute nodes [0, compute_nodes); transfers after

  // Per node.
  std::vector<std::int32_t> device;         ///< compute: its device; transfer: the sender
  std::vector<std::int32_t> preds;          ///< number of dependencies (not stream order)
  std::vector<std::int64_t> succ_begin{0};  ///< successors of node n: succ[succ_begin[n] ..]
  std::vector<std::int32_t> succ;
  /// Successors released `start_delay` seconds after node n *starts*:
  /// start_succ[start_begin[n] ..] (gradient buckets ready while the last backward runs).
  std::vector<std::int64_t> start_begin{0};
  std::vector<std::int32_t> start_succ;
  std::vector<double> start_delay;

  // Per compute node.
  std::vector<ComputeKind> compute_kind;
  std::vector<double> duration;     ///< seconds
  std::vector<double> tp_comm_s;    ///< of the duration, exposed tensor-parallel communication
  std::vector<double> alloc_bytes;  ///< activation allocated when it starts
  std::vector<double> free_bytes;   ///< activation freed when it ends
  /// Device d's stream runs the compute nodes stream[stream_begin[d] .. stream_begin[d+1]) in
  /// order: its table ops, then its optimizer step.
  std::vector<std::int64_t> stream_begin;
  std::vector<std::int32_t> stream;

  // Per transfer (index = node − compute_nodes).
  std::vector<TransferKind> kind;
  std::vector<std::int32_t> stage;  ///< the stage it serves: the consumer's, or the reduced one
  std::vector<std::int32_t> receiver;
  std::vector<double> bytes;
  std::vector<double> latency_s;
  /// The sender's stream waits for it to finish before its next op (Megatron's blocking p2p).
  std::vector<std::uint8_t> blocks_sender;
  /// Links of transfer t: route[route_begin[t] ..], each link at most once.
  std::vector<std::int64_t> route_begin{0};
  std::vector<std::int32_t> route;

  // Per device.
  std::vector<double> static_bytes;  ///< weights + gradients + optimizer state of its stages

  std::int64_t nodes() const noexcept { return static_cast<std::int64_t>(device.size()); }
  std::int64_t transfers() const noexcept { return nodes() - compute_nodes; }
  bool is_transfer(std::int64_t node) const noexcept { return node >= compute_nodes; }
  bool is_table_op(std::int64_t node) const noexcept { return node < table_ops; }
};

/// Throws ParamError when `system` cannot take `options`: --dp out of range, or on a chain.
/// lower() checks this too; callers use it to reject a command before any table is built.
void require_supported(const SystemConfig& system, const LoweringOptions& options);

/// GPUs between consecutive pipeline devices: tensor × data parallel (Megatron's rank order).
std::int32_t gpus_per_device(const ModelConfig& model, const LoweringOptions& options);

/// The work of every (pipeline, stage) of `table` under `model` ([pipeline * stages + stage]).
std::vector<StageWork> table_work(const ScheduleTable& table, const ModelConfig& model);

/// Lowers a valid table. Compute times come from the workload on the system (cost/), or from
/// `options.costs`; transfers use the workload's message bytes and the network's routes.
/// Two-pipeline tables get a gradient all-reduce between the replicas of each stage, started on
/// each device as soon as its last backward of that stage ends; --dp a data-parallel reduction;
/// tied embeddings an all-reduce between the first and last stage; then the synchronisation and
/// the optimizer step (IterationOptions). Throws ParamError for options the system cannot take
/// (require_supported), a workload it cannot run (cost::require_costable), more GPUs than the
/// system has, and graphs over kMaxGraphNodes.
ExecGraph lower(const ScheduleTable& table, const ModelConfig& model, const Network& network,
                const LoweringOptions& options = {});

}  // namespace pipetab
