#include <algorithm>

#include <fmt/format.h>

#include "pipetab/error.hpp"
#include "pipetab/sim/graph.hpp"
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
      return "data-parallel all-reduce";
  }
  return "transfer";
}

std::vector<StageWork> table_work(const ScheduleTable& table, const ModelConfig& model) {
  const auto units = table.stage_units();
  std::vector<StageWork> work;
  work.reserve(units.size());
  for (std::int32_t p = 0; p < table.pipelines(); ++p) {
    const std::span<const std::int32_t> pipeline(
        units.data() + static_cast<std::size_t>(p) * static_cast<std::size_t>(table.stages),
        static_cast<std::size_t>(table.stages));
    const auto stages = stage_work(model, pipeline, table.devices);
    work.insert(work.end(), stages.begin(), stages.end());
  }
  return work;
}

namespace {

class Lowering {
 public:
  Lowering(const ScheduleTable& t, const ModelConfig& model, const Network& network,
           const LoweringOptions& options)
      : t_(t), network_(network), options_(options), work_(table_work(t, model)) {}

  ExecGraph run() && {
    require_supported(network_.system(), options_);
    require_size();
    g_.devices = t_.devices;
    g_.compute_nodes = static_cast<std::int64_t>(t_.ops.size());
    g_.row_begin = t_.row_begin;
    compute_nodes();
    pipeline_transfers();
    collectives();
    build_successors();
    return std::move(g_);
  }

 private:
  // Node ids are 32-bit: bound the node count (an upper bound: every dependency crossing
  // devices, every ring step) before building. At about 135 bytes per node in a whole run the
  // limit still allows tens of GB; it keeps ids valid, not memory small.
  void require_size() const {
    std::int64_t dependencies = 0;
    for (const Op& op : t_.ops) {
      for (const Pass& pass : op.passes()) {
        dependencies += (pass.kind == PassKind::F && pass.stage > 0) ||
                        (is_input_backward(pass.kind) && pass.stage + 1 < t_.stages);
      }
    }
    const std::int64_t k = t_.pipelines();
    const std::int64_t per_stage =
        (k > 1 ? 2 * (k - 1) * k : 0) + 2 * (options_.data_parallel - 1) * k;
    const std::int64_t nodes =
        static_cast<std::int64_t>(t_.ops.size()) + dependencies + per_stage * t_.stages;
    if (nodes > kMaxGraphNodes) {
      throw ParamError(fmt::format(
          "the execution graph would have up to {} nodes, over the limit of {}: use fewer "
          "microbatches, stages or data-parallel replicas (--dp)",
          nodes, kMaxGraphNodes));
    }
  }

  const StageWork& work(const Pass& pass) const {
    return work_[static_cast<std::size_t>(t_.pipeline_of_microbatch(pass.microbatch)) *
                     static_cast<std::size_t>(t_.stages) +
                 pass.stage];
  }
  std::size_t key(std::int32_t microbatch, int stage) const {
    return static_cast<std::size_t>(stage) * static_cast<std::size_t>(t_.microbatches) +
           static_cast<std::size_t>(microbatch);
  }

  // Durations, memory deltas, devices; and where each pass runs.
  void compute_nodes() {
    const auto ops = t_.ops.size();
    g_.device.resize(ops);
    g_.duration.resize(ops);
    g_.alloc_bytes.assign(ops, 0.0);
    g_.free_bytes.assign(ops, 0.0);
    forward_op_.assign(
        static_cast<std::size_t>(t_.microbatches) * static_cast<std::size_t>(t_.stages), -1);
    backward_op_.assign(forward_op_.size(), -1);
    const double flops = network_.system().flops();
    const auto costs = options_.costs ? op_durations(t_, *options_.costs) : std::vector<double>{};
    for (std::int32_t d = 0; d < t_.devices; ++d) {
      for (auto i = t_.row_begin[static_cast<std::size_t>(d)];
           i < t_.row_begin[static_cast<std::size_t>(d) + 1]; ++i) {
        const auto n = static_cast<std::size_t>(i);
        g_.device[n] = d;
        double seconds = 0.0;
        for (const Pass& pass : t_.ops[n].passes()) {
          const StageWork& w = work(pass);
          const double forward = w.forward_s + w.forward_flops / flops;
          const double input_grad = w.input_grad_s + w.input_grad_flops / flops;
          const double weight_grad = w.weight_grad_s + w.weight_grad_flops / flops;
          switch (pass.kind) {
            case PassKind::F:
              seconds += forward;
              g_.alloc_bytes[n] += w.activation_bytes;
              forward_op_[key(pass.microbatch, pass.stage)] = static_cast<std::int32_t>(i);
              break;
            case PassKind::B:
              seconds += input_grad + weight_grad;
              g_.free_bytes[n] += w.activation_bytes;
              backward_op_[key(pass.microbatch, pass.stage)] = static_cast<std::int32_t>(i);
              break;
            case PassKind::I:
              seconds += input_grad;
              g_.free_bytes[n] += w.activation_bytes - w.activation_kept_for_weight_grad;
              backward_op_[key(pass.microbatch, pass.stage)] = static_cast<std::int32_t>(i);
              break;
            case PassKind::W:
              seconds += weight_grad;
              g_.free_bytes[n] += w.activation_kept_for_weight_grad;
              break;
            case PassKind::None:
              break;
          }
        }
        g_.duration[n] = options_.costs ? costs[n] : seconds;
      }
    }
    g_.preds.assign(ops, 0);
  }

