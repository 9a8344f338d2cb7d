// PipeOffload's uniform repeating schedule (po): its orders against the authors' scheduler, its
// memory and bubble against the paper's Table 1 over a grid.
#include <algorithm>
#include <fstream>
#include <string>
#include <tuple>

#include "helpers.hpp"
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "pipetab/table/memory.hpp"
#include "pipetab/table/timing.hpp"
#include "pipetab/table/validate.hpp"

namespace pipetab {
namespace {

// A device's row as tests/data/po-orders.py prints it: "<kind><microbatch>.<chunk>", the input
// gradient as their B.
std::string row_text(const ScheduleTable& t, int device) {
  std::string out;
  for (const Op& op : t.row(device)) {
    const Pass& p = op.first();
    if (!out.empty()) out += ' ';
    out += (p.kind == PassKind::F   ? "F"
            : p.kind == PassKind::I ? "B"
                                    : "W") +
           std::to_string(p.microbatch) + "." + std::to_string(p.stage / t.devices);
  }
  return out;
}

// tests/data/po-orders.jsonl, made by tests/data/po-orders.py from the authors'
// group_interleaved_1f1b.py: the same order on every device for S up to 16, v up to 5, M from 1.
TEST(Po, TheAuthorsOrders) {
  std::ifstream in(std::string(PIPETAB_SOURCE_DIR) + "/tests/data/po-orders.jsonl");
  std::string line;
  int cases = 0;
  while (std::getline(in, line)) {
    const auto j = nlohmann::json::parse(line);
    auto p = test::sm(j["S"], j["M"]);
    p.chunks = j["v"].get<int>();
    const std::string label = line.substr(0, line.find(", \"rows\""));
    const auto t = test::make("po", p);
    for (int d = 0; d < t.devices; ++d)
      EXPECT_EQ(row_text(t, d), j["rows"][static_cast<std::size_t>(d)].get<std::string>())
          << label << " device " << d;
    EXPECT_TRUE(validate(t).ok()) << label;
    ++cases;
  }
  EXPECT_EQ(cases, 166);
}

// The largest activation peak over the devices (M_a), with `ratio` of each device's stages
// offloaded, the copies on time (the table level).
double max_peak(const ScheduleTable& t, double ratio) {
  MemoryOptions options;
  options.offload = ratio;
  const auto peaks = activation_peaks(t, options);
  return *std::max_element(peaks.begin(), peaks.end());
}

// Table 1 and §2 of the paper over S 2–16, v 1–8: PO-F holds two stage activations (2/v M_a)
// whatever the depth, O(M/(vd)); PO-H holds its (v+2)/(8v)·M within one microbatch's device
// share above (M = S M_a, the whole model); without offload about GIS-H's (v+1)/(2v)·M, never
// less; from S = 4, offloading k ≤ v/2 whole stages saves more than the share k/v ("better
// than linear", Figure 3; at S 2–3 the forward running and the next reload are most of the
// peak), down to about a quarter at S = 8 with 16 stages per device and half of them offloaded.
TEST(Po, TableOnePeaksOverAGrid) {
  for (int S = 2; S <= 16; ++S)
    for (int v = 1; v <= 8; ++v)
      for (const int M : {S, 2 * S + 1}) {
        auto p = test::sm(S, M);
        p.chunks = v;
        const auto t = test::make("po", p);
        const std::string label = fmt::format("S {} v {} M {}", S, v, M);
        EXPECT_TRUE(validate(t).ok()) << label;
        EXPECT_NEAR(max_peak(t, 1.0), 2.0 / v, 1e-9) << label;
        const double none = max_peak(t, 0.0);
        const double gis_h = (v + 1.0) / (2.0 * v) * S;
        EXPECT_GE(none, gis_h - 1e-9) << label;
        EXPECT_LE(none, gis_h + 1.5) << label;
        if (v % 2 == 0) {
          const double po_h = (v + 2.0) / (8.0 * v) * S;
          EXPECT_GE(max_peak(t, 0.5), po_h - 1e-9) << label;
          EXPECT_LE(max_peak(t, 0.5), po_h + 1.0) << label;
        }
        for (int k = 1; S >= 4 && 2 * k <= v; ++k) {
          const double r = static_cast<double>(k) / v;
          EXPECT_LE(max_peak(t, r), (1.0 - r) * none + 1e-9) << label << " k " << k;
        }
      }
  auto p = test::sm(8, 32);
  p.chunks = 16;
  const auto t = test::make("po", p);
  EXPECT_LT(max_peak(t, 0.5) / max_peak(t, 0.0), 0.3);
}

// Table 1: PO's bubble is less than 1F1B's, (S−1)(F+I+W) per device, wherever the authors'
// scheduler keeps the group ⌈S/2⌉ that po takes: ⌈S/2⌉ rounds of F+I+W cover S passes of the
// longest kind (their create_schedule widens it otherwise).
TEST(Po, TableOneBubbleBelowOneF1BsOverAGrid) {
  for (int S = 2; S <= 16; ++S)
    for (int v = 1; v <= 6; ++v)
      for (const int M : {S, 3 * S + 1}) {
        auto p = test::sm(S, M);
        p.chunks = v;
        const auto t = test::make("po", p);
        for (const auto& [F, I, W] : {std::tuple{1.0, 1.0, 1.0},
                                      {1.0, 2.0, 1.0},
                                      {1.0, 1.0, 0.5},
                                      {2.0, 1.0, 1.0},
                                      {1.0, 1.5, 0.3}}) {
          if ((F + I + W) * ((S + 1) / 2) < S * std::max(F, I)) continue;
          const double round = F + I + W;
          const double makespan = idealized_timing(t, test::split_costs(F, I, W)).makespan;
          EXPECT_LT(makespan - M * round, (S - 1) * round)
              << fmt::format("S {} v {} M {} F {} I {} W {}", S, v, M, F, I, W);
        }
      }
}

}  // namespace
}  // namespace pipetab
