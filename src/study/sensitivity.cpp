#include "pipetab/study/sensitivity.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <tuple>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "pipetab/error.hpp"
#include "pipetab/report/output.hpp"
#include "pipetab/report/text.hpp"
#include "pipetab/study/sweep.hpp"

namespace pipetab {

namespace {

const char* const kAxisNames[3] = {"bandwidth", "latency", "collective"};

// -1 when a is clearly faster than b, +1 when clearly slower, 0 when within the tolerance.
int order(double a, double b, double tolerance) {
  if (std::isnan(a) || std::isnan(b)) return 0;
  if (a < b * (1.0 - tolerance)) return -1;
  if (b < a * (1.0 - tolerance)) return 1;
  return 0;
}

std::string factor_text(double f) {
  return fmt::format("{:.3g}x", f);
}

// "0.5x 1x 2x" (std::views would be shorter, but clang 14 cannot compile libstdc++ 12's ranges).
std::string factors_text(const std::vector<double>& factors) {
  std::string out;
  for (const double f : factors)
    out += (out.empty() ? "" : " ") + factor_text(f);
  return out;
}

std::string point_text(const SensitivityResult& r, std::int64_t point) {
  const auto f = r.factors(point);
  return fmt::format("bandwidth {}, latency {}, collective {}", factor_text(f[0]),
                     factor_text(f[1]), factor_text(f[2]));
}

// "hanayo < gpipe = 1f1b < chimera": '=' joins neighbours within the tolerance; tied runs are
// written in list order, so that the same ranking always reads the same.
std::string ranking_text(const SensitivityResult& r, std::int64_t point) {
  auto ranking = r.ranking(point);
  const auto n = r.schedules.size();
  const auto p = static_cast<std::size_t>(point) * n;
  auto tied = [&](std::size_t i) {  // ranking[i] tied with ranking[i - 1]
    return order(r.runtime[p + static_cast<std::size_t>(ranking[i - 1])],
                 r.runtime[p + static_cast<std::size_t>(ranking[i])], r.tolerance) == 0;
  };
  std::vector<bool> joins(ranking.size(), false);
  for (std::size_t i = 1; i < ranking.size(); ++i)
    joins[i] = tied(i);
  for (std::size_t i = 0; i < ranking.size();) {
    std::size_t j = i + 1;
    while (j < ranking.size() && joins[j])
      ++j;
    std::sort(ranking.begin() + static_cast<std::ptrdiff_t>(i),
              ranking.begin() + static_cast<std::ptrdiff_t>(j));
    i = j;
  }
  std::string out;
  for (std::size_t i = 0; i < ranking.size(); ++i) {
    if (i > 0) out += joins[i] ? " = " : " < ";
    out += r.schedules[static_cast<std::size_t>(ranking[i])];
  }
  return out;
}

}  // namespace

std::vector<double> sensitivity_factors(double lo, double hi, int steps, bool geometric) {
  if (!(lo > 0.0 && lo <= 1.0 && hi >= 1.0 && std::isfinite(hi)))
    throw Error(fmt::format("factor range {}:{}: expected 0 < LO <= 1 <= HI", lo, hi));
  if (steps < 2 || steps > 101)
    throw Error(fmt::format("--steps {}: expected 2 to 101 points per axis", steps));
  std::vector<double> out;
  for (int i = 0; i < steps; ++i) {
    const double t = static_cast<double>(i) / (steps - 1);
    out.push_back(geometric ? lo * std::pow(hi / lo, t) : lo + (hi - lo) * t);
  }
  // The baseline is exactly 1 (a step that lands within rounding of it is replaced).
  bool has_one = false;
  for (double& f : out) {
    if (std::abs(f - 1.0) < 1e-9) {
      f = 1.0;
      has_one = true;
    }
  }
  if (!has_one) out.push_back(1.0);
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

std::int64_t SensitivityResult::points() const {
  return static_cast<std::int64_t>(axes.bandwidth.size() * axes.latency.size() *
                                   axes.collective.size());
}

std::array<double, 3> SensitivityResult::factors(std::int64_t point) const {
  const auto C = static_cast<std::int64_t>(axes.collective.size());
  const auto L = static_cast<std::int64_t>(axes.latency.size());
  return {axes.bandwidth[static_cast<std::size_t>(point / (L * C))],
          axes.latency[static_cast<std::size_t>(point / C % L)],
          axes.collective[static_cast<std::size_t>(point % C)]};
}

std::vector<std::int32_t> SensitivityResult::ranking(std::int64_t point) const {
  const auto n = schedules.size();
  std::vector<std::int32_t> out;
  for (std::size_t s = 0; s < n; ++s) {
    if (!std::isnan(runtime[static_cast<std::size_t>(point) * n + s]))
      out.push_back(static_cast<std::int32_t>(s));
  }
  // Exact order (a strict weak ordering); ties within the tolerance are shown by ranking_text.
  std::stable_sort(out.begin(), out.end(), [&](std::int32_t a, std::int32_t b) {
    return runtime[static_cast<std::size_t>(point) * n + static_cast<std::size_t>(a)] <
           runtime[static_cast<std::size_t>(point) * n + static_cast<std::size_t>(b)];
  });
  return out;
}

SensitivityResult run_sensitivity(Study study, const SensitivityAxes& axes, double tolerance,
                                  int threads) {
  if (!(tolerance >= 0.0 && tolerance < 1.0))
    throw Error(fmt::format("tolerance {}: expected a fraction from 0 to below 1", tolerance));
  study.simulate = true;
  study.bandwidth_scale = axes.bandwidth;
  study.latency_scale = axes.latency;
  study.collective_scale = axes.collective;
  study.record = {"schedule", "simulation.runtime_s"};
  const SweepPlan plan(std::move(study));

  SensitivityResult r;
  r.axes = axes;
  r.tolerance = tolerance;
  const auto P = r.points();
  const auto n = static_cast<std::int64_t>(plan.study().schedules.size());
  if (static_cast<std::int64_t>(plan.configurations().size()) != n * P) {
    throw Error(
        "a sensitivity study takes one configuration per schedule: one system, one model, one S "
        "and M, one value per option");
  }
  for (const auto& entry : plan.study().schedules)
    r.schedules.push_back(entry.table.empty() ? entry.name : entry.table);
  r.skipped.assign(static_cast<std::size_t>(n), "");
  r.runtime.assign(static_cast<std::size_t>(n * P), std::numeric_limits<double>::quiet_NaN());
  // Columns: index, status, reason, schedule, simulation.runtime_s. Configurations run schedule
  // by schedule (expand() puts the schedule outermost, the scale axes next).
  run_sweep(plan, 0, n * P, threads, [&](std::int64_t index, SweepRow&& row) {
    const auto s = static_cast<std::size_t>(index / P);
    const auto point = static_cast<std::size_t>(index % P);
    if (row[1] == "ok" && row[4].is_number()) {
      r.runtime[point * static_cast<std::size_t>(n) + s] = row[4].get<double>();
    } else if (r.skipped[s].empty()) {
      r.skipped[s] = row[2].is_string() ? row[2].get<std::string>()
                                        : std::string("the simulation did not run");
    }
  });
  for (std::size_t s = 0; s < r.skipped.size(); ++s) {
    // A schedule that fails at any point (e.g. a runtime overflow at an extreme factor) is left
    // out everywhere, so that rankings compare the same schedules at every point.
    if (!r.skipped[s].empty()) {
      for (std::int64_t p = 0; p < P; ++p)
        r.runtime[static_cast<std::size_t>(p * n) + s] = std::numeric_limits<double>::quiet_NaN();
    }
  }
  const auto index_of = [](const std::vector<double>& v) {
    return static_cast<std::int64_t>(std::find(v.begin(), v.end(), 1.0) - v.begin());
  };
  const auto B = static_cast<std::int64_t>(axes.bandwidth.size());
  const auto L = static_cast<std::int64_t>(axes.latency.size());
  const auto C = static_cast<std::int64_t>(axes.collective.size());
  r.baseline =
      (index_of(axes.bandwidth) * L + index_of(axes.latency)) * C + index_of(axes.collective);

  // Along each line of the grid (one factor varying, the others fixed), a pair flips where its
  // strict order reverses: between the last point where one was clearly ahead and the first
  // where the other is, so that a crossing through tied points is reported too.
  const std::int64_t stride[3] = {L * C, C, 1};
  const std::int64_t extent[3] = {B, L, C};
  auto at = [&](std::int64_t point, std::int64_t s) {
    return r.runtime[static_cast<std::size_t>(point * n + s)];
  };
  for (int axis = 0; axis < 3; ++axis) {
    for (std::int64_t start = 0; start < P; ++start) {
      if (start / stride[axis] % extent[axis] != 0) continue;  // not the start of a line
      for (std::int64_t a = 0; a < n; ++a) {
        for (std::int64_t b = a + 1; b < n; ++b) {
          int last = 0;
          std::int64_t last_point = start;
          for (std::int64_t k = 0; k < extent[axis]; ++k) {
            const auto p = start + k * stride[axis];
            const int now = order(at(p, a), at(p, b), tolerance);
            if (now == 0) continue;
            if (last != 0 && now != last) {
              const bool a_overtakes = last > 0;
              r.flips.push_back({axis, last_point, p,
                                 static_cast<std::int32_t>(a_overtakes ? a : b),
                                 static_cast<std::int32_t>(a_overtakes ? b : a)});
            }
            last = now;
            last_point = p;
          }
        }
      }
    }
  }
  std::sort(r.flips.begin(), r.flips.end(), [](const RankFlip& x, const RankFlip& y) {
    return std::tie(x.axis, x.from, x.to, x.overtaker, x.overtaken) <
           std::tie(y.axis, y.from, y.to, y.overtaker, y.overtaken);
  });
  return r;
}

std::string to_text(const SensitivityResult& r) {
  const auto n = r.schedules.size();
  const auto P = r.points();
  std::string out = wrap(fmt::format("sensitivity of the simulated runtime: bandwidth {}, latency "
                                     "{}, collective {} ({} points; runtimes within {:g}% count "
                                     "as tied)",
                                     factors_text(r.axes.bandwidth), factors_text(r.axes.latency),
                                     factors_text(r.axes.collective), P, 100.0 * r.tolerance),
                         kTextWidth, "", "  ") +
                    "\n";
  out += fmt::format("{:<16}{:>14}{:>14}{:>14}{:>10}  slowest at\n", "schedule", "baseline s",
                     "min s", "max s", "max/min");
  for (std::size_t s = 0; s < n; ++s) {
    if (!r.skipped[s].empty()) {
      out += fmt::format("{:<16}skipped: {}\n", r.schedules[s], r.skipped[s]);
      continue;
    }
    double lo = std::numeric_limits<double>::infinity(), hi = -lo;
    std::int64_t worst = 0;
    for (std::int64_t p = 0; p < P; ++p) {
      const double t = r.runtime[static_cast<std::size_t>(p) * n + s];
      lo = std::min(lo, t);
      if (t > hi) {
        hi = t;
        worst = p;
      }
    }
    out += fmt::format("{:<16}{:>14.6g}{:>14.6g}{:>14.6g}{:>10.3f}  {}\n", r.schedules[s],
                       r.runtime[static_cast<std::size_t>(r.baseline) * n + s], lo, hi, hi / lo,
                       point_text(r, worst));
  }
  const auto base = ranking_text(r, r.baseline);
  out += fmt::format("\nranking at the baseline (fastest first): {}\n", base);
  // Distinct rankings in order of first appearance, with how many points have each.
  std::vector<std::pair<std::string, std::int64_t>> rankings;
  for (std::int64_t p = 0; p < P; ++p) {
    const auto text = ranking_text(r, p);
    auto at = std::find_if(rankings.begin(), rankings.end(),
                           [&](const auto& entry) { return entry.first == text; });
    if (at == rankings.end()) {
      rankings.emplace_back(text, 1);
    } else {
      ++at->second;
    }
  }
  if (rankings.size() == 1) {
    out += "the ranking is the same at every point\n";
  } else {
    out += fmt::format("{} rankings over the {} points:\n", rankings.size(), P);
    for (const auto& [text, count] : rankings)
      out += fmt::format("  {:>5} points: {}{}\n", count, text, text == base ? "  (baseline)" : "");
  }
  if (r.flips.empty()) {
    out += "no two schedules swap order along any factor\n";
    return out;
  }
  // Flips that differ only in the other factors' settings are one line: most flips of a grid
  // are the same crossing seen at every setting of the others.
  struct FlipGroup {
    const RankFlip* first;
    std::vector<std::string> settings;  // the other factors' settings it happens at
  };
  std::vector<FlipGroup> groups;
  const auto same = [&](const RankFlip& x, const RankFlip& y) {
    const auto ax = static_cast<std::size_t>(x.axis);
    return x.axis == y.axis && x.overtaker == y.overtaker && x.overtaken == y.overtaken &&
           r.factors(x.from)[ax] == r.factors(y.from)[ax] &&
           r.factors(x.to)[ax] == r.factors(y.to)[ax];
  };
  for (const auto& f : r.flips) {
    const auto from = r.factors(f.from);
    std::vector<std::string> fixed;
    for (int axis = 0; axis < 3; ++axis) {
      if (axis != f.axis)
        fixed.push_back(fmt::format("{} {}", kAxisNames[axis],
                                    factor_text(from[static_cast<std::size_t>(axis)])));
    }
    auto at = std::find_if(groups.begin(), groups.end(),
                           [&](const FlipGroup& g) { return same(*g.first, f); });
    if (at == groups.end()) at = groups.insert(groups.end(), FlipGroup{&f, {}});
    at->settings.push_back(fmt::format("{}", fmt::join(fixed, ", ")));
  }
  out += fmt::format(
      "\n{} flips (two schedules swap order along one factor, the others fixed), {} distinct:\n",
      r.flips.size(), groups.size());
  const std::size_t extent[3] = {r.axes.bandwidth.size(), r.axes.latency.size(),
                                 r.axes.collective.size()};
  constexpr std::size_t kListed = 4;
  for (const auto& g : groups) {
    const auto& f = *g.first;
    const auto axis = static_cast<std::size_t>(f.axis);
    const auto lines = extent[0] * extent[1] * extent[2] / extent[axis];
    std::vector<std::string> others;
    for (std::size_t a = 0; a < 3; ++a) {
      if (a != axis) others.emplace_back(kAxisNames[a]);
    }
    std::string where;
    if (g.settings.size() == lines) {
      where = fmt::format("at all {} settings of {}", lines, fmt::join(others, " and "));
    } else {
      const auto listed = std::min(g.settings.size(), kListed);
      where = fmt::format(
          "at {} of {} settings of {}: ({}){}", g.settings.size(), lines,
          fmt::join(others, " and "),
          fmt::join(g.settings.begin(), g.settings.begin() + static_cast<std::ptrdiff_t>(listed),
                    "), ("),
          g.settings.size() > listed ? fmt::format(" and {} more", g.settings.size() - listed)
                                     : "");
    }
    out +=
        wrap(fmt::format("{} {} -> {}: {} overtakes {}, {}", kAxisNames[f.axis],
                         factor_text(r.factors(f.from)[axis]), factor_text(r.factors(f.to)[axis]),
                         r.schedules[static_cast<std::size_t>(f.overtaker)],
                         r.schedules[static_cast<std::size_t>(f.overtaken)], where),
             kTextWidth, "  ", "    ");
  }
  return out;
}

nlohmann::json to_json(const SensitivityResult& r) {
  using nlohmann::json;
  const auto n = r.schedules.size();
  const auto P = r.points();
  auto names = [&](const std::vector<std::int32_t>& ranking) {
    json out = json::array();
    for (const auto s : ranking)
      out.push_back(r.schedules[static_cast<std::size_t>(s)]);
    return out;
  };
  json schedules = json::array();
  for (std::size_t s = 0; s < n; ++s) {
    json entry = {{"name", r.schedules[s]}};
    if (!r.skipped[s].empty()) {
      entry["skipped"] = r.skipped[s];
    } else {
      double lo = std::numeric_limits<double>::infinity(), hi = -lo;
      for (std::int64_t p = 0; p < P; ++p) {
        lo = std::min(lo, r.runtime[static_cast<std::size_t>(p) * n + s]);
        hi = std::max(hi, r.runtime[static_cast<std::size_t>(p) * n + s]);
      }
      entry["baseline_runtime_s"] = r.runtime[static_cast<std::size_t>(r.baseline) * n + s];
      entry["min_runtime_s"] = lo;
      entry["max_runtime_s"] = hi;
    }
    schedules.push_back(std::move(entry));
  }
  json points = json::array();
  for (std::int64_t p = 0; p < P; ++p) {
    const auto f = r.factors(p);
    json runtimes = json::array();
    for (std::size_t s = 0; s < n; ++s) {
      const double t = r.runtime[static_cast<std::size_t>(p) * n + s];
      runtimes.push_back(std::isnan(t) ? json(nullptr) : json(t));
    }
    points.push_back({{"bandwidth", f[0]},
                      {"latency", f[1]},
                      {"collective", f[2]},
                      {"runtime_s", runtimes},
                      {"ranking", names(r.ranking(p))}});
  }
  json flips = json::array();
  for (const auto& f : r.flips) {
    const auto from = r.factors(f.from), to = r.factors(f.to);
    flips.push_back(
        {{"axis", kAxisNames[f.axis]},
         {"from", {{"bandwidth", from[0]}, {"latency", from[1]}, {"collective", from[2]}}},
         {"to", {{"bandwidth", to[0]}, {"latency", to[1]}, {"collective", to[2]}}},
         {"overtaker", r.schedules[static_cast<std::size_t>(f.overtaker)]},
         {"overtaken", r.schedules[static_cast<std::size_t>(f.overtaken)]}});
  }
  return {{"axes",
           {{"bandwidth", r.axes.bandwidth},
            {"latency", r.axes.latency},
            {"collective", r.axes.collective}}},
          {"tolerance", r.tolerance},
          {"schedules", std::move(schedules)},
          {"baseline_ranking", names(r.ranking(r.baseline))},
          {"points", std::move(points)},
          {"flips", std::move(flips)}};
}

std::string to_csv(const SensitivityResult& r) {
  std::string out = csv_line({"bandwidth_scale", "latency_scale", "collective_scale", "schedule",
                              "simulation.runtime_s", "rank", "reason"});
  const auto n = r.schedules.size();
  for (std::int64_t p = 0; p < r.points(); ++p) {
    const auto f = r.factors(p);
    const auto ranking = r.ranking(p);
    for (std::size_t s = 0; s < n; ++s) {
      const double t = r.runtime[static_cast<std::size_t>(p) * n + s];
      const auto at = std::find(ranking.begin(), ranking.end(), static_cast<std::int32_t>(s));
      out += csv_line({format_number(f[0]), format_number(f[1]), format_number(f[2]),
                       r.schedules[s], std::isnan(t) ? "" : format_number(t),
                       at == ranking.end() ? "" : std::to_string(at - ranking.begin() + 1),
                       r.skipped[s]});
    }
  }
  return out;
}

}  // namespace pipetab
