// A GPU probe's measurements (bench/gpu/device_probe.cu, committed under data/gpu/): matrix
// multiplies timed over shapes, which `pipetab calibrate --gemm-probe` fits the device's GEMM
// efficiency model to.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "pipetab/model/operators.hpp"

namespace pipetab::io {

/// The three layouts of a linear layer y = x·Wᵀ: which pass runs a product of that shape.
enum class GemmLayout : std::uint8_t { Forward, InputGrad, WeightGrad };
inline constexpr GemmLayout kGemmLayouts[] = {GemmLayout::Forward, GemmLayout::InputGrad,
                                              GemmLayout::WeightGrad};
const char* to_string(GemmLayout layout);

/// One timed matrix multiply: an M×N result reducing over K (row-major terms, batch 1).
struct GemmSample {
  GemmLayout layout = GemmLayout::Forward;
  GemmShape shape;
  double seconds = 0.0;
  std::int32_t line = 0;  ///< 1-based, in the probe file
};

struct GemmProbe {
  std::string file;
  std::string device;  ///< from the "# device,NAME,..." line; empty if absent
  std::vector<GemmSample> gemms;
};

/// Parses a probe's CSV output. Lines are comma-separated; blank lines and lines starting with
/// '#' are comments, except "# device,NAME,..." which names the device. A row starting with
/// "gemm" is `gemm,LAYOUT,M,N,K,SECONDS[,TFLOPS]` with LAYOUT forward, input_grad or weight_grad,
/// M, N, K positive integers and SECONDS a positive finite number; rows starting with "memory" or
/// "launch" (the probe's other measurements) are skipped. Anything else is a ParseError naming
/// the file, line, column and field.
GemmProbe parse_gemm_probe(std::string_view text, const std::string& file);

/// Reads and parses a probe file. Throws Error if it cannot be read or has no GEMM rows.
GemmProbe read_gemm_probe(const std::string& path);

}  // namespace pipetab::io
