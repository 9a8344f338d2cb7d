// Private to io/: the built-in presets, generated at configure time from configs/*/*.toml
// (presets.cpp.in).
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace pipetab::io::detail {

/// The text of preset `name` of `kind` ("models" or "systems"); empty if there is none.
std::string_view preset(std::string_view kind, std::string_view name);

/// The names of the presets of `kind`, sorted.
std::vector<std::string> preset_names(std::string_view kind);

}  // namespace pipetab::io::detail