  // A transfer routed by the network from one device to another.
  std::int32_t add_transfer(TransferKind kind, int stage, std::int32_t from, std::int32_t to,
                            double bytes) {
    const double latency = network_.append_route(from, to, g_.route);
    return close_transfer(kind, stage, from, to, bytes, latency);
  }

  // A transfer over the given links (data-parallel ring steps: a device's NIC out and in).
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
    g_.route_begin.push_back(static_cast<std::int64_t>(g_.route.size()));
    return node;
  }

  void edge(std::int32_t from, std::int32_t to) {
    edges_.emplace_back(from, to);
    ++g_.preds[static_cast<std::size_t>(to)];
  }

  // A cross-device dependency becomes producer → transfer → consumer; a same-device one is
  // already ordered by the device's stream (a valid table runs the producer first).
  void depend(std::int32_t consumer, int stage, std::int32_t producer, TransferKind kind,
              double bytes) {
    const auto from = g_.device[static_cast<std::size_t>(producer)];
    const auto to = g_.device[static_cast<std::size_t>(consumer)];
    if (from == to) return;
    const auto transfer = add_transfer(kind, stage, from, to, bytes);
    edge(producer, transfer);
    edge(transfer, consumer);
  }

  void pipeline_transfers() {
    for (std::size_t n = 0; n < t_.ops.size(); ++n) {
      const auto consumer = static_cast<std::int32_t>(n);
      for (const Pass& pass : t_.ops[n].passes()) {
        if (pass.kind == PassKind::F && pass.stage > 0) {
          const Pass previous{pass.microbatch, static_cast<std::uint16_t>(pass.stage - 1),
                              PassKind::F};
          depend(consumer, pass.stage, forward_op_[key(pass.microbatch, pass.stage - 1)],
                 TransferKind::Activation, work(previous).message_bytes);
        } else if (is_input_backward(pass.kind) && pass.stage + 1 < t_.stages) {
          depend(consumer, pass.stage, backward_op_[key(pass.microbatch, pass.stage + 1)],
                 TransferKind::Gradient, work(pass).message_bytes);
        }
      }
    }
  }

