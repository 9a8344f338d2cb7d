// The subcommands of `pipetab`. Each registers its flags on the app and returns the function
// that runs it after parsing; errors are thrown as pipetab::Error (exit code 2).
#pragma once

#include <functional>

#include <CLI/CLI.hpp>

namespace pipetab::cli {

/// A registered subcommand and what runs it.
struct Subcommand {
  CLI::App* app;
  std::function<void()> run;
};

Subcommand add_list(CLI::App& app);
Subcommand add_show(CLI::App& app);
Subcommand add_analyze(CLI::App& app);
Subcommand add_simulate(CLI::App& app);
Subcommand add_compare(CLI::App& app);
Subcommand add_validate(CLI::App& app);
Subcommand add_convert(CLI::App& app);

/// Writes `text` to `path`, or to stdout when `path` is empty or "-".
void emit(const std::string& path, const std::string& text);

}  // namespace pipetab::cli
