// V-shape 1F1B: the zero-bubble authors' 1F1B on the V placement, without the I/W split (flag
// `--enable-1f1b-v`; create_schedule of scheduler/v1f1b.py in sail-sg/zero-bubble-pipeline-
// parallelism, read at 39f2c18; this is pipetab's own code of the same rules). Device d holds
// chunk 0 = stage d and chunk 1 = stage 2S−1−d; backwards are whole (B). Their runtime passes the
// stage count, the microbatch count, the pass costs and the transfer delay; the costs only feed
// a makespan estimate that the file computes and discards, so the order depends on S and M alone.
// The plan is made on a grid of unit slots where a backward takes two slots in a row (its memory
// is freed in the second, the "tail"):
//  1. Pattern: every device repeats a period of 6 slots holding F(c0), F(c1), B(c1) and B(c0)
//     with their tails. F(c0) of device d sits at offset d+1, F(c1) at 2S−d; the backwards form
//     one chain, B(c1) on devices 0..S−1 then B(c0) on devices S−1..0, the j-th at
//     2S+1+δ+2j+3⌊(j+φ)/3⌋ (δ = 3 where 3 divides S, else 0; φ = (1−S) mod 3), its tail right
//     after; offsets are taken mod 6.
//  2. Microbatch 0 follows the V: after one empty period, each pass of the chain F(c0) down the
//     devices, F(c1) up, B(c1) down, B(c0) up takes the first slot of its offset after the
//     previous pass of the chain (a backward: after the previous head); microbatch k sits 6k
//     slots after microbatch 0.
//  3. Compaction (their "warm-up without increasing the peak memory"): visiting the passes by
//     slot (devices in order within a slot), each moves to the first free slot after its
//     dependencies (the device's previous pass of its kind; its predecessor in the V, a
//     backward's predecessor counted at its tail), a backward to the first two free slots in a
//     row. A forward moves back only as far as the device's live activations (forwards minus
//     tails, in chunks) stay below the largest count anywhere in step 2's grid, then forward to
//     the first free slot from there. Passes never move later; the gaps the first microbatches
//     leave let the whole plan move earlier, every pass by some 1.3S to 1.5S slots on average,
//     so the work grows as S²M.
//  4. Each device runs its passes in slot order.
#include <algorithm>
#include <array>

#include "common.hpp"

#include "pipetab/schedules/registry.hpp"

namespace pipetab::schedules {
namespace {

constexpr int kSlotsPerPeriod = 6;
// Slot contents, in the authors' pattern order: the forwards of chunks 0 and 1, the backward
// heads of chunks 1 and 0, their tails; -1 is a free slot.
constexpr int kFwd0 = 0, kFwd1 = 1, kB1 = 2, kB0 = 3, kTail1 = 4, kTail0 = 5, kKinds = 6;
constexpr std::int8_t kFree = -1;

// The bound on one device's slots: the chain of step 2 advances at most a period per pass.
std::int64_t slots_bound(std::int64_t S, std::int64_t M) {
  return kSlotsPerPeriod * (M + 4 * S + 1);
}

class Planner {
 public:
  Planner(int S, int M) : S_(S), M_(M) {
    // Steps 1 and 2: microbatch 0's slots, then the grid.
    std::vector<std::int64_t> first(static_cast<std::size_t>(S_) * kKinds);
    const auto at = [&](int d, int kind) -> std::int64_t& {
      return first[static_cast<std::size_t>(d) * kKinds + static_cast<std::size_t>(kind)];
    };
    std::int64_t cursor = kSlotsPerPeriod;
    const auto take = [&](int offset) {  // first slot at or after the cursor with this offset
      cursor += ((offset - cursor) % kSlotsPerPeriod + kSlotsPerPeriod) % kSlotsPerPeriod;
      return cursor++;
    };
    const std::int64_t base = 2 * std::int64_t{S_} + 1 + (S_ % 3 == 0 ? 3 : 0);
    const std::int64_t phase = ((1 - S_) % 3 + 3) % 3;
    const auto backward_offset = [&](std::int64_t j) {
      return static_cast<int>((base + 2 * j + 3 * ((j + phase) / 3)) % kSlotsPerPeriod);
    };
    for (int d = 0; d < S_; ++d)
      at(d, kFwd0) = take((d + 1) % kSlotsPerPeriod);
    for (int d = S_ - 1; d >= 0; --d)
      at(d, kFwd1) = take((2 * S_ - d) % kSlotsPerPeriod);
    for (int d = 0; d < S_; ++d) {
      at(d, kB1) = take(backward_offset(d));
      at(d, kTail1) = at(d, kB1) + 1;
    }
    for (int d = S_ - 1; d >= 0; --d) {
      at(d, kB0) = take(backward_offset(2 * std::int64_t{S_} - 1 - d));
      at(d, kTail0) = at(d, kB0) + 1;
    }
    const std::int64_t last = *std::max_element(first.begin(), first.end());
    length_ = last + kSlotsPerPeriod * (std::int64_t{M_} - 1) + 2;

    grid_.assign(static_cast<std::size_t>(S_) * static_cast<std::size_t>(length_), kFree);
    live_.assign(grid_.size(), 0);
    slot_.assign(static_cast<std::size_t>(S_) * kKinds * static_cast<std::size_t>(M_), 0);
    for (int d = 0; d < S_; ++d) {
      for (int kind = 0; kind < kKinds; ++kind) {
        for (int k = 0; k < M_; ++k) {
          const std::int64_t s = at(d, kind) + kSlotsPerPeriod * std::int64_t{k};
          cell(d, s) = static_cast<std::int8_t>(kind);
          slot(d, kind, k) = static_cast<std::int32_t>(s);
        }
      }
    }
    std::vector<std::int32_t> count(static_cast<std::size_t>(S_), 0);
    for (std::int64_t s = 0; s < length_; ++s) {
      for (int d = 0; d < S_; ++d) {
        const int kind = cell(d, s);
        auto& c = count[static_cast<std::size_t>(d)];
        c += kind == kFwd0 || kind == kFwd1 ? 1 : kind == kTail0 || kind == kTail1 ? -1 : 0;
        live(d, s) = c;
        peak_ = std::max(peak_, c);
      }
    }
  }

