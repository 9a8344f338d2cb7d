#include "pipetab/study/calibrate.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <optional>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "pipetab/cost/stage_cost.hpp"
#include "pipetab/error.hpp"

namespace pipetab {

const std::vector<CalibrationParameter>& calibration_parameters() {
  static const std::vector<CalibrationParameter> parameters{
      {"gemm.max_efficiency", 0.05, 1.0, "a large GEMM's achieved / peak FLOP/s"},
      {"gemm.k_overhead", 0.0, 4096.0, "a GEMM tile's fixed cost, in steps of its K loop"},
      {"gemm_fp8.max_efficiency", 0.05, 1.0, "a large FP8 GEMM's achieved / FP8 peak FLOP/s"},
      {"gemm_fp8.k_overhead", 0.0, 4096.0, "an FP8 GEMM tile's fixed cost, in K-loop steps"},
      {"clock_scale", 0.2, 1.0, "the share of the boost clock the tensor cores hold (power cap)"},
      {"memory_efficiency", 0.05, 1.0, "achieved / peak HBM bandwidth of memory-bound kernels"},
      {"kernel_overhead_s", 0.0, 1e-4, "seconds added to every kernel launch"},
      {"step_overhead_s", 0.0, 0.05, "the host's seconds per pipeline step that no kernel carries"},
      {"host_launch_s", 0.0, 1e-3, "the host's seconds to issue one kernel"},
      {"comm_slowdown", 0.0, 2.0, "compute slowdown while communication runs beside it"},
      {"overlapped_deepep_efficiency", 0.05, 1.0,
       "an expert all-to-all's rate beside another pass's compute / alone"},
      {"intra.p2p_latency_s", 0.0, 1e-3, "pipeline send/receive latency per message in a node"},
      {"intra.p2p_efficiency", 0.05, 1.0,
       "pipeline send/receive bandwidth / intra-node link bandwidth"},
      {"inter.p2p_latency_s", 0.0, 1e-3, "pipeline send/receive latency per message between nodes"},
      {"inter.p2p_efficiency", 0.05, 1.0,
       "pipeline send/receive bandwidth / inter-node link bandwidth"},
      {"attention.flash2.forward_efficiency", 0.05, 1.0, "FlashAttention-2 forward / peak"},
      {"attention.flash2.backward_efficiency", 0.05, 1.0, "FlashAttention-2 backward / peak"},
      {"attention.flash3.forward_efficiency", 0.05, 1.0, "FlashAttention-3 forward / peak"},
      {"attention.flash3.backward_efficiency", 0.05, 1.0, "FlashAttention-3 backward / peak"},
      {"attention.cudnn.forward_efficiency", 0.05, 1.0, "cuDNN fused attention forward / peak"},
      {"attention.cudnn.backward_efficiency", 0.05, 1.0, "cuDNN fused attention backward / peak"},
      {"attention.triton.forward_efficiency", 0.05, 1.0, "Triton fused attention forward / peak"},
      {"attention.triton.backward_efficiency", 0.05, 1.0, "Triton fused attention backward / peak"},
      {"intra.collective_efficiency", 0.05, 1.0,
       "tensor-parallel collectives' bus bandwidth / intra-node link bandwidth"},
      {"efficiency", 0.01, 1.0, "the FLOP-proportional model's achieved / peak"},
  };
  return parameters;
}

namespace {

double* field(SystemConfig& s, std::string_view name) {
  auto& d = s.device;
  if (name == "gemm.max_efficiency") return &d.gemm.max_efficiency;
  if (name == "gemm.k_overhead") return &d.gemm.k_overhead;
  if (name == "gemm_fp8.max_efficiency") return &d.gemm_fp8.max_efficiency;
  if (name == "gemm_fp8.k_overhead") return &d.gemm_fp8.k_overhead;
  if (name == "memory_efficiency") return &d.memory_efficiency;
  if (name == "clock_scale") return &d.clock_scale;
  if (name == "kernel_overhead_s") return &d.kernel_overhead_s;
  if (name == "step_overhead_s") return &d.step_overhead_s;
  if (name == "host_launch_s") return &d.host_launch_s;
  if (name == "comm_slowdown") return &d.comm_slowdown;
  if (name == "overlapped_deepep_efficiency") return &d.overlapped_deepep_efficiency;
  for (auto* link : {&s.intra, &s.inter}) {
    const std::string_view prefix = link == &s.intra ? "intra." : "inter.";
    if (!name.starts_with(prefix)) continue;
    const auto key = name.substr(prefix.size());
    if (key == "p2p_efficiency") return &link->p2p_efficiency;
    if (key == "p2p_latency_s") {
      if (!link->p2p_latency_s) link->p2p_latency_s = link->latency_s;
      return &*link->p2p_latency_s;
    }
  }
  // A kernel's attention efficiency: only a flat one (one point) is one parameter.
  for (std::size_t k = 0; k < kAttentionKernels; ++k) {
    const std::string prefix = fmt::format("attention.{}.", kAttentionKernelNames[k]);
    if (!name.starts_with(prefix)) continue;
    auto& curve = d.attention[k];
    if (!curve.given() || !curve.seq.empty()) return nullptr;
    const auto key = name.substr(prefix.size());
    if (key == "forward_efficiency") return &curve.forward.front();
    if (key == "backward_efficiency") return &curve.backward.front();
  }
  if (name == "intra.collective_efficiency") return &s.intra.collective_efficiency;
  if (name == "efficiency" && d.flat_efficiency) return &*d.flat_efficiency;
  return nullptr;
}

const CalibrationParameter& parameter(std::string_view name) {
  for (const auto& p : calibration_parameters()) {
    if (p.name == name) return p;
  }
  std::vector<std::string_view> names;
  for (const auto& p : calibration_parameters())
    names.push_back(p.name);
  throw Error(fmt::format("unknown calibration parameter '{}' (parameters: {})", name,
                          fmt::join(names, ", ")));
}

double* require_field(SystemConfig& s, std::string_view name) {
  (void)parameter(name);
  double* f = field(s, name);
  if (f == nullptr) {
    if (name.starts_with("attention.")) {
      throw Error(fmt::format(
          "system '{}' has no flat {} to fit: it gives that kernel no figures, or figures by "
          "sequence length ([device.attention.KERNEL] seq), which are measured, not fitted",
          s.name, name));
    }
    throw Error(fmt::format(
        "system '{}' has no {} to fit: it uses the FLOP-proportional model (device.efficiency) "
        "where only 'efficiency' applies, or the other way round",
        s.name, name));
  }
  return f;
}

// The objective: the mean squared log error over the residuals of the predicted runs (a run
// that cannot be predicted makes the point infeasible).
double objective(const AccuracyReport& report, std::int32_t* residuals = nullptr) {
  double sum = 0.0;
  std::int32_t n = 0;
  for (const auto& p : report.predictions) {
    if (!p.failure.empty()) return std::numeric_limits<double>::infinity();
    const auto add = [&](double error) {
      const double e = std::log1p(error);
      sum += e * e;
      ++n;
    };
    if (p.run.kind == MeasurementKind::Layer) {
      add(p.forward_error);
      add(p.backward_error);
    } else if (p.run.kind == MeasurementKind::Profile) {
      for (const auto& part : p.parts)
        add(part.error);
    } else {
      add(p.error);
    }
  }
  if (residuals) *residuals = n;
  return n > 0 ? sum / n : 0.0;
}

// The fitted parameters map to the unbounded line by a logistic, so the search stays in range.
double to_line(double value, const CalibrationParameter& p) {
  const double x = std::clamp((value - p.low) / (p.high - p.low), 1e-6, 1 - 1e-6);
  return std::log(x / (1 - x));
}
double from_line(double u, const CalibrationParameter& p) {
  return p.low + (p.high - p.low) / (1 + std::exp(-u));
}

// Nelder–Mead (Lagarias et al. 1998 coefficients: reflection 1, expansion 2, contraction ½,
// shrink ½) from `start`, with a step of 1 along each axis; deterministic. Returns the best point
// found within `max_evaluations` evaluations of `f` (`start` itself when that is 0).
template <class F>
std::vector<double> minimize(F&& f, const std::vector<double>& start, int max_evaluations,
                             int& evaluations) {
  if (max_evaluations <= 0) return start;
  const std::size_t n = start.size();
  std::vector<std::vector<double>> simplex(n + 1, start);
  for (std::size_t i = 1; i <= n; ++i)
    simplex[i][i - 1] += 1.0;
  std::vector<double> values(n + 1);
  const auto eval = [&](const std::vector<double>& x) {
    ++evaluations;
    return f(x);
  };
  for (std::size_t i = 0; i <= n; ++i)
    values[i] = eval(simplex[i]);
  std::vector<std::size_t> order(n + 1);
  while (evaluations < max_evaluations) {
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(),
                     [&](std::size_t a, std::size_t b) { return values[a] < values[b]; });
    const std::size_t best = order.front(), worst = order.back(), second = order[n - 1];
    if (values[worst] - values[best] < 1e-12) break;
    std::vector<double> centre(n, 0.0);
    for (std::size_t i = 0; i <= n; ++i) {
      if (i == worst) continue;
      for (std::size_t k = 0; k < n; ++k)
        centre[k] += simplex[i][k] / static_cast<double>(n);
    }
    const auto towards = [&](double t) {
      std::vector<double> x(n);
      for (std::size_t k = 0; k < n; ++k)
        x[k] = centre[k] + t * (simplex[worst][k] - centre[k]);
      return x;
    };
    const auto reflected = towards(-1.0);
    const double fr = eval(reflected);
    if (fr < values[best]) {
      const auto expanded = towards(-2.0);
      const double fe = eval(expanded);
      if (fe < fr) {
        simplex[worst] = expanded;
        values[worst] = fe;
      } else {
        simplex[worst] = reflected;
        values[worst] = fr;
      }
    } else if (fr < values[second]) {
      simplex[worst] = reflected;
      values[worst] = fr;
    } else {
      const auto contracted = fr < values[worst] ? towards(-0.5) : towards(0.5);
      const double fc = eval(contracted);
      if (fc < std::min(fr, values[worst])) {
        simplex[worst] = contracted;
        values[worst] = fc;
      } else {
        for (std::size_t i = 0; i <= n; ++i) {
          if (i == best) continue;
          for (std::size_t k = 0; k < n; ++k)
            simplex[i][k] = simplex[best][k] + 0.5 * (simplex[i][k] - simplex[best][k]);
          values[i] = eval(simplex[i]);
        }
      }
    }
  }
  return simplex[static_cast<std::size_t>(std::min_element(values.begin(), values.end()) -
                                          values.begin())];
}

struct Fit {
  SystemConfig system;
  int evaluations = 0;
};

// Fits `names` of `base` to minimize `objective(system)`, each on the logistic line of its range.
template <class Objective>
Fit fit_parameters(const SystemConfig& base, const std::vector<std::string>& names,
                   int max_evaluations, Objective&& objective) {
  std::vector<const CalibrationParameter*> params;
  for (const auto& name : names)
    params.push_back(&parameter(name));
  Fit result{base, 0};
  SystemConfig& trial = result.system;
  std::vector<double> start;
  for (std::size_t k = 0; k < names.size(); ++k)
    start.push_back(to_line(*require_field(trial, names[k]), *params[k]));
  const auto set = [&](const std::vector<double>& u) {
    for (std::size_t k = 0; k < names.size(); ++k)
      *field(trial, names[k]) = from_line(u[k], *params[k]);
  };
  const auto best = minimize(
      [&](const std::vector<double>& u) {
        set(u);
        return objective(trial);
      },
      start, max_evaluations, result.evaluations);
  set(best);
  return result;
}

Fit fit(const Measurements& runs, const SystemConfig& base, const std::vector<std::string>& names,
        const CalibrationOptions& options) {
  return fit_parameters(base, names, options.max_evaluations, [&](const SystemConfig& s) {
    return objective(predict(runs, s, options.threads));
  });
}

// The runs of `all` that `fit_on` selects and `keep` accepts.
template <class Keep>
Measurements only(const Measurements& all, const std::string& fit_on, Keep keep) {
  Measurements m;
  m.file = all.file;
  for (const auto& run : all.runs) {
    if (run_selected(run, fit_on) && keep(run)) m.runs.push_back(run);
  }
  return m;
}

// Each group of the chosen runs (those of one `key`: a run's id for leave-one-out, its source
// for leave-one-source-out) predicted together by a fit made without the group, in file order;
// a group with nothing left to fit on is skipped.
template <class Key>
AccuracyReport held_out(const Measurements& measurements, const Measurements& chosen,
                        const SystemConfig& base, const std::vector<std::string>& names,
                        const CalibrationOptions& options, Key key) {
  AccuracyReport report;
  report.file = measurements.file;
  std::vector<std::optional<Prediction>> slots(chosen.runs.size());
  std::vector<std::string> groups;
  for (const auto& first : chosen.runs) {
    const std::string& group = key(first);
    if (std::find(groups.begin(), groups.end(), group) != groups.end()) continue;
    groups.push_back(group);
    const Measurements rest =
        only(measurements, options.fit_on, [&](const MeasuredRun& r) { return key(r) != group; });
    if (rest.runs.empty()) continue;
    const Fit without = fit(rest, base, names, options);
    Measurements members{measurements.file, {}};
    std::vector<std::size_t> at;
    for (std::size_t i = 0; i < chosen.runs.size(); ++i) {
      if (key(chosen.runs[i]) != group) continue;
      members.runs.push_back(chosen.runs[i]);
      at.push_back(i);
    }
    auto predicted = predict(members, without.system, options.threads).predictions;
    for (std::size_t k = 0; k < at.size(); ++k)
      slots[at[k]] = std::move(predicted[k]);
  }
  for (auto& p : slots) {
    if (p) report.predictions.push_back(std::move(*p));
  }
  summarize(report);
  return report;
}

}  // namespace

