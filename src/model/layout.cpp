#include <cctype>
#include <string>

#include <fmt/format.h>

#include "pipetab/error.hpp"
#include "pipetab/model/transformer.hpp"

namespace pipetab {

namespace {

// Transformer Engine's GroupedLinear refuses biases over tensor-parallel ranks ("GroupedLinear
// doesn't support bias when TP > 1", module/grouped_linear.py @v2.12-v2.14), and Megatron-Core
// builds the experts' linears over the expert-tensor-parallel group. Its own function, never
// inlined: `plan` rejects layouts by the exceptions these checks throw, and this check's call
// sites inside the functions they unwind through made a dense plan 9% slower (farm-bench, `plan
// --model llama2-70b --gpus 1024`), though it never throws there.
[[gnu::noinline]] void require_expert_bias_layout(const TransformerConfig& m, const Layout& l) {
  if (m.moe && m.moe->expert_bias && l.etp > 1) {
    throw OptionError("expert_tensor_parallel",
                      fmt::format("--etp {}: the experts' biases (expert_bias) need expert tensor "
                                  "parallelism 1: Transformer Engine's GroupedLinear has no bias "
                                  "over tensor-parallel ranks",
                                  l.etp));
  }
}

// Expert parallelism (Megatron-Core's MoE parallel folding, arXiv 2504.14960 §3): EP × ETP
// ranks of the stage's TP × CP × DP hold each MoE layer's experts.
void require_expert_layout(const TransformerConfig& m, const Job& job, const Layout& l) {
  if (l.ep < 1 || l.etp < 1) {
    throw OptionError(
        "expert_parallel",
        fmt::format("--ep {} --etp {}: expert parallelism needs 1 or more ranks", l.ep, l.etp));
  }
  if (!m.moe) {
    if (l.ep > 1 || l.etp > 1) {
      throw OptionError(
          "expert_parallel",
          fmt::format(
              "--ep {} --etp {}: expert parallelism spreads a mixture of experts' experts, and the "
              "model has none ([moe])",
              l.ep, l.etp));
    }
    if (job.moe != MoeJob{}) {
      throw ParamError(
          "the job sets how a mixture of experts runs (its dispatcher, capacity, imbalance, FP8 "
          "dispatch, shared-expert overlap or recomputation), and the model has no experts "
          "([moe])");
    }
    return;
  }
  const MoeConfig& moe = *m.moe;
  if (moe.experts % l.ep != 0) {
    throw OptionError("expert_parallel", fmt::format("--ep {}: expert parallelism gives each rank "
                                                     "the same number of experts, and {} experts "
                                                     "do not divide evenly",
                                                     l.ep, moe.experts));
  }
  if (moe.expert_ffn_hidden % l.etp != 0) {
    throw OptionError(
        "expert_tensor_parallel",
        fmt::format("--etp {}: expert tensor parallelism splits each expert's hidden width {} "
                    "(expert_ffn_hidden), which does not divide evenly",
                    l.etp, moe.expert_ffn_hidden));
  }
  if (l.tp > 1 && !l.sequence_parallel) {
    throw OptionError(
        "sequence_parallel",
        fmt::format(
            "--tp {}: a mixture of experts with tensor parallelism needs sequence parallelism "
            "(Megatron-Core requires it: each TP rank routes its own 1/tp of the tokens); add "
            "--sequence-parallel (sequence_parallel = true in a file)",
            l.tp));
  }
  const std::int64_t ranks = l.tp * l.cp * l.dp;
  if (ranks % (l.ep * l.etp) != 0) {
    throw OptionError(
        "expert_parallel",
        fmt::format(
            "--ep {} --etp {}: the experts' ranks are drawn from a stage's TP × CP × DP = {} × {} "
            "× "
            "{} = {} ranks (parallel folding: ETP × EP × EDP = TP × CP × DP), and EP × ETP = {} "
            "does not divide them",
            l.ep, l.etp, l.tp, l.cp, l.dp, ranks, l.ep * l.etp));
  }
  // The busiest rank takes at most every token the layer routes: at most experts / top_k times
  // the balanced share.
  const double most = static_cast<double>(moe.experts) / static_cast<double>(moe.top_k);
  if (!(job.moe.imbalance >= 1.0 && job.moe.imbalance <= most)) {
    throw OptionError(
        "moe_imbalance",
        fmt::format(
            "moe imbalance {:g}: the busiest expert-parallel rank takes between 1 (balanced) and "
            "experts / top_k = {:g} times the mean",
            job.moe.imbalance, most));
  }
  // Under a tenth of the balanced share drops nine tokens in ten: no training run does, and a
  // factor such as 1e-320 once priced the experts at nothing.
  if (job.moe.capacity_factor && !(*job.moe.capacity_factor >= 0.1)) {
    throw OptionError(
        "moe_capacity_factor",
        fmt::format("moe capacity factor {:g}: expected at least 0.1 (an expert takes that many "
                    "times its balanced share of the tokens; 1 to 2 in published runs)",
                    *job.moe.capacity_factor));
  }
  // With a capacity every expert's input is padded to it (MoeJob::load), so an imbalance
  // changes nothing: given both, one was silently dropped.
  if (job.moe.capacity_factor && job.moe.imbalance != 1.0) {
    throw OptionError(
        "moe_imbalance",
        fmt::format("moe imbalance {:g} with capacity factor {:g}: with a capacity every "
                    "expert's input is padded to it, so the busiest rank takes the capacity "
                    "whatever the imbalance; give one of the two",
                    job.moe.imbalance, *job.moe.capacity_factor));
  }
  if (job.moe.shared_expert_overlap && moe.shared_experts == 0) {
    throw OptionError("moe_shared_expert_overlap",
                      "moe shared_expert_overlap: the model has no shared expert to run beside the "
                      "all-to-alls (shared_experts = 0)");
  }
}

}  // namespace

std::optional<std::string> hybrid_pattern_misfit(std::string_view pattern, std::int64_t layers) {
  if (static_cast<std::int64_t>(pattern.size()) != layers) {
    return fmt::format("{} symbols for layers = {}: expected one symbol per layer", pattern.size(),
                       layers);
  }
  if (const auto bad = pattern.find_first_not_of(kBlockSymbols); bad != std::string_view::npos) {
    return fmt::format(
        "'{}' at layer {}: expected M (Mamba), * (attention), - (MLP) or E "
        "(mixture of experts), Megatron-Core's hybrid symbols",
        pattern[bad], bad);
  }
  return std::nullopt;
}

namespace {

// A hybrid model's pattern and what pipetab models of it (docs/simulation.md, "Hybrid models").
void require_hybrid(const TransformerConfig& m, const Job& job, const Layout& l) {
  const std::string& p = m.hybrid_pattern;
  if (const auto misfit = hybrid_pattern_misfit(p, m.layers))
    throw OptionError("hybrid_pattern", "hybrid pattern: " + *misfit);
  const auto counts = block_counts(p, 0, m.layers);
  if (counts[index(BlockKind::Mamba)] > 0) {
    if (!m.mamba) {
      throw OptionError("hybrid_pattern",
                        "the hybrid pattern has Mamba layers (M) and the model no [mamba] table");
    }
    const MambaConfig& x = *m.mamba;
    for (const auto& [what, v] :
         {std::pair{"heads", x.heads}, std::pair{"head_dim", x.head_dim},
          std::pair{"state", x.state}, std::pair{"groups", x.groups},
          std::pair{"conv_kernel", x.conv_kernel}, std::pair{"chunk", x.chunk}}) {
      if (v < 1)
        throw OptionError(fmt::format("mamba.{}", what),
                          fmt::format("mamba {} = {}: expected 1 or more", what, v));
    }
    if (x.heads % x.groups != 0) {
      throw OptionError("mamba.groups",
                        fmt::format("mamba groups = {}: the {} heads share B and C by group, and "
                                    "the groups must divide them",
                                    x.groups, x.heads));
    }
  }
  if (counts[index(BlockKind::Moe)] > 0 && !m.moe) {
    throw OptionError("hybrid_pattern",
                      "the hybrid pattern has mixture-of-experts layers (E) and the model no "
                      "[moe] table");
  }
  if (m.moe && m.moe->dense_layers > 0) {
    throw OptionError("moe.dense_layers",
                      fmt::format("dense_layers = {} in a hybrid model: its pattern places the MLP "
                                  "(-) and expert (E) layers; leave dense_layers out",
                                  m.moe->dense_layers));
  }
  if (m.mtp_layers > 0) {
    throw OptionError("mtp_layers",
                      "multi-token prediction of a hybrid model (Megatron-Core's "
                      "mtp_hybrid_override_pattern) is not modelled");
  }
  if (l.cp > 1) {
    throw OptionError("context_parallel",
                      fmt::format("--cp {}: context parallelism of a hybrid model (its Mamba "
                                  "layers' state passed between ranks) is not modelled",
                                  l.cp));
  }
  if (job.recompute != Recompute::None && job.recompute != Recompute::Selective &&
      job.recompute != Recompute::Full) {
    throw OptionError(
        "recompute",
        fmt::format("recompute = {}: a hybrid model is Megatron-Core's; it recomputes none, "
                    "selective (the attention layers' core) or full",
                    to_string(job.recompute)));
  }
}

}  // namespace

void require_trainable(const TransformerConfig& m, const Job& job, const Layout& l) {
  if (job.seq_len < 1) {
    throw OptionError(
        "seq_len",
        "no sequence length: give --seq-len (or seq_len in a job file, a model file or a study)");
  }
  if (job.micro_batch < 1)
    throw OptionError("micro_batch",
                      fmt::format("--micro-batch {}: expected 1 or more", job.micro_batch));
  if (l.sequence_parallel && l.tp == 1) {
    throw OptionError(
        "sequence_parallel",
        "--sequence-parallel needs --tp > 1: sequence parallelism splits the norms and dropouts "
        "along the tensor-parallel ranks");
  }
  if (m.attention == AttentionKind::Latent && !job.stack.flash_attention) {
    throw OptionError(
        "flash_attention",
        "latent attention needs flash_attention = true (MLA runs in fused attention kernels)");
  }
  if (l.tp < 1)
    throw OptionError("tensor_parallel",
                      fmt::format("--tp {}: tensor parallelism needs 1 or more ranks", l.tp));
  if (const auto misfit = tensor_parallel_misfit(m, l.tp)) {
    throw OptionError(
        "tensor_parallel",
        fmt::format(
            "--tp {}: tensor parallelism splits the {} over its ranks, and {} {} do not divide "
            "evenly",
            l.tp, misfit->what, misfit->value, misfit->what));
  }
  if (l.cp < 1)
    throw OptionError("context_parallel",
                      fmt::format("--cp {}: context parallelism needs 1 or more ranks", l.cp));
  if (l.cp > 1) {
    if (!job.stack.flash_attention) {
      throw OptionError(
          "context_parallel",
          fmt::format(
              "--cp {}: context parallelism runs inside fused attention (Transformer Engine's and "
              "PyTorch's CP patch FlashAttention-style kernels); the job runs with flash_attention "
              "= "
              "false",
              l.cp));
    }
    if (job.seq_len % (2 * l.cp) != 0) {
      throw OptionError(
          "context_parallel",
          fmt::format(
              "--cp {}: the sequence of {} tokens must split into 2·cp = {} equal chunks (causal "
              "load balancing gives rank r chunks r and 2·cp−1−r)",
              l.cp, job.seq_len, 2 * l.cp));
    }
    if (l.cp_method == CpMethod::AllToAll) {
      const std::int64_t kv = m.kv_heads > 0 ? m.kv_heads : m.heads;
      for (const auto& [what, n] : {std::pair{"heads", m.heads}, std::pair{"kv_heads", kv}}) {
        if ((n / l.tp) % l.cp != 0) {
          throw OptionError(
              "cp_method",
              fmt::format(
                  "--cp {} --cp-method a2a: Ulysses spreads the {} per tensor-parallel rank ({} / "
                  "tp {} = {}) over the CP ranks, and they do not divide evenly; use --cp-method "
                  "ring or allgather",
                  l.cp, what, n, l.tp, n / l.tp));
        }
      }
    }
  }
  if (m.hybrid()) require_hybrid(m, job, l);
  require_expert_layout(m, job, l);
  require_expert_bias_layout(m, l);
  // A pipeline layout must parse and hold the model's layers; that it names the table's stages
  // is checked where the model is cut into them (partition_layers).
  if (!l.pipeline_layout.empty()) {
    try {
      (void)parse_pipeline_layout(l.pipeline_layout, m.layers, m.mtp_layers);
    } catch (const ParamError& e) {
      throw OptionError("pipeline_layout", e.what());
    }
  }
  if (l.fsdp.shard == 1) {
    throw OptionError(
        "fsdp_shard",
        "--fsdp-shard 1: a shard group of one rank shards nothing; leave --fsdp out for "
        "replicated data parallelism");
  }
}

}  // namespace pipetab
