// Offload inside a stage's passes, once per stage: where each copy goes on its pass
// (layer_copies, module_copies: the simulation moves them as flows over the host link, beside the
// rest of its traffic), and in closed form with the link the stage's alone (layer_offload,
// module_offload: the memory the device holds while its copies run, which the simulation takes,
// and the waits, which it reproduces where nothing else is on the link, a test holds). Offload:
// - Transformer Engine's CPU offload of whole layers (Megatron-LM's --cpu-offloading with
//   --cpu-offloading-num-layers N; Job::offload_layers): the activations of a stage's first N
//   layers are copied to host memory as each layer's forward ends and back one layer ahead of
//   its backward, on one copy stream each way, with two layers' copies in flight at most (TE's
//   AsyncDoubleBufferGroupOffloadHandler, transformer_engine/pytorch/cpu_offload.py);
// - Megatron-Core's fine-grained offload of modules (Job::offload_modules,
//   model/offload_groups.hpp): each module's saved inputs leave on the copy stream as its forward
//   ends, the forward never waiting for them; in the backward the end of each group's backward
//   issues the copy back of the next group, whose backward waits for it
//   (fine_grained_activation_offload.py: on_group_start_backward's bulk_reload,
//   on_group_commit_backward's wait).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "pipetab/model/offload_groups.hpp"
#include "pipetab/system/system.hpp"

namespace pipetab {
struct PassOperators;
}

namespace pipetab::cost {

/// A stage's pass times and memory with some of its activations offloaded inside its passes, its
/// copies alone on the stage's share of its host link.
struct PassOffload {
  std::int64_t layers = 0;  ///< whole layers offloaded per microbatch (0 for modules)
  double bytes = 0.0;       ///< the activations that leave the device
  double host_bytes = 0.0;  ///< what the host holds of them (the copies)
  /// Of `bytes`, the most still on the device at once while the forward runs (its copies not yet
  /// done: two layers under double buffering) and while the backward runs (copied back and not yet
  /// freed).
  double forward_window_bytes = 0.0, backward_window_bytes = 0.0;
  double forward_stall_s = 0.0;   ///< the forward's wait for copies out (double buffering)
  double backward_stall_s = 0.0;  ///< the backward's wait for its reloads
  /// How long the copies back run on the host link (the compute beside them runs slower where
  /// the host says so, HostSpec::h2d_slowdown).
  double reload_busy_s = 0.0;
};

/// The stage's `layers` layers of `layer_bytes` activations each, its forward and backward
/// taking `forward_s` and `backward_s` (spread evenly over the layers), copies moving at
/// `bandwidth` bytes per second after `latency_s`. The backward is taken to start as its forward
/// ends (a stage without pipelining: its reloads cannot start earlier), an upper bound on its
/// wait otherwise. `offloaded` is clamped to 0 .. layers − 1 (the last layer's activations are
/// used at once: TE asserts fewer offloaded layers than the model has).
PassOffload layer_offload(std::int64_t layers, std::int64_t offloaded, double layer_bytes,
                          double forward_s, double backward_s, double bandwidth, double latency_s);

/// One offload group of a layer as the layer's passes run: what it moves and frees, when its
/// forward ends, and when its own backward starts and ends (seconds from the pass's start).
struct OffloadGroupTiming {
  double copied = 0.0, freed = 0.0;
  double forward_end_s = 0.0;
  double backward_start_s = 0.0, backward_end_s = 0.0;
};

/// A layer's offload groups (forward order) and its passes' lengths.
struct LayerOffloadTiming {
  std::vector<OffloadGroupTiming> groups;
  double forward_s = 0.0, backward_s = 0.0;
};

/// When `groups` (model/offload_groups.hpp) run in a layer whose passes are `ops`: each operator
/// as operator_cost prices it alone, the backward as a whole backward runs it (each linear's
/// weight gradient after its input gradient); a group's backward is its operators'. With
/// `exchanges_as_flows`, on the passes' compute alone, as the simulation runs them: the exchanges
/// it runs as flows (runs_as_flow) take no time.
LayerOffloadTiming offload_timing(const PassOperators& ops, std::span<const OffloadGroup> groups,
                                  const Workload& run, const SystemConfig& system,
                                  bool exchanges_as_flows = false);

/// A stage of `layers` (forward order; the timings of their kinds) under Megatron-Core's
/// fine-grained offload, copies moving at `bandwidth` bytes per second after `latency_s`. The
/// backward is taken to start as its forward ends (its first copies back may wait for the last
/// copies out), an upper bound on its wait otherwise; the first group it needs was copied back
/// during the op before it (pre_reload_last_layer).
PassOffload module_offload(std::span<const LayerOffloadTiming* const> layers, double bandwidth,
                           double latency_s);

/// One copy of an offload inside a pass, placed on the pass's compute: issued once the pass has
/// computed `issue_s` seconds (and the copy before it on its stream is done), and waited for
/// before the pass computes past `need_s` (< 0: nothing waits for it). The simulation moves it
/// over the host link as a flow, beside the NIC traffic that shares the link
/// (HostSpec::carries_nic) and the other GPUs' copies; the closed forms above take the link as
/// the stage's alone.
struct PassCopy {
  double bytes = 0.0;
  double issue_s = 0.0;
  double need_s = -1.0;
  /// A copy back: the forward's copy (its index there) it brings back, and waits for.
  std::int32_t out = -1;
};

/// A stage's copies in each forward and each backward, in the order their streams run them.
struct PassCopies {
  std::vector<PassCopy> forward, backward;
  bool empty() const noexcept { return forward.empty(); }
};

/// layer_offload's copies: copy j (of the first `offloaded` layers, clamped as there) leaves as
/// layer j's forward ends, and layer j + 2 waits for it; copy back i is issued as layer i + 1's
/// backward starts and layer i's waits for it.
PassCopies layer_copies(std::int64_t layers, std::int64_t offloaded, double layer_bytes,
                        double forward_s, double backward_s);

/// module_offload's copies: each group's leaves as its forward ends (nothing waits for it); in
/// the backward the first group is on the device already (copied back during the op before), and
/// each other's copy back is issued as the group after it (in forward order) ends its backward,
/// and waited for as its own starts. The backward runs `backward_lead_s` of compute before its
/// layers' (the output layer and the loss, on the last stage).
PassCopies module_copies(std::span<const LayerOffloadTiming* const> layers,
                         double backward_lead_s = 0.0);

}  // namespace pipetab::cost
