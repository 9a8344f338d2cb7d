// The zero-bubble heuristic scheduler (Qi et al., ICLR 2024 §3; the authors' greedy
// `scheduler/zb.py` follows the same plan, reference schedules.md §7). It builds the schedule
// microbatch by microbatch so that every pass's dependencies are placed, and timed, before it:
//  - round 0 places the first forward on every stage, then as many extra warm-up forwards per
//    stage as fit before that stage's first input gradient can arrive (and under the memory
//    limit), never more than the stage above it (so no stage waits on a forward that comes
//    after its upstream's first I), then the first input gradients from the last stage up;
//  - round i places one more forward per stage from the top (if the stage above is ahead and
//    memory allows, freeing memory with pending W first), then I(i) from the last stage up;
//  - a stage that would wait for a neighbour runs pending W passes in the gap instead, and the
//    first stage, whose I feeds no one, runs its pending W before each I once its forwards
//    are done;
//  - leftover W passes end every row.
// Times are predicted with the given costs and a fixed transfer delay, so a schedule is
// tailored to them; the table level then times the order on its own.
#include <algorithm>
#include <cmath>

#include "common.hpp"

#include "pipetab/error.hpp"
#include "pipetab/schedules/zero_bubble.hpp"

namespace pipetab {
namespace {

using schedules::kEpsilon;

class Heuristic {
 public:
  Heuristic(const ZeroBubbleProblem& problem, const ZeroBubbleFlags& flags)
      : p_(problem),
        flags_(flags),
        S_(problem.devices),
        M_(problem.microbatches),
        stages_(static_cast<std::size_t>(S_)),
        end_f_(static_cast<std::size_t>(S_) * static_cast<std::size_t>(M_), 0.0),
        end_i_(end_f_.size(), 0.0),
        ops_(3 * end_f_.size()) {}

  ZeroBubbleSchedule run() {
    first_round();
    for (int i = 1; i < M_; ++i)
      round(i);
    for (int j = 0; j < S_; ++j) {
      while (stage(j).w < M_)
        put(j, PassKind::W);
    }
    ZeroBubbleSchedule out;
    for (const auto& s : stages_) {
      out.makespan = std::max(out.makespan, s.free);
      out.max_span = std::max(out.max_span, s.free - s.first_start);
    }
    out.table = table();
    return out;
  }

 private:
  struct Stage {
    std::int32_t f = 0, b = 0, w = 0;  // passes placed so far, per kind
    double free = 0.0;                 // when the device finishes its last placed pass
    double first_start = 0.0;
    double memory = 0.0;  // activations held, M_a
    std::int64_t placed = 0;
  };

  Stage& stage(int j) { return stages_[static_cast<std::size_t>(j)]; }
  std::size_t at(int j, int microbatch) const {
    return static_cast<std::size_t>(j) * static_cast<std::size_t>(M_) +
           static_cast<std::size_t>(microbatch);
  }
  double cost(int j, PassKind kind) const {
    const auto s = static_cast<std::size_t>(j);
    return kind == PassKind::F   ? p_.forward[s]
           : kind == PassKind::I ? p_.input_grad[s]
                                 : p_.weight_grad[s];
  }

  // When the next pass of this kind on stage j has its inputs (its neighbour's output
  // delivered, or its own earlier pass done).
  double ready(int j, PassKind kind) {
    Stage& s = stage(j);
    switch (kind) {
      case PassKind::F:
        return j > 0 ? end_f_[at(j - 1, s.f)] + p_.comm : 0.0;
      case PassKind::I:
        return j + 1 < S_ ? end_i_[at(j + 1, s.b)] + p_.comm : end_f_[at(j, s.b)];
      default:
        return end_i_[at(j, s.w)];
    }
  }

  void put(int j, PassKind kind) {
    Stage& s = stage(j);
    const double start = std::max(s.free, ready(j, kind));
    if (s.placed == 0) s.first_start = start;
    s.free = start + cost(j, kind);
    std::int32_t microbatch = 0;
    switch (kind) {
      case PassKind::F:
        microbatch = s.f++;
        end_f_[at(j, microbatch)] = s.free;
        s.memory += 1.0;
        break;
      case PassKind::I:
        microbatch = s.b++;
        end_i_[at(j, microbatch)] = s.free;
        s.memory -= p_.input_grad_frees;
        break;
      default:
        microbatch = s.w++;
        s.memory -= 1.0 - p_.input_grad_frees;
        break;
    }
    ops_[static_cast<std::size_t>(j) * 3 * static_cast<std::size_t>(M_) +
         static_cast<std::size_t>(s.placed++)] = Op::make(kind, microbatch, j);
  }

