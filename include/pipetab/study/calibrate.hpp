// Calibration (DESIGN.md §5 `cost/`, run here because it evaluates many predictions): a
// device's efficiency parameters fitted to measured runs, written as a system file the other
// commands take. See docs/accuracy.md for the workflow.
#pragma once

#include <string>
#include <string_view>
#include <vector>

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
  /// Which measurements to fit on: "all", "layers", "iterations", or "source:TEXT" (the runs
  /// whose source contains TEXT).
  std::string fit_on = "all";
  /// Also refit once per measured run without it and predict it (leave-one-out).
  bool leave_one_out = false;
  int max_evaluations = 400;
  unsigned threads = 0;
};

struct Calibration {
  SystemConfig system;                                 ///< the base with the fitted values
  std::vector<std::pair<std::string, double>> values;  ///< fitted, in CalibrationOptions::fit order
  std::int32_t measurements = 0;  ///< residuals fitted (a layer counts forward and backward)
  int evaluations = 0;
  AccuracyReport fit;  ///< every run of the file predicted with the fitted system
  /// With leave_one_out: each run fitted on, predicted by a fit made without it.
  AccuracyReport left_out;
};

/// Fits `options.fit` of `base` to the chosen runs of `measurements` by least squares on the
/// log of predicted / measured (Nelder–Mead over the parameters' ranges, deterministic). Throws
/// Error when no run is selected or a parameter is unknown.
Calibration calibrate(const Measurements& measurements, const SystemConfig& base,
                      const CalibrationOptions& options);

}  // namespace pipetab
