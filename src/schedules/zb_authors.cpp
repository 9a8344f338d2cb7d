// The zero-bubble authors' greedy scheduler (Qi, Wan, Huang, Lin — ICLR 2024 §3; its
// implementation `manual_order` in sail-sg/zero-bubble-pipeline-parallelism,
// scheduler/zb.py, read at 39f2c18; this is pipetab's own code of the same plan). It differs
// from zb_heuristic.cpp above all in its warm-up:
//  - round 0 places F(0) on every stage, then, from the last stage up, as many more forwards on
//    each stage as fit (memory) before the I(0) arriving from below — with
//    `allow_bubble_before_first_i` one more may end after it arrives — and then lowers each
//    stage's count below the stage above it, except where the stage would have all its forwards
//    (at M = S a stage may hold every microbatch, which the other heuristic never does);
//  - round i places one forward per stage where its successor has caught up (with
//    `prioritize_i`, a stage two or more forwards ahead of its successor skips its forward when
//    the successor's next F and I would come sooner), never more than the stage below, then
//    I(i) from the last stage up;
//  - before a pass that waits for a neighbour, pending W fill the wait while they end before the
//    input arrives; one more W that overruns it is placed when the wait is longer than the
//    largest bubble any stage has had so far (always with `no_bubble_greedy`);
//  - pending W free memory before a pass that would exceed the limit; the first stage runs all
//    its W before each I once its forwards are done; leftover W end every row.
// Times are predicted with the given costs and transfer delay. The authors keep the best of the
// eight flag combinations by the longest device span.
#include <algorithm>
#include <optional>

#include "common.hpp"

#include "pipetab/error.hpp"
#include "pipetab/schedules/zero_bubble.hpp"

namespace pipetab {
namespace {

using schedules::kEpsilon;

class AuthorsScheduler {
 public:
  AuthorsScheduler(const ZeroBubbleProblem& problem, const ZeroBubbleAuthorsFlags& flags)
      : p_(problem),
        flags_(flags),
        S_(problem.devices),
        M_(problem.microbatches),
        stages_(static_cast<std::size_t>(S_)),
        end_(3 * static_cast<std::size_t>(S_) * static_cast<std::size_t>(M_), 0.0),
        rows_(static_cast<std::size_t>(S_)) {}

  // Empty when a pass cannot be placed within the memory limit.
  std::optional<ZeroBubbleSchedule> run() {
    for (int i = 0; i < M_; ++i) {
      if (!(i == 0 ? first_round() : round(i))) return std::nullopt;
    }
    for (int j = 0; j < S_; ++j) {
      while (stage(j).w < M_)
        put(j, PassKind::W);
    }
    ZeroBubbleSchedule out;
    for (int j = 0; j < S_; ++j) {
      const Stage& s = stage(j);
      out.makespan = std::max(out.makespan, s.free);
      // The authors' span: from the start of F(0) to the end of the last W.
      out.max_span = std::max(out.max_span, s.free - (end(PassKind::F, j, 0) - p_.forward[idx(j)]));
    }
    out.table = table();
    return out;
  }

 private:
  struct Stage {
    std::int32_t f = 0, b = 0, w = 0;
    double free = 0.0;    // when its last placed pass ends
    double memory = 0.0;  // M_a held
    double bubble = 0.0;  // waits so far, after its first forward
  };

  static std::size_t idx(int j) { return static_cast<std::size_t>(j); }
  Stage& stage(int j) { return stages_[idx(j)]; }
  double& end(PassKind kind, int j, int microbatch) {
    const std::size_t k = kind == PassKind::F ? 0 : kind == PassKind::I ? 1 : 2;
    return end_[(k * idx(S_) + idx(j)) * static_cast<std::size_t>(M_) +
                static_cast<std::size_t>(microbatch)];
  }
  double cost(int j, PassKind kind) const {
    return kind == PassKind::F   ? p_.forward[idx(j)]
           : kind == PassKind::I ? p_.input_grad[idx(j)]
                                 : p_.weight_grad[idx(j)];
  }
  double memory(PassKind kind) const {
    return kind == PassKind::F   ? 1.0
           : kind == PassKind::I ? -p_.input_grad_frees
                                 : -(1.0 - p_.input_grad_frees);
  }
  double max_bubble() const {
    double m = 0.0;
    for (const auto& s : stages_)
      m = std::max(m, s.bubble);
    return m;
  }

  void put(int j, PassKind kind) {
    Stage& s = stage(j);
    const std::int32_t microbatch = kind == PassKind::F ? s.f : kind == PassKind::I ? s.b : s.w;
    const double alone = s.free + cost(j, kind);
    double finish = alone;
    if (kind == PassKind::F && j > 0)
      finish = std::max(finish, end(PassKind::F, j - 1, microbatch) + p_.comm + cost(j, kind));
    if (kind == PassKind::I && j + 1 < S_)
      finish = std::max(finish, end(PassKind::I, j + 1, microbatch) + p_.comm + cost(j, kind));
    if (s.f > 0) s.bubble += finish - alone;
    s.free = finish;
    end(kind, j, microbatch) = finish;
    s.memory += memory(kind);
    rows_[idx(j)].push_back(Op::make(kind, microbatch, j));
    (kind == PassKind::F ? s.f : kind == PassKind::I ? s.b : s.w) += 1;
  }

  // Pending W free memory until `kind` fits; false if they cannot.
  bool make_room(int j, PassKind kind) {
    Stage& s = stage(j);
    while (s.memory + memory(kind) > p_.memory_limit + kEpsilon) {
      if (s.w >= s.b) return false;
      put(j, PassKind::W);
    }
    return true;
  }

