// The execution graph (docs/design.md §6): a table lowered to compute nodes, transfers for every
// cross-device dependency, collectives decomposed into ring steps over the same links, and the
// end of the iteration (gradient reductions, synchronisation, optimizer step).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "pipetab/cost/stage_cost.hpp"
#include "pipetab/model/outside_allocator.hpp"
#include "pipetab/model/workload.hpp"
#include "pipetab/system/system.hpp"
#include "pipetab/table/comm_order.hpp"
#include "pipetab/table/costs.hpp"
#include "pipetab/table/schedule_table.hpp"

namespace pipetab {

/// Most nodes of an execution graph (ops and transfers): node ids are 32-bit. A run takes about
/// 135 bytes per node, so graphs near the limit need tens of GB.
inline constexpr std::int64_t kMaxGraphNodes = std::int64_t{1} << 28;
/// Gradient buckets per stage's data-parallel reduction (dp_overlap): Megatron-LM's default
/// 25 MB buckets make a few thousand for the largest stages; more are a unit error.
inline constexpr std::int64_t kMaxDpBuckets = 16384;

/// What a transfer carries.
enum class TransferKind : std::uint8_t {
  Activation,          ///< forward, stage s → s+1
  Gradient,            ///< backward, stage s+1 → s
  ReplicaAllReduce,    ///< ring step of the gradient all-reduce between a stage's replicas
  DataAllReduce,       ///< ring step of the data-parallel gradient reduction
  EmbeddingAllReduce,  ///< ring step of the tied word embedding's gradient all-reduce
  ParamAllGather,      ///< ring step of the distributed optimizer's parameter all-gather
  FsdpAllGather,       ///< ring step of FSDP's all-gather of a unit's parameters
  FsdpReduceScatter,   ///< ring step of FSDP's reduce-scatter of a unit's gradients
  ExpertAllToAll,      ///< one side of an expert all-to-all, inside the op that waits for it
  ContextExchange,     ///< one side of a context-parallel exchange, inside its op
  HostOffload,  ///< a forward's offloaded activations, device to host memory (frees them there)
  HostReload,   ///< the same activations back before their backward (allocated as it starts)
  Sync,         ///< end-of-iteration synchronisation of all stages: latency, no bytes
};

/// "activation", "gradient", "replica all-reduce", "data-parallel reduction", "embedding
/// all-reduce", "parameter all-gather", "FSDP all-gather", "FSDP reduce-scatter", "expert
/// all-to-all", "context-parallel exchange", "activation offload", "activation reload",
/// "synchronisation".
const char* to_string(TransferKind kind);

/// Pipeline traffic (activations and gradients) as opposed to collectives and the sync.
constexpr bool is_pipeline(TransferKind kind) {
  return kind == TransferKind::Activation || kind == TransferKind::Gradient;
}

/// A copy between a device and its host memory (activation offload).
constexpr bool is_host_copy(TransferKind kind) {
  return kind == TransferKind::HostOffload || kind == TransferKind::HostReload;
}

/// How a runtime waits on pipeline transfers (docs/design.md §6).
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
  /// The table's own runtime, chosen per table by default_runtime (the default everywhere).
  Auto,
  /// DeepSeek's DualPipe (deepseek-ai/DualPipe dualpipe.py @bb214e82, and DualPipeV): before
  /// each chunk a rank posts the previous chunk's sends with the receives it needs next as one
  /// batch and waits for all of them (_commit_and_wait_comm: batch_isend_irecv, wait), so a
  /// device's next op waits until its sends are delivered; the receives are posted ahead (a
  /// chunk's with the batch before it, earlier where its steps receive ahead), so a transfer
  /// leaves when its producer ends (optimistic where the peer posts its receive later). A
  /// forward and backward chunk pair runs as one
  /// overlapped_forward_backward, each one's expert all-to-alls under the other's compute.
  /// (Megatron's rule, a transfer moving only once the receiver posts it at its op boundary,
  /// deadlocks on DualPipe's table: the code's receives ahead are what keep it running.)
  DualPipe,
};

