// Conversions from a floating-point value that may come from user input to an integer type.
// A plain static_cast of a double outside the target's range is undefined behaviour, and in
// practice wraps: `tune --memory-limit 3e9` became a negative cap and dropped the heuristic
// search (issue 14). Every such conversion goes through here.
#pragma once

#include <cmath>
#include <limits>
#include <type_traits>

namespace pipetab {

/// `value` rounded down and clamped to T's range; NaN gives T's lowest value.
template <class T>
constexpr T floor_to(double value) {
  static_assert(std::is_integral_v<T>);
  // Compared as doubles: max() rounds up to a power of two there, so test with >=.
  constexpr auto hi = static_cast<double>(std::numeric_limits<T>::max());
  constexpr auto lo = static_cast<double>(std::numeric_limits<T>::lowest());
  if (std::isnan(value) || value <= lo) return std::numeric_limits<T>::lowest();
  if (value >= hi) return std::numeric_limits<T>::max();
  return static_cast<T>(std::floor(value));
}

}  // namespace pipetab
