#include "pipetab/sim/engine.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <functional>
#include <iterator>
#include <limits>
#include <span>

#include <fmt/format.h>

#include "pipetab/error.hpp"

namespace pipetab {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// Release: a start edge's delay has passed (the event's `version` holds the releasing node).
enum class EventType : std::uint8_t { ComputeDone, LatencyDone, FlowDone, Release };

struct Event {
  double time;
  std::uint64_t seq;  // scheduling order: ties in time are taken first-scheduled first
  std::int32_t node;
  std::uint32_t version;  // FlowDone: the transfer's rate version it was computed for
  EventType type() const noexcept { return static_cast<EventType>(seq & 3U); }
  bool before(const Event& other) const noexcept {
    return time < other.time || (time == other.time && seq < other.seq);
  }
};
static_assert(sizeof(Event) == 24);

// A 4-ary min-heap of events: shallower than a binary heap and friendlier to the cache, which
// matters with millions of events.
class EventQueue {
 public:
  bool empty() const noexcept { return heap_.empty(); }
  void push(const Event& e) {
    heap_.push_back(e);
    std::size_t i = heap_.size() - 1;
    while (i > 0) {
      const std::size_t parent = (i - 1) / 4;
      if (!heap_[i].before(heap_[parent])) break;
      std::swap(heap_[i], heap_[parent]);
      i = parent;
    }
  }
  Event pop() {
    const Event top = heap_.front();
    heap_.front() = heap_.back();
    heap_.pop_back();
    const std::size_t n = heap_.size();
    std::size_t i = 0;
    while (true) {
      const std::size_t first = 4 * i + 1;
      if (first >= n) break;
      std::size_t best = first;
      for (std::size_t c = first + 1; c < std::min(first + 4, n); ++c) {
        if (heap_[c].before(heap_[best])) best = c;
      }
      if (!heap_[best].before(heap_[i])) break;
      std::swap(heap_[i], heap_[best]);
      i = best;
    }
    return top;
  }

 private:
  std::vector<Event> heap_;
};

using Intervals = std::vector<std::pair<double, double>>;

// Total length of disjoint intervals.
double length(const Intervals& intervals) {
  double total = 0.0;
  for (const auto& [a, b] : intervals)
    total += b - a;
  return total;
}

// Measure of the intersection of two sorted lists of disjoint intervals.
double overlap(const Intervals& x, const Intervals& y) {
  double total = 0.0;
  std::size_t i = 0, j = 0;
  while (i < x.size() && j < y.size()) {
    const double a = std::max(x[i].first, y[j].first);
    const double b = std::min(x[i].second, y[j].second);
    if (b > a) total += b - a;
    if (x[i].second < y[j].second) {
      ++i;
    } else {
      ++j;
    }
  }
  return total;
}

// The union of two sorted lists of disjoint intervals, sorted and disjoint.
Intervals unite(const Intervals& x, const Intervals& y) {
  Intervals all;
  all.reserve(x.size() + y.size());
  std::merge(x.begin(), x.end(), y.begin(), y.end(), std::back_inserter(all));
  Intervals out;
  for (const auto& [a, b] : all) {
    if (!out.empty() && a <= out.back().second) {
      out.back().second = std::max(out.back().second, b);
    } else {
      out.emplace_back(a, b);
    }
  }
  return out;
}

// Communication classes of a device: pipeline transfers and collectives.
constexpr std::size_t kPipelineComm = 0, kCollectiveComm = 1;

class Engine {
 public:
  Engine(const ExecGraph& g, const Network& network, const SimOptions& options)
      : g_(g), net_(network), options_(options) {
    const auto nodes = static_cast<std::size_t>(g.nodes());
    const auto devices = static_cast<std::size_t>(g.devices);
    const auto transfers = static_cast<std::size_t>(g.transfers());
    const auto links = net_.links().size();
    remaining_.assign(g.preds.begin(), g.preds.end());
    ready_at_.assign(nodes, 0.0);
    binding_.assign(nodes, -1);
    result_.start.assign(nodes, 0.0);
    result_.end.assign(nodes, 0.0);
    next_.assign(g.stream_begin.begin(), g.stream_begin.end() - 1);
    busy_.assign(devices, false);
    free_at_.assign(devices, 0.0);
    pending_sends_.assign(devices, 0);
    stream_binding_.assign(devices, -1);
    running_.assign(devices, -1);
    computing_.assign(devices, false);
    step_.assign(devices, 0);
    waiting_.assign(devices, -1);
    wait_since_.assign(devices, 0.0);
    if (!g.steps.empty()) {
      waited_.assign(static_cast<std::size_t>(g.compute_nodes), 0.0);
      waited_expert_.assign(static_cast<std::size_t>(g.compute_nodes), 0.0);
      waited_fsdp_.assign(static_cast<std::size_t>(g.compute_nodes), 0.0);
      waited_host_.assign(static_cast<std::size_t>(g.compute_nodes), 0.0);
      transfer_done_.assign(transfers, 0);
    }
    work_left_.assign(devices, 0.0);
    work_since_.assign(devices, 0.0);
    compute_version_.assign(devices, 0);
    memory_.assign(g.static_bytes.begin(), g.static_bytes.end());
    host_.assign(memory_.size(), 0.0);
    reloads_.assign(devices, 0);
    for (std::size_t c = 0; c < 2; ++c) {
      in_flight_[c].assign(devices, 0);
      comm_since_[c].assign(devices, 0.0);
      comm_[c].resize(devices);
    }
    result_.devices.resize(devices);
    for (std::size_t d = 0; d < devices; ++d) {
      result_.devices[d].static_bytes = g.static_bytes[d];
      result_.devices[d].peak_memory_bytes = g.static_bytes[d];
    }
    if (options_.record_memory) {
      result_.memory.resize(devices);
      for (std::size_t d = 0; d < devices; ++d)
        result_.memory[d].push_back({0.0, memory_[d]});
    }
    rate_.assign(transfers, 0.0);
    left_.assign(transfers, 0.0);
    updated_.assign(transfers, 0.0);
    version_.assign(transfers, 0);
    flow_mark_.assign(transfers, 0);
    frozen_.assign(transfers, false);
    new_rate_.assign(transfers, 0.0);
    flows_on_.resize(links);
    active_on_.assign(links, 0);
    busy_since_.assign(links, 0.0);
    link_mark_.assign(links, 0);
    capacity_.assign(links, 0.0);
    count_.assign(links, 0);
    load_.assign(links, 0.0);
    load_since_.assign(links, 0.0);
    peak_load_.assign(links, 0.0);
    position_.assign(g.route.size(), 0);
    // The flow lists keep one entry per (transfer, link): a route lists each link once.
    for (std::size_t t = 0; t < transfers; ++t) {
      ++epoch_;
      for (const auto l : route(t)) {
        if (link_mark_[static_cast<std::size_t>(l)] == epoch_) {
          throw Error(fmt::format("execution graph: transfer {} lists link {} twice", t, l));
        }
        link_mark_[static_cast<std::size_t>(l)] = epoch_;
      }
    }
    result_.links.resize(links);
    blocking_ = options_.blocking_send || std::find(g.blocks_sender.begin(), g.blocks_sender.end(),
                                                    true) != g.blocks_sender.end();
  }

