// Bounded memory and time (issue 14, points 3 and 4), one test per class of problem:
//  - a compute-only CSV export whose lock-step grid grows with S² while the ops grow with S is
//    refused, by size, before anything is written; the writer streams;
//  - a study's configurations are computed from their index, so a study at the largest grid is
//    ready at once and in little memory;
//  - a file larger than the memory left is an error naming the file, never a silently shortened
//    input (the CLI exits non-zero and says so);
//  - V-Half and V-Min, whose slot grid grows with S² where their passes grow with S·M, refuse
//    a grid of more than 16 cells per pass (plus a floor) before any work.
// The memory limits are set with setrlimit(RLIMIT_AS) in a forked child, which sanitizers'
// shadow memory makes meaningless: those tests are skipped in sanitizer builds (CMake defines
// PIPETAB_SANITIZED there).
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>

#include "helpers.hpp"
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "pipetab/error.hpp"
#include "pipetab/io/pytorch_csv.hpp"
#include "pipetab/io/table_file.hpp"
#include "pipetab/schedules/registry.hpp"
#include "pipetab/study/study.hpp"
#include "pipetab/study/sweep.hpp"

namespace pipetab {
namespace {

#ifdef PIPETAB_SANITIZED
constexpr bool kSanitized = true;
#else
constexpr bool kSanitized = false;
#endif

// Runs `body` in a forked child whose address space is limited to `bytes`; returns the child's
// exit status (body's return value), or -1 if it died of a signal.
int in_limited_child(std::size_t bytes, const std::function<int()>& body) {
  std::fflush(nullptr);
  const pid_t pid = ::fork();
  if (pid == 0) {
    rlimit limit{bytes, bytes};
    if (::setrlimit(RLIMIT_AS, &limit) != 0) ::_exit(100);
    int code = 101;
    try {
      code = body();
    } catch (...) {
      code = 102;
    }
    ::_exit(code);
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

// The output of a shell command (what it sends to the pipe) and its exit status.
std::pair<std::string, int> shell(const std::string& command) {
  FILE* pipe = ::popen(command.c_str(), "r");
  std::string out;
  char buffer[4096];
  while (const auto n = std::fread(buffer, 1, sizeof buffer, pipe))
    out.append(buffer, n);
  const int status = ::pclose(pipe);
  return {out, WIFEXITED(status) ? WEXITSTATUS(status) : -1};
}

std::string temp_path(const std::string& name) {
  return (std::filesystem::temp_directory_path() /
          ("pipetab_limits_" + std::to_string(::getpid()) + "_" + name))
      .string();
}

// --- CSV export -------------------------------------------------------------------------------

TEST(CsvExportLimit, GridCellsOfOneFOneBAtOneMicrobatch) {
  // At M = 1, device d runs F at slot d and B at slot 2S−1−d of the lock-step grid (the
  // forward reaches the last device at S−1, the backward comes back one device per slot), so
  // its row has 2S−d cells: 2S² − S(S−1)/2 in all, while the table has 2S ops.
  for (const std::int64_t S : {1, 2, 4, 7, 16}) {
    const auto t = test::make("1f1b", test::sm(S, 1));
    EXPECT_EQ(io::pytorch_csv_grid_cells(t), 2 * S * S - S * (S - 1) / 2) << S;
  }
}

TEST(CsvExportLimit, RefusesAGridOverTheLimitBeforeWriting) {
  // 1F1B at S = 65535, M = 1: 131070 ops, a grid of ~6.4e9 cells (it used to run out of
  // memory building the string).
  const auto t = test::make("1f1b", test::sm(65535, 1));
  ASSERT_GT(io::pytorch_csv_grid_cells(t), kMaxOps);
  try {
    (void)io::write_pytorch_csv(t);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("6442287105 cells"), std::string::npos) << what;  // 2S² − S(S−1)/2
    EXPECT_NE(what.find("limit of 268435456"), std::string::npos) << what;
    EXPECT_NE(what.find("pytorch-comms"), std::string::npos) << what;
  }
  std::ostringstream out;
  EXPECT_THROW(io::write_pytorch_csv(out, t), Error);
  EXPECT_TRUE(out.str().empty());  // checked before the first byte
  // The same table in JSON is proportional to its ops.
  EXPECT_LT(io::format_table(t, io::TableFormat::Json).size(), std::size_t{64} * t.ops.size());
}

TEST(CsvExportLimit, StreamedWriterWritesTheSameBytes) {
  for (const auto& [name, S, M] : {std::tuple{"1f1b", 4, 8}, std::tuple{"interleaved", 4, 8},
                                   std::tuple{"zb-v", 4, 8}, std::tuple{"gpipe", 5, 3}}) {
    const auto t = test::make(name, test::sm(S, M));
    std::ostringstream out;
    io::write_pytorch_csv(out, t);
    EXPECT_EQ(out.str(), io::write_pytorch_csv(t)) << name;
    // And the grid has the cells written: commas + 1 per line.
    const auto text = out.str();
    const auto commas = std::count(text.begin(), text.end(), ',');
    const auto lines = std::count(text.begin(), text.end(), '\n');
    EXPECT_EQ(commas + lines, io::pytorch_csv_grid_cells(t)) << name;
  }
}

TEST(CsvExportLimit, TheCliStreamsAGridLargerThanItsAddressSpace) {
  if (kSanitized) GTEST_SKIP() << "address-space limits mean nothing under sanitizers";
  // 1F1B at S = 11000, M = 1: a 181 MB grid (just under the cell limit) from 22000 ops, written
  // under a 128 MiB address-space limit: it can only pass if the grid is never held whole.
  // Bytes: row d has 2S−d cells (CsvExportLimit.GridCellsOfOneFOneBAtOneMicrobatch), so 2S−d−1
  // commas and a newline, and the ops "dF0" and "dB0".
  const std::int64_t S = 11000;
  std::int64_t bytes = 0;
  for (std::int64_t d = 0; d < S; ++d)
    bytes += (2 * S - d) + 2 * (static_cast<std::int64_t>(std::to_string(d).size()) + 2);
  const auto [out, rc] = shell("bash -c 'ulimit -v 131072; " + std::string(PIPETAB_BINARY) +
                               " show 1f1b -S 11000 -M 1 --format csv 2>/dev/null | wc -c; "
                               "exit ${PIPESTATUS[0]}'");
  EXPECT_EQ(rc, 0) << out;
  EXPECT_EQ(std::stoll(out), bytes);
}

// --- Generators -------------------------------------------------------------------------------

TEST(GeneratorLimit, VShapeGridIsBoundedByItsPasses) {
  // V-Half and V-Min reorder on a grid of S·6(M+2S+2) slots holding 6SM passes; the grid may
  // have 16 cells per pass plus 2^24. S = 2048: 12288·(M + 4098) <= 196608·M + 2^24 holds from
  // M = 183 on (M = 182: 52592640 > 52559872 cells).
  for (const char* name : {"v-half", "v-min"}) {
    try {
      (void)test::make(name, test::sm(2048, 182));
      ADD_FAILURE() << name << ": no error";
    } catch (const ParamError& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find("52592640 cells exceeds the limit of 52559872"), std::string::npos)
          << what;
    }
    // At M = 1 the grid grows with S² while the passes grow with S: S = 4096 is refused at once
    // (it took 25 s and 0.7 GB for 24576 passes).
    const auto start = std::chrono::steady_clock::now();
    EXPECT_THROW((void)test::make(name, test::sm(4096, 1)), ParamError) << name;
    EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), 1.0);
    // Within the floor, small tables at M = 1 still run.
    EXPECT_EQ(test::make(name, test::sm(64, 1)).ops.size(), 6U * 64U) << name;
  }
}

