// The pipeline layout's notation (Megatron-Core's --pipeline-model-parallel-layout).
#include "pipetab/parallel/layout.hpp"

#include <cctype>
#include <string>

#include <fmt/format.h>

#include "pipetab/error.hpp"

namespace pipetab {

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

namespace {

// The stages of a layout's text: its '|'-separated parts (repetitions expanded).
std::vector<std::string> layout_parts(std::string_view text) {
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
  return stages;
}

}  // namespace

std::int64_t pipeline_layout_stages(std::string_view text) {
  return static_cast<std::int64_t>(layout_parts(text).size());
}

std::optional<std::string> balanced_pipeline_layout(std::int64_t layers, std::int64_t mtp_layers,
                                                    std::int64_t stages) {
  if (stages < 2 || layers < 0 || mtp_layers < 0) return std::nullopt;
  const std::int64_t units = layers + mtp_layers + 2;
  if (units % stages != 0) return std::nullopt;
  const std::int64_t k = units / stages;
  if (k < 1 + mtp_layers) return std::nullopt;  // the last stage: its MTP modules and the loss
  // n transformer layers: "ttt" up to three, "t*n" beyond (the notation's repetition).
  const auto ts = [](std::int64_t n) {
    return n <= 3 ? std::string(static_cast<std::size_t>(n), 't') : fmt::format("t*{}", n);
  };
  std::string out = "E" + ts(k - 1) + "|";
  if (stages > 2) out += fmt::format("({}|)*{}", ts(k), stages - 2);
  out += ts(k - 1 - mtp_layers);
  if (mtp_layers > 0)
    out += mtp_layers <= 3 ? std::string(static_cast<std::size_t>(mtp_layers), 'm')
                           : fmt::format("m*{}", mtp_layers);
  return out + "L";
}

PipelineStages parse_pipeline_layout(std::string_view text, std::int64_t layers,
                                     std::int64_t mtp_layers) {
  const std::vector<std::string> stages = layout_parts(text);
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
