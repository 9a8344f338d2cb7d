#include "pipetab/table/memory.hpp"

#include <algorithm>

#include <fmt/format.h>

#include "pipetab/error.hpp"
#include "pipetab/table/offload.hpp"

namespace pipetab {
namespace {

// Live activation memory is kept exactly as A − f·P in stage units: A counts the units
// allocated and not yet wholly freed (integers), P the units whose I has run and whose W has
// not (integers), f the fraction an I frees. An op allocates when it starts and frees when it
// ends.
struct Delta {
  std::int64_t alloc = 0;    // A += at start
  std::int64_t release = 0;  // A −= at end (B and W free the rest of their activation)
  std::int64_t pending = 0;  // P += at end (+ for I, − for W)
};

// Offloaded units per op (empty: none offloaded): away after op i ends (gone), back as op i
// starts (back). Made once per table, shared by its devices.
struct OffloadedUnits {
  std::vector<double> gone, back;
};

class LiveMemory {
 public:
  LiveMemory(const ScheduleTable& t, const MemoryOptions& options, const OffloadedUnits& offloaded)
      : t_(t),
        frees_(options.input_grad_frees),
        devices_(static_cast<double>(t.devices) * options.kept),
        model_units_(static_cast<double>(t.model_units())),
        gone_(offloaded.gone),
        back_(offloaded.back) {}

  Delta delta(const Op& op) const {
    Delta d;
    for (const Pass& pass : op.passes()) {
      // A stage's size, read in place: constructed once per device, a copy of every stage's
      // size made activation_peaks quadratic in S.
      const std::int64_t units =
          t_.stage_layers.empty()
              ? 1
              : t_.stage_layers[static_cast<std::size_t>(
                                    t_.pipeline_of_microbatch(pass.microbatch)) *
                                    static_cast<std::size_t>(t_.stages) +
                                pass.stage];
      switch (pass.kind) {
        case PassKind::F:
          d.alloc += units;
          break;
        case PassKind::B:
          d.release += units;
          break;
        case PassKind::I:
          d.pending += units;
          break;
        case PassKind::W:
          d.release += units;
          d.pending -= units;
          break;
        case PassKind::None:
          break;
      }
    }
    return d;
  }

  void start(const Delta& d) { allocated_ += d.alloc; }
  void end(const Delta& d) {
    allocated_ -= d.release;
    pending_ += d.pending;
  }
  // OffloadedUnits units: away after op i ends, back as the op before their backward starts.
  void start(std::size_t i) {
    if (!back_.empty()) away_ -= back_[i];
  }
  void end(std::size_t i) {
    if (!gone_.empty()) away_ += gone_[i];
  }
  // In M_a: one rounding of units · S / model units when f is 0 or 1 and nothing is offloaded
  // (the share kept under in-pass offload scales S).
  double value() const {
    const double units =
        static_cast<double>(allocated_) - frees_ * static_cast<double>(pending_) - away_;
    return units * devices_ / model_units_;
  }

