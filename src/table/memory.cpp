#include "pipetab/table/memory.hpp"

#include <algorithm>

namespace pipetab {
namespace {

// Per-op memory deltas in stage units (integers for whole-stage events, so sums are exact):
// `alloc` when the op starts, `release` when it ends.
struct Delta {
  double alloc = 0.0;
  double release = 0.0;
};

class DeltaTable {
 public:
  DeltaTable(const ScheduleTable& t, const MemoryOptions& options)
      : t_(t),
        units_(t.stage_units()),
        frees_(options.input_grad_frees),
        devices_(static_cast<double>(t.devices)),
        model_units_(static_cast<double>(t.model_units())) {}

  Delta of(const Op& op) const {
    Delta delta;
    for (const Pass& pass : op.passes()) {
      const double units = unit(pass);
      switch (pass.kind) {
        case PassKind::F:
          delta.alloc += units;
          break;
        case PassKind::B:
          delta.release += units;
          break;
        case PassKind::I:
          delta.release += units * frees_;
          break;
        case PassKind::W:
          delta.release += units * (1.0 - frees_);
          break;
        case PassKind::None:
          break;
      }
    }
    return delta;
  }
  // Stage units → M_a, as one rounding of the exact ratio units · S / model units.
  double to_ma(double units) const noexcept { return units * devices_ / model_units_; }

 private:
  double unit(const Pass& pass) const {
    return units_[static_cast<std::size_t>(t_.pipeline_of_microbatch(pass.microbatch)) *
                      static_cast<std::size_t>(t_.stages) +
                  pass.stage];
  }

  const ScheduleTable& t_;
  std::vector<std::int32_t> units_;
  double frees_;
  double devices_;
  double model_units_;
};

}  // namespace

std::vector<double> activation_peaks(const ScheduleTable& table, const MemoryOptions& options) {
  const DeltaTable deltas(table, options);
  std::vector<double> peaks(static_cast<std::size_t>(table.devices), 0.0);
  for (std::int32_t d = 0; d < table.devices; ++d) {
    double live = 0.0;
    double peak = 0.0;
    for (const Op& op : table.row(d)) {
      const Delta delta = deltas.of(op);
      live += delta.alloc;
      peak = std::max(peak, live);
      live -= delta.release;
    }
    peaks[static_cast<std::size_t>(d)] = deltas.to_ma(peak);
  }
  return peaks;
}

std::vector<MemorySample> activation_curve(const ScheduleTable& table, const Timing& timing,
                                           int device, const MemoryOptions& options) {
  const DeltaTable deltas(table, options);
  std::vector<MemorySample> curve{{0.0, 0.0}};
  double live = 0.0;
  auto record = [&](double time) {
    const double value = deltas.to_ma(live);
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
    const Delta delta = deltas.of(table.ops[i]);
    if (delta.alloc != 0.0) {
      live += delta.alloc;
      record(timing.start[i]);
    }
    if (delta.release != 0.0) {
      live -= delta.release;
      record(timing.end[i]);
    }
  }
  return curve;
}

std::vector<double> activation_peak_times(const ScheduleTable& table, const Timing& timing,
                                          const MemoryOptions& options) {
  std::vector<double> times(static_cast<std::size_t>(table.devices), 0.0);
  for (std::int32_t d = 0; d < table.devices; ++d) {
    const auto curve = activation_curve(table, timing, d, options);
    const auto peak = std::max_element(
        curve.begin(), curve.end(), [](const auto& a, const auto& b) { return a.value < b.value; });
    times[static_cast<std::size_t>(d)] = peak->time;
  }
  return times;
}

}  // namespace pipetab