  // Pending W fill the wait for an input arriving at `arrival`.
  void fill(int j, double arrival) {
    Stage& s = stage(j);
    while (s.w < s.b && s.free + cost(j, PassKind::W) <= arrival)
      put(j, PassKind::W);
    if (s.w < s.b && s.free < arrival) {
      if (arrival - s.free <= max_bubble() - s.bubble) {
        if (flags_.no_bubble_greedy) put(j, PassKind::W);
      } else {
        put(j, PassKind::W);
      }
    }
  }

  bool first_round() {
    for (int j = 0; j < S_; ++j)
      put(j, PassKind::F);
    std::vector<std::int32_t> extra(idx(S_), 0);
    double arrival = 0.0;  // when I(0) of the stage below ends
    for (int j = S_ - 1; j >= 0; --j) {
      const Stage& s = stage(j);
      if (j == S_ - 1) {
        arrival = end(PassKind::F, j, 0) + cost(j, PassKind::I);
        continue;
      }
      double held = s.memory, at = s.free;
      auto& n = extra[idx(j)];
      while (s.f + n < M_ && held + memory(PassKind::F) <= p_.memory_limit + kEpsilon) {
        if (flags_.allow_bubble_before_first_i ? at + cost(j, PassKind::F) > arrival + p_.comm
                                               : at >= arrival + p_.comm)
          break;
        held += memory(PassKind::F);
        at += cost(j, PassKind::F);
        ++n;
      }
      arrival = std::max(at, arrival + p_.comm) + cost(j, PassKind::I);
    }
    for (int j = 1; j < S_; ++j) {
      auto& n = extra[idx(j)];
      while (n > 0 && n >= extra[idx(j - 1)] && stage(j).f + n < M_)
        --n;
    }
    for (int j = 0; j < S_; ++j) {
      for (int k = 0; k < extra[idx(j)]; ++k)
        put(j, PassKind::F);
    }
    for (int j = S_ - 1; j >= 0; --j)
      put(j, PassKind::I);
    return true;
  }

  bool round(int i) {
    std::vector<std::int32_t> forward(idx(S_), 0);
    for (int j = 0; j < S_; ++j) {
      Stage& s = stage(j);
      if (s.f >= M_) continue;
      if (j + 1 < S_ && s.f >= stage(j + 1).f + 2 && flags_.prioritize_i) {
        const Stage& next = stage(j + 1);
        const double next_pair =
            next.free + cost(j + 1, PassKind::F) + cost(j + 1, PassKind::I) + p_.comm;
        if (s.free >= next_pair) continue;
        double w_cost = 0.0, held = s.memory + memory(PassKind::F);
        for (std::int32_t k = 0; held > p_.memory_limit + kEpsilon && s.w + k < s.b; ++k) {
          w_cost += cost(j, PassKind::W);
          held += memory(PassKind::W);
        }
        if (s.free + cost(j, PassKind::F) + w_cost <= next_pair) {
          forward[idx(j)] = 1;
          continue;
        }
        if (next_pair - s.free <= max_bubble() - s.bubble) continue;
      }
      forward[idx(j)] = 1;
    }
    for (int j = S_ - 2; j >= 0; --j)
      forward[idx(j)] = std::min(forward[idx(j)], forward[idx(j) + 1]);
    for (int j = 0; j < S_; ++j) {
      if (forward[idx(j)] == 0) continue;
      if (!make_room(j, PassKind::F)) return false;
      if (j > 0) fill(j, end(PassKind::F, j - 1, stage(j).f) + p_.comm);
      put(j, PassKind::F);
    }
    for (int j = S_ - 1; j >= 0; --j) {
      if (!make_room(j, PassKind::I)) return false;
      if (j + 1 < S_) fill(j, end(PassKind::I, j + 1, i) + p_.comm);
      if (j == 0 && stage(0).f == M_) {
        while (stage(0).w < stage(0).b)
          put(0, PassKind::W);
      }
      put(j, PassKind::I);
    }
    return true;
  }

  ScheduleTable table() {
    std::vector<std::int32_t> placement(idx(S_));
    for (int j = 0; j < S_; ++j)
      placement[idx(j)] = j;
    TableBuilder builder(S_, S_, M_, std::move(placement), 3 * std::int64_t{S_} * std::int64_t{M_});
    for (const auto& row : rows_) {
      for (const Op& op : row)
        builder.push(op);
      builder.end_row();
    }
    return std::move(builder).finish();
  }

  const ZeroBubbleProblem& p_;
  ZeroBubbleAuthorsFlags flags_;
  int S_, M_;
  std::vector<Stage> stages_;
  std::vector<double> end_;  // [kind][stage][microbatch]
  std::vector<std::vector<Op>> rows_;
};

}  // namespace

std::vector<ZeroBubbleAuthorsFlags> ZeroBubbleAuthorsFlags::all() {
  std::vector<ZeroBubbleAuthorsFlags> out;
  for (bool bubble : {true, false})
    for (bool prioritize : {true, false})
      for (bool greedy : {true, false})
        out.push_back({bubble, prioritize, greedy});
  return out;
}

std::optional<ZeroBubbleSchedule> zero_bubble_authors_schedule(
    const ZeroBubbleProblem& problem, const ZeroBubbleAuthorsFlags& flags) {
  validate(problem);
  return AuthorsScheduler(problem, flags).run();
}

std::optional<ZeroBubbleSchedule> best_zero_bubble_authors_schedule(
    const ZeroBubbleProblem& problem) {
  std::optional<ZeroBubbleSchedule> best;
  for (const auto& flags : ZeroBubbleAuthorsFlags::all()) {
    auto candidate = zero_bubble_authors_schedule(problem, flags);
    if (candidate && (!best || candidate->max_span < best->max_span - kEpsilon))
      best = std::move(candidate);
  }
  return best;
}

}  // namespace pipetab
