// A strict TOML reader shared by the config parsers (models, systems, studies): every key must
// be expected, every value typed and in range; errors carry the file, the line and column of
// the key, and its dotted path. Internal to the library.
#pragma once

#include <algorithm>
#include <cmath>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <toml++/toml.h>

#include "pipetab/error.hpp"
#include "pipetab/setting.hpp"

namespace pipetab::io {

inline const char* type_name(const toml::node& node) {
  switch (node.type()) {
    case toml::node_type::table:
      return "a table";
    case toml::node_type::array:
      return "an array";
    case toml::node_type::string:
      return "a string";
    case toml::node_type::integer:
      return "an integer";
    case toml::node_type::floating_point: {
      // `inf` and `nan` are floats to TOML but not "numbers with a fraction" to a reader.
      const double v = node.as_floating_point()->get();
      if (std::isinf(v)) return "an infinity";
      if (std::isnan(v)) return "nan (not a number)";
      return v == std::floor(v) ? "a floating-point number" : "a number with a fraction";
    }
    case toml::node_type::boolean:
      return "a boolean";
    default:
      return "a date or time";
  }
}

/// Tables looked up in order, the first that has a key giving it: a measured run's own keys over
/// its defaults, a model's inline keys over its named fragments. Each key keeps its place in the
/// file (toml++ drops the source region of a copied node, so tables are never merged).
struct LayeredTable {
  std::vector<const toml::table*> layers;      ///< highest priority first
  const toml::source_region* where = nullptr;  ///< reported for a missing key
  const toml::node* get(std::string_view key) const {
    for (const auto* layer : layers) {
      if (const auto* node = layer->get(key)) return node;
    }
    return nullptr;
  }
  const toml::source_region& source() const { return *where; }
};

class Reader {
 public:
  Reader(std::string_view text, const std::string& file) : file_(file) {
    try {
      root_ = toml::parse(text, file);
    } catch (const toml::parse_error& e) {
      throw ParseError(file_, static_cast<int>(e.source().begin.line),
                       static_cast<int>(e.source().begin.column),
                       fmt::format("invalid TOML: {}", e.description()));
    }
  }

  const toml::table& root() const { return root_; }
  const std::string& file() const { return file_; }

  /// A key's value as a setting of option `key` (sim/options.hpp, which checks it when it is
  /// applied), with its TOML type (the option's type must admit it). Its origin is
  /// "FILE:LINE:COLUMN: key 'PATH'". Tables, arrays and dates are refused here.
  Setting setting(const toml::node& node, const std::string& path, std::string_view key) const {
    std::string value;
    SettingType type = SettingType::String;
    if (const auto* i = node.as_integer()) {
      value = std::to_string(i->get());
      type = SettingType::Integer;
    } else if (const auto* f = node.as_floating_point()) {
      value = fmt::format("{}", f->get());
      type = SettingType::Float;
    } else if (const auto* b = node.as_boolean()) {
      value = b->get() ? "true" : "false";
      type = SettingType::Boolean;
    } else if (const auto* str = node.as_string()) {
      value = str->get();
    } else {
      fail(node.source(), path, fmt::format("expected a value, got {}", type_name(node)));
    }
    return {std::string(key), value,
            fmt::format("{}:{}:{}: key '{}'", file_,
                        std::max(1, static_cast<int>(node.source().begin.line)),
                        std::max(1, static_cast<int>(node.source().begin.column)), path),
            type};
  }

  [[noreturn]] void fail(const toml::source_region& where, const std::string& path,
                         const std::string& message) const {
    throw ParseError(file_, std::max(1, static_cast<int>(where.begin.line)),
                     std::max(1, static_cast<int>(where.begin.column)),
                     path.empty() ? message : fmt::format("key '{}': {}", path, message));
  }

  // Every key of `table` must be in `allowed` or `more` (a shared list, e.g. kLayoutKeys).
  void only(const toml::table& table, const std::string& prefix,
            std::initializer_list<std::string_view> listed,
            std::span<const std::string_view> more = {}) const {
    std::vector<std::string_view> allowed(listed);
    allowed.insert(allowed.end(), more.begin(), more.end());
    for (auto&& [key, node] : table) {
      if (std::find(allowed.begin(), allowed.end(), key.str()) == allowed.end()) {
        fail(key.source(), join(prefix, key.str()),
             fmt::format("unknown key (expected: {})", fmt::join(allowed, ", ")));
      }
    }
  }

