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

namespace {

// Recursive descent over the layout's text, expanding repetitions into a flat string of E, t,
// m, L and |.
class LayoutParser {
 public:
  explicit LayoutParser(std::string_view text) : text_(text) {}

  std::string parse() {
    std::string out = sequence(0);
    if (pos_ < text_.size()) fail("an unmatched ')'");
    return out;
  }

 private:
  [[noreturn]] void fail(const std::string& what) const {
    throw ParamError(
        fmt::format("--pipeline-layout '{}': {} at character {}", text_, what, pos_ + 1));
  }

  // Megatron-Core drops commas before parsing (parse_str_to_list), so "(tt|)*29,m|L" reads as
  // "(tt|)*29m|L"; they are spaces here.
  void skip_space() {
    while (pos_ < text_.size() &&
           (std::isspace(static_cast<unsigned char>(text_[pos_])) != 0 || text_[pos_] == ','))
      ++pos_;
  }

  // "*N" after an item, or 1.
  std::int64_t repeat() {
    skip_space();
    if (pos_ >= text_.size() || text_[pos_] != '*') return 1;
    ++pos_;
    skip_space();
    std::int64_t n = 0;
    const auto start = pos_;
    while (pos_ < text_.size() && std::isdigit(static_cast<unsigned char>(text_[pos_])) != 0) {
      n = n * 10 + (text_[pos_++] - '0');
      if (n > (1 << 20)) fail("a repetition over 1048576");
    }
    if (pos_ == start) fail("expected a count after '*'");
    if (n < 1) fail("a repetition of 0");
    return n;
  }

  std::string sequence(int depth) {
    std::string out;
    while (true) {
      skip_space();
      if (pos_ >= text_.size() || text_[pos_] == ')') break;
      const char c = text_[pos_];
      std::string item;
      if (c == '(') {
        if (depth > 64) fail("parentheses nested too deep");
        ++pos_;
        item = sequence(depth + 1);
        if (pos_ >= text_.size() || text_[pos_] != ')') fail("a '(' without its ')'");
        ++pos_;
      } else if (c == 'E' || c == 't' || c == 'm' || c == 'L' || c == '|') {
        item = std::string(1, c);
        ++pos_;
      } else {
        fail(
            fmt::format("'{}' is not E (embedding), t (transformer layer), m (MTP), L (loss), "
                        "| (stage boundary) or (...)*N",
                        c));
      }
      const auto n = repeat();
      if (static_cast<double>(item.size()) * static_cast<double>(n) +
              static_cast<double>(out.size()) >
          1e7)
        fail("a layout over ten million symbols");
      for (std::int64_t k = 0; k < n; ++k)
        out += item;
    }
    return out;
  }

  std::string_view text_;
  std::size_t pos_ = 0;
};

}  // namespace

PipelineStages parse_pipeline_layout(std::string_view text, std::int64_t layers,
                                     std::int64_t mtp_layers) {
  const std::string flat = LayoutParser(text).parse();
  std::vector<std::string> stages(1);
  for (const char c : flat) {
    if (c == '|') {
      stages.emplace_back();
    } else {
      stages.back() += c;
    }
  }
  // A trailing '|' (as in "(tt|)*4") closes the last stage rather than opening an empty one.
  if (stages.size() > 1 && stages.back().empty()) stages.pop_back();
  PipelineStages out;
  std::int64_t total = 0, total_mtp = 0;
  for (std::size_t s = 0; s < stages.size(); ++s) {
    const auto& stage = stages[s];
    std::int64_t t = 0, mtp = 0;
    for (std::size_t k = 0; k < stage.size(); ++k) {
      const char c = stage[k];
      if (c == 'E' && (s != 0 || k != 0)) {
        throw ParamError(fmt::format(
            "--pipeline-layout '{}': the embedding (E) must open the first stage; stage {} has it",
            text, s));
      }
      if (c == 'L' && (s + 1 != stages.size() || k + 1 != stage.size())) {
        throw ParamError(fmt::format(
            "--pipeline-layout '{}': the loss (L) must close the last stage; stage {} has it", text,
            s));
      }
      // Megatron-Core's validate_layer_layout: "decoder layers must be placed before MTP layers".
      if (c == 't' && total_mtp + mtp > 0) {
        throw ParamError(fmt::format(
            "--pipeline-layout '{}': stage {} has a transformer layer (t) after an MTP layer (m); "
            "MTP layers follow every transformer layer",
            text, s));
      }
      t += c == 't';
      mtp += c == 'm';
    }
    const bool ends = s == 0 || s + 1 == stages.size();
    if (t == 0 && mtp == 0 && !ends) {
      throw ParamError(fmt::format(
          "--pipeline-layout '{}': stage {} holds no transformer layer (t) or MTP layer (m)", text,
          s));
    }
    if (stage.empty()) {
      throw ParamError(fmt::format("--pipeline-layout '{}': stage {} is empty", text, s));
    }
    out.layers.push_back(t);
    out.mtp_layers.push_back(mtp);
    total += t;
    total_mtp += mtp;
  }
  if (stages.front().find('E') == std::string::npos ||
      stages.back().find('L') == std::string::npos) {
    throw ParamError(fmt::format(
        "--pipeline-layout '{}': the first stage must start with the embedding (E) and the last "
        "end with the loss (L)",
        text));
  }
  if (total != layers) {
    throw ParamError(
        fmt::format("--pipeline-layout '{}': {} transformer layers (t), and the model has {}", text,
                    total, layers));
  }
  if (total_mtp != mtp_layers) {
    throw ParamError(
        fmt::format("--pipeline-layout '{}': {} MTP layers (m), and the model has {} (mtp_layers)",
                    text, total_mtp, mtp_layers));
  }
  return out;
}

}  // namespace pipetab
