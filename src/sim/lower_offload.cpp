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

// Offload inside the passes (cost/layer_offload.hpp): Transformer Engine's of whole layers
// (Job::offload_layers) or Megatron-Core's of modules (Job::offload_modules). Each copy is a flow
// over the device's host link, issued and waited for by its op's steps where the closed forms
// place them (layer_copies, module_copies), so the copies share the link with the NIC traffic
// that crosses it (HostSpec::carries_nic) and the other GPUs' copies, and the compute beside the
// copies back is slowed by the engine (h2d_slowdown). The memory is the closed forms': the
// forward holds the offloaded bytes only while their copies run, the backward those copied back
// and not yet used, at the stage's share of its host link. An op that runs two passes
// (Megatron-Core's combined 1F1B) places each pass's copies on that pass's compute. Without
// transfers (plan's bounds) nothing waits: a lower bound.
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
  // Each timed as it takes (the closed form) and on its compute alone (where the copies go on
  // the ops' steps, which run the exchanges as flows).
  std::array<cost::LayerOffloadTiming, 2> kinds, on_compute;
  const TransformerConfig* transformer = model_.transformer();
  if (job_.offload_modules != 0 && transformer != nullptr) {
    const Workload run{*transformer, job_, layout_};
    const ModelOperators ops = model_operators(run);
    for (const bool moe : {false, true}) {
      if (moe && !transformer->moe) continue;
      const auto groups = offload_groups(run, moe);
      const auto& layer = moe ? ops.moe_layer : ops.layer;
      const std::size_t k = moe ? 1 : 0;
      kinds[k] = cost::offload_timing(layer, groups, run, network_.system());
      on_compute[k] = cost::offload_timing(layer, groups, run, network_.system(), true);
    }
  }
  std::vector<cost::PassOffload> stage(work_.size());
  std::vector<cost::PassCopies> copies(work_.size());
  std::vector<const cost::LayerOffloadTiming*> layers;
  for (std::size_t i = 0; i < work_.size(); ++i) {
    const StageWork& w = work_[i];
    if (w.layers < 1) continue;
    const auto d = t_.placement.device[i];
    const double bandwidth =
        network_.links()[static_cast<std::size_t>(network_.host_out(d))].bandwidth /
        network_.devices_on_host_link(d);
    if (job_.offload_layers > 0) {
      const double layer = w.layer_activation_bytes / static_cast<double>(w.layers);
      const double f = cost_[i].forward.seconds, b = cost_[i].backward.seconds;
      stage[i] = cost::layer_offload(w.layers, job_.offload_layers, layer, f, b, bandwidth,
                                     host.latency_s);
      copies[i] = cost::layer_copies(w.layers, job_.offload_layers, layer, f, b);
      continue;
    }
    const auto dense = static_cast<std::size_t>(w.layers - w.moe_layers);
    const auto moe = static_cast<std::size_t>(w.moe_layers);
    layers.assign(dense, &kinds[0]);
    layers.insert(layers.end(), moe, &kinds[1]);
    stage[i] = cost::module_offload(layers, bandwidth, host.latency_s);
    layers.assign(dense, &on_compute[0]);
    layers.insert(layers.end(), moe, &on_compute[1]);
    // The compute outside the layers leads the backward (the output layer and the loss) and
    // follows the forward.
    double layers_s = 0.0;
    for (const auto* l : layers)
      layers_s += l->backward_s;
    copies[i] = cost::module_copies(layers, std::max(0.0, cost_[i].backward.seconds - layers_s));
  }
  std::vector<std::vector<CopyStep>> at_op;
  std::vector<std::int32_t> first_out(t_.ops.size(), -1);
  std::vector<std::int32_t> last(2 * static_cast<std::size_t>(t_.devices), -1);  // per stream
  for (std::size_t n = 0; n < t_.ops.size(); ++n) {
    // The op that runs this one's passes (a backward merged into the forward before it runs
    // there, as that op's second pass).
    const auto runs_in = static_cast<std::size_t>(runner(static_cast<std::int32_t>(n)));
    std::uint8_t slot = runs_in == n ? 0 : 1;
    for (const Pass& p : t_.ops[n].passes()) {
      const std::uint8_t pass = slot++;
      const auto& c = stage[index(p)];
      if (!(c.bytes > 0.0)) continue;
      const bool forward = p.kind == PassKind::F;
      if (forward) {
        // The offloaded bytes never pile up: at most the window is on the device at once, and
        // it drains as the forward ends.
        g_.alloc_bytes[n] += c.forward_window_bytes - c.bytes;
        g_.free_bytes[n] += c.forward_window_bytes;
      } else if (p.kind == PassKind::B) {
        g_.alloc_bytes[n] += c.backward_window_bytes;
        g_.free_bytes[n] += c.backward_window_bytes - c.bytes;
      } else {
        continue;
      }
      if (folded()) continue;
      // The copies, in their stream's order (one stream each way per device, across its ops),
      // each copy back after its copy out.
      const auto d = g_.device[n];
      const auto& list = forward ? copies[index(p)].forward : copies[index(p)].backward;
      if (list.empty()) continue;
      if (at_op.empty()) at_op.resize(t_.ops.size());
      auto& stream = last[2 * static_cast<std::size_t>(d) + (forward ? 0 : 1)];
      const std::int32_t outs =
          forward ? -1
                  : first_out[static_cast<std::size_t>(forward_op_[key(p.microbatch, p.stage)])];
      for (const cost::PassCopy& copy : list) {
        const auto t = add_transfer(
            forward ? TransferKind::HostOffload : TransferKind::HostReload, p.stage, d, copy.bytes,
            {forward ? network_.host_out(d) : network_.host_in(d)}, host.latency_s);
        if (forward && first_out[n] < 0) first_out[n] = t;
        const auto copy_index = static_cast<std::size_t>(t - g_.compute_nodes);
        if (g_.in_pass_copy.size() <= copy_index) g_.in_pass_copy.resize(copy_index + 1, 0);
        g_.in_pass_copy[copy_index] = 1;
        g_.preds[static_cast<std::size_t>(t)] = 1;  // its Issue step
        if (stream >= 0) edge(stream, t);
        stream = t;
        if (!forward) edge(outs + copy.out, t);
        at_op[runs_in].push_back({copy.issue_s, StepKind::Issue, t, pass});
        if (copy.need_s >= 0.0) at_op[runs_in].push_back({copy.need_s, StepKind::Wait, t, pass});
      }
    }
  }
  if (!at_op.empty()) splice_copies(at_op);
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