/// "async", "megatron", "pytorch", "auto", "dualpipe"; and back.
const char* to_string(Runtime runtime);
std::optional<Runtime> parse_runtime(std::string_view text);

/// A runtime and why it runs a table.
struct RuntimeChoice {
  Runtime runtime = Runtime::Async;
  std::string reason;  ///< "given", or why the default picked it
};

/// The runtime that really runs a table (generated by `schedule`, or "" for a file): Megatron-LM
/// for its own orders (1f1b, interleaved), PyTorch's runtime for every other table it can run
/// (a compute+comms file's own order included), and the asynchronous idealisation only for tables
/// no modelled runtime runs (two-pipeline schedules such as Chimera and DualPipe).
RuntimeChoice default_runtime(const ScheduleTable& table, std::string_view schedule);
/// `runtime` as given, or default_runtime when it is Auto.
RuntimeChoice resolve_runtime(Runtime runtime, const ScheduleTable& table,
                              std::string_view schedule);

/// Why the real runtime cannot run `table` (generated by schedule `schedule`, or "" for a file),
/// or nullopt: Megatron-LM runs only its own 1F1B and interleaved orders; PyTorch's runtime runs
/// any table whose stages each sit on one rank (not two-pipeline schedules such as Chimera);
/// Async is an idealisation and refuses nothing. (`tune`/`plan --runnable-by`.)
std::optional<std::string> runtime_refuses(const ScheduleTable& table, std::string_view schedule,
                                           Runtime runtime);

/// The end of an iteration.
struct IterationOptions {
  /// Synchronise all stages (Megatron's gradient-norm and overflow all-reduces over the
  /// model-parallel group), then run each device's optimizer step. false: the pipeline and its
  /// gradient reductions alone. (How the gradients are reduced and the optimizer sharded is the
  /// job's: Job::dp_overlap, dp_bucket_bytes, distributed_optimizer.)
  bool optimizer = true;
};

/// How a table is lowered: what the simulation takes beyond the model, the job, the layout and the
/// system.
struct LoweringOptions {
  /// Per-kind op costs in seconds per device share; when set they replace the workload's
  /// compute times (docs/design.md §2 `--costs` at the simulation level), and the optimizer step,
  /// which has no time on that scale, is left out.
  std::optional<Costs> costs;
  /// Multiplies the bytes of every collective (replica and data-parallel all-reduce): a knob for
  /// sensitivity studies of the gradient traffic, e.g. 0.7 for a compressed or partly overlapped
  /// all-reduce. Must be finite and positive.
  double collective_scale = 1.0;
  /// The run's NCCL_BUFFSIZE and NCCL_P2P_NET_CHUNKSIZE, which size the buffers each GPU holds
  /// outside the caching allocator (model/outside_allocator.hpp). NCCL_BUFFSIZE is also NCCL's
  /// buffer for one pair of ranks: under the PyTorch runtime a pipeline message of at most that
  /// many bytes is sent eagerly (its send completes without its receive); a larger one moves only
  /// once its receive is posted.
  NcclSizes nccl;
  /// The engine's default is the idealisation, which the invariants of docs/design.md §6 are
  /// stated for; every user-facing default (the CLI, Python, studies, measured-run files, plan)
  /// is Auto, resolved per table (simulate_table, with the schedule's name; lower() alone
  /// resolves it from the table).
  Runtime runtime = Runtime::Async;
  IterationOptions iteration;
  cost::CostOptions cost;
  /// The overheads no operator carries, from the device (DeviceSpec::step_overhead_s and
  /// comm_slowdown): each op of the table pays the host's time per pipeline step, and compute
  /// slows while a communication kernel runs beside it. Off: kernels and transfers alone. They
  /// apply to op times from the model, not to explicit `costs`.
  bool overheads = true;
  /// The exchanges inside ops (expert all-to-alls, context-parallel exchanges) as transfers the
  /// op waits for (ExecGraph::steps). false: each op lasts its compute plus its waits with every
  /// exchange alone on its links, no transfers: a lower bound of the op, for bounds only (plan
  /// bounds every candidate layout's graph; graph_bounds gives the same bound either way).
  bool inner_transfers = true;
};

