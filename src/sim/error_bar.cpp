#include "pipetab/sim/error_bar.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <numeric>
#include <set>
#include <vector>

#include <fmt/format.h>

#include "pipetab/error.hpp"
#include "pipetab/io/config.hpp"
#include "pipetab/io/data_table.hpp"
#include "pipetab/numeric.hpp"
#include "pipetab/sim/simulation.hpp"

namespace pipetab {

std::string_view regime_of(const SimulationSetup& setup) {
  if (const auto* m = setup.model.transformer(); m != nullptr && m->moe) return "moe";
  if (setup.layout.cp > 1) return "cp";
  return "dense";
}

double student_t_95(std::int64_t dof) {
  // t(0.95, ν), e.g. NIST/SEMATECH e-Handbook of Statistical Methods, §1.3.6.7.2 (upper
  // critical values of Student's t distribution).
  static constexpr std::array<double, 30> kTable{
      6.314, 2.920, 2.353, 2.132, 2.015, 1.943, 1.895, 1.860, 1.833, 1.812,
      1.796, 1.782, 1.771, 1.761, 1.753, 1.746, 1.740, 1.734, 1.729, 1.725,
      1.721, 1.717, 1.714, 1.711, 1.708, 1.706, 1.703, 1.701, 1.699, 1.697};
  if (dof < 1) throw ParamError("student_t_95: degrees of freedom must be at least 1");
  if (dof <= 30) return kTable[static_cast<std::size_t>(dof - 1)];
  // Between the table's rows the quantile falls slowly: the next row up is the safe (wider) one.
  if (dof <= 40) return 1.697;
  if (dof <= 60) return 1.684;
  if (dof <= 120) return 1.671;
  return 1.658;
}

std::string_view regime_words(std::string_view regime) {
  if (regime == "moe") return "mixture-of-experts";
  if (regime == "cp") return "context-parallel";
  return "dense";
}

namespace {

double log_ratio(const Residual& r) {
  return std::log(r.measured_s / r.predicted_s);
}

// A log-ratio interval: its centre and half-width.
struct Spread {
  double mean = 0.0, half = 0.0;
};

// One preset's runs, read as draws of one normal: a new run's prediction interval.
Spread within_preset(const std::vector<const Residual*>& runs) {
  const auto n = static_cast<double>(runs.size());
  double mean = 0.0, squares = 0.0;
  for (const auto* r : runs)
    mean += log_ratio(*r) / n;
  for (const auto* r : runs)
    squares += (log_ratio(*r) - mean) * (log_ratio(*r) - mean);
  const double sd = std::sqrt(squares / (n - 1));
  return {mean,
          student_t_95(static_cast<std::int64_t>(runs.size()) - 1) * sd * std::sqrt(1 + 1 / n)};
}

// Runs of several presets, for a run on a preset they do not describe: each preset's mean is one
// draw of the bias a preset has (its software, its clocks, its calibration), its runs scatter
// about it. A new preset's run: the presets' mean ± t(0.95, k − 1) · √(s_b²·(1 + 1/k) + s_w²),
// s_b the spread of the k presets' means, s_w the runs' pooled spread about their preset's.
// Weighting presets, not runs, keeps one well-measured preset from narrowing it.
Spread across_presets(const std::vector<const Residual*>& runs, std::int64_t& presets) {
  std::vector<std::vector<const Residual*>> by;
  for (const auto* r : runs) {
    auto it = std::find_if(by.begin(), by.end(),
                           [&](const auto& g) { return g.front()->system == r->system; });
    if (it == by.end()) {
      by.push_back({r});
    } else {
      it->push_back(r);
    }
  }
  presets = static_cast<std::int64_t>(by.size());
  if (presets < kMinTransferPresets) return {};
  const auto k = static_cast<double>(by.size());
  std::vector<double> means;
  double within = 0.0, dof = 0.0;
  for (const auto& g : by) {
    double m = 0.0;
    for (const auto* r : g)
      m += log_ratio(*r) / static_cast<double>(g.size());
    for (const auto* r : g)
      within += (log_ratio(*r) - m) * (log_ratio(*r) - m);
    dof += static_cast<double>(g.size()) - 1;
    means.push_back(m);
  }
  double mean = 0.0, between = 0.0;
  for (const double m : means)
    mean += m / k;
  for (const double m : means)
    between += (m - mean) * (m - mean) / (k - 1);
  const double pooled = dof > 0 ? within / dof : 0.0;
  return {mean, student_t_95(presets - 1) * std::sqrt(between * (1 + 1 / k) + pooled)};
}

}  // namespace

IntervalAnswer runtime_interval(double predicted_s, std::string_view regime,
                                std::string_view system, std::span<const Residual> residuals,
                                std::int64_t gpus) {
  IntervalAnswer answer;
  if (!(predicted_s > 0.0) || !std::isfinite(predicted_s)) {
    answer.note = "no runtime to put an interval on";
    return answer;
  }
  std::vector<const Residual*> own, every;
  for (const auto& r : residuals) {
    if (r.fitted_on || r.regime != regime) continue;
    every.push_back(&r);
    if (r.system == system) own.push_back(&r);
  }
  RuntimeInterval i;
  Spread spread;
  if (static_cast<std::int32_t>(own.size()) >= kMinIntervalRuns) {
    spread = within_preset(own);
    i.basis = std::string(system);
    i.runs = static_cast<std::int32_t>(own.size());
  } else {
    std::int64_t presets = 0;
    spread = across_presets(every, presets);
    if (presets < kMinTransferPresets) {
      answer.note = fmt::format(
          "outside every validated regime: {} published {} run{} on {} preset{} ({} of them on "
          "{}); an interval needs {} on the preset or runs on {} presets",
          every.size(), regime_words(regime), every.size() == 1 ? "" : "s", presets,
          presets == 1 ? "" : "s", own.size(), system, kMinIntervalRuns, kMinTransferPresets);
      return answer;
    }
    i.basis = fmt::format("{} presets", presets);
    i.runs = static_cast<std::int32_t>(every.size());
  }
  const auto& used = i.basis == system ? own : every;
  for (const auto* r : used)
    i.largest_gpus = std::max(i.largest_gpus, r->gpus);
  i.low_s = predicted_s * std::exp(spread.mean - spread.half);
  i.high_s = predicted_s * std::exp(spread.mean + spread.half);
  if (!(i.low_s > 0) || !std::isfinite(i.high_s)) {
    answer.note = fmt::format("the published {} runs' errors spread too far for an interval",
                              regime_words(regime));
    return answer;
  }
  i.regime = std::string(regime);
  if (gpus > i.largest_gpus) {
    answer.note =
        fmt::format("{} GPUs: beyond the largest run it comes from ({})", gpus, i.largest_gpus);
  }
  answer.interval = std::move(i);
  return answer;
}

std::vector<IntervalCheck> check_intervals(std::span<const Residual> residuals) {
  std::vector<IntervalCheck> out;
  const auto inside = [](const IntervalAnswer& a, const Residual& r) {
    return a.interval && r.measured_s >= a.interval->low_s && r.measured_s <= a.interval->high_s;
  };
  for (const std::string_view regime : {"dense", "cp", "moe"}) {
    std::vector<std::string> systems;
    for (const auto& r : residuals)
      if (r.regime == regime && !r.fitted_on) systems.push_back(r.system);
    std::sort(systems.begin(), systems.end());
    systems.erase(std::unique(systems.begin(), systems.end()), systems.end());
    // On its own preset: each run from the preset's others.
    for (const auto& system : systems) {
      std::vector<Residual> own;
      for (const auto& r : residuals)
        if (r.regime == regime && r.system == system && !r.fitted_on) own.push_back(r);
      if (static_cast<std::int32_t>(own.size()) <= kMinIntervalRuns) continue;
      IntervalCheck c{std::string(regime), system};
      const auto all = runtime_interval(1.0, regime, system, own);
      c.low_factor = all.interval->low_s;
      c.high_factor = all.interval->high_s;
      for (std::size_t i = 0; i < own.size(); ++i) {
        std::vector<Residual> others = own;
        others.erase(others.begin() + static_cast<std::ptrdiff_t>(i));
        ++c.runs;
        c.covered += inside(runtime_interval(own[i].predicted_s, regime, system, others), own[i]);
      }
      out.push_back(std::move(c));
    }
    // Transferred: each run from the regime's runs on the other presets.
    std::vector<Residual> every;
    for (const auto& r : residuals)
      if (r.regime == regime && !r.fitted_on) every.push_back(r);
    if (every.empty()) continue;
    const auto all = runtime_interval(1.0, regime, "", every);
    IntervalCheck c{std::string(regime), "other presets"};
    if (all.interval) {
      c.system = all.interval->basis;
      c.low_factor = all.interval->low_s;
      c.high_factor = all.interval->high_s;
    }
    for (const auto& r : every) {
      std::vector<Residual> others;
      for (const auto& o : every)
        if (o.system != r.system) others.push_back(o);
      const auto a = runtime_interval(r.predicted_s, regime, r.system, others);
      if (!a.interval) continue;
      ++c.runs;
      c.covered += inside(a, r);
    }
    out.push_back(std::move(c));
  }
  return out;
}

std::vector<Residual> parse_residuals(std::string_view text, const std::string& file) {
  const io::DataTable t = io::parse_data_table(text, file);
  const auto column = [&](const char* name) {
    const int c = t.column(name);
    if (c < 0) throw ParseError(file, 1, 1, fmt::format("no column '{}' in the header", name));
    return static_cast<std::size_t>(c);
  };
  const auto id = column("id"), system = column("system"), regime = column("regime"),
             gpus = column("gpus"), measured = column("measured_s"),
             predicted = column("predicted_s"), fitted = column("fitted_on");
  const int stack = t.column("stack");      // optional: files before stacks were named have none
  const int a2a = t.column("a2a_overlap");  // optional, as the stack
  std::vector<Residual> out;
  out.reserve(t.rows.size());
  for (std::size_t i = 0; i < t.rows.size(); ++i) {
    const auto& row = t.rows[i];
    // The row's line, and the field by its column's name (a data table keeps no character
    // positions).
    const auto fail = [&](std::size_t c, std::string_view expected) {
      throw ParseError(
          file, t.lines[i], 1,
          fmt::format("column '{}': '{}': expected {}", t.columns[c], row[c], expected));
    };
    const auto positive = [&](std::size_t c) {
      const std::string& cell = row[c];
      double v = 0.0;
      const auto [end, ec] = parse_double(cell.data(), cell.data() + cell.size(), v);
      if (ec != std::errc{} || end != cell.data() + cell.size() || !std::isfinite(v) || v <= 0)
        fail(c, "a positive number");
      return v;
    };
    Residual r;
    r.id = row[id];
    if (stack >= 0) r.stack = row[static_cast<std::size_t>(stack)];
    r.system = row[system];
    r.regime = row[regime];
    if (r.regime != "dense" && r.regime != "moe" && r.regime != "cp")
      fail(regime, "dense, moe or cp");
    const double g = positive(gpus);
    if (g != std::floor(g) || g > 1e9) fail(gpus, "a whole number of GPUs");
    r.gpus = static_cast<std::int64_t>(g);
    r.measured_s = positive(measured);
    r.predicted_s = positive(predicted);
    const auto boolean = [&](std::size_t c) {
      if (row[c] != "true" && row[c] != "false") fail(c, "true or false");
      return row[c] == "true";
    };
    r.fitted_on = boolean(fitted);
    if (a2a >= 0) r.a2a_overlap = boolean(static_cast<std::size_t>(a2a));
    out.push_back(std::move(r));
  }
  return out;
}

std::span<const Residual> builtin_residuals() {
  static const std::vector<Residual> residuals =
      parse_residuals(io::preset_text("data", "residuals"), "data/residuals.csv");
  return residuals;
}

std::string a2a_overlap_note(std::span<const Residual> residuals, std::string_view system) {
  const auto overlapped = [](const Residual& r) { return r.a2a_overlap && !r.fitted_on; };
  const bool own = std::any_of(residuals.begin(), residuals.end(), [&](const Residual& r) {
    return overlapped(r) && r.system == system;
  });
  std::vector<double> errors;  // predicted / measured - 1
  std::set<std::string_view> presets;
  for (const auto& r : residuals) {
    if (!overlapped(r) || (own && r.system != system)) continue;
    errors.push_back(r.predicted_s / r.measured_s - 1.0);
    presets.insert(r.system);
  }
  if (errors.empty()) return "no published run with the all-to-all overlap checks it";
  const std::size_t n = errors.size();
  const auto [low, high] = std::minmax_element(errors.begin(), errors.end());
  const double mean = std::accumulate(errors.begin(), errors.end(), 0.0) / static_cast<double>(n);
  const std::string where =
      own ? fmt::format("on {}", system)
          : fmt::format("on {} other preset{}", presets.size(), presets.size() == 1 ? "" : "s");
  const std::string range =
      n == 1 ? std::string() : fmt::format(", {:+.1f}% to {:+.1f}%", 100.0 * *low, 100.0 * *high);
  return fmt::format(
      "the {} published run{} with the all-to-all overlap {} came out {:+.1f}%{}{} "
      "(docs/simulation.md, \"DeepEP beside compute\")",
      n, n == 1 ? "" : "s", where, 100.0 * mean, n == 1 ? "" : " on average", range);
}

IntervalAnswer runtime_interval(const SimulationSetup& setup, double predicted_s,
                                std::int64_t gpus) {
  const auto residuals = builtin_residuals();
  const std::string_view regime = regime_of(setup);
  IntervalAnswer answer = runtime_interval(predicted_s, regime, setup.system.name, residuals, gpus);
  // A named stack no published run of the regime ran: the interval is other stacks' spread.
  const std::string& stack = setup.job.stack.name;
  if (answer.interval && !stack.empty() &&
      std::none_of(residuals.begin(), residuals.end(), [&](const Residual& r) {
        return r.regime == regime && !r.fitted_on && r.stack == stack;
      })) {
    answer.note += fmt::format("{}no published {} run it comes from ran the stack '{}'",
                               answer.note.empty() ? "" : "; ", regime_words(regime), stack);
  }
  // The interval is all the regime's runs'; the overlap's runs miss in a direction of their own.
  if (setup.job.a2a_overlap)
    answer.note +=
        (answer.note.empty() ? "" : "; ") + a2a_overlap_note(residuals, setup.system.name);
  return answer;
}

}  // namespace pipetab
