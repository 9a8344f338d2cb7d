#include "pipetab/sim/bounds.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <span>
#include <stdexcept>

namespace pipetab {
namespace {

// The shortest compute node n can take: its duration, or with steps its compute and each wait
// no earlier than its transfer could finish alone (its latency, then its bytes at its rate cap:
// no share of a link is more). `ends` has a slot per transfer (scratch).
double shortest(const ExecGraph& g, std::size_t n, std::vector<double>& ends) {
  if (!g.has_steps(static_cast<std::int64_t>(n))) return g.duration[n];
  double now = 0.0;
  for (auto k = g.step_begin[n]; k < g.step_begin[n + 1]; ++k) {
    const OpStep& s = g.steps[static_cast<std::size_t>(k)];
    if (s.kind == StepKind::Compute) {
      now += s.seconds;
      continue;
    }
    const auto t = static_cast<std::size_t>(s.transfer - g.compute_nodes);
    if (s.kind == StepKind::Issue) {
      const double cap = t < g.rate_cap.size() ? g.rate_cap[t] : 0.0;
      const double wire = std::isfinite(cap) && cap > 0.0 ? g.bytes[t] / cap : 0.0;
      ends[t] = now + g.latency_s[t] + wire;
    } else {
      now = std::max(now, ends[t]);
    }
  }
  return now;
}

}  // namespace

double DeviceBounds::runtime_lower_bound_s() const {
  const double busy = busy_s.empty() ? 0.0 : *std::max_element(busy_s.begin(), busy_s.end());
  return std::max(busy, compute_path_s);
}

DeviceBounds device_bounds(const ExecGraph& g) {
  const auto devices = static_cast<std::size_t>(g.devices);
  DeviceBounds b;
  b.busy_s.assign(devices, 0.0);
  b.peak_memory_bytes.assign(devices, 0.0);
  std::vector<double> ends(g.steps.empty() ? 0 : static_cast<std::size_t>(g.transfers()));
  // Memory, stream by stream; offloaded activations away from their forward's end to their
  // backward's start (copies on time: a lower bound where they are not).
  const bool offload = !g.offloaded_bytes.empty();
  for (std::size_t d = 0; d < devices; ++d) {
    double memory = g.static_bytes.empty() ? 0.0 : g.static_bytes[d];
    double peak = memory;
    double busy = 0.0;
    for (auto i = g.stream_begin[d]; i < g.stream_begin[d + 1]; ++i) {
      const auto n = static_cast<std::size_t>(g.stream[static_cast<std::size_t>(i)]);
      busy += shortest(g, n, ends);
      memory += g.alloc_bytes[n] + (offload ? g.reloaded_bytes[n] : 0.0);
      peak = std::max(peak, memory);
      memory -= g.free_bytes[n] + (offload ? g.offloaded_bytes[n] : 0.0);
    }
    b.busy_s[d] = busy;
    b.peak_memory_bytes[d] = peak;
  }
  return b;
}

// The bound for any order of a table's passes on its devices. Whatever the order, a device's
// first op is a forward (every other pass of a stage needs its forward, on the same device), and
// the forward of stage s of a microbatch starts no earlier than the forwards of stages 0..s-1 take
// one after another. Its last op, where the device runs no W, is a backward (B or I) of one of
// its stages, after which those of the stages before it still run one after another (beside
// the device's optimizer step). So each device ends no earlier than head + its busy time, nor
// than head + its table ops + tail; each pass at its (pipeline, stage, kind)'s least duration
// over the microbatches, a stage whose pass only runs inside pairs counting nothing.
double any_order_path_s(const ScheduleTable& table, std::span<const double> durations,
                        std::span<const double> busy) {
  const auto stages = static_cast<std::size_t>(table.stages);
  const auto pipelines = static_cast<std::size_t>(table.pipelines());
  constexpr double kNone = std::numeric_limits<double>::infinity();
  std::vector<double> forward(pipelines * stages, kNone), backward(pipelines * stages, kNone);
  const auto devices = static_cast<std::size_t>(table.devices);
  std::vector<std::uint8_t> runs_w(devices, 0);
  std::vector<double> table_busy(devices, 0.0);
  for (std::size_t d = 0; d < devices; ++d) {
    for (auto i = table.row_begin[d]; i < table.row_begin[d + 1]; ++i) {
      const auto n = static_cast<std::size_t>(i);
      const Op& op = table.ops[n];
      table_busy[d] += durations[n];
      for (const Pass& pass : op.passes())
        if (pass.kind == PassKind::W) runs_w[d] = 1;
      if (op.is_pair()) continue;
      const Pass& pass = op.first();
      const std::size_t key =
          static_cast<std::size_t>(table.pipeline_of_microbatch(pass.microbatch)) * stages +
          pass.stage;
      if (pass.kind == PassKind::F) forward[key] = std::min(forward[key], durations[n]);
      if (is_input_backward(pass.kind)) backward[key] = std::min(backward[key], durations[n]);
    }
  }
  // Per device, the least chain before any of its stages and after any of them.
  std::vector<double> head(devices, kNone), tail(devices, kNone);
  for (std::size_t p = 0; p < pipelines; ++p) {
    double before = 0.0, before_back = 0.0;  // the chains of stages 0..s-1
    for (std::size_t st = 0; st < stages; ++st) {
      const auto d = static_cast<std::size_t>(
          table.placement.device_of(static_cast<int>(p), static_cast<int>(st)));
      head[d] = std::min(head[d], before);
      tail[d] = std::min(tail[d], before_back);
      const double f = forward[p * stages + st], bw = backward[p * stages + st];
      before += f == kNone ? 0.0 : f;
      before_back += bw == kNone ? 0.0 : bw;
    }
  }
  double path = 0.0;
  for (std::size_t d = 0; d < devices; ++d) {
    if (table.row_begin[d] == table.row_begin[d + 1]) continue;
    const double after = runs_w[d] ? 0.0 : tail[d];
    path = std::max(path, head[d] + std::max(busy[d], table_busy[d] + after));
  }
  return path;
}

DeviceBounds device_bounds(const ExecGraph& g, const ScheduleTable& table) {
  DeviceBounds b = device_bounds(g);
  if (g.table_ops != static_cast<std::int64_t>(table.ops.size()))
    throw std::invalid_argument("device_bounds: the graph was not lowered from this table");
  std::vector<double> ends(g.steps.empty() ? 0 : static_cast<std::size_t>(g.transfers()));
  std::vector<double> durations(table.ops.size());
  for (std::size_t n = 0; n < durations.size(); ++n)
    durations[n] = shortest(g, n, ends);
  b.compute_path_s = any_order_path_s(table, durations, b.busy_s);
  return b;
}

GraphBounds graph_bounds(const ExecGraph& g, const Network& network) {
  GraphBounds b;
  const auto nodes = static_cast<std::size_t>(g.nodes());
  const auto devices = static_cast<std::size_t>(g.devices);
  // Each node's shortest possible duration.
  std::vector<double> length(nodes, 0.0);
  std::vector<double> ends(g.steps.empty() ? 0 : static_cast<std::size_t>(g.transfers()));
  for (std::size_t n = 0; n < static_cast<std::size_t>(g.compute_nodes); ++n)
    length[n] = shortest(g, n, ends);
  const auto& links = network.links();
  for (std::size_t t = 0; t < static_cast<std::size_t>(g.transfers()); ++t) {
    double bandwidth = std::numeric_limits<double>::infinity();
    for (auto r = g.route_begin[t]; r < g.route_begin[t + 1]; ++r)
      bandwidth =
          std::min(bandwidth,
                   links[static_cast<std::size_t>(g.route[static_cast<std::size_t>(r)])].bandwidth);
    const double wire = std::isfinite(bandwidth) && bandwidth > 0 ? g.bytes[t] / bandwidth : 0.0;
    length[static_cast<std::size_t>(g.compute_nodes) + t] = g.latency_s[t] + wire;
  }
  // Edges: data dependencies and each stream's order. Kahn's algorithm over them in node order
  // gives a topological order; the longest path ends at the latest finish.
  std::vector<std::int32_t> next_in_stream(nodes, -1);
  std::vector<std::int32_t> indegree(nodes, 0);
  for (std::size_t d = 0; d < devices; ++d) {
    for (auto i = g.stream_begin[d]; i + 1 < g.stream_begin[d + 1]; ++i) {
      next_in_stream[static_cast<std::size_t>(g.stream[static_cast<std::size_t>(i)])] =
          g.stream[static_cast<std::size_t>(i) + 1];
      ++indegree[static_cast<std::size_t>(g.stream[static_cast<std::size_t>(i) + 1])];
    }
  }
  for (const auto s : g.succ)
    ++indegree[static_cast<std::size_t>(s)];
  std::vector<double> start(nodes, 0.0);
  std::vector<std::int32_t> ready;
  ready.reserve(nodes);
  for (std::size_t n = 0; n < nodes; ++n) {
    if (indegree[n] == 0) ready.push_back(static_cast<std::int32_t>(n));
  }
  double bound = 0.0;
  for (std::size_t head = 0; head < ready.size(); ++head) {
    const auto n = static_cast<std::size_t>(ready[head]);
    const double finish = start[n] + length[n];
    bound = std::max(bound, finish);
    const auto release = [&](std::int32_t s) {
      const auto u = static_cast<std::size_t>(s);
      start[u] = std::max(start[u], finish);
      if (--indegree[u] == 0) ready.push_back(s);
    };
    for (auto e = g.succ_begin[n]; e < g.succ_begin[n + 1]; ++e)
      release(g.succ[static_cast<std::size_t>(e)]);
    if (next_in_stream[n] >= 0) release(next_in_stream[n]);
  }
  b.runtime_lower_bound_s = bound;
  b.peak_memory_bytes = device_bounds(g).peak_memory_bytes;
  return b;
}

}  // namespace pipetab
