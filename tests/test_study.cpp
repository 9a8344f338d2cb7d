// Studies: the study file parser, the grid expansion, the parallel sweep (order, shards, stops)
// and the sensitivity analysis.
#include <atomic>
#include <cmath>
#include <set>

#include "helpers.hpp"
#include <gtest/gtest.h>

#include "pipetab/error.hpp"
#include "pipetab/io/config.hpp"
#include "pipetab/report/evaluation.hpp"
#include "pipetab/sim/options.hpp"
#include "pipetab/study/sensitivity.hpp"
#include "pipetab/study/study.hpp"
#include "pipetab/study/sweep.hpp"

namespace pipetab {
namespace {

const char* kSmall = R"(
name = "small"
[grid]
schedules = ["gpipe", "1f1b", "chimera", { name = "hanayo", microbatches = [4] }, { name = "interleaved", chunks = [2, 4] }]
devices = [2, 4]
microbatches = { from = 2, to = 16, times = 2 }
systems = ["balanced", "network-bound"]
bandwidth_scale = [0.5, 1]
)";

std::string all_rows(const SweepPlan& plan, int threads, SweepFormat format = SweepFormat::Csv,
                     std::int64_t begin = 0, std::int64_t end = -1) {
  if (end < 0) end = static_cast<std::int64_t>(plan.configurations().size());
  std::string out;
  std::int64_t expected = begin;
  run_sweep(plan, begin, end, threads, [&](std::int64_t index, SweepRow&& row) {
    EXPECT_EQ(index, expected++);
    out += format_row(plan, row, format);
  });
  EXPECT_EQ(expected, end);
  return out;
}

// The ParseError of a study text, as "FILE:LINE:COLUMN: message".
std::string study_error(const std::string& text) {
  try {
    (void)parse_study(text, "study.toml");
  } catch (const ParseError& e) {
    return e.what();
  }
  return "no error";
}

TEST(Study, ParsesAxesAndExpandsInOrder) {
  const auto study = parse_study(kSmall, "study.toml");
  EXPECT_EQ(study.name, "small");
  EXPECT_EQ(study.microbatches, (std::vector<std::int64_t>{2, 4, 8, 16}));
  ASSERT_EQ(study.schedules.size(), 5U);
  EXPECT_EQ(study.schedules[3].microbatches, (std::vector<std::int64_t>{4}));
  EXPECT_EQ(study.schedules[4].chunks, (std::vector<std::int64_t>{2, 4}));
  const auto configs = expand(study);
  // Per system × bandwidth (4 network points): gpipe, 1f1b, chimera 2·4 each, hanayo 2·1,
  // interleaved 2·2·4.
  EXPECT_EQ(configs.size(), 4U * (8 + 8 + 8 + 2 + 16));
  for (std::size_t i = 0; i < configs.size(); ++i)
    EXPECT_EQ(configs[i].index, static_cast<std::int64_t>(i));
  // Microbatches vary fastest, then the schedule's options, S, ..., schedule slowest.
  EXPECT_EQ(configs[0].microbatches, 2);
  EXPECT_EQ(configs[1].microbatches, 4);
  EXPECT_EQ(configs[4].devices, 4);
  EXPECT_EQ(configs[8].bandwidth_scale, 1.0);
  EXPECT_EQ(configs[16].system, 1);
  EXPECT_EQ(configs[32].schedule, 1);
  // Options only where the schedule takes them.
  for (const auto& c : configs) {
    EXPECT_EQ(c.chunks.has_value(), c.schedule == 4);
    EXPECT_FALSE(c.waves.has_value());
  }
}

TEST(Study, RangesAndTableLevelStudies) {
  const auto study = parse_study(R"(
simulate = false
record = ["schedule", "table.bubble_ratio"]
[grid]
schedules = ["1f1b"]
devices = { from = 2, to = 8, step = 3 }
microbatches = [8]
costs = ["F=1,B=2", "F=1,B=3"]
)",
                                 "s.toml");
  EXPECT_EQ(study.devices, (std::vector<std::int64_t>{2, 5, 8}));
  const auto configs = expand(study);
  ASSERT_EQ(configs.size(), 6U);
  EXPECT_EQ(configs[0].system, -1);  // not simulated
  const SweepPlan plan(study);
  EXPECT_EQ(plan.columns(), (std::vector<std::string>{"index", "status", "reason", "schedule",
                                                      "table.bubble_ratio"}));
  // 1F1B's bubble (S−1)(F+B) / (M(F+B) + (S−1)(F+B)) = (S−1)/(M+S−1) for any F, B.
  std::vector<double> bubbles;
  run_sweep(plan, 0, 6, 2, [&](std::int64_t, SweepRow&& row) {
    EXPECT_EQ(row[1], "ok");
    EXPECT_EQ(row[3], "1f1b");
    bubbles.push_back(row[4].get<double>());
  });
  const double S[] = {2, 5, 8, 2, 5, 8};  // costs vary slower than S
  for (std::size_t i = 0; i < 6; ++i)
    EXPECT_NEAR(bubbles[i], (S[i] - 1) / (8 + S[i] - 1), 1e-12) << i;
}