/// What a compute node runs.
enum class ComputeKind : std::uint8_t { TableOp, OptimizerStep };

/// A step of an op that communicates inside itself (the experts' all-to-alls): compute for
/// `seconds`, issue `transfer` (one of the op's inner transfers), or wait until it has finished.
enum class StepKind : std::uint8_t { Compute, Issue, Wait };
struct OpStep {
  StepKind kind = StepKind::Compute;
  std::int32_t transfer = -1;  ///< Issue, Wait: the transfer node
  double seconds = 0.0;        ///< Compute
};

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
  std::vector<double> duration;       ///< seconds
  std::vector<double> tp_comm_s;      ///< of the duration, exposed tensor-parallel communication
  std::vector<double> expert_comm_s;  ///< of tp_comm_s, the experts' all-to-alls
  std::vector<double> overhead_s;     ///< of the duration, the host's time per pipeline step
  std::vector<double> alloc_bytes;    ///< activation allocated when it starts
  std::vector<double> free_bytes;     ///< activation freed when it ends
  /// Activation offload: of free_bytes' activation, what a forward's HostOffload copy frees
  /// when it ends (offloaded_bytes), and what a backward's HostReload allocates when it starts
  /// (reloaded_bytes), counted on the compute node for bounds that take the copies as on time
  /// (device_bounds); the engine moves them with the copies. Empty: nothing is offloaded.
  std::vector<double> offloaded_bytes;
  std::vector<double> reloaded_bytes;
  /// Per device: the activations whole-layer offload (Job::offload_layers) holds in host memory
  /// at its peak, one GPU's (its stages' offloaded bytes times the table's peak in flight);
  /// empty without it (activation offload's copies are counted by the engine).
  std::vector<double> layer_offload_host_bytes;
  /// Ops with communication inside (expert all-to-alls, context-parallel exchanges): compute
  /// node n runs steps[step_begin[n] .. step_begin[n+1])
  /// in order, the device's stream held from its start to its last step, instead of one block of
  /// `duration` (which is then its steps' compute). An inner transfer's one dependency is its
  /// Issue step; the op waits for it where its Wait step says. step_begin empty (or an empty
  /// range): the op is one block.
  std::vector<std::int64_t> step_begin;
  std::vector<OpStep> steps;
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
  /// The most bytes per second the transfer moves even alone (a point-to-point send's achieved
  /// bandwidth, LinkSpec::p2p_bandwidth); infinity: as fast as its links let it.
  std::vector<double> rate_cap;
  /// Whether the transfer is a copy of offload inside a pass (HostOffload and HostReload of
  /// Job::offload_layers and offload_modules, issued and waited by its op's steps): the device
  /// and host memory it moves are counted on its ops (alloc_bytes, free_bytes,
  /// layer_offload_host_bytes), not by the engine. Empty: none is.
  std::vector<std::uint8_t> in_pass_copy;

  /// Compute runs 1 + comm_slowdown times longer while a transfer or collective of its device
  /// is in flight (DeviceSpec::comm_slowdown; 0 when overheads are off).
  double comm_slowdown = 0.0;
  /// Compute runs 1 + h2d_slowdown times longer while a HostReload of its device runs
  /// (HostSpec::h2d_slowdown; 0 when overheads are off). With communication too, the larger.
  double h2d_slowdown = 0.0;

  // Per device.
  std::vector<double> static_bytes;  ///< weights + gradients + optimizer state of its stages

  std::int64_t nodes() const noexcept { return static_cast<std::int64_t>(device.size()); }
  std::int64_t transfers() const noexcept { return nodes() - compute_nodes; }
  bool is_transfer(std::int64_t node) const noexcept { return node >= compute_nodes; }
  bool is_table_op(std::int64_t node) const noexcept { return node < table_ops; }
  /// Whether compute node n runs steps (communication inside it).
  bool has_steps(std::int64_t node) const noexcept {
    const auto n = static_cast<std::size_t>(node);
    return n + 1 < step_begin.size() && step_begin[n + 1] > step_begin[n];
  }
};

