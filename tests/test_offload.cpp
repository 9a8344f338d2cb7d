// Activation offload (PipeOffload, arXiv 2503.01328): the table's plan and peaks, the copies in
// the simulation, the host section of system files, and LGD recomputation's bytes.
#include <algorithm>
#include <cmath>
#include <set>
#include <string>
#include <vector>

#include "helpers.hpp"
#include <gtest/gtest.h>

#include "pipetab/cost/layer_offload.hpp"
#include "pipetab/error.hpp"
#include "pipetab/io/config.hpp"
#include "pipetab/sim/simulation.hpp"
#include "pipetab/table/memory.hpp"
#include "pipetab/table/offload.hpp"

namespace pipetab {
namespace {

// Tables of one and of several stages per device, split backward or not.
std::vector<std::pair<std::string, ScheduleParams>> offload_tables() {
  std::vector<std::pair<std::string, ScheduleParams>> out;
  for (const int S : {2, 4, 8}) {
    for (const int M : {S, 2 * S, 3 * S}) {
      for (const std::string name : {"gpipe", "1f1b", "zb-h1", "interleaved"}) {
        auto p = test::sm(S, M);
        if (name == "interleaved") p.chunks = 2;
        out.emplace_back(name, p);
      }
    }
  }
  return out;
}

// A fast or a slow host (bytes per second each way), one GPU per link.
SimulationSetup offload_setup(double host_bandwidth, double ratio) {
  SimulationSetup setup;
  setup.model = test::explicit_model(1.0, 1.0, 1.0, 1e6);
  setup.system = test::system_with(Topology::Switched, {1e-6, 1e10}, {1e-6, 1e10});
  setup.system.host = {1e12, host_bandwidth, 1, 0.0};
  setup.lowering.runtime = Runtime::Async;
  setup.job.offload_activations = ratio;
  return setup;
}

TEST(Offload, PlanTakesTheLongestLivedStagesFirst) {
  for (const auto& [name, p] : offload_tables()) {
    const auto t = test::make(name, p);
    EXPECT_TRUE(offload_plan(t, 0.0).empty());
    const auto full = offload_plan(t, 1.0);
    ASSERT_EQ(full.out.size(), t.ops.size());
    for (std::size_t i = 0; i < t.ops.size(); ++i) {
      const bool forward = t.ops[i].first().kind == PassKind::F && !t.ops[i].is_pair();
      if (!forward) {
        EXPECT_EQ(full.out[i], 0.0);
        continue;
      }
      // Offloaded whole unless its backward is the device's next op; back one op ahead.
      const Pass f = t.ops[i].first();
      std::int64_t b = -1;
      for (auto j = static_cast<std::int64_t>(i) + 1;
           b < 0 && j < t.row_begin[static_cast<std::size_t>(t.device_of(f)) + 1]; ++j)
        for (const Pass& q : t.ops[static_cast<std::size_t>(j)].passes())
          if ((q.kind == PassKind::B || q.kind == PassKind::I) && q.microbatch == f.microbatch &&
              q.stage == f.stage)
            b = j;
      ASSERT_GE(b, 0) << name;
      const bool away = b - static_cast<std::int64_t>(i) >= 2;
      EXPECT_EQ(full.out[i], away ? 1.0 : 0.0) << name << " op " << i;
      EXPECT_EQ(full.back_at[i], away ? b - 1 : -1) << name << " op " << i;
    }
  }
  // Interleaved, half: each device offloads its first chunk (the longer-lived) whole and keeps
  // its second (PipeOffload's PO-H offloads ⌈v/2⌉ stages).
  const auto t = test::make("interleaved", [] {
    auto p = test::sm(4, 8);
    p.chunks = 2;
    return p;
  }());
  const auto half = offload_plan(t, 0.5);
  for (std::size_t i = 0; i < t.ops.size(); ++i) {
    const Pass f = t.ops[i].first();
    if (f.kind != PassKind::F || half.back_at[i] < 0) continue;
    EXPECT_EQ(half.out[i], f.stage < 4 ? 1.0 : 0.0) << "stage " << f.stage;
  }
  EXPECT_NE(test::param_error([&] { offload_plan(t, 1.5); }).find("0 to 1"), std::string::npos);
}

// A ratio meant as whole stages covers exactly those: 7 of 25 (7/25 · 25 is 7.000000000000001 in
// binary, which left a rounding error's share of an eighth stage offloaded).
TEST(Offload, AWholeStageRatioCoversItsStagesExactly) {
  auto p = test::sm(2, 4);
  p.chunks = 25;
  const auto t = test::make("po", p);
  const auto plan = offload_plan(t, 7.0 / 25.0);
  std::vector<std::set<std::int32_t>> stages(2);
  for (std::size_t i = 0; i < t.ops.size(); ++i) {
    if (plan.out[i] == 0.0) continue;
    EXPECT_EQ(plan.out[i], 1.0) << "op " << i;
    const Pass f = t.ops[i].first();
    stages[static_cast<std::size_t>(t.device_of(f))].insert(f.stage);
  }
  for (const auto& own : stages)
    EXPECT_EQ(own.size(), 7u);
}

TEST(Offload, TablePeaksFallWithTheRatioAndOneF1BHoldsTwo) {
  for (const auto& [name, p] : offload_tables()) {
    const auto t = test::make(name, p);
    std::vector<double> before = activation_peaks(t);
    for (const double r : {0.25, 0.5, 0.75, 1.0}) {
      MemoryOptions options;
      options.offload = r;
      const auto peaks = activation_peaks(t, options);
      for (std::size_t d = 0; d < peaks.size(); ++d) {
        EXPECT_LE(peaks[d], before[d] + 1e-12) << name << " r " << r << " device " << d;
        EXPECT_GE(peaks[d], 0.0);
      }
      before = peaks;
    }
  }
  // 1F1B fully offloaded: the forward running and the microbatch reloaded for the next
  // backward (PipeOffload Table 1: PO-F holds O(M/(vd)), constant in the depth); the last
  // device runs each backward right after its forward and offloads nothing.
  for (const int S : {2, 4, 8, 16}) {
    const auto t = test::make("1f1b", test::sm(S, 4 * S));
    MemoryOptions options;
    options.offload = 1.0;
    const auto peaks = activation_peaks(t, options);
    for (int d = 0; d < S; ++d)
      EXPECT_DOUBLE_EQ(peaks[static_cast<std::size_t>(d)], d + 1 < S ? 2.0 : 1.0) << S << " " << d;
  }
}

// Under every runtime that runs the table (the engine's, and the table's own: Megatron-LM's
// or PyTorch's).
TEST(Offload, FastCopiesGiveTheTablesPeaksAndCostNothing) {
  for (const auto& [name, p] : offload_tables())
    for (const Runtime runtime : {Runtime::Async, Runtime::Auto}) {
      const auto t = test::make(name, p);
      auto setup = offload_setup(1e18, 0.0);
      setup.lowering.runtime = runtime;
      const auto base = simulate_table(t, setup, name).metrics;
      for (const double r : {0.5, 1.0}) {
        setup.job.offload_activations = r;
        const auto m = simulate_table(t, setup, name).metrics;
        MemoryOptions options;
        options.offload = r;
        options.input_grad_frees = 0.2;  // I frees the 20 of 100 bytes W does not keep
        const auto peaks = activation_peaks(t, options);
        EXPECT_NEAR(m.runtime_s, base.runtime_s, 1e-9 * base.runtime_s) << name;
        // 100 bytes of activations per device share and microbatch (test::explicit_model): the
        // table's unit, M_a.
        for (std::size_t d = 0; d < peaks.size(); ++d) {
          EXPECT_NEAR(m.peak_activation_bytes()[d], 100.0 * peaks[d], 1e-6)
              << name << " S " << p.devices << " M " << p.microbatches << " r " << r << " dev "
              << d;
        }
        EXPECT_FALSE(m.host_over_capacity);
      }
    }
}

TEST(Offload, SlowCopiesMakeBackwardsWaitAndFillTheHost) {
  const auto t = test::make("1f1b", test::sm(4, 8));
  const auto base = simulate_table(t, offload_setup(1e18, 0.0), "1f1b");
  // 100 bytes at 50 B/s: two seconds each way against a one-second forward.
  const auto slow = simulate_table(t, offload_setup(50.0, 1.0), "1f1b");
  EXPECT_GT(slow.metrics.runtime_s, base.metrics.runtime_s + 1.0);
  // Every offloaded forward's bytes go out and come back over the device's host links.
  const auto plan = offload_plan(t, 1.0);
  double offloaded = 0.0;
  for (const double share : plan.out)
    offloaded += 100.0 * share;
  double moved = 0.0;
  for (std::size_t l = 0; l < slow.result.links.size(); ++l)
    if (slow.network.link_name(l).find("host") != std::string::npos)
      moved += slow.result.links[l].bytes;
  EXPECT_DOUBLE_EQ(moved, 2 * offloaded);
  // Copies run one at a time per stream: device 0 holds its warm-up's forwards.
  EXPECT_GT(slow.metrics.peak_host_bytes[0], 100.0);
  EXPECT_LE(slow.metrics.peak_host_bytes[0], 400.0);
  EXPECT_GT(slow.metrics.host_peak_bytes, 0.0);
  // A host too small for them: the run does not fit.
  auto small = offload_setup(50.0, 1.0);
  small.system.host.memory_bytes = 150.0;
  const auto over = simulate_table(t, small, "1f1b").metrics;
  EXPECT_TRUE(over.host_over_capacity);
  EXPECT_TRUE(over.any_over_capacity());
  // One copy stream for both ways (PipeOffload's runtime) is no faster than two.
  auto one = offload_setup(50.0, 1.0);
  one.job.offload_streams = 1;
  EXPECT_GE(simulate_table(t, one, "1f1b").metrics.runtime_s, slow.metrics.runtime_s);
}

TEST(Offload, HostLinksAreSharedByTheGpusBehindThem) {
  SystemConfig s = test::system_with(Topology::Switched, {1e-6, 1e10}, {1e-6, 1e10});
  s.host = {1e12, 64e9, 2, 0.0};
  // Pure pipeline parallelism: devices 0-1, 2-3 share a link at its full bandwidth.
  const Network one(s, 4, 1);
  EXPECT_EQ(one.host_out(0), one.host_out(1));
  EXPECT_NE(one.host_out(1), one.host_out(2));
  EXPECT_EQ(one.links()[static_cast<std::size_t>(one.host_out(0))].bandwidth, 64e9);
  EXPECT_EQ(one.link_name(static_cast<std::size_t>(one.host_in(2))), "dev2-3 host in");
  // Each device stands for 4 GPUs (TP 4): its own link, half the bandwidth (two of its GPUs
  // share each of their links).
  const Network four(s, 4, 4);
  EXPECT_NE(four.host_out(0), four.host_out(1));
  EXPECT_EQ(four.links()[static_cast<std::size_t>(four.host_in(3))].bandwidth, 32e9);
  // No host: no links, and offloading is refused with the rule.
  SystemConfig none = s;
  none.host = {};
  EXPECT_EQ(Network(none, 4, 1).host_out(0), -1);
  auto setup = offload_setup(1e9, 0.5);
  setup.system.host = {};
  const auto t = test::make("1f1b", test::sm(4, 8));
  EXPECT_NE(test::param_error([&] { simulate_table(t, setup, "1f1b"); }).find("[host]"),
            std::string::npos);
}

// Where the host link is the GPU's own PCIe port (x86 DGX nodes), the GPU's traffic to other
// nodes crosses it too (HostSpec::carries_nic): a send between nodes takes the sender's host
// link out and the receiver's in, beside its NICs, and shares them with the offload copies.
TEST(Offload, NicTrafficCrossesTheHostLinkThatCarriesIt) {
  SystemConfig s = test::system_with(Topology::Switched, {1e-6, 1e10}, {1e-6, 100.0});
  s.devices_per_node = 1;  // every pipeline device on its own node
  s.host = {1e12, 100.0, 1, 0.0};
  const Network plain(s, 2, 1);
  std::vector<std::int32_t> route;
  plain.append_route(0, 1, route);
  EXPECT_EQ(route, (std::vector<std::int32_t>{plain.nic_out(0), plain.nic_in(1)}));
  s.host.carries_nic = true;
  const Network shared(s, 2, 1);
  route.clear();
  shared.append_route(0, 1, route);
  EXPECT_EQ(route, (std::vector<std::int32_t>{shared.nic_out(0), shared.nic_in(1),
                                              shared.host_out(0), shared.host_in(1)}));
  // 1F1B over two nodes, fully offloaded: 100-byte activations and 100-byte messages at
  // 100 B/s, a second each, against one-second passes. Sharing the host link slows the run, and
  // the host links carry every byte the NICs do beside the copies.
  const auto t = test::make("1f1b", test::sm(2, 8));
  auto setup = offload_setup(100.0, 1.0);
  setup.model = test::explicit_model(1.0, 1.0, 1.0, 100.0);
  setup.system = s;
  setup.system.host.carries_nic = false;
  const auto apart = simulate_table(t, setup, "1f1b");
  setup.system.host.carries_nic = true;
  const auto together = simulate_table(t, setup, "1f1b");
  EXPECT_GT(together.metrics.runtime_s, apart.metrics.runtime_s + 0.1);
  const auto bytes_on = [](const auto& run, const char* what) {
    double sum = 0.0;
    for (std::size_t l = 0; l < run.result.links.size(); ++l)
      if (run.network.link_name(l).find(what) != std::string::npos)
        sum += run.result.links[l].bytes;
    return sum;
  };
  EXPECT_GT(bytes_on(apart, "nic"), 0.0);
  EXPECT_DOUBLE_EQ(bytes_on(together, "host") - bytes_on(apart, "host"), bytes_on(apart, "nic"));
}

// A reload from host memory slows the compute beside it (HostSpec::h2d_slowdown, measured 8.79%
// on an H200): a run whose reloads overlap its passes takes longer by at most that share of its
// compute; without offload nothing changes.
TEST(Offload, ReloadsSlowTheComputeBesideThem) {
  const auto t = test::make("1f1b", test::sm(4, 8));
  auto setup = offload_setup(200.0, 1.0);  // 100 bytes at 200 B/s: half a pass each way
  const auto base = simulate_table(t, setup, "1f1b").metrics;
  setup.system.host.h2d_slowdown = 0.5;
  const auto slowed = simulate_table(t, setup, "1f1b").metrics;
  EXPECT_GT(slowed.runtime_s, base.runtime_s + 0.1);
  // Never more than every pass of a device slowed throughout: 3 passes of 1 s per microbatch.
  EXPECT_LE(slowed.runtime_s, base.runtime_s + 0.5 * 3 * 8);
  setup.job.offload_activations = 0.0;
  auto none = setup;
  none.system.host.h2d_slowdown = 0.0;
  EXPECT_DOUBLE_EQ(simulate_table(t, setup, "1f1b").metrics.runtime_s,
                   simulate_table(t, none, "1f1b").metrics.runtime_s);
}

TEST(Offload, SystemFilesTakeAHostSection) {
  const std::string base =
      "name = \"h\"\n[device]\npeak_flops = 1e15\nefficiency = 0.5\nmemory_bytes = 8e10\n"
      "[network]\ndevices_per_node = 8\n[network.intra]\nlatency_s = 1e-6\nbandwidth = 4e11\n"
      "[network.inter]\nlatency_s = 5e-6\nbandwidth = 5e10\n";
  const auto s = io::parse_system(
      base + "[host]\nmemory_bytes = 2e12\nbandwidth = 5.5e10\ngpus_per_link = 2\n", "h.toml");
  EXPECT_EQ(s.host, (HostSpec{2e12, 5.5e10, 2, 0.0}));
  EXPECT_EQ(io::parse_system(io::system_toml(s, "again"), "again.toml").host, s.host);
  const auto error = [&](const std::string& host) {
    try {
      io::parse_system(base + host, "h.toml");
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("(no error)");
  };
  EXPECT_NE(error("[host]\nbandwidth = 5e10\n").find("memory_bytes"), std::string::npos);
  EXPECT_NE(error("[host]\nmemory_bytes = 1e12\nbandwidth = 5e10\ngpus_per_link = 3\n")
                .find("must divide"),
            std::string::npos);
  EXPECT_NE(error("[host]\nmemory_bytes = 1e12\nbandwidth = 5e10\nlanes = 16\n").find("lanes"),
            std::string::npos);
  EXPECT_NE(error("[host]\nmemory_bytes = 1e12\nbandwidth = -1\n").find("out of range"),
            std::string::npos);
  // NIC traffic crosses a GPU's own port: a link shared by two GPUs is refused with the rule.
  const auto nic = io::parse_system(
      base + "[host]\nmemory_bytes = 2e12\nbandwidth = 5.5e10\ncarries_nic = true\n", "h.toml");
  EXPECT_TRUE(nic.host.carries_nic);
  const auto slow = io::parse_system(
      base + "[host]\nmemory_bytes = 2e12\nbandwidth = 5.5e10\nh2d_slowdown = 0.0879\n", "h.toml");
  EXPECT_DOUBLE_EQ(slow.host.h2d_slowdown, 0.0879);
  EXPECT_EQ(io::parse_system(io::system_toml(slow, "again"), "again.toml").host, slow.host);
  EXPECT_NE(error("[host]\nmemory_bytes = 1e12\nbandwidth = 5e10\nh2d_slowdown = -1\n")
                .find("out of range"),
            std::string::npos);
  EXPECT_EQ(io::parse_system(io::system_toml(nic, "again"), "again.toml").host, nic.host);
  EXPECT_NE(error("[host]\nmemory_bytes = 1e12\nbandwidth = 5e10\ngpus_per_link = 2\n"
                  "carries_nic = true\n")
                .find("set gpus_per_link = 1 or carries_nic = false"),
            std::string::npos);
  EXPECT_NE(error("[host]\nmemory_bytes = 1e12\nbandwidth = 5e10\ncarries_nic = 1\n")
                .find("expected true or false"),
            std::string::npos);
}

TEST(Recompute, LgdKeepsTwentyOfThirtyFour) {
  // PipeOffload §4: recomputing LayerNorm, GeLU and dropout cuts a GPT layer's 34·sbh to 20·sbh
  // (with FlashAttention's log-sum-exp beside it either way).
  test::ModelRun model = io::load_model("gpt3-13b");
  model.job.stack.flash_attention = true;
  const double s = 2048, b = 1, h = 5120, a = 40;
  const std::vector<std::int32_t> units(40, 1);
  model.job.recompute = Recompute::Lgd;
  auto work = test::stage_work(model, units, 40);
  EXPECT_DOUBLE_EQ(work[5].activation_bytes, 20 * s * b * h + 4 * a * s * b);
  // Its recomputed kernels are element-wise: more time in the backward, no more FLOPs of note.
  const auto none = [&] {
    auto m = model;
    m.job.recompute = Recompute::None;
    return test::stage_work(m, units, 40);
  }();
  EXPECT_DOUBLE_EQ(work[5].input_grad_flops, none[5].input_grad_flops);
}

}  // namespace
}  // namespace pipetab

namespace pipetab {
namespace {

// Transformer Engine's layer offload, layer by layer by hand: 10 layers of 1 s forward and 1 s
// backward each, 4 offloaded, each copy 5 s. Forward: copy j leaves as layer j ends, one at a
// time; layer j + 2 waits for copy j (two buffers): layers 3-6 start at 6, 11, 16, 21, so the
// forward ends at 26, 16 s late (N (c − t) as long as N + 2 ≤ L). Backward from the forward's
// end: layers 10-5 run from 0 to 6; reload 4 is issued as layer 5 starts (5) and lands at 10,
// reloads 3, 2, 1 follow at 15, 20, 25, and layer 1 ends at 26: 16 s late too.
TEST(LayerOffload, SlowCopiesStallEachPassByHand) {
  const auto c = cost::layer_offload(10, 4, 5.0, 10.0, 10.0, 1.0, 0.0);
  EXPECT_EQ(c.layers, 4);
  EXPECT_DOUBLE_EQ(c.bytes, 20.0);
  EXPECT_DOUBLE_EQ(c.forward_window_bytes, 10.0);
  EXPECT_DOUBLE_EQ(c.backward_window_bytes, 10.0);
  EXPECT_DOUBLE_EQ(c.forward_stall_s, 16.0);
  EXPECT_DOUBLE_EQ(c.backward_stall_s, 16.0);
}

TEST(LayerOffload, FastCopiesCostNothingAndTheLastLayerStays) {
  for (const std::int64_t layers : {2, 8, 80})
    for (const std::int64_t n : {1, 4, 40, 200}) {
      // A copy takes half a layer's time: never waited for.
      const auto l = static_cast<double>(layers);
      const auto c = cost::layer_offload(layers, n, 1.0, l, 2.0 * l, 2.0, 0.0);
      EXPECT_EQ(c.layers, std::min(n, layers - 1)) << layers << " " << n;
      EXPECT_DOUBLE_EQ(c.forward_stall_s, 0.0);
      EXPECT_DOUBLE_EQ(c.backward_stall_s, 0.0);
    }
  EXPECT_EQ(cost::layer_offload(1, 5, 1.0, 1.0, 2.0, 1.0, 0.0).layers, 0);
  EXPECT_EQ(cost::layer_offload(8, 0, 1.0, 1.0, 2.0, 1.0, 0.0).bytes, 0.0);
  // Slower copies never make a pass faster.
  double last = 0.0;
  for (const double bandwidth : {100.0, 10.0, 1.0, 0.5, 0.1}) {
    const auto c = cost::layer_offload(16, 8, 1.0, 16.0, 32.0, bandwidth, 1e-3);
    EXPECT_GE(c.forward_stall_s + c.backward_stall_s, last);
    last = c.forward_stall_s + c.backward_stall_s;
  }
}

// On one device (FSDP without pipelining, as Megatron-Bridge's GB200 Llama 3 70B recipe runs
// it): the peak keeps the layers not offloaded and a two-layer window; the host holds the rest.
TEST(LayerOffload, OneDeviceKeepsTheLayersNotOffloaded) {
  auto setup = test::preset_setup("llama3.1-8b", "gb200-nvl72");
  setup.job.seq_len = 8192;
  const auto t = test::make("1f1b", test::sm(1, 2));
  const auto base = simulate_table(t, setup, "1f1b").metrics;
  setup.job.offload_layers = 8;
  const auto m = simulate_table(t, setup, "1f1b").metrics;
  const auto work = table_work(t, setup.model, setup.job, setup.layout);
  const double layer = work[0].layer_activation_bytes / static_cast<double>(work[0].layers);
  EXPECT_NEAR(m.peak_activation_bytes()[0], base.peak_activation_bytes()[0] - 6 * layer,
              1e-6 * layer);
  EXPECT_NEAR(m.peak_host_bytes[0], 8 * layer, 1e-6 * layer);
  // Never faster (the copies hide or stall; the pass's time is summed in another order, so
  // equal up to rounding).
  EXPECT_GE(m.runtime_s, base.runtime_s * (1 - 1e-12));
  EXPECT_EQ(m.offload_layers, 8);
  // One offload at a time; a split backward is refused with its reason.
  setup.job.offload_activations = 0.5;
  EXPECT_NE(test::param_error([&] { simulate_table(t, setup, "1f1b"); }).find("one offload"),
            std::string::npos);
  setup.job.offload_activations = 0.0;
  const auto zb = test::make("zb-h1", test::sm(2, 4));
  EXPECT_NE(test::param_error([&] { simulate_table(zb, setup, "zb-h1"); }).find("split backward"),
            std::string::npos);
}

// The simulation moves whole-layer offload's copies as flows its passes issue and wait for
// (layer_copies). On one stage with one microbatch, the backward starting as the forward ends,
// and a host link of its own, it waits exactly what the closed form says (layer_offload): two
// computations of the same waits. Megatron-Core's modules wait at most the closed form's, which
// takes the backward's layers to start with it (the output layer and the loss run first).
TEST(LayerOffload, TheFlowsWaitWhatTheClosedFormSaysAlone) {
  auto setup = test::preset_setup("llama3.1-8b", "gb200-nvl72");
  setup.job.seq_len = 8192;
  setup.lowering.overheads = false;
  setup.system.host.gpus_per_link = 1;  // the device's link its own
  const auto t = test::make("1f1b", test::sm(1, 1));
  for (const double bandwidth : {2e9, 2e10, 4e11}) {
    setup.system.host.bandwidth = bandwidth;
    setup.job.offload_layers = 0;
    const auto base = simulate_table(t, setup, "1f1b");
    const double forward = base.graph.duration[0], backward = base.graph.duration[1];
    setup.job.offload_layers = 20;
    const auto run = simulate_table(t, setup, "1f1b");
    const auto work = table_work(t, setup.model, setup.job, setup.layout);
    const auto& link = run.network.links()[static_cast<std::size_t>(run.network.host_out(0))];
    const auto c = cost::layer_offload(
        work[0].layers, 20, work[0].layer_activation_bytes / static_cast<double>(work[0].layers),
        forward, backward, link.bandwidth / run.network.devices_per_host_link(),
        setup.system.host.latency_s);
    const double stall = run.metrics.runtime_s - base.metrics.runtime_s;
    EXPECT_NEAR(stall, c.forward_stall_s + c.backward_stall_s, 1e-9 * base.metrics.runtime_s)
        << bandwidth;
    if (bandwidth == 2e9) {
      EXPECT_GT(stall, 0.1 * base.metrics.runtime_s);
    }
    // The copies are the graph's: 20 out, 20 back, each a flow on the host link.
    std::int64_t out = 0, back = 0;
    for (std::int64_t i = 0; i < run.graph.transfers(); ++i) {
      out += run.graph.kind[static_cast<std::size_t>(i)] == TransferKind::HostOffload;
      back += run.graph.kind[static_cast<std::size_t>(i)] == TransferKind::HostReload;
    }
    EXPECT_EQ(out, 20);
    EXPECT_EQ(back, 20);
    // Their waits are the ops' own time, not communication.
    EXPECT_DOUBLE_EQ(run.metrics.tp_comm_s[0], base.metrics.tp_comm_s[0]);
  }
  auto moe = test::preset_setup("qwen3-30b-a3b", "gb200-nvl72");
  moe.job.seq_len = 4096;
  moe.lowering.overheads = false;
  moe.job.precision = Precision::FP8;
  moe.job.fp8_recipe = Fp8Recipe::Mxfp8;
  moe.layout.ep = 4;
  moe.layout.dp = 4;
  moe.job.offload_modules = offload_bit(OffloadModule::CoreAttn) |
                            offload_bit(OffloadModule::AttnProj) |
                            offload_bit(OffloadModule::ExpertFc1);
  const auto t4 = test::make("1f1b", test::sm(4, 4));
  for (const double bandwidth : {5e9, 5e10}) {
    moe.system.host.bandwidth = bandwidth;
    const auto run = simulate_table(t4, moe, "1f1b").metrics.runtime_s;
    auto none = moe;
    none.job.offload_modules = 0;
    const auto base = simulate_table(t4, none, "1f1b").metrics.runtime_s;
    EXPECT_GE(run, base * (1 - 1e-12)) << bandwidth;
  }
}

// The copies go on the ops' steps without changing what the ops compute: on plain ops, on ops
// that run the experts' all-to-alls (one pass, or a combined forward and backward), and on
// FSDP's block-by-block ops (whose slot for the next
// gather moves with its step), each op's steps compute its duration, and each copy is issued by
// exactly one step of one op and waited, if at all, by that op.
TEST(LayerOffload, CopiesOnTheStepsLeaveTheOpsComputeAlone) {
  struct Case {
    SimulationSetup setup;
    ScheduleTable table;
  };
  std::vector<Case> cases;
  {
    auto s = test::preset_setup("llama3.1-8b", "dgx-h100");
    s.job.offload_layers = 3;
    cases.push_back({s, test::make("interleaved", [] {
                       auto p = test::sm(2, 4);
                       p.chunks = 2;
                       return p;
                     }())});
  }
  {
    auto s = test::preset_setup("qwen3-30b-a3b", "gb200-nvl72");
    s.layout.ep = 8;
    s.layout.dp = 8;
    s.job.offload_modules = offload_bit(OffloadModule::CoreAttn) |
                            offload_bit(OffloadModule::AttnProj) |
                            offload_bit(OffloadModule::MoeAct);
    cases.push_back({s, test::make("1f1b", test::sm(2, 4))});
  }
  {
    // Megatron-Core's combined 1F1B: a forward and a backward in one op, each pass's copies on
    // its own compute.
    auto s = test::preset_setup("qwen3-30b-a3b", "dgx-h100");
    s.layout.ep = 8;
    s.layout.dp = 16;
    s.job.a2a_overlap = true;
    s.lowering.runtime = Runtime::Megatron;
    s.job.offload_modules = offload_bit(OffloadModule::CoreAttn) |
                            offload_bit(OffloadModule::AttnProj) |
                            offload_bit(OffloadModule::ExpertFc1);
    auto p = test::sm(2, 8);
    p.chunks = 2;
    cases.push_back({s, test::make("interleaved", p)});
  }
  {
    auto s = test::preset_setup("llama3.1-8b", "gb200-nvl72");
    s.layout.dp = 8;
    s.layout.fsdp.enabled = true;
    s.job.offload_layers = 12;
    cases.push_back({s, test::make("1f1b", test::sm(1, 2))});
  }
  for (const auto& [setup, table] : cases) {
    const auto run = simulate_table(table, setup);
    const auto& g = run.graph;
    std::vector<int> issued(static_cast<std::size_t>(g.transfers()), 0);
    std::int64_t copies = 0;
    for (std::int64_t n = 0; n < g.table_ops; ++n) {
      if (!g.has_steps(n)) continue;
      double compute = 0.0;
      std::set<std::int32_t> here;
      for (auto k = g.step_begin[static_cast<std::size_t>(n)];
           k < g.step_begin[static_cast<std::size_t>(n) + 1]; ++k) {
        const OpStep& st = g.steps[static_cast<std::size_t>(k)];
        if (st.kind == StepKind::Compute) {
          compute += st.seconds;
          continue;
        }
        const auto t = static_cast<std::size_t>(st.transfer - g.compute_nodes);
        if (st.kind == StepKind::Issue) {
          ++issued[t];
          here.insert(st.transfer);
        } else if (is_host_copy(g.kind[t])) {
          EXPECT_TRUE(here.count(st.transfer)) << "a copy waited by an op that did not issue it";
        }
      }
      EXPECT_NEAR(compute, g.duration[static_cast<std::size_t>(n)],
                  1e-12 * g.duration[static_cast<std::size_t>(n)]);
    }
    for (std::size_t t = 0; t < issued.size(); ++t) {
      if (!is_host_copy(g.kind[t])) continue;
      ++copies;
      EXPECT_EQ(issued[t], 1);
      EXPECT_TRUE(t < g.in_pass_copy.size() && g.in_pass_copy[t]);
    }
    EXPECT_GT(copies, 0);
    EXPECT_GT(run.metrics.peak_host_bytes[0], 0.0);
  }
}

// Where a GPU's traffic to other nodes crosses its host link (DGX nodes: carries_nic), the
// copies of offload inside the passes share the link with it: pipeline transfers between nodes
// and the copies slow each other, and the run takes longer than on a host whose link carries
// the copies alone. Without offload the link carries the NIC's traffic alone, as fast.
TEST(LayerOffload, CopiesShareTheHostLinkWithTheNicTrafficCrossingIt) {
  auto setup = test::preset_setup("llama3.1-8b", "dgx-h100");
  setup.job.seq_len = 8192;
  setup.system.devices_per_node = 1;  // each stage on its own node: every send crosses NICs
  setup.system.host.h2d_slowdown = 0.0;
  const auto t = test::make("1f1b", test::sm(4, 8));
  const auto runtime = [&](bool carries_nic, std::int64_t layers, double host_bandwidth) {
    auto s = setup;
    s.system.host.carries_nic = carries_nic;
    s.system.host.bandwidth = host_bandwidth;
    s.job.offload_layers = layers;
    return simulate_table(t, s, "1f1b").metrics.runtime_s;
  };
  // The preset's link (55.3 GB/s) is faster than the NIC (50): alone, the sends never notice it.
  const double preset = setup.system.host.bandwidth;
  ASSERT_GE(preset, setup.system.inter.bandwidth);
  EXPECT_DOUBLE_EQ(runtime(true, 0, preset), runtime(false, 0, preset));
  // Copies as slow as the backward needs them fast: the sends' share makes it wait longer.
  const double slow = 0.5 * setup.system.inter.bandwidth;
  EXPECT_GT(runtime(true, 6, slow), runtime(false, 6, slow) * 1.001);
  EXPECT_GE(runtime(false, 6, slow), runtime(false, 0, slow));
}

}  // namespace
}  // namespace pipetab
