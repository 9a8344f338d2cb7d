// V-Half and V-Min: the V-shape schedules built from a building block (Qi, Wan, Amar, Lin,
// "Pipeline Parallelism with Controllable Memory", NeurIPS 2024, arXiv 2405.15362; reference
// schedules.md §8). Our own implementation of the algorithm of sail-sg/zero-bubble-pipeline-
// parallelism, megatron/core/pipeline_parallel/zerobubble/scheduler/zbv_greedy.py
// (PipelineGraph.schedule_from_pattern with do_reorder = True), which the runtime runs with unit
// costs; the resulting order is then the table, timed with the user's costs.
//
// Slots are chunk passes under unit costs. Per device there are six pass types; we number them
// as the paper's code does: 0 = F of chunk 0, 1 = F of chunk 1, 2 = I of chunk 1, 3 = I of chunk
// 0 (the backward comes back through chunk 1 first), then W (one merged list while reordering;
// 4 = W of chunk 1 and 5 = W of chunk 0 at the end). Chunk 0 of device d is stage d, chunk 1 is
// stage 2S-1-d.
//  1. Block: the slot offsets of F0, F1, I1, I0 on every device (stable_pattern_v_min /
//     stable_pattern_v_half, the table of reference §8), repeated every 6 slots for M
//     microbatches.
//  2. W passes go into free slots (put_w): walking the slots, each I adds a pending W, and a free
//     slot takes one pending W (chunk 1's first when they are kept apart).
//  3. Greedy reordering (reorder), twice: walking all passes in slot order, a pass of the
//     warm-up (first pass only, which also moves W) or of the cool-down (after device 0's last
//     F0) moves to the earliest free slot after its dependencies where the device's activation
//     count stays within the largest peak of the repeated block. The steady phase (from device
//     0's first I0 to its last F0) is the block itself and never moves. After each pass the slots
//     are squeezed (eager_execution_time, "squeeze" in the paper): every pass starts as early as
//     its dependencies and its device's previous pass allow, in unchanged order, at unit costs.
//  4. W passes are placed once more, per chunk, and each device runs its passes in slot order.
// Activations count in chunk units while reordering: F allocates one, W frees one (in the second
// reordering, where W is not placed yet, a free slot frees one pending W, as put_w would).
#include <algorithm>
#include <array>
#include <cstdlib>
#include <span>
#include <stdexcept>

#include "common.hpp"

#include "pipetab/schedules/registry.hpp"

namespace pipetab::schedules {
namespace {

constexpr int kF0 = 0, kF1 = 1, kI1 = 2, kI0 = 3, kW = 4, kW1 = 4, kW0 = 5;
constexpr int kPeriod = 6;  // slots of one microbatch on one device: 2 chunks × F, I, W

// Slot of every pass: per device, per type, a list in microbatch order (a merged W list holds
// the device's W passes in placement order instead). Device d's lists start at d · 6M; type t's
// at t · M within them; the merged W list (type 4 of a 5-type plan) has 2M entries.
struct Plan {
  std::int32_t devices = 0;
  std::int32_t micro = 0;
  std::int32_t types = 4;  // 4: F0 F1 I1 I0; 5: + merged W; 6: + W1, W0
  std::vector<std::int32_t> time;

