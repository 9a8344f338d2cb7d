#include "pipetab/cost/stage_cost.hpp"

#include <algorithm>
#include <array>
#include <cctype>
#include <cmath>
#include <string>

#include <fmt/format.h>

#include "pipetab/cost/attention.hpp"
#include "pipetab/cost/gemm.hpp"
#include "pipetab/error.hpp"

namespace pipetab::cost {

bool runs_as_flow(const Operator& op) {
  return op.kind == OperatorKind::Collective &&
         (op.group == CollectiveGroup::Expert || op.group == CollectiveGroup::Context);
}

Collective collective_of(const Operator& op, const Workload& run, const SystemConfig& system) {
  Collective c;
  c.kind = op.collective;
  // The group as pipeline device 0's first rank sees it: a stage is costed once for all its
  // devices.
  c.group = group_of(run.layout, op.group, 0, node_size(system, run.layout));
  c.bytes = op.collective_bytes;
  c.algorithm = op.algorithm;
  c.nvls = run.job.stack.nccl_nvls;
  if (run.model.moe) {
    c.top_k = static_cast<double>(run.model.moe->top_k);
    c.node_limit = static_cast<double>(run.model.moe->node_limit);
  }
  return nccl_algorithm(c, system.intra, system.inter);
}

void require_costable(const ModelConfig& model, const Job& job, const SystemConfig& system) {
  if (model.transformer() == nullptr) return;
  const auto& device = system.device;
  // FP8 training runs its layer linears in FP8 and the rest in BF16: both peaks are needed.
  if (job.precision == Precision::FP8 && !(device.peak(Precision::BF16) > 0.0)) {
    throw ParamError(fmt::format(
        "system '{}' gives no bf16 peak (device.peak_flops.bf16) for model '{}': FP8 training "
        "keeps attention, the output layer and the rest in BF16",
        system.name, model.name));
  }
  // MXFP8's and NVFP4's block-scaled GEMMs run only on tensor cores that scale blocks in
  // hardware, each on its own model; NVFP4's at the FP4 peak.
  const bool mxfp8 = job.fp8_recipe == Fp8Recipe::Mxfp8, nvfp4 = job.fp8_recipe == Fp8Recipe::Nvfp4;
  if (job.precision == Precision::FP8 && (mxfp8 || nvfp4)) {
    const std::string_view recipe = to_string(job.fp8_recipe);
    const char* needs =
        "GEMMs need Blackwell's tensor cores (compute capability 10.0 or above, e.g. dgx-b200, "
        "gb200-nvl72); on Hopper use tensorwise, delayed or blockwise";
    if (nvfp4 && !(device.peak(Precision::FP4) > 0.0)) {
      throw ParamError(fmt::format(
          "fp8_recipe nvfp4: system '{}' ({}) gives no fp4 peak (device.peak_flops.fp4): NVFP4 {}",
          system.name, device.name, needs));
    }
    if (!device.flat_efficiency && !(nvfp4 ? device.gemm_nvfp4 : device.gemm_mxfp8)) {
      std::string upper(recipe);
      std::transform(upper.begin(), upper.end(), upper.begin(),
                     [](unsigned char ch) { return static_cast<char>(std::toupper(ch)); });
      throw ParamError(
          fmt::format("fp8_recipe {}: system '{}' ({}) gives no {} GEMM model ([device.gemm_{}]): "
                      "block-scaled {} {}",
                      recipe, system.name, device.name, upper, recipe, upper, needs));
    }
  }
  if (!(device.peak(job.precision) > 0.0)) {
    throw ParamError(fmt::format(
        "system '{}' gives no {} peak (device.peak_flops.{}) for model '{}', which trains in {}",
        system.name, to_string(job.precision), to_string(job.precision), model.name,
        to_string(job.precision)));
  }
  if (!device.flat_efficiency && !(device.memory_bandwidth > 0.0)) {
    throw ParamError(fmt::format(
        "system '{}' gives no device.memory_bandwidth: the operator-level model needs it (or "
        "device.efficiency for the FLOP-proportional one)",
        system.name));
  }
  // FP8 attention runs cuDNN's kernel (Transformer Engine's FusedAttention FP8 backend), priced
  // as the device's BF16 cuDNN kernel times its FP8 speed-up.
  if (job.fp8_attention && !device.flat_efficiency) {
    const AttentionKernel kernel = resolve_attention_kernel(job.stack, device, system.name);
    if (kernel != AttentionKernel::Cudnn) {
      throw ParamError(fmt::format(
          "fp8_attention: Transformer Engine runs FP8 attention in cuDNN's fused kernel, and "
          "this job runs {} on system '{}' (--attention-kernel cudnn)",
          to_string(kernel), system.name));
    }
    if (!device.cudnn_fp8_speedup.given()) {
      throw ParamError(
          fmt::format("fp8_attention: system '{}' ({}) gives no FP8 attention figures "
                      "([device.attention.cudnn_fp8] forward_speedup and backward_speedup)",
                      system.name, device.name));
    }
  }
}

namespace {

// The GEMM model an operator runs on: BF16's, FP8's, or MXFP8's block-scaled one.
const GemmModel& gemm_model(const DeviceSpec& device, const Job& job, bool fp8) {
  if (!fp8) return device.gemm;
  if (job.fp8_recipe == Fp8Recipe::Mxfp8 && device.gemm_mxfp8) return *device.gemm_mxfp8;
  if (job.fp8_recipe == Fp8Recipe::Nvfp4 && device.gemm_nvfp4) return *device.gemm_nvfp4;
  return device.gemm_fp8;
}

double memory_seconds(double bytes, const DeviceSpec& device, bool gemm = false) {
  if (!(device.memory_bandwidth > 0.0)) return 0.0;
  return bytes /
         (device.memory_bandwidth * (gemm ? device.gemm_streaming() : device.memory_efficiency));
}

}  // namespace

OperatorCost operator_cost(const Operator& op, const Workload& run, const SystemConfig& system) {
  const DeviceSpec& device = system.device;
  const double peak = device.peak(op.fp8 ? low_precision(run.job) : compute_precision(run.job)) *
                      device.clock_scale;
  // A memory-bound call's inner launches are kernels the device runs one after another (TE's
  // per-expert quantisation); a grouped GEMM's are its per-expert GEMMs, whose gaps its measured
  // efficiency holds, and stream events.
  const double kernels = op.kernels + (op.kind == OperatorKind::Memory ? op.inner_launches : 0);
  const double launches = kernels * device.kernel_overhead_s;
  OperatorCost c;
  switch (op.kind) {
    case OperatorKind::Gemm:
    case OperatorKind::FusedAttention:
    case OperatorKind::FusedAttentionBackward: {
      if (device.flat_efficiency) {
        c.efficiency = *device.flat_efficiency;
        c.seconds = op.flops / (peak * c.efficiency);
        return c;
      }
      const double flops = executed_flops(op);
      if (op.kind == OperatorKind::Gemm) {
        c.efficiency = gemm_efficiency(gemm_model(device, run.job, op.fp8), op.gemm);
      } else {
        // The stack's kernel, at the sequence each rank's calls see (its tokens: seq / CP).
        const AttentionKernel kernel = resolve_attention_kernel(run.job.stack, device, system.name);
        const double seq =
            static_cast<double>(run.job.seq_len) / static_cast<double>(run.layout.cp);
        const bool backward = op.kind == OperatorKind::FusedAttentionBackward;
        c.efficiency = device.attention_of(kernel).at(seq, backward) *
                       attention_head_dim_scale(kernel, op.head_dim, seq);
        // In FP8: the BF16 kernel's throughput times its speed-up, against the FP8 peak.
        if (op.fp8) {
          c.efficiency *= device.cudnn_fp8_speedup.at(seq, backward) *
                          device.peak(compute_precision(run.job)) / device.peak(Precision::FP8);
        }
      }
      const double compute = flops / (peak * c.efficiency);
      // The experts' grouped GEMMs stream their operands at their own measured share; every
      // other GEMM at the element-wise kernels' (the dense GEMM model was fitted so:
      // experiments/gemm-calibration).
      const double memory =
          memory_seconds(op.bytes, device, op.kind == OperatorKind::Gemm && op.gemm.grouped);
      c.memory_bound = memory > compute;
      c.seconds = std::max(compute, memory) + launches;
      return c;
    }
    case OperatorKind::Memory:
      c.memory_bound = true;
      if (!device.flat_efficiency) c.seconds = memory_seconds(op.bytes, device) + launches;
      return c;
    case OperatorKind::Collective:
      c.seconds = collective_seconds(collective_of(op, run, system), system.intra, system.inter);
      return c;
  }
  return c;
}

namespace {

// Every operator's time, per pass, computed once; for a tensor-parallel collective that only
// --tp-overlap all hides, also the time of one of its partner GEMM's tp row chunks (0 otherwise).
struct Timed {
  std::array<std::vector<double>, 3> seconds;
  std::array<std::vector<double>, 3> chunk;
  double parts = 1.0;  ///< the tensor-parallel size: chunks of a decomposed collective matmul
};

// A collective matmul (an all-gather before a GEMM, a reduce-scatter after one) overlapped by
// decomposition: torchtitan's async TP (torch's micro-pipeline pass, fused_all_gather_matmul and
// fused_matmul_reduce_scatter over SymmetricMemory) and Transformer Engine's userbuffers split
// the GEMM into tp chunks of rows, one per rank's shard, each computed as its shard arrives (or
// reduced as it is produced). One chunk's GEMM: a tp-th of the rows, the weight read again.
Operator row_chunk(const Operator& gemm, double parts, const Workload& run) {
  Operator c = gemm;
  c.gemm.m = gemm.gemm.m / parts;
  c.flops = gemm.flops / parts;
  const double weight = gemm.gemm.k * gemm.gemm.n * gemm.gemm.batch *
                        (gemm.fp8 ? 1.0 : static_cast<double>(run.job.element_bytes()));
  c.bytes = gemm.bytes / parts + weight * (1.0 - 1.0 / parts);
  return c;
}

bool decomposed(const Operator& op) {
  return op.kind == OperatorKind::Collective && op.group == CollectiveGroup::Tensor &&
         op.overlap == Overlap::All && op.hidden_index >= 0;
}

Timed timed(const PassOperators& ops, const Workload& run, const SystemConfig& system) {
  Timed t;
  t.parts = static_cast<double>(run.layout.tp);
  for (const auto id : {PassId::Forward, PassId::InputGrad, PassId::WeightGrad}) {
    const auto i = static_cast<std::size_t>(id);
    for (const Operator& op : ops.pass(id)) {
      t.seconds[i].push_back(operator_cost(op, run, system).seconds);
      double chunk = 0.0;
      if (decomposed(op) && t.parts > 1.0) {
        const Operator& partner =
            ops.pass(op.hidden_pass)[static_cast<std::size_t>(op.hidden_index)];
        if (partner.kind == OperatorKind::Gemm)
          chunk = operator_cost(row_chunk(partner, t.parts, run), run, system).seconds;
      }
      t.chunk[i].push_back(chunk);
    }
  }
  return t;
}

bool is_flow(const Operator& op, bool flows) {
  return flows && runs_as_flow(op);
}

// The flows of such an exchange, as the cost model prices them alone (operator_cost): the rule's
// two flows of the rank's side, at the collective bandwidth the links reach.
Exchange exchange(const Operator& op, const Workload& run, const SystemConfig& system) {
  Exchange x;
  x.kind = op.group == CollectiveGroup::Expert ? ExchangeKind::Expert : ExchangeKind::Context;
  x.deepep = op.algorithm == CollectiveAlgorithm::NodeDedup;
  const CollectiveFlows f =
      collective_flows(collective_of(op, run, system), system.intra, system.inter);
  x.flows = {Flow{f.local.bytes, f.local.latency_s, false},
             Flow{f.remote.bytes, f.remote.latency_s, true}};
  return x;
}

// An operator's time in a pass run as one op: a collective less the time of its partner GEMM
// when that runs in the same op and the overlap is on.
double op_seconds(const PassOperators& ops, const Timed& t, PassId id, std::size_t k,
                  std::initializer_list<PassId> set, Overlap overlap) {
  const Operator& op = ops.pass(id)[k];
  double s = t.seconds[static_cast<std::size_t>(id)][k];
  if (op.kind != OperatorKind::Collective) return s;
  // Context and expert exchanges run beside their partner whenever the model gives them one
  // (the ring's design; the shared-expert overlap); tensor-parallel ones as --tp-overlap allows.
  const bool may_overlap = op.group != CollectiveGroup::Tensor
                               ? true
                               : op.overlap != Overlap::Never && overlap >= op.overlap;
  const bool in_set = std::find(set.begin(), set.end(), op.hidden_pass) != set.end();
  if (may_overlap && op.hidden_index >= 0 && in_set) {
    const double partner = t.seconds[static_cast<std::size_t>(op.hidden_pass)]
                                    [static_cast<std::size_t>(op.hidden_index)];
    const double chunk = t.chunk[static_cast<std::size_t>(id)][k];
    if (chunk > 0.0) {
      // Decomposed into tp chunks (row_chunk): the first chunk's GEMM runs on the local shard
      // (all-gather) or the last chunk's reduction after every GEMM (reduce-scatter), so the pair
      // takes max(tp·g, g + C) for a chunk's GEMM g and the collective C. The GEMM's own op
      // counts P; the rest is the collective's.
      return std::max(0.0, s - (t.parts - 1.0) * chunk) + t.parts * chunk - partner;
    }
    s = std::max(0.0, s - op.hidden_fraction * partner);
  }
  return s;
}

// The cost of running the passes in `set` as one op: every operator once (the all-to-alls left
// to the simulation as flows left out).
PassCost pass_cost(const PassOperators& ops, const Timed& t, std::initializer_list<PassId> set,
                   Overlap overlap, bool flows) {
  PassCost c;
  for (const auto id : set) {
    const auto& list = ops.pass(id);
    for (std::size_t k = 0; k < list.size(); ++k) {
      const Operator& op = list[k];
      const HostIssue host = host_issue(list, k);
      c.kernels += host.calls;
      c.launches += host.launches;
      if (is_flow(op, flows)) continue;
      const double s = op_seconds(ops, t, id, k, set, overlap);
      if (op.kind == OperatorKind::Collective) {
        c.tp_comm_s += s;
        if (op.group == CollectiveGroup::Expert || op.group == CollectiveGroup::ExpertTensor)
          c.expert_comm_s += s;
      }
      c.seconds += s;
    }
  }
  return c;
}

// The passes in `set` of one layer with its all-to-alls and context-parallel exchanges as
// exchanges, in operator order; an exchange's partner (the shared expert's GEMM, the attention it
// hides under) runs beside it for its fraction.
LayerProgram layer_program(const PassOperators& ops, const Timed& t,
                           std::initializer_list<PassId> set, Overlap overlap, const Workload& run,
                           const SystemConfig& system) {
  LayerProgram p;
  // Partners of the exchanges, by (pass, index): their time goes to their exchange.
  struct Partner {
    PassId pass;
    std::int32_t index;
    std::size_t exchange;
    double fraction;
  };
  std::vector<Partner> partners;
  std::vector<bool> opens_next;  // per exchange: it runs inside the next one's call
  for (const auto id : set) {
    const auto& list = ops.pass(id);
    for (const Operator& op : list) {
      if (!is_flow(op, true)) continue;
      if (op.hidden_index >= 0 && op.hidden_pass == id)
        partners.push_back({id, op.hidden_index, p.exchanges.size(), op.hidden_fraction});
      p.exchanges.push_back(exchange(op, run, system));
      opens_next.push_back(op.opens_next_exchange);
    }
  }
  // A full backward (input and weight gradients in one pass) computes the routed experts' weight
  // gradients right after their input gradients, before the dispatch's backward all-to-all:
  // autograd runs each grouped linear's wgrad in its own backward, and Megatron-Core's combined
  // 1F1B calls the experts' delayed wgrad (`mlp.backward_dw`) before it issues that all-to-all
  // (TransformerLayerSchedulePlan.run, models/common/model_chunk_schedule_plan.py @d98e8a6). The
  // other weight gradients (attention's, the router's, the shared experts') end the layer, as
  // `pre_dispatch_computation.backward_dw` does there.
  const bool full_backward = std::find(set.begin(), set.end(), PassId::InputGrad) != set.end() &&
                             std::find(set.begin(), set.end(), PassId::WeightGrad) != set.end();
  double experts_wgrad = 0.0;
  std::size_t last_experts_dgrad = ops.pass(PassId::InputGrad).size();
  if (full_backward) {
    const auto& w = ops.pass(PassId::WeightGrad);
    for (std::size_t k = 0; k < w.size(); ++k)
      if (is_routed_expert(w[k]))
        experts_wgrad += op_seconds(ops, t, PassId::WeightGrad, k, set, overlap);
    const auto& in = ops.pass(PassId::InputGrad);
    for (std::size_t k = 0; k < in.size(); ++k)
      if (is_routed_expert(in[k])) last_experts_dgrad = k;
  }
  double since = 0.0;
  std::size_t next = 0;
  for (const auto id : set) {
    const auto& list = ops.pass(id);
    for (std::size_t k = 0; k < list.size(); ++k) {
      if (full_backward && id == PassId::WeightGrad && is_routed_expert(list[k])) continue;
      if (full_backward && id == PassId::InputGrad && k == last_experts_dgrad + 1) {
        since += experts_wgrad;
        experts_wgrad = 0.0;
      }
      if (is_flow(list[k], true)) {
        p.exchanges[next++].before_s = since;
        since = 0.0;
        continue;
      }
      double s = op_seconds(ops, t, id, k, set, overlap);
      const auto partner = std::find_if(partners.begin(), partners.end(), [&](const Partner& x) {
        return x.pass == id && x.index == static_cast<std::int32_t>(k);
      });
      if (partner != partners.end()) {
        // Its fraction beside the exchange; the rest after it (the ring's last block).
        p.exchanges[partner->exchange].beside_s += partner->fraction * s;
        s *= 1.0 - partner->fraction;
      }
      since += s;
    }
  }
  p.after_s = since + experts_wgrad;  // the experts' last input gradient ended the pass
  // An exchange issued inside the next one's call is that exchange's first part: its flows
  // join the next's (the same links, back to back on one stream), the compute before either
  // runs before both. Exchanges no rank sends anything in are no exchanges: their compute joins
  // the next.
  std::vector<Exchange> kept;
  double carry = 0.0;
  for (std::size_t i = 0; i < p.exchanges.size(); ++i) {
    const Exchange& x = p.exchanges[i];
    if (opens_next[i] && i + 1 < p.exchanges.size()) {
      Exchange& opened = p.exchanges[i + 1];
      opened.before_s += x.before_s;
      opened.beside_s += x.beside_s;
      for (std::size_t f = 0; f < x.flows.size(); ++f) {
        opened.flows[f].bytes += x.flows[f].bytes;
        opened.flows[f].latency_s += x.flows[f].latency_s;
      }
      continue;
    }
    if (x.flows[0].bytes <= 0.0 && x.flows[1].bytes <= 0.0) {
      carry += x.before_s + x.beside_s;
      continue;
    }
    kept.push_back(x);
    kept.back().before_s += carry;
    carry = 0.0;
  }
  p.after_s += carry;
  p.exchanges = std::move(kept);
  return p;
}

StageCost stage_cost_of(const PassOperators& ops, const Timed& t, Overlap overlap, bool flows) {
  return {pass_cost(ops, t, {PassId::Forward}, overlap, flows),
          pass_cost(ops, t, {PassId::InputGrad}, overlap, flows),
          pass_cost(ops, t, {PassId::WeightGrad}, overlap, flows),
          pass_cost(ops, t, {PassId::InputGrad, PassId::WeightGrad}, overlap, flows),
          {}};
}

void add(PassCost& into, const PassCost& part, double times) {
  into.seconds += times * part.seconds;
  into.tp_comm_s += times * part.tp_comm_s;
  into.expert_comm_s += times * part.expert_comm_s;
  into.kernels += times * part.kernels;
  into.launches += times * part.launches;
  into.sync_s += times * part.sync_s;
  into.synced_device_s += times * part.synced_device_s;
  into.synced_host_s += times * part.synced_host_s;
}

// A layer's pass whose host synchronises: its stretches between synchronisations priced by
// sync_seconds, which weigh the host's time to issue them against the device's with the
// exchanges priced in; the pass-wide bound leaves that host time out (synced_host_s). A hybrid
// model's MoE block is its own stretch: the blocks between two of its dispatches are other
// kinds, whose host time stays in the pass-wide bound.
void synchronise(PassCost& pass, const PassOperators& ops, const Timed& t,
                 std::initializer_list<PassId> set, Overlap overlap, const DeviceSpec& device) {
  std::vector<IssuedOp> issued;
  bool any = false;
  for (const auto id : set) {
    const auto& list = ops.pass(id);
    for (std::size_t k = 0; k < list.size(); ++k) {
      const Operator& op = list[k];
      const HostIssue host = host_issue(list, k);
      issued.push_back({op_seconds(ops, t, id, k, set, overlap),
                        host_issue_seconds(host.calls, host.launches, device),
                        host.calls > 0         ? device.host_launch_s
                        : op.graph_module != 0 ? 0.0
                                               : kInnerLaunchS,
                        op.host_sync});
      any = any || op.host_sync;
    }
  }
  if (!any) return;
  pass.sync_s = sync_seconds(issued);
  pass.synced_device_s = pass.seconds;
  for (const IssuedOp& op : issued)
    pass.synced_host_s += op.host_s;
}

void add(StageCost& into, const StageCost& part, double times) {
  add(into.forward, part.forward, times);
  add(into.input_grad, part.input_grad, times);
  add(into.weight_grad, part.weight_grad, times);
  add(into.backward, part.backward, times);
}

}  // namespace

std::vector<StageCost> stage_costs(const ModelConfig& model, const Job& job, const Layout& layout,
                                   std::span<const StageWork> work, const SystemConfig& system,
                                   const CostOptions& options) {
  std::vector<StageCost> costs(work.size());
  const auto* m = model.transformer();
  if (m == nullptr) {
    for (std::size_t s = 0; s < work.size(); ++s) {
      const auto& w = work[s];
      costs[s] = {{w.forward_s, 0.0},
                  {w.input_grad_s, 0.0},
                  {w.weight_grad_s, 0.0},
                  {w.input_grad_s + w.weight_grad_s, 0.0},
                  {}};
    }
    return costs;
  }
  require_costable(model, job, system);
  const Workload run{*m, job, layout};
  const ModelOperators ops = model_operators(run);
  const Overlap overlap = job.tp_overlap;
  const bool flows = options.exchanges_as_flows;
  // A layer's passes, and with flows their programs (null without exchanges).
  const auto layer_kind = [&](const PassOperators& o, StageCost& cost,
                              std::shared_ptr<const LayerPasses>& programs) {
    const Timed t = timed(o, run, system);
    cost = stage_cost_of(o, t, overlap, flows);
    if (!job.stack.cuda_graphs) {
      synchronise(cost.forward, o, t, {PassId::Forward}, overlap, system.device);
      synchronise(cost.input_grad, o, t, {PassId::InputGrad}, overlap, system.device);
      synchronise(cost.backward, o, t, {PassId::InputGrad, PassId::WeightGrad}, overlap,
                  system.device);
    }
    if (!flows) return;
    LayerPasses p{
        layer_program(o, t, {PassId::Forward}, overlap, run, system),
        layer_program(o, t, {PassId::InputGrad}, overlap, run, system),
        layer_program(o, t, {PassId::InputGrad, PassId::WeightGrad}, overlap, run, system)};
    if (!p.forward.exchanges.empty() || !p.input_grad.exchanges.empty())
      programs = std::make_shared<const LayerPasses>(std::move(p));
  };
  StageCost layer, moe_layer;
  std::shared_ptr<const LayerPasses> dense_programs, moe_programs;
  if (!m->hybrid()) {
    layer_kind(ops.layer, layer, dense_programs);
    if (m->moe) layer_kind(ops.moe_layer, moe_layer, moe_programs);
  }
  const StageCost embedding =
      stage_cost_of(ops.embedding, timed(ops.embedding, run, system), overlap, flows);
  const StageCost output =
      stage_cost_of(ops.output, timed(ops.output, run, system), overlap, flows);
  const StageCost mtp = m->mtp_layers > 0
                            ? stage_cost_of(ops.mtp, timed(ops.mtp, run, system), overlap, flows)
                            : StageCost{};
  // A hybrid model's kinds of layer: the E layers' programs carry their all-to-alls; the others
  // have no exchange (hybrid models take no context parallelism).
  std::array<StageCost, kBlockKinds> blocks;
  std::shared_ptr<const LayerPasses> moe_block_programs;
  if (m->hybrid()) {
    for (std::size_t k = 0; k < kBlockKinds; ++k) {
      std::shared_ptr<const LayerPasses> programs;
      if (ops.blocks[k].forward.empty()) continue;
      layer_kind(ops.blocks[k], blocks[k], programs);
      if (k == index(BlockKind::Moe)) moe_block_programs = programs;
    }
  }
  for (std::size_t s = 0; s < work.size(); ++s) {
    if (m->hybrid()) {
      for (std::size_t k = 0; k < kBlockKinds; ++k)
        add(costs[s], blocks[k], static_cast<double>(work[s].blocks[k]));
      const auto experts = static_cast<double>(work[s].blocks[index(BlockKind::Moe)]);
      if (experts > 0.0 && moe_block_programs) costs[s].layers[1] = {experts, moe_block_programs};
      if (work[s].embedding) add(costs[s], embedding, 1.0);
      if (work[s].output) add(costs[s], output, 1.0);
      continue;
    }
    const auto dense = static_cast<double>(work[s].layers - work[s].moe_layers);
    const auto experts = static_cast<double>(work[s].moe_layers);
    add(costs[s], layer, dense);
    add(costs[s], moe_layer, experts);
    if (work[s].embedding) add(costs[s], embedding, 1.0);
    // The loss stage runs the shared output layer and loss for the main model and each MTP
    // module; an MTP module's transformer layer is among the stage's layers.
    if (work[s].output) add(costs[s], output, static_cast<double>(1 + m->mtp_layers));
    if (work[s].mtp_layers > 0) add(costs[s], mtp, static_cast<double>(work[s].mtp_layers));
    // Dense layers first: the first `dense_layers` of the model are (DeepSeek-V3's three).
    if (dense > 0.0 && dense_programs) costs[s].layers[0] = {dense, dense_programs};
    if (experts > 0.0 && moe_programs) costs[s].layers[1] = {experts, moe_programs};
  }
  return costs;
}

double LayerProgram::compute_s() const {
  double total = after_s;
  for (const auto& x : exchanges)
    total += x.before_s + x.beside_s;
  return total;
}

PassCost& PassCost::operator+=(const PassCost& other) {
  add(*this, other, 1.0);
  return *this;
}

double host_bound_seconds(const PassCost& pass, const DeviceSpec& device, const Stack& stack) {
  if (stack.cuda_graphs) return pass.seconds;
  // The synchronising layers take their stretches; the rest of the pass the longer of its
  // kernels' time and the host's to issue them (a wait ends the host's lead, so neither hides
  // under the synchronising layers').
  const double host = host_issue_seconds(pass.kernels, pass.launches, device) - pass.synced_host_s;
  return pass.synced_device_s + pass.sync_s + std::max(pass.seconds - pass.synced_device_s, host);
}

HostIssue host_issue(std::span<const Operator> list, std::size_t k) {
  const Operator& op = list[k];
  if (op.graph_module == 0)
    return {static_cast<double>(op.kernels), static_cast<double>(op.inner_launches)};
  const bool first = k == 0 || list[k - 1].graph_module != op.graph_module;
  return {first ? 1.0 : 0.0, 0.0};
}

double sync_seconds(std::span<const IssuedOp> ops) {
  const auto first =
      std::find_if(ops.begin(), ops.end(), [](const IssuedOp& op) { return op.sync; });
  if (first == ops.end()) return 0.0;
  // From the first synchronisation round to it again, one stream in issue order: an op's
  // kernels start once the device is free and the host has issued the first of them, and end
  // no sooner than the host has issued the last; a synchronisation holds the host until the
  // device is done.
  const auto start = static_cast<std::size_t>(first - ops.begin());
  double host = 0.0, device = 0.0, all = 0.0;
  for (std::size_t i = 0; i < ops.size(); ++i) {
    const IssuedOp& op = ops[(start + i) % ops.size()];
    if (op.sync) host = std::max(host, device);
    const double begins = std::max(device, host + op.first_s);
    host += op.host_s;
    device = std::max(begins + op.device_s, host);
    all += op.device_s;
  }
  return device - all;
}

double optimizer_step_seconds(double bytes, const DeviceSpec& device) {
  if (!(device.memory_bandwidth > 0.0) || bytes <= 0.0) return 0.0;
  // apex's multi_tensor_apply launches: the gradient norm, Adam, the copy to the model weights.
  constexpr double kLaunches = 3;
  return memory_seconds(bytes, device) + kLaunches * device.kernel_overhead_s;
}

double copy_seconds(double bytes, const DeviceSpec& device) {
  if (!(device.memory_bandwidth > 0.0) || bytes <= 0.0) return 0.0;
  return memory_seconds(bytes, device) + device.kernel_overhead_s;
}

}  // namespace pipetab::cost
