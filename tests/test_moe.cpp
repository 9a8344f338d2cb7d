// Mixture-of-experts layers (issue 25): invariants against the dense MLP, all-to-all bytes and
// times computed by hand, the overlap rule, the layout's rules, dense-first layers and the
// experts' gradients over their own data-parallel ranks.
#include <algorithm>
#include <cmath>
#include <numeric>
#include <span>
#include <string>

#include "helpers.hpp"
#include <fmt/format.h>
#include <gtest/gtest.h>

#include "pipetab/cost/stage_cost.hpp"
#include "pipetab/error.hpp"
#include "pipetab/io/config.hpp"
#include "pipetab/model/flops.hpp"
#include "pipetab/model/operators.hpp"
#include "pipetab/model/workload.hpp"
#include "pipetab/parallel/collective.hpp"
#include "pipetab/sim/graph.hpp"
#include "pipetab/sim/simulation.hpp"

namespace pipetab {
namespace {

using test::find_op;
using test::workload;

// A small dense SwiGLU transformer, and the same with experts over `ep` expert-parallel ranks;
// the job: micro batches of 2 sequences of 128 tokens, fused attention.
test::ModelRun dense_model(std::int64_t ffn) {
  TransformerConfig m;
  m.layers = 4;
  m.hidden = 256;
  m.heads = 4;
  m.vocab = 1000;
  m.ffn_hidden = ffn;
  m.gated_mlp = true;
  m.dropout = false;
  m.learned_positions = false;
  Job job;
  job.seq_len = 128;
  job.micro_batch = 2;
  job.stack.flash_attention = true;
  return {{"m", m}, job, Layout{}};
}

test::ModelRun moe_model(std::int64_t experts, std::int64_t top_k, std::int64_t width,
                         std::int64_t ep = 1) {
  test::ModelRun m = dense_model(1024);
  MoeConfig moe;
  moe.experts = experts;
  moe.top_k = top_k;
  moe.expert_ffn_hidden = width;
  m.transformer().moe = moe;
  m.layout.ep = ep;
  return m;
}

// The activation bytes a run's one stage keeps.
double kept_bytes(const test::ModelRun& run) {
  const std::vector<std::int32_t> one{1};
  return test::stage_work(run, one, 1)[0].activation_bytes;
}

// The option require_runnable refuses a run by, or "accepted".
std::string refusal(const test::ModelRun& run) {
  try {
    require_runnable(run.model, run.job, run.layout);
  } catch (const OptionError& e) {
    return e.key();
  }
  return "accepted";
}

// How many of a pass's operators the host waits for the device before (Operator::host_sync).
std::ptrdiff_t waits(const std::vector<Operator>& ops) {
  return std::count_if(ops.begin(), ops.end(), [](const Operator& op) { return op.host_sync; });
}

// The matrix-multiply FLOPs of a pass's operators whose name starts with one of `prefixes`.
double flops_of(const std::vector<Operator>& ops,
                std::initializer_list<std::string_view> prefixes) {
  double sum = 0.0;
  for (const auto& op : ops) {
    for (const auto prefix : prefixes) {
      if (op.name.substr(0, prefix.size()) == prefix) sum += op.flops;
    }
  }
  return sum;
}

// A one-device 1F1B table of two microbatches, and the small MoE model (16 experts, top-4) on a
// DGX H100 under `layout`.
ScheduleTable one_device_table() {
  ScheduleParams params;
  params.devices = 1;
  params.microbatches = 2;
  return test::make("1f1b", params);
}
SimulationSetup moe_setup(const Layout& layout, bool distributed_optimizer = false) {
  const auto run = moe_model(16, 4, 128);
  SimulationSetup s;
  s.model = run.model;
  s.job = run.job;
  s.layout = layout;
  s.system = io::load_system("dgx-h100");
  s.job.distributed_optimizer = distributed_optimizer;
  require_runnable(s.model, s.job, s.layout);
  return s;
}

TEST(Moe, OneExpertTopOneIsADenseMlpOfItsWidthPlusTheRouter) {
  // E = 1, k = 1, EP = 1: every token goes to the one expert, whose GEMMs are the dense MLP's of
  // the expert's width; the layers differ by the router's h×E products alone.
  const auto moe = model_operators(workload(moe_model(1, 1, 512)));
  const auto dense = model_operators(workload(dense_model(512)));
  const double T = 128 * 2, h = 256, E = 1;
  const double router = 2 * T * h * E;
  for (const auto pass : {PassId::Forward, PassId::InputGrad, PassId::WeightGrad}) {
    const auto& m = moe.moe_layer.pass(pass);
    const auto& d = dense.layer.pass(pass);
    EXPECT_DOUBLE_EQ(flops_of(m, {"experts."}), flops_of(d, {"fc1", "fc2"}));
    EXPECT_DOUBLE_EQ(matmul_flops(m), matmul_flops(d) + router);
  }
  // Parameters: the same plus the router's weight.
  const std::int32_t units[] = {1};
  const test::ModelRun a = moe_model(1, 1, 512), b = dense_model(512);
  const auto wa = test::stage_work(a, units, 1), wb = test::stage_work(b, units, 1);
  EXPECT_DOUBLE_EQ(wa[0].params, wb[0].params + 4 * h * E);
  EXPECT_EQ(wa[0].moe_layers, 4);
  EXPECT_EQ(wb[0].moe_layers, 0);
}

TEST(Moe, TopOneOverEveryRankIsADenseMlpPerRank) {
  // Top-1 with one expert per EP rank, balanced: each rank's expert takes as many rows as the
  // rank routes tokens, the dense MLP's shape; E experts of width f over E ranks.
  for (const std::int64_t experts : {2, 4, 8}) {
    const auto ops = model_operators(workload(moe_model(experts, 1, 512, experts)));
    const auto dense = model_operators(workload(dense_model(512)));
    const auto* fc1 = find_op(ops.moe_layer.forward, "experts.fc1");
    ASSERT_NE(fc1, nullptr);
    EXPECT_DOUBLE_EQ(fc1->gemm.m, 256);  // rows per expert: T·k·EP/E
    EXPECT_DOUBLE_EQ(fc1->gemm.batch, 1);
    EXPECT_DOUBLE_EQ(flops_of(ops.moe_layer.forward, {"experts."}),
                     flops_of(dense.layer.forward, {"fc1", "fc2"}));
  }
}

TEST(Moe, RowsPerExpertFollowTheLayout) {
  // rows per expert = load · T · k · EP / E (reference modern-runs.md §C.3).
  for (const std::int64_t ep : {1, 2, 4, 8, 16}) {
    auto m = moe_model(16, 4, 128, ep);
    m.job.moe.imbalance = 1.5;
    const auto ops = model_operators(workload(m));
    const auto* fc1 = find_op(ops.moe_layer.forward, "experts.fc1");
    ASSERT_NE(fc1, nullptr);
    EXPECT_DOUBLE_EQ(fc1->gemm.m, 1.5 * 256 * 4 * static_cast<double>(ep) / 16) << ep;
    EXPECT_DOUBLE_EQ(fc1->gemm.batch, 16.0 / static_cast<double>(ep));
    EXPECT_DOUBLE_EQ(fc1->gemm.n, 2 * 128);  // gated: two halves
    EXPECT_DOUBLE_EQ(fc1->gemm.k, 256);
  }
}

// The host's side of a MoE layer, by hand (cost::sync_seconds): one stream in issue order. An
// op's kernels start once the device is free and the host has issued the first of them, end no
// sooner than the host has issued the last, and a synchronisation holds the host until the
// device is done.
TEST(Moe, AHostSynchronisationEndsTheHostsLead) {
  using cost::IssuedOp;
  // No synchronisation: nothing on top (the pass-wide bound prices the host).
  const IssuedOp none[] = {{1.0, 3.0, 0.5, false}, {1.0, 0.1, 0.1, false}};
  EXPECT_EQ(cost::sync_seconds(none), 0.0);
  // One: from it round to it again (the ops before it are the next layer's head). B begins at
  // 0.2 and ends when its host is done, 2.0; C (host 2.0–2.1) runs 2.1–3.1; A, issued by 2.2,
  // 3.1–4.1: 4.1 against 2.5 of device. The device cannot run C while the host still issues B.
  IssuedOp one[] = {{1.0, 0.1, 0.1, false}, {0.5, 2.0, 0.2, true}, {1.0, 0.1, 0.1, false}};
  EXPECT_NEAR(cost::sync_seconds(one), 4.1 - 2.5, 1e-12);
  one[1].host_s = 0.1;  // device-bound: only B's first kernel's issue, 0.2, is waited for
  EXPECT_NEAR(cost::sync_seconds(one), 0.2, 1e-12);
  one[1].host_s = 5.0;  // host-bound: C and A after 5.0 of host, 7.1 against 2.5
  EXPECT_NEAR(cost::sync_seconds(one), 7.1 - 2.5, 1e-12);
  // Two: A 0.5–3.0 (its host), B 3.1–5.1; C waits for the device (host at 5.1), runs 5.3–5.8;
  // D's host ends 7.3 after its device would: 7.3 against 4.0. Without the second
  // synchronisation C would be issued by 3.3 and the host's lead carry over.
  const IssuedOp two[] = {
      {1.0, 3.0, 0.5, true}, {2.0, 0.1, 0.1, false}, {0.5, 0.2, 0.2, true}, {0.5, 2.0, 0.1, false}};
  EXPECT_NEAR(cost::sync_seconds(two), 7.3 - 4.0, 1e-12);
}

// Every dispatcher makes the host wait before the forward's dispatch (Megatron-Core's
// cuda_sync_point, DeepEP's busy-wait, HybridEP's stream synchronisation); the backward reuses
// the counts, and a recomputed MoE layer waits again. A pass's cost carries the wait: with it
// the forward takes what its stretch takes, without a wait (CUDA graphs) its kernels' time.
TEST(Moe, TheDispatchSynchronisesTheHostOncePerForward) {
  for (const auto dispatcher :
       {MoeDispatcher::AllToAll, MoeDispatcher::DeepEp, MoeDispatcher::HybridEp}) {
    auto m = moe_model(16, 4, 128, 4);
    m.job.moe.dispatcher = dispatcher;
    const auto ops = model_operators(workload(m));
    EXPECT_EQ(waits(ops.moe_layer.forward), 1);
    EXPECT_TRUE(find_op(ops.moe_layer.forward, "moe.dispatch")->host_sync);
    EXPECT_EQ(waits(ops.moe_layer.input_grad), 0);
    EXPECT_EQ(waits(ops.layer.forward), 0);
    m.job.moe.recompute = MoeRecompute::Mlp;
    EXPECT_EQ(waits(model_operators(workload(m)).moe_layer.input_grad), 1);
  }
  // EP 1: no dispatch, but TE's GroupedLinear needs its splits on the host before the experts.
  const auto one_rank = model_operators(workload(moe_model(16, 4, 128, 1)));
  EXPECT_EQ(waits(one_rank.moe_layer.forward), 1);
  EXPECT_TRUE(find_op(one_rank.moe_layer.forward, "experts.fc1")->host_sync);

  // A wait per layer: four layers wait four times as long as one.
  auto s = moe_setup(Layout{});
  s.layout.ep = 4;
  s.layout.dp = 4;
  const auto stage = [&](std::int32_t layers) {
    test::ModelRun run{s.model, s.job, s.layout};
    run.transformer().layers = layers;
    const std::vector<std::int32_t> units{layers};
    return cost::stage_costs(run.model, run.job, run.layout, test::stage_work(run, units, 1),
                             s.system)[0];
  };
  const auto four = stage(4), one = stage(1);
  EXPECT_GE(one.forward.sync_s, s.system.device.host_launch_s * (1 - 1e-12));  // the first issue
  EXPECT_NEAR(four.forward.sync_s, 4 * one.forward.sync_s, 1e-15);
  EXPECT_EQ(four.input_grad.sync_s, 0.0);
  s.job.stack.cuda_graphs = true;
  const auto graphs = stage(4);
  EXPECT_EQ(graphs.forward.sync_s, 0.0);
  EXPECT_EQ(cost::host_bound_seconds(graphs.forward, s.system.device, s.job.stack),
            graphs.forward.seconds);
}

// Megatron-Core makes DeepEP's received indices a multi-hot map with PyTorch's boolean indexing
// (Stack::fused_multihot false, its stack's default): after the dispatch, three more waits and
// the conversion's fourteen kernels, in the order the code issues them; the fused kernel
// (AutoModel's experts, --enable-experimental) is one and waits for nothing, and the other
// dispatchers have no indices to convert.
TEST(Moe, MegatronCoreWaitsThreeTimesToMakeDeepEpsIndicesMultiHot) {
  const auto forward = [](MoeDispatcher dispatcher, bool fused) {
    auto m = moe_model(16, 4, 128, 4);
    m.job.moe.dispatcher = dispatcher;
    m.job.stack.fused_multihot = fused;
    return model_operators(workload(m)).moe_layer;
  };
  const auto megatron = forward(MoeDispatcher::DeepEp, false);
  const auto& f = megatron.forward;
  const auto dispatch = std::find_if(f.begin(), f.end(),
                                     [](const Operator& op) { return op.name == "moe.dispatch"; });
  ASSERT_NE(dispatch, f.end());
  EXPECT_EQ(dispatch->kernels, 4);  // DeepEP's layout, count exchange, dispatch; the cast
  const std::string_view names[] = {"moe.multihot.maps", "moe.multihot.indices",
                                    "moe.multihot.rows", "moe.multihot.probs"};
  const std::int32_t kernels[] = {4, 4, 3, 3};
  ASSERT_GE(f.end() - dispatch, 5);
  for (std::size_t k = 0; k < 4; ++k) {
    const Operator& op = *(dispatch + 1 + static_cast<std::ptrdiff_t>(k));
    EXPECT_EQ(op.name, names[k]);
    EXPECT_EQ(op.kernels, kernels[k]) << op.name;
    EXPECT_EQ(op.host_sync, k > 0) << op.name;  // nonzero, repeat_interleave, nonzero
    EXPECT_EQ(op.kind, OperatorKind::Memory) << op.name;
  }
  EXPECT_EQ(waits(f), 4);
  EXPECT_EQ(waits(megatron.input_grad), 0);  // the backward reuses the forward's maps
  const auto fused = forward(MoeDispatcher::DeepEp, true);
  EXPECT_EQ(waits(fused.forward), 1);
  EXPECT_EQ(f.size(), fused.forward.size() + 3);
  EXPECT_EQ(find_op(fused.forward, "moe.multihot.maps"), nullptr);
  const Operator* one = find_op(fused.forward, "moe.multihot");
  ASSERT_NE(one, nullptr);
  EXPECT_EQ(one->kernels, 1);
  EXPECT_FALSE(one->host_sync);
  for (const auto other : {MoeDispatcher::AllToAll, MoeDispatcher::HybridEp}) {
    for (const bool fuse : {false, true}) {
      const auto o = forward(other, fuse);
      EXPECT_EQ(waits(o.forward), 1);
      EXPECT_EQ(find_op(o.forward, "moe.multihot.maps"), nullptr);
      EXPECT_EQ(find_op(o.forward, "moe.multihot"), nullptr);
    }
  }
  // Each wait ends the host's lead: the device idles at least one issue per wait. EP 1 has no
  // dispatch and so no indices.
  auto s = moe_setup(Layout{});
  s.layout.ep = 4;
  s.layout.dp = 4;
  s.job.moe.dispatcher = MoeDispatcher::DeepEp;
  const auto sync_s = [&](bool one_kernel) {
    test::ModelRun run{s.model, s.job, s.layout};
    run.job.stack.fused_multihot = one_kernel;
    const std::vector<std::int32_t> units{static_cast<std::int32_t>(run.transformer().layers)};
    return cost::stage_costs(run.model, run.job, run.layout, test::stage_work(run, units, 1),
                             s.system)[0]
        .forward.sync_s;
  };
  const double layers = static_cast<double>(s.model.transformer()->layers);
  EXPECT_GE(sync_s(false) - sync_s(true), 3 * layers * s.system.device.host_launch_s * (1 - 1e-12));
  auto one_rank = moe_model(16, 4, 128, 1);
  one_rank.job.moe.dispatcher = MoeDispatcher::DeepEp;
  one_rank.job.stack.fused_multihot = false;
  EXPECT_EQ(find_op(model_operators(workload(one_rank)).moe_layer.forward, "moe.multihot.maps"),
            nullptr);
}

// The pass's op by hand: the synchronising layers' stretches, then the rest of the pass as long
// as its kernels or its host, whichever is longer; neither hides under the layers' stretches.
TEST(Moe, TheRestOfAPassDoesNotHideUnderItsSynchronisingLayers) {
  DeviceSpec device;
  device.host_launch_s = 1.0;
  cost::PassCost pass;
  pass.seconds = 10.0;  // 8 of the synchronising layers, 2 of the rest
  pass.synced_device_s = 8.0;
  pass.sync_s = 1.0;
  pass.kernels = 9.0;  // 9 s of host: 4 the layers', 5 the rest's
  pass.synced_host_s = 4.0;
  const Stack eager;
  EXPECT_DOUBLE_EQ(cost::host_bound_seconds(pass, device, eager), 8.0 + 1.0 + 5.0);
  pass.kernels = 5.0;  // the rest's 1 s of host under its 2 s of kernels
  EXPECT_DOUBLE_EQ(cost::host_bound_seconds(pass, device, eager), 8.0 + 1.0 + 2.0);
  // Summing passes (a merged forward and backward, layers of a stage) sums every field.
  cost::PassCost sum = pass;
  sum += pass;
  EXPECT_EQ(sum.synced_device_s, 16.0);
  EXPECT_EQ(sum.synced_host_s, 8.0);
  EXPECT_EQ(sum.sync_s, 2.0);
  EXPECT_EQ(sum.kernels, 10.0);
}

// Transformer Engine's GroupedLinear launches a GEMM per local expert over up to four streams
// (an event first, then a record and two waits per stream), and its FP8 current scaling
// quantises each expert's rows in four kernels: launches from inside one call. Eager stacks
// and delayed scaling's fused cast launch none.
TEST(Moe, GroupedGemmsLaunchAKernelPerExpert) {
  for (const std::int64_t ep : {1, 4, 16}) {
    auto m = moe_model(16, 4, 128, ep);
    m.job.precision = Precision::FP8;
    const std::int32_t local = static_cast<std::int32_t>(16 / ep);
    const auto ops = model_operators(workload(m));
    const std::int32_t gemms = (local - 1) + 1 + 3 * std::min(local, 4);  // GEMMs, events
    EXPECT_EQ(find_op(ops.moe_layer.forward, "experts.fc1")->inner_launches, gemms) << ep;
    EXPECT_EQ(find_op(ops.moe_layer.weight_grad, "experts.fc2.weight_grad")->inner_launches, gemms);
    EXPECT_EQ(find_op(ops.moe_layer.forward, "experts.fc2.quantize")->inner_launches,
              4 * local - 1);
    EXPECT_EQ(find_op(ops.moe_layer.input_grad, "experts.fc1.quantize_grad")->inner_launches,
              4 * local - 1);
    EXPECT_EQ(find_op(ops.layer.forward, "fc1")->inner_launches, 0);  // a dense linear: one GEMM
    m.job.fp8_recipe = Fp8Recipe::Delayed;
    EXPECT_EQ(find_op(model_operators(workload(m)).moe_layer.forward, "experts.fc2.quantize")
                  ->inner_launches,
              0);
    m.job.stack.fused_elementwise = false;
    EXPECT_EQ(
        find_op(model_operators(workload(m)).moe_layer.forward, "experts.fc1")->inner_launches, 0);
  }
}

// gpt-oss's experts as Megatron-Core @d728871 runs them: fc2's bias added per local expert in a
// Python loop (2 calls an expert and a concatenation, 6 elements of h a row; backward 5 calls an
// expert and two more, 8 elements), fc1's biases' gradients added to their main gradients one by
// one, and the clamp before the quick-GEGLU (two clamps and a concatenation, 8 elements of the
// width a row; backward 10) with the linear offset's copy to the device, which the host waits
// for: a second wait per forward, and one in the backward where the activation is recomputed,
// before fc2's backward. By hand for 16 experts over EP 4 (4 local): 256 tokens × top-4 = 1,024
// rows of h 256, width 128, 16 bits. Under CUDA graphs the experts run fused: none of it.
TEST(Moe, GptOssExpertsAddTheirBiasesAndClampEagerly) {
  auto m = moe_model(16, 4, 128, 4);
  const auto plain = model_operators(workload(m));
  m.transformer().moe->expert_bias = true;
  m.transformer().moe->activation_clamp = 7.0;
  const double rows = 1024, h = 256, w = 128, e = 2, g = m.job.grad_bytes_per_param;
  const auto at = [](const std::vector<Operator>& ops, std::string_view name) {
    return std::find_if(ops.begin(), ops.end(),
                        [&](const Operator& op) { return op.name == name; }) -
           ops.begin();
  };
  const auto ops = model_operators(workload(m));
  const auto& f = ops.moe_layer.forward;
  const auto& i = ops.moe_layer.input_grad;
  ASSERT_NE(find_op(f, "experts.fc2.bias"), nullptr);
  EXPECT_DOUBLE_EQ(find_op(f, "experts.fc2.bias")->bytes, 6 * e * rows * h);
  EXPECT_EQ(find_op(f, "experts.fc2.bias")->kernels, 2 * 4 + 1);
  EXPECT_EQ(at(f, "experts.fc2.bias"), at(f, "experts.fc2") + 1);
  EXPECT_DOUBLE_EQ(find_op(i, "experts.fc2.bias.backward")->bytes, 8 * e * rows * h);
  EXPECT_EQ(find_op(i, "experts.fc2.bias.backward")->kernels, 5 * 4 + 2);
  const Operator* accumulate =
      find_op(ops.moe_layer.weight_grad, "experts.fc1.bias_grad.accumulate");
  EXPECT_DOUBLE_EQ(accumulate->bytes, 4 * (2 * w) * (e + 2 * g));
  EXPECT_EQ(accumulate->kernels, 4);
  EXPECT_DOUBLE_EQ(find_op(f, "experts.activation.clamp")->bytes, 8 * e * rows * w);
  EXPECT_EQ(find_op(f, "experts.activation.clamp")->kernels, 4);
  EXPECT_DOUBLE_EQ(find_op(i, "experts.activation.clamp.backward")->bytes, 10 * e * rows * w);
  EXPECT_EQ(at(f, "experts.activation"), at(f, "experts.activation.clamp") + 1);
  EXPECT_TRUE(find_op(f, "experts.activation")->host_sync);
  EXPECT_EQ(waits(f), 2);
  EXPECT_EQ(waits(i), 0);
  // Everything else is the plain model's.
  EXPECT_EQ(f.size(), plain.moe_layer.forward.size() + 2);
  EXPECT_EQ(i.size(), plain.moe_layer.input_grad.size() + 2);

  m.job.moe.recompute = MoeRecompute::MoeAct;
  const auto recomputed = model_operators(workload(m)).moe_layer.input_grad;
  EXPECT_EQ(waits(recomputed), 1);
  EXPECT_TRUE(find_op(recomputed, "experts.activation.recompute")->host_sync);
  EXPECT_EQ(at(recomputed, "experts.activation.recompute"),
            at(recomputed, "experts.activation.clamp.recompute") + 1);
  EXPECT_LT(at(recomputed, "experts.activation.recompute"),
            at(recomputed, "experts.fc2.input_grad"));

  // The second wait costs the forward at least the issue of the kernel after it.
  auto s = moe_setup(Layout{});
  s.layout.ep = 4;
  s.layout.dp = 4;
  const std::vector<std::int32_t> units{1};
  const auto forward_waits = [&](const ModelConfig& model) {
    const test::ModelRun run{model, s.job, s.layout};
    return cost::stage_costs(run.model, run.job, run.layout, test::stage_work(run, units, 1),
                             s.system)[0]
        .forward.sync_s;
  };
  EXPECT_GE(forward_waits(m.model), forward_waits(s.model) + s.system.device.host_launch_s);

  // Memory: the clamps keep fc1's output and the fused activation its clamped copy, one more of
  // fc1's width a row in each of the 4 layers, unless moe_act recomputes the activation.
  auto kept_plain = m;
  kept_plain.job.moe.recompute = MoeRecompute::None;
  kept_plain.transformer().moe->activation_clamp = 0.0;
  auto kept_clamped = kept_plain;
  kept_clamped.transformer().moe->activation_clamp = 7.0;
  EXPECT_DOUBLE_EQ(kept_bytes(kept_clamped) - kept_bytes(kept_plain), 4 * rows * (2 * w) * e);
  kept_plain.job.moe.recompute = kept_clamped.job.moe.recompute = MoeRecompute::MoeAct;
  EXPECT_DOUBLE_EQ(kept_bytes(kept_clamped), kept_bytes(kept_plain));

  m.job.stack.cuda_graphs = true;
  const auto graphed = model_operators(workload(m));
  for (const auto* pass : {&graphed.moe_layer.forward, &graphed.moe_layer.input_grad,
                           &graphed.moe_layer.weight_grad}) {
    for (const auto& op : *pass) {
      EXPECT_EQ(op.name.find("bias"), std::string::npos) << op.name;
      EXPECT_EQ(op.name.find("clamp"), std::string::npos) << op.name;
    }
  }
  EXPECT_FALSE(find_op(graphed.moe_layer.forward, "experts.activation")->host_sync);

  // Transformer Engine's grouped linears take no bias over expert-tensor-parallel ranks.
  m.layout.ep = 2;
  m.layout.etp = 2;
  m.layout.dp = 4;
  EXPECT_EQ(refusal(m), "expert_tensor_parallel");
  m.transformer().moe->expert_bias = false;
  EXPECT_EQ(refusal(m), "accepted");
}

TEST(Moe, AllToAllBytesAreTheBusiestRanksRows) {
  // T = 256 tokens, k = 4, h = 256, bf16: 1,024 rows of 512 bytes; × the imbalance; the FP8
  // dispatch 1 + 4/128 bytes per value, its backward and the combine in 16 bits.
  auto m = moe_model(16, 4, 128, 4);
  auto bytes = [](const test::ModelRun& model, PassId pass, std::string_view name) {
    const auto ops = model_operators(workload(model));
    const auto* op = find_op(ops.moe_layer.pass(pass), name);
    return op ? op->collective_bytes : -1.0;
  };
  EXPECT_DOUBLE_EQ(bytes(m, PassId::Forward, "moe.dispatch"), 1024.0 * 256 * 2);
  EXPECT_DOUBLE_EQ(bytes(m, PassId::Forward, "moe.combine"), 1024.0 * 256 * 2);
  EXPECT_DOUBLE_EQ(bytes(m, PassId::InputGrad, "moe.dispatch.backward"), 1024.0 * 256 * 2);
  EXPECT_DOUBLE_EQ(bytes(m, PassId::InputGrad, "moe.combine.backward"), 1024.0 * 256 * 2);
  m.job.moe.imbalance = 2.0;
  EXPECT_DOUBLE_EQ(bytes(m, PassId::Forward, "moe.dispatch"), 2 * 1024.0 * 256 * 2);
  m.job.moe.fp8_dispatch = true;
  EXPECT_DOUBLE_EQ(bytes(m, PassId::Forward, "moe.dispatch"), 2 * 1024.0 * 256 * (1 + 4.0 / 128));
  EXPECT_DOUBLE_EQ(bytes(m, PassId::Forward, "moe.combine"), 2 * 1024.0 * 256 * 2);
  // A capacity factor pads every expert to it, whatever the imbalance.
  m.job.moe.capacity_factor = 1.25;
  EXPECT_DOUBLE_EQ(bytes(m, PassId::InputGrad, "moe.combine.backward"), 1.25 * 1024.0 * 256 * 2);
  // Four all-to-alls per layer and microbatch (two each way); six with the MLP recomputed.
  // Before each forward dispatch, the alltoall dispatcher all-gathers every rank's int64 count
  // per expert: 16 experts × 8 bytes × EP 4, on NCCL's ring; DeepEP counts inside its kernel.
  auto count = [](const test::ModelRun& model, CollectiveKind kind) {
    const auto ops = model_operators(workload(model));
    std::int64_t n = 0;
    for (const auto pass : {PassId::Forward, PassId::InputGrad, PassId::WeightGrad}) {
      for (const auto& op : ops.moe_layer.pass(pass))
        n += op.group == CollectiveGroup::Expert && op.collective == kind;
    }
    return n;
  };
  EXPECT_EQ(count(m, CollectiveKind::AllToAll), 4);
  EXPECT_EQ(count(m, CollectiveKind::AllGather), 1);
  EXPECT_DOUBLE_EQ(bytes(m, PassId::Forward, "moe.token_counts"), 16.0 * 8 * 4);
  EXPECT_EQ(find_op(model_operators(workload(m)).moe_layer.forward, "moe.token_counts")->algorithm,
            CollectiveAlgorithm::Ring);
  m.job.moe.recompute = MoeRecompute::Mlp;
  EXPECT_EQ(count(m, CollectiveKind::AllToAll), 6);
  EXPECT_EQ(count(m, CollectiveKind::AllGather), 2);  // the forward recomputed, its counts too
  m.job.moe.dispatcher = MoeDispatcher::DeepEp;
  EXPECT_EQ(count(m, CollectiveKind::AllGather), 0);
  // HybridEP all-gathers its routing map before each forward dispatch: a byte per token (256:
  // s 128 × b 2) and expert (16) from each of EP 4 ranks, on NCCL's ring; the backward reuses it,
  // and the recomputed forward gathers it again.
  m.job.moe.dispatcher = MoeDispatcher::HybridEp;
  EXPECT_EQ(count(m, CollectiveKind::AllGather), 2);
  EXPECT_EQ(count(m, CollectiveKind::AllToAll), 6);
  EXPECT_DOUBLE_EQ(bytes(m, PassId::Forward, "moe.routing_map_all_gather"), 256.0 * 16 * 4);
  const auto hybrid = model_operators(workload(m));
  const auto* gather = find_op(hybrid.moe_layer.forward, "moe.routing_map_all_gather");
  ASSERT_NE(gather, nullptr);
  EXPECT_EQ(gather->algorithm, CollectiveAlgorithm::Ring);
  EXPECT_TRUE(gather->opens_next_exchange);  // issued inside the dispatch call
  EXPECT_FALSE(find_op(hybrid.moe_layer.forward, "moe.dispatch")->opens_next_exchange);
  EXPECT_EQ(find_op(hybrid.moe_layer.forward, "moe.dispatch")->algorithm,
            CollectiveAlgorithm::NodeDedup);
  m.job.moe.recompute = MoeRecompute::None;
  EXPECT_EQ(count(m, CollectiveKind::AllGather), 1);
  EXPECT_EQ(count(moe_model(16, 4, 128, 1), CollectiveKind::AllToAll), 0);  // EP 1: no exchange
  EXPECT_EQ(count(moe_model(16, 4, 128, 1), CollectiveKind::AllGather), 0);
  auto one = moe_model(16, 4, 128, 1);
  one.job.moe.dispatcher = MoeDispatcher::HybridEp;
  EXPECT_EQ(count(one, CollectiveKind::AllGather), 0);
}

// Megatron-Core's recompute module `layernorm` (moe_recompute_norm): the pre-MLP norm's output,
// the MLP's input of s·b·h 16-bit values, goes from what each MoE layer keeps, and the norm's
// forward runs again at the start of the layer's input-gradient pass.
TEST(Moe, RecomputedNormKeepsTheMlpInputOut) {
  auto m = moe_model(16, 4, 128, 4);  // 4 layers, s = 128, b = 2, h = 256
  auto norm = m;
  norm.job.moe.recompute_norm = true;
  EXPECT_DOUBLE_EQ(kept_bytes(m) - kept_bytes(norm), 4 * 2.0 * 128 * 2 * 256);
  const auto ops = model_operators(workload(norm));
  const auto& i = ops.moe_layer.input_grad;
  const auto at = [&](std::string_view name) {
    return std::find_if(i.begin(), i.end(), [&](const Operator& op) { return op.name == name; });
  };
  ASSERT_NE(at("layernorm2.recompute"), i.end());
  EXPECT_LT(at("layernorm2.recompute"), at("moe.unpermute.backward"));
  EXPECT_DOUBLE_EQ(at("layernorm2.recompute")->bytes,
                   find_op(ops.moe_layer.forward, "layernorm2")->bytes);
  EXPECT_EQ(find_op(model_operators(workload(m)).moe_layer.input_grad, "layernorm2.recompute"),
            nullptr);
  // Full recomputation recomputes the norm already: refused by name.
  norm.job.recompute = Recompute::Full;
  EXPECT_EQ(refusal(norm), "moe_recompute_norm");
}

// Megatron-Core's recompute module `mla_up_proj` (mla_recompute_up_proj): the heads' 16-bit Q, K
// and V, T · heads/t · (2·(head_dim + rope) + v) values, go from what each latent-attention layer
// keeps, and the query and key-value up-projections run again, as in the forward, before the
// attention's backward. FP8 attention keeps its quantised copies, which the recompute does not
// free (Transformer Engine's FusedAttnFunc saves them).
TEST(Moe, MlaUpProjectionRecomputeFreesTheHeadsQueriesKeysAndValues) {
  auto m = moe_model(16, 4, 128);  // 4 layers, s = 128, b = 2, h = 256, 4 heads
  auto& t = m.transformer();
  t.attention = AttentionKind::Latent;
  t.head_dim = 64;
  t.latent = {96, 64, 32, 48};  // q_lora, kv_lora, qk_rope_head_dim, v_head_dim
  m.layout.tp = 2;
  m.layout.sequence_parallel = true;
  auto up = m;
  up.job.mla_recompute_up_proj = true;
  require_runnable(up.model, up.job, up.layout);
  // 2 bytes × 256 tokens × 2 heads a rank × (2 · (64 + 32) + 48), in each of 4 layers.
  EXPECT_DOUBLE_EQ(kept_bytes(m) - kept_bytes(up), 4 * 2.0 * 256 * 2 * (2 * (64 + 32) + 48));
  const auto ops = model_operators(workload(up));
  const auto& i = ops.moe_layer.input_grad;
  const auto at = [&](std::string_view name) {
    return std::find_if(i.begin(), i.end(), [&](const Operator& op) { return op.name == name; });
  };
  for (const auto& [again, forward] : {std::pair{"mla.q_up.recompute", "mla.q_up"},
                                       std::pair{"mla.kv_up.recompute", "mla.kv_up"}}) {
    ASSERT_NE(at(again), i.end()) << again;
    EXPECT_LT(at(again), at("attention.flash.backward")) << again;
    EXPECT_DOUBLE_EQ(at(again)->flops, find_op(ops.moe_layer.forward, forward)->flops) << again;
  }
  EXPECT_EQ(find_op(model_operators(workload(m)).moe_layer.input_grad, "mla.kv_up.recompute"),
            nullptr);
  // Under FP8 attention the quantised copies stay: nothing is freed.
  for (auto* r : {&m, &up}) {
    r->job.precision = Precision::FP8;
    r->job.fp8_attention = true;
  }
  EXPECT_DOUBLE_EQ(kept_bytes(m), kept_bytes(up));
  // Refused by name: with full recomputation, and on a model without latent attention.
  auto full = up;
  full.job.recompute = Recompute::Full;
  EXPECT_EQ(refusal(full), "mla_recompute_up_proj");
  auto dense_attention = moe_model(16, 4, 128);
  dense_attention.job.mla_recompute_up_proj = true;
  EXPECT_EQ(refusal(dense_attention), "mla_recompute_up_proj");
}

// Megatron-Core's recompute module `mlp` (dense_mlp_recompute): the dense layers' MLP runs again
// at the start of their input-gradient pass and keeps only its input, 6·s·b·ffn bytes less a
// gated layer (fc1's two halves and the activation's output, 16 bits); the MoE blocks are left
// as they are (their all-to-alls not repeated), unlike moe_recompute mlp.
TEST(Moe, DenseMlpRecomputeLeavesTheExpertsAlone) {
  auto m = dense_model(1024);  // 4 layers, s = 128, b = 2, h = 256, ffn 1,024
  auto mlp = m;
  mlp.job.dense_mlp_recompute = true;
  require_runnable(mlp.model, mlp.job, mlp.layout);
  EXPECT_DOUBLE_EQ(kept_bytes(m) - kept_bytes(mlp), 4 * 6.0 * 256 * 1024);
  const auto names = [](const std::vector<Operator>& ops) {
    std::vector<std::string> out;
    for (const auto& op : ops)
      out.emplace_back(op.name);
    return out;
  };
  const auto i = names(model_operators(workload(mlp)).layer.input_grad);
  const auto fc1 = std::find(i.begin(), i.end(), "fc1");
  ASSERT_NE(fc1, i.end());
  EXPECT_LT(fc1, std::find(i.begin(), i.end(), "fc2.input_grad"));
  EXPECT_EQ(find_op(model_operators(workload(m)).layer.input_grad, "fc1"), nullptr);
  // A mixture of experts with a dense first layer: that layer's MLP as moe_recompute mlp
  // recomputes it, the MoE layers' backward unchanged.
  auto moe = moe_model(16, 4, 128, 4);
  moe.transformer().moe->dense_layers = 1;
  moe.transformer().moe->dense_ffn_hidden = 1024;
  auto dense_only = moe, block = moe;
  dense_only.job.dense_mlp_recompute = true;
  block.job.moe.recompute = MoeRecompute::Mlp;
  const auto a = model_operators(workload(dense_only)), b = model_operators(workload(block)),
             c = model_operators(workload(moe));
  EXPECT_EQ(names(a.layer.input_grad), names(b.layer.input_grad));
  EXPECT_EQ(names(a.moe_layer.input_grad), names(c.moe_layer.input_grad));
  EXPECT_NE(names(b.moe_layer.input_grad), names(c.moe_layer.input_grad));
  // Refused by name with full recomputation, which recomputes the MLP already.
  mlp.job.recompute = Recompute::Full;
  EXPECT_EQ(refusal(mlp), "dense_mlp_recompute");
}

TEST(Moe, AllToAllTimesByHand) {
  const LinkSpec intra{2e-6, 450e9, 0.8}, inter{5e-6, 50e9, 0.9};
  const double bytes = 64e6;
  Collective a{CollectiveKind::AllToAll, {8, 8}, bytes, CollectiveAlgorithm::Direct};
  a.top_k = 8;
  // EP 8 in one node: 7/8 of the rows from the node's other GPUs.
  EXPECT_DOUBLE_EQ(collective_seconds(a, intra, inter), 2e-6 + bytes * 7 / 8 / (450e9 * 0.8));
  // EP 32 over four nodes: 7/32 over NVLink, 24/32 over the NIC, the NIC's the longer.
  a.group.ranks = 32;
  EXPECT_DOUBLE_EQ(collective_seconds(a, intra, inter), 5e-6 + bytes * 24 / 32 / (50e9 * 0.9));
  // Imbalanced: the busiest receiver's rows, twice the bytes, twice the wire time.
  a.bytes = 2 * bytes;
  EXPECT_DOUBLE_EQ(collective_seconds(a, intra, inter), 5e-6 + 2 * bytes * 24 / 32 / (50e9 * 0.9));
  // DeepEP: once per destination node, its own included. Four nodes, k = 8: 4(1 − (3/4)^8) =
  // 3.60 distinct nodes per token; a node limit of 2 bounds it to 2.
  a.bytes = bytes;
  a.algorithm = CollectiveAlgorithm::NodeDedup;
  const double distinct = 4 * (1 - std::pow(0.75, 8));
  EXPECT_DOUBLE_EQ(collective_seconds(a, intra, inter), 5e-6 + bytes / 8 * distinct / (50e9 * 0.9));
  a.node_limit = 2;
  EXPECT_DOUBLE_EQ(collective_seconds(a, intra, inter), 5e-6 + bytes / 8 * 2 / (50e9 * 0.9));
  // One rank: nothing moves.
  a.group.ranks = 1;
  EXPECT_EQ(collective_seconds(a, intra, inter), 0.0);
}

TEST(Moe, AllToAllRunsOnTheGroupsLinks) {
  // On a DGX H100 (8 GPUs a node), EP 8 stays in the node and EP 16 leaves it; with ETP 2 an EP
  // group's ranks are two apart, so EP 8 already spans two nodes.
  const auto system = io::load_system("dgx-h100");
  auto m = moe_model(16, 4, 128, 8);
  const auto ops = model_operators(workload(m));
  const Operator& dispatch = *find_op(ops.moe_layer.forward, "moe.dispatch");
  EXPECT_EQ(cost::collective_of(dispatch, workload(m), system).group.per_node, 8);
  m.layout.etp = 2;
  EXPECT_EQ(cost::collective_of(dispatch, workload(m), system).group.per_node, 4);
  const double in_node =
      cost::operator_cost(dispatch, workload(moe_model(16, 4, 128, 8)), system).seconds;
  const double across =
      cost::operator_cost(dispatch, workload(moe_model(16, 4, 128, 16)), system).seconds;
  // NCCL's all-to-all at the preset's measured all-to-all latency and rate (LinkSpec::alltoall_*).
  ASSERT_TRUE(system.intra.alltoall_efficiency.has_value());
  EXPECT_DOUBLE_EQ(in_node, *system.intra.alltoall_latency_s +
                                dispatch.collective_bytes * 7 / 8 /
                                    (system.intra.bandwidth * *system.intra.alltoall_efficiency));
  EXPECT_GT(across, 3 * in_node);  // half the rows over a 50 GB/s NIC instead of NVLink
}

TEST(Moe, SharedExpertsHideTheAllToAllsOnlyWhenOverlapped) {
  // Forward: with --moe-shared-expert-overlap the dispatch runs under the shared fc1 and the
  // combine under the shared fc2: the pass is shorter by min(all-to-all, GEMM) for each.
  const auto system = io::load_system("dgx-h100");
  auto m = moe_model(16, 4, 128, 16);
  m.transformer().moe->shared_experts = 1;
  m.transformer().moe->shared_expert_ffn_hidden = 512;
  const test::ModelRun plain = m;
  m.job.moe.shared_expert_overlap = true;
  const test::ModelRun overlapped = m;
  const std::int32_t units[] = {1};
  const auto cost = [&](const test::ModelRun& model) {
    return cost::stage_costs(model.model, model.job, model.layout,
                             test::stage_work(model, units, 1), system)[0];
  };
  const auto ops = model_operators(workload(m));
  const auto seconds = [&](std::string_view name) {
    return cost::operator_cost(*find_op(ops.moe_layer.forward, name), workload(m), system).seconds;
  };
  const double hidden = std::min(seconds("moe.dispatch"), seconds("shared_expert.fc1")) +
                        std::min(seconds("moe.combine"), seconds("shared_expert.fc2"));
  EXPECT_GT(hidden, 0.0);
  EXPECT_NEAR(cost(plain).forward.seconds - cost(overlapped).forward.seconds, 4 * hidden, 1e-12);
  EXPECT_NEAR(cost(plain).forward.expert_comm_s - cost(overlapped).forward.expert_comm_s,
              4 * hidden, 1e-12);
}

TEST(Moe, DenseLayersComeFirst) {
  // Six layers, the first three dense: cut in three stages of two, the first holds two dense
  // layers, the second one dense and one MoE, the last two MoE.
  auto m = moe_model(8, 2, 128);
  m.transformer().layers = 6;
  m.transformer().moe->dense_layers = 3;
  m.transformer().moe->dense_ffn_hidden = 2048;
  const test::ModelRun model = m;
  const std::int32_t units[] = {1, 1, 1};
  const auto work = test::stage_work(model, units, 3);
  EXPECT_EQ(work[0].moe_layers, 0);
  EXPECT_EQ(work[1].moe_layers, 1);
  EXPECT_EQ(work[2].moe_layers, 2);
  EXPECT_EQ(work[0].expert_params, 0.0);
  const auto ops = model_operators(workload(m));
  const auto* fc1 = find_op(ops.layer.forward, "fc1");
  ASSERT_NE(fc1, nullptr);
  EXPECT_DOUBLE_EQ(fc1->gemm.n, 2 * 2048);  // the dense layers' own width
  // The stage FLOPs are the sum of their layers'.
  const double dense = matmul_flops(ops.layer.forward), moe = matmul_flops(ops.moe_layer.forward);
  EXPECT_DOUBLE_EQ(work[1].forward_flops, dense + moe);
  // Parameters of the whole model: 3 dense layers, 3 MoE layers of 8 experts, embeddings.
  const double h = 256, attention = 2 * h * h + 2 * h * h, norms = 4 * h;
  const double expected = 3 * (attention + 3 * h * 2048 + norms) +
                          3 * (attention + 8 * 3 * h * 128 + h * 8 + norms) + 1000 * h + 1000 * h +
                          2 * h;
  m.transformer().tie_embeddings = false;
  EXPECT_DOUBLE_EQ(total_params(workload(m)), expected);
}

TEST(Moe, LayoutRules) {
  const auto model = moe_model(16, 4, 128);
  const auto error = [&](const Layout& l) {
    try {
      require_runnable(model.model, model.job, l);
    } catch (const ParamError& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  Layout l;
  l.dp = 8;
  l.ep = 3;
  EXPECT_NE(error(l).find("16 experts do not divide evenly"), std::string::npos) << error(l);
  l.ep = 16;
  EXPECT_NE(error(l).find("does not divide them"), std::string::npos) << error(l);
  l.ep = 8;
  EXPECT_EQ(error(l), "");
  l.etp = 3;
  EXPECT_NE(error(l).find("expert_ffn_hidden"), std::string::npos) << error(l);
  l.etp = 1;
  l.tp = 2;
  EXPECT_NE(error(l).find("sequence parallelism"), std::string::npos) << error(l);
  l.sequence_parallel = true;
  EXPECT_EQ(error(l), "");  // TP 2 × DP 8 = EP 8 × ETP 1 × EDP 2
  const auto dense = dense_model(512);
  Layout d;
  d.ep = 2;
  d.dp = 2;
  EXPECT_THROW(require_runnable(dense.model, dense.job, d), ParamError);
}

TEST(Moe, ExpertStateIsShardedOverExpertDataParallelRanks) {
  // DP 8, EP 4: the experts' optimizer state is sharded over EDP = 2 ranks, the rest over 8.
  const auto table = one_device_table();
  Layout l;
  l.dp = 8;
  l.ep = 4;
  const auto setup = moe_setup(l, true);
  const auto work = table_work(table, setup.model, setup.job, setup.layout);
  const auto bytes = static_memory(table, work, setup.model, setup.job, setup.layout);
  const auto& w = work[0];
  const double experts = w.optimizer_bytes * w.expert_params / w.params;
  EXPECT_NEAR(bytes[0],
              w.weight_bytes + w.grad_bytes + (w.optimizer_bytes - experts) / 8 + experts / 2,
              1e-6 * bytes[0]);
  // The simulation reduces the experts' gradients over their own group: more bytes move with
  // EDP 2 than EP 8's EDP 1 (no expert reduction at all).
  const auto moved = [&](std::int64_t ep) {
    l.ep = ep;
    return simulate_table(table, moe_setup(l), "1f1b").metrics.transfer_bytes;
  };
  EXPECT_GT(moved(4), moved(8));
}

TEST(Moe, FsdpShardsExpertsOverTheirOwnRanks) {
  // FSDP over DP 8 with EP 4: the dense state over 8 ranks, the experts' over EDP = 2
  // (torchtitan's expert FSDP mesh); without pipelining a block's parameters and gradients are
  // the unsharded working set.
  const auto table = one_device_table();
  Layout l;
  l.dp = 8;
  l.ep = 4;
  l.fsdp.enabled = true;
  const auto setup = moe_setup(l);
  const auto work = table_work(table, setup.model, setup.job, setup.layout);
  const auto& w = work[0];
  const double state = w.grad_bytes + w.optimizer_bytes;
  const double experts = state * w.expert_params / w.params;
  // Unsharded: the root unit's (embedding, output layer) and one block's parameters, and the
  // larger unit's gradients.
  const double block = (w.params - w.outer_params) / static_cast<double>(w.layers);
  const double largest = std::max(block, w.outer_params);
  EXPECT_NEAR(static_memory(table, work, setup.model, setup.job, setup.layout)[0],
              (state - experts) / 8 + experts / 2 +
                  ((largest + block) * w.weight_bytes + largest * w.grad_bytes) / w.params,
              1e-9 * state);
  // The experts' gathers and reduce-scatters run over EDP: more bytes move than with EP 8, whose
  // EDP of 1 leaves each rank its experts whole.
  const auto moved = [&](std::int64_t ep) {
    l.ep = ep;
    return simulate_table(table, moe_setup(l), "1f1b").metrics.transfer_bytes;
  };
  EXPECT_GT(moved(4), moved(8));
}

TEST(Moe, ModelFlopsCountTheBalancedLoad) {
  // Imbalance slows the busiest rank, not the model's FLOPs; capacity padding is hardware work.
  auto m = moe_model(16, 4, 128, 4);
  const auto balanced = iteration_flops(workload(m), 8);
  m.job.moe.imbalance = 1.5;
  EXPECT_DOUBLE_EQ(iteration_flops(workload(m), 8).model, balanced.model);
  m.job.moe.capacity_factor = 2.0;
  EXPECT_DOUBLE_EQ(iteration_flops(workload(m), 8).model, balanced.model);
  EXPECT_GT(iteration_flops(workload(m), 8).hardware, balanced.hardware);
}

}  // namespace
}  // namespace pipetab

namespace pipetab {
namespace {

// A run of one stage and one microbatch on two nodes (EP 16 over DP 16), overheads off: its
// forward and backward, all-to-alls included, as the simulation runs them.
SimulationSetup one_stage(const char* model_name, std::int64_t ep) {
  SimulationSetup s = test::preset_setup(model_name, "dgx-h100");
  std::get<TransformerConfig>(s.model.spec).layers = 2;
  s.lowering.runtime = Runtime::Async;
  s.lowering.overheads = false;
  s.lowering.iteration.optimizer = false;
  s.layout.dp = 16;
  s.layout.ep = ep;
  require_runnable(s.model, s.job, s.layout);
  return s;
}

TEST(Moe, AnAllToAllAloneOnItsLinksTakesWhatTheCostModelPrices) {
  // Alone on its links each all-to-all's two flows (NVLink, NIC) take their latency and bytes at
  // the link's collective bandwidth, and the op waits for the longer: the cost model's price.
  // With the shared expert beside the dispatch and the combine (Qwen3 has none; gpt-oss none;
  // DeepSeek-V3 one) the op waits for the longer of the exchange and the shared expert.
  for (const char* name : {"qwen3-30b-a3b", "deepseek-v3"}) {
    for (const bool overlap : {false, true}) {
      auto s = one_stage(name, 16);
      auto& m = std::get<TransformerConfig>(s.model.spec);
      s.job.moe.shared_expert_overlap = overlap;
      if (std::string_view(name) == "deepseek-v3") {
        m.moe->dense_layers = 0;
        m.mtp_layers = 0;  // the stage's MoE layers only
      }
      ScheduleParams p;
      p.devices = 1;
      p.microbatches = 1;
      const auto table = test::make("1f1b", p);
      const auto r = simulate_table(table, s, "1f1b");
      const auto c = cost::stage_costs(s.model, s.job, s.layout,
                                       table_work(table, s.model, s.job, s.layout), s.system)
                         .front();
      ASSERT_GT(c.forward.expert_comm_s, 0.0);
      EXPECT_NEAR(r.result.pipeline_end_s / (c.forward.seconds + c.backward.seconds), 1.0, 1e-12)
          << name << (overlap ? " with the shared-expert overlap" : "");
      std::int64_t exchanges = 0;
      for (const auto kind : r.graph.kind)
        exchanges += kind == TransferKind::ExpertAllToAll;
      // 2 layers × (dispatch, combine) × (forward, backward) × (NVLink, NIC), and each
      // layer's token counts before its dispatch (alltoall dispatcher), one flow.
      EXPECT_EQ(exchanges, 2 * 2 * 2 * 2 + 2) << name;
    }
  }
}

TEST(Moe, AllToAllsShareTheNicWithPipelineTraffic) {
  // Two stages a node apart, EP 16 over both nodes: the all-to-alls' NIC flows and the
  // activations and gradients between the stages meet on the same NICs. With the links shared
  // the run is longer than with each transfer alone on them.
  auto s = one_stage("qwen3-30b-a3b", 16);
  ScheduleParams p;
  p.devices = 2;
  p.microbatches = 8;
  const auto table = test::make("1f1b", p);
  const auto shared = simulate_table(table, s, "1f1b");
  s.options.contention = false;
  const auto alone = simulate_table(table, s, "1f1b");
  EXPECT_GT(shared.metrics.runtime_s, alone.metrics.runtime_s);
  // The exchanges that wait in the ops are the breakdown's all-to-all share.
  EXPECT_GT(shared.metrics.breakdown().expert_comm, 0.0);
}

TEST(Moe, DualPipePairsAndTheA2AOverlapShortenAnExpertParallelRun) {
  // Qwen3-30B-A3B cut to 8 layers on 2 pipeline devices × DP 16, EP 16 across two nodes:
  // DualPipeV's F&B pairs hide all-to-alls that 1F1B exposes; --a2a-overlap gives the
  // interleaved schedule's steady-state steps the same pairs.
  auto model = io::load_model("qwen3-30b-a3b");
  std::get<TransformerConfig>(model.spec).layers = 8;
  const auto simulation = [&](const char* schedule, bool a2a) {
    SimulationSetup s = test::setup_of(model, io::load_system("dgx-h100"));
    s.job.a2a_overlap = a2a;
    s.lowering.runtime = Runtime::Async;
    s.layout.dp = 16;
    s.layout.ep = 16;
    require_runnable(s.model, s.job, s.layout);
    ScheduleParams p;
    p.devices = 2;
    p.microbatches = 8;
    if (std::string_view(schedule) == "interleaved") p.chunks = 2;
    return simulate_table(test::make(schedule, p), s, schedule);
  };
  const auto run = [&](const char* schedule, bool a2a) {
    return simulation(schedule, a2a).metrics;
  };
  const auto plain = run("interleaved", false);
  const auto combined = simulation("interleaved", true);
  const auto& overlapped = combined.metrics;
  EXPECT_LT(overlapped.runtime_s, plain.runtime_s);
  EXPECT_LT(overlapped.breakdown().expert_comm, plain.breakdown().expert_comm);
  // Megatron-Core runs every all-to-all on one stream: in each op, an exchange's flows (over
  // NVLink and over the NIC, issued together) end after all of the exchange's before it.
  const auto& g = combined.graph;
  std::int64_t ordered = 0;
  for (std::int64_t n = 0; n + 1 < static_cast<std::int64_t>(g.step_begin.size()); ++n) {
    double before = 0.0, latest = 0.0;
    bool issuing = false;
    for (auto i = g.step_begin[static_cast<std::size_t>(n)];
         i < g.step_begin[static_cast<std::size_t>(n) + 1]; ++i) {
      const auto& step = g.steps[static_cast<std::size_t>(i)];
      if (step.kind != StepKind::Issue) {
        issuing = false;
        continue;
      }
      if (!issuing) before = latest;  // a new exchange
      issuing = true;
      const double end = combined.result.end[static_cast<std::size_t>(step.transfer)];
      EXPECT_GE(end, before) << "op " << n << ", transfer " << step.transfer;
      latest = std::max(latest, end);
      ordered += before > 0.0;
    }
  }
  EXPECT_GT(ordered, 0);
  // 1F1B has no steps to combine: the option is refused with its rule.
  EXPECT_NE(test::param_error([&] { run("1f1b", true); }).find("interleaved schedule"),
            std::string::npos);
  const auto dualpipe = run("dualpipev", false);
  EXPECT_LT(dualpipe.breakdown().expert_comm, run("1f1b", false).breakdown().expert_comm);
}

}  // namespace
}  // namespace pipetab

namespace pipetab {
namespace {

TEST(Moe, TheCombined1F1BRunsEveryInterleavedOrderUnderEveryRuntime) {
  // Megatron-Core's combined 1F1B merges the steady state's forward-backward steps only (a device
  // whose warm-up holds every forward has none): over a grid of S, v and M, from all warm-up
  // (M = S) up, and under each runtime, every run completes (merging a warm-up forward with the
  // first backward deadlocked) and exposes less all-to-all than the same run without it, on the
  // plain interleaved table (a table file) and on the one Megatron-Core runs, with its one more
  // warm-up forward (job_schedule_params). On that one a merged step holds the difference of
  // the forward's activation and the backward's, not both: each device peaks no higher than
  // without the merge, and no lower than the plain table without it, whose first steady
  // backward follows the same forwards.
  for (const auto runtime : {Runtime::Megatron, Runtime::PyTorch, Runtime::Async}) {
    for (const std::int32_t S : {2, 4, 8}) {
      for (const std::int32_t v : {2, 3}) {
        for (const std::int32_t M : {S, 2 * S, 3 * S}) {
          // Qwen3-30B-A3B with one layer per chunk, DP 8 × EP 8 (one node).
          SimulationSetup s = test::preset_setup("qwen3-30b-a3b", "dgx-h100");
          std::get<TransformerConfig>(s.model.spec).layers = S * v;
          s.lowering.runtime = runtime;
          s.layout.dp = 8;
          s.layout.ep = 8;
          require_runnable(s.model, s.job, s.layout);
          ScheduleParams p;
          p.devices = S;
          p.chunks = v;
          p.microbatches = M;
          const auto table = test::make("interleaved", p);
          const std::string where = fmt::format("{} S {} v {} M {}", to_string(runtime), S, v, M);
          const auto without = simulate_table(table, s, "interleaved").metrics;
          s.job.a2a_overlap = true;
          SimulationMetrics with;
          ASSERT_NO_THROW(with = simulate_table(table, s, "interleaved").metrics) << where;
          const auto combined = test::make(
              "interleaved", job_schedule_params(p, find_schedule("interleaved"), s.job));
          EXPECT_FALSE(combined.same_schedule(table)) << where;
          SimulationMetrics merged;
          ASSERT_NO_THROW(merged = simulate_table(combined, s, "interleaved").metrics) << where;
          EXPECT_LE(merged.breakdown().expert_comm * merged.runtime_s,
                    without.breakdown().expert_comm * without.runtime_s * (1 + 1e-12))
              << where;
          s.job.a2a_overlap = false;
          const auto unmerged = simulate_table(combined, s, "interleaved").metrics;
          s.job.a2a_overlap = true;
          for (std::size_t d = 0; d < static_cast<std::size_t>(S); ++d) {
            const double peak = merged.peak_memory_bytes[d];
            // With steady steps (w + 1 < vM forwards lead) strictly lower: the step's forward
            // no longer lands on top of the whole warm-up.
            const auto warmup = 2 * (S - static_cast<std::int32_t>(d) - 1) + (v - 1) * S + 1;
            if (warmup + 1 < v * M) {
              EXPECT_LT(peak, unmerged.peak_memory_bytes[d]) << where << " " << d;
            } else {
              EXPECT_LE(peak, unmerged.peak_memory_bytes[d] * (1 + 1e-12)) << where << " " << d;
            }
            EXPECT_GE(peak, without.peak_memory_bytes[d] * (1 - 1e-12)) << where << " " << d;
          }
          // plan's bounds stay below the run: the compute part's busiest device, and the graph
          // with every exchange folded in at its time alone on its links.
          const auto bounds = test::plan_bounds(table, s);
          EXPECT_LE(bounds.busy, with.runtime_s * (1 + 1e-12)) << where;
          EXPECT_LE(bounds.graph, with.runtime_s * (1 + 1e-12)) << where;
          EXPECT_LE(with.breakdown().expert_comm * with.runtime_s,
                    without.breakdown().expert_comm * without.runtime_s)
              << where;
        }
      }
    }
  }
}

TEST(Moe, DeepEpBesideComputeMovesAtTheOverlappedShare) {
  // DeviceSpec::overlapped_deepep_efficiency: DeepEP's all-to-alls slow to that share of their
  // rate in a step that pairs two passes (here Megatron-Core's combined 1F1B without
  // pipelining), and nowhere else: not without the overlap, not NCCL's all-to-all, not without
  // the overheads. Qwen3-30B-A3B cut to 4 layers, EP 16 over two nodes.
  const auto runtime = [](MoeDispatcher dispatcher, bool a2a, double share, bool overheads) {
    SimulationSetup s = test::preset_setup("qwen3-30b-a3b", "dgx-h100");
    std::get<TransformerConfig>(s.model.spec).layers = 4;
    s.system.device.overlapped_deepep_efficiency = share;
    s.job.moe.dispatcher = dispatcher;
    s.job.a2a_overlap = a2a;
    s.lowering.overheads = overheads;
    s.layout.dp = 16;
    s.layout.ep = 16;
    require_runnable(s.model, s.job, s.layout);
    const auto table =
        test::make("1f1b", job_schedule_params(test::sm(1, 4), find_schedule("1f1b"), s.job));
    const auto sim = simulate_table(table, s, "1f1b");
    // Expert transfers capped below both links' collective rates: those slowed to the share.
    const auto& g = sim.graph;
    const double nic = s.system.inter.bandwidth * s.system.inter.collective_efficiency;
    const double nvlink = s.system.intra.bandwidth * s.system.intra.collective_efficiency;
    std::int64_t shared = 0;
    for (std::size_t t = 0; t < g.rate_cap.size(); ++t)
      shared += g.kind[t] == TransferKind::ExpertAllToAll && g.rate_cap[t] < 0.999 * nic &&
                g.rate_cap[t] < 0.999 * nvlink;
    return std::pair{sim.metrics.runtime_s, shared};
  };
  const auto [paired, paired_caps] = runtime(MoeDispatcher::DeepEp, true, 1.0, true);
  const auto [slowed, slowed_caps] = runtime(MoeDispatcher::DeepEp, true, 0.5, true);
  EXPECT_GT(slowed, paired * 1.001);
  EXPECT_EQ(paired_caps, 0);
  EXPECT_GT(slowed_caps, 0);
  for (const auto& [dispatcher, a2a, overheads] :
       {std::tuple{MoeDispatcher::DeepEp, false, true},
        std::tuple{MoeDispatcher::AllToAll, true, true},
        std::tuple{MoeDispatcher::DeepEp, true, false}}) {
    const auto [full, full_caps] = runtime(dispatcher, a2a, 1.0, overheads);
    const auto [half, half_caps] = runtime(dispatcher, a2a, 0.5, overheads);
    EXPECT_DOUBLE_EQ(half, full) << to_string(dispatcher) << " a2a " << a2a << " overheads "
                                 << overheads;
    EXPECT_EQ(half_caps, 0) << to_string(dispatcher);
  }
}

TEST(Moe, TheCombined1F1BWithoutPipeliningPairsEachForwardWithTheBackwardBefore) {
  // Megatron-Core's combined_1f1b_schedule_for_no_pipelining: the first forward alone, then each
  // forward with the previous microbatch's backward, then the last backward. Over M 1-6 and each
  // runtime: the run completes, the all-to-alls it exposes are fewer wherever a step pairs two
  // passes (from M = 2: Megatron-Core has no all-warm-up rule here), and its peak lies between
  // the plain order's and the combined order's without the merge. A one-device table in another
  // order is refused, not run as if overlapped.
  for (const auto runtime : {Runtime::Megatron, Runtime::PyTorch, Runtime::Async}) {
    for (const std::int32_t M : {1, 2, 3, 6}) {
      SimulationSetup s = test::preset_setup("qwen3-30b-a3b", "dgx-h100");
      std::get<TransformerConfig>(s.model.spec).layers = 4;
      s.lowering.runtime = runtime;
      s.layout.dp = 8;
      s.layout.ep = 8;
      const std::string where = fmt::format("{} M {}", to_string(runtime), M);
      const auto plain = test::make("1f1b", test::sm(1, M));
      const auto without = simulate_table(plain, s, "1f1b").metrics;
      s.job.a2a_overlap = true;
      require_runnable(s.model, s.job, s.layout);
      const auto combined =
          test::make("1f1b", job_schedule_params(test::sm(1, M), find_schedule("1f1b"), s.job));
      EXPECT_EQ(combined.same_schedule(plain), M == 1) << where;
      SimulationMetrics with;
      ASSERT_NO_THROW(with = simulate_table(combined, s, "1f1b").metrics) << where;
      const double exposed = with.breakdown().expert_comm * with.runtime_s;
      const double alone = without.breakdown().expert_comm * without.runtime_s;
      if (M > 1) {
        EXPECT_LT(exposed, alone) << where;
        EXPECT_LT(with.runtime_s, without.runtime_s) << where;
      } else {
        EXPECT_NEAR(exposed, alone, alone * 1e-9) << where;
      }
      // Memory: the combined order run without the overlap holds two microbatches' activations
      // from the second forward on; run as combined steps each step holds the forward's net of
      // the backward's frees, no less than the plain order's peak.
      s.job.a2a_overlap = false;
      const auto unmerged = simulate_table(combined, s, "1f1b").metrics;
      const double peak = with.peak_memory_bytes[0];
      EXPECT_GE(peak, without.peak_memory_bytes[0] * (1 - 1e-12)) << where;
      if (M > 1) {
        EXPECT_GT(unmerged.peak_memory_bytes[0], without.peak_memory_bytes[0]) << where;
        EXPECT_LT(peak, unmerged.peak_memory_bytes[0]) << where;
      }
      // The plain order under the overlap, and GPipe's, are refused.
      s.job.a2a_overlap = true;
      if (M > 1) {
        EXPECT_THROW((void)simulate_table(plain, s, "1f1b"), ParamError) << where;
        EXPECT_THROW((void)simulate_table(test::make("gpipe", test::sm(1, M)), s, "gpipe"),
                     ParamError)
            << where;
      }
    }
  }
}

// Qwen3-30B-A3B on DGX H100s with EP = DP = `ep` and the given dispatcher.
SimulationSetup qwen3_30b(MoeDispatcher dispatcher, std::int64_t ep) {
  SimulationSetup s = test::preset_setup("qwen3-30b-a3b", "dgx-h100");
  s.layout.dp = ep;
  s.layout.ep = ep;
  s.job.moe.dispatcher = dispatcher;
  return s;
}

// One MoE layer of `s` as the simulation runs it: its passes' programs, exchanges as flows.
cost::LayerPasses one_moe_layer(const SimulationSetup& s) {
  StageWork w;
  w.layers = 1;
  w.moe_layers = 1;
  cost::CostOptions options;
  options.exchanges_as_flows = true;
  const auto c =
      cost::stage_costs(s.model, s.job, s.layout, std::span(&w, 1), s.system, options).front();
  if (!c.layers[1].passes) {
    ADD_FAILURE() << "the MoE layer has no program";
    return {};
  }
  return *c.layers[1].passes;
}

// HybridEP's routing-map all-gather runs inside its dispatch call on the dispatch's stream
// (fused_a2a.py HybridEPDispatch → dispatch_with_permute): the forward's program has DeepEP's
// exchanges, its dispatch carrying the all-gather's bytes too, with the same compute before it.
TEST(Moe, HybridEpsRoutingMapGatherIsItsDispatchsFirstPart) {
  const auto forward = [](MoeDispatcher dispatcher) {
    return one_moe_layer(qwen3_30b(dispatcher, 16))
        .forward;  // two nodes: the gather crosses the NICs
  };
  const auto deepep = forward(MoeDispatcher::DeepEp);
  const auto hybrid = forward(MoeDispatcher::HybridEp);
  ASSERT_EQ(hybrid.exchanges.size(), deepep.exchanges.size());
  ASSERT_EQ(deepep.exchanges.size(), 2U);  // dispatch, combine
  // A ring over two nodes: its bytes cross the NICs (flow 1); NVLink's flow keeps DeepEP's.
  EXPECT_GT(hybrid.exchanges[0].flows[1].bytes, deepep.exchanges[0].flows[1].bytes);
  EXPECT_GT(hybrid.exchanges[0].flows[1].latency_s, deepep.exchanges[0].flows[1].latency_s);
  for (std::size_t f = 0; f < 2; ++f) {
    EXPECT_GE(hybrid.exchanges[0].flows[f].bytes, deepep.exchanges[0].flows[f].bytes) << f;
    EXPECT_DOUBLE_EQ(hybrid.exchanges[1].flows[f].bytes, deepep.exchanges[1].flows[f].bytes) << f;
  }
  EXPECT_TRUE(hybrid.exchanges[0].deepep);
  // Fewer kernels before the dispatch (no multi-hot conversion), nothing more.
  EXPECT_LE(hybrid.exchanges[0].before_s, deepep.exchanges[0].before_s);
}

TEST(Moe, AFullBackwardRunsTheExpertsWeightGradientsBeforeTheDispatchsBackward) {
  // In B (input and weight gradients in one op) the routed experts' weight gradients come right
  // after their input gradients, before the dispatch's backward all-to-all (autograd's order;
  // Megatron-Core's mlp.backward_dw in the combined 1F1B), and every other weight gradient ends
  // the layer. B's program is I's with the experts' W added before that exchange and the rest of
  // W after the layer, each weight gradient priced alone (no TP here).
  for (const auto dispatcher : {MoeDispatcher::AllToAll, MoeDispatcher::DeepEp}) {
    const SimulationSetup s = qwen3_30b(dispatcher, 8);
    const auto passes = one_moe_layer(s);
    const auto& in = passes.input_grad;
    const auto& b = passes.backward;
    ASSERT_EQ(in.exchanges.size(), b.exchanges.size());
    ASSERT_GE(in.exchanges.size(), 2U);
    const auto& t = *s.model.transformer();
    const Workload run{t, s.job, s.layout};
    double experts = 0.0, rest = 0.0;
    for (const auto& op : model_operators(run).moe_layer.weight_grad) {
      const double seconds = cost::operator_cost(op, run, s.system).seconds;
      (op.name.starts_with("experts.") ? experts : rest) += seconds;
    }
    EXPECT_GT(experts, 0.0);
    EXPECT_GT(rest, 0.0);
    const std::size_t dispatch = in.exchanges.size() - 1;
    for (std::size_t k = 0; k < dispatch; ++k)
      EXPECT_DOUBLE_EQ(b.exchanges[k].before_s, in.exchanges[k].before_s) << k;
    EXPECT_NEAR(b.exchanges[dispatch].before_s, in.exchanges[dispatch].before_s + experts,
                1e-12 + 1e-9 * experts);
    EXPECT_NEAR(b.after_s, in.after_s + rest, 1e-12 + 1e-9 * rest);
  }
}

TEST(Moe, TheCombined1F1BTakesWhatMegatronCoreTakes) {
  // TransformerConfig's rules for --overlap-moe-expert-parallel-comm, each refused with its own.
  const auto refusal = [](SimulationSetup s) {
    s.job.a2a_overlap = true;
    try {
      require_runnable(s.model, s.job, s.layout);
    } catch (const OptionError& e) {
      EXPECT_EQ(e.key(), "a2a_overlap");
      return std::string(e.what());
    }
    return std::string();
  };
  SimulationSetup moe = test::preset_setup("qwen3-30b-a3b", "dgx-h100");
  moe.layout.dp = 8;
  moe.layout.ep = 8;
  EXPECT_EQ(refusal(moe), "");
  auto s = moe;
  s.job.recompute = Recompute::Selective;
  s.job.moe.recompute = MoeRecompute::MoeAct;
  s.job.moe.recompute_norm = true;
  EXPECT_EQ(refusal(s), "");  // the ModelZoo's Qwen3-235B run's
  const auto expect_refused = [&](const SimulationSetup& setup, std::string_view why) {
    const auto message = refusal(setup);
    EXPECT_NE(message.find("Megatron-Core's combined 1F1B refuses the run"), std::string::npos)
        << message;
    EXPECT_NE(message.find(why), std::string::npos) << message;
  };
  expect_refused(test::preset_setup("llama3.1-8b", "dgx-h100"), "a mixture of experts");
  s = moe;
  s.layout.ep = 1;
  expect_refused(s, "expert parallelism (--ep above 1)");
  s = moe;
  s.job.recompute = Recompute::Full;
  expect_refused(s, "recompute full");
  s = moe;
  s.job.moe.recompute = MoeRecompute::Mlp;
  expect_refused(s, "moe_recompute mlp");
  s = moe;
  s.job.moe.shared_expert_overlap = true;
  expect_refused(s, "moe_shared_expert_overlap");
  s = moe;
  s.job.precision = Precision::FP32;
  expect_refused(s, "precision fp32");
  s = test::preset_setup("deepseek-v3", "dgx-h100");
  s.layout.dp = 8;
  s.layout.ep = 8;
  std::get<TransformerConfig>(s.model.spec).mtp_layers = 2;
  expect_refused(s, "2 MTP layers");
}

TEST(Moe, PresetsHaveTheirPublishedParameterCounts) {
  // Total parameters as the model cards and reports state them: DeepSeek-V3 671 B without its
  // MTP module (report §1, its latent attention included), Qwen3-235B-A22B 235 B and
  // Qwen3-30B-A3B 30.5 B (Qwen3 Technical Report, Table 2), Mixtral 8×7B 46.7 B (Jiang et al.
  // 2024, §2.1), gpt-oss-120b 116.8 B (model card, Table 1).
  const std::pair<const char*, double> published[] = {{"deepseek-v3", 671e9},
                                                      {"qwen3-235b-a22b", 235e9},
                                                      {"qwen3-30b-a3b", 30.5e9},
                                                      {"mixtral-8x7b", 46.7e9},
                                                      {"gpt-oss-120b", 116.8e9}};
  for (const auto& [name, count] : published) {
    const test::ModelRun run = io::load_model(name);
    const double total = total_params(workload(run));
    EXPECT_NEAR(total / count, 1.0, 0.01) << name << ": " << total / 1e9 << " B";
  }
}

}  // namespace
}  // namespace pipetab
