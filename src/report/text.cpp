// Plain-text folding (report/text.hpp).
#include "pipetab/report/text.hpp"

#include <algorithm>

namespace pipetab {

std::size_t text_columns(std::string_view text) {
  std::size_t columns = 0;
  for (const char c : text)  // every byte but a UTF-8 continuation byte (10xxxxxx) starts one
    columns += (static_cast<unsigned char>(c) & 0xC0U) != 0x80U;
  return columns;
}

std::string wrap(std::string_view text, std::size_t width, std::string_view first,
                 std::string_view rest) {
  std::string out(first);
  std::size_t column = text_columns(first);
  bool line_has_word = false;
  std::size_t at = 0;
  while (at < text.size()) {
    if (text[at] == ' ') {
      ++at;
      continue;
    }
    const auto end = std::min(text.find(' ', at), text.size());
    const auto word = text.substr(at, end - at);
    const auto columns = text_columns(word);
    if (line_has_word && column + 1 + columns > width) {
      out += '\n';
      out += rest;
      column = text_columns(rest);
      line_has_word = false;
    }
    if (line_has_word) {
      out += ' ';
      ++column;
    }
    out += word;
    column += columns;
    line_has_word = true;
    at = end;
  }
  out += '\n';
  return out;
}

}  // namespace pipetab
