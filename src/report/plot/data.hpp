// The data a chart shows, from a results table: points grouped into lines by facet, series
// and y column, and the names columns go by on a chart.
#pragma once

#include <cstddef>
#include <map>
#include <string>
#include <vector>

#include "pipetab/io/data_table.hpp"
#include "pipetab/report/plot.hpp"

namespace pipetab::plot_detail {

struct Label {
  std::string quantity;  // "bubble ratio"
  std::string detail;    // "table": which of several measures of the quantity
  std::string unit;      // "s", "bytes", "" for ratios and counts
};

Label label_of(const std::string& column);
/// With the unit: for axis titles.
std::string title_of(const Label& l);
/// Without the unit: for chart titles, legends and ratios.
std::string name_of(const Label& l);
/// One label for several y columns.
Label common_label(const std::vector<Label>& labels);
/// "schedule", "schedule, split": the readable names of a --series or --facet.
std::string spec_name(const std::string& spec, const char* separator);
/// Shortest round trip, for data attributes and messages.
std::string exact(double value);

struct Point {
  double x, y;
  std::size_t row;
};

struct Line {
  std::size_t facet, series, y;
  std::vector<Point> points;  ///< sorted by x
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

inline constexpr std::size_t kMaxSeries = 16;
inline constexpr std::size_t kMaxY = 6;  // dash styles that stay distinguishable

/// The lines to draw; throws Error as plot_svg documents.
Data build_data(const io::DataTable& table, const PlotOptions& options);

}  // namespace pipetab::plot_detail
