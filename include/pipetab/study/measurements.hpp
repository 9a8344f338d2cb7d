// Measured runs (docs/design.md §5 `study/`): published or a user's own timings of real training,
// with the configuration each was measured on — the ground truth `pipetab accuracy` compares
// predictions with and `pipetab calibrate` fits a device's efficiencies to.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "pipetab/model/workload.hpp"
#include "pipetab/sim/graph.hpp"

namespace pipetab {

/// Bytes in a GiB: frameworks report memory in GiB (torchtitan's "memory: X GiB").
inline constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

enum class MeasurementKind : std::uint8_t {
  Iteration,  ///< a whole training iteration
  Layer,      ///< one transformer layer's forward and backward ([[layer]])
  /// One microbatch's passes on a pipeline stage — forward, and backward or its input- and
  /// weight-gradient halves — and optionally one activation sent to the next stage ([[profile]]):
  /// the per-pass times a profiler reports, which keep a calibration's split between F, I and W
  /// honest.
  Profile,
};

/// One measurement and the configuration it was taken on.
struct MeasuredRun {
  std::string id;
  std::string source;
  MeasurementKind kind = MeasurementKind::Iteration;
  std::string system;  ///< preset name or path (resolved against the file's folder)
  ModelConfig model;   ///< a transformer
  // Iterations.
  std::string schedule;  ///< registered schedule name
  std::int64_t devices = 1, microbatches = 1;
  std::optional<std::int64_t> chunks;
  /// The job and the layout the run was measured with (the model fragments' job keys under the
  /// entry's own options), and how it is simulated (the runtime, the iteration's end).
  Job job;
  Layout layout;
  LoweringOptions lowering;
  double measured_s = 0.0;  ///< iteration time (from TF/s per GPU where that was published)
  std::optional<double> measured_tflops_per_gpu;        ///< as published (Narayanan et al. Eq. 3)
  std::optional<double> measured_tokens_per_s_per_gpu;  ///< as published (torchtitan, NeMo)
  /// Iterations: the peak memory of a GPU as its framework reported it (bytes; the file gives
  /// measured_memory_gib, torchtitan's peak reserved GiB).
  std::optional<double> measured_memory_bytes;
  // Layers and profiles (a profile may give the backward as a whole, its halves, or both).
  double measured_forward_s = 0.0, measured_backward_s = 0.0;
  // Profiles.
  std::int64_t stage_layers = 1;  ///< transformer layers on the profiled stage
  std::optional<double> measured_input_grad_s, measured_weight_grad_s;
  std::optional<double> measured_p2p_s;  ///< one activation to the next stage
  bool p2p_across_nodes = false;         ///< that send crosses nodes (p2p = "inter")
  std::int32_t line = 0;                 ///< where the entry starts in its file
  std::string path;                      ///< the entry in its file's terms: "run[1]"
};

struct Measurements {
  std::string file;
  std::vector<MeasuredRun> runs;
};

/// Reads a measured-run file (data/published-runs.toml documents the format): [models.NAME]
/// fragments of [transformer] keys, [defaults.NAME] tables of run keys, and [[run]] and [[layer]]
/// entries. Errors throw ParseError with the file, line and key. System names are checked when
/// the runs are evaluated.
Measurements parse_measurements(std::string_view text, const std::string& file);

/// The built-in runs by name ("published-runs": data/published-runs.toml, compiled in), or else
/// a file by path.
Measurements load_measurements(const std::string& name_or_path);

/// The system `run` names, loaded. Throws Error "FILE:LINE: run[1].system: ..." (the file's
/// terms, not an option's) if it is no preset and no file.
SystemConfig load_run_system(const Measurements& file, const MeasuredRun& run);

/// Whether `run` is one a selector names: "all", "layers", "profiles", "iterations",
/// "ids:A,B,..." (those ids), "source:TEXT" (sources containing TEXT) or "system:NAME" (the runs
/// on that system, as the file names it). calibrate's --fit-on and --runs, accuracy's --runs.
bool run_selected(const MeasuredRun& run, std::string_view selector);
/// Throws Error "OPTION SELECTOR: expected ..." unless `selector` is one of those forms, and,
/// given the file, "FILE: OPTION ids:...: no run 'X'" for an id the file does not hold (a typo
/// once fitted on the other ids alone).
void require_run_selector(std::string_view selector, std::string_view option,
                          const Measurements* file = nullptr);
/// The runs a selector names; throws Error when it is malformed or names none.
Measurements select_runs(const Measurements& all, std::string_view selector);

/// "iteration", "layer" or "profile".
const char* to_string(MeasurementKind kind);

}  // namespace pipetab
