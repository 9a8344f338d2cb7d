// The layout beyond a pipeline (issue 24): FSDP's all-gathers and reduce-scatters in the execution
// graph, context parallelism's KV exchange in the operators, the DP × CP gradient group, memory,
// and the rules a layout must follow. Bytes and counts are worked out by hand in each test.
#include <algorithm>
#include <cmath>

#include "helpers.hpp"
#include <fmt/format.h>
#include <gtest/gtest.h>

#include "pipetab/cost/stage_cost.hpp"
#include "pipetab/error.hpp"
#include "pipetab/io/config.hpp"
#include "pipetab/io/pytorch_csv.hpp"
#include "pipetab/model/operators.hpp"
#include "pipetab/sim/engine.hpp"
#include "pipetab/sim/simulation.hpp"

namespace pipetab {
namespace {

using test::workload;

// Sets `layout` on a setup and checks the run as a command checks it.
void apply(const Layout& layout, SimulationSetup& setup) {
  setup.layout = layout;
  require_runnable(setup.model, setup.job, setup.layout);
}

// A preset under its own job and `layout`, checked as a command checks it.
test::ModelRun preset_with(const std::string& model, const Layout& layout) {
  test::ModelRun run = io::load_model(model);
  run.layout = layout;
  require_runnable(run.model, run.job, run.layout);
  return run;
}

// A simulation of a preset under its own job and `layout`.
Simulation simulate_with(const ScheduleTable& t, const std::string& model,
                         const std::string& system, const Layout& layout,
                         LoweringOptions lowering = {}) {
  SimulationSetup setup = test::preset_setup(model, system);
  setup.lowering = lowering;
  apply(layout, setup);
  return simulate_table(t, setup);
}

std::vector<std::size_t> of_kind(const ExecGraph& g, TransferKind kind) {
  std::vector<std::size_t> out;
  for (std::size_t i = 0; i < g.kind.size(); ++i) {
    if (g.kind[i] == kind) out.push_back(i);
  }
  return out;
}

double bytes_of(const ExecGraph& g, TransferKind kind) {
  double sum = 0.0;
  for (const auto i : of_kind(g, kind))
    sum += g.bytes[i];
  return sum;
}

using test::param_error;

Layout fsdp_over(std::int64_t dp) {
  Layout l;
  l.dp = dp;
  l.fsdp.enabled = true;
  return l;
}

TEST(Fsdp, PipelinedGathersEachStageOnceAndScattersOnce) {
  // 1F1B on S = 2, M = 4, FSDP over 4 ranks in one node: per device one all-gather of its
  // stage's 16-bit parameters (3 ring steps of P·2/4 bytes each, one transfer) before its first
  // forward, and one reduce-scatter of its fp32 gradients (3 steps of P·4/4) after its last
  // backward (torchtitan with pipelining: reshard_after_forward off, gradients synced once per
  // step).
  const auto t = test::make("1f1b", test::sm(2, 4));
  const auto sim = simulate_with(t, "gpt3-1.3b", "dgx-h100", fsdp_over(4));
  const auto& g = sim.graph;
  const auto work = test::table_work(t, io::load_model("gpt3-1.3b"));
  const double params = work[0].params + work[1].params;
  EXPECT_EQ(of_kind(g, TransferKind::FsdpAllGather).size(), 2U);
  EXPECT_EQ(of_kind(g, TransferKind::FsdpReduceScatter).size(), 2U);
  // The three steps' latency in one transfer.
  EXPECT_DOUBLE_EQ(g.latency_s[of_kind(g, TransferKind::FsdpAllGather)[0]],
                   3 * io::load_system("dgx-h100").intra.latency_s);
  EXPECT_TRUE(of_kind(g, TransferKind::DataAllReduce).empty());
  EXPECT_TRUE(of_kind(g, TransferKind::ParamAllGather).empty());
  EXPECT_DOUBLE_EQ(bytes_of(g, TransferKind::FsdpAllGather), 3 * params * 2 / 4);
  EXPECT_DOUBLE_EQ(bytes_of(g, TransferKind::FsdpReduceScatter), 3 * params * 4 / 4);
  // The gather comes before the stage's first forward: device 1's first op cannot start before
  // it ends.
  double gathered = 0.0;
  for (const auto i : of_kind(g, TransferKind::FsdpAllGather)) {
    if (g.device[static_cast<std::size_t>(g.compute_nodes) + i] == 1)
      gathered = std::max(gathered, sim.result.end[static_cast<std::size_t>(g.compute_nodes) + i]);
  }
  const auto first_of_device1 = static_cast<std::size_t>(t.row_begin[1]);
  EXPECT_GE(sim.result.start[first_of_device1], gathered);
  // FSDP2's copies: each reduce-scatter first copies the stage's 16-bit gradients into its fp32
  // input (its latency carries it), and the first forward copies the gathered stage out of the
  // all-gather's buffer (2 B read and written per parameter).
  const auto& device = io::load_system("dgx-h100").device;
  const auto plain = simulate_with(t, "gpt3-1.3b", "dgx-h100", Layout{});
  for (const auto i : of_kind(g, TransferKind::FsdpReduceScatter)) {
    const auto d =
        static_cast<std::size_t>(g.device[static_cast<std::size_t>(g.compute_nodes) + i]);
    EXPECT_DOUBLE_EQ(g.latency_s[i], 3 * io::load_system("dgx-h100").intra.latency_s +
                                         cost::copy_seconds(work[d].params * (2 + 4), device));
  }
  for (std::size_t d = 0; d < 2; ++d) {
    const auto first = static_cast<std::size_t>(t.row_begin[d]);
    EXPECT_NEAR(g.duration[first] - plain.graph.duration[first],
                cost::copy_seconds(work[d].params * 2 * 2, device), 1e-12);
  }
  EXPECT_TRUE(sim.metrics.fsdp);
  EXPECT_EQ(sim.metrics.fsdp_shard, 4);
  EXPECT_FALSE(sim.metrics.reshard_after_forward);
  // Memory: the master weights and Adam's moments (12 B per parameter) over the 4 ranks, plus
  // the stage's unsharded 16-bit parameters (2 B) and its gradients accumulating unsharded in
  // fp32 (4 B); the sharded gradients are made after the last backward.
  for (std::size_t d = 0; d < 2; ++d) {
    const double p = work[d].params;
    EXPECT_DOUBLE_EQ(g.static_bytes[d], p * 12 / 4 + p * 2 + p * 4);
  }
}

TEST(Fsdp, ReshardingGathersBeforeEveryForwardAndBackward) {
  const auto t = test::make("1f1b", test::sm(2, 4));
  Layout l = fsdp_over(4);
  l.fsdp.reshard_after_forward = true;
  l.fsdp.grad_sync = GradSync::PerMicrobatch;
  const auto sim = simulate_with(t, "gpt3-1.3b", "dgx-h100", l);
  // 2 devices × 4 microbatches × (F and B) gathers; 4 reduce-scatters per device.
  EXPECT_EQ(of_kind(sim.graph, TransferKind::FsdpAllGather).size(), 2U * 4 * 2);
  EXPECT_EQ(of_kind(sim.graph, TransferKind::FsdpReduceScatter).size(), 2U * 4);
  EXPECT_TRUE(sim.metrics.reshard_after_forward);
  EXPECT_EQ(sim.metrics.grad_sync, "microbatch");
  // More traffic on the same links can only slow the run.
  const auto once = simulate_with(t, "gpt3-1.3b", "dgx-h100", fsdp_over(4));
  EXPECT_GE(sim.metrics.runtime_s, once.metrics.runtime_s);
}

// A compute+comms table's UNSHARD actions place the gathers (PyTorch's runtime issues each
// asynchronously where it stands): resharding device 1's stage after its first microbatch and
// unsharding it again adds one gather, issued as 1B0 starts and waited for by 1F1.
TEST(Fsdp, UnshardActionsPlaceTheGathers) {
  const std::string device0 = "0UNSHARD,0F0,0SEND_F0,0RECV_B0,0B0,0F1,0SEND_F1,0RECV_B1,0B1\n";
  const auto once = io::read_pytorch_csv(
      device0 + "1UNSHARD,1RECV_F0,1F0,1B0,1SEND_B0,1RECV_F1,1F1,1B1,1SEND_B1\n", "once.csv");
  const auto twice = io::read_pytorch_csv(
      device0 + "1UNSHARD,1RECV_F0,1F0,1B0,1SEND_B0,1RESHARD,1UNSHARD,1RECV_F1,1F1,1B1,1SEND_B1\n",
      "twice.csv");
  LoweringOptions pytorch;
  pytorch.runtime = Runtime::PyTorch;
  const auto a = simulate_with(once, "gpt3-1.3b", "dgx-h100", fsdp_over(4), pytorch);
  const auto b = simulate_with(twice, "gpt3-1.3b", "dgx-h100", fsdp_over(4), pytorch);
  EXPECT_EQ(of_kind(a.graph, TransferKind::FsdpAllGather).size(), 2U);
  const auto gathers = of_kind(b.graph, TransferKind::FsdpAllGather);
  ASSERT_EQ(gathers.size(), 3U);
  // The last gather: issued no earlier than 1B0's start, and 1F1 (device 1's third op) after it.
  const auto& g = b.graph;
  const auto last = static_cast<std::size_t>(g.compute_nodes) + gathers.back();
  const auto b0 = static_cast<std::size_t>(twice.row_begin[1] + 1);
  const auto f1 = static_cast<std::size_t>(twice.row_begin[1] + 2);
  EXPECT_GE(b.result.start[last], b.result.start[b0]);
  EXPECT_GE(b.result.start[f1], b.result.end[last]);
  EXPECT_GE(b.metrics.runtime_s, a.metrics.runtime_s);
}

TEST(Fsdp, WithoutPipeliningEachOpGathersEveryBlock) {
  // One device, two microbatches: without pipelining a unit is a block and units reshard after
  // forward but the last (torchtitan), so each F gathers every block (3 steps of P/L·2/4 bytes
  // each), the first before the op and the others inside it, and each B, right after its F,
  // every block but its first. Gradients synced once per step (not torchtitan's default without
  // pipelining): the last backward reduce-scatters every block (3 steps of P/L·4/4), the last
  // one after the op.
  const auto t = test::make("1f1b", test::sm(1, 2));
  const test::ModelRun model = io::load_model("gpt3-1.3b");
  Layout l = fsdp_over(4);
  l.fsdp.grad_sync = GradSync::PerStep;
  const auto sim = simulate_with(t, "gpt3-1.3b", "dgx-h100", l);
  const auto& g = sim.graph;
  const auto work = test::table_work(t, model);
  const auto blocks = static_cast<std::size_t>(work[0].layers);
  const double params = work[0].params;
  EXPECT_EQ(of_kind(g, TransferKind::FsdpAllGather).size(), 4 * blocks - 2);
  EXPECT_NEAR(
      bytes_of(g, TransferKind::FsdpAllGather),
      static_cast<double>(4 * blocks - 2) * 3 * params / static_cast<double>(blocks) * 2 / 4,
      1e-6 * params);
  EXPECT_EQ(of_kind(g, TransferKind::FsdpReduceScatter).size(), blocks);
  EXPECT_NEAR(bytes_of(g, TransferKind::FsdpReduceScatter), 3 * params * 4 / 4, 1e-6 * params);
  // Every op runs its blocks' gathers as steps: (blocks − 1) issues and as many waits each;
  // the last backward also issues its blocks' reduce-scatters but the last.
  for (std::size_t op = 0; op < t.ops.size(); ++op) {
    ASSERT_TRUE(g.has_steps(static_cast<std::int64_t>(op)));
    std::size_t gathers = 0, scatters = 0;
    for (auto k = g.step_begin[op]; k < g.step_begin[op + 1]; ++k) {
      const auto& step = g.steps[static_cast<std::size_t>(k)];
      if (step.kind != StepKind::Issue) continue;
      const auto kind = g.kind[static_cast<std::size_t>(step.transfer - g.compute_nodes)];
      gathers += kind == TransferKind::FsdpAllGather;
      scatters += kind == TransferKind::FsdpReduceScatter;
    }
    // The backward before the second forward issues that forward's first gather too, as it
    // starts its last block (t's order: F0 B0 F1 B1).
    EXPECT_EQ(gathers, blocks - 1 + (op == 1 ? 1 : 0)) << "op " << op;
    EXPECT_EQ(scatters, op + 1 == t.ops.size() ? blocks - 1 : 0) << "op " << op;
  }
  EXPECT_TRUE(sim.metrics.reshard_after_forward);
  // The optimizer state sharded (12 B per parameter / 4), every block's fp32 gradients
  // accumulating, and unsharded: the root unit's and one block's 16-bit parameters and the root
  // unit's reduce-scatter input in fp32. The root unit holds what is outside the blocks: GPT-3's
  // tied word embedding (50,257 × 2,048), its learned positions (2,048 × 2,048) and the final
  // LayerNorm (2 × 2,048) (Brown et al. 2020, Table 2.1), larger than a block.
  const double root = 50257.0 * 2048 + 2048.0 * 2048 + 2 * 2048;
  const double block = (params - root) / static_cast<double>(blocks);
  ASSERT_GT(root, block);
  EXPECT_NEAR(g.static_bytes[0], params * 12 / 4 + params * 4 + (root + block) * 2 + root * 4,
              1e-9 * params);
}

// One device, two microbatches, FSDP over 4 ranks on a slow in-node link (1 GB/s): the run's
// graph, its forward's compute alone, and one block's gather and reduce-scatter alone (with the
// reduce-scatter's copy of the 16-bit gradients into its fp32 input first), and the copy of a
// gathered block out of the all-gather's buffer.
struct SlowLink {
  Simulation with, without;
  double blocks = 0, gather = 0, scatter = 0;
  double copy_out = 0;
  double wire = 0;  // a gather's and a reduce-scatter's bytes at 1 GB/s
};
SlowLink slow_link() {
  auto system = io::load_system("dgx-h100");
  system.intra.bandwidth = 1e9;
  const auto t = test::make("1f1b", test::sm(1, 2));  // F0 B0 F1 B1
  SimulationSetup setup = test::setup_of(io::load_model("gpt3-1.3b"), system);
  setup.lowering.overheads = false;
  SimulationSetup plain = setup;
  Layout l = fsdp_over(4);
  l.fsdp.grad_sync = GradSync::PerStep;  // the last backward reduce-scatters every block
  apply(l, setup);
  SlowLink s{simulate_table(t, setup), simulate_table(t, plain)};
  const auto work = table_work(t, setup.model, setup.job, setup.layout);
  s.blocks = static_cast<double>(work[0].layers);
  const double block_params = work[0].params / s.blocks;
  s.gather = 3 * (system.intra.latency_s + block_params * 2 / 4 / 1e9);
  s.scatter = 3 * (system.intra.latency_s + block_params * 4 / 4 / 1e9) +
              cost::copy_seconds(block_params * (2 + 4), system.device);
  s.copy_out = cost::copy_seconds(block_params * 2 * 2, system.device);
  s.wire = 3 * block_params * (2 + 4) / 4 / 1e9;
  return s;
}

TEST(Fsdp, BlockGathersThatOutlastComputeLengthenTheOp) {
  // Every block waits for its parameters, gathered one block ahead as the block before starts,
  // and copies them out of the gather's buffer: the forward lasts its compute, a copy per block,
  // and (blocks − 1) × (gather − block compute) of waits, its communication.
  const auto s = slow_link();
  const double forward = s.without.graph.duration[0];
  const double c = forward / s.blocks;
  const auto& r = s.with.result;
  EXPECT_GT(s.copy_out, 0.0);
  EXPECT_NEAR(r.end[0] - r.start[0],
              forward + s.blocks * s.copy_out + (s.blocks - 1) * (s.gather - c), 1e-9 * forward);
  EXPECT_NEAR(r.waited[0], (s.blocks - 1) * (s.gather - c), 1e-9 * forward);
  // The second forward's first gather (the graph's, the last gather made) is issued as the
  // backward before it starts its last block, not with the backward: it does not slow the
  // backward's own gathers.
  const auto gathers = of_kind(s.with.graph, TransferKind::FsdpAllGather);
  const auto next = static_cast<std::size_t>(s.with.graph.compute_nodes) + gathers.back();
  const double backward_block = s.without.graph.duration[1] / s.blocks;
  EXPECT_NEAR(r.start[next], r.end[1] - backward_block, 1e-9 * forward);
  // The first backward keeps the forward's last block gathered: it gathers the others only.
  EXPECT_EQ(gathers.size(), static_cast<std::size_t>(4 * s.blocks - 2));
  // The waits are FSDP's exposed collectives, neither compute nor communication inside the ops.
  double waits = 0.0, spans = 0.0;
  for (std::size_t op = 0; op < 4; ++op) {
    waits += r.waited[op];
    spans += r.end[op] - r.start[op];
  }
  const auto& device = r.devices[0];
  EXPECT_GT(waits, 0.0);
  EXPECT_DOUBLE_EQ(device.tp_comm_s, 0.0);
  EXPECT_NEAR(device.compute_s, spans - waits, 1e-9 * spans);
  EXPECT_GE(device.exposed_collective_s, waits);
}

TEST(Fsdp, ABlocksReduceScatterSharesTheLinkWithTheNextGather) {
  // The backward gathers blocks one ahead and reduce-scatters each after its compute on the same
  // links: the link carries (blocks − 1) of each before the op ends (it waits for its
  // reduce-scatters), at most 1 GB/s, so the op lasts at least their bytes' time; with compute,
  // copies and latencies beside them at most their sum plus its compute and copies.
  const auto s = slow_link();
  const auto& g = s.with.graph;
  const std::size_t b = 3;  // the last backward, the one that reduce-scatters
  const double compute = s.without.graph.duration[b] + (s.blocks - 1) * s.copy_out;
  const double both = (s.blocks - 1) * (s.gather + s.scatter);
  const double span = s.with.result.end[b] - s.with.result.start[b];
  EXPECT_GE(span, (s.blocks - 1) * s.wire);
  EXPECT_LE(span, both + compute);
  // Gathered alone one after another the gathers would have ended the op much sooner.
  EXPECT_GT(span, (s.blocks - 1) * std::max(s.gather, compute / s.blocks) * 1.5);
  EXPECT_EQ(of_kind(g, TransferKind::FsdpReduceScatter).size(), static_cast<std::size_t>(s.blocks));
}

// Over a grid of runs block by block (microbatches, resharding, gradient sync, whose FSDP, in a
// node and across nodes, with CP's exchanges in the blocks): plan's bounds stay below the run —
// the compute part's busiest device, and the graph with each op's collectives folded in at their
// time alone on their links — and Megatron-FSDP, without FSDP2's copies, is never slower.
TEST(Fsdp, BlockByBlockBoundsStayBelowTheRunOverAGrid) {
  int checked = 0;
  for (const std::int64_t dp : {8, 32}) {
    for (const std::int64_t cp : {1, 2}) {
      for (const std::int32_t microbatches : {1, 3}) {
        for (const bool reshard : {true, false}) {
          for (const auto sync : {GradSync::PerStep, GradSync::PerMicrobatch}) {
            const auto t = test::make("1f1b", test::sm(1, microbatches));
            const std::string where = fmt::format("dp {} cp {} M {} reshard {} sync {}", dp, cp,
                                                  microbatches, reshard, to_string(sync));
            double runtime[2] = {0.0, 0.0};
            for (const auto impl : {FsdpImpl::Fsdp2, FsdpImpl::Megatron}) {
              SimulationSetup s = test::preset_setup("llama3.1-8b", "dgx-h100");
              Layout l = fsdp_over(dp);
              l.cp = cp;
              l.cp_method = CpMethod::AllGather;
              l.fsdp.reshard_after_forward = reshard;
              l.fsdp.grad_sync = sync;
              l.fsdp.impl = impl;
              apply(l, s);
              const auto run = simulate_table(t, s).metrics.runtime_s;
              runtime[static_cast<std::size_t>(impl)] = run;
              const auto bounds = test::plan_bounds(t, s);
              EXPECT_LE(bounds.busy, run * (1 + 1e-12)) << where;
              EXPECT_LE(bounds.graph, run * (1 + 1e-12)) << where;
              ++checked;
            }
            EXPECT_LE(runtime[1], runtime[0]) << where;
          }
        }
      }
    }
  }
  EXPECT_EQ(checked, 64);
}

// The unsharded working set follows how FSDP runs (docs/simulation.md's table), checked on
// Llama 3.1 8B's published 8.03B parameters (its model card): deferring the sync holds every
// gradient unsharded in fp32, keeping the gathered blocks holds every 16-bit parameter, and
// with one microbatch there is nothing to defer.
TEST(Fsdp, MemoryFollowsTheGradientSyncAndResharding) {
  constexpr double kParams = 8.03e9;
  const auto held = [](int stages, int microbatches, GradSync sync, std::optional<bool> reshard) {
    Layout l = fsdp_over(8);  // N = 8 ranks shard (each stage's copy) whatever the stages
    l.fsdp.grad_sync = sync;
    l.fsdp.reshard_after_forward = reshard;
    const auto t = test::make("1f1b", test::sm(stages, microbatches));
    const auto sim = simulate_with(t, "llama3.1-8b", "dgx-h100", l);
    double sum = 0.0;
    for (const double b : sim.metrics.static_bytes)
      sum += b;
    return std::pair{sum, sim.metrics.grad_sync};
  };
  using enum GradSync;
  // Without pipelining, deferring the sync holds every gradient unsharded (4 B per parameter)
  // and no sharded one (4 B / N) until the step's last backward ...
  const auto [step, step_name] = held(1, 8, PerStep, true);
  const auto [each, each_name] = held(1, 8, PerMicrobatch, true);
  EXPECT_NEAR((step - each) / (4 * kParams * (1 - 1.0 / 8)), 1.0, 0.005);
  EXPECT_EQ(step_name, "step");
  // ... which torchtitan does not (auto: every microbatch without pipelining) ...
  EXPECT_EQ(held(1, 8, Auto, std::nullopt), std::pair(each, std::string("microbatch")));
  // ... and every 16-bit parameter but the root unit's and one block's more keeping them
  // gathered (the root: the 128,256 × 4,096 embedding and output layer and the final norm).
  const double root = 2.0 * 128256 * 4096 + 4096;
  const double block = (kParams - root) / 32;
  EXPECT_NEAR((held(1, 8, PerMicrobatch, false).first - each) / (2 * (kParams - root - block)), 1.0,
              0.005);
  // One microbatch: per step is per microbatch.
  EXPECT_EQ(held(1, 1, PerStep, true).first, held(1, 1, PerMicrobatch, true).first);
  // Pipelined (4 stages): the stages' gradients accumulate in fp32 (4 B) instead of being
  // reduced from 16 bits (2 B) each microbatch into the sharded ones (4 B / N), and auto defers.
  const auto [deferred, deferred_name] = held(4, 8, Auto, std::nullopt);
  EXPECT_EQ(deferred_name, "step");
  EXPECT_NEAR(
      (deferred - held(4, 8, PerMicrobatch, std::nullopt).first) / ((4 - 2 - 4.0 / 8) * kParams),
      1.0, 0.005);
}

TEST(Fsdp, HybridShardingAllReducesTheShardOverReplicas) {
  // dp 4 as 2 shards of 2: gathers and reduce-scatters over 2 ranks (1 step), then the shard's
  // gradients all-reduced over the 2 replicas (2 steps of P·4/2/2 bytes).
  const auto t = test::make("1f1b", test::sm(2, 2));
  Layout l = fsdp_over(4);
  l.fsdp.shard = 2;
  const auto sim = simulate_with(t, "gpt3-1.3b", "dgx-h100", l);
  const auto work = test::table_work(t, io::load_model("gpt3-1.3b"));
  const double params = work[0].params + work[1].params;
  EXPECT_EQ(of_kind(sim.graph, TransferKind::FsdpAllGather).size(), 2U);
  EXPECT_EQ(of_kind(sim.graph, TransferKind::FsdpReduceScatter).size(), 2U);
  EXPECT_EQ(of_kind(sim.graph, TransferKind::DataAllReduce).size(), 2U);
  EXPECT_DOUBLE_EQ(bytes_of(sim.graph, TransferKind::DataAllReduce), 2 * params * 4 / 2 / 2);
  EXPECT_EQ(sim.metrics.fsdp_shard, 2);
}

TEST(Fsdp, HybridShardingShardsTheExpertsWithinEachReplica) {
  // Qwen3-30B-A3B over DP 8 with EP 2 and HSDP shards of 4: R = 2 replicas; the experts' EDP of
  // 4 splits into the replicas' shards of 4 / 2 = 2. Static memory: the dense state over 4, the
  // experts' over 2, the stage's 16-bit parameters and fp32 gradients (pipelined). After the
  // reduce-scatters, each rank's shard (dense / 4 + experts / 2 of the fp32 gradients) is
  // all-reduced over the 2 replicas: 2 steps of half of it.
  const auto t = test::make("1f1b", test::sm(2, 2));
  Layout l = fsdp_over(8);
  l.ep = 2;
  l.fsdp.shard = 4;
  const auto sim = simulate_with(t, "qwen3-30b-a3b", "dgx-h100", l);
  const auto model = preset_with("qwen3-30b-a3b", l);
  const auto work = test::table_work(t, model);
  double shards = 0.0;
  for (const auto& w : work) {
    const double experts = w.grad_bytes * w.expert_params / w.params;
    shards += (w.grad_bytes - experts) / 4 + experts / 2;
  }
  EXPECT_DOUBLE_EQ(bytes_of(sim.graph, TransferKind::DataAllReduce), 2 * shards / 2);
  const auto& w = work[0];
  // The sync is deferred (pipelined, M = 2): the optimizer state sharded, no sharded gradients.
  const double state = w.optimizer_bytes;
  const double experts = state * w.expert_params / w.params;
  EXPECT_NEAR(static_memory(t, work, model.model, model.job, model.layout)[0],
              (state - experts) / 4 + experts / 2 + w.weight_bytes + w.grad_bytes, 1e-9 * state);
  // Each stage gathers its dense parameters over the shard and its experts over theirs.
  EXPECT_EQ(of_kind(sim.graph, TransferKind::FsdpAllGather).size(), 4U);
  // The replicas must divide EDP: EP 8 leaves each expert on one rank of each replica pair.
  l.ep = 8;
  EXPECT_EQ(param_error([&] { simulate_with(t, "qwen3-30b-a3b", "dgx-h100", l); }),
            "--fsdp-shard 4: its 2 replicas must divide the experts' 1 data-parallel ranks (EDP = "
            "TP × CP × DP / (EP × ETP)), which each replica shards the experts over");
}

TEST(Fsdp, Fp8AllGatherHalvesTheGather) {
  const auto t = test::make("1f1b", test::sm(2, 2));
  Layout l = fsdp_over(4);
  const auto bf16 = simulate_with(t, "gpt3-1.3b", "dgx-h100", l);
  l.fsdp.fp8_all_gather = true;
  const auto fp8 = simulate_with(t, "gpt3-1.3b", "dgx-h100", l);
  EXPECT_DOUBLE_EQ(bytes_of(fp8.graph, TransferKind::FsdpAllGather),
                   bytes_of(bf16.graph, TransferKind::FsdpAllGather) / 2);
}

TEST(Fsdp, OffIsTheReplicatedRunAndOneRankShardsNothing) {
  const auto t = test::make("interleaved", test::sm(2, 4));
  Layout l;
  l.dp = 2;
  const auto a = simulate_with(t, "gpt3-1.3b", "dgx-h100", l);
  SimulationSetup setup = test::preset_setup("gpt3-1.3b", "dgx-h100");
  setup.layout.dp = 2;
  const auto b = simulate_table(t, setup);
  EXPECT_EQ(a.metrics.runtime_s, b.metrics.runtime_s);
  EXPECT_EQ(a.graph.bytes, b.graph.bytes);
  // FSDP over one rank (dp 1, cp 1) has nothing to shard: the plain run.
  const auto c = simulate_with(t, "gpt3-1.3b", "dgx-h100", fsdp_over(1));
  const auto d = simulate_with(t, "gpt3-1.3b", "dgx-h100", Layout{});
  EXPECT_EQ(c.metrics.runtime_s, d.metrics.runtime_s);
}

TEST(Fsdp, RulesNameTheConflict) {
  const test::ModelRun model = io::load_model("gpt3-1.3b");
  Job sharded = model.job;
  sharded.distributed_optimizer = true;
  EXPECT_EQ(param_error([&] { require_runnable(model.model, sharded, fsdp_over(2)); }),
            "--fsdp and --distributed-optimizer: FSDP already shards the optimizer state (and "
            "the parameters and gradients) over the data-parallel ranks; give one of them");
  Layout l = fsdp_over(6);
  l.fsdp.shard = 4;
  EXPECT_EQ(param_error([&] { require_runnable(model.model, model.job, l); }),
            "--fsdp-shard 4: the shard group must divide the 6 data- and context-parallel ranks "
            "(--dp 6 × --cp 1) into equal replicas");
  const auto chimera = test::make("chimera", test::sm(4, 4));
  EXPECT_NE(param_error([&] {
              simulate_with(chimera, "gpt3-1.3b", "dgx-h100", fsdp_over(2));
            }).find("two-pipeline schedule"),
            std::string::npos);
}

// --- Context parallelism -------------------------------------------------------------------

using test::find_op;

TEST(ContextParallel, RingExchangesKeysAndValuesOfTheWholeSequence) {
  // Llama 2 7B (32 heads of 128, MHA), s = 4096, b = 1, bf16, CP 4: the ring moves K and V of
  // the whole sequence, 2·s·b·kv·2 B = 2·4096·4096·2 = 64 MiB all ranks together; each rank's
  // attention runs its s/4 queries against all s keys, a quarter of the FLOPs.
  test::ModelRun model = io::load_model("llama2-7b");
  const auto whole = model_operators(workload(model));
  model.layout.cp = 4;
  const auto ops = model_operators(workload(model));
  const auto* ring = find_op(ops.layer.forward, "attention.cp_ring");
  ASSERT_NE(ring, nullptr);
  EXPECT_EQ(ring->group, CollectiveGroup::Context);
  EXPECT_DOUBLE_EQ(ring->collective_bytes, 2.0 * 4096 * 4096 * 2);
  EXPECT_DOUBLE_EQ(ring->hidden_fraction, 3.0 / 4.0);
  EXPECT_DOUBLE_EQ(find_op(ops.layer.input_grad, "attention.cp_ring.backward")->collective_bytes,
                   2 * ring->collective_bytes);
  EXPECT_DOUBLE_EQ(find_op(ops.layer.forward, "attention.flash")->flops,
                   find_op(whole.layer.forward, "attention.flash")->flops / 4);
  // Every GEMM runs on a quarter of the tokens.
  EXPECT_DOUBLE_EQ(find_op(ops.layer.forward, "fc1")->flops,
                   find_op(whole.layer.forward, "fc1")->flops / 4);
  // CP 1 adds nothing.
  EXPECT_EQ(find_op(whole.layer.forward, "attention.cp_ring"), nullptr);
}

TEST(ContextParallel, MethodsMoveWhatTheyExchange) {
  // Llama 3.1 8B (32 query heads, 8 KV heads, 128 wide), s = 8192: GQA makes K and V a quarter
  // of Q. allgather gathers K, V (2·s·kv·2 B) and reduce-scatters their gradients; a2a moves Q,
  // K, V in and the output back, each rank its own s/cp tokens' buffer (an all-to-all counts one
  // rank's: parallel/collective.hpp): s/2·(q + 2kv)·2 B and s/2·q·2 B.
  test::ModelRun model = io::load_model("llama3.1-8b");
  model.layout.cp = 2;
  const double s = 8192, q = 4096, kv = 1024;
  model.layout.cp_method = CpMethod::AllGather;
  auto ops = model_operators(workload(model));
  EXPECT_DOUBLE_EQ(find_op(ops.layer.forward, "attention.cp_all_gather")->collective_bytes,
                   2 * s * kv * 2);
  EXPECT_DOUBLE_EQ(find_op(ops.layer.forward, "attention.cp_all_gather")->hidden_fraction, 0.5);
  EXPECT_NE(find_op(ops.layer.input_grad, "attention.cp_reduce_scatter.backward"), nullptr);
  model.layout.cp_method = CpMethod::AllToAll;
  ops = model_operators(workload(model));
  EXPECT_DOUBLE_EQ(find_op(ops.layer.forward, "attention.cp_all_to_all")->collective_bytes,
                   s / 2 * (q + 2 * kv) * 2);
  EXPECT_DOUBLE_EQ(find_op(ops.layer.forward, "attention.cp_all_to_all.output")->collective_bytes,
                   s / 2 * q * 2);
  EXPECT_EQ(find_op(ops.layer.forward, "attention.cp_all_to_all")->hidden_index, -1);
}

TEST(ContextParallel, LatentAttentionExchangesTheHeadsItsUpProjectionsMake) {
  // DeepSeek-V3's latent attention (128 heads, Q and K 128 + 64 rope = 192 wide, V 128), s = 4096,
  // b = 1, bf16, CP 2: the ring moves K and V as attention takes them after the up-projections,
  // 2·s·b·heads·(192 + 128) B all ranks together, not the 512 + 64 latents; a2a moves Q, K, V
  // in and the output back, each rank its own s/2 tokens' (s/2·heads·(192 + 192 + 128)·2 B and
  // s/2·heads·128·2 B). TP 8 splits the heads, and each rank's attention runs half the queries.
  test::ModelRun model = io::load_model("deepseek-v3");
  const auto whole = model_operators(workload(model));
  model.layout.cp = 2;
  const double s = 4096, heads = 128;
  auto ops = model_operators(workload(model));
  const auto* ring = find_op(ops.layer.forward, "attention.cp_ring");
  ASSERT_NE(ring, nullptr);
  EXPECT_DOUBLE_EQ(ring->collective_bytes, 2 * s * heads * (192 + 128));
  EXPECT_DOUBLE_EQ(ring->hidden_fraction, 0.5);
  EXPECT_GE(ring->hidden_index, 0);
  EXPECT_DOUBLE_EQ(
      find_op(ops.moe_layer.input_grad, "attention.cp_ring.backward")->collective_bytes,
      2 * ring->collective_bytes);
  EXPECT_DOUBLE_EQ(find_op(ops.layer.forward, "attention.flash")->flops,
                   find_op(whole.layer.forward, "attention.flash")->flops / 2);
  model.layout.cp_method = CpMethod::AllToAll;
  ops = model_operators(workload(model));
  EXPECT_DOUBLE_EQ(find_op(ops.layer.forward, "attention.cp_all_to_all")->collective_bytes,
                   2 * s / 2 * heads * (192 + 192 + 128));
  EXPECT_DOUBLE_EQ(find_op(ops.layer.forward, "attention.cp_all_to_all.output")->collective_bytes,
                   2 * s / 2 * heads * 128);
  EXPECT_DOUBLE_EQ(
      find_op(ops.layer.input_grad, "attention.cp_all_to_all.output.backward")->collective_bytes,
      2 * s / 2 * heads * 128);
  model.layout.cp_method = CpMethod::Ring;
  model.layout.tp = 8;
  ops = model_operators(workload(model));
  EXPECT_DOUBLE_EQ(find_op(ops.layer.forward, "attention.cp_ring")->collective_bytes,
                   2 * s * heads / 8 * (192 + 128));
  // And a run of it simulates: DeepSeek-V3 with CP 2 and EP 8 on two pipeline devices.
  SimulationSetup setup = test::preset_setup("deepseek-v3", "dgx-h100");
  Layout l;
  l.cp = 2;
  l.dp = 8;
  l.ep = 16;
  apply(l, setup);
  const auto sim = simulate_table(test::make("1f1b", test::sm(2, 2)), setup);
  EXPECT_GT(sim.metrics.runtime_s, 0.0);
  EXPECT_EQ(sim.metrics.context_parallel, 2);
}

TEST(ContextParallel, RingHidesUnderItsShareOfAttention) {
  // The ring's exposed time is its transfer less (cp−1)/cp of the attention it runs beside.
  test::ModelRun model = io::load_model("llama2-7b");
  model.layout.cp = 2;
  const auto system = io::load_system("dgx-h100");
  const auto ops = model_operators(workload(model));
  const auto& forward = ops.layer.forward;
  const auto* ring = find_op(forward, "attention.cp_ring");
  const auto* flash = find_op(forward, "attention.flash");
  const double comm = cost::operator_cost(*ring, workload(model), system).seconds;
  const double attention = cost::operator_cost(*flash, workload(model), system).seconds;
  // On NVLink (CP 2 in a node): one step of half the buffer.
  EXPECT_DOUBLE_EQ(comm, system.intra.latency_s +
                             ring->collective_bytes / 2 /
                                 (system.intra.bandwidth * system.intra.collective_efficiency));
  const auto work = test::stage_work(model, std::vector<std::int32_t>{1}, 1);
  const auto costs = cost::stage_costs(model.model, model.job, model.layout, work, system);
  // The layer has no TP, so all its in-op communication is the ring's.
  const double exposed_tp = costs[0].forward.tp_comm_s / static_cast<double>(work[0].layers);
  EXPECT_NEAR(exposed_tp, std::max(0.0, comm - 0.5 * attention), 1e-15);
}

TEST(ContextParallel, AnExchangeAloneOnItsLinksTakesWhatTheCostModelPrices) {
  // In the simulation each exchange is a flow inside its op, beside the share of attention it
  // hides under: alone on its links (one stage and microbatch, overheads off) the op takes the
  // cost model's price, on NVLink (CP 8 in a node) and over the NICs (TP 4 × CP 4 span two;
  // Ulysses cannot spread Llama's 8 KV heads over more than 8 ranks).
  for (const auto method : {CpMethod::Ring, CpMethod::AllGather, CpMethod::AllToAll}) {
    for (const std::int64_t tp : {1, 4}) {
      if (method == CpMethod::AllToAll && tp > 1) continue;
      Layout l;
      l.tp = tp;
      l.cp = tp == 1 ? 8 : 4;
      l.cp_method = method;
      LoweringOptions lowering;
      lowering.overheads = false;
      lowering.iteration.optimizer = false;
      lowering.runtime = Runtime::Async;
      auto model = io::load_model("llama3.1-8b");
      std::get<TransformerConfig>(model.spec).layers = 2;
      SimulationSetup setup = test::setup_of(model, io::load_system("dgx-h100"));
      setup.lowering = lowering;
      // 2K tokens: short enough that some of every exchange stays exposed beside cuDNN's
      // attention (the comparison below would hold trivially with none).
      setup.job.seq_len = 2048;
      apply(l, setup);
      const auto t = test::make("1f1b", test::sm(1, 1));
      const auto sim = simulate_table(t, setup, "1f1b");
      const auto c =
          cost::stage_costs(setup.model, setup.job, setup.layout,
                            table_work(t, setup.model, setup.job, setup.layout), setup.system)
              .front();
      ASSERT_GT(c.forward.tp_comm_s + c.backward.tp_comm_s, 0.0);
      EXPECT_NEAR(sim.result.pipeline_end_s / (c.forward.seconds + c.backward.seconds), 1.0, 1e-12)
          << to_string(method) << " TP " << tp;
      EXPECT_FALSE(of_kind(sim.graph, TransferKind::ContextExchange).empty());
      EXPECT_EQ(sim.metrics.breakdown().expert_comm, 0.0);
    }
  }
}

TEST(ContextParallel, GradientsAreReducedOverDpTimesCp) {
  // CP 2 with no data parallelism still all-reduces each stage's gradients over the 2 CP ranks;
  // the run takes S × CP GPUs.
  Layout l;
  l.cp = 2;
  const auto t = test::make("1f1b", test::sm(2, 2));
  const auto sim = simulate_with(t, "llama2-7b", "dgx-h100", l);
  EXPECT_EQ(of_kind(sim.graph, TransferKind::DataAllReduce).size(), 2U * 2);
  EXPECT_EQ(sim.metrics.gpus, 4);
  EXPECT_EQ(sim.metrics.context_parallel, 2);
  // Half the tokens per rank: half the activations and messages of CP 1.
  const auto one = simulate_with(t, "llama2-7b", "dgx-h100", Layout{});
  EXPECT_DOUBLE_EQ(bytes_of(sim.graph, TransferKind::Activation),
                   bytes_of(one.graph, TransferKind::Activation) / 2);
  const auto act = [](const Simulation& s) { return s.metrics.peak_activation_max_bytes(); };
  EXPECT_NEAR(act(sim), act(one) / 2, 1e-6 * act(one));
  // The same tokens per second per sequence: throughput counts whole sequences.
  EXPECT_EQ(*sim.metrics.sequences, *one.metrics.sequences);
}

TEST(ContextParallel, RulesNameTheConstraint) {
  const test::ModelRun model = io::load_model("llama3.1-8b");
  const auto refusal = [](const test::ModelRun& m, const Layout& l) {
    return param_error([&] { require_runnable(m.model, m.job, l); });
  };
  Layout l;
  l.cp = 3;
  EXPECT_EQ(refusal(model, l),
            "--cp 3: the sequence of 8192 tokens must split into 2·cp = 6 equal chunks (causal "
            "load balancing gives rank r chunks r and 2·cp−1−r)");
  l.cp = 16;
  l.cp_method = CpMethod::AllToAll;
  EXPECT_EQ(refusal(model, l),
            "--cp 16 --cp-method a2a: Ulysses spreads the kv_heads per tensor-parallel rank (8 / "
            "tp 1 = 8) over the CP ranks, and they do not divide evenly; use --cp-method ring or "
            "allgather");
  const test::ModelRun paper = io::load_model("paper");
  l.cp = 2;
  l.cp_method = CpMethod::Ring;
  EXPECT_NE(refusal(paper, l).find("flash_attention = false"), std::string::npos);
  Layout tp;
  tp.tp = 3;
  EXPECT_EQ(refusal(model, tp),
            "--tp 3: tensor parallelism splits the heads over its ranks, and 32 heads do not "
            "divide evenly");
  const test::ModelRun explicit_model = test::explicit_model(1, 1, 1, 1);
  EXPECT_NE(refusal(explicit_model, l).find("[explicit]"), std::string::npos);
}

// --- Pipeline layouts (Megatron-Core's notation) -------------------------------------------------

TEST(PipelineLayout, ExpandsRepetitionsIntoLayersPerStage) {
  // Megatron-Core's example: Ett|(ttt|)*30ttL = 2 + 30 × 3 + 2 = 94 layers in 32 stages.
  const auto layers = parse_pipeline_layout("Ett|(ttt|)*30ttL", 94, 0).layers;
  ASSERT_EQ(layers.size(), 32U);
  EXPECT_EQ(layers.front(), 2);
  EXPECT_EQ(layers[1], 3);
  EXPECT_EQ(layers.back(), 2);
  EXPECT_EQ(parse_pipeline_layout("E|t*4|t*4|L", 8, 0).layers,
            (std::vector<std::int64_t>{0, 4, 4, 0}));
  EXPECT_EQ(parse_pipeline_layout(" E t t | ( t t | ) * 2 t t L ", 8, 0).layers,
            (std::vector<std::int64_t>{2, 2, 2, 2}));
}

TEST(PipelineLayout, PlacesMtpLayersAsMegatronCoreDoes) {
  // Megatron-Core's DeepSeek-V3 example (docs: custom pipeline layout), PP 16 × VPP 2 = 32
  // stages: the embedding and 3 layers, 29 stages of 2, the MTP module alone, the loss alone;
  // commas are dropped as Megatron-Core drops them.
  const auto stages = parse_pipeline_layout("Et*3|(tt|)*29,m|L", 61, 1);
  ASSERT_EQ(stages.layers.size(), 32U);
  EXPECT_EQ(stages.layers.front(), 3);
  EXPECT_EQ(stages.layers[29], 2);
  EXPECT_EQ(stages.layers[30], 0);
  EXPECT_EQ(stages.layers[31], 0);
  std::vector<std::int64_t> mtp(32, 0);
  mtp[30] = 1;
  EXPECT_EQ(stages.mtp_layers, mtp);
  // MTP with the loss, two modules.
  EXPECT_EQ(parse_pipeline_layout("Ett|ttmmL", 4, 2).mtp_layers, (std::vector<std::int64_t>{0, 2}));
}

// Megatron-Core's balanced layout, where the layers do not split into equal stages: the
// embedding, each MTP module and the loss count as a layer each. By hand: DeepSeek-V3 (61 layers,
// one MTP module) is 64 units: 2 over 32 stages, 4 over 16; Llama 3.1 405B's 126 layers are 128
// units, 8 over 16 stages.
TEST(PipelineLayout, BalancedLayoutCountsTheEmbeddingMtpAndLossAsLayers) {
  EXPECT_EQ(balanced_pipeline_layout(61, 1, 32), "Et|(tt|)*30mL");
  EXPECT_EQ(balanced_pipeline_layout(61, 1, 16), "Ettt|(t*4|)*14ttmL");
  EXPECT_EQ(balanced_pipeline_layout(126, 0, 16), "Et*7|(t*8|)*14t*7L");
  EXPECT_EQ(balanced_pipeline_layout(6, 0, 2), "Ettt|tttL");
  EXPECT_EQ(balanced_pipeline_layout(61, 1, 8), "Et*7|(t*8|)*6t*6mL");
  EXPECT_FALSE(balanced_pipeline_layout(61, 0, 32));  // 63 units
  EXPECT_FALSE(balanced_pipeline_layout(61, 1, 64));  // one unit a stage: no room for m and L
  EXPECT_FALSE(balanced_pipeline_layout(6, 0, 1));
  // Every layout it gives, over a grid, parses back to the model's layers and MTP modules on
  // `stages` stages of k units each; it gives none exactly where the units do not split or the
  // last stage cannot hold its MTP modules and the loss.
  for (std::int64_t layers = 1; layers <= 70; ++layers)
    for (std::int64_t mtp = 0; mtp <= 3; ++mtp)
      for (std::int64_t stages = 2; stages <= 40; ++stages) {
        const auto layout = balanced_pipeline_layout(layers, mtp, stages);
        const std::int64_t units = layers + mtp + 2;
        const bool splits = units % stages == 0 && units / stages >= 1 + mtp;
        ASSERT_EQ(layout.has_value(), splits) << layers << " " << mtp << " " << stages;
        if (!layout) continue;
        const auto parsed = parse_pipeline_layout(*layout, layers, mtp);
        ASSERT_EQ(static_cast<std::int64_t>(parsed.layers.size()), stages) << *layout;
        for (std::size_t s = 0; s < parsed.layers.size(); ++s) {
          const std::int64_t ends = (s == 0 ? 1 : 0) + (s + 1 == parsed.layers.size() ? 1 : 0);
          EXPECT_EQ(parsed.layers[s] + parsed.mtp_layers[s] + ends, units / stages) << *layout;
        }
      }
}

TEST(PipelineLayout, ErrorsNameTheRule) {
  EXPECT_EQ(param_error([] { parse_pipeline_layout("Ett|tx|ttL", 6, 0); }),
            "--pipeline-layout 'Ett|tx|ttL': 'x' is not E (embedding), t (transformer layer), m "
            "(MTP), L (loss), | (stage boundary) or (...)*N at character 6");
  EXPECT_EQ(param_error([] { parse_pipeline_layout("Ett|(tt|*2ttL", 6, 0); }),
            "--pipeline-layout 'Ett|(tt|*2ttL': a '(' without its ')' at character 14");
  EXPECT_EQ(param_error([] { parse_pipeline_layout("tEt|ttL", 4, 0); }),
            "--pipeline-layout 'tEt|ttL': the embedding (E) must open the first stage; stage 0 "
            "has it");
  EXPECT_EQ(param_error([] { parse_pipeline_layout("Ett|ttL", 6, 0); }),
            "--pipeline-layout 'Ett|ttL': 4 transformer layers (t), and the model has 6");
  EXPECT_EQ(param_error([] { parse_pipeline_layout("Ett|tm|ttL", 5, 1); }),
            "--pipeline-layout 'Ett|tm|ttL': stage 2 has a transformer layer (t) after an MTP "
            "layer (m); MTP layers follow every transformer layer");
  EXPECT_EQ(param_error([] { parse_pipeline_layout("Ett|ttmL", 4, 0); }),
            "--pipeline-layout 'Ett|ttmL': 1 MTP layers (m), and the model has 0 (mtp_layers)");
  EXPECT_EQ(param_error([] { parse_pipeline_layout("Ett|ttL", 4, 1); }),
            "--pipeline-layout 'Ett|ttL': 0 MTP layers (m), and the model has 1 (mtp_layers)");
  EXPECT_NE(param_error([] { parse_pipeline_layout("Ett||ttL", 4, 0); }).find("stage 1"),
            std::string::npos);
}

TEST(PipelineLayout, SetsTheStagesTheSimulationRuns) {
  // Llama 3.1 8B (32 layers) on 4 stages, the embedding and loss stages lighter: 7, 9, 9, 7.
  Layout l;
  l.pipeline_layout = "Et*7|t*9|t*9|t*7L";
  const auto t = test::make("1f1b", test::sm(4, 4));
  const auto sim = simulate_with(t, "llama3.1-8b", "dgx-h100", l);
  const auto model = preset_with("llama3.1-8b", l);
  const auto work = test::table_work(t, model);
  EXPECT_EQ(work[0].layers, 7);
  EXPECT_EQ(work[1].layers, 9);
  EXPECT_EQ(work[3].layers, 7);
  EXPECT_GT(sim.metrics.runtime_s, 0.0);
  // A layout of 2 stages for a table of 4 is refused with both counts.
  Layout two;
  two.pipeline_layout = "Et*16|t*16L";
  EXPECT_EQ(param_error([&] { simulate_with(t, "llama3.1-8b", "dgx-h100", two); }),
            "model: the pipeline layout names 2 stages, and the schedule's table has 4 (v·S per "
            "pipeline)");
}

}  // namespace
}  // namespace pipetab