TEST(Study, MalformedFilesNameFileLineAndKey) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"[grid]\nschedules = [\"1f1b\"]\ncolour = 1\n",
       "study.toml:3:1: key 'grid.colour': unknown key"},
      {"nmae = 1\n[grid]\nschedules = [\"1f1b\"]\ndevices = [4]\nmicrobatches = [8]\n",
       "study.toml:1:1: key 'nmae': unknown key"},
      {"name = \"x\"\n", "key 'grid': missing"},
      {"[grid]\nschedules = []\n", "study.toml:2:13: key 'grid.schedules': expected a non-empty"},
      {"[grid]\nschedules = [\"1fb1\"]\n",
       "study.toml:2:14: key 'grid.schedules[0]': unknown schedule"},
      {"[grid]\nschedules = [{ name = \"gpipe\", chunks = [2] }]\n",
       "key 'grid.schedules[0].chunks': gpipe does not take chunks"},
      {"[grid]\nschedules = [\"gpipe\"]\nwaves = [2]\n",
       "study.toml:3:9: key 'grid.waves': no schedule of the study takes this option"},
      {"[grid]\nschedules = [{ name = \"chimera\", variants = [\"triple\"] }]\n",
       "chimera has no variant 'triple' (variants: direct, doubling)"},
      {"[grid]\nschedules = [\"1f1b\"]\nmicrobatches = [8, 0]\n",
       "study.toml:3:20: key 'grid.microbatches': 0 is out of range"},
      {"[grid]\nschedules = [\"1f1b\"]\nmicrobatches = [8, 2.5]\n",
       "key 'grid.microbatches': expected whole numbers, got a number with a fraction"},
      {"[grid]\nschedules = [\"1f1b\"]\nmicrobatches = { from = 8, to = 64 }\n",
       "key 'grid.microbatches': expected exactly one of 'step' and 'times'"},
      {"[grid]\nschedules = [\"1f1b\"]\nmicrobatches = { from = 8, to = 4, step = 1 }\n",
       "key 'grid.microbatches.to': 4 is out of range (8.."},
      {"[grid]\nschedules = [\"1f1b\"]\ncosts = [\"F=1,Q=2\"]\n",
       "study.toml:3:10: key 'grid.costs'"},
      {"[grid]\nschedules = [\"1f1b\"]\nsystems = [\"no-such-system\"]\n",
       "study.toml:3:12: key 'grid.systems': --system no-such-system: no such preset or file"},
      {"simulate = false\n[grid]\nschedules = [\"1f1b\"]\nsystems = [\"balanced\"]\n",
       "study.toml:4:11: key 'grid.systems': applies to the simulation level, and simulate = "
       "false"},
      {"[grid]\nschedules = [\"1f1b\"]\nbandwidth_scale = [0]\n",
       "key 'grid.bandwidth_scale': 0 is out of range"},
      {"record = [\"table.bubble\"]\n[grid]\nschedules = [\"1f1b\"]\ndevices = [4]\nmicrobatches = "
       "[8]\n",
       "study.toml:1:11: key 'record': unknown column 'table.bubble'"},
      {"simulate = false\nrecord = [\"simulation.runtime_s\"]\n[grid]\nschedules = "
       "[\"1f1b\"]\ndevices = [4]\nmicrobatches = [8]\n",
       "column 'simulation.runtime_s' needs simulate = true"},
      {"[grid]\nschedules = [{ table = \"missing.csv\" }]\n", "key 'grid.schedules[0].table'"},
      {"[grid]\nschedules = [{ name = \"1f1b\", table = \"x.csv\" }]\n",
       "expected exactly one of the keys 'name' and 'table'"},
      {"[simulation]\ndata_parallel = 0\n[grid]\nschedules = [\"1f1b\"]\ndevices = "
       "[4]\nmicrobatches = [8]\n",
       "key 'simulation.data_parallel': '0': expected a whole number from 1 to 65536"},
      {"[simulation]\nruntime = \"eager\"\n[grid]\nschedules = [\"1f1b\"]\ndevices = "
       "[4]\nmicrobatches = [8]\n",
       "study.toml:2:11: key 'simulation.runtime': 'eager': expected one of auto, async, "
       "megatron, pytorch"},
      {"[simulation]\ntp_overlap = 1\n[grid]\nschedules = [\"1f1b\"]\ndevices = [4]\nmicrobatches "
       "= [8]\n",
       "study.toml:2:14: key 'simulation.tp_overlap': expected a string, got an integer"},
      {"[simulation]\ndp_bucket_bytes = 10\n[grid]\nschedules = [\"1f1b\"]\ndevices = "
       "[4]\nmicrobatches = [8]\n",
       "key 'simulation.dp_bucket_bytes': '10': expected a number from 1000 to 1e+15"},
      {"[grid\nschedules = 1\n", "study.toml:1:6: invalid TOML"},
  };
  for (const auto& [text, fragment] : cases)
    EXPECT_NE(study_error(text).find(fragment), std::string::npos)
        << text << "\n-> " << study_error(text);
}

