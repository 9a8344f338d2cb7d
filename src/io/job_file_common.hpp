// What the job-file readers and writers share (io/job_file.hpp): settings collected with the line
// they came from and put in file order, values as text, and the layout values a writer checks.
// Internal to the library.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "pipetab/error.hpp"
#include "pipetab/io/job_file.hpp"

namespace pipetab::io::detail {

/// The most GPUs a job file may imply: degrees multiplied past it are refused rather than
/// overflowing (and no machine has two billion GPUs).
inline constexpr std::int64_t kMaxGpus = std::int64_t{1} << 31;

inline std::string setting_text(bool v) {
  return v ? "true" : "false";
}
inline std::string setting_text(std::int64_t v) {
  return fmt::format("{}", v);
}
inline std::string setting_text(int v) {
  return fmt::format("{}", v);
}
/// The shortest text that reads back to `v` (fmt's default for a double).
inline std::string setting_text(double v) {
  return fmt::format("{}", v);
}
inline std::string setting_text(std::string_view v) {
  return std::string(v);
}
inline std::string setting_text(const char* v) {
  return std::string(v);
}

/// Settings, ignored keys and notes as a reader finds them, each with the line it came from (0:
/// a default or a derived value with no line of its own), put in file order at the end. One
/// setting per key: a second `set` of a key replaces the first (a flag given twice: the last
/// counts, as argparse does).
class Collector {
 public:
  Collector(std::string format, std::string file) : file_(std::move(file)) {
    out_.format = std::move(format);
  }

  const std::string& file() const { return file_; }

  /// `origin` is the key or flag as the file names it ("parallelism.tensor_parallel_degree",
  /// "--seq-length"), optionally with why in parentheses; the file and line are prefixed here.
  template <class T>
  void set(std::string_view key, const T& value, int line, std::string_view origin) {
    Pending p{line, order_++,
              Setting{std::string(key), setting_text(value),
                      line > 0 ? fmt::format("{}:{}: {}", file_, line, origin)
                               : fmt::format("{}: {}", file_, origin)}};
    for (auto& s : settings_) {
      if (s.setting.key == p.setting.key) {
        s = std::move(p);
        return;
      }
    }
    settings_.push_back(std::move(p));
  }

  bool has(std::string_view key) const {
    return std::any_of(settings_.begin(), settings_.end(),
                       [&](const Pending& p) { return p.setting.key == key; });
  }

  void ignore(int line, std::string entry) {
    ignored_.push_back({line, order_++, std::move(entry)});
  }
  void note(std::string text) { out_.notes.push_back(std::move(text)); }
  void model(std::string name) { out_.model = std::move(name); }

  JobFile finish() {
    // File order; what has no line (defaults, derived values) after, in the order it was set.
    const auto by_line = [](const auto& a, const auto& b) {
      const auto key = [](const auto& p) {
        return std::pair<std::int64_t, int>(p.line > 0 ? p.line : INT64_MAX, p.order);
      };
      return key(a) < key(b);
    };
    std::sort(settings_.begin(), settings_.end(), by_line);
    std::sort(ignored_.begin(), ignored_.end(), by_line);
    for (auto& s : settings_)
      out_.settings.push_back(std::move(s.setting));
    for (auto& i : ignored_)
      out_.ignored.push_back(std::move(i.entry));
    return std::move(out_);
  }

 private:
  struct Pending {
    int line;
    int order;
    Setting setting;
  };
  struct Ignored {
    int line;
    int order;
    std::string entry;
  };
  std::string file_;
  JobFile out_;
  std::vector<Pending> settings_;
  std::vector<Ignored> ignored_;
  int order_ = 0;
};

/// The comment a writer opens its file with: each line of `comment` after `marker` ("# ").
inline std::string comment_lines(std::string_view comment) {
  std::string out;
  while (!comment.empty()) {
    const auto end = comment.find('\n');
    const auto line = comment.substr(0, end);
    out += line.empty() ? "#\n" : fmt::format("# {}\n", line);
    if (end == std::string_view::npos) break;
    comment.remove_prefix(end + 1);
  }
  return out;
}

/// The checks both writers make of a layout before they spell it: sizes at least 1 and their
/// product the GPU count. Throws ParamError naming the value and the rule.
void check_written_layout(const Job& job, const Layout& layout, std::int64_t gpus,
                          std::string_view tool);

}  // namespace pipetab::io::detail
