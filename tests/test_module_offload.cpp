// Megatron-Core's fine-grained activation offload (Job::offload_modules): what each module's
// group moves and frees (bytes by hand), the closed form of its copies (times by hand), the
// rules, and the simulation's memory and time with it.
#include <string>
#include <vector>

#include "helpers.hpp"
#include "model/memory.hpp"
#include <gtest/gtest.h>

#include "pipetab/cost/layer_offload.hpp"
#include "pipetab/error.hpp"
#include "pipetab/model/offload_groups.hpp"
#include "pipetab/sim/simulation.hpp"
#include "pipetab/table/memory.hpp"

namespace pipetab {
namespace {

std::uint8_t bits(std::initializer_list<OffloadModule> modules) {
  std::uint8_t out = 0;
  for (const auto m : modules)
    out |= offload_bit(m);
  return out;
}

// The group of `m` (a copy; an empty one, and a failure, where there is none).
OffloadGroup group_of(const std::vector<OffloadGroup>& groups, OffloadModule m) {
  for (const auto& g : groups)
    if (g.module == m) return g;
  ADD_FAILURE() << "no group " << to_string(m);
  return {};
}

constexpr std::uint8_t kAll = 0x7f;

TEST(OffloadModules, NamesParseAndPrintBack) {
  EXPECT_EQ(offload_modules_text(0), "none");
  EXPECT_EQ(offload_modules_text(kAll),
            "attn_norm+qkv_linear+core_attn+attn_proj+mlp_norm+expert_fc1+moe_act");
  for (const std::string text :
       {"core_attn+attn_proj+expert_fc1", "expert_fc1,attn_proj,core_attn"})
    EXPECT_EQ(offload_modules_text(parse_offload_modules(text).modules),
              "core_attn+attn_proj+expert_fc1")
        << text;
  EXPECT_EQ(parse_offload_modules("none").modules, 0);
  EXPECT_NE(parse_offload_modules("core_attn+bogus").error.find("unknown module 'bogus'"),
            std::string::npos);
  EXPECT_NE(parse_offload_modules("moe_act+moe_act").error.find("twice"), std::string::npos);
  EXPECT_NE(parse_offload_modules("core_attn+").error.find("empty"), std::string::npos);
  EXPECT_NE(parse_offload_modules("fused_group_mlp").error.find("not modelled"), std::string::npos);
}

// Qwen3-30B-A3B (hidden 2,048, 32 query and 4 key-value heads of 128, 128 experts of 768, top 8)
// at 4,096 tokens: each group's bytes by hand.
TEST(OffloadModules, GroupBytesByHand) {
  auto setup = test::preset_setup("qwen3-30b-a3b", "gb200-nvl72");
  setup.job.seq_len = 4096;
  setup.job.micro_batch = 1;
  setup.job.offload_modules =
      static_cast<std::uint8_t>(kAll & ~offload_bit(OffloadModule::AttnNorm));
  const TransformerConfig& m = *setup.model.transformer();
  const Workload run{m, setup.job, setup.layout};
  const double T = 4096, h = 2048, q = 4096, kv = 512;
  const double rows = setup.job.moe.load() * T * 8;
  auto groups = offload_groups(run, true);
  ASSERT_EQ(groups.size(), 6U);
  // The QKV linear keeps its input and the fused norm's, 2 bytes each.
  EXPECT_DOUBLE_EQ(group_of(groups, OffloadModule::QkvLinear).copied_bytes, 4 * T * h);
  // Q, K, V and the output; the log-sum-exp (32 × 4,096 values) is under 1M elements and stays.
  const auto core = group_of(groups, OffloadModule::CoreAttn);
  EXPECT_DOUBLE_EQ(core.copied_bytes, 2 * T * (q + 2 * kv) + 2 * T * q);
  // The output is the projection's saved input too: freed with attn_proj's copy.
  EXPECT_DOUBLE_EQ(core.freed_bytes, 2 * T * (q + 2 * kv));
  EXPECT_DOUBLE_EQ(group_of(groups, OffloadModule::AttnProj).freed_bytes, 2 * T * q);
  EXPECT_DOUBLE_EQ(group_of(groups, OffloadModule::MlpNorm).copied_bytes, 2 * T * h);
  EXPECT_DOUBLE_EQ(group_of(groups, OffloadModule::ExpertFc1).copied_bytes, 2 * rows * h);
  EXPECT_DOUBLE_EQ(group_of(groups, OffloadModule::MoeAct).copied_bytes, 2 * rows * 2 * 768);
  // Under FP8 with Transformer Engine: the linears keep FP8 inputs, the projection its own FP8
  // copy of the output (so core_attn frees the 16-bit one), and fc1, offloaded under current
  // scaling, its 16-bit input (set_save_original_input) where the accounting has one byte.
  setup.job.precision = Precision::FP8;
  groups = offload_groups({m, setup.job, setup.layout}, true);
  EXPECT_DOUBLE_EQ(group_of(groups, OffloadModule::QkvLinear).copied_bytes, 3 * T * h);
  EXPECT_DOUBLE_EQ(group_of(groups, OffloadModule::CoreAttn).freed_bytes,
                   2 * T * (q + 2 * kv) + 2 * T * q);
  EXPECT_DOUBLE_EQ(group_of(groups, OffloadModule::AttnProj).copied_bytes, T * q);
  auto fc1 = group_of(groups, OffloadModule::ExpertFc1);
  EXPECT_DOUBLE_EQ(fc1.copied_bytes, 2 * rows * h);
  EXPECT_DOUBLE_EQ(fc1.freed_bytes, rows * h);
  setup.job.fp8_recipe = Fp8Recipe::Mxfp8;
  const auto mxfp8 = offload_groups({m, setup.job, setup.layout}, true);
  fc1 = group_of(mxfp8, OffloadModule::ExpertFc1);
  EXPECT_DOUBLE_EQ(fc1.copied_bytes, rows * h);
  // A dense layer has neither a pre-MLP norm of its own nor experts; without latent attention
  // the input norm is fused too.
  setup.job.offload_modules =
      static_cast<std::uint8_t>(kAll & ~offload_bit(OffloadModule::AttnNorm));
  EXPECT_EQ(offload_groups({m, setup.job, setup.layout}, false).size(), 3U);
}

// Over every module set the rules admit, precisions and tensor parallelism with sequence
// parallelism: a group frees at most what it copies, and a layer's groups together at most what
// the layer holds (StageWork's accounting).
TEST(OffloadModules, GroupsNeverFreeMoreThanTheLayerHolds) {
  int admitted = 0;
  for (const std::string model : {"qwen3-30b-a3b", "deepseek-v3", "llama3.1-8b"}) {
    for (const auto precision : {Precision::BF16, Precision::FP8}) {
      for (const std::int64_t tp : {1, 2}) {
        for (std::uint8_t set = 1; set <= kAll; ++set) {
          auto setup = test::preset_setup(model, "gb200-nvl72");
          setup.job.seq_len = 4096;
          setup.job.micro_batch = 1;
          setup.job.precision = precision;
          setup.layout.tp = tp;
          setup.layout.sequence_parallel = tp > 1;
          setup.job.offload_modules = set;
          try {
            require_runnable(setup.model, setup.job, setup.layout);
          } catch (const ParamError&) {
            continue;
          }
          ++admitted;
          const TransformerConfig& m = *setup.model.transformer();
          for (const bool moe : {false, true}) {
            if (moe && !m.moe) continue;
            const Workload run{m, setup.job, setup.layout};
            const Workload kind{moe ? m : detail::dense_layer_model(m), setup.job, setup.layout};
            const double held =
                moe ? detail::moe_layer_activation_bytes(run).total
                    : detail::layer_activation_bytes(kind, detail::dims(kind)).total;
            double freed = 0.0;
            for (const auto& g : offload_groups(run, moe)) {
              EXPECT_LE(g.freed_bytes, g.copied_bytes * (1 + 1e-12)) << model;
              EXPECT_GT(g.copied_bytes, 0.0);
              freed += g.freed_bytes;
            }
            EXPECT_LE(freed, held * (1 + 1e-12))
                << model << " " << offload_modules_text(set) << " tp " << tp << " moe " << moe;
          }
        }
      }
    }
  }
  // Every non-empty set with attn_proj only beside core_attn: Llama's of qkv_linear, core_attn
  // and attn_proj (3 × 2 − 1), Qwen3's with the three MoE modules (3 × 2 × 8 − 1), DeepSeek-V3's
  // with attn_norm too (3 × 2 × 16 − 1); each in two precisions and two TP sizes.
  EXPECT_EQ(admitted, 4 * (5 + 47 + 95));
}

TEST(OffloadModules, RulesRefuseByName) {
  const auto refused = [](const std::string& model, std::uint8_t set, auto&& change) {
    auto setup = test::preset_setup(model, "gb200-nvl72");
    setup.job.offload_modules = set;
    change(setup);
    return test::param_error([&] { require_runnable(setup.model, setup.job, setup.layout); });
  };
  const auto none = [](SimulationSetup&) {};
  using M = OffloadModule;
  EXPECT_NE(refused("qwen3-30b-a3b", bits({M::AttnProj}), none).find("attn_proj needs core_attn"),
            std::string::npos);
  EXPECT_NE(refused("llama3.1-8b", bits({M::ExpertFc1}), none).find("no mixture-of-experts"),
            std::string::npos);
  EXPECT_NE(refused("llama3.1-8b", bits({M::AttnNorm}), none).find("IdentityOp"),
            std::string::npos);
  EXPECT_NE(refused("qwen3-30b-a3b", bits({M::CoreAttn}),
                    [](SimulationSetup& s) { s.job.recompute = Recompute::Selective; })
                .find("recomputed"),
            std::string::npos);
  EXPECT_NE(refused("qwen3-30b-a3b", bits({M::MoeAct}),
                    [](SimulationSetup& s) { s.job.recompute = Recompute::Full; })
                .find("recompute full"),
            std::string::npos);
  EXPECT_NE(refused("qwen3-30b-a3b", bits({M::MoeAct}),
                    [](SimulationSetup& s) { s.job.moe.recompute = MoeRecompute::Mlp; })
                .find("moe_recompute mlp"),
            std::string::npos);
  EXPECT_NE(refused("deepseek-v3", bits({M::CoreAttn}),
                    [](SimulationSetup& s) { s.job.mla_recompute_up_proj = true; })
                .find("mla_recompute_up_proj"),
            std::string::npos);
  EXPECT_NE(refused("qwen3-30b-a3b", bits({M::MoeAct}),
                    [](SimulationSetup& s) { s.job.offload_layers = 2; })
                .find("one offload at a time"),
            std::string::npos);
  EXPECT_NE(refused("nemotron-3-nano", bits({M::MoeAct}), none).find("hybrid pattern"),
            std::string::npos);
  EXPECT_EQ(refused("deepseek-v3", kAll, none), "(no error)");
}

// One layer, two groups: g1 (10 bytes, its forward ends at 2, its backward runs 6-8), g2 (20
// bytes, ends at 4, backward 1-3); forward 5 s, backward 10 s, latency 0.
cost::LayerOffloadTiming two_groups() {
  cost::LayerOffloadTiming l;
  l.groups = {{10, 10, 2, 6, 8}, {20, 20, 4, 1, 3}};
  l.forward_s = 5;
  l.backward_s = 10;
  return l;
}

TEST(OffloadModules, CopiesByHand) {
  const auto l = two_groups();
  const std::vector<const cost::LayerOffloadTiming*> one{&l};
  // 10 B/s: copy 1 runs 2-3, copy 2 4-6. At 2 the device holds 10 not yet copied, at 4 and at
  // the forward's end (5) 20. The backward starts at the forward's end with g2 on the device;
  // g2's backward ends at 3 and issues g1's copy back, done at 4, before g1 needs it at 6.
  auto c = cost::module_offload(one, 10.0, 0.0);
  EXPECT_DOUBLE_EQ(c.bytes, 30.0);
  EXPECT_DOUBLE_EQ(c.host_bytes, 30.0);
  EXPECT_DOUBLE_EQ(c.forward_window_bytes, 20.0);
  EXPECT_DOUBLE_EQ(c.backward_window_bytes, 30.0);
  EXPECT_DOUBLE_EQ(c.forward_stall_s, 0.0);
  EXPECT_DOUBLE_EQ(c.backward_stall_s, 0.0);
  EXPECT_DOUBLE_EQ(c.reload_busy_s, 3.0);
  // 1 B/s: copy 1 runs 2-12, copy 2 12-32 (the forward never waits): 30 on the device at 4 and
  // 5. g1 comes back once its copy out is done (12, 7 s after the backward starts): 7-17, 11 s
  // after g1's backward should have started.
  c = cost::module_offload(one, 1.0, 0.0);
  EXPECT_DOUBLE_EQ(c.forward_window_bytes, 30.0);
  EXPECT_DOUBLE_EQ(c.forward_stall_s, 0.0);
  EXPECT_DOUBLE_EQ(c.backward_stall_s, 11.0);
  EXPECT_DOUBLE_EQ(c.reload_busy_s, 30.0);
  // Two such layers at 10 B/s: copies 2-3, 4-6, 7-8, 9-11; back 3-4 (L2 g1), 8-10 (L1 g2, needed
  // at 11), 13-14 (L1 g1, needed at 16): nothing waits.
  const std::vector<const cost::LayerOffloadTiming*> two{&l, &l};
  c = cost::module_offload(two, 10.0, 0.0);
  EXPECT_DOUBLE_EQ(c.bytes, 60.0);
  EXPECT_DOUBLE_EQ(c.forward_window_bytes, 20.0);
  EXPECT_DOUBLE_EQ(c.backward_window_bytes, 30.0);
  EXPECT_DOUBLE_EQ(c.backward_stall_s, 0.0);
  // Slower copies never make the backward shorter; without a host link nothing moves.
  double last = 0.0;
  for (const double bandwidth : {100.0, 10.0, 3.0, 1.0, 0.3}) {
    const auto s = cost::module_offload(two, bandwidth, 0.1).backward_stall_s;
    EXPECT_GE(s, last) << bandwidth;
    last = s;
  }
  EXPECT_DOUBLE_EQ(cost::module_offload(two, 0.0, 0.0).bytes, 0.0);
}

// Qwen3-30B-A3B on a GB200 tray, 1F1B over two stages: offloading lowers each device's peak by
// at least the microbatches it holds less one times what a microbatch offloads, at most by all
// of them, moves the host's share, and never runs faster.
TEST(OffloadModules, SimulationLowersThePeakAndNeverSpeedsUp) {
  auto setup = test::preset_setup("qwen3-30b-a3b", "gb200-nvl72");
  setup.job.seq_len = 4096;
  setup.job.micro_batch = 1;
  setup.job.precision = Precision::FP8;
  setup.job.fp8_recipe = Fp8Recipe::Mxfp8;
  setup.layout.dp = 8;
  setup.layout.ep = 8;
  const auto t = test::make("1f1b", test::sm(2, 4));
  const auto base = simulate_table(t, setup, "1f1b").metrics;
  using M = OffloadModule;
  for (const std::uint8_t set :
       {bits({M::MoeAct}), bits({M::CoreAttn, M::AttnProj, M::ExpertFc1}), std::uint8_t(0x7e)}) {
    setup.job.offload_modules = set;
    const auto m = simulate_table(t, setup, "1f1b").metrics;
    const TransformerConfig& model = *setup.model.transformer();
    double per_layer = 0.0;
    for (const auto& g : offload_groups({model, setup.job, setup.layout}, true))
      per_layer += g.freed_bytes;
    const auto work = table_work(t, setup.model, setup.job, setup.layout);
    for (std::size_t d = 0; d < 2; ++d) {
      const double microbatch = per_layer * static_cast<double>(work[d].layers);
      const double in_flight = d == 0 ? 2 : 1;  // 1F1B: S − d microbatches at the peak
      const double drop = base.peak_activation_bytes()[d] - m.peak_activation_bytes()[d];
      EXPECT_GE(drop, (in_flight - 1) * microbatch - 1e-6 * microbatch)
          << offload_modules_text(set) << " device " << d;
      EXPECT_LE(drop, in_flight * microbatch * (1 + 1e-9)) << offload_modules_text(set);
      EXPECT_GT(m.peak_host_bytes[d], 0.0);
    }
    EXPECT_GE(m.runtime_s, base.runtime_s * (1 - 1e-12)) << offload_modules_text(set);
    EXPECT_EQ(m.offload_modules, offload_modules_text(set));
  }
  // Compute beside the copies back runs slower where the host says so (h2d_slowdown): by at
  // most that share of the step.
  setup.job.offload_modules = bits({M::MoeAct});
  const double plain = simulate_table(t, setup, "1f1b").metrics.runtime_s;
  setup.system.host.h2d_slowdown = 0.1;
  const double slowed = simulate_table(t, setup, "1f1b").metrics.runtime_s;
  EXPECT_GT(slowed, plain);
  EXPECT_LT(slowed, 1.1 * plain);
  setup.system.host.h2d_slowdown = 0.0;
  // A split backward is refused with its reason, as whole-layer offload's is.
  setup.job.offload_modules = bits({M::MoeAct});
  const auto zb = test::make("zb-h1", test::sm(2, 4));
  EXPECT_NE(test::param_error([&] { simulate_table(zb, setup, "zb-h1"); }).find("split backward"),
            std::string::npos);
}

// The table level takes offload inside the passes as a share kept of each forward: its peaks
// scale by it, on every table, and a share outside (0, 1] is refused.
TEST(OffloadModules, TheTableLevelScalesItsPeaksByTheShareKept) {
  for (const std::string name : {"1f1b", "interleaved", "gpipe", "zb-h1"}) {
    auto p = test::sm(4, 8);
    if (name == "interleaved") p.chunks = 2;
    const auto t = test::make(name, p);
    const auto all = activation_peaks(t);
    for (const double kept : {1.0, 0.7, 0.25}) {
      MemoryOptions m;
      m.kept = kept;
      const auto some = activation_peaks(t, m);
      for (std::size_t d = 0; d < all.size(); ++d)
        EXPECT_NEAR(some[d], kept * all[d], 1e-12 * all[d]) << name << " " << kept;
    }
  }
  MemoryOptions bad;
  bad.kept = 0.0;
  EXPECT_NE(test::param_error([&] {
              activation_peaks(test::make("1f1b", test::sm(2, 2)), bad);
            }).find("above 0, up to 1"),
            std::string::npos);
}

// What the table level keeps falls as more is offloaded: more whole layers, more modules; and
// is 1 without offload inside the passes.
TEST(OffloadModules, TheShareKeptFallsAsMoreLeaves) {
  auto setup = test::preset_setup("qwen3-30b-a3b", "gb200-nvl72");
  setup.job.seq_len = 4096;
  setup.layout.dp = 8;
  setup.layout.ep = 8;
  const auto t = test::make("1f1b", test::sm(4, 8));  // 12 layers a stage
  EXPECT_EQ(in_pass_kept_share(t, setup), 1.0);
  double last = 1.0;
  for (const std::int64_t n : {1, 4, 11}) {
    setup.job.offload_layers = n;
    const double kept = in_pass_kept_share(t, setup);
    EXPECT_LT(kept, last) << n;
    EXPECT_GT(kept, 0.0);
    last = kept;
  }
  // All but the last layer of each stage go: what stays is one layer's and the embedding's and
  // output layer's share.
  setup.job.offload_layers = 100;
  EXPECT_DOUBLE_EQ(in_pass_kept_share(t, setup), last);
  setup.job.offload_layers = 0;
  using M = OffloadModule;
  last = 1.0;
  for (const std::uint8_t set :
       {bits({M::MoeAct}), bits({M::MoeAct, M::ExpertFc1}),
        bits({M::MoeAct, M::ExpertFc1, M::CoreAttn, M::AttnProj}), std::uint8_t(0x7e)}) {
    setup.job.offload_modules = set;
    const double kept = in_pass_kept_share(t, setup);
    EXPECT_LT(kept, last) << offload_modules_text(set);
    EXPECT_GT(kept, 0.0);
    last = kept;
  }
}

// The table level's share and the simulation's copies come from two computations
// (stage_offloaded_bytes; the closed forms of cost/layer_offload.hpp): on one stage and one
// microbatch the host holds what the table level takes away, for whole layers and for modules
// under MXFP8 (where every group frees what it copies).
TEST(OffloadModules, TheTableLevelAndTheSimulationOffloadTheSameBytes) {
  auto setup = test::preset_setup("qwen3-30b-a3b", "gb200-nvl72");
  setup.job.seq_len = 4096;
  setup.job.precision = Precision::FP8;
  setup.job.fp8_recipe = Fp8Recipe::Mxfp8;
  setup.layout.dp = 8;
  setup.layout.ep = 8;
  const auto t = test::make("1f1b", test::sm(1, 1));
  const TransformerConfig& m = *setup.model.transformer();
  using M = OffloadModule;
  for (const bool layers : {true, false}) {
    setup.job.offload_layers = layers ? 20 : 0;
    setup.job.offload_modules = layers ? 0 : bits({M::CoreAttn, M::AttnProj, M::ExpertFc1});
    const auto work = table_work(t, setup.model, setup.job, setup.layout);
    const double offloaded = stage_offloaded_bytes(work[0], {m, setup.job, setup.layout});
    EXPECT_GT(offloaded, 0.0);
    const auto sim = simulate_table(t, setup, "1f1b").metrics;
    EXPECT_NEAR(sim.peak_host_bytes[0], offloaded, 1e-9 * offloaded) << layers;
    EXPECT_NEAR(in_pass_kept_share(t, setup), 1.0 - offloaded / work[0].activation_bytes, 1e-12);
  }
}

}  // namespace
}  // namespace pipetab
