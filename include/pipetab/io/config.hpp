// Model and system configuration files (TOML), and the built-in presets, which are the same
// files compiled in (configs/models/*.toml, configs/systems/*.toml).
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "pipetab/model/workload.hpp"
#include "pipetab/system/system.hpp"

namespace pipetab::io {

/// Reads a model file: top-level `name`, `description`, `source` (optional strings) and exactly
/// one of the tables [transformer] (TransformerConfig's fields) or [explicit]
/// (ExplicitWorkload's fields). Unknown keys, missing keys, wrong types and out-of-range values
/// throw ParseError naming the file, line and key.
ModelConfig parse_model(std::string_view text, const std::string& file);

/// Reads a system file: `name`, `source`; [device] peak_flops, efficiency, memory_bytes;
/// [network] topology ("switched" or "chain"), devices_per_node, and the link tables
/// [network.intra] and [network.inter] (latency_s, bandwidth in bytes/s; `inf` allowed).
/// Errors as parse_model.
SystemConfig parse_system(std::string_view text, const std::string& file);

/// Names of the built-in presets, sorted.
std::vector<std::string> model_presets();
std::vector<std::string> system_presets();

/// A preset by name, or else a TOML file by path. Throws Error listing the presets when the
/// name is neither.
ModelConfig load_model(const std::string& name_or_path);
SystemConfig load_system(const std::string& name_or_path);

/// The text of a preset (empty if there is none), e.g. to show or copy it.
std::string_view preset_text(std::string_view kind, std::string_view name);

}  // namespace pipetab::io
