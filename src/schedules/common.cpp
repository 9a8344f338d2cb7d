#include "common.hpp"

#include <algorithm>

namespace pipetab::schedules {

void require_size(const ResolvedParams& params, std::int64_t stages, std::int64_t ops) {
  require(stages <= kMaxStages, params, "{} stages exceed the limit of {} stages per pipeline",
          stages, kMaxStages);
  require(ops <= kMaxOps, params, "{} ops exceed the table limit of {} ops", ops, kMaxOps);
}

void require_slot_grid(const ResolvedParams& params, std::int64_t cells, std::int64_t filled,
                       const char* grid, const char* fits) {
  constexpr std::int64_t kCellsPerPass = 16, kCellsFloor = std::int64_t{1} << 24;
  const std::int64_t limit = std::min(kMaxOps, kCellsPerPass * filled + kCellsFloor);
  require(cells <= limit, params,
          "S = {}, M = {}: the slot grid of {} = {} cells exceeds the limit of {} (16 cells per "
          "pass plus 2^24, at most {}): placing the passes walks every slot of every device, so "
          "its time and memory grow with the grid, not with the {} passes; within the op limit, "
          "any {} fits",
          params.devices, params.microbatches, grid, cells, limit, kMaxOps, filled, fits);
}

std::vector<std::int32_t> looping_placement(int devices, int stages) {
  std::vector<std::int32_t> placement(static_cast<std::size_t>(stages));
  for (int s = 0; s < stages; ++s)
    placement[static_cast<std::size_t>(s)] = s % devices;
  return placement;
}

std::vector<std::int32_t> zigzag_placement(int devices, int stages) {
  std::vector<std::int32_t> placement(static_cast<std::size_t>(stages));
  for (int s = 0; s < stages; ++s) {
    const int r = s % (2 * devices);
    placement[static_cast<std::size_t>(s)] = r < devices ? r : 2 * devices - 1 - r;
  }
  return placement;
}

}  // namespace pipetab::schedules
