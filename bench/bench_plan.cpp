// PlanLayout planning: Llama 2 70B on 1,024 DGX H100 GPUs with a global batch of 1,024 sequences,
// the whole default space (issue target: under 60 s on two cores), with and without the branch
// and bound (the argument: 1 prunes), at 2 threads. Counters: layouts, rejected, pruned,
// simulated.
#include <benchmark/benchmark.h>

#include "pipetab/io/config.hpp"
#include "pipetab/study/plan.hpp"

namespace {

using namespace pipetab;

void BM_Plan70BOn1024(benchmark::State& state) {
  PlanRequest q;
  q.model = io::load_model("llama2-70b");
  q.system = io::load_system("dgx-h100");
  q.gpus = 1024;
  q.global_batch = 1024;
  q.lowering.runtime = Runtime::PyTorch;
  q.top = 10;
  q.prune = state.range(0) == 1;
  q.threads = 2;
  PlanResult r;
  for (auto _ : state) {
    r = plan(q);
    benchmark::DoNotOptimize(r.top.data());
  }
  state.counters["layouts"] = static_cast<double>(r.layouts);
  state.counters["rejected"] = static_cast<double>(r.rejected);
  state.counters["pruned"] = static_cast<double>(r.pruned);
  state.counters["simulated"] = static_cast<double>(r.simulated);
}

BENCHMARK(BM_Plan70BOn1024)->Arg(1)->Arg(0)->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace
