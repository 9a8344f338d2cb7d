// The command line: every subcommand parsed and run, every failure one line on stderr with its
// exit code. main() (main.cpp) and the web build (web/entry.cpp) both call run().
#include <algorithm>
#include <array>
#include <cstdio>
#include <memory>
#include <new>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "commands.hpp"
#include "options.hpp"
#include "output_paths.hpp"
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "pipetab/error.hpp"
#include "pipetab/names.hpp"
#include "pipetab/report/text.hpp"

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

// Where a message sends the user: the help of the subcommand the command line names.
std::string help_of(const CLI::App* command) {
  return command != nullptr ? fmt::format("pipetab {} --help", command->get_name())
                            : "pipetab --help";
}

// The long names of `command`'s options ("--tp"), for "did you mean".
std::vector<std::string> long_names(const CLI::App& command) {
  std::vector<std::string> names;
  for (const CLI::Option* option : command.get_options()) {
    for (const auto& name : option->get_lnames())
      names.push_back("--" + name);
  }
  return names;
}

// What a value of CLI11's type name must be, in words: "TEXT:{auto,step,microbatch}" is one of
// those, "INT in [1 - 1048576]" a number in that range.
std::string value_wanted(const std::string& type) {
  static const std::regex choices(R"(\{([^}]*)\})"), range(R"(in \[(\S+) - (\S+)\])");
  std::smatch m;
  if (std::regex_search(type, m, choices)) {
    std::string list = m[1];
    for (std::size_t at = 0; (at = list.find(',', at)) != std::string::npos; at += 2)
      list.replace(at, 1, ", ");
    return "one of " + list;
  }
  if (std::regex_search(type, m, range))
    return fmt::format("a number from {} to {}", m[1].str(), m[2].str());
  if (type.find("FLOAT") != std::string::npos) return "a number";
  if (type.find("INT") != std::string::npos) return "a whole number";
  return "a value";
}

// CLI11's parse errors in pipetab's words, with the subcommand's help named: a missing value
// says what it must be ("--tp: 1 required TEXT:INT:INT in [1 - 1048576] missing" was CLI11's), an
// unknown option the nearest ones.
std::string parse_error(const CLI::App* command, const std::string& what) {
  const std::string help = help_of(command);
  static const std::regex missing(R"(^(-\S+): \d+ required (.*) missing$)"),
      extras(R"(^The following arguments? (?:was|were) not expected: (.*)$)");
  std::smatch m;
  if (std::regex_match(what, m, missing)) {
    const auto wanted = value_wanted(m[2]);
    return fmt::format("{} needs a value{} (see {})", m[1].str(),
                       wanted == "a value" ? "" : ": " + wanted, help);
  }
  if (std::regex_match(what, m, extras)) {
    std::istringstream words(m[1].str());
    std::vector<std::string> options, others;
    for (std::string word; words >> word;)
      (word.size() > 1 && word[0] == '-' ? options : others).push_back(word);
    if (!options.empty() && command != nullptr) {
      const auto names = long_names(*command);
      std::string out;
      for (const auto& option : options) {
        const std::string name = option.substr(0, option.find('='));
        // An option the name extends or abbreviates ("--tp-size", "--micro"), else the nearest
        // within an edit per three letters.
        std::vector<std::string> near;
        for (const auto& n : names) {
          if (name.rfind(n + "-", 0) == 0 || (name.size() > 3 && n.rfind(name, 0) == 0))
            near.push_back(n);
        }
        if (near.empty()) {
          const std::size_t edits = std::max<std::size_t>(1, (name.size() - 2) / 3);
          for (const auto i : pipetab::nearest_names(names, std::array{name}, edits))
            near.push_back(names[i]);
        }
        out += fmt::format("{}{} is not an option of 'pipetab {}'{}", out.empty() ? "" : "; ", name,
                           command->get_name(), pipetab::did_you_mean(near));
      }
      return fmt::format("{} (see {})", out, help);
    }
    return fmt::format("unexpected argument{} {} (see {})",
                       options.size() + others.size() > 1 ? "s" : "", m[1].str(), help);
  }
  return fmt::format("{} (see {})", what, help);
}

