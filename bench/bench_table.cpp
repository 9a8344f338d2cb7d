// Table-level throughput (issue: at least 10 million ops per second on one core, memory linear
// in ops): generation, validation, idealized timing and activation peaks, apart and together,
// for 1F1B S=64 M=4096 (524,288 ops) and interleaved S=64 v=4 M=4096 (2,097,152 ops); the
// generator of every registered schedule at S=16 M=1024; the zero-bubble heuristic.
#include <string>

#include <benchmark/benchmark.h>

#include "pipetab/allocator.hpp"
#include "pipetab/error.hpp"
#include "pipetab/schedules/registry.hpp"
#include "pipetab/schedules/zero_bubble.hpp"
#include "pipetab/table/comm_order.hpp"
#include "pipetab/table/memory.hpp"
#include "pipetab/table/timing.hpp"
#include "pipetab/table/validate.hpp"

namespace {

using namespace pipetab;

ScheduleParams params(std::int64_t chunks) {
  ScheduleParams p;
  p.devices = 64;
  p.microbatches = 4096;
  if (chunks > 0) p.chunks = chunks;
  return p;
}

const char* name_of(std::int64_t chunks) {
  return chunks > 0 ? "interleaved" : "1f1b";
}

void report(benchmark::State& state, const ScheduleTable& table) {
  state.SetItemsProcessed(state.iterations() * static_cast<std::int64_t>(table.ops.size()));
  state.counters["ops"] = static_cast<double>(table.ops.size());
  // Bytes the table itself holds per op (flat arrays: ops, row index, placement, pipelines).
  const double bytes = static_cast<double>(
      table.ops.capacity() * sizeof(Op) + table.row_begin.capacity() * sizeof(std::int64_t) +
      table.placement.device.capacity() * sizeof(std::int32_t) + table.pipeline_of.capacity());
  state.counters["table_bytes_per_op"] = bytes / static_cast<double>(table.ops.size());
}

// The whole table level: generate + validate + idealized timing + activation peaks.
void BM_TableLevel(benchmark::State& state) {
  const auto& info = find_schedule(name_of(state.range(0)));
  const auto p = params(state.range(0));
  ScheduleTable last;
  for (auto _ : state) {
    auto table = generate(info, p);
    const auto report = validate(table);
    if (!report.ok()) state.SkipWithError("invalid table");
    const auto timing = idealized_timing(table, Costs{});
    const auto peaks = activation_peaks(table);
    benchmark::DoNotOptimize(timing.makespan);
    benchmark::DoNotOptimize(peaks.data());
    last = std::move(table);
  }
  report(state, last);
}

void BM_Generate(benchmark::State& state) {
  const auto& info = find_schedule(name_of(state.range(0)));
  const auto p = params(state.range(0));
  ScheduleTable last;
  for (auto _ : state) {
    auto table = generate(info, p);
    benchmark::DoNotOptimize(table.ops.data());
    last = std::move(table);
  }
  report(state, last);
}

void BM_Validate(benchmark::State& state) {
  const auto table = generate(find_schedule(name_of(state.range(0))), params(state.range(0)));
  for (auto _ : state)
    benchmark::DoNotOptimize(validate(table).total);
  report(state, table);
}

void BM_IdealizedTiming(benchmark::State& state) {
  const auto table = generate(find_schedule(name_of(state.range(0))), params(state.range(0)));
  for (auto _ : state)
    benchmark::DoNotOptimize(idealized_timing(table, Costs{}).makespan);
  report(state, table);
}

void BM_ActivationPeaks(benchmark::State& state) {
  const auto table = generate(find_schedule(name_of(state.range(0))), params(state.range(0)));
  for (auto _ : state)
    benchmark::DoNotOptimize(activation_peaks(table).data());
  report(state, table);
}

// Every registered generator at S = 16 and the first of M = 1024, 1040 (= 65·16, for schedules
// needing a multiple of S or 2S) and 16 (Hanayo's M = S) that it accepts; defaults otherwise.
void BM_GenerateSchedule(benchmark::State& state, const ScheduleInfo* info) {
  ScheduleParams p;
  p.devices = 16;
  ScheduleTable table;
  for (const std::int64_t M : {1024, 1040, 16}) {
    p.microbatches = M;
    try {
      table = generate(*info, p);
      break;
    } catch (const ParamError&) {
    }
  }
  if (table.ops.empty()) {
    state.SkipWithError("no accepted size");
    return;
  }
  for (auto _ : state) {
    auto t = generate(*info, p);
    benchmark::DoNotOptimize(t.ops.data());
  }
  report(state, table);
}

const bool kEverySchedule = [] {
  for (const auto* info : all_schedules()) {
    benchmark::RegisterBenchmark(("BM_GenerateSchedule/" + std::string(info->name)).c_str(),
                                 BM_GenerateSchedule, info)
        ->Unit(benchmark::kMillisecond);
  }
  return true;
}();

// One run of the zero-bubble heuristic (8 flag combinations, the best kept) at S = 16,
// M = 1024, cap 2S - 1, F = I = W = 1 with a transfer delay of 0.1.
void BM_ZeroBubbleHeuristic(benchmark::State& state) {
  auto problem = ZeroBubbleProblem::uniform(16, 1024, 1, 1, 1, 31);
  problem.comm = 0.1;
  ScheduleTable table;
  for (auto _ : state) {
    auto best = best_zero_bubble_schedule(problem);
    benchmark::DoNotOptimize(best.makespan);
    table = std::move(best.table);
  }
  report(state, table);
}
BENCHMARK(BM_ZeroBubbleHeuristic)->Unit(benchmark::kMillisecond);

// Scaling with the pipeline depth (issue 14): items/s stays flat where the cost is linear in
// the ops. Argument: S.
//  - PyTorch's send/receive lowering of 1F1B at M = 1, where one microbatch crosses S devices
//    one per round (it was quadratic: every remaining device visited every round);
//  - the activation peaks of the same table (quadratic while every device copied every stage's
//    size);
//  - V-Half at M = S, whose reordering moves ~S² passes each up to ~S slots (cubic while every
//    move walked its distance; O(log) per move now).
ScheduleTable deep(const char* name, std::int64_t S, std::int64_t M) {
  ScheduleParams p;
  p.devices = static_cast<std::int32_t>(S);
  p.microbatches = static_cast<std::int32_t>(M);
  return generate(find_schedule(name), p);
}

void BM_DeepSendRecv(benchmark::State& state) {
  const auto table = deep("1f1b", state.range(0), 1);
  for (auto _ : state)
    benchmark::DoNotOptimize(pytorch_send_recv(table).actions.data());
  report(state, table);
}

void BM_DeepActivationPeaks(benchmark::State& state) {
  const auto table = deep("1f1b", state.range(0), 1);
  for (auto _ : state)
    benchmark::DoNotOptimize(activation_peaks(table).data());
  report(state, table);
}

void BM_VHalfAtMEqualsS(benchmark::State& state) {
  ScheduleTable table;
  for (auto _ : state) {
    table = deep("v-half", state.range(0), state.range(0));
    benchmark::DoNotOptimize(table.ops.data());
  }
  report(state, table);
}

BENCHMARK(BM_DeepSendRecv)->Arg(1024)->Arg(4096)->Arg(16384)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_DeepActivationPeaks)->Arg(1024)->Arg(4096)->Arg(16384)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_VHalfAtMEqualsS)->Arg(64)->Arg(128)->Arg(256)->Unit(benchmark::kMillisecond);

// Argument: chunks (0 = 1F1B, 4 = interleaved with v = 4).
BENCHMARK(BM_TableLevel)->Arg(0)->Arg(4)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Generate)->Arg(0)->Arg(4)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Validate)->Arg(0)->Arg(4)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_IdealizedTiming)->Arg(0)->Arg(4)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_ActivationPeaks)->Arg(0)->Arg(4)->Unit(benchmark::kMillisecond);

}  // namespace

// BENCHMARK_MAIN with the allocator policy of the pipetab command (pipetab/allocator.hpp).
int main(int argc, char** argv) {
  pipetab::keep_freed_memory();
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
