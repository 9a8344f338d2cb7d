#include "common.hpp"

namespace pipetab::schedules {

void require_size(const ResolvedParams& params, std::int64_t stages, std::int64_t ops) {
  require(stages <= kMaxStages, params, "{} stages exceed the limit of {} stages per pipeline",
          stages, kMaxStages);
  require(ops <= kMaxOps, params, "{} ops exceed the table limit of {} ops", ops, kMaxOps);
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
