// The SVG backend: text stays text, so that the figure is searchable and tests can read it.
#include <cmath>

#include "../xml.hpp"
#include "canvas.hpp"
#include <fmt/format.h>

namespace pipetab::plot_detail {
namespace {

using report_detail::xml;

std::string paint(const Style& s) {
  std::string out = fmt::format(" fill=\"{}\"", s.fill.empty() ? "none" : s.fill);
  if (!s.stroke.empty()) {
    out += fmt::format(" stroke=\"{}\"", s.stroke);
    if (s.width != 1.0) out += fmt::format(" stroke-width=\"{:.2f}\"", s.width);
    if (!s.dash.empty()) out += fmt::format(" stroke-dasharray=\"{:.2f}\"", fmt::join(s.dash, ","));
  }
  return out;
}

class SvgCanvas final : public Canvas {
 public:
  SvgCanvas(double width, double height, const std::string& title, const std::string& description) {
    out_ = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n";
    // Sizes in points: a viewer or a paper's \includegraphics shows it at its print size.
    out_ += fmt::format(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" version=\"1.1\" width=\"{0}pt\" "
        "height=\"{1}pt\" viewBox=\"0 0 {0} {1}\" "
        "font-family=\"DejaVu Sans, Helvetica, Arial, sans-serif\">\n",
        fmt::format("{:.2f}", width), fmt::format("{:.2f}", height));
    out_ += fmt::format("<title>{}</title>\n", xml(title));
    if (!description.empty()) out_ += fmt::format("<desc>{}</desc>\n", xml(description));
    out_ += "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  }

  void group(const std::vector<std::pair<std::string, std::string>>& attributes) override {
    out_ += "<g";
    for (const auto& [key, value] : attributes)
      out_ += fmt::format(" {}=\"{}\"", key, xml(value));
    out_ += ">\n";
  }
  void end_group() override { out_ += "</g>\n"; }

  void line(double x1, double y1, double x2, double y2, const Style& style) override {
    out_ += fmt::format("<line x1=\"{:.2f}\" y1=\"{:.2f}\" x2=\"{:.2f}\" y2=\"{:.2f}\"{}/>\n", x1,
                        y1, x2, y2, paint(style));
  }

  void polyline(const std::vector<std::pair<double, double>>& points, const Style& style) override {
    std::string list;
    for (const auto& [x, y] : points)
      list += fmt::format("{}{:.2f},{:.2f}", list.empty() ? "" : " ", x, y);
    out_ +=
        fmt::format("<polyline points=\"{}\"{} stroke-linejoin=\"round\"/>\n", list, paint(style));
  }

  void rect(double x, double y, double width, double height, const Style& style) override {
    out_ += fmt::format("<rect x=\"{:.2f}\" y=\"{:.2f}\" width=\"{:.2f}\" height=\"{:.2f}\"{}/>\n",
                        x, y, width, height, paint(style));
  }

  void path(const Path& p, const Style& style, const std::string& tooltip) override {
    std::string element;
    if (p.circle) {
      element = "circle";
      out_ += fmt::format("<circle cx=\"{:.2f}\" cy=\"{:.2f}\" r=\"{:.2f}\"", p.cx, p.cy, p.r);
    } else {
      element = "path";
      std::string d;
      for (const auto& [op, at] : p.steps) {
        d += op == 'Z' ? std::string("Z") : fmt::format("{}{:.2f},{:.2f}", op, at.first, at.second);
      }
      out_ += fmt::format("<path d=\"{}\"", d);
    }
    out_ += paint(style);
    // The tooltip says which point it is, to read values off the chart in a browser.
    out_ += tooltip.empty() ? std::string("/>\n")
                            : fmt::format("><title>{}</title></{}>\n", xml(tooltip), element);
  }

  void text(double x, double y, const std::string& text, const TextStyle& s) override {
    out_ += "<text";
    if (!s.role.empty()) out_ += fmt::format(" class=\"{}\"", s.role);
    out_ += fmt::format(" x=\"{:.2f}\" y=\"{:.2f}\"", x, y);
    if (s.vertical) out_ += fmt::format(" transform=\"rotate(-90 {:.2f} {:.2f})\"", x, y);
    out_ += fmt::format(" font-size=\"{}\"", fmt::format("{:.2f}", s.size));
    if (s.bold) out_ += " font-weight=\"bold\"";
    if (s.fill != "#000000") out_ += fmt::format(" fill=\"{}\"", s.fill);
    if (s.anchor != Anchor::start)
      out_ += s.anchor == Anchor::middle ? " text-anchor=\"middle\"" : " text-anchor=\"end\"";
    out_ += fmt::format(">{}</text>\n", xml(text));
  }

  std::string finish() override { return out_ + "</svg>\n"; }

 private:
  std::string out_;
};

}  // namespace

std::unique_ptr<Canvas> svg_canvas(double width, double height, const std::string& title,
                                   const std::string& description) {
  return std::make_unique<SvgCanvas>(width, height, title, description);
}

Path marker_path(std::size_t shape, double x, double y, double size) {
  const double h = size / 2;
  Path p;
  const auto poly = [&](std::initializer_list<std::pair<double, double>> points) {
    char op = 'M';
    for (const auto& [dx, dy] : points) {
      p.steps.push_back({op, {x + dx, y + dy}});
      op = 'L';
    }
    p.steps.push_back({'Z', {0, 0}});
  };
  switch (shape % kMarkerShapes) {
    case 1:  // square, a little smaller so that its area matches the circle's
      poly({{-0.85 * h, -0.85 * h},
            {0.85 * h, -0.85 * h},
            {0.85 * h, 0.85 * h},
            {-0.85 * h, 0.85 * h}});
      break;
    case 2:
      poly({{0, -1.15 * h}, {1.05 * h, 0.75 * h}, {-1.05 * h, 0.75 * h}});
      break;
    case 3:
      poly({{0, -1.15 * h}, {1.1 * h, 0}, {0, 1.15 * h}, {-1.1 * h, 0}});
      break;
    case 4:
      poly({{0, 1.15 * h}, {1.05 * h, -0.75 * h}, {-1.05 * h, -0.75 * h}});
      break;
    case 5:  // ×
      p.steps = {{'M', {x - h, y - h}},
                 {'L', {x + h, y + h}},
                 {'M', {x - h, y + h}},
                 {'L', {x + h, y - h}}};
      break;
    case 6:  // +
      p.steps = {{'M', {x - 1.1 * h, y}},
                 {'L', {x + 1.1 * h, y}},
                 {'M', {x, y - 1.1 * h}},
                 {'L', {x, y + 1.1 * h}}};
      break;
    default:
      p.circle = true;
      p.cx = x;
      p.cy = y;
      p.r = h;
  }
  return p;
}

}  // namespace pipetab::plot_detail
