#include "pipetab/report/plot.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstring>
#include <map>
#include <optional>
#include <tuple>

#include "xml.hpp"
#include <fmt/format.h>

#include "pipetab/error.hpp"

namespace pipetab {
namespace {

using report_detail::xml;

// ---------------------------------------------------------------------------------------------
// Names: what a column is called on a chart, so that a chart reads without the command line.

struct Label {
  std::string quantity;  // "bubble ratio"
  std::string detail;    // "table": which of several measures of the quantity
  std::string unit;      // "s", "bytes", "" for ratios and counts
};

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

// ---------------------------------------------------------------------------------------------
// Text.

// Roughly the advance width of `text` in a sans-serif font of size `size` (DejaVu Sans-like, a
// little generous): enough to keep labels apart and size the legend without a font engine.
double text_width(std::string_view text, double size, bool bold = false) {
  double em = 0.0;
  for (const char ch : text) {
    const auto c = static_cast<unsigned char>(ch);
    if ((c & 0xC0) == 0x80) continue;  // UTF-8 continuation byte
    if (c >= 0x80) {
      em += 0.7;
    } else if (c == ' ') {
      em += 0.33;
    } else if (c >= '0' && c <= '9') {
      em += 0.64;
    } else if (std::strchr(".,:;'|!", ch) != nullptr) {
      em += 0.35;
    } else if (std::strchr("ijlftrI()[]-", ch) != nullptr) {
      em += 0.42;
    } else if (std::strchr("mwMW", ch) != nullptr) {
      em += 0.95;
    } else if (c >= 'A' && c <= 'Z') {
      em += 0.72;
    } else {
      em += 0.62;
    }
  }
  return em * size * (bold ? 1.1 : 1.0);
}

// Splits `text` at spaces into lines of at most `width` (a single long word stays whole).
std::vector<std::string> wrapped(const std::string& text, double size, double width) {
  std::vector<std::string> lines;
  std::string line;
  std::size_t start = 0;
  while (start <= text.size()) {
    auto end = text.find(' ', start);
    if (end == std::string::npos) end = text.size();
    const std::string word = text.substr(start, end - start);
    const std::string longer = line.empty() ? word : line + " " + word;
    if (!line.empty() && text_width(longer, size) > width) {
      lines.push_back(line);
      line = word;
    } else {
      line = longer;
    }
    start = end + 1;
  }
  lines.push_back(line);
  return lines;
}

// ---------------------------------------------------------------------------------------------
// Numbers.

std::optional<double> parse_number(std::string_view text) {
  while (!text.empty() && (text.front() == ' ' || text.front() == '\t'))
    text.remove_prefix(1);
  while (!text.empty() && (text.back() == ' ' || text.back() == '\t'))
    text.remove_suffix(1);
  double value = 0.0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (text.empty() || ec != std::errc{} || end != text.data() + text.size() ||
      !std::isfinite(value)) {
    return std::nullopt;
  }
  return value;
}

// Shortest round trip, for data attributes and messages.
std::string exact(double value) {
  return fmt::format("{}", value);
}

// At most six decimals, trailing zeros dropped: "0.3", "2", "1000".
std::string trimmed(double value) {
  std::string s = fmt::format("{:.6f}", value);
  s.erase(s.find_last_not_of('0') + 1);
  if (s.back() == '.') s.pop_back();
  return s == "-0" ? "0" : s;
}

// The smallest of 1, 2, 5 × 10^k that is at least `raw`.
double nice_step(double raw) {
  const double power = std::pow(10.0, std::floor(std::log10(raw)));
  for (const double m : {1.0, 2.0, 5.0, 10.0}) {
    if (m * power >= raw * (1 - 1e-9)) return m * power;
  }
  return 10.0 * power;
}

// The 1, 2, 5 × 10^k nearest to `raw` (on a log scale).
double nearest_nice_step(double raw) {
  const double power = std::pow(10.0, std::floor(std::log10(raw)));
  double best = power;
  for (const double m : {2.0, 5.0, 10.0}) {
    if (std::abs(std::log(m * power / raw)) < std::abs(std::log(best / raw))) best = m * power;
  }
  return best;
}

// The next 1, 2, 5 × 10^k below `step` (itself one of them).
double smaller_nice_step(double step) {
  const double power = std::pow(10.0, std::floor(std::log10(step) + 1e-9));
  const double m = step / power;
  return m > 4.0 ? 2.0 * power : m > 1.5 ? power : 0.5 * power;
}

struct ByteUnit {
  double size;
  const char* name;
};

// Decimal SI, as memory capacities are quoted.
ByteUnit byte_unit(double magnitude) {
  for (const ByteUnit unit :
       {ByteUnit{1e12, "TB"}, ByteUnit{1e9, "GB"}, ByteUnit{1e6, "MB"}, ByteUnit{1e3, "kB"}}) {
    if (magnitude >= unit.size) return unit;
  }
  return {1.0, "B"};
}

// A linear tick label: as many decimals as the step needs, so neighbours read alike and binary
// fractions never show ("0.30000000000000004").
std::string linear_label(double value, double step, double magnitude, bool bytes) {
  if (bytes) {
    const ByteUnit unit = byte_unit(magnitude);
    const double in_unit = step / unit.size;
    const int decimals = std::max(0, -static_cast<int>(std::floor(std::log10(in_unit) + 1e-9)));
    return fmt::format("{:.{}f} {}", value / unit.size, decimals, unit.name);
  }
  if (value == 0.0) return "0";
  if (magnitude >= 1e6 || magnitude < 1e-3) {
    const int exponent = static_cast<int>(std::floor(std::log10(magnitude) + 1e-9));
    const int digits =
        std::max(0, exponent - static_cast<int>(std::floor(std::log10(step) + 1e-9)));
    const double mantissa = value / std::pow(10.0, exponent);
    return fmt::format("{:.{}f}e{}", mantissa, digits, exponent);
  }
  const int decimals = std::max(0, -static_cast<int>(std::floor(std::log10(step) + 1e-9)));
  return fmt::format("{:.{}f}", value, decimals);
}

// A tick label on a log axis, whose ticks are m × 10^k.
std::string log_label(double value, bool bytes) {
  if (bytes) {
    const ByteUnit unit = byte_unit(value * (1 + 1e-9));
    return trimmed(value / unit.size) + " " + unit.name;
  }
  const int exponent = static_cast<int>(std::floor(std::log10(value) + 1e-9));
  if (exponent >= -4 && exponent <= 5) return trimmed(value);
  return fmt::format("{}e{}", trimmed(value / std::pow(10.0, exponent)), exponent);
}

// ---------------------------------------------------------------------------------------------
// Axes.

struct Tick {
  double value;
  std::string label;  // empty: a minor gridline only
};

struct Axis {
  bool log = false;
  bool bytes = false;
  double lo = 0.0, hi = 1.0;  // data range shown (padded)
  double decades = 0.0;       // on a log axis, the data's span in decades (unpadded)
  double length = 1.0;        // pixels
  bool horizontal = true;
  std::vector<Tick> ticks;

