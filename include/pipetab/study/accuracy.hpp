// Predictions against measurements (README "Accuracy"): each measured run simulated from its
// system preset alone, with the error of each and summaries per source.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "pipetab/study/measurements.hpp"
#include "pipetab/system/system.hpp"

namespace pipetab {

/// One run predicted. Errors are signed and relative: (predicted − measured) / measured. A layer
/// has two (forward and backward); an iteration one (in `error`).
struct Prediction {
  MeasuredRun run;
  std::string system;  ///< the system's name as simulated
  double predicted_s = 0.0, error = 0.0;
  double predicted_forward_s = 0.0, predicted_backward_s = 0.0;
  double forward_error = 0.0, backward_error = 0.0;
  std::optional<double> mfu;  ///< iterations: model FLOP/s utilization as predicted
  std::string regime;         ///< iterations: regime_of the run (sim/error_bar.hpp)
  std::int64_t gpus = 0;      ///< iterations: every GPU of the run
  /// Iterations: the fullest GPU's predicted peak memory; its error where the run's was measured.
  double predicted_memory_bytes = 0.0;
  std::optional<double> memory_error;
  /// Iterations: what a GPU may use, its memory less what is held outside the caching allocator
  /// (model/outside_allocator.hpp).
  double usable_memory_bytes = 0.0;
  /// Iterations: predicted over a GPU's usable memory or its host's, though every published run
  /// ran: a miss of the memory model whether or not the source gave the peak.
  bool over_capacity = false;
  /// Profiles: each measured part (forward, backward, input_grad, weight_grad, p2p) predicted.
  struct Part {
    std::string name;
    double measured_s = 0.0, predicted_s = 0.0, error = 0.0;
  };
  std::vector<Part> parts;
  std::string failure;  ///< why it could not be predicted; empty when it was
};

/// Absolute errors of a group of predictions.
struct ErrorSummary {
  std::string group;  ///< a source, "layers" or "all iterations"
  std::int32_t count = 0;
  double mean_abs = 0.0, max_abs = 0.0;
};

struct AccuracyReport {
  std::string file;
  std::vector<Prediction> predictions;  ///< in file order: iterations, layers, profiles
  std::vector<ErrorSummary> summaries;  ///< per source of iterations, all iterations, layers
};

/// Predicts every run on its own system, or on `system` for all when given. Runs are evaluated
/// on `threads` threads (0: all cores); the result does not depend on the count. A run that
/// cannot be simulated keeps its failure and is left out of the summaries.
AccuracyReport predict(const Measurements& measurements,
                       const std::optional<SystemConfig>& system = std::nullopt,
                       unsigned threads = 0);

/// Fills `report.summaries` from its predictions: per source of iterations, all iterations,
/// layers, profiles (each part counts; a failed prediction counts in none).
void summarize(AccuracyReport& report);

/// The report as a Markdown table with the summaries, as CSV (one row per prediction), as JSON.
std::string accuracy_markdown(const AccuracyReport& report);
std::string accuracy_csv(const AccuracyReport& report);
nlohmann::json to_json(const AccuracyReport& report);

}  // namespace pipetab
