// Schedule search (`pipetab tune`): for S devices, M microbatches, a workload, a system and a
// per-device memory limit, the valid table with the shortest **simulated** runtime among the
// built-in schedules and the zero-bubble heuristic's family (schedules/zero_bubble.hpp) over
// memory caps, flag combinations and transfer delays. The published automatic schedulers rank
// their candidates by a compute-only model; here every candidate runs through the
// communication-aware simulator, so contention and latency decide.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "pipetab/report/simulation.hpp"
#include "pipetab/schedules/zero_bubble.hpp"
#include "pipetab/table/memory.hpp"
#include "pipetab/table/schedule_table.hpp"

namespace pipetab {

/// A per-device memory limit: activations in M_a at the table level (the zero-bubble papers'
/// unit), or total bytes at the simulation level (weights, gradients, optimizer state and
/// activations, as `simulate` reports them).
struct MemoryLimit {
  enum class Unit { Activations, Bytes };
  Unit unit = Unit::Activations;
  double value = 0.0;
};

/// Parses "6" or "6Ma" (M_a) and "80GB", "80GiB", "8e10B", "512MB" (bytes, SI or binary
/// prefixes). Throws ParamError naming the expected forms.
MemoryLimit parse_memory_limit(const std::string& text);

/// "6 M_a" or "80 GB".
std::string to_string(const MemoryLimit& limit);

/// What to search.
struct TuneRequest {
  std::int32_t devices = 4;
  std::int32_t microbatches = 8;
  SimulationSetup setup;
  MemoryLimit limit;
  MemoryOptions memory;   ///< table-level accounting of I and W (for an M_a limit)
  bool builtins = true;   ///< include the registered schedules
  bool heuristic = true;  ///< include the zero-bubble heuristic's family
  /// Keep only candidates this real runtime can run (runtime_refuses); the others are listed
  /// in `skipped`. Unset: every candidate.
  std::optional<Runtime> runnable_by;
  /// Called on the calling thread before each table is considered, with the count built so far;
  /// it may throw to stop the search (the Python module checks for Ctrl-C here). Unset: none.
  std::function<void(std::int64_t generated)> progress;
};

/// One schedule the search simulated.
struct TuneCandidate {
  std::string name;  ///< e.g. "zb-h1", "interleaved -v 2", "zb-heuristic limit=5 ..."
  bool builtin = false;
  ScheduleTable table;
  double runtime_s = 0.0;
  double peak_activation = 0.0;    ///< largest per-device table-level peak, M_a
  double peak_memory_bytes = 0.0;  ///< largest per-device simulated peak, bytes
  bool fits = false;               ///< within the limit
};

/// The outcome: every distinct candidate that ran, fitting ones first by runtime (ties in the
/// order they were generated: built-ins in registry order, then the heuristic's family), then
/// those over the limit by their peak in the limit's unit, then runtime.
struct TuneResult {
  std::vector<TuneCandidate> candidates;
  std::int64_t generated = 0;  ///< tables built, duplicates included
  std::int64_t duplicates = 0;
  /// Built-in configurations that could not run, with the reason ("chimera: S must be even").
  std::vector<std::string> skipped;
  /// Index of the best fitting candidate, -1 if none fits.
  std::int64_t best = -1;
  /// Index of the best fitting built-in, -1 if none fits.
  std::int64_t best_builtin = -1;
};

/// The zero-bubble schedulers' inputs for S devices and M microbatches of `setup`: each stage's
/// F, I and W times as the simulator lowers them, and the delay of the slowest stage boundary's
/// message alone on its route (latency plus bytes at its slowest link).
ZeroBubbleProblem measured_zero_bubble_problem(const SimulationSetup& setup, std::int32_t devices,
                                               std::int32_t microbatches);

/// Runs the search. Deterministic. Throws ParamError for an invalid request (sizes, a
/// non-positive limit, a system that cannot take the options).
TuneResult tune(const TuneRequest& request);

/// Whether a candidate's simulated peak exceeds the usable memory of a device of the setup's
/// system (model/outside_allocator.hpp): it cannot run there at all, whatever the memory limit
/// allowed.
bool over_device_memory(const TuneCandidate& candidate, const SimulationSetup& setup);

/// The search as `pipetab tune --format json` writes it (docs/design.md §7.2).
nlohmann::json to_json(const TuneRequest& request, const TuneResult& result);

}  // namespace pipetab