  // Position along the axis in pixels from its start (left or bottom).
  double offset(double v) const {
    const double t = log ? (std::log10(v) - std::log10(lo)) / (std::log10(hi) - std::log10(lo))
                         : (v - lo) / (hi - lo);
    return t * length;
  }
};

// A little room around the data, so points do not sit on the frame; a valid range also when
// every value is equal.
void set_range(Axis& axis, double min, double max) {
  if (axis.log) {
    double lo = std::log10(min), hi = std::log10(max);
    axis.decades = hi - lo;
    const double pad = hi > lo ? 0.05 * (hi - lo) : 0.5;
    axis.lo = std::pow(10.0, lo - pad);
    axis.hi = std::pow(10.0, hi + pad);
    return;
  }
  double pad = 0.05 * (max - min);
  if (!(pad > 0.0)) pad = min == 0.0 ? 1.0 : 0.1 * std::abs(min);
  axis.lo = min - pad;
  axis.hi = max + pad;
  if (!std::isfinite(axis.lo) || !std::isfinite(axis.hi) || !std::isfinite(axis.hi - axis.lo))
    throw Error(fmt::format("plot: values from {} to {} are too large to plot", min, max));
}

// True if neighbouring labels keep clear of each other.
bool labels_fit(const Axis& axis, const std::vector<Tick>& ticks) {
  double last_end = -1e300;
  for (const Tick& t : ticks) {
    if (t.label.empty()) continue;
    const double half = axis.horizontal ? text_width(t.label, 11) / 2 + 5 : 9.0;
    const double at = axis.offset(t.value);
    if (at - half < last_end) return false;
    last_end = at + half;
  }
  return true;
}

std::vector<Tick> linear_ticks(const Axis& axis) {
  const double magnitude = std::max(std::abs(axis.lo), std::abs(axis.hi));
  // About one label every 80 px across and 55 px up, but at least two, and fewer if the labels
  // need the room.
  const double span = axis.hi - axis.lo;
  if (!(span > magnitude * 1e-9)) {
    // Differences near double precision have no nice steps: label the ends.
    return {{axis.lo, exact(axis.lo)}, {axis.hi, exact(axis.hi)}};
  }
  double step =
      nearest_nice_step(span / std::max(2.0, axis.length / (axis.horizontal ? 80.0 : 55.0)));
  while (std::floor(axis.hi / step + 1e-9) - std::ceil(axis.lo / step - 1e-9) < 1.0)
    step = smaller_nice_step(step);
  std::vector<Tick> ticks;
  for (int attempt = 0; attempt < 20; ++attempt) {
    ticks.clear();
    const auto first = static_cast<long long>(std::ceil(axis.lo / step - 1e-9));
    const auto last = static_cast<long long>(std::floor(axis.hi / step + 1e-9));
    for (long long k = first; k <= last; ++k) {
      double v = static_cast<double>(k) * step;
      if (std::abs(v) < step * 1e-9) v = 0.0;
      ticks.push_back({v, linear_label(v, step, magnitude, axis.bytes)});
    }
    if (labels_fit(axis, ticks)) break;
    step = nice_step(step * 1.5);
  }
  return ticks;
}

std::vector<Tick> log_ticks(const Axis& axis) {
  const double llo = std::log10(axis.lo), lhi = std::log10(axis.hi);
  const int k0 = static_cast<int>(std::floor(llo)), k1 = static_cast<int>(std::ceil(lhi));
  const auto inside = [&](double v) {
    return v >= axis.lo * (1 - 1e-12) && v <= axis.hi * (1 + 1e-12);
  };
  const auto make = [&](const std::vector<int>& mults, int every) {
    std::vector<Tick> ticks;
    for (int k = k0; k <= k1; ++k) {
      for (int m = 1; m <= 9; ++m) {
        const double v = m * std::pow(10.0, k);
        if (!inside(v)) continue;
        const bool labelled =
            std::find(mults.begin(), mults.end(), m) != mults.end() && (m != 1 || k % every == 0);
        // Minor gridlines give a log axis its look, but too many of them are noise.
        if (labelled) {
          ticks.push_back({v, log_label(v, axis.bytes)});
        } else if (lhi - llo <= 6.0) {
          ticks.push_back({v, ""});
        }
      }
    }
    return ticks;
  };
  const auto labelled = [](const std::vector<Tick>& ticks) {
    return std::count_if(ticks.begin(), ticks.end(),
                         [](const Tick& t) { return !t.label.empty(); });
  };
  // Under two decades, 2 and 5 are labelled too; within less than one, every digit.
  if (axis.decades < 2.0) {
    for (const auto& mults :
         {std::vector<int>{1, 2, 5}, std::vector<int>{1, 2, 3, 4, 5, 6, 7, 8, 9}}) {
      auto ticks = make(mults, 1);
      if (labelled(ticks) >= 2 && labels_fit(axis, ticks)) return ticks;
    }
  }
  for (const int every : {1, 2, 3, 5, 10, 20, 50}) {
    auto ticks = make({1}, every);
    if (labelled(ticks) >= 2 && labels_fit(axis, ticks)) return ticks;
  }
  // A sliver of one decade: nice linear values, placed logarithmically.
  return linear_ticks(axis);
}

// ---------------------------------------------------------------------------------------------
// The data.

struct Point {
  double x, y;
  std::size_t row;
};

struct Line {
  std::size_t facet, series, y;
  std::vector<Point> points;
};

// Distinct values in first-appearance order, each with a title (a facet's panel title).
struct Values {
  std::vector<std::string> values, titles;
  std::map<std::string, std::size_t> index;

