// The zero-bubble authors' V-shape scheduler (Qi et al., "Pipeline Parallelism with Controllable
// Memory", 2024; its implementation `try_v_schedule` in sail-sg/zero-bubble-pipeline-parallelism,
// scheduler/zbv.py, read at 39f2c18; this is pipetab's own code of the same rules). Device d holds
// stages d and 2S−1−d. It plans for the given pass costs, transfer delay and memory limit:
//  - warm-up: F of the first chunk on every device; then, from the last device up, more first-
//    chunk forwards on the devices above while they fit and end before the returning second-
//    chunk forward arrives, then that second-chunk forward; then forwards from the bottom up,
//    alternating the chunks, until every device has as many as the one above;
//  - 2M rounds: free memory with pending W where an input gradient would not fit; one input
//    gradient per device (the second chunk's where its successor's has arrived, bottom-up,
//    then the first chunk's top-down), pending W filling the wait before it, and one more W when
//    the wait exceeds the largest bubble so far (always for the second chunk, with `fill_b` for
//    the first); then one forward per device where its input has arrived, likewise with
//    `fill_f`;
//  - leftover W end every row; then the plan is redone with every device allowed the bubble of
//    the worst one, while that lowers the worst bubble.
// The authors keep the best of the four fill_b × fill_f combinations by the largest bubble.
#include <algorithm>
#include <array>
#include <deque>
#include <optional>

#include "common.hpp"

#include "pipetab/error.hpp"
#include "pipetab/schedules/zero_bubble.hpp"

namespace pipetab {
namespace {

class VScheduler {
 public:
  // Per-chunk pass costs; memory in M_a (a chunk forward holds half a device share).
  VScheduler(const ZeroBubbleProblem& p, const ZeroBubbleVFlags& flags)
      : S_(p.devices), M_(p.microbatches), flags_(flags), comm_(p.comm) {
    cost_ = {*std::max_element(p.forward.begin(), p.forward.end()),
             *std::max_element(p.input_grad.begin(), p.input_grad.end()),
             *std::max_element(p.weight_grad.begin(), p.weight_grad.end())};
    mem_ = {0.5, -0.5 * p.input_grad_frees, -0.5 * (1.0 - p.input_grad_frees)};
    limit_ = p.memory_limit;
  }

  struct Plan {
    std::vector<std::vector<std::array<std::int32_t, 3>>> order;  // per device: cat, chunk, mb
    std::vector<double> end;
    double max_bubble = 0.0;
  };

  std::optional<Plan> run(const std::vector<double>& approved) {
    Plan plan;
    if (!attempt(approved, plan)) return std::nullopt;
    const double approved_max = *std::max_element(approved.begin(), approved.end());
    if (approved_max < 0 || plan.max_bubble < approved_max) {
      const std::vector<double> next = bubble_;  // the next attempt overwrites bubble_
      auto again = run(next);
      if (again && again->max_bubble < plan.max_bubble) return again;
    }
    return plan;
  }

  ScheduleTable table(const Plan& plan) const {
    TableBuilder builder(S_, 2 * S_, M_, schedules::zigzag_placement(S_, 2 * S_),
                         6 * std::int64_t{S_} * std::int64_t{M_});
    for (int d = 0; d < S_; ++d) {
      for (const auto& [cat, chunk, mb] : plan.order[static_cast<std::size_t>(d)]) {
        // Forward chunk 0 is stage d, chunk 1 stage 2S−1−d; the backward passes count their
        // chunks from the turn of the V: chunk 0 is stage 2S−1−d.
        const bool down = cat == 0 ? chunk == 0 : chunk == 1;
        const int stage = down ? d : 2 * S_ - 1 - d;
        const PassKind kind = cat == 0 ? PassKind::F : cat == 1 ? PassKind::I : PassKind::W;
        builder.push(Op::make(kind, mb, stage));
      }
      builder.end_row();
    }
    return std::move(builder).finish();
  }

 private:
  std::size_t id(int cat, int chunk, int stage, int mb) const {
    return ((static_cast<std::size_t>(cat) * 2 + static_cast<std::size_t>(chunk)) *
                static_cast<std::size_t>(S_) +
            static_cast<std::size_t>(stage)) *
               static_cast<std::size_t>(M_) +
           static_cast<std::size_t>(mb);
  }
  // The authors index a missing predecessor as -1, which Python reads as the last node.
  double end_at(long long node) const {
    return node < 0 ? end_.back() : end_[static_cast<std::size_t>(node)];
  }
  int& count(int stage, int slot) {
    return count_[static_cast<std::size_t>(stage)][static_cast<std::size_t>(slot)];
  }
  double max_bubble(int stage) const {
    double m = bubble_max_;
    if (stage >= 0) {
      m = std::max(m, approved_max_ - (*approved_)[static_cast<std::size_t>(stage)]);
    }
    return m;
  }

