// Several schedules on the same S and M, ranked at each level (DESIGN.md §2): the point of the
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
/// makespan, memory by the largest per-device activation peak.
struct Comparison {
  std::vector<Evaluation> rows;
  std::vector<Skipped> skipped;
  std::vector<int> formula_rank;
  std::vector<int> table_rank;
  std::vector<int> memory_rank;
  /// Among the schedules ranked at both the formula and the table level, those whose place
  /// differs between the two.
  std::vector<bool> rank_changed;
};

/// Ranks the evaluations (kept in the given order).
Comparison compare(std::vector<Evaluation> rows, std::vector<Skipped> skipped);

nlohmann::json to_json(const Comparison& comparison);
std::string to_text(const Comparison& comparison);
/// The evaluation CSV columns plus rank.formula, rank.table, rank.memory, rank.changed.
std::string to_csv(const Comparison& comparison);

}  // namespace pipetab
