#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <limits>
#include <map>
#include <optional>
#include <unordered_map>

#include "lowering.hpp"
#include "programs.hpp"
#include <fmt/format.h>

#include "pipetab/error.hpp"
#include "pipetab/parallel/collective.hpp"
#include "pipetab/sim/graph.hpp"
#include "pipetab/table/comm_order.hpp"
#include "pipetab/table/timing.hpp"

namespace pipetab {

const char* to_string(TransferKind kind) {
  switch (kind) {
    case TransferKind::Activation:
      return "activation";
    case TransferKind::Gradient:
      return "gradient";
    case TransferKind::ReplicaAllReduce:
      return "replica all-reduce";
    case TransferKind::DataAllReduce:
      return "data-parallel reduction";
    case TransferKind::EmbeddingAllReduce:
      return "embedding all-reduce";
    case TransferKind::ParamAllGather:
      return "parameter all-gather";
    case TransferKind::FsdpAllGather:
      return "FSDP all-gather";
    case TransferKind::FsdpReduceScatter:
      return "FSDP reduce-scatter";
    case TransferKind::ExpertAllToAll:
      return "expert all-to-all";
    case TransferKind::ContextExchange:
      return "context-parallel exchange";
    case TransferKind::HostOffload:
      return "activation offload";
    case TransferKind::HostReload:
      return "activation reload";
    case TransferKind::Sync:
      return "synchronisation";
  }
  return "transfer";
}

const char* to_string(Runtime runtime) {
  switch (runtime) {
    case Runtime::Async:
      return "async";
    case Runtime::Megatron:
      return "megatron";
    case Runtime::PyTorch:
      return "pytorch";
    case Runtime::Auto:
      return "auto";
    case Runtime::DualPipe:
      return "dualpipe";
  }
  return "async";
}

std::optional<Runtime> parse_runtime(std::string_view text) {
  for (const auto r :
       {Runtime::Async, Runtime::Megatron, Runtime::PyTorch, Runtime::Auto, Runtime::DualPipe}) {
    if (text == to_string(r)) return r;
  }
  return std::nullopt;
}

RuntimeChoice default_runtime(const ScheduleTable& table, std::string_view schedule) {
  if (!table.comms.empty()) return {Runtime::PyTorch, "the file's own communication order"};
  if (!runtime_refuses(table, schedule, Runtime::Megatron))
    return {Runtime::Megatron, fmt::format("Megatron-LM's own {} order", schedule)};
  if (!runtime_refuses(table, schedule, Runtime::PyTorch))
    return {Runtime::PyTorch, "PyTorch pipelining runs it"};
  // DualPipe's two pipelines: DeepSeek's own code runs them (DualPipeV, one pipeline, is
  // PyTorch's ScheduleDualPipeV above).
  if (!runtime_refuses(table, schedule, Runtime::DualPipe))
    return {Runtime::DualPipe, "DeepSeek's DualPipe code runs it"};
  return {Runtime::Async, "no modelled runtime runs two pipelines: the asynchronous idealisation"};
}

RuntimeChoice resolve_runtime(Runtime runtime, const ScheduleTable& table,
                              std::string_view schedule) {
  if (runtime == Runtime::Auto) return default_runtime(table, schedule);
  return {runtime, "given"};
}

std::vector<StageWork> table_work(const ScheduleTable& table, const ModelConfig& model,
                                  const Job& job, const Layout& layout) {
  const auto units = table.stage_units();
  std::vector<StageWork> work;
  work.reserve(units.size());
  for (std::int32_t p = 0; p < table.pipelines(); ++p) {
    const std::span<const std::int32_t> pipeline(
        units.data() + static_cast<std::size_t>(p) * static_cast<std::size_t>(table.stages),
        static_cast<std::size_t>(table.stages));
    const auto stages = stage_work(model, job, layout, pipeline, table.devices);
    work.insert(work.end(), stages.begin(), stages.end());
  }
  return work;
}

std::int32_t gpus_per_device(const Layout& layout) {
  return static_cast<std::int32_t>(
      std::min<std::int64_t>(layout.tp * layout.cp * layout.dp, 1 << 30));
}

std::optional<std::string> runtime_refuses(const ScheduleTable& table, std::string_view schedule,
                                           Runtime runtime) {
  if (runtime == Runtime::Megatron && schedule != "1f1b" && schedule != "interleaved")
    return std::string("Megatron-LM runs only 1F1B and interleaved 1F1B");
  // forward_backward_pipelining_with_interleaving requires PP <= microbatch_group_size_per_vp_
  // stage <= M, so fewer microbatches than devices run only as PyTorch's one group.
  if (runtime == Runtime::Megatron && table.stages > table.devices &&
      table.microbatches < table.devices) {
    return fmt::format(
        "Megatron-LM's interleaved schedule needs at least S microbatches (S <= "
        "microbatch_group_size_per_vp_stage <= M), and M = {} < S = {}",
        table.microbatches, table.devices);
  }
  if (runtime == Runtime::DualPipe && schedule != "dualpipe" && schedule != "dualpipev")
    return std::string("DeepSeek's DualPipe code runs only DualPipe and DualPipeV");
  if (runtime == Runtime::PyTorch && table.pipelines() > 1) {
    return fmt::format(
        "PyTorch places each stage on one rank, and this table runs {} pipelines "
        "(model replicas)",
        table.pipelines());
  }
  return std::nullopt;
}

std::vector<double> static_memory(const ScheduleTable& table, const std::vector<StageWork>& work,
                                  const ModelConfig& model, const Job& job, const Layout& layout) {
  // Static memory: the stages each device holds (both replicas' stages in two-pipeline
  // schedules); the distributed optimizer keeps 1/R of the optimizer state. FSDP keeps 1/N of
  // the optimizer state (whose fp32 master weights are the sharded parameters) and, synced every
  // microbatch, 1/N of the gradients (torchtitan's 16 B per parameter / N), plus its unit's
  // unsharded working set (reference modern-runs.md §C.1; docs/simulation.md's table):
  // - parameters: pipelined, the whole stage's 16-bit parameters (gathered once per step);
  //   without pipelining the root unit's and one block's when resharding after forward (below),
  //   and every block's when not (each is kept from its forward to its backward, so all are held
  //   as the last forward ends, with the activations' peak);
  // - gradients deferred to the step's last backward (more than one microbatch): the stage's,
  //   unsharded, in the reduce dtype (grad_bytes_per_param: FSDP2's to_accumulated_grad_if_needed
  //   upcasts them to MixedPrecisionPolicy.reduce_dtype, fp32 in torchtitan), and without
  //   pipelining the reduce-scatter input of the largest unit (pipelined, the stage's is made
  //   after the last backward, when no activation is held);
  // - gradients synced every microbatch: one unit's before their reduce-scatter, the stage's
  //   16-bit ones pipelined and the largest unit's reduce-scatter input (reduce dtype) without.
  const detail::Sharding sharding(model, job, layout);
  const bool fsdp = sharding.fsdp;
  const bool pipelined = table.devices > 1;
  const bool reshard = reshard_after_forward(layout.fsdp, pipelined);
  const bool accumulates =
      grad_sync(layout.fsdp, pipelined) == GradSync::PerStep && table.microbatches > 1;
  std::vector<double> bytes_of(static_cast<std::size_t>(table.devices), 0.0);
  for (std::int32_t p = 0; p < table.pipelines(); ++p) {
    for (std::int32_t s = 0; s < table.stages; ++s) {
      const auto& w = work[static_cast<std::size_t>(p * table.stages + s)];
      double bytes = w.weight_bytes + w.fp8_weight_copy_bytes + w.grad_bytes +
                     sharding.per_rank(w.optimizer_bytes, w);
      if (fsdp) {
        // Without pipelining each layer is a unit and the root unit holds the rest (the
        // embedding, the output layer, the final norm: torchtitan's `fully_shard(model)`), the
        // largest unit for most vocabularies. At the backward's start the root (gathered again
        // for the output layer) and the last layer (never resharded) are unsharded; the
        // reduce-scatter of the largest unit's gradients in the reduce dtype comes from the
        // reduce-scatter stream's pool, which the caching allocator keeps apart from the compute
        // stream's, so it adds to the reserve (FSDP2 foreach_reduce allocates it under
        // that stream in the 2024 code read; other versions allocate it on the compute stream).
        const double layers = std::max<double>(1.0, static_cast<double>(w.layers));
        const double block = w.params > 0.0 ? (w.params - w.outer_params) / layers : 0.0;
        const double largest = std::max(block, w.outer_params);
        const double per_param = w.params > 0.0 ? 1.0 / w.params : 0.0;
        const double units = pipelined ? 1.0 : layers;
        const double parameters =
            pipelined || !reshard ? w.weight_bytes : (largest + block) * per_param * w.weight_bytes;
        const double one_unit_grads =
            pipelined ? w.weight_bytes : largest * per_param * w.grad_bytes;
        const double gradients =
            accumulates ? w.grad_bytes + (pipelined ? 0.0 : one_unit_grads) : one_unit_grads;
        // The sharded gradients (grad_bytes / N) are made by the step's last reduce-scatter when
        // the sync is deferred, after the activations' peak, and freed by the optimizer's
        // zero_grad(set_to_none=True); synced every microbatch they accumulate through it.
        const double sharded = accumulates ? w.optimizer_bytes : w.grad_bytes + w.optimizer_bytes;
        bytes = sharding.per_rank(sharded, w) + parameters + gradients +
                w.fp8_weight_copy_bytes / units;
      }
      bytes_of[static_cast<std::size_t>(table.placement.device_of(p, s))] += bytes;
    }
  }
  return bytes_of;
}

namespace detail {

Lowering::Lowering(const ScheduleTable& t, const ModelConfig& model, const Job& job,
                   const Layout& layout, const Network& network, const LoweringOptions& options,
                   const PyTorchOrder* known_order)
    : t_(t),
      model_(model),
      job_(job),
      layout_(layout),
      network_(network),
      options_(options),
      known_order_(known_order),
      sharding_(model, job, layout),
      work_(table_work(t, model, job, layout)) {
  options_.runtime = resolve_runtime(options.runtime, t, "").runtime;
  optimizer_ = options.iteration.optimizer && !options.costs && model.transformer() != nullptr;
  overheads_ = options.overheads && !options.costs;
}

ExecGraph Lowering::run() && {
  compute_part();
  pipeline_transfers();
  offload_transfers();
  fsdp_gathers();
  collectives();
  end_of_iteration();
  build_successors();
  return std::move(g_);
}

// The compute nodes alone (lower_compute): durations, memory, streams and static bytes.
ExecGraph Lowering::compute_only() && {
  compute_only_ = true;
  checks_and_costs();
  return compute_graph();
}

// The compute nodes and static bytes, after the checks and costs (compute_only, bounds).
ExecGraph Lowering::compute_graph() {
  compute_nodes_and_offload();
  g_.static_bytes = static_memory(t_, work_, model_, job_, layout_);
  return std::move(g_);
}

// The compute nodes' bounds (compute_bounds): where no op runs steps, merges with another or
// offloads, each op's duration and memory straight from its stages' costs, one pass over the
// table and no graph (plan bounds every layout by it, a table of 500,000 ops each time);
// otherwise those of the compute nodes, lowered.
DeviceBounds Lowering::bounds() && {
  compute_only_ = true;
  checks_and_costs();
  if (options_.costs || layer_programs_ || job_.a2a_overlap || offloads(job_)) {
    return device_bounds(compute_graph(), t_);
  }
  DeviceBounds b;
  b.busy_s.assign(static_cast<std::size_t>(t_.devices), 0.0);
  b.peak_memory_bytes = static_memory(t_, work_, model_, job_, layout_);
  std::vector<double> durations(t_.ops.size());
  // An op of one pass (all but pairs) is its stage's pass: its effect and duration once per
  // stage and kind, the first time one is met.
  constexpr std::size_t kKinds = 4;
  std::vector<OpEffect> single(work_.size() * kKinds);
  std::vector<double> single_s(single.size(), -1.0);
  for (std::size_t d = 0; d < b.busy_s.size(); ++d) {
    double memory = b.peak_memory_bytes[d], peak = memory, busy = 0.0;
    for (auto i = t_.row_begin[d]; i < t_.row_begin[d + 1]; ++i) {
      const auto n = static_cast<std::size_t>(i);
      const Op& op = t_.ops[n];
      OpEffect e;
      if (op.is_pair() || op.first().kind == PassKind::None) {
        e = op_effect(op);
        durations[n] = op_seconds(e.cost);
      } else {
        const std::size_t slot =
            index(op.first()) * kKinds + static_cast<std::size_t>(op.first().kind);
        if (single_s[slot] < 0.0) {
          single[slot] = op_effect(op);
          single_s[slot] = op_seconds(single[slot].cost);
        }
        e = single[slot];
        durations[n] = single_s[slot];
      }
      busy += durations[n];
      memory += e.alloc_bytes;
      peak = std::max(peak, memory);
      memory -= e.free_bytes;
    }
    b.busy_s[d] = busy;
    b.peak_memory_bytes[d] = peak;
  }
  b.compute_path_s = any_order_path_s(t_, durations, b.busy_s);
  return b;
}

// The checks, the stages' costs and the compute nodes.
void Lowering::compute_part() {
  checks_and_costs();
  compute_nodes_and_offload();
}

void Lowering::compute_nodes_and_offload() {
  g_.devices = t_.devices;
  g_.table_ops = static_cast<std::int64_t>(t_.ops.size());
  g_.compute_nodes = g_.table_ops + (optimizer_ ? t_.devices : 0);
  g_.comm_slowdown = overheads_ ? network_.system().device.comm_slowdown : 0.0;
  g_.h2d_slowdown = overheads_ ? network_.system().host.h2d_slowdown : 0.0;
  compute_nodes();
  layer_offload();
  offload_plan();
}

// The layout's rules against the system and the graph's size; the stages' costs.
void Lowering::checks_and_costs() {
  require_supported(network_.system(), job_, layout_, options_);
  if (!options_.costs) cost::require_costable(model_, job_, network_.system());
  if (gradient_ranks() > 1 && network_.system().topology != Topology::Switched) {
    throw ParamError(fmt::format(
        "system '{}' is a chain of devices: data and context parallelism (--dp, --cp) need a "
        "switched topology",
        network_.system().name));
  }
  if (fsdp() && t_.pipelines() > 1) {
    throw ParamError(
        "--fsdp with a two-pipeline schedule (Chimera, DualPipe, ...): each device holds stages "
        "of both model replicas, whose FSDP sharding is not modelled; shard the optimizer with "
        "--distributed-optimizer instead");
  }
  if (layout_.ep > 1 && network_.system().topology != Topology::Switched) {
    throw ParamError(fmt::format(
        "system '{}' is a chain of devices: expert parallelism (--ep) runs its all-to-alls "
        "over a switched topology's links",
        network_.system().name));
  }
  if (const auto* m = model_.transformer();
      fsdp() && layout_.fsdp.shard > 0 && m && m->moe &&
      expert_ranks() % (gradient_ranks() / shard_ranks()) != 0) {
    throw ParamError(fmt::format(
        "--fsdp-shard {}: its {} replicas must divide the experts' {} data-parallel ranks (EDP "
        "= TP × CP × DP / (EP × ETP)), which each replica shards the experts over",
        shard_ranks(), gradient_ranks() / shard_ranks(), expert_ranks()));
  }
  if (job_.a2a_overlap && fsdp() && !pipelined()) {
    throw ParamError(
        "--a2a-overlap with --fsdp on one pipeline device: FSDP then runs each op block by "
        "block, and a combined forward-backward step's blocks are not modelled; use a "
        "pipeline (--pp) or leave --a2a-overlap off");
  }
  if (job_.a2a_overlap && !options_.costs && !combines_steps()) {
    throw ParamError(
        "--a2a-overlap: Megatron-Core's combined 1F1B (--overlap-moe-expert-parallel-comm) "
        "overlaps the steps of the interleaved schedule (one pipeline, stage s on device s mod "
        "devices, more stages than devices) or of one device without pipelining (one stage, "
        "its order F0, then F(i+1) B(i), then the last B); this table has neither (DualPipe's "
        "F&B pairs overlap without the option)");
  }
  require_gpus();
  require_size();
  costs();
}

// The run must fit in the cluster when the system states its node count.
void Lowering::require_gpus() const {
  const auto& system = network_.system();
  if (system.nodes <= 0 || system.topology != Topology::Switched) return;
  const std::int64_t needed =
      static_cast<std::int64_t>(t_.devices) * tensor_parallel() * context_parallel() * layout_.dp;
  const std::int64_t have = system.nodes * system.devices_per_node;
  if (needed > have) {
    throw ParamError(fmt::format(
        "the run needs {} GPUs ({} pipeline devices × tensor parallel {} × context parallel {} "
        "× data parallel {}), and system '{}' has {} ({} nodes of {})",
        needed, t_.devices, tensor_parallel(), context_parallel(), layout_.dp, system.name, have,
        system.nodes, system.devices_per_node));
  }
}

// Data-parallel reductions per stage and device: ring steps per bucket, buckets.
std::int64_t Lowering::reduction_steps() const {
  // The routed experts' reduction over EDP runs after the dense one over DP × CP.
  const std::int64_t r = gradient_ranks() + std::max<std::int64_t>(0, expert_ranks() - 1);
  if (r <= 1) return 0;
  if (fsdp()) {
    // Per unit gathers before its uses and reduce-scatters after; bounded by every op.
    // One transfer per gather and reduce-scatter: at most one per use of a stage; the routed
    // experts' as many again over their own ranks.
    return (expert_ranks() > 1 ? 2 : 1) * (2 * static_cast<std::int64_t>(t_.microbatches) + 4);
  }
  double largest = 0.0;
  for (const auto& w : work_)
    largest = std::max(largest, w.grad_bytes * options_.collective_scale);
  const double buckets = job_.dp_overlap ? std::ceil(largest / job_.dp_bucket_bytes) : 1;
  return static_cast<std::int64_t>(
             collective_steps(CollectiveKind::AllReduce, static_cast<double>(r))) *
         static_cast<std::int64_t>(std::min(std::max(buckets, 1.0), 1e9));
}

// Node ids are 32-bit: bound the node count (an upper bound: every dependency crossing
// devices, every ring step) before building. At about 135 bytes per node in a whole run the
// limit still allows tens of GB; it keeps ids valid, not memory small.
void Lowering::require_size() const {
  // Buckets per stage's reduction, bounded by the work they imply: each is a ring of transfers
  // in the graph, and `--dp-bucket-mb 0.01` on a 70B model took 9 GB and 20 s for 128 ops.
  if (gradient_ranks() > 1 && job_.dp_overlap && !fsdp()) {
    double largest = 0.0;
    for (const auto& w : work_)
      largest = std::max(largest, w.grad_bytes * options_.collective_scale);
    const double buckets = std::ceil(largest / job_.dp_bucket_bytes);
    if (buckets > kMaxDpBuckets) {
      throw ParamError(fmt::format(
          "--dp-bucket-mb {:g}: buckets of {:g} MB split a stage's {:.4g} GB of gradients into "
          "{:.0f} buckets, over the limit of {} per stage (each is a ring of transfers to "
          "simulate): use buckets of at least {:.3g} MB",
          job_.dp_bucket_bytes / 1e6, job_.dp_bucket_bytes / 1e6, largest / 1e9, buckets,
          kMaxDpBuckets, largest / kMaxDpBuckets / 1e6));
    }
  }
  // Exchanges inside the ops: per layer and pass at most two context-parallel exchanges and
  // four all-to-alls (six with the MLP recomputed), each two flows.
  const auto* m = model_.transformer();
  const bool exchanges =
      !options_.costs && m != nullptr && (layout_.cp > 1 || (m->moe && layout_.ep > 1));
  const std::int64_t k = t_.pipelines();
  const std::int64_t per_stage = (k > 1 ? 2 * (k - 1) * k : 0) + reduction_steps() * k;
  const std::int64_t tail =
      4 * t_.devices + 2 * (gradient_ranks() + expert_ranks() - 2) * t_.devices + 8;
  const auto ops = static_cast<std::int64_t>(t_.ops.size());
  // First a bound from the stages' largest layer count (an op has at most two passes), which
  // almost every graph is far under: the count pass by pass only where it is not.
  std::int64_t most_layers = 0;
  for (const auto& w : work_)
    most_layers = std::max(most_layers, w.layers);
  const std::int64_t per_layer = (exchanges ? 16 : 0) + (fsdp() && !pipelined() ? 4 : 0);
  const double bound =
      static_cast<double>(ops) * 2.0 * (1.0 + static_cast<double>(per_layer * most_layers)) +
      static_cast<double>(ops + per_stage * t_.stages + tail);
  if (bound <= static_cast<double>(kMaxGraphNodes)) return;
  std::int64_t dependencies = 0;
  for (const Op& op : t_.ops) {
    for (const Pass& pass : op.passes()) {
      dependencies += (pass.kind == PassKind::F && pass.stage > 0) ||
                      (is_input_backward(pass.kind) && pass.stage + 1 < t_.stages);
      if (exchanges && pass.kind != PassKind::None) dependencies += 16 * work(pass).layers;
      // Offload inside the passes: a copy per group (at most seven a layer) and its steps.
      if (offloads_in_passes(job_) && pass.kind != PassKind::None)
        dependencies += 8 * work(pass).layers;
      // FSDP without pipelining: per block a gather and a reduce-scatter, two flows each.
      if (fsdp() && !pipelined() && pass.kind != PassKind::None)
        dependencies += 4 * work(pass).layers;
    }
  }
  const std::int64_t nodes = ops + dependencies + per_stage * t_.stages + tail;
  if (nodes > kMaxGraphNodes) {
    throw ParamError(fmt::format(
        "the execution graph would have up to {} nodes, over the limit of {}: use fewer "
        "microbatches, stages or data-parallel replicas (--dp), or larger gradient buckets",
        nodes, kMaxGraphNodes));
  }
}

// Pass costs of every (pipeline, stage), once per stage.
void Lowering::costs() {
  if (options_.costs) return;
  const auto n = static_cast<std::size_t>(t_.stages);
  for (std::int32_t p = 0; p < t_.pipelines(); ++p) {
    const std::span<const StageWork> stages(work_.data() + static_cast<std::size_t>(p) * n, n);
    auto options = options_.cost;
    options.exchanges_as_flows = true;  // as flows inside their ops (lower_programs)
    const auto c = cost::stage_costs(model_, job_, layout_, stages, network_.system(), options);
    cost_.insert(cost_.end(), c.begin(), c.end());
  }
  for (const auto& c : cost_) {
    for (const auto& l : c.layers)
      layer_programs_ = layer_programs_ || l.passes != nullptr;
  }
}

// What an op's passes cost together and the bytes it allocates when it starts and frees when
// it ends: per pass its stage's cost and work, computed once per stage (costs, table_work).
Lowering::OpEffect Lowering::op_effect(const Op& op) const {
  OpEffect e;
  for (const Pass& pass : op.passes()) {
    const StageWork& w = work(pass);
    const auto& stage = options_.costs ? none_ : cost_[index(pass)];
    const cost::PassCost* c = nullptr;
    switch (pass.kind) {
      case PassKind::F:
        c = &stage.forward;
        e.alloc_bytes += w.activation_bytes + w.forward_working_bytes;
        e.free_bytes += w.forward_working_bytes;
        break;
      case PassKind::B:
        c = &stage.backward;
        e.alloc_bytes += w.backward_working_bytes;
        e.free_bytes += w.activation_bytes + w.backward_working_bytes;
        break;
      case PassKind::I:
        c = &stage.input_grad;
        e.alloc_bytes += w.backward_working_bytes;
        e.free_bytes +=
            w.activation_bytes - w.activation_kept_for_weight_grad + w.backward_working_bytes;
        break;
      case PassKind::W:
        c = &stage.weight_grad;
        e.free_bytes += w.activation_kept_for_weight_grad;
        break;
      case PassKind::None:
        break;
    }
    if (c == nullptr) continue;
    e.cost += *c;
  }
  return e;
}

// An op's duration from its passes' cost: with the overheads, the host issues the op's kernels
// after the step's synchronisation, so the op lasts at least as long as that takes, and the
// step's own host time comes on top.
double Lowering::op_seconds(const cost::PassCost& c) const {
  if (!overheads_) return c.seconds;
  const auto& device = network_.system().device;
  return cost::host_bound_seconds(c, device, job_.stack) + device.step_overhead_s;
}

// Durations, memory deltas, devices, streams; and where each pass runs.
void Lowering::compute_nodes() {
  const auto nodes = static_cast<std::size_t>(g_.compute_nodes);
  g_.device.resize(nodes);
  g_.compute_kind.assign(nodes, ComputeKind::TableOp);
  g_.duration.assign(nodes, 0.0);
  g_.tp_comm_s.assign(nodes, 0.0);
  g_.expert_comm_s.assign(nodes, 0.0);
  g_.overhead_s.assign(nodes, 0.0);
  g_.alloc_bytes.assign(nodes, 0.0);
  g_.free_bytes.assign(nodes, 0.0);
  forward_op_.assign(
      static_cast<std::size_t>(t_.microbatches) * static_cast<std::size_t>(t_.stages), -1);
  backward_op_.assign(forward_op_.size(), -1);
  const auto explicit_costs =
      options_.costs ? op_durations(t_, *options_.costs) : std::vector<double>{};
  op_cost_.assign(t_.ops.size(), {});
  if (fsdp()) fsdp_roles();
  // An op has a program only with its layers' exchanges or FSDP's blocks (plan_exchanges): the
  // check once here, not per op (most plans' layouts have neither).
  const bool programs =
      !options_.costs && (layer_programs_ || (fsdp() && !pipelined() && !compute_only_));
  g_.stream.reserve(nodes);
  g_.stream_begin.reserve(static_cast<std::size_t>(t_.devices) + 1);
  for (std::int32_t d = 0; d < t_.devices; ++d) {
    g_.stream_begin.push_back(static_cast<std::int64_t>(g_.stream.size()));
    for (auto i = t_.row_begin[static_cast<std::size_t>(d)];
         i < t_.row_begin[static_cast<std::size_t>(d) + 1]; ++i) {
      const auto n = static_cast<std::size_t>(i);
      g_.device[n] = d;
      g_.stream.push_back(static_cast<std::int32_t>(i));
      const OpEffect e = op_effect(t_.ops[n]);
      g_.alloc_bytes[n] = e.alloc_bytes;
      g_.free_bytes[n] = e.free_bytes;
      op_cost_[n] = e.cost;
      for (const Pass& pass : t_.ops[n].passes()) {
        if (pass.kind == PassKind::F) {
          forward_op_[key(pass.microbatch, pass.stage)] = static_cast<std::int32_t>(i);
        } else if (is_input_backward(pass.kind)) {
          backward_op_[key(pass.microbatch, pass.stage)] = static_cast<std::int32_t>(i);
        }
      }
      if (programs) plan_exchanges(n);
    }
    if (!options_.costs && job_.a2a_overlap) combine_1f1b(d);
    for (auto i = t_.row_begin[static_cast<std::size_t>(d)];
         i < t_.row_begin[static_cast<std::size_t>(d) + 1]; ++i) {
      const auto n = static_cast<std::size_t>(i);
      const auto& c = op_cost_[n];
      g_.tp_comm_s[n] = c.tp_comm_s;
      g_.expert_comm_s[n] = c.expert_comm_s;
      g_.duration[n] = options_.costs ? explicit_costs[n] : op_seconds(c);
      if (!options_.costs) g_.overhead_s[n] = g_.duration[n] - c.seconds;
    }
    if (optimizer_) {
      const auto n = static_cast<std::size_t>(g_.table_ops + d);
      g_.device[n] = d;
      g_.compute_kind[n] = ComputeKind::OptimizerStep;
      g_.stream.push_back(static_cast<std::int32_t>(n));
    }
  }
  g_.stream_begin.push_back(static_cast<std::int64_t>(g_.stream.size()));
  g_.preds.assign(nodes, 0);
  lower_programs();
}

// A transfer routed by the network from one device to another.
// Pipeline transfers are NCCL sends and receives: the link class's per-message latency
// instead of its first hop's α, and at most its point-to-point bandwidth.
std::int32_t Lowering::add_transfer(TransferKind kind, int stage, std::int32_t from,
                                    std::int32_t to, double bytes) {
  double latency = network_.append_route(from, to, g_.route);
  if (!is_pipeline(kind)) return close_transfer(kind, stage, from, to, bytes, latency);
  const LinkSpec& link = network_.route_class(from, to);
  latency += link.p2p_latency() - link.latency_s;
  const auto node = close_transfer(kind, stage, from, to, bytes, std::max(0.0, latency));
  if (link.p2p_efficiency < 1.0) g_.rate_cap.back() = link.p2p_bandwidth();
  return node;
}

// A transfer over the given links (reduction ring steps: a device's own ports or NIC).
std::int32_t Lowering::add_transfer(TransferKind kind, int stage, std::int32_t device, double bytes,
                                    std::initializer_list<std::int32_t> links, double latency) {
  g_.route.insert(g_.route.end(), links.begin(), links.end());
  return close_transfer(kind, stage, device, device, bytes, latency);
}

// One side of a ring step or exchange of `device`: out of and into it over its switch ports, or
// over its NIC (and the host links that carry NIC traffic, Network::append_nic).
std::int32_t Lowering::add_port_transfer(TransferKind kind, int stage, std::int32_t device,
                                         double bytes, bool nic, double latency) {
  if (nic) {
    network_.append_nic(device, device, g_.route);
  } else {
    g_.route.push_back(network_.port_up(device));
    g_.route.push_back(network_.port_down(device));
  }
  return close_transfer(kind, stage, device, device, bytes, latency);
}

// Adds the transfer node whose route was just appended.
std::int32_t Lowering::close_transfer(TransferKind kind, int stage, std::int32_t from,
                                      std::int32_t to, double bytes, double latency) {
  const auto node = static_cast<std::int32_t>(g_.device.size());
  g_.device.push_back(from);
  g_.preds.push_back(0);
  g_.kind.push_back(kind);
  g_.stage.push_back(stage);
  g_.receiver.push_back(to);
  g_.bytes.push_back(bytes);
  g_.latency_s.push_back(latency);
  g_.blocks_sender.push_back(0);
  g_.rate_cap.push_back(std::numeric_limits<double>::infinity());
  g_.route_begin.push_back(static_cast<std::int64_t>(g_.route.size()));
  return node;
}

template <class Edge, class Target>
void Lowering::compress(std::size_t nodes, const std::vector<Edge>& edges, Target target,
                        std::vector<std::int64_t>& begin, std::vector<std::int32_t>& out) {
  begin.assign(nodes + 1, 0);
  for (const auto& e : edges)
    ++begin[static_cast<std::size_t>(e.first) + 1];
  for (std::size_t n = 0; n < nodes; ++n)
    begin[n + 1] += begin[n];
  out.resize(edges.size());
  auto fill = begin;
  for (const auto& e : edges)
    out[static_cast<std::size_t>(fill[static_cast<std::size_t>(e.first)]++)] = target(e);
}

void Lowering::build_successors() {
  const auto nodes = g_.device.size();
  compress(
      nodes, edges_, [](const auto& e) { return e.second; }, g_.succ_begin, g_.succ);
  // Start edges keep their delays in the same order as their targets; most graphs have none.
  if (!start_edges_.empty()) {
    std::stable_sort(start_edges_.begin(), start_edges_.end(),
                     [](const StartEdge& x, const StartEdge& y) { return x.first < y.first; });
    compress(
        static_cast<std::size_t>(g_.compute_nodes), start_edges_,
        [](const StartEdge& e) { return e.second; }, g_.start_begin, g_.start_succ);
    for (const auto& e : start_edges_)
      g_.start_delay.push_back(e.delay);
  }
  g_.static_bytes = static_memory(t_, work_, model_, job_, layout_);
}

}  // namespace detail

void require_supported(const SystemConfig& system, const Job& job, const Layout& layout,
                       const LoweringOptions& options) {
  if (layout.dp < 1 || layout.dp > kMaxDataParallel) {
    throw ParamError(fmt::format("--dp = {} is out of range: expected 1 to {} replicas", layout.dp,
                                 kMaxDataParallel));
  }
  if (layout.dp > 1 && system.topology != Topology::Switched) {
    throw ParamError(fmt::format(
        "--dp needs a switched topology, and system '{}' is a chain: the data-parallel replicas "
        "meet over the devices' NICs",
        system.name));
  }
  if (!(options.collective_scale > 0.0 && options.collective_scale <= 1e6)) {
    throw ParamError(fmt::format("collective scale {} is out of range: expected above 0, up to 1e6",
                                 options.collective_scale));
  }
  if (job.offload_activations > 0.0 && job.offload_layers > 0) {
    throw ParamError(
        "--offload-activations and --offload-layers: one offload at a time (PipeOffload's or "
        "Megatron-Core's per-stage offload, or Transformer Engine's of whole layers)");
  }
  if (offloads(job) && !system.host.modelled()) {
    throw ParamError(fmt::format(
        "--offload-{} needs the host memory and host link the activations go to, and system "
        "'{}' has none: give its file a [host] section (memory_bytes, bandwidth, gpus_per_link; "
        "docs/simulation.md)",
        job.offload_layers > 0     ? "layers"
        : job.offload_modules != 0 ? "modules"
                                   : "activations",
        system.name));
  }
  if (!(job.dp_bucket_bytes >= 1e3 && job.dp_bucket_bytes <= 1e15)) {
    throw ParamError(
        fmt::format("gradient bucket of {} bytes is out of range: expected 1e3 to 1e15 bytes",
                    job.dp_bucket_bytes));
  }
}

ExecGraph lower(const ScheduleTable& table, const ModelConfig& model, const Job& job,
                const Layout& layout, const Network& network, const LoweringOptions& options) {
  return detail::Lowering(table, model, job, layout, network, options).run();
}

ExecGraph lower(const ScheduleTable& table, const ModelConfig& model, const Job& job,
                const Layout& layout, const Network& network, const LoweringOptions& options,
                const PyTorchOrder& order) {
  return detail::Lowering(table, model, job, layout, network, options, &order).run();
}

PyTorchOrder pytorch_runtime_order(const ScheduleTable& table) {
  PyTorchOrder out;
  out.order = pytorch_send_recv(table);
  SendSizes sizes;
  sizes.bytes = [](const CommAction&) { return 0.0; };
  out.all_eager = check_p2p(table, out.order, sizes, false);
  sizes.bytes = [&sizes](const CommAction&) { return sizes.buffer_bytes + 1.0; };
  out.all_rendezvous = check_p2p(table, out.order, sizes, false);
  return out;
}

ExecGraph lower_compute(const ScheduleTable& table, const ModelConfig& model, const Job& job,
                        const Layout& layout, const Network& network,
                        const LoweringOptions& options) {
  return detail::Lowering(table, model, job, layout, network, options).compute_only();
}

DeviceBounds compute_bounds(const ScheduleTable& table, const ModelConfig& model, const Job& job,
                            const Layout& layout, const Network& network,
                            const LoweringOptions& options) {
  return detail::Lowering(table, model, job, layout, network, options).bounds();
}

}  // namespace pipetab