// A switch given a value that is not a truth value ("--dp-overlap=maybe"). CLI11 reads such a
// value with std::stoll: it let std::invalid_argument through (the process aborted) and took
// "--dp-overlap=2x" as true. Checked before parsing; the switch and the values it takes, named.
std::string bad_switch_value(const CLI::App* command, int argc, char** argv) {
  static constexpr std::array<std::string_view, 8> kTruth{"true", "false", "on", "off",
                                                          "yes",  "no",    "1",  "0"};
  for (int i = 2; i < argc && command != nullptr; ++i) {
    const std::string arg = argv[i];
    if (arg == "--") break;  // what follows is positional
    const auto eq = arg.find('=');
    if (arg.rfind("--", 0) != 0 || eq == std::string::npos) continue;
    const CLI::Option* option = command->get_option_no_throw(arg.substr(0, eq));
    if (option == nullptr || option->get_expected_min() != 0) continue;
    const auto value = pipetab::lower_case(arg.substr(eq + 1));
    if (std::find(kTruth.begin(), kTruth.end(), value) != kTruth.end()) continue;
    const auto name = arg.substr(0, eq);
    return fmt::format("{}: {} is a switch: give it alone, or as {}=true or {}=false (see {})", arg,
                       name, name, name, help_of(command));
  }
  return {};
}

// CLI11's help within kTextWidth columns (CLI11 2.1 prints a description on one line: up to 705
// columns): each option's and subcommand's description folded beside the name column, and any
// other line over the width folded at its spaces. Lines within the width are kept as written.
class FoldingFormatter : public CLI::Formatter {
 public:
  std::string make_option_desc(const CLI::Option* option) const override {
    return fold(CLI::Formatter::make_option_desc(option), description_width());
  }
  std::string make_subcommand(const CLI::App* sub) const override {
    std::stringstream out;
    CLI::detail::format_help(out, sub->get_display_name(true),
                             fold(sub->get_description(), description_width()), get_column_width());
    return out.str();
  }
  std::string make_description(const CLI::App* app) const override {
    return fold(CLI::Formatter::make_description(app), pipetab::kTextWidth);
  }
  std::string make_footer(const CLI::App* app) const override {
    return fold(CLI::Formatter::make_footer(app), pipetab::kTextWidth);
  }

 private:
  std::size_t description_width() const {
    return pipetab::kTextWidth - std::min<std::size_t>(get_column_width(), pipetab::kTextWidth / 2);
  }
  static std::string fold(const std::string& text, std::size_t width) {
    std::string out;
    std::size_t at = 0;
    while (at <= text.size()) {
      const auto end = std::min(text.find('\n', at), text.size());
      const std::string_view line(text.data() + at, end - at);
      if (pipetab::text_columns(line) <= width) {
        out.append(line);
      } else {
        std::string folded = pipetab::wrap(line, width);
        folded.pop_back();  // wrap ends each line with '\n'; the caller's own follows
        out += folded;
      }
      if (end == text.size()) break;
      out += '\n';
      at = end + 1;
    }
    return out;
  }
};

}  // namespace

int pipetab::cli::run(int argc, char** argv) {
  CLI::App app{
      "pipetab: evaluate pipeline-parallel training schedules at three levels: the formula "
      "(closed\n"
      "forms), the table (the schedule as a table, timed without communication) and the\n"
      "simulation (the table run over a modelled cluster, communication included).",
      "pipetab"};
  app.formatter(std::make_shared<FoldingFormatter>());
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
      add_calibrate(app), add_cost(app),        add_plan(app),    add_collective(app)};

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
  const CLI::App* named = nullptr;  // the subcommand argv names, for the help a message cites
  for (const auto& c : commands) {
    if (argc > 1 && c.app->get_name() == argv[1]) named = c.app;
  }
  if (const auto message = bad_switch_value(named, argc, argv); !message.empty())
    return fail(message, 2);
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    return fail(parse_error(named, e.what()), 2);
  } catch (const std::logic_error& e) {  // std::invalid_argument, std::out_of_range: see above
    return fail(fmt::format("cannot read the command line: {} (see {})", e.what(), help_of(named)),
                2);
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
