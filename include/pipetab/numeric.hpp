// Conversions from a floating-point value that may come from user input to an integer type.
// A plain static_cast of a double outside the target's range is undefined behaviour, and in
// practice wraps: `tune --memory-limit 3e9` became a negative cap and dropped the heuristic
// search (issue 14). Every such conversion goes through here.
#pragma once

#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstddef>
#include <cstdlib>
#include <limits>
#include <string>
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

namespace detail {

/// parse_double's grammar matched by hand and converted by strtod: the web build's
/// implementation (musl's strtod ignores the locale; glibc's does not, so natively it serves only
/// the tests, which hold it to std::from_chars in the C locale).
inline std::from_chars_result parse_double_strtod(const char* first, const char* last,
                                                  double& value) {
  const char* p = first;
  if (p != last && *p == '-') ++p;
  auto lower_is = [&](const char* word) {
    const char* q = p;
    for (; *word != '\0'; ++word, ++q)
      if (q == last || (*q | 0x20) != *word) return static_cast<const char*>(nullptr);
    return q;
  };
  const char* end = nullptr;
  if (const char* q = lower_is("inf")) {
    p = q;
    const char* full = lower_is("inity");
    end = full != nullptr ? full : q;
  } else if (const char* n = lower_is("nan")) {
    end = n;
  } else {
    const char* digits = p;
    while (p != last && *p >= '0' && *p <= '9')
      ++p;
    bool any = p != digits;
    if (p != last && *p == '.') {
      const char* fraction = ++p;
      while (p != last && *p >= '0' && *p <= '9')
        ++p;
      any = any || p != fraction;
    }
    if (!any) return {first, std::errc::invalid_argument};
    end = p;
    if (p != last && (*p == 'e' || *p == 'E')) {
      const char* e = p + 1;
      if (e != last && (*e == '+' || *e == '-')) ++e;
      const char* exponent = e;
      while (e != last && *e >= '0' && *e <= '9')
        ++e;
      if (e != exponent) end = e;
    }
  }
  const std::string text(first, end);  // strtod needs a terminated string
  errno = 0;
  const double read = std::strtod(text.c_str(), nullptr);
  // Out of range as std::from_chars has it: overflow to infinity, or underflow to zero from a
  // nonzero number (a subnormal result is in range).
  if (errno == ERANGE && (std::isinf(read) || read == 0.0))
    return {end, std::errc::result_out_of_range};
  value = read;
  return {end, std::errc{}};
}

}  // namespace detail

/// std::from_chars for a double: the decimal number at the start of [first, last) ("5.5",
/// "8e10", "-1", "inf"; no leading space or '+'), independent of the C locale — strtod and
/// sscanf("%lf") follow setlocale, so that in a process under de_DE.UTF-8 (Python after
/// locale.setlocale) "5,5" read as 5.5 and "5.5" as 5. Every floating-point number pipetab reads
/// from text goes through here. Where the standard library lacks the floating-point overload
/// (the libc++ of Debian's emscripten 3.1.6, for the web build), the same grammar is matched here
/// and converted by musl's strtod, whose decimal point is '.' in every locale.
inline std::from_chars_result parse_double(const char* first, const char* last, double& value) {
#if defined(__cpp_lib_to_chars) && __cpp_lib_to_chars >= 201611L
  return std::from_chars(first, last, value);
#else
  return detail::parse_double_strtod(first, last, value);
#endif
}

/// Reads the decimal number at the start of `text` (parse_double). Returns the characters read,
/// 0 if there is no number.
inline std::size_t parse_number_prefix(std::string_view text, double& value) {
  const auto [end, ec] = parse_double(text.data(), text.data() + text.size(), value);
  if (ec != std::errc{}) return 0;
  return static_cast<std::size_t>(end - text.data());
}

/// The shortest time a measurement file may give (a GEMM, an iteration): a nanosecond. Shorter
/// ones (4e-320 s, a subnormal) are unit or export errors, and divided into +inf %.
inline constexpr double kMinMeasuredSeconds = 1e-9;

}  // namespace pipetab
