// An asymmetric Chimera-style placement (the paper's Figure 6; our reading, see
// docs/schedules.md): Chimera's device pairing and order, but stages of unequal size. Each
// pipeline cuts the model so that its first-half stages hold E parts and its second-half
// stages L parts (--split E:L, default 1:2). Device i holds stage i of one pipeline and stage
// D-1-i of the other, one from each half, so every device still computes E + L parts per
// microbatch; what changes is how much activation memory its early stage (many microbatches
// in flight) holds compared with its late stage (few). E:L = 1:1 is Chimera.
#include "common.hpp"

#include "pipetab/schedules/registry.hpp"

namespace pipetab::schedules {
namespace {

ScheduleTable generate_chimera_asym(const ResolvedParams& p) {
  const int D = p.devices;
  std::vector<std::int32_t> layers(2 * static_cast<std::size_t>(D));
  for (int pipeline = 0; pipeline < 2; ++pipeline) {
    for (int s = 0; s < D; ++s) {
      layers[static_cast<std::size_t>(pipeline * D + s)] = s < D / 2 ? p.split_early : p.split_late;
    }
  }
  return chimera_table(p, std::move(layers));
}

}  // namespace

extern const ScheduleInfo kChimeraAsym{
    .name = "chimera-asym",
    .title = "Chimera with unequal stages: first-half stages E parts, second-half L (--split E:L)",
    .source = "Barley et al., arXiv 2605.24006, Fig. 6 (our reading); Chimera order",
    .constraints = "as chimera",
    .variants = kChimeraVariants,
    .default_split = "1:2",
    .generate = generate_chimera_asym,
};

}  // namespace pipetab::schedules
