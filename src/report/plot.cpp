// Chart layout: titles, a grid of panels with their axes, the lines, the legend; drawn on a
// canvas (plot/canvas.hpp) so that SVG, PDF and PNG come from this one layout.
#include "pipetab/report/plot.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <optional>

#include "plot/axes.hpp"
#include "plot/canvas.hpp"
#include "plot/data.hpp"
#include "plot/text.hpp"
#include <fmt/format.h>

#include "pipetab/error.hpp"
#include "pipetab/numeric.hpp"

namespace pipetab {
namespace {

using namespace plot_detail;

// Okabe & Ito's colour-blind-safe palette ("Color Universal Design", 2008,
// https://jfly.uni-koeln.de/color/), the yellow last as it is faint on white.
constexpr const char* kColours[] = {"#0072B2", "#E69F00", "#009E73", "#D55E00",
                                    "#CC79A7", "#56B4E9", "#000000", "#F0E442"};
constexpr std::size_t kColourCount = sizeof(kColours) / sizeof(kColours[0]);
// Dash patterns per y column, in units of the line width.
const std::vector<std::vector<double>> kDashes = {
    {}, {3.5, 2}, {1, 1.5}, {4.5, 1.5, 1, 1.5}, {7, 2}, {2, 1, 0.5, 1}};

const char* colour(std::size_t series) {
  return kColours[series % kColourCount];
}

std::string shown(const std::string& value) {
  return value.empty() ? "(empty)" : value;
}

// Panels about 1.6 times as wide as high when only one side of the chart is given.
constexpr double kPanelAspect = 1.6;

// Everything about a chart that does not depend on the panels' size.
struct Frame {
  const PlotOptions* o;
  const Data* data;
  bool print, faceted, several_y;
  std::size_t panels, columns, rows;
  double k;  // the scale of every size: 1 is the screen layout, in points
  double tick_font, axis_font, title_font, legend_font, panel_font, margin;
  std::string title, subtitle, description, x_title, y_title;
  Axis x_axis;
  std::vector<Axis> y_axes;  // one per panel (copies when shared)
  bool free_y;

