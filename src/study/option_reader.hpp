// Reading the options of a run (sim/options.hpp) from a TOML table: a study's [simulation] table,
// a measured run's entry. Each key is an option's, its value of the option's type, checked where
// it is written. Internal to study/.
#pragma once

#include <string>

#include "../io/toml_reader.hpp"
#include <fmt/format.h>

#include "pipetab/sim/options.hpp"

namespace pipetab::detail {

/// The TOML type an option's value takes, for messages.
inline const char* toml_type_of(OptionType type) {
  switch (type) {
    case OptionType::Integer:
      return "an integer";
    case OptionType::Number:
      return "a number";
    case OptionType::Boolean:
      return "true or false";
    case OptionType::Tristate:
      return "true, false or \"auto\"";
    case OptionType::Choice:
    case OptionType::Text:
      return "a string";
  }
  return "a value";
}

/// `node`, the value of option `option` at `path`, as a setting: refused with the file, line and
/// key (ParseError) when its TOML type is not the option's or its value is out of the option's
/// range or choices.
inline Setting option_setting(const io::Reader& r, const toml::node& node, const std::string& path,
                              const RunOption& option) {
  bool typed = false;
  switch (option.type) {
    case OptionType::Integer:
      typed = node.is_integer();
      break;
    case OptionType::Number:
      typed = node.is_number();
      break;
    case OptionType::Boolean:
      typed = node.is_boolean();
      break;
    case OptionType::Tristate:
      typed = node.is_boolean() || (node.is_string() && node.value_or(std::string()) == "auto");
      break;
    case OptionType::Choice:
    case OptionType::Text:
      typed = node.is_string();
      break;
  }
  if (!typed) {
    r.fail(node.source(), path,
           fmt::format("expected {}, got {}", toml_type_of(option.type), io::type_name(node)));
  }
  Setting setting = r.setting(node, path, option.key);
  try {
    (void)parse_option_value(option, setting.value);
  } catch (const Error& e) {
    r.fail(node.source(), path, fmt::format("'{}': {}", setting.value, e.what()));
  }
  return setting;
}

}  // namespace pipetab::detail
