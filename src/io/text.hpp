// Private to io/: helpers for error messages about file contents.
#pragma once

#include <string>
#include <string_view>

namespace pipetab::io::detail {

/// `text` quoted for an error message: non-printable bytes as \xNN, cut after 40 characters.
std::string quoted(std::string_view text);

/// The length of a UTF-8 byte-order mark at the start of `text` (3), or 0. Spreadsheet
/// programs write one; it is not part of the first cell.
inline std::size_t byte_order_mark(std::string_view text) {
  return text.substr(0, 3) == "\xEF\xBB\xBF" ? 3 : 0;
}

/// 1-based line and column of byte `offset` in `text`.
std::pair<int, int> line_column(std::string_view text, std::size_t offset);

}  // namespace pipetab::io::detail