  struct Entry {
    std::string text;
    std::string stroke;
    std::size_t dash;
    std::optional<std::size_t> shape;
    double marker;  // size
    bool filled, heading;
  };
  std::vector<Entry> legend;
};

// Where everything goes, for given panel lengths.
struct ChartLayout {
  double x_len, y_len;
  std::vector<std::string> title_lines, x_title_lines, y_title_lines;
  double grid_x, grid_y, cell_w, cell_h, panel_left, panel_top;
  double legend_x, legend_y, legend_col_w, legend_heading_w;
  std::size_t legend_columns;
  double width, height;
};

double marker_size(const Frame& f, std::size_t y) {
  return f.k * (6.5 + 3.0 * static_cast<double>(y));
}

Frame make_frame(const Data& data, const PlotOptions& o) {
  Frame f;
  f.o = &o;
  f.data = &data;
  f.print = o.width > 0 || o.height > 0;
  f.faceted = !o.facet.empty();
  f.several_y = o.y.size() > 1;
  f.panels = data.facets.values.size();
  f.columns = std::min<std::size_t>(3, f.panels);
  f.rows = (f.panels + f.columns - 1) / f.columns;
  // The screen layout's sizes, scaled so that tick labels, the smallest text, are 7 pt at
  // print size.
  f.k = (f.print ? kMinTextPoints / 11.0 : 1.0) * o.font_scale;
  f.tick_font = 11 * f.k;
  f.axis_font = 13 * f.k;
  f.title_font = 16 * f.k;
  f.legend_font = 12 * f.k;
  f.panel_font = 12 * f.k;
  f.margin = (f.print ? 10 : 16) * f.k;
  if (f.tick_font < kMinTextPoints - 1e-9) {
    throw Error(fmt::format(
        "plot: --font-scale {} makes tick labels {:.1f} pt{}; text must be at least {} pt "
        "(use a scale of at least {:.2f})",
        o.font_scale, f.tick_font, f.print ? "" : " on the screen layout", kMinTextPoints,
        kMinTextPoints / (f.tick_font / o.font_scale)));
  }

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
  f.x_title = o.xlabel.empty() ? title_of(x_label) : o.xlabel;
  f.y_title = !o.ylabel.empty() ? o.ylabel : o.relative_to.empty() ? title_of(y_common) : y_name;
  f.title = !o.title.empty() ? o.title
                             : y_name + " vs " + name_of(x_label) +
                                   (f.faceted ? " by " + spec_name(o.facet, " and ") : "");
  // The filters chose the rows; they are what the command did, not what the chart shows, so
  // they go into the SVG's description, not onto the figure (issue 13).
  std::vector<std::string> filters;
  for (const auto& [column, value] : o.where)
    filters.push_back(fmt::format("{} = {}", column, value));
  if (!filters.empty()) f.description = fmt::format("rows with {}", fmt::join(filters, ", "));

  // Ranges: x shared by every panel; y per panel, shared unless they differ by 10× or more.
  f.x_axis.log = o.logx;
  f.x_axis.bytes = x_label.unit == "bytes";
  f.x_axis.font = f.tick_font;
  double x_min = 0, x_max = 0;
  std::vector<double> y_min(f.panels, 0.0), y_max(f.panels, 0.0);
  std::vector<bool> seen(f.panels, false);
  bool any = false;
  for (const auto& line : data.lines) {
    for (const auto& p : line.points) {
      x_min = any ? std::min(x_min, p.x) : p.x;
      x_max = any ? std::max(x_max, p.x) : p.x;
      any = true;
      auto& lo = y_min[line.facet];
      auto& hi = y_max[line.facet];
      lo = seen[line.facet] ? std::min(lo, p.y) : p.y;
      hi = seen[line.facet] ? std::max(hi, p.y) : p.y;
      seen[line.facet] = true;
    }
  }
  set_range(f.x_axis, x_min, x_max);
  double largest = 0, smallest = std::numeric_limits<double>::infinity();
  for (std::size_t p = 0; p < f.panels; ++p) {
    const double size = std::max(std::abs(y_min[p]), std::abs(y_max[p]));
    largest = std::max(largest, size);
    smallest = std::min(smallest, size);
  }
  f.free_y =
      f.panels > 1 && (o.y_scales == PlotOptions::YScales::Free ||
                       (o.y_scales == PlotOptions::YScales::Auto && !(largest < 10.0 * smallest)));
  Axis y_axis;
  y_axis.log = o.logy;
  y_axis.bytes = y_bytes;
  y_axis.horizontal = false;
  y_axis.font = f.tick_font;
  const double all_lo = *std::min_element(y_min.begin(), y_min.end());
  const double all_hi = *std::max_element(y_max.begin(), y_max.end());
  for (std::size_t p = 0; p < f.panels; ++p) {
    f.y_axes.push_back(y_axis);
    if (f.free_y) {
      set_range(f.y_axes.back(), y_min[p], y_max[p]);
    } else {
      set_range(f.y_axes.back(), all_lo, all_hi);
    }
  }
  if (f.free_y) f.subtitle = "y scales differ between panels";

  // The legend: series (colour and marker), then y columns (dash) when there are several.
  if (!o.series.empty()) {
    f.legend.push_back({spec_name(o.series, ", "), "", 0, std::nullopt, 0, false, true});
    for (std::size_t s = 0; s < data.series.values.size(); ++s) {
      const auto& value = data.series.values[s];
      f.legend.push_back(
          {shown(value) + (value == o.relative_to && !o.relative_to.empty() ? " (baseline)" : ""),
           colour(s), 0, s, marker_size(f, 0), false, false});
    }
  }
  if (f.several_y) {
    f.legend.push_back({"line style", "", 0, std::nullopt, 0, false, true});
    for (std::size_t y = 0; y < o.y.size(); ++y) {
      f.legend.push_back({title_of(y_labels[y]), "#444444", y, std::nullopt, 0, false, false});
    }
  }
  return f;
}

ChartLayout make_layout(Frame& f, double x_len, double y_len, double width_goal) {
  ChartLayout l{};
  l.x_len = x_len;
  l.y_len = y_len;
  f.x_axis.length = x_len;
  f.x_axis.ticks = make_ticks(f.x_axis);
  double y_tick_width = 0;
  for (auto& axis : f.y_axes) {
    axis.length = y_len;
    axis.ticks = make_ticks(axis);
    for (const auto& t : axis.ticks)
      y_tick_width = std::max(y_tick_width, text_width(t.label, f.tick_font));
  }
  const double k = f.k;
  l.panel_left = y_tick_width + 10 * k;
  l.panel_top = f.faceted ? 2 * f.panel_font : 8 * k;
  const double panel_bottom = (f.print ? 1.6 : 2.0) * f.tick_font + 2 * k;
  const double panel_right = 18 * k;
  l.cell_w = l.panel_left + x_len + panel_right;
  l.cell_h = l.panel_top + y_len + panel_bottom;
  const double grid_w = static_cast<double>(f.columns) * l.cell_w;
  const double grid_h = static_cast<double>(f.rows) * l.cell_h;
  const double line_gap = 1.4;  // line height in font sizes

  // Titles, wrapped to the chart (or, for the screen layout, to the panels' width).
  l.y_title_lines = wrapped(f.y_title, f.axis_font, grid_h - 10 * k);
  l.x_title_lines = wrapped(f.x_title, f.axis_font, grid_w - l.panel_left);
  l.grid_x = f.margin + line_gap * f.axis_font * static_cast<double>(l.y_title_lines.size());
  const double title_room =
      std::max(width_goal > 0 ? width_goal : l.grid_x + grid_w, 20 * f.title_font) - 2 * f.margin;
  l.title_lines = f.print ? wrapped(f.title, f.title_font * 1.1, title_room)
                          : std::vector<std::string>{f.title};
  double top = 0.6 * f.margin + 1.25 * f.title_font +
               line_gap * f.title_font * static_cast<double>(l.title_lines.size() - 1);
  if (!f.subtitle.empty()) top += line_gap * f.legend_font;
  l.grid_y = top + 0.5 * f.margin;
  const double x_title_y = l.grid_y + grid_h + (f.print ? 2 : 10) * k;
  const double below_grid =
      x_title_y + line_gap * f.axis_font * static_cast<double>(l.x_title_lines.size()) + 8 * k;

  // Legend: right of the panels on the screen layout; under them at print size, where the
  // width of a paper's column is too precious, in as many columns as fit.
  double entry_w = 0;
  for (const auto& e : f.legend) {
    entry_w = std::max(entry_w, text_width(e.text, f.legend_font, e.heading) +
                                    (e.heading ? 0 : 3.2 * f.legend_font));
  }
  const double row_h = 1.65 * f.legend_font;
  double legend_h = 0;
  if (!f.print) {
    l.legend_columns = 1;
    l.legend_col_w = entry_w;
    l.legend_x = l.grid_x + grid_w + 16 * k;
    l.legend_y = l.grid_y + l.panel_top;
    for (std::size_t i = 0; i < f.legend.size(); ++i)
      legend_h += f.legend[i].heading && i > 0 ? 1.5 * row_h : row_h;
    l.width = f.legend.empty() ? l.grid_x + grid_w + f.margin : l.legend_x + entry_w + f.margin;
    l.width = std::max(l.width, 2 * f.margin + text_width(f.title, f.title_font, true));
    l.width = std::max(l.width, 2 * f.margin + text_width(f.subtitle, f.legend_font));
    l.height = std::max(below_grid, l.legend_y + legend_h + f.margin);
  } else {
    const double room = (width_goal > 0 ? width_goal : l.grid_x + grid_w) - 2 * f.margin;
    double heading_w = 0;
    for (const auto& e : f.legend) {
      if (e.heading) heading_w = std::max(heading_w, text_width(e.text, f.legend_font, true));
    }
    l.legend_heading_w = heading_w + f.legend_font;
    l.legend_col_w = entry_w + 1.5 * f.legend_font;
    l.legend_columns = std::max<std::size_t>(
        1, static_cast<std::size_t>(std::floor((room - l.legend_heading_w) / l.legend_col_w)));
    l.legend_x = f.margin;
    l.legend_y = below_grid;
    // Each heading starts a row, left of its entries, which flow across the columns.
    std::size_t in_row = l.legend_columns;
    for (const auto& e : f.legend) {
      if (e.heading) {
        in_row = l.legend_columns;
      } else if (in_row == l.legend_columns) {
        legend_h += row_h;
        in_row = 1;
      } else {
        ++in_row;
      }
    }
    l.width = l.grid_x + grid_w + f.margin;
    l.height = l.legend_y + legend_h + (f.legend.empty() ? 0 : 0.5 * f.margin);
  }
  return l;
}

// The layout at the requested print size: panel lengths solved so that the chart fills it.
ChartLayout fit_layout(Frame& f) {
  const PlotOptions& o = *f.o;
  if (!f.print) return make_layout(f, f.panels > 1 ? 300 : 560, f.panels > 1 ? 200 : 340, 0);
  const double cols = static_cast<double>(f.columns), rows = static_cast<double>(f.rows);
  double x_len = 100, y_len = 100 / kPanelAspect;
  ChartLayout l{};
  // The layout's size is nearly affine in the panel lengths (tick labels change a little with
  // them), so a few corrections converge.
  for (int i = 0; i < 6; ++i) {
    l = make_layout(f, x_len, y_len, o.width);
    if (o.width > 0) x_len += (o.width - l.width) / cols;
    if (o.height > 0) y_len += (o.height - l.height) / rows;
    if (o.width <= 0) x_len = y_len * kPanelAspect;
    if (o.height <= 0) y_len = x_len / kPanelAspect;
    x_len = std::max(x_len, 1.0);
    y_len = std::max(y_len, 1.0);
  }
  const double least = 5 * f.tick_font;
  if (x_len < least || y_len < least) {
    throw Error(fmt::format(
        "plot: a chart of {} × {} leaves {} panel{} of {:.0f} × {:.0f} pt with {:.1f} pt text "
        "(at least {:.0f} pt a side): give a larger --width/--height, fewer panels (--where) "
        "or a shorter legend",
        o.width > 0 ? fmt::format("{:.0f} pt", o.width) : std::string("(auto)"),
        o.height > 0 ? fmt::format("{:.0f} pt", o.height) : std::string("(auto)"), f.panels,
        f.panels == 1 ? "" : "s", std::max(x_len, 0.0), std::max(y_len, 0.0), f.tick_font, least));
  }
  l = make_layout(f, x_len, y_len, o.width);
  if (o.width > 0) l.width = o.width;
  if (o.height > 0) l.height = std::max(l.height, o.height);
  return l;
}

void draw(Canvas& c, Frame& f, const ChartLayout& l) {
  const PlotOptions& o = *f.o;
  const Data& data = *f.data;
  const double k = f.k;
  const double line_gap = 1.4;
  TextStyle title{f.title_font, true, Anchor::start, "#000000", false, "title"};
  for (std::size_t i = 0; i < l.title_lines.size(); ++i) {
    c.text(f.margin,
           0.6 * f.margin + f.title_font + line_gap * f.title_font * static_cast<double>(i),
           l.title_lines[i], title);
  }
  if (!f.subtitle.empty()) {
    c.text(f.margin,
           0.6 * f.margin + f.title_font +
               line_gap * f.title_font * static_cast<double>(l.title_lines.size() - 1) +
               line_gap * f.legend_font,
           f.subtitle, {f.legend_font, false, Anchor::start, "#555555", false, "subtitle"});
  }
  const double grid_w = static_cast<double>(f.columns) * l.cell_w;
  const double grid_h = static_cast<double>(f.rows) * l.cell_h;
  for (std::size_t i = 0; i < l.y_title_lines.size(); ++i) {
    c.text(f.margin + f.axis_font + line_gap * f.axis_font * static_cast<double>(i),
           l.grid_y + grid_h / 2, l.y_title_lines[i],
           {f.axis_font, false, Anchor::middle, "#000000", true, "ytitle"});
  }
  const double plots_mid_x = l.grid_x + l.panel_left + (grid_w - l.panel_left - 18 * k) / 2;
  for (std::size_t i = 0; i < l.x_title_lines.size(); ++i) {
    c.text(plots_mid_x,
           l.grid_y + grid_h + (f.print ? 2 : 10) * k + f.axis_font +
               line_gap * f.axis_font * static_cast<double>(i),
           l.x_title_lines[i], {f.axis_font, false, Anchor::middle, "#000000", false, "xtitle"});
  }

  const Style minor{"#f0f0f0", "", 0.8 * k, {}}, major{"#dddddd", "", 0.8 * k, {}},
      tick{"#666666", "", 0.8 * k, {}};
  const TextStyle tick_text{f.tick_font, false, Anchor::middle, "#333333", false, "xtick"};
  for (std::size_t p = 0; p < f.panels; ++p) {
    const Axis& ya = f.y_axes[p];
    const Axis& xa = f.x_axis;
    const double left = l.grid_x + static_cast<double>(p % f.columns) * l.cell_w + l.panel_left;
    const double top = l.grid_y + static_cast<double>(p / f.columns) * l.cell_h + l.panel_top;
    const double right = left + l.x_len, bottom = top + l.y_len;
    const auto px = [&](double v) { return left + xa.offset(v); };
    const auto py = [&](double v) { return bottom - ya.offset(v); };
    c.group({{"class", "panel"}, {"data-facet", data.facets.values[p]}});
    if (f.faceted) {
      c.text((left + right) / 2, top - 0.6 * f.panel_font, data.facets.titles[p],
             {f.panel_font, true, Anchor::middle, "#000000", false, "panel-title"});
    }
    // Gridlines under the data, labelled ticks darker than a log axis's minor ones.
    for (const auto& t : xa.ticks) {
      const double at = left + xa.offset_at(t.at);
      c.line(at, top, at, bottom, t.label.empty() ? minor : major);
      if (t.label.empty()) continue;
      c.line(at, bottom, at, bottom + 4 * k, tick);
      c.text(at, bottom + 4 * k + 1.1 * f.tick_font, t.label, tick_text);
    }
    auto y_text = tick_text;
    y_text.anchor = Anchor::end;
    y_text.role = "ytick";
    for (const auto& t : ya.ticks) {
      const double at = bottom - ya.offset_at(t.at);
      c.line(left, at, right, at, t.label.empty() ? minor : major);
      if (t.label.empty()) continue;
      c.line(left - 4 * k, at, left, at, tick);
      c.text(left - 6 * k, at + 0.35 * f.tick_font, t.label, y_text);
    }
    c.rect(left, top, l.x_len, l.y_len, {"#999999", "", 0.8 * k, {}});

    for (const auto& line : data.lines) {
      if (line.facet != p) continue;
      const char* stroke = colour(line.series);
      const auto& series = data.series.values[line.series];
      std::vector<std::string> values;
      std::vector<std::pair<double, double>> points;
      for (const auto& pt : line.points) {
        values.push_back(exact(pt.x) + "," + exact(pt.y));
        points.emplace_back(px(pt.x), py(pt.y));
      }
      c.group({{"class", "series"},
               {"data-facet", data.facets.values[p]},
               {"data-series", series},
               {"data-y", o.y[line.y]},
               {"data-points", fmt::format("{}", fmt::join(values, " "))}});
      const double width = 1.6 * k;
      std::vector<double> dash;
      for (const double d : kDashes[line.y])
        dash.push_back(d * width);
      if (points.size() > 1) c.polyline(points, {stroke, "", width, dash});
      // Open markers, one shape per series and larger for each further y column: where lines
      // coincide every marker still shows (issue 13).
      const double size = marker_size(f, line.y);
      const Style paint{stroke, "", 1.1 * k, {}};
      for (std::size_t i = 0; i < points.size(); ++i) {
        const auto& pt = line.points[i];
        const std::string tip =
            fmt::format("{}{}: {} = {}, {} = {}", o.series.empty() ? "" : shown(series),
                        f.several_y ? " " + o.y[line.y] : "", o.x, exact(pt.x),
                        o.relative_to.empty() ? o.y[line.y] : "ratio", exact(pt.y));
        c.path(marker_path(line.series, points[i].first, points[i].second, size), paint, tip);
      }
      c.end_group();
    }
    c.end_group();
  }

  if (f.legend.empty()) return;
  c.group({{"class", "legend"}});
  const double row_h = 1.65 * f.legend_font;
  const double sample = 2.6 * f.legend_font;  // the line sample's length
  double y = l.legend_y;
  std::size_t column = l.legend_columns;
  for (std::size_t i = 0; i < f.legend.size(); ++i) {
    const auto& e = f.legend[i];
    if (e.heading) {
      // On the screen layout a heading has its own row; at print size it leads its entries'.
      if (!f.print) {
        y += i > 0 ? 1.5 * row_h : row_h;
        c.text(l.legend_x, y - 0.45 * f.legend_font, e.text,
               {f.legend_font, true, Anchor::start, "#000000", false, "legend-title"});
      } else {
        c.text(l.legend_x, y + row_h - 0.45 * f.legend_font, e.text,
               {f.legend_font, true, Anchor::start, "#000000", false, "legend-title"});
      }
      column = l.legend_columns;
      continue;
    }
    if (column + 1 >= l.legend_columns || !f.print) {
      y += row_h;
      column = 0;
    } else {
      ++column;
    }
    const double x =
        f.print ? l.legend_x + l.legend_heading_w + static_cast<double>(column) * l.legend_col_w
                : l.legend_x;
    const double mid = y - 0.8 * f.legend_font;
    std::vector<double> dash;
    for (const double d : kDashes[e.dash])
      dash.push_back(d * 1.6 * k);
    c.line(x, mid, x + sample, mid, {e.stroke, "", 1.6 * k, dash});
    if (e.shape) {
      c.path(marker_path(*e.shape, x + sample / 2, mid, e.marker), {e.stroke, "", 1.1 * k, {}}, "");
    }
    c.text(x + sample + 0.6 * f.legend_font, mid + 0.35 * f.legend_font, e.text,
           {f.legend_font, false, Anchor::start, "#000000", false, "legend-entry"});
  }
  c.end_group();
}

}  // namespace

PlotFormat plot_format(const std::string& path) {
  const auto ends = [&](const char* suffix) {
    const std::string s = suffix;
    if (path.size() < s.size()) return false;
    return std::equal(
        s.begin(), s.end(), path.end() - static_cast<std::ptrdiff_t>(s.size()),
        [](char a, char b) { return a == std::tolower(static_cast<unsigned char>(b)); });
  };
  if (path == "-" || ends(".svg")) return PlotFormat::Svg;
  if (ends(".pdf")) return PlotFormat::Pdf;
  if (ends(".png")) return PlotFormat::Png;
  throw Error(fmt::format(
      "plot: -o {}: the format is chosen by the extension: .svg, .pdf or .png ('-' writes SVG "
      "to standard output)",
      path));
}

double parse_length(const std::string& text, const char* option) {
  double value = 0;
  const char* begin = text.data();
  const char* end = begin + text.size();
  const auto [rest, ec] = parse_double(begin, end, value);
  const std::string unit(rest, end);
  // Points per unit: 72 per inch, 2.54 cm per inch.
  double scale = 0;
  if (unit.empty() || unit == "pt") scale = 1;
  if (unit == "in") scale = 72;
  if (unit == "cm") scale = 72 / 2.54;
  if (unit == "mm") scale = 72 / 25.4;
  if (ec != std::errc{} || rest == begin || scale == 0 || !(value > 0) ||
      !(value * scale <= 14400)) {
    throw Error(fmt::format(
        "{} {}: expected a positive length up to 200in with a unit in, cm, mm or pt (points "
        "without one), e.g. 3.3in",
        option, text));
  }
  return value * scale;
}

std::string plot_chart(const io::DataTable& table, const PlotOptions& o, PlotFormat format) {
  // 10000 drew text larger than the page and left a blank PDF, with exit 0.
  constexpr double kMaxFontScale = 10;
  if (!(o.font_scale > 0 && o.font_scale <= kMaxFontScale)) {
    throw Error(fmt::format(
        "plot: --font-scale {}: expected a number above 0 and at most {:g} (larger text leaves "
        "no room for the panels)",
        o.font_scale, kMaxFontScale));
  }
  if (!(o.width >= 0 && o.height >= 0) || !std::isfinite(o.width) || !std::isfinite(o.height))
    throw Error("plot: --width and --height must be positive lengths");
  if (!(o.dpi >= 36 && o.dpi <= 2400))
    throw Error(fmt::format("plot: --dpi {}: expected 36 to 2400", o.dpi));
  const Data data = build_data(table, o);
  Frame frame = make_frame(data, o);
  const ChartLayout layout = fit_layout(frame);
  const double width = std::ceil(layout.width * 100) / 100;
  const double height = std::ceil(layout.height * 100) / 100;
  std::unique_ptr<Canvas> canvas;
  switch (format) {
    case PlotFormat::Svg:
      canvas = svg_canvas(width, height, frame.title, frame.description);
      break;
    case PlotFormat::Pdf:
      canvas = pdf_canvas(width, height, frame.title);
      break;
    case PlotFormat::Png:
      canvas = png_canvas(width, height, o.dpi);
      break;
  }
  draw(*canvas, frame, layout);
  return canvas->finish();
}

std::string plot_svg(const io::DataTable& table, const PlotOptions& options) {
  return plot_chart(table, options, PlotFormat::Svg);
}

}  // namespace pipetab
