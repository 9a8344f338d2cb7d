// The workload on a machine (docs/design.md §5 `cost/`): operator → time (a roofline with the
// GEMM efficiency of cost/gemm.hpp, memory-bound operators at the achieved HBM bandwidth, a
// launch overhead per kernel), tensor-parallel collectives on the intra-node links, and the
// per-stage times of the forward, input-gradient and weight-gradient passes that the
// simulation's ops take. Computed once per stage, never per op of a table.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

#include "pipetab/model/operators.hpp"
#include "pipetab/model/workload.hpp"
#include "pipetab/parallel/collective.hpp"
#include "pipetab/system/system.hpp"

namespace pipetab::cost {

/// How the simulation takes the costs (which tensor-parallel collectives overlap a GEMM is the
/// job's: Job::tp_overlap).
struct CostOptions {
  /// The experts' all-to-alls and the context-parallel exchanges left to the simulation, as
  /// flows over the links (lower() sets it): the passes' times leave them out, and
  /// StageCost::layers says where in each pass they run. Off (the `cost` command): each is
  /// priced alone on its links, inside its pass.
  bool exchanges_as_flows = false;
};

/// Whether the simulation runs `op` as flows where CostOptions::exchanges_as_flows is set: an
/// expert all-to-all or a context-parallel exchange.
bool runs_as_flow(const Operator& op);

struct PassCost {
  double seconds = 0.0;  ///< the pass: compute, memory traffic, launches, exposed TP communication
  /// of which exposed communication inside the stage: tensor-parallel collectives, context-
  /// parallel exchanges and the experts' all-to-alls
  double tp_comm_s = 0.0;
  double expert_comm_s = 0.0;  ///< of tp_comm_s, the experts' all-to-alls and ETP collectives
  /// Kernel launches the host issues as framework calls.
  double kernels = 0.0;
  /// Kernels launched from inside those calls (Operator::inner_launches).
  double launches = 0.0;
  /// The layers whose passes synchronise the host with the device (Operator::host_sync): what
  /// their passes take beyond their device time, each stretch between two synchronisations as
  /// long as the longer of the device's time and the host's to issue it (sync_seconds).
  double sync_s = 0.0;
  /// Of `seconds` and of the host's time to issue the pass, those layers' shares: the rest of
  /// the pass can hide neither its device time nor its host time under theirs.
  double synced_device_s = 0.0;
  double synced_host_s = 0.0;
  /// The passes of one op (a forward and a backward merged into one step): each field summed.
  PassCost& operator+=(const PassCost& other);
  friend bool operator==(const PassCost&, const PassCost&) = default;
};

/// The host's cost of one kernel launched from inside a framework call, in C++: 2.6 µs, the
/// launch per GPU fitted on nccl-tests' single-process sweeps (kNcclTestsLaunchPerGpuS), where
/// one thread launches each GPU's kernel in turn.
inline constexpr double kInnerLaunchS = kNcclTestsLaunchPerGpuS;

/// What the host issues for operator `k` of a pass's `list`: its framework calls and the
/// launches inside them, or, where per-layer CUDA graphs capture it (Operator::graph_module),
/// one call (the graph's replay) at the start of each captured stretch of a module and nothing
/// after it.
struct HostIssue {
  double calls = 0.0;
  double launches = 0.0;
};
HostIssue host_issue(std::span<const Operator> list, std::size_t k);

/// The host's seconds to make `calls` framework calls and `launches` launches inside them.
inline double host_issue_seconds(double calls, double launches, const DeviceSpec& device) {
  return calls * device.host_launch_s + launches * kInnerLaunchS;
}

/// One flow of an exchange: `bytes` after `latency_s`, over the rank's switch ports (inside its
/// node) or its NIC; `capped`: at most at that link's collective bandwidth (the all-to-all and CP
/// kernels' measured rate), else at the link's own as the simulation's ring collectives run.
struct Flow {
  double bytes = 0.0, latency_s = 0.0;
  bool nic = false;
  bool capped = true;
};

/// What an exchange serves.
enum class ExchangeKind : std::uint8_t {
  Context,      ///< a context-parallel KV exchange
  Expert,       ///< an expert all-to-all
  ParamGather,  ///< FSDP's all-gather of a block's parameters
  GradScatter,  ///< FSDP's reduce-scatter of a block's gradients
};

/// An exchange inside a pass as the simulation runs it (CostOptions::exchanges_as_flows): an
/// expert all-to-all (a flow over NVLink and one over the NIC, at once), a context-parallel
/// exchange (one flow on the CP group's link class), or (built by the simulation) one of FSDP's
/// per-block collectives (a flow on the shard group's links, one on the experts' at once).
struct Exchange {
  double before_s = 0.0;  ///< the pass's compute since the previous exchange or the layer's start
  /// compute that runs while it moves: the shared expert under an all-to-all, the blocks of
  /// attention the ring's steps hide under
  double beside_s = 0.0;
  std::array<Flow, 2> flows;  ///< bytes 0: no flow
  ExchangeKind kind = ExchangeKind::Context;
  /// DeepEP's or HybridEP's kernels (Megatron-Core's flex dispatcher), not NCCL's all-to-all.
  bool deepep = false;
};

/// One layer's pass as the simulation runs it: compute and exchanges in turn, then `after_s` of
/// compute. Its compute is the layer's share of the PassCost; its exchanges are not in it.
struct LayerProgram {
  std::vector<Exchange> exchanges;
  double after_s = 0.0;
  double compute_s() const;  ///< Σ before + beside, and after
};

/// One kind of layer (dense or MoE) as the simulation runs it: each pass's program (weight_grad
/// has no exchange).
struct LayerPasses {
  LayerProgram forward, input_grad, backward;
};

/// `layers` layers of one kind of a stage, sharing their programs with every stage.
struct LayerPrograms {
  double layers = 0.0;
  std::shared_ptr<const LayerPasses> passes;
};

/// One microbatch on one stage. `backward` is B, the input and weight gradients in one op: a
/// backward collective may hide behind a weight-gradient GEMM there, so it can be shorter than
/// input_grad + weight_grad.
struct StageCost {
  PassCost forward, input_grad, weight_grad, backward;
  /// With exchanges_as_flows: the stage's layers with exchanges, dense then MoE (model order);
  /// `passes` null where that kind has none.
  std::array<LayerPrograms, 2> layers;
};

/// What one operator costs alone.
struct OperatorCost {
  double seconds = 0.0;
  double efficiency = 0.0;  ///< GEMMs and fused attention: achieved / peak FLOP/s
  bool memory_bound = false;
};

/// The collective `op` (OperatorKind::Collective) of `run` on `system` as the one rule takes it
/// (parallel/collective.hpp): its kind, its group as pipeline device 0's first rank sees it
/// (placement.hpp), its bytes and its algorithm.
Collective collective_of(const Operator& op, const Workload& run, const SystemConfig& system);

/// Throws ParamError when `system` cannot run `model`: no peak for its precision, or a roofline
/// device without a memory bandwidth.
void require_costable(const ModelConfig& model, const Job& job, const SystemConfig& system);

/// The cost of `op` alone on `system` for `run`.
OperatorCost operator_cost(const Operator& op, const Workload& run, const SystemConfig& system);

/// The pass costs of every stage in `work` (one pipeline's stages of `model` run by `job` under
/// `layout`).
std::vector<StageCost> stage_costs(const ModelConfig& model, const Job& job, const Layout& layout,
                                   std::span<const StageWork> work, const SystemConfig& system,
                                   const CostOptions& options = {});

/// A pass as long as its synchronising layers' stretches (their kernels' time and
/// PassCost::sync_s), and for the rest as long as its kernels take or the host takes to issue
/// them when that is longer
/// (DeviceSpec::host_launch_s a call, kInnerLaunchS a launch inside one; docs/simulation.md,
/// "Overheads"); a stack replaying CUDA graphs issues a graph, not its kernels, so its host never
/// holds the GPU back (nor synchronises: the MoE layer's graphs need its sync-free path).
double host_bound_seconds(const PassCost& pass, const DeviceSpec& device, const Stack& stack);

/// An operator as the host and the device see it: its device seconds (priced alone, exchanges
/// included), the host's seconds to issue it and to issue its first kernel, and whether the host
/// waits for the device first.
struct IssuedOp {
  double device_s = 0.0, host_s = 0.0, first_s = 0.0;
  bool sync = false;
};

/// What one layer's pass (its operators in order) takes beyond its device time where its host
/// synchronises with the device (Operator::host_sync), nothing being issued ahead across a
/// synchronisation: the pass runs from one synchronisation to the next (the stretch after the
/// last joins the one before the first: the next layer's head) on one stream in issue order:
/// each operator starts once the device is free and the host has issued its first kernel, and
/// ends no sooner than the host has issued its last. 0 without a synchronisation.
double sync_seconds(std::span<const IssuedOp> ops);

/// Seconds of the optimizer step moving `bytes` (StageWork::optimizer_step_bytes): a few
/// multi-tensor kernels streaming through memory. 0 when the device gives no memory bandwidth.
double optimizer_step_seconds(double bytes, const DeviceSpec& device);

/// Seconds of one copy kernel streaming `bytes` (read and written) through memory, as FSDP2's
/// copies into and out of its collectives' flat buffers run. 0 without a memory bandwidth.
double copy_seconds(double bytes, const DeviceSpec& device);

}  // namespace pipetab::cost
