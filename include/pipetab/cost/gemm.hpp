// Matrix-multiply efficiency by shape (DESIGN.md §5 `cost/`): what fraction of the device's
// peak a GEMM of a given shape achieves.
#pragma once

#include "pipetab/model/operators.hpp"
#include "pipetab/system/system.hpp"

namespace pipetab::cost {

/// Achieved / peak FLOP/s of `shape` on a device with `model`:
///   max_efficiency · (useful tile area) · k / (k + k_overhead), where the useful tile area is
///   m·n·batch / (waves · sms · tile_m · tile_n) with waves = ⌈⌈m/tile_m⌉·⌈n/tile_n⌉·batch / sms⌉:
/// the padding of the last row and column of tiles and the idle multiprocessors of the last
/// wave (NVIDIA, "Matrix Multiplication Background User's Guide", tile and wave quantization),
/// and each tile's fixed prologue and epilogue against its K loop. Non-decreasing in k; equal
/// to max_efficiency · k/(k + k_overhead) when the tiles fill whole waves.
double gemm_efficiency(const GemmModel& model, const GemmShape& shape);

}  // namespace pipetab::cost
