// The lowering of a schedule table to its execution graph (lower, lower_compute; docs/design.md
// §6): one class, Lowering, whose member functions are defined by job in lower.cpp (the checks, the
// compute nodes, the graph's transfers and edges), lower_orders.cpp (the runtimes' orders and the
// pipeline transfers), lower_iteration.cpp (the iteration's collectives and its end),
// lower_fsdp.cpp (FSDP per unit and per block) and lower_exchanges.cpp (the exchanges inside ops:
// their programs). Private to src/sim/.
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <map>
#include <optional>
#include <unordered_map>
#include <utility>
#include <vector>

#include "programs.hpp"

#include "pipetab/parallel/collective.hpp"
#include "pipetab/parallel/layout.hpp"
#include "pipetab/sim/bounds.hpp"
#include "pipetab/sim/graph.hpp"
#include "pipetab/table/comm_order.hpp"
#include "pipetab/table/offload.hpp"

namespace pipetab::detail {

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

class Lowering {
 public:
  // lower.cpp: the stages' work and the runtime resolved.
  Lowering(const ScheduleTable& t, const ModelConfig& model, const Job& job, const Layout& layout,
           const Network& network, const LoweringOptions& options,
           const PyTorchOrder* known_order = nullptr);

  // lower.cpp: the whole graph (lower), or the compute nodes alone (lower_compute).
  ExecGraph run() &&;
  ExecGraph compute_only() &&;
  DeviceBounds bounds() &&;

 private:
  // The checks, the stages' costs and the compute nodes; the graph's transfers, edges and
  // successors (lower.cpp).
  void compute_part();
  void checks_and_costs();
  void compute_nodes_and_offload();
  ExecGraph compute_graph();

  std::int64_t tensor_parallel() const { return layout_.tp; }
  std::int64_t context_parallel() const { return layout_.cp; }
  std::int64_t gradient_ranks() const { return sharding_.gradient_ranks; }
  bool fsdp() const { return sharding_.fsdp; }
  std::int64_t shard_ranks() const { return sharding_.shard_ranks; }
  std::int64_t expert_ranks() const { return sharding_.expert_ranks; }
  std::int64_t expert_shard_ranks() const { return sharding_.expert_shard_ranks; }

  void require_gpus() const;
  std::int64_t reduction_steps() const;
  void require_size() const;
  void costs();

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

  struct OpEffect {
    cost::PassCost cost;  // its passes' costs summed, before overheads
    double alloc_bytes = 0.0;
    double free_bytes = 0.0;
  };
  OpEffect op_effect(const Op& op) const;
  double op_seconds(const cost::PassCost& c) const;
  void compute_nodes();
  std::int32_t add_transfer(TransferKind kind, int stage, std::int32_t from, std::int32_t to,
                            double bytes);
  std::int32_t add_transfer(TransferKind kind, int stage, std::int32_t device, double bytes,
                            std::initializer_list<std::int32_t> links, double latency);
  std::int32_t add_port_transfer(TransferKind kind, int stage, std::int32_t device, double bytes,
                                 bool nic, double latency);
  std::int32_t close_transfer(TransferKind kind, int stage, std::int32_t from, std::int32_t to,
                              double bytes, double latency);

  void edge(std::int32_t from, std::int32_t to) {
    edges_.emplace_back(from, to);
    ++g_.preds[static_cast<std::size_t>(to)];
  }

  // `to` is released `delay` seconds after `from` starts.
  void start_edge(std::int32_t from, std::int32_t to, double delay) {
    start_edges_.push_back({from, to, delay});
    ++g_.preds[static_cast<std::size_t>(to)];
  }

  template <class Edge, class Target>
  static void compress(std::size_t nodes, const std::vector<Edge>& edges, Target target,
                       std::vector<std::int64_t>& begin, std::vector<std::int32_t>& out);
  void build_successors();

