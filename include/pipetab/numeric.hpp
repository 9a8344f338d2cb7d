// Conversions from a floating-point value that may come from user input to an integer type.
// A plain static_cast of a double outside the target's range is undefined behaviour, and in
// practice wraps: `tune --memory-limit 3e9` became a negative cap and dropped the heuristic
// search (issue 14). Every such conversion goes through here.
#pragma once

#include <charconv>
#include <cmath>
#include <cstddef>
#include <limits>
#include <string_view>
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

/// Reads the decimal number at the start of `text` ("5.5", "8e10", "-1"; no leading space or
/// '+'), independent of the C locale: strtod and sscanf("%lf") follow setlocale, so that in a
/// process under de_DE.UTF-8 (Python after locale.setlocale) "5,5" read as 5.5 and "5.5" as 5.
/// Every number pipetab reads from text goes through std::from_chars, here or directly.
/// Returns the characters read, 0 if there is no number.
inline std::size_t parse_number_prefix(std::string_view text, double& value) {
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc{}) return 0;
  return static_cast<std::size_t>(end - text.data());
}

/// The shortest time a measurement file may give (a GEMM, an iteration): a nanosecond. Shorter
/// ones (4e-320 s, a subnormal) are unit or export errors, and divided into +inf %.
inline constexpr double kMinMeasuredSeconds = 1e-9;

}  // namespace pipetab
