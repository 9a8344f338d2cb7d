// The zero-bubble family with one stage per device: exact orders of reference schedules.md §16,
// the numbers of §15.2 and §7, and properties of the zero-bubble heuristic over grids of
// sizes, costs, transfer delays and memory limits.

#include "helpers.hpp"
#include <gtest/gtest.h>

#include "pipetab/error.hpp"
#include "pipetab/schedules/zero_bubble.hpp"
#include "pipetab/table/memory.hpp"
#include "pipetab/table/timing.hpp"
#include "pipetab/table/validate.hpp"

namespace pipetab {
namespace {

void expect_rows(const ScheduleTable& t, const std::vector<std::string>& rows) {
  ASSERT_EQ(t.devices, static_cast<int>(rows.size()));
  for (int d = 0; d < t.devices; ++d)
    EXPECT_EQ(test::row_tokens(t, d), test::zero_bubble_row(rows[static_cast<std::size_t>(d)], d))
        << "device " << d;
}

TEST(ZeroBubble, ZbH1ExactS4M8) {
  expect_rows(test::make("zb-h1", test::sm(4, 8)),
              {"F0 F1 F2 F3 B0 W0 F4 B1 W1 F5 B2 W2 F6 B3 W3 F7 B4 W4 B5 W5 B6 W6 B7 W7",
               "F0 F1 F2 B0 F3 B1 W0 F4 B2 W1 F5 B3 W2 F6 B4 W3 F7 B5 W4 B6 W5 B7 W6 W7",
               "F0 F1 B0 F2 B1 F3 B2 W0 F4 B3 W1 F5 B4 W2 F6 B5 W3 F7 B6 W4 B7 W5 W6 W7",
               "F0 B0 F1 B1 F2 B2 F3 B3 W0 F4 B4 W1 F5 B5 W2 F6 B6 W3 F7 B7 W4 W5 W6 W7"});
}

TEST(ZeroBubble, ZbH2IsTheHeuristicOrderAtLimit2SMinus1) {
  // Reference §16 "ZB-auto (zb.py heuristic) S=4 M=8, memory limit 2S-1=7".
  expect_rows(test::make("zb-h2", test::sm(4, 8)),
              {"F0 F1 F2 F3 F4 F5 F6 B0 W0 F7 B1 W1 B2 W2 B3 W3 B4 W4 B5 W5 B6 W6 B7 W7",
               "F0 F1 F2 F3 F4 B0 F5 B1 F6 B2 W0 F7 B3 B4 W1 W2 B5 B6 W3 W4 B7 W5 W6 W7",
               "F0 F1 F2 B0 F3 B1 F4 B2 F5 B3 F6 B4 W0 F7 B5 B6 W1 W2 B7 W3 W4 W5 W6 W7",
               "F0 B0 F1 B1 F2 B2 F3 B3 F4 B4 F5 B5 F6 B6 W0 F7 B7 W1 W2 W3 W4 W5 W6 W7"});
}

TEST(ZeroBubble, OneFOneBSplitExactS4M8) {
  // Reference §16 1F1B S=4 M=8 with every BW split into B (= our I) and W.
  expect_rows(test::make("1f1b-split", test::sm(4, 8)),
              {"F0 F1 F2 F3 B0 W0 F4 B1 W1 F5 B2 W2 F6 B3 W3 F7 B4 W4 B5 W5 B6 W6 B7 W7",
               "F0 F1 F2 B0 W0 F3 B1 W1 F4 B2 W2 F5 B3 W3 F6 B4 W4 F7 B5 W5 B6 W6 B7 W7",
               "F0 F1 B0 W0 F2 B1 W1 F3 B2 W2 F4 B3 W3 F5 B4 W4 F6 B5 W5 F7 B6 W6 B7 W7",
               "F0 B0 W0 F1 B1 W1 F2 B2 W2 F3 B3 W3 F4 B4 W4 F5 B5 W5 F6 B6 W6 F7 B7 W7"});
}

struct Measured {
  double makespan, span, bubble_a, bubble_b;
  std::vector<double> peaks;
};

Measured measure(const ScheduleTable& t, const Costs& costs) {
  const auto timing = idealized_timing(t, costs);
  double span = 0;
  for (int d = 0; d < t.devices; ++d) {
    const auto i = static_cast<std::size_t>(d);
    span = std::max(span, timing.last_end[i] - timing.first_start[i]);
  }
  return {timing.makespan, span, span_bubble_ratio(timing), bubble_ratio(timing),
          activation_peaks(t)};
}

TEST(ZeroBubble, Reference15_2) {
  // schedule, makespan, longest span, bubble A, bubble B, peaks (F = B = W = 1, S=4, M=8).
  const auto zb_h1 = measure(test::make("zb-h1", test::sm(4, 8)), test::split_costs(1, 1, 1));
  EXPECT_EQ(zb_h1.makespan, 27);
  EXPECT_EQ(zb_h1.span, 27);
  EXPECT_NEAR(zb_h1.bubble_a, 0.1111, 5e-5);
  EXPECT_NEAR(zb_h1.bubble_b, 0.1111, 5e-5);
  EXPECT_EQ(zb_h1.peaks, (std::vector<double>{4, 4, 4, 4}));

  const auto zb_h2 = measure(test::make("zb-h2", test::sm(4, 8)), test::split_costs(1, 1, 1));
  EXPECT_EQ(zb_h2.makespan, 27);
  EXPECT_EQ(zb_h2.span, 24);
  EXPECT_EQ(zb_h2.bubble_a, 0.0);
  EXPECT_NEAR(zb_h2.bubble_b, 0.1111, 5e-5);
  EXPECT_EQ(zb_h2.peaks, (std::vector<double>{7, 7, 7, 7}));

  // "ZB-auto mem=S (ZB-1p)": the heuristic at limit S gives ZB-H1's makespan and peaks.
  const auto one_p = best_zero_bubble_schedule(ZeroBubbleProblem::uniform(4, 8, 1, 1, 1, 4));
  const auto zb_1p = measure(one_p.table, test::split_costs(1, 1, 1));
  EXPECT_EQ(zb_1p.makespan, 27);
  EXPECT_EQ(zb_1p.span, 27);
  EXPECT_EQ(zb_1p.peaks, (std::vector<double>{4, 4, 4, 4}));
}

TEST(ZeroBubble, ZbH1Reference7) {
  // Reference §7(d): S=8, M=32, (F, B, W) = (1, 2, 1) gives makespan 142 = M(F+B+W) +
  // (S-1)(F+B-W).
  EXPECT_EQ(
      idealized_timing(test::make("zb-h1", test::sm(8, 32)), test::split_costs(1, 2, 1)).makespan,
      142);
}

TEST(ZeroBubble, InputGradFreesLowersTheCount) {
  // docs/design.md §4: I frees nothing by default (7 in flight on every ZB-H2 device). With half
  // freed by I: device 0 still holds its 7 warm-up forwards before its first I; device 3 runs
  // F0 I0 F1 I1 ... F6 I6 and holds 6 halves plus F6's whole activation, 4 M_a.
  const auto t = test::make("zb-h2", test::sm(4, 8));
  const auto full = activation_peaks(t);
  const auto half = activation_peaks(t, MemoryOptions{0.5});
  EXPECT_EQ(full, (std::vector<double>{7, 7, 7, 7}));
  EXPECT_EQ(half.front(), 7);
  EXPECT_EQ(half.back(), 4);
  for (std::size_t d = 0; d < full.size(); ++d)
    EXPECT_LE(half[d], full[d]) << d;
  // ZB-H1 with I freeing all: the count of 1F1B (every device d: min(S - d, M)).
  const auto h1 = activation_peaks(test::make("zb-h1", test::sm(4, 8)), MemoryOptions{1.0});
  EXPECT_EQ(h1, (std::vector<double>{4, 3, 2, 1}));
}

TEST(ZeroBubble, HeuristicAtLimitSIsZbH1) {
  // Reference §7 "[S] With unit costs, limit=S reproduces ZB-H1": here even the order.
  for (int S = 2; S <= 8; ++S) {
    const auto best =
        best_zero_bubble_schedule(ZeroBubbleProblem::uniform(S, 3 * S, 1, 1, 1, S)).table;
    EXPECT_EQ(idealized_timing(best, test::split_costs(1, 1, 1)).makespan,
              idealized_timing(test::make("zb-h1", test::sm(S, 3 * S)), test::split_costs(1, 1, 1))
                  .makespan)
        << S;
  }
}

TEST(ZeroBubbleHeuristic, GridOfLimitsCostsAndDelays) {
  struct CostCase {
    double F, I, W;
  };
  const CostCase costs[] = {{1, 1, 1}, {1, 2, 1}, {2, 1, 1}, {1, 1.5, 0.5}, {1, 0.5, 2}};
  int checked = 0;
  for (int S = 1; S <= 10; ++S) {
    for (int M = 1; M <= 40; M += (M < 12 ? 1 : 7)) {
      for (const double limit : {1.0, 1.5, 2.0, S * 1.0, 2.0 * S - 1, 3.0 * S}) {
        for (const auto& c : costs) {
          for (const double comm : {0.0, 0.3}) {
            for (const double frees : {0.0, 0.5}) {
              auto p = ZeroBubbleProblem::uniform(S, M, c.F, c.I, c.W, std::max(limit, 1.0));
              p.comm = comm;
              p.input_grad_frees = frees;
              const std::string label = "S=" + std::to_string(S) + " M=" + std::to_string(M) +
                                        " limit=" + std::to_string(limit) +
                                        " comm=" + std::to_string(comm);
              const auto best = best_zero_bubble_schedule(p);
              const auto report = validate(best.table);
              ASSERT_TRUE(report.ok()) << label << ": " << to_string(report.issues.front());
              for (double peak : activation_peaks(best.table, MemoryOptions{frees}))
                ASSERT_LE(peak, p.memory_limit + 1e-9) << label;
              const auto timing = idealized_timing(best.table, test::split_costs(c.F, c.I, c.W));
              // Without transfer delay the heuristic's own timing is the table level's.
              if (comm == 0.0) {
                ASSERT_NEAR(best.makespan, timing.makespan, 1e-9) << label;
              }
              // The heuristic pays every transfer, the table level none: never later there.
              ASSERT_LE(timing.makespan, best.makespan + 1e-9) << label;
              ++checked;
            }
          }
        }
      }
    }
  }
  EXPECT_GT(checked, 10000);
}

TEST(ZeroBubbleHeuristic, EveryFlagCombinationIsValidAndDistinct) {
  const auto all = ZeroBubbleFlags::all();
  EXPECT_EQ(all.size(), 8u);
  for (std::size_t i = 0; i < all.size(); ++i) {
    for (std::size_t j = i + 1; j < all.size(); ++j)
      EXPECT_FALSE(all[i] == all[j]);
  }
  const auto p = ZeroBubbleProblem::uniform(6, 24, 1, 1.3, 0.7, 8);
  for (const auto& flags : all)
    EXPECT_TRUE(validate(zero_bubble_schedule(p, flags).table).ok());
}

TEST(ZeroBubbleHeuristic, RejectsImpossibleProblems) {
  auto expect_error = [](ZeroBubbleProblem p, const std::string& needle) {
    try {
      best_zero_bubble_schedule(p);
      ADD_FAILURE() << "accepted: " << needle;
    } catch (const ParamError& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  expect_error(ZeroBubbleProblem::uniform(4, 8, 1, 1, 1, 0.5), "at least 1 M_a");
  expect_error(ZeroBubbleProblem::uniform(4, 8, -1, 1, 1, 4), "non-negative");
  expect_error(ZeroBubbleProblem::uniform(0, 8, 1, 1, 1, 4), "devices");
  expect_error(ZeroBubbleProblem::uniform(4, 0, 1, 1, 1, 4), "microbatches");
  auto p = ZeroBubbleProblem::uniform(4, 8, 1, 1, 1, 4);
  p.forward.pop_back();
  expect_error(p, "one F, I and W time per stage");
  p = ZeroBubbleProblem::uniform(4, 8, 1, 1, 1, 4);
  p.comm = -1;
  expect_error(p, "transfer delay");
  p = ZeroBubbleProblem::uniform(4, 8, 1, 1, 1, 4);
  p.input_grad_frees = 2;
  expect_error(p, "input_grad_frees");
}

TEST(ZeroBubbleHeuristic, LargerLimitNeverSlowerForEqualCosts) {
  // More memory only allows more warm-up forwards; with equal costs the best span never grows.
  for (int S = 2; S <= 8; ++S) {
    double previous = std::numeric_limits<double>::infinity();
    for (int limit = 1; limit <= 2 * S; ++limit) {
      const auto best =
          best_zero_bubble_schedule(ZeroBubbleProblem::uniform(S, 4 * S, 1, 1, 1, limit));
      EXPECT_LE(best.max_span, previous + 1e-9) << "S=" << S << " limit=" << limit;
      previous = best.max_span;
    }
  }
}

}  // namespace
}  // namespace pipetab