  // Places the next pass (cat: 0 F, 1 I, 2 W) of `chunk` on `stage`; false when a rule of the
  // authors' code (a predecessor placed, the memory limit) does not hold.
  bool put(int cat, int chunk, int stage) {
    const auto s = static_cast<std::size_t>(stage);
    const int n = count(stage, cat * 2 + chunk);
    if (n >= M_) return false;
    if (memory_[s] + mem_[static_cast<std::size_t>(cat)] > limit_ + 1e-9) return false;
    const double alone = time_[s] + cost_[static_cast<std::size_t>(cat)];
    double finish = alone;
    if (cat > 0 || chunk > 0) {
      const int last = cat * 2 + chunk - 1;
      const std::size_t before =
          cat < 2 ? id(last / 2, last % 2, stage, n) : id(1, chunk, stage, n);
      if (end_[before] < 0) return false;
    }
    if (cat < 2) {
      const int from = chunk == 1 ? stage + 1 : stage - 1;
      if (from >= 0 && from < S_) {
        const double ready = end_[id(cat, chunk, from, n)];
        if (ready < 0) return false;
        finish = std::max(finish, ready + comm_ + cost_[static_cast<std::size_t>(cat)]);
      }
    }
    if (count(stage, 0) > 0) {
      bubble_[s] += finish - alone;  // finish >= alone: bubbles only grow, so their max is kept
      bubble_max_ = std::max(bubble_max_, bubble_[s]);
    }
    end_[id(cat, chunk, stage, n)] = finish;
    time_[s] = finish;
    memory_[s] += mem_[static_cast<std::size_t>(cat)];
    order_[s].push_back({cat, chunk, n});
    if (cat == 1) pending_[s].push_back(chunk);
    ++count(stage, cat * 2 + chunk);
    return true;
  }
  bool put_w(int stage) {
    auto& q = pending_[static_cast<std::size_t>(stage)];
    if (q.empty()) return false;
    const int chunk = q.front();
    q.pop_front();
    return put(2, chunk, stage);
  }
  // Pending W before a pass waiting for `node` (or -1).
  bool fill(int stage, long long node, bool overrun) {
    const auto s = static_cast<std::size_t>(stage);
    while (!pending_[s].empty() && node >= 0 && end_at(node) + comm_ >= time_[s] + cost_[2]) {
      if (!put_w(stage)) return false;
    }
    if (!pending_[s].empty() && end_at(node) + comm_ - time_[s] > max_bubble(stage) - bubble_[s] &&
        overrun) {
      if (!put_w(stage)) return false;
    }
    return true;
  }

