// Private to schedules/: helpers shared by the generators.
#pragma once

#include <cstdint>
#include <vector>

#include <fmt/format.h>

#include "pipetab/error.hpp"
#include "pipetab/schedules/params.hpp"
#include "pipetab/table/schedule_table.hpp"

namespace pipetab::schedules {

/// Tolerance of the zero-bubble schedulers' comparisons of times and memory (in the problem's
/// own units): sums of pass times that are equal on paper compare equal despite rounding.
inline constexpr double kEpsilon = 1e-9;

/// Throws ParamError("<schedule>: <message>") unless `condition` holds.
template <class... Args>
void require(bool condition, const ResolvedParams& params, fmt::format_string<Args...> format,
             Args&&... args) {
  if (!condition) {
    throw ParamError(
        fmt::format("{}: {}", params.schedule, fmt::format(format, std::forward<Args>(args)...)));
  }
}

/// Rejects tables whose stage or op count would exceed the table limits, before allocating.
/// `ops` is computed in 64 bits from parameters that resolve() already bounded.
void require_size(const ResolvedParams& params, std::int64_t stages, std::int64_t ops);

/// Rejects, before any work, a generator that walks a slot grid of `cells` cells (all devices
/// together) to place `filled` passes, when the grid exceeds 16 cells per pass plus 2^24 cells
/// (a second's work for small tables) or kMaxOps: such a walk grows with the grid, which the
/// fill and drain make grow with S² while the table grows with S·M (V-Min at S = 4096, M = 1
/// took 25 s and 0.7 GB for 24,576 passes). `grid` names the grid's size as a formula
/// ("S·6(M+2S+2)") and `fits` the rule that makes it fit ("M >= (2S+2)/15").
void require_slot_grid(const ResolvedParams& params, std::int64_t cells, std::int64_t filled,
                       const char* grid, const char* fits);

/// Looping placement of `stages` stages over `devices` devices: stage s on device s mod S
/// (one stage per device when stages == devices; Megatron's interleaving otherwise).
std::vector<std::int32_t> looping_placement(int devices, int stages);

/// Zig-zag placement: stages go down the devices and back up, repeatedly (the V-shape for
/// 2S stages, Hanayo's waves for 2SW): stage s on r = s mod 2S if r < S, else 2S-1-r.
std::vector<std::int32_t> zigzag_placement(int devices, int stages);

}  // namespace pipetab::schedules

namespace pipetab::schedules {

/// The 1F1B generator (one_f_one_b.cpp); interleaved with one chunk runs it, as Megatron does.
ScheduleTable one_f_one_b(const ResolvedParams& params);

}  // namespace pipetab::schedules

namespace pipetab::schedules {

/// One entry of the interleaved schedule table: a virtual microbatch's microbatch and the chunk
/// its forward runs on.
struct VirtualMicrobatch {
  std::int32_t microbatch = 0;
  std::int32_t chunk = 0;
};

/// Megatron's interleaved schedule table (get_schedule_table in megatron/core/pipeline_parallel/
/// schedules.py): the microbatches in groups of `group` (the last group takes what is left), each
/// group through chunks 0 .. chunks-1 before the next: (m, c) for c, then m within the group.
std::vector<VirtualMicrobatch> interleaved_schedule_table(std::int64_t microbatches,
                                                          std::int64_t chunks, std::int64_t group);

/// How interleaved_table() orders a device's passes.
struct InterleavedOrder {
  std::int64_t group = 1;          ///< g, microbatches per group of the schedule table
  std::int64_t warmup_factor = 2;  ///< warm-up forwards added per device after d: 2 or 1
  std::int64_t extra_warmup = 0;   ///< warm-up forwards added on every device
  /// false: full backwards B (Megatron, PyTorch's Interleaved1F1B). true: PyTorch's ZB1P — the
  /// backward is I, and from device d's (d+1)-th I on each I is followed by the W of the oldest
  /// I without one; the remaining W end the row.
  bool split_backward = false;
  /// With split_backward: each W right after its own I (PipeOffload's GIS, which does not delay
  /// W, §3.1) instead of ZB1P's delayed W.
  bool weight_after_input = false;
};

/// The interleaved order on the looping placement (device d holds stages d, d+S, ..): device d
/// runs w = min(vM, warmup_factor·(S-d-1) + (v-1)·g) forwards, then pairs "F(k+w), backward(k)",
/// then the remaining backwards. Forward k runs table entry k; backward k runs entry k's
/// microbatch on the mirrored chunk v-1-chunk. The caller has checked its rules.
ScheduleTable interleaved_table(const ResolvedParams& params, const InterleavedOrder& order);

}  // namespace pipetab::schedules

namespace pipetab::schedules {

/// Chimera's variants (--variant), default first.
inline constexpr std::string_view kChimeraVariants[] = {"direct", "doubling"};

/// Chimera's table (chimera.cpp) with the given stage sizes (empty: equal stages); chimera-asym
/// reuses it with unequal ones.
ScheduleTable chimera_table(const ResolvedParams& params, std::vector<std::int32_t> stage_layers);

}  // namespace pipetab::schedules
