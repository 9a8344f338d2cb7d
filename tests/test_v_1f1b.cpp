// v-1f1b, the zero-bubble authors' V-shape 1F1B (scheduler/v1f1b.py, `--enable-1f1b-v`), against
// its output: tests/data/v-1f1b-orders.jsonl holds the orders their create_schedule produces
// (made by tests/data/v-1f1b-orders.py from their file) for S 1..8 with M 1..4S, S = 12, 16 on
// 12 values of M from 1 to 4S, and S = 32 at M = 32, 33, 64. pipetab's generator must give every
// one exactly. Then the published peaks (reference schedules.md §11: 3 M_a at S = 4, 6 at S = 8),
// the measured peak form over S 1..16, M 1..64, the placement, the figures docs/schedules.md
// quotes, and the rejections.
#include <algorithm>
#include <fstream>
#include <string>
#include <utility>

#include "helpers.hpp"
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "pipetab/error.hpp"
#include "pipetab/table/memory.hpp"
#include "pipetab/table/timing.hpp"
#include "pipetab/table/validate.hpp"

namespace pipetab {
namespace {

double max_peak(const ScheduleTable& t) {
  const auto peaks = activation_peaks(t);
  return *std::max_element(peaks.begin(), peaks.end());
}

std::string row_text(const ScheduleTable& t, int device) {
  std::string out;
  for (const Op& op : t.row(device))
    out += (out.empty() ? "" : " ") + to_string(op);
  return out;
}

TEST(V1F1B, TheirOrdersOnTheWholeGrid) {
  std::ifstream in(std::string(PIPETAB_SOURCE_DIR) + "/tests/data/v-1f1b-orders.jsonl");
  ASSERT_TRUE(in) << "tests/data/v-1f1b-orders.jsonl";
  std::string line;
  int cases = 0, largest_S = 0;
  while (std::getline(in, line)) {
    const auto j = nlohmann::json::parse(line);
    const int S = j["S"], M = j["M"];
    const std::string label = "S=" + std::to_string(S) + " M=" + std::to_string(M);
    const auto rows = j["rows"].get<std::vector<std::string>>();
    ASSERT_EQ(rows.size(), static_cast<std::size_t>(S)) << label;
    const auto t = test::make("v-1f1b", test::sm(S, M));
    ASSERT_TRUE(validate(t).ok()) << label;
    for (int d = 0; d < S; ++d)
      EXPECT_EQ(row_text(t, d), rows[static_cast<std::size_t>(d)]) << label << " device " << d;
    ++cases;
    largest_S = std::max(largest_S, S);
  }
  EXPECT_EQ(cases, 171);
  EXPECT_EQ(largest_S, 32);
}

// Reference schedules.md §11 ("1F1B-V", marked [S]): "peaks at 3 (S=4) and 6 (S=8) M_a". A chunk
// holds M_a/2 per microbatch; F allocates, B frees.
TEST(V1F1B, PublishedPeaks) {
  for (int M = 4; M <= 64; ++M)
    EXPECT_EQ(max_peak(test::make("v-1f1b", test::sm(4, M))), 3.0) << "S=4 M=" << M;
  for (int M = 8; M <= 64; ++M)
    EXPECT_EQ(max_peak(test::make("v-1f1b", test::sm(8, M))), 6.0) << "S=8 M=" << M;
  // Every device reaches it at S = 4, M = 8.
  EXPECT_EQ(activation_peaks(test::make("v-1f1b", test::sm(4, 8))),
            (std::vector<double>{3, 3, 3, 3}));
}

// Measured, not published: the largest peak is min(M, ⌊2S/3⌋ + 1) M_a, every S 1..16, M 1..64
// (1F1B's is min(M, S)).
TEST(V1F1B, PeakForm) {
  for (int S = 1; S <= 16; ++S) {
    for (int M = 1; M <= 64; ++M) {
      EXPECT_EQ(max_peak(test::make("v-1f1b", test::sm(S, M))), std::min(M, 2 * S / 3 + 1))
          << "S=" << S << " M=" << M;
    }
  }
}

TEST(V1F1B, VPlacementAndWholeBackwards) {
  const auto t = test::make("v-1f1b", test::sm(4, 8));
  EXPECT_EQ(t.stages, 8);
  EXPECT_EQ(t.placement.device, (std::vector<std::int32_t>{0, 1, 2, 3, 3, 2, 1, 0}));
  for (const Op& op : t.ops) {
    EXPECT_FALSE(op.is_pair());
    EXPECT_TRUE(op.first().kind == PassKind::F || op.first().kind == PassKind::B);
  }
  // The figures docs/schedules.md quotes (F = 1, B = 2 per device share).
  EXPECT_DOUBLE_EQ(idealized_timing(t, Costs{}).makespan, 31.5);
  EXPECT_DOUBLE_EQ(idealized_timing(test::make("v-1f1b", test::sm(8, 16)), Costs{}).makespan, 64.5);
  // Every device idles the same whatever M >= S: 7.5 at S = 4, 16.5 at S = 8.
  for (const auto& [S, idle] : {std::pair{4, 7.5}, std::pair{8, 16.5}}) {
    for (int M = S; M <= 64; ++M) {
      const auto timing = idealized_timing(test::make("v-1f1b", test::sm(S, M)), Costs{});
      for (int d = 0; d < S; ++d) {
        EXPECT_DOUBLE_EQ(timing.makespan - timing.busy[static_cast<std::size_t>(d)], idle)
            << "S=" << S << " M=" << M << " device " << d;
      }
    }
  }
}

TEST(V1F1B, RejectsOptionsAndOversizedGrids) {
  auto p = test::sm(4, 8);
  p.chunks = 2;
  EXPECT_THROW(test::make("v-1f1b", p), ParamError);
  try {
    test::make("v-1f1b", test::sm(4000, 1));
    ADD_FAILURE() << "expected a ParamError";
  } catch (const ParamError& e) {
    EXPECT_NE(std::string(e.what()).find("v-1f1b: S = 4000, M = 1: the slot grid of"),
              std::string::npos)
        << e.what();
  }
  EXPECT_NO_THROW(test::make("v-1f1b", test::sm(1, 1)));
}

}  // namespace
}  // namespace pipetab
