// Per-kind op costs for the idealized timing (docs/design.md §2, `--costs`).
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "pipetab/table/op.hpp"

namespace pipetab {

/// Time of each kind of pass over one device share (L/S layers); a stage of share x costs x
/// times as much. `FB` is the cost of an overlapped F&B pair; unset means F + B (no overlap
/// gain).
struct Costs {
  double F = 1.0;
  double B = 2.0;
  double I = 1.0;
  double W = 1.0;
  std::optional<double> FB;

  double of(PassKind kind) const noexcept;
  double pair() const noexcept { return FB.value_or(F + B); }
  friend bool operator==(const Costs&, const Costs&) = default;
};

/// Parses "F=1,B=2,I=1,W=1[,FB=2.5]". Keys left out are derived (docs/design.md §2): B = I + W when
/// I and W are given without B; I = W = B/2 when B is given without I and W; W = B - I (or
/// I = B - W) when B and one half are given; B, I and W all given must satisfy B = I + W.
/// Untouched keys keep their defaults (F=1, B=2, I=1, W=1). Values lie in [1e-12, 1e12], so that
/// no sum over a table can overflow. Throws ParamError naming the offending key on bad input.
Costs parse_costs(std::string_view text);

/// "F=1,B=2,I=1,W=1" (plus ",FB=x" when set), shortest round-trip number formatting.
std::string to_string(const Costs& costs);

}  // namespace pipetab
