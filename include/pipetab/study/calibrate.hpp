// Calibration (docs/design.md §5 `cost/`, run here because it evaluates many predictions): a
// device's efficiency parameters fitted to measured runs, written as a system file the other
// commands take. See docs/accuracy.md for the workflow.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "pipetab/io/gemm_probe.hpp"
#include "pipetab/study/accuracy.hpp"
#include "pipetab/study/measurements.hpp"
#include "pipetab/system/system.hpp"

namespace pipetab {

/// A parameter of a system that calibration may fit, with the range it is kept in.
struct CalibrationParameter {
  std::string_view name;  ///< e.g. "gemm.max_efficiency"
  double low, high;
  std::string_view meaning;
};

/// Every parameter calibrate can fit.
const std::vector<CalibrationParameter>& calibration_parameters();

/// The value of a named parameter in `system`, and `system` with it set. Throws Error for an
/// unknown name.
double parameter_value(const SystemConfig& system, std::string_view name);
void set_parameter(SystemConfig& system, std::string_view name, double value);

struct CalibrationOptions {
  std::vector<std::string> fit{"gemm.max_efficiency", "gemm.k_overhead", "memory_efficiency"};
  /// Which measurements to fit on: "all", "layers", "profiles", "iterations", "ids:A,B,..." (the
  /// runs with those ids), or "source:TEXT" (the runs whose source contains TEXT).
  std::string fit_on = "all";
  /// Also refit once per measured run without it and predict it (leave-one-out).
  bool leave_one_out = false;
  /// Also refit once per source (Measurement::source, e.g. one paper's table) without that
  /// source's runs and predict them: a source's runs share its cluster, stack and authors, so
  /// leaving one run out still fits on its siblings; leaving the source out does not.
  bool leave_one_source_out = false;
  int max_evaluations = 400;  ///< 0: no fit, the base's values and errors
  unsigned threads = 0;
};

/// A parameter calibrate was asked to fit and did not: the runs do not identify it.
struct Unidentified {
  std::string name;
  std::string reason;
};

struct Calibration {
  SystemConfig system;                                 ///< the base with the fitted values
  std::vector<std::pair<std::string, double>> values;  ///< fitted, in CalibrationOptions::fit order
  std::vector<std::string> fitted;                     ///< the names fitted
  /// Asked for but not identified by the runs (no prediction depends on it, or the fit drove it
  /// to the end of its range): kept at the base's value.
  std::vector<Unidentified> unidentified;
  std::int32_t measurements = 0;  ///< residuals fitted (a layer counts forward and backward)
  int evaluations = 0;
  AccuracyReport fit;  ///< every run of the file predicted with the fitted system
  /// With leave_one_out: each run fitted on, predicted by a fit made without it.
  AccuracyReport left_out;
  /// With leave_one_source_out: each run fitted on, predicted by a fit made without its source.
  AccuracyReport sources_left_out;
};

/// Fits `options.fit` of `base` to the chosen runs of `measurements` by least squares on the
/// log of predicted / measured (Nelder–Mead over the parameters' ranges, deterministic). A
/// parameter the runs cannot identify — no prediction moves when it moves ±10%, or the fit drives
/// it to the end of its range — keeps the base's value and is reported in `unidentified` (the
/// others are refitted without it). Throws Error when no run is selected or a parameter is
/// unknown.
Calibration calibrate(const Measurements& measurements, const SystemConfig& base,
                      const CalibrationOptions& options);

/// Fitting the device's GEMM efficiency model (DeviceSpec::gemm) to a GPU probe's timed matrix
/// multiplies (bench/gpu/device_probe.cu).
struct GemmCalibrationOptions {
  /// Which samples to fit on: "all", or one layout (forward, input_grad, weight_grad), which
  /// leaves the other two out of sample.
  std::string fit_on = "all";
  int max_evaluations = 400;  ///< 0: no fit, the base's errors
  /// The parameters to fit, of gemm.max_efficiency and gemm.k_overhead (others are ignored):
  /// a handful of published GEMMs fixes the first only, the rest keeps the base's.
  std::vector<std::string> fit{"gemm.max_efficiency", "gemm.k_overhead"};
};

/// The error of the fitted model's predicted GEMM times on a group of samples.
struct GemmErrorSummary {
  std::string group;    ///< e.g. "forward", "forward, every dimension >= 1024"
  bool fitted = false;  ///< the group's samples were fitted on (else out of sample)
  std::int32_t count = 0;
  double mean_abs = 0.0, max_abs = 0.0;  ///< |predicted / measured − 1|
};

struct GemmCalibration {
  SystemConfig system;  ///< the base with the fitted GEMM model
  std::int32_t fitted_samples = 0;
  int evaluations = 0;
  std::vector<GemmErrorSummary> summaries;  ///< per layout, all and large shapes
};

/// Fits gemm.max_efficiency and gemm.k_overhead of `base` (Nelder–Mead on the log of predicted /
/// measured seconds, each GEMM priced as the cost layer prices one, in BF16, with the base's
/// tiles, split-K, memory bandwidth and launch overhead). Throws Error when no sample is selected
/// or the base has no GEMM model.
GemmCalibration calibrate_gemm(const io::GemmProbe& probe, const SystemConfig& base,
                               const GemmCalibrationOptions& options = {});

}  // namespace pipetab
