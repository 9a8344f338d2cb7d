#include "pipetab/report/compare.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>

#include <fmt/format.h>

#include "pipetab/report/output.hpp"

namespace pipetab {
namespace {

bool same(double a, double b) {
  return std::fabs(a - b) <= 1e-9 * std::max(std::fabs(a), std::fabs(b));
}

// Competition ranks of the present values, lower first; absent values get 0.
std::vector<int> ranks(const std::vector<std::optional<double>>& values) {
  std::vector<int> rank(values.size(), 0);
  for (std::size_t i = 0; i < values.size(); ++i) {
    if (!values[i]) continue;
    int better = 0;
    for (const auto& other : values) {
      if (other && *other < *values[i] && !same(*other, *values[i])) ++better;
    }
    rank[i] = better + 1;
  }
  return rank;
}

}  // namespace

Comparison compare(std::vector<Evaluation> rows, std::vector<Skipped> skipped) {
  Comparison c;
  c.rows = std::move(rows);
  c.skipped = std::move(skipped);
  const auto n = c.rows.size();
  std::vector<std::optional<double>> formula(n), table(n), memory(n);
  for (std::size_t i = 0; i < n; ++i) {
    const auto& e = c.rows[i];
    if (e.formula) formula[i] = e.formula->published_bubble_ratio;
    table[i] = e.table.makespan;
    memory[i] = e.table.peak_activation_max();
  }
  c.formula_rank = ranks(formula);
  c.table_rank = ranks(table);
  c.memory_rank = ranks(memory);
  // Compare places only among schedules present at both levels.
  std::vector<std::optional<double>> both_formula(n), both_table(n);
  for (std::size_t i = 0; i < n; ++i) {
    if (formula[i]) {
      both_formula[i] = formula[i];
      both_table[i] = table[i];
    }
  }
  const auto rf = ranks(both_formula), rt = ranks(both_table);
  c.rank_changed.resize(n);
  for (std::size_t i = 0; i < n; ++i)
    c.rank_changed[i] = formula[i] && rf[i] != rt[i];
  return c;
}

nlohmann::json to_json(const Comparison& c) {
  nlohmann::json rows = nlohmann::json::array();
  for (std::size_t i = 0; i < c.rows.size(); ++i) {
    auto row = to_json(c.rows[i]);
    row["rank"] = {{"formula", c.formula_rank[i] ? nlohmann::json(c.formula_rank[i])
                                                 : nlohmann::json(nullptr)},
                   {"table", c.table_rank[i]},
                   {"memory", c.memory_rank[i]},
                   {"changed", static_cast<bool>(c.rank_changed[i])}};
    rows.push_back(std::move(row));
  }
  nlohmann::json skipped = nlohmann::json::array();
  for (const auto& s : c.skipped)
    skipped.push_back({{"schedule", s.schedule}, {"reason", s.reason}});
  return {{"schedules", std::move(rows)}, {"skipped", std::move(skipped)}};
}

std::string to_csv(const Comparison& c) {
  auto header = csv_header();
  for (const char* name : {"rank.formula", "rank.table", "rank.memory", "rank.changed"})
    header.emplace_back(name);
  std::string out = csv_line(header);
  for (std::size_t i = 0; i < c.rows.size(); ++i) {
    auto row = csv_row(c.rows[i]);
    row.push_back(c.formula_rank[i] ? std::to_string(c.formula_rank[i]) : "");
    row.push_back(std::to_string(c.table_rank[i]));
    row.push_back(std::to_string(c.memory_rank[i]));
    row.emplace_back(c.rank_changed[i] ? "true" : "false");
    out += csv_line(row);
  }
  return out;
}

std::string to_text(const Comparison& c) {
  std::string out;
  if (!c.rows.empty()) {
    const auto& first = c.rows.front();
    out += fmt::format("{} devices, {} microbatches, costs {} per device share\n\n",
                       first.shape.devices, first.shape.microbatches, to_string(first.costs));
  }
  out += fmt::format("{:<21}| {:<25} | {:<23} | {}\n", "", "formula", "table (idealized)",
                     "activation");
  out += fmt::format("{:<14}{:>6} | {:>10}{:>6}{:>9} | {:>9}{:>8}{:>6} | {:>9}{:>6}\n", "schedule",
                     "stages", "published", "rank", "exact", "makespan", "bubble", "rank",
                     "peak M_a", "rank");
  auto opt = [](const std::optional<double>& v) {
    return v ? fmt::format("{:.4f}", *v) : std::string("-");
  };
  for (std::size_t i = 0; i < c.rows.size(); ++i) {
    const auto& e = c.rows[i];
    const Formula none;
    const Formula& f = e.formula ? *e.formula : none;
    out += fmt::format("{:<14}{:>6} | {:>10}{:>6}{:>9} | {:>9}{:>8.4f}{:>6} | {:>9}{:>6}{}\n",
                       e.schedule, e.shape.stages, opt(f.published_bubble_ratio),
                       c.formula_rank[i] ? std::to_string(c.formula_rank[i]) : "-",
                       opt(f.bubble_ratio), fmt::format("{:g}", e.table.makespan),
                       e.table.bubble_ratio, c.table_rank[i],
                       fmt::format("{:g}", e.table.peak_activation_max()), c.memory_rank[i],
                       c.rank_changed[i] ? "  * rank changes: formula -> table" : "");
  }
  for (const auto& s : c.skipped)
    out += fmt::format("{:<14}skipped: {}\n", s.schedule, s.reason);
  out +=
      "\nFormula rank: by the published bubble ratio, as its paper states it under the paper's\n"
      "assumptions (e.g. equal F and B); 'exact' is the closed form for these costs, equal to the\n"
      "table. Table rank: by makespan. Memory rank: by the largest per-device activation peak.\n"
      "Lower first; ties share a rank. '*' marks a schedule whose place differs between the\n"
      "formula and table rankings (among the schedules ranked at both).\n";
  return out;
}

}  // namespace pipetab
