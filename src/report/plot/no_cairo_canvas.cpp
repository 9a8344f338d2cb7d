// PDF and PNG without cairo: a build with PIPETAB_CAIRO=OFF (the web build, whose toolchain has
// no cairo) draws SVG only, and says so when asked for the others.
#include <string>

#include "canvas.hpp"
#include <fmt/format.h>

#include "pipetab/error.hpp"

namespace pipetab::plot_detail {
namespace {

[[noreturn]] void refuse(const char* format) {
  throw Error(
      fmt::format("{} output needs cairo, and this pipetab was built without it "
                  "(PIPETAB_CAIRO=OFF, as the web build is): write an .svg instead",
                  format));
}

}  // namespace

std::unique_ptr<Canvas> pdf_canvas(double, double, const std::string&) {
  refuse("PDF");
}

std::unique_ptr<Canvas> png_canvas(double, double, double) {
  refuse("PNG");
}

}  // namespace pipetab::plot_detail
