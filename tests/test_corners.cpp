// Issue 23's corners, end to end through the `pipetab` binary: outputs on special files (a FIFO,
// /dev/null, /dev/full, a symbolic link), subnormal measured times, duplicate run ids, plan's
// rules, and number parsing independent of the C locale. Each asserts the message it promises.
#include <clocale>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "cli_fixture.hpp"
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "pipetab/error.hpp"
#include "pipetab/study/tune.hpp"
#include "pipetab/table/memory.hpp"

namespace pipetab {
namespace {

namespace fs = std::filesystem;

using Result = test::CliResult;
using test::slurp;

class Corners : public test::CliFixture {
 protected:
  // Runs `pipetab ARGS` in the test's folder (a shell command line: `prefix` runs before it).
  Result run(const std::string& args, const std::string& prefix = {}) const {
    RunOptions o;
    o.prefix = prefix;
    o.in_folder = true;
    return run_pipetab(args, o);
  }
  // A failed run: exit code 2 and one line on stderr that contains `message`.
  void expect_error(const std::string& args, const std::string& message) const {
    expect_one_line_error(run(args), args, message);
  }

  // A runs file of one small iteration run with `extra` keys.
  std::string runs(const std::string& name, const std::string& run_keys,
                   const std::string& more = {}) const {
    return file(name,
                "[models.small]\nlayers = 4\nhidden = 1024\nheads = 16\nseq_len = 1024\n"
                "vocab = 50304\n\n"
                "[[run]]\nid = \"a\"\nsystem = \"dgx-a100\"\nmodels = [\"small\"]\n"
                "schedule = \"1f1b\"\ndevices = 2\nmicrobatches = 4\n" +
                    run_keys + more);
  }
};

// ---------------------------------------------------------------------------------------------
// 6. Outputs never destroy what is at their path.

TEST_F(Corners, OutputsToDevNullLeaveTheDevice) {
  for (const auto& option : {"--trace", "-o"}) {
    const auto r = run(std::string("simulate 1f1b -S 2 -M 4 ") + option + " /dev/null");
    EXPECT_EQ(r.code, 0) << option << r.err;
    EXPECT_TRUE(fs::is_character_file("/dev/null")) << option;
  }
  const auto study = file("study.toml",
                          "[grid]\nschedules = [\"1f1b\"]\ndevices = [2]\n"
                          "microbatches = [4]\n");
  const auto r = run("sweep study.toml -o /dev/null");
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_FALSE(fs::exists("/dev/null.sweep.json"));
  EXPECT_TRUE(fs::is_character_file("/dev/null"));
  expect_error("sweep study.toml -o /dev/null --resume",
               "/dev/null: cannot resume: --resume needs a regular file to keep rows in, and "
               "this is a device or FIFO; run without --resume");
}

TEST_F(Corners, OutputsToAFifoAreWrittenInPlace) {
  const auto fifo = dir_ / "fifo";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  for (const auto& option : {"--trace", "-o", "--svg"}) {
    const auto copy = dir_ / "copy";
    // A reader on the other end, as a pipe to another program would be.
    const auto r =
        run(std::string("simulate 1f1b -S 2 -M 4 ") + option + " fifo", "(cat fifo > copy &) && ");
    EXPECT_EQ(r.code, 0) << option << r.err;
    EXPECT_TRUE(fs::is_fifo(fifo)) << option << ": the FIFO was replaced";
    // The reader may still be draining the pipe: wait for its copy.
    for (int i = 0; i < 100 && slurp(copy).empty(); ++i)
      ::usleep(20000);
    EXPECT_FALSE(slurp(copy).empty()) << option;
    fs::remove(copy);
  }
}

TEST_F(Corners, OutputsThroughASymlinkUpdateItsTarget) {
  file("target.json", "old");
  fs::create_symlink("target.json", dir_ / "link.json");
  for (const auto& option : {"--trace", "-o"}) {
    std::ofstream(dir_ / "target.json") << "old";
    const auto r =
        run(std::string("simulate 1f1b -S 2 -M 4 --format json ") + option + " link.json");
    EXPECT_EQ(r.code, 0) << option << r.err;
    EXPECT_TRUE(fs::is_symlink(dir_ / "link.json")) << option << ": the link was replaced";
    EXPECT_NE(slurp(dir_ / "target.json"), "old") << option << ": the target was not written";
    EXPECT_EQ(slurp(dir_ / "target.json").front(), '{') << option;
  }
  // A link to a file that does not exist yet creates the file, and keeps the link.
  fs::create_symlink("new.json", dir_ / "dangling.json");
  EXPECT_EQ(run("simulate 1f1b -S 2 -M 4 --trace dangling.json").code, 0);
  EXPECT_TRUE(fs::is_symlink(dir_ / "dangling.json"));
  EXPECT_TRUE(fs::is_regular_file(dir_ / "new.json"));
}

TEST_F(Corners, AFullDeviceIsAnErrorNamingIt) {
  if (!fs::is_character_file("/dev/full")) GTEST_SKIP() << "no /dev/full";
  expect_error("simulate 1f1b -S 2 -M 4 --trace /dev/full",
               "pipetab: error: /dev/full: write error: No space left on device");
  expect_error("simulate 1f1b -S 2 -M 4 -o /dev/full", "pipetab: error: /dev/full: write error");
  EXPECT_TRUE(fs::is_character_file("/dev/full"));
}

// ---------------------------------------------------------------------------------------------
// 7. Silent wrong results.

TEST_F(Corners, SubnormalTimesAreRefusedWithFileLineAndField) {
  file("probe.csv", "gemm,forward,1024,1024,1024,0.001\ngemm,forward,2048,1024,1024,4e-320\n");
  expect_error("calibrate --gemm-probe probe.csv --system dgx-a100 -o out.toml",
               "probe.csv:2:29: seconds '4e-320': expected a measured time of at least 1e-09 s "
               "(a nanosecond)");
  runs("runs.toml", "measured_iteration_s = 4e-320\n");
  expect_error("accuracy runs.toml",
               "runs.toml:15:24: key 'run[0].measured_iteration_s': 4e-320 is out of range");
  expect_error("accuracy runs.toml", "run[0].measured_iteration_s");
}

TEST_F(Corners, ADuplicatedRunIdNamesBothEntries) {
  runs("runs.toml", "measured_iteration_s = 0.5\n",
       "\n[[run]]\nid = \"a\"\nsystem = \"dgx-a100\"\nmodels = [\"small\"]\n"
       "schedule = \"1f1b\"\ndevices = 2\nmicrobatches = 4\nmeasured_iteration_s = 0.6\n");
  expect_error("accuracy runs.toml",
               "runs.toml:18:6: key 'run[1].id': 'a' is already the id of run[0] (line 8): ids "
               "must be unique");
}

TEST_F(Corners, PlanAppliesTheModelReadersRules) {
  file("odd.toml",
       "[transformer]\nlayers = 4\nhidden = 2048\nheads = 16\nffn_hidden = 8191\nseq_len = 1024\n"
       "vocab = 50304\n");
  const auto r =
      run("plan --model odd.toml --system dgx-a100 --gpus 8 --global-batch 8 --format json");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out.find("\"tensor_parallel\": 2"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("\"tensor_parallel\": 4"), std::string::npos);
  EXPECT_NE(r.out.find("ffn_hidden = 8191 over TP 2"), std::string::npos) << r.out;
}

TEST_F(Corners, PlanCountsEveryLayoutItRejects) {
  const auto r = run("plan --model gpt3-1.3b --system dgx-a100 --gpus 7 --global-batch 8 --top 1");
  // No layout runs (24 layers over PP 7, 8 sequences over DP 7): exit 2 after the counts.
  ASSERT_EQ(r.code, 2) << r.err;
  EXPECT_NE(r.err.find("plan: no layout of 7 GPUs fits and runs"), std::string::npos) << r.err;
  // "N layouts: R rejected, P pruned ..., S simulated": R + P + S = N.
  long layouts = 0, rejected = 0, pruned = 0, simulated = 0;
  const auto at = r.out.find("layouts: ");
  ASSERT_NE(at, std::string::npos) << r.out;
  const auto start = r.out.rfind(' ', at - 2) + 1;
  ASSERT_EQ(std::sscanf(r.out.c_str() + start,
                        "%ld layouts: %ld rejected, %ld pruned by their lower bound, %ld simulated",
                        &layouts, &rejected, &pruned, &simulated),
            4)
      << r.out;
  EXPECT_EQ(layouts, rejected + pruned + simulated) << r.out;
}

TEST_F(Corners, PlanRefusesSizesBelowOneAndRanksASchedulesOnce) {
  const std::string plan = "plan --model gpt3-1.3b --system dgx-a100 ";
  expect_error(plan + "--gpus 8 --global-batch 8 --seq-len -1",
               "pipetab: error: --seq-len: Value -1 not in range");
  expect_error(plan + "--gpus 0 --global-batch 8", "plan: --gpus 0 must be from 1 to 16777216");
  expect_error(plan + "--gpus 8 --global-batch 8 --tp 0",
               "plan: --tp 0: a tensor-parallel size must be at least 1");
  const auto once =
      run(plan + "--gpus 8 --global-batch 8 --schedules 1f1b --top 1000 --format json");
  const auto twice =
      run(plan + "--gpus 8 --global-batch 8 --schedules 1f1b,1f1b --top 1000 --format json");
  ASSERT_EQ(once.code, 0) << once.err;
  ASSERT_EQ(twice.code, 0) << twice.err;
  const auto count = [](const std::string& text) {
    std::size_t n = 0;
    for (auto at = text.find("\"rank\""); at != std::string::npos;
         at = text.find("\"rank\"", at + 1))
      ++n;
    return n;
  };
  EXPECT_EQ(count(once.out), count(twice.out));
}

TEST_F(Corners, BoundsThatStateTheirRule) {
  file("r.csv", "schedule,params.microbatches,table.makespan\n1f1b,4,10\n1f1b,8,18\n");
  expect_error(
      "plot r.csv --x params.microbatches --y table.makespan --series schedule "
      "--font-scale 10000 -o out.pdf",
      "plot: --font-scale 10000: expected a number above 0 and at most 10 (larger text "
      "leaves no room for the panels)");
  EXPECT_FALSE(fs::exists(dir_ / "out.pdf"));
  expect_error(
      "simulate 1f1b -S 4 -M 8 --model llama2-70b --system dgx-h100 --dp 2 --dp-overlap "
      "--dp-bucket-mb 0.01",
      "--dp-bucket-mb 0.01: buckets of 0.01 MB split a stage's");
}

TEST_F(Corners, NonFiniteFractionsAreRefused) {
  MemoryOptions memory;
  memory.input_grad_frees = std::numeric_limits<double>::quiet_NaN();
  ScheduleTable table;
  EXPECT_THROW((void)activation_peaks(table, memory), ParamError);
}

// The C library's number parsing follows setlocale: under de_DE.UTF-8 (a Python process after
// locale.setlocale), strtod read "5,5" as 5.5 and "5.5" as 5. pipetab's parsing must not.
TEST_F(Corners, NumbersParseTheSameUnderAnyLocale) {
  const char* const names[] = {"de_DE.UTF-8", "de_DE.utf8", "fr_FR.UTF-8"};
  const char* used = nullptr;
  for (const char* name : names) {
    if (std::setlocale(LC_NUMERIC, name) != nullptr) {
      used = name;
      break;
    }
  }
  if (used == nullptr) {
    // Build one where the locale sources are installed (Debian's locales package).
    const auto where = dir_ / "locales";
    fs::create_directories(where);
    const auto command =
        "localedef -i de_DE -f UTF-8 " + (where / "de_DE.UTF-8").string() + " > /dev/null 2>&1";
    if (std::system(command.c_str()) == 0) {
      ::setenv("LOCPATH", where.c_str(), 1);
      if (std::setlocale(LC_NUMERIC, "de_DE.UTF-8") != nullptr) used = "de_DE.UTF-8";
    }
  }
  if (used == nullptr) GTEST_SKIP() << "no locale with a decimal comma";
  ASSERT_STREQ(std::localeconv()->decimal_point, ",");
  const auto limit = parse_memory_limit("5.5");
  const auto bytes = parse_memory_limit("1.5GB");
  EXPECT_THROW((void)parse_memory_limit("5,5"), ParamError);
  std::setlocale(LC_NUMERIC, "C");
  ::unsetenv("LOCPATH");
  EXPECT_EQ(limit.value, 5.5);
  EXPECT_EQ(bytes.value, 1.5e9);
}

// ---------------------------------------------------------------------------------------------
// 8. Poor errors.

TEST_F(Corners, ErrorsInTheFilesTerms) {
  // A runs file naming a missing system: the file, line and key, not an option never given.
  file("runs.toml",
       "[models.small]\nlayers = 4\nhidden = 1024\nheads = 16\nseq_len = 1024\nvocab = 50304\n\n"
       "[[run]]\nid = \"a\"\nsystem = \"no-such-system\"\nmodels = [\"small\"]\n"
       "schedule = \"1f1b\"\ndevices = 2\nmicrobatches = 4\nmeasured_iteration_s = 0.5\n");
  expect_error("accuracy runs.toml", "runs.toml:8: run[0].system: '");
  const auto r = run("accuracy runs.toml");
  EXPECT_EQ(r.err.find("--system"), std::string::npos) << r.err;
  // Tiny efficiencies: the system file and the key.
  file("tiny.toml",
       "name = \"tiny\"\n[device]\npreset = \"dgx-a100\"\n[network]\ntopology = \"switched\"\n"
       "devices_per_node = 8\n[network.intra]\nlatency_s = 1e-6\nbandwidth = 3e11\n"
       "collective_efficiency = 1e-300\n[network.inter]\nlatency_s = 1e-6\nbandwidth = 3e10\n");
  expect_error("simulate 1f1b -S 2 -M 4 --system tiny.toml",
               "tiny.toml:10:25: key 'network.intra.collective_efficiency': 1e-300 leaves 3e-289 "
               "B/s of the link's 3e+11 B/s: expected at least 1 B/s");
}

TEST_F(Corners, TheGemmProbeReaderTakesAByteOrderMark) {
  file("probe.csv", "\xEF\xBB\xBFgemm,forward,1024,1024,1024,0.0001\n");
  const auto r = run("calibrate --gemm-probe probe.csv --system dgx-a100 -o out.toml");
  EXPECT_EQ(r.err.find("kind"), std::string::npos) << r.err;
}

TEST_F(Corners, AccuracyEscapesControlBytesInIds) {
  file("runs.toml",
       "[models.small]\nlayers = 4\nhidden = 1024\nheads = 16\nseq_len = 1024\nvocab = 50304\n\n"
       "[[run]]\nid = \"a\\u001b[31mred\"\nsystem = \"dgx-a100\"\nmodels = [\"small\"]\n"
       "schedule = \"1f1b\"\ndevices = 2\nmicrobatches = 4\nmeasured_iteration_s = 0.5\n");
  const auto r = run("accuracy runs.toml");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out.find('\x1b'), std::string::npos);
  EXPECT_NE(r.out.find("a\\x1b[31mred"), std::string::npos) << r.out;
}

TEST_F(Corners, ResumeKnowsTheStudyUnderAnotherSpelling) {
  file("study.toml", "[grid]\nschedules = [\"1f1b\"]\ndevices = [2]\nmicrobatches = [4, 8]\n");
  ASSERT_EQ(run("sweep study.toml -o out.csv").code, 0);
  const auto r = run("sweep ./study.toml -o out.csv --resume");
  EXPECT_EQ(r.code, 0) << r.err;
}

TEST_F(Corners, SimulationJsonCountsGraphNodes) {
  const auto r = run("simulate 1f1b -S 2 -M 4 --format json");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("\"graph_nodes\""), std::string::npos);
  EXPECT_EQ(r.out.find("\"nodes\""), std::string::npos);
}

