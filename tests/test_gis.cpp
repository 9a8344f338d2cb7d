// PipeOffload's generalized interleaved schedules (gis, gis-h): their orders against the paper's
// Figures 5 and 6, and their memory and bubble against its Table 1 and §3.1 over a grid.
#include <string>
#include <vector>

#include "helpers.hpp"
#include <gtest/gtest.h>

#include "pipetab/table/memory.hpp"
#include "pipetab/table/timing.hpp"
#include "pipetab/table/validate.hpp"

namespace pipetab {
namespace {

// A device's row as the paper's figures print it: each op's microbatch, counted from 1 (its
// stages are told apart by colour there, by letter in `pipetab show`).
std::string microbatches(const ScheduleTable& t, int device) {
  std::string out;
  for (const Op& op : t.row(device))
    out += (out.empty() ? "" : " ") + std::to_string(op.first().microbatch + 1);
  return out;
}

ScheduleParams figure(int chunks) {
  auto p = test::sm(4, 8);
  p.chunks = chunks;
  return p;
}

// Figure 5, bottom (GIS: split backward, adjusted warm-up), 4 devices, 2 stages each, 8
// microbatches; each backward printed as its I and its W. Device d runs 4 + 4 − d forwards first.
TEST(Gis, RowsAreThePapersFigureFive) {
  const auto t = test::make("gis", figure(2));
  EXPECT_EQ(
      microbatches(t, 0),
      "1 2 3 4 1 2 3 4 1 1 5 2 2 6 3 3 7 4 4 8 1 1 5 2 2 6 3 3 7 4 4 8 5 5 6 6 7 7 8 8 5 5 6 6 "
      "7 7 8 8");
  EXPECT_EQ(
      microbatches(t, 1),
      "1 2 3 4 1 2 3 1 1 4 2 2 5 3 3 6 4 4 7 1 1 8 2 2 5 3 3 6 4 4 7 5 5 8 6 6 7 7 8 8 5 5 6 6 "
      "7 7 8 8");
  EXPECT_EQ(
      microbatches(t, 2),
      "1 2 3 4 1 2 1 1 3 2 2 4 3 3 5 4 4 6 1 1 7 2 2 8 3 3 5 4 4 6 5 5 7 6 6 8 7 7 8 8 5 5 6 6 "
      "7 7 8 8");
  EXPECT_EQ(
      microbatches(t, 3),
      "1 2 3 4 1 1 1 2 2 2 3 3 3 4 4 4 5 1 1 6 2 2 7 3 3 8 4 4 5 5 5 6 6 6 7 7 7 8 8 8 5 5 6 6 "
      "7 7 8 8");
  // The W after its own I, each pass of one (microbatch, stage).
  for (int d = 0; d < 4; ++d) {
    const auto row = t.row(d);
    for (std::size_t i = 0; i + 1 < row.size(); ++i) {
      if (row[i].first().kind != PassKind::I) continue;
      EXPECT_EQ(row[i + 1].first().kind, PassKind::W);
      EXPECT_EQ(row[i + 1].first().microbatch, row[i].first().microbatch);
      EXPECT_EQ(row[i + 1].first().stage, row[i].first().stage);
    }
  }
}

// Figure 6, bottom (GIS-H: groups of ⌈S/2⌉ = 2).
TEST(Gis, HalfRowsAreThePapersFigureSix) {
  const auto t = test::make("gis-h", figure(2));
  EXPECT_EQ(
      microbatches(t, 0),
      "1 2 1 2 3 4 1 1 3 2 2 4 1 1 5 2 2 6 3 3 5 4 4 6 3 3 7 4 4 8 5 5 7 6 6 8 5 5 6 6 7 7 8 8 "
      "7 7 8 8");
  EXPECT_EQ(
      microbatches(t, 1),
      "1 2 1 2 3 1 1 4 2 2 3 1 1 4 2 2 5 3 3 6 4 4 5 3 3 6 4 4 7 5 5 8 6 6 7 5 5 8 6 6 7 7 8 8 "
      "7 7 8 8");
  EXPECT_EQ(
      microbatches(t, 2),
      "1 2 1 2 1 1 3 2 2 4 1 1 3 2 2 4 3 3 5 4 4 6 3 3 5 4 4 6 5 5 7 6 6 8 5 5 7 6 6 8 7 7 8 8 "
      "7 7 8 8");
  EXPECT_EQ(
      microbatches(t, 3),
      "1 2 1 1 1 2 2 2 3 1 1 4 2 2 3 3 3 4 4 4 5 3 3 6 4 4 5 5 5 6 6 6 7 5 5 8 6 6 7 7 7 8 8 8 "
      "7 7 8 8");
}

// §3.1 and Table 1, per stage times T_F, T_B (I), T_W: GIS holds d·v stage activations on
// device 0 (S M_a), interleaved 1F1B's d·v + d − 1; a group of g holds g(v − 1) + d; GIS's bubble
// is (d − 1)(T_F + T_B), GIS-H's (d even) adds (v − 1)·d/2·(T_F + T_B − T_W). Every layout valid.
TEST(Gis, PeaksAndBubblesAreTableOnesOverAGrid) {
  for (int S = 2; S <= 8; ++S)
    for (int v = 1; v <= 4; ++v)
      for (int g = (S + 1) / 2; g <= S; ++g) {
        if (v == 1 && g < S) continue;
        for (int M = g; M <= 4 * g; M += g) {
          if (M < S) continue;
          auto p = test::sm(S, M);
          p.chunks = v;
          p.group_size = g;
          const auto t = test::make("gis", p);
          EXPECT_TRUE(validate(t).ok()) << S << " " << v << " " << g << " " << M;
          const double peak = (static_cast<double>(g) * (v - 1) + S) / v;
          EXPECT_NEAR(activation_peaks(t)[0], peak, 1e-9) << S << " " << v << " " << g << " " << M;
          // F 1, I 2, W 1 per device share: a stage takes 1/v of each.
          const auto timing = idealized_timing(t, test::split_costs(1.0, 2.0, 1.0));
          const double tf = 1.0 / v, tb = 2.0 / v, tw = 1.0 / v;
          const double work = M * v * (tf + tb + tw);
          if (g == S) {
            EXPECT_NEAR(timing.makespan, work + (S - 1) * (tf + tb), 1e-9)
                << S << " " << v << " " << M;
          } else if (2 * g == S) {
            EXPECT_NEAR(timing.makespan,
                        work + (S - 1) * (tf + tb) + (v - 1) * (S / 2.0) * (tf + tb - tw), 1e-9)
                << S << " " << v << " " << M;
          }
        }
      }
  // Interleaved 1F1B's peak on device 0 is d·v + d − 1 stages: GIS saves d − 1 of them.
  auto p = test::sm(4, 8);
  p.chunks = 2;
  EXPECT_NEAR(
      activation_peaks(test::make("interleaved", p))[0] - activation_peaks(test::make("gis", p))[0],
      3.0 / 2.0, 1e-9);
}

TEST(Gis, RefusesGroupsOutsideItsRange) {
  auto p = test::sm(8, 16);
  p.chunks = 2;
  p.group_size = 3;
  EXPECT_NE(test::param_error([&] { test::make("gis", p); }).find("between ⌈S/2⌉ = 4 and S = 8"),
            std::string::npos);
  p.group_size = 6;
  EXPECT_NE(test::param_error([&] { test::make("gis", p); }).find("multiple of the group size"),
            std::string::npos);
  p.group_size.reset();
  p.microbatches = 6;
  EXPECT_NE(test::param_error([&] { test::make("gis-h", p); }).find("multiple"), std::string::npos);
}

}  // namespace
}  // namespace pipetab
