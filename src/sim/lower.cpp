#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <limits>
#include <map>
#include <optional>
#include <unordered_map>

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
  }
  return "async";
}

std::optional<Runtime> parse_runtime(std::string_view text) {
  for (const auto r : {Runtime::Async, Runtime::Megatron, Runtime::PyTorch, Runtime::Auto}) {
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
  if (runtime == Runtime::PyTorch && table.pipelines() > 1) {
    return fmt::format(
        "PyTorch places each stage on one rank, and this table runs {} pipelines "
        "(model replicas)",
        table.pipelines());
  }
  return std::nullopt;
}

namespace {

// How a stage's state is split over its ranks.
struct Sharding {
  Sharding(const ModelConfig& model, const Job& job, const Layout& layout) {
    const auto* m = model.transformer();
    gradient_ranks = layout.dp * layout.cp;
    fsdp = layout.fsdp.enabled && gradient_ranks > 1;
    shard_ranks = layout.fsdp.shard > 0 ? layout.fsdp.shard : gradient_ranks;
    if (m && m->moe) {
      expert_ranks = expert_data_parallel(layout);
    } else {
      expert_ranks = gradient_ranks;
    }
    expert_shard_ranks = expert_ranks;
    if (fsdp && layout.fsdp.shard > 0) {
      // HSDP: the R = DP × CP / shard replicas are the outermost ranks, for the experts as for
      // the rest; each replica shards the experts over its EDP / R expert-data-parallel ranks
      // (compute_part refuses an R that does not divide EDP).
      const std::int64_t replicas = gradient_ranks / shard_ranks;
      if (replicas > 1 && expert_ranks % replicas == 0)
        expert_shard_ranks = expert_ranks / replicas;
    }
    if (fsdp) {
      // torchtitan shards the routed experts over their own data-parallel ranks (its expert
      // FSDP mesh, dp_shard_mod_ep), the rest over DP × CP.
      state_shards = static_cast<double>(shard_ranks);
      expert_state_shards = static_cast<double>(expert_shard_ranks);
    } else if (job.distributed_optimizer) {
      state_shards = static_cast<double>(gradient_ranks);
      expert_state_shards = static_cast<double>(expert_ranks);
    }
  }
  // The bytes of `w`'s state per rank: the experts' part divided by its own shards.
  double per_rank(double bytes, const StageWork& w) const {
    const double experts = w.params > 0 ? bytes * w.expert_params / w.params : 0.0;
    return (bytes - experts) / state_shards + experts / expert_state_shards;
  }
  // The ranks a stage's dense gradients are reduced (or, with FSDP, sharded) over: DP × CP
  // (Megatron-Core's data-parallel group with CP; torchtitan folds CP into FSDP's mesh).
  std::int64_t gradient_ranks = 1;
  bool fsdp = false;
  // FSDP's shard group: all DP × CP ranks, or the HSDP shard.
  std::int64_t shard_ranks = 1;
  // What a stage's state is divided by on each rank: the FSDP shard group, the distributed
  // optimizer's DP × CP ranks (its optimizer state only), or nothing.
  double state_shards = 1.0;
  // The routed experts' gradients are reduced over the expert-data-parallel ranks, EDP = TP × CP
  // × DP / (EP × ETP) (Megatron-Core's expert_data_parallel group), which the distributed
  // optimizer shards their state over.
  std::int64_t expert_ranks = 1;
  // FSDP's shard group of the routed experts: all EDP ranks, or with HSDP those of one replica.
  std::int64_t expert_shard_ranks = 1;
  double expert_state_shards = 1.0;
};

}  // namespace

std::vector<double> static_memory(const ScheduleTable& table, const std::vector<StageWork>& work,
                                  const ModelConfig& model, const Job& job, const Layout& layout) {
  // Static memory: the stages each device holds (both replicas' stages in two-pipeline
  // schedules); the distributed optimizer keeps 1/R of the optimizer state; FSDP keeps 1/N of
  // the gradients and optimizer state (whose fp32 master weights are the sharded parameters:
  // torchtitan's 16 B per parameter / N) and the unsharded working set: pipelined, the
  // stage's 16-bit parameters and its unsharded gradients accumulating over the microbatches
  // (both in the parameter dtype); without, two blocks' parameters (the one computing and the
  // one prefetched) and one block's fp32 reduce-scatter input.
  const Sharding sharding(model, job, layout);
  const bool fsdp = sharding.fsdp;
  const bool pipelined = table.devices > 1;
  std::vector<double> bytes_of(static_cast<std::size_t>(table.devices), 0.0);
  for (std::int32_t p = 0; p < table.pipelines(); ++p) {
    for (std::int32_t s = 0; s < table.stages; ++s) {
      const auto& w = work[static_cast<std::size_t>(p * table.stages + s)];
      double bytes = w.weight_bytes + w.fp8_weight_copy_bytes + w.grad_bytes +
                     sharding.per_rank(w.optimizer_bytes, w);
      if (fsdp) {
        const double units = pipelined ? 1.0 : std::max<double>(1.0, static_cast<double>(w.layers));
        const double unsharded =
            pipelined ? 2.0 * w.weight_bytes : (2.0 * w.weight_bytes + w.grad_bytes) / units;
        bytes = sharding.per_rank(w.grad_bytes + w.optimizer_bytes, w) + unsharded +
                w.fp8_weight_copy_bytes / units;
      }
      bytes_of[static_cast<std::size_t>(table.placement.device_of(p, s))] += bytes;
    }
  }
  return bytes_of;
}

namespace {

class Lowering {
 public:
  Lowering(const ScheduleTable& t, const ModelConfig& model, const Job& job, const Layout& layout,
           const Network& network, const LoweringOptions& options,
           const PyTorchOrder* known_order = nullptr)
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

  ExecGraph run() && {
    compute_part();
    pipeline_transfers();
    fsdp_gathers();
    collectives();
    end_of_iteration();
    build_successors();
    return std::move(g_);
  }

  // The compute nodes alone (lower_compute): durations, memory, streams and static bytes.
  ExecGraph compute_only() && {
    compute_only_ = true;
    compute_part();
    g_.static_bytes = static_memory(t_, work_, model_, job_, layout_);
    return std::move(g_);
  }

 private:
  // The checks, the stages' costs and the compute nodes.
  void compute_part() {
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
    if (job_.a2a_overlap && !options_.costs && !interleaved()) {
      throw ParamError(
          "--a2a-overlap: Megatron-Core's combined 1F1B (--overlap-moe-expert-parallel-comm) "
          "overlaps the steps of the interleaved schedule (one pipeline, stage s on device s mod "
          "devices, more stages than devices); this table has none (DualPipe's F&B pairs overlap "
          "without the option)");
    }
    require_gpus();
    require_size();
    costs();
    g_.devices = t_.devices;
    g_.table_ops = static_cast<std::int64_t>(t_.ops.size());
    g_.compute_nodes = g_.table_ops + (optimizer_ ? t_.devices : 0);
    g_.comm_slowdown = overheads_ ? network_.system().device.comm_slowdown : 0.0;
    compute_nodes();
  }

  std::int64_t tensor_parallel() const { return layout_.tp; }
  std::int64_t context_parallel() const { return layout_.cp; }
  std::int64_t gradient_ranks() const { return sharding_.gradient_ranks; }
  bool fsdp() const { return sharding_.fsdp; }
  std::int64_t shard_ranks() const { return sharding_.shard_ranks; }
  std::int64_t expert_ranks() const { return sharding_.expert_ranks; }
  std::int64_t expert_shard_ranks() const { return sharding_.expert_shard_ranks; }

  // The run must fit in the cluster when the system states its node count.
  void require_gpus() const {
    const auto& system = network_.system();
    if (system.nodes <= 0 || system.topology != Topology::Switched) return;
    const std::int64_t needed = static_cast<std::int64_t>(t_.devices) * tensor_parallel() *
                                context_parallel() * layout_.dp;
    const std::int64_t have = system.nodes * system.devices_per_node;
    if (needed > have) {
      throw ParamError(fmt::format(
          "the run needs {} GPUs ({} pipeline devices × tensor parallel {} × context parallel {} "
          "× data parallel {}), and system '{}' has {} ({} nodes of {})",
          needed, t_.devices, tensor_parallel(), context_parallel(), layout_.dp,
          system.name, have, system.nodes, system.devices_per_node));
    }
  }

  // Data-parallel reductions per stage and device: ring steps per bucket, buckets.
  std::int64_t reduction_steps() const {
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
    const double buckets =
        job_.dp_overlap ? std::ceil(largest / job_.dp_bucket_bytes) : 1;
    return static_cast<std::int64_t>(collective_steps(CollectiveKind::AllReduce,
                                                      static_cast<double>(r))) *
           static_cast<std::int64_t>(std::min(std::max(buckets, 1.0), 1e9));
  }

  // Node ids are 32-bit: bound the node count (an upper bound: every dependency crossing
  // devices, every ring step) before building. At about 135 bytes per node in a whole run the
  // limit still allows tens of GB; it keeps ids valid, not memory small.
  void require_size() const {
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
            job_.dp_bucket_bytes / 1e6, job_.dp_bucket_bytes / 1e6,
            largest / 1e9, buckets, kMaxDpBuckets, largest / kMaxDpBuckets / 1e6));
      }
    }
    // Exchanges inside the ops: per layer and pass at most two context-parallel exchanges and
    // four all-to-alls (six with the MLP recomputed), each two flows.
    const auto* m = model_.transformer();
    const bool exchanges =
        !options_.costs && m != nullptr && (layout_.cp > 1 || (m->moe && layout_.ep > 1));
    std::int64_t dependencies = 0;
    for (const Op& op : t_.ops) {
      for (const Pass& pass : op.passes()) {
        dependencies += (pass.kind == PassKind::F && pass.stage > 0) ||
                        (is_input_backward(pass.kind) && pass.stage + 1 < t_.stages);
        if (exchanges && pass.kind != PassKind::None) dependencies += 16 * work(pass).layers;
        // FSDP without pipelining: per block a gather and a reduce-scatter, two flows each.
        if (fsdp() && !pipelined() && pass.kind != PassKind::None)
          dependencies += 4 * work(pass).layers;
      }
    }
    const std::int64_t k = t_.pipelines();
    const std::int64_t per_stage = (k > 1 ? 2 * (k - 1) * k : 0) + reduction_steps() * k;
    const std::int64_t tail =
        4 * t_.devices + 2 * (gradient_ranks() + expert_ranks() - 2) * t_.devices + 8;
    const std::int64_t nodes =
        static_cast<std::int64_t>(t_.ops.size()) + dependencies + per_stage * t_.stages + tail;
    if (nodes > kMaxGraphNodes) {
      throw ParamError(fmt::format(
          "the execution graph would have up to {} nodes, over the limit of {}: use fewer "
          "microbatches, stages or data-parallel replicas (--dp), or larger gradient buckets",
          nodes, kMaxGraphNodes));
    }
  }

  // Pass costs of every (pipeline, stage), once per stage.
  void costs() {
    if (options_.costs) return;
    const auto n = static_cast<std::size_t>(t_.stages);
    for (std::int32_t p = 0; p < t_.pipelines(); ++p) {
      const std::span<const StageWork> stages(work_.data() + static_cast<std::size_t>(p) * n, n);
      auto options = options_.cost;
      options.exchanges_as_flows = true;  // as flows inside their ops (lower_programs)
      const auto c = cost::stage_costs(model_, job_, layout_, stages, network_.system(), options);
      cost_.insert(cost_.end(), c.begin(), c.end());
    }
  }

  std::size_t index(std::int32_t pipeline, int stage) const {
    return static_cast<std::size_t>(pipeline) * static_cast<std::size_t>(t_.stages) +
           static_cast<std::size_t>(stage);
  }
  std::size_t index(const Pass& pass) const {
    return index(t_.pipeline_of_microbatch(pass.microbatch), pass.stage);
  }
  const StageWork& work(const Pass& pass) const { return work_[index(pass)]; }
  std::size_t key(std::int32_t microbatch, int stage) const {
    return static_cast<std::size_t>(stage) * static_cast<std::size_t>(t_.microbatches) +
           static_cast<std::size_t>(microbatch);
  }

  // Durations, memory deltas, devices, streams; and where each pass runs.
  void compute_nodes() {
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
    g_.stream.reserve(nodes);
    g_.stream_begin.reserve(static_cast<std::size_t>(t_.devices) + 1);
    for (std::int32_t d = 0; d < t_.devices; ++d) {
      g_.stream_begin.push_back(static_cast<std::int64_t>(g_.stream.size()));
      for (auto i = t_.row_begin[static_cast<std::size_t>(d)];
           i < t_.row_begin[static_cast<std::size_t>(d) + 1]; ++i) {
        const auto n = static_cast<std::size_t>(i);
        g_.device[n] = d;
        g_.stream.push_back(static_cast<std::int32_t>(i));
        const cost::PassCost* halves[2] = {nullptr, nullptr};
        std::size_t half = 0;
        for (const Pass& pass : t_.ops[n].passes()) {
          const StageWork& w = work(pass);
          const cost::PassCost* c = nullptr;
          const auto& stage = options_.costs ? none_ : cost_[index(pass)];
          switch (pass.kind) {
            case PassKind::F:
              c = &stage.forward;
              g_.alloc_bytes[n] += w.activation_bytes;
              forward_op_[key(pass.microbatch, pass.stage)] = static_cast<std::int32_t>(i);
              break;
            case PassKind::B:
              c = &stage.backward;
              g_.free_bytes[n] += w.activation_bytes;
              backward_op_[key(pass.microbatch, pass.stage)] = static_cast<std::int32_t>(i);
              break;
            case PassKind::I:
              c = &stage.input_grad;
              g_.free_bytes[n] += w.activation_bytes - w.activation_kept_for_weight_grad;
              backward_op_[key(pass.microbatch, pass.stage)] = static_cast<std::int32_t>(i);
              break;
            case PassKind::W:
              c = &stage.weight_grad;
              g_.free_bytes[n] += w.activation_kept_for_weight_grad;
              break;
            case PassKind::None:
              break;
          }
          if (c != nullptr) halves[half++] = c;
        }
        op_cost_[n] = {};
        for (std::size_t k = 0; k < half; ++k) {
          op_cost_[n].seconds += halves[k]->seconds;
          op_cost_[n].tp_comm_s += halves[k]->tp_comm_s;
          op_cost_[n].expert_comm_s += halves[k]->expert_comm_s;
          op_cost_[n].kernels += halves[k]->kernels;
        }
        if (!options_.costs) plan_exchanges(n);
      }
      if (!options_.costs && job_.a2a_overlap) combine_1f1b(d);
      for (auto i = t_.row_begin[static_cast<std::size_t>(d)];
           i < t_.row_begin[static_cast<std::size_t>(d) + 1]; ++i) {
        const auto n = static_cast<std::size_t>(i);
        const auto& c = op_cost_[n];
        g_.duration[n] = c.seconds;
        g_.tp_comm_s[n] = c.tp_comm_s;
        g_.expert_comm_s[n] = c.expert_comm_s;
        if (options_.costs) {
          g_.duration[n] = explicit_costs[n];
        } else if (overheads_) {
          // The host issues the op's kernels after the step's synchronisation: the op lasts
          // at least as long as that takes, and the step's own host time comes on top.
          const auto& device = network_.system().device;
          const double gpu = g_.duration[n];
          g_.duration[n] = cost::host_bound_seconds(c, device) + device.step_overhead_s;
          g_.overhead_s[n] = g_.duration[n] - gpu;
        }
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

  using Piece = detail::Piece;
  using Program = detail::OpProgram;

  // The program of one pass, or of a pair run in turn (`b`: its second pass; `pair`: a forward
  // and a backward that overlap), -1 without exchanges. Built once per stage and pass kinds: the
  // ops of a table share a few.
  std::int32_t program_id(const Pass& a, const Pass* b, bool pair) {
    if (b == nullptr) {
      // One pass: by (pipeline, stage) and kind in a flat array (-2: not built yet).
      constexpr std::size_t kKinds = 5;
      if (single_ids_.empty()) single_ids_.assign(cost_.size() * kKinds, -2);
      auto& id = single_ids_[index(a) * kKinds + static_cast<std::size_t>(a.kind)];
      if (id == -2) {
        const auto first = detail::pass_pieces(cost_[index(a)], a.kind);
        id = -1;
        if (first.size() > 1) {
          id = static_cast<std::int32_t>(unique_.size());
          unique_.push_back(detail::op_program(first));
        }
      }
      return id;
    }
    const auto kind = [](const Pass& p) { return static_cast<std::int64_t>(p.kind); };
    const std::array<std::int64_t, 5> key{static_cast<std::int64_t>(index(a)), kind(a),
                                          b ? static_cast<std::int64_t>(index(*b)) : -1,
                                          b ? kind(*b) : -1, pair ? 1 : 0};
    if (const auto it = program_ids_.find(key); it != program_ids_.end()) return it->second;
    auto first = detail::pass_pieces(cost_[index(a)], a.kind);
    std::vector<Piece> second;
    if (b != nullptr) second = detail::pass_pieces(cost_[index(*b)], b->kind);
    std::int32_t id = -1;
    if (first.size() > 1 || second.size() > 1) {
      id = static_cast<std::int32_t>(unique_.size());
      if (pair) {
        unique_.push_back(detail::op_program(first, second));
      } else {
        first.insert(first.end(), second.begin(), second.end());
        unique_.push_back(detail::op_program(first));
      }
    }
    program_ids_.emplace(key, id);
    return id;
  }
  void set_program(std::size_t n, std::int32_t id) {
    if (id < 0 && program_of_.empty()) return;
    if (program_of_.empty()) program_of_.assign(t_.ops.size(), -1);
    program_of_[n] = id;
  }

  // FSDP without pipelining runs each op block by block (fsdp_program) when it gathers or
  // reduce-scatters: not in plan's compute part, which has no collectives.
  bool by_blocks(std::size_t n) const {
    return fsdp() && !pipelined() && !compute_only_ && fsdp_roles_[n] != 0 &&
           units(work(t_.ops[n].first())) > 1.0;
  }

  // The program of a pass run block by block with its FSDP roles, once per stage, kind and roles.
  std::int32_t block_program_id(const Pass& a, std::uint8_t roles) {
    roles &= kGathers | kScatters;  // what its program does
    const std::array<std::int64_t, 5> key{static_cast<std::int64_t>(index(a)),
                                          static_cast<std::int64_t>(a.kind), -1, roles, 2};
    if (const auto it = program_ids_.find(key); it != program_ids_.end()) return it->second;
    const StageWork& w = work(a);
    const auto shard = group(0, CollectiveGroup::FsdpShard);
    const auto experts = group(0, CollectiveGroup::ExpertShard);
    const auto flows = [&](double bytes, double expert_bytes, cost::ExchangeKind kind) {
      const CollectiveKind what = kind == cost::ExchangeKind::ParamGather
                                      ? CollectiveKind::AllGather
                                      : CollectiveKind::ReduceScatter;
      cost::Exchange x;
      x.kind = kind;
      x.flows = {ring_flow(ring_of(what, shard, bytes)),
                 expert_shard_ranks() > 1 ? ring_flow(ring_of(what, experts, expert_bytes))
                                          : cost::Flow{}};
      return x;
    };
    std::optional<cost::Exchange> gather, scatter;
    if (roles & kGathers)
      gather = flows(gather_bytes(w), expert_gather_bytes(w), cost::ExchangeKind::ParamGather);
    if (roles & kScatters) {
      scatter = flows(scatter_bytes(w), expert_scatter_bytes(w), cost::ExchangeKind::GradScatter);
      scatter->flows[0].latency_s += copy_in_seconds(w);
    }
    const auto blocks =
        detail::block_pieces(cost_[index(a)], a.kind, static_cast<std::int64_t>(units(w)));
    const auto id = static_cast<std::int32_t>(unique_.size());
    unique_.push_back(detail::fsdp_program(blocks, gather, scatter, copy_out_seconds(w)));
    program_ids_.emplace(key, id);
    return id;
  }

  // Op n's program when it runs exchanges (the passes' costs leave them out). A forward and a
  // backward in one op (DualPipe's F&B chunk pairs) overlap.
  void plan_exchanges(std::size_t n) {
    const Op& op = t_.ops[n];
    if (op.first().kind == PassKind::None) return;
    if (by_blocks(n)) {
      const auto id = block_program_id(op.first(), fsdp_roles_[n]);
      if (fsdp_roles_[n] & kGathers) {
        // Its other blocks' gathers are copied out inside it, a kernel each.
        const double others = units(work(op.first())) - 1.0;
        op_cost_[n].seconds += others * copy_out_seconds(work(op.first()));
        op_cost_[n].kernels += others;
      }
      if (!folded()) return set_program(n, id);
      // Without the transfers: its waits with every collective alone on its links.
      if (folded_waits_.empty()) folded_waits_.assign(t_.ops.size(), 0.0);
      folded_waits_[n] =
          detail::shortest_waits(unique_[static_cast<std::size_t>(id)], network_.system());
      return;
    }
    if (!op.is_pair() && folded()) {
      // One pass without its transfers: its waits in closed form, no program.
      const double waits = single_waits(op.first());
      if (waits > 0.0) {
        if (folded_waits_.empty()) folded_waits_.assign(t_.ops.size(), 0.0);
        folded_waits_[n] = waits;
      }
      return;
    }
    if (!op.is_pair()) return set_program(n, program_id(op.first(), nullptr, false));
    const bool pair = op.first().kind == PassKind::F && is_input_backward(op.second().kind);
    set_program(n, program_id(op.first(), &op.second(), pair));
  }

  // Op n's program, or nullptr.
  const Program* program_of(std::size_t n) const {
    if (n >= program_of_.size() || program_of_[n] < 0) return nullptr;
    return &unique_[static_cast<std::size_t>(program_of_[n])];
  }

  // No inner transfers: the compute part (plan's first bound) or lowering for bounds only.
  bool folded() const { return compute_only_ || !options_.inner_transfers; }

  // One pass's waits with every exchange alone on its links, once per stage and pass kind.
  double single_waits(const Pass& pass) {
    constexpr std::size_t kKinds = 5;
    if (single_waits_.empty()) single_waits_.assign(cost_.size() * kKinds, -1.0);
    auto& w = single_waits_[index(pass) * kKinds + static_cast<std::size_t>(pass.kind)];
    if (w < 0.0) w = detail::pass_waits(cost_[index(pass)], pass.kind, network_.system());
    return w;
  }

  // The programs' steps and inner transfers (after the compute nodes; none without exchanges).
  // Every op's first step computes its overheads.
  void lower_programs() {
    if (folded()) {
      // No transfers (the compute part, plan's bounds): each op as long as it takes with every
      // exchange alone on its links, a lower bound of what it takes.
      std::vector<double> waits(unique_.size(), -1.0);
      for (std::size_t n = 0; n < program_of_.size(); ++n) {
        if (program_of_[n] < 0) continue;
        auto& w = waits[static_cast<std::size_t>(program_of_[n])];
        if (w < 0.0) {
          w = detail::shortest_waits(unique_[static_cast<std::size_t>(program_of_[n])],
                                     network_.system());
        }
        g_.duration[n] += w;
      }
      for (std::size_t n = 0; n < folded_waits_.size(); ++n)
        g_.duration[n] += folded_waits_[n];
      return;
    }
    if (program_of_.empty()) return;
    const auto& system = network_.system();
    g_.step_begin.assign(1, 0);
    for (std::int64_t node = 0; node < g_.compute_nodes; ++node) {
      const auto n = static_cast<std::size_t>(node);
      if (const Program* program = program_of(n)) {
        const auto& p = *program;
        const auto d = g_.device[n];
        double compute = 0.0;
        for (const auto& step : p.steps)
          compute += step.kind == StepKind::Compute ? step.seconds : 0.0;
        g_.steps.push_back({StepKind::Compute, -1, g_.duration[n] - compute});
        // Each exchange's flows, over the device's switch ports or its NIC (-1: none).
        auto& flows = flows_scratch_;
        flows.clear();
        for (std::size_t e = 0; e < p.exchanges.size(); ++e) {
          const auto& x = p.exchanges[e];
          std::array<std::int32_t, 2> pair{-1, -1};
          for (std::size_t k = 0; k < 2; ++k) {
            const cost::Flow& f = x.flows[k];
            if (!(f.bytes > 0.0)) continue;
            const LinkSpec& link = f.nic ? system.inter : system.intra;
            const auto t = add_transfer(transfer_kind(x.kind), stage_of(node), d, f.bytes,
                                        {f.nic ? network_.nic_out(d) : network_.port_up(d),
                                         f.nic ? network_.nic_in(d) : network_.port_down(d)},
                                        f.latency_s);
            if (f.capped) g_.rate_cap.back() = link.bandwidth * link.collective_efficiency;
            g_.preds[static_cast<std::size_t>(t)] = 1;  // its Issue step
            // After the exchange before it on its stream (FSDP's one reduce-scatter stream).
            if (const auto before = p.after.empty() ? -1 : p.after[e]; before >= 0) {
              const auto prior = flows[static_cast<std::size_t>(before)][k];
              if (prior >= 0) edge(prior, t);
            }
            pair[k] = t;
          }
          flows.push_back(pair);
        }
        for (const auto& step : p.steps) {
          if (step.kind == StepKind::Compute) {
            g_.steps.push_back({StepKind::Compute, -1, step.seconds});
            continue;
          }
          if (step.exchange == detail::kNextGather) {
            // A slot for the next op's first gather (fsdp_gathers), nothing until then.
            if (next_gather_step_.empty()) next_gather_step_.assign(t_.ops.size(), -1);
            next_gather_step_[n] = static_cast<std::int64_t>(g_.steps.size());
            g_.steps.push_back({StepKind::Compute, -1, 0.0});
            continue;
          }
          for (const auto t : flows[static_cast<std::size_t>(step.exchange)])
            if (t >= 0) g_.steps.push_back({step.kind, t, 0.0});
        }
      }
      g_.step_begin.push_back(static_cast<std::int64_t>(g_.steps.size()));
    }
  }

  static TransferKind transfer_kind(cost::ExchangeKind kind) {
    switch (kind) {
      case cost::ExchangeKind::Expert:
        return TransferKind::ExpertAllToAll;
      case cost::ExchangeKind::ParamGather:
        return TransferKind::FsdpAllGather;
      case cost::ExchangeKind::GradScatter:
        return TransferKind::FsdpReduceScatter;
      case cost::ExchangeKind::Context:
        break;
    }
    return TransferKind::ContextExchange;
  }

  // The stage of an op's first pass (what its inner transfers serve).
  int stage_of(std::int64_t node) const {
    return t_.ops[static_cast<std::size_t>(node)].first().stage;
  }

  // Adds `seconds` of compute to op n (at its first step when it runs a program).
  void lengthen(std::size_t n, double seconds) {
    g_.duration[n] += seconds;
    if (g_.has_steps(static_cast<std::int64_t>(n)))
      g_.steps[static_cast<std::size_t>(g_.step_begin[n])].seconds += seconds;
  }

  // Megatron-Core's combined 1F1B (--overlap-moe-expert-parallel-comm, reference modern-runs.md
  // §C.3 rule 2): in the interleaved schedule's steady state (one pipeline, stage s on device
  // s mod devices, more stages than devices), each forward and the backward after it, the pairs
  // Megatron-LM's runtime runs as one step (steady_pairs), run as one overlapped step
  // (op_program(F, B)): the forward's op runs both, once the backward's input is in too
  // (merged_into_), and the backward's op is left empty. Other tables have no such steps.
  bool interleaved() const {
    if (t_.pipelines() != 1 || t_.stages <= t_.devices) return false;
    for (int s = 0; s < t_.stages; ++s)
      if (t_.placement.device_of(0, s) != s % t_.devices) return false;
    return true;
  }
  void combine_1f1b(std::int32_t d) {
    for (const auto i : steady_pairs(d)) {
      const auto fi = static_cast<std::size_t>(i), bi = fi + 1;
      const auto& f = t_.ops[fi];
      const auto& b = t_.ops[bi];
      if (f.first().microbatch == b.first().microbatch) continue;
      const auto id = program_id(f.first(), &b.first(), true);
      if (id < 0) continue;
      if (merged_into_.empty()) merged_into_.assign(t_.ops.size(), -1);
      set_program(fi, id);
      set_program(bi, -1);
      if (!folded_waits_.empty()) folded_waits_[fi] = folded_waits_[bi] = 0.0;  // the pair's own
      merged_into_[bi] = static_cast<std::int32_t>(i);
      auto& cf = op_cost_[fi];
      auto& cb = op_cost_[bi];
      cf.seconds += cb.seconds;
      cf.tp_comm_s += cb.tp_comm_s;
      cf.expert_comm_s += cb.expert_comm_s;
      cf.kernels += cb.kernels;  // one step: the host issues both passes' kernels
      cb = {};
    }
  }

  // A transfer routed by the network from one device to another.
  // Pipeline transfers are NCCL sends and receives: the link class's per-message latency
  // instead of its first hop's α, and at most its point-to-point bandwidth.
  std::int32_t add_transfer(TransferKind kind, int stage, std::int32_t from, std::int32_t to,
                            double bytes) {
    double latency = network_.append_route(from, to, g_.route);
    if (!is_pipeline(kind)) return close_transfer(kind, stage, from, to, bytes, latency);
    const LinkSpec& link = network_.route_class(from, to);
    latency += link.p2p_latency() - link.latency_s;
    const auto node = close_transfer(kind, stage, from, to, bytes, std::max(0.0, latency));
    if (link.p2p_efficiency < 1.0) g_.rate_cap.back() = link.p2p_bandwidth();
    return node;
  }

  // A transfer over the given links (reduction ring steps: a device's own ports or NIC).
  std::int32_t add_transfer(TransferKind kind, int stage, std::int32_t device, double bytes,
                            std::initializer_list<std::int32_t> links, double latency) {
    g_.route.insert(g_.route.end(), links.begin(), links.end());
    return close_transfer(kind, stage, device, device, bytes, latency);
  }

  // Adds the transfer node whose route was just appended.
  std::int32_t close_transfer(TransferKind kind, int stage, std::int32_t from, std::int32_t to,
                              double bytes, double latency) {
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

  void edge(std::int32_t from, std::int32_t to) {
    edges_.emplace_back(from, to);
    ++g_.preds[static_cast<std::size_t>(to)];
  }

  // `to` is released `delay` seconds after `from` starts.
  void start_edge(std::int32_t from, std::int32_t to, double delay) {
    start_edges_.push_back({from, to, delay});
    ++g_.preds[static_cast<std::size_t>(to)];
  }

  // A cross-device dependency becomes producer → transfer → consumer; a same-device one is
  // already ordered by the device's stream (a valid table runs the producer first).
  void depend(std::int32_t consumer, const Pass& pass, std::int32_t producer, TransferKind kind,
              double bytes) {
    // A backward run inside the forward before it (combine_1f1b) needs its input there.
    if (!merged_into_.empty() && merged_into_[static_cast<std::size_t>(consumer)] >= 0)
      consumer = merged_into_[static_cast<std::size_t>(consumer)];
    const int stage = pass.stage;
    const auto from = g_.device[static_cast<std::size_t>(producer)];
    const auto to = g_.device[static_cast<std::size_t>(consumer)];
    if (from == to) return;
    const auto transfer = add_transfer(kind, stage, from, to, bytes);
    edge(transfer, consumer);
    if (options_.runtime == Runtime::Megatron) {
      // Sent at the producer's step boundary, blocking the sender until it is delivered; moved
      // once the receiver has posted its receive at its last step boundary before the consumer.
      g_.blocks_sender.back() = 1;
      edge(step_end(producer), transfer);
      const auto row = t_.row_begin[static_cast<std::size_t>(to)];
      std::int64_t posted = consumer - 1;
      if (posted >= row && !boundary_[static_cast<std::size_t>(posted)]) --posted;
      if (posted >= row) edge(static_cast<std::int32_t>(posted), transfer);
      return;
    }
    edge(producer, transfer);
    if (options_.runtime == Runtime::PyTorch) {
      auto& into = kind == TransferKind::Activation ? activation_in_ : gradient_in_;
      into[key(pass.microbatch, stage)] = transfer;
    }
  }

  // Megatron-LM communicates at step boundaries: after every op, except that its interleaved
  // schedule (forward_backward_pipelining_with_interleaving; the tables with more stages than
  // devices) runs a steady-state forward and the backward after it as one step, and exchanges
  // their sends and the next two receives in one batch after the backward. A device whose
  // warm-up holds every forward (M·v no more than its warm-up, Megatron's `all_warmup`) has no
  // steady state: its last forward and first backward are separate steps.
  void megatron_steps() {
    boundary_.assign(t_.ops.size(), true);
    if (t_.stages <= t_.devices) return;
    for (std::int32_t d = 0; d < t_.devices; ++d) {
      for (const auto i : steady_pairs(d))
        boundary_[static_cast<std::size_t>(i)] = false;
    }
  }

  // The forwards of device d's steady state that run with the backward after them as one step
  // in Megatron-LM's interleaved schedule (a device whose warm-up holds every forward has none).
  std::vector<std::int64_t> steady_pairs(std::int32_t d) const {
    std::vector<std::int64_t> pairs;
    const auto begin = t_.row_begin[static_cast<std::size_t>(d)];
    const auto end = t_.row_begin[static_cast<std::size_t>(d) + 1];
    const auto is = [&](std::int64_t i, PassKind kind) {
      const auto& op = t_.ops[static_cast<std::size_t>(i)];
      return !op.is_pair() && op.first().kind == kind;
    };
    auto first_backward = begin;
    while (first_backward < end && is(first_backward, PassKind::F))
      ++first_backward;
    bool forward_after = false;
    for (auto i = first_backward; i < end && !forward_after; ++i)
      forward_after = is(i, PassKind::F);
    if (!forward_after) return pairs;  // all warm-up: no steady state
    for (auto i = begin; i + 1 < end; ++i) {
      if (is(i, PassKind::F) && is(i + 1, PassKind::B)) pairs.push_back(i);
    }
    return pairs;
  }

  // The op after which the step holding `op` ends.
  std::int32_t step_end(std::int32_t op) const {
    return boundary_[static_cast<std::size_t>(op)] ? op : op + 1;
  }

  void pipeline_transfers() {
    if (options_.runtime == Runtime::Megatron) megatron_steps();
    if (!t_.comms.empty() && options_.runtime != Runtime::PyTorch) {
      throw ParamError(fmt::format(
          "the table carries its own communication order (a compute+comms file), which is "
          "PyTorch's runtime's: simulate it with --runtime pytorch, not {} (or drop the order "
          "by converting the file to compute-only)",
          to_string(options_.runtime)));
    }
    if (options_.runtime == Runtime::PyTorch) {
      if (const auto issue = check_comm_order(t_)) throw ParamError(issue->message);
      activation_in_.assign(forward_op_.size(), -1);
      gradient_in_.assign(forward_op_.size(), -1);
    }
    for (std::size_t n = 0; n < t_.ops.size(); ++n) {
      const auto consumer = static_cast<std::int32_t>(n);
      for (const Pass& pass : t_.ops[n].passes()) {
        if (pass.kind == PassKind::F && pass.stage > 0) {
          const Pass previous{pass.microbatch, static_cast<std::uint16_t>(pass.stage - 1),
                              PassKind::F};
          depend(consumer, pass, forward_op_[key(pass.microbatch, pass.stage - 1)],
                 TransferKind::Activation, work(previous).message_bytes);
        } else if (is_input_backward(pass.kind) && pass.stage + 1 < t_.stages) {
          depend(consumer, pass, backward_op_[key(pass.microbatch, pass.stage + 1)],
                 TransferKind::Gradient, work(pass).message_bytes);
        }
      }
    }
    if (options_.runtime == Runtime::PyTorch) pytorch_order();
  }

  // PyTorch's runtime (_PipelineScheduleRuntime) runs each rank's list of compute and
  // communication actions: the table's own (a compute+comms file) or the one PyTorch's lowering
  // gives it (pytorch_send_recv). A send or receive is posted where it stands in the list, so
  // its transfer starts no earlier than the end of the compute op before it on that rank (the
  // NCCL stream waits for the compute stream when the operation is enqueued). Sends are not
  // waited by the compute stream; a receive is waited by the op that consumes it (the
  // transfer's edge to its consumer). All transfers between one pair of ranks share one NCCL
  // communicator and stream (ProcessGroupNCCL keys point-to-point communicators by the pair),
  // so on each rank they run one at a time in list order: a receive posted early holds up the
  // sends behind it (PyTorch issue #172668). NCCL's point-to-point semantics decide when a
  // transfer moves: a message within NCCL's buffer (NCCL_BUFFSIZE) leaves as soon as its send
  // is posted, and its receive completes once it has arrived and the receiver's stream reaches
  // it; a larger one moves only once both its send and its receive are posted. check_p2p walks
  // the same rules first, so an order that cannot complete is reported in the file's terms.
  void pytorch_order() {
    const bool own = !t_.comms.empty();
    CommOrder derived;
    if (!own && known_order_ == nullptr) derived = pytorch_send_recv(t_);
    const CommOrder& order = own ? t_.comms : known_order_ ? known_order_->order : derived;
    SendSizes sizes;
    sizes.buffer_bytes = options_.nccl_buffer_bytes;
    sizes.bytes = [this](const CommAction& c) {
      const auto transfer = c.kind == CommKind::SendF
                                ? activation_in_[key(c.microbatch, c.stage + 1)]
                                : gradient_in_[key(c.microbatch, c.stage - 1)];
      return transfer < 0 ? 0.0 : transfer_bytes(transfer);
    };
    // The check's verdict depends on the sends' sizes only through which exceed the buffer:
    // where all or none do, a known order carries it.
    std::optional<CommIssue> issue;
    bool checked = false;
    if (!own && known_order_ != nullptr) {
      std::int64_t sends = 0, large = 0;
      for (const auto& c : order.actions) {
        if (c.kind != CommKind::SendF && c.kind != CommKind::SendB) continue;
        ++sends;
        large += sizes.bytes(c) > sizes.buffer_bytes;
      }
      if (large == 0 || large == sends) {
        issue = large == 0 ? known_order_->all_eager : known_order_->all_rendezvous;
        checked = true;
      }
    }
    if (!checked) issue = check_p2p(t_, order, sizes, own);
    if (issue) {
      const bool too_large = issue->message.find("larger than NCCL's") != std::string::npos;
      throw ParamError(fmt::format(
          "{}{}{}", issue->message,
          too_large ? "; messages within NCCL's buffer (--nccl-buffsize) would not wait" : "",
          t_.comms.empty() ? " (pipetab show ... --format pytorch-comms writes these lists)" : ""));
    }
    std::unordered_map<std::int32_t, PairStream> on_pair;
    for (std::int32_t d = 0; d < t_.devices; ++d) {
      on_pair.clear();
      std::int32_t last_compute = -1;
      for (const auto& item : merged_row(t_, order, d)) {
        if (item.comm) {
          post(d, order.actions[static_cast<std::size_t>(item.index)], last_compute, on_pair);
        } else {
          last_compute = static_cast<std::int32_t>(item.index);
        }
      }
    }
  }

  double transfer_bytes(std::int32_t transfer) const {
    return g_.bytes[static_cast<std::size_t>(transfer - g_.compute_nodes)];
  }
  bool eager(std::int32_t transfer) const {
    return transfer_bytes(transfer) <= options_.nccl_buffer_bytes;
  }

  // What the next action on a rank's stream for one peer waits for: the last action that held
  // the stream and, after a receive whose message was sent eagerly, that transfer too.
  struct PairStream {
    std::int32_t last = -1, eager_receive = -1;
  };

  void post(std::int32_t device, const CommAction& c, std::int32_t last_compute,
            std::unordered_map<std::int32_t, PairStream>& on_pair) {
    if (c.kind == CommKind::ReduceGrad) {
      reduce_after(device, c.stage) = last_compute;
      return;
    }
    if (!has_microbatch(c.kind)) return;  // UNSHARD, RESHARD: FSDP is not modelled
    std::int32_t transfer = -1, consumer = -1;
    switch (c.kind) {
      case CommKind::SendF:
        transfer = activation_in_[key(c.microbatch, c.stage + 1)];
        break;
      case CommKind::RecvF:
        transfer = activation_in_[key(c.microbatch, c.stage)];
        consumer = forward_op_[key(c.microbatch, c.stage)];
        break;
      case CommKind::SendB:
        transfer = gradient_in_[key(c.microbatch, c.stage - 1)];
        break;
      case CommKind::RecvB:
        transfer = gradient_in_[key(c.microbatch, c.stage)];
        consumer = backward_op_[key(c.microbatch, c.stage)];
        break;
      default:
        break;
    }
    if (transfer < 0) return;  // check_comm_order rejects such actions
    const auto t = static_cast<std::size_t>(transfer - g_.compute_nodes);
    const auto peer =
        is_send(c.kind) ? g_.receiver[t] : g_.device[static_cast<std::size_t>(transfer)];
    auto& stream = on_pair[peer];
    if (is_receive(c.kind) && eager(transfer)) {
      // The message left when its send was posted; the receive completes once it has arrived
      // and this rank's stream has reached it, which is when its consumer may start.
      for (const auto before : {stream.last, stream.eager_receive}) {
        if (before >= 0 && consumer >= 0) edge(before, consumer);
      }
      stream.eager_receive = transfer;
      return;
    }
    if (last_compute >= 0) edge(last_compute, transfer);
    for (const auto before : {stream.last, stream.eager_receive}) {
      if (before >= 0) edge(before, transfer);
    }
    stream = {transfer, -1};
  }

  // Gradient reductions: between the replicas of each stage (two-pipeline schedules), over the
  // data-parallel replicas, and of the tied embedding between the first and the last stage.
  // Each device starts once its last backward of the stage (the B, or the W of a split
  // backward) has run.
  void collectives() {
    const auto N = static_cast<std::size_t>(t_.stages);
    // [pipeline * N + stage]: the op that finishes the stage's gradient in that pipeline.
    std::vector<std::int32_t> last_grad(static_cast<std::size_t>(t_.pipelines()) * N, -1);
    for (std::size_t n = 0; n < t_.ops.size(); ++n) {
      for (const Pass& pass : t_.ops[n].passes()) {
        if (pass.kind == PassKind::B || pass.kind == PassKind::W)
          last_grad[index(pass)] = static_cast<std::int32_t>(n);
      }
    }
    std::vector<std::int32_t> members, ready;
    for (std::size_t s = 0; s < N; ++s) {
      // The devices holding stage s, in ring order, and the op after which each one's gradient
      // of the stage is complete (a device's ops run in table order, so the latest one).
      members.clear();
      ready.clear();
      for (std::int32_t p = 0; p < t_.pipelines(); ++p) {
        const auto device = t_.placement.device_of(p, static_cast<int>(s));
        auto op = last_grad[index(p, static_cast<int>(s))];
        if (!reduce_after_.empty()) op = std::max(op, reduce_after(device, static_cast<int>(s)));
        const auto at = std::find(members.begin(), members.end(), device);
        if (at == members.end()) {
          members.push_back(device);
          ready.push_back(op);
        } else {
          auto& r = ready[static_cast<std::size_t>(at - members.begin())];
          r = std::max(r, op);
        }
      }
      const double bytes = work_[s].grad_bytes * options_.collective_scale;
      const auto stage = static_cast<int>(s);
      const bool replicas = members.size() > 1;
      if (fsdp()) {
        // The last reduce-scatter of the stage's gradients (all of them, or the last unit's
        // without pipelining), then HSDP's all-reduce of the shard over the replicas.
        for (std::size_t i = 0; i < members.size(); ++i) {
          ready[i] = layout_.fsdp.grad_sync == GradSync::PerStep
                         ? fsdp_reduce_scatter(stage, members[i], ready[i])
                         : scattered_[static_cast<std::size_t>(stage)];
          ready[i] = hsdp_all_reduce(stage, members[i], ready[i]);
          done(members[i], stage) = ready[i];
        }
        continue;
      }
      if (replicas) ring(TransferKind::ReplicaAllReduce, stage, members, bytes, ready);
      // Dense gradients over DP × CP, then the routed experts' over EDP (Megatron-Core's DDP
      // keeps them in separate buffers, reduced on their own groups).
      const double experts =
          work_[s].params > 0 ? bytes * work_[s].expert_params / work_[s].params : 0.0;
      for (std::size_t i = 0; i < members.size(); ++i) {
        if (gradient_ranks() > 1)
          data_parallel(stage, members[i], bytes - experts, ready[i], !replicas,
                        group(members[i], CollectiveGroup::Gradient));
        if (experts > 0 && expert_ranks() > 1)
          data_parallel(stage, members[i], experts, ready[i], !replicas,
                        group(members[i], CollectiveGroup::ExpertData));
        done(members[i], stage) = ready[i];
      }
    }
    embedding_all_reduce();
  }

  // Ring all-reduce over `members` (pipeline devices, each sending to the next over its route):
  // the rule's steps (parallel/collective.hpp: 2(k−1)); in each, every member sends bytes/k to
  // the next one (reduce-scatter, then all-gather). A member's send needs its own gradient (its
  // previous send, or `ready` for the first) and, after the first step, the chunk it received
  // in the previous step. On return `ready` holds, per member, the transfer that completes
  // its copy of the reduced gradient.
  void ring(TransferKind kind, int stage, const std::vector<std::int32_t>& members, double bytes,
            std::vector<std::int32_t>& ready) {
    const auto k = members.size();
    std::vector<std::int32_t> sent(ready), received(k, -1), next_received(k);
    const auto steps = static_cast<std::size_t>(
        collective_steps(CollectiveKind::AllReduce, static_cast<double>(k)));
    for (std::size_t step = 0; step < steps; ++step) {
      for (std::size_t i = 0; i < k; ++i) {
        const auto transfer = add_transfer(kind, stage, members[i], members[(i + 1) % k],
                                           bytes / static_cast<double>(k));
        if (sent[i] >= 0) edge(sent[i], transfer);
        if (received[i] >= 0) edge(received[i], transfer);
        sent[i] = transfer;
        next_received[(i + 1) % k] = transfer;
      }
      received.swap(next_received);
    }
    ready = received;
  }

  // The group `kind` of pipeline device `device` (placement.hpp: its size, and how many of its
  // ranks share the device's first rank's node).
  Group group(std::int32_t device, CollectiveGroup kind) const {
    return group_of(layout_, kind, device, node_size(network_.system()));
  }

  // A collective of the iteration (data-parallel, FSDP and HSDP reductions and gathers) over
  // `g`: NCCL's ring at the links' own rate, sharing them with the rest (parallel/collective.hpp,
  // CollectiveRate::Link).
  static Collective ring_of(CollectiveKind kind, const Group& g, double bytes) {
    return {kind, g, bytes, CollectiveAlgorithm::Ring, CollectiveRate::Link};
  }

  // One device's side of ring `c` by the rule: its one flow — over its switch ports while the
  // group fits in its node, over its NIC (shared with its node's members of the group) when it
  // spans nodes — and those links.
  struct Side {
    CollectiveFlow flow;
    std::int32_t out = 0, in = 0;
    bool nic = false;
  };
  Side side(std::int32_t device, const Collective& c) const {
    const auto& system = network_.system();
    const CollectiveFlows f = collective_flows(c, system.intra, system.inter);
    const bool nic = f.remote.steps > 0.0;
    return {nic ? f.remote : f.local, nic ? network_.nic_out(device) : network_.port_up(device),
            nic ? network_.nic_in(device) : network_.port_down(device), nic};
  }

  // Device 0's side of ring `c` as one flow of an op's program (FSDP's per-block collectives).
  cost::Flow ring_flow(const Collective& c) const {
    if (!(c.bytes > 0.0)) return {};
    const Side s = side(0, c);
    return {s.flow.bytes, s.flow.latency_s, s.nic, false};
  }

  // One device's side of ring `c`: `steps` of its steps (all of them: collective_steps), a
  // transfer each, sending bytes/ranks out of the device and receiving as much. Chained after
  // `after` (-1: free to start at once); returns the last step.
  std::int32_t ring_side(TransferKind kind, int stage, std::int32_t device, const Collective& c,
                         std::int64_t steps, std::int32_t after) {
    const Side s = side(device, c);
    std::int32_t chain = after;
    for (std::int64_t step = 0; step < steps; ++step) {
      const auto transfer = add_transfer(kind, stage, device, s.flow.step_bytes, {s.out, s.in},
                                         s.flow.step_latency_s);
      if (chain >= 0) edge(chain, transfer);
      chain = transfer;
    }
    return chain;
  }

  // One device's side of a whole ring collective as one transfer: its steps' sends and their
  // latencies in one flow. Alone on its links it takes exactly what the chain of steps takes;
  // against other traffic it shares the links as one flow. FSDP's collectives over thousands of
  // ranks stay one node each in the graph (a node per step made plan's graphs grow with the
  // ranks).
  std::int32_t collective_side(TransferKind kind, int stage, std::int32_t device,
                               const Collective& c, std::int32_t after) {
    const Side s = side(device, c);
    const auto transfer =
        add_transfer(kind, stage, device, s.flow.bytes, {s.out, s.in}, s.flow.latency_s);
    if (after >= 0) edge(after, transfer);
    return transfer;
  }

  // The data-parallel reduction of one stage's gradient on one device: R replicas run the same
  // ring, so it is modelled from this device's side. Each of the 2(R−1) steps (R−1 for the
  // distributed optimizer's reduce-scatter) sends bytes/R out of the device and receives as
  // much: over its NIC when the group spans nodes — where the group's `per_node` members on a
  // node share the node's NICs, each carrying 1/per_node of the traffic (NCCL's rings over
  // one NIC per GPU) — or over its switch ports when the group fits in the node. In buckets
  // (dp_overlap), bucket j is ready (j+1)/n of the way through the stage's last backward and
  // waits for bucket j−1 (one communicator runs them in order).
  void data_parallel(int stage, std::int32_t device, double bytes, std::int32_t& done,
                     bool overlap_allowed, const Group& g) {
    const CollectiveKind kind =
        job_.distributed_optimizer ? CollectiveKind::ReduceScatter : CollectiveKind::AllReduce;
    const auto steps = static_cast<std::int64_t>(collective_steps(kind, static_cast<double>(g.ranks)));
    const bool buckets_on =
        job_.dp_overlap && overlap_allowed && done >= 0 && !g_.is_transfer(done);
    const double n =
        buckets_on ? std::max(1.0, std::ceil(bytes / job_.dp_bucket_bytes)) : 1.0;
    const Collective bucket = ring_of(kind, g, bytes / n);
    const std::int32_t last_backward = done;
    std::int32_t previous = -1;
    for (double j = 0; j < n; ++j) {
      std::int32_t after = buckets_on ? -1 : done;
      if (buckets_on) {
        // The bucket's first step starts once its gradients are ready, after the bucket before.
        const auto first =
            ring_side(TransferKind::DataAllReduce, stage, device, bucket, 1, previous);
        start_edge(last_backward, first,
                   (j + 1) / n * g_.duration[static_cast<std::size_t>(last_backward)]);
        after = first;
      }
      const std::int64_t rest = buckets_on ? steps - 1 : steps;
      previous = ring_side(TransferKind::DataAllReduce, stage, device, bucket, rest, after);
    }
    if (previous >= 0) done = previous;
  }

  // FSDP (reference modern-runs.md §C.1). Pipelined, a unit is a whole stage (torchtitan's
  // pipelined FSDP); without pipelining (one device in the table) a unit is one transformer
  // block, and the stage's op runs all of them.
  bool pipelined() const { return t_.devices > 1; }
  double units(const StageWork& w) const {
    return pipelined() ? 1.0 : std::max<double>(1.0, static_cast<double>(w.layers));
  }
  // Bytes of a unit's parameters as all-gathered: the 16-bit weights, or one byte each with the
  // Float8 all-gather.
  double gather_bytes(const StageWork& w) const {
    const auto* m = model_.transformer();
    const double params = m ? w.params - w.expert_params : w.weight_bytes / 2.0;
    return params * gathered_bytes_per_param() / units(w) * options_.collective_scale;
  }
  double gathered_bytes_per_param() const {
    const auto* m = model_.transformer();
    return layout_.fsdp.fp8_all_gather ? 1.0
                                       : (m ? static_cast<double>(job_.element_bytes()) : 2.0);
  }
  // FSDP2 copies a gathered unit out of the all-gather's buffer into its parameters on the
  // compute stream once the gather is in (foreach_all_gather_copy_out's split_with_sizes_copy,
  // torch/distributed/fsdp/_fully_shard/_fsdp_collectives.py): the unit's gathered bytes read and
  // written once.
  double copy_out_seconds(const StageWork& w) const {
    if (layout_.fsdp.impl != FsdpImpl::Fsdp2) return 0.0;  // Megatron-FSDP gathers in place
    const double params = model_.transformer() ? w.params : w.weight_bytes / 2.0;
    return cost::copy_seconds(2.0 * params * gathered_bytes_per_param() / units(w),
                              network_.system().device);
  }
  // And a unit's 16-bit gradients into the reduce-scatter's input in the reduce dtype, on the
  // reduce-scatter stream before the collective (foreach_reduce_scatter_copy_in's
  // torch._chunk_cat), which it delays: the reduce-scatter's latency carries it.
  double copy_in_seconds(const StageWork& w) const {
    const auto* m = model_.transformer();
    if (m == nullptr || layout_.fsdp.impl != FsdpImpl::Fsdp2) return 0.0;
    const double bytes = w.params * static_cast<double>(job_.element_bytes()) + w.grad_bytes;
    return cost::copy_seconds(bytes / units(w), network_.system().device);
  }
  // The routed experts' share of a unit's parameters or gradients, gathered and scattered over
  // their own ranks (EDP); 0 without experts.
  double expert_share(const StageWork& w) const {
    return w.params > 0 ? w.expert_params / w.params : 0.0;
  }
  double expert_gather_bytes(const StageWork& w) const {
    return w.expert_params * gathered_bytes_per_param() / units(w) * options_.collective_scale;
  }
  // One unit's collective of the routed experts over their shard group (their EDP group, or
  // with HSDP its first EDP / R ranks) after `after` (-1: none to run).
  std::int32_t expert_collective(TransferKind kind, int stage, std::int32_t device, double bytes,
                                 std::int32_t after) {
    if (expert_shard_ranks() <= 1 || bytes <= 0.0) return after;
    const CollectiveKind what = kind == TransferKind::FsdpAllGather
                                    ? CollectiveKind::AllGather
                                    : CollectiveKind::ReduceScatter;
    return collective_side(kind, stage, device,
                           ring_of(what, group(device, CollectiveGroup::ExpertShard), bytes),
                           after);
  }
  // Bytes of a unit's gradients as reduce-scattered (grad_bytes_per_param: torchtitan reduces in
  // fp32 by default, MixedPrecisionPolicy(reduce_dtype=float32)).
  double scatter_bytes(const StageWork& w) const {
    return w.grad_bytes * (1.0 - expert_share(w)) / units(w) * options_.collective_scale;
  }
  double expert_scatter_bytes(const StageWork& w) const {
    return w.grad_bytes * expert_share(w) / units(w) * options_.collective_scale;
  }

  // The reduce-scatter of one unit's gradients (the whole stage's when pipelined, the last
  // block's without) on the shard group, after `after`, and after the device's previous one (one
  // reduce-scatter stream). Returns its last step.
  std::int32_t fsdp_reduce_scatter(int stage, std::int32_t device, std::int32_t after) {
    const auto& w = work_[index(0, stage)];
    auto& previous = last_scatter_[static_cast<std::size_t>(device)];
    const auto scatter = collective_side(
        TransferKind::FsdpReduceScatter, stage, device,
        ring_of(CollectiveKind::ReduceScatter, group(device, CollectiveGroup::FsdpShard),
                scatter_bytes(w)),
        after);
    g_.latency_s[static_cast<std::size_t>(scatter - g_.compute_nodes)] += copy_in_seconds(w);
    if (previous >= 0) edge(previous, scatter);
    previous = expert_collective(TransferKind::FsdpReduceScatter, stage, device,
                                 expert_scatter_bytes(w), scatter);
    return previous;
  }

  // HSDP: the shard's gradients all-reduced over the replicas (2(R−1) ring steps).
  std::int32_t hsdp_all_reduce(int stage, std::int32_t device, std::int32_t after) {
    const std::int64_t replicas = gradient_ranks() / shard_ranks();
    if (replicas <= 1) return after;
    const auto& w = work_[static_cast<std::size_t>(stage)];
    // Each rank's shard: the dense gradients' 1/shard, the experts' 1/(EDP / R); the experts'
    // replicas are the same outermost ranks (TP × shard apart).
    const double experts = w.grad_bytes * expert_share(w);
    const double shard = ((w.grad_bytes - experts) / static_cast<double>(shard_ranks()) +
                          experts / static_cast<double>(expert_shard_ranks())) *
                         options_.collective_scale;
    return collective_side(
        TransferKind::DataAllReduce, stage, device,
        ring_of(CollectiveKind::AllReduce, group(device, CollectiveGroup::HsdpReplicas), shard),
        after);
  }

  // What FSDP does around each op (reference modern-runs.md §C.1): kGathers, it gathers its
  // unit first — before the stage's first forward and, resharding after forward, before every
  // forward and backward; kScatters, it reduce-scatters the gradients after it — after every
  // backward with per-microbatch gradient sync, else after the stage's last. kKeepsFirst: run
  // block by block right after the stage's forward, its first block is still gathered —
  // torchtitan does not reshard the last block after forward (parallelize_llama.py @9dec370:
  // reshard_after_forward only for blocks before the last, reference §A.3) — so only its other
  // blocks are gathered.
  static constexpr std::uint8_t kGathers = 1, kScatters = 2, kKeepsFirst = 4;
  void fsdp_roles() {
    const bool reshard = reshard_after_forward(layout_.fsdp, pipelined());
    fsdp_roles_.assign(t_.ops.size(), 0);
    std::vector<std::int64_t> last_backward(static_cast<std::size_t>(t_.stages), -1);
    for (std::size_t n = 0; n < t_.ops.size(); ++n) {
      for (const Pass& pass : t_.ops[n].passes()) {
        if (pass.kind == PassKind::B || pass.kind == PassKind::W)
          last_backward[static_cast<std::size_t>(pass.stage)] = static_cast<std::int64_t>(n);
      }
    }
    for (std::int32_t d = 0; d < t_.devices; ++d) {
      std::vector<std::uint8_t> gathered(static_cast<std::size_t>(t_.stages), 0);
      for (auto i = t_.row_begin[static_cast<std::size_t>(d)];
           i < t_.row_begin[static_cast<std::size_t>(d) + 1]; ++i) {
        for (const Pass& pass : t_.ops[static_cast<std::size_t>(i)].passes()) {
          const auto s = static_cast<std::size_t>(pass.stage);
          const bool uses = pass.kind == PassKind::F || is_input_backward(pass.kind);
          if (uses && (reshard || (pass.kind == PassKind::F && !gathered[s]))) {
            gathered[s] = 1;
            fsdp_roles_[static_cast<std::size_t>(i)] |= kGathers;
            const auto begin = t_.row_begin[static_cast<std::size_t>(d)];
            if (!pipelined() && is_input_backward(pass.kind) && i > begin) {
              const Op& before = t_.ops[static_cast<std::size_t>(i - 1)];
              if (!before.is_pair() && before.first().kind == PassKind::F &&
                  before.first().stage == pass.stage)
                fsdp_roles_[static_cast<std::size_t>(i)] |= kKeepsFirst;
            }
          }
          if ((pass.kind == PassKind::B || pass.kind == PassKind::W) &&
              (layout_.fsdp.grad_sync == GradSync::PerMicrobatch || i == last_backward[s]))
            fsdp_roles_[static_cast<std::size_t>(i)] |= kScatters;
        }
      }
    }
  }

  // Every op's first parameter all-gather (its unit's, or without pipelining its first block's:
  // the others are in its program), and the reduce-scatters of per-microbatch gradient sync (the
  // unit's, or the last block's). Each gather is issued as the op before it starts on the device
  // (FSDP2 prefetches one unit ahead) — as the op before starts its last block when that runs
  // block by block — and after the device's previous gather (one all-gather stream).
  void fsdp_gathers() {
    if (!fsdp()) return;
    last_scatter_.assign(static_cast<std::size_t>(t_.devices), -1);
    scattered_.assign(static_cast<std::size_t>(t_.stages), -1);
    for (std::int32_t d = 0; d < t_.devices; ++d) {
      const auto shard = group(d, CollectiveGroup::FsdpShard);
      std::int32_t gather = -1;
      const auto begin = t_.row_begin[static_cast<std::size_t>(d)];
      for (auto i = begin; i < t_.row_begin[static_cast<std::size_t>(d) + 1]; ++i) {
        const auto op = static_cast<std::int32_t>(i);
        const auto roles = fsdp_roles_[static_cast<std::size_t>(i)];
        for (const Pass& pass : t_.ops[static_cast<std::size_t>(i)].passes()) {
          const StageWork& w = work(pass);
          if ((roles & kGathers) && !(roles & kKeepsFirst)) {
            const auto next = collective_side(
                TransferKind::FsdpAllGather, pass.stage, d,
                ring_of(CollectiveKind::AllGather, shard, gather_bytes(w)), gather);
            if (i > begin) issue_after_start(op - 1, next);
            gather = expert_collective(TransferKind::FsdpAllGather, pass.stage, d,
                                       expert_gather_bytes(w), next);
            edge(gather, op);
            lengthen(static_cast<std::size_t>(op), copy_out_seconds(w));
          }
          if ((roles & kScatters) && layout_.fsdp.grad_sync == GradSync::PerMicrobatch)
            scattered_[static_cast<std::size_t>(pass.stage)] =
                fsdp_reduce_scatter(pass.stage, d, op);
        }
      }
    }
  }

  // Releases transfer t as op n starts, or as it starts its last block when it has a slot for
  // that (fsdp_program's kNextGather).
  void issue_after_start(std::int32_t n, std::int32_t t) {
    const auto slot =
        next_gather_step_.empty() ? -1 : next_gather_step_[static_cast<std::size_t>(n)];
    if (slot < 0) return start_edge(n, t, 0.0);
    g_.steps[static_cast<std::size_t>(slot)] = {StepKind::Issue, t, 0.0};
    ++g_.preds[static_cast<std::size_t>(t)];
  }

  // The word embedding's copies (the first stage's, the last stage's tied output layer, the MTP
  // stages'): one all-reduce over the devices of each pipeline that hold them (Megatron's
  // embedding group), after their data-parallel reduction; pipelines on the same devices share
  // it.
  void embedding_all_reduce() {
    std::vector<std::vector<std::int32_t>> groups;
    for (std::int32_t p = 0; p < t_.pipelines(); ++p) {
      std::vector<std::int32_t> stages, members;
      for (std::int32_t s = 0; s < t_.stages; ++s) {
        const std::int32_t device = t_.placement.device_of(p, s);
        if (work_[index(p, s)].tied_embedding_grad_bytes <= 0.0 ||
            std::find(members.begin(), members.end(), device) != members.end())
          continue;
        stages.push_back(s);
        members.push_back(device);
      }
      if (members.size() < 2) continue;
      auto key = members;
      std::sort(key.begin(), key.end());
      if (std::find(groups.begin(), groups.end(), key) != groups.end()) continue;
      groups.push_back(std::move(key));
      std::vector<std::int32_t> ready;
      for (std::size_t k = 0; k < members.size(); ++k)
        ready.push_back(done(members[k], stages[k]));
      ring(TransferKind::EmbeddingAllReduce, 0, members,
           work_[index(p, stages[0])].tied_embedding_grad_bytes * options_.collective_scale, ready);
      for (std::size_t k = 0; k < members.size(); ++k)
        done(members[k], stages[k]) = ready[k];
    }
  }

  // Megatron-LM's optimizer step begins with all-reduces over the model-parallel group (the
  // gradient norm; with fp16 also the overflow check), each followed by a host sync: every
  // stage waits for every other. Small messages go by NCCL's tree, about 2·log2(P) hops. Then
  // each device runs its optimizer step, and the distributed optimizer all-gathers its shard.
  void end_of_iteration() {
    if (!optimizer_) return;
    const auto& system = network_.system();
    const double model_parallel = static_cast<double>(t_.devices) * static_cast<double>(layout_.tp);
    const bool spans_nodes = network_.node_of(0) != network_.node_of(t_.devices - 1) ||
                             layout_.tp > system.devices_per_node;
    const double alpha = spans_nodes ? system.inter.latency_s : system.intra.latency_s;
    const double reductions = job_.precision == Precision::FP16 ? 2.0 : 1.0;
    const double hops = 2.0 * std::ceil(std::log2(std::max(2.0, model_parallel)));
    const auto sync = add_transfer(TransferKind::Sync, -1, 0, 0.0, {}, reductions * hops * alpha);
    for (std::int32_t d = 0; d < t_.devices; ++d) {
      const auto row_end = t_.row_begin[static_cast<std::size_t>(d) + 1];
      if (row_end > t_.row_begin[static_cast<std::size_t>(d)])
        edge(static_cast<std::int32_t>(row_end - 1), sync);
    }
    for (const auto node : done_) {
      if (node >= 0 && g_.is_transfer(node)) edge(node, sync);
    }
    std::vector<double> step_bytes(static_cast<std::size_t>(t_.devices), 0.0);
    std::vector<double> params(step_bytes.size(), 0.0), expert_params(step_bytes.size(), 0.0);
    for (std::int32_t p = 0; p < t_.pipelines(); ++p) {
      for (std::int32_t s = 0; s < t_.stages; ++s) {
        const auto d = static_cast<std::size_t>(t_.placement.device_of(p, s));
        const auto& w = work_[index(p, s)];
        step_bytes[d] += sharding_.per_rank(w.optimizer_step_bytes, w);
        const double experts = w.params > 0 ? w.weight_bytes * w.expert_params / w.params : 0.0;
        params[d] += w.weight_bytes - experts;
        expert_params[d] += experts;
      }
    }
    for (std::int32_t d = 0; d < t_.devices; ++d) {
      const auto node = static_cast<std::int32_t>(g_.table_ops + d);
      g_.duration[static_cast<std::size_t>(node)] =
          cost::optimizer_step_seconds(step_bytes[static_cast<std::size_t>(d)], system.device);
      edge(sync, node);
      if (job_.distributed_optimizer && gradient_ranks() > 1) {
        // All-gather of the updated 16-bit weights: R−1 ring steps of 1/R each.
        ring_side(TransferKind::ParamAllGather, -1, d,
                  ring_of(CollectiveKind::AllGather, group(d, CollectiveGroup::Gradient),
                          params[static_cast<std::size_t>(d)]),
                  gradient_ranks() - 1, node);
      }
      if (job_.distributed_optimizer && expert_ranks() > 1 &&
          expert_params[static_cast<std::size_t>(d)] > 0) {
        ring_side(TransferKind::ParamAllGather, -1, d,
                  ring_of(CollectiveKind::AllGather, group(d, CollectiveGroup::ExpertData),
                          expert_params[static_cast<std::size_t>(d)]),
                  expert_ranks() - 1, node);
      }
    }
  }

  template <class Edge, class Target>
  static void compress(std::size_t nodes, const std::vector<Edge>& edges, Target target,
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

  void build_successors() {
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

  struct StartEdge {
    std::int32_t first, second;
    double delay;
  };

  const ScheduleTable& t_;
  const ModelConfig& model_;
  const Job& job_;
  const Layout& layout_;
  const Network& network_;
  LoweringOptions options_;                    // the runtime resolved
  const PyTorchOrder* known_order_ = nullptr;  // pytorch_runtime_order(t_), when given
  Sharding sharding_;
  std::vector<StageWork> work_;
  std::vector<cost::StageCost> cost_;
  const cost::StageCost none_{};
  bool optimizer_ = false;
  bool overheads_ = false;
  ExecGraph g_;
  std::vector<std::int32_t> forward_op_, backward_op_;
  std::vector<cost::PassCost> op_cost_;  // per table op: its passes' cost, before overheads
  // The programs of ops that run exchanges: each distinct one once, by its passes' stage and
  // kinds; per table op, its program (-1: none; empty when no op has one).
  std::vector<Program> unique_;
  std::map<std::array<std::int64_t, 5>, std::int32_t> program_ids_;  // of two passes
  std::vector<std::int32_t> single_ids_;                             // of one pass
  std::vector<double> single_waits_;  // folded: per (stage, kind), a pass's waits (-1: not yet)
  std::vector<double> folded_waits_;  // folded: per table op, its single pass's waits
  std::vector<std::array<std::int32_t, 2>> flows_scratch_;  // lower_programs
  std::vector<std::int32_t> program_of_;
  bool compute_only_ = false;              // lower_compute: no transfers
  std::vector<std::int32_t> merged_into_;  // per table op: the op that runs it (-1: itself)
  std::vector<std::pair<std::int32_t, std::int32_t>> edges_;
  std::vector<StartEdge> start_edges_;
  // PyTorch: per (stage, microbatch) key, the transfer bringing a stage its activation / its
  // output gradient (-1: none, the producer is on the same device).
  std::vector<std::int32_t> activation_in_, gradient_in_;
  // [device * stages + stage]: the op after which a REDUCE_GRAD of the comm order starts the
  // stage's gradient reduction on the device (-1: none).
  std::vector<std::int32_t> reduce_after_;
  std::int32_t& reduce_after(std::int32_t device, int stage) {
    if (reduce_after_.empty())
      reduce_after_.assign(
          static_cast<std::size_t>(t_.devices) * static_cast<std::size_t>(t_.stages), -1);
    return reduce_after_[static_cast<std::size_t>(device) * static_cast<std::size_t>(t_.stages) +
                         static_cast<std::size_t>(stage)];
  }
  std::vector<bool> boundary_;  // Megatron: a step ends after this op
  // FSDP: per device, its last reduce-scatter step so far (one stream); per stage, the last
  // reduce-scatter of per-microbatch gradient sync.
  std::vector<std::int32_t> last_scatter_, scattered_;
  std::vector<std::uint8_t> fsdp_roles_;        // per table op: kGathers | kScatters
  std::vector<std::int64_t> next_gather_step_;  // per op run by blocks: its kNextGather slot
  // [device * stages + stage]: the node after which the device's gradient of the stage is
  // reduced (-1: it holds no such stage).
  std::vector<std::int32_t> done_;
  std::int32_t& done(std::int32_t device, int stage) {
    if (done_.empty())
      done_.assign(static_cast<std::size_t>(t_.devices) * static_cast<std::size_t>(t_.stages), -1);
    return done_[static_cast<std::size_t>(device) * static_cast<std::size_t>(t_.stages) +
                 static_cast<std::size_t>(stage)];
  }
};

}  // namespace

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
  if (!(job.dp_bucket_bytes >= 1e3 && job.dp_bucket_bytes <= 1e15)) {
    throw ParamError(
        fmt::format("gradient bucket of {} bytes is out of range: expected 1e3 to 1e15 bytes",
                    job.dp_bucket_bytes));
  }
}

ExecGraph lower(const ScheduleTable& table, const ModelConfig& model, const Job& job,
                const Layout& layout, const Network& network, const LoweringOptions& options) {
  return Lowering(table, model, job, layout, network, options).run();
}

ExecGraph lower(const ScheduleTable& table, const ModelConfig& model, const Job& job,
                const Layout& layout, const Network& network, const LoweringOptions& options,
                const PyTorchOrder& order) {
  return Lowering(table, model, job, layout, network, options, &order).run();
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
  return Lowering(table, model, job, layout, network, options).compute_only();
}

}  // namespace pipetab
