// Text metrics for chart layout, shared by every output format so that SVG, PDF and PNG lay
// out alike.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace pipetab::plot_detail {

/// Roughly the advance width of `text` in DejaVu Sans at `size` (a little generous): enough to
/// keep labels apart and size the legend without a font engine, identically for every format.
double text_width(std::string_view text, double size, bool bold = false);

/// Splits `text` at spaces into lines of at most `width` (a single long word stays whole).
std::vector<std::string> wrapped(const std::string& text, double size, double width);

}  // namespace pipetab::plot_detail
