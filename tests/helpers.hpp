// Helpers shared by the tests: hand-written tables and small utilities.
#pragma once

#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "pipetab/error.hpp"
#include "pipetab/model/operators.hpp"
#include "pipetab/model/workload.hpp"
#include "pipetab/schedules/registry.hpp"
#include "pipetab/system/system.hpp"
#include "pipetab/table/costs.hpp"
#include "pipetab/table/schedule_table.hpp"

namespace pipetab {
struct SimulationSetup;
}

namespace pipetab::test {

/// plan's two lower bounds of a run: the compute part's busiest device, and the whole graph's
/// with every op's inner transfers folded in at their time alone on their links
/// (LoweringOptions::inner_transfers = false).
struct PlanBounds {
  double busy = 0.0, graph = 0.0;
};
PlanBounds plan_bounds(const ScheduleTable& table, const SimulationSetup& setup);

/// A model with the job and layout a test runs it under. From a ModelConfig alone (implicitly):
/// the model's own defaults applied (a model file's job and layout keys, which TransformerConfig
/// carried before they became the job's and the layout's); tests change `job` and `layout` where
/// they need to.
struct ModelRun {
  ModelRun(ModelConfig model);  // NOLINT(google-explicit-constructor)
  ModelRun(ModelConfig model, Job job, Layout layout);
  /// The model's transformer (std::bad_variant_access for explicit costs).
  TransformerConfig& transformer() { return std::get<TransformerConfig>(model.spec); }
  const TransformerConfig& transformer() const { return std::get<TransformerConfig>(model.spec); }
  ModelConfig model;
  Job job;
  Layout layout;
};

/// The view model/ and cost/ functions take of a ModelRun of a transformer (it refers to `run`).
Workload workload(const ModelRun& run);

/// stage_work of a ModelRun: its model cut into stages of `units`, under its job and layout.
std::vector<StageWork> stage_work(const ModelRun& run, std::span<const std::int32_t> units,
                                  std::int32_t devices);

/// table_work of a ModelRun: the work of every (pipeline, stage) of `table`.
std::vector<StageWork> table_work(const ScheduleTable& table, const ModelRun& run);

/// A setup of `model` on `system` with the model's own defaults applied (its file's job and
/// layout keys: seq_len, micro_batch, tensor_parallel, ...) and every other option at the
/// library's defaults. Unlike default_setup, the runtime stays the engine's (Async).
SimulationSetup setup_of(ModelConfig model, SystemConfig system);

/// setup_of a model and a system by preset name or path (io::load_model, io::load_system).
SimulationSetup preset_setup(const std::string& model, const std::string& system);

/// A single-pipeline table from rows of PyTorch action tokens ("0F1", "1B0"; "" = skipped).
/// `placement[s]` is the device of stage s.
ScheduleTable table(int devices, std::vector<std::int32_t> placement, int microbatches,
                    const std::vector<std::vector<std::string>>& rows);

/// The ops of one device as PyTorch action tokens.
std::vector<std::string> row_tokens(const ScheduleTable& table, int device);

/// Parameters with S devices and M microbatches, everything else default.
ScheduleParams sm(std::int64_t devices, std::int64_t microbatches);

/// An explicit workload: F f, I i, W w seconds per device share, `message` bytes per boundary
/// (activations 100 B, 80 of them kept for W; weights 10 B, optimizer state 30 B).
ModelConfig explicit_model(double f, double i, double w, double message, double grad_bytes = 0.0);

/// A system of flat-efficiency devices (1e15 FLOP/s, 1 TB) on the given topology and links.
SystemConfig system_with(Topology topology, LinkSpec intra, LinkSpec inter,
                         std::int32_t per_node = 8);

/// Generates a schedule by name with the given params.
ScheduleTable make(const std::string& name, ScheduleParams params);

/// The parameters `make` would resolve (for formula lookups).
ResolvedParams resolved(const std::string& name, ScheduleParams params);

/// Costs with a split backward: F, I, W as given, B = I + W (as --costs derives it), and the cost
/// of an overlapped F&B pair if given.
Costs split_costs(double F, double I, double W, std::optional<double> FB = std::nullopt);

/// One op of the reference's §16 notation split into its parts: "BW3u" → {"BW", 3, "u"},
/// "F1.s5" → {"F", 1, ".s5"}. What the kind and the suffix mean depends on the schedule.
struct ReferenceOp {
  std::string kind;  ///< "F", "B", "W" or "BW"
  int microbatch = 0;
  std::string suffix;  ///< "", ".sK", "d" or "u"
};
ReferenceOp parse_reference_op(const std::string& text);

/// A §16 row of a zero-bubble schedule ("F0 B0 W0 ..." or "F0.s7 B0.s7 ...", the ZB papers' B =
/// our I) as PyTorch tokens; ops without ".sK" run stage `stage`.
std::vector<std::string> zero_bubble_row(const std::string& row, int stage);

// The message of the ParamError `f` throws, or "(no error)".
template <class F>
std::string param_error(F&& f) {
  try {
    f();
  } catch (const ParamError& e) {
    return e.what();
  }
  return "(no error)";
}

/// The first operator of a pass called `name`, or nullptr.
const Operator* find_op(const std::vector<Operator>& ops, std::string_view name);

}  // namespace pipetab::test