  Plan(std::int32_t devices_, std::int32_t micro_, std::int32_t types_)
      : devices(devices_),
        micro(micro_),
        types(types_),
        time(static_cast<std::size_t>(devices_) * kPeriod * static_cast<std::size_t>(micro_), 0) {}
  std::int32_t length(int type) const noexcept {
    return types == 5 && type == kW ? 2 * micro : micro;
  }
  std::size_t at(int device, int type, int index) const noexcept {
    return (static_cast<std::size_t>(device) * kPeriod + static_cast<std::size_t>(type)) *
               static_cast<std::size_t>(micro) +
           static_cast<std::size_t>(index);
  }
  std::int32_t& operator()(int device, int type, int index) noexcept {
    return time[at(device, type, index)];
  }
  std::int32_t operator()(int device, int type, int index) const noexcept {
    return time[at(device, type, index)];
  }
  // The last slot used on a device (every list is increasing).
  std::int32_t bound(int device) const noexcept {
    std::int32_t b = 0;
    for (int t = 0; t < types; ++t)
      b = std::max(b, (*this)(device, t, length(t) - 1));
    return b;
  }
};

// A pass: its slot, device, type and index in its list.
struct Item {
  std::int32_t time, device, type, index;
};

// Every pass of the plan in the order the paper's code visits them: by slot, then device, type
// and index (its min over (time, stage, type, microbatch) tuples). A counting sort by slot,
// filled in (device, type, index) order, which keeps ties in that order: linear in the passes.
std::vector<Item> items_in_slot_order(const Plan& plan) {
  std::int32_t last = 0;
  for (const std::int32_t t : plan.time)
    last = std::max(last, t);
  std::vector<std::int64_t> first(static_cast<std::size_t>(last) + 2, 0);
  std::int64_t count = 0;
  const auto each = [&](auto&& visit) {
    for (int d = 0; d < plan.devices; ++d) {
      for (int t = 0; t < plan.types; ++t) {
        for (int k = 0; k < plan.length(t); ++k)
          visit(Item{plan(d, t, k), d, t, k});
      }
    }
  };
  each([&](const Item& item) {
    ++first[static_cast<std::size_t>(item.time) + 1];
    ++count;
  });
  for (std::size_t i = 1; i < first.size(); ++i)
    first[i] += first[i - 1];
  std::vector<Item> items(static_cast<std::size_t>(count));
  each([&](const Item& item) {
    items[static_cast<std::size_t>(first[static_cast<std::size_t>(item.time)]++)] = item;
  });
  return items;
}

// Item code in a slot map: type · 2M + index; -1 for a free slot.
std::vector<std::int32_t> slot_map(const Plan& plan, int device, std::int32_t size) {
  std::vector<std::int32_t> map(static_cast<std::size_t>(size), -1);
  for (int t = 0; t < plan.types; ++t) {
    for (int k = 0; k < plan.length(t); ++k) {
      auto& cell = map[static_cast<std::size_t>(plan(device, t, k))];
      if (cell != -1) throw std::logic_error("controllable-memory: two passes share a slot");
      cell = t * 2 * plan.micro + k;
    }
  }
  return map;
}

// put_w: the W passes of a 4-type plan into free slots (merged: one list; split: per chunk,
// chunk 1's first when both are pending), the rest after the last pass.
Plan put_w(const Plan& in, bool split) {
  Plan out(in.devices, in.micro, split ? 6 : 5);
  const auto M = in.micro;
  for (int d = 0; d < in.devices; ++d) {
    for (int t = 0; t < 4; ++t) {
      for (int k = 0; k < M; ++k)
        out(d, t, k) = in(d, t, k);
    }
    const std::int32_t bound = in.bound(d);
    const auto map = slot_map(in, d, bound + 1);
    std::array<std::int32_t, 2> pending{0, 0}, placed{0, 0};
    const auto place = [&](int w, std::int32_t slot) {
      if (split) {
        out(d, w == 0 ? kW1 : kW0, placed[static_cast<std::size_t>(w)]) = slot;
      } else {
        out(d, kW, placed[0] + placed[1]) = slot;
      }
      ++placed[static_cast<std::size_t>(w)];
      --pending[static_cast<std::size_t>(w)];
    };
    for (std::int32_t i = 0; i <= bound; ++i) {
      const std::int32_t code = map[static_cast<std::size_t>(i)];
      if (code >= 0) {
        const int type = code / (2 * M);
        if (type == kI1 || type == kI0) ++pending[split && type == kI0 ? 1 : 0];
      } else {
        for (int w = 0; w < 2; ++w) {
          if (pending[static_cast<std::size_t>(w)] > 0) {
            place(w, i);
            break;
          }
        }
      }
    }
    std::int32_t slot = bound;
    for (int w = 0; w < 2; ++w) {
      while (pending[static_cast<std::size_t>(w)] > 0)
        place(w, ++slot);
    }
  }
  return out;
}

// eager_execution_time at unit costs, zero communication: the start slot of every pass when each
// runs as early as its dependencies and its device's previous pass allow, in slot order.
Plan squeeze(const Plan& plan) {
  Plan out(plan.devices, plan.micro, plan.types);
  std::vector<std::int32_t> end(plan.time.size(), -1);
  std::vector<std::int32_t> device_end(static_cast<std::size_t>(plan.devices), 0);
  const auto end_of = [&](int d, int t, int k) {
    const auto e = end[plan.at(d, t, k)];
    if (e < 0) throw std::logic_error("controllable-memory: a dependency runs later");
    return e;
  };
  const int S = plan.devices;
  for (const Item& item : items_in_slot_order(plan)) {
    const int d = item.device, t = item.type, k = item.index;
    std::int32_t start = device_end[static_cast<std::size_t>(d)];
    // Forward of chunk 0 and backward of chunk 1 come from the device before; forward of chunk 1
    // and backward of chunk 0 from the device after (the V turns on device S-1).
    if ((t == kF0 || t == kI1) && d > 0) start = std::max(start, end_of(d - 1, t, k));
    if ((t == kF1 || t == kI0) && d + 1 < S) start = std::max(start, end_of(d + 1, t, k));
    if (t > 0 && t < 4) start = std::max(start, end_of(d, t - 1, k));
    if (k > 0) start = std::max(start, end_of(d, t, k - 1));
    out(d, t, k) = start;
    end[plan.at(d, t, k)] = start + 1;
    device_end[static_cast<std::size_t>(d)] = start + 1;
  }
  return out;
}

// One device's activation count (chunk units) after every slot, kept as prefix sums of per-slot
// increments so that what the reordering asks costs O(B + log n) per pass instead of a walk over
// the distance the pass moves (~S: the reordering was O(S³) at M = S).
//  - Explicit (the plan has a merged W list): count(i) = A(i), with a = +1 at F, -1 at W.
//  - Implicit (4 types; a free slot frees one pending I's activation): with a = +1 at F, -1 at a
//    free slot and x = +1 at I, -1 at a free slot, the pending I's follow Lindley's recursion,
//    pending(i) = X(i) - min(0, min over k <= i of X(k)), so
//    count(i) = F(i) - (I(i) - pending(i)) = A(i) - min(0, min over k <= i of X(k)).
// Slots are grouped in blocks of kBlock; a segment tree over the blocks holds each range's
// Summary, and a block partly inside a query is read slot by slot.
struct Summary {
  static constexpr std::int64_t kNone = -(std::int64_t{1} << 40);
  std::int64_t sum_a = 0, sum_x = 0;
  std::int64_t max_a = kNone;   // max over i of A(i), from the range's start
  std::int64_t min_x = -kNone;  // min over k of X(k)
  std::int64_t best = kNone;    // max over k <= i of A(i) - X(k)
  std::int64_t free = 0;        // free slots

