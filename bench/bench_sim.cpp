// Simulation throughput (issue: 1F1B S=64 M=4096 on dgx-h100, about a million graph nodes,
// under 1 s with contention and under 0.3 s without, memory linear in nodes).
#include <string>

#include <benchmark/benchmark.h>

#include "pipetab/io/config.hpp"
#include "pipetab/schedules/registry.hpp"
#include "pipetab/sim/engine.hpp"
#include "pipetab/sim/error_bar.hpp"
#include "pipetab/sim/options.hpp"
#include "pipetab/sim/simulation.hpp"

namespace {

using namespace pipetab;

struct Setup {
  ScheduleTable table;
  SimulationSetup run;  ///< the model with its file's job and layout, the system
};

// GPT-3 175B: its 96 layers fill the 64 stages.
const Setup& setup() {
  static const Setup s = [] {
    ScheduleParams p;
    p.devices = 64;
    p.microbatches = 4096;
    return Setup{generate(find_schedule("1f1b"), p),
                 default_setup(io::load_model("gpt3-175b"), io::load_system("dgx-h100"))};
  }();
  return s;
}

void BM_Lower(benchmark::State& state) {
  const auto& s = setup();
  const Network network(s.run.system, s.table.devices);
  std::int64_t nodes = 0;
  for (auto _ : state) {
    const auto graph = lower(s.table, s.run.model, s.run.job, s.run.layout, network);
    nodes = graph.nodes();
    benchmark::DoNotOptimize(graph.succ.data());
  }
  state.counters["nodes"] = static_cast<double>(nodes);
  state.SetItemsProcessed(state.iterations() * nodes);
}

// Argument: 1 with contention (max-min fair sharing), 0 without.
void BM_Simulate(benchmark::State& state) {
  const auto& s = setup();
  const Network network(s.run.system, s.table.devices);
  const auto graph = lower(s.table, s.run.model, s.run.job, s.run.layout, network);
  SimOptions options;
  options.contention = state.range(0) != 0;
  std::int64_t events = 0;
  for (auto _ : state) {
    const auto result = simulate(graph, network, options);
    events = result.events;
    benchmark::DoNotOptimize(result.runtime_s);
  }
  state.counters["nodes"] = static_cast<double>(graph.nodes());
  state.counters["events"] = static_cast<double>(events);
  state.counters["events_per_second"] = benchmark::Counter(
      static_cast<double>(events), benchmark::Counter::kIsIterationInvariantRate);
}

// Simulates the schedule's table under `s` once per iteration; counts its nodes and events.
void simulate_each_iteration(benchmark::State& state, const std::string& schedule,
                             const ScheduleParams& p, const SimulationSetup& s) {
  const auto table = generate(find_schedule(schedule), p);
  std::int64_t events = 0, nodes = 0;
  for (auto _ : state) {
    const auto sim = simulate_table(table, s, schedule);
    events = sim.result.events;
    nodes = sim.graph.nodes();
    benchmark::DoNotOptimize(sim.metrics.runtime_s);
  }
  state.counters["nodes"] = static_cast<double>(nodes);
  state.counters["events"] = static_cast<double>(events);
}

// A mixture of experts, its all-to-alls flows inside the ops (each op a program of compute and
// waits): Qwen3-235B-A22B in reference M7's layout (TP 2 with SP, PP 8 × interleaved v 4, DP 16,
// EP 32, 128 microbatches) on dgx-h100, with `job` changed as a benchmark needs, lowered and
// simulated.
template <class JobChange>
void simulate_m7(benchmark::State& state, const JobChange& change) {
  SimulationSetup s = default_setup(io::load_model("qwen3-235b-a22b"), io::load_system("dgx-h100"));
  s.job.distributed_optimizer = true;
  s.layout.tp = 2;
  s.layout.sequence_parallel = true;
  s.layout.dp = 16;
  s.layout.ep = 32;
  change(s.job);
  require_runnable(s.model, s.job, s.layout);
  ScheduleParams p;
  p.devices = 8;
  p.chunks = 4;
  p.microbatches = 128;
  simulate_each_iteration(state, "interleaved", p, s);
}

// Argument 1: with Megatron-Core's combined 1F1B (--a2a-overlap), 0 without.
void BM_SimulateMoe(benchmark::State& state) {
  simulate_m7(state, [&](Job& job) { job.a2a_overlap = state.range(0) != 0; });
}

// With Megatron-Core's fine-grained offload of core_attn, attn_proj and expert_fc1: their copies
// to and from host memory as flows the ops issue and wait for (three groups a layer, both ways).
// Argument 1: offloaded, 0: not (the same graph without copies).
void BM_SimulateMoeOffload(benchmark::State& state) {
  simulate_m7(state, [&](Job& job) {
    if (state.range(0) == 0) return;
    job.offload_modules = offload_bit(OffloadModule::CoreAttn) |
                          offload_bit(OffloadModule::AttnProj) |
                          offload_bit(OffloadModule::ExpertFc1);
  });
}

// FSDP without pipelining (F13's layout: Llama 2 70B, FSDP 64 on A100s), its ops run block by
// block: 79 gathers and reduce-scatters as flows inside each of the 2·M ops.
void BM_SimulateFsdpBlocks(benchmark::State& state) {
  SimulationSetup s = default_setup(io::load_model("llama2-70b"), io::load_system("a100-80gb"));
  s.lowering.runtime = Runtime::Async;  // the engine's default, which this benchmark has run
  s.layout.dp = 64;
  s.layout.fsdp.enabled = true;
  require_runnable(s.model, s.job, s.layout);
  ScheduleParams p;
  p.devices = 1;
  p.microbatches = state.range(0);
  simulate_each_iteration(state, "1f1b", p, s);
}

// The error bar every simulation gets (sim/error_bar.hpp): a carried interval, the costlier
// kind (its residuals grouped by preset), from the built-in residuals.
void BM_ErrorBar(benchmark::State& state) {
  const SimulationSetup s =
      default_setup(io::load_model("llama3.1-8b"), io::load_system("dgx-h100"));
  (void)builtin_residuals();  // parsed once, before timing
  for (auto _ : state)
    benchmark::DoNotOptimize(runtime_interval(s, 2.0, 4));
}

BENCHMARK(BM_ErrorBar)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_Lower)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_SimulateFsdpBlocks)->Arg(2)->Arg(16)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_SimulateMoe)->Arg(0)->Arg(1)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_SimulateMoeOffload)->Arg(0)->Arg(1)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Simulate)->Arg(1)->Arg(0)->Unit(benchmark::kMillisecond);

}  // namespace
