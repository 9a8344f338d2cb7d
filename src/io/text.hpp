// Private to io/: helpers for error messages about file contents.
#pragma once

#include <string>
#include <string_view>

namespace pipetab::io::detail {

/// `text` quoted for an error message: non-printable bytes as \xNN, cut after 40 characters.
std::string quoted(std::string_view text);

/// 1-based line and column of byte `offset` in `text`.
std::pair<int, int> line_column(std::string_view text, std::size_t offset);

}  // namespace pipetab::io::detail