TEST(Study, RefusesOversizedGrids) {
  Study study;
  study.schedules.emplace_back().name = "1f1b";
  study.devices.assign(1 << 14, 4);
  study.microbatches.assign(1 << 13, 8);
  EXPECT_THROW(expand(study), Error);
}

TEST(Sweep, OutputIsTheSameForAnyThreadCount) {
  const SweepPlan plan(parse_study(kSmall, "study.toml"));
  const auto one = all_rows(plan, 1);
  EXPECT_EQ(all_rows(plan, 4), one);
  EXPECT_EQ(all_rows(plan, 3), one);
  EXPECT_EQ(all_rows(plan, 4, SweepFormat::JsonLines), all_rows(plan, 1, SweepFormat::JsonLines));
}

TEST(Sweep, ShardsConcatenateToTheWhole) {
  const SweepPlan plan(parse_study(kSmall, "study.toml"));
  const auto total = static_cast<std::int64_t>(plan.configurations().size());
  const auto whole = all_rows(plan, 2);
  for (const std::int64_t n :
       {std::int64_t{1}, std::int64_t{2}, std::int64_t{3}, std::int64_t{7}, total, total + 3}) {
    std::string joined;
    std::int64_t covered = 0;
    for (std::int64_t k = 1; k <= n; ++k) {
      const auto [begin, end] = shard_range(total, k, n);
      EXPECT_EQ(begin, covered);
      covered = end;
      joined += all_rows(plan, 2, SweepFormat::Csv, begin, end);
    }
    EXPECT_EQ(covered, total);
    EXPECT_EQ(joined, whole) << n << " shards";
  }
  EXPECT_THROW(shard_range(total, 0, 3), Error);
  EXPECT_THROW(shard_range(total, 4, 3), Error);
}

