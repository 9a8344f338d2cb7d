// DualPipe, DualPipeV and looped BFS: the exact orders of reference schedules.md §16 and of
// PyTorch's DualPipeV artifact, the numbers of §15.2, properties over parameter and cost grids,
// the closed forms of formulas/ against the table, rejections, and the PyTorch CSV round trip
// of overlapped pairs (library and command line).
#include <algorithm>
#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <tuple>

#include "helpers.hpp"
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <sys/wait.h>
#include <unistd.h>

#include "pipetab/error.hpp"
#include "pipetab/formulas/formulas.hpp"
#include "pipetab/io/pytorch_csv.hpp"
#include "pipetab/table/memory.hpp"
#include "pipetab/table/timing.hpp"
#include "pipetab/table/validate.hpp"

namespace pipetab {
namespace {

// ---------------------------------------------------------------------------------------------
// Reference notation (schedules.md §16) → PyTorch tokens.
//   DualPipe:  "F0d" / "F0u" forward of microbatch 0 of the forward-direction (d = pipeline 0)
//              or reverse (u = pipeline 1) replica; "BW" full backward (our B); "B" input-grad
//              only (our I); "W" weight grad; "(X&Y)" an overlapped pair. Microbatches are
//              numbered per pipeline; pipetab numbers pipeline 1's from N/2 on. Pipeline 0 runs
//              stage s on device s, pipeline 1 on device PP-1-s.
//   DualPipeV: "F0.s3" with the global stage given.
struct Notation {
  int devices = 0;       // PP (DualPipe) or R (DualPipeV)
  int per_pipeline = 0;  // N/2 for DualPipe; 0 for DualPipeV (stages given with .sK)
};

std::string pass_token(const std::string& ref, int device, const Notation& n) {
  const auto op = test::parse_reference_op(ref);
  // The reference's B is the input-gradient half here (W deferred); BW the full backward.
  const char kind = op.kind == "BW" ? 'B' : op.kind == "B" ? 'I' : op.kind[0];
  int microbatch = op.microbatch;
  int stage = device;
  if (op.suffix.rfind(".s", 0) == 0) {
    stage = std::stoi(op.suffix.substr(2));
  } else if (op.suffix == "u") {
    stage = n.devices - 1 - device;
    microbatch += n.per_pipeline;
  } else if (op.suffix != "d") {
    throw std::invalid_argument("bad reference token " + ref);
  }
  return std::to_string(stage) + kind + std::to_string(microbatch);
}

std::vector<std::string> reference_row(const std::string& line, int device, const Notation& n) {
  std::istringstream in(line);
  std::vector<std::string> out;
  for (std::string ref; in >> ref;) {
    if (ref.front() == '(') {
      const auto amp = ref.find('&');
      out.push_back("(" + pass_token(ref.substr(1, amp - 1), device, n) + ";" +
                    pass_token(ref.substr(amp + 1, ref.size() - amp - 2), device, n) +
                    ")OVERLAP_F_B");
    } else {
      out.push_back(pass_token(ref, device, n));
    }
  }
  return out;
}

void expect_rows(const ScheduleTable& t, const std::vector<std::string>& reference,
                 const Notation& n) {
  ASSERT_EQ(t.devices, static_cast<int>(reference.size()));
  const auto report = validate(t);
  ASSERT_TRUE(report.ok()) << to_string(report.issues.front());
  for (int d = 0; d < t.devices; ++d) {
    EXPECT_EQ(test::row_tokens(t, d), reference_row(reference[static_cast<std::size_t>(d)], d, n))
        << "device " << d;
  }
}

int pairs_on(const ScheduleTable& t, int device) {
  int pairs = 0;
  for (const Op& op : t.row(device))
    pairs += op.is_pair() ? 1 : 0;
  return pairs;
}

double min_of(const std::vector<double>& v) {
  return *std::min_element(v.begin(), v.end());
}
double max_of(const std::vector<double>& v) {
  return *std::max_element(v.begin(), v.end());
}

void expect_rejected(const std::string& name, const ScheduleParams& p,
                     const std::string& fragment) {
  try {
    test::make(name, p);
    FAIL() << name << " accepted S=" << p.devices << " M=" << p.microbatches;
  } catch (const ParamError& e) {
    EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
  }
}

// ---------------------------------------------------------------------------------------------
// Exact orders.

const std::vector<std::string> kDualPipe4x8 = {
    // schedules.md §16 "DualPipe PP=4 N=8" (dualpipe.py step(), ported line by line there).
    "F0d F1d F2d F0u B0u W0u F1u (F3d&BW1u) (F2u&BW0d) BW2u (F3u&BW1d) BW3u B2d W2d B3d W3d",
    "F0d F0u F1d F1u F2d BW0u (F2u&BW0d) (F3d&BW1u) (F3u&BW1d) BW2u BW2d B3u B3d W3u W3d",
    "F0u F0d F1u F1d F2u BW0d (F2d&BW0u) (F3u&BW1d) (F3d&BW1u) BW2d BW2u B3d B3u W3d W3u",
    "F0u F1u F2u F0d B0d W0d F1d (F3u&BW1d) (F2d&BW0u) BW2d (F3d&BW1u) BW3d B2u W2u B3u W3u",
};

TEST(DualPipeExact, PP4_N8MatchesReference16) {
  const auto t = test::make("dualpipe", test::sm(4, 8));
  expect_rows(t, kDualPipe4x8, {4, 4});
  EXPECT_EQ(t.pipelines(), 2);
  EXPECT_EQ(t.placement.device, (std::vector<std::int32_t>{0, 1, 2, 3, 3, 2, 1, 0}));
  EXPECT_EQ(t.pipeline_of, (std::vector<std::uint8_t>{0, 0, 0, 0, 1, 1, 1, 1}));
}

TEST(DualPipeExact, DualPipeV_R4_N8MatchesReference16) {
  const auto t = test::make("dualpipev", test::sm(4, 8));
  EXPECT_EQ(t.placement.device, (std::vector<std::int32_t>{0, 1, 2, 3, 3, 2, 1, 0}));
  EXPECT_EQ(t.pipelines(), 1);
  expect_rows(
      t,
      {"F0.s0 F1.s0 F2.s0 F3.s0 F4.s0 F5.s0 F6.s0 F0.s7 B0.s7 W0.s7 F1.s7 B1.s7 W1.s7 F2.s7 B2.s7 "
       "W2.s7 F3.s7 (F7.s0&BW3.s7) (F4.s7&BW0.s0) BW4.s7 (F5.s7&BW1.s0) BW5.s7 (F6.s7&BW2.s0) "
       "BW6.s7 (F7.s7&BW3.s0) BW7.s7 B4.s0 W4.s0 B5.s0 W5.s0 B6.s0 W6.s0 B7.s0 W7.s0",
       "F0.s1 F1.s1 F2.s1 F3.s1 F4.s1 F0.s6 F5.s1 F1.s6 B0.s6 W0.s6 F2.s6 B1.s6 W1.s6 F3.s6 "
       "(F6.s1&BW2.s6) (F4.s6&BW0.s1) (F7.s1&BW3.s6) (F5.s6&BW1.s1) BW4.s6 (F6.s6&BW2.s1) BW5.s6 "
       "(F7.s6&BW3.s1) BW6.s6 BW4.s1 B7.s6 B5.s1 W7.s6 B6.s1 W5.s1 B7.s1 W6.s1 W7.s1",
       "F0.s2 F1.s2 F2.s2 F0.s5 F3.s2 F1.s5 F4.s2 F2.s5 B0.s5 W0.s5 F3.s5 (F5.s2&BW1.s5) "
       "(F4.s5&BW0.s2) (F6.s2&BW2.s5) (F5.s5&BW1.s2) (F7.s2&BW3.s5) (F6.s5&BW2.s2) BW4.s5 "
       "(F7.s5&BW3.s2) BW5.s5 BW4.s2 BW6.s5 B5.s2 B7.s5 B6.s2 W5.s2 B7.s2 W7.s5 W6.s2 W7.s2",
       "F0.s3 F0.s4 F1.s3 F1.s4 F2.s3 F2.s4 F3.s3 F3.s4 F4.s3 BW0.s4 (F4.s4&BW0.s3) "
       "(F5.s3&BW1.s4) (F5.s4&BW1.s3) (F6.s3&BW2.s4) (F6.s4&BW2.s3) (F7.s3&BW3.s4) "
       "(F7.s4&BW3.s3) BW4.s4 BW4.s3 BW5.s4 BW5.s3 B6.s4 B6.s3 B7.s4 B7.s3 W6.s4 W6.s3 W7.s4 "
       "W7.s3"},
      {4, 0});
}

// PyTorch's literal test artifact test/distributed/pipelining/artifacts/dualpipev_4rank_10mb.csv
// (ScheduleDualPipeV, 4 ranks, 10 microbatches; pytorch-interop.md §0), copied verbatim.
constexpr const char* kPyTorchDualPipeV4x10 =
    "0F0,0F1,0F2,0F3,0F4,0F5,0F6,7F0,7I0,7W0,7F1,7I1,7W1,7F2,7I2,7W2,7F3,(0F7;7B3)OVERLAP_F_B,(7F4;"
    "0B0)OVERLAP_F_B,(0F8;7B4)OVERLAP_F_B,(7F5;0B1)OVERLAP_F_B,(0F9;7B5)OVERLAP_F_B,(7F6;0B2)"
    "OVERLAP_F_B,7B6,(7F7;0B3)OVERLAP_F_B,7B7,(7F8;0B4)OVERLAP_F_B,7B8,(7F9;0B5)OVERLAP_F_B,7B9,"
    "0I6,0W6,0I7,0W7,0I8,0W8,0I9,0W9\n"
    "1F0,1F1,1F2,1F3,1F4,6F0,1F5,6F1,6I0,6W0,6F2,6I1,6W1,6F3,(1F6;6B2)OVERLAP_F_B,(6F4;1B0)"
    "OVERLAP_F_B,(1F7;6B3)OVERLAP_F_B,(6F5;1B1)OVERLAP_F_B,(1F8;6B4)OVERLAP_F_B,(6F6;1B2)"
    "OVERLAP_F_B,(1F9;6B5)OVERLAP_F_B,(6F7;1B3)OVERLAP_F_B,6B6,(6F8;1B4)OVERLAP_F_B,6B7,(6F9;1B5)"
    "OVERLAP_F_B,6B8,1B6,6I9,1I7,6W9,1I8,1W7,1I9,1W8,1W9\n"
    "2F0,2F1,2F2,5F0,2F3,5F1,2F4,5F2,5I0,5W0,5F3,(2F5;5B1)OVERLAP_F_B,(5F4;2B0)OVERLAP_F_B,(2F6;"
    "5B2)OVERLAP_F_B,(5F5;2B1)OVERLAP_F_B,(2F7;5B3)OVERLAP_F_B,(5F6;2B2)OVERLAP_F_B,(2F8;5B4)"
    "OVERLAP_F_B,(5F7;2B3)OVERLAP_F_B,(2F9;5B5)OVERLAP_F_B,(5F8;2B4)OVERLAP_F_B,5B6,(5F9;2B5)"
    "OVERLAP_F_B,5B7,2B6,5B8,2I7,5I9,2I8,2W7,2I9,5W9,2W8,2W9\n"
    "3F0,4F0,3F1,4F1,3F2,4F2,3F3,4F3,3F4,4B0,(4F4;3B0)OVERLAP_F_B,(3F5;4B1)OVERLAP_F_B,(4F5;3B1)"
    "OVERLAP_F_B,(3F6;4B2)OVERLAP_F_B,(4F6;3B2)OVERLAP_F_B,(3F7;4B3)OVERLAP_F_B,(4F7;3B3)"
    "OVERLAP_F_B,(3F8;4B4)OVERLAP_F_B,(4F8;3B4)OVERLAP_F_B,(3F9;4B5)OVERLAP_F_B,(4F9;3B5)"
    "OVERLAP_F_B,4B6,3B6,4B7,3B7,4I8,3I8,4I9,3I9,4W8,3W8,4W9,3W9\n";

TEST(DualPipeExact, DualPipeVMatchesPyTorchArtifact4Rank10Mb) {
  const auto t = test::make("dualpipev", test::sm(4, 10));
  std::istringstream in(kPyTorchDualPipeV4x10);
  int d = 0;
  for (std::string line; std::getline(in, line); ++d) {
    std::vector<std::string> cells;
    std::istringstream cell_in(line);
    for (std::string cell; std::getline(cell_in, cell, ',');)
      cells.push_back(cell);
    EXPECT_EQ(test::row_tokens(t, d), cells) << "rank " << d;
  }
  EXPECT_EQ(d, 4);
  // Read as a file, the artifact is the same schedule (placement inferred: the V-shape).
  const auto back = io::read_pytorch_csv(kPyTorchDualPipeV4x10, "dualpipev_4rank_10mb.csv");
  EXPECT_TRUE(validate(back).ok());
  EXPECT_TRUE(back.same_schedule(t));
}

TEST(DualPipeExact, DualPipeVIsOneHalfOfDualPipe) {
  // dualpipev.py is dualpipe.py's eight steps with the rank itself as the half rank: every
  // DualPipe rank of the first half runs DualPipeV's order for its rank, with (d, u) for the V's
  // (early, late) stages. Checked by relabelling, not by timing.
  for (int R = 1; R <= 8; ++R) {
    for (int n : {2 * R, 2 * R + 1, 3 * R + 2}) {
      const auto v = test::make("dualpipev", test::sm(R, n));
      const auto dp = test::make("dualpipe", test::sm(2 * R, 2 * n));
      for (int r = 0; r < R; ++r) {
        const auto vrow = v.row(r), drow = dp.row(r);
        ASSERT_EQ(vrow.size(), drow.size()) << "R=" << R << " n=" << n << " r=" << r;
        for (std::size_t i = 0; i < vrow.size(); ++i) {
          for (std::size_t h = 0; h < 2; ++h) {
            const Pass& a = vrow[i].halves[h];
            const Pass& b = drow[i].halves[h];
            EXPECT_EQ(a.kind, b.kind);
            if (a.kind == PassKind::None) continue;
            const bool early = a.stage == r;
            EXPECT_EQ(b.stage, early ? r : 2 * R - 1 - r);
            EXPECT_EQ(b.microbatch, a.microbatch + (early ? 0 : n));
          }
        }
      }
    }
  }
}

TEST(LoopedBfsExact, S4_V2_M8PyTorchOrder) {
  // PyTorch ScheduleLoopedBFS (pytorch-interop.md §2), idle padding removed: local stages
  // ascending with all microbatches, then descending with microbatches M-1..0.
  auto p = test::sm(4, 8);
  p.chunks = 2;
  const auto t = test::make("looped-bfs", p);
  ASSERT_TRUE(validate(t).ok());
  for (int d = 0; d < 4; ++d) {
    std::vector<std::string> expected;
    for (int s : {d, d + 4})
      for (int m = 0; m < 8; ++m)
        expected.push_back(std::to_string(s) + "F" + std::to_string(m));
    for (int s : {d + 4, d})
      for (int m = 7; m >= 0; --m)
        expected.push_back(std::to_string(s) + "B" + std::to_string(m));
    EXPECT_EQ(test::row_tokens(t, d), expected) << "device " << d;
  }
}

// ---------------------------------------------------------------------------------------------
// §15.2 numbers.

TEST(DualPipeReference15, PP4_N8) {
  // F = I = W = 1 (full backward 2). Reference: FB=3 → makespan 26, busy 24 each, README bubble
  // 2 = makespan − least busy; FB=2 → 22, busy 21 each, bubble 1; peaks 5 (= PP+1) everywhere.
  const auto t = test::make("dualpipe", test::sm(4, 8));
  struct Row {
    double FB, makespan, busy, readme;
  };
  for (const Row& r : {Row{3, 26, 24, 2}, Row{2, 22, 21, 1}}) {
    const auto timing = idealized_timing(t, test::split_costs(1, 1, 1, r.FB));
    EXPECT_DOUBLE_EQ(timing.makespan, r.makespan);
    EXPECT_EQ(timing.busy, std::vector<double>(4, r.busy));
    EXPECT_DOUBLE_EQ(timing.makespan - min_of(timing.busy), r.readme);
    EXPECT_DOUBLE_EQ((4.0 / 2 - 1) * (r.FB + 2 - 3 * 1), r.readme);     // README (PP/2-1)(F&B+B-3W)
    EXPECT_NEAR(bubble_ratio(timing), 1 - r.busy / r.makespan, 1e-12);  // Def-B
    EXPECT_LE(span_bubble_ratio(timing), bubble_ratio(timing) + 1e-12);
  }
  EXPECT_EQ(activation_peaks(t), std::vector<double>(4, 5.0));
}

TEST(DualPipeReference15, DualPipeV_R4) {
  // The reference's DualPipeV costs are per stage (F = I = W = 1, a stage = half a device
  // share); pipetab's are per device share: F = I = W = 2, and a pair of two half-share passes
  // costs FB/2, so the reference's F&B = 3 (2) is FB = 6 (4).
  struct Row {
    int N;
    double FB, makespan;
    std::vector<double> busy;
    double readme;
  };
  const std::vector<Row> rows = {
      {8, 6, 54, {48, 48, 48, 48}, 6},
      {8, 4, 44, {43, 42, 41, 41}, 3},
      {10, 6, 66, {60, 60, 60, 60}, 6},
      {10, 4, 52, {51, 50, 49, 49}, 3},
  };
  for (const auto& r : rows) {
    const auto t = test::make("dualpipev", test::sm(4, r.N));
    const auto timing = idealized_timing(t, test::split_costs(2, 2, 2, r.FB));
    const auto label = "N=" + std::to_string(r.N) + " FB=" + std::to_string(r.FB);
    EXPECT_DOUBLE_EQ(timing.makespan, r.makespan) << label;
    EXPECT_EQ(timing.busy, r.busy) << label;
    EXPECT_DOUBLE_EQ(timing.makespan - min_of(timing.busy), r.readme) << label;
    // README with PP = 2R = 8 in per-stage costs: (8/2 − 1)(F&B + 2 − 3).
    EXPECT_DOUBLE_EQ(3 * (r.FB / 2 + 2 - 3), r.readme) << label;
    // 9 stage activations of half a share each: 4.5 M_a (README: PP+1 = 2R+1 stage-acts).
    EXPECT_EQ(activation_peaks(t), std::vector<double>(4, 4.5)) << label;
  }
}

TEST(LoopedBfsReference15, S4_M8_V2) {
  auto p = test::sm(4, 8);
  p.chunks = 2;
  const auto t = test::make("looped-bfs", p);
  const auto timing = idealized_timing(t, Costs{});  // F = I = W = 1, B = 2
  EXPECT_DOUBLE_EQ(timing.makespan, 28.5);
  EXPECT_NEAR(bubble_ratio(timing), 0.1579, 5e-5);
  EXPECT_NEAR(span_bubble_ratio(timing), 0.1579, 5e-5);
  double longest = 0;
  for (int d = 0; d < 4; ++d) {
    longest = std::max(longest, timing.last_end[static_cast<std::size_t>(d)] -
                                    timing.first_start[static_cast<std::size_t>(d)]);
  }
  EXPECT_DOUBLE_EQ(longest, 28.5);
  EXPECT_EQ(activation_peaks(t), std::vector<double>(4, 8.0));
}

// ---------------------------------------------------------------------------------------------
// Grids.

// Costs per device share, unequal on purpose (the brief's ratios), each with several pair costs:
// no overlap gain (FB unset = F + B), full overlap (FB = max(F, B), the physical floor), half
// of the smaller half hidden, a pair slower than its halves, and an unphysical FB below the
// floor (tables must still be valid and timed).
std::vector<Costs> cost_grid() {
  std::vector<Costs> out;
  for (const auto& [F, I, W] : std::vector<std::array<double, 3>>{
           {1, 1, 1}, {1, 2, 1}, {2, 1, 1}, {1, 1.5, 0.5}, {1, 1, 0.5}, {0.7, 0.7, 0.3}}) {
    const double B = I + W;
    for (const std::optional<double> FB :
         {std::optional<double>{}, std::optional<double>{std::max(F, B)},
          std::optional<double>{F + B - 0.5 * std::min(F, B)},
          std::optional<double>{1.25 * (F + B)}, std::optional<double>{0.5 * std::max(F, B)}}) {
      out.push_back(test::split_costs(F, I, W, FB));
    }
  }
  return out;
}

bool near(double a, double b) {
  return std::abs(a - b) <= 1e-9 * std::max(1.0, std::abs(b));
}

// The closed form's domain as the tests established it (formulas.cpp): I = F, W ≤ F,
// FB ≥ F + W; or PP = 2 (DualPipeV: S = 1) at any costs.
bool in_domain(int PP, const Costs& c) {
  return PP == 2 || (c.I == c.F && c.W <= c.F && c.pair() >= c.F + c.W);
}

// Checks shared by DualPipe (pipelines = 2, share = 1) and DualPipeV (1 pipeline, share 1/2):
// `R` ranks per half, `n` microbatches per chunk, `h(d)` the half rank of device d.
void check_dual(const std::string& name, int S, int N) {
  const bool v = name == "dualpipev";
  const int PP = v ? 2 * S : S;  // DualPipe depth of the equivalent schedule
  const int R = PP / 2, n = v ? N : N / 2;
  const double share = v ? 0.5 : 1.0;
  const auto label = name + " S=" + std::to_string(S) + " M=" + std::to_string(N);
  const auto t = test::make(name, test::sm(S, N));
  const auto report = validate(t);
  ASSERT_TRUE(report.ok()) << label << ": " << to_string(report.issues.front());
  ASSERT_TRUE(t.same_schedule(test::make(name, test::sm(S, N)))) << label << ": not deterministic";
  EXPECT_EQ(t.pipelines(), v ? 1 : 2) << label;
  EXPECT_EQ(t.stages, v ? 2 * S : S) << label;

  // Every device runs its two stages for all microbatches of each (validation proves "exactly
  // once" globally; this pins which stages each device computes).
  for (int d = 0; d < S; ++d) {
    int forwards = 0, backwards = 0, weights = 0, inputs = 0;
    for (const Op& op : t.row(d)) {
      for (const Pass& pass : op.passes()) {
        EXPECT_EQ(t.device_of(pass), d) << label;
        forwards += pass.kind == PassKind::F;
        backwards += pass.kind == PassKind::B || pass.kind == PassKind::I;
        inputs += pass.kind == PassKind::I;
        weights += pass.kind == PassKind::W;
      }
    }
    EXPECT_EQ(forwards, 2 * n) << label << " device " << d;
    EXPECT_EQ(backwards, 2 * n) << label << " device " << d;
    EXPECT_EQ(weights, inputs) << label << " device " << d;
    // Deferred backwards: steps 3, 6 (half of them) and 7 of dualpipe.py: 2R − h − 1.
    const int h = std::min(d, v ? d : PP - 1 - d);
    EXPECT_EQ(inputs, 2 * R - h - 1) << label << " device " << d;
    // Pairs: 2(n − 2R + h + 1) in step 4 (less the turning rank's first) + R − h − 1 in step 5.
    EXPECT_EQ(pairs_on(t, d), 2 * (n - 2 * R + h + 1) + (R - h - 1) - (h == R - 1 ? 1 : 0))
        << label << " device " << d;
  }

  // Peaks: PP + 1 stage activations on every device (README), a stage being `share` M_a.
  EXPECT_EQ(activation_peaks(t), std::vector<double>(static_cast<std::size_t>(S), (PP + 1) * share))
      << label;
  const auto resolved = test::resolved(name, test::sm(S, N));
  const auto f0 = formula(resolved, Costs{});
  ASSERT_TRUE(f0.peak_activation);
  EXPECT_EQ(*f0.peak_activation, activation_peaks(t)) << label;

  for (const Costs& c : cost_grid()) {
    const auto timing = idealized_timing(t, c);
    const auto clabel = label + " costs " + to_string(c);
    const double gain = (c.F + c.B - c.pair()) * share;  // what one pair saves
    for (int d = 0; d < S; ++d) {
      EXPECT_TRUE(
          near(timing.busy[static_cast<std::size_t>(d)], N * (c.F + c.B) - pairs_on(t, d) * gain))
          << clabel << " device " << d;
    }
    EXPECT_GE(timing.makespan, max_of(timing.busy) * (1 - 1e-12)) << clabel;
    EXPECT_LE(span_bubble_ratio(timing), bubble_ratio(timing) + 1e-12) << clabel;

    const auto f = formula(resolved, c);
    if (in_domain(PP, c)) {
      ASSERT_TRUE(f.makespan) << clabel;
      EXPECT_TRUE(near(*f.makespan, timing.makespan))
          << clabel << ": formula " << *f.makespan << " table " << timing.makespan;
      EXPECT_TRUE(near(*f.bubble_ratio, bubble_ratio(timing))) << clabel;
      // The README bubble (PP/2−1)(F&B+B−3W), in per-stage costs for DualPipeV, is the idle
      // time of the least idle device (reference §9(d) [S], checked there at F = I = W) on the
      // whole domain as long as a pair is no slower than its halves; for FB > F + B the table
      // idles more (e.g. PP=6, F=I=W=1, FB=3.75: 6.25 against 5.5).
      if (c.pair() <= c.F + c.B) {
        const double readme = (R - 1) * (c.pair() + c.B - 3 * c.W) * share;
        EXPECT_TRUE(near(timing.makespan - min_of(timing.busy), readme))
            << clabel << ": table " << timing.makespan - min_of(timing.busy) << " README "
            << readme;
      }
    } else {
      EXPECT_FALSE(f.makespan) << clabel << ": a closed form outside its tested domain";
    }
  }
}

TEST(DualPipeGrid, EveryTableIsValidAndMatchesItsBounds) {
  int configs = 0;
  for (int PP = 2; PP <= 16; PP += 2) {
    for (int N = 2 * PP; N <= 64; N += 2) {
      check_dual("dualpipe", PP, N);
      ++configs;
    }
  }
  EXPECT_GT(configs, 150);
}

TEST(DualPipeGrid, DualPipeVEveryTableIsValidAndMatchesItsBounds) {
  int configs = 0;
  for (int R = 1; R <= 16; ++R) {
    for (int N = 2 * R; N <= 64; ++N) {
      check_dual("dualpipev", R, N);
      ++configs;
    }
  }
  EXPECT_GT(configs, 500);
}

TEST(DualPipeGrid, DomainEdgesOfTheClosedForm) {
  // Just outside the domain the table departs from the closed form, which is why the formula
  // leaves the makespan unset there.
  const auto p = test::sm(4, 8);
  const auto t = test::make("dualpipe", p);
  const auto form = [](const Costs& c) {  // reference §9(d) with PP = 4, N = 8
    return 8 * (c.F + c.B) - 3 * (c.F + c.B - c.pair()) + 1 * (c.pair() + c.B - 3 * c.W);
  };
  for (const Costs& c : {test::split_costs(1, 1, 1.01, 2.01),  // W > F
                         test::split_costs(1, 1, 1, 1.9),      // FB below the longer half B = 2
                         test::split_costs(1, 2, 1),           // I != F
                         test::split_costs(2, 1, 1)}) {        // I != F
    EXPECT_GT(std::abs(idealized_timing(t, c).makespan - form(c)), 1e-3) << to_string(c);
    EXPECT_FALSE(formula(test::resolved("dualpipe", p), c).makespan) << to_string(c);
  }
  // On the domain's edges it holds: W = F, FB = F + W exactly.
  for (const Costs& c : {test::split_costs(1, 1, 1, 2), test::split_costs(1, 1, 0.25, 1.25)}) {
    EXPECT_DOUBLE_EQ(idealized_timing(t, c).makespan, form(c)) << to_string(c);
    EXPECT_DOUBLE_EQ(*formula(test::resolved("dualpipe", p), c).makespan, form(c));
  }
  // PP = 2: any costs.
  const auto t2 = test::make("dualpipe", test::sm(2, 6));
  const auto c = test::split_costs(2, 1, 1.5, 2.5);
  EXPECT_DOUBLE_EQ(*formula(test::resolved("dualpipe", test::sm(2, 6)), c).makespan,
                   idealized_timing(t2, c).makespan);
}

TEST(DualPipeGrid, DualPipeVRunsAsLongAsDualPipeOfTwiceTheDepth) {
  // Reference §9(a') [S]: DualPipeV(R, N) takes exactly as long as DualPipe(2R, 2N) in per-stage
  // costs; a V stage is half a device share, so in pipetab's per-share costs it is half as long.
  // Checked at every cost of the grid, in the closed form's domain or not.
  for (int R = 1; R <= 8; ++R) {
    for (int N = 2 * R; N <= 4 * R + 3; ++N) {
      const auto v = test::make("dualpipev", test::sm(R, N));
      const auto dp = test::make("dualpipe", test::sm(2 * R, 2 * N));
      for (const Costs& c : cost_grid()) {
        EXPECT_TRUE(near(2 * idealized_timing(v, c).makespan, idealized_timing(dp, c).makespan))
            << "R=" << R << " N=" << N << " " << to_string(c);
      }
    }
  }
}

TEST(LoopedBfsGrid, EveryTableIsValidAndMatchesTheClosedForm) {
  std::vector<int> Ms;
  for (int M = 1; M <= 24; ++M)
    Ms.push_back(M);
  for (int M : {31, 32, 48, 64})
    Ms.push_back(M);
  int configs = 0;
  for (int S = 1; S <= 16; ++S) {
    for (int v = 1; v <= 4; ++v) {
      for (int M : Ms) {
        auto p = test::sm(S, M);
        p.chunks = v;
        const auto label =
            "S=" + std::to_string(S) + " M=" + std::to_string(M) + " v=" + std::to_string(v);
        const auto t = test::make("looped-bfs", p);
        const auto report = validate(t);
        ASSERT_TRUE(report.ok()) << label << ": " << to_string(report.issues.front());
        ASSERT_TRUE(t.same_schedule(test::make("looped-bfs", p))) << label;
        EXPECT_EQ(t.stages, v * S);
        for (int s = 0; s < t.stages; ++s)
          EXPECT_EQ(t.placement.device[static_cast<std::size_t>(s)], s % S);
        // Every forward precedes every backward: all M microbatches of all v chunks are held.
        EXPECT_EQ(activation_peaks(t), std::vector<double>(static_cast<std::size_t>(S), M))
            << label;
        const auto resolved = test::resolved("looped-bfs", p);
        EXPECT_EQ(*formula(resolved, Costs{}).peak_activation, activation_peaks(t)) << label;
        for (const Costs& c : cost_grid()) {
          if (c.FB) continue;  // no pairs in this schedule
          const auto timing = idealized_timing(t, c);
          for (double busy : timing.busy)
            EXPECT_TRUE(near(busy, M * (c.F + c.B))) << label;
          const auto f = formula(resolved, c);
          ASSERT_TRUE(f.makespan);
          EXPECT_TRUE(near(*f.makespan, timing.makespan))
              << label << " " << to_string(c) << ": formula " << *f.makespan << " table "
              << timing.makespan;
          EXPECT_TRUE(near(*f.bubble_ratio, bubble_ratio(timing))) << label;
          if (M >= S) {
            // Interleaved's makespan (reference §10(d)), and its bubble ratio for any F, B.
            EXPECT_TRUE(near(timing.makespan, M * (c.F + c.B) + (S - 1) * (c.F + c.B) / v))
                << label;
            EXPECT_TRUE(near(bubble_ratio(timing), (S - 1.0) / (v * M + S - 1.0))) << label;
          }
        }
        ++configs;
      }
    }
  }
  EXPECT_GT(configs, 1500);
}

TEST(LoopedBfsGrid, SameMakespanAsInterleavedWhereBothRun) {
  // Reference §10(d) [S]: identical makespans to Megatron's interleaved order (M a multiple of
  // S), with a higher peak (M against interleaved's S + (S−1)/v on device 0).
  for (int S = 2; S <= 8; ++S) {
    for (int v = 2; v <= 4; ++v) {
      for (int M = S; M <= 4 * S; M += S) {
        auto p = test::sm(S, M);
        p.chunks = v;
        const auto bfs = test::make("looped-bfs", p);
        const auto il = test::make("interleaved", p);
        for (const Costs& c : {test::split_costs(1, 1, 1), test::split_costs(2, 1, 1),
                               test::split_costs(1, 1.5, 0.5)}) {
          EXPECT_TRUE(near(idealized_timing(bfs, c).makespan, idealized_timing(il, c).makespan))
              << "S=" << S << " M=" << M << " v=" << v;
        }
        EXPECT_GE(max_of(activation_peaks(bfs)), max_of(activation_peaks(il)));
      }
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Constraints.

TEST(DualPipeRejects, EachRuleWithItsReason) {
  expect_rejected("dualpipe", test::sm(3, 12), "PP = S = 3 must be even");
  expect_rejected("dualpipe", test::sm(5, 20), "num_ranks % 2 == 0");
  expect_rejected("dualpipe", test::sm(4, 9), "N = M = 9 must be even");
  expect_rejected("dualpipe", test::sm(4, 6), "N = M = 6 must be at least 2·PP = 8");
  expect_rejected("dualpipe", test::sm(8, 14), "num_chunks >= num_ranks * 2");
  EXPECT_NO_THROW(test::make("dualpipe", test::sm(4, 8)));  // the boundary is allowed
  expect_rejected("dualpipev", test::sm(4, 7), "N = M = 7 must be at least the number of stages");
  expect_rejected("dualpipev", test::sm(1, 1), "2·S = 2");
  EXPECT_NO_THROW(test::make("dualpipev", test::sm(4, 8)));
  EXPECT_NO_THROW(test::make("dualpipev", test::sm(3, 7)));  // odd S and N are fine for the V
  auto p = test::sm(4, 8);
  p.chunks = 2;
  expect_rejected("dualpipe", p, "-v/--chunks is not a parameter");
  expect_rejected("dualpipev", p, "-v/--chunks is not a parameter");
}

TEST(LoopedBfsRejects, NothingButTheCommonRules) {
  // PyTorch states no constraint and the grid above proves none is needed, M < S included.
  auto p = test::sm(8, 3);
  p.chunks = 3;
  EXPECT_TRUE(validate(test::make("looped-bfs", p)).ok());
  p.chunks = 0;
  expect_rejected("looped-bfs", p, "chunks (-v) = 0: must be at least 1");
  EXPECT_EQ(test::resolved("looped-bfs", test::sm(4, 8)).chunks, 2);  // default v
  p = test::sm(4, 8);
  p.variant = "direct";
  expect_rejected("looped-bfs", p, "--variant is not a parameter");
}

// ---------------------------------------------------------------------------------------------
// PyTorch CSV: overlapped pairs round-trip, in the library and through the command line.

TEST(DualPipeCsv, RoundTripsOverlappedPairsAndBothPipelines) {
  for (const auto& [name, S, M] : std::vector<std::tuple<std::string, int, int>>{
           {"dualpipe", 4, 8}, {"dualpipe", 6, 18}, {"dualpipev", 4, 10}, {"dualpipev", 3, 7}}) {
    const auto t = test::make(name, test::sm(S, M));
    const auto text = io::write_pytorch_csv(t);
    EXPECT_NE(text.find(")OVERLAP_F_B"), std::string::npos);
    const auto back = io::read_pytorch_csv(text, "t.csv");
    ASSERT_TRUE(validate(back).ok()) << name;
    EXPECT_TRUE(back.same_schedule(t)) << name << "\n" << text;
    const auto c = test::split_costs(1, 1, 1, 2.5);
    EXPECT_EQ(idealized_timing(back, c).makespan, idealized_timing(t, c).makespan);
    EXPECT_EQ(activation_peaks(back), activation_peaks(t));
  }
}

std::string slurp(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

TEST(DualPipeCsv, ShowThenAnalyzeTheFileGivesTheSameTable) {
  // pipetab show dualpipe --format csv > file; pipetab analyze --table file --format json.
  namespace fs = std::filesystem;
  const auto dir = fs::temp_directory_path() / ("pipetab-dualpipe-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const auto csv = dir / "dualpipe.csv", a = dir / "a.json", b = dir / "b.json";
  const std::string bin = PIPETAB_BINARY;
  const std::string costs_flag = " --costs F=1,I=1,W=1,FB=2 --format json";
  auto run = [](const std::string& command) {
    const int status = std::system(command.c_str());
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  };
  ASSERT_EQ(run(bin + " show dualpipe -S 4 -M 8 --format csv --force > " + csv.string() +
                " 2> /dev/null"),
            0);
  ASSERT_EQ(run(bin + " analyze --table " + csv.string() + costs_flag + " > " + a.string()), 0);
  ASSERT_EQ(run(bin + " analyze dualpipe -S 4 -M 8" + costs_flag + " > " + b.string()), 0);
  const auto from_file = nlohmann::json::parse(slurp(a)),
             generated = nlohmann::json::parse(slurp(b));
  fs::remove_all(dir);
  // The table levels agree; makespan 22 and peaks 5 are reference §15.2's (F&B = 2).
  EXPECT_EQ(from_file.at("table"), generated.at("table"));
  EXPECT_EQ(generated.at("table").at("makespan"), 22.0);
  EXPECT_EQ(from_file.at("params").at("pipelines"), 2);
}

}  // namespace
}  // namespace pipetab
