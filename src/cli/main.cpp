// pipetab: evaluate pipeline-parallel training schedules at the formula and table levels.
#include <cstdio>
#include <string>
#include <vector>

#include "commands.hpp"
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "pipetab/allocator.hpp"
#include "pipetab/error.hpp"

namespace {

// One line on stderr: the contract for every failure (DESIGN.md; exit code 2).
int fail(const std::string& message, int code) {
  std::string line = message;
  for (char& c : line) {
    if (c == '\n' || c == '\r') c = ' ';
  }
  std::fprintf(stderr, "pipetab: error: %s\n", line.c_str());
  return code;
}

}  // namespace

int main(int argc, char** argv) {
  pipetab::keep_freed_memory();
  CLI::App app{
      "pipetab: evaluate pipeline-parallel training schedules at three levels: the formula "
      "(closed\n"
      "forms), the table (the schedule as a table, timed without communication) and the\n"
      "simulation (the table run over a modelled cluster, communication included).",
      "pipetab"};
  app.set_version_flag("--version", std::string(PIPETAB_VERSION));
  app.require_subcommand(1);
  app.fallthrough(false);

  using namespace pipetab::cli;
  const std::vector<Subcommand> commands = {
      add_list(app),      add_show(app),        add_analyze(app), add_simulate(app),
      add_compare(app),   add_validate(app),    add_convert(app), add_plot(app),
      add_sweep(app),     add_sensitivity(app), add_tune(app),    add_accuracy(app),
      add_calibrate(app), add_cost(app),        add_plan(app)};

  // CLI11 reports a mistyped subcommand as "A subcommand is required"; name it instead.
  if (argc > 1 && argv[1][0] != '-') {
    bool known = false;
    std::string names;
    for (const auto& command : commands) {
      known = known || command.app->get_name() == argv[1];
      names += (names.empty() ? "" : ", ") + command.app->get_name();
    }
    if (!known)
      return fail(fmt::format("unknown subcommand '{}' (expected one of: {})", argv[1], names), 2);
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    return fail(fmt::format("{} (see pipetab --help)", e.what()), 2);
  }

  try {
    for (const auto& command : commands) {
      if (command.app->parsed()) command.run();
    }
  } catch (const Interrupted& e) {
    std::fprintf(stderr, "pipetab: %s\n", e.what());
    return 130;
  } catch (const pipetab::Error& e) {
    return fail(e.what(), 2);
  } catch (const std::exception& e) {
    return fail(fmt::format("internal error: {}", e.what()), 1);
  }
  return 0;
}