TEST(Sweep, StopDeliversAPrefixThenTheRestCompletesIt) {
  const SweepPlan plan(parse_study(kSmall, "study.toml"));
  const auto total = static_cast<std::int64_t>(plan.configurations().size());
  const auto whole = all_rows(plan, 1);
  for (const int threads : {1, 2, 4}) {
    for (const std::int64_t after : {1, 5, 40}) {
      std::atomic<bool> stop{false};
      std::string first;
      std::int64_t next = 0;
      const auto count = run_sweep(
          plan, 0, total, threads,
          [&](std::int64_t index, SweepRow&& row) {
            EXPECT_EQ(index, next++);
            first += format_row(plan, row, SweepFormat::Csv);
            if (index + 1 == after) stop = true;
          },
          &stop);
      EXPECT_EQ(count, next);
      EXPECT_GE(count, after);
      EXPECT_LT(count, total) << "the stop was not honoured";
      EXPECT_EQ(first + all_rows(plan, threads, SweepFormat::Csv, count), whole);
    }
  }
}

TEST(Sweep, SkippedConfigurationsKeepTheirValuesAndReason) {
  const SweepPlan plan(parse_study(kSmall, "study.toml"));
  std::int64_t skipped = 0;
  run_sweep(plan, 0, static_cast<std::int64_t>(plan.configurations().size()), 2,
            [&](std::int64_t index, SweepRow&& row) {
              const auto& cfg = plan.configurations()[static_cast<std::size_t>(index)];
              const auto& name =
                  plan.study().schedules[static_cast<std::size_t>(cfg.schedule)].name;
              EXPECT_EQ(row[3], plan.study().systems[static_cast<std::size_t>(cfg.system)]);
              EXPECT_EQ(row[8], name);
              EXPECT_EQ(row[9], cfg.devices);
              EXPECT_EQ(row[11], cfg.microbatches);
              // Chimera needs M a multiple of S; Hanayo M = S; interleaved runs every M (the
              // group size falls back to PyTorch's where M is no multiple of S).
              const bool runs = (name != "chimera" && name != "hanayo") ||
                                (name == "hanayo" ? cfg.microbatches == cfg.devices
                                                  : cfg.microbatches % cfg.devices == 0);
              if (runs) {
                EXPECT_EQ(row[1], "ok") << row[2];
                EXPECT_TRUE(row[2].is_null());
                EXPECT_TRUE(row[plan.columns().size() - 1].is_null());  // simulation.error
              } else {
                ++skipped;
                EXPECT_EQ(row[1], "skipped");
                EXPECT_TRUE(row[2].is_string() && !row[2].get<std::string>().empty());
              }
            });
  EXPECT_GT(skipped, 0);
}

// A scale factor on the grid is the same as a system file with the links scaled by hand.
TEST(Sweep, ScaleFactorsEqualScaledSystems) {
  Study study;
  study.schedules.emplace_back().name = "1f1b";
  study.devices = {4};
  study.microbatches = {8};
  study.systems = {"network-bound"};
  study.bandwidth_scale = {0.5};
  study.latency_scale = {3};
  study.record = {"simulation.runtime_s"};
  study.settings = {{"runtime", "async", ""}};  // as the hand-scaled evaluation below
  const SweepPlan plan(study);
  double runtime = 0.0;
  run_sweep(plan, 0, 1, 1, [&](std::int64_t, SweepRow&& row) { runtime = row[3].get<double>(); });

  // The study's default model.
  SimulationSetup setup = test::preset_setup(io::kDefaultModel, "network-bound");
  for (LinkSpec* link : {&setup.system.intra, &setup.system.inter}) {
    link->bandwidth /= 2;
    link->latency_s *= 3;
  }
  const auto e = evaluate(test::make("1f1b", test::sm(4, 8)), nullptr, "1f1b", Costs{},
                          {MemoryOptions{}, false, &setup});
  EXPECT_EQ(runtime, e.simulation->runtime_s);
}