  // Step 3.
  void warm_up() {
    std::vector<std::int32_t> seen(static_cast<std::size_t>(S_) * kKinds, 0);
    for (std::int64_t s = 0; s < length_; ++s) {
      for (int d = 0; d < S_; ++d) {
        const int kind = cell(d, s);
        if (kind == kFree) continue;
        const int k = seen[static_cast<std::size_t>(d) * kKinds + static_cast<std::size_t>(kind)]++;
        move(d, kind, k, s);
      }
    }
  }

  // Step 4. Every row holds 4M ops (each of F(c0), F(c1), B(c1), B(c0) M times), so the rows
  // are laid out first and filled in one pass over the slots.
  ScheduleTable table() const {
    const int stages = 2 * S_;
    const std::int64_t row = 4 * std::int64_t{M_};
    TableBuilder builder(S_, stages, M_, zigzag_placement(S_, stages), S_ * row);
    for (int d = 0; d < S_; ++d) {
      for (std::int64_t i = 0; i < row; ++i)
        builder.push(Op{});
      builder.end_row();
    }
    ScheduleTable t = std::move(builder).finish();
    std::vector<std::array<std::int32_t, kKinds>> next(static_cast<std::size_t>(S_));
    std::vector<std::int64_t> filled(static_cast<std::size_t>(S_), 0);
    for (std::int64_t s = 0; s < length_; ++s) {
      for (int d = 0; d < S_; ++d) {
        const int kind = cell(d, s);
        if (kind == kFree || kind == kTail0 || kind == kTail1) continue;
        const auto i = static_cast<std::size_t>(d);
        t.ops[static_cast<std::size_t>(d * row + filled[i]++)] =
            Op::make(kind == kFwd0 || kind == kFwd1 ? PassKind::F : PassKind::B,
                     next[i][static_cast<std::size_t>(kind)]++,
                     kind == kFwd0 || kind == kB0 ? d : stages - 1 - d);
      }
    }
    return t;
  }

 private:
  // The grid is slot-major (the warm-up visits every device's slot s before slot s + 1), the
  // live counts device-major (a move updates a run of one device's slots).
  std::size_t cell_index(int d, std::int64_t s) const {
    return static_cast<std::size_t>(s) * static_cast<std::size_t>(S_) + static_cast<std::size_t>(d);
  }
  std::int8_t& cell(int d, std::int64_t s) { return grid_[cell_index(d, s)]; }
  std::int8_t cell(int d, std::int64_t s) const { return grid_[cell_index(d, s)]; }
  std::int32_t& live(int d, std::int64_t s) {
    return live_[static_cast<std::size_t>(d) * static_cast<std::size_t>(length_) +
                 static_cast<std::size_t>(s)];
  }
  std::int32_t& slot(int d, int kind, int k) {
    return slot_[(static_cast<std::size_t>(d) * kKinds + static_cast<std::size_t>(kind)) *
                     static_cast<std::size_t>(M_) +
                 static_cast<std::size_t>(k)];
  }

