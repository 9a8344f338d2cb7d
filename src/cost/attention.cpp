#include "pipetab/cost/attention.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>

namespace pipetab::cost {

namespace {

// Forward TFLOP/s on an H100 SXM5 in BF16, no causal mask, at 1K, 2K, 4K, 8K and 16K tokens
// (16K tokens a batch), head dims 64, 128 and 256: the FlashAttention-3 paper's bar charts
// (arXiv 2407.08608, the BF16 forward figures), as labelled on each bar.
constexpr std::array<double, 5> kSeq{1024, 2048, 4096, 8192, 16384};
struct KernelFigures {
  std::array<double, 5> d64, d128, d256;
};
constexpr KernelFigures kFlash2{
    {306, 318, 321, 322, 324}, {350, 362, 368, 370, 370}, {313, 321, 323, 324, 326}};
constexpr KernelFigures kFlash3{
    {392, 460, 476, 496, 497}, {565, 625, 638, 646, 648}, {639, 707, 736, 746, 756}};
constexpr KernelFigures kCudnn{
    {373, 395, 408, 412, 413}, {574, 617, 609, 600, 595}, {546, 580, 581, 580, 581}};

// Linear in log2(x) between the points of `at` (ascending), flat beyond them.
template <std::size_t N>
double interpolate(const std::array<double, N>& at, const std::array<double, N>& value, double x) {
  if (!(x > at.front())) return value.front();
  if (x >= at.back()) return value.back();
  const auto hi = static_cast<std::size_t>(std::upper_bound(at.begin(), at.end(), x) - at.begin());
  const std::size_t lo = hi - 1;
  const double t = std::log2(x / at[lo]) / std::log2(at[hi] / at[lo]);
  return value[lo] + t * (value[hi] - value[lo]);
}

}  // namespace

double attention_head_dim_scale(AttentionKernel kernel, double head_dim, double seq) {
  const KernelFigures* f = nullptr;
  switch (kernel) {
    case AttentionKernel::Flash2:
      f = &kFlash2;
      break;
    case AttentionKernel::Flash3:
      f = &kFlash3;
      break;
    case AttentionKernel::Cudnn:
      f = &kCudnn;
      break;
    case AttentionKernel::Triton:
      return 1.0;
  }
  if (f == nullptr || !(head_dim > 0.0)) return 1.0;
  // The ratio to head dim 128 at each length, then across head dims at this length.
  std::array<double, 5> narrow{}, wide{};
  for (std::size_t i = 0; i < kSeq.size(); ++i) {
    narrow[i] = f->d64[i] / f->d128[i];
    wide[i] = f->d256[i] / f->d128[i];
  }
  const std::array<double, 3> dims{64, 128, 256};
  const std::array<double, 3> ratio{interpolate(kSeq, narrow, seq), 1.0,
                                    interpolate(kSeq, wide, seq)};
  return interpolate(dims, ratio, head_dim);
}

}  // namespace pipetab::cost