// Collectives only: a schedule without a replica all-reduce ignores the factor (for a model
// without tied embeddings, whose all-reduce it would scale too), and Chimera's runtime grows
// with it (no contention: more bytes never finish sooner).
TEST(Sweep, CollectiveScaleActsOnCollectivesOnly) {
  Study study;
  study.schedules.emplace_back().name = "1f1b";
  study.schedules.emplace_back().name = "chimera";
  study.devices = {4};
  study.microbatches = {8};
  study.systems = {"network-bound"};
  study.models = {"llama2-70b"};
  study.settings = {{"contention", "false", ""}};
  study.collective_scale = {0.7, 1.0, 1.3};
  study.record = {"simulation.runtime_s"};
  const SweepPlan plan(study);
  std::vector<double> t;
  run_sweep(plan, 0, 6, 2,
            [&](std::int64_t, SweepRow&& row) { t.push_back(row[3].get<double>()); });
  ASSERT_EQ(t.size(), 6U);
  EXPECT_EQ(t[0], t[1]);
  EXPECT_EQ(t[1], t[2]);
  EXPECT_LT(t[3], t[4]);
  EXPECT_LT(t[4], t[5]);
}

// [simulation] sets what the flags of `simulate` set, for every configuration of the study.
TEST(Study, SimulationTableSetsTheRuntimeAndTheIteration) {
  const auto study = parse_study(
      "[simulation]\nruntime = \"megatron\"\ntp_overlap = \"none\"\noptimizer = false\n"
      "dp_overlap = true\ndp_bucket_bytes = 4e7\ndistributed_optimizer = true\ndata_parallel = "
      "2\ncontention = false\n[grid]\nschedules = [\"1f1b\"]\ndevices = [4]\nmicrobatches = [8]\n"
      "systems = [\"dgx-a100\"]\n"
      "models = [\"gpt3-1.3b\"]\n",
      "study.toml");
  SimulationSetup set;
  apply_settings(set, study.settings);
  EXPECT_EQ(set.lowering.runtime, Runtime::Megatron);
  EXPECT_EQ(set.job.tp_overlap, Overlap::Never);
  EXPECT_FALSE(set.lowering.iteration.optimizer);
  EXPECT_TRUE(set.job.dp_overlap);
  EXPECT_EQ(set.job.dp_bucket_bytes, 4e7);
  EXPECT_TRUE(set.job.distributed_optimizer);
  EXPECT_EQ(set.layout.dp, 2);
  EXPECT_FALSE(set.options.contention);
  // A row carries them.
  const SweepPlan plan(study);
  std::vector<SweepRow> rows;
  run_sweep(plan, 0, 1, 1, [&](std::int64_t, SweepRow&& row) { rows.push_back(std::move(row)); });
  const auto columns = plan.columns();
  const auto at = [&](const std::string& name) {
    return rows[0][static_cast<std::size_t>(std::find(columns.begin(), columns.end(), name) -
                                            columns.begin())];
  };
  EXPECT_EQ(at("simulation.runtime"), "megatron");
  EXPECT_EQ(at("simulation.distributed_optimizer"), true);
}

TEST(Sensitivity, Factors) {
  const auto geometric = sensitivity_factors(0.5, 2, 5, true);
  ASSERT_EQ(geometric.size(), 5U);
  EXPECT_DOUBLE_EQ(geometric[0], 0.5);
  EXPECT_NEAR(geometric[1], std::sqrt(0.5), 1e-12);
  EXPECT_EQ(geometric[2], 1.0);
  EXPECT_DOUBLE_EQ(geometric[4], 2.0);
  EXPECT_EQ(sensitivity_factors(0.7, 1.3, 5, false),
            (std::vector<double>{0.7, 0.85, 1.0, 1.15, 1.3}));
  // 1 is added when the steps miss it.
  EXPECT_EQ(sensitivity_factors(0.5, 2, 2, true), (std::vector<double>{0.5, 1.0, 2.0}));
  EXPECT_THROW(sensitivity_factors(1.5, 2, 5, true), Error);
  EXPECT_THROW(sensitivity_factors(0.5, 0.9, 5, true), Error);
  EXPECT_THROW(sensitivity_factors(0.5, 2, 1, true), Error);
}