  SimResult run() && {
    for (std::int32_t d = 0; d < g_.devices; ++d)
      try_start(d);
    for (std::int64_t n = g_.compute_nodes; n < g_.nodes(); ++n) {
      if (remaining_[static_cast<std::size_t>(n)] == 0) issue(static_cast<std::int32_t>(n));
    }
    while (!queue_.empty()) {
      const Event e = queue_.pop();
      now_ = e.time;
      ++result_.events;
      switch (e.type()) {
        case EventType::ComputeDone:
          if (current(e)) compute_done(e.node);
          break;
        case EventType::LatencyDone:
          start_data(e.node);
          break;
        case EventType::FlowDone:
          if (e.version == version_[transfer(e.node)]) finish_transfer(e.node);
          break;
        case EventType::Release:
          release(static_cast<std::int32_t>(e.version), e.node);
          break;
      }
    }
    require_finished();
    summarize();
    result_.waited = std::move(waited_);
    result_.waited_host = std::move(waited_host_);
    return std::move(result_);
  }

 private:
  std::size_t transfer(std::int32_t node) const {
    return static_cast<std::size_t>(node - g_.compute_nodes);
  }
  std::span<const std::int32_t> route(std::size_t t) const {
    return {g_.route.data() + g_.route_begin[t],
            static_cast<std::size_t>(g_.route_begin[t + 1] - g_.route_begin[t])};
  }
  // A transfer's rate cap (graphs built by hand may leave rate_cap empty: no caps).
  double rate_cap(std::size_t t) const { return t < g_.rate_cap.size() ? g_.rate_cap[t] : kInf; }
  // A copy of offload inside a pass: its memory is its ops' (ExecGraph::in_pass_copy).
  bool in_pass(std::size_t t) const { return t < g_.in_pass_copy.size() && g_.in_pass_copy[t]; }
  bool blocks_stream(std::size_t t) const {
    return blocking_ &&
           (g_.blocks_sender[t] != 0 || (options_.blocking_send && is_pipeline(g_.kind[t])));
  }

