#include "pipetab/study/calibrate.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "pipetab/error.hpp"

namespace pipetab {

const std::vector<CalibrationParameter>& calibration_parameters() {
  static const std::vector<CalibrationParameter> parameters{
      {"gemm.max_efficiency", 0.05, 1.0, "a large GEMM's achieved / peak FLOP/s"},
      {"gemm.k_overhead", 0.0, 4096.0, "a GEMM tile's fixed cost, in steps of its K loop"},
      {"memory_efficiency", 0.05, 1.0, "achieved / peak HBM bandwidth of memory-bound kernels"},
      {"kernel_overhead_s", 0.0, 1e-4, "seconds added to every kernel launch"},
      {"attention.forward_efficiency", 0.05, 1.0, "FlashAttention forward, achieved / peak"},
      {"attention.backward_efficiency", 0.05, 1.0, "FlashAttention backward, achieved / peak"},
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
  if (name == "memory_efficiency") return &d.memory_efficiency;
  if (name == "kernel_overhead_s") return &d.kernel_overhead_s;
  if (name == "attention.forward_efficiency") return &d.attention_efficiency;
  if (name == "attention.backward_efficiency") return &d.attention_backward_efficiency;
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
    throw Error(fmt::format(
        "system '{}' has no {} to fit: it uses the FLOP-proportional model (device.efficiency) "
        "where only 'efficiency' applies, or the other way round",
        s.name, name));
  }
  return f;
}

bool selected(const MeasuredRun& run, const std::string& fit_on) {
  constexpr std::string_view kSource = "source:";
  if (fit_on.starts_with(kSource))
    return run.source.find(fit_on.substr(kSource.size())) != std::string::npos;
  return fit_on == "all" || (fit_on == "layers" && run.kind == MeasurementKind::Layer) ||
         (fit_on == "iterations" && run.kind == MeasurementKind::Iteration);
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

struct Fit {
  SystemConfig system;
  int evaluations = 0;
};

// Nelder–Mead (Lagarias et al. 1998 coefficients: reflection 1, expansion 2, contraction ½,
// shrink ½) from the base values, with a step of 1 on the logistic line.
Fit fit(const Measurements& runs, const SystemConfig& base, const CalibrationOptions& options) {
  const std::size_t n = options.fit.size();
  std::vector<const CalibrationParameter*> params;
  for (const auto& name : options.fit)
    params.push_back(&parameter(name));
  SystemConfig trial = base;
  for (const auto& name : options.fit)
    (void)require_field(trial, name);
  int evaluations = 0;
  const auto f = [&](const std::vector<double>& u) {
    for (std::size_t k = 0; k < n; ++k)
      *field(trial, options.fit[k]) = from_line(u[k], *params[k]);
    ++evaluations;
    return objective(predict(runs, trial, options.threads));
  };
  std::vector<std::vector<double>> simplex(n + 1, std::vector<double>(n));
  for (std::size_t k = 0; k < n; ++k)
    simplex[0][k] = to_line(*field(trial, options.fit[k]), *params[k]);
  for (std::size_t i = 1; i <= n; ++i) {
    simplex[i] = simplex[0];
    simplex[i][i - 1] += 1.0;
  }
  std::vector<double> values(n + 1);
  for (std::size_t i = 0; i <= n; ++i)
    values[i] = f(simplex[i]);
  std::vector<std::size_t> order(n + 1);
  while (evaluations < options.max_evaluations) {
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
    const double fr = f(reflected);
    if (fr < values[best]) {
      const auto expanded = towards(-2.0);
      const double fe = f(expanded);
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
      const double fc = f(contracted);
      if (fc < std::min(fr, values[worst])) {
        simplex[worst] = contracted;
        values[worst] = fc;
      } else {
        for (std::size_t i = 0; i <= n; ++i) {
          if (i == best) continue;
          for (std::size_t k = 0; k < n; ++k)
            simplex[i][k] = simplex[best][k] + 0.5 * (simplex[i][k] - simplex[best][k]);
          values[i] = f(simplex[i]);
        }
      }
    }
  }
  const auto best =
      static_cast<std::size_t>(std::min_element(values.begin(), values.end()) - values.begin());
  for (std::size_t k = 0; k < n; ++k)
    *field(trial, options.fit[k]) = from_line(simplex[best][k], *params[k]);
  return {trial, evaluations};
}

Measurements only(const Measurements& all, const std::string& fit_on, const std::string& without) {
  Measurements m;
  m.file = all.file;
  for (const auto& run : all.runs) {
    if (selected(run, fit_on) && run.id != without) m.runs.push_back(run);
  }
  return m;
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
  if (options.fit_on != "all" && options.fit_on != "layers" && options.fit_on != "iterations" &&
      !options.fit_on.starts_with("source:")) {
    throw Error(fmt::format("--fit-on {}: expected all, layers, iterations or source:TEXT",
                            options.fit_on));
  }
  const Measurements chosen = only(measurements, options.fit_on, "");
  if (chosen.runs.empty()) {
    throw Error(fmt::format("{}: no measurements to fit on (--fit-on {})", measurements.file,
                            options.fit_on));
  }
  Calibration c;
  const Fit f = fit(chosen, base, options);
  c.system = f.system;
  c.evaluations = f.evaluations;
  for (const auto& name : options.fit)
    c.values.emplace_back(name, parameter_value(c.system, name));
  (void)objective(predict(chosen, c.system, options.threads), &c.measurements);
  c.fit = predict(measurements, c.system, options.threads);
  if (options.leave_one_out) {
    c.left_out.file = measurements.file;
    for (const auto& run : chosen.runs) {
      const Measurements rest = only(measurements, options.fit_on, run.id);
      if (rest.runs.empty()) continue;
      const Fit without = fit(rest, base, options);
      const Measurements one{measurements.file, {run}};
      c.left_out.predictions.push_back(
          predict(one, without.system, options.threads).predictions.front());
    }
    summarize(c.left_out);
  }
  return c;
}

}  // namespace pipetab
