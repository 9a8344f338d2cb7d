// The command line: every subcommand parsed and run, every failure one line on stderr with its
// exit code. main() (main.cpp) and the web build (web/entry.cpp) both call run().
#include <algorithm>
#include <cstdio>
#include <new>
#include <string>
#include <vector>

#include "commands.hpp"
#include "options.hpp"
#include "output_paths.hpp"
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "pipetab/error.hpp"

namespace {

// One line on stderr: the contract for every failure (docs/design.md §9; exit code 2).
// Messages quote user input (file names, cells, keys): line breaks become spaces and every
// other control byte is written as \xNN, so that input cannot move the cursor or recolour the
// terminal (an ESC sequence in a CSV cell used to reach the terminal raw).
// A message quotes what it was given, which can be a 100 kB argument: a word (a run without
// spaces) longer than kLongWord bytes keeps its head and tail, and the line its first
// kLongLine bytes, each cut where a UTF-8 character begins and saying how much was left out.
constexpr std::size_t kLongWord = 300, kWordHead = 160, kWordTail = 60, kLongLine = 4000;

// The offset at or before `at` where a UTF-8 character begins.
std::size_t char_start(const std::string& text, std::size_t at) {
  while (at > 0 && at < text.size() && (static_cast<unsigned char>(text[at]) & 0xC0U) == 0x80U)
    --at;
  return at;
}

std::string shortened(const std::string& message) {
  std::string out;
  std::size_t at = 0;
  while (at < message.size()) {
    const auto end = std::min(message.find(' ', at), message.size());
    if (end - at > kLongWord) {
      const auto head = char_start(message, at + kWordHead);
      const auto tail = char_start(message, end - kWordTail);
      out.append(message, at, head - at);
      out += fmt::format("…({} bytes left out)…", tail - head);
      out.append(message, tail, end - tail);
    } else {
      out.append(message, at, end - at);
    }
    if (end < message.size()) out += ' ';
    at = end + 1;
  }
  if (out.size() > kLongLine) {
    const auto cut = char_start(out, kLongLine);
    out = out.substr(0, cut) +
          fmt::format("… (the message's last {} bytes left out)", out.size() - cut);
  }
  return out;
}

int fail(const std::string& full_message, int code) {
  const std::string message = shortened(full_message);
  std::string line;
  line.reserve(message.size());
  for (const char c : message) {
    const auto byte = static_cast<unsigned char>(c);
    if (c == '\n' || c == '\r') {
      line += ' ';
    } else if ((byte < 0x20 && c != '\t') || byte == 0x7f) {
      line += fmt::format("\\x{:02x}", byte);
    } else {
      line += c;
    }
  }
  std::fprintf(stderr, "pipetab: error: %s\n", line.c_str());
  return code;
}

}  // namespace

int pipetab::cli::run(int argc, char** argv) {
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
  // The options of a run register on the subcommand that runs (all of them for help on the
  // commands, or without one).
  set_running_subcommand(argc > 1 && argv[1][0] != '-' ? argv[1] : "");
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

  std::string running;
  try {
    for (const auto& command : commands) {
      if (!command.app->parsed()) continue;
      running = command.app->get_name();
      refuse_outputs_over_inputs(*command.app);
      command.run();
    }
  } catch (const std::bad_alloc&) {
    // An allocation failed: an input, a table or an output larger than the memory this process
    // may use (readers name the file themselves, as an Error). Never a partial result: say so
    // and fail. Exit 2, as for other input the machine cannot take: it is no internal error.
    return fail(fmt::format("out of memory while running '{}': the tables, inputs or output it "
                            "asks for need more memory than this process may use (std::bad_alloc); "
                            "ask for smaller sizes (S, M, chunks, a study's grid) or run it with "
                            "more memory",
                            running),
                2);
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
