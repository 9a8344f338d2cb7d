// Sweep throughput: a 10,000-configuration table-level study and a 1,000-configuration simulated
// study, at 1 and 2 threads (the argument), rows formatted as CSV as `pipetab sweep` writes them.
#include <benchmark/benchmark.h>
#include <fmt/format.h>

#include "pipetab/study/sweep.hpp"

namespace {

using namespace pipetab;

// 5 schedules × S ∈ {4, 8} × M = 8, 16, ..., 400 × 20 cost ratios B/F = 1.0, 1.1, ..., 2.9.
const SweepPlan& table_plan() {
  static const SweepPlan plan = [] {
    Study s;
    for (const char* name : {"gpipe", "1f1b", "interleaved", "chimera", "chimera-asym"})
      s.schedules.emplace_back().name = name;
    s.devices = {4, 8};
    s.microbatches.clear();
    for (int m = 8; m <= 400; m += 8)
      s.microbatches.push_back(m);
    s.costs.clear();
    for (int b = 10; b < 30; ++b)
      s.costs.push_back(fmt::format("F=1,B={}", b / 10.0));
    s.simulate = false;
    return SweepPlan(s);
  }();
  return plan;
}

// 4 schedules × S ∈ {4, 8} × 5 bandwidth factors × M = 8, 16, ..., 200, on the balanced system.
const SweepPlan& simulated_plan() {
  static const SweepPlan plan = [] {
    Study s;
    for (const char* name : {"gpipe", "1f1b", "interleaved", "chimera"})
      s.schedules.emplace_back().name = name;
    s.devices = {4, 8};
    s.microbatches.clear();
    for (int m = 8; m <= 200; m += 8)
      s.microbatches.push_back(m);
    s.systems = {"balanced"};
    s.bandwidth_scale = {0.5, 0.75, 1.0, 1.5, 2.0};
    return SweepPlan(s);
  }();
  return plan;
}

void run(benchmark::State& state, const SweepPlan& plan) {
  const auto total = static_cast<std::int64_t>(plan.configurations().size());
  std::int64_t skipped = 0;
  for (auto _ : state) {
    std::string out;
    skipped = 0;
    run_sweep(plan, 0, total, static_cast<int>(state.range(0)), [&](std::int64_t, SweepRow&& row) {
      skipped += row[1] == "skipped";
      out += format_row(plan, row, SweepFormat::Csv);
    });
    benchmark::DoNotOptimize(out.data());
  }
  state.counters["configurations"] = static_cast<double>(total);
  state.counters["skipped"] = static_cast<double>(skipped);
  state.counters["configurations_per_second"] =
      benchmark::Counter(static_cast<double>(total), benchmark::Counter::kIsIterationInvariantRate);
}

void BM_SweepTableLevel(benchmark::State& state) {
  run(state, table_plan());
}
void BM_SweepSimulated(benchmark::State& state) {
  run(state, simulated_plan());
}

BENCHMARK(BM_SweepTableLevel)->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_SweepSimulated)->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace
