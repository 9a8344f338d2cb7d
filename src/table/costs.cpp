#include "pipetab/table/costs.hpp"

#include <array>
#include <charconv>
#include <cmath>

#include <fmt/format.h>

#include "pipetab/error.hpp"
#include "pipetab/numeric.hpp"

namespace pipetab {

double Costs::of(PassKind kind) const noexcept {
  switch (kind) {
    case PassKind::F:
      return F;
    case PassKind::B:
      return B;
    case PassKind::I:
      return I;
    case PassKind::W:
      return W;
    case PassKind::None:
      break;
  }
  return 0.0;
}

namespace {

constexpr std::array<std::string_view, 5> kKeys = {"F", "B", "I", "W", "FB"};
// Bounds that keep every sum over a table (at most 2^28 ops) finite and ratios drawable.
constexpr double kMinCost = 1e-12;
constexpr double kMaxCost = 1e12;

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t'))
    s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t'))
    s.remove_suffix(1);
  return s;
}

double parse_value(std::string_view key, std::string_view text) {
  double value = 0.0;
  const auto* end = text.data() + text.size();
  const auto [ptr, ec] = parse_double(text.data(), end, value);
  if (text.empty() || ec != std::errc{} || ptr != end || !std::isfinite(value)) {
    throw ParamError(fmt::format("--costs: {}={}: expected a number", key, text));
  }
  if (value <= 0.0) {
    throw ParamError(fmt::format("--costs: {}={}: costs must be positive", key, text));
  }
  if (value < kMinCost || value > kMaxCost) {
    throw ParamError(fmt::format("--costs: {}={}: costs must lie between {:g} and {:g}", key, text,
                                 kMinCost, kMaxCost));
  }
  return value;
}

}  // namespace

Costs parse_costs(std::string_view text) {
  std::array<std::optional<double>, kKeys.size()> given{};
  std::string_view rest = text;
  if (trim(rest).empty()) throw ParamError("--costs: empty; expected e.g. F=1,B=2,I=1,W=1");
  while (true) {
    const auto comma = rest.find(',');
    const auto item = trim(rest.substr(0, comma));
    const auto eq = item.find('=');
    if (eq == std::string_view::npos) {
      throw ParamError(
          fmt::format("--costs: '{}': expected KEY=VALUE (keys F, B, I, W, FB)", item));
    }
    const auto key = trim(item.substr(0, eq));
    std::size_t index = 0;
    while (index < kKeys.size() && kKeys[index] != key)
      ++index;
    if (index == kKeys.size()) {
      throw ParamError(fmt::format("--costs: unknown key '{}' (expected F, B, I, W or FB)", key));
    }
    if (given[index]) throw ParamError(fmt::format("--costs: key '{}' given twice", key));
    given[index] = parse_value(key, trim(item.substr(eq + 1)));
    if (comma == std::string_view::npos) break;
    rest.remove_prefix(comma + 1);
  }

  const auto& [f, b, i, w, fb] = given;
  Costs costs;
  if (f) costs.F = *f;
  costs.FB = fb;
  if (b && !i && !w) {
    costs.B = *b;
    costs.I = costs.W = *b / 2;
  } else if (!b && i && w) {
    costs.I = *i;
    costs.W = *w;
    costs.B = *i + *w;
  } else if (b && i && w) {
    if (std::fabs(*b - (*i + *w)) > 1e-9 * *b) {
      throw ParamError(
          fmt::format("--costs: B={} but I + W = {}; the split backward must add up to the full "
                      "one (B = I + W)",
                      *b, *i + *w));
    }
    costs.B = *b;
    costs.I = *i;
    costs.W = *w;
  } else if (b && (i || w)) {
    costs.B = *b;
    costs.I = i ? *i : *b - *w;
    costs.W = w ? *w : *b - *i;
    if (costs.I <= 0.0 || costs.W <= 0.0) {
      throw ParamError(fmt::format(
          "--costs: B={} must exceed the given {} so that the derived {} = B - {} is positive", *b,
          i ? "I" : "W", i ? "W" : "I", i ? "I" : "W"));
    }
  } else if (i || w) {
    throw ParamError(
        fmt::format("--costs: {} given without {} or B; give both halves or the full backward B",
                    i ? "I" : "W", i ? "W" : "I"));
  }
  return costs;
}

std::string to_string(const Costs& costs) {
  auto out = fmt::format("F={},B={},I={},W={}", costs.F, costs.B, costs.I, costs.W);
  if (costs.FB) out += fmt::format(",FB={}", *costs.FB);
  return out;
}

}  // namespace pipetab
