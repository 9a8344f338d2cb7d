#include "output_paths.hpp"

#include <filesystem>

#include <fmt/format.h>

#include "pipetab/error.hpp"

namespace pipetab::cli {

namespace {

bool same_file(const std::string& a, const std::string& b) {
  if (a.empty() || b.empty() || a == "-" || b == "-") return false;
  std::error_code ec;
  // equivalent() needs both to exist; a new output names no existing file, so spellings are
  // compared after making them absolute and normal.
  if (std::filesystem::exists(a, ec) && std::filesystem::exists(b, ec))
    return std::filesystem::equivalent(a, b, ec) && !ec;
  return std::filesystem::absolute(a, ec).lexically_normal() ==
         std::filesystem::absolute(b, ec).lexically_normal();
}

// "--output" for an option, "the study argument" for a positional.
std::string option_label(const CLI::Option& option) {
  if (!option.get_lnames().empty()) return "--" + option.get_lnames().front();
  if (!option.get_snames().empty()) return "-" + option.get_snames().front();
  return fmt::format("the {} argument", option.get_name());
}

}  // namespace

const std::vector<std::string>& output_option_names() {
  static const std::vector<std::string> names = {"output", "trace", "svg", "table-out"};
  return names;
}

void refuse_outputs_over_inputs(const CLI::App& command) {
  struct Path {
    std::string option, value;
  };
  std::vector<Path> outputs, inputs;
  for (const CLI::Option* option : command.get_options()) {
    if (option->count() == 0 || option->get_type_size() == 0) continue;  // flags
    bool output = false;
    for (const auto& name : output_option_names())
      output = output || option->check_lname(name);
    for (const auto& value : option->results()) {
      if (value.empty() || value == "-") continue;
      std::error_code ec;
      if (output) {
        outputs.push_back({option_label(*option), value});
      } else if (std::filesystem::is_regular_file(value, ec)) {
        inputs.push_back({option_label(*option), value});
      }
    }
  }
  for (std::size_t i = 0; i < outputs.size(); ++i) {
    for (const auto& input : inputs) {
      if (same_file(outputs[i].value, input.value)) {
        throw Error(
            fmt::format("{} {} is also {}, an input: refusing to overwrite it (write the "
                        "output elsewhere)",
                        outputs[i].option, outputs[i].value, input.option));
      }
    }
    for (std::size_t j = 0; j < i; ++j) {
      if (same_file(outputs[i].value, outputs[j].value)) {
        throw Error(fmt::format("{} and {} both name {}: give each output its own file",
                                outputs[j].option, outputs[i].option, outputs[i].value));
      }
    }
  }
}

void refuse_output_over(const std::string& option, const std::string& output,
                        const std::vector<std::string>& inputs, const std::string& what) {
  for (const auto& input : inputs) {
    if (same_file(output, input)) {
      throw Error(
          fmt::format("{} {} is {} ({}): refusing to overwrite an input (write the output "
                      "elsewhere)",
                      option, output, what, input));
    }
  }
}

}  // namespace pipetab::cli
