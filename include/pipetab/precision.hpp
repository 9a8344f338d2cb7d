// The number format a model trains in. Shared by the workload model (element sizes) and the
// system model (peak FLOP/s per format), which otherwise know nothing of each other.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string_view>

#include "pipetab/names.hpp"

namespace pipetab {

/// Matrix-multiply precision. TF32 and FP32 keep 4-byte elements, FP8 1-byte (Transformer
/// Engine keeps activations between layers in 16 bits; the model's dtype_bytes says so). FP4 is
/// a tensor-core peak only (Blackwell's NVFP4 GEMMs, fp8_recipe nvfp4): no job trains "in FP4",
/// its layer linears run NVFP4 inside an FP8-style recipe that keeps the rest in BF16.
enum class Precision : std::uint8_t { FP32, TF32, FP16, BF16, FP8, FP4 };

inline constexpr std::size_t kPrecisions = 6;

/// "fp32", "tf32", "fp16", "bf16", "fp8", "fp4".
constexpr std::array<std::string_view, kPrecisions> kPrecisionNames{"fp32", "tf32", "fp16",
                                                                    "bf16", "fp8",  "fp4"};

constexpr std::string_view to_string(Precision p) {
  return name_of(kPrecisionNames, p);
}

constexpr std::optional<Precision> parse_precision(std::string_view name) {
  return parse_name<Precision>(kPrecisionNames, name);
}

/// Bytes of one element stored in this format.
constexpr std::int64_t element_bytes(Precision p) {
  switch (p) {
    case Precision::FP32:
    case Precision::TF32:
      return 4;
    case Precision::FP16:
    case Precision::BF16:
      return 2;
    case Precision::FP8:
      return 1;
    case Precision::FP4:
      return 1;  // never a job's element (above): 4-bit copies are priced where they are made
  }
  return 2;
}

}  // namespace pipetab