  friend Summary join(const Summary& l, const Summary& r) {
    return {l.sum_a + r.sum_a,
            l.sum_x + r.sum_x,
            std::max(l.max_a, l.sum_a + r.max_a),
            std::min(l.min_x, l.sum_x + r.min_x),
            std::max({l.best, r.best + l.sum_a - l.sum_x, l.sum_a + r.max_a - l.min_x}),
            l.free + r.free};
  }
};

class Profile {
 public:
  static constexpr std::int64_t kBlock = 64;

  Profile(bool explicit_w, std::int32_t micro, std::vector<std::int32_t> map)
      : explicit_w_(explicit_w), micro_(micro), map_(std::move(map)) {
    const auto n = static_cast<std::int64_t>(map_.size());
    a_.resize(map_.size());
    x_.resize(map_.size());
    for (std::int64_t i = 0; i < n; ++i)
      set_increments(i);
    while (leaves_ * kBlock < n)
      leaves_ *= 2;
    tree_.resize(static_cast<std::size_t>(2 * leaves_));
    for (std::int64_t b = 0; b < leaves_; ++b)
      tree_[static_cast<std::size_t>(leaves_ + b)] = block(b);
    for (auto v = leaves_ - 1; v >= 1; --v)
      tree_[static_cast<std::size_t>(v)] =
          join(tree_[static_cast<std::size_t>(2 * v)], tree_[static_cast<std::size_t>(2 * v + 1)]);
  }