  // The runtimes' orders (lower_orders.cpp): Megatron-LM's steps and its combined 1F1B, the
  // pipeline transfers between stages (activations, gradients) and when each runtime sends them,
  // PyTorch's list of actions.
  bool combines_steps() const;
  void combine_1f1b(std::int32_t d);
  void depend(std::int32_t consumer, const Pass& pass, std::int32_t producer, TransferKind kind,
              double bytes);
  void megatron_steps();
  std::vector<std::int64_t> steady_pairs(std::int32_t d) const;
  std::int32_t step_end(std::int32_t op) const;
  std::int64_t leading_receive(std::int32_t producer, std::int32_t from, std::int32_t to) const;
  void pipeline_transfers();
  void pytorch_order();
  // Activation offload (lower_offload.cpp).
  std::int32_t runner(std::int32_t op) const;
  void offload_plan();
  void offload_transfers();
  void layer_offload();
  // A copy of offload inside a pass, issued or waited for once its op's pass `pass` (0 or 1: an
  // op may run two) has computed at_s seconds.
  struct CopyStep {
    double at_s = 0.0;
    StepKind kind = StepKind::Issue;
    std::int32_t transfer = -1;
    std::uint8_t pass = 0;
  };
  void splice_copies(std::vector<std::vector<CopyStep>>& at_op);
  double transfer_bytes(std::int32_t transfer) const;
  bool eager(std::int32_t transfer) const;

  // What the next action on a rank's stream for one peer waits for: the last action that held
  // the stream and, after a receive whose message was sent eagerly, that transfer too.
  struct PairStream {
    std::int32_t last = -1, eager_receive = -1;
  };

  void post(std::int32_t device, const CommAction& c, std::int32_t last_compute,
            std::unordered_map<std::int32_t, PairStream>& on_pair);

  // The iteration's collectives (lower_iteration.cpp): the gradient reductions between a stage's
  // replicas, over the data-parallel ranks (and, with FSDP, the last reduce-scatter and HSDP's
  // all-reduce), the tied embedding's all-reduce; the rule's rings from one device's side; the end
  // of the iteration (synchronisation, optimizer step, the distributed optimizer's all-gather).
  void collectives();
  void ring(TransferKind kind, int stage, const std::vector<std::int32_t>& members, double bytes,
            std::vector<std::int32_t>& ready);
  Group group(std::int32_t device, CollectiveGroup kind) const;
  Collective nccl_collective(CollectiveKind kind, const Group& g, double bytes) const;

  // A device's side of ring `c` by the rule (the same on every device): its one flow — over its
  // switch ports while the group fits in its node, over its NIC (shared with its node's members
  // of the group) when it spans nodes; add_port_transfer routes it.
  struct Side {
    CollectiveFlow flow;
    bool nic = false;  ///< over the device's NIC, else its switch ports
  };
  Side side(const Collective& c) const;
  cost::Flow ring_flow(const Collective& c) const;
  std::int32_t ring_side(TransferKind kind, int stage, std::int32_t device, const Collective& c,
                         std::int64_t steps, std::int32_t after);
  std::int32_t collective_side(TransferKind kind, int stage, std::int32_t device,
                               const Collective& c, std::int32_t after);
  void data_parallel(int stage, std::int32_t device, double bytes, std::int32_t& done,
                     bool overlap_allowed, const Group& g);
  std::int32_t hsdp_all_reduce(int stage, std::int32_t device, std::int32_t after);
  void embedding_all_reduce();
  void end_of_iteration();

  // FSDP per unit and per block (lower_fsdp.cpp): a unit's bytes and copies, each op's roles, the
  // gathers and reduce-scatters around the ops, and an op's program when it runs block by block.

  // FSDP (reference modern-runs.md §C.1). Pipelined, a unit is a whole stage (torchtitan's
  // pipelined FSDP); without pipelining (one device in the table) a unit is one transformer
  // block, and the stage's op runs all of them.
  bool pipelined() const { return t_.devices > 1; }
  double units(const StageWork& w) const {
    return pipelined() ? 1.0 : std::max<double>(1.0, static_cast<double>(w.layers));
  }
  double gather_bytes(const StageWork& w) const;
  double gathered_bytes_per_param() const;
  double copy_out_seconds(const StageWork& w) const;
  double copy_in_seconds(const StageWork& w) const;
  double expert_share(const StageWork& w) const;
  double expert_gather_bytes(const StageWork& w) const;
  std::int32_t expert_collective(TransferKind kind, int stage, std::int32_t device, double bytes,
                                 std::int32_t after);
  double scatter_bytes(const StageWork& w) const;
  double expert_scatter_bytes(const StageWork& w) const;
  std::int32_t fsdp_reduce_scatter(int stage, std::int32_t device, std::int32_t after);