  // The slot of the pass this one waits for on another device, or on this one at the turns of
  // the V and for a tail; -1 for F(c0) on device 0.
  std::int64_t predecessor(int d, int kind, int k) {
    switch (kind) {
      case kFwd0:
        return d > 0 ? slot(d - 1, kFwd0, k) : -1;
      case kFwd1:
        return d < S_ - 1 ? slot(d + 1, kFwd1, k) : slot(d, kFwd0, k);
      case kB1:
        return d > 0 ? slot(d - 1, kTail1, k) : slot(d, kFwd1, k);
      case kB0:
        return d < S_ - 1 ? slot(d + 1, kTail0, k) : slot(d, kTail1, k);
      case kTail1:
        return slot(d, kB1, k);
      default:
        return slot(d, kB0, k);
    }
  }

  void add_live(int d, std::int64_t from, std::int64_t to, std::int32_t delta) {
    for (std::int64_t s = from; s < to; ++s)
      live(d, s) += delta;
  }

  // Microbatch k's pass `kind` on device d, now at slot `now`.
  void move(int d, int kind, int k, std::int64_t now) {
    std::int64_t earliest = predecessor(d, kind, k);
    if (k > 0) earliest = std::max<std::int64_t>(earliest, slot(d, kind, k - 1));
    const bool head = kind == kB0 || kind == kB1;
    std::int64_t to = earliest + 1;
    while (to < now && (cell(d, to) != kFree || (head && cell(d, to + 1) != kFree)))
      ++to;
    if (kind == kFwd0 || kind == kFwd1) {
      // Back while the live count stays below the peak, then to the first free slot.
      std::int64_t back = now;
      while (back > to && live(d, back - 1) < peak_)
        --back;
      while (back < now && cell(d, back) != kFree)
        ++back;
      to = back;
    }
    if (to == now) return;
    cell(d, to) = static_cast<std::int8_t>(kind);
    cell(d, now) = kFree;
    slot(d, kind, k) = static_cast<std::int32_t>(to);
    if (kind == kFwd0 || kind == kFwd1) add_live(d, to, now, 1);
    if (kind == kTail0 || kind == kTail1) add_live(d, to, now, -1);
  }

  int S_, M_;
  std::int64_t length_ = 0;
  std::int32_t peak_ = 0;
  std::vector<std::int8_t> grid_;   // per slot, per device: the pass kind there or kFree
  std::vector<std::int32_t> live_;  // per device, per slot: live chunk activations after it
  std::vector<std::int32_t> slot_;  // per device, kind, microbatch: its slot (< 2^28)
};

ScheduleTable generate_v_1f1b(const ResolvedParams& p) {
  const std::int64_t S = p.devices, M = p.microbatches;
  require_size(p, 2 * S, 4 * S * M);
  // The plan walks every slot of every device, S·6(M+4S+1) cells for 6SM filled ones (passes
  // and tails): where the fill and drain (the 4S term) dominate, its time and memory grow with
  // S² while the table grows with S·M; require_slot_grid bounds it, as for V-Half and V-Min.
  require_slot_grid(p, S * slots_bound(S, M), kSlotsPerPeriod * S * M, "S·6(M+4S+1)",
                    "M >= (4S+1)/15");
  Planner planner(p.devices, p.microbatches);
  planner.warm_up();
  return planner.table();
}

}  // namespace

extern const ScheduleInfo kV1F1B{
    .name = "v-1f1b",
    .title = "V-shape 1F1B: 1F1B on the V placement (2 chunks per device, whole backward)",
    .source =
        "Qi et al., sail-sg/zero-bubble-pipeline-parallelism scheduler/v1f1b.py "
        "(--enable-1f1b-v)",
    .constraints =
        "exactly 2 chunks per device (no -v); any S, M (the authors' runtime needs S >= 2); "
        "S·6(M+4S+1) <= 2^28 slot cells; the order does not depend on the costs",
    .generate = generate_v_1f1b,
};

}  // namespace pipetab::schedules