  // Gradient all-reduces: between the replicas of each stage (two-pipeline schedules), then
  // over the data-parallel replicas. Each device starts once its last backward of the stage
  // (the B, or the W of a split backward) has run.
  void collectives() {
    const auto N = static_cast<std::size_t>(t_.stages);
    // [pipeline * N + stage]: the op that finishes the stage's gradient in that pipeline.
    std::vector<std::int32_t> last_grad(static_cast<std::size_t>(t_.pipelines()) * N, -1);
    for (std::size_t n = 0; n < t_.ops.size(); ++n) {
      for (const Pass& pass : t_.ops[n].passes()) {
        if (pass.kind == PassKind::B || pass.kind == PassKind::W) {
          last_grad[static_cast<std::size_t>(t_.pipeline_of_microbatch(pass.microbatch)) * N +
                    pass.stage] = static_cast<std::int32_t>(n);
        }
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
        const auto op = last_grad[static_cast<std::size_t>(p) * N + s];
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
      if (members.size() > 1) ring(stage, members, bytes, ready);
      if (options_.data_parallel > 1) {
        for (std::size_t i = 0; i < members.size(); ++i)
          data_parallel(stage, members[i], bytes, ready[i]);
      }
    }
  }

  // Ring all-reduce over `members`: 2(k−1) steps; in each, every member sends bytes/k to the
  // next one (reduce-scatter, then all-gather). A member's send needs its own gradient (its
  // previous send, or `ready` for the first) and, after the first step, the chunk it received
  // in the previous step. On return `ready` holds, per member, the transfer that completes
  // its copy of the reduced gradient.
  void ring(int stage, const std::vector<std::int32_t>& members, double bytes,
            std::vector<std::int32_t>& ready) {
    const auto k = members.size();
    std::vector<std::int32_t> sent(ready), received(k, -1), next_received(k);
    for (std::size_t step = 0; step < 2 * (k - 1); ++step) {
      for (std::size_t i = 0; i < k; ++i) {
        const auto transfer = add_transfer(TransferKind::ReplicaAllReduce, stage, members[i],
                                           members[(i + 1) % k], bytes / static_cast<double>(k));
        if (sent[i] >= 0) edge(sent[i], transfer);
        if (received[i] >= 0) edge(received[i], transfer);
        sent[i] = transfer;
        next_received[(i + 1) % k] = transfer;
      }
      received.swap(next_received);
    }
    ready = received;
  }

  // Data-parallel ring over R identical replicas: each step sends bytes/R out through the
  // device's NIC and, by symmetry, receives as much through it from the previous replica.
  void data_parallel(int stage, std::int32_t device, double bytes, std::int32_t& done) {
    const auto R = options_.data_parallel;
    for (std::int32_t step = 0; step < 2 * (R - 1); ++step) {
      const auto transfer = add_transfer(TransferKind::DataAllReduce, stage, device, bytes / R,
                                         {network_.nic_out(device), network_.nic_in(device)},
                                         network_.system().inter.latency_s);
      if (done >= 0) edge(done, transfer);
      done = transfer;
    }
  }

  void build_successors() {
    const auto nodes = g_.device.size();
    g_.succ_begin.assign(nodes + 1, 0);
    for (const auto& [from, to] : edges_)
      ++g_.succ_begin[static_cast<std::size_t>(from) + 1];
    for (std::size_t n = 0; n < nodes; ++n)
      g_.succ_begin[n + 1] += g_.succ_begin[n];
    g_.succ.resize(edges_.size());
    auto fill = g_.succ_begin;
    for (const auto& [from, to] : edges_)
      g_.succ[static_cast<std::size_t>(fill[static_cast<std::size_t>(from)]++)] = to;
    // Static memory: the stages each device holds (both replicas' stages in two-pipeline
    // schedules).
    g_.static_bytes.assign(static_cast<std::size_t>(t_.devices), 0.0);
    for (std::int32_t p = 0; p < t_.pipelines(); ++p) {
      for (std::int32_t s = 0; s < t_.stages; ++s) {
        const auto& w = work_[static_cast<std::size_t>(p) * static_cast<std::size_t>(t_.stages) +
                              static_cast<std::size_t>(s)];
        g_.static_bytes[static_cast<std::size_t>(t_.placement.device_of(p, s))] +=
            w.weight_bytes + w.grad_bytes + w.optimizer_bytes;
      }
    }
  }

  const ScheduleTable& t_;
  const Network& network_;
  const LoweringOptions& options_;
  std::vector<StageWork> work_;
  ExecGraph g_;
  std::vector<std::int32_t> forward_op_, backward_op_;
  std::vector<std::pair<std::int32_t, std::int32_t>> edges_;
};

}  // namespace

void require_supported(const SystemConfig& system, const LoweringOptions& options) {
  if (options.data_parallel < 1 || options.data_parallel > kMaxDataParallel) {
    throw ParamError(fmt::format("--dp = {} is out of range: expected 1 to {} replicas",
                                 options.data_parallel, kMaxDataParallel));
  }
  if (options.data_parallel > 1 && system.topology != Topology::Switched) {
    throw ParamError(fmt::format(
        "--dp needs a switched topology, and system '{}' is a chain: the data-parallel replicas "
        "meet over the devices' NICs",
        system.name));
  }
  if (!(options.collective_scale > 0.0 && options.collective_scale <= 1e6)) {
    throw ParamError(fmt::format("collective scale {} is out of range: expected above 0, up to 1e6",
                                 options.collective_scale));
  }
}

ExecGraph lower(const ScheduleTable& table, const ModelConfig& model, const Network& network,
                const LoweringOptions& options) {
  return Lowering(table, model, network, options).run();
}

}  // namespace pipetab
