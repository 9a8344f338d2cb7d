// Activation offload (Job::offload_activations): a forward's activations copied to host memory
// after it, and back before its backward (PipeOffload, Wan et al. 2025, arXiv 2503.01328 §3-4;
// Megatron-Core's fine-grained offload, fine_grained_activation_offload.py, reloads a group's
// tensors before its backward in the same way). The copies are flows over the device's host
// link (Network::host_out, host_in), so a pair of GPUs behind one PCIe switch share it.
#include <algorithm>
#include <array>
#include <cstdint>
#include <vector>

#include "lowering.hpp"
#include <fmt/format.h>

#include "pipetab/cost/layer_offload.hpp"
#include "pipetab/error.hpp"
#include "pipetab/model/offload_groups.hpp"
#include "pipetab/model/operators.hpp"
#include "pipetab/table/memory.hpp"
#include "pipetab/table/offload.hpp"

namespace pipetab::detail {

// The op that runs a table op (a backward merged into the forward before it runs there).
std::int32_t Lowering::runner(std::int32_t op) const {
  if (!merged_into_.empty() && merged_into_[static_cast<std::size_t>(op)] >= 0)
    return merged_into_[static_cast<std::size_t>(op)];
  return op;
}

// What each forward offloads (table/offload.hpp: PipeOffload's selective offload), in bytes of
// its stage's activations, on its compute node (offloaded) and its backward's (reloaded).
void Lowering::offload_plan() {
  plan_ = pipetab::offload_plan(t_, job_.offload_activations);
  if (plan_.empty()) return;
  const auto nodes = static_cast<std::size_t>(g_.compute_nodes);
  g_.offloaded_bytes.assign(nodes, 0.0);
  g_.reloaded_bytes.assign(nodes, 0.0);
  for (std::size_t i = 0; i < t_.ops.size(); ++i) {
    if (!(plan_.out[i] > 0.0)) continue;
    for (const Pass& p : t_.ops[i].passes()) {
      if (p.kind != PassKind::F) continue;
      const double bytes = plan_.out[i] * work(p).activation_bytes;
      g_.offloaded_bytes[i] += bytes;
      g_.reloaded_bytes[static_cast<std::size_t>(backward_op_[key(p.microbatch, p.stage)])] +=
          bytes;
    }
  }
}

// The copies: out once the forward ends (freeing its bytes on the device when done), back once
// the op before the backward starts and the copy out is done (allocated as it is issued); the
// backward waits for it. Issued one op ahead, as the runtimes prefetch (PipeOffload: "as late as
// possible" before the backward; Megatron-Core: on the backward of the group before). Each
// direction is one copy stream per device, in order (PipeOffload's one stream; Megatron-Core's
// d2h_stream and h2d_stream): a copy starts when the one before it on its stream ends.
void Lowering::offload_transfers() {
  if (plan_.empty()) return;
  const double latency = network_.system().host.latency_s;
  // Each copy with the table position it is issued at: out after op i ends (i + 1/2), back as
  // op back_at starts (back_at, before that op's own copy out). A stream runs its copies in
  // that order, device by device (a device's ops are contiguous in the table).
  struct Copy {
    std::int64_t at2;  // twice the position
    bool out;
    std::size_t op;
    auto operator<=>(const Copy&) const = default;
  };
  std::vector<Copy> copies;
  for (std::size_t i = 0; i < t_.ops.size(); ++i) {
    if (!(g_.offloaded_bytes[i] > 0.0)) continue;
    copies.push_back({2 * static_cast<std::int64_t>(i) + 1, true, i});
    copies.push_back({2 * plan_.back_at[i], false, i});
  }
  std::sort(copies.begin(), copies.end());
  std::vector<std::int32_t> out_of(t_.ops.size(), -1);
  const bool one_stream = job_.offload_streams == 1;
  std::int32_t device = -1, last[2] = {-1, -1};
  for (const Copy& c : copies) {
    const auto d = g_.device[c.op];
    if (d != device) {
      device = d;
      last[0] = last[1] = -1;
    }
    const auto kind = c.out ? TransferKind::HostOffload : TransferKind::HostReload;
    const auto copy = add_transfer(kind, t_.ops[c.op].first().stage, d, g_.offloaded_bytes[c.op],
                                   {c.out ? network_.host_out(d) : network_.host_in(d)}, latency);
    auto& before = last[one_stream || c.out ? 0 : 1];
    if (before >= 0) edge(before, copy);
    before = copy;
    if (c.out) {
      out_of[c.op] = copy;
      edge(static_cast<std::int32_t>(c.op), copy);
      continue;
    }
    edge(out_of[c.op], copy);
    // Issued as the op before the backward starts (before the op running it, where the
    // backward was merged into the forward before it); the backward waits for it.
    const auto backward = runner(static_cast<std::int32_t>(plan_.back_at[c.op]) + 1);
    start_edge(backward - 1, copy, 0.0);
    edge(copy, backward);
  }
}

// Offload inside the passes, priced per stage (cost/layer_offload.hpp): Transformer Engine's of
// whole layers (Job::offload_layers) or Megatron-Core's of modules (Job::offload_modules). The
// forward holds the offloaded bytes only while their copies run, the backward those copied back
// and not yet used, and each waits for its copies where they fall behind (the stage's own share
// of its host link; the engine does not move these copies), its compute slowed beside the copies
// back where the host says so (h2d_slowdown).
void Lowering::layer_offload() {
  if (!offloads_in_passes(job_) || options_.costs) return;
  for (const Op& op : t_.ops)
    for (const Pass& p : op.passes())
      if (p.kind == PassKind::I) {
        throw ParamError(fmt::format(
            "{} with a split backward (I and W passes): the weight-gradient pass needs the "
            "inputs the offload copies back for the input gradient, which is not modelled; use a "
            "schedule with whole backwards",
            job_.offload_layers > 0 ? "--offload-layers" : "--offload-modules"));
      }
  const auto& host = network_.system().host;
  // Megatron-Core's modules: each kind of layer's groups timed once (a stage holds its dense
  // layers first, then its mixture-of-experts layers, the MTP modules' among them).
  std::array<cost::LayerOffloadTiming, 2> kinds;
  const TransformerConfig* transformer = model_.transformer();
  if (job_.offload_modules != 0 && transformer != nullptr) {
    const Workload run{*transformer, job_, layout_};
    const ModelOperators ops = model_operators(run);
    for (const bool moe : {false, true}) {
      if (moe && !transformer->moe) continue;
      const auto groups = offload_groups(run, moe);
      kinds[moe ? 1 : 0] =
          cost::offload_timing(moe ? ops.moe_layer : ops.layer, groups, run, network_.system());
    }
  }
  std::vector<cost::PassOffload> stage(work_.size());
  std::vector<const cost::LayerOffloadTiming*> layers;
  for (std::size_t i = 0; i < work_.size(); ++i) {
    const StageWork& w = work_[i];
    if (w.layers < 1) continue;
    const auto d = t_.placement.device[i];
    const double bandwidth =
        network_.links()[static_cast<std::size_t>(network_.host_out(d))].bandwidth /
        network_.devices_per_host_link();
    if (job_.offload_layers > 0) {
      stage[i] = cost::layer_offload(
          w.layers, job_.offload_layers, w.layer_activation_bytes / static_cast<double>(w.layers),
          cost_[i].forward.seconds, cost_[i].backward.seconds, bandwidth, host.latency_s);
      continue;
    }
    layers.assign(static_cast<std::size_t>(w.layers - w.moe_layers), &kinds[0]);
    layers.insert(layers.end(), static_cast<std::size_t>(w.moe_layers), &kinds[1]);
    stage[i] = cost::module_offload(layers, bandwidth, host.latency_s);
  }
  for (std::size_t n = 0; n < t_.ops.size(); ++n) {
    for (const Pass& p : t_.ops[n].passes()) {
      const auto& c = stage[index(p)];
      if (!(c.bytes > 0.0)) continue;
      if (p.kind == PassKind::F) {
        // The offloaded bytes never pile up: at most the window is on the device at once, and
        // it drains as the forward ends.
        g_.alloc_bytes[n] += c.forward_window_bytes - c.bytes;
        g_.free_bytes[n] += c.forward_window_bytes;
        lengthen(n, c.forward_stall_s);
      } else if (p.kind == PassKind::B) {
        g_.alloc_bytes[n] += c.backward_window_bytes;
        g_.free_bytes[n] += c.backward_window_bytes - c.bytes;
        // The compute beside the copies back runs slower (h2d_slowdown), as the engine slows it
        // beside PipeOffload's reloads.
        lengthen(n, c.backward_stall_s +
                        g_.h2d_slowdown * std::max(0.0, c.reload_busy_s - c.backward_stall_s));
      }
    }
  }
  // Host memory: each stage's offloaded bytes per microbatch in flight, at the table's peak
  // (in device shares: a device's v stages make one).
  const auto peaks = activation_peaks(t_);
  g_.layer_offload_host_bytes.assign(static_cast<std::size_t>(t_.devices), 0.0);
  for (std::size_t i = 0; i < work_.size(); ++i) {
    const auto d = static_cast<std::size_t>(t_.placement.device[i]);
    g_.layer_offload_host_bytes[d] =
        std::max(g_.layer_offload_host_bytes[d], peaks[d] * stage[i].host_bytes *
                                                     static_cast<double>(t_.stages) /
                                                     static_cast<double>(t_.devices));
  }
}

}  // namespace pipetab::detail