// Puts each op's copy steps (at_op[n], placed on the compute of its pass) among its steps: a
// compute step of that pass is split where a copy is issued or waited for; an op without steps
// gets them (an op of two passes without a program computes its first, then its second). Every
// op's first step stays a computation (lengthen adds there), and FSDP's slot for the next gather
// (next_gather_step_) moves with its step.
void Lowering::splice_copies(std::vector<std::vector<CopyStep>>& at_op) {
  std::vector<OpStep> steps;
  std::vector<std::int64_t> begin{0};
  std::array<std::vector<CopyStep>, 2> queue;
  std::vector<std::pair<OpStep, std::uint8_t>> own;  // the op's steps and their passes
  for (std::int64_t node = 0; node < g_.compute_nodes; ++node) {
    const auto n = static_cast<std::size_t>(node);
    const std::int64_t first = g_.has_steps(node) ? g_.step_begin[n] : 0;
    const std::int64_t end = g_.has_steps(node) ? g_.step_begin[n + 1] : 0;
    const bool spliced = n < at_op.size() && !at_op[n].empty();
    if (!spliced && first == end) {
      begin.push_back(static_cast<std::int64_t>(steps.size()));
      continue;
    }
    for (auto& q : queue)
      q.clear();
    if (spliced) {
      for (const CopyStep& c : at_op[n])
        queue[c.pass].push_back(c);
      for (auto& q : queue) {
        std::stable_sort(q.begin(), q.end(),
                         [](const CopyStep& a, const CopyStep& b) { return a.at_s < b.at_s; });
      }
    }
    own.clear();
    if (first < end) {
      for (auto k = first; k < end; ++k) {
        const auto i = static_cast<std::size_t>(k);
        own.emplace_back(g_.steps[i], i < step_pass_.size() ? step_pass_[i] : 0);
      }
    } else if (n < t_.ops.size() && t_.ops[n].is_pair()) {
      const Pass& second = t_.ops[n].second();
      const auto& c = cost_[index(second)];
      const double s1 = std::min(
          g_.duration[n], second.kind == PassKind::F ? c.forward.seconds : c.backward.seconds);
      own.push_back({{StepKind::Compute, -1, g_.duration[n] - s1}, 0});
      own.push_back({{StepKind::Compute, -1, s1}, 1});
    } else {
      own.push_back({{StepKind::Compute, -1, g_.duration[n]}, 0});
    }
    const std::int64_t slot =
        n < next_gather_step_.size() && next_gather_step_[n] >= first && next_gather_step_[n] < end
            ? next_gather_step_[n] - first
            : -1;
    std::array<double, 2> computed{0.0, 0.0};
    std::array<std::size_t, 2> next{0, 0};
    const auto node_start = steps.size();
    for (std::size_t k = 0; k < own.size(); ++k) {
      const auto& [s, pass] = own[k];
      if (static_cast<std::int64_t>(k) == slot) {
        next_gather_step_[n] = static_cast<std::int64_t>(steps.size());
        steps.push_back(s);
        continue;
      }
      if (s.kind != StepKind::Compute) {
        steps.push_back(s);
        continue;
      }
      const auto& q = queue[pass];
      auto& at = next[pass];
      auto& done = computed[pass];
      double left = s.seconds;
      while (at < q.size() && q[at].at_s <= done + left) {
        const double run = std::min(left, std::max(0.0, q[at].at_s - done));
        if (run > 0.0 || steps.size() == node_start) steps.push_back({StepKind::Compute, -1, run});
        done += run;
        left -= run;
        steps.push_back({q[at].kind, q[at].transfer, 0.0});
        ++at;
      }
      steps.push_back({StepKind::Compute, -1, left});
      done += left;
    }
    // Copies placed past their pass's compute: at the op's end.
    for (std::size_t pass = 0; pass < 2; ++pass)
      for (; next[pass] < queue[pass].size(); ++next[pass])
        steps.push_back({queue[pass][next[pass]].kind, queue[pass][next[pass]].transfer, 0.0});
    begin.push_back(static_cast<std::int64_t>(steps.size()));
  }
  g_.steps = std::move(steps);
  g_.step_begin = std::move(begin);
  step_pass_.clear();  // spent
}

}  // namespace pipetab::detail
