// What one microbatch costs per operator (pipetab cost): the rows behind cost::stage_costs, for
// people checking the model against a profile.
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "pipetab/cost/stage_cost.hpp"

namespace pipetab::cost {

struct OperatorRow {
  std::string part;  ///< "layer", "moe_layer", "embedding", "output", "mtp"; a hybrid model's
                     ///< "mamba", "attention", "mlp", "moe"
  PassId pass = PassId::Forward;
  Operator op;
  OperatorCost cost;
};

struct Breakdown {
  std::string model, system;
  std::vector<OperatorRow> rows;
  /// The passes' totals (overlap applied); `output` is the output layer and loss once (the stage
  /// that holds them runs them once more per MTP module).
  StageCost layer, embedding, output;
  std::optional<StageCost> moe_layer;  ///< a mixture of experts' layer with experts
  std::optional<StageCost> mtp;        ///< an MTP module's own operators (without its layer)
  /// A hybrid model's layers, one of each kind it has, by name ("mamba", "attention", "mlp",
  /// "moe"); `layer` and `moe_layer` then stand for nothing and are not printed.
  std::vector<std::pair<std::string, StageCost>> blocks;
};

/// Every operator of `model` (a transformer) run by `job` under `layout` on `system`. Throws
/// ParamError for an explicit workload or a system that cannot run the model.
Breakdown operator_breakdown(const ModelConfig& model, const Job& job, const Layout& layout,
                             const SystemConfig& system);

std::string breakdown_text(const Breakdown& breakdown);
nlohmann::json to_json(const Breakdown& breakdown);

}  // namespace pipetab::cost
