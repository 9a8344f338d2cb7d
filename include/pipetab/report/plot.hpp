// Line charts of results tables (pipetab sweep's output) as SVG, PDF or PNG: one line per series
// and y column, small multiples per facet, axis titles with units, sized for a paper's column.
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
  /// Print size in points (1/72 in). Both 0: a screen layout whose size follows the content.
  /// One given: the other follows from panels about 1.6 times as wide as high. Given, text is
  /// 7 pt × font_scale and the chart is laid out to exactly this size (legend under the panels).
  double width = 0, height = 0;
  double font_scale = 1.0;  ///< every text size times this; text under 7 pt is refused
  /// Per-panel y ranges: Auto gives each panel its own when their largest values differ 10× or
  /// more (small multiples of one scale would flatten the smaller panels to a line).
  enum class YScales { Auto, Shared, Free } y_scales = YScales::Auto;
  double dpi = 300;  ///< PNG pixels per inch
};

/// The smallest text size plot draws at print size, in points: the usual floor for figure
/// text in papers (e.g. IEEE and ACM author guides ask for 8 pt and no less than 6-7 pt).
inline constexpr double kMinTextPoints = 7.0;

enum class PlotFormat { Svg, Pdf, Png };

/// The format of an output file by its extension (.svg, .pdf, .png; "-" is SVG on standard
/// output). Throws Error for any other.
PlotFormat plot_format(const std::string& path);

/// A length such as "3.3in", "240pt", "8.4cm", "84mm" or "240" (points), in points. Throws
/// Error naming `option` if it is not a positive length.
double parse_length(const std::string& text, const char* option);

/// Draws `table` as a complete SVG 1.1 document, byte-for-byte deterministic. Rows are kept if
/// they match every `where`; a row whose y cell is empty gives no point for that y column.
/// Facets, series and y columns keep their first-appearance order; panels share the x range,
/// and the y range as options.y_scales says.
/// With `relative_to`, the baseline series itself is drawn too (the constant 1 line) and the
/// default y title reads "<quantity> relative to VALUE", without the unit of a ratio. Every
/// line is a <g class="series"> element whose data-facet, data-series, data-y and data-points
/// ("x,y x,y ..." in data units, after any division) attributes give its data. Throws Error for
/// an unknown column (listing the available ones), a non-numeric or (on a log axis) non-positive
/// value ("FILE:LINE: ..."), two rows at the same point of one line, or a missing baseline
/// point.
std::string plot_svg(const io::DataTable& table, const PlotOptions& options);

/// The same chart in `format`: SVG as plot_svg; PDF (one page of exactly the chart's size in
/// points, text as text, byte-identical across runs) or PNG (at options.dpi), drawn by cairo
/// from the same layout. Throws Error also for a size too small for the panels at that text size.
std::string plot_chart(const io::DataTable& table, const PlotOptions& options, PlotFormat format);

}  // namespace pipetab
