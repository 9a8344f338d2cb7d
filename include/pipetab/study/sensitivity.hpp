// Sensitivity of the simulated ranking to the network: bandwidth, latency and collective cost
// perturbed around one configuration, with the runtime range of each schedule and every place
// where two schedules swap order.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "pipetab/study/study.hpp"

namespace pipetab {

/// The perturbation axes: factor values on link bandwidth, link latency and collective bytes.
struct SensitivityAxes {
  std::vector<double> bandwidth, latency, collective;  ///< each sorted and holding 1
};

/// `steps` factors from `lo` to `hi` (geometric when `geometric`, else evenly spaced), with 1
/// added if missing. Throws Error unless 0 < lo ≤ 1 ≤ hi and 2 ≤ steps ≤ 101.
std::vector<double> sensitivity_factors(double lo, double hi, int steps, bool geometric);

/// Two schedules swapping order between neighbouring points of the grid.
struct RankFlip {
  int axis = 0;                   ///< 0 bandwidth, 1 latency, 2 collective
  std::int64_t from = 0, to = 0;  ///< points (the factor on `axis` goes up by one step)
  std::int32_t overtaker = 0;     ///< the schedule that was slower at `from`, faster at `to`
  std::int32_t overtaken = 0;
};

/// Runtimes of every schedule at every point of the grid, and what they say.
struct SensitivityResult {
  std::vector<std::string> schedules;
  std::vector<std::string> skipped;  ///< per schedule: why it cannot run (empty if it ran)
  SensitivityAxes axes;
  double tolerance = 0.0;
  /// runtime[point · schedules + schedule] in seconds; NaN for a skipped schedule. Point
  /// (b, l, c) is (b · |latency| + l) · |collective| + c.
  std::vector<double> runtime;
  std::int64_t baseline = 0;  ///< the point where every factor is 1
  std::vector<RankFlip> flips;

  std::int64_t points() const;
  /// The factors of a point.
  std::array<double, 3> factors(std::int64_t point) const;
  /// Schedules from fastest to slowest at a point (skipped ones left out; equal runtimes keep
  /// list order).
  std::vector<std::int32_t> ranking(std::int64_t point) const;
};

/// Runs `study` — one configuration per schedule, on one system and model — at every point of
/// `axes` (the study's own scale axes are replaced) on `threads` threads. Runtimes within a
/// relative `tolerance` count as tied: a flip needs a strict order on both sides. Throws Error
/// when the study has more than one configuration per schedule and point.
SensitivityResult run_sensitivity(Study study, const SensitivityAxes& axes, double tolerance,
                                  int threads);

/// A readable report: per schedule its runtime at the baseline and its range, the baseline
/// ranking, the rankings met elsewhere, and every flip.
std::string to_text(const SensitivityResult& result);

/// The same as JSON (every point's runtimes included).
nlohmann::json to_json(const SensitivityResult& result);

/// One CSV row per point and schedule: factors, schedule, runtime, rank.
std::string to_csv(const SensitivityResult& result);

}  // namespace pipetab
