// Chart axes: the range shown and the ticks, for any finite data, from subnormals to 1e308.
//
// Every computation works in the axis's own coordinate, never on raw values: log10(v) on a log
// axis and v / 10^e on a linear one (e the decimal exponent of the largest magnitude), so the
// numbers the tick search divides and rounds are near 1 whatever the data (issue 14: a
// subnormal once made a tick step underflow to 0 and the tick loop run until memory ran out).
// Each loop has a bound that does not depend on the data's values.
#pragma once

#include <string>
#include <vector>

namespace pipetab::plot_detail {

struct Tick {
  double at;          ///< in axis coordinates
  std::string label;  ///< empty: a minor gridline only
};

struct Axis {
  bool log = false;
  bool bytes = false;         ///< labels in B, kB, MB, GB, TB
  bool horizontal = true;     ///< labels side by side (else stacked)
  double length = 1.0;        ///< drawing units
  double font = 11.0;         ///< tick label size, to keep labels apart
  int exponent = 0;           ///< linear: coordinates are values / 10^exponent
  double lo = 0.0, hi = 1.0;  ///< the range shown, in coordinates (padded around the data)
  double decades = 0.0;       ///< log: the data's span in decades (unpadded)
  std::vector<Tick> ticks;

  /// The coordinate of value `v` (above 0 on a log axis).
  double coordinate(double v) const;
  /// Position along the axis from its start (left or bottom), 0 to length inside the range.
  double offset(double v) const { return offset_at(coordinate(v)); }
  double offset_at(double c) const { return (c - lo) / (hi - lo) * length; }
};

/// Sets the range to show `min`..`max` (finite, min <= max, above 0 on a log axis) with a
/// little room around, and a valid range when they are equal.
void set_range(Axis& axis, double min, double max);

/// Labelled ticks (and a log axis's minor gridlines) inside the range, at least two labels
/// where the range allows, spaced so that labels do not overlap.
std::vector<Tick> make_ticks(const Axis& axis);

/// v × 10^e without overflow or underflow in the intermediate power.
double scale10(double v, int e);

}  // namespace pipetab::plot_detail