TEST(GeneratorLimit, VOneFOneBGridIsBoundedByItsPasses) {
  // V-1F1B plans on S·6(M+4S+1) slots holding 6SM passes and tails, bounded the same way.
  // S = 1024: 6144·(M + 4097) <= 98304·M + 2^24 holds from M = 92 on (M = 91: 25731072 >
  // 25722880 cells).
  try {
    (void)test::make("v-1f1b", test::sm(1024, 91));
    ADD_FAILURE() << "no error";
  } catch (const ParamError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("25731072 cells exceeds the limit of 25722880"), std::string::npos) << what;
  }
  EXPECT_THROW((void)test::make("v-1f1b", test::sm(2048, 1)), ParamError);
  EXPECT_EQ(test::make("v-1f1b", test::sm(64, 1)).ops.size(), 4U * 64U);
}

// --- Studies ----------------------------------------------------------------------------------

// The order of the study's grid, written out as the nested loops the documentation states
// (schedule slowest, then system, model, scales, costs, S, options, M fastest), for a study
// whose schedules take no options.
std::vector<Configuration> nested_loops(const Study& s) {
  std::vector<Configuration> out;
  for (std::int32_t k = 0; k < static_cast<std::int32_t>(s.schedules.size()); ++k)
    for (std::int32_t sys = 0; sys < static_cast<std::int32_t>(s.systems.size()); ++sys)
      for (std::int32_t mod = 0; mod < static_cast<std::int32_t>(s.models.size()); ++mod)
        for (const double bw : s.bandwidth_scale)
          for (const double lat : s.latency_scale)
            for (const double coll : s.collective_scale)
              for (std::int32_t c = 0; c < static_cast<std::int32_t>(s.costs.size()); ++c)
                for (const auto S : s.devices)
                  for (const auto M : s.microbatches) {
                    Configuration cfg;
                    cfg.index = static_cast<std::int64_t>(out.size());
                    cfg.schedule = k;
                    cfg.system = sys;
                    cfg.model = mod;
                    cfg.bandwidth_scale = bw;
                    cfg.latency_scale = lat;
                    cfg.collective_scale = coll;
                    cfg.costs = c;
                    cfg.devices = S;
                    cfg.microbatches = M;
                    out.push_back(cfg);
                  }
  return out;
}

