// A gtest fixture that runs the built `pipetab` binary in a scratch folder of its own, for the
// end-to-end tests (test_cli.cpp, test_corners.cpp).
#pragma once

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

namespace pipetab::test {

struct CliResult {
  int code = -1;
  std::string out, err;
};

inline std::string slurp(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

class CliFixture : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("pipetab-cli-" + std::to_string(::getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->test_suite_name() + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  struct RunOptions {
    std::string stdout_path;  ///< where stdout goes; empty: captured in CliResult::out
    std::string prefix;       ///< shell text run before pipetab (e.g. "LC_ALL=x ")
    bool in_folder = false;   ///< run from the test's folder (relative paths are its files)
  };

  // Runs `pipetab ARGS`; stdin is /dev/null.
  CliResult run_pipetab(const std::string& args, const RunOptions& o) const {
    const auto out = dir_ / "stdout", err = dir_ / "stderr";
    const std::string stdout_path = o.stdout_path.empty() ? out.string() : o.stdout_path;
    const std::string command = (o.in_folder ? "cd " + dir_.string() + " && " : std::string()) +
                                o.prefix + std::string(PIPETAB_BINARY) + " " + args + " > " +
                                stdout_path + " 2> " + err.string() + " < /dev/null";
    const int status = std::system(command.c_str());
    CliResult r;
    r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    r.out = stdout_path == out.string() ? slurp(out) : std::string();
    r.err = slurp(err);
    return r;
  }

  std::string file(const std::string& name, const std::string& text) const {
    const auto path = dir_ / name;
    std::ofstream(path, std::ios::binary) << text;
    return path.string();
  }

  // A failed run: exit code 2 and exactly one line on stderr, "pipetab: error: ..." containing
  // `fragment`.
  void expect_one_line_error(const CliResult& r, const std::string& args,
                             const std::string& fragment) const {
    EXPECT_EQ(r.code, 2) << args << "\n" << r.out << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
    EXPECT_EQ(r.err.rfind("pipetab: error: ", 0), 0U) << r.err;
    EXPECT_NE(r.err.find(fragment), std::string::npos)
        << args << "\n  got: " << r.err << "  want: " << fragment;
  }

  std::filesystem::path dir_;
};

}  // namespace pipetab::test
