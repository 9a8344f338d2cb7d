// `pipetab tune`: the search never returns a table slower than the best built-in that fits the
// same limit, never returns one over the limit, and its output is a valid, deterministic table.
#include "helpers.hpp"
#include <gtest/gtest.h>

#include "pipetab/error.hpp"
#include "pipetab/io/config.hpp"
#include "pipetab/sim/simulation.hpp"
#include "pipetab/study/tune.hpp"
#include "pipetab/table/validate.hpp"

namespace pipetab {
namespace {

TuneRequest request(int S, int M, const std::string& system, MemoryLimit limit) {
  TuneRequest r;
  r.devices = S;
  r.microbatches = M;
  r.setup = test::preset_setup("paper", system);
  r.limit = limit;
  return r;
}

// The fastest registered schedule at its default options that fits, simulated here on its own.
double best_builtin_runtime(const TuneRequest& r) {
  double best = std::numeric_limits<double>::infinity();
  for (const ScheduleInfo* info : all_schedules()) {
    ScheduleTable table;
    try {
      table = generate(*info, test::sm(r.devices, r.microbatches));
    } catch (const ParamError&) {
      continue;
    }
    const auto peaks = activation_peaks(table, r.memory);
    const auto sim = simulate_table(table, r.setup);
    const bool fits = r.limit.unit == MemoryLimit::Unit::Activations
                          ? *std::max_element(peaks.begin(), peaks.end()) <= r.limit.value
                          : sim.metrics.peak_memory_max() <= r.limit.value;
    if (fits) best = std::min(best, sim.metrics.runtime_s);
  }
  return best;
}

void check(const TuneRequest& r) {
  const std::string label = "S=" + std::to_string(r.devices) +
                            " M=" + std::to_string(r.microbatches) + " " + r.setup.system.name +
                            " limit " + to_string(r.limit);
  const auto result = tune(r);
  const double builtin = best_builtin_runtime(r);
  if (result.best < 0) {
    EXPECT_TRUE(std::isinf(builtin)) << label << ": a built-in fits but tune found nothing";
    return;
  }
  const auto& best = result.candidates[static_cast<std::size_t>(result.best)];
  ASSERT_TRUE(validate(best.table).ok()) << label;
  EXPECT_LE(best.runtime_s, builtin * (1 + 1e-12)) << label;
  // The limit, measured again on the returned table.
  const auto peaks = activation_peaks(best.table, r.memory);
  const auto sim = simulate_table(best.table, r.setup);
  EXPECT_EQ(sim.metrics.runtime_s, best.runtime_s) << label;
  if (r.limit.unit == MemoryLimit::Unit::Activations) {
    EXPECT_LE(*std::max_element(peaks.begin(), peaks.end()), r.limit.value + 1e-9) << label;
  } else {
    EXPECT_LE(sim.metrics.peak_memory_max(), r.limit.value) << label;
  }
  // Ranked: fitting candidates first, by runtime.
  for (std::size_t i = 1; i < result.candidates.size(); ++i) {
    const auto& a = result.candidates[i - 1];
    const auto& b = result.candidates[i];
    EXPECT_TRUE(a.fits >= b.fits) << label;
    if (a.fits && b.fits) {
      EXPECT_LE(a.runtime_s, b.runtime_s) << label;
    }
  }
}

TEST(Tune, NeverWorseThanTheBestBuiltInAndNeverOverTheLimit) {
  for (const char* system : {"balanced", "network-bound", "compute-bound"}) {
    for (const auto& [S, M] : {std::pair{2, 4}, {4, 8}, {4, 12}, {6, 12}}) {
      for (const double limit : {1.0, 2.0, S * 1.0, 2.0 * S - 1, 1.0 * M}) {
        check(request(S, M, system, {MemoryLimit::Unit::Activations, limit}));
      }
      for (const double gb : {150.0, 400.0, 900.0, 4000.0})
        check(request(S, M, system, {MemoryLimit::Unit::Bytes, gb * 1e9}));
    }
  }
}

TEST(Tune, HeuristicAloneRespectsTheLimit) {
  auto r = request(4, 16, "network-bound", {MemoryLimit::Unit::Activations, 3});
  r.builtins = false;
  const auto result = tune(r);
  ASSERT_GE(result.best, 0);
  EXPECT_EQ(result.best_builtin, -1);
  for (const auto& c : result.candidates) {
    EXPECT_FALSE(c.builtin);
    EXPECT_EQ(c.fits, c.peak_activation <= 3 + 1e-9) << c.name;
  }
}

TEST(Tune, Deterministic) {
  const auto r = request(4, 8, "balanced", {MemoryLimit::Unit::Activations, 6});
  const auto a = tune(r), b = tune(r);
  ASSERT_EQ(a.candidates.size(), b.candidates.size());
  for (std::size_t i = 0; i < a.candidates.size(); ++i) {
    EXPECT_EQ(a.candidates[i].name, b.candidates[i].name);
    EXPECT_EQ(a.candidates[i].runtime_s, b.candidates[i].runtime_s);
  }
}

TEST(Tune, MemoryLimitParsing) {
  EXPECT_EQ(parse_memory_limit("6").unit, MemoryLimit::Unit::Activations);
  EXPECT_EQ(parse_memory_limit("6Ma").value, 6);
  EXPECT_EQ(parse_memory_limit("2.5M_a").value, 2.5);
  EXPECT_EQ(parse_memory_limit("80GB").unit, MemoryLimit::Unit::Bytes);
  EXPECT_EQ(parse_memory_limit("80GB").value, 80e9);
  EXPECT_EQ(parse_memory_limit("1GiB").value, 1073741824.0);
  EXPECT_EQ(parse_memory_limit("8e10B").value, 8e10);
  for (const char* bad : {"", "GB", "-1", "0", "5XB", "nan", "inf", "6 M a"}) {
    try {
      parse_memory_limit(bad);
      ADD_FAILURE() << "accepted '" << bad << "'";
    } catch (const ParamError& e) {
      EXPECT_NE(std::string(e.what()).find("expected activations in M_a"), std::string::npos);
    }
  }
  // Issue 14: 1e300GB was called "not positive"; the fault is its size.
  for (const char* huge : {"1e300GB", "2e18B", "3e9", "1e300"}) {
    try {
      parse_memory_limit(huge);
      ADD_FAILURE() << "accepted '" << huge << "'";
    } catch (const ParamError& e) {
      EXPECT_NE(std::string(e.what()).find("too large (at most"), std::string::npos) << e.what();
    }
  }
  EXPECT_EQ(parse_memory_limit("2147483648").value, 2147483648.0);
}

// Issue 14: a limit of 2^31 M_a or more overflowed a double-to-int conversion and silently
// dropped the heuristic search (212 candidates became 20). A limit above every peak is no limit:
// the same search as any other limit above every peak.
TEST(Tune, HugeActivationLimitsSearchLikeAnyLimitAboveEveryPeak) {
  const auto ample = tune(request(4, 8, "balanced", {MemoryLimit::Unit::Activations, 100}));
  for (const double limit : {2147483647.0, 2147483648.0}) {
    const auto huge = tune(request(4, 8, "balanced", {MemoryLimit::Unit::Activations, limit}));
    EXPECT_EQ(huge.generated, ample.generated) << limit;
    EXPECT_EQ(huge.candidates.size(), ample.candidates.size()) << limit;
  }
}

TEST(Tune, RejectsBadRequests) {
  auto r = request(4, 8, "balanced", {MemoryLimit::Unit::Activations, 0});
  EXPECT_THROW(tune(r), ParamError);
  r = request(0, 8, "balanced", {MemoryLimit::Unit::Activations, 4});
  EXPECT_THROW(tune(r), ParamError);
  r = request(4, 0, "balanced", {MemoryLimit::Unit::Activations, 4});
  EXPECT_THROW(tune(r), ParamError);
}

}  // namespace
}  // namespace pipetab
