#include "text.hpp"

#include <cstring>

namespace pipetab::plot_detail {

double text_width(std::string_view text, double size, bool bold) {
  double em = 0.0;
  for (const char ch : text) {
    const auto c = static_cast<unsigned char>(ch);
    if ((c & 0xC0) == 0x80) continue;  // UTF-8 continuation byte
    if (c >= 0x80) {
      em += 0.7;
    } else if (c == ' ') {
      em += 0.33;
    } else if (c >= '0' && c <= '9') {
      em += 0.64;
    } else if (std::strchr(".,:;'|!", ch) != nullptr) {
      em += 0.35;
    } else if (std::strchr("ijlftrI()[]-", ch) != nullptr) {
      em += 0.42;
    } else if (std::strchr("mwMW", ch) != nullptr) {
      em += 0.95;
    } else if (c >= 'A' && c <= 'Z') {
      em += 0.72;
    } else {
      em += 0.62;
    }
  }
  return em * size * (bold ? 1.1 : 1.0);
}

std::vector<std::string> wrapped(const std::string& text, double size, double width) {
  std::vector<std::string> lines;
  std::string line;
  std::size_t start = 0;
  while (start <= text.size()) {
    auto end = text.find(' ', start);
    if (end == std::string::npos) end = text.size();
    const std::string word = text.substr(start, end - start);
    const std::string longer = line.empty() ? word : line + " " + word;
    if (!line.empty() && text_width(longer, size) > width) {
      lines.push_back(line);
      line = word;
    } else {
      line = longer;
    }
    start = end + 1;
  }
  lines.push_back(line);
  return lines;
}

}  // namespace pipetab::plot_detail
