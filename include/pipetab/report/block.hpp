// The building block of a repeated schedule as text, for `pipetab show` (Qi et al., NeurIPS
// 2024; schedules/building_block.hpp).
#pragma once

#include <span>
#include <string>

#include "pipetab/schedules/building_block.hpp"

namespace pipetab {

/// One line per device with the slot offset of each pass ("F s0 +0"), then each stage's
/// lifespan and, per device, the lifespan-implied peak Σ ⌈lifespan/period⌉·share, the exact
/// peak of the repeated block and — when `table_peaks` is not empty — the table's measured peak.
std::string render_building_block(const BuildingBlock& block,
                                  std::span<const double> table_peaks = {});

}  // namespace pipetab
