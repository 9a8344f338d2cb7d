// Property tests over whole parameter grids (S 1–16, M 1–64, v 1–4, W 1–4, several cost
// ratios, within each schedule's constraints). Independent facts checked: every table
// validates; the closed forms of formulas/ equal the table level; every device computes
// exactly M·(F + B); the makespan respects two lower bounds; peaks match the reference formulas.
#include <algorithm>
#include <array>
#include <functional>

#include "helpers.hpp"
#include <gtest/gtest.h>

#include "pipetab/formulas/formulas.hpp"
#include "pipetab/table/memory.hpp"
#include "pipetab/table/timing.hpp"
#include "pipetab/table/validate.hpp"

namespace pipetab {
namespace {

constexpr int kMaxDevices = 16;
constexpr int kMaxMicrobatches = 64;

// (F, I, W) with B = I + W: the F:B ratios 1:2, 1:1, 1:3, 2:1, 1:0.5, 0.7:1.9, and unequal
// halves of the backward for the split schedules.
const std::vector<std::array<double, 3>> kCosts = {{1, 1, 1},     {1, 0.5, 0.5},   {1, 1.5, 1.5},
                                                   {2, 0.5, 0.5}, {1, 0.25, 0.25}, {0.7, 1.2, 0.7},
                                                   {1, 1.5, 0.5}, {1, 0.5, 1.5},   {1, 0.25, 2}};

bool has_split_backward(const ScheduleTable& t) {
  return std::any_of(t.ops.begin(), t.ops.end(),
                     [](const Op& op) { return op.first().kind == PassKind::I; });
}

struct Config {
  std::string name;
  ScheduleParams params;
  std::string label() const {
    std::string out =
        name + " S=" + std::to_string(params.devices) + " M=" + std::to_string(params.microbatches);
    if (params.chunks) out += " v=" + std::to_string(*params.chunks);
    if (params.waves) out += " W=" + std::to_string(*params.waves);
    if (params.group_size) out += " g=" + std::to_string(*params.group_size);
    if (params.variant) out += " " + *params.variant;
    if (params.split) out += " split " + *params.split;
    return out;
  }
};

std::vector<Config> grid(const std::string& name) {
  std::vector<Config> out;
  auto add = [&](std::int64_t S, std::int64_t M, auto&& tweak) {
    Config c{name, {}};
    c.params.devices = S;
    c.params.microbatches = M;
    tweak(c.params);
    out.push_back(std::move(c));
  };
  const auto none = [](ScheduleParams&) {};
  for (int S = 1; S <= kMaxDevices; ++S) {
    if (name == "gpipe" || name == "1f1b") {
      for (int M = 1; M <= kMaxMicrobatches; ++M)
        add(S, M, none);
    } else if (name == "interleaved") {
      for (int v = 1; v <= 4; ++v) {
        for (int M = S; M <= kMaxMicrobatches; M += S)
          add(S, M, [v](ScheduleParams& p) { p.chunks = v; });
      }
      // Other group sizes (Megatron's S <= g <= M with M mod g 0 or at least S; one group of
      // M < S, PyTorch's): every M with PyTorch's g = M / max(1, M div S) where M is a multiple of
      // its rounds, and for S <= 8 every g Megatron accepts up to M = 24.
      for (int v = 2; v <= 3; ++v) {
        for (int M = 1; M <= kMaxMicrobatches; ++M) {
          const int rounds = std::max(1, M / S);
          if (M % S == 0 || M % rounds != 0) continue;
          add(S, M, [v, g = M / rounds](ScheduleParams& p) {
            p.chunks = v;
            p.group_size = g;
          });
        }
        for (int M = S; S <= 8 && M <= 24; ++M) {
          for (int g = S + 1; g <= M; ++g) {
            if (M % g != 0 && M % g < S) continue;
            add(S, M, [v, g](ScheduleParams& p) {
              p.chunks = v;
              p.group_size = g;
            });
          }
        }
      }
    } else if (name == "interleaved-zb") {
      // PyTorch's rule: M a multiple of its rounds max(1, M div S).
      for (int v = 1; v <= 4; ++v) {
        for (int M = 1; M <= kMaxMicrobatches; ++M) {
          if (M % std::max(1, M / S) == 0) add(S, M, [v](ScheduleParams& p) { p.chunks = v; });
        }
      }
    } else if (name == "gis" || name == "gis-h") {
      // PipeOffload's groups: ⌈S/2⌉ <= g <= S (gis-h: g = ⌈S/2⌉), M a multiple of g.
      const int least = (S + 1) / 2;
      for (int v = 1; v <= 4; ++v) {
        for (int g = least; g <= (name == "gis" ? S : least); ++g) {
          for (int M = g; M <= kMaxMicrobatches; M += g) {
            add(S, M, [v, g, &name](ScheduleParams& p) {
              p.chunks = v;
              if (name == "gis") p.group_size = g;
            });
          }
        }
      }
    } else if (name == "po") {
      for (int v = 1; v <= 4; ++v) {
        for (int M = 1; M <= kMaxMicrobatches; ++M)
          add(S, M, [v](ScheduleParams& p) { p.chunks = v; });
      }
    } else if (name == "chimera" || name == "chimera-asym") {
      if (S % 2) continue;
      const std::vector<std::string> splits =
          name == "chimera" ? std::vector<std::string>{""}
                            : std::vector<std::string>{"1:1", "1:2", "2:1", "3:5"};
      for (const auto& split : splits) {
        for (const char* variant : {"direct", "doubling"}) {
          const int step = std::string(variant) == "doubling" ? 2 * S : S;
          for (int M = step; M <= kMaxMicrobatches; M += step) {
            add(S, M, [&](ScheduleParams& p) {
              p.variant = variant;
              if (!split.empty()) p.split = split;
            });
          }
        }
      }
    } else if (name == "1f1b-split" || name == "zb-h1" || name == "zb-h2") {
      for (int M = 1; M <= kMaxMicrobatches; ++M)
        add(S, M, none);
    } else if (name == "hanayo") {
      for (int W = 1; W <= 4; ++W)
        add(S, S, [W](ScheduleParams& p) { p.waves = W; });
    } else if (name == "dualpipe") {
      if (S % 2) continue;
      for (int M = 2 * S; M <= kMaxMicrobatches; M += 2)
        add(S, M, none);
    } else if (name == "dualpipev") {
      for (int M = 2 * S; M <= kMaxMicrobatches; M += 3)
        add(S, M, none);
    } else if (name == "looped-bfs") {
      for (int v = 1; v <= 4; ++v) {
        for (int M : {1, S / 2 + 1, S, 2 * S + 1, kMaxMicrobatches})
          add(S, M, [v](ScheduleParams& p) { p.chunks = v; });
      }
    } else if (name == "zb-v" || name == "v-half" || name == "v-min" || name == "v-1f1b") {
      for (int M = 1; M <= kMaxMicrobatches; ++M)
        add(S, M, none);
    }
  }
  return out;
}

// Checks every configuration of a schedule; `extra` adds schedule-specific checks.
void check_grid(const std::string& name,
                const std::function<void(const Config&, const ScheduleTable&)>& extra = {}) {
  const auto configs = grid(name);
  ASSERT_FALSE(configs.empty());
  int failures = 0;
  for (const auto& config : configs) {
    const auto label = config.label();
    const auto t = test::make(name, config.params);
    const auto report = validate(t);
    ASSERT_TRUE(report.ok()) << label << ": " << to_string(report.issues.front());
    ASSERT_TRUE(t.same_schedule(test::make(name, config.params))) << label << ": not deterministic";
    const auto resolved = test::resolved(name, config.params);
    const auto peaks = activation_peaks(t);

    const bool split = has_split_backward(t);
    for (const auto& [F, I, W] : kCosts) {
      const double B = I + W;
      const Costs costs = test::split_costs(F, I, W);
      const auto timing = idealized_timing(t, costs);
      const double work = t.microbatches * (F + B);
      for (int d = 0; d < t.devices; ++d) {
        EXPECT_NEAR(timing.busy[static_cast<std::size_t>(d)], work, 1e-9 * work)
            << label << " device " << d;
      }
      // Lower bounds: a device's work, and one microbatch's chain through every stage.
      EXPECT_GE(timing.makespan, work * (1 - 1e-12)) << label;
      // The stages of a pipeline sum to S shares; W is off the chain.
      const double chain = t.devices * (F + (split ? I : B));
      EXPECT_GE(timing.makespan, chain * (1 - 1e-12)) << label;
      EXPECT_LE(span_bubble_ratio(timing), bubble_ratio(timing) + 1e-12) << label;

      const auto f = formula(resolved, costs);
      if (f.makespan) {
        const bool ok = std::abs(*f.makespan - timing.makespan) <= 1e-9 * timing.makespan &&
                        std::abs(*f.bubble_ratio - bubble_ratio(timing)) <= 1e-9;
        EXPECT_TRUE(ok) << label << " F=" << F << " I=" << I << " W=" << W << ": formula makespan "
                        << *f.makespan << " table " << timing.makespan;
        if (!ok && ++failures > 5) FAIL() << "too many failures";
      }
      if (f.span_bubble_ratio) {
        EXPECT_NEAR(*f.span_bubble_ratio, span_bubble_ratio(timing), 1e-9)
            << label << " F=" << F << " I=" << I << " W=" << W;
      }
      // The published ratios assume equal forward and backward slots (F = I = W for the
      // split schedules): there they are exact, in the paper's own definition.
      const bool paper_costs = split ? F == I && I == W : F == B;
      // Approximate published rates (V-Half, V-Min) are checked by their own tests.
      if (paper_costs && f.published_bubble_ratio &&
          f.published_kind != PublishedBubble::approximate_span) {
        const double measured = f.published_kind == PublishedBubble::span
                                    ? span_bubble_ratio(timing)
                                    : bubble_ratio(timing);
        EXPECT_NEAR(*f.published_bubble_ratio, measured, 1e-9) << label;
      }
    }
    const auto f = formula(resolved, Costs{});
    if (f.peak_activation) {
      EXPECT_EQ(peaks, *f.peak_activation) << label;
    }
    for (double peak : peaks) {
      EXPECT_GT(peak, 0.0) << label;
      EXPECT_LE(peak, t.microbatches * 1.0 + 1e-12) << label;  // never more than every microbatch
    }
    if (extra) extra(config, t);
  }
}

TEST(Grid, GPipe) {
  check_grid("gpipe", [](const Config& c, const ScheduleTable& t) {
    EXPECT_EQ(activation_peaks(t), std::vector<double>(static_cast<std::size_t>(t.devices),
                                                       static_cast<double>(c.params.microbatches)));
  });
}

TEST(Grid, OneFOneB) {
  check_grid("1f1b", [](const Config& c, const ScheduleTable& t) {
    // Reference §3(e): device d holds min(S - d, M) microbatches.
    for (int d = 0; d < t.devices; ++d) {
      EXPECT_EQ(activation_peaks(t)[static_cast<std::size_t>(d)],
                std::min<double>(t.devices - d, static_cast<double>(c.params.microbatches)))
          << c.label();
    }
    // The paper's claim: GPipe and 1F1B run equally long, 1F1B with the lower (or equal) peak.
    const auto gpipe = test::make("gpipe", c.params);
    EXPECT_EQ(idealized_timing(gpipe, Costs{}).makespan, idealized_timing(t, Costs{}).makespan)
        << c.label();
    const auto g = activation_peaks(gpipe), o = activation_peaks(t);
    EXPECT_LE(*std::max_element(o.begin(), o.end()), *std::max_element(g.begin(), g.end()))
        << c.label();
  });
}

// The classic interleaved order, written independently of the generator: virtual k runs
// microbatch (k div vS)·S + (k mod S) on chunk (k mod vS) div S, warm-up min(vM, 2(S-d-1) +
// (v-1)S); `all_warmup_when_m_is_s`: every forward in warm-up when M = S (Megatron before the group
// size, and pipetab's generator until the group size came).
ScheduleTable classic_interleaved(int S, int M, int v, bool all_warmup_when_m_is_s) {
  std::vector<std::int32_t> placement(static_cast<std::size_t>(v * S));
  for (int s = 0; s < v * S; ++s)
    placement[static_cast<std::size_t>(s)] = s % S;
  TableBuilder table(S, v * S, M, placement, std::int64_t{2} * v * S * M);
  const int total = v * M;
  for (int d = 0; d < S; ++d) {
    const int warmup =
        all_warmup_when_m_is_s && M == S ? total : std::min(total, 2 * (S - d - 1) + (v - 1) * S);
    const auto microbatch = [&](int k) { return (k / (v * S)) * S + k % S; };
    const auto chunk = [&](int k) { return (k % (v * S)) / S; };
    const auto forward = [&](int k) { table.push(PassKind::F, microbatch(k), chunk(k) * S + d); };
    const auto backward = [&](int k) {
      table.push(PassKind::B, microbatch(k), (v - 1 - chunk(k)) * S + d);
    };
    for (int k = 0; k < warmup; ++k)
      forward(k);
    for (int k = 0; k < total - warmup; ++k) {
      forward(k + warmup);
      backward(k);
    }
    for (int k = total - warmup; k < total; ++k)
      backward(k);
    table.end_row();
  }
  return std::move(table).finish();
}

TEST(Grid, Interleaved) {
  check_grid("interleaved", [](const Config& c, const ScheduleTable& t) {
    const int S = t.devices, v = static_cast<int>(*c.params.chunks);
    const int M = static_cast<int>(c.params.microbatches);
    const int g = static_cast<int>(c.params.group_size.value_or(S));
    EXPECT_EQ(t.stages, v * S);
    for (int s = 0; s < t.stages; ++s)
      EXPECT_EQ(t.placement.device[static_cast<std::size_t>(s)], s % S);
    if (v == 1) {
      auto plain = c.params;
      plain.chunks.reset();
      EXPECT_TRUE(t.same_schedule(test::make("1f1b", plain))) << c.label();
      return;
    }
    if (!c.params.group_size) {
      // Megatron's interleaving memory penalty on device 0: S(1 + (S-1)/(vS)) M_a (reference
      // §4(e)), at most every microbatch.
      const double penalty = S * (1.0 + (S - 1.0) / (v * S));
      EXPECT_NEAR(activation_peaks(t).front(), std::min(penalty, static_cast<double>(M)), 1e-12)
          << c.label();
      // The classic order, exactly; at M = S the classic generator ran every forward as warm-up
      // (Megatron before the group size), which current Megatron no longer does: same makespan
      // under every cost ratio, lower peaks on the later devices.
      EXPECT_TRUE(t.same_schedule(classic_interleaved(S, M, v, false))) << c.label();
      const auto old = classic_interleaved(S, M, v, true);
      if (M == S && S > 1) {
        EXPECT_FALSE(t.same_schedule(old)) << c.label();
      }
      for (const auto& [F, I, W] : kCosts) {
        const Costs costs = test::split_costs(F, I, W);
        const double makespan = idealized_timing(t, costs).makespan;
        EXPECT_NEAR(makespan, idealized_timing(old, costs).makespan, 1e-12 * makespan) << c.label();
      }
      const auto old_peaks = activation_peaks(old);
      const auto peaks = activation_peaks(t);
      for (int d = 0; d < S; ++d) {
        EXPECT_LE(peaks[static_cast<std::size_t>(d)], old_peaks[static_cast<std::size_t>(d)])
            << c.label();
      }
    }
    // Megatron's schedule table: on every device the forwards walk the microbatches in groups of
    // g (the last takes the rest), each group through chunks 0 .. v-1; every stage runs its
    // forwards and its backwards in microbatch order (Megatron's FIFO per chunk).
    std::vector<std::pair<int, int>> expected;  // (microbatch, chunk)
    for (int first = 0; first < M; first += g) {
      const int end = std::min(M, first + g);
      for (int chunk = 0; chunk < v; ++chunk) {
        for (int m = first; m < end; ++m)
          expected.emplace_back(m, chunk);
      }
    }
    for (int d = 0; d < S; ++d) {
      std::vector<std::pair<int, int>> forwards;
      std::vector<int> next_forward(static_cast<std::size_t>(t.stages), 0);
      std::vector<int> next_backward(static_cast<std::size_t>(t.stages), 0);
      for (const Op& op : t.row(d)) {
        const Pass& p = op.first();
        auto& next = p.kind == PassKind::F ? next_forward : next_backward;
        EXPECT_EQ(p.microbatch, next[static_cast<std::size_t>(p.stage)]++) << c.label();
        if (p.kind == PassKind::F) forwards.emplace_back(p.microbatch, p.stage / S);
      }
      ASSERT_EQ(forwards, expected) << c.label() << " device " << d;
    }
  });
}

// PipeOffload's GIS, GIS-H and PO (tests/test_gis.cpp and test_po.cpp check their orders, closed
// forms and Table 1's bounds).
TEST(Grid, Gis) {
  check_grid("gis");
  check_grid("gis-h");
  check_grid("po");
}

TEST(Grid, InterleavedZb) {
  check_grid("interleaved-zb", [](const Config& c, const ScheduleTable& t) {
    const int S = t.devices, v = static_cast<int>(*c.params.chunks);
    EXPECT_EQ(t.stages, v * S);
    for (int s = 0; s < t.stages; ++s)
      EXPECT_EQ(t.placement.device[static_cast<std::size_t>(s)], s % S);
    if (v == 1) {
      // One stage per device: ZB-H1's order (W delayed by the device's rank).
      auto plain = c.params;
      plain.chunks.reset();
      EXPECT_TRUE(t.same_schedule(test::make("zb-h1", plain))) << c.label();
    }
    // Device d runs its W in the order of its I, the k-th right after the (k+d)-th I, the rest
    // after the last I.
    for (int d = 0; d < S; ++d) {
      const auto row = t.row(d);
      std::vector<Pass> inputs, weights;
      for (std::size_t k = 0; k < row.size(); ++k) {
        const Pass& p = row[k].first();
        if (p.kind == PassKind::I) inputs.push_back(p);
        if (p.kind != PassKind::W) continue;
        const auto n = static_cast<std::int64_t>(weights.size());
        ASSERT_GT(k, 0U);
        if (n + d < static_cast<std::int64_t>(t.microbatches) * v) {
          const Pass& before = row[k - 1].first();
          EXPECT_EQ(before.kind, PassKind::I) << c.label();
          EXPECT_EQ(static_cast<std::int64_t>(inputs.size()), n + d + 1) << c.label();
        } else {
          EXPECT_EQ(static_cast<std::int64_t>(inputs.size()),
                    static_cast<std::int64_t>(t.microbatches) * v)
              << c.label();
        }
        weights.push_back(p);
      }
      ASSERT_EQ(weights.size(), inputs.size()) << c.label();
      for (std::size_t k = 0; k < inputs.size(); ++k) {
        EXPECT_EQ(weights[k].stage, inputs[k].stage) << c.label();
        EXPECT_EQ(weights[k].microbatch, inputs[k].microbatch) << c.label();
      }
    }
  });
}

TEST(Grid, Chimera) {
  check_grid("chimera", [](const Config& c, const ScheduleTable& t) {
    const int D = t.devices;
    const auto peaks = activation_peaks(t);
    const double lo = c.params.variant == "doubling" ? 1.5 * D + 1 : D / 2.0 + 1;
    const double hi = c.params.variant == "doubling" ? 2.0 * D : D;
    // The paper's range [(D/2 + 1) M_a, D M_a] (doubling: [3D/2 + 1, 2D]).
    EXPECT_EQ(*std::min_element(peaks.begin(), peaks.end()), lo) << c.label();
    EXPECT_EQ(*std::max_element(peaks.begin(), peaks.end()), hi) << c.label();
    EXPECT_EQ(t.pipelines(), 2);
  });
}

TEST(Grid, ChimeraAsym) {
  check_grid("chimera-asym", [](const Config& c, const ScheduleTable& t) {
    // Same order and pairing as Chimera, so the same per-device work; E:L = 1:1 is Chimera.
    auto base = c.params;
    base.split.reset();
    const auto chimera = test::make("chimera", base);
    EXPECT_EQ(t.ops, chimera.ops) << c.label();
    if (c.params.split == "1:1") {
      EXPECT_EQ(activation_peaks(t), activation_peaks(chimera)) << c.label();
    }
  });
}

TEST(Grid, Hanayo) {
  check_grid("hanayo", [](const Config& c, const ScheduleTable& t) {
    EXPECT_EQ(t.stages, 2 * t.devices * static_cast<int>(*c.params.waves));
    EXPECT_EQ(t.placement.device.front(), 0);
    EXPECT_EQ(t.placement.device.back(), 0) << "the last stage returns to device 0";
  });
}

// The F and I passes of a split table, with I read as a full backward B: the order of the
// schedule the split started from.
ScheduleTable without_weight_grads(const ScheduleTable& t) {
  ScheduleTable out = t;
  out.ops.clear();
  out.row_begin = {0};
  for (int d = 0; d < t.devices; ++d) {
    for (const Op& op : t.row(d)) {
      if (op.first().kind == PassKind::W) continue;
      Pass p = op.first();
      if (p.kind == PassKind::I) p.kind = PassKind::B;
      out.ops.push_back(Op::single(p));
    }
    out.row_begin.push_back(static_cast<std::int64_t>(out.ops.size()));
  }
  return out;
}

TEST(Grid, OneFOneBSplit) {
  check_grid("1f1b-split", [](const Config& c, const ScheduleTable& t) {
    EXPECT_TRUE(without_weight_grads(t).same_schedule(test::make("1f1b", c.params))) << c.label();
    // Every W right after its I: memory as 1F1B's (W frees what B would).
    EXPECT_EQ(activation_peaks(t), activation_peaks(test::make("1f1b", c.params))) << c.label();
    for (int d = 0; d < t.devices; ++d) {
      const auto row = t.row(d);
      for (std::size_t k = 0; k < row.size(); ++k) {
        if (row[k].first().kind != PassKind::I) continue;
        ASSERT_LT(k + 1, row.size());
        EXPECT_EQ(row[k + 1].first().kind, PassKind::W) << c.label();
        EXPECT_EQ(row[k + 1].first().microbatch, row[k].first().microbatch) << c.label();
      }
    }
  });
}

TEST(Grid, ZbH1) {
  check_grid("zb-h1", [](const Config& c, const ScheduleTable& t) {
    const int S = t.devices, M = static_cast<int>(c.params.microbatches);
    EXPECT_TRUE(without_weight_grads(t).same_schedule(test::make("1f1b", c.params))) << c.label();
    // Reference §7(e): never more than 1F1B's first device, S microbatches, on any device.
    for (double peak : activation_peaks(t))
      EXPECT_EQ(peak, std::min(S, M)) << c.label();
    // Filling the cool-down with W never makes it slower than W right after I.
    const auto split = test::make("1f1b-split", c.params);
    for (const auto& [F, I, W] : kCosts) {
      const Costs costs = test::split_costs(F, I, W);
      EXPECT_LE(idealized_timing(t, costs).makespan,
                idealized_timing(split, costs).makespan * (1 + 1e-12))
          << c.label() << " F=" << F << " I=" << I << " W=" << W;
    }
  });
}

TEST(Grid, ZbH2) {
  check_grid("zb-h2", [](const Config& c, const ScheduleTable& t) {
    const int S = t.devices, M = static_cast<int>(c.params.microbatches);
    const auto peaks = activation_peaks(t);
    for (double peak : peaks)
      EXPECT_LE(peak, std::min(2 * S - 1, M)) << c.label();  // reference §7(e): (2S-1) M_B
    if (M >= 2 * S - 1) {
      // Zero per-device-span bubble for F = I = W: every device busy from its first forward to
      // its last W (reference §7(d), §15: Def-A 0, Def-B keeps the skew (S-1)F).
      const auto timing = idealized_timing(t, test::split_costs(1, 1, 1));
      EXPECT_NEAR(span_bubble_ratio(timing), 0.0, 1e-12) << c.label();
      EXPECT_EQ(timing.makespan, 3 * M + S - 1) << c.label();
      for (double peak : peaks)
        EXPECT_EQ(peak, 2 * S - 1) << c.label();
    }
  });
}

TEST(Grid, DualPipe) {
  check_grid("dualpipe");
}
TEST(Grid, DualPipeV) {
  check_grid("dualpipev");
}
TEST(Grid, LoopedBfs) {
  check_grid("looped-bfs");
}

TEST(Grid, ZbV) {
  check_grid("zb-v", [](const Config& c, const ScheduleTable& t) {
    EXPECT_EQ(t.stages, 2 * t.devices) << c.label();
  });
}

TEST(Grid, VHalf) {
  check_grid("v-half", [](const Config& c, const ScheduleTable& t) {
    EXPECT_EQ(t.stages, 2 * t.devices) << c.label();
  });
}

TEST(Grid, VMin) {
  check_grid("v-min", [](const Config& c, const ScheduleTable& t) {
    EXPECT_EQ(t.stages, 2 * t.devices) << c.label();
  });
}

TEST(Grid, V1F1B) {
  check_grid("v-1f1b", [](const Config& c, const ScheduleTable& t) {
    EXPECT_EQ(t.stages, 2 * t.devices) << c.label();
    // Whole backwards: each device runs 2M forwards and 2M backwards, M per chunk.
    for (int d = 0; d < t.devices; ++d)
      EXPECT_EQ(t.row(d).size(), 4 * static_cast<std::size_t>(c.params.microbatches)) << c.label();
  });
}

TEST(Grid, EveryRegisteredScheduleHasAGrid) {
  for (const auto* info : all_schedules())
    EXPECT_FALSE(grid(std::string(info->name)).empty()) << info->name;
}

}  // namespace
}  // namespace pipetab
