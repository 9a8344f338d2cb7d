// Matrix-multiply efficiency by shape (docs/design.md §5 `cost/`): what fraction of the device's
// peak a GEMM of a given shape achieves.
#pragma once

#include "pipetab/model/operators.hpp"
#include "pipetab/system/system.hpp"

namespace pipetab::cost {

/// Achieved / peak FLOP/s of `shape` on a device with `model`: max_efficiency times the best,
/// over the model's tiles, of
///   (useful tile area) · slice / (slice + k_overhead),
/// where the useful tile area is m·n·batch·split / (waves · sms · tile_m · tile_n) with
/// waves = ⌈⌈m/tile_m⌉·⌈n/tile_n⌉·batch·split / sms⌉ — the padding of the last row and column of
/// tiles and the idle multiprocessors of the last wave (NVIDIA, "Matrix Multiplication
/// Background User's Guide", tile and wave quantization) — and slice = k / split, split being 1
/// or, for a GEMM of less than one wave of tiles with split-K enabled, as many slices at least
/// split_k_min deep as fill the idle multiprocessors. Each tile's fixed prologue and epilogue
/// costs k_overhead steps of its K loop. Non-decreasing in k; equal to
/// max_efficiency · k/(k + k_overhead) when a tile fills whole waves.
double gemm_efficiency(const GemmModel& model, const GemmShape& shape);

}  // namespace pipetab::cost
