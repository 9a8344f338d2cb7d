// Exact small cases: the per-device orders of reference schedules.md §16 and PyTorch's vectors
// (pytorch-interop.md §3), the numbers of schedules.md §15.2, and a Hanayo case traced by hand.
#include <sstream>

#include "helpers.hpp"
#include <gtest/gtest.h>

#include "pipetab/table/memory.hpp"
#include "pipetab/table/timing.hpp"
#include "pipetab/table/validate.hpp"

namespace pipetab {
namespace {

// Reference notation → PyTorch tokens: "F3"/"BW3" (stage = device), "F3.s5" (stage 5),
// "F1d"/"BW1u" (Chimera: microbatch 1 of the down/up pipeline, numbered per pipeline; the down
// pipeline runs stage w on device w, the up pipeline stage D-1-w; pipetab numbers unit k's
// microbatches kD.., the first D/2 down).
std::string token(const std::string& ref, int device, int chimera_devices) {
  const auto op = test::parse_reference_op(ref);
  const char kind = op.kind == "BW" ? 'B' : op.kind[0];
  int microbatch = op.microbatch;
  int stage = device;
  if (op.suffix.rfind(".s", 0) == 0) stage = std::stoi(op.suffix.substr(2));
  if (op.suffix == "d" || op.suffix == "u") {
    const int D = chimera_devices, H = D / 2, pipeline = op.suffix == "u" ? 1 : 0;
    stage = pipeline == 0 ? device : D - 1 - device;
    microbatch = (microbatch / H) * D + pipeline * H + microbatch % H;
  }
  return std::to_string(stage) + kind + std::to_string(microbatch);
}

std::vector<std::string> reference_row(const std::string& line, int device,
                                       int chimera_devices = 0) {
  std::istringstream in(line);
  std::vector<std::string> out;
  for (std::string ref; in >> ref;)
    out.push_back(token(ref, device, chimera_devices));
  return out;
}

void expect_rows(const ScheduleTable& t, const std::vector<std::string>& reference,
                 int chimera_devices = 0) {
  ASSERT_EQ(t.devices, static_cast<int>(reference.size()));
  ASSERT_TRUE(validate(t).ok()) << to_string(validate(t).issues.front());
  for (int d = 0; d < t.devices; ++d) {
    EXPECT_EQ(test::row_tokens(t, d),
              reference_row(reference[static_cast<std::size_t>(d)], d, chimera_devices))
        << "device " << d;
  }
}

TEST(Exact, OneFOneB_S4_M8) {
  // schedules.md §16 (basic1f1b.py), identical to PyTorch's Schedule1F1B (pytorch-interop §3.1).
  expect_rows(test::make("1f1b", test::sm(4, 8)),
              {"F0 F1 F2 F3 BW0 F4 BW1 F5 BW2 F6 BW3 F7 BW4 BW5 BW6 BW7",
               "F0 F1 F2 BW0 F3 BW1 F4 BW2 F5 BW3 F6 BW4 F7 BW5 BW6 BW7",
               "F0 F1 BW0 F2 BW1 F3 BW2 F4 BW3 F5 BW4 F6 BW5 F7 BW6 BW7",
               "F0 BW0 F1 BW1 F2 BW2 F3 BW3 F4 BW4 F5 BW5 F6 BW6 F7 BW7"});
}

TEST(Exact, GPipe_S4_M8) {
  // All forwards, then all backwards last-in first-out (schedules.md §2(b)).
  std::vector<std::string> rows;
  for (int d = 0; d < 4; ++d)
    rows.emplace_back("F0 F1 F2 F3 F4 F5 F6 F7 BW7 BW6 BW5 BW4 BW3 BW2 BW1 BW0");
  expect_rows(test::make("gpipe", test::sm(4, 8)), rows);
}

TEST(Exact, Interleaved_S4_V2_M8) {
  auto p = test::sm(4, 8);
  p.chunks = 2;
  expect_rows(test::make("interleaved", p),
              {"F0.s0 F1.s0 F2.s0 F3.s0 F0.s4 F1.s4 F2.s4 F3.s4 F4.s0 F5.s0 F6.s0 BW0.s4 F7.s0 "
               "BW1.s4 F4.s4 BW2.s4 F5.s4 "
               "BW3.s4 F6.s4 BW0.s0 F7.s4 BW1.s0 BW2.s0 BW3.s0 BW4.s4 BW5.s4 BW6.s4 BW7.s4 BW4.s0 "
               "BW5.s0 BW6.s0 BW7.s0",
               "F0.s1 F1.s1 F2.s1 F3.s1 F0.s5 F1.s5 F2.s5 F3.s5 F4.s1 BW0.s5 F5.s1 BW1.s5 F6.s1 "
               "BW2.s5 F7.s1 BW3.s5 F4.s5 "
               "BW0.s1 F5.s5 BW1.s1 F6.s5 BW2.s1 F7.s5 BW3.s1 BW4.s5 BW5.s5 BW6.s5 BW7.s5 BW4.s1 "
               "BW5.s1 BW6.s1 BW7.s1",
               "F0.s2 F1.s2 F2.s2 F3.s2 F0.s6 F1.s6 F2.s6 BW0.s6 F3.s6 BW1.s6 F4.s2 BW2.s6 F5.s2 "
               "BW3.s6 F6.s2 BW0.s2 F7.s2 "
               "BW1.s2 F4.s6 BW2.s2 F5.s6 BW3.s2 F6.s6 BW4.s6 F7.s6 BW5.s6 BW6.s6 BW7.s6 BW4.s2 "
               "BW5.s2 BW6.s2 BW7.s2",
               "F0.s3 F1.s3 F2.s3 F3.s3 F0.s7 BW0.s7 F1.s7 BW1.s7 F2.s7 BW2.s7 F3.s7 BW3.s7 F4.s3 "
               "BW0.s3 F5.s3 BW1.s3 F6.s3 "
               "BW2.s3 F7.s3 BW3.s3 F4.s7 BW4.s7 F5.s7 BW5.s7 F6.s7 BW6.s7 F7.s7 BW7.s7 BW4.s3 "
               "BW5.s3 BW6.s3 BW7.s3"});
}

TEST(Exact, Interleaved_S2_V2_M4_MatchesPyTorch) {
  // pytorch-interop.md §3.3, ScheduleInterleaved1F1B pp=2, n=4, idle slots removed.
  auto p = test::sm(2, 4);
  p.chunks = 2;
  const auto t = test::make("interleaved", p);
  EXPECT_EQ(test::row_tokens(t, 0),
            (std::vector<std::string>{"0F0", "0F1", "2F0", "2F1", "0F2", "2B0", "0F3", "2B1", "2F2",
                                      "0B0", "2F3", "0B1", "2B2", "2B3", "0B2", "0B3"}));
  EXPECT_EQ(test::row_tokens(t, 1),
            (std::vector<std::string>{"1F0", "1F1", "3F0", "3B0", "3F1", "3B1", "1F2", "1B0", "1F3",
                                      "1B1", "3F2", "3B2", "3F3", "3B3", "1B2", "1B3"}));
}

TEST(Exact, Chimera_D4_N4) {
  expect_rows(test::make("chimera", test::sm(4, 4)),
              {"F0d F1d F0u BW0u F1u BW1u BW0d BW1d", "F0d F0u F1d F1u BW0u BW0d BW1u BW1d",
               "F0u F0d F1u F1d BW0d BW0u BW1d BW1u", "F0u F1u F0d BW0d F1d BW1d BW0u BW1u"},
              4);
}

TEST(Exact, Chimera_D4_N8_DirectConcatenation) {
  expect_rows(test::make("chimera", test::sm(4, 8)),
              {"F0d F1d F0u BW0u F1u BW1u BW0d F2d BW1d F3d F2u BW2u F3u BW3u BW2d BW3d",
               "F0d F0u F1d F1u BW0u BW0d BW1u BW1d F2d F2u F3d F3u BW2u BW2d BW3u BW3d",
               "F0u F0d F1u F1d BW0d BW0u BW1d BW1u F2u F2d F3u F3d BW2d BW2u BW3d BW3u",
               "F0u F1u F0d BW0d F1d BW1d BW0u F2u BW1u F3u F2d BW2d F3d BW3d BW2u BW3u"},
              4);
}

TEST(Exact, Chimera_D4_N8_ForwardDoubling) {
  auto p = test::sm(4, 8);
  p.variant = "doubling";
  expect_rows(test::make("chimera", p),
              {"F0d F1d F2d F3d F0u F1u BW0u F2u F3u BW1u BW0d BW2u BW1d BW3u BW2d BW3d",
               "F0d F1d F0u F1u F2d F3d F2u F3u BW0u BW0d BW1u BW1d BW2u BW2d BW3u BW3d",
               "F0u F1u F0d F1d F2u F3u F2d F3d BW0d BW0u BW1d BW1u BW2d BW2u BW3d BW3u",
               "F0u F1u F2u F3u F0d F1d BW0d F2d F3d BW1d BW0u BW2d BW1u BW3d BW2u BW3u"},
              4);
}

TEST(Exact, ChimeraPlacementAndPipelines) {
  const auto t = test::make("chimera", test::sm(4, 8));
  EXPECT_EQ(t.pipelines(), 2);
  EXPECT_EQ(t.placement.device, (std::vector<std::int32_t>{0, 1, 2, 3, 3, 2, 1, 0}));
  EXPECT_EQ(t.pipeline_of, (std::vector<std::uint8_t>{0, 0, 1, 1, 0, 0, 1, 1}));
}

TEST(Exact, ChimeraAsymKeepsOrderAndPairingWithUnequalStages) {
  auto p = test::sm(4, 8);
  p.split = "1:3";
  const auto asym = test::make("chimera-asym", p);
  const auto base = test::make("chimera", test::sm(4, 8));
  EXPECT_EQ(asym.ops, base.ops);
  EXPECT_EQ(asym.placement, base.placement);
  EXPECT_EQ(asym.stage_layers, (std::vector<std::int32_t>{1, 1, 3, 3, 1, 1, 3, 3}));
  // Every device still computes one early (1 part) and one late (3 parts) stage: 2 shares.
  const auto shares = asym.stage_shares();
  EXPECT_EQ(shares, (std::vector<double>{0.5, 0.5, 1.5, 1.5, 0.5, 0.5, 1.5, 1.5}));
  const auto timing = idealized_timing(asym, Costs{});
  for (double busy : timing.busy)
    EXPECT_DOUBLE_EQ(busy, 8 * 3.0);
}

TEST(Exact, HanayoByHand_S2_W1) {
  // List scheduling traced by hand (F = 1, B = 2 per chunk unit): stages 0..3 zig-zag over
  // devices 0, 1, 1, 0.
  auto p = test::sm(2, 2);
  p.waves = 1;
  const auto t = test::make("hanayo", p);
  EXPECT_EQ(t.placement.device, (std::vector<std::int32_t>{0, 1, 1, 0}));
  expect_rows(t, {"F0.s0 F1.s0 F0.s3 BW0.s3 F1.s3 BW1.s3 BW0.s0 BW1.s0",
                  "F0.s1 F0.s2 F1.s1 F1.s2 BW0.s2 BW0.s1 BW1.s2 BW1.s1"});
  EXPECT_EQ(idealized_timing(t, Costs{}).makespan, 8.0);
}

TEST(Exact, HanayoWavesZigZag) {
  auto p = test::sm(2, 2);
  p.waves = 2;
  EXPECT_EQ(test::make("hanayo", p).placement.device,
            (std::vector<std::int32_t>{0, 1, 1, 0, 0, 1, 1, 0}));
}

struct Row15 {
  const char* schedule;
  int S, M, v;
  const char* variant;
  double F, B;
  double makespan, bubble;
  std::vector<double> peaks;
};

TEST(Exact, ReferenceTable15_2) {
  // schedules.md §15.2 (zero communication; Chimera costs are F and the full backward).
  const std::vector<Row15> rows = {
      {"gpipe", 4, 8, 0, "", 1, 2, 33, 0.2727, {8, 8, 8, 8}},
      {"1f1b", 4, 8, 0, "", 1, 2, 33, 0.2727, {4, 3, 2, 1}},
      {"interleaved", 4, 8, 2, "", 1, 2, 28.5, 0.1579, {5.5, 4.5, 3.5, 2.5}},
      {"interleaved", 4, 8, 4, "", 1, 2, 26.25, 0.0857, {4.75, 4.25, 3.75, 3.25}},
      {"chimera", 4, 4, 0, "direct", 1, 1, 10, 0.2000, {3, 4, 4, 3}},
      {"chimera", 4, 4, 0, "direct", 1, 2, 16, 0.2500, {3, 4, 4, 3}},
      {"chimera", 4, 8, 0, "direct", 1, 1, 18, 0.1111, {3, 4, 4, 3}},
      {"chimera", 4, 8, 0, "direct", 1, 2, 30, 0.2000, {3, 4, 4, 3}},
      {"chimera", 4, 8, 0, "doubling", 1, 1, 18, 0.1111, {7, 8, 8, 7}},
      {"chimera", 4, 8, 0, "doubling", 1, 2, 27, 0.1111, {7, 8, 8, 7}},
      {"chimera", 4, 16, 0, "direct", 1, 1, 34, 0.0588, {3, 4, 4, 3}},
      {"chimera", 4, 16, 0, "direct", 1, 2, 58, 0.1724, {3, 4, 4, 3}},
      {"chimera", 4, 16, 0, "doubling", 1, 1, 34, 0.0588, {7, 8, 8, 7}},
      {"chimera", 4, 16, 0, "doubling", 1, 2, 51, 0.0588, {7, 8, 8, 7}},
  };
  for (const auto& r : rows) {
    auto p = test::sm(r.S, r.M);
    if (r.v) p.chunks = r.v;
    if (*r.variant) p.variant = r.variant;
    const auto t = test::make(r.schedule, p);
    Costs costs;
    costs.F = r.F;
    costs.B = r.B;
    const auto timing = idealized_timing(t, costs);
    const auto label = std::string(r.schedule) + " M=" + std::to_string(r.M) + " " + r.variant;
    EXPECT_DOUBLE_EQ(timing.makespan, r.makespan) << label;
    EXPECT_NEAR(bubble_ratio(timing), r.bubble, 5e-5) << label;
    EXPECT_NEAR(span_bubble_ratio(timing), r.bubble, 5e-5) << label;
    EXPECT_EQ(activation_peaks(t), r.peaks) << label;
  }
}

}  // namespace
}  // namespace pipetab
