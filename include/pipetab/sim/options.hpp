// Every option of a run, defined once (docs/design.md §5): the job's, the layout's and how the
// simulation runs them. Each has one key (in files, settings and Python keywords), one flag (on
// every command that simulates), the values it takes and what it sets in a SimulationSetup. The
// command line (cli/options.cpp), study files and runs files (study/), job files and model files
// (their readers emit Settings), `plan` and the Python API all apply options through this table,
// so an option is added here once and every one of them takes it.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "pipetab/setting.hpp"
#include "pipetab/sim/simulation.hpp"

namespace pipetab {

/// What an option takes.
enum class OptionType : std::uint8_t {
  Integer,   ///< a whole number in [min, max]
  Number,    ///< a finite number in [min, max]
  Boolean,   ///< true or false
  Tristate,  ///< auto, true or false (auto: the default's rule decides)
  Choice,    ///< one of `choices`
  Text,      ///< any text (checked where it is used: a pipeline layout)
};

/// Where an option belongs: the job, the layout, or how the simulation runs (docs, --help).
enum class OptionGroup : std::uint8_t { Job, Layout, Simulation };

/// An option's value once parsed (the field its type uses).
struct OptionValue {
  std::int64_t integer = 0;
  double number = 0.0;
  bool boolean = false;
  std::string text;  ///< Choice, Text; Tristate: "auto", "true" or "false"
};

struct RunOption {
  std::string_view key;   ///< "seq_len": files, settings, Python keywords
  std::string_view flag;  ///< "--seq-len"; "" when no command-line flag sets it
  OptionGroup group;
  OptionType type;
  std::string_view help;
  double min = 0.0, max = 0.0;                ///< Integer, Number
  std::span<const std::string_view> choices;  ///< Choice
  /// Boolean: the flag alone sets this (false for --no-contention); a flag that sets true also
  /// has its negation, --no-X. Number: the flag's value times `flag_scale` is the key's
  /// (--dp-bucket-mb in MB, dp_bucket_bytes in bytes).
  bool flag_sets = true;
  double flag_scale = 1.0;
  std::string_view flag_unit;  ///< "MB": what the flag's value counts, for --help
  void (*set)(SimulationSetup&, const OptionValue&) = nullptr;
  /// The value as text, as a setting ("" where it is unset: a capacity factor of a dropless job).
  std::string (*get)(const SimulationSetup&) = nullptr;
  bool above_min = false;  ///< Number: the value must be above `min`, not equal to it
};

/// Every option, in the order --help and the docs list them.
std::span<const RunOption> run_options();

/// The option of `key`, or null.
const RunOption* find_run_option(std::string_view key);

/// `text` as `option` takes it (booleans also as on/off, yes/no, 1/0). Throws Error saying what
/// was expected (the caller adds where the text came from).
OptionValue parse_option_value(const RunOption& option, std::string_view text);

/// Applies one setting to `setup`: its key's option parses and sets its value. Throws Error
/// "ORIGIN: KEY = 'VALUE': what was expected", naming the nearest key for an unknown one.
void apply_setting(SimulationSetup& setup, const Setting& setting);

/// Applies settings in order (a later one wins).
void apply_settings(SimulationSetup& setup, std::span<const Setting> settings);

/// Every option of `setup` whose value is not the default's, as settings with origin "": what
/// makes a default setup into this one (JSON provenance, round trips, job files written back).
std::vector<Setting> changed_settings(const SimulationSetup& setup);

/// A setup with every option at its default as a user gets it (the runtime: auto, each table's
/// own), for `model` on `system`, with the model's own defaults (its file's job keys) applied.
SimulationSetup default_setup(ModelConfig model, SystemConfig system);

/// `e` again, named with where its option was last set in `applied` when a file set it (a flag's
/// message names the flag already). Throws ParamError, or `e` itself.
[[noreturn]] void rethrow_with_origin(const OptionError& e, std::span<const Setting> applied);

/// require_runnable and require_supported on `setup`, whose options came from `applied` (in the
/// order they were applied: the model's defaults first): a rule an option breaks is reported with
/// where that option was last set when a file set it ("m.toml:7:19: key
/// 'transformer.tensor_parallel': --tp 3: ..."). Throws ParamError.
void require_valid(const SimulationSetup& setup, std::span<const Setting> applied);

/// `option`'s value in `defaults` as a setting would write it, or "" where the default is unset
/// (a sequence length or global batch of 0 left to the model or the layout; a dropless job's
/// capacity): a value the option would not take back.
std::string default_text(const RunOption& option, const SimulationSetup& defaults);

/// "job", "layout", "simulation".
std::string_view to_string(OptionGroup group);

/// "integer", "number", "boolean", "tristate", "choice", "text".
std::string_view to_string(OptionType type);

}  // namespace pipetab
