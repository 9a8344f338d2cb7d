// One option of a run as a reader found it, before it is applied: the key of the one definition
// of every option (sim/options.hpp), its value as text, and where it came from. Readers of files
// in other tools' formats (a torchtitan job TOML, Megatron-LM's arguments, a model file's job
// keys) translate what they read into settings, so that every source of options is applied, and
// checked, by the same code.
#pragma once

#include <cstdint>
#include <string>

namespace pipetab {

/// What a setting's value was where it was written: text (a flag, an argument list: read as the
/// option takes it) or a typed value of a file (TOML's, JSON's), which the option's type must
/// admit, as the file's own reader would have checked it (an integer option refuses "8" written as
/// a string, a boolean one refuses 1).
enum class SettingType : std::uint8_t { Text, Integer, Float, Boolean, String };

struct Setting {
  std::string key;    ///< e.g. "seq_len", "tensor_parallel" (sim/options.hpp's keys)
  std::string value;  ///< as text: "8192", "true", "selective"
  /// Where it came from, for messages: "job.toml:12: parallelism.tensor_parallel_degree".
  std::string origin;
  SettingType type = SettingType::Text;
  friend bool operator==(const Setting&, const Setting&) = default;
};

}  // namespace pipetab
