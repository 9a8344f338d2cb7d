// What a chart is drawn with: a small canvas interface that the layout code feeds, with one
// backend writing SVG (text stays <text>, and each series keeps its data attributes for tools
// and tests) and one drawing with cairo (PDF, PNG). One layout for every format, so that a
// figure looks the same whichever file it is written to.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace pipetab::plot_detail {

/// Paint: colours as "#RRGGBB", empty for none. Sizes in drawing units (points).
struct Style {
  std::string stroke;
  std::string fill;
  double width = 1.0;
  std::vector<double> dash;  ///< on, off, ... lengths; empty for a solid line
};

enum class Anchor { start, middle, end };

struct TextStyle {
  double size = 10.0;
  bool bold = false;
  Anchor anchor = Anchor::start;
  std::string fill = "#000000";
  bool vertical = false;  ///< rotated 90° anticlockwise about (x, y), read bottom to top
  std::string role;       ///< what the text is ("title", "xtick"): an SVG class
};

/// A path of straight segments (M, L, Z), or a circle.
struct Path {
  std::vector<std::pair<char, std::pair<double, double>>> steps;  ///< 'M'/'L' to a point, 'Z'
  bool circle = false;
  double cx = 0, cy = 0, r = 0;
};

class Canvas {
 public:
  virtual ~Canvas() = default;
  /// A group of elements with SVG attributes (class, data-*); only SVG keeps it.
  virtual void group(const std::vector<std::pair<std::string, std::string>>& attributes) = 0;
  virtual void end_group() = 0;
  virtual void line(double x1, double y1, double x2, double y2, const Style& style) = 0;
  virtual void polyline(const std::vector<std::pair<double, double>>& points,
                        const Style& style) = 0;
  virtual void rect(double x, double y, double width, double height, const Style& style) = 0;
  /// `tooltip`: said on hover where the format can (SVG <title>).
  virtual void path(const Path& path, const Style& style, const std::string& tooltip) = 0;
  virtual void text(double x, double y, const std::string& text, const TextStyle& style) = 0;
  /// The finished file.
  virtual std::string finish() = 0;
};

/// An SVG 1.1 document of width × height points with a <title> and a <desc>.
std::unique_ptr<Canvas> svg_canvas(double width, double height, const std::string& title,
                                   const std::string& description);
/// A one-page PDF of width × height points, byte-identical across runs.
std::unique_ptr<Canvas> pdf_canvas(double width, double height, const std::string& title);
/// A PNG of width × height points at `dpi` pixels per inch.
std::unique_ptr<Canvas> png_canvas(double width, double height, double dpi);

/// The marker `shape` (0 circle, 1 square, 2 triangle up, 3 diamond, 4 triangle down, 5 cross,
/// 6 plus; others wrap around) of about `size` across, centred at (x, y).
Path marker_path(std::size_t shape, double x, double y, double size);
/// Shapes marker_path draws; the open ones (5, 6) have no inside to fill.
inline constexpr std::size_t kMarkerShapes = 7;
inline bool marker_is_open(std::size_t shape) {
  return shape % kMarkerShapes >= 5;
}

}  // namespace pipetab::plot_detail
