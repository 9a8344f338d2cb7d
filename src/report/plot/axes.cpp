#include "axes.hpp"

#include <algorithm>
#include <cmath>

#include "text.hpp"
#include <fmt/format.h>

namespace pipetab::plot_detail {
namespace {

// Caps that hold for any data: a chart never needs more ticks than this.
constexpr double kMaxTicks = 1000;

// At most six decimals, trailing zeros dropped: "0.3", "2", "1000".
std::string trimmed(double value) {
  std::string s = fmt::format("{:.6f}", value);
  s.erase(s.find_last_not_of('0') + 1);
  if (!s.empty() && s.back() == '.') s.pop_back();
  return s == "-0" ? "0" : s;
}

int floor_log10(double v) {
  return static_cast<int>(std::floor(std::log10(v) + 1e-9));
}

// The 1, 2, 5 × 10^k nearest to `raw` (on a log scale); raw is a positive normal number.
double nearest_nice_step(double raw) {
  const double power = std::pow(10.0, std::floor(std::log10(raw)));
  double best = power;
  for (const double m : {2.0, 5.0, 10.0}) {
    if (std::abs(std::log(m * power / raw)) < std::abs(std::log(best / raw))) best = m * power;
  }
  return best;
}

// The next 1, 2, 5 × 10^k below `step` (itself one of them).
double smaller_nice_step(double step) {
  const double power = std::pow(10.0, std::floor(std::log10(step) + 1e-9));
  const double m = step / power;
  return m > 4.0 ? 2.0 * power : m > 1.5 ? power : 0.5 * power;
}

// Decimal SI, as memory capacities are quoted: the unit's exponent for a value 10^e.
int byte_unit(int e) {
  return std::clamp(e / 3 * 3, 0, 12);
}

const char* byte_unit_name(int unit) {
  switch (unit) {
    case 12:
      return "TB";
    case 9:
      return "GB";
    case 6:
      return "MB";
    case 3:
      return "kB";
    default:
      return "B";
  }
}

// A linear tick label for coordinate c (value c × 10^exponent) on a grid of `step`: as many
// decimals as the step needs, so neighbours read alike and binary fractions never show.
std::string linear_label(double c, double step, int exponent, bool bytes) {
  if (std::abs(c) < step * 1e-9) return bytes ? "0 B" : "0";
  const int step_digits = floor_log10(step);
  if (bytes && exponent >= 0) {
    const int unit = byte_unit(exponent);
    const int shift = exponent - unit;  // the value in the unit is c × 10^shift
    if (shift <= 5) {
      return fmt::format("{:.{}f} {}", scale10(c, shift), std::max(0, -(step_digits + shift)),
                         byte_unit_name(unit));
    }
  }
  if (exponent >= 6 || exponent < -3) {
    return fmt::format("{:.{}f}e{}{}", c, std::max(0, -step_digits), exponent, bytes ? " B" : "");
  }
  return fmt::format("{:.{}f}{}", scale10(c, exponent), std::max(0, -(step_digits + exponent)),
                     bytes ? " B" : "");
}

// m × 10^k on a log axis.
std::string log_label(int m, int k, bool bytes) {
  int shift = k;
  const char* unit = "";
  if (bytes) {
    const int u = k >= 0 ? byte_unit(k) : 0;
    shift = k - u;
    unit = byte_unit_name(u);
  }
  const std::string number = shift >= -4 && shift <= 5 ? trimmed(m * std::pow(10.0, shift))
                                                       : fmt::format("{}e{}", m, shift);
  return bytes ? number + " " + unit : number;
}

// True if neighbouring labels keep clear of each other.
bool labels_fit(const Axis& axis, const std::vector<Tick>& ticks) {
  double last_end = -1e300;
  for (const Tick& t : ticks) {
    if (t.label.empty()) continue;
    const double half =
        axis.horizontal ? text_width(t.label, axis.font) / 2 + 0.45 * axis.font : 0.8 * axis.font;
    const double at = axis.offset_at(t.at);
    if (at - half < last_end) return false;
    last_end = at + half;
  }
  return true;
}

// Ticks at multiples of a nice step over coordinates lo..hi of a linear scale of 10^exponent;
// `place` maps a coordinate to the axis's own (the identity, or log10 for a log axis's
// sub-decade fallback).
template <class Place>
std::vector<Tick> linear_ticks(const Axis& axis, double lo, double hi, int exponent, Place place) {
  const double span = hi - lo;
  const double magnitude = std::max(std::abs(lo), std::abs(hi));
  if (!(span > magnitude * 1e-12) || !std::isfinite(span)) {
    return {{place(lo), linear_label(lo, magnitude, exponent, axis.bytes)},
            {place(hi), linear_label(hi, magnitude, exponent, axis.bytes)}};
  }
  // About one label every 7 font sizes across and 5 up, at least two, fewer if labels need
  // the room.
  const double per = axis.font * (axis.horizontal ? 7.0 : 5.0);
  double step = nearest_nice_step(span / std::clamp(axis.length / per, 2.0, 50.0));
  for (int i = 0; i < 60 && std::floor(hi / step + 1e-9) - std::ceil(lo / step - 1e-9) < 1.0; ++i)
    step = smaller_nice_step(step);
  std::vector<Tick> ticks;
  for (int attempt = 0; attempt < 20; ++attempt) {
    ticks.clear();
    const double first = std::ceil(lo / step - 1e-9), last = std::floor(hi / step + 1e-9);
    if (!(last - first < kMaxTicks)) {
      step = nearest_nice_step(step * 2.5);
      continue;
    }
    for (double k = first; k <= last; k += 1.0) {
      double c = k * step;
      if (std::abs(c) < step * 1e-9) c = 0.0;
      ticks.push_back({place(c), linear_label(c, step, exponent, axis.bytes)});
    }
    if (labels_fit(axis, ticks)) break;
    step = nearest_nice_step(step * 1.5);
  }
  return ticks;
}

std::vector<Tick> log_ticks(const Axis& axis) {
  const double k0 = std::floor(axis.lo), k1 = std::ceil(axis.hi);
  const auto make = [&](const std::vector<int>& mults, double every) {
    std::vector<Tick> ticks;
    for (double k = k0; k <= k1; k += 1.0) {
      for (int m = 1; m <= 9; ++m) {
        const double at = k + std::log10(m);
        if (at < axis.lo - 1e-12 || at > axis.hi + 1e-12) continue;
        const bool labelled = std::find(mults.begin(), mults.end(), m) != mults.end() &&
                              (m != 1 || std::fmod(k, every) == 0.0);
        // Minor gridlines give a log axis its look, but too many of them are noise.
        if (labelled) {
          ticks.push_back({at, log_label(m, static_cast<int>(k), axis.bytes)});
        } else if (axis.hi - axis.lo <= 6.0) {
          ticks.push_back({at, ""});
        }
      }
    }
    return ticks;
  };
  const auto labelled = [](const std::vector<Tick>& ticks) {
    return std::count_if(ticks.begin(), ticks.end(),
                         [](const Tick& t) { return !t.label.empty(); });
  };
  // Under two decades, 2 and 5 are labelled too; within less than one, every digit.
  if (axis.decades < 2.0) {
    for (const auto& mults :
         {std::vector<int>{1, 2, 5}, std::vector<int>{1, 2, 3, 4, 5, 6, 7, 8, 9}}) {
      auto ticks = make(mults, 1);
      if (labelled(ticks) >= 2 && labels_fit(axis, ticks)) return ticks;
    }
  }
  // Every 1, 2, 5 × 10^j decades: a bounded search, as a double has about 630 decades.
  for (const double every : {1, 2, 3, 5, 10, 20, 50, 100, 200, 500, 1000}) {
    auto ticks = make({1}, every);
    if (labelled(ticks) >= 2 && labels_fit(axis, ticks)) return ticks;
  }
  // Too short an axis for that many decades: the outermost powers of ten inside, even if
  // their labels touch.
  if (k1 - k0 > 2.0) {
    const double first = std::ceil(axis.lo), last = std::floor(axis.hi);
    return {{first, log_label(1, static_cast<int>(first), axis.bytes)},
            {last, log_label(1, static_cast<int>(last), axis.bytes)}};
  }
  // A sliver of one decade: nice linear values, placed logarithmically.
  const int exponent = static_cast<int>(std::floor(axis.hi));
  return linear_ticks(axis, std::pow(10.0, axis.lo - exponent), std::pow(10.0, axis.hi - exponent),
                      exponent, [&](double c) { return std::log10(c) + exponent; });
}

}  // namespace

double scale10(double v, int e) {
  const int half = e / 2;
  return v * std::pow(10.0, half) * std::pow(10.0, e - half);
}

double Axis::coordinate(double v) const {
  return log ? std::log10(v) : scale10(v, -exponent);
}

void set_range(Axis& axis, double min, double max) {
  if (axis.log) {
    const double lo = std::log10(min), hi = std::log10(max);
    axis.decades = hi - lo;
    const double pad = hi > lo ? 0.05 * (hi - lo) : 0.5;
    axis.lo = lo - pad;
    axis.hi = hi + pad;
    return;
  }
  const double magnitude = std::max(std::abs(min), std::abs(max));
  axis.exponent = magnitude > 0.0 ? floor_log10(magnitude) : 0;
  const double cmin = axis.coordinate(min), cmax = axis.coordinate(max);
  double pad = 0.05 * (cmax - cmin);
  // Equal values, or equal but for rounding: a range around them.
  if (!(cmax - cmin > 1e-9 * std::max(std::abs(cmin), std::abs(cmax))))
    pad = cmin == 0.0 ? 1.0 : 0.1 * std::abs(cmin);
  axis.lo = cmin - pad;
  axis.hi = cmax + pad;
}

std::vector<Tick> make_ticks(const Axis& axis) {
  if (axis.log) return log_ticks(axis);
  return linear_ticks(axis, axis.lo, axis.hi, axis.exponent, [](double c) { return c; });
}

}  // namespace pipetab::plot_detail
