#include "pipetab/table/offload.hpp"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "pipetab/error.hpp"

namespace pipetab {

OffloadPlan offload_plan(const ScheduleTable& table, double ratio) {
  if (!(ratio >= 0.0 && ratio <= 1.0)) {
    throw ParamError(fmt::format(
        "--offload-activations {} is out of range: expected a share of the activations, 0 to 1",
        ratio));
  }
  OffloadPlan plan;
  if (ratio == 0.0) return plan;
  const auto mbs = static_cast<std::size_t>(table.microbatches);
  const auto keys = mbs * static_cast<std::size_t>(table.stages);
  const auto key = [&](const Pass& p) {
    return static_cast<std::size_t>(p.stage) * mbs + static_cast<std::size_t>(p.microbatch);
  };
  std::vector<std::int64_t> forward(keys, -1), backward(keys, -1);
  for (std::size_t i = 0; i < table.ops.size(); ++i) {
    for (const Pass& p : table.ops[i].passes()) {
      if (p.kind == PassKind::F) forward[key(p)] = static_cast<std::int64_t>(i);
      if (p.kind == PassKind::B || p.kind == PassKind::I)
        backward[key(p)] = static_cast<std::int64_t>(i);
    }
  }
  const auto stages = table.placement.device.size();
  const auto stage_of = [&](const Pass& p) {
    return static_cast<std::size_t>(table.pipeline_of_microbatch(p.microbatch)) *
               static_cast<std::size_t>(table.stages) +
           static_cast<std::size_t>(p.stage);
  };
  // Lifespans per (pipeline, stage), as sums and counts (compared by cross-multiplying).
  std::vector<std::int64_t> span(stages, 0), count(stages, 0);
  for (std::size_t i = 0; i < table.ops.size(); ++i) {
    for (const Pass& p : table.ops[i].passes()) {
      if (p.kind != PassKind::F || backward[key(p)] < 0) continue;
      span[stage_of(p)] += backward[key(p)] - static_cast<std::int64_t>(i);
      ++count[stage_of(p)];
    }
  }
  std::vector<double> share(stages, 0.0);
  std::vector<std::vector<std::size_t>> own(static_cast<std::size_t>(table.devices));
  for (std::size_t s = 0; s < stages; ++s)
    if (count[s] > 0) own[static_cast<std::size_t>(table.placement.device[s])].push_back(s);
  for (auto& list : own) {
    std::stable_sort(list.begin(), list.end(), [&](std::size_t a, std::size_t b) {
      return span[a] * count[b] > span[b] * count[a];
    });
    // A ratio meant as whole stages (PO-H's ⌈v/2⌉ of v: 3/5 = 0.6) covers them exactly, not a
    // rounding error's share of the next.
    double left = ratio * static_cast<double>(list.size());
    if (std::abs(left - std::round(left)) < 1e-9) left = std::round(left);
    for (const auto s : list) {
      share[s] = std::min(1.0, left);
      left = std::max(0.0, left - 1.0);
    }
  }
  plan.out.assign(table.ops.size(), 0.0);
  plan.back_at.assign(table.ops.size(), -1);
  for (std::size_t i = 0; i < table.ops.size(); ++i) {
    for (const Pass& p : table.ops[i].passes()) {
      if (p.kind != PassKind::F) continue;
      const auto b = backward[key(p)];
      const double s = share[stage_of(p)];
      if (b - static_cast<std::int64_t>(i) < 2 || !(s > 0.0)) continue;
      plan.out[i] = s;
      plan.back_at[i] = b - 1;
    }
  }
  return plan;
}

}  // namespace pipetab