// A study over a file with PyTorch's sends and receives simulates it under the runtime
// `simulate --table` picks for it (the file's own order), to the same runtime: the study once
// reported such rows "ok" with no simulation.
TEST_F(Corners, AStudyOverACommsFileSimulatesItAsSimulateDoes) {
  fs::copy_file(fs::path(PIPETAB_SOURCE_DIR) / "tests/data/pytorch/zb1p_comms_new.csv",
                dir_ / "comms.csv");
  file("study.toml",
       "name = \"t\"\nrecord = [\"simulation.runtime_s\", \"simulation.runtime\"]\n[grid]\n"
       "schedules = [{ table = \"comms.csv\" }]\nsystems = [\"dgx-h100\"]\nmodels = "
       "[\"gpt3-1.3b\"]\n");
  const auto sweep = run("sweep study.toml -o out.csv");
  ASSERT_EQ(sweep.code, 0) << sweep.err;
  const auto simulate =
      run("simulate --table comms.csv --system dgx-h100 --model gpt3-1.3b --format json");
  ASSERT_EQ(simulate.code, 0) << simulate.err;
  const auto json = nlohmann::json::parse(simulate.out);
  const auto rows = slurp(dir_ / "out.csv");
  const auto row = rows.substr(rows.find('\n') + 1);
  EXPECT_EQ(row, fmt::format("0,ok,,{},pytorch\n", json["runtime_s"].get<double>()))
      << rows << "\nsimulate: " << json["runtime_s"] << " " << json["runtime"];
}

}  // namespace
}  // namespace pipetab