  // What FSDP does around each op (reference modern-runs.md §C.1): kGathers, it gathers its
  // unit first — before the stage's first forward and, resharding after forward, before every
  // forward and backward; kScatters, it reduce-scatters the gradients after it — after every
  // backward with per-microbatch gradient sync, else after the stage's last. kKeepsFirst: run
  // block by block right after the stage's forward, its first block is still gathered —
  // torchtitan does not reshard the last block after forward (parallelize_llama.py @9dec370:
  // reshard_after_forward only for blocks before the last, reference §A.3) — so only its other
  // blocks are gathered. A pipelined device whose communication order has UNSHARD actions
  // gathers where they say instead (fsdp_unshard_roles).
  static constexpr std::uint8_t kGathers = 1, kScatters = 2, kKeepsFirst = 4;
  void fsdp_roles();
  bool fsdp_unshard_roles(std::int32_t device);
  void fsdp_gathers();
  void issue_after_start(std::int32_t n, std::int32_t t);
  std::int32_t block_program_id(const Pass& a, std::uint8_t roles);
  void lengthen(std::size_t n, double seconds);

  // The exchanges inside ops (lower_exchanges.cpp): each op's program of compute and exchanges
  // (the experts' all-to-alls, the context-parallel exchanges, FSDP's per-block collectives), built
  // once per distinct one, and their steps and inner transfers in the graph.
  using Piece = detail::Piece;
  using Program = detail::OpProgram;

  // `pair`: how a forward and a backward overlap (none: run one after the other).
  std::int32_t program_id(const Pass& a, const Pass* b,
                          std::optional<detail::PairOrder> pair = std::nullopt);
  void set_program(std::size_t n, std::int32_t id);
  // FSDP without pipelining runs each op block by block (fsdp_program) when it gathers or
  // reduce-scatters: not in plan's compute part, which has no collectives.
  bool by_blocks(std::size_t n) const {
    return fsdp() && !pipelined() && !compute_only_ && fsdp_roles_[n] != 0 &&
           units(work(t_.ops[n].first())) > 1.0;
  }
  void plan_exchanges(std::size_t n);
  const Program* program_of(std::size_t n) const;
  // No inner transfers: the compute part (plan's first bound) or lowering for bounds only.
  bool folded() const { return compute_only_ || !options_.inner_transfers; }
  // The share of their rate a paired program's DeepEP all-to-alls move at (an overhead: 1
  // without them).
  double overlapped_deepep() const {
    return overheads_ ? network_.system().device.overlapped_deepep_efficiency : 1.0;
  }
  // One pass's waits with every exchange alone on its links, once per stage and pass kind (here:
  // called once per op of the compute part).
  double single_waits(const Pass& pass) {
    constexpr std::size_t kKinds = 5;
    if (single_waits_.empty()) single_waits_.assign(cost_.size() * kKinds, -1.0);
    auto& w = single_waits_[index(pass) * kKinds + static_cast<std::size_t>(pass.kind)];
    if (w < 0.0) w = detail::pass_waits(cost_[index(pass)], pass.kind, network_.system());
    return w;
  }
  void lower_programs();
  static TransferKind transfer_kind(cost::ExchangeKind kind);
  int stage_of(std::int64_t node) const;

  // The state the jobs share: the inputs, the graph being built and what each job keeps.
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
  // Per step of g_.steps: which of its op's passes a Compute step computes (0 or 1).
  std::vector<std::uint8_t> step_pass_;
  bool compute_only_ = false;    // lower_compute: no transfers
  OffloadPlan plan_;             // activation offload (empty: none)
  bool layer_programs_ = false;  // some stage's layers run exchanges inside their passes (costs)
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
  // Megatron, interleaved: per table op, its number among its device's ops of its kind (F or
  // B); per device and kind, those ops in order (leading_receive).
  std::vector<std::int32_t> nth_of_kind_;
  std::vector<std::array<std::vector<std::int32_t>, 2>> of_kind_;
  // FSDP: per device, its last reduce-scatter step so far (one stream); per stage, the last
  // reduce-scatter of per-microbatch gradient sync.
  std::vector<std::int32_t> last_scatter_, scattered_;
  std::vector<std::uint8_t> fsdp_roles_;  // per table op: kGathers | kScatters
  // Per table op that gathers as an UNSHARD says: the op whose start issues the gather (the one
  // before the UNSHARD; -1: the device's first, free at once); -2 elsewhere (the op before it).
  std::vector<std::int64_t> gather_issued_by_;
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

}  // namespace pipetab::detail
