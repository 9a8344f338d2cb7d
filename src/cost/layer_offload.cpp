#include "pipetab/cost/layer_offload.hpp"

#include <algorithm>
#include <string_view>
#include <vector>

#include "pipetab/cost/stage_cost.hpp"
#include "pipetab/model/operators.hpp"

namespace pipetab::cost {

PassOffload layer_offload(std::int64_t layers, std::int64_t offloaded, double layer_bytes,
                          double forward_s, double backward_s, double bandwidth, double latency_s) {
  PassOffload out;
  const std::int64_t n =
      std::clamp<std::int64_t>(offloaded, 0, std::max<std::int64_t>(0, layers - 1));
  if (n == 0 || !(bandwidth > 0.0)) return out;
  out.layers = n;
  out.bytes = out.host_bytes = static_cast<double>(n) * layer_bytes;
  out.forward_window_bytes = out.backward_window_bytes =
      static_cast<double>(std::min<std::int64_t>(2, n)) * layer_bytes;
  const double copy = latency_s + layer_bytes / bandwidth;
  out.reload_busy_s = static_cast<double>(n) * copy;
  const double tf = forward_s / static_cast<double>(layers);
  const double tb = backward_s / static_cast<double>(layers);
  // Forward, layer j = 1..L: copy j leaves when layer j ends and the copy before it is done;
  // layer j + 1 starts once copy j − 1 is done (two buffers).
  std::vector<double> done(static_cast<std::size_t>(n) + 1, 0.0);
  double end = 0.0, stream = 0.0;
  for (std::int64_t j = 1; j <= layers; ++j) {
    double start = end;
    if (j >= 3 && j - 2 <= n) start = std::max(start, done[static_cast<std::size_t>(j - 2)]);
    end = start + tf;
    if (j <= n) {
      stream = std::max(end, stream) + copy;
      done[static_cast<std::size_t>(j)] = stream;
    }
  }
  out.forward_stall_s = std::max(0.0, end - forward_s);
  // Backward, layer i = L..1, starting as the forward ends: reload i is issued as layer i + 1's
  // backward starts, after reload i + 1 (one stream) and after copy i left (the last copy out
  // may still be moving); layer i's backward waits for it.
  double t = 0.0, reload = 0.0, next_start = 0.0;
  for (std::int64_t i = layers; i >= 1; --i) {
    double start = t;
    if (i <= n) {
      const double out_done = done[static_cast<std::size_t>(i)] - end;
      reload = std::max({next_start, reload, out_done}) + copy;
      start = std::max(start, reload);
    }
    next_start = start;
    t = start + tb;
  }
  out.backward_stall_s = std::max(0.0, t - backward_s);
  return out;
}

namespace {

// Whether `name` is a backward operator of the forward operator `forward`: "qkv.input_grad",
// "qkv.weight_grad", "qkv.quantize_grad" and "layernorm1.backward" are qkv's and layernorm1's.
bool backward_of(std::string_view name, std::string_view forward) {
  return name.size() > forward.size() && name.starts_with(forward) && name[forward.size()] == '.';
}

bool in_group(std::string_view name, const OffloadGroup& g) {
  return std::any_of(g.operators.begin(), g.operators.end(),
                     [&](std::string_view f) { return backward_of(name, f); });
}

}  // namespace

LayerOffloadTiming offload_timing(const PassOperators& ops, std::span<const OffloadGroup> groups,
                                  const Workload& run, const SystemConfig& system,
                                  bool exchanges_as_flows) {
  LayerOffloadTiming out;
  const auto seconds = [&](const Operator& op) {
    return exchanges_as_flows && runs_as_flow(op) ? 0.0 : operator_cost(op, run, system).seconds;
  };
  out.groups.resize(groups.size());
  std::vector<bool> seen(groups.size(), false);
  for (const Operator& op : ops.forward) {
    out.forward_s += seconds(op);
    for (std::size_t g = 0; g < groups.size(); ++g) {
      const auto& names = groups[g].operators;
      if (std::find(names.begin(), names.end(), op.name) != names.end())
        out.groups[g].forward_end_s = out.forward_s;
    }
  }
  // The whole backward: each input gradient followed by the weight gradients of its operator.
  std::vector<bool> placed(ops.weight_grad.size(), false);
  auto run_op = [&](const Operator& op) {
    const double start = out.backward_s;
    out.backward_s += seconds(op);
    for (std::size_t g = 0; g < groups.size(); ++g) {
      if (!in_group(op.name, groups[g])) continue;
      if (!seen[g]) out.groups[g].backward_start_s = start;
      seen[g] = true;
      out.groups[g].backward_end_s = out.backward_s;
    }
  };
  for (const Operator& op : ops.input_grad) {
    run_op(op);
    const std::string_view name = op.name;
    const auto dot = name.rfind(".input_grad");
    if (dot == std::string_view::npos) continue;
    for (std::size_t w = 0; w < ops.weight_grad.size(); ++w) {
      if (!placed[w] && backward_of(ops.weight_grad[w].name, name.substr(0, dot))) {
        placed[w] = true;
        run_op(ops.weight_grad[w]);
      }
    }
  }
  for (std::size_t w = 0; w < ops.weight_grad.size(); ++w)
    if (!placed[w]) run_op(ops.weight_grad[w]);
  for (std::size_t g = 0; g < groups.size(); ++g) {
    out.groups[g].copied = groups[g].copied_bytes;
    out.groups[g].freed = groups[g].freed_bytes;
    // A group none of whose operators the layer runs (none should be) waits at the backward's end.
    if (!seen[g]) out.groups[g].backward_start_s = out.groups[g].backward_end_s = out.backward_s;
  }
  return out;
}

PassOffload module_offload(std::span<const LayerOffloadTiming* const> layers, double bandwidth,
                           double latency_s) {
  PassOffload out;
  if (!(bandwidth > 0.0)) return out;
  struct Copy {
    double copied, freed, done;
  };
  std::vector<Copy> copies;
  // Forward: each group's copy leaves as its forward ends, after the one before it on the
  // stream; the forward does not wait. Its bytes stay on the device until the copy is done.
  double base = 0.0, stream = 0.0, issued = 0.0, released = 0.0;
  std::size_t done = 0;
  auto resident_at = [&](double t) {
    while (done < copies.size() && copies[done].done <= t)
      released += copies[done++].freed;
    out.forward_window_bytes = std::max(out.forward_window_bytes, issued - released);
  };
  for (const LayerOffloadTiming* layer : layers) {
    for (const OffloadGroupTiming& g : layer->groups) {
      const double end = base + g.forward_end_s;
      stream = std::max(stream, end) + latency_s + g.copied / bandwidth;
      copies.push_back({g.copied, g.freed, stream});
      out.bytes += g.freed;
      out.host_bytes += g.copied;
      issued += g.freed;
      resident_at(end);
    }
    base += layer->forward_s;
  }
  resident_at(base);
  const double forward_end = base;
  // Backward: the groups in reverse; the first is on the device already, each other's copy back
  // is issued as the group after it (in forward order) ends its backward, after the copy back
  // before it and its own copy out; its backward waits for it.
  double stall = 0.0, reload = 0.0, previous_end = 0.0;
  base = 0.0;
  std::size_t k = copies.size();
  for (auto layer = layers.rbegin(); layer != layers.rend(); ++layer) {
    const auto& groups = (*layer)->groups;
    for (auto g = groups.rbegin(); g != groups.rend(); ++g) {
      --k;
      out.reload_busy_s += latency_s + g->copied / bandwidth;
      if (k + 1 < copies.size()) {
        reload = std::max({reload, previous_end, copies[k].done - forward_end}) + latency_s +
                 g->copied / bandwidth;
        stall += std::max(0.0, reload - (base + g->backward_start_s + stall));
        out.backward_window_bytes =
            std::max(out.backward_window_bytes, g->copied + copies[k + 1].copied);
      } else {
        out.backward_window_bytes = std::max(out.backward_window_bytes, g->copied);
      }
      previous_end = base + g->backward_end_s + stall;
    }
    base += (*layer)->backward_s;
  }
  out.backward_stall_s = stall;
  return out;
}

PassCopies layer_copies(std::int64_t layers, std::int64_t offloaded, double layer_bytes,
                        double forward_s, double backward_s) {
  PassCopies out;
  const std::int64_t n =
      std::clamp<std::int64_t>(offloaded, 0, std::max<std::int64_t>(0, layers - 1));
  if (n == 0) return out;
  const double tf = forward_s / static_cast<double>(layers);
  const double tb = backward_s / static_cast<double>(layers);
  for (std::int64_t j = 1; j <= n; ++j) {
    const auto at = static_cast<double>(j);
    out.forward.push_back({layer_bytes, at * tf, j + 2 <= layers ? (at + 1) * tf : -1.0, -1});
  }
  // Layer i's backward starts after layers L .. i + 1's.
  for (std::int64_t i = n; i >= 1; --i) {
    const auto before = static_cast<double>(layers - i);
    out.backward.push_back(
        {layer_bytes, (before - 1) * tb, before * tb, static_cast<std::int32_t>(i - 1)});
  }
  return out;
}

PassCopies module_copies(std::span<const LayerOffloadTiming* const> layers,
                         double backward_lead_s) {
  PassCopies out;
  double base = 0.0;
  for (const LayerOffloadTiming* layer : layers) {
    for (const OffloadGroupTiming& g : layer->groups)
      out.forward.push_back({g.copied, base + g.forward_end_s, -1.0, -1});
    base += layer->forward_s;
  }
  base = backward_lead_s;
  double previous_end = backward_lead_s;
  auto k = static_cast<std::int32_t>(out.forward.size());
  for (auto layer = layers.rbegin(); layer != layers.rend(); ++layer) {
    const auto& groups = (*layer)->groups;
    for (auto g = groups.rbegin(); g != groups.rend(); ++g) {
      --k;
      if (k + 1 < static_cast<std::int32_t>(out.forward.size()))
        out.backward.push_back({g->copied, previous_end, base + g->backward_start_s, k});
      previous_end = base + g->backward_end_s;
    }
    base += (*layer)->backward_s;
  }
  return out;
}

}  // namespace pipetab::cost
