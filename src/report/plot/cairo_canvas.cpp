// The cairo backend: PDF and PNG from the same drawing calls (cairo_pdf_surface,
// cairo_image_surface + cairo_surface_write_to_png_stream), so that no second renderer and no
// Python is needed at render time. Text uses cairo's "toy" API with DejaVu Sans, which Debian's
// fonts-dejavu-core installs; PDF embeds the subset it uses.
#include <cmath>
#include <cstdlib>

#include "canvas.hpp"
#include <cairo-pdf.h>
#include <cairo.h>
#include <fmt/format.h>

#include "pipetab/error.hpp"

namespace pipetab::plot_detail {
namespace {

constexpr const char* kFont = "DejaVu Sans";

cairo_status_t append(void* closure, const unsigned char* data, unsigned int length) {
  static_cast<std::string*>(closure)->append(reinterpret_cast<const char*>(data), length);
  return CAIRO_STATUS_SUCCESS;
}

void check(cairo_status_t status, const char* what) {
  if (status != CAIRO_STATUS_SUCCESS)
    throw Error(fmt::format("plot: {} failed: {}", what, cairo_status_to_string(status)));
}

class CairoCanvas final : public Canvas {
 public:
  enum class Kind { pdf, png };

  CairoCanvas(Kind kind, double width, double height, double dpi, const std::string& title)
      : png_(kind == Kind::png) {
    if (png_) {
      const double scale = dpi / 72.0;
      surface_ = cairo_image_surface_create(CAIRO_FORMAT_RGB24,
                                            static_cast<int>(std::ceil(width * scale - 1e-6)),
                                            static_cast<int>(std::ceil(height * scale - 1e-6)));
      check(cairo_surface_status(surface_), "creating the PNG image");
      cr_ = cairo_create(surface_);
      cairo_scale(cr_, scale, scale);
    } else {
      // The stream appends to out_, which lives as long as the surface.
      surface_ = cairo_pdf_surface_create_for_stream(append, &out_, width, height);
      check(cairo_surface_status(surface_), "creating the PDF");
      cairo_pdf_surface_set_metadata(surface_, CAIRO_PDF_METADATA_TITLE, title.c_str());
      cairo_pdf_surface_set_metadata(surface_, CAIRO_PDF_METADATA_CREATOR, "pipetab plot");
      cairo_pdf_surface_set_metadata(surface_, CAIRO_PDF_METADATA_CREATE_DATE, "");
      cr_ = cairo_create(surface_);
    }
    cairo_set_source_rgb(cr_, 1, 1, 1);
    cairo_paint(cr_);
    cairo_set_line_join(cr_, CAIRO_LINE_JOIN_ROUND);
  }
  CairoCanvas(const CairoCanvas&) = delete;
  CairoCanvas& operator=(const CairoCanvas&) = delete;
  ~CairoCanvas() override {
    if (cr_ != nullptr) cairo_destroy(cr_);
    if (surface_ != nullptr) cairo_surface_destroy(surface_);
  }

  void group(const std::vector<std::pair<std::string, std::string>>&) override {}
  void end_group() override {}

  void line(double x1, double y1, double x2, double y2, const Style& style) override {
    cairo_move_to(cr_, x1, y1);
    cairo_line_to(cr_, x2, y2);
    paint(style);
  }

  void polyline(const std::vector<std::pair<double, double>>& points, const Style& style) override {
    for (std::size_t i = 0; i < points.size(); ++i) {
      if (i == 0) {
        cairo_move_to(cr_, points[i].first, points[i].second);
      } else {
        cairo_line_to(cr_, points[i].first, points[i].second);
      }
    }
    paint(style);
  }

  void rect(double x, double y, double width, double height, const Style& style) override {
    cairo_rectangle(cr_, x, y, width, height);
    paint(style);
  }

  void path(const Path& p, const Style& style, const std::string&) override {
    if (p.circle) {
      cairo_new_sub_path(cr_);
      cairo_arc(cr_, p.cx, p.cy, p.r, 0, 2 * M_PI);
    }
    for (const auto& [op, at] : p.steps) {
      if (op == 'M') cairo_move_to(cr_, at.first, at.second);
      if (op == 'L') cairo_line_to(cr_, at.first, at.second);
      if (op == 'Z') cairo_close_path(cr_);
    }
    paint(style);
  }

  void text(double x, double y, const std::string& text, const TextStyle& s) override {
    cairo_save(cr_);
    cairo_select_font_face(cr_, kFont, CAIRO_FONT_SLANT_NORMAL,
                           s.bold ? CAIRO_FONT_WEIGHT_BOLD : CAIRO_FONT_WEIGHT_NORMAL);
    cairo_set_font_size(cr_, s.size);
    cairo_translate(cr_, x, y);
    if (s.vertical) cairo_rotate(cr_, -M_PI / 2);
    cairo_text_extents_t extents;
    cairo_text_extents(cr_, text.c_str(), &extents);
    const double shift = s.anchor == Anchor::start    ? 0.0
                         : s.anchor == Anchor::middle ? extents.x_advance / 2
                                                      : extents.x_advance;
    cairo_move_to(cr_, -shift, 0);
    colour(s.fill);
    cairo_show_text(cr_, text.c_str());
    cairo_restore(cr_);
  }

  std::string finish() override {
    cairo_destroy(cr_);
    cr_ = nullptr;
    if (png_) {
      check(cairo_surface_write_to_png_stream(surface_, append, &out_), "writing the PNG");
    } else {
      cairo_surface_finish(surface_);
      check(cairo_surface_status(surface_), "writing the PDF");
    }
    cairo_surface_destroy(surface_);
    surface_ = nullptr;
    return std::move(out_);
  }

 private:
  void colour(const std::string& hex) {
    const auto value = std::strtoul(hex.c_str() + 1, nullptr, 16);
    cairo_set_source_rgb(cr_, static_cast<double>((value >> 16) & 0xFF) / 255.0,
                         static_cast<double>((value >> 8) & 0xFF) / 255.0,
                         static_cast<double>(value & 0xFF) / 255.0);
  }

  void paint(const Style& s) {
    if (!s.fill.empty()) {
      colour(s.fill);
      if (s.stroke.empty()) {
        cairo_fill(cr_);
        return;
      }
      cairo_fill_preserve(cr_);
    }
    if (s.stroke.empty()) {
      cairo_new_path(cr_);
      return;
    }
    colour(s.stroke);
    cairo_set_line_width(cr_, s.width);
    cairo_set_dash(cr_, s.dash.data(), static_cast<int>(s.dash.size()), 0);
    cairo_stroke(cr_);
  }

  bool png_;
  cairo_surface_t* surface_ = nullptr;
  cairo_t* cr_ = nullptr;
  std::string out_;
};

}  // namespace

std::unique_ptr<Canvas> pdf_canvas(double width, double height, const std::string& title) {
  return std::make_unique<CairoCanvas>(CairoCanvas::Kind::pdf, width, height, 72.0, title);
}

std::unique_ptr<Canvas> png_canvas(double width, double height, double dpi) {
  return std::make_unique<CairoCanvas>(CairoCanvas::Kind::png, width, height, dpi, "");
}

}  // namespace pipetab::plot_detail
