// Line charts of results tables (pipetab sweep's output) as standalone SVG: one line per series
// and y column, small multiples per facet, axis titles with units.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "pipetab/io/data_table.hpp"

namespace pipetab {

/// What to draw from a results table. Column names are the table's (flattened, dotted) names.
struct PlotOptions {
  std::string x;               ///< numeric column on the horizontal axis
  std::vector<std::string> y;  ///< numeric columns on the vertical axis (one dash style each)
  /// Column whose values are the lines (one colour each), or several separated by commas
  /// ("schedule,params.split": lines named "chimera-asym (split 1:2)", empty parts left out);
  /// empty for a single unnamed series.
  std::string series;
  /// Column(s), likewise, whose values are the panels; empty for one panel.
  std::string facet;
  bool logx = false, logy = false;
  std::vector<std::pair<std::string, std::string>> where;  ///< keep rows with column == value
  std::string relative_to;  ///< series value to divide every y by (same facet, y column and x)
  std::string title, xlabel, ylabel;  ///< override the default titles when non-empty
};

/// Draws `table` as a complete SVG 1.1 document, byte-for-byte deterministic. Rows are kept if
/// they match every `where`; a row whose y cell is empty gives no point for that y column.
/// Facets, series and y columns keep their first-appearance order; panels share axis ranges.
/// With `relative_to`, the baseline series itself is drawn too (the constant 1 line) and the
/// default y title reads "<quantity> relative to VALUE", without the unit of a ratio. Every
/// line is a <g class="series"> element whose data-facet, data-series, data-y and data-points
/// ("x,y x,y ..." in data units, after any division) attributes give its data. Throws Error for
/// an unknown column (listing the available ones), a non-numeric or (on a log axis) non-positive
/// value ("FILE:LINE: ..."), two rows at the same point of one line, or a missing baseline
/// point.
std::string plot_svg(const io::DataTable& table, const PlotOptions& options);

}  // namespace pipetab