  std::int32_t code(std::int32_t slot) const { return map_[static_cast<std::size_t>(slot)]; }
  std::int32_t size() const { return static_cast<std::int32_t>(map_.size()); }

  // The largest count over all slots.
  std::int64_t peak() const {
    const Summary& all = tree_[1];
    return explicit_w_ ? std::max<std::int64_t>(0, all.max_a)
                       : std::max({std::int64_t{0}, all.max_a, all.best});  // A - min(0, min X)
  }

  // Moves the pass in `from` to the free slot `slot`.
  void move(std::int32_t from, std::int32_t slot) {
    map_[static_cast<std::size_t>(slot)] = map_[static_cast<std::size_t>(from)];
    map_[static_cast<std::size_t>(from)] = -1;
    update(slot);
    update(from);
  }

  // The first free slot in [lo, hi), or -1.
  std::int32_t first_free(std::int32_t lo, std::int32_t hi) const {
    return static_cast<std::int32_t>(first_free(1, 0, leaves_ * kBlock, lo, hi));
  }

  // The last slot in [lo, hi) whose count (explicit) is at least `limit`, or -1.
  std::int32_t last_at_least(std::int32_t lo, std::int32_t hi, std::int64_t limit) const {
    return static_cast<std::int32_t>(last_at_least(1, 0, leaves_ * kBlock, lo, hi, 0, limit));
  }

  // Implicit: the largest count on [slot, from) once the F (forward) or I in `from` moves to the
  // free slot `slot`. A(i) gains 2 (F) or 1 (I) there and X(i) gains 1 (F) or 2 (I); after `from`
  // nothing changes but the minimum of X, which only rises, so no count after `from` grows.
  std::int64_t peak_after_move(std::int32_t slot, std::int32_t from, bool forward) const {
    const std::int64_t grow_a = forward ? 2 : 1, grow_x = forward ? 1 : 2;
    const Summary before = query(0, slot), range = query(slot, from);
    return std::max(before.sum_a + range.max_a + grow_a - std::min<std::int64_t>(0, before.min_x),
                    before.sum_a - before.sum_x + range.best + grow_a - grow_x);
  }

 private:
  int type_at(std::int64_t slot) const {
    const auto c = map_[static_cast<std::size_t>(slot)];
    return c < 0 ? -1 : c / (2 * micro_);
  }
  void set_increments(std::int64_t i) {
    const int type = type_at(i);
    const bool forward = type == kF0 || type == kF1, input = type == kI1 || type == kI0;
    std::int8_t a = 0, x = 0;
    if (explicit_w_) {
      a = forward ? 1 : type == kW ? -1 : 0;
    } else {
      a = forward ? 1 : type < 0 ? -1 : 0;
      x = input ? 1 : type < 0 ? -1 : 0;
    }
    a_[static_cast<std::size_t>(i)] = a;
    x_[static_cast<std::size_t>(i)] = x;
  }
  // The Summary of the slots [lo, hi): join(at(lo), ..., at(hi - 1)), in one pass.
  Summary slots(std::int64_t lo, std::int64_t hi) const {
    Summary s;
    for (auto i = lo; i < std::min<std::int64_t>(hi, size()); ++i) {
      s.sum_a += a_[static_cast<std::size_t>(i)];
      s.sum_x += x_[static_cast<std::size_t>(i)];
      s.max_a = std::max(s.max_a, s.sum_a);
      s.min_x = std::min(s.min_x, s.sum_x);
      s.best = std::max(s.best, s.sum_a - s.min_x);
      s.free += map_[static_cast<std::size_t>(i)] < 0 ? 1 : 0;
    }
    return s;
  }
  Summary block(std::int64_t b) const { return slots(b * kBlock, (b + 1) * kBlock); }
  void update(std::int64_t slot) {
    set_increments(slot);
    auto v = leaves_ + slot / kBlock;
    tree_[static_cast<std::size_t>(v)] = block(slot / kBlock);
    for (v /= 2; v >= 1; v /= 2)
      tree_[static_cast<std::size_t>(v)] =
          join(tree_[static_cast<std::size_t>(2 * v)], tree_[static_cast<std::size_t>(2 * v + 1)]);
  }

