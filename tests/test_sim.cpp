// The simulation level: hand-computed cases and invariants over parameter grids (DESIGN.md §6).
#include <cmath>

#include "helpers.hpp"
#include <gtest/gtest.h>

#include "pipetab/error.hpp"
#include "pipetab/io/config.hpp"
#include "pipetab/sim/engine.hpp"
#include "pipetab/table/memory.hpp"
#include "pipetab/table/timing.hpp"

namespace pipetab {
namespace {

// An explicit workload: F f, I i, W w seconds per device share, `message` bytes per boundary.
ModelConfig explicit_model(double f, double i, double w, double message, double grad_bytes = 0.0) {
  ExplicitWorkload e;
  e.forward_s = f;
  e.input_grad_s = i;
  e.weight_grad_s = w;
  e.message_bytes = message;
  e.activation_bytes = 100.0;
  e.activation_kept_for_weight_grad = 80.0;
  e.weight_bytes = 10.0;
  e.grad_bytes = grad_bytes;
  e.optimizer_bytes = 30.0;
  return {"explicit", e};
}

SystemConfig system_with(Topology topology, LinkSpec intra, LinkSpec inter,
                         std::int32_t per_node = 8) {
  SystemConfig s;
  s.name = "test";
  s.peak_flops = 1e15;
  s.efficiency = 1.0;
  s.memory_bytes = 1e12;
  s.topology = topology;
  s.devices_per_node = per_node;
  s.intra = intra;
  s.inter = inter;
  return s;
}

struct Run {
  ExecGraph graph;
  SimResult result;
};

Run run(const ScheduleTable& t, const ModelConfig& model, const SystemConfig& system,
        SimOptions options = {}, LoweringOptions lowering = {}) {
  const Network network(system, t.devices);
  Run r{lower(t, model, network, lowering), {}};
  r.result = simulate(r.graph, network, options);
  return r;
}

TEST(Sim, TwoDevicesOneMicrobatchIsTheChainSum) {
  // F, then the activation hop, F, B, the gradient hop, B: runtime = 2F + 2B + 2(α + bytes/β).
  const auto t = test::make("1f1b", test::sm(2, 1));
  const double f = 1.0, b = 2.0, bytes = 3e9, alpha = 0.25, beta = 2e9;
  const auto model = explicit_model(f, 1.0, 1.0, bytes);
  const auto chain = system_with(Topology::Chain, {alpha, beta}, {});
  EXPECT_DOUBLE_EQ(run(t, model, chain).result.runtime_s,
                   2 * f + 2 * b + 2 * (alpha + bytes / beta));
  // Switched, one device per node: the inter-node class.
  const auto switched = system_with(Topology::Switched, {9.0, 1.0}, {alpha, beta}, 1);
  EXPECT_DOUBLE_EQ(run(t, model, switched).result.runtime_s,
                   2 * f + 2 * b + 2 * (alpha + bytes / beta));
  // A chain of three links: α and the bottleneck per hop, α counted per hop.
  const auto t4 = test::make("gpipe", test::sm(4, 1));
  EXPECT_DOUBLE_EQ(run(t4, model, chain).result.runtime_s,
                   4 * f + 4 * b + 6 * (alpha + bytes / beta));
}

// Device 0 runs one op, then sends two transfers of `bytes` to device 1, whose op needs both.
ExecGraph two_flows(const Network& network, double bytes, double delay_second = 0.0) {
  ExecGraph g;
  g.devices = 2;
  g.compute_nodes = 3;  // node 0 on device 0; nodes 1 and 2 on device 1
  g.row_begin = {0, 1, 3};
  g.device = {0, 1, 1, 0, 0};
  g.duration = {1.0, delay_second, 1.0};
  g.alloc_bytes = {0, 0, 0};
  g.free_bytes = {0, 0, 0};
  g.static_bytes = {0, 0};
  // Transfer 3 after node 0; transfer 4 after node 1 (on device 1, so starting later), both to
  // device 1's node 2. For the second to share the first's links it goes 0 → 1 as well.
  g.preds = {0, 0, 2, 1, 1};
  g.succ_begin = {0, 1, 2, 2, 3, 4};
  g.succ = {3, 4, 2, 2};
  for (int k = 0; k < 2; ++k) {
    g.kind.push_back(TransferKind::Activation);
    g.receiver.push_back(1);
    g.bytes.push_back(k == 0 ? bytes : bytes / 2);
    g.latency_s.push_back(network.append_route(0, 1, g.route));
    g.route_begin.push_back(static_cast<std::int64_t>(g.route.size()));
  }
  return g;
}

TEST(Sim, TwoFlowsOnOneLinkShareIt) {
  const auto system = system_with(Topology::Switched, {0.0, 1e9}, {0.0, 1e9});
  const Network network(system, 2);
  auto g = two_flows(network, 2e9, 1.0);
  g.bytes[1] = 2e9;  // two equal flows, both issued at time 1
  const auto shared = simulate(g, network);
  EXPECT_DOUBLE_EQ(shared.end[3], 1.0 + 4.0);  // 2 GB each at 0.5 GB/s
  EXPECT_DOUBLE_EQ(shared.end[4], 1.0 + 4.0);
  EXPECT_DOUBLE_EQ(shared.runtime_s, 6.0);
  SimOptions alone;
  alone.contention = false;
  EXPECT_DOUBLE_EQ(simulate(g, network, alone).end[3], 1.0 + 2.0);
  for (const auto& link : shared.links)
    EXPECT_LE(link.max_utilization, 1.0 + 1e-12);
  EXPECT_DOUBLE_EQ(shared.links[0].busy_s, 4.0);  // device 0's port up, busy from 1 to 5
  EXPECT_DOUBLE_EQ(shared.links[0].bytes, 4e9);
}

TEST(Sim, SharingIsRecomputedWhenFlowsStartAndEnd) {
  // A: 2 GB issued at 1 (after node 0); B: 1 GB issued at 1.5 (after node 1). A alone from 1
  // to 1.5 moves 0.5 GB; both at 0.5 GB/s until B's 1 GB is done at 3.5 (A has then moved
  // 1.5 GB); A alone again moves its last 0.5 GB by 4.
  const auto system = system_with(Topology::Switched, {0.0, 1e9}, {0.0, 1e9});
  const Network network(system, 2);
  auto g = two_flows(network, 2e9, 1.5);
  g.bytes[1] = 1e9;
  const auto r = simulate(g, network);
  EXPECT_DOUBLE_EQ(r.start[4], 1.5);
  EXPECT_DOUBLE_EQ(r.end[4], 3.5);
  EXPECT_DOUBLE_EQ(r.end[3], 4.0);  // 3 GB in 3 s: the link never idles
}

TEST(Sim, BlockingSendHoldsTheStream) {
  // 1F1B S=2 M=2, F=1, B=2, every hop 0.5 s. By hand: overlapped 10, blocking 10.5.
  const auto t = test::make("1f1b", test::sm(2, 2));
  const auto model = explicit_model(1.0, 1.0, 1.0, 0.5e9);
  const auto chain = system_with(Topology::Chain, {0.0, 1e9}, {});
  EXPECT_DOUBLE_EQ(run(t, model, chain).result.runtime_s, 10.0);
  SimOptions blocking;
  blocking.blocking_send = true;
  EXPECT_DOUBLE_EQ(run(t, model, chain, blocking).result.runtime_s, 10.5);
}

TEST(Sim, ChimeraReplicaAllReduceMatchesTheRingFormula) {
  // D = 2: the all-reduce of stage 1 overlaps the last backwards and ends before that of
  // stage 0 starts, which then runs alone after the last op: 2(k−1)(α + G/(kβ)), k = 2.
  const auto t = test::make("chimera", test::sm(2, 2));
  const double alpha = 0.01, beta = 1e9, grads = 1e9;
  const auto model = explicit_model(1.0, 1.0, 1.0, 0.0, grads);
  const auto system = system_with(Topology::Switched, {alpha, beta}, {alpha, beta});
  const auto r = run(t, model, system);
  double last_compute = 0.0;
  for (std::int64_t n = 0; n < r.graph.compute_nodes; ++n)
    last_compute = std::max(last_compute, r.result.end[static_cast<std::size_t>(n)]);
  EXPECT_DOUBLE_EQ(r.result.runtime_s, last_compute + 2 * (alpha + grads / 2 / beta));
  // 4 pipeline hops (empty messages, still lowered) + 2 stages × 2 ring steps × 2 members.
  EXPECT_EQ(r.graph.transfers(), 12);
}

TEST(Sim, DataParallelRingOverReplicas) {
  // One device, R replicas: 2(R−1) steps of G/R through its NIC after its last backward.
  const auto t = test::make("1f1b", test::sm(1, 3));
  const double alpha = 0.001, beta = 5e8, grads = 2e9;
  const auto model = explicit_model(1.0, 1.0, 1.0, 0.0, grads);
  const auto system = system_with(Topology::Switched, {0.0, 1e12}, {alpha, beta});
  LoweringOptions lowering;
  lowering.data_parallel = 4;
  const auto r = run(t, model, system, {}, lowering);
  EXPECT_DOUBLE_EQ(r.result.runtime_s, 3 * 3.0 + 6 * (alpha + grads / 4 / beta));
  const auto chain = system_with(Topology::Chain, {alpha, beta}, {});
  EXPECT_THROW(run(t, model, chain, {}, lowering), ParamError);
}

// Every registered schedule over a small grid.
std::vector<ScheduleTable> tables() {
  std::vector<ScheduleTable> out;
  for (const auto* info : all_schedules()) {
    for (std::int64_t S : {2, 4}) {
      for (std::int64_t M : {S, 2 * S}) {
        try {
          out.push_back(generate(*info, test::sm(S, M)));
        } catch (const ParamError&) {
        }
      }
    }
  }
  return out;
}

TEST(SimGrid, FreeCommunicationReproducesTheTableExactly) {
  const auto ideal = io::load_system("ideal");
  const auto model = io::load_model("default");
  for (const auto& costs : {Costs{}, parse_costs("F=1,B=3"), parse_costs("F=0.7,I=1.1,W=0.4")}) {
    for (const auto& t : tables()) {
      LoweringOptions lowering;
      lowering.costs = costs;
      for (const bool contention : {true, false}) {
        SimOptions options;
        options.contention = contention;
        const auto r = run(t, model, ideal, options, lowering);
        const auto timing = idealized_timing(t, costs);
        EXPECT_EQ(r.result.runtime_s, timing.makespan);
        for (std::size_t n = 0; n < t.ops.size(); ++n) {
          ASSERT_EQ(r.result.start[n], timing.start[n]);
          ASSERT_EQ(r.result.end[n], timing.end[n]);
        }
      }
    }
  }
}

TEST(SimGrid, InvariantsOfEveryRun) {
  const auto model = io::load_model("gpt3-1.3b");
  for (const char* name : {"dgx-h100", "a100-pcie", "balanced", "network-bound"}) {
    const auto system = io::load_system(name);
    for (const auto& t : tables()) {
      for (const bool contention : {true, false}) {
        SimOptions options;
        options.contention = contention;
        const auto r = run(t, model, system, options);
        const auto& g = r.graph;
        const auto& s = r.result;
        // Every op ran once, for its duration, after its inputs and after its stream predecessor.
        for (std::int64_t n = 0; n < g.compute_nodes; ++n) {
          const auto i = static_cast<std::size_t>(n);
          ASSERT_NEAR(s.end[i] - s.start[i], g.duration[i], 1e-9 * g.duration[i]);
        }
        for (std::int32_t d = 0; d < g.devices; ++d) {
          for (auto n = g.row_begin[static_cast<std::size_t>(d)] + 1;
               n < g.row_begin[static_cast<std::size_t>(d) + 1]; ++n) {
            ASSERT_GE(s.start[static_cast<std::size_t>(n)], s.end[static_cast<std::size_t>(n - 1)]);
          }
        }
        for (std::int64_t n = 0; n < g.nodes(); ++n) {
          for (auto k = g.succ_begin[static_cast<std::size_t>(n)];
               k < g.succ_begin[static_cast<std::size_t>(n) + 1]; ++k) {
            ASSERT_GE(s.start[static_cast<std::size_t>(g.succ[static_cast<std::size_t>(k)])],
                      s.end[static_cast<std::size_t>(n)]);
          }
        }
        // Bytes sent = bytes received; no link above its capacity.
        double sent = 0.0, on_first = 0.0, on_last = 0.0;
        for (std::int64_t k = 0; k < g.transfers(); ++k) {
          const auto t_index = static_cast<std::size_t>(k);
          sent += g.bytes[t_index];
        }
        for (std::size_t l = 0; l < s.links.size(); ++l) {
          (l % 2 == 0 ? on_first : on_last) +=
              s.links[l].bytes;  // Switched: up/nic out even, down/nic in odd
          ASSERT_LE(s.links[l].max_utilization, 1.0 + 1e-9) << name;
        }
        EXPECT_NEAR(on_first, sent, 1e-6 * sent + 1e-6);
        EXPECT_NEAR(on_last, sent, 1e-6 * sent + 1e-6);
        // The breakdown adds up, and the critical path ends at the runtime.
        for (const auto& dev : s.devices) {
          EXPECT_NEAR(dev.compute_s + dev.exposed_comm_s + dev.idle_s, s.runtime_s,
                      1e-9 * s.runtime_s);
        }
        ASSERT_FALSE(s.critical_path.empty());
        EXPECT_EQ(s.end[static_cast<std::size_t>(s.critical_path.back())], s.runtime_s);
        // Deterministic.
        EXPECT_EQ(simulate(g, Network(system, t.devices), options).end, s.end);
      }
    }
  }
}

TEST(SimGrid, MoreBandwidthNeverSlowsANoContentionRun) {
  const auto model = io::load_model("gpt3-1.3b");
  SimOptions options;
  options.contention = false;
  for (const auto& t : tables()) {
    double previous = 0.0;
    for (const double bandwidth : {1e9, 2e9, 1e10, 1e11}) {
      const auto system =
          system_with(Topology::Switched, {1e-5, bandwidth}, {1e-5, bandwidth / 2}, 2);
      const double runtime = run(t, model, system, options).result.runtime_s;
      if (previous > 0.0) {
        EXPECT_LE(runtime, previous * (1 + 1e-12));
      }
      previous = runtime;
    }
  }
}

TEST(SimGrid, MemoryIsStaticPlusActivations) {
  // The activation part of the simulated peak follows the table's order: with a uniform
  // explicit workload it is the table's peak (in M_a) times the bytes of one M_a.
  const auto model = explicit_model(1.0, 1.0, 1.0, 1e6);
  const auto system = io::load_system("dgx-h100");
  for (const auto& t : tables()) {
    if (!t.stage_layers.empty()) continue;
    const auto r = run(t, model, system);
    const auto peaks = activation_peaks(t);
    for (std::size_t d = 0; d < peaks.size(); ++d) {
      const auto& dev = r.result.devices[d];
      // Weights 10 + optimizer 30 per device share; a device holds one share per pipeline.
      const double static_bytes = 40.0 * t.pipelines();
      EXPECT_NEAR(dev.static_bytes, static_bytes, 1e-9);
      EXPECT_NEAR(dev.peak_memory_bytes, static_bytes + 100.0 * peaks[d], 1e-9);
      EXPECT_FALSE(dev.over_capacity);
    }
  }
}

// The paper's claim (arXiv 2605.24006): GPipe and 1F1B run equally long and 1F1B needs less
// memory. pipetab reproduces it where a stage-boundary transfer takes at most half a forward
// (compute-bound and balanced); beyond that, 1F1B's steady state carries the round trip of a
// gradient and an activation (cycle S−1:B → S−2:B → S−2:F → S−1: 2P ≥ 2B + F + 2c > 2(F + B)
// when c > F/2), so on network-bound (c = F) 1F1B is slower. The memory half holds everywhere.
TEST(SimPaper, GPipeAnd1F1B) {
  const auto model = io::load_model("default");
  for (const char* regime : {"compute-bound", "balanced", "network-bound"}) {
    const auto system = io::load_system(regime);
    for (const std::int64_t M : {16, 32}) {
      const auto gpipe = run(test::make("gpipe", test::sm(8, M)), model, system).result;
      const auto one = run(test::make("1f1b", test::sm(8, M)), model, system).result;
      double gpipe_peak = 0.0, one_peak = 0.0;
      for (const auto& d : gpipe.devices)
        gpipe_peak = std::max(gpipe_peak, d.peak_memory_bytes);
      for (const auto& d : one.devices)
        one_peak = std::max(one_peak, d.peak_memory_bytes);
      EXPECT_LT(one_peak, gpipe_peak) << regime << " M=" << M;
      if (std::string(regime) == "network-bound") {
        EXPECT_GT(one.runtime_s, gpipe.runtime_s) << "M=" << M;
      } else {
        EXPECT_NEAR(one.runtime_s, gpipe.runtime_s, 0.01 * gpipe.runtime_s) << regime << " M=" << M;
      }
    }
  }
}

}  // namespace
}  // namespace pipetab
