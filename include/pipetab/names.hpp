// Enumerations named on the command line and in files: each has a table of its names in
// enumerator order, and these two functions between them.
#pragma once

#include <array>
#include <cstddef>
#include <optional>
#include <string_view>

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

}  // namespace pipetab
