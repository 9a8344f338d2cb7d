// One option of a run as a reader found it, before it is applied: the key of the one definition
// of every option (sim/options.hpp), its value as text, and where it came from. Readers of files
// in other tools' formats (a torchtitan job TOML, Megatron-LM's arguments, a model file's job
// keys) translate what they read into settings, so that every source of options is applied, and
// checked, by the same code.
#pragma once

#include <string>

namespace pipetab {

struct Setting {
  std::string key;    ///< e.g. "seq_len", "tensor_parallel" (sim/options.hpp's keys)
  std::string value;  ///< as text: "8192", "true", "selective"
  /// Where it came from, for messages: "job.toml:12: parallelism.tensor_parallel_degree".
  std::string origin;
  friend bool operator==(const Setting&, const Setting&) = default;
};

}  // namespace pipetab