  std::size_t add(const std::string& value, const std::string& title = {}) {
    const auto [it, inserted] = index.emplace(value, values.size());
    if (inserted) {
      values.push_back(value);
      titles.push_back(title);
    }
    return it->second;
  }
};

struct Data {
  Values facets, series;
  std::vector<Line> lines;
};

// The row behind each point: (facet, series, y column, x) -> row index.
using PointRows = std::map<std::tuple<std::size_t, std::size_t, std::size_t, double>, std::size_t>;

constexpr std::size_t kMaxSeries = 16;  // 8 colours, then the same with hollow markers
constexpr std::size_t kMaxY = 6;        // dash styles and markers that stay distinguishable

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
          table_.columns.empty() ? std::string("(none: the file is empty)")
                                 : fmt::format("{}", fmt::join(table_.columns, ", "))));
    }
    return index;
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
  std::string series_value(const std::vector<std::string>& cells,
                           const std::vector<int>& columns) const {
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

  std::size_t add_facet(Values& facets, const std::vector<std::string>& cells,
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

// ---------------------------------------------------------------------------------------------
// Drawing.

// Okabe & Ito's colour-blind-safe palette, the yellow last as it is faint on white.
constexpr const char* kColours[] = {"#0072B2", "#E69F00", "#009E73", "#D55E00",
                                    "#CC79A7", "#56B4E9", "#000000", "#F0E442"};
constexpr std::size_t kColourCount = sizeof(kColours) / sizeof(kColours[0]);
constexpr const char* kDashes[] = {"", "7,4", "2,3", "9,3,2,3", "14,4", "4,2,1,2"};

const char* colour(std::size_t series) {
  return kColours[series % kColourCount];
}

std::string dash(std::size_t y) {
  return y == 0 ? "" : fmt::format(" stroke-dasharray=\"{}\"", kDashes[y]);
}

// Marker `shape` (one per y column) centred at (x, y); hollow for the second round of colours.
std::string marker(std::size_t shape, double x, double y, const char* fill, bool hollow,
                   const std::string& title = {}) {
  const std::string paint =
      hollow ? fmt::format("fill=\"white\" stroke=\"{}\" stroke-width=\"1.5\"", fill)
             : fmt::format("fill=\"{}\"", fill);
  // The tooltip says which point it is, to read values off the chart in a browser.
  const auto close = [&](const char* element) {
    return title.empty() ? std::string("/>")
                         : fmt::format("><title>{}</title></{}>", xml(title), element);
  };
  switch (shape) {
    case 1:
      return fmt::format("<rect x=\"{:.1f}\" y=\"{:.1f}\" width=\"7\" height=\"7\" {}{}\n", x - 3.5,
                         y - 3.5, paint, close("rect"));
    case 2:
      return fmt::format("<path d=\"M{:.1f},{:.1f}L{:.1f},{:.1f}L{:.1f},{:.1f}Z\" {}{}\n", x,
                         y - 4.5, x + 4.2, y + 3, x - 4.2, y + 3, paint, close("path"));
    case 3:
      return fmt::format(
          "<path d=\"M{:.1f},{:.1f}L{:.1f},{:.1f}L{:.1f},{:.1f}L{:.1f},{:.1f}Z\" {}{}\n", x,
          y - 4.5, x + 4.5, y, x, y + 4.5, x - 4.5, y, paint, close("path"));
    case 4:
      return fmt::format("<path d=\"M{:.1f},{:.1f}L{:.1f},{:.1f}L{:.1f},{:.1f}Z\" {}{}\n", x,
                         y + 4.5, x + 4.2, y - 3, x - 4.2, y - 3, paint, close("path"));
    case 5:
      return fmt::format(
          "<path d=\"M{:.1f},{:.1f}L{:.1f},{:.1f}M{:.1f},{:.1f}L{:.1f},{:.1f}\" fill=\"none\" "
          "stroke=\"{}\" stroke-width=\"2\"{}\n",
          x - 3.5, y - 3.5, x + 3.5, y + 3.5, x - 3.5, y + 3.5, x + 3.5, y - 3.5, fill,
          close("path"));
    default:
      return fmt::format("<circle cx=\"{:.1f}\" cy=\"{:.1f}\" r=\"3.8\" {}{}\n", x, y, paint,
                         close("circle"));
  }
}

std::string shown(const std::string& value) {
  return value.empty() ? "(empty)" : value;
}

// Layout, in pixels.
constexpr double kTickFont = 11, kAxisFont = 13, kTitleFont = 16, kLegendFont = 12;
constexpr double kMargin = 16;

}  // namespace

std::string plot_svg(const io::DataTable& table, const PlotOptions& o) {
  const Data data = Builder(table, o).build();
  const bool faceted = !o.facet.empty();
  const bool several_y = o.y.size() > 1;
  const std::size_t panels = data.facets.values.size();
  const std::size_t grid_columns = std::min<std::size_t>(3, panels);
  const std::size_t grid_rows = (panels + grid_columns - 1) / grid_columns;

  // Titles.
  std::vector<Label> y_labels;
  for (const auto& y : o.y)
    y_labels.push_back(label_of(y));
  const Label x_label = label_of(o.x);
  const Label y_common = common_label(y_labels);
  bool y_bytes = o.relative_to.empty();
  for (const auto& l : y_labels)
    y_bytes = y_bytes && l.unit == "bytes";
  const std::string y_name = o.relative_to.empty()
                                 ? name_of(y_common)
                                 : name_of(y_common) + " relative to " + o.relative_to;
  const std::string x_title = o.xlabel.empty() ? title_of(x_label) : o.xlabel;
  const std::string y_title = !o.ylabel.empty()       ? o.ylabel
                              : o.relative_to.empty() ? title_of(y_common)
                                                      : y_name;
  const std::string title =
      !o.title.empty() ? o.title
                       : y_name + " vs " + name_of(x_label) +
                             (faceted ? " by " + spec_name(o.facet, " and ") : std::string());
  std::vector<std::string> filters;
  for (const auto& [column, value] : o.where)
    filters.push_back(fmt::format("{} = {}", name_of(label_of(column)), value));
  const std::string subtitle =
      filters.empty() ? "" : fmt::format("rows with {}", fmt::join(filters, ", "));

  // Axes, shared by every panel so that panels compare.
  Axis x_axis, y_axis;
  x_axis.log = o.logx;
  y_axis.log = o.logy;
  y_axis.bytes = y_bytes;
  x_axis.bytes = x_label.unit == "bytes";
  y_axis.horizontal = false;
  double x_min = 1e300, x_max = -1e300, y_min = 1e300, y_max = -1e300;
  for (const auto& line : data.lines) {
    for (const auto& p : line.points) {
      x_min = std::min(x_min, p.x);
      x_max = std::max(x_max, p.x);
      y_min = std::min(y_min, p.y);
      y_max = std::max(y_max, p.y);
    }
  }
  set_range(x_axis, x_min, x_max);
  set_range(y_axis, y_min, y_max);
  x_axis.length = panels > 1 ? 300 : 560;
  y_axis.length = panels > 1 ? 200 : 340;
  x_axis.ticks = x_axis.log ? log_ticks(x_axis) : linear_ticks(x_axis);
  y_axis.ticks = y_axis.log ? log_ticks(y_axis) : linear_ticks(y_axis);

  // Geometry: a grid of panels, the y title left of it, the x title under it, the legend right.
  double y_tick_width = 0;
  for (const auto& t : y_axis.ticks)
    y_tick_width = std::max(y_tick_width, text_width(t.label, kTickFont));
  const double panel_left = y_tick_width + 10;  // tick labels
  const double panel_top = faceted ? 24 : 8;    // panel title
  const double panel_bottom = 24;               // tick labels
  const double panel_right = 18;
  const double cell_w = panel_left + x_axis.length + panel_right;
  const double cell_h = panel_top + y_axis.length + panel_bottom;
  const double grid_h = static_cast<double>(grid_rows) * cell_h;
  const double grid_w = static_cast<double>(grid_columns) * cell_w;
  const auto y_title_lines = wrapped(y_title, kAxisFont, grid_h - 10);
  const auto x_title_lines = wrapped(x_title, kAxisFont, grid_w - panel_left);
  const double grid_x = kMargin + 18.0 * static_cast<double>(y_title_lines.size());
  const double grid_y = 40 + (subtitle.empty() ? 0 : 18);

  // The legend: series (colour), then y columns (dash and marker) when there are several.
  struct Entry {
    std::string text;
    const char* stroke;
    std::size_t dash;
    std::optional<std::size_t> shape;  // the marker, if any
    bool hollow, heading;
  };
  std::vector<Entry> legend;
  if (!o.series.empty()) {
    legend.push_back({spec_name(o.series, ", "), "", 0, std::nullopt, false, true});
    for (std::size_t s = 0; s < data.series.values.size(); ++s) {
      const auto& value = data.series.values[s];
      legend.push_back(
          {shown(value) + (value == o.relative_to && !o.relative_to.empty() ? " (baseline)" : ""),
           colour(s), 0,
           // With several y columns the markers tell the columns apart; hollow ones still mark
           // the second round of colours.
           several_y && s < kColourCount ? std::nullopt : std::optional<std::size_t>(0),
           s >= kColourCount, false});
    }
  }
  if (several_y) {
    legend.push_back({"line style", "", 0, std::nullopt, false, true});
    for (std::size_t y = 0; y < o.y.size(); ++y)
      legend.push_back({title_of(y_labels[y]), "#444444", y, y, false, false});
  }
  double legend_w = 0;
  for (const auto& e : legend)
    legend_w =
        std::max(legend_w, text_width(e.text, kLegendFont, e.heading) + (e.heading ? 0 : 38));
  const double legend_x = grid_x + grid_w + 16;
  const double legend_y = grid_y + panel_top;
  double legend_h = 0;
  for (std::size_t i = 0; i < legend.size(); ++i)
    legend_h += legend[i].heading && i > 0 ? 30 : 20;

  const double x_title_y = grid_y + grid_h + 10;
  double width = legend.empty() ? grid_x + grid_w + kMargin : legend_x + legend_w + kMargin;
  width = std::max({width, kMargin + text_width(title, kTitleFont, true) + kMargin,
                    kMargin + text_width(subtitle, kLegendFont) + kMargin});
  const double height = std::max(x_title_y + 18.0 * static_cast<double>(x_title_lines.size()) + 8,
                                 legend_y + legend_h + kMargin);
  width = std::ceil(width);

  std::string out = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n";
  out += fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" version=\"1.1\" width=\"{0:.0f}\" "
      "height=\"{1:.0f}\" viewBox=\"0 0 {0:.0f} {1:.0f}\" "
      "font-family=\"DejaVu Sans, Helvetica, Arial, sans-serif\">\n",
      width, std::ceil(height));
  out += fmt::format("<title>{}</title>\n", xml(title));
  out += "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  out += fmt::format(
      "<text class=\"title\" x=\"{:.1f}\" y=\"26\" font-size=\"{}\" "
      "font-weight=\"bold\">{}</text>\n",
      kMargin, kTitleFont, xml(title));
  if (!subtitle.empty()) {
    out += fmt::format(
        "<text class=\"subtitle\" x=\"{:.1f}\" y=\"45\" font-size=\"{}\" "
        "fill=\"#555555\">{}</text>\n",
        kMargin, kLegendFont, xml(subtitle));
  }

  // Axis titles.
  const double grid_mid_y = grid_y + grid_h / 2;
  for (std::size_t i = 0; i < y_title_lines.size(); ++i) {
    const double at = kMargin + 12 + 18.0 * static_cast<double>(i);
    out += fmt::format(
        "<text class=\"ytitle\" x=\"{0:.1f}\" y=\"{1:.1f}\" transform=\"rotate(-90 {0:.1f} "
        "{1:.1f})\" font-size=\"{2}\" text-anchor=\"middle\">{3}</text>\n",
        at, grid_mid_y, kAxisFont, xml(y_title_lines[i]));
  }
  const double plots_mid_x = grid_x + panel_left + (grid_w - panel_left - panel_right) / 2;
  for (std::size_t i = 0; i < x_title_lines.size(); ++i) {
    out += fmt::format(
        "<text class=\"xtitle\" x=\"{:.1f}\" y=\"{:.1f}\" font-size=\"{}\" "
        "text-anchor=\"middle\">{}</text>\n",
        plots_mid_x, x_title_y + 8 + 18.0 * static_cast<double>(i), kAxisFont,
        xml(x_title_lines[i]));
  }

  for (std::size_t f = 0; f < panels; ++f) {
    const double left = grid_x + static_cast<double>(f % grid_columns) * cell_w + panel_left;
    const double top = grid_y + static_cast<double>(f / grid_columns) * cell_h + panel_top;
    const double right = left + x_axis.length, bottom = top + y_axis.length;
    const auto px = [&](double v) { return left + x_axis.offset(v); };
    const auto py = [&](double v) { return bottom - y_axis.offset(v); };
    out += fmt::format("<g class=\"panel\" data-facet=\"{}\">\n", xml(data.facets.values[f]));
    if (faceted) {
      out += fmt::format(
          "<text class=\"panel-title\" x=\"{:.1f}\" y=\"{:.1f}\" font-size=\"12\" "
          "font-weight=\"bold\" text-anchor=\"middle\">{}</text>\n",
          (left + right) / 2, top - 8, xml(data.facets.titles[f]));
    }
    // Gridlines under the data, labelled ticks darker than a log axis's minor ones.
    for (const auto& t : x_axis.ticks) {
      const double at = px(t.value);
      out += fmt::format(
          "<line x1=\"{0:.1f}\" y1=\"{1:.1f}\" x2=\"{0:.1f}\" y2=\"{2:.1f}\" stroke=\"{3}\"/>\n",
          at, top, bottom, t.label.empty() ? "#f0f0f0" : "#dddddd");
      if (t.label.empty()) continue;
      out += fmt::format(
          "<line x1=\"{0:.1f}\" y1=\"{1:.1f}\" x2=\"{0:.1f}\" y2=\"{2:.1f}\" "
          "stroke=\"#666666\"/>\n",
          at, bottom, bottom + 4);
      out += fmt::format(
          "<text class=\"xtick\" x=\"{:.1f}\" y=\"{:.1f}\" font-size=\"{}\" fill=\"#333333\" "
          "text-anchor=\"middle\">{}</text>\n",
          at, bottom + 16, kTickFont, xml(t.label));
    }
    for (const auto& t : y_axis.ticks) {
      const double at = py(t.value);
      out += fmt::format(
          "<line x1=\"{0:.1f}\" y1=\"{1:.1f}\" x2=\"{2:.1f}\" y2=\"{1:.1f}\" stroke=\"{3}\"/>\n",
          left, at, right, t.label.empty() ? "#f0f0f0" : "#dddddd");
      if (t.label.empty()) continue;
      out += fmt::format(
          "<line x1=\"{0:.1f}\" y1=\"{1:.1f}\" x2=\"{2:.1f}\" y2=\"{1:.1f}\" "
          "stroke=\"#666666\"/>\n",
          left - 4, at, left);
      out += fmt::format(
          "<text class=\"ytick\" x=\"{:.1f}\" y=\"{:.1f}\" font-size=\"{}\" fill=\"#333333\" "
          "text-anchor=\"end\">{}</text>\n",
          left - 6, at + 4, kTickFont, xml(t.label));
    }
    out += fmt::format(
        "<rect x=\"{:.1f}\" y=\"{:.1f}\" width=\"{:.1f}\" height=\"{:.1f}\" fill=\"none\" "
        "stroke=\"#999999\"/>\n",
        left, top, x_axis.length, y_axis.length);

    for (const auto& line : data.lines) {
      if (line.facet != f) continue;
      const char* stroke = colour(line.series);
      const auto& series = data.series.values[line.series];
      std::vector<std::string> values, pixels;
      for (const auto& p : line.points) {
        values.push_back(exact(p.x) + "," + exact(p.y));
        pixels.push_back(fmt::format("{:.1f},{:.1f}", px(p.x), py(p.y)));
      }
      out += fmt::format(
          "<g class=\"series\" data-facet=\"{}\" data-series=\"{}\" data-y=\"{}\" "
          "data-points=\"{}\">\n",
          xml(data.facets.values[f]), xml(series), xml(o.y[line.y]), fmt::join(values, " "));
      if (line.points.size() > 1) {
        out += fmt::format(
            "<polyline points=\"{}\" fill=\"none\" stroke=\"{}\" stroke-width=\"2\" "
            "stroke-linejoin=\"round\"{}/>\n",
            fmt::join(pixels, " "), stroke, dash(line.y));
      }
      for (const auto& p : line.points) {
        const std::string tip =
            fmt::format("{}{}: {} = {}, {} = {}", o.series.empty() ? "" : shown(series),
                        several_y ? " " + o.y[line.y] : "", o.x, exact(p.x),
                        o.relative_to.empty() ? o.y[line.y] : "ratio", exact(p.y));
        out += marker(line.y, px(p.x), py(p.y), stroke, line.series >= kColourCount, tip);
      }
      out += "</g>\n";
    }
    out += "</g>\n";
  }

  // Legend, right of the panels where it cannot cover data.
  if (!legend.empty()) {
    out += "<g class=\"legend\">\n";
    double at = legend_y;
    for (std::size_t i = 0; i < legend.size(); ++i) {
      const auto& e = legend[i];
      at += e.heading && i > 0 ? 30 : 20;
      if (e.heading) {
        out += fmt::format(
            "<text class=\"legend-title\" x=\"{:.1f}\" y=\"{:.1f}\" font-size=\"{}\" "
            "font-weight=\"bold\">{}</text>\n",
            legend_x, at - 6, kLegendFont, xml(e.text));
        continue;
      }
      const double mid = at - 10;
      out += fmt::format(
          "<line x1=\"{:.1f}\" y1=\"{:.1f}\" x2=\"{:.1f}\" y2=\"{:.1f}\" stroke=\"{}\" "
          "stroke-width=\"2\"{}/>\n",
          legend_x, mid, legend_x + 30, mid, e.stroke, dash(e.dash));
      if (e.shape) out += marker(*e.shape, legend_x + 15, mid, e.stroke, e.hollow);
      out += fmt::format(
          "<text class=\"legend-entry\" x=\"{:.1f}\" y=\"{:.1f}\" font-size=\"{}\">{}</text>\n",
          legend_x + 38, mid + 4, kLegendFont, xml(e.text));
    }
    out += "</g>\n";
  }
  out += "</svg>\n";
  return out;
}

}  // namespace pipetab