  // Runs pending W passes while the device would otherwise wait until `until`.
  void fill(int j, double until) {
    Stage& s = stage(j);
    while (s.w < s.b && s.free + cost(j, PassKind::W) <= until + kEpsilon)
      put(j, PassKind::W);
    if (flags_.gap_overshoot && s.w < s.b && s.free + kEpsilon < until) put(j, PassKind::W);
  }

  // Frees memory with pending W passes until one more forward fits; false if it cannot.
  bool make_room(int j) {
    Stage& s = stage(j);
    while (s.memory + 1.0 > p_.memory_limit + kEpsilon) {
      if (s.w >= s.b) return false;
      put(j, PassKind::W);
    }
    return true;
  }

  void first_round() {
    for (int j = 0; j < S_; ++j)
      put(j, PassKind::F);
    // Warm-up forwards per stage, estimated from the last stage up: the first I reaches stage
    // j at `arrival`; until then the stage has time for forwards.
    std::vector<std::int32_t> extra(static_cast<std::size_t>(S_), 0);
    double arrival = 0.0;
    for (int j = S_ - 1; j >= 0; --j) {
      const Stage& s = stage(j);
      double t = s.free, memory = s.memory;
      std::int32_t k = 0;
      if (j == S_ - 1) {
        arrival = t;
      } else {
        while (s.f + k < M_ && memory + 1.0 <= p_.memory_limit + kEpsilon) {
          const double f = cost(j, PassKind::F);
          if (flags_.warmup_overshoot ? t + kEpsilon >= arrival : t + f > arrival + kEpsilon) break;
          t += f;
          memory += 1.0;
          ++k;
        }
      }
      extra[static_cast<std::size_t>(j)] = k;
      arrival = std::max(t, arrival) + cost(j, PassKind::I) + p_.comm;
    }
    // Each stage runs fewer warm-up forwards than the one above: its first I is due earlier
    // (by an I and a transfer) and its forwards start later (by an F and a transfer). Equal
    // counts, as a memory cap gives, would delay every first I down the chain. Never more
    // than the stage above in any case, or a forward would wait behind that stage's first I.
    for (int j = 1; j < S_; ++j) {
      auto& e = extra[static_cast<std::size_t>(j)];
      e = std::min(e, std::max(extra[static_cast<std::size_t>(j) - 1] - 1, 0));
    }
    for (int j = 0; j < S_; ++j) {
      for (std::int32_t k = 0; k < extra[static_cast<std::size_t>(j)]; ++k)
        put(j, PassKind::F);
    }
    for (int j = S_ - 1; j >= 0; --j)
      put(j, PassKind::I);
  }

  void round(int i) {
    for (int j = 0; j < S_; ++j) {
      Stage& s = stage(j);
      if (s.f >= M_ || (j > 0 && s.f >= stage(j - 1).f)) continue;
      const bool required = s.f <= i;  // F(i) must precede I(i)
      if (!make_room(j)) {
        if (required) {
          throw ParamError("zero-bubble heuristic: a memory limit below one microbatch cannot fit");
        }
        continue;
      }
      fill(j, ready(j, PassKind::F));
      put(j, PassKind::F);
    }
    for (int j = S_ - 1; j >= 0; --j) {
      // The first stage's I feeds no one: once its forwards are done, its pending W can run
      // first at no cost to any other device, and free memory.
      if (j == 0 && stage(0).f == M_) {
        while (stage(0).w < stage(0).b)
          put(0, PassKind::W);
      }
      fill(j, ready(j, PassKind::I));
      put(j, PassKind::I);
      if (flags_.eager_weight) put(j, PassKind::W);
    }
  }

