// An error bar on every predicted runtime (issue 42, point 6; docs/accuracy.md "Error bars"):
// an interval from the validation residuals of published runs like the one predicted, by regime
// (dense, mixture of experts, context parallel): the same preset's runs where it has enough, else
// carried from the runs of at least three presets. The residuals are data/residuals.csv
// (experiments/residuals writes it from `pipetab accuracy` over the published runs), compiled in.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace pipetab {

struct SimulationSetup;

/// One published run as pipetab predicts it with a preset.
struct Residual {
  std::string id;
  std::string system;  ///< the preset it was predicted with
  std::string regime;  ///< regime_of its setup
  std::int64_t gpus = 0;
  double measured_s = 0.0, predicted_s = 0.0;
  /// A constant of the preset was fitted on this run alone: its residual says nothing of
  /// runs the preset has not seen, and is left out of every interval.
  bool fitted_on = false;
  std::string stack;  ///< the named stack it ran (model/stack.hpp; "" none named)
  /// It ran Megatron-Core's combined 1F1B (Job::a2a_overlap): a run with the overlap gets a note
  /// of how these runs' predictions missed (runtime_interval).
  bool a2a_overlap = false;
};

/// The regime of a run, as intervals group them: "moe" (a mixture of experts), "cp" (context
/// parallel above 1) or "dense".
std::string_view regime_of(const SimulationSetup& setup);

/// A regime in words: "dense", "mixture-of-experts", "context-parallel".
std::string_view regime_words(std::string_view regime);

/// The interval a prediction's runtime falls in at `level`, and what it was derived from.
struct RuntimeInterval {
  double low_s = 0.0, high_s = 0.0;
  double level = 0.9;
  std::int32_t runs = 0;  ///< published runs it comes from
  std::string regime;     ///< "dense", "moe" or "cp"
  /// Where those runs ran: on this preset ("dgx-a100"), or "3 presets" when this one has too few
  /// of the regime (the prediction transfers the model to a system it was not checked on).
  std::string basis;
  std::int64_t largest_gpus = 0;  ///< the largest of those runs; a bigger prediction says so
};

/// A prediction's interval, or why it has none.
struct IntervalAnswer {
  std::optional<RuntimeInterval> interval;
  /// Why there is none ("outside every validated regime: ..."), or what the one given does not
  /// cover (a run bigger than any it comes from); empty otherwise.
  std::string note;
};

/// At least this many runs of a preset make its own interval: fewer say nothing of the spread.
inline constexpr std::int32_t kMinIntervalRuns = 5;
/// An interval carried to a preset with fewer runs needs runs on this many presets: the spread of
/// the presets' biases is what it is made of, and two presets barely estimate it.
inline constexpr std::int64_t kMinTransferPresets = 3;

/// The 90 % prediction interval of a runtime predicted as `predicted_s` for a run of `regime` on
/// `system`, from `residuals`, by the log-ratios r = ln(measured / predicted), taken as normal.
/// With at least kMinIntervalRuns runs of the regime on the same preset: those runs alone,
/// predicted · exp(mean ± t(0.95, n − 1) · sd · √(1 + 1/n)), the prediction interval of a new
/// draw. Otherwise, with runs of the regime on at least kMinTransferPresets presets: a new
/// preset's run, each preset weighted alike (the presets' biases spread, their runs scatter
/// about them; basis "3 presets"). The interval is asymmetric, and shifted where the model leans
/// one way. Runs a constant was fitted on alone are left out.
IntervalAnswer runtime_interval(double predicted_s, std::string_view regime,
                                std::string_view system, std::span<const Residual> residuals,
                                std::int64_t gpus = 0);

/// How the published runs with Megatron-Core's combined 1F1B (Residual::a2a_overlap, not fitted
/// on) were predicted: those on `system` where it has any, else every preset's; their count and
/// signed errors (predicted / measured − 1), mean and range, in words. A note on any run with the
/// overlap, whose interval comes from all the regime's runs.
std::string a2a_overlap_note(std::span<const Residual> residuals, std::string_view system);

/// How the intervals of one regime fare on the published runs they come from, each run
/// predicted without itself: on its own preset (the interval from the preset's other runs of the
/// regime, where at least kMinIntervalRuns remain) and transferred (from the regime's runs on
/// every other preset, as a preset with no runs of its own gets it, where they are on at least
/// kMinTransferPresets presets).
struct IntervalCheck {
  std::string regime;
  /// A preset; for the transferred check "3 presets" (those the interval is carried from), or
  /// "other presets" where they are too few to carry one.
  std::string system;
  std::int32_t runs = 0;     ///< runs predicted
  std::int32_t covered = 0;  ///< of them inside their interval
  /// The interval as factors of the prediction, from all of the group's runs (the preset's, or
  /// the regime's on every preset); 0 where they make none.
  double low_factor = 0.0, high_factor = 0.0;
};

/// The checks of `residuals`: one per (regime, preset) with enough runs, then one transferred per
/// regime; in regime order dense, cp, moe, presets by name.
std::vector<IntervalCheck> check_intervals(std::span<const Residual> residuals);

/// Student's t quantile at 0.95 with `dof` degrees of freedom (a 90 % two-sided interval), from
/// the standard tables (dof 1..30 exact to 3 decimals, then 40, 60, 120 and the normal's 1.645).
double student_t_95(std::int64_t dof);

/// Residuals from CSV text with columns id, system, regime, gpus, measured_s, predicted_s,
/// fitted_on (others are ignored). Throws ParseError naming `file`, the line and the column.
std::vector<Residual> parse_residuals(std::string_view text, const std::string& file);

/// The built-in residuals (data/residuals.csv), parsed once.
std::span<const Residual> builtin_residuals();

/// The interval of a simulated runtime of `setup` from the built-in residuals.
IntervalAnswer runtime_interval(const SimulationSetup& setup, double predicted_s,
                                std::int64_t gpus);

}  // namespace pipetab