  Summary query(std::int64_t lo, std::int64_t hi) const {
    Summary s;
    collect(1, 0, leaves_ * kBlock, lo, hi, s);
    return s;
  }
  void collect(std::int64_t v, std::int64_t vlo, std::int64_t vhi, std::int64_t lo, std::int64_t hi,
               Summary& s) const {
    if (hi <= vlo || vhi <= lo) return;
    if (lo <= vlo && vhi <= hi) {
      s = join(s, tree_[static_cast<std::size_t>(v)]);
    } else if (v >= leaves_) {
      s = join(s, slots(std::max(lo, vlo), std::min(hi, vhi)));
    } else {
      const auto mid = (vlo + vhi) / 2;
      collect(2 * v, vlo, mid, lo, hi, s);
      collect(2 * v + 1, mid, vhi, lo, hi, s);
    }
  }
  std::int64_t first_free(std::int64_t v, std::int64_t vlo, std::int64_t vhi, std::int64_t lo,
                          std::int64_t hi) const {
    if (hi <= vlo || vhi <= lo || tree_[static_cast<std::size_t>(v)].free == 0) return -1;
    if (v >= leaves_) {
      for (auto i = std::max(lo, vlo); i < std::min({hi, vhi, std::int64_t{size()}}); ++i) {
        if (map_[static_cast<std::size_t>(i)] < 0) return i;
      }
      return -1;
    }
    const auto mid = (vlo + vhi) / 2;
    const auto left = first_free(2 * v, vlo, mid, lo, hi);
    return left >= 0 ? left : first_free(2 * v + 1, mid, vhi, lo, hi);
  }
  // `offset`: A just before vlo.
  std::int64_t last_at_least(std::int64_t v, std::int64_t vlo, std::int64_t vhi, std::int64_t lo,
                             std::int64_t hi, std::int64_t offset, std::int64_t limit) const {
    if (hi <= vlo || vhi <= lo) return -1;
    const Summary& node = tree_[static_cast<std::size_t>(v)];
    if (lo <= vlo && vhi <= hi && offset + node.max_a < limit) return -1;
    if (v >= leaves_) {
      std::int64_t last = -1, count = offset;
      for (auto i = vlo; i < std::min({hi, vhi, std::int64_t{size()}}); ++i) {
        count += a_[static_cast<std::size_t>(i)];
        if (i >= lo && count >= limit) last = i;
      }
      return last;
    }
    const auto mid = (vlo + vhi) / 2;
    const auto right = last_at_least(2 * v + 1, mid, vhi, lo, hi,
                                     offset + tree_[static_cast<std::size_t>(2 * v)].sum_a, limit);
    return right >= 0 ? right : last_at_least(2 * v, vlo, mid, lo, hi, offset, limit);
  }

