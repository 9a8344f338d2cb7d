// Hybrid models (Nemotron-H, Nemotron 3): a pattern of Mamba-2, attention, MLP and MoE layers.
// Checked against independent facts: a hybrid whose layers pair up as "*-" or "*E" is the dense
// or MoE transformer layer split in two, to the byte and the second, over a grid of layouts and
// jobs; the Mamba layer's products against the SSD's closed form (Dao and Gu 2024, §6); the
// model's FLOPs against Megatron-LM's own hybrid count; Nemotron 3 Nano's parameters against
// the published total; and what the model refuses.
#include <algorithm>
#include <cmath>
#include <string>

#include "helpers.hpp"
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "pipetab/cost/breakdown.hpp"
#include "pipetab/cost/stage_cost.hpp"
#include "pipetab/error.hpp"
#include "pipetab/io/config.hpp"
#include "pipetab/io/hf_config.hpp"
#include "pipetab/io/job_file.hpp"
#include "pipetab/model/flops.hpp"
#include "pipetab/model/operators.hpp"
#include "pipetab/model/workload.hpp"
#include "pipetab/sim/options.hpp"
#include "pipetab/sim/simulation.hpp"

namespace pipetab {
namespace {

using test::workload;

// A small transformer: 4 layers of attention and a SwiGLU MLP, or experts.
test::ModelRun dense_model(bool moe, bool dropout) {
  TransformerConfig m;
  m.layers = 4;
  m.hidden = 256;
  m.heads = 4;
  m.kv_heads = 2;
  m.vocab = 1000;
  m.ffn_hidden = 512;
  m.gated_mlp = true;
  m.dropout = dropout;
  m.learned_positions = false;
  if (moe) {
    MoeConfig x;
    x.experts = 8;
    x.top_k = 2;
    x.expert_ffn_hidden = 128;
    x.shared_experts = 1;
    m.moe = x;
  }
  Job job;
  job.seq_len = 256;
  job.micro_batch = 2;
  job.stack.flash_attention = true;
  job.stack.fused_elementwise = true;
  return {{"m", m}, job, Layout{}};
}

// The same model with each layer split in two: its attention, then its MLP or experts.
test::ModelRun split_model(const test::ModelRun& dense) {
  test::ModelRun hybrid = dense;
  TransformerConfig& m = hybrid.transformer();
  std::string pattern;
  for (std::int64_t l = 0; l < m.layers; ++l)
    pattern += m.moe ? "*E" : "*-";
  m.layers *= 2;
  m.hybrid_pattern = pattern;
  return hybrid;
}

// A hybrid with Mamba layers: Nemotron 3 Nano's shape, shrunk.
test::ModelRun mamba_model() {
  test::ModelRun run = dense_model(true, false);
  TransformerConfig& m = run.transformer();
  m.layers = 6;
  m.hybrid_pattern = "ME*EME";
  m.gated_mlp = false;
  MambaConfig x;
  x.heads = 8;
  x.head_dim = 32;
  x.state = 64;
  x.groups = 2;
  x.chunk = 64;
  m.mamba = x;
  return run;
}

double relative(double a, double b) {
  return std::abs(a - b) / std::max(1e-300, std::max(std::abs(a), std::abs(b)));
}

TEST(Hybrid, SplitLayersAreTheTransformerLayerToTheByteAndTheSecond) {
  const SystemConfig system = io::load_system("dgx-h100");
  int cases = 0;
  for (const bool moe : {false, true}) {
    for (const bool dropout : {false, true}) {
      for (const std::int64_t tp : {1, 2}) {
        for (const bool sp : {false, true}) {
          if (sp && tp == 1) continue;
          if (moe && tp > 1 && !sp) continue;  // Megatron-Core's experts need SP with TP
          for (const Recompute r : {Recompute::None, Recompute::Selective, Recompute::Full}) {
            for (const Precision p : {Precision::BF16, Precision::FP8}) {
              test::ModelRun dense = dense_model(moe, dropout);
              dense.layout.tp = tp;
              dense.layout.sequence_parallel = sp;
              dense.layout.ep = moe ? 2 : 1;
              dense.layout.dp = moe ? 2 : 1;
              dense.job.recompute = r;
              dense.job.precision = p;
              const test::ModelRun hybrid = split_model(dense);
              require_runnable(dense.model, dense.job, dense.layout);
              require_runnable(hybrid.model, hybrid.job, hybrid.layout);
              const std::vector<std::int32_t> units{1, 1};
              const auto a = test::stage_work(dense, units, 2);
              const auto b = test::stage_work(hybrid, units, 2);
              const auto ca = cost::stage_costs(dense.model, dense.job, dense.layout, a, system);
              const auto cb = cost::stage_costs(hybrid.model, hybrid.job, hybrid.layout, b, system);
              // Under full recomputation every layer keeps its input: the split model keeps
              // one more per pair (the MLP's), the rest is the same.
              const double extra =
                  r == Recompute::Full
                      ? 2.0 * 256 * 2 * 256 / (sp ? static_cast<double>(tp) : 1.0) * 2
                      : 0.0;
              for (std::size_t s = 0; s < 2; ++s) {
                const std::string at = fmt::format(
                    "moe {} dropout {} tp {} sp {} recompute {} {} "
                    "stage {}",
                    moe, dropout, tp, sp, to_string(r), to_string(p), s);
                EXPECT_EQ(b[s].layers, 2 * a[s].layers) << at;
                EXPECT_EQ(b[s].moe_layers, a[s].moe_layers) << at;
                for (const auto& [what, x, y] :
                     {std::tuple{"forward_flops", a[s].forward_flops, b[s].forward_flops},
                      {"input_grad_flops", a[s].input_grad_flops, b[s].input_grad_flops},
                      {"weight_grad_flops", a[s].weight_grad_flops, b[s].weight_grad_flops},
                      {"activation_bytes", a[s].activation_bytes + extra, b[s].activation_bytes},
                      {"kept", a[s].activation_kept_for_weight_grad + extra,
                       b[s].activation_kept_for_weight_grad},
                      {"params", a[s].params, b[s].params},
                      {"expert_params", a[s].expert_params, b[s].expert_params},
                      {"weight_bytes", a[s].weight_bytes, b[s].weight_bytes},
                      {"fp8_weight_copy_bytes", a[s].fp8_weight_copy_bytes,
                       b[s].fp8_weight_copy_bytes},
                      {"forward_s", ca[s].forward.seconds, cb[s].forward.seconds},
                      {"input_grad_s", ca[s].input_grad.seconds, cb[s].input_grad.seconds},
                      {"weight_grad_s", ca[s].weight_grad.seconds, cb[s].weight_grad.seconds},
                      {"backward_s", ca[s].backward.seconds, cb[s].backward.seconds},
                      {"tp_comm_s", ca[s].forward.tp_comm_s, cb[s].forward.tp_comm_s},
                      {"expert_comm_s", ca[s].forward.expert_comm_s, cb[s].forward.expert_comm_s},
                      {"kernels", ca[s].backward.kernels, cb[s].backward.kernels}}) {
                  EXPECT_LE(relative(x, y), 1e-12) << at << ": " << what << " " << x << " " << y;
                }
              }
              ++cases;
            }
          }
        }
      }
    }
  }
  EXPECT_EQ(cases, 2 * 3 * 3 * 2 + 2 * 2 * 3 * 2);
}

TEST(Hybrid, StagesHoldThePatternsLayersInOrder) {
  const test::ModelRun nano = io::load_model("nemotron-3-nano");
  const TransformerConfig& m = nano.transformer();
  ASSERT_TRUE(m.hybrid());
  const std::string& p = m.hybrid_pattern;
  // Nemotron 3 Nano: 23 Mamba, 6 attention and 23 MoE layers (the recipe's pattern).
  EXPECT_EQ(std::count(p.begin(), p.end(), 'M'), 23);
  EXPECT_EQ(std::count(p.begin(), p.end(), '*'), 6);
  EXPECT_EQ(std::count(p.begin(), p.end(), 'E'), 23);
  test::ModelRun run = nano;
  run.layout.ep = 8;
  run.layout.dp = 8;
  const std::vector<std::int32_t> units{1, 1, 1, 1};
  const auto work = test::stage_work(run, units, 4);
  std::size_t from = 0;
  for (const auto& w : work) {
    const std::string slice = p.substr(from, static_cast<std::size_t>(w.layers));
    from += static_cast<std::size_t>(w.layers);
    EXPECT_EQ(w.blocks[0], std::count(slice.begin(), slice.end(), 'M')) << slice;
    EXPECT_EQ(w.blocks[1], std::count(slice.begin(), slice.end(), '*')) << slice;
    EXPECT_EQ(w.blocks[2], std::count(slice.begin(), slice.end(), '-')) << slice;
    EXPECT_EQ(w.blocks[3], std::count(slice.begin(), slice.end(), 'E')) << slice;
    EXPECT_EQ(w.moe_layers, w.blocks[3]);
    // Only the E layers hold experts, EP-split: 16 of 128 per rank, each 2 × h × 1856.
    EXPECT_DOUBLE_EQ(w.expert_params, static_cast<double>(w.blocks[3]) * 16 * 2 * 2688 * 1856);
  }
  EXPECT_EQ(from, p.size());
}

TEST(Hybrid, NemotronNanoHasItsPublishedParameters) {
  // NVIDIA's model card of Nemotron 3 Nano 30B-A3B: 31.6B parameters in all, about 3.6B active
  // with the embeddings.
  const test::ModelRun nano = io::load_model("nemotron-3-nano");
  const Workload w = workload(nano);
  EXPECT_NEAR(total_params(w) / 1e9, 31.6, 0.05);
  // Active: every layer but the routed experts' other 122 of 128.
  const double idle = 23.0 * (128 - 6) * 2 * 2688 * 1856;
  EXPECT_NEAR((total_params(w) - idle) / 1e9, 3.6, 0.05);
}

TEST(Hybrid, NemotronNano9bV2HasItsFourAttentionLayersAndItsMlps) {
  // The model card: Mamba-2 and MLP layers with just four attention layers; 9 billion parameters
  // (NVIDIA's announcement; no finer published count was found).
  test::ModelRun run = io::load_model("nemotron-nano-9b-v2");
  const auto counts = block_counts(run.transformer().hybrid_pattern, 0, run.transformer().layers);
  EXPECT_EQ(counts, (std::array<std::int64_t, kBlockKinds>{27, 4, 25, 0}));
  EXPECT_NEAR(total_params(workload(run)) / 1e9, 9.0, 0.15);
  // The recipe's TP 2 with sequence parallelism: every MLP layer on the stage, split.
  run.layout.tp = 2;
  run.layout.sequence_parallel = true;
  require_runnable(run.model, run.job, run.layout);
  const auto work = test::stage_work(run, std::vector<std::int32_t>{1}, 1);
  EXPECT_EQ(work[0].blocks[index(BlockKind::Mlp)], 25);
  EXPECT_EQ(work[0].moe_layers, 0);
}

TEST(Hybrid, MambaLayersProductsAreTheSsdsBlocks) {
  test::ModelRun run = mamba_model();
  const Workload w = workload(run);
  const ModelOperators ops = model_operators(w);
  const auto& f = ops.blocks[index(BlockKind::Mamba)].forward;
  ASSERT_FALSE(f.empty());
  // T tokens, h 256, inner 8 × 32 = 256, groups × state = 2 × 64, chunk 64: the projections
  // 2·T·h·(2·inner + 2·g·N + heads) and 2·T·inner·h; per chunk of Q tokens and head, the state
  // Bᵀx (2·N·P·Q), the output from the chunk (2·Q·Q·P) and from the state (2·Q·N·P); per chunk
  // and group C·Bᵀ (2·Q·Q·N).
  const double T = 2 * 256, h = 256, inner = 256, gN = 128, heads = 8, P = 32, N = 64, Q = 64;
  const double chunks = 2 * 256 / Q;
  const double projections = 2 * T * h * (2 * inner + 2 * gN + heads) + 2 * T * inner * h;
  const double ssd = chunks * heads * (2 * N * P * Q + 2 * Q * Q * P + 2 * Q * N * P) +
                     chunks * 2 * (2 * Q * Q * N);
  EXPECT_DOUBLE_EQ(matmul_flops(f), projections + ssd);
  // The backward: the input gradients of both projections, and the SSD's products twice over
  // (each operand's gradient) with C·Bᵀ and the states made again.
  const auto& i = ops.blocks[index(BlockKind::Mamba)].input_grad;
  const double recomputed = chunks * heads * 2 * N * P * Q + chunks * 2 * (2 * Q * Q * N);
  EXPECT_DOUBLE_EQ(matmul_flops(i), projections + 2 * ssd + recomputed);
  const auto& wg = ops.blocks[index(BlockKind::Mamba)].weight_grad;
  EXPECT_DOUBLE_EQ(matmul_flops(wg), projections);
  // The SSD runs in BF16 under FP8: only the projections are FP8 linears.
  run.job.precision = Precision::FP8;
  const ModelOperators fp8 = model_operators(workload(run));
  for (const Operator& op : fp8.blocks[index(BlockKind::Mamba)].forward) {
    if (op.kind != OperatorKind::Gemm) continue;
    const bool projection = op.name == "mamba.in_proj" || op.name == "mamba.out_proj";
    EXPECT_EQ(op.fp8, projection) << op.name;
  }
  // Under current scaling in_proj's norm finds the amax (TELayerNormColumnParallelLinear): its
  // input quantised at e + 2 bytes, where out_proj's is read once more for its amax.
  ASSERT_EQ(run.job.fp8_recipe, Fp8Recipe::Tensorwise);
  const auto& forward = fp8.blocks[index(BlockKind::Mamba)].forward;
  const Operator& in_q = *test::find_op(forward, "mamba.in_proj.quantize");
  const Operator& out_q = *test::find_op(forward, "mamba.out_proj.quantize");
  EXPECT_EQ(in_q.inner_launches, 2);
  EXPECT_EQ(out_q.inner_launches, 3);
  const double in_elements = in_q.bytes / 4, out_elements = out_q.bytes / 6;
  EXPECT_DOUBLE_EQ(in_elements, test::find_op(forward, "mamba.in_proj")->gemm.m *
                                    test::find_op(forward, "mamba.in_proj")->gemm.k);
  EXPECT_DOUBLE_EQ(out_elements, test::find_op(forward, "mamba.out_proj")->gemm.m *
                                     test::find_op(forward, "mamba.out_proj")->gemm.k);
}

TEST(Hybrid, MambaLayerSplitsOverTensorParallelRanks) {
  test::ModelRun one = mamba_model();
  test::ModelRun two = one;
  two.layout.tp = 2;
  two.layout.sequence_parallel = true;
  const ModelOperators oa = model_operators(workload(one)), ob = model_operators(workload(two));
  // Every product of the mixer halves; with sequence parallelism so do its activations.
  for (const PassId pass : {PassId::Forward, PassId::InputGrad, PassId::WeightGrad}) {
    EXPECT_DOUBLE_EQ(matmul_flops(ob.blocks[index(BlockKind::Mamba)].pass(pass)),
                     matmul_flops(oa.blocks[index(BlockKind::Mamba)].pass(pass)) / 2);
  }
  // The Mamba layers' activations (the stage's layers' only: the embedding's token ids are not
  // split).
  const auto mamba_only = [&](const test::ModelRun& r) {
    test::ModelRun only = r;
    only.transformer().hybrid_pattern = "MMMMMM";
    return test::stage_work(only, std::vector<std::int32_t>{1}, 1)[0];
  };
  const StageWork m1 = mamba_only(one), m2 = mamba_only(two);
  EXPECT_NEAR(m2.layer_activation_bytes, m1.layer_activation_bytes / 2,
              1e-9 * m1.layer_activation_bytes);
  // After the input gradient a Mamba layer's weight gradients need in_proj's input (2·sbh) and
  // out_proj's (2·T·inner) alone: 6 layers of T = 512 tokens, h = inner = 256.
  EXPECT_DOUBLE_EQ(m1.activation_kept_for_weight_grad, 6 * (2.0 * 512 * 256 + 2.0 * 512 * 256));
  // Its parameters too, but for each layer's pre-norm and the final norm (2h each, replicated);
  // the embedding and the output layer split over the vocabulary.
  const double replicated = (6 + 1) * 2 * 256.0;
  EXPECT_NEAR(m2.params, (m1.params - replicated) / 2 + replicated, 1e-9 * m1.params);
}

TEST(Hybrid, ModelFlopsAreMegatronsHybridCount) {
  // Megatron-LM's num_floating_point_operations for a hybrid model (megatron/training/
  // training.py, hybrid_flops), written out for Nemotron 3 Nano: per token and forward, a Mamba
  // layer 2·h·(2·d + 2·g·N + heads) + 7·d·N + 2·d·h with d = 2·h; an attention layer
  // 4·h·p·(h + h·kv/heads) + 2·s·h·p (causal), p = heads·head_dim / h; a MoE layer
  // 4·h·ffn·top_k + 4·h·shared (not gated); the logits 2·h·V; all × 3.
  const test::ModelRun nano = io::load_model("nemotron-3-nano");
  const Workload w = workload(nano);
  const double h = 2688, s = 8192, V = 131072;
  const double d = 2 * h, N = 128, g = 8, heads = 64;
  const double mamba = 2 * h * (2 * d + 2 * g * N + heads) + 7 * d * N + 2 * d * h;
  const double p = 32.0 * 128 / h;
  const double attention = 4 * h * p * (h + h * 2.0 / 32) + 2 * s * h * p;
  const double moe = 4 * h * 1856 * 6 + 4 * h * 3712;
  const double per_token = 3 * (23 * mamba + 6 * attention + 23 * moe + 2 * h * V);
  EXPECT_LE(relative(megatron_flops(w, 1.0, CausalCount::Half), s * per_token), 1e-12);
}

TEST(Hybrid, ConventionsCountTheAttentionLayersAndTheScan) {
  // PaLM's 6N + 12·L·h·s with L the attention layers, and each Mamba layer's SSD products (Dao
  // and Gu 2024, §6), per token and head 2·N·P for the state, 2·N·P for its output and 2·Q·P
  // for the chunk's own, per group 2·Q·N for C·Bᵀ, three times (forward and backward): what runs,
  // less the backward's recomputation. Nemotron Nano 9B v2: 27 Mamba layers of 128 heads of 80,
  // state 128 in 8 groups, chunk 128; 4 attention layers of 40 × 128.
  test::ModelRun r = io::load_model("nemotron-nano-9b-v2");
  const double s = static_cast<double>(r.job.seq_len), tokens = 3 * s;
  const double h = 4480, V = 131072;
  // Every parameter a GEMM multiplies: all but the input embedding, the norms and the mixer's
  // convolution taps, A, D and dt's bias (under 0.1%).
  const double matmul = total_params(workload(r)) - V * h;
  const double square = 4 * 40 * 128 * s;
  const double ssd = 128 * (4 * 128 * 80 + 2 * 128 * 80) + 8 * 2 * 128 * 128;
  const double palm = (6 * matmul + 12 * square + 27 * 3 * ssd) * tokens;
  const auto count = [&](FlopCount c) { return iteration_flops(workload(r), 3, c).model; };
  EXPECT_NEAR(count(FlopCount::Palm), palm, 1e-3 * palm);
  EXPECT_NEAR(count(FlopCount::Palm) - count(FlopCount::Causal), 6 * square * tokens, 1e-9 * palm);
  // Never more than the GPUs execute (MFU at most 1), whatever the job recomputes.
  for (const auto recompute : {Recompute::None, Recompute::Full}) {
    r.job.recompute = recompute;
    const auto c = iteration_flops(workload(r), 3, FlopCount::Causal);
    EXPECT_LE(c.model, c.hardware);
  }
}

TEST(Hybrid, RefusesWhatItDoesNotModel) {
  const auto key = [](test::ModelRun run) -> std::string {
    try {
      require_runnable(run.model, run.job, run.layout);
    } catch (const OptionError& e) {
      return e.key();
    }
    return "(none)";
  };
  EXPECT_EQ(key(mamba_model()), "(none)");
  test::ModelRun r = mamba_model();
  r.layout.cp = 2;
  EXPECT_EQ(key(r), "context_parallel");
  r = mamba_model();
  r.transformer().mtp_layers = 1;
  EXPECT_EQ(key(r), "mtp_layers");
  r = mamba_model();
  r.transformer().moe->dense_layers = 1;
  EXPECT_EQ(key(r), "moe.dense_layers");
  r = mamba_model();
  r.job.recompute = Recompute::SelectiveOp;
  EXPECT_EQ(key(r), "recompute");
  r = mamba_model();
  r.transformer().hybrid_pattern = "ME*EM";
  EXPECT_EQ(key(r), "hybrid_pattern");
  r = mamba_model();
  r.transformer().hybrid_pattern = "ME*EMX";
  EXPECT_EQ(key(r), "hybrid_pattern");
  r = mamba_model();
  r.transformer().mamba.reset();
  EXPECT_EQ(key(r), "hybrid_pattern");
  r = mamba_model();
  r.transformer().mamba->groups = 3;
  EXPECT_EQ(key(r), "mamba.groups");
  r = mamba_model();
  r.layout.tp = 4;  // 8 Mamba heads over 4 ranks, but 2 groups do not split over 4
  EXPECT_EQ(key(r), "tensor_parallel");
}

TEST(Hybrid, ModelFilesNameTheFieldThatIsWrong) {
  const auto error = [](const std::string& text) -> std::string {
    try {
      (void)io::parse_model(text, "h.toml");
    } catch (const Error& e) {
      return e.what();
    }
    return "(no error)";
  };
  const std::string head =
      "[transformer]\nlayers = 4\nhidden = 64\nheads = 4\nseq_len = 32\nvocab = 100\n";
  EXPECT_EQ(error(head + "hybrid_pattern = \"M*-\"\n[mamba]\nheads = 4\n"),
            "h.toml:7:18: key 'transformer.hybrid_pattern': 3 symbols for layers = 4: expected one "
            "symbol per layer");
  EXPECT_EQ(error(head + "hybrid_pattern = \"M*-Q\"\n[mamba]\nheads = 4\n"),
            "h.toml:7:18: key 'transformer.hybrid_pattern': 'Q' at layer 3: expected M (Mamba), * "
            "(attention), - (MLP) or E (mixture of experts), Megatron-Core's hybrid symbols");
  EXPECT_EQ(error(head + "hybrid_pattern = \"M*-*\"\n"),
            "h.toml:7:18: key 'transformer.hybrid_pattern': Mamba layers (M) need their mixer: "
            "give a [mamba] table (heads, head_dim, state, groups, conv_kernel, chunk)");
  EXPECT_EQ(error(head + "hybrid_pattern = \"*-*-\"\n[mamba]\nheads = 4\n"),
            "h.toml:8:1: key 'mamba': a Mamba mixer needs Mamba layers: give the transformer a "
            "hybrid_pattern with M");
  EXPECT_EQ(error(head + "hybrid_pattern = \"M*E*\"\n[mamba]\nheads = 4\ngroups = 4\n"),
            "h.toml:7:18: key 'transformer.hybrid_pattern': mixture-of-experts layers (E) need "
            "their experts: give a [moe] table");
  EXPECT_EQ(error(head + "hybrid_pattern = \"M*-*\"\n[mamba]\nheads = 6\ngroups = 4\n"),
            "h.toml:10:10: key 'mamba.groups': 4 groups for heads = 6: the heads share B and C by "
            "group, and the groups must divide them");
  EXPECT_EQ(error(head + "hybrid_pattern = \"M*-*\"\n[mamba]\nheads = 4\nwidth = 2\n"),
            "h.toml:10:1: key 'mamba.width': unknown key (expected: heads, head_dim, state, "
            "groups, conv_kernel, chunk)");
}

// A Nemotron-H config.json as transformers' NemotronHConfig names its fields, written here with
// Nemotron 3 Nano's values (Megatron-Bridge's recipe and NemotronH bridge test @v0.6.0).
nlohmann::json nano_config() {
  return {{"architectures", {"NemotronHForCausalLM"}},
          {"model_type", "nemotron_h"},
          {"hybrid_override_pattern", "MEMEM*EMEMEM*EMEMEM*EMEMEM*EMEMEM*EMEMEMEM*EMEMEMEME"},
          {"num_hidden_layers", 52},
          {"hidden_size", 2688},
          {"num_attention_heads", 32},
          {"num_key_value_heads", 2},
          {"head_dim", 128},
          {"intermediate_size", 1856},
          {"vocab_size", 131072},
          {"mlp_hidden_act", "relu2"},
          {"mamba_num_heads", 64},
          {"mamba_head_dim", 64},
          {"ssm_state_size", 128},
          {"n_groups", 8},
          {"conv_kernel", 4},
          {"chunk_size", 128},
          {"expand", 2},
          {"n_routed_experts", 128},
          {"num_experts_per_tok", 6},
          {"moe_intermediate_size", 1856},
          {"moe_shared_expert_intermediate_size", 3712},
          {"n_shared_experts", 1},
          {"tie_word_embeddings", false},
          {"attention_dropout", 0.0},
          {"hidden_dropout", 0.0}};
}

std::string hf_error(const nlohmann::json& doc) {
  try {
    (void)io::parse_hf_config(doc.dump(2), "c.json");
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(Hybrid, ConfigJsonIsThePreset) {
  const test::ModelRun preset = io::load_model("nemotron-3-nano");
  const TransformerConfig& p = preset.transformer();
  for (const bool as_list : {false, true}) {
    nlohmann::json doc = nano_config();
    if (as_list) {
      // Later NemotronHConfig versions give the kinds by name (layers_block_type).
      nlohmann::json kinds = nlohmann::json::array();
      for (const char c : p.hybrid_pattern)
        kinds.push_back(c == 'M' ? "mamba" : c == '*' ? "attention" : c == '-' ? "mlp" : "moe");
      doc.erase("hybrid_override_pattern");
      doc["layers_block_type"] = kinds;
    }
    const test::ModelRun read = io::parse_hf_config(doc.dump(2), "nano/config.json");
    const TransformerConfig& m = read.transformer();
    EXPECT_EQ(m.hybrid_pattern, p.hybrid_pattern);
    EXPECT_EQ(m.layers, p.layers);
    ASSERT_TRUE(m.mamba && m.moe);
    EXPECT_EQ(m.mamba->heads, p.mamba->heads);
    EXPECT_EQ(m.mamba->groups, p.mamba->groups);
    EXPECT_EQ(m.moe->shared_expert_ffn_hidden, p.moe->shared_expert_ffn_hidden);
    EXPECT_FALSE(m.gated_mlp);
    EXPECT_EQ(m.head_dim, p.head_dim);
    EXPECT_DOUBLE_EQ(total_params(workload(read)), total_params(workload(preset)));
  }
}

TEST(Hybrid, ConfigJsonRefusesWhatItCannotRead) {
  nlohmann::json doc = nano_config();
  doc["num_hidden_layers"] = 50;
  EXPECT_NE(hf_error(doc).find("num_hidden_layers: 50 layers, and the hybrid pattern has 52"),
            std::string::npos)
      << hf_error(doc);
  doc = nano_config();
  doc["moe_latent_size"] = 1024;
  EXPECT_NE(hf_error(doc).find("moe_latent_size: LatentMoE"), std::string::npos) << hf_error(doc);
  doc = nano_config();
  doc["hybrid_override_pattern"] = "MEM/";
  EXPECT_NE(hf_error(doc).find("hybrid_override_pattern: '/' at layer 3"), std::string::npos)
      << hf_error(doc);
  doc = nano_config();
  doc["mtp_hybrid_override_pattern"] = "*E";
  EXPECT_NE(hf_error(doc).find("multi-token prediction of a hybrid model"), std::string::npos)
      << hf_error(doc);
  doc = nano_config();
  doc.erase("mamba_num_heads");
  EXPECT_NE(hf_error(doc).find("missing: a NemotronHForCausalLM config.json gives the Mamba "
                               "layers' heads"),
            std::string::npos)
      << hf_error(doc);
}

TEST(Hybrid, CostListsOneLayerOfEachKind) {
  test::ModelRun nano = io::load_model("nemotron-3-nano");
  nano.layout.ep = 8;
  nano.layout.dp = 8;
  const auto b =
      cost::operator_breakdown(nano.model, nano.job, nano.layout, io::load_system("gb200-nvl72"));
  std::vector<std::string> kinds;
  for (const auto& [name, cost] : b.blocks) {
    kinds.push_back(name);
    EXPECT_GT(cost.forward.seconds, 0.0) << name;
  }
  // Nemotron 3 Nano has no MLP layer (-).
  EXPECT_EQ(kinds, (std::vector<std::string>{"mamba", "attention", "moe"}));
  const auto has = [&](std::string_view part, std::string_view op) {
    return std::any_of(b.rows.begin(), b.rows.end(),
                       [&](const auto& r) { return r.part == part && r.op.name == op; });
  };
  EXPECT_TRUE(has("mamba", "mamba.ssd.chunk_scan"));
  EXPECT_TRUE(has("attention", "attention.flash"));
  EXPECT_TRUE(has("moe", "moe.dispatch"));
  EXPECT_FALSE(has("attention", "layernorm2"));  // the MoE layer's norm, not attention's
  EXPECT_TRUE(has("moe", "layernorm2"));
  const std::string text = cost::breakdown_text(b);
  EXPECT_NE(text.find("  mamba      F "), std::string::npos) << text;
  EXPECT_EQ(text.find("  layer      F "), std::string::npos) << text;
  EXPECT_TRUE(cost::to_json(b).contains("blocks"));
}

TEST(Hybrid, MegatronArgumentsLeaveTheHybridToTheModel) {
  // pretrain_mamba.py's model flags are the model file's (hybrid_pattern, [mamba]), as every
  // other architecture flag is: listed as ignored, with the reason.
  const auto f = io::parse_megatron_args(
      "--tensor-model-parallel-size 1 --micro-batch-size 2 --global-batch-size 64 "
      "--seq-length 8192 --bf16 --is-hybrid-model --hybrid-override-pattern MEMEM*E "
      "--mamba-num-heads 64 --mamba-head-dim 64 --mamba-state-dim 128 --mamba-num-groups 8\n",
      "nano.args", 8);
  for (const char* flag : {"--is-hybrid-model", "--hybrid-override-pattern", "--mamba-num-heads",
                           "--mamba-head-dim", "--mamba-state-dim", "--mamba-num-groups"}) {
    const std::string entry = std::string(flag) + ": the model comes from --model";
    EXPECT_TRUE(std::any_of(f.ignored.begin(), f.ignored.end(), [&](const std::string& e) {
      return e.find(entry) != std::string::npos;
    })) << flag;
  }
}

TEST(Hybrid, SimulatesDeterministicallyWithExpertParallelism) {
  SimulationSetup s =
      test::setup_of(io::load_model("nemotron-3-nano"), io::load_system("dgx-b200"));
  apply_setting(s, {"stack", "megatron-core", "test"});
  s.job.micro_batch = 1;
  s.layout.dp = 4;
  s.layout.ep = 4;
  require_runnable(s.model, s.job, s.layout);
  ScheduleParams p;
  p.devices = 2;
  p.microbatches = 4;
  const auto a = simulate_table(test::make("1f1b", p), s, "1f1b").metrics;
  const auto b = simulate_table(test::make("1f1b", p), s, "1f1b").metrics;
  EXPECT_GT(a.runtime_s, 0.0);
  EXPECT_TRUE(std::isfinite(a.runtime_s));
  EXPECT_EQ(a.runtime_s, b.runtime_s);
  EXPECT_EQ(a.peak_memory_bytes, b.peak_memory_bytes);
  // The experts' all-to-alls run: some expert communication is exposed or hidden in the layers.
  EXPECT_GT(a.expert_comm_s[0] + a.compute_s[0], 0.0);
}

}  // namespace
}  // namespace pipetab
