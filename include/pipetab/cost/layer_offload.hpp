// Transformer Engine's CPU offload of whole layers (Megatron-LM's --cpu-offloading with
// --cpu-offloading-num-layers N; Job::offload_layers): the activations of a stage's first N
// layers are copied to host memory as each layer's forward ends and back one layer ahead of its
// backward, on one copy stream each way, with two layers' copies in flight at most (TE's
// AsyncDoubleBufferGroupOffloadHandler, transformer_engine/pytorch/cpu_offload.py). Priced once
// per stage, layer by layer, in closed form.
#pragma once

#include <cstdint>

namespace pipetab::cost {

/// A stage's pass times with N of its layers offloaded.
struct LayerOffload {
  std::int64_t layers = 0;        ///< offloaded per microbatch (N, at most the stage's less one)
  double bytes = 0.0;             ///< N layers' activations: what leaves the device
  double window_bytes = 0.0;      ///< reloaded and not yet freed while the backward runs (2 layers)
  double forward_stall_s = 0.0;   ///< the forward's wait for copies out (double buffering)
  double backward_stall_s = 0.0;  ///< the backward's wait for its reloads
};

/// The stage's `layers` layers of `layer_bytes` activations each, its forward and backward
/// taking `forward_s` and `backward_s` (spread evenly over the layers), copies moving at
/// `bandwidth` bytes per second after `latency_s`. The backward is taken to start as its forward
/// ends (a stage without pipelining: its reloads cannot start earlier), an upper bound on its
/// wait otherwise. `offloaded` is clamped to 0 .. layers − 1 (the last layer's activations are
/// used at once: TE asserts fewer offloaded layers than the model has).
LayerOffload layer_offload(std::int64_t layers, std::int64_t offloaded, double layer_bytes,
                           double forward_s, double backward_s, double bandwidth, double latency_s);

}  // namespace pipetab::cost
