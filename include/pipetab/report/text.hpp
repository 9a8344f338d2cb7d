// Plain-text reports that fit a terminal: paragraphs folded at spaces.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace pipetab {

/// The columns a text report keeps within unless asked for more (`--wide`): a terminal split
/// beside an editor, and what a pasted report in an issue or a chat shows without scrolling.
inline constexpr std::size_t kTextWidth = 120;

/// Columns `text` takes on a terminal: one per UTF-8 character ("·" and "×" are one each).
std::size_t text_columns(std::string_view text);

/// `text` (one paragraph) folded at spaces into lines of at most `width` columns, the first
/// line starting with `first` and the others with `rest`, each ending in '\n'. A word longer
/// than a line keeps a line of its own, whole. Runs of spaces between words fold to one.
std::string wrap(std::string_view text, std::size_t width = kTextWidth, std::string_view first = "",
                 std::string_view rest = "");

}  // namespace pipetab
