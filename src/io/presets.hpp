// Private to io/: the built-in presets, generated at configure time from configs/*/*.toml
// (presets.cpp.in).
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace pipetab::io::detail {

/// The text of preset `name` of `kind` ("models" or "systems"); empty if there is none.
std::string_view preset(std::string_view kind, std::string_view name);

/// The names of the presets of `kind`, sorted.
std::vector<std::string> preset_names(std::string_view kind);

/// The preset `name` stands for as people write it (preset_names.cpp): a Hugging Face id
/// (meta-llama/Llama-3.1-70B), capitals, a released variant's suffix, the same architecture's
/// other release name (llama3-70b); nothing if none.
std::optional<std::string> preset_alias(std::string_view kind, std::string_view name);

/// The presets closest to `name` (all at the least distance, within three edits), for "did you
/// mean".
std::vector<std::string> nearest_presets(std::string_view kind, std::string_view name);

}  // namespace pipetab::io::detail
