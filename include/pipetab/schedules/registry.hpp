// The schedule registry: name → generator. Adding a schedule is one generator file in
// src/schedules/ plus one line in src/schedules/list.inc.
#pragma once

#include <optional>
#include <span>
#include <string_view>

#include "pipetab/schedules/building_block.hpp"
#include "pipetab/schedules/params.hpp"
#include "pipetab/table/schedule_table.hpp"

namespace pipetab {

using Generator = ScheduleTable (*)(const ResolvedParams&);
/// The building block a repeated schedule is made of (schedules/building_block.hpp).
using BlockFn = BuildingBlock (*)(const ResolvedParams&);

/// A schedule family: what it is called, which options it takes, and its generator.
struct ScheduleInfo {
  std::string_view name{};  ///< registry key, e.g. "1f1b"
  /// Other names people write for it: PyTorch's schedule names as `get_schedule_class` and
  /// torchtitan's `pipeline_parallel_schedule` take them ("Interleaved1F1B"; the class name
  /// "ScheduleInterleaved1F1B" is accepted too). Matched without regard to case, as the name.
  std::span<const std::string_view> aliases{};
  std::string_view title{};         ///< one line for `pipetab list`
  std::string_view source{};        ///< where the order comes from (paper, code)
  std::string_view constraints{};   ///< the rules on S, M, v, W, in words
  std::int32_t default_chunks = 0;  ///< 0: the schedule does not take -v
  std::int32_t default_waves = 0;   ///< 0: the schedule does not take -W
  /// Takes --group-size G, microbatches per group of the interleaved order (default S).
  bool takes_group_size = false;
  /// Has Megatron-Core's combined 1F1B order (ScheduleParams::combined_1f1b).
  bool takes_combined_1f1b = false;
  std::span<const std::string_view> variants{};  ///< first is the default; empty: no --variant
  std::string_view default_split{};              ///< empty: the schedule does not take --split
  Generator generate = nullptr;
  BlockFn block = nullptr;
  /// Tried by `plan` when --schedules is not given. PipeOffload's GIS and GIS-H are not: they
  /// trade bubble for memory where offload or GIS-H's groups are the point, and their tables
  /// took a third more of the largest plans' time (the plan of 262,144 microbatches on 8 GPUs,
  /// 27 s to 32 s); --schedules gis gis-h adds them.
  bool planned_by_default =
      true;  ///< null: the schedule is not built from a repeated building block
};

/// Every registered schedule, in registration order.
std::span<const ScheduleInfo* const> all_schedules();

/// The schedule called `name`: its registry key or an alias, in any case, with or without
/// PyTorch's "Schedule" class prefix ("1F1B", "ScheduleZBVZeroBubble"). Throws ParamError with
/// a "did you mean" and the known names if there is none.
const ScheduleInfo& find_schedule(std::string_view name);

/// The group size the interleaved order takes when --group-size is not given, for S devices and
/// M microbatches: Megatron's g = S where M is a multiple of S; else PyTorch's Interleaved1F1B
/// group M / max(1, M div S) where M is a multiple of its rounds; else the smallest g that
/// Megatron's rules admit (S <= g <= M, M mod g 0 or at least S). Sets `note` to say which, and
/// why, when it is not S.
std::int64_t default_group_size(std::int64_t devices, std::int64_t microbatches, std::string& note);

/// Applies defaults and checks the common rules (S ≥ 1, M ≥ 1, v ≥ 1, W ≥ 1, G ≥ 1, sizes within
/// the table limits, no option the schedule does not take). Schedule-specific rules are
/// checked by its generator. Throws ParamError naming the rule.
ResolvedParams resolve(const ScheduleInfo& info, const ScheduleParams& params);

/// Resolves and generates. Throws ParamError for impossible parameters.
ScheduleTable generate(const ScheduleInfo& info, const ScheduleParams& params);

/// The building block of the schedule at these parameters, or nullopt for a schedule without
/// one (ScheduleInfo::block is null). Throws ParamError where `generate` would.
std::optional<BuildingBlock> building_block(const ScheduleInfo& info, const ScheduleParams& params);

}  // namespace pipetab
