// Files a command writes must not be files it reads: `-o study.toml`, `--trace results.csv` or
// `-t table.csv` with that table as the input used to overwrite the input and exit 0.
#pragma once

#include <string>
#include <vector>

#include <CLI/CLI.hpp>

namespace pipetab::cli {

/// The options that name files a command writes (long names without dashes).
const std::vector<std::string>& output_option_names();

/// Throws Error if, in the parsed `command`, an output option names the same file as another
/// output or as an existing file given to any other option or positional (the same file by
/// std::filesystem::equivalent: other spellings, links and hard links included). "-" (standard
/// output) is never a file.
void refuse_outputs_over_inputs(const CLI::App& command);

/// Throws Error if `output` is the same file as one of `inputs` (`what` names the inputs'
/// kind in the message, e.g. "a file the study names").
void refuse_output_over(const std::string& option, const std::string& output,
                        const std::vector<std::string>& inputs, const std::string& what);

}  // namespace pipetab::cli