  bool explicit_w_;
  std::int32_t micro_;
  std::vector<std::int32_t> map_;  // slot → item code, -1 for a free slot
  std::vector<std::int8_t> a_, x_;
  std::int64_t leaves_ = 1;
  std::vector<Summary> tree_;
};

// The k-th smallest (0-based) of two increasing lists.
std::int32_t kth_of_two(std::span<const std::int32_t> a, std::span<const std::int32_t> b,
                        std::int32_t k) {
  std::int32_t lo = std::min(a.front(), b.front()), hi = std::max(a.back(), b.back());
  while (lo < hi) {  // smallest x with at least k+1 values <= x
    const std::int32_t mid = lo + (hi - lo) / 2;
    const auto count = (std::upper_bound(a.begin(), a.end(), mid) - a.begin()) +
                       (std::upper_bound(b.begin(), b.end(), mid) - b.begin());
    if (count >= k + 1) {
      hi = mid;
    } else {
      lo = mid + 1;
    }
  }
  return lo;
}

// reorder: one greedy pass over a 4-type plan; returns the squeezed 5-type plan.
Plan reorder(const Plan& input, bool consider_w) {
  Plan plan = consider_w ? put_w(input, false) : input;
  const int S = plan.devices;
  const std::int32_t M = plan.micro;
  std::vector<Profile> profiles;
  profiles.reserve(static_cast<std::size_t>(S));
  std::int64_t limit = 0;  // the largest peak over all devices: no move may exceed it
  for (int d = 0; d < S; ++d) {
    profiles.emplace_back(consider_w, M, slot_map(plan, d, plan.bound(d) + 1));
    limit = std::max(limit, profiles.back().peak());
  }
  const auto span_of = [&](int d, int t) {
    return std::span<const std::int32_t>(&plan.time[plan.at(d, t, 0)], static_cast<std::size_t>(M));
  };

  int phase = 0;  // 0 warm-up, 1 steady (never moves), 2 cool-down
  for (const Item& item : items_in_slot_order(plan)) {
    const int d = item.device, t = item.type, k = item.index;
    if (t == kI0 && d == 0 && phase == 0) phase = 1;
    if (phase == 1) {
      if (t == kF0 && k == M - 1) phase = 2;
      continue;
    }
    if (phase == 0 && !consider_w) continue;

    std::int32_t deps = -1;
    if ((t == kF0 || t == kI1) && d > 0) deps = std::max(deps, plan(d - 1, t, k));
    if ((t == kF1 || t == kI0) && d + 1 < S) deps = std::max(deps, plan(d + 1, t, k));
    if (t > 0 && t < 4) deps = std::max(deps, plan(d, t - 1, k));
    if (t == kW) deps = std::max(deps, kth_of_two(span_of(d, kI1), span_of(d, kI0), k));
    if (k > 0) deps = std::max(deps, plan(d, t, k - 1));
    const std::int32_t from = item.time, earliest = deps + 1;
    if (earliest > from) throw std::logic_error("controllable-memory: dependency after its pass");

    auto& prof = profiles[static_cast<std::size_t>(d)];
    const bool forward = t == kF0 || t == kF1;
    // The earliest free slot after the dependencies where the count stays within the limit.
    // With W explicit, moving F earlier holds one more activation on [slot, from), so `slot`
    // must lie after the last slot of [earliest, from) already at the limit; I holds none and
    // W earlier only frees sooner: any free slot fits. With W implicit, free slots in order
    // until one fits.
    std::int32_t slot = -1;
    if (consider_w) {
      const std::int32_t first =
          forward ? std::max(earliest, prof.last_at_least(earliest, from, limit) + 1) : earliest;
      slot = prof.first_free(first, from);
    } else {
      for (slot = prof.first_free(earliest, from);
           slot >= 0 && prof.peak_after_move(slot, from, forward) > limit;)
        slot = prof.first_free(slot + 1, from);
    }
    if (slot >= 0) {
      prof.move(from, slot);
      plan(d, t, k) = slot;
    }
  }
  return squeeze(consider_w ? plan : put_w(plan, false));
}

Plan first_four(const Plan& plan) {
  Plan out(plan.devices, plan.micro, 4);
  for (int d = 0; d < plan.devices; ++d) {
    for (int t = 0; t < 4; ++t) {
      for (int k = 0; k < plan.micro; ++k)
        out(d, t, k) = plan(d, t, k);
    }
  }
  return out;
}

enum class Memory { Half, Min };

// The slot offsets of F0, F1, I1, I0 on device i (zbv_greedy.py stable_pattern_v_min /
// stable_pattern_v_half; reference §8 table). The extra delay δ keeps the four offsets apart
// modulo the period where S would make two of them collide.
std::array<std::int32_t, 4> pattern(Memory memory, int S, int i) {
  if (memory == Memory::Min) {
    const int delta = S % 3 == 0 ? 2 : 0;
    return {i, 2 * S - 1 - i, 2 * S + delta + i, 4 * S - 1 + delta - i};
  }
  const int delta = S % 2 == 0 ? 3 : 0;
  return {2 * i, 3 * S - 2 - i, 3 * S - 1 + delta + 2 * i, 6 * S - 2 + delta - i};
}

Memory memory_of(const ResolvedParams& p) {
  return p.schedule == "v-min" ? Memory::Min : Memory::Half;
}

// The slot grid the algorithm keeps per device: ~6(M + 2S) slots (plus the W passes that may
// land after the last pass), S·6(M+2S+2) cells in all, of which only the 6SM passes are filled.
// The reordering keeps and scans every slot, so its memory and part of its time grow with the
// grid: where the fill and drain (the 2S term) dominate, with S² while the table grows with S·M
// (V-Min at S = 4096, M = 1 took 25 s and 0.7 GB for 24576 passes); require_slot_grid bounds
// it. Each move costs O(Profile::kBlock + log grid) (it cost the distance moved, ~S, before).
void require_grid(const ResolvedParams& p) {
  const std::int64_t S = p.devices, M = p.microbatches;
  require_size(p, 2 * S, 6 * S * M);
  require_slot_grid(p, S * kPeriod * (M + 2 * S + 2), kPeriod * S * M, "S·6(M+2S+2)",
                    "M >= (2S+2)/15");
}

// The pass kind of a type of the 6-type plan, and its stage on device d (chunk 1 is stage
// 2S-1-d).
PassKind kind_of(int type) {
  constexpr std::array<PassKind, 6> kKind = {PassKind::F, PassKind::F, PassKind::I,
                                             PassKind::I, PassKind::W, PassKind::W};
  return kKind[static_cast<std::size_t>(type)];
}
int stage_of(int type, int d, int S) {
  const bool chunk1 = type == kF1 || type == kI1 || type == kW1;
  return chunk1 ? 2 * S - 1 - d : d;
}

// The block's F and I offsets repeated every period for `micro` microbatches (step 1).
Plan repeated_pattern(Memory memory, int S, int micro) {
  Plan plan(S, micro, 4);
  for (int d = 0; d < S; ++d) {
    const auto offsets = pattern(memory, S, d);
    for (int t = 0; t < 4; ++t) {
      for (int k = 0; k < micro; ++k)
        plan(d, t, k) = offsets[static_cast<std::size_t>(t)] + kPeriod * k;
    }
  }
  return plan;
}

ScheduleTable generate_v_shape(const ResolvedParams& p) {
  require_grid(p);
  const int S = p.devices, M = p.microbatches;
  Plan plan = repeated_pattern(memory_of(p), S, M);
  // schedule_from_pattern: reorder with W, drop W, reorder without W, drop W, place W per chunk.
  plan = first_four(reorder(plan, true));
  plan = first_four(reorder(plan, false));
  const Plan final_plan = put_w(plan, true);

  const int stages = 2 * S;
  TableBuilder table(S, stages, M, zigzag_placement(S, stages), std::int64_t{6} * S * M);
  for (int d = 0; d < S; ++d) {
    // Each device runs its passes in slot order (its slots are distinct).
    for (const std::int32_t code : slot_map(final_plan, d, final_plan.bound(d) + 1)) {
      if (code < 0) continue;
      const int type = code / (2 * M), index = code % (2 * M);
      table.push(kind_of(type), index, stage_of(type, d, S));
    }
    table.end_row();
  }
  return std::move(table).finish();
}

// The block: the pattern's offsets, and the W offsets of the steady state of the repeated
// pattern (put_w per chunk), read off a microbatch far enough from both ends.
BuildingBlock v_shape_block(const ResolvedParams& p) {
  require_grid(p);
  const int S = p.devices;
  const Memory memory = memory_of(p);
  const int micro = 2 * S + 6, probe = S + 3;
  const Plan placed = put_w(repeated_pattern(memory, S, micro), true);

  BuildingBlock block;
  block.devices = S;
  block.stages = 2 * S;
  block.period = kPeriod;
  block.lifespan.assign(static_cast<std::size_t>(2 * S), 0);
  block.share.assign(static_cast<std::size_t>(2 * S), 0.5);  // a chunk is half a device share
  for (int d = 0; d < S; ++d) {
    std::array<std::int32_t, 6> offset{};
    for (int t = 0; t < 6; ++t)
      offset[static_cast<std::size_t>(t)] = placed(d, t, probe) - kPeriod * probe;
    const auto first = static_cast<std::ptrdiff_t>(block.passes.size());
    for (int t = 0; t < 6; ++t) {
      block.passes.push_back({kind_of(t), stage_of(t, d, S), offset[static_cast<std::size_t>(t)]});
    }
    std::sort(block.passes.begin() + first, block.passes.end(),
              [](const BlockPass& a, const BlockPass& b) { return a.offset < b.offset; });
    block.row_begin.push_back(static_cast<std::int64_t>(block.passes.size()));

    // (stage, F offset, W offset) of the device's two chunks.
    const std::array<std::array<int, 3>, 2> chunks = {
        {{d, offset[kF0], offset[kW0]}, {2 * S - 1 - d, offset[kF1], offset[kW1]}}};
    double implied = 0, steady = 0;
    for (const auto& [stage, f, w] : chunks) {
      const int life = w + 1 - f;
      block.lifespan[static_cast<std::size_t>(stage)] = life;
      implied += ((life + kPeriod - 1) / kPeriod) * block.share[static_cast<std::size_t>(stage)];
    }
    // Exact peak of the repetition: at slot t of a period, microbatch k of a chunk is alive if
    // f <= t - 6k <= w (its F has started and its W has not ended; the maximum over slots is
    // reached at an F, where the table's peak is taken too). Their number is the count of
    // integers in [(t - w)/6, (t - f)/6]; shifting t by whole periods keeps both ends positive.
    for (int t = 0; t < kPeriod; ++t) {
      double alive = 0;
      for (const auto& [stage, f, w] : chunks) {
        const int shifted = t + kPeriod * (std::abs(w) / kPeriod + std::abs(f) / kPeriod + 2);
        const int hi = (shifted - f) / kPeriod;
        const int lo = (shifted - w + kPeriod - 1) / kPeriod;
        alive += (hi - lo + 1) * block.share[static_cast<std::size_t>(stage)];
      }
      steady = std::max(steady, alive);
    }
    block.implied_peak.push_back(implied);
    block.steady_peak.push_back(steady);
  }
  return block;
}

}  // namespace

extern const ScheduleInfo kVHalf{
    .name = "v-half",
    .title = "V-Half: V-shape building block with half of 1F1B's activation memory",
    .source = "Qi, Wan, Amar, Lin, NeurIPS 2024 (arXiv 2405.15362); sail-sg zbv_greedy.py",
    .constraints = "exactly 2 chunks per device (no -v); any S, M; order built at unit costs",
    .generate = generate_v_shape,
    .block = v_shape_block,
};

extern const ScheduleInfo kVMin{
    .name = "v-min",
    .title = "V-Min: V-shape building block with a third of 1F1B's activation memory",
    .source = "Qi, Wan, Amar, Lin, NeurIPS 2024 (arXiv 2405.15362); sail-sg zbv_greedy.py",
    .constraints = "exactly 2 chunks per device (no -v); any S, M; order built at unit costs",
    .generate = generate_v_shape,
    .block = v_shape_block,
};

}  // namespace pipetab::schedules
