// Enumerations named on the command line and in files: each has a table of its names in
// enumerator order, and these two functions between them.
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace pipetab {

/// The enumerator `name` stands for in `names`, or nothing.
template <class E, std::size_t N>
constexpr std::optional<E> parse_name(const std::array<std::string_view, N>& names,
                                      std::string_view name) {
  for (std::size_t i = 0; i < N; ++i) {
    if (names[i] == name) return static_cast<E>(i);
  }
  return std::nullopt;
}

/// The name of enumerator `e` in `names`.
template <class E, std::size_t N>
constexpr std::string_view name_of(const std::array<std::string_view, N>& names, E e) {
  return names[static_cast<std::size_t>(e)];
}

/// Levenshtein distance, for "did you mean" (names are short: O(|a|·|b|) is nothing).
inline std::size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<std::size_t> row(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j)
    row[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    std::size_t diagonal = row[0];
    row[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      const std::size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = up;
    }
  }
  return row[b.size()];
}

/// `text` with ASCII capitals in lower case (names are matched without regard to case).
inline std::string lower_case(std::string_view text) {
  std::string out(text);
  for (auto& c : out) {
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  }
  return out;
}

/// For "did you mean": the indices of the candidates nearest to a name, written any of the ways
/// in `spellings` — every candidate at the least edit distance (in the candidates' order), or
/// none when that distance is over `max_edits` (a far guess misleads more than none).
template <class Candidates, class Spellings>
std::vector<std::size_t> nearest_names(const Candidates& candidates, const Spellings& spellings,
                                       std::size_t max_edits) {
  std::vector<std::size_t> nearest;
  std::size_t best = max_edits;
  std::size_t i = 0;
  for (const auto& candidate : candidates) {
    std::size_t d = max_edits + 1;
    for (const auto& spelling : spellings)
      d = std::min(d, edit_distance(spelling, candidate));
    if (d < best) {
      nearest.clear();
      best = d;
    }
    if (d == best) nearest.push_back(i);
    ++i;
  }
  return nearest;
}

/// "; did you mean 'a'?" or "; did you mean 'a' or 'b'?" for the names given; "" for none.
inline std::string did_you_mean(const std::vector<std::string>& names) {
  if (names.empty()) return {};
  std::string out = "; did you mean '" + names.front() + "'";
  for (std::size_t i = 1; i < names.size(); ++i)
    out += " or '" + names[i] + "'";
  return out + "?";
}

/// A set of enumerators written as their names joined by '+' (or ','), or "none": one bit each,
/// in `names` order, and what was wrong with it (empty when it parsed).
struct NameSetParse {
  std::uint32_t bits = 0;
  std::string error;
};

template <std::size_t N>
NameSetParse parse_name_set(const std::array<std::string_view, N>& names, std::string_view text,
                            std::string_view what) {
  static_assert(N <= 32);
  NameSetParse out;
  if (text == "none") return out;
  std::string all;
  for (const auto n : names)
    all += (all.empty() ? "" : ", ") + std::string(n);
  std::size_t at = 0;
  while (true) {
    const std::size_t end = text.find_first_of("+,", at);
    const std::string_view name = text.substr(at, end == std::string_view::npos ? end : end - at);
    const auto it = std::find(names.begin(), names.end(), name);
    if (it == names.end()) {
      out.error = name.empty()
                      ? "an empty " + std::string(what) + " name in '" + std::string(text) + "'"
                      : "unknown " + std::string(what) + " '" + std::string(name) + "': expected " +
                            std::string(what) + "s among " + all + " joined by '+', or none";
      return out;
    }
    const auto bit = std::uint32_t{1} << static_cast<unsigned>(it - names.begin());
    if (out.bits & bit) {
      out.error = std::string(what) + " '" + std::string(name) + "' given twice";
      return out;
    }
    out.bits |= bit;
    if (end == std::string_view::npos) return out;
    at = end + 1;
  }
}

/// The names of the bits set, joined by '+'; "none" for none.
template <std::size_t N>
std::string name_set_text(const std::array<std::string_view, N>& names, std::uint32_t bits) {
  std::string out;
  for (std::size_t i = 0; i < N; ++i) {
    if (!(bits & (std::uint32_t{1} << i))) continue;
    if (!out.empty()) out += '+';
    out += names[i];
  }
  return out.empty() ? "none" : out;
}

}  // namespace pipetab