/// Throws ParamError when `system` cannot take the run: data parallelism on a chain of devices,
/// or `options` or the job's gradient buckets out of range. lower() checks this too; callers use
/// it to reject a command before any table is built.
void require_supported(const SystemConfig& system, const Job& job, const Layout& layout,
                       const LoweringOptions& options);

/// GPUs between consecutive pipeline devices: tensor × context × data parallel (Megatron's rank
/// order: TP fastest, then CP, then DP, then PP).
std::int32_t gpus_per_device(const Layout& layout);

/// The work of every (pipeline, stage) of `table` under `model`, `job` and `layout`
/// ([pipeline * stages + stage]).
std::vector<StageWork> table_work(const ScheduleTable& table, const ModelConfig& model,
                                  const Job& job, const Layout& layout);

/// Weights, gradients and optimizer state each device of `table` holds (ExecGraph::static_bytes),
/// from the stages' work (table_work): what `plan` checks against the memory before lowering.
std::vector<double> static_memory(const ScheduleTable& table, const std::vector<StageWork>& work,
                                  const ModelConfig& model, const Job& job, const Layout& layout);

/// Lowers a valid table. Compute times come from the workload on the system (cost/), or from
/// `options.costs`; transfers use the workload's message bytes and the network's routes.
/// Two-pipeline tables get a gradient all-reduce between the replicas of each stage, started on
/// each device as soon as its last backward of that stage ends; --dp a data-parallel reduction;
/// tied embeddings an all-reduce between the first and last stage; then the synchronisation and
/// the optimizer step (IterationOptions). Throws ParamError for options the system cannot take
/// (require_supported), a workload it cannot run (cost::require_costable), more GPUs than the
/// system has, and graphs over kMaxGraphNodes.
ExecGraph lower(const ScheduleTable& table, const ModelConfig& model, const Job& job,
                const Layout& layout, const Network& network, const LoweringOptions& options = {});

/// PyTorch's runtime's order for a table without its own (pytorch_send_recv), and check_p2p's
/// verdict on it when every send fits NCCL's buffer and when none does: what lowering the table
/// under the pytorch runtime derives, done once for a table lowered for many layouts (plan).
struct PyTorchOrder {
  CommOrder order;
  std::optional<CommIssue> all_eager, all_rendezvous;
};
PyTorchOrder pytorch_runtime_order(const ScheduleTable& table);

/// lower() with `order` = pytorch_runtime_order(table) computed ahead (same result).
ExecGraph lower(const ScheduleTable& table, const ModelConfig& model, const Job& job,
                const Layout& layout, const Network& network, const LoweringOptions& options,
                const PyTorchOrder& order);

/// The compute nodes of lower()'s graph alone, after the same checks: each table op's duration
/// and memory, the optimizer step's node (its duration still 0), each device's stream and static
/// bytes; no transfers, collectives or edges. Every duration lower() gives a node is at least
/// this one's, so a device's stream sum bounds the runtime from below (device_bounds) at a
/// fraction of lowering's cost (compute_bounds: what `plan` orders its search by).
ExecGraph lower_compute(const ScheduleTable& table, const ModelConfig& model, const Job& job,
                        const Layout& layout, const Network& network,
                        const LoweringOptions& options = {});

}  // namespace pipetab
