// PipeOffload's generalized interleaved schedules (Wan et al., ICML 2025, arXiv 2503.01328 §3.1,
// Figures 5 and 6; reference offload.md §1.2): the interleaved order of interleaved.cpp on the
// looping placement, with
//  - the backward split into I and W, each W right after its own I (not delayed, as ZB1P does);
//  - a shorter warm-up: device d runs g(v-1) + S - d forwards before its first backward (the
//    interleaved_table warm-up (S-d-1) + (v-1)g, then "F, backward" pairs), where Megatron-LM's
//    runs two per hop;
//  - microbatches in groups of g, ⌈S/2⌉ <= g <= S (the paper's bi-level repeating pattern; g = S is
//    GIS, g = ⌈S/2⌉ GIS-H: shorter lifespans, peak g(v-1) + S stage activations on device 0, and
//    (S-g)(v-1) more bubble).
#include "common.hpp"

#include "pipetab/schedules/registry.hpp"

namespace pipetab::schedules {
namespace {

ScheduleTable gis_table(const ResolvedParams& p, std::int64_t g) {
  const std::int64_t S = p.devices, M = p.microbatches;
  const std::int64_t least = (S + 1) / 2;
  require(g >= least && g <= S, p,
          "group size g = {} must lie between ⌈S/2⌉ = {} and S = {} (PipeOffload's GIS: a smaller "
          "group breaks the dependencies between stages, a larger one is interleaved 1F1B's)",
          g, least, S);
  require(M % g == 0, p,
          "M = {} must be a multiple of the group size g = {} (PipeOffload's bi-level repeating "
          "pattern)",
          M, g);
  return interleaved_table(
      p, {.group = g, .warmup_factor = 1, .split_backward = true, .weight_after_input = true});
}

ScheduleTable generate_gis(const ResolvedParams& p) {
  return gis_table(p, p.group_size > 0 ? p.group_size : p.devices);
}

ScheduleTable generate_gis_h(const ResolvedParams& p) {
  return gis_table(p, (p.devices + 1) / 2);
}

}  // namespace

extern const ScheduleInfo kGis{
    .name = "gis",
    .title = "GIS (PipeOffload): interleaved 1F1B with I/W split and a shorter warm-up",
    .source = "Wan et al., ICML 2025 (PipeOffload) §3.1, Figures 5-6",
    .constraints = "group size g (--group-size, default S): ⌈S/2⌉ <= g <= S, M a multiple of g",
    .default_chunks = 2,
    .takes_group_size = true,
    .generate = generate_gis,
    .planned_by_default = false,
};

extern const ScheduleInfo kGisH{
    .name = "gis-h",
    .title = "GIS-H (PipeOffload): GIS with groups of ⌈S/2⌉, about half interleaved 1F1B's memory",
    .source = "Wan et al., ICML 2025 (PipeOffload) §3.1, Figure 6",
    .constraints = "M a multiple of ⌈S/2⌉",
    .default_chunks = 2,
    .generate = generate_gis_h,
    .planned_by_default = false,
};

}  // namespace pipetab::schedules