  // Compute slowed by communication: a device's running node progresses at 1 / (1 +
  // comm_slowdown) while a transfer or collective of the device is in flight, and at 1 / (1 +
  // h2d_slowdown) while a reload from host memory runs (the larger where both do); each change
  // of speed reschedules its end, and only the latest of its completion events counts.
  bool slowing() const noexcept { return g_.comm_slowdown > 0.0 || g_.h2d_slowdown > 0.0; }
  bool communicating_now(std::size_t dev) const noexcept {
    return in_flight_[kPipelineComm][dev] + in_flight_[kCollectiveComm][dev] > 0;
  }
  double slowdown(std::size_t dev) const noexcept {
    return std::max(communicating_now(dev) ? g_.comm_slowdown : 0.0,
                    reloads_[dev] > 0 ? g_.h2d_slowdown : 0.0);
  }
  double speed(std::size_t dev) const noexcept { return 1.0 / (1.0 + slowdown(dev)); }
  bool current(const Event& e) const noexcept {
    return !slowing() || e.version == compute_version_[static_cast<std::size_t>(
                                          g_.device[static_cast<std::size_t>(e.node)])];
  }
  void schedule_compute_end(std::size_t dev) {
    push(now_ + work_left_[dev] / speed(dev), EventType::ComputeDone, running_[dev],
         ++compute_version_[dev]);
  }
  // Called before device `dev`'s communication changes between none and some.
  void progress(std::size_t dev) {
    work_left_[dev] = std::max(0.0, work_left_[dev] - (now_ - work_since_[dev]) * speed(dev));
    work_since_[dev] = now_;
  }

  void push(double time, EventType type, std::int32_t node, std::uint32_t version = 0) {
    queue_.push(Event{time, (seq_++ << 2) | static_cast<std::uint64_t>(type), node, version});
  }

  void record_memory(std::int32_t d) {
    auto& dev = result_.devices[static_cast<std::size_t>(d)];
    const double bytes = memory_[static_cast<std::size_t>(d)];
    if (bytes > dev.peak_memory_bytes) {
      dev.peak_memory_bytes = bytes;
      dev.peak_memory_time_s = now_;
    }
    if (options_.record_memory) {
      auto& curve = result_.memory[static_cast<std::size_t>(d)];
      if (curve.back().time_s == now_) {
        curve.back().bytes = bytes;
      } else {
        curve.push_back({now_, bytes});
      }
    }
  }

  // Starts the next op of device d's stream if the stream is free and its inputs are in.
  void try_start(std::int32_t d) {
    const auto dev = static_cast<std::size_t>(d);
    if (busy_[dev] || pending_sends_[dev] > 0) return;
    const auto position = next_[dev];
    if (position == g_.stream_begin[dev + 1]) return;
    const auto n = g_.stream[static_cast<std::size_t>(position)];
    if (remaining_[static_cast<std::size_t>(n)] > 0) return;
    const auto node = static_cast<std::size_t>(n);
    // Held up by its data if that arrived after the stream was free, else by the stream.
    if (!(ready_at_[node] > free_at_[dev])) binding_[node] = stream_binding_[dev];
    busy_[dev] = true;
    running_[dev] = n;
    result_.start[node] = now_;
    memory_[dev] += g_.alloc_bytes[node];
    record_memory(d);
    // An op of steps may end within run_steps and start the next: its start edges go first.
    const bool steps = g_.has_steps(n);
    if (!steps) compute(dev, g_.duration[node]);
    for (auto k = g_.start_succ.empty() ? 0 : g_.start_begin[node];
         !g_.start_succ.empty() && k < g_.start_begin[node + 1]; ++k) {
      const auto e = static_cast<std::size_t>(k);
      push(now_ + g_.start_delay[e], EventType::Release, g_.start_succ[e],
           static_cast<std::uint32_t>(n));
    }
    if (steps) {
      step_[dev] = g_.step_begin[node];
      run_steps(dev);
    }
  }

  // Device dev's running op computes for `seconds` (at full speed) from now.
  void compute(std::size_t dev, double seconds) {
    computing_[dev] = true;
    if (slowing()) {
      work_left_[dev] = seconds;
      work_since_[dev] = now_;
      schedule_compute_end(dev);
    } else {
      push(now_ + seconds, EventType::ComputeDone, running_[dev]);
    }
  }

  void compute_done(std::int32_t node) {
    const auto dev = static_cast<std::size_t>(g_.device[static_cast<std::size_t>(node)]);
    computing_[dev] = false;
    if (g_.has_steps(node)) {
      run_steps(dev);
    } else {
      finish_compute(node);
    }
  }

  // Runs device dev's op's steps from the current one until one takes time (a computation, or a
  // wait for a transfer still moving); after the last, the op ends.
  void run_steps(std::size_t dev) {
    const auto node = running_[dev];
    const auto end = g_.step_begin[static_cast<std::size_t>(node) + 1];
    while (step_[dev] < end) {
      const OpStep& s = g_.steps[static_cast<std::size_t>(step_[dev])];
      switch (s.kind) {
        case StepKind::Compute:
          ++step_[dev];
          if (s.seconds > 0.0) {
            compute(dev, s.seconds);
            return;
          }
          break;
        case StepKind::Issue:
          ++step_[dev];
          release(node, s.transfer);
          break;
        case StepKind::Wait:
          if (transfer_done_[transfer(s.transfer)] == 0) {
            waiting_[dev] = s.transfer;
            wait_since_[dev] = now_;
            return;
          }
          ++step_[dev];
          break;
      }
    }
    finish_compute(node);
  }

