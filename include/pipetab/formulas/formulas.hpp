// The formula level (docs/design.md §2): closed forms of a schedule's makespan, bubble ratio and
// activation peaks, from its parameters and op costs alone. O(S).
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "pipetab/schedules/params.hpp"
#include "pipetab/table/costs.hpp"

namespace pipetab {

/// Which bubble a paper's published ratio measures (reference schedules.md §0).
enum class PublishedBubble {
  global,            ///< Def-B: idle over S × makespan; exact under the paper's costs
  span,              ///< Def-A: per-device span; exact under the paper's costs
  approximate_span,  ///< Def-A, which the paper itself states only approximately ("≈ B/2")
};

/// "global", "span" or "approximate span".
std::string_view to_string(PublishedBubble kind);

/// Closed forms for one schedule. An unset field has no closed form for these parameters and
/// costs; `note` then says why.
struct Formula {
  std::optional<double> makespan;      ///< idealized makespan, cost units
  std::optional<double> bubble_ratio;  ///< global bubble ratio (Def-B) under the given costs
  /// Per-device-span bubble ratio (Def-A, the zero-bubble papers' "bubble rate"): 1 − a
  /// device's work over the longest first-start-to-last-end span; ignores the start-up skew.
  std::optional<double> span_bubble_ratio;
  std::optional<std::vector<double>> peak_activation;  ///< per device, M_a
  /// The bubble ratio as its paper states it, under the paper's assumption (e.g. equal F and B
  /// slots); it may differ from the table under other costs — that difference is a finding.
  std::optional<double> published_bubble_ratio;
  PublishedBubble published_kind = PublishedBubble::global;  ///< what published_bubble_ratio is
  std::string_view source;                                   ///< where the closed forms come from
  std::string note;  ///< why a field is unset, or the assumption behind a value

  /// The largest per-device peak, if known.
  std::optional<double> peak_activation_max() const;
};

/// The closed forms of `params.schedule` at these parameters and costs. Schedules without any
/// closed form give an empty Formula with a note. Precondition: params were resolved for the
/// schedule (schedules/registry.hpp) and its generator accepts them.
Formula formula(const ResolvedParams& params, const Costs& costs);

}  // namespace pipetab