// The flips reported are exactly the neighbouring pairs whose strict order reverses, recomputed
// here from the runtimes; the baseline runtimes are those of an unperturbed evaluation.
TEST(Sensitivity, FlipsMatchTheRuntimes) {
  Study study;
  for (const char* name : {"gpipe", "1f1b", "chimera", "interleaved"})
    study.schedules.emplace_back().name = name;
  study.devices = {4};
  study.microbatches = {8};
  study.systems = {"network-bound"};
  study.models = {"paper"};                     // whose rankings flip here
  study.settings = {{"runtime", "async", ""}};  // as the unperturbed evaluations below
  const SensitivityAxes axes{sensitivity_factors(0.25, 4, 5, true),
                             sensitivity_factors(0.5, 2, 3, true),
                             sensitivity_factors(0.7, 1.3, 3, false)};
  const double tolerance = 1e-3;
  const auto r = run_sensitivity(study, axes, tolerance, 2);
  ASSERT_EQ(r.points(), 45);
  EXPECT_EQ(r.factors(r.baseline), (std::array<double, 3>{1.0, 1.0, 1.0}));

  const SimulationSetup setup = test::preset_setup("paper", "network-bound");
  for (std::size_t s = 0; s < 4; ++s) {
    const auto e = evaluate(test::make(r.schedules[s], test::sm(4, 8)), nullptr, r.schedules[s],
                            Costs{}, {MemoryOptions{}, false, &setup});
    EXPECT_EQ(r.runtime[static_cast<std::size_t>(r.baseline) * 4 + s], e.simulation->runtime_s);
  }

  // Oracle: along each line of the grid, the points where a pair has a strict order (x clearly
  // faster than y when x < y·(1 − tolerance)); a flip joins consecutive such points whose orders
  // differ.
  std::set<std::tuple<int, std::int64_t, std::int64_t, std::int32_t, std::int32_t>> expected,
      reported;
  const std::int64_t stride[3] = {9, 3, 1}, extent[3] = {5, 3, 3};
  auto t = [&](std::int64_t p, std::int32_t s) {
    return r.runtime[static_cast<std::size_t>(p * 4 + s)];
  };
  for (int axis = 0; axis < 3; ++axis) {
    for (std::int64_t p0 = 0; p0 < 45; ++p0) {
      if (p0 / stride[axis] % extent[axis] != 0) continue;
      for (std::int32_t a = 0; a < 4; ++a) {
        for (std::int32_t b = 0; b < 4; ++b) {
          std::vector<std::pair<std::int64_t, bool>> strict;  // (point, a ahead of b)
          for (std::int64_t k = 0; k < extent[axis]; ++k) {
            const auto p = p0 + k * stride[axis];
            if (t(p, a) < t(p, b) * (1 - tolerance)) strict.emplace_back(p, true);
            if (t(p, b) < t(p, a) * (1 - tolerance)) strict.emplace_back(p, false);
          }
          for (std::size_t i = 1; i < strict.size(); ++i) {
            if (!strict[i - 1].second && strict[i].second)
              expected.insert({axis, strict[i - 1].first, strict[i].first, a, b});
          }
        }
      }
    }
  }
  for (const auto& f : r.flips) {
    EXPECT_EQ((f.to - f.from) % stride[f.axis], 0);
    reported.insert({f.axis, f.from, f.to, f.overtaker, f.overtaken});
  }
  EXPECT_EQ(reported, expected);
  // On this system the bandwidth decides between Chimera and the others; without a flip the
  // comparison above would say nothing.
  EXPECT_FALSE(expected.empty());
  const auto text = to_text(r);
  EXPECT_NE(text.find("overtakes"), std::string::npos);
  EXPECT_EQ(to_json(r)["flips"].size(), r.flips.size());
}

}  // namespace
}  // namespace pipetab
