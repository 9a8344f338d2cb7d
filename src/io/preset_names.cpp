// Presets by the names people use for them (issue 41's "names as people say them"): a Hugging
// Face id such as meta-llama/Llama-3.1-70B, the model's own spelling with capitals, dashes or
// suffixes of its released variants (-hf, -Instruct, -v0.1), and a few names of the same
// architecture (Llama 3 70B is Llama 3.1 70B's shapes: the 3.1 release only extended the
// context, Llama Team, arXiv 2407.21783, §3.1; Llama 3.3 70B is the same config.json).
#include <algorithm>
#include <array>
#include <cctype>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "presets.hpp"

#include "pipetab/names.hpp"

namespace pipetab::io::detail {
namespace {

// Lower case with '_' and ' ' as '-': how preset names are written.
std::string normalised(std::string_view text) {
  std::string out = lower_case(text);
  for (auto& c : out) {
    if (c == '_' || c == ' ') c = '-';
  }
  return out;
}

bool ends_with(const std::string& text, std::string_view suffix) {
  return text.size() > suffix.size() && text.ends_with(suffix);
}

// Names of the same architecture under another release's name.
struct Alias {
  std::string_view kind, name, preset;
};
constexpr std::array<Alias, 6> kAliases{{
    {"models", "llama3-8b", "llama3.1-8b"},
    {"models", "llama3-70b", "llama3.1-70b"},
    {"models", "llama3.3-70b", "llama3.1-70b"},
    {"models", "llama3-405b", "llama3.1-405b"},
    {"systems", "h100", "dgx-h100"},
    {"systems", "h200", "dgx-h200"},
}};

// The spellings `name` may stand for, most literal first.
std::vector<std::string> spellings(std::string_view name) {
  std::vector<std::string> out;
  std::string s = normalised(name);
  out.push_back(s);
  // An organisation's prefix (meta-llama/, Qwen/, deepseek-ai/, mistralai/, openai/).
  if (const auto slash = s.find('/');
      slash != std::string::npos && s.find('/', slash + 1) == std::string::npos) {
    s = s.substr(slash + 1);
    out.push_back(s);
  }
  if (s.starts_with("meta-")) {
    s = s.substr(5);
    out.push_back(s);
  }
  // Released variants of the same weights' shapes.
  for (bool stripped = true; stripped;) {
    stripped = false;
    for (const std::string_view suffix : {"-hf", "-instruct", "-chat", "-base"}) {
      if (ends_with(s, suffix)) {
        s.resize(s.size() - suffix.size());
        out.push_back(s);
        stripped = true;
      }
    }
  }
  // A release's version tag (Mixtral-8x7B-v0.1), never a name's own (DeepSeek-V3).
  if (const auto v = s.rfind("-v0."); v != std::string::npos) out.push_back(s.substr(0, v));
  // "llama-3.1-70b" as "llama3.1-70b": a family name joined to its version.
  const auto size = out.size();
  for (std::size_t i = 0; i < size; ++i) {
    const auto& t = out[i];
    const auto dash = t.find('-');
    if (dash != std::string::npos && dash > 0 && dash + 1 < t.size() &&
        std::isdigit(static_cast<unsigned char>(t[dash + 1])) != 0 &&
        std::isalpha(static_cast<unsigned char>(t[dash - 1])) != 0) {
      out.push_back(t.substr(0, dash) + t.substr(dash + 1));
    }
  }
  return out;
}

}  // namespace

std::optional<std::string> preset_alias(std::string_view kind, std::string_view name) {
  for (const auto& s : spellings(name)) {
    if (!preset(kind, s).empty()) return s;
    for (const auto& a : kAliases) {
      if (a.kind == kind && a.name == s) return std::string(a.preset);
    }
  }
  return std::nullopt;
}

std::vector<std::string> nearest_presets(std::string_view kind, std::string_view name) {
  const auto names = preset_names(kind);
  std::vector<std::string> nearest;
  for (const auto i : nearest_names(names, spellings(name), 3))
    nearest.emplace_back(names[i]);
  return nearest;
}

}  // namespace pipetab::io::detail