 private:
  const ScheduleTable& t_;
  double frees_;
  double devices_;
  double model_units_;
  std::int64_t allocated_ = 0;
  std::int64_t pending_ = 0;
  const std::vector<double>& gone_;
  const std::vector<double>& back_;
  double away_ = 0.0;
};

OffloadedUnits offloaded_units(const ScheduleTable& t, const MemoryOptions& options) {
  OffloadedUnits out;
  const OffloadPlan plan = offload_plan(t, options.offload);
  if (plan.empty()) return out;
  const OffloadedUnits none;
  const LiveMemory units(t, options, none);
  out.gone.assign(t.ops.size(), 0.0);
  out.back.assign(t.ops.size(), 0.0);
  for (std::size_t i = 0; i < t.ops.size(); ++i) {
    if (!(plan.out[i] > 0.0)) continue;
    const double u = plan.out[i] * static_cast<double>(units.delta(t.ops[i]).alloc);
    out.gone[i] = u;
    out.back[static_cast<std::size_t>(plan.back_at[i])] += u;
  }
  return out;
}

// Device d's activation curve, the offload made once by the caller.
std::vector<MemorySample> device_curve(const ScheduleTable& table, const Timing& timing, int device,
                                       const MemoryOptions& options, const OffloadedUnits& offload);

}  // namespace

std::vector<double> activation_peaks(const ScheduleTable& table, const MemoryOptions& options) {
  // NaN passes every comparison-based bound and made every peak NaN.
  if (!(options.input_grad_frees >= 0.0 && options.input_grad_frees <= 1.0)) {
    throw ParamError(fmt::format("input_grad_frees = {}: must be a fraction from 0 to 1",
                                 options.input_grad_frees));
  }
  if (!(options.kept > 0.0 && options.kept <= 1.0)) {
    throw ParamError(
        fmt::format("kept = {}: the share of activations a device keeps must be "
                    "above 0, up to 1",
                    options.kept));
  }
  std::vector<double> peaks(static_cast<std::size_t>(table.devices), 0.0);
  const OffloadedUnits offload = offloaded_units(table, options);
  for (std::int32_t d = 0; d < table.devices; ++d) {
    LiveMemory live(table, options, offload);
    double peak = 0.0;
    for (auto i = static_cast<std::size_t>(table.row_begin[static_cast<std::size_t>(d)]);
         i < static_cast<std::size_t>(table.row_begin[static_cast<std::size_t>(d) + 1]); ++i) {
      const Delta delta = live.delta(table.ops[i]);
      live.start(delta);
      live.start(i);
      peak = std::max(peak, live.value());
      live.end(delta);
      live.end(i);
    }
    peaks[static_cast<std::size_t>(d)] = peak;
  }
  return peaks;
}

std::vector<MemorySample> activation_curve(const ScheduleTable& table, const Timing& timing,
                                           int device, const MemoryOptions& options) {
  return device_curve(table, timing, device, options, offloaded_units(table, options));
}

namespace {

std::vector<MemorySample> device_curve(const ScheduleTable& table, const Timing& timing, int device,
                                       const MemoryOptions& options,
                                       const OffloadedUnits& offload) {
  LiveMemory live(table, options, offload);
  std::vector<MemorySample> curve{{0.0, 0.0}};
  auto record = [&](double time) {
    const double value = live.value();
    if (curve.back().time == time) {
      curve.back().value = value;
      // A free and an allocation at the same instant may cancel out.
      if (curve.size() > 1 && curve[curve.size() - 2].value == value) curve.pop_back();
    } else if (curve.back().value != value) {
      curve.push_back({time, value});
    }
  };
  const auto b = static_cast<std::size_t>(table.row_begin[static_cast<std::size_t>(device)]);
  const auto e = static_cast<std::size_t>(table.row_begin[static_cast<std::size_t>(device) + 1]);
  for (auto i = b; i < e; ++i) {
    const Delta delta = live.delta(table.ops[i]);
    live.start(i);
    live.start(delta);
    record(timing.start[i]);
    live.end(delta);
    live.end(i);
    record(timing.end[i]);
  }
  return curve;
}

}  // namespace

std::vector<double> activation_peak_times(const ScheduleTable& table, const Timing& timing,
                                          const MemoryOptions& options) {
  std::vector<double> times(static_cast<std::size_t>(table.devices), 0.0);
  const OffloadedUnits offload = offloaded_units(table, options);
  for (std::int32_t d = 0; d < table.devices; ++d) {
    const auto curve = device_curve(table, timing, d, options, offload);
    const auto peak = std::max_element(
        curve.begin(), curve.end(), [](const auto& a, const auto& b) { return a.value < b.value; });
    times[static_cast<std::size_t>(d)] = peak->time;
  }
  return times;
}

}  // namespace pipetab
