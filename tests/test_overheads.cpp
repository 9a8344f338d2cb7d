// What a run costs beyond its kernels and its links at their peak (issue 22): pipeline transfers
// at NCCL's point-to-point speed (a per-message latency, a rate cap that leaves the rest of the
// link to other flows), the host's time per pipeline step and per kernel, compute slowed while
// communication runs beside it, and the runtime each table runs under by default. Every
// expectation is computed by hand from the case's numbers.
#include <cmath>
#include <string>

#include "helpers.hpp"
#include <gtest/gtest.h>

#include "pipetab/cost/stage_cost.hpp"
#include "pipetab/error.hpp"
#include "pipetab/io/config.hpp"
#include "pipetab/sim/engine.hpp"
#include "pipetab/sim/simulation.hpp"
#include "pipetab/study/calibrate.hpp"

namespace pipetab {
namespace {

using test::explicit_model;
using test::system_with;

SimResult run(const ScheduleTable& t, const ModelConfig& model, const SystemConfig& system,
              LoweringOptions lowering = {}, SimOptions options = {}) {
  const Network network(system, t.devices);
  return simulate(lower(t, model, Job{}, Layout{}, network, lowering), network, options);
}

LinkSpec link(double latency, double bandwidth, double p2p_latency, double p2p_efficiency) {
  LinkSpec l{latency, bandwidth};
  l.p2p_latency_s = p2p_latency;
  l.p2p_efficiency = p2p_efficiency;
  return l;
}

TEST(PointToPoint, ASendAloneTakesItsMessageLatencyAndItsAchievedBandwidth) {
  // 1F1B on 2 devices, 1 microbatch: F, activation, F, B, gradient, B. Each hop costs the link
  // class's p2p latency and bytes / (bandwidth × p2p efficiency), not α + bytes / β.
  const auto t = test::make("1f1b", test::sm(2, 1));
  const double f = 1.0, b = 2.0, bytes = 3e9, beta = 2e9;
  const auto model = explicit_model(f, 1.0, 1.0, bytes);
  const auto in_node =
      system_with(Topology::Switched, link(0.25, beta, 0.5, 0.6), link(9.0, 1.0, 9.0, 1.0));
  EXPECT_DOUBLE_EQ(run(t, model, in_node).runtime_s, 2 * f + 2 * b + 2 * (0.5 + bytes / 1.2e9));
  // One device per node: the inter-node class's constants.
  const auto across =
      system_with(Topology::Switched, link(9.0, 1.0, 9.0, 1.0), link(0.25, beta, 0.125, 0.75), 1);
  EXPECT_DOUBLE_EQ(run(t, model, across).runtime_s, 2 * f + 2 * b + 2 * (0.125 + bytes / 1.5e9));
  // Without contention the cap holds too.
  SimOptions alone;
  alone.contention = false;
  EXPECT_DOUBLE_EQ(run(t, model, in_node, {}, alone).runtime_s,
                   2 * f + 2 * b + 2 * (0.5 + bytes / 1.2e9));
  // Unset, a class's p2p constants are its α and β: the old model exactly.
  const auto plain = system_with(Topology::Switched, {0.25, beta}, {9.0, 1.0});
  EXPECT_DOUBLE_EQ(run(t, model, plain).runtime_s, 2 * f + 2 * b + 2 * (0.25 + bytes / beta));
}

// Device 0 runs node 0 (1 s), then sends transfers 3 and 4 (both 0 → 1) that device 1's node 2
// needs; transfer 4 waits for device 1's node 1 (1 s) so both start at time 1. Transfer 3 moves
// `capped` bytes at most at `cap` bytes/s, transfer 4 `free` bytes; the link carries 1e9 B/s.
SimResult capped_pair(double capped, double cap, double free, bool contention = true) {
  const auto system = system_with(Topology::Switched, {0.0, 1e9}, {0.0, 1e9});
  const Network network(system, 2);
  ExecGraph g;
  g.devices = 2;
  g.compute_nodes = g.table_ops = 3;
  g.stream_begin = {0, 1, 3};
  g.stream = {0, 1, 2};
  g.compute_kind.assign(3, ComputeKind::TableOp);
  g.tp_comm_s.assign(3, 0.0);
  g.device = {0, 1, 1, 0, 0};
  g.duration = {1.0, 1.0, 1.0};
  g.alloc_bytes = g.free_bytes = {0, 0, 0};
  g.static_bytes = {0, 0};
  g.preds = {0, 0, 2, 1, 1};
  g.succ_begin = {0, 1, 2, 2, 3, 4};
  g.succ = {3, 4, 2, 2};
  for (const auto& [bytes, limit] : {std::pair{capped, cap}, std::pair{free, 1e300}}) {
    g.kind.push_back(TransferKind::Activation);
    g.blocks_sender.push_back(0);
    g.stage.push_back(1);
    g.receiver.push_back(1);
    g.bytes.push_back(bytes);
    g.latency_s.push_back(network.append_route(0, 1, g.route));
    g.route_begin.push_back(static_cast<std::int64_t>(g.route.size()));
    g.rate_cap.push_back(limit);
  }
  g.start_begin = {0};
  SimOptions options;
  options.contention = contention;
  return simulate(g, network, options);
}

TEST(PointToPoint, ACappedFlowLeavesTheRestOfTheLinkToOthers) {
  // Max-min with a bound (SimGrid's): the capped flow gets 0.25e9, the other the remaining
  // 0.75e9. The other's 1.5e9 B end at 1 + 2 = 3; the capped flow's 1e9 B at 1 + 4 = 5, still at
  // its cap although the link is free; node 2 runs 5 .. 6.
  const auto r = capped_pair(1e9, 0.25e9, 1.5e9);
  EXPECT_DOUBLE_EQ(r.end[4], 3.0);
  EXPECT_DOUBLE_EQ(r.end[3], 5.0);
  EXPECT_DOUBLE_EQ(r.runtime_s, 6.0);
  // A cap above the fair share changes nothing: equal shares of 0.5e9; the 1e9 B flow ends at
  // 3, the other's last 0.5e9 B then run at the full 1e9: 3.5.
  const auto fair = capped_pair(1e9, 0.9e9, 1.5e9);
  EXPECT_DOUBLE_EQ(fair.end[3], 3.0);
  EXPECT_DOUBLE_EQ(fair.end[4], 3.5);
  // Without contention each flow runs alone: the capped one 4 s, the other 1.5 s.
  const auto alone = capped_pair(1e9, 0.25e9, 1.5e9, false);
  EXPECT_DOUBLE_EQ(alone.end[3], 5.0);
  EXPECT_DOUBLE_EQ(alone.end[4], 2.5);
}

TEST(Overheads, EveryStepPaysTheHostsTimeAndOnlyWhenOn) {
  // 1F1B on 2 devices, 1 microbatch, free links: 2F + 2B, plus the step overhead of each of the
  // four ops (all on the critical path).
  const auto t = test::make("1f1b", test::sm(2, 1));
  const auto model = explicit_model(1.0, 1.0, 1.0, 0.0);
  auto system = system_with(Topology::Chain, {0.0, 1e300}, {});
  system.device.step_overhead_s = 0.125;
  const auto r = run(t, model, system);
  EXPECT_DOUBLE_EQ(r.runtime_s, 2 * 1.0 + 2 * 2.0 + 4 * 0.125);
  EXPECT_DOUBLE_EQ(r.devices[0].overhead_s, 2 * 0.125);
  LoweringOptions off;
  off.overheads = false;
  EXPECT_DOUBLE_EQ(run(t, model, system, off).runtime_s, 6.0);
  // Explicit --costs are the op times: no overhead on top.
  LoweringOptions costs;
  costs.costs = Costs{};
  const auto c = run(t, model, system, costs);
  EXPECT_DOUBLE_EQ(c.devices[0].overhead_s, 0.0);
}

// A two-layer transformer of hidden 256: small enough that its passes are host-bound.
TransformerConfig tiny_transformer() {
  TransformerConfig m;
  m.layers = 2;
  m.hidden = 256;
  m.heads = 4;
  m.vocab = 1000;
  return m;
}

TEST(Overheads, APassFasterThanTheHostIssuesItsKernelsRunsAtTheHostsPace) {
  // A small transformer on DGX H100 devices: a forward op lasts max(GPU time, kernels × the
  // host's time per kernel) + the step overhead, from the stage's own pass costs.
  const TransformerConfig m = tiny_transformer();
  Job job;
  job.seq_len = 128;
  job.micro_batch = 1;
  const Layout layout;
  const ModelConfig model{"tiny", m};
  const auto t = test::make("gpipe", test::sm(2, 1));
  auto system = io::load_system("dgx-h100");
  system.device.step_overhead_s = 1e-5;
  system.device.comm_slowdown = 0.0;
  const auto work = table_work(t, model, job, layout);
  const auto costs = cost::stage_costs(model, job, layout, work, system);
  const auto forward = costs[0].forward;
  ASSERT_GT(forward.kernels, 10.0);
  const Network network(system, t.devices);
  const auto node_of_f0 = [&] {
    for (std::size_t i = 0; i < t.ops.size(); ++i) {
      if (t.ops[i].first().kind == PassKind::F && t.ops[i].first().stage == 0) return i;
    }
    return t.ops.size();
  }();
  ASSERT_LT(node_of_f0, t.ops.size());
  for (const double host : {1e-9, 1e-3}) {
    system.device.host_launch_s = host;
    const Network net(system, t.devices);
    const auto g = lower(t, model, job, layout, net, {});
    const double expected = std::max(forward.seconds, forward.kernels * host) + 1e-5;
    EXPECT_DOUBLE_EQ(g.duration[node_of_f0], expected) << host;
    EXPECT_DOUBLE_EQ(g.overhead_s[node_of_f0], expected - forward.seconds) << host;
  }
  // 1 ms per kernel: host-bound, the op takes the host's time.
  EXPECT_GT(forward.kernels * 1e-3, forward.seconds);
}

// Transformer Engine's per-layer CUDA graphs (Stack::graph_modules): the host issues each
// captured stretch of a pass as one call; the device's time stays. Counted by hand on the
// operators: the attention block's calls leave the host for one replay.
TEST(Overheads, PerLayerGraphsIssueACapturedStretchAsOneCall) {
  const TransformerConfig m = tiny_transformer();
  Job job;
  job.seq_len = 128;
  job.micro_batch = 1;
  const Layout layout;
  const ModelConfig model{"tiny", m};
  const auto t = test::make("gpipe", test::sm(2, 1));
  const auto system = io::load_system("dgx-h100");
  const auto eager =
      cost::stage_costs(model, job, layout, table_work(t, model, job, layout), system)[0];
  auto graphed_job = job;
  graphed_job.stack.graph_modules = graph_bit(GraphModule::Attn);
  const auto graphed = cost::stage_costs(model, graphed_job, layout,
                                         table_work(t, model, graphed_job, layout), system)[0];
  // The attention's calls in each pass, by hand from the operators: all of attention_forward's
  // (from the input norm to the residual add and the pre-MLP norm), none of the MLP's.
  const auto ops = model_operators(Workload{m, graphed_job, layout});
  double forward_calls = 0.0, forward_launches = 0.0;
  bool in_attention = false;
  std::int32_t stretches = 0;
  for (const Operator& op : ops.layer.forward) {
    const bool captured = op.graph_module == graph_bit(GraphModule::Attn);
    if (captured) {
      forward_calls += op.kernels;
      forward_launches += op.inner_launches;
    }
    if (captured && !in_attention) ++stretches;
    in_attention = captured;
  }
  EXPECT_EQ(ops.layer.forward.front().name, "layernorm1");
  EXPECT_EQ(ops.layer.forward.front().graph_module, graph_bit(GraphModule::Attn));
  for (const Operator& op : ops.layer.forward) {
    if (op.name == "fc1" || op.name == "mlp.activation") {
      EXPECT_EQ(op.graph_module, 0) << op.name;
    }
  }
  ASSERT_EQ(stretches, 1);
  ASSERT_GT(forward_calls, 3.0);
  // Per layer, the forward's calls drop by the attention's less one replay; the device's time
  // does not change.
  EXPECT_DOUBLE_EQ(eager.forward.kernels - graphed.forward.kernels,
                   static_cast<double>(m.layers) / 2.0 * (forward_calls - 1));
  EXPECT_DOUBLE_EQ(eager.forward.launches - graphed.forward.launches,
                   static_cast<double>(m.layers) / 2.0 * forward_launches);
  EXPECT_DOUBLE_EQ(eager.forward.seconds, graphed.forward.seconds);
  // Under the full-iteration graph the modules are not looked at: the rules refuse both.
  graphed_job.stack.cuda_graphs = true;
  EXPECT_THROW(require_runnable(model, graphed_job, layout), ParamError);
}

// Megatron-Core's rules for the modules, each refused with its reason.
TEST(Overheads, PerLayerGraphModulesFollowMegatronCoresRules) {
  const auto refusal = [](const char* preset, std::uint8_t modules, Recompute recompute) {
    test::ModelRun run = io::load_model(preset);
    run.job.stack.graph_modules = modules;
    run.job.recompute = recompute;
    try {
      require_runnable(run.model, run.job, run.layout);
    } catch (const ParamError& e) {
      return std::string(e.what());
    }
    return std::string("(runs)");
  };
  const auto bit = [](GraphModule g) { return graph_bit(g); };
  const auto router = static_cast<std::uint8_t>(bit(GraphModule::MoeRouter));
  const auto both = static_cast<std::uint8_t>(router | bit(GraphModule::MoePreprocess));
  EXPECT_EQ(refusal("qwen3-30b-a3b", both, Recompute::None), "(runs)");
  EXPECT_NE(refusal("qwen3-30b-a3b", bit(GraphModule::MoePreprocess), Recompute::None)
                .find("moe_preprocess is captured only with moe_router"),
            std::string::npos);
  EXPECT_NE(refusal("llama2-7b", router, Recompute::None).find("need a mixture of experts"),
            std::string::npos);
  EXPECT_NE(refusal("llama2-7b", bit(GraphModule::Mamba), Recompute::None).find("hybrid"),
            std::string::npos);
  EXPECT_NE(refusal("qwen3-30b-a3b", bit(GraphModule::Mlp), Recompute::None)
                .find("every layer of this model is a mixture of experts"),
            std::string::npos);
  EXPECT_EQ(refusal("deepseek-v3", bit(GraphModule::Mlp), Recompute::None), "(runs)");
  EXPECT_NE(refusal("llama2-7b", bit(GraphModule::Attn), Recompute::Full)
                .find("full recomputation runs only under a full-iteration graph"),
            std::string::npos);
  EXPECT_EQ(refusal("llama2-7b", bit(GraphModule::Attn), Recompute::Selective), "(runs)");
}

TEST(Interference, ComputeSlowsForTheTimeItsDeviceCommunicates) {
  // Device 0 runs node 0 (1 s), sends 1e9 B (1 s on a 1e9 B/s link, no latency) to device 1's
  // node 2, and runs node 1 (2 s) meanwhile. At comm_slowdown 0.5 node 1 progresses 1 / 1.5 per
  // second while the transfer runs: after 1 s it has 2 − 2/3 = 4/3 s of work left, so it ends at
  // 2 + 4/3. Device 1's node 2 waits for the data (it computes nothing while receiving): 2 .. 3.
  const auto system = system_with(Topology::Switched, {0.0, 1e9}, {0.0, 1e9});
  const Network network(system, 2);
  ExecGraph g;
  g.devices = 2;
  g.compute_nodes = g.table_ops = 3;
  g.stream_begin = {0, 2, 3};
  g.stream = {0, 1, 2};
  g.compute_kind.assign(3, ComputeKind::TableOp);
  g.tp_comm_s.assign(3, 0.0);
  g.device = {0, 0, 1, 0};
  g.duration = {1.0, 2.0, 1.0};
  g.alloc_bytes = g.free_bytes = {0, 0, 0};
  g.static_bytes = {0, 0};
  g.preds = {0, 0, 1, 1};
  g.succ_begin = {0, 1, 1, 1, 2};
  g.succ = {3, 2};
  g.kind = {TransferKind::Activation};
  g.blocks_sender = {0};
  g.stage = {1};
  g.receiver = {1};
  g.bytes = {1e9};
  g.latency_s = {network.append_route(0, 1, g.route)};
  g.route_begin.push_back(static_cast<std::int64_t>(g.route.size()));
  g.start_begin = {0};
  const auto plain = simulate(g, network);
  EXPECT_DOUBLE_EQ(plain.end[1], 3.0);
  g.comm_slowdown = 0.5;
  const auto slowed = simulate(g, network);
  EXPECT_DOUBLE_EQ(slowed.end[1], 2.0 + 4.0 / 3.0);
  EXPECT_DOUBLE_EQ(slowed.end[2], 3.0);
  EXPECT_DOUBLE_EQ(slowed.devices[0].interference_s, 1.0 / 3.0);
  EXPECT_DOUBLE_EQ(slowed.devices[1].interference_s, 0.0);
}

TEST(Interference, AppliesToModelTimesOnlyAndIsSwitchable) {
  // 1F1B, 2 devices, 4 microbatches, a slow link: sends overlap the next ops, so with a slowdown
  // the run is longer, each device's interference is what its ops lost, and turning overheads off
  // gives the plain run back.
  const auto t = test::make("1f1b", test::sm(2, 4));
  const auto model = explicit_model(1.0, 1.0, 1.0, 1e9);
  auto system = system_with(Topology::Chain, {0.0, 2e9}, {});
  const auto plain = run(t, model, system);
  system.device.comm_slowdown = 0.25;
  const auto slowed = run(t, model, system);
  EXPECT_GT(slowed.runtime_s, plain.runtime_s);
  double lost = 0.0;
  for (const auto& d : slowed.devices) {
    EXPECT_GE(d.interference_s, 0.0);
    // Never more than 25% of the compute it slowed.
    EXPECT_LE(d.interference_s, 0.25 / 1.25 * d.compute_s + 1e-12);
    lost += d.interference_s;
  }
  EXPECT_GT(lost, 0.0);
  LoweringOptions off;
  off.overheads = false;
  EXPECT_DOUBLE_EQ(run(t, model, system, off).runtime_s, plain.runtime_s);
}

TEST(RuntimeDefault, EachTableRunsUnderItsOwnRuntime) {
  const auto chosen = [](const std::string& name, ScheduleParams p) {
    return default_runtime(test::make(name, p), name).runtime;
  };
  EXPECT_EQ(chosen("1f1b", test::sm(4, 8)), Runtime::Megatron);
  auto v = test::sm(4, 8);
  v.chunks = 2;
  EXPECT_EQ(chosen("interleaved", v), Runtime::Megatron);
  EXPECT_EQ(chosen("gpipe", test::sm(4, 8)), Runtime::PyTorch);
  EXPECT_EQ(chosen("zb-h1", test::sm(4, 8)), Runtime::PyTorch);
  EXPECT_EQ(chosen("zb-v", test::sm(4, 8)), Runtime::PyTorch);
  EXPECT_EQ(chosen("chimera", test::sm(4, 8)), Runtime::Async);
  EXPECT_EQ(chosen("dualpipe", test::sm(4, 8)), Runtime::DualPipe);
  EXPECT_EQ(chosen("dualpipev", test::sm(4, 8)), Runtime::PyTorch);
  // A file's table has no schedule name: PyTorch runs it (a 1F1B order too).
  EXPECT_EQ(default_runtime(test::make("1f1b", test::sm(4, 8)), "").runtime, Runtime::PyTorch);
  // Given, it is kept; Auto resolves.
  const auto t = test::make("gpipe", test::sm(4, 8));
  EXPECT_EQ(resolve_runtime(Runtime::Async, t, "gpipe").runtime, Runtime::Async);
  EXPECT_EQ(resolve_runtime(Runtime::Async, t, "gpipe").reason, "given");
  EXPECT_EQ(resolve_runtime(Runtime::Auto, t, "gpipe").runtime, Runtime::PyTorch);
  EXPECT_EQ(parse_runtime("auto"), Runtime::Auto);
  // simulate_table reports which ran and why.
  SimulationSetup setup;
  setup.model = explicit_model(1.0, 1.0, 1.0, 1e6);
  setup.system = system_with(Topology::Switched, {1e-6, 1e10}, {1e-6, 1e10});
  setup.lowering.runtime = Runtime::Auto;
  const auto one = test::make("1f1b", test::sm(4, 8));
  const auto m = simulate_table(one, setup, "1f1b").metrics;
  EXPECT_EQ(m.runtime, "megatron");
  EXPECT_NE(m.runtime_chosen_by.find("Megatron-LM"), std::string::npos);
  setup.lowering.runtime = Runtime::Megatron;
  EXPECT_EQ(simulate_table(one, setup, "1f1b").metrics.runtime_chosen_by, "given");
}

// DeepSeek's DualPipe code: each chunk waits for the previous chunk's sends to be delivered,
// its receives posted ahead: exactly the asynchronous runtime with blocking pipeline sends, on
// every shape; with sends slower than the compute that waiting costs time, and only DualPipe's
// tables run under it.
TEST(RuntimeDualPipe, IsAsyncWithBlockingSendsAndRunsOnlyDualPipe) {
  SimulationSetup setup;
  setup.model = explicit_model(1.0, 1.0, 1.0, 1e6);
  setup.system = system_with(Topology::Switched, {1e-6, 1e10}, {1e-6, 1e10});
  for (const std::string name : {"dualpipe", "dualpipev"})
    for (const int S : {2, 4, 8})
      for (const int M : {2 * S, 3 * S}) {
        const auto t = test::make(name, test::sm(S, M));
        setup.lowering.runtime = Runtime::DualPipe;
        setup.options.blocking_send = false;
        const auto dualpipe = simulate_table(t, setup, name).metrics;
        EXPECT_EQ(dualpipe.runtime, "dualpipe");
        setup.lowering.runtime = Runtime::Async;
        setup.options.blocking_send = true;
        const auto blocking = simulate_table(t, setup, name).metrics;
        EXPECT_DOUBLE_EQ(dualpipe.runtime_s, blocking.runtime_s) << name << " " << S << " " << M;
      }
  // Sends of 1e9 bytes at 1e9 B/s take as long as a forward: a chunk that waits on them is late.
  setup.system = system_with(Topology::Switched, {1e-6, 1e9}, {1e-6, 1e9});
  setup.model = explicit_model(1.0, 1.0, 1.0, 1e9);
  setup.options.blocking_send = false;
  const auto t = test::make("dualpipe", test::sm(4, 8));
  setup.lowering.runtime = Runtime::Async;
  const double async = simulate_table(t, setup, "dualpipe").metrics.runtime_s;
  setup.lowering.runtime = Runtime::DualPipe;
  EXPECT_GT(simulate_table(t, setup, "dualpipe").metrics.runtime_s, async);
  const auto refused =
      runtime_refuses(test::make("1f1b", test::sm(4, 8)), "1f1b", Runtime::DualPipe);
  ASSERT_TRUE(refused.has_value());
  EXPECT_NE(refused->find("runs only DualPipe and DualPipeV"), std::string::npos);
  EXPECT_EQ(parse_runtime("dualpipe"), Runtime::DualPipe);
  EXPECT_STREQ(to_string(Runtime::DualPipe), "dualpipe");
}

TEST(SystemFile, TheNewConstantsRoundTripAndAreChecked) {
  auto s = io::load_system("dgx-h100");
  s.device.step_overhead_s = 5.3e-5;
  s.device.host_launch_s = 4e-5;
  s.device.comm_slowdown = 0.189;
  s.intra.p2p_latency_s = 9.8e-6;
  s.intra.p2p_efficiency = 0.72;
  s.inter.p2p_latency_s = 1.99e-5;
  s.inter.p2p_efficiency = 0.96;
  s.inter.deepep_efficiency = 0.7;
  s.device.overlapped_deepep_efficiency = 0.8;
  const auto back = io::parse_system(io::system_toml(s), "written.toml");
  EXPECT_EQ(back.device, s.device);
  EXPECT_EQ(back.intra, s.intra);
  EXPECT_EQ(back.inter, s.inter);
  // Out of range: file, line and key.
  const std::string base = io::system_toml(io::load_system("dgx-h100"));
  const auto error_of = [](const std::string& text) {
    try {
      (void)io::parse_system(text, "sys.toml");
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  // The preset sets both keys; each is replaced by a value out of range.
  const auto replaced = [&](const std::string& key, const std::string& value) {
    auto text = base;
    const auto at = text.find(key + " = ");
    EXPECT_NE(at, std::string::npos) << key;
    const auto end = text.find('\n', at);
    return text.replace(at, end - at, key + " = " + value);
  };
  auto bad = replaced("p2p_efficiency", "0");
  EXPECT_NE(error_of(bad).find("sys.toml:"), std::string::npos) << error_of(bad);
  EXPECT_NE(error_of(bad).find("network.intra.p2p_efficiency"), std::string::npos) << error_of(bad);
  bad = replaced("alltoall_efficiency", "1.5");
  EXPECT_NE(error_of(bad).find("network.intra.alltoall_efficiency"), std::string::npos)
      << error_of(bad);
  bad = replaced("alltoall_latency_s", "-1e-6");
  EXPECT_NE(error_of(bad).find("network.intra.alltoall_latency_s"), std::string::npos)
      << error_of(bad);
  bad = replaced("overlapped_deepep_efficiency", "0");
  EXPECT_NE(error_of(bad).find("device.overlapped_deepep_efficiency"), std::string::npos)
      << error_of(bad);
  bad = replaced("alltoall_efficiency", "0.9\ndeepep_efficiency = 1.5");
  EXPECT_NE(error_of(bad).find("network.intra.deepep_efficiency"), std::string::npos)
      << error_of(bad);
  bad = replaced("comm_slowdown", "-1");
  EXPECT_NE(error_of(bad).find("device.comm_slowdown"), std::string::npos) << error_of(bad);
}

TEST(Calibration, ThePointToPointAndOverheadConstantsCanBeFitted) {
  auto system = io::load_system("dgx-h100");
  system.intra.p2p_latency_s.reset();
  // An unset p2p latency reads as the link's α, and setting it makes it explicit.
  EXPECT_DOUBLE_EQ(parameter_value(system, "intra.p2p_latency_s"), system.intra.latency_s);
  set_parameter(system, "intra.p2p_latency_s", 7e-6);
  EXPECT_DOUBLE_EQ(system.intra.p2p_latency(), 7e-6);
  set_parameter(system, "inter.p2p_efficiency", 0.5);
  EXPECT_DOUBLE_EQ(system.inter.p2p_bandwidth(), 0.5 * system.inter.bandwidth);
  for (const char* name : {"step_overhead_s", "host_launch_s", "comm_slowdown"}) {
    set_parameter(system, name, 0.01);
    EXPECT_DOUBLE_EQ(parameter_value(system, name), 0.01) << name;
  }
}

}  // namespace
}  // namespace pipetab
