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

/// Reads a system file: `name`, `description`, `source`; [device] name, peak_flops (a number,
/// or a table by precision: fp32, tf32, fp16, bf16, fp8), memory_bytes, memory_bandwidth,
/// memory_efficiency, kernel_overhead_s, and either efficiency (the FLOP-proportional model) or
/// [device.gemm] (sms, tile_m and tile_n or tiles, split_k_min, max_efficiency, k_overhead)
/// with optional [device.attention] (forward_efficiency, backward_efficiency); [network]
/// topology ("switched" or "chain"), devices_per_node, nodes, and the link tables [network.intra]
/// and [network.inter] (latency_s, bandwidth in bytes/s, `inf` allowed; collective_efficiency).
/// docs/simulation.md describes each key. Errors as parse_model.
SystemConfig parse_system(std::string_view text, const std::string& file);

/// A system file that parse_system reads back to `system` (numbers in their shortest exact form),
/// preceded by `comment` as TOML comment lines.
std::string system_toml(const SystemConfig& system, const std::string& comment = "");

/// Names of the built-in presets, sorted.
/// The model every command simulates when none is named: Llama 2 7B, which fits 80 GB per device
/// for every schedule at the default S = M = 8 (configs/models/llama2-7b.toml says why it
/// replaced the paper's model, now `paper`).
inline constexpr const char* kDefaultModel = "llama2-7b";

std::vector<std::string> model_presets();
std::vector<std::string> system_presets();

/// A preset by name, or else a file by path: for models, a Hugging Face config.json (a name
/// ending in .json, or a folder holding config.json; io/hf_config.hpp) or a TOML file. Throws
/// Error listing the presets when the name is neither.
ModelConfig load_model(const std::string& name_or_path);
SystemConfig load_system(const std::string& name_or_path);

/// The text of a preset (empty if there is none), e.g. to show or copy it.
std::string_view preset_text(std::string_view kind, std::string_view name);

}  // namespace pipetab::io
