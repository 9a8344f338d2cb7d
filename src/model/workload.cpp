#include "pipetab/model/workload.hpp"

#include <algorithm>
#include <numeric>

#include "memory.hpp"
#include <fmt/format.h>

#include "pipetab/error.hpp"
#include "pipetab/model/offload_groups.hpp"
#include "pipetab/model/operators.hpp"
#include "pipetab/names.hpp"

namespace pipetab {
namespace {

void require_positive(std::int64_t value, const char* what) {
  if (value < 1) throw ParamError(fmt::format("model: {} = {} must be at least 1", what, value));
}

std::vector<StageWork> explicit_work(const ExplicitWorkload& e, std::span<const std::int32_t> units,
                                     std::int32_t devices) {
  const auto n = units.size();
  const double total_units = std::accumulate(units.begin(), units.end(), 0.0);
  std::vector<StageWork> work(n);
  for (std::size_t s = 0; s < n; ++s) {
    const double share = units[s] * static_cast<double>(devices) / total_units;
    auto& w = work[s];
    w.embedding = s == 0;
    w.output = s + 1 == n;
    w.forward_s = e.forward_s * share;
    w.input_grad_s = e.input_grad_s * share;
    w.weight_grad_s = e.weight_grad_s * share;
    w.message_bytes = e.message_bytes;
    w.activation_bytes = e.activation_bytes * share;
    w.activation_kept_for_weight_grad = e.activation_kept_for_weight_grad * share;
    w.weight_bytes = e.weight_bytes * share;
    w.param_gather_bytes = w.weight_bytes;
    w.grad_bytes = e.grad_bytes * share;
    w.optimizer_bytes = e.optimizer_bytes * share;
  }
  return work;
}

}  // namespace

// Transformer Engine's per-layer graphs as Megatron-Core's TransformerConfig allows them
// (transformer_config.py @d728871): not beside the full-iteration graph, moe_preprocess only with
// moe_router, the MoE scopes only for a mixture of experts, mlp only where a layer is dense,
// mamba only for a hybrid model, and no full recomputation outside a full-iteration graph.
namespace {
void require_graph_scope(const ModelConfig& model, const Job& job) {
  const std::uint8_t g = job.stack.graph_modules;
  if (g == 0) return;
  const auto fail = [&](std::string_view why) {
    throw OptionError("cuda_graph_scope", fmt::format("cuda_graph_scope {}: {}",
                                                      name_set_text(kGraphModuleNames, g), why));
  };
  const auto has = [&](GraphModule m) { return (g & graph_bit(m)) != 0; };
  if (job.stack.cuda_graphs) fail("cuda_graphs already replays whole passes; give one of them");
  if (has(GraphModule::MoePreprocess) && !has(GraphModule::MoeRouter))
    fail("moe_preprocess is captured only with moe_router (Megatron-Core's rule)");
  const auto* m = model.transformer();
  const bool moe = m != nullptr && m->moe.has_value();
  if ((has(GraphModule::MoeRouter) || has(GraphModule::MoePreprocess)) && !moe)
    fail("moe_router and moe_preprocess need a mixture of experts");
  if (has(GraphModule::Mamba) && (m == nullptr || !m->hybrid()))
    fail("mamba needs a hybrid model with Mamba layers");
  if (has(GraphModule::Mlp) && moe && m->moe->dense_layers == 0 && !m->hybrid())
    fail("mlp captures dense layers' MLPs, and every layer of this model is a mixture of experts");
  if (job.recompute == Recompute::Full)
    fail("full recomputation runs only under a full-iteration graph (cuda_graphs)");
}
}  // namespace

std::string a2a_overlap_conflict(const ModelConfig& model, const Job& job, std::int64_t ep) {
  if (!job.a2a_overlap) return {};
  const TransformerConfig* t = model.transformer();
  if (t == nullptr || !t->moe) return "it overlaps the experts' all-to-alls: a mixture of experts";
  if (ep < 2) return "it needs expert parallelism (--ep above 1)";
  if (job.recompute != Recompute::None && job.recompute != Recompute::Selective)
    return fmt::format("recompute {}: it takes no full-layer recomputation or recompute method",
                       to_string(job.recompute));
  if (job.moe.recompute == MoeRecompute::Mlp)
    return "moe_recompute mlp: it takes no MoE block among the recomputed modules (moe_act is "
           "allowed)";
  if (job.moe.shared_expert_overlap)
    return "moe_shared_expert_overlap: the shared experts' overlap is its own; give one of them";
  if (t->mtp_layers > 1) return fmt::format("{} MTP layers: it takes at most one", t->mtp_layers);
  if (job.precision == Precision::FP32 || job.precision == Precision::TF32)
    return fmt::format("precision {}: it runs a BF16 or FP16 model", to_string(job.precision));
  return {};
}

void require_runnable(const ModelConfig& model, const Job& job, const Layout& layout) {
  if (layout.dp < 1 || layout.dp > kMaxDataParallel) {
    throw OptionError("data_parallel",
                      fmt::format("--dp {}: data parallelism takes 1 to {} replicas", layout.dp,
                                  kMaxDataParallel));
  }
  if (layout.fsdp.enabled && job.distributed_optimizer) {
    throw OptionError(
        "fsdp",
        "--fsdp and --distributed-optimizer: FSDP already shards the optimizer state (and the "
        "parameters and gradients) over the data-parallel ranks; give one of them");
  }
  require_graph_scope(model, job);
  if (const auto why = a2a_overlap_conflict(model, job, layout.ep); !why.empty()) {
    throw OptionError("a2a_overlap",
                      "--a2a-overlap: Megatron-Core's combined 1F1B refuses the run: " + why);
  }
  // FP8 parameters are Transformer Engine's (fp8_model_init): torchao's Float8Linear keeps the
  // 16-bit weight and casts it each forward.
  if (job.fp8_params && (job.precision != Precision::FP8 || !job.stack.fused_elementwise)) {
    throw OptionError("fp8_params",
                      job.precision != Precision::FP8
                          ? "fp8_params: the layer linears' weights in FP8 need --precision fp8"
                          : "fp8_params: FP8 weights are Transformer Engine's (fp8_model_init); "
                            "this stack casts 16-bit weights each forward (fused_elementwise off)");
  }
  // FP8 attention is Transformer Engine's (fp8_dpa) in cuDNN's fused kernel. Its recipes refuse
  // it under Float8BlockScaling ("FP8 attention is not supported", common/recipe @d0067d0) and
  // leave attention unquantised under NVFP4BlockScaling; torchao has no FP8 attention.
  if (job.fp8_attention) {
    const Fp8Recipe r = job.fp8_recipe;
    std::string why;
    if (job.precision != Precision::FP8) {
      why = "the fused attention in FP8 needs --precision fp8";
    } else if (r != Fp8Recipe::Tensorwise && r != Fp8Recipe::Delayed && r != Fp8Recipe::Mxfp8) {
      why = fmt::format(
          "fp8_recipe {}: Transformer Engine runs attention in FP8 under its tensorwise (current), "
          "delayed and mxfp8 recipes only (blockwise refuses it, nvfp4 keeps attention in BF16, "
          "torchao's rowwise has none)",
          to_string(r));
    } else if (!job.stack.flash_attention || !job.stack.fused_elementwise) {
      why = "FP8 attention is Transformer Engine's fused kernel (cuDNN): this stack runs " +
            std::string(job.stack.flash_attention ? "eager element-wise kernels"
                                                  : "attention by the math path");
    }
    if (!why.empty()) throw OptionError("fp8_attention", "fp8_attention: " + why);
  }
  // Megatron-Core recomputes modules only under selective recomputation (or none); the others
  // recompute the norm, the MLP or the up-projections already, or the layer.
  if (job.recompute != Recompute::None && job.recompute != Recompute::Selective) {
    const std::pair<bool, std::string_view> modules[] = {
        {job.moe.recompute_norm, "moe_recompute_norm"},
        {job.dense_mlp_recompute, "dense_mlp_recompute"},
        {job.mla_recompute_up_proj, "mla_recompute_up_proj"}};
    for (const auto& [on, key] : modules) {
      if (!on) continue;
      throw OptionError(std::string(key),
                        fmt::format("{} with recompute {}: Megatron-Core's recompute modules go "
                                    "with recompute none or selective",
                                    key, to_string(job.recompute)));
    }
  }
  const TransformerConfig* t = model.transformer();
  if (job.dense_mlp_recompute && (t == nullptr || t->hybrid())) {
    throw OptionError(
        "dense_mlp_recompute",
        fmt::format("dense_mlp_recompute: model '{}' is {}; the dense MLP's "
                    "recomputation is modelled for transformer layers",
                    model.name, t == nullptr ? "given by its costs" : "a hybrid pattern"));
  }
  // transformer_config.py: "mla_up_proj in recompute_modules is only supported with multi-latent
  // attention".
  if (job.mla_recompute_up_proj && (t == nullptr || t->attention != AttentionKind::Latent)) {
    throw OptionError("mla_recompute_up_proj",
                      fmt::format("mla_recompute_up_proj: model '{}' has no latent attention "
                                  "(Megatron-LM refuses mla_up_proj without it)",
                                  model.name));
  }
  require_offload_modules(model, job);
  // FSDP's options without FSDP would be dropped without a word.
  if (!layout.fsdp.enabled) {
    const FsdpOptions& f = layout.fsdp;
    const std::pair<bool, const char*> given[] = {
        {f.reshard_after_forward.has_value(), "reshard_after_forward"},
        {f.grad_sync != GradSync::Auto, "fsdp_grad_sync"},
        {f.fp8_all_gather, "fsdp_fp8_all_gather"}};
    // fsdp_impl is not among them: a stack (model/stack.hpp) names the FSDP it runs whether or
    // not the layout shards.
    for (const auto& [set, key] : given) {
      if (set)
        throw OptionError(key, fmt::format("{}: an option of FSDP, which needs --fsdp", key));
    }
  }
  if (layout.fsdp.shard > 0) {
    const std::int64_t ranks = layout.dp * layout.cp;
    if (!layout.fsdp.enabled)
      throw OptionError("fsdp_shard", "--fsdp-shard: hybrid sharding (HSDP) needs --fsdp");
    if (ranks % layout.fsdp.shard != 0) {
      throw OptionError("fsdp_shard", fmt::format("--fsdp-shard {}: the shard group must divide "
                                                  "the {} data- and context-parallel ranks "
                                                  "(--dp {} × --cp {}) into equal replicas",
                                                  layout.fsdp.shard, ranks, layout.dp, layout.cp));
    }
  }
  if (const auto* m = model.transformer()) {
    require_trainable(*m, job, layout);
  } else if (layout.tp != 1 || layout.cp != 1 || layout.ep != 1 || layout.etp != 1 ||
             layout.sequence_parallel || !layout.pipeline_layout.empty()) {
    throw OptionError(
        "tensor_parallel",
        fmt::format(
            "model '{}' gives its costs explicitly ([explicit]): --tp, --cp, --ep, --etp, "
            "--sequence-parallel and --pipeline-layout split a transformer's operators and layers "
            "and do not apply to it",
            model.name));
  }
}

std::vector<StageWork> stage_work(const ModelConfig& model, const Job& job, const Layout& layout,
                                  std::span<const std::int32_t> units, std::int32_t devices) {
  if (const auto* e = std::get_if<ExplicitWorkload>(&model.spec))
    return explicit_work(*e, units, devices);

  const auto& m = std::get<TransformerConfig>(model.spec);
  const Workload run{m, job, layout};
  require_positive(m.layers, "layers");
  require_positive(m.hidden, "hidden");
  require_positive(m.heads, "heads");
  require_positive(run.job.seq_len, "seq_len");
  require_positive(run.job.micro_batch, "micro_batch");
  require_positive(m.vocab, "vocab");
  require_positive(run.layout.tp, "tensor_parallel");
  const auto n = units.size();
  const detail::Dims d = detail::dims(run);
  const auto layers = partition_layers(m, layout, units);
  const double bs = d.b * d.s;

  // Matrix-multiply FLOPs per pass, from the operators (reference schedules.md §13: a GPT layer
  // forward 24·b·s·h² + 4·b·s²·h; I + W = 2F; recomputation adds its forward work to I).
  const ModelOperators ops = model_operators(run);
  const auto flops = [](const PassOperators& p) {
    return std::array{matmul_flops(p.forward), matmul_flops(p.input_grad),
                      matmul_flops(p.weight_grad)};
  };
  const auto layer = flops(ops.layer), output = flops(ops.output), mtp = flops(ops.mtp);
  const auto moe_layer = m.moe ? flops(ops.moe_layer) : std::array{0.0, 0.0, 0.0};

  // After I, W still needs the inputs of the weight matrices: the zero-bubble runtime keeps
  // 32·sbh of a GPT layer's 34·sbh outside the attention core (reference §7 cost model), so I
  // frees the attention core and 2/34 of the rest; with full recomputation W needs all of the
  // layer's input.
  const auto kept = [&](const detail::LayerActivation& a) {
    if (run.job.recompute == Recompute::Full) return a.total;
    if (a.weight_inputs >= 0.0) return a.weight_inputs;  // a Mamba layer's projections' inputs
    return (a.total - a.attention) * 32.0 / 34.0;
  };
  // The dense layers (a mixture of experts' first ones, or every layer of a dense model); with
  // their MLP recomputed it keeps only its input.
  const TransformerConfig dense = detail::dense_layer_model(m);
  const Workload dense_run{dense, job, layout};
  detail::Dims dense_dims = detail::dims(dense_run);
  if (detail::dense_mlp_recomputed(run)) dense_dims.ffn = 0.0;
  const auto dense_act = detail::layer_activation_bytes(dense_run, dense_dims);
  const auto moe_act = m.moe ? detail::moe_layer_activation_bytes(run) : detail::LayerActivation{};
  const auto dense_params = detail::dense_layer_params(run);
  const auto moe_params = m.moe ? detail::moe_layer_params(run) : detail::LayerParams{};
  const std::int64_t dense_layers = m.moe ? m.moe->dense_layers : m.layers;
  const double message =
      static_cast<double>(run.job.element_bytes()) * d.sbh() / d.t;  // Megatron scatter/gather
  const double act_scale = run.layout.sequence_parallel ? d.t : 1.0;
  const double step_bytes = optimizer_step_bytes_per_param(job);
  // Megatron keeps a copy of a tied word embedding on the last stage (initialize_word_embeddings)
  // and all-reduces the copies' gradients over its embedding group.
  const bool embedding_copy = !m.tie_embeddings || n > 1;
  // Multi-token prediction: each module's transformer layer is one of the stage's layers; the
  // stages after the first module send each module's hidden states on with the main one's
  // (Megatron-Core concatenates them along the sequence), and the loss stage runs the output
  // layer and the loss once per module more. A stage with modules looks up the next tokens'
  // embeddings: it keeps a copy of the word embedding unless it holds the embedding or the
  // output layer's tied copy, and that copy's gradient joins the embedding group's all-reduce
  // (Megatron-Core's embedding ranks include the MTP stage).
  const auto mtp_layers = partition_mtp_layers(m, layout, n);
  const bool moe_mtp = mtp_layer_is_moe(m);
  const double mtp_params = m.mtp_layers > 0 ? detail::mtp_params(run) : 0.0;
  const double mtp_act = m.mtp_layers > 0 ? detail::mtp_activation_bytes(run) : 0.0;
  const auto heads = static_cast<double>(1 + m.mtp_layers);  // outputs the loss stage computes
  std::int64_t mtp_before = 0;  // MTP modules on this stage and the stages before
  // The stages that hold a copy of the word embedding: the first, the last when tied (the
  // output layer's), and those with MTP modules; with two or more, each all-reduces its copy's
  // gradient with the others.
  const auto holds_embedding = [&](std::size_t s) {
    return s == 0 || (s + 1 == n && m.tie_embeddings) || mtp_layers[s] > 0;
  };
  std::size_t copies = 0;
  for (std::size_t s = 0; s < n; ++s)
    copies += holds_embedding(s) ? 1U : 0U;
  const double embedding_grad = d.V * d.h / d.t * run.job.grad_bytes_per_param;

  // A hybrid model's layers by kind (docs/simulation.md, "Hybrid models"): each kind's FLOPs,
  // activations and parameters; a stage sums them over the pattern's layers it holds.
  std::array<std::array<double, 3>, kBlockKinds> block_flops{};
  std::array<detail::LayerActivation, kBlockKinds> block_act{};
  std::array<detail::LayerParams, kBlockKinds> block_params{};
  if (m.hybrid()) {
    for (std::size_t k = 0; k < kBlockKinds; ++k)
      block_flops[k] = flops(ops.blocks[k]);
    block_act = detail::block_activation_bytes(run);
    block_params = detail::block_params(run);
  }

  std::vector<StageWork> work(n);
  std::int64_t before = 0;  // layers on the stages before, in model order
  for (std::size_t s = 0; s < n; ++s) {
    auto& w = work[s];
    w.layers = layers[s];
    w.moe_layers = std::max<std::int64_t>(
        0, before + layers[s] - std::max<std::int64_t>(before, dense_layers));
    if (m.hybrid()) {
      w.blocks = block_counts(m.hybrid_pattern, before, before + layers[s]);
      w.moe_layers = w.blocks[index(BlockKind::Moe)];
    }
    before += layers[s];
    w.mtp_layers = mtp_layers[s];
    mtp_before += w.mtp_layers;
    w.layers += w.mtp_layers;
    if (moe_mtp) w.moe_layers += w.mtp_layers;
    const double l = static_cast<double>(w.layers - w.moe_layers);
    const double e = static_cast<double>(w.moe_layers);
    const auto k = static_cast<double>(w.mtp_layers);
    w.embedding = s == 0;
    w.output = s + 1 == n;
    double linears = 0.0;  // the layer linears' parameters (FP8 training caches their FP8 copy)
    if (m.hybrid()) {
      for (std::size_t b = 0; b < kBlockKinds; ++b) {
        const auto c = static_cast<double>(w.blocks[b]);
        w.forward_flops += c * block_flops[b][0];
        w.input_grad_flops += c * block_flops[b][1];
        w.weight_grad_flops += c * block_flops[b][2];
        w.activation_bytes += c * block_act[b].total;
        w.activation_kept_for_weight_grad += c * kept(block_act[b]);
        w.params += c * block_params[b].total;
        w.expert_params += c * block_params[b].experts;
        linears += c * block_params[b].linears;
      }
    } else {
      w.forward_flops = l * layer[0] + e * moe_layer[0] + k * mtp[0];
      w.input_grad_flops = l * layer[1] + e * moe_layer[1] + k * mtp[1];
      w.weight_grad_flops = l * layer[2] + e * moe_layer[2] + k * mtp[2];
      w.activation_bytes = l * dense_act.total + e * moe_act.total + k * mtp_act;
      w.activation_kept_for_weight_grad = l * kept(dense_act) + e * kept(moe_act) + k * mtp_act;
      w.params = l * dense_params.total + e * moe_params.total + k * mtp_params;
      w.expert_params = e * moe_params.experts;
      linears = l * dense_params.linears + e * moe_params.linears;
    }
    w.layer_activation_bytes = w.activation_bytes;
    w.message_bytes = w.output ? 0.0 : message * static_cast<double>(1 + mtp_before);
    const double in_layers = w.params;
    if (w.mtp_layers > 0 && !w.embedding && !(w.output && m.tie_embeddings))
      w.params += d.V * d.h / d.t;  // the MTP modules' own copy of the word embedding
    if (copies > 1 && holds_embedding(s)) w.tied_embedding_grad_bytes = embedding_grad;
    if (w.embedding) {
      // Token ids (int64) and the embedding-dropout mask (Korthikanti, first stage).
      w.activation_bytes += 8 * bs + (m.dropout ? d.sbh() / act_scale : 0.0);
      // The word embedding is split over the vocabulary; the position table is replicated.
      w.params += d.V * d.h / d.t + (m.learned_positions ? d.keys * d.h : 0.0);
    }
    if (w.output) {
      // Logits 2·b·s·h·V FLOPs each way; the output layer's input and the fp32 logits for the
      // loss, 4·s·b·(h + V) bytes (Korthikanti's output-layer term).
      w.forward_flops += heads * output[0];
      w.input_grad_flops += heads * output[1];
      w.weight_grad_flops += heads * output[2];
      w.activation_bytes += heads * 4 * bs * (d.h + d.V) / d.t;
      // Eager PyTorch's loss (torchtitan train.py @9dec370: cross_entropy(pred.float(), labels),
      // then `del pred` before backward) keeps only log-softmax's fp32 output, the 4 bytes per
      // logit above. Its forward holds the 16-bit logits and their fp32 copy beside it while
      // log-softmax runs (6 bytes more per logit); both are freed before the backward, leaving a
      // 6-byte hole below the saved output in the caching allocator's segment. The backward
      // allocates nll_loss's dense fp32 gradient (into the hole, best fit, leaving 2 bytes) and
      // log-softmax's input gradient (4 bytes that no longer fit: the segment grows), so the
      // reserve the allocator reports (torchtitan logs reserved_bytes.all.peak, with
      // expandable_segments, run_llama_train.sh @9dec370) rises 10 bytes per logit above the
      // held activations, 8 of them allocated, with every layer's activations still held: the
      // step's peak.
      //
      // With tensor parallelism torchtitan computes the loss in loss_parallel: the logits stay
      // split over the vocabulary, and DTensor's handlers (torch/distributed/tensor/parallel/
      // loss.py, _log_softmax and _nll_loss_and_log_softmax_backward) run the decomposed ops
      // eagerly, each its own fp32 tensor. The forward holds the 16-bit logits, their fp32 copy,
      // x - max and its exp at once (14 bytes per logit, 10 above the output kept); the four
      // blocks lie in one segment in that order, so the backward finds the first three freed
      // and merged, a 10-byte hole. Its zeros_like (the one-hot gradient) and exp(output) fill 8
      // of it; their sum does not fit the 2 left and the segment grows by 4; the product reuses
      // the exp's block: 14 bytes per logit above the kept output, 4 more than the local loss.
      if (!run.job.stack.fused_elementwise || !run.job.stack.fused_loss) {
        const bool loss_parallel = run.layout.tp > 1;
        w.forward_working_bytes += heads * (loss_parallel ? 10 : 6) * bs * d.V / d.t;
        w.backward_working_bytes += heads * (loss_parallel ? 14 : 10) * bs * d.V / d.t;
      }
      // The output projection (split over the vocabulary: its own matrix, or the tied
      // embedding's copy) and the final LayerNorm (replicated).
      w.params += (embedding_copy ? d.V * d.h / d.t : 0.0) + 2 * d.h;
    }
    w.outer_params = w.params - in_layers;
    w.weight_bytes = w.params * static_cast<double>(run.job.element_bytes());
    // FP8 training with Transformer Engine keeps each layer linear's FP8 copy of its weight
    // between microbatches (one byte per parameter; its transpose too with
    // keep_fp8_transpose_cache, not counted); eager torchao casts it anew each forward.
    w.param_gather_bytes = w.weight_bytes;
    if (run.job.precision == Precision::FP8 && run.job.stack.fused_elementwise) {
      const double fp8_linears = linears;
      w.fp8_weight_copy_bytes = fp8_linears;
      // MXFP8 keeps both copies, along rows and along columns, each with its scales (a
      // transposed block-scaled tensor is not the other copy: job.hpp).
      if (run.job.fp8_recipe == Fp8Recipe::Mxfp8)
        w.fp8_weight_copy_bytes *= 2 * (1 + kMxfp8ScaleBytes);
      // NVFP4 too, at half a byte and a scale byte per 16 each way.
      if (run.job.fp8_recipe == Fp8Recipe::Nvfp4) w.fp8_weight_copy_bytes *= 2 * kNvfp4Bytes;
      if (run.job.fp8_params) {
        // The FP8 copy is the weight: no 16-bit one of the linears (model/job.hpp).
        const double sixteen_bit = fp8_linears * static_cast<double>(run.job.element_bytes());
        w.weight_bytes -= sixteen_bit;
        const bool block_scaled =
            run.job.fp8_recipe == Fp8Recipe::Mxfp8 || run.job.fp8_recipe == Fp8Recipe::Nvfp4;
        if (!block_scaled) w.param_gather_bytes -= sixteen_bit - fp8_linears;
      }
    }
    w.grad_bytes = w.params * run.job.grad_bytes_per_param;
    w.optimizer_bytes = w.params * run.job.optimizer_bytes_per_param;
    w.optimizer_step_bytes = w.params * step_bytes;
  }
  return work;
}

}  // namespace pipetab
