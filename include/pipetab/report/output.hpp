// Machine- and human-readable renderings of evaluations (docs/design.md §7 is the JSON contract).
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "pipetab/report/evaluation.hpp"

namespace pipetab {

/// The `analyze --format json` object: schedule, params, costs, formula, table, simulation
/// (null until the simulation level exists). Key names are a stable contract.
nlohmann::json to_json(const Evaluation& evaluation);

/// One line: schedule, sizes, chunks/waves/pipelines/variant where they apply, costs.
std::string summary(const Evaluation& evaluation);

/// A readable multi-line report.
std::string to_text(const Evaluation& evaluation);

/// The evaluation as one flat record: the JSON keys flattened with dots ("table.bubble_ratio"),
/// always every key, in csv_header() order; per-device values are arrays, unknown values null.
/// CSV rows and sweep rows (CSV or JSON Lines) are made from it.
using FlatRecord = std::vector<std::pair<std::string, nlohmann::json>>;
FlatRecord flat_record(const Evaluation& evaluation);

/// CSV column names: the keys of flat_record().
std::vector<std::string> csv_header();

/// One CSV cell for a flat value: numbers as format_number, arrays one cell joined by ';',
/// null empty, booleans true/false.
std::string csv_cell(const nlohmann::json& value);

/// Appends the cell text of `value` to `line`, quoted as csv_line quotes (without a separator):
/// a whole row built without a string per cell.
void append_csv_cell(std::string& line, const nlohmann::json& value);

/// One CSV row, in csv_header() order. Unknown values are empty cells.
std::vector<std::string> csv_row(const Evaluation& evaluation);

/// Joins cells into one CSV line (RFC 4180 quoting where needed), ending in '\n'.
std::string csv_line(const std::vector<std::string>& cells);

/// Every registered schedule as `pipetab list --format json` prints it: name, title, source,
/// constraints, and the options each takes with their defaults.
nlohmann::json schedules_json();

/// Shortest text that reads back as the same double ("28.5", "0.15789473684210525").
std::string format_number(double value);

}  // namespace pipetab
