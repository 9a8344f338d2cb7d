#include <cctype>
#include <string>

#include <fmt/format.h>

#include "pipetab/error.hpp"
#include "pipetab/model/transformer.hpp"

namespace pipetab {

namespace {

// Expert parallelism (Megatron-Core's MoE parallel folding, arXiv 2504.14960 §3): EP × ETP
// ranks of the stage's TP × CP × DP hold each MoE layer's experts.
void require_expert_layout(const TransformerConfig& m, const Layout& l) {
  if (l.ep < 1 || l.etp < 1) {
    throw ParamError(
        fmt::format("--ep {} --etp {}: expert parallelism needs 1 or more ranks", l.ep, l.etp));
  }
  if (!m.moe) {
    if (l.ep > 1 || l.etp > 1) {
      throw ParamError(fmt::format(
          "--ep {} --etp {}: expert parallelism spreads a mixture of experts' experts, and the "
          "model has none ([moe])",
          l.ep, l.etp));
    }
    return;
  }
  const MoeConfig& moe = *m.moe;
  if (moe.experts % l.ep != 0) {
    throw ParamError(fmt::format(
        "--ep {}: expert parallelism gives each rank the same number of experts, and {} experts "
        "do not divide evenly",
        l.ep, moe.experts));
  }
  if (moe.expert_ffn_hidden % l.etp != 0) {
    throw ParamError(
        fmt::format("--etp {}: expert tensor parallelism splits each expert's hidden width {} "
                    "(expert_ffn_hidden), which does not divide evenly",
                    l.etp, moe.expert_ffn_hidden));
  }
  if (l.tp > 1 && !m.sequence_parallel) {
    throw ParamError(fmt::format(
        "--tp {}: a mixture of experts with tensor parallelism needs sequence parallelism "
        "(Megatron-Core requires it: each TP rank routes its own 1/tp of the tokens); add "
        "--sequence-parallel, or set sequence_parallel = true in the model file",
        l.tp));
  }
  const std::int64_t ranks = l.tp * l.cp * l.dp;
  if (ranks % (l.ep * l.etp) != 0) {
    throw ParamError(fmt::format(
        "--ep {} --etp {}: the experts' ranks are drawn from a stage's TP × CP × DP = {} × {} × "
        "{} = {} ranks (parallel folding: ETP × EP × EDP = TP × CP × DP), and EP × ETP = {} "
        "does not divide them",
        l.ep, l.etp, l.tp, l.cp, l.dp, ranks, l.ep * l.etp));
  }
}

}  // namespace

void require_layout(const TransformerConfig& m, const Layout& l) {
  if (l.tp < 1)
    throw ParamError(fmt::format("--tp {}: tensor parallelism needs 1 or more ranks", l.tp));
  if (const auto misfit = tensor_parallel_misfit(m, l.tp)) {
    throw ParamError(fmt::format(
        "--tp {}: tensor parallelism splits the {} over its ranks, and {} {} do not divide "
        "evenly",
        l.tp, misfit->what, misfit->value, misfit->what));
  }
  if (l.cp < 1)
    throw ParamError(fmt::format("--cp {}: context parallelism needs 1 or more ranks", l.cp));
  if (l.cp > 1) {
    if (!m.flash_attention) {
      throw ParamError(fmt::format(
          "--cp {}: context parallelism runs inside fused attention (Transformer Engine's and "
          "PyTorch's CP patch FlashAttention-style kernels); the model has flash_attention = "
          "false",
          l.cp));
    }
    if (m.seq_len % (2 * l.cp) != 0) {
      throw ParamError(fmt::format(
          "--cp {}: the sequence of {} tokens must split into 2·cp = {} equal chunks (causal "
          "load balancing gives rank r chunks r and 2·cp−1−r)",
          l.cp, m.seq_len, 2 * l.cp));
    }
    if (l.cp_method == CpMethod::AllToAll) {
      const std::int64_t kv = m.kv_heads > 0 ? m.kv_heads : m.heads;
      for (const auto& [what, n] : {std::pair{"heads", m.heads}, std::pair{"kv_heads", kv}}) {
        if ((n / l.tp) % l.cp != 0) {
          throw ParamError(fmt::format(
              "--cp {} --cp-method a2a: Ulysses spreads the {} per tensor-parallel rank ({} / "
              "tp {} = {}) over the CP ranks, and they do not divide evenly; use --cp-method "
              "ring or allgather",
              l.cp, what, n, l.tp, n / l.tp));
        }
      }
    }
  }
  require_expert_layout(m, l);
  if (l.fsdp.shard == 1) {
    throw ParamError(
        "--fsdp-shard 1: a shard group of one rank shards nothing; leave --fsdp out for "
        "replicated data parallelism");
  }
}

}  // namespace pipetab
