#include "pipetab/cost/layer_offload.hpp"

#include <algorithm>
#include <vector>

namespace pipetab::cost {

LayerOffload layer_offload(std::int64_t layers, std::int64_t offloaded, double layer_bytes,
                           double forward_s, double backward_s, double bandwidth,
                           double latency_s) {
  LayerOffload out;
  const std::int64_t n =
      std::clamp<std::int64_t>(offloaded, 0, std::max<std::int64_t>(0, layers - 1));
  if (n == 0 || !(bandwidth > 0.0)) return out;
  out.layers = n;
  out.bytes = static_cast<double>(n) * layer_bytes;
  out.window_bytes = static_cast<double>(std::min<std::int64_t>(2, n)) * layer_bytes;
  const double copy = latency_s + layer_bytes / bandwidth;
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

}  // namespace pipetab::cost
