// Pictures of a simulation: a Chrome Trace Event file (Perfetto, chrome://tracing) and an SVG
// timeline in the style of the tabular-schedule paper's Figure 2.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "pipetab/report/simulation.hpp"
#include "pipetab/table/schedule_table.hpp"

namespace pipetab {

/// Chrome Trace Event JSON (docs/simulation.md "Traces"): per device a process with a compute
/// thread (the ops and the optimizer step, "X" slices) and its sends (async slices named by what
/// they carry and where to, "activation to dev 2", one Perfetto track per name); a "network"
/// process with one named track per link that carried data; a flow arrow from each pipeline
/// transfer's producer op to its consumer op; and a memory counter per device (when the
/// simulation recorded memory). Timestamps in microseconds.
///
/// Times are quantised once, start and end each, to ticks of 1/1024 µs (0.98 ns), and a slice's
/// duration is end − start in ticks. A tick count is written as its exact decimal (n/1024 µs
/// needs at most ten decimals), so readers parse every timestamp and duration exactly and
/// ts + dur of a slice equals ts of the slice after it on its track: back-to-back ops abut and
/// never overlap, in chrome://tracing's doubles as in Perfetto, which truncates ts × 1000 to
/// integer nanoseconds (json_utils.h CoerceToTs; floor(a) + floor(b) ≤ floor(a + b)). Flow ends
/// sit in the middle of the consuming op's slice ("bp":"e"), never on a boundary another slice
/// shares.
std::string chrome_trace(const ScheduleTable& table, const Simulation& simulation);

/// What write_chrome_trace wrote.
struct TraceFileStats {
  std::uint64_t json_bytes = 0;  ///< the JSON, before any compression
  std::uint64_t file_bytes = 0;  ///< on disk
  std::int64_t events = 0;
  bool gzip = false;
};

/// The same trace streamed to `path` (memory bounded by a 1 MiB buffer, not by the trace's
/// size), gzip-compressed when `path` ends in ".gz" (Perfetto and chrome://tracing open
/// .json.gz directly). The file appears whole or not at all: written to a temporary file in
/// the same directory, then renamed. Throws Error naming the path on any write failure.
TraceFileStats write_chrome_trace(const std::string& path, const ScheduleTable& table,
                                  const Simulation& simulation);

/// Uncompressed JSON over this size (250 MB, under 2^28 − 16) draws a warning: chrome://tracing
/// cannot load a trace whose JSON is longer than V8's largest string, 2^28 − 16 characters
/// (catapult-project/catapult issue 3071; google/trace-viewer issue 627: "256MB file limit"), gzip
/// or not, since it inflates the file into one string; the Perfetto UI runs in the browser's
/// memory, typically limited to about 2 GB, with the loaded trace 2–4× larger than its file
/// (perfetto.dev/docs/visualization/large-traces).
inline constexpr std::uint64_t kTraceWarnBytes = 250'000'000;

/// The warning to print for a trace of `stats` (empty when it is under kTraceWarnBytes).
std::string trace_size_warning(const std::string& path, const TraceFileStats& stats);

/// Most table ops an SVG timeline draws: past this a picture 1100 px wide shows less than a
/// pixel per op, and the file grows past 100 MB (use the trace).
inline constexpr std::int64_t kMaxSvgOps = 200000;

/// Why timeline_svg would refuse `table` (more than kMaxSvgOps ops), or nullopt. Callers check
/// it before simulating, so that a refusal costs no work and loses no report.
std::optional<std::string> timeline_svg_refusal(const ScheduleTable& table);

/// An SVG timeline: one lane per device, ops as boxes coloured by kind (shaded by the device's
/// stage) and labelled by kind and microbatch where the label fits (a smaller font on narrower
/// boxes, none on boxes too narrow for one digit), transfers as lines from the sending lane to
/// the receiving lane, gradient collectives as bars in a thin lane of their own under each
/// device, and a time axis with units. A long tail after the pipeline (gradient reductions,
/// optimizer step) is drawn past an axis break on a scale of its own, so that it does not
/// squeeze the pipeline. The legend lists the op kinds present. Label colours are chosen for a
/// WCAG 2.x contrast of at least 4.5:1 on their fill. Throws Error when timeline_svg_refusal
/// does.
std::string timeline_svg(const ScheduleTable& table, const Simulation& simulation,
                         const std::string& title);

}  // namespace pipetab
