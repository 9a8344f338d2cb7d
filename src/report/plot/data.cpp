#include "data.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <optional>
#include <tuple>

#include <fmt/format.h>

#include "pipetab/error.hpp"
#include "pipetab/numeric.hpp"

namespace pipetab::plot_detail {

// ---------------------------------------------------------------------------------------------
// Names: what a column is called on a chart, so that a chart reads without the command line.

struct KnownColumn {
  const char* column;
  const char* quantity;
  const char* detail;
  const char* unit;
};

constexpr const char* kActivationUnit = "M_a, microbatch activations per device";

// The columns pipetab's own outputs (csv_header, sweep) write.
const KnownColumn kKnownColumns[] = {
    {"schedule", "schedule", "", ""},
    {"system", "system", "", ""},
    {"model", "model", "", ""},
    {"status", "status", "", ""},
    {"params.devices", "pipeline depth S", "", "devices"},
    {"params.stages", "pipeline stages", "", ""},
    {"params.microbatches", "microbatches M", "", ""},
    {"params.chunks", "model chunks per device v", "", ""},
    {"params.waves", "waves W", "", ""},
    {"params.pipelines", "pipelines", "", ""},
    {"params.variant", "variant", "", ""},
    {"params.split", "split", "", ""},
    {"index", "configuration", "", ""},
    {"costs.F", "forward cost F", "", "per device share"},
    {"costs.B", "backward cost B", "", "per device share"},
    {"costs.I", "input-grad cost I", "", "per device share"},
    {"costs.W", "weight-grad cost W", "", "per device share"},
    {"formula.bubble_ratio", "bubble ratio", "formula", ""},
    {"formula.span_bubble_ratio", "span bubble ratio", "formula", ""},
    {"formula.published_bubble_ratio", "bubble ratio", "published formula", ""},
    {"formula.makespan", "makespan", "formula", "cost units"},
    {"formula.peak_activation", "peak activation", "formula", kActivationUnit},
    {"table.bubble_ratio", "bubble ratio", "table", ""},
    {"table.span_bubble_ratio", "span bubble ratio", "table", ""},
    {"table.makespan", "makespan", "table", "cost units"},
    {"table.peak_activation_max", "peak activation", "", kActivationUnit},
    {"table.ops", "ops", "table", ""},
    {"simulation.system", "system", "", ""},
    {"simulation.model", "model", "", ""},
    {"simulation.runtime_s", "simulated runtime", "", "s"},
    {"simulation.pipeline_end_s", "simulated pipeline time", "", "s"},
    {"simulation.tokens_per_s", "throughput", "", "tokens/s"},
    {"simulation.mfu", "model FLOP/s utilization", "", ""},
    {"simulation.hfu", "hardware FLOP/s utilization", "", ""},
    {"simulation.breakdown.bubble", "pipeline bubble (share of the runtime)", "", ""},
    {"simulation.breakdown.tp_comm", "tensor-parallel communication (share)", "", ""},
    {"simulation.breakdown.expert_comm", "expert all-to-all (share)", "", ""},
    {"simulation.idle_ratio", "idle ratio", "", ""},
    {"simulation.span_idle_ratio", "span idle ratio", "", ""},
    {"simulation.peak_memory_max_bytes", "peak memory per device", "", "bytes"},
    {"simulation.peak_activation_max_bytes", "peak activation memory per device", "", "bytes"},
    {"simulation.transfer_bytes", "data transferred", "", "bytes"},
    {"bandwidth_scale", "bandwidth scale", "", "×"},
    {"latency_scale", "latency scale", "", "×"},
    {"collective_scale", "collective scale", "", "×"},
};

bool ends_with(std::string_view s, std::string_view suffix) {
  return s.size() > suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

Label label_of(const std::string& column) {
  for (const auto& known : kKnownColumns) {
    if (column == known.column) return {known.quantity, known.detail, known.unit};
  }
  // Unknown columns keep their name, so that it can be found in the file; the suffix
  // conventions of pipetab's outputs still give the unit.
  if (ends_with(column, "_bytes")) return {column.substr(0, column.size() - 6), "", "bytes"};
  if (ends_with(column, "_s")) return {column.substr(0, column.size() - 2), "", "s"};
  return {column, "", ""};
}

std::string parenthesized(const std::vector<std::string>& parts) {
  std::string inner;
  for (const auto& p : parts) {
    if (p.empty()) continue;
    inner += (inner.empty() ? "" : ", ") + p;
  }
  return inner.empty() ? "" : " (" + inner + ")";
}

std::string title_of(const Label& l) {
  return l.quantity + parenthesized({l.detail, l.unit});
}

// Without the unit: for chart titles, legends and ratios.
std::string name_of(const Label& l) {
  return l.quantity + parenthesized({l.detail});
}

// One label for several y columns: the shared quantity or unit, so the axis still says what it
// measures; the legend tells the columns apart.
Label common_label(const std::vector<Label>& labels) {
  if (labels.size() == 1) return labels.front();
  const bool same_quantity = std::all_of(labels.begin(), labels.end(), [&](const Label& l) {
    return l.quantity == labels.front().quantity;
  });
  const bool same_unit = std::all_of(labels.begin(), labels.end(),
                                     [&](const Label& l) { return l.unit == labels.front().unit; });
  if (same_quantity && same_unit) return {labels.front().quantity, "", labels.front().unit};
  std::vector<std::string> names;
  for (const auto& l : labels) {
    const auto text = same_unit ? name_of(l) : title_of(l);
    if (std::find(names.begin(), names.end(), text) == names.end()) names.push_back(text);
  }
  return {fmt::format("{}", fmt::join(names, same_unit ? ", " : "; ")), "",
          same_unit ? labels.front().unit : ""};
}

// The columns of a --series or --facet: one name, or several separated by commas.
std::vector<std::string> spec_columns(const std::string& spec) {
  std::vector<std::string> columns;
  std::size_t start = 0;
  while (!spec.empty() && start <= spec.size()) {
    auto end = spec.find(',', start);
    if (end == std::string::npos) end = spec.size();
    std::string name = spec.substr(start, end - start);
    name.erase(0, name.find_first_not_of(' '));
    name.erase(name.find_last_not_of(' ') + 1);
    columns.push_back(std::move(name));
    start = end + 1;
  }
  return columns;
}

// "schedule", "schedule, split": the readable names of a --series or --facet.
std::string spec_name(const std::string& spec, const char* separator) {
  std::vector<std::string> names;
  for (const auto& column : spec_columns(spec))
    names.push_back(name_of(label_of(column)));
  return fmt::format("{}", fmt::join(names, separator));
}

namespace {

std::optional<double> parse_number(std::string_view text) {
  while (!text.empty() && (text.front() == ' ' || text.front() == '\t'))
    text.remove_prefix(1);
  while (!text.empty() && (text.back() == ' ' || text.back() == '\t'))
    text.remove_suffix(1);
  double value = 0.0;
  const auto [end, ec] = parse_double(text.data(), text.data() + text.size(), value);
  if (text.empty() || ec != std::errc{} || end != text.data() + text.size() ||
      !std::isfinite(value)) {
    return std::nullopt;
  }
  return value;
}

// The row behind each point: (facet, series, y column, x) -> row index.
using PointRows = std::map<std::tuple<std::size_t, std::size_t, std::size_t, double>, std::size_t>;

class Builder {
 public:
  Builder(const io::DataTable& table, const PlotOptions& options) : table_(table), o_(options) {}

  Data build() {
    if (o_.x.empty()) throw Error("plot: give the x column (--x)");
    if (o_.y.empty()) throw Error("plot: give at least one y column (--y)");
    if (o_.y.size() > kMaxY) {
      throw Error(fmt::format("plot: {} y columns are too many for one chart (at most {})",
                              o_.y.size(), kMaxY));
    }
    if (!o_.relative_to.empty() && o_.series.empty())
      throw Error("plot: --relative-to needs --series (the baseline is one of its values)");
    const int x = column(o_.x, "--x");
    std::vector<int> ys;
    for (const auto& y : o_.y)
      ys.push_back(column(y, "--y"));
    std::vector<int> series, facet;
    for (const auto& name : spec_columns(o_.series))
      series.push_back(column(name, "--series"));
    for (const auto& name : spec_columns(o_.facet))
      facet.push_back(column(name, "--facet"));
    const auto rows = filtered_rows();

    Data data;
    std::map<std::tuple<std::size_t, std::size_t, std::size_t>, std::size_t> line_of;
    PointRows point_row;
    for (const std::size_t r : rows) {
      const auto& cells = table_.rows[r];
      for (std::size_t yi = 0; yi < ys.size(); ++yi) {
        const auto& y_cell = cells[static_cast<std::size_t>(ys[yi])];
        if (y_cell.empty()) continue;  // a skipped configuration, or no such level
        const double yv = number(r, ys[yi]);
        const double xv = number(r, x);
        if (o_.logx && xv <= 0.0) non_positive(r, x, "--logx");
        const std::size_t f = add_facet(data.facets, cells, facet);
        const std::size_t s = data.series.add(series_value(cells, series));
        const auto [point, fresh] = point_row.emplace(std::tuple{f, s, yi, xv}, r);
        if (!fresh) duplicate(point->second, r, data, f, s, xv);
        const auto [line, added] = line_of.emplace(std::tuple{f, s, yi}, data.lines.size());
        if (added) data.lines.push_back({f, s, yi, {}});
        data.lines[line->second].points.push_back({xv, yv, r});
      }
    }
    if (data.lines.empty()) {
      throw Error(fmt::format(
          "plot: nothing to draw: {} has {} row{}, {} left after --where, and none of them has "
          "a value in {}",
          table_.file, table_.rows.size(), table_.rows.size() == 1 ? "" : "s", rows.size(),
          fmt::join(o_.y, ", ")));
    }
    if (data.series.values.size() > kMaxSeries) {
      throw Error(fmt::format(
          "plot: {} series (values of {}) are too many to tell apart (at most {}); choose some "
          "with --where, or split them with --facet",
          data.series.values.size(), o_.series, kMaxSeries));
    }
    if (!o_.relative_to.empty()) divide(data, point_row);
    if (o_.logy) {
      for (const auto& line : data.lines) {
        for (const auto& p : line.points) {
          if (p.y > 0.0) continue;
          if (o_.relative_to.empty()) non_positive(p.row, ys[line.y], "--logy");
          throw Error(fmt::format("{}:{}: {} relative to {} is {}; --logy needs values above 0",
                                  table_.file, table_.lines[p.row], o_.y[line.y], o_.relative_to,
                                  exact(p.y)));
        }
      }
    }
    for (auto& line : data.lines) {
      std::sort(line.points.begin(), line.points.end(),
                [](const Point& a, const Point& b) { return a.x < b.x; });
    }
    return data;
  }

 private:
  int column(const std::string& name, const char* option) const {
    const int index = table_.column(name);
    if (index < 0) {
      throw Error(fmt::format(
          "plot: {}: unknown column '{}'; the columns of {} are: {}", option, name, table_.file,
          table_.columns.empty() ? std::string("(none: the file is empty)") : listed()));
    }
    return index;
  }

  // The table's columns for a message: all of a results file's hundred or so, the first ones
  // of a file with thousands.
  std::string listed() const {
    constexpr std::size_t kShown = 200;
    const auto& c = table_.columns;
    if (c.size() <= kShown) return fmt::format("{}", fmt::join(c, ", "));
    return fmt::format("{}, ... ({} in all)",
                       fmt::join(c.begin(), c.begin() + static_cast<std::ptrdiff_t>(kShown), ", "),
                       c.size());
  }

  std::vector<std::size_t> filtered_rows() const {
    std::vector<std::size_t> rows(table_.rows.size());
    for (std::size_t r = 0; r < rows.size(); ++r)
      rows[r] = r;
    for (const auto& [name, value] : o_.where) {
      const auto c = static_cast<std::size_t>(column(name, "--where"));
      std::vector<std::size_t> kept;
      Values seen;
      for (const std::size_t r : rows) {
        seen.add(table_.rows[r][c]);
        if (table_.rows[r][c] == value) kept.push_back(r);
      }
      // Say which filter emptied the chart, and what it could have matched.
      if (kept.empty() && !rows.empty()) {
        std::vector<std::string> shown;
        for (std::size_t i = 0; i < seen.values.size() && i < 12; ++i)
          shown.push_back("'" + seen.values[i] + "'");
        if (seen.values.size() > 12) shown.emplace_back("...");
        throw Error(fmt::format("plot: --where {}={}: no row matches; {} holds {}", name, value,
                                name, fmt::join(shown, ", ")));
      }
      rows = std::move(kept);
    }
    return rows;
  }

  double number(std::size_t row, int column) const {
    const auto& cell = table_.rows[row][static_cast<std::size_t>(column)];
    const auto& name = table_.columns[static_cast<std::size_t>(column)];
    if (const auto value = parse_number(cell)) return *value;
    if (cell.empty()) {
      throw Error(fmt::format("{}:{}: column '{}' is empty, expected a number", table_.file,
                              table_.lines[row], name));
    }
    throw Error(fmt::format("{}:{}: column '{}' holds '{}', expected a number{}", table_.file,
                            table_.lines[row], name, cell,
                            cell.find(';') != std::string::npos
                                ? " (it is a list of per-device values; plot a single-valued "
                                  "column such as the matching *_max one)"
                                : ""));
  }

  // The first column's value, the others' named in parentheses: "chimera-asym (split 1:2)";
  // empty ones are left out, so a schedule without the option reads as just its name.
  std::string series_value(const io::DataRow& cells, const std::vector<int>& columns) const {
    if (columns.empty()) return "";
    std::string value = cells[static_cast<std::size_t>(columns[0])];
    std::vector<std::string> more;
    for (std::size_t i = 1; i < columns.size(); ++i) {
      const auto& cell = cells[static_cast<std::size_t>(columns[i])];
      const auto& name = table_.columns[static_cast<std::size_t>(columns[i])];
      if (!cell.empty()) more.push_back(name_of(label_of(name)) + " " + cell);
    }
    if (more.empty()) return value;
    const std::string extra = fmt::format("{}", fmt::join(more, ", "));
    return value.empty() ? extra : value + " (" + extra + ")";
  }

  std::size_t add_facet(Values& facets, const io::DataRow& cells,
                        const std::vector<int>& columns) const {
    std::vector<std::string> values, titles;
    for (const int c : columns) {
      const auto& cell = cells[static_cast<std::size_t>(c)];
      values.push_back(cell);
      titles.push_back(name_of(label_of(table_.columns[static_cast<std::size_t>(c)])) + " = " +
                       (cell.empty() ? "(empty)" : cell));
    }
    return facets.add(fmt::format("{}", fmt::join(values, ", ")),
                      fmt::format("{}", fmt::join(titles, ", ")));
  }

  [[noreturn]] void non_positive(std::size_t row, int column, const char* option) const {
    throw Error(fmt::format("{}:{}: column '{}' holds {}; {} needs values above 0", table_.file,
                            table_.lines[row], table_.columns[static_cast<std::size_t>(column)],
                            table_.rows[row][static_cast<std::size_t>(column)], option));
  }

  [[noreturn]] void duplicate(std::size_t first, std::size_t second, const Data& data,
                              std::size_t f, std::size_t s, double x) const {
    // Naming the columns that tell the rows apart shows what to filter or facet by; result
    // columns (and sweep's running index) differ anyway and would only hide them.
    std::vector<std::string> differ;
    for (std::size_t c = 0; c < table_.columns.size(); ++c) {
      const auto& name = table_.columns[c];
      const bool result = name == "index" || name == "reason" || name.rfind("table.", 0) == 0 ||
                          name.rfind("formula.", 0) == 0 ||
                          (name.rfind("simulation.", 0) == 0 && name != "simulation.system" &&
                           name != "simulation.model");
      const bool plotted = std::find(o_.y.begin(), o_.y.end(), name) != o_.y.end();
      if (!result && !plotted && table_.rows[first][c] != table_.rows[second][c])
        differ.push_back(name);
    }
    throw Error(fmt::format(
        "{}:{} and {}:{} both give series {} at x = {}{}: filter with --where or add --facet{}",
        table_.file, table_.lines[first], table_.file, table_.lines[second],
        o_.series.empty() ? "(the only one)" : "'" + data.series.values[s] + "'", exact(x),
        o_.facet.empty() ? "" : fmt::format(" (facet {})", data.facets.titles[f]),
        differ.empty() ? "" : fmt::format(" (the rows differ in {})", fmt::join(differ, ", "))));
  }

  void divide(Data& data, const PointRows& point_row) const {
    const auto found = data.series.index.find(o_.relative_to);
    if (found == data.series.index.end()) {
      std::vector<std::string> shown;
      for (const auto& v : data.series.values)
        shown.push_back("'" + v + "'");
      throw Error(
          fmt::format("plot: --relative-to '{}': no plotted series is '{}'; the series are {}",
                      o_.relative_to, o_.relative_to, fmt::join(shown, ", ")));
    }
    const std::size_t base = found->second;
    // Baseline values first: dividing the baseline's own line in place would change them.
    std::map<std::tuple<std::size_t, std::size_t, double>, double> baseline;
    for (const auto& line : data.lines) {
      if (line.series != base) continue;
      for (const auto& p : line.points)
        baseline.emplace(std::tuple{line.facet, line.y, p.x}, p.y);
    }
    for (auto& line : data.lines) {
      for (auto& p : line.points) {
        const auto b = baseline.find(std::tuple{line.facet, line.y, p.x});
        const std::string where =
            o_.facet.empty() ? "" : fmt::format(" (facet {})", data.facets.titles[line.facet]);
        if (b == baseline.end()) {
          throw Error(fmt::format(
              "{}:{}: --relative-to {}: series '{}' has no {} at x = {}{} to divide series '{}' "
              "by",
              table_.file, table_.lines[p.row], o_.relative_to, o_.relative_to, o_.y[line.y],
              exact(p.x), where, data.series.values[line.series]));
        }
        if (b->second == 0.0) {
          const auto row = point_row.at(std::tuple{line.facet, base, line.y, p.x});
          throw Error(fmt::format(
              "{}:{}: --relative-to {}: {} is 0 at x = {}{}; cannot divide by it", table_.file,
              table_.lines[row], o_.relative_to, o_.y[line.y], exact(p.x), where));
        }
        p.y = line.series == base ? 1.0 : p.y / b->second;
      }
    }
  }

  const io::DataTable& table_;
  const PlotOptions& o_;
};

}  // namespace

std::string exact(double value) {
  return fmt::format("{}", value);
}

Data build_data(const io::DataTable& table, const PlotOptions& options) {
  return Builder(table, options).build();
}

}  // namespace pipetab::plot_detail
