#include <fmt/format.h>

#include "pipetab/error.hpp"
#include "pipetab/model/transformer.hpp"

namespace pipetab {

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
  if (l.fsdp.shard == 1) {
    throw ParamError(
        "--fsdp-shard 1: a shard group of one rank shards nothing; leave --fsdp out for "
        "replicated data parallelism");
  }
}

}  // namespace pipetab