  // The edge from → to is satisfied now.
  void release(std::int32_t from, std::int32_t to) {
    const auto n = static_cast<std::size_t>(to);
    if (now_ >= ready_at_[n]) {
      ready_at_[n] = now_;
      binding_[n] = from;
    }
    if (--remaining_[n] > 0) return;
    if (g_.is_transfer(to)) {
      issue(to);
    } else {
      try_start(g_.device[n]);
    }
  }

  void release_successors(std::int32_t node) {
    const auto n = static_cast<std::size_t>(node);
    for (auto k = g_.succ_begin[n]; k < g_.succ_begin[n + 1]; ++k)
      release(node, g_.succ[static_cast<std::size_t>(k)]);
  }

  void finish_compute(std::int32_t node) {
    const auto n = static_cast<std::size_t>(node);
    const auto d = g_.device[n];
    const auto dev = static_cast<std::size_t>(d);
    busy_[dev] = false;
    free_at_[dev] = now_;
    stream_binding_[dev] = node;
    ++next_[dev];
    ++finished_;
    result_.end[n] = now_;
    memory_[dev] -= g_.free_bytes[n];
    record_memory(d);
    // A blocking send holds the stream from its producer's end (the runtime posts it then and
    // waits), also while the transfer itself still waits for the receiver. (An edge from an op
    // to a transfer another device sends is that receiver's posting, not a send.)
    for (auto k = g_.succ_begin[n]; blocking_ && k < g_.succ_begin[n + 1]; ++k) {
      const auto s = g_.succ[static_cast<std::size_t>(k)];
      if (g_.is_transfer(s) && g_.device[static_cast<std::size_t>(s)] == d &&
          blocks_stream(transfer(s)))
        ++pending_sends_[dev];
    }
    release_successors(node);
    try_start(d);
  }

  // Communication of a device, per class: the union of the transfers it sends or receives,
  // kept as sorted disjoint intervals while the simulation runs. The sync is not traffic.
  void communicating_in(std::size_t c, std::int32_t d, int delta) {
    changing_speed(static_cast<std::size_t>(d), [&](std::size_t dev) {
      if (delta > 0 && in_flight_[c][dev]++ == 0) comm_since_[c][dev] = now_;
      if (delta < 0 && --in_flight_[c][dev] == 0 && now_ > comm_since_[c][dev])
        comm_[c][dev].emplace_back(comm_since_[c][dev], now_);
    });
  }
  // A reload from host memory starting (delta 1) or ending on device d.
  void reloading(std::int32_t d, int delta) {
    changing_speed(static_cast<std::size_t>(d), [&](std::size_t dev) { reloads_[dev] += delta; });
  }
  // Applies `change` to what slows device dev's compute: its running op's work so far is
  // counted at the old speed, and its end is rescheduled where the speed changed.
  template <class Change>
  void changing_speed(std::size_t dev, const Change& change) {
    const double before = slowdown(dev);
    const bool busy = slowing() && computing_[dev];
    if (busy) progress(dev);
    change(dev);
    if (busy && slowdown(dev) != before) schedule_compute_end(dev);
  }
  void communicating(std::size_t t, std::int32_t sender, int delta) {
    // Copies to and from host memory run on the copy engines: no SMs taken, no network; a
    // reload still slows the compute beside it (h2d_slowdown).
    if (g_.kind[t] == TransferKind::HostReload && g_.h2d_slowdown > 0.0) reloading(sender, delta);
    if (g_.kind[t] == TransferKind::Sync || is_host_copy(g_.kind[t])) return;
    const auto c = is_pipeline(g_.kind[t]) ? kPipelineComm : kCollectiveComm;
    communicating_in(c, sender, delta);
    if (g_.receiver[t] != sender) communicating_in(c, g_.receiver[t], delta);
  }

  // A transfer's inputs are in: it is issued now and starts moving data after its latency.

  // Activation offload's memory: a reload allocates its bytes on the device as it is issued, an
  // offload holds them in host memory from then on; each is freed where the other copy ends.
  void host_copy(std::size_t t, std::int32_t d, bool issued) {
    const auto dev = static_cast<std::size_t>(d);
    const bool offload = g_.kind[t] == TransferKind::HostOffload;
    if (offload == issued) {
      host_[dev] += issued ? g_.bytes[t] : -g_.bytes[t];
      auto& peak = result_.devices[dev].peak_host_bytes;
      peak = std::max(peak, host_[dev]);
    } else {
      memory_[dev] += issued ? g_.bytes[t] : -g_.bytes[t];
      record_memory(d);
    }
  }

  void issue(std::int32_t node) {
    const auto t = transfer(node);
    result_.start[static_cast<std::size_t>(node)] = now_;
    if (is_host_copy(g_.kind[t]) && !in_pass(t))
      host_copy(t, g_.device[static_cast<std::size_t>(node)], true);
    communicating(t, g_.device[static_cast<std::size_t>(node)], +1);
    if (g_.latency_s[t] > 0.0) {
      push(now_ + g_.latency_s[t], EventType::LatencyDone, node);
    } else {
      start_data(node);
    }
  }

