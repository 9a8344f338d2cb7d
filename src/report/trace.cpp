#include "pipetab/report/trace.hpp"

#include <algorithm>

#include <fmt/format.h>

namespace pipetab {
namespace {

constexpr double kMicro = 1e6;

// A short label of a compute op: "F3", "B0", "F3&B1".
std::string op_label(const Op& op) {
  std::string label;
  for (const Pass& p : op.passes()) {
    if (!label.empty()) label += '&';
    label += fmt::format("{}{}", kind_letter(p.kind), p.microbatch);
  }
  return label;
}

// JSON string contents needing no escapes: labels and names are ASCII without quotes.
class TraceWriter {
 public:
  explicit TraceWriter(std::string& out) : out_(out) {}
  template <class... Args>
  void event(fmt::format_string<Args...> format, Args&&... args) {
    out_ += first_ ? "\n" : ",\n";
    first_ = false;
    fmt::format_to(std::back_inserter(out_), format, std::forward<Args>(args)...);
  }

 private:
  std::string& out_;
  bool first_ = true;
};

}  // namespace

std::string chrome_trace(const ScheduleTable& table, const Simulation& sim) {
  const auto& g = sim.graph;
  const auto& r = sim.result;
  const auto& links = sim.network.links();
  const std::int32_t network_pid = g.devices;
  std::string out = "{\"displayTimeUnit\":\"ms\",\"traceEvents\":[";
  out.reserve(static_cast<std::size_t>(g.nodes()) * 160);
  TraceWriter w(out);
  for (std::int32_t d = 0; d < g.devices; ++d) {
    w.event(R"({{"ph":"M","name":"process_name","pid":{},"args":{{"name":"device {}"}}}})", d, d);
    w.event(R"({{"ph":"M","name":"process_sort_index","pid":{},"args":{{"sort_index":{}}}}})", d,
            d);
    w.event(R"({{"ph":"M","name":"thread_name","pid":{},"tid":0,"args":{{"name":"compute"}}}})", d);
  }
  w.event(R"({{"ph":"M","name":"process_name","pid":{},"args":{{"name":"network"}}}})",
          network_pid);
  w.event(R"({{"ph":"M","name":"process_sort_index","pid":{},"args":{{"sort_index":{}}}}})",
          network_pid, network_pid);

  for (std::int64_t n = 0; n < g.compute_nodes; ++n) {
    const auto i = static_cast<std::size_t>(n);
    if (!g.is_table_op(n)) {
      w.event(
          R"({{"ph":"X","name":"optimizer step","cat":"optimizer","pid":{},"tid":0,"ts":{},"dur":{}}})",
          g.device[i], r.start[i] * kMicro, (r.end[i] - r.start[i]) * kMicro);
      continue;
    }
    const Op& op = table.ops[i];
    w.event(
        R"({{"ph":"X","name":"{}","cat":"{}","pid":{},"tid":0,"ts":{},"dur":{},"args":{{"op":"{}","tp_comm_s":{}}}}})",
        op_label(op), kind_letter(op.first().kind), g.device[i], r.start[i] * kMicro,
        (r.end[i] - r.start[i]) * kMicro, to_string(op), g.tp_comm_s[i]);
  }

  // Transfers: on the sender's communication track, on every link of the route, and (pipeline
  // transfers) as a flow arrow from the producing op to the consuming op.
  for (std::int64_t n = g.compute_nodes; n < g.nodes(); ++n) {
    const auto i = static_cast<std::size_t>(n);
    const auto t = static_cast<std::size_t>(n - g.compute_nodes);
    const char* name = to_string(g.kind[t]);
    const auto to = g.receiver[t];
    w.event(
        R"({{"ph":"b","name":"send","cat":"{}","id":{},"pid":{},"tid":1,"ts":{},"args":{{"to":{},"stage":{},"bytes":{}}}}})",
        name, n, g.device[i], r.start[i] * kMicro, to, g.stage[t], g.bytes[t]);
    w.event(R"({{"ph":"e","name":"send","cat":"{}","id":{},"pid":{},"tid":1,"ts":{}}})", name, n,
            g.device[i], r.end[i] * kMicro);
    for (auto k = g.route_begin[t]; k < g.route_begin[t + 1]; ++k) {
      const auto link = g.route[static_cast<std::size_t>(k)];
      const auto id = fmt::format("{}.{}", n, link);
      w.event(
          R"({{"ph":"b","name":"{}","cat":"link","id2":{{"local":"{}"}},"pid":{},"tid":{},"ts":{},"args":{{"transfer":"{} {}->{}","bytes":{}}}}})",
          links[static_cast<std::size_t>(link)].name, id, network_pid, link, r.start[i] * kMicro,
          name, g.device[i], to, g.bytes[t]);
      w.event(
          R"({{"ph":"e","name":"{}","cat":"link","id2":{{"local":"{}"}},"pid":{},"tid":{},"ts":{}}})",
          links[static_cast<std::size_t>(link)].name, id, network_pid, link, r.end[i] * kMicro);
    }
  }
  for (std::int64_t n = 0; n < g.compute_nodes; ++n) {
    const auto i = static_cast<std::size_t>(n);
    for (auto k = g.succ_begin[i]; k < g.succ_begin[i + 1]; ++k) {
      const auto transfer = g.succ[static_cast<std::size_t>(k)];
      const auto t =
          static_cast<std::size_t>(std::max<std::int64_t>(0, transfer - g.compute_nodes));
      if (!g.is_transfer(transfer) || !is_pipeline(g.kind[t])) continue;
      const auto consumer = static_cast<std::size_t>(
          g.succ[static_cast<std::size_t>(g.succ_begin[static_cast<std::size_t>(transfer)])]);
      // The arrow starts inside the producing op (at its middle, so that it binds to that
      // slice) and ends at the slice enclosing the consumer's start.
      const double inside = r.end[i] - 0.5 * (r.end[i] - r.start[i]);
      w.event(R"({{"ph":"s","name":"{}","cat":"flow","id":{},"pid":{},"tid":0,"ts":{}}})",
              to_string(g.kind[t]), transfer, g.device[i], inside * kMicro);
      w.event(R"({{"ph":"f","bp":"e","name":"{}","cat":"flow","id":{},"pid":{},"tid":0,"ts":{}}})",
              to_string(g.kind[t]), transfer, g.device[consumer], r.start[consumer] * kMicro);
    }
  }
  for (std::size_t d = 0; d < r.memory.size(); ++d) {
    for (const auto& point : r.memory[d]) {
      w.event(R"({{"ph":"C","name":"memory","pid":{},"ts":{},"args":{{"GB":{}}}}})", d,
              point.time_s * kMicro, point.bytes / 1e9);
    }
  }
  out += "\n]}\n";
  return out;
}

}  // namespace pipetab