  template <class Table>
  const toml::table* table(const Table& parent, const std::string& prefix,
                           std::string_view key) const {
    const toml::node* node = parent.get(key);
    if (node == nullptr) return nullptr;
    if (!node->is_table())
      fail(node->source(), join(prefix, key),
           fmt::format("expected a table, got {}", type_name(*node)));
    return node->as_table();
  }

  template <class Table>
  const toml::node& require(const Table& table, const std::string& prefix,
                            std::string_view key) const {
    const toml::node* node = table.get(key);
    if (node == nullptr) {
      fail(table.source(), prefix.empty() ? std::string(key) : prefix,
           prefix.empty() ? std::string("missing") : fmt::format("missing key '{}'", key));
    }
    return *node;
  }

  template <class Table>
  std::int64_t integer(const Table& table, const std::string& prefix, std::string_view key,
                       std::optional<std::int64_t> fallback, std::int64_t lo,
                       std::int64_t hi) const {
    const toml::node* node = table.get(key);
    if (node == nullptr) {
      if (fallback) return *fallback;
      require(table, prefix, key);
    }
    const auto path = join(prefix, key);
    if (!node->is_integer())
      fail(node->source(), path, fmt::format("expected an integer, got {}", type_name(*node)));
    const auto value = node->as_integer()->get();
    if (value < lo || value > hi)
      fail(node->source(), path, fmt::format("{} is out of range ({}..{})", value, lo, hi));
    return value;
  }

  // A number (integer or float); `inf` only where allowed; within [lo, hi] (lo open if `open`).
  template <class Table>
  double number(const Table& table, const std::string& prefix, std::string_view key,
                std::optional<double> fallback, double lo, double hi, bool open_lo,
                bool allow_inf = false) const {
    const toml::node* node = table.get(key);
    if (node == nullptr) {
      if (fallback) return *fallback;
      require(table, prefix, key);
    }
    const auto path = join(prefix, key);
    double value = 0.0;
    if (node->is_integer()) {
      value = static_cast<double>(node->as_integer()->get());
    } else if (node->is_floating_point()) {
      value = node->as_floating_point()->get();
    } else {
      fail(node->source(), path, fmt::format("expected a number, got {}", type_name(*node)));
    }
    if (allow_inf && std::isinf(value) && value > 0) return value;
    if (std::isnan(value) || std::isinf(value))
      fail(node->source(), path, fmt::format("{} is not allowed here", value));
    if ((open_lo ? value <= lo : value < lo) || value > hi) {
      fail(node->source(), path,
           fmt::format("{} is out of range ({}{:g} .. {:g}{})", value, open_lo ? "above " : "", lo,
                       hi, allow_inf ? ", or inf" : ""));
    }
    return value;
  }

  template <class Table>
  bool boolean(const Table& table, const std::string& prefix, std::string_view key,
               bool fallback) const {
    const toml::node* node = table.get(key);
    if (node == nullptr) return fallback;
    if (!node->is_boolean()) {
      fail(node->source(), join(prefix, key),
           fmt::format("expected true or false, got {}", type_name(*node)));
    }
    return node->as_boolean()->get();
  }

  template <class Table>
  std::optional<std::string> string(const Table& table, const std::string& prefix,
                                    std::string_view key) const {
    const toml::node* node = table.get(key);
    if (node == nullptr) return std::nullopt;
    if (!node->is_string())
      fail(node->source(), join(prefix, key),
           fmt::format("expected a string, got {}", type_name(*node)));
    return node->as_string()->get();
  }

  // A string that must be one of `choices`.
  template <class Table>
  std::string choice(const Table& table, const std::string& prefix, std::string_view key,
                     std::string fallback, std::initializer_list<std::string_view> choices) const {
    const auto value = string(table, prefix, key);
    if (!value) return fallback;
    if (std::find(choices.begin(), choices.end(), *value) == choices.end()) {
      fail(table.get(key)->source(), join(prefix, key),
           fmt::format("'{}' is not one of: {}", *value, fmt::join(choices, ", ")));
    }
    return *value;
  }

  static std::string join(const std::string& prefix, std::string_view key) {
    return prefix.empty() ? std::string(key) : fmt::format("{}.{}", prefix, key);
  }

 private:
  std::string file_;
  toml::table root_;
};

}  // namespace pipetab::io
