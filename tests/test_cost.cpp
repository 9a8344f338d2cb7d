// The operator-level workload model and the cost layer (docs/design.md §5 `model/`, `cost/`):
// operators against the closed forms of Narayanan et al. (SC'21) and Korthikanti et al. (2022),
// Megatron's tensor-parallel traffic, the GEMM efficiency model's shape, and the pass costs.
#include <algorithm>
#include <cmath>
#include <set>

#include "helpers.hpp"
#include <gtest/gtest.h>

#include "pipetab/cost/breakdown.hpp"
#include "pipetab/cost/gemm.hpp"
#include "pipetab/cost/stage_cost.hpp"
#include "pipetab/error.hpp"
#include "pipetab/io/config.hpp"
#include "pipetab/model/flops.hpp"
#include "pipetab/model/operators.hpp"
#include "pipetab/model/workload.hpp"
#include "pipetab/parallel/collective.hpp"

namespace pipetab {
namespace {

using test::workload;

// A 4-layer GPT of hidden h and a heads, run on micro batches of b sequences of s tokens at TP t.
test::ModelRun gpt(std::int64_t h, std::int64_t a, std::int64_t s, std::int64_t b, std::int64_t t) {
  TransformerConfig m;
  m.layers = 4;
  m.hidden = h;
  m.heads = a;
  m.kv_heads = a;
  m.ffn_hidden = 4 * h;
  m.vocab = 51200;
  Job job;
  job.seq_len = s;
  job.micro_batch = b;
  Layout layout;
  layout.tp = t;
  return {{"m", m}, job, layout};
}

// Every combination the closed forms cover.
std::vector<test::ModelRun> grid() {
  std::vector<test::ModelRun> out;
  for (const auto h : {1024, 6144})
    for (const auto s : {512, 2048})
      for (const auto b : {1, 4})
        for (const auto t : {1, 2, 8})
          for (const bool sp : {false, true})
            for (const auto recompute : {Recompute::None, Recompute::Selective, Recompute::Full})
              for (const bool flash : {false, true})
                for (const bool gated : {false, true})
                  for (const bool dropout : {false, true}) {
                    if (sp && t == 1) continue;
                    auto m = gpt(h, 16, s, b, t);
                    m.layout.sequence_parallel = sp;
                    m.job.recompute = recompute;
                    m.job.stack.flash_attention = flash;
                    m.transformer().gated_mlp = gated;
                    m.transformer().dropout = dropout;
                    m.job.stack.grad_accumulation_fusion =
                        dropout;  // both ways, without more loops
                    out.push_back(m);
                  }
  // Grouped-query attention with other MLP widths.
  auto llama = gpt(8192, 64, 4096, 1, 8);
  llama.transformer().kv_heads = 8;
  llama.transformer().ffn_hidden = 28672;
  llama.transformer().gated_mlp = true;
  out.push_back(llama);
  return out;
}

// head_dim (issue 24): written as hidden / heads it changes nothing; set to something else it
// widens Q, K, V and the output projection, and Qwen3-32B's parameters come out as its model
// card counts them (32.8 B, 31.2 B without the embeddings: Qwen/Qwen3-32B).
TEST(Operators, HeadDimWidensTheAttentionOnly) {
  for (const char* preset : {"gpt3-13b", "llama2-70b", "llama2-7b", "paper"}) {
    test::ModelRun m = io::load_model(preset);
    for (const auto recompute : {Recompute::None, Recompute::Full}) {
      for (const bool flash : {false, true}) {
        m.job.recompute = recompute;
        m.job.stack.flash_attention = flash;
        auto explicit_dim = m;
        explicit_dim.transformer().head_dim = m.transformer().hidden / m.transformer().heads;
        const auto a = model_operators(workload(m)), b = model_operators(workload(explicit_dim));
        ASSERT_EQ(a.layer.forward.size(), b.layer.forward.size());
        for (std::size_t k = 0; k < a.layer.forward.size(); ++k) {
          EXPECT_EQ(a.layer.forward[k].flops, b.layer.forward[k].flops) << preset;
          EXPECT_EQ(a.layer.forward[k].bytes, b.layer.forward[k].bytes) << preset;
        }
        EXPECT_EQ(matmul_flops(a.layer.input_grad), matmul_flops(b.layer.input_grad));
        EXPECT_EQ(total_params(workload(m)), total_params(workload(explicit_dim))) << preset;
      }
    }
  }
  const test::ModelRun qwen = io::load_model("qwen3-32b");
  const double embeddings = 2.0 * 151936 * 5120;                    // untied input and output
  EXPECT_NEAR(total_params(workload(qwen)) / 32.8e9, 1.0, 0.0016);  // the card's 0.1 B rounding
  EXPECT_NEAR((total_params(workload(qwen)) - embeddings) / 31.2e9, 1.0, 0.0017);
  // Q is 64 × 128 = 8192 wide: the QKV GEMM's output is (8192 + 2 · 8 · 128) = 10240, the
  // projection reads 8192, and the layer's GEMM FLOPs are 2 · tokens · its weights.
  const auto ops = model_operators(workload(qwen));
  const auto find = [&](std::string_view name) {
    return *std::find_if(ops.layer.forward.begin(), ops.layer.forward.end(),
                         [&](const Operator& o) { return o.name == name; });
  };
  EXPECT_EQ(find("qkv").gemm.n, 10240);
  EXPECT_EQ(find("projection").gemm.k, 8192);
  const double weights = 2.0 * 5120 * 8192 + 2.0 * 5120 * 1024 + 3.0 * 5120 * 25600;
  EXPECT_DOUBLE_EQ(
      find("qkv").flops + find("projection").flops + find("fc1").flops + find("fc2").flops,
      2 * 4096 * weights);
}

TEST(Operators, LayerFlopsEqualTheClosedForms) {
  // Per layer and device (reference schedules.md §13, generalized to GQA and other MLP widths):
  // forward 2·T·W/t + 4·b·s²·h/t with W the matmul weights; the input gradient the same matmuls
  // and 8·b·s²·h/t (FlashAttention recomputes QKᵀ: 10); the weight gradient 2·T·W/t;
  // recomputation adds the forward (full) or the attention core's 4·b·s²·h/t (selective).
  for (const auto& run : grid()) {
    const auto& m = run.transformer();
    const auto d = [](std::int64_t x) { return static_cast<double>(x); };
    const double s = d(run.job.seq_len), b = d(run.job.micro_batch), h = d(m.hidden),
                 t = d(run.layout.tp);
    const double kv = h * d(m.kv_heads) / d(m.heads), ffn = d(m.ffn_hidden);
    const double W = 2 * h * h + 2 * h * kv + (m.gated_mlp ? 3 : 2) * h * ffn;
    const double matmul = 2 * s * b * W / t, scores = 4 * b * s * s * h / t;
    const auto ops = model_operators(workload(run)).layer;
    const double forward = matmul + scores;
    double input = matmul + (run.job.stack.flash_attention ? 2.5 : 2.0) * scores;
    if (run.job.recompute == Recompute::Full) input += forward;
    if (run.job.recompute == Recompute::Selective) input += scores;
    EXPECT_NEAR(matmul_flops(ops.forward), forward, 1e-9 * forward);
    EXPECT_NEAR(matmul_flops(ops.input_grad), input, 1e-9 * input);
    EXPECT_NEAR(matmul_flops(ops.weight_grad), matmul, 1e-9 * matmul);
  }
}

TEST(Operators, IterationFlopsEqualNarayananAndKorthikanti) {
  // A GPT with full recomputation: Narayanan et al. (SC'21) Eq. 3,
  // 96·B·s·l·h²·(1 + s/(6h) + V/(16·l·h)); the model FLOPs without recomputation, Korthikanti
  // et al.'s 72·B·s·l·h²·(1 + s/(6h) + V/(12·l·h)).
  for (const auto h : {2304, 12288})
    for (const auto t : {1, 8})
      for (const auto b : {1, 4}) {
        auto m = gpt(h, 96, 2048, b, t);
        m.transformer().layers = 24;
        m.job.recompute = Recompute::Full;
        const double B = 64, s = 2048, l = 24, H = h, V = 51200;
        const auto flops = iteration_flops(workload(m), B);
        const double eq3 = 96 * B * s * l * H * H * (1 + s / (6 * H) + V / (16 * l * H));
        const double model = 72 * B * s * l * H * H * (1 + s / (6 * H) + V / (12 * l * H));
        EXPECT_NEAR(flops.hardware, eq3, 1e-9 * eq3);
        EXPECT_NEAR(narayanan_eq3_flops(workload(m), B), eq3, 1e-9 * eq3);
        EXPECT_NEAR(flops.model, model, 1e-9 * model);
      }
}

// Megatron-LM's count (num_floating_point_operations @001b00c2) against independent facts: on a GPT
// (no GQA, MLP 4h, vocabulary a multiple of 128·TP) its full-square count is Korthikanti et al.'s
// 72·B·s·l·h²·(1 + s/(6h) + V/(12·l·h)) and the causal count takes half of the s² term; with
// GQA of g groups the K and V projections shrink to g/n; a mixture of one expert routed top-1 of
// the dense width is the dense model; and DeepSeek-V3 without its MTP module counts 6 FLOPs per
// activated parameter per token (37B activated, DeepSeek-V3 report §1, less the input
// embedding's 0.93B that no GEMM runs) plus its attention's s² terms.
// Megatron's count of `m` at sequence `seq` and TP `tp` (the rest of the job does not change it).
double megatron(const TransformerConfig& m, std::int64_t seq, std::int64_t tp, double sequences,
                CausalCount causal = CausalCount::Half) {
  Job job;
  job.seq_len = seq;
  Layout layout;
  layout.tp = tp;
  return megatron_flops({m, job, layout}, sequences, causal);
}

TEST(Operators, MegatronFlopsMatchTheClosedForms) {
  for (const std::int64_t h : {2304, 12288})
    for (const std::int64_t t : {1, 8}) {
      TransformerConfig m;
      m.layers = 24;
      m.hidden = h;
      m.heads = 96;
      m.vocab = 51200;  // 400 × 128: no padding with TP 1, 50 × 1,024 with TP 8
      const double B = 64, s = 2048, l = 24, H = static_cast<double>(h), V = 51200;
      const double korthikanti = 72 * B * s * l * H * H * (1 + s / (6 * H) + V / (12 * l * H));
      const double full = megatron(m, 2048, t, B, CausalCount::FullSquare);
      EXPECT_NEAR(full, korthikanti, 1e-9 * korthikanti);
      // The causal half: 12·B·s²·l·h FLOPs of QK^T and AV, halved.
      const double half = full - 6 * B * s * s * l * H;
      EXPECT_NEAR(megatron(m, 2048, t, B), half, 1e-9 * half);
      // GQA with 8 groups: the K and V projections 2·h·(h/12) instead of 2·h², six FLOPs each.
      m.kv_heads = 8;
      const double gqa = half - 6 * B * s * l * 2 * H * (H - H / 12);
      EXPECT_NEAR(megatron(m, 2048, t, B), gqa, 1e-9 * gqa);
      // One routed expert of the dense MLP's width, top-1, no shared one: the dense model.
      auto moe = m;
      moe.moe = MoeConfig{};
      moe.moe->experts = 1;
      moe.moe->top_k = 1;
      moe.moe->expert_ffn_hidden = 4 * h;
      EXPECT_NEAR(megatron(moe, 2048, t, B), gqa, 1e-9 * gqa);
    }
  // The vocabulary padded to 128 · TP as Megatron pads it: 50,257 is 50,304 with TP 1 (393 ×
  // 128) and 51,200 with TP 8 (50 × 1,024).
  TransformerConfig m;
  m.layers = 2;
  m.hidden = 1024;
  m.heads = 16;
  m.vocab = 50257;
  const double base = megatron(m, 1024, 1, 1);
  m.vocab = 50304;
  EXPECT_EQ(megatron(m, 1024, 1, 1), base);
  m.vocab = 50257;
  const double padded = base + 6 * 1024.0 * 1024 * (51200 - 50304);
  EXPECT_NEAR(megatron(m, 1024, 8, 1), padded, 1e-9 * padded);

  auto v3 = *io::load_model("deepseek-v3").transformer();
  v3.mtp_layers = 0;
  // One token of a 1-token sequence: the s² terms are 6·heads·(qk + v)/2 per layer.
  const double per_token = megatron(v3, 1, 1, 1);
  const double square = 6 * 61 * 128.0 * (128 + 64 + 128) / 2;
  const double active = (per_token - square) / 6;
  EXPECT_NEAR(active, 37e9 - 129280.0 * 7168, 0.02 * 37e9) << active;
}

// Collective operators of a pass: (kind, overlap) → count, and their bytes.
struct Traffic {
  int all_reduce = 0, reduce_scatter = 0, all_gather = 0;
  double bytes = 0.0;
};
Traffic traffic(const std::vector<Operator>& ops) {
  Traffic t;
  for (const auto& op : ops) {
    if (op.kind != OperatorKind::Collective) continue;
    t.all_reduce += op.collective == CollectiveKind::AllReduce;
    t.reduce_scatter += op.collective == CollectiveKind::ReduceScatter;
    t.all_gather += op.collective == CollectiveKind::AllGather;
    t.bytes += op.collective_bytes;
  }
  return t;
}

TEST(Operators, TensorParallelTrafficIsMegatrons) {
  // Megatron-LM: an all-reduce of the [s, b, h] activation after attention and after the MLP in
  // the forward, and of the input gradient before them in the backward; with sequence
  // parallelism all-gathers before the column-parallel linears and reduce-scatters after the
  // row-parallel ones, the same volume per rank (Korthikanti et al. §4.2.2), and the weight
  // gradients all-gather their inputs again.
  for (const auto& run : grid()) {
    const auto& m = run.transformer();
    const auto ops = model_operators(workload(run)).layer;
    const double buffer = static_cast<double>(run.job.element_bytes() * run.job.seq_len *
                                              run.job.micro_batch * m.hidden);
    if (run.layout.tp == 1) {
      for (const auto* pass : {&ops.forward, &ops.input_grad, &ops.weight_grad})
        EXPECT_EQ(traffic(*pass).bytes, 0.0);
      continue;
    }
    // Full recomputation repeats the forward's collectives at the head of the backward.
    const int again = run.job.recompute == Recompute::Full ? 1 : 0;
    const auto f = traffic(ops.forward), i = traffic(ops.input_grad), w = traffic(ops.weight_grad);
    if (run.layout.sequence_parallel) {
      EXPECT_EQ(f.all_gather, 2);
      EXPECT_EQ(f.reduce_scatter, 2);
      EXPECT_EQ(f.all_reduce, 0);
      EXPECT_EQ(i.all_gather, 2 + 2 * again);
      EXPECT_EQ(i.reduce_scatter, 2 + 2 * again);
      EXPECT_EQ(w.all_gather, 2);
    } else {
      EXPECT_EQ(f.all_reduce, 2);
      EXPECT_EQ(i.all_reduce, 2 + 2 * again);
      EXPECT_EQ(f.all_gather + f.reduce_scatter + w.all_gather, 0);
    }
    EXPECT_DOUBLE_EQ(f.bytes, (run.layout.sequence_parallel ? 4 : 2) * buffer);
    // Per rank, a ring all-reduce moves 2(t−1)/t of the buffer, an all-gather or a
    // reduce-scatter (t−1)/t: both layouts move the same in each pass.
    const double t = static_cast<double>(run.layout.tp);
    const auto per_rank = [&](const Traffic& x) {
      return (2 * x.all_reduce + x.all_gather + x.reduce_scatter) * (t - 1) / t * buffer;
    };
    EXPECT_DOUBLE_EQ(per_rank(f), 4 * (t - 1) / t * buffer);
  }
}

TEST(Operators, RecomputationAddsExactlyTheRecomputedOperators) {
  for (const bool flash : {false, true}) {
    auto m = gpt(4096, 32, 2048, 1, 4);
    m.job.stack.flash_attention = flash;
    const auto plain = model_operators(workload(m)).layer;
    m.job.recompute = Recompute::Full;
    const auto full = model_operators(workload(m)).layer;
    ASSERT_EQ(full.input_grad.size(), plain.forward.size() + plain.input_grad.size());
    for (std::size_t k = 0; k < plain.forward.size(); ++k) {
      EXPECT_EQ(full.input_grad[k].name, plain.forward[k].name);
      EXPECT_EQ(full.input_grad[k].flops, plain.forward[k].flops);
      EXPECT_EQ(full.input_grad[k].bytes, plain.forward[k].bytes);
    }
    m.job.recompute = Recompute::Selective;
    const auto selective = model_operators(workload(m)).layer;
    std::set<std::string_view> core;
    for (std::size_t k = 0; k + plain.input_grad.size() < selective.input_grad.size(); ++k)
      core.insert(selective.input_grad[k].name);
    const std::set<std::string_view> expected =
        flash ? std::set<std::string_view>{"attention.flash"}
              : std::set<std::string_view>{"attention.scores", "attention.softmax",
                                           "attention.dropout", "attention.values"};
    EXPECT_EQ(core, expected);
  }
}

TEST(Operators, WeightGradientHoldsOnlyTheWeightGemms) {
  for (const bool fusion : {false, true}) {
    auto m = gpt(4096, 32, 2048, 2, 2);
    m.job.stack.grad_accumulation_fusion = fusion;
    const auto ops = model_operators(workload(m));
    std::vector<std::string_view> gemms, others;
    for (const auto& op : ops.layer.weight_grad)
      (op.kind == OperatorKind::Gemm ? gemms : others).push_back(op.name);
    EXPECT_EQ(gemms, (std::vector<std::string_view>{"qkv.weight_grad", "projection.weight_grad",
                                                    "fc1.weight_grad", "fc2.weight_grad"}));
    // Without fused accumulation each weight GEMM's gradient is added in a pass of its own:
    // read it, read and write the main gradient.
    EXPECT_EQ(others.size(), fusion ? 0U : 4U);
    if (!fusion) {
      const auto& qkv = ops.layer.weight_grad[1];
      EXPECT_EQ(qkv.name, "qkv.weight_grad.accumulate");
      EXPECT_DOUBLE_EQ(qkv.bytes, 4096.0 * 3 * 4096 / 2 * (2 + 2 * 4.0));
    }
  }
}

TEST(Gemm, EfficiencyHasItsShape) {
  const GemmModel g{108, {{256, 128}}, 0, 0.8, 128.0};
  const auto eff = [&](double m, double n, double k, double batch = 1) {
    return cost::gemm_efficiency(g, {m, n, k, batch});
  };
  // Whole waves: 108 tiles of 256 × 128 are one wave; then only the K loop's overhead counts.
  const double wave_m = 256 * 12, wave_n = 128 * 9;
  for (const double k : {64.0, 1024.0, 8192.0})
    EXPECT_DOUBLE_EQ(eff(wave_m, wave_n, k), 0.8 * k / (k + 128));
  // Monotone in K everywhere; in M, N and the batch across whole waves.
  for (const double m : {100.0, 2048.0, 3000.0})
    for (const double n : {96.0, 2304.0}) {
      double last = 0.0;
      for (double k = 16; k <= 65536; k *= 2) {
        EXPECT_GE(eff(m, n, k), last);
        last = eff(m, n, k);
        EXPECT_LE(last, 0.8);
      }
    }
  double last = 0.0;
  for (int waves = 1; waves <= 64; waves *= 2) {
    EXPECT_GE(eff(wave_m * waves, wave_n, 4096), last);
    EXPECT_DOUBLE_EQ(eff(wave_m, wave_n * waves, 4096), eff(wave_m * waves, wave_n, 4096));
    EXPECT_DOUBLE_EQ(eff(wave_m, wave_n, 4096, waves), eff(wave_m * waves, wave_n, 4096));
    last = eff(wave_m * waves, wave_n, 4096);
  }
  // Small or skinny GEMMs run slower: a half-empty tile, a part of a wave, one tile alone.
  EXPECT_LT(eff(wave_m, wave_n - 64, 4096), eff(wave_m, wave_n, 4096));
  // One more row of tiles: 117 tiles need two waves of 108 (216 slots).
  EXPECT_DOUBLE_EQ(eff(wave_m + 256, wave_n, 4096), 0.8 * 117.0 / 216.0 * 4096 / (4096 + 128));
  EXPECT_NEAR(eff(256, 128, 4096), 0.8 / 108 * 4096 / (4096 + 128), 1e-12);
  // No shape model: the maximum for every shape.
  EXPECT_EQ(cost::gemm_efficiency({0, {{256, 128}}, 0, 0.7, 0.0}, {3, 5, 7, 1}), 0.7);
}

TEST(Gemm, PicksTheTileThatWastesLeast) {
  // 1536 × 1536 on 132 multiprocessors: 128 × 128 tiles are 144, two waves (144 of 264 slots);
  // 256 × 128 tiles are 72, one wave (72 of 132). The library picks the second.
  const GemmModel one{132, {{128, 128}}, 0, 0.8, 0.0};
  GemmModel two = one;
  two.tiles.push_back({256, 128});
  const GemmShape s{1536, 1536, 4096, 1};
  EXPECT_DOUBLE_EQ(cost::gemm_efficiency(one, s), 0.8 * 144.0 / 264.0);
  EXPECT_DOUBLE_EQ(cost::gemm_efficiency(two, s), 0.8 * 72.0 / 132.0);
  // Adding a tile never lowers the efficiency of any shape.
  for (const double m : {256.0, 1000.0, 1536.0, 4096.0})
    for (const double n : {128.0, 700.0, 3072.0})
      EXPECT_GE(cost::gemm_efficiency(two, {m, n, 1024, 1}),
                cost::gemm_efficiency(one, {m, n, 1024, 1}));
}

TEST(Gemm, SplitKFillsTheIdleMultiprocessors) {
  // 256 × 256 with K = 32768 on 132 multiprocessors and 128 × 128 tiles: 4 tiles. Split-K with
  // slices of at least 256 splits K 33 ways (⌊132/4⌋), each slice 32768/33 deep: 132 of 132
  // slots busy.
  GemmModel g{132, {{128, 128}}, 256, 0.8, 100.0};
  const GemmShape skinny{256, 256, 32768, 1};
  const double slice = 32768.0 / 33;
  EXPECT_DOUBLE_EQ(cost::gemm_efficiency(g, skinny), 0.8 * slice / (slice + 100));
  // A short K limits the split: K = 1024 gives ⌊1024/256⌋ = 4 slices, 16 of 132 slots.
  EXPECT_DOUBLE_EQ(cost::gemm_efficiency(g, {256, 256, 1024, 1}), 0.8 * 16.0 / 132 * 256 / 356);
  // Without split-K: 4 of 132 slots.
  g.split_k_min = 0;
  EXPECT_DOUBLE_EQ(cost::gemm_efficiency(g, skinny), 0.8 * 4.0 / 132 * 32768 / 32868);
  // Still non-decreasing in K with split-K on.
  g.split_k_min = 256;
  double last = 0.0;
  for (double k = 64; k <= 65536; k *= 1.5) {
    EXPECT_GE(cost::gemm_efficiency(g, {256, 384, k, 1}), last);
    last = cost::gemm_efficiency(g, {256, 384, k, 1});
  }
}

TEST(Collective, RingFormulas) {
  const LinkSpec link{2e-6, 100e9, 0.8};
  const double n = 64e6;
  // A ring inside a node: all-reduce 2(p−1) steps, reduce-scatter and all-gather p−1, of n/p at
  // 80 GB/s plus α.
  const auto seconds = [&](CollectiveKind kind, std::int64_t p) {
    return collective_seconds({kind, {p, p}, n, CollectiveAlgorithm::Ring}, link, link);
  };
  EXPECT_DOUBLE_EQ(seconds(CollectiveKind::AllReduce, 8), 14 * (2e-6 + 8e6 / 80e9));
  EXPECT_DOUBLE_EQ(seconds(CollectiveKind::AllGather, 8), 7 * (2e-6 + 8e6 / 80e9));
  EXPECT_DOUBLE_EQ(seconds(CollectiveKind::ReduceScatter, 4), 3 * (2e-6 + 16e6 / 80e9));
  EXPECT_EQ(seconds(CollectiveKind::AllReduce, 1), 0.0);
}

double layer_seconds(const test::ModelRun& model, const SystemConfig& system,
                     cost::CostOptions options = {}) {
  StageWork w;
  w.layers = 1;
  const auto c =
      cost::stage_costs(model.model, model.job, model.layout, std::span(&w, 1), system, options)
          .front();
  return c.forward.seconds + c.backward.seconds;
}

TEST(Cost, MicroBatchHiddenSizeAndTensorParallelChangeTheAchievedFlops) {
  // Larger GEMMs fill the device better: the achieved FLOP/s of a layer rises with the micro
  // batch and the hidden size (measurements.md §4: 2–10% when the micro batch doubles), and
  // falls with the tensor-parallel size, whose shares are smaller and whose collectives grow.
  const auto system = io::load_system("dgx-a100");
  const auto rate = [&](const test::ModelRun& m) {
    const auto ops = model_operators(workload(m)).layer;
    const double flops =
        matmul_flops(ops.forward) + matmul_flops(ops.input_grad) + matmul_flops(ops.weight_grad);
    return flops / layer_seconds(m, system);
  };
  for (const auto b : {1, 2, 4}) {
    const double gain = rate(gpt(12288, 96, 2048, 2 * b, 8)) / rate(gpt(12288, 96, 2048, b, 8));
    EXPECT_GT(gain, 1.0) << b;
    EXPECT_LT(gain, 1.10) << b;
  }
  EXPECT_GT(rate(gpt(12288, 96, 2048, 1, 8)), rate(gpt(6144, 48, 2048, 1, 8)));
  EXPECT_GT(rate(gpt(6144, 48, 2048, 1, 2)), rate(gpt(6144, 48, 2048, 1, 8)));
}

TEST(Cost, TensorParallelOverNvlinkAndPcieDiffer) {
  // The same TP 2 layer: NVLink's 300 GB/s against PCIe Gen4's 32 GB/s per direction.
  const auto model = gpt(5120, 40, 2048, 1, 2);
  StageWork w;
  w.layers = 1;
  const auto comm = [&](const char* system) {
    return cost::stage_costs(model.model, model.job, model.layout, std::span(&w, 1),
                             io::load_system(system))
        .front()
        .forward.tp_comm_s;
  };
  EXPECT_GT(comm("a100-pcie"), 5 * comm("dgx-a100"));
  // A 16-way group spans two 8-GPU nodes: its collectives run on the inter-node links.
  const auto selene = io::load_system("dgx-a100");
  Layout tp;
  tp.tp = 8;
  EXPECT_FALSE(group_of(tp, CollectiveGroup::Tensor, 0, node_size(selene, tp)).spans_nodes());
  tp.tp = 16;
  EXPECT_TRUE(group_of(tp, CollectiveGroup::Tensor, 0, node_size(selene, tp)).spans_nodes());
}

// The cost of a stage of one layer of `m` under a TP overlap setting.
cost::StageCost one_layer_cost(test::ModelRun m, const SystemConfig& system, Overlap overlap) {
  StageWork w;
  w.layers = 1;
  m.job.tp_overlap = overlap;
  return cost::stage_costs(m.model, m.job, m.layout, std::span(&w, 1), system).front();
}

TEST(Cost, OverlapHidesOnlyWhatMegatronHides) {
  const auto system = io::load_system("dgx-a100");
  for (const bool sp : {false, true}) {
    auto m = gpt(6144, 64, 2048, 4, 8);
    m.layout.sequence_parallel = sp;
    const auto cost = [&](Overlap o) { return one_layer_cost(m, system, o); };
    const auto none = cost(Overlap::Never), backward = cost(Overlap::Backward),
               all = cost(Overlap::All);
    // The forward hides nothing until --tp-comm-overlap; the backward from 2021-09 on.
    EXPECT_EQ(none.forward, backward.forward);
    EXPECT_LT(all.forward.seconds, backward.forward.seconds);
    EXPECT_LT(backward.backward.seconds, none.backward.seconds);
    // B hides the input-gradient collectives behind the weight-gradient GEMMs; split into I
    // and W it cannot.
    EXPECT_NEAR(none.backward.seconds, none.input_grad.seconds + none.weight_grad.seconds, 1e-15);
    EXPECT_LT(backward.backward.seconds,
              backward.input_grad.seconds + backward.weight_grad.seconds);
    EXPECT_EQ(backward.input_grad, none.input_grad);
    EXPECT_GE(backward.backward.tp_comm_s, 0.0);
  }
}

TEST(TensorParallel, CollectiveMatmulRunsInChunks) {
  // Under --tp-overlap all, a collective that only `all` hides runs with its GEMM as t chunks of
  // rows (async TP, userbuffers): the pair takes max(t·g, g + C), not max(P, C). On
  // flat-efficiency devices a chunk's GEMM is exactly g = P/t, so a pass grows over the
  // un-overlapped one by Σ (max(P, P/t + C) − P − C) over those collectives.
  const auto system = test::system_with(Topology::Switched, {1e-5, 2e10}, {1e-5, 1e10});
  auto m = gpt(4096, 32, 2048, 1, 4);
  m.layout.sequence_parallel = true;
  const auto cost = [&](Overlap o) { return one_layer_cost(m, system, o); };
  const auto ops = model_operators(workload(m));
  const double t = 4;
  const auto chunked = [&](const std::vector<Operator>& pass, int& count) {
    double sum = 0.0;
    for (const Operator& op : pass) {
      if (op.kind != OperatorKind::Collective || op.overlap != Overlap::All) continue;
      const auto& gemm = pass.at(static_cast<std::size_t>(op.hidden_index));
      EXPECT_EQ(gemm.kind, OperatorKind::Gemm) << op.name;
      const double P = cost::operator_cost(gemm, workload(m), system).seconds;
      const double C = cost::operator_cost(op, workload(m), system).seconds;
      EXPECT_GT(C, P / t) << op.name << ": chunking is not full hiding here";
      sum += std::max(P, P / t + C) - P - C;
      ++count;
    }
    return sum;
  };
  // Sequence parallelism: forward, the all-gathers before QKV and fc1 and the reduce-scatters
  // after the projection and fc2; the input gradient, the all-gathers of the output gradients
  // before the projection's and fc2's input-gradient GEMMs.
  int forward = 0, input_grad = 0;
  const double f = chunked(ops.layer.forward, forward);
  const double i = chunked(ops.layer.input_grad, input_grad);
  EXPECT_EQ(forward, 4);
  EXPECT_EQ(input_grad, 2);
  const auto all = cost(Overlap::All), backward = cost(Overlap::Backward);
  EXPECT_NEAR(all.forward.seconds - backward.forward.seconds, f, 1e-12);
  EXPECT_NEAR(all.input_grad.seconds - backward.input_grad.seconds, i, 1e-12);
  // Megatron's backward overlap (bulk, beside the weight-gradient GEMM) is not chunked.
  EXPECT_EQ(all.weight_grad, backward.weight_grad);
}

TEST(Cost, FlatEfficiencyIsFlopProportional) {
  // device.efficiency: every matmul FLOP at peak × efficiency, nothing else (the model before the
  // operator level, kept for the paper's regimes and old system files).
  auto system = io::load_system("dgx-h100");
  system.device.flat_efficiency = 0.45;
  for (const auto& model : grid()) {
    if (model.layout.tp > 1) continue;  // TP collectives are communication, costed in both
    const std::vector<std::int32_t> units(4, 1);
    const auto work = test::stage_work(model, units, 4);
    const auto costs = cost::stage_costs(model.model, model.job, model.layout, work, system);
    const double speed = 989.4e12 * 0.45;
    for (std::size_t s = 0; s < work.size(); ++s) {
      EXPECT_NEAR(costs[s].forward.seconds, work[s].forward_flops / speed, 1e-12);
      EXPECT_NEAR(costs[s].input_grad.seconds, work[s].input_grad_flops / speed, 1e-12);
      EXPECT_NEAR(costs[s].weight_grad.seconds, work[s].weight_grad_flops / speed, 1e-12);
    }
  }
}

TEST(Cost, RooflineAndLaunches) {
  // A memory-bound operator takes its bytes at the achieved bandwidth plus a launch; a GEMM the
  // larger of its compute and its memory time.
  const auto system = io::load_system("dgx-a100");
  const auto& d = system.device;
  const auto m = gpt(6144, 64, 2048, 4, 8);
  const auto ops = model_operators(workload(m)).layer.forward;
  for (const auto& op : ops) {
    const auto c = cost::operator_cost(op, workload(m), system);
    const double memory = op.bytes / (d.memory_bandwidth * d.memory_efficiency);
    if (op.kind == OperatorKind::Memory) {
      EXPECT_DOUBLE_EQ(c.seconds, memory + op.kernels * d.kernel_overhead_s) << op.name;
    } else if (op.kind == OperatorKind::Gemm) {
      const double compute =
          op.flops / (d.peak(Precision::BF16) * cost::gemm_efficiency(d.gemm, op.gemm));
      EXPECT_DOUBLE_EQ(c.seconds, std::max(compute, memory) + d.kernel_overhead_s) << op.name;
      EXPECT_EQ(c.memory_bound, memory > compute) << op.name;
    }
  }
}

// The experts' grouped GEMM, bound by its operands' traffic, streams at gemm_memory_efficiency
// (measured on torch._grouped_mm), the element-wise kernels at memory_efficiency: 64 experts' GEMMs
// of 32 rows against their 2048 x 768 weights on dgx-h100 (0.80 against 0.596).
TEST(Cost, GemmsBoundByTheirOperandsStreamAtTheirOwnShare) {
  auto system = io::load_system("dgx-h100");
  const auto& d = system.device;
  ASSERT_EQ(d.gemm_memory_efficiency, 0.80);
  const auto m = gpt(6144, 64, 2048, 4, 8);
  Operator gemm = gemm_operator("experts.fc1", GemmShape{32, 768, 2048, 64, true}, 2);
  const auto c = cost::operator_cost(gemm, workload(m), system);
  ASSERT_TRUE(c.memory_bound);
  EXPECT_DOUBLE_EQ(c.seconds, gemm.bytes / (d.memory_bandwidth * 0.80) + d.kernel_overhead_s);
  for (const auto& op : model_operators(workload(m)).layer.forward) {
    if (op.kind != OperatorKind::Memory) continue;
    EXPECT_DOUBLE_EQ(
        cost::operator_cost(op, workload(m), system).seconds,
        op.bytes / (d.memory_bandwidth * d.memory_efficiency) + op.kernels * d.kernel_overhead_s)
        << op.name;
  }
  // A GEMM that is not the experts' grouped one, and any GEMM where the share is unset, streams
  // as the element-wise kernels do.
  gemm.gemm.grouped = false;
  EXPECT_DOUBLE_EQ(cost::operator_cost(gemm, workload(m), system).seconds,
                   gemm.bytes / (d.memory_bandwidth * d.memory_efficiency) + d.kernel_overhead_s);
  gemm.gemm.grouped = true;
  system.device.gemm_memory_efficiency = 0.0;
  EXPECT_DOUBLE_EQ(cost::operator_cost(gemm, workload(m), system).seconds,
                   gemm.bytes / (d.memory_bandwidth * d.memory_efficiency) + d.kernel_overhead_s);
}

TEST(Cost, OptimizerStepBytes) {
  // Megatron's mixed-precision Adam: the gradient norm reads the fp32 gradient (4), Adam reads
  // the gradient, master weight and moments and writes the last three (28), the master weights
  // are copied to the bf16 weights (4 + 2): 38 B; fp16 main gradients are first copied to fp32
  // (2 + 4) and unscaled (4 + 4): 52 B.
  Job job = gpt(1024, 16, 512, 1, 1).job;
  EXPECT_EQ(optimizer_step_bytes_per_param(job), 38.0);
  job.precision = Precision::FP16;
  job.grad_bytes_per_param = 2;
  EXPECT_EQ(optimizer_step_bytes_per_param(job), 52.0);
  const auto system = io::load_system("dgx-a100");
  EXPECT_DOUBLE_EQ(cost::optimizer_step_seconds(38e9, system.device),
                   38e9 / (2.039e12 * system.device.memory_efficiency) + 3 * 5e-6);
}

TEST(Cost, ExplicitWorkloadsAndUncostableSystems) {
  ExplicitWorkload e;
  e.forward_s = 1.0;
  e.input_grad_s = 2.0;
  e.weight_grad_s = 3.0;
  const std::vector<std::int32_t> units{1, 1};
  const Job none;
  const Layout unsplit;
  const auto work = stage_work({"e", e}, none, unsplit, units, 2);
  const auto c = cost::stage_costs({"e", e}, none, unsplit, work, io::load_system("dgx-h100"));
  EXPECT_EQ(c[0].backward.seconds, 5.0);
  // An FP8 model on a device without FP8.
  auto m = gpt(1024, 16, 512, 1, 1);
  m.job.precision = Precision::FP8;
  EXPECT_THROW(cost::stage_costs(m.model, m.job, m.layout, work, io::load_system("dgx-a100")),
               ParamError);
  EXPECT_NO_THROW(cost::stage_costs(m.model, m.job, m.layout, work, io::load_system("dgx-h100")));
  EXPECT_THROW(cost::operator_breakdown({"e", e}, none, unsplit, io::load_system("dgx-h100")),
               ParamError);
}

TEST(Cost, BreakdownAddsUpToThePasses) {
  auto model = gpt(4096, 32, 2048, 2, 1);
  model.job.tp_overlap = Overlap::Never;
  const auto b =
      cost::operator_breakdown(model.model, model.job, model.layout, io::load_system("dgx-a100"));
  double forward = 0.0;
  for (const auto& r : b.rows) {
    if (r.part == "layer" && r.pass == PassId::Forward) forward += r.cost.seconds;
  }
  EXPECT_NEAR(forward, b.layer.forward.seconds, 1e-15);
  const auto text = cost::breakdown_text(b);
  EXPECT_NE(text.find("fc1.weight_grad"), std::string::npos);
  EXPECT_EQ(cost::to_json(b)["operators"].size(), b.rows.size());
}

}  // namespace
}  // namespace pipetab