  // The links' load (Σ rates) changes now; the peak counts only loads that lasted.
  void set_load(std::size_t link, double load) {
    if (now_ > load_since_[link]) peak_load_[link] = std::max(peak_load_[link], load_[link]);
    load_[link] = load;
    load_since_[link] = now_;
  }

  void start_data(std::int32_t node) {
    const auto t = transfer(node);
    if (route(t).empty()) {  // a synchronisation: its latency was all of it
      finish_transfer(node);
      return;
    }
    for (const auto l : route(t)) {
      const auto link = static_cast<std::size_t>(l);
      if (active_on_[link]++ == 0) busy_since_[link] = now_;
    }
    left_[t] = g_.bytes[t];
    updated_[t] = now_;
    if (!options_.contention) {
      double bottleneck = kInf;
      for (const auto l : route(t))
        bottleneck = std::min(bottleneck, net_.links()[static_cast<std::size_t>(l)].bandwidth);
      bottleneck = std::min(bottleneck, rate_cap(t));
      rate_[t] = bottleneck;
      for (const auto l : route(t))
        set_load(static_cast<std::size_t>(l), load_[static_cast<std::size_t>(l)] + bottleneck);
      push(now_ + (g_.bytes[t] > 0.0 ? g_.bytes[t] / bottleneck : 0.0), EventType::FlowDone, node,
           version_[t]);
      return;
    }
    const auto first = static_cast<std::size_t>(g_.route_begin[t]);
    for (std::size_t k = 0; k < route(t).size(); ++k) {
      auto& flows = flows_on_[static_cast<std::size_t>(route(t)[k])];
      position_[first + k] = static_cast<std::int32_t>(flows.size());
      flows.push_back(static_cast<std::int32_t>(t));
    }
    rate_[t] = 0.0;
    reshare(route(t), static_cast<std::int32_t>(t));
  }

  // Removes transfer t from the flow lists of its links in O(route length) each: the last flow
  // of a list takes its place.
  void remove_flow(std::size_t t) {
    const auto first = static_cast<std::size_t>(g_.route_begin[t]);
    for (std::size_t k = 0; k < route(t).size(); ++k) {
      const auto link = route(t)[k];
      auto& flows = flows_on_[static_cast<std::size_t>(link)];
      const auto at = static_cast<std::size_t>(position_[first + k]);
      const auto moved = static_cast<std::size_t>(flows.back());
      flows[at] = flows.back();
      flows.pop_back();
      if (moved == t) continue;
      const auto moved_route = route(moved);
      const auto j = static_cast<std::size_t>(
          std::find(moved_route.begin(), moved_route.end(), link) - moved_route.begin());
      position_[static_cast<std::size_t>(g_.route_begin[moved]) + j] =
          static_cast<std::int32_t>(at);
    }
  }

  void finish_transfer(std::int32_t node) {
    const auto t = transfer(node);
    result_.end[static_cast<std::size_t>(node)] = now_;
    if (is_host_copy(g_.kind[t]) && !in_pass(t))
      host_copy(t, g_.device[static_cast<std::size_t>(node)], false);
    communicating(t, g_.device[static_cast<std::size_t>(node)], -1);
    ++version_[t];  // no later completion event of this transfer counts
    for (const auto l : route(t)) {
      const auto link = static_cast<std::size_t>(l);
      result_.links[link].bytes += g_.bytes[t];
      if (--active_on_[link] == 0) result_.links[link].busy_s += now_ - busy_since_[link];
      if (!options_.contention)
        set_load(link, active_on_[link] == 0 ? 0.0 : load_[link] - rate_[t]);
    }
    if (options_.contention) {
      remove_flow(t);
      reshare(route(t), -1);
    }
    if (!transfer_done_.empty()) {
      transfer_done_[t] = 1;
      // The op that waits for it goes on.
      const auto dev = static_cast<std::size_t>(g_.device[static_cast<std::size_t>(node)]);
      if (waiting_[dev] == node) {
        waiting_[dev] = -1;
        const auto op = static_cast<std::size_t>(running_[dev]);
        waited_[op] += now_ - wait_since_[dev];
        if (g_.kind[t] == TransferKind::ExpertAllToAll)
          waited_expert_[op] += now_ - wait_since_[dev];
        if (g_.kind[t] == TransferKind::FsdpAllGather ||
            g_.kind[t] == TransferKind::FsdpReduceScatter)
          waited_fsdp_[op] += now_ - wait_since_[dev];
        if (is_host_copy(g_.kind[t])) waited_host_[op] += now_ - wait_since_[dev];
        ++step_[dev];
        run_steps(dev);
      }
    }
    if (blocks_stream(t)) {
      const auto d = g_.device[static_cast<std::size_t>(node)];
      if (--pending_sends_[static_cast<std::size_t>(d)] == 0) {
        free_at_[static_cast<std::size_t>(d)] = now_;
        stream_binding_[static_cast<std::size_t>(d)] = node;
        try_start(d);
      }
    }
    release_successors(node);
  }