  ScheduleTable table() {
    std::vector<std::int32_t> placement(static_cast<std::size_t>(S_));
    for (int j = 0; j < S_; ++j)
      placement[static_cast<std::size_t>(j)] = j;
    TableBuilder builder(S_, S_, M_, std::move(placement), static_cast<std::int64_t>(ops_.size()));
    for (int j = 0; j < S_; ++j) {
      const auto begin = static_cast<std::size_t>(j) * 3 * static_cast<std::size_t>(M_);
      for (std::size_t k = 0; k < 3 * static_cast<std::size_t>(M_); ++k)
        builder.push(ops_[begin + k]);
      builder.end_row();
    }
    return std::move(builder).finish();
  }

  const ZeroBubbleProblem& p_;
  ZeroBubbleFlags flags_;
  int S_, M_;
  std::vector<Stage> stages_;
  std::vector<double> end_f_, end_i_;  // end time of F / I of (stage, microbatch)
  std::vector<Op> ops_;                // row j at [3Mj, 3M(j+1))
};

}  // namespace

void validate(const ZeroBubbleProblem& p) {
  const auto fail = [](const std::string& what) {
    throw ParamError("zero-bubble heuristic: " + what);
  };
  if (p.devices < 1 || p.devices > kMaxDevices) fail("devices must be from 1 to 65535");
  if (p.microbatches < 1 || p.microbatches > kMaxMicrobatches) {
    fail("microbatches must be from 1 to 16777216");
  }
  if (3 * std::int64_t{p.devices} * p.microbatches > kMaxOps) fail("too many ops for a table");
  const auto n = static_cast<std::size_t>(p.devices);
  if (p.forward.size() != n || p.input_grad.size() != n || p.weight_grad.size() != n) {
    fail("need one F, I and W time per stage");
  }
  for (std::size_t j = 0; j < n; ++j) {
    for (double t : {p.forward[j], p.input_grad[j], p.weight_grad[j]}) {
      if (!(t >= 0.0) || !std::isfinite(t)) fail("pass times must be finite and non-negative");
    }
  }
  if (!(p.comm >= 0.0) || !std::isfinite(p.comm)) fail("the transfer delay must be >= 0");
  if (!(p.memory_limit >= 1.0) || !std::isfinite(p.memory_limit)) {
    fail("the memory limit must be at least 1 M_a (one microbatch in flight)");
  }
  if (!(p.input_grad_frees >= 0.0 && p.input_grad_frees <= 1.0)) {
    fail("input_grad_frees must lie in [0, 1]");
  }
}

ZeroBubbleProblem ZeroBubbleProblem::uniform(std::int32_t devices, std::int32_t microbatches,
                                             double forward, double input_grad, double weight_grad,
                                             double memory_limit) {
  ZeroBubbleProblem p;
  p.devices = devices;
  p.microbatches = microbatches;
  const auto n = static_cast<std::size_t>(std::max(devices, 0));
  p.forward.assign(n, forward);
  p.input_grad.assign(n, input_grad);
  p.weight_grad.assign(n, weight_grad);
  p.memory_limit = memory_limit;
  return p;
}

std::vector<ZeroBubbleFlags> ZeroBubbleFlags::all() {
  std::vector<ZeroBubbleFlags> out;
  for (bool eager : {false, true}) {
    for (bool warmup : {true, false}) {
      for (bool gap : {true, false})
        out.push_back({warmup, gap, eager});
    }
  }
  return out;
}

ZeroBubbleSchedule zero_bubble_schedule(const ZeroBubbleProblem& problem,
                                        const ZeroBubbleFlags& flags) {
  validate(problem);
  return Heuristic(problem, flags).run();
}

ZeroBubbleSchedule best_zero_bubble_schedule(const ZeroBubbleProblem& problem) {
  validate(problem);
  ZeroBubbleSchedule best;
  bool have = false;
  for (const auto& flags : ZeroBubbleFlags::all()) {
    auto candidate = Heuristic(problem, flags).run();
    if (!have || candidate.max_span < best.max_span - kEpsilon ||
        (candidate.max_span <= best.max_span + kEpsilon &&
         candidate.makespan < best.makespan - kEpsilon)) {
      best = std::move(candidate);
      have = true;
    }
  }
  return best;
}

}  // namespace pipetab