double parameter_value(const SystemConfig& system, std::string_view name) {
  SystemConfig copy = system;
  return *require_field(copy, name);
}

void set_parameter(SystemConfig& system, std::string_view name, double value) {
  *require_field(system, name) = value;
}

Calibration calibrate(const Measurements& measurements, const SystemConfig& base,
                      const CalibrationOptions& options) {
  if (options.fit.empty()) throw Error("nothing to fit: name at least one parameter (--fit)");
  require_run_selector(options.fit_on, "--fit-on", &measurements);
  const Measurements chosen = only(measurements, options.fit_on, [](const auto&) { return true; });
  if (chosen.runs.empty()) {
    throw Error(fmt::format("{}: no measurements to fit on (--fit-on {})", measurements.file,
                            options.fit_on));
  }
  Calibration c;
  // What the runs identify. A parameter none of their predictions depends on cannot be fitted;
  // one the fit drives to the end of its range is traded against another or pushed by what the
  // model does not describe: both keep the base's value and are reported.
  const auto objective_of = [&](const SystemConfig& s) {
    return objective(predict(chosen, s, options.threads));
  };
  std::vector<std::string> names;
  if (options.max_evaluations > 0) {
    const double at_base = objective_of(base);
    for (const auto& name : options.fit) {
      const auto& p = parameter(name);
      const double value = parameter_value(base, name);
      bool moves = false;
      for (const double step : {-0.1, 0.1}) {
        SystemConfig moved = base;
        const double shifted = value != 0.0 ? value * (1.0 + step) : p.low + 0.1 * (p.high - p.low);
        set_parameter(moved, name, std::clamp(shifted, p.low, p.high));
        const double f = objective_of(moved);
        moves = moves || std::abs(f - at_base) > 1e-12 * std::max(at_base, 1e-12);
      }
      if (moves) {
        names.push_back(name);
      } else {
        c.unidentified.push_back(
            {name, "no measurement depends on it: the runs cannot identify it"});
      }
    }
  } else {
    names = options.fit;
  }
  Fit f{base, 0};
  while (!names.empty()) {  // each round drops at least one name, or ends
    f = fit(chosen, base, names, options);
    c.evaluations += f.evaluations;
    std::vector<std::string> kept;
    for (const auto& name : names) {
      const auto& p = parameter(name);
      const double x = (parameter_value(f.system, name) - p.low) / (p.high - p.low);
      if (options.max_evaluations > 0 && (x < 1e-3 || x > 1 - 1e-3)) {
        c.unidentified.push_back(
            {name,
             fmt::format("the fit drove it to the {} of its range ({:.6g}): the runs "
                         "trade it against another constant or against what the model "
                         "does not describe",
                         x < 0.5 ? "lower end" : "upper end", parameter_value(f.system, name))});
      } else {
        kept.push_back(name);
      }
    }
    if (kept.size() == names.size()) break;
    names = std::move(kept);
    f = Fit{base, 0};
  }
  c.system = f.system;
  c.fitted = names;
  for (const auto& name : options.fit) {
    if (std::find(names.begin(), names.end(), name) != names.end())
      c.values.emplace_back(name, parameter_value(c.system, name));
  }
  (void)objective(predict(chosen, c.system, options.threads), &c.measurements);
  c.fit = predict(measurements, c.system, options.threads);
  const auto id = [](const MeasuredRun& r) -> const std::string& { return r.id; };
  const auto source = [](const MeasuredRun& r) -> const std::string& { return r.source; };
  if (options.leave_one_out)
    c.left_out = held_out(measurements, chosen, base, c.fitted, options, id);
  if (options.leave_one_source_out)
    c.sources_left_out = held_out(measurements, chosen, base, c.fitted, options, source);
  return c;
}

