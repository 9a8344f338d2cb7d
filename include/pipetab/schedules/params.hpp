// Schedule parameters: as the user gives them, and resolved for one schedule.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace pipetab {

/// Parameters as given (docs/design.md §7.3 common flags). Unset optionals take the schedule's
/// default; setting one the schedule does not take is an error. Sizes are 64-bit so that
/// oversized requests are rejected with a message instead of wrapping.
struct ScheduleParams {
  std::int64_t devices = 4;            ///< S (Chimera's D): pipeline depth
  std::int64_t microbatches = 8;       ///< M (Chimera's N)
  std::optional<std::int64_t> chunks;  ///< v: model chunks per device (interleaved)
  std::optional<std::int64_t> waves;   ///< W: waves (Hanayo)
  /// g: microbatches per group of the interleaved order (Megatron's
  /// microbatch_group_size_per_vp_stage)
  std::optional<std::int64_t> group_size;
  std::optional<std::string> variant;  ///< e.g. Chimera's "direct" or "doubling"
  std::optional<std::string> split;    ///< "E:L" stage-size split (chimera-asym)
  /// Megatron-Core's combined 1F1B order (--overlap-moe-expert-parallel-comm, pipetab's
  /// --a2a-overlap): the interleaved schedule, and 1F1B without pipelining (S = 1); one more
  /// warm-up forward on every device.
  bool combined_1f1b = false;
};

/// Parameters with the schedule's defaults applied and the common range checks passed.
struct ResolvedParams {
  std::string schedule;
  std::int32_t devices = 1;
  std::int32_t microbatches = 1;
  std::int32_t chunks = 1;       ///< 1 for schedules without chunks
  std::int32_t waves = 1;        ///< 1 for schedules without waves
  std::int32_t group_size = 0;   ///< g (default S) for schedules that take it; else 0
  std::string variant;           ///< empty for schedules without variants
  std::int32_t split_early = 1;  ///< chimera-asym: relative size of a first-half stage
  std::int32_t split_late = 1;   ///< chimera-asym: relative size of a second-half stage
  bool combined_1f1b = false;    ///< ScheduleParams::combined_1f1b
  /// A default that is not the usual one, and why (e.g. the interleaved group size when M is
  /// not a multiple of S); empty when every default is the usual one. Commands print it.
  std::string note;
};

}  // namespace pipetab
