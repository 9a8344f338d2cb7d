// Multi-token prediction (issue 24 point 1, the layout's `m`): an MTP module's work, parameters,
// activations and messages against hand-computed values, its place in a pipeline layout, and the
// embedding group it joins.
#include <algorithm>
#include <set>

#include "helpers.hpp"
#include <gtest/gtest.h>

#include "pipetab/cost/breakdown.hpp"
#include "pipetab/io/config.hpp"
#include "pipetab/model/flops.hpp"
#include "pipetab/model/operators.hpp"
#include "pipetab/model/workload.hpp"
#include "pipetab/parallel/layout.hpp"
#include "pipetab/sim/engine.hpp"
#include "pipetab/sim/graph.hpp"
#include "pipetab/sim/simulation.hpp"

namespace pipetab {
namespace {

// A preset under its own job and layout, with `mtp` MTP modules.
test::ModelRun with_mtp(const std::string& preset, std::int64_t mtp) {
  test::ModelRun run = io::load_model(preset);
  std::get<TransformerConfig>(run.model.spec).mtp_layers = mtp;
  return run;
}

test::ModelRun with_layout(test::ModelRun run, const std::string& layout) {
  run.layout.pipeline_layout = layout;
  return run;
}

TEST(Mtp, AModuleAddsALayerItsProjectionAndOneMoreOutputToTheLastStage) {
  // Llama 3.1 8B (untied embeddings, bf16, T = 8,192 tokens, h = 4,096) on two stages of 16
  // layers, without and with one MTP module (on the last stage, as Megatron-Core places it
  // without a layout).
  const std::int32_t units[] = {1, 1};
  const auto base = test::stage_work(io::load_model("llama3.1-8b"), units, 2);
  const auto with = test::stage_work(with_mtp("llama3.1-8b", 1), units, 2);
  const double T = 8192, h = 4096, V = 128256, e = 2;
  // The first stage is unchanged but for the embedding group it now shares with the MTP stage.
  EXPECT_DOUBLE_EQ(with[0].forward_flops, base[0].forward_flops);
  EXPECT_DOUBLE_EQ(with[0].params, base[0].params);
  EXPECT_DOUBLE_EQ(with[0].message_bytes, base[0].message_bytes);
  EXPECT_DOUBLE_EQ(base[0].tied_embedding_grad_bytes, 0.0);
  EXPECT_DOUBLE_EQ(with[0].tied_embedding_grad_bytes, V * h * 4);
  EXPECT_DOUBLE_EQ(with[1].tied_embedding_grad_bytes, V * h * 4);
  EXPECT_EQ(with[1].layers, 17);
  EXPECT_EQ(with[1].mtp_layers, 1);
  EXPECT_EQ(with[1].moe_layers, 0);
  // From the first stage (16 layers and the embedding, whose lookup has no matrix multiply):
  // a layer's forward L, and the output layer's O from the second stage's excess.
  const double L = base[0].forward_flops / 16;
  const double O = base[1].forward_flops - 16 * L;
  EXPECT_NEAR(O, 2 * T * h * V, 1e-9 * O);  // the logits
  // eh_proj: [T × 2h] · [2h × h].
  EXPECT_NEAR(with[1].forward_flops, 17 * L + 2 * O + 2 * T * 2 * h * h,
              1e-12 * with[1].forward_flops);
  // Parameters: a layer, eh_proj (2h²), three norms, and the module's copy of the (untied) word
  // embedding; the layer's from the first stage less its embedding.
  const double layer_params = (base[0].params - V * h) / 16;
  EXPECT_NEAR(with[1].params, base[1].params + layer_params + 2 * h * h + 3 * h + V * h, 1.0);
  // Activations: a layer's (the first stage's less the token ids), the module's norms' inputs
  // and eh_proj's input (5·e·T·h), its token ids (8 B each), and the second output's input and
  // fp32 logits (4·T·(h + V)).
  const double layer_act = (base[0].activation_bytes - 8 * T) / 16;
  EXPECT_NEAR(with[1].activation_bytes,
              base[1].activation_bytes + layer_act + 5 * e * T * h + 8 * T + 4 * T * (h + V),
              1e-9 * with[1].activation_bytes);
  // The stages' FLOPs grow by a layer, an output layer and eh_proj, each forward and backward
  // (eh_proj's three passes are 3 × 4·T·h²); the layer's and the output's from the stages' three
  // passes.
  const auto all = [](const StageWork& x) {
    return x.forward_flops + x.input_grad_flops + x.weight_grad_flops;
  };
  const double layer_all = all(base[0]) / 16, output_all = all(base[1]) - 16 * layer_all;
  EXPECT_DOUBLE_EQ(all(with[1]), all(base[1]) + layer_all + output_all + 3 * 4 * T * h * h);
  // The model's FLOPs by PaLM's count (6 per weight and token, 12·h·s per layer and token for
  // attention's full square) grow by the same pieces, by hand: a layer (Q and O of h², K and V of
  // h·kv, three MLP matrices of h·ffn), the output layer (h·V) and eh_proj (2h²) with the module's
  // three norms (3h, Megatron-Core's num_floating_point_operations counts them).
  const double s = 8192, kv = 1024, ffn = 14336;
  const double layer = 6 * T * (2 * h * h + 2 * h * kv + 3 * h * ffn) + 12 * T * s * h;
  const double expected = layer + 6 * T * h * V + 6 * T * (2 * h * h + 3 * h);
  const test::ModelRun r0 = io::load_model("llama3.1-8b");
  const auto r1 = with_mtp("llama3.1-8b", 1);
  const auto m0 = test::workload(r0), m1 = test::workload(r1);
  EXPECT_NEAR(iteration_flops(m1, 1).model - iteration_flops(m0, 1).model, expected,
              1e-12 * expected);
  // mtp_layers is 0 .. 64, and the reader names the file, line and key.
  try {
    (void)io::parse_model(
        "[transformer]\nlayers = 4\nhidden = 64\nheads = 4\nseq_len = 32\nvocab = 100\n"
        "mtp_layers = 65\n",
        "m.toml");
    ADD_FAILURE() << "mtp_layers = 65 accepted";
  } catch (const Error& error) {
    EXPECT_STREQ(error.what(),
                 "m.toml:7:14: key 'transformer.mtp_layers': 65 is out of range (0..64)");
  }
}

TEST(Mtp, LayoutPlacesTheModuleAndItsHiddenStatesTravelOnToTheLoss) {
  // Llama 3.1 8B on four stages, the module alone on the third stage's end, the loss alone.
  const auto model = with_layout(with_mtp("llama3.1-8b", 1), "Et*10|t*11|t*11m|L");
  const std::int32_t units[] = {1, 1, 1, 1};
  const auto w = test::stage_work(model, units, 4);
  EXPECT_EQ(w[2].layers, 12);
  EXPECT_EQ(w[2].mtp_layers, 1);
  EXPECT_EQ(w[3].layers, 0);
  // The module's stage sends the main and the module's hidden states (Megatron-Core
  // concatenates them): twice a boundary's s·b·h·2 bytes.
  EXPECT_DOUBLE_EQ(w[0].message_bytes, 8192.0 * 4096 * 2);
  EXPECT_DOUBLE_EQ(w[1].message_bytes, w[0].message_bytes);
  EXPECT_DOUBLE_EQ(w[2].message_bytes, 2 * w[0].message_bytes);
  // The loss stage runs the output layer twice; only it and nothing else.
  const auto single =
      test::stage_work(with_layout(io::load_model("llama3.1-8b"), "Et*10|t*11|t*11|L"), units, 4);
  EXPECT_DOUBLE_EQ(w[3].forward_flops, 2 * single[3].forward_flops);
  // Untied: the word embedding's copies are the first stage's and the module's.
  EXPECT_GT(w[0].tied_embedding_grad_bytes, 0.0);
  EXPECT_EQ(w[1].tied_embedding_grad_bytes, 0.0);
  EXPECT_GT(w[2].tied_embedding_grad_bytes, 0.0);
  EXPECT_EQ(w[3].tied_embedding_grad_bytes, 0.0);
  // A layout whose m count is not the model's is refused where the layout is applied.
  const auto refused = with_layout(with_mtp("llama3.1-8b", 1), "Et*10|t*11|t*11|L");
  EXPECT_EQ(
      test::param_error([&] { require_runnable(refused.model, refused.job, refused.layout); }),
      "--pipeline-layout 'Et*10|t*11|t*11|L': 0 MTP layers (m), and the model has 1 "
      "(mtp_layers)");
}

TEST(Mtp, DeepSeekV3sModuleIsAMixtureOfExpertsLayer) {
  // Its transformer layer is the last layer's kind: a MoE layer for DeepSeek-V3 (Megatron-Core's
  // get_gpt_mtp_block_spec), so the stage holds one more MoE layer and its experts.
  const test::ModelRun model = io::load_model("deepseek-v3");
  ASSERT_EQ(model.model.transformer()->mtp_layers, 1);
  EXPECT_TRUE(mtp_layer_is_moe(*model.model.transformer()));
  const std::int32_t units[] = {1, 1};
  auto without = model;
  std::get<TransformerConfig>(without.model.spec).mtp_layers = 0;
  const auto a = test::stage_work(without, units, 2), b = test::stage_work(model, units, 2);
  EXPECT_EQ(b[1].moe_layers, a[1].moe_layers + 1);
  const auto moe = static_cast<double>(a[1].moe_layers);
  EXPECT_DOUBLE_EQ(b[1].expert_params, a[1].expert_params * (moe + 1) / moe);
  // DeepSeek-V3's README: 685B on Hugging Face, 671B of the main model and 14B of the MTP
  // module, whose weights include their own embedding and output head. total_params counts the
  // main model; the module's stage grows by its MoE layer, eh_proj, its norms and its copy of
  // the (untied) embedding, and with the head that makes the 14B (both figures rounded: 1B).
  EXPECT_NEAR(total_params(test::workload(model)) / 1e9, 671, 1.0);
  const double h = 7168, V = 129280;
  EXPECT_NEAR((b[1].params - a[1].params + V * h) / 1e9, 14, 1.0);
}

TEST(Mtp, TensorParallelProjectionGathersItsOutput) {
  // eh_proj is column-parallel (gather_output = False) and Megatron-Core gathers its output
  // along the hidden dimension: at TP 2 with sequence parallelism an all-gather of the 2h input
  // before it and of the s·b·h output after it; its FLOPs per rank 2·T·2h·h/2.
  auto model = with_mtp("llama3.1-8b", 1);
  model.layout.tp = 2;
  model.layout.sequence_parallel = true;
  const auto ops = model_operators(test::workload(model));
  const double T = 8192, h = 4096;
  const auto* proj = test::find_op(ops.mtp.forward, "mtp.eh_proj");
  ASSERT_NE(proj, nullptr);
  EXPECT_DOUBLE_EQ(proj->flops, 2 * T * 2 * h * h / 2);
  const auto* in = test::find_op(ops.mtp.forward, "mtp.eh_proj.all_gather");
  const auto* out = test::find_op(ops.mtp.forward, "mtp.eh_proj.gather_output");
  ASSERT_NE(in, nullptr);
  ASSERT_NE(out, nullptr);
  EXPECT_EQ(in->collective, CollectiveKind::AllGather);
  EXPECT_DOUBLE_EQ(in->collective_bytes, 2 * 2 * T * h);
  EXPECT_DOUBLE_EQ(out->collective_bytes, 2 * T * h);
  // Backward: the input gradient reduce-scattered (2h wide), the output's gradient gathered
  // along the sequence.
  const auto* rs = test::find_op(ops.mtp.input_grad, "mtp.eh_proj.reduce_scatter");
  ASSERT_NE(rs, nullptr);
  EXPECT_DOUBLE_EQ(rs->collective_bytes, 2 * 2 * T * h);
  // The module's own operators are a part of the breakdown.
  const auto b =
      cost::operator_breakdown(model.model, model.job, model.layout, io::load_system("dgx-h100"));
  ASSERT_TRUE(b.mtp.has_value());
  EXPECT_GT(b.mtp->forward.seconds, 0.0);
  EXPECT_TRUE(std::any_of(b.rows.begin(), b.rows.end(), [](const auto& r) {
    return std::string(r.part) == "mtp" && r.op.name == "mtp.eh_proj";
  }));
}

TEST(Mtp, TheModulesStageJoinsTheEmbeddingAllReduce) {
  // GPT-3 1.3B (tied embeddings) on 4 stages, the module on the third: the word embedding's
  // copies are the first stage's, the module's and the last stage's output layer: one ring of
  // three members, 2·(3 − 1) steps each of a third of the fp32 gradient.
  const auto model = with_layout(with_mtp("gpt3-1.3b", 1), "Et*8|t*8|t*8m|L");
  const auto system = io::load_system("dgx-h100");
  const auto t = test::make("1f1b", test::sm(4, 8));
  const Network network(system, t.devices);
  const auto g = lower(t, model.model, model.job, model.layout, network, {});
  std::set<std::int32_t> senders;
  int transfers = 0;
  for (std::int64_t k = 0; k < g.transfers(); ++k) {
    const auto i = static_cast<std::size_t>(k);
    if (g.kind[i] != TransferKind::EmbeddingAllReduce) continue;
    ++transfers;
    EXPECT_DOUBLE_EQ(g.bytes[i], 50257.0 * 2048 * 4 / 3);
    senders.insert(g.device[static_cast<std::size_t>(g.compute_nodes) + i]);
  }
  EXPECT_EQ(transfers, 12);
  EXPECT_EQ(senders, (std::set<std::int32_t>{0, 2, 3}));
  const auto r = simulate(g, network, {});
  EXPECT_GT(r.runtime_s, 0.0);
}

}  // namespace
}  // namespace pipetab