bool same(const Configuration& a, const Configuration& b) {
  return a.index == b.index && a.schedule == b.schedule && a.devices == b.devices &&
         a.microbatches == b.microbatches && a.chunks == b.chunks && a.waves == b.waves &&
         a.variant == b.variant && a.split == b.split && a.costs == b.costs &&
         a.system == b.system && a.model == b.model && a.bandwidth_scale == b.bandwidth_scale &&
         a.latency_scale == b.latency_scale && a.collective_scale == b.collective_scale;
}

TEST(StudyLimit, ConfigurationsComputedFromTheirIndexFollowTheGridOrder) {
  Study study;
  for (const char* name : {"1f1b", "gpipe", "zb-h1"})
    study.schedules.emplace_back().name = name;
  study.devices = {2, 4, 8};
  study.microbatches = {1, 3};
  study.costs = {"", "F=1,B=3"};
  study.systems = {"balanced", "network-bound"};
  study.bandwidth_scale = {0.5, 1, 2};
  study.latency_scale = {1, 4};
  const auto want = nested_loops(study);
  const ConfigurationSpace space(study);
  ASSERT_EQ(space.size(), want.size());
  for (std::size_t i = 0; i < want.size(); ++i)
    EXPECT_TRUE(same(space[i], want[i])) << i;
  EXPECT_THROW((void)space[want.size()], std::out_of_range);
}

TEST(StudyLimit, LargestStudyIsReadyAtOnceInLittleMemory) {
  if (kSanitized) GTEST_SKIP() << "address-space limits mean nothing under sanitizers";
  // 2^26 configurations (the documented maximum) used to be built up front, ~12 GB. Under a
  // 1 GiB address space the plan must be made and its last configuration read.
  const int code = in_limited_child(std::size_t{1} << 30, [] {
    Study study;
    study.simulate = false;
    study.schedules.emplace_back().name = "1f1b";
    study.devices.assign(std::size_t{1} << 13, 4);
    study.microbatches.assign(std::size_t{1} << 13, 8);
    const auto start = std::chrono::steady_clock::now();
    const SweepPlan plan(study);
    if (plan.configurations().size() != std::size_t{1} << 26) return 1;
    const auto last = plan.configurations()[(std::size_t{1} << 26) - 1];
    if (last.index != (std::int64_t{1} << 26) - 1 || last.devices != 4 || last.microbatches != 8)
      return 2;
    const auto seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    return seconds < 5.0 ? 0 : 3;
  });
  EXPECT_EQ(code, 0);
}

// --- Out of memory ----------------------------------------------------------------------------

// A sparse file of `bytes` zero bytes (no disk blocks).
std::string sparse_file(const std::string& name, std::uintmax_t bytes) {
  const auto path = temp_path(name);
  { std::ofstream(path, std::ios::binary); }
  std::filesystem::resize_file(path, bytes);
  return path;
}

TEST(OutOfMemoryLimit, ReadingAFileLargerThanMemoryNamesTheFile) {
  if (kSanitized) GTEST_SKIP() << "address-space limits mean nothing under sanitizers";
  const auto path = sparse_file("big.csv", std::uintmax_t{3} << 30);
  const int code = in_limited_child(std::size_t{1} << 30, [&] {
    try {
      (void)io::read_file(path);
    } catch (const Error& e) {
      const std::string what = e.what();
      return what.find(path + ": too large to read") == 0 ? 0 : 3;
    }
    return 1;  // read "successfully": cut short
  });
  std::filesystem::remove(path);
  EXPECT_EQ(code, 0);
}

TEST(OutOfMemoryLimit, CliExitsNonZeroAndSaysWhatWasTooBig) {
  if (kSanitized) GTEST_SKIP() << "address-space limits mean nothing under sanitizers";
  const std::string bin = PIPETAB_BINARY;
  // An input larger than the memory: the file is named.
  const auto path = sparse_file("big2.csv", std::uintmax_t{3} << 30);
  const auto [read_out, read_rc] =
      shell("ulimit -v 1048576; " + bin + " validate " + path + " 2>&1");
  std::filesystem::remove(path);
  EXPECT_EQ(read_rc, 2) << read_out;
  EXPECT_NE(read_out.find(path + ": too large to read: out of memory"), std::string::npos)
      << read_out;
  // A table larger than the memory: the command is named, and it is not an "internal error".
  const auto [gen_out, gen_rc] = shell("ulimit -v 524288; " + bin +
                                       " show 1f1b -S 4096 -M 4096 --format json 2>&1 >/dev/null");
  EXPECT_EQ(gen_rc, 2) << gen_out.substr(0, 300);
  EXPECT_NE(gen_out.find("pipetab: error: out of memory while running 'show'"), std::string::npos)
      << gen_out.substr(0, 300);
  EXPECT_EQ(gen_out.find("internal error"), std::string::npos);
}

}  // namespace
}  // namespace pipetab
