// Several schedules on the same S and M, ranked at each level (docs/design.md §2): the point of the
// tool is to show where a ranking changes between levels.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "pipetab/report/evaluation.hpp"

namespace pipetab {

/// A schedule that could not run at these parameters, and why (the rule it breaks).
struct Skipped {
  std::string schedule;
  std::string reason;
};

/// Ranks are 1-based competition ranks (ties share a rank: 1, 1, 3), lower value first; 0 means
/// not ranked at that level. The formula level ranks by the published bubble ratio (the view
/// from the papers; the exact closed form always equals the table), the table level by
/// makespan, the simulation level by simulated runtime, memory by the largest per-device
/// activation peak (M_a).
struct Comparison {
  std::vector<Evaluation> rows;
  std::vector<Skipped> skipped;
  std::vector<int> formula_rank;
  std::vector<int> table_rank;
  std::vector<int> simulation_rank;
  std::vector<int> memory_rank;
  /// Among the schedules ranked at both levels, those whose place differs: formula → table,
  /// and table → simulation.
  std::vector<bool> rank_changed;
  std::vector<bool> simulation_rank_changed;
  /// The system and model of the simulation level (empty when not simulated).
  std::string system;
  std::string model;
};

/// Ranks the evaluations (kept in the given order).
Comparison compare(std::vector<Evaluation> rows, std::vector<Skipped> skipped);

/// {"system", "model", "schedules": [evaluation + "rank"], "skipped"}.
nlohmann::json to_json(const Comparison& comparison);
std::string to_text(const Comparison& comparison, bool legend = true);
/// The evaluation CSV columns plus rank.formula, rank.table, rank.simulation, rank.memory,
/// rank.changed, rank.changed_simulation; with `header` the first line names them.
std::string to_csv(const Comparison& comparison, bool header = true);

}  // namespace pipetab