  // A flow alone in its component runs at its route's smallest bandwidth (the common case:
  // the water-filling below gives the same, with more work).
  void fill_one(std::size_t flow) {
    double rate = rate_cap(flow);
    for (const auto l : route(flow))
      rate = std::min(rate, capacity_[static_cast<std::size_t>(l)]);
    if (rate == kInf) return;
    frozen_[flow] = true;
    new_rate_[flow] = rate;
    for (const auto l : route(flow))
      capacity_[static_cast<std::size_t>(l)] -= rate;
  }

  void fill() {
    // Progressive filling: the link with the smallest fair share is the next bottleneck; its
    // unfrozen flows get that share. Freezing a flow at the smallest share can only raise the
    // shares of its other links, so a heap with stale entries skipped finds each bottleneck. A
    // flow with a rate cap is a bottleneck of its own at its cap (entry −1 − flow), as a private
    // link of that capacity would be (SimGrid's flow bound).
    shares_.clear();
    for (const auto l : component_links_) {
      const auto link = static_cast<std::size_t>(l);
      if (count_[link] > 0) shares_.push_back({capacity_[link] / count_[link], l});
    }
    for (const auto f : component_flows_) {
      const double cap = rate_cap(static_cast<std::size_t>(f));
      if (cap < kInf) shares_.push_back({cap, -1 - f});
    }
    std::make_heap(shares_.begin(), shares_.end(), std::greater<>{});
    while (!shares_.empty()) {
      std::pop_heap(shares_.begin(), shares_.end(), std::greater<>{});
      const auto [share, bottleneck] = shares_.back();
      shares_.pop_back();
      if (bottleneck < 0) {
        const auto flow = static_cast<std::size_t>(-1 - bottleneck);
        if (!frozen_[flow]) freeze(flow, share, -1);
        continue;
      }
      const auto b = static_cast<std::size_t>(bottleneck);
      if (count_[b] == 0 || share != capacity_[b] / count_[b]) continue;  // stale
      for (const auto f : flows_on_[b]) {
        const auto flow = static_cast<std::size_t>(f);
        if (!frozen_[flow]) freeze(flow, share, bottleneck);
      }
    }
  }

  // Fixes a flow's rate and takes it out of its links' shares.
  void freeze(std::size_t flow, double rate, std::int32_t bottleneck) {
    frozen_[flow] = true;
    new_rate_[flow] = rate;
    for (const auto l2 : route(flow)) {
      const auto link = static_cast<std::size_t>(l2);
      capacity_[link] -= rate;
      --count_[link];
      if (l2 != bottleneck && count_[link] > 0) {
        shares_.push_back({capacity_[link] / count_[link], l2});
        std::push_heap(shares_.begin(), shares_.end(), std::greater<>{});
      }
    }
  }

  // Max-min fair rates (progressive filling) for the transfers connected through shared links
  // to `seeds`; transfers whose rate changes get a new completion time.
  void reshare(std::span<const std::int32_t> seeds, std::int32_t started) {
    ++epoch_;
    component_links_.clear();
    component_flows_.clear();
    stack_.clear();
    for (const auto l : seeds) {
      if (link_mark_[static_cast<std::size_t>(l)] != epoch_) {
        link_mark_[static_cast<std::size_t>(l)] = epoch_;
        stack_.push_back(l);
      }
    }
    while (!stack_.empty()) {
      const auto l = static_cast<std::size_t>(stack_.back());
      stack_.pop_back();
      component_links_.push_back(static_cast<std::int32_t>(l));
      for (const auto f : flows_on_[l]) {
        if (flow_mark_[static_cast<std::size_t>(f)] == epoch_) continue;
        flow_mark_[static_cast<std::size_t>(f)] = epoch_;
        component_flows_.push_back(f);
        for (const auto l2 : route(static_cast<std::size_t>(f))) {
          if (link_mark_[static_cast<std::size_t>(l2)] != epoch_) {
            link_mark_[static_cast<std::size_t>(l2)] = epoch_;
            stack_.push_back(l2);
          }
        }
      }
    }
    for (const auto l : component_links_) {
      const auto link = static_cast<std::size_t>(l);
      capacity_[link] = net_.links()[link].bandwidth;
      count_[link] = static_cast<std::int32_t>(flows_on_[link].size());
    }
    for (const auto f : component_flows_)
      frozen_[static_cast<std::size_t>(f)] = false;
    if (component_flows_.size() == 1) {
      fill_one(static_cast<std::size_t>(component_flows_.front()));
    } else {
      fill();
    }
    for (const auto l : component_links_) {
      const auto link = static_cast<std::size_t>(l);
      const double bandwidth = net_.links()[link].bandwidth;
      if (std::isfinite(bandwidth)) set_load(link, bandwidth - capacity_[link]);
    }
    for (const auto f : component_flows_) {
      const auto flow = static_cast<std::size_t>(f);
      const double rate = frozen_[flow] ? new_rate_[flow] : kInf;
      if (rate == rate_[flow] && f != started) continue;
      if (rate_[flow] > 0.0)
        left_[flow] = std::max(0.0, left_[flow] - rate_[flow] * (now_ - updated_[flow]));
      updated_[flow] = now_;
      rate_[flow] = rate;
      ++version_[flow];
      const double eta = left_[flow] > 0.0 ? left_[flow] / rate : 0.0;
      push(now_ + eta, EventType::FlowDone,
           static_cast<std::int32_t>(flow + static_cast<std::size_t>(g_.compute_nodes)),
           version_[flow]);
    }
  }

