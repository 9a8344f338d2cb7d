// Hanayo (Liu, Cheng, Zhou, You, SC'23): a wave-like pipeline without model replicas. Only the
// abstract could be read (reference schedules.md §6, §18), so this is our reading, documented in
// docs/schedules.md:
//  - placement: the model is cut into N = 2SW stages that zig-zag down the devices and back up,
//    W times (device d holds stages d, 2S-1-d, 2S+d, ...); W = 1 is the V-shape;
//  - order: greedy list scheduling at generation-time costs F = 1, B = 2 per device share.
//    Whenever a device is free it starts, among the passes whose inputs are ready, a backward
//    before a forward (1F1B's rule, which bounds memory), the deeper forward first (pushing a
//    microbatch along its wave toward the loss), then the lower microbatch;
//  - restricted regime: M = S, one wave unit of S microbatches, the operating point the
//    tabular-schedule paper evaluates (S = M = 8).
#include <queue>

#include "common.hpp"

#include "pipetab/schedules/registry.hpp"

namespace pipetab::schedules {
namespace {

struct Ready {
  bool forward;
  std::int32_t stage;
  std::int32_t microbatch;
};

// Highest priority on top: backward first; then deeper stage; then lower microbatch.
struct LowerPriority {
  bool operator()(const Ready& a, const Ready& b) const {
    if (a.forward != b.forward) return a.forward;
    if (a.forward && a.stage != b.stage) return a.stage < b.stage;
    if (a.microbatch != b.microbatch) return a.microbatch > b.microbatch;
    return a.stage < b.stage;
  }
};

ScheduleTable generate_hanayo(const ResolvedParams& p) {
  const std::int64_t S = p.devices, M = p.microbatches, W = p.waves;
  require(M == S, p,
          "M = {} must equal S = {}: only the restricted regime of one wave unit (M = S) is "
          "supported (see docs/schedules.md)",
          M, S);
  require_size(p, 2 * S * W, 4 * S * W * M);
  const auto stages = static_cast<int>(2 * S * W);
  const auto placement = zigzag_placement(p.devices, stages);
  // Generation-time costs in integer units: a chunk forward 1, a chunk backward 2.
  constexpr std::int64_t kForward = 1, kBackward = 2;

  using Queue = std::priority_queue<Ready, std::vector<Ready>, LowerPriority>;
  std::vector<Queue> ready(static_cast<std::size_t>(S));
  std::vector<std::vector<Ready>> rows(static_cast<std::size_t>(S));
  for (auto& row : rows)
    row.reserve(static_cast<std::size_t>(4 * W * M));
  using Event = std::pair<std::int64_t, std::int32_t>;  // (end time, device)
  std::priority_queue<Event, std::vector<Event>, std::greater<>> running;
  std::vector<bool> busy(static_cast<std::size_t>(S), false);
  const auto device_of = [&](std::int32_t stage) {
    return static_cast<std::size_t>(placement[static_cast<std::size_t>(stage)]);
  };
  for (std::int32_t m = 0; m < p.microbatches; ++m)
    ready[device_of(0)].push({true, 0, m});

  std::int64_t now = 0;
  while (true) {
    for (std::size_t d = 0; d < ready.size(); ++d) {
      if (busy[d] || ready[d].empty()) continue;
      const Ready op = ready[d].top();
      ready[d].pop();
      rows[d].push_back(op);
      busy[d] = true;
      running.emplace(now + (op.forward ? kForward : kBackward), static_cast<std::int32_t>(d));
    }
    if (running.empty()) break;
    now = running.top().first;
    while (!running.empty() && running.top().first == now) {
      const auto d = static_cast<std::size_t>(running.top().second);
      running.pop();
      busy[d] = false;
      // What the finished pass enables: the next stage's forward, or the backward of the
      // last stage, or the previous stage's backward.
      const Ready done = rows[d].back();
      if (done.forward && done.stage + 1 < stages) {
        ready[device_of(done.stage + 1)].push({true, done.stage + 1, done.microbatch});
      } else if (done.forward) {
        ready[d].push({false, done.stage, done.microbatch});
      } else if (done.stage > 0) {
        ready[device_of(done.stage - 1)].push({false, done.stage - 1, done.microbatch});
      }
    }
  }

  TableBuilder table(p.devices, stages, p.microbatches, placement, 4 * S * W * M);
  for (const auto& row : rows) {
    for (const Ready& op : row)
      table.push(op.forward ? PassKind::F : PassKind::B, op.microbatch, op.stage);
    table.end_row();
  }
  return std::move(table).finish();
}

}  // namespace

extern const ScheduleInfo kHanayo{
    .name = "hanayo",
    .title = "Hanayo: wave-like zig-zag placement (W waves), no replicas; restricted regime M = S",
    .source = "Liu et al., SC'23 (abstract only; placement and order are our reading)",
    .constraints = "M = S (restricted regime: one wave unit)",
    .default_waves = 2,
    .generate = generate_hanayo,
};

}  // namespace pipetab::schedules
