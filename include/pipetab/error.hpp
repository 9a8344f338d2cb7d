// Error types shared by every layer. Bad input is reported by throwing one of these; the CLI
// turns them into a one-line message and exit code 2.
#pragma once

#include <stdexcept>
#include <string>

namespace pipetab {

/// Base of all errors pipetab reports about its input (parameters, files, options).
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// A schedule cannot be built with the requested parameters; the message names the rule broken.
class ParamError : public Error {
 public:
  using Error::Error;
};

/// A run's options break a rule; `key()` names the option (sim/options.hpp) whose value the rule
/// refuses, so that where that value was set (a file's line, a flag) can be named with it.
class OptionError : public ParamError {
 public:
  OptionError(std::string key, const std::string& message)
      : ParamError(message), key_(std::move(key)) {}
  const std::string& key() const noexcept { return key_; }

 private:
  std::string key_;
};

/// A file or string could not be parsed. `what()` reads "FILE:LINE:COLUMN: message".
class ParseError : public Error {
 public:
  ParseError(std::string file, int line, int column, const std::string& message)
      : Error(file + ":" + std::to_string(line) + ":" + std::to_string(column) + ": " + message),
        file_(std::move(file)),
        line_(line),
        column_(column) {}
  const std::string& file() const noexcept { return file_; }
  int line() const noexcept { return line_; }
  int column() const noexcept { return column_; }

 private:
  std::string file_;
  int line_;
  int column_;
};

}  // namespace pipetab