  // Every compute node must have run; otherwise the waits of the graph form a cycle.
  void require_finished() const {
    if (finished_ == g_.compute_nodes) return;
    std::string stuck;
    std::vector<DeadlockError::Stuck> where;
    for (std::int32_t d = 0; d < g_.devices; ++d) {
      const auto dev = static_cast<std::size_t>(d);
      if (next_[dev] == g_.stream_begin[dev + 1]) continue;
      const auto node = g_.stream[static_cast<std::size_t>(next_[dev])];
      where.push_back({d, node, next_[dev] - g_.stream_begin[dev] + 1,
                       g_.stream_begin[dev + 1] - g_.stream_begin[dev]});
      stuck +=
          fmt::format("{}device {} before its {} (node {}, position {} of {})",
                      stuck.empty() ? "" : "; ", d, g_.is_table_op(node) ? "op" : "optimizer step",
                      node, where.back().position, where.back().count);
    }
    throw DeadlockError(
        fmt::format("the simulation deadlocks: {} of {} ops ran; stuck: {} (the runtime's waits on "
                    "transfers make this order impossible)",
                    finished_, g_.compute_nodes, stuck),
        finished_, g_.compute_nodes, std::move(where));
  }

  void summarize() {
    auto& r = result_;
    for (std::size_t l = 0; l < r.links.size(); ++l) {
      const double bandwidth = net_.links()[l].bandwidth;
      if (std::isfinite(bandwidth) && bandwidth > 0.0)
        r.links[l].max_utilization = peak_load_[l] / bandwidth;
    }
    for (std::int64_t n = 0; n < g_.nodes(); ++n)
      r.runtime_s = std::max(r.runtime_s, r.end[static_cast<std::size_t>(n)]);
    // Per device: compute intervals (its stream, in order, disjoint) against its communication
    // intervals; exposed communication is communication while not computing.
    for (std::int64_t n = 0; n < g_.table_ops; ++n)
      r.pipeline_end_s = std::max(r.pipeline_end_s, r.end[static_cast<std::size_t>(n)]);
    const auto devices = static_cast<std::size_t>(g_.devices);
    double busy = 0.0, longest_span = 0.0, span_busy = 0.0;
    Intervals computing;
    for (std::size_t d = 0; d < devices; ++d) {
      computing.clear();
      auto& dev = r.devices[d];
      // The device's stream: its table ops, then (last) its optimizer step.
      std::size_t table_ops = 0;
      double fsdp_waits = 0.0;
      for (auto k = g_.stream_begin[d]; k < g_.stream_begin[d + 1]; ++k) {
        const auto n = static_cast<std::size_t>(g_.stream[static_cast<std::size_t>(k)]);
        computing.emplace_back(r.start[n], r.end[n]);
        if (g_.compute_kind[n] == ComputeKind::TableOp) {
          ++table_ops;
          // An op's waits for its inner transfers are its exposed exchanges (all-to-alls and
          // context-parallel exchanges), or its exposed FSDP collectives, counted with the
          // graph's: not compute. Its waits for copies from host memory are its own stall
          // (compute time, as a closed form counts it).
          const double waited = waited_.empty() ? 0.0 : waited_[n];
          const double fsdp = waited_fsdp_.empty() ? 0.0 : waited_fsdp_[n];
          const double host = waited_host_.empty() ? 0.0 : waited_host_[n];
          dev.tp_comm_s += g_.tp_comm_s[n] + waited - fsdp - host;
          fsdp_waits += fsdp;
          if (n < g_.expert_comm_s.size())
            dev.expert_comm_s += g_.expert_comm_s[n] + (waited_.empty() ? 0.0 : waited_expert_[n]);
          if (n < g_.overhead_s.size()) dev.overhead_s += g_.overhead_s[n];
          dev.interference_s += std::max(0.0, r.end[n] - r.start[n] - g_.duration[n] - waited);
        } else {
          dev.optimizer_s += r.end[n] - r.start[n];
        }
      }
      dev.compute_s = length(computing) - dev.optimizer_s - fsdp_waits;
      const auto& pipeline = comm_[kPipelineComm][d];
      const auto& collective = comm_[kCollectiveComm][d];
      dev.exposed_pipeline_s = length(pipeline) - overlap(pipeline, computing);
      dev.exposed_collective_s =
          collective.empty() ? 0.0
                             : length(collective) - overlap(collective, unite(computing, pipeline));
      dev.exposed_collective_s += fsdp_waits;
      dev.exposed_comm_s = dev.exposed_pipeline_s + dev.exposed_collective_s;
      dev.idle_s =
          std::max(0.0, r.runtime_s - dev.compute_s - dev.optimizer_s - dev.exposed_comm_s);
      busy += dev.compute_s + dev.optimizer_s;
      span_busy += dev.compute_s;
      if (table_ops > 0) {
        longest_span =
            std::max(longest_span, computing[table_ops - 1].second - computing.front().first);
      }
    }
    r.idle_ratio =
        r.runtime_s > 0.0 ? 1.0 - busy / (static_cast<double>(devices) * r.runtime_s) : 0.0;
    r.span_idle_ratio =
        longest_span > 0.0 ? 1.0 - span_busy / (static_cast<double>(devices) * longest_span) : 0.0;
    // The critical path: from the node that ends last, back through what held each one up.
    std::int32_t node = -1;
    for (std::int64_t n = 0; n < g_.nodes(); ++n) {
      if (node < 0 || r.end[static_cast<std::size_t>(n)] > r.end[static_cast<std::size_t>(node)]) {
        node = static_cast<std::int32_t>(n);
      }
    }
    for (; node >= 0; node = binding_[static_cast<std::size_t>(node)])
      r.critical_path.push_back(node);
    std::reverse(r.critical_path.begin(), r.critical_path.end());
  }

