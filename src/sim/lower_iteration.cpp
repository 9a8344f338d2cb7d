// The iteration's collectives (lowering.hpp's Lowering, docs/design.md §6): the gradient
// reductions between a stage's replicas, over the data-parallel ranks and (FSDP) the last
// reduce-scatter and HSDP's all-reduce, the tied embedding's all-reduce, each ring from one
// device's side by the rule of parallel/collective.hpp; then the end of the iteration
// (synchronisation, optimizer step, the distributed optimizer's all-gather).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <utility>
#include <vector>

#include "lowering.hpp"

#include "pipetab/parallel/collective.hpp"

namespace pipetab::detail {

// Gradient reductions: between the replicas of each stage (two-pipeline schedules), over the
// data-parallel replicas, and of the tied embedding between the first and the last stage.
// Each device starts once its last backward of the stage (the B, or the W of a split
// backward) has run.
void Lowering::collectives() {
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
        ready[i] = grad_sync(layout_.fsdp, pipelined()) == GradSync::PerStep
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
void Lowering::ring(TransferKind kind, int stage, const std::vector<std::int32_t>& members,
                    double bytes, std::vector<std::int32_t>& ready) {
  const auto k = members.size();
  std::vector<std::int32_t> sent(ready), received(k, -1), next_received(k);
  const auto steps =
      static_cast<std::size_t>(collective_steps(CollectiveKind::AllReduce, static_cast<double>(k)));
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
Group Lowering::group(std::int32_t device, CollectiveGroup kind) const {
  return group_of(layout_, kind, device, node_size(network_.system(), layout_));
}

// A collective of the iteration (data-parallel, FSDP and HSDP reductions and gathers) over
// `g`: NCCL's ring, or its tree where NCCL would pick it, at the links' own rate, sharing them
// with the rest (parallel/collective.hpp, CollectiveRate::Link).
Collective Lowering::nccl_collective(CollectiveKind kind, const Group& g, double bytes) const {
  const auto& system = network_.system();
  Collective c{kind, g, bytes, CollectiveAlgorithm::Ring, CollectiveRate::Link};
  c.nvls = job_.stack.nccl_nvls;
  return nccl_algorithm(c, system.intra, system.inter);
}

// One device's side of ring `c` by the rule (Side, lowering.hpp).
Lowering::Side Lowering::side(const Collective& c) const {
  const auto& system = network_.system();
  const CollectiveFlows f = collective_flows(c, system.intra, system.inter);
  const bool nic = f.remote.steps > 0.0;
  return {nic ? f.remote : f.local, nic};
}

// Device 0's side of ring `c` as one flow of an op's program (FSDP's per-block collectives).
cost::Flow Lowering::ring_flow(const Collective& c) const {
  if (!(c.bytes > 0.0)) return {};
  const Side s = side(c);
  return {s.flow.bytes, s.flow.latency_s, s.nic, false};
}

// One device's side of ring `c`: `steps` of its steps (all of them: collective_steps), a
// transfer each, sending bytes/ranks out of the device and receiving as much. Chained after
// `after` (-1: free to start at once); returns the last step.
std::int32_t Lowering::ring_side(TransferKind kind, int stage, std::int32_t device,
                                 const Collective& c, std::int64_t steps, std::int32_t after) {
  const Side s = side(c);
  std::int32_t chain = after;
  for (std::int64_t step = 0; step < steps; ++step) {
    const auto transfer =
        add_port_transfer(kind, stage, device, s.flow.step_bytes, s.nic, s.flow.step_latency_s);
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
std::int32_t Lowering::collective_side(TransferKind kind, int stage, std::int32_t device,
                                       const Collective& c, std::int32_t after) {
  const Side s = side(c);
  const auto transfer =
      add_port_transfer(kind, stage, device, s.flow.bytes, s.nic, s.flow.latency_s);
  if (after >= 0) edge(after, transfer);
  return transfer;
}

// The data-parallel reduction of one stage's gradient on one device: R replicas run the same
// ring, so it is modelled from this device's side. Each of the 2(R−1) steps (R−1 for the
// distributed optimizer's reduce-scatter) sends bytes/R out of the device and receives as
// much: over its NIC when the group spans nodes — where the group's `per_node` members on a
// node share the node's NICs, each carrying 1/per_node of the traffic (NCCL's rings over
// one NIC per GPU), or 1/collective_nics where the node has more NICs than NCCL's channels
// reach — or over its switch ports when the group fits in the node. Where NCCL
// would run its tree instead (nccl_collective), the reduction is one step. In buckets
// (dp_overlap), bucket j is ready (j+1)/n of the way through the stage's last backward and
// waits for bucket j−1 (one communicator runs them in order).
void Lowering::data_parallel(int stage, std::int32_t device, double bytes, std::int32_t& done,
                             bool overlap_allowed, const Group& g) {
  const CollectiveKind kind =
      job_.distributed_optimizer ? CollectiveKind::ReduceScatter : CollectiveKind::AllReduce;
  const bool buckets_on = job_.dp_overlap && overlap_allowed && done >= 0 && !g_.is_transfer(done);
  const double n = buckets_on ? std::max(1.0, std::ceil(bytes / job_.dp_bucket_bytes)) : 1.0;
  const Collective bucket = nccl_collective(kind, g, bytes / n);
  // A ring's 2(R−1) steps (R−1 for a reduce-scatter); a tree's one.
  const auto steps = static_cast<std::int64_t>(side(bucket).flow.steps);
  const std::int32_t last_backward = done;
  std::int32_t previous = -1;
  for (double j = 0; j < n; ++j) {
    std::int32_t after = buckets_on ? -1 : done;
    if (buckets_on) {
      // The bucket's first step starts once its gradients are ready, after the bucket before.
      const auto first = ring_side(TransferKind::DataAllReduce, stage, device, bucket, 1, previous);
      start_edge(last_backward, first,
                 (j + 1) / n * g_.duration[static_cast<std::size_t>(last_backward)]);
      after = first;
    }
    const std::int64_t rest = buckets_on ? steps - 1 : steps;
    previous = ring_side(TransferKind::DataAllReduce, stage, device, bucket, rest, after);
  }
  if (previous >= 0) done = previous;
}

// HSDP: the shard's gradients all-reduced over the replicas (2(R−1) ring steps).
std::int32_t Lowering::hsdp_all_reduce(int stage, std::int32_t device, std::int32_t after) {
  const std::int64_t replicas = gradient_ranks() / shard_ranks();
  if (replicas <= 1) return after;
  const auto& w = work_[static_cast<std::size_t>(stage)];
  // Each rank's shard: the dense gradients' 1/shard, the experts' 1/(EDP / R); the experts'
  // replicas are the same outermost ranks (TP × shard apart).
  const double experts = w.grad_bytes * expert_share(w);
  const double shard = ((w.grad_bytes - experts) / static_cast<double>(shard_ranks()) +
                        experts / static_cast<double>(expert_shard_ranks())) *
                       options_.collective_scale;
  return collective_side(TransferKind::DataAllReduce, stage, device,
                         nccl_collective(CollectiveKind::AllReduce,
                                         group(device, CollectiveGroup::HsdpReplicas), shard),
                         after);
}

// The word embedding's copies (the first stage's, the last stage's tied output layer, the MTP
// stages'): one all-reduce over the devices of each pipeline that hold them (Megatron's
// embedding group), after their data-parallel reduction; pipelines on the same devices share
// it.
void Lowering::embedding_all_reduce() {
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
void Lowering::end_of_iteration() {
  if (!optimizer_) return;
  const auto& system = network_.system();
  const double model_parallel = static_cast<double>(t_.devices) * static_cast<double>(layout_.tp);
  const bool spans_nodes =
      network_.node_of(0) != network_.node_of(t_.devices - 1) || layout_.tp > network_.node_gpus();
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
      const double experts = w.params > 0 ? w.param_gather_bytes * w.expert_params / w.params : 0.0;
      params[d] += w.param_gather_bytes - experts;
      expert_params[d] += experts;
    }
  }
  for (std::int32_t d = 0; d < t_.devices; ++d) {
    const auto node = static_cast<std::int32_t>(g_.table_ops + d);
    g_.duration[static_cast<std::size_t>(node)] =
        cost::optimizer_step_seconds(step_bytes[static_cast<std::size_t>(d)], system.device);
    edge(sync, node);
    if (job_.distributed_optimizer && gradient_ranks() > 1) {
      // All-gather of the updated weights (16-bit, or FP8: StageWork::param_gather_bytes): R−1
      // ring steps of 1/R each.
      ring_side(TransferKind::ParamAllGather, -1, d,
                nccl_collective(CollectiveKind::AllGather, group(d, CollectiveGroup::Gradient),
                                params[static_cast<std::size_t>(d)]),
                gradient_ranks() - 1, node);
    }
    if (job_.distributed_optimizer && expert_ranks() > 1 &&
        expert_params[static_cast<std::size_t>(d)] > 0) {
      ring_side(TransferKind::ParamAllGather, -1, d,
                nccl_collective(CollectiveKind::AllGather, group(d, CollectiveGroup::ExpertData),
                                expert_params[static_cast<std::size_t>(d)]),
                expert_ranks() - 1, node);
    }
  }
}

}  // namespace pipetab::detail