  bool attempt(const std::vector<double>& approved, Plan& plan) {
    const auto S = static_cast<std::size_t>(S_);
    count_.assign(S, {});
    end_.assign(6 * S * static_cast<std::size_t>(M_), -1.0);
    time_.assign(S, 0.0);
    memory_.assign(S, 0.0);
    bubble_.assign(S, 0.0);
    bubble_max_ = 0.0;
    pending_.assign(S, {});
    order_.assign(S, {});
    approved_ = &approved;
    approved_max_ = *std::max_element(approved.begin(), approved.end());

    for (int i = 0; i < S_; ++i) {
      if (!put(0, 0, i)) return false;
    }
    for (int i = S_ - 1; i >= 0; --i) {
      if (i == S_ - 1) {
        if (!put(0, 1, i)) return false;
        continue;
      }
      const double back = end_[id(0, 1, i + 1, 0)] + comm_;
      while (memory_[static_cast<std::size_t>(i)] + mem_[0] * (2 + 2 * i) <= limit_ + 1e-9 &&
             time_[static_cast<std::size_t>(i)] + cost_[0] <= back && count(i, 0) < M_) {
        for (int j = 0; j <= i; ++j) {
          if (!put(0, 0, j)) return false;
        }
      }
      if (!put(0, 1, i)) return false;
    }
    int chunk = 0;
    for (int i = 1; i < S_; ++i) {
      while (count(i, 0) + count(i, 1) < count(i - 1, 0) + count(i - 1, 1) ||
             (count(i, 1) <= count(i - 1, 1) && count(i - 1, 1) < M_)) {
        for (int j = S_ - 1; j >= i; --j) {
          if (count(j, chunk) < M_ && !put(0, chunk, j)) return false;
        }
        chunk = 1 - chunk;
      }
    }
    for (int round = 0; round < 2 * M_; ++round) {
      for (int i = 0; i < S_; ++i) {
        while (memory_[static_cast<std::size_t>(i)] + mem_[1] > limit_ + 1e-9) {
          if (!put_w(i)) return false;
        }
      }
      std::vector<int> b0, b1;
      for (int i = 0; i < S_; ++i) {
        if (count(i, 3) >= count(i, 2)) {
          b0.push_back(i);
        } else if (i == S_ - 1) {
          b1.push_back(i);
        } else if (end_[id(1, 1, i + 1, count(i, 3))] >= 0 || count(i, 2) >= M_) {
          b1.push_back(i);
        } else {
          b0.push_back(i);
        }
      }
      std::vector<std::pair<int, int>> ranks;
      for (auto it = b1.rbegin(); it != b1.rend(); ++it)
        ranks.emplace_back(*it, 1);
      for (int i : b0)
        ranks.emplace_back(i, 0);
      for (const auto& [i, c] : ranks) {
        long long node = -1;
        if (c == 1 && i < S_ - 1) node = static_cast<long long>(id(1, 1, i + 1, count(i, 3)));
        if (c == 0 && i > 0) node = static_cast<long long>(id(1, 0, i - 1, count(i, 2)));
        if (!fill(i, node, c == 1 || flags_.fill_b)) return false;
        if (!put(1, c, i)) return false;
      }
      for (int i = 0; i < S_; ++i) {
        if (count(i, 1) >= M_) continue;
        int item = -1;
        if (count(i, 1) >= count(i, 0)) {
          item = 0;
        } else if (i == S_ - 1) {
          item = 1;
        } else if (end_[id(0, 1, i + 1, count(i, 1))] >= 0) {
          item = 1;
        } else if (count(i, 0) < M_ && (i == 0 || end_[id(0, 0, i - 1, count(i, 0))] >= 0)) {
          item = 0;
        }
        if (item < 0) continue;
        while (memory_[static_cast<std::size_t>(i)] + mem_[0] > limit_ + 1e-9) {
          if (!put_w(i)) return false;
        }
        long long node = -1;
        if (item == 0 && i > 0) node = static_cast<long long>(id(0, 0, i - 1, count(i, 0)));
        if (item == 1 && i < S_ - 1) node = static_cast<long long>(id(0, 1, i + 1, count(i, 1)));
        if (!fill(i, node, flags_.fill_f)) return false;
        if (!put(0, item, i)) return false;
      }
    }
    for (int i = 0; i < S_; ++i) {
      while (!pending_[static_cast<std::size_t>(i)].empty()) {
        if (!put_w(i)) return false;
      }
    }
    plan.order = order_;
    plan.end = end_;
    plan.max_bubble = max_bubble(-1);
    return true;
  }

  int S_, M_;
  ZeroBubbleVFlags flags_;
  double comm_;
  std::array<double, 3> cost_{}, mem_{};
  double limit_ = 0.0;
  // One attempt's state.
  std::vector<std::array<int, 6>> count_;  // per device: F0 F1 I0 I1 W0 W1 placed
  std::vector<double> end_, time_, memory_, bubble_;
  double bubble_max_ = 0.0;               // the largest of bubble_
  std::vector<std::deque<int>> pending_;  // chunks of the I whose W are pending, in order
  std::vector<std::vector<std::array<std::int32_t, 3>>> order_;
  const std::vector<double>* approved_ = nullptr;
  double approved_max_ = -1.0;
};

}  // namespace

std::vector<ZeroBubbleVFlags> ZeroBubbleVFlags::all() {
  std::vector<ZeroBubbleVFlags> out;
  for (bool fill_b : {true, false})
    for (bool fill_f : {true, false})
      out.push_back({fill_f, fill_b});
  return out;
}

std::optional<ZeroBubbleSchedule> zero_bubble_v_schedule(const ZeroBubbleProblem& problem,
                                                         const ZeroBubbleVFlags& flags) {
  validate(problem);
  VScheduler scheduler(problem, flags);
  const auto plan =
      scheduler.run(std::vector<double>(static_cast<std::size_t>(problem.devices), -1.0));
  if (!plan) return std::nullopt;
  ZeroBubbleSchedule out;
  out.max_bubble = plan->max_bubble;
  out.makespan = *std::max_element(plan->end.begin(), plan->end.end());
  out.table = scheduler.table(*plan);
  return out;
}

std::optional<ZeroBubbleSchedule> best_zero_bubble_v_schedule(const ZeroBubbleProblem& problem) {
  std::optional<ZeroBubbleSchedule> best;
  for (const auto& flags : ZeroBubbleVFlags::all()) {
    auto candidate = zero_bubble_v_schedule(problem, flags);
    if (candidate && (!best || candidate->max_bubble < best->max_bubble)) {
      best = std::move(candidate);
    }
  }
  return best;
}

}  // namespace pipetab