  const ExecGraph& g_;
  const Network& net_;
  const SimOptions options_;
  SimResult result_;
  EventQueue queue_;
  std::uint64_t seq_ = 0;
  double now_ = 0.0;

  // Nodes.
  std::vector<std::int32_t> remaining_;
  std::vector<double> ready_at_;
  std::vector<std::int32_t> binding_;
  // Devices.
  std::vector<std::int64_t> next_;
  std::vector<bool> busy_;
  std::vector<double> free_at_;
  std::vector<std::int32_t> pending_sends_;
  std::vector<std::int32_t> stream_binding_;
  // Compute slowed by communication: the node running, its work left (seconds at full speed)
  // since when, and the version of its completion event.
  std::vector<std::int32_t> running_;
  std::vector<double> work_left_, work_since_;
  // Ops with steps: whether the device computes now (not waiting), its op's current step, the
  // transfer it waits for (-1: none) since when; per op, the time it waited; per transfer,
  // whether it has finished.
  std::vector<bool> computing_;
  std::vector<std::int64_t> step_;
  std::vector<std::int32_t> waiting_;
  std::vector<double> wait_since_;
  // Per op: its waits for inner transfers, of which on expert all-to-alls, on FSDP's per-block
  // collectives and on copies to and from host memory.
  std::vector<double> waited_, waited_expert_, waited_fsdp_, waited_host_;
  std::vector<std::uint8_t> transfer_done_;
  std::vector<std::uint32_t> compute_version_;
  std::vector<double> memory_;
  std::vector<double> host_;           // activation offload: bytes in host memory, per device
  std::vector<std::int32_t> reloads_;  // activation offload: reloads running, per device
  std::array<std::vector<std::int32_t>, 2> in_flight_;  // per communication class, per device
  std::array<std::vector<double>, 2> comm_since_;
  std::array<std::vector<Intervals>, 2> comm_;
  std::int64_t finished_ = 0;  // compute nodes run
  bool blocking_ = false;      // some transfer holds its sender's stream
  // Transfers.
  std::vector<double> rate_, left_, updated_;
  std::vector<std::uint32_t> version_;
  std::vector<std::uint32_t> flow_mark_;
  std::vector<bool> frozen_;
  std::vector<double> new_rate_;
  // Links.
  std::vector<std::vector<std::int32_t>> flows_on_;
  std::vector<std::int32_t> active_on_;
  std::vector<double> busy_since_;
  std::vector<std::uint32_t> link_mark_;
  std::vector<double> capacity_;
  std::vector<std::int32_t> count_;
  std::vector<double> load_, load_since_, peak_load_;  // Σ rates, since when, largest lasting
  // Per route entry of a transfer: its index in that link's flow list.
  std::vector<std::int32_t> position_;
  // Water-filling scratch.
  std::uint32_t epoch_ = 0;
  std::vector<std::int32_t> component_links_, component_flows_, stack_;
  std::vector<std::pair<double, std::int32_t>> shares_;  // min-heap of (fair share, link)
};

}  // namespace

SimResult simulate(const ExecGraph& graph, const Network& network, const SimOptions& options) {
  return Engine(graph, network, options).run();
}

}  // namespace pipetab
