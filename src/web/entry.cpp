// The web build's entry point (docs/web.md): the page calls pipetab_run with the command line as
// a JSON array of strings — exactly what a shell would pass to `pipetab` — and reads what the
// command wrote on stdout and stderr through the module's byte callbacks, and the files it wrote
// from the module's in-memory file system. One engine, one parser, one output for native and web.
#include <cstdio>
#include <exception>
#include <iostream>
#include <string>
#include <vector>

#include "../cli/commands.hpp"
#include <nlohmann/json.hpp>

extern "C" {

/// Runs `pipetab ARGS...` where `args_json` is ["analyze", "--schedule", "zb-v", ...] (the
/// program name is added here). Returns the exit code, as the command line's; a malformed
/// argument list is exit 2 with one line on stderr, as any bad input.
int pipetab_run(const char* args_json) {
  std::vector<std::string> args{"pipetab"};
  try {
    const auto parsed = nlohmann::json::parse(args_json);
    if (!parsed.is_array()) throw std::invalid_argument("not an array");
    for (const auto& arg : parsed) {
      args.push_back(arg.get<std::string>());
      // A NUL ends a C string: the command would read the argument cut short (a shell cannot
      // pass one to the native pipetab at all).
      if (args.back().find('\0') != std::string::npos) {
        std::fprintf(stderr,
                     "pipetab: error: argument %zu contains a NUL byte, which no command line can "
                     "carry\n",
                     args.size() - 1);
        std::fflush(stderr);
        return 2;
      }
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr,
                 "pipetab: error: the web entry point takes the arguments as a JSON array of "
                 "strings (%s)\n",
                 e.what());
    std::fflush(stderr);
    return 2;
  }
  std::vector<char*> argv;
  argv.reserve(args.size() + 1);
  for (auto& arg : args)
    argv.push_back(arg.data());
  argv.push_back(nullptr);
  const int code = pipetab::cli::run(static_cast<int>(args.size()), argv.data());
  // Everything written reaches the page before this call returns.
  std::cout.flush();
  std::fflush(stdout);
  std::fflush(stderr);
  return code;
}

}  // extern "C"
