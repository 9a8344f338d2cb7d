// Activation offload (Job::offload_activations): a forward's activations copied to host memory
// after it, and back before its backward (PipeOffload, Wan et al. 2025, arXiv 2503.01328 §3-4;
// Megatron-Core's fine-grained offload, fine_grained_activation_offload.py, reloads a group's
// tensors before its backward in the same way). The copies are flows over the device's host
// link (Network::host_out, host_in), so a pair of GPUs behind one PCIe switch share it.
#include <algorithm>
#include <cstdint>
#include <vector>

#include "lowering.hpp"

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
  offload_bytes_.assign(t_.ops.size(), 0.0);
  for (std::size_t i = 0; i < t_.ops.size(); ++i) {
    if (!(plan_.out[i] > 0.0)) continue;
    for (const Pass& p : t_.ops[i].passes()) {
      if (p.kind != PassKind::F) continue;
      const double bytes = plan_.out[i] * work(p).activation_bytes;
      offload_bytes_[i] = bytes;
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
    if (!(offload_bytes_[i] > 0.0)) continue;
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
    const auto copy = add_transfer(kind, t_.ops[c.op].first().stage, d, offload_bytes_[c.op],
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

}  // namespace pipetab::detail
