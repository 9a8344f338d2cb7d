// The subcommands of `pipetab`. Each registers its flags on the app and returns the function
// that runs it after parsing; errors are thrown as pipetab::Error (exit code 2).
#pragma once

#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "pipetab/io/table_file.hpp"

namespace pipetab::cli {

/// Parses argv and runs the subcommand it names: output on stdout (and the files it names),
/// every failure one line on stderr. Returns the exit code: 0, 1 (internal error), 2 (bad input
/// or parameters, docs/design.md §9), 130 (interrupted). run.cpp; called by main() and by the
/// web build's entry point.
int run(int argc, char** argv);

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
Subcommand add_plot(CLI::App& app);         // plot_command.cpp
Subcommand add_sweep(CLI::App& app);        // study_commands.cpp
Subcommand add_sensitivity(CLI::App& app);  // study_commands.cpp
Subcommand add_tune(CLI::App& app);         // tune_command.cpp
Subcommand add_accuracy(CLI::App& app);     // accuracy_commands.cpp
Subcommand add_calibrate(CLI::App& app);    // accuracy_commands.cpp
Subcommand add_cost(CLI::App& app);         // accuracy_commands.cpp
Subcommand add_plan(CLI::App& app);
Subcommand add_collective(CLI::App& app);  // collective_command.cpp         // plan_command.cpp

/// A run stopped by the user (Ctrl-C) or a scheduler (SIGTERM) after keeping its results: the
/// message says what was kept and how to go on; exit code 130.
class Interrupted : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// The schedules of the paper (arXiv 2605.24006), which compare and sensitivity run by default.
const std::vector<std::string>& paper_schedules();

/// Adds --format with `choices` (the first is the default).
CLI::Option* add_format(CLI::App& command, std::string& format, std::vector<std::string> choices);

/// Writes `text` to `path`, or to stdout when `path` is empty or "-".
void emit(const std::string& path, const std::string& text);

/// The same for text that `write` streams out.
void emit(const std::string& path, const std::function<void(std::ostream&)>& write);

/// The export format for `path`: `format` when given, else "json" for a .json path and "csv"
/// otherwise.
std::string table_format_for(const std::string& path, const std::string& format);

/// Adds --table-format, --force and --runnable-by to a command that searches schedules and
/// writes the best one with -t (tune, plan); `searched` says what --runnable-by restricts.
void add_search_export_options(CLI::App& command, std::string& table_format, bool& force,
                               std::string& runnable_by, const std::string& searched);

/// Writes `table` in `format` (io::export_table) to `path` as emit does, streamed. Refuses
/// (Error, with the reasons) an export PyTorch cannot run as written or that loses what the
/// table holds, unless `force`; then, and for every PyTorch export, writes a note to stderr: what
/// --force dropped, the stage ids each rank builds, the placement style and how to load the file.
void export_table(const std::string& path, const ScheduleTable& table, const std::string& format,
                  const io::TableSource& source, bool force);

}  // namespace pipetab::cli