namespace {

std::vector<double> gemm_log_errors(const std::vector<io::GemmSample>& samples,
                                    const SystemConfig& system) {
  // A BF16 job: the GEMMs of gemm_probe are timed in BF16 (bench/gpu).
  const TransformerConfig model;
  Job bf16;
  bf16.precision = Precision::BF16;
  const Layout layout;
  std::vector<double> errors;
  errors.reserve(samples.size());
  for (const auto& s : samples) {
    const double predicted =
        cost::operator_cost(gemm_operator("gemm", s.shape, 2.0), {model, bf16, layout}, system)
            .seconds;
    errors.push_back(std::log(predicted / s.seconds));
  }
  return errors;
}

double mean_square(const std::vector<double>& v) {
  double sum = 0.0;
  for (const double x : v)
    sum += x * x;
  return v.empty() ? 0.0 : sum / static_cast<double>(v.size());
}

}  // namespace

GemmCalibration calibrate_gemm(const io::GemmProbe& probe, const SystemConfig& base,
                               const GemmCalibrationOptions& options) {
  bool known = options.fit_on == "all";
  for (const auto layout : io::kGemmLayouts)
    known = known || options.fit_on == io::to_string(layout);
  if (!known) {
    throw Error(
        fmt::format("--fit-on {}: a GEMM probe is fitted on all, forward, input_grad or "
                    "weight_grad",
                    options.fit_on));
  }
  if (base.device.flat_efficiency) {
    throw Error(
        fmt::format("system '{}' uses the FLOP-proportional model (device.efficiency): it "
                    "has no GEMM model to fit",
                    base.name));
  }
  const auto fitted_on = [&](const io::GemmSample& s) {
    return options.fit_on == "all" || options.fit_on == io::to_string(s.layout);
  };
  std::vector<io::GemmSample> chosen;
  for (const auto& s : probe.gemms) {
    if (fitted_on(s)) chosen.push_back(s);
  }
  if (chosen.empty()) {
    throw Error(
        fmt::format("{}: no GEMM samples to fit on (--fit-on {})", probe.file, options.fit_on));
  }
  std::vector<std::string> parameters;
  for (const char* name : {"gemm.max_efficiency", "gemm.k_overhead"}) {
    if (std::find(options.fit.begin(), options.fit.end(), name) != options.fit.end())
      parameters.emplace_back(name);
  }
  if (parameters.empty()) {
    throw Error(
        "a GEMM probe fits gemm.max_efficiency, gemm.k_overhead or both: --fit names neither");
  }
  GemmCalibration c;
  const Fit f = fit_parameters(
      base, parameters, options.max_evaluations,
      [&](const SystemConfig& s) { return mean_square(gemm_log_errors(chosen, s)); });
  c.system = f.system;
  c.evaluations = f.evaluations;
  c.fitted_samples = static_cast<std::int32_t>(chosen.size());
  const auto errors = gemm_log_errors(probe.gemms, c.system);
  for (const auto layout : io::kGemmLayouts) {
    for (const bool large : {false, true}) {
      GemmErrorSummary g;
      g.group = io::to_string(layout);
      if (large) g.group += ", every dimension >= 1024";
      for (std::size_t i = 0; i < probe.gemms.size(); ++i) {
        const auto& s = probe.gemms[i];
        if (s.layout != layout) continue;
        if (large && std::min({s.shape.m, s.shape.n, s.shape.k}) < 1024) continue;
        g.fitted = options.max_evaluations > 0 && fitted_on(s);
        const double e = std::abs(std::expm1(errors[i]));
        g.mean_abs += e;
        g.max_abs = std::max(g.max_abs, e);
        ++g.count;
      }
      if (g.count == 0) continue;
      g.mean_abs /= g.count;
      c.summaries.push_back(g);
    }
  }
  return c;
}

}  // namespace pipetab
