// The `pipetab` command end to end: outputs, exit codes (0 success, 2 bad usage or input) and
// one-line reasons on stderr.
#include <algorithm>
#include <cctype>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "cli_fixture.hpp"
#include <fcntl.h>
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <sys/file.h>
#include <sys/wait.h>
#include <unistd.h>

#include "pipetab/io/config.hpp"
#include "pipetab/report/text.hpp"
#include "pipetab/schedules/registry.hpp"
#include "pipetab/sim/options.hpp"
#include "pipetab/study/calibrate.hpp"

namespace pipetab {
namespace {

namespace fs = std::filesystem;

using Result = test::CliResult;
using test::slurp;

class Cli : public test::CliFixture {
 protected:
  // Runs pipetab with `args`; stdout goes to `stdout_path` (default: captured in Result::out).
  Result run(const std::string& args, std::string stdout_path = {}) const {
    RunOptions o;
    o.stdout_path = std::move(stdout_path);
    return run_pipetab(args, o);
  }
  // A failed run: exit code 2 and exactly one line on stderr containing `fragment`.
  void expect_usage_error(const std::string& args, const std::string& fragment) const {
    expect_one_line_error(run(args), args, fragment);
  }
};

TEST_F(Cli, HelpOnEverySubcommand) {
  auto r = run("--help");
  EXPECT_EQ(r.code, 0);
  for (const char* sub :
       {"list", "show", "analyze", "simulate", "compare", "validate", "convert", "sweep",
        "sensitivity", "plot", "tune", "accuracy", "calibrate", "cost", "plan"}) {
    EXPECT_NE(r.out.find(sub), std::string::npos) << sub;
    const auto help = run(std::string(sub) + " --help");
    EXPECT_EQ(help.code, 0) << sub;
    EXPECT_NE(help.out.find("Usage"), std::string::npos) << sub;
  }
  r = run("--version");
  EXPECT_EQ(r.code, 0);
  EXPECT_FALSE(r.out.empty());
}

// CLI11's parse errors, in pipetab's words: what a missing value must be, the options nearest
// an unknown one, and a switch given a value it cannot read (which aborted the process: CLI11
// reads it with std::stoll and let std::invalid_argument through).
TEST_F(Cli, ParseErrorsSayWhatIsWanted) {
  expect_usage_error(
      "simulate 1f1b --tp",
      "--tp needs a value: a number from 1 to 1048576 (see pipetab simulate --help)");
  expect_usage_error("simulate 1f1b --fsdp-grad-sync",
                     "--fsdp-grad-sync needs a value: one of auto, step, microbatch");
  expect_usage_error("plan --gpus",
                     "--gpus needs a value: a whole number (see pipetab plan --help)");
  expect_usage_error("plan --gpu 8",
                     "--gpu is not an option of 'pipetab plan'; did you mean '--gpus'?");
  expect_usage_error("simulate 1f1b --tp-size 2",
                     "--tp-size is not an option of 'pipetab simulate'; did you mean '--tp'?");
  expect_usage_error("simulate 1f1b --sytem x", "did you mean '--system'?");
  expect_usage_error("simulate 1f1b --zzzzzz",
                     "--zzzzzz is not an option of 'pipetab simulate' (see");
  for (const char* value : {"maybe", "", "2x"}) {
    expect_usage_error(std::string("simulate 1f1b --dp-overlap=") + value,
                       "--dp-overlap is a switch: give it alone, or as --dp-overlap=true or "
                       "--dp-overlap=false");
  }
  EXPECT_EQ(run("simulate 1f1b --dp-overlap=false").code, 0);
}

TEST_F(Cli, List) {
  auto r = run("list");
  EXPECT_EQ(r.code, 0);
  for (const char* name :
       {"gpipe", "1f1b", "interleaved", "chimera", "chimera-asym", "hanayo", "dualpipe",
        "dualpipev", "looped-bfs", "zb-v", "v-half", "v-min", "interleaved-zb", "v-1f1b"}) {
    EXPECT_NE(r.out.find(name), std::string::npos) << name;
  }
  r = run("list --format json");
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j.size(), all_schedules().size());
  EXPECT_EQ(j[2]["default_chunks"], 2);
}

// `list options`: every option of the one definition, in its order, with its flag, its default
// as the option reads it back, and whether plan --search takes it (with the rule where not).
TEST_F(Cli, ListOptions) {
  auto r = run("list options --format json");
  ASSERT_EQ(r.code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  const auto options = run_options();
  ASSERT_EQ(j.size(), options.size());
  for (std::size_t i = 0; i < options.size(); ++i) {
    EXPECT_EQ(j[i]["key"], options[i].key);
    if (!options[i].flag.empty()) {
      EXPECT_EQ(j[i]["flag"], options[i].flag);
    }
    // The default parses back as the option's own value (unset ones are empty).
    const std::string fallback = j[i]["default"];
    if (!fallback.empty()) {
      EXPECT_NO_THROW((void)parse_option_value(options[i], fallback));
    }
  }
  const auto plan_search = [&](const std::string& key) {
    const auto it =
        std::find_if(j.begin(), j.end(), [&](const auto& o) { return o["key"] == key; });
    return it == j.end() ? nlohmann::json() : (*it)["plan_search"];
  };
  // plan's own axes, what it derives, the runtime and the stage split: refused with the rule.
  EXPECT_EQ(plan_search("tensor_parallel"), "plan searches it itself: give its values with --tp");
  EXPECT_EQ(plan_search("expert_tensor_parallel"),
            "plan searches it itself: give its values with --etp");
  EXPECT_EQ(plan_search("chunks"), "plan searches it itself: give its values with --chunks");
  for (const std::string key : {"data_parallel", "global_batch", "runtime", "pipeline_layout"})
    EXPECT_TRUE(plan_search(key).is_string()) << key;
  // What plan keeps fixed otherwise (cp_method: --cp-method's one value) is searchable.
  for (const std::string key : {"moe_dispatcher", "seq_len", "tp_overlap", "cp_method"})
    EXPECT_EQ(plan_search(key), true) << key;
  r = run("list options");
  ASSERT_EQ(r.code, 0) << r.err;
  for (const auto& o : options)
    EXPECT_NE(r.out.find("  " + std::string(o.key) + " "), std::string::npos) << o.key;
}

// An error quotes what it was given, but not a 100 kB argument whole: a long word keeps its head
// and tail, cut between UTF-8 characters, and says how much it left out; many words stop at a
// line's length.
TEST_F(Cli, ErrorsShortenWhatTheyQuote) {
  std::string accents;
  for (int i = 0; i < 50000; ++i)
    accents += "\xc3\xa9";  // é
  std::string words;
  for (int i = 0; i < 30000; ++i)
    words += "ab ";
  for (const std::string& args :
       {"simulate 1f1b --model " + accents, "simulate 1f1b --seq-len " + accents,
        "simulate 1f1b --model '" + words + "'"}) {
    const auto r = run(args);
    const auto shown = args.substr(0, 40);
    expect_one_line_error(r, shown, "bytes left out");
    EXPECT_LT(r.err.size(), 4200U) << shown;
    // Valid UTF-8: every continuation byte follows a lead or another continuation byte.
    for (std::size_t i = 0; i < r.err.size(); ++i) {
      const auto byte = static_cast<unsigned char>(r.err[i]);
      if ((byte & 0xC0U) == 0x80U) {
        ASSERT_GT(i, 0U);
        EXPECT_GE(static_cast<unsigned char>(r.err[i - 1]), 0x80U) << shown << " at " << i;
      }
      if (byte == 0xC3) {
        EXPECT_EQ(static_cast<unsigned char>(r.err[i + 1]), 0xA9U) << i;
      }
    }
  }
  // A short value is quoted whole.
  expect_one_line_error(run("simulate 1f1b --model llama-9000"), "--model llama-9000",
                        "--model llama-9000");
}

// Text output fits a 120-column terminal (point 5 of the front-door issue): tables drop what is
// zero everywhere and give a layout its own line, prose folds; --wide keeps plan's one line per
// layout. Columns count characters, not bytes ("·" is one).
TEST_F(Cli, TextFitsATerminal) {
  const auto widest = [](const std::string& out) {
    std::size_t most = 0;
    std::istringstream lines(out);
    for (std::string line; std::getline(lines, line);)
      most = std::max(most, text_columns(line));
    return most;
  };
  const std::string plan =
      "plan --model llama3.1-70b --system dgx-h100 --gpus 64 --global-batch "
      "512 --pp 4,8 --tp 4 --cp 1,2 --micro-batch 1 --top 5";
  for (const std::string& command :
       {plan, plan + " --explain 1", std::string("list"), std::string("list models"),
        std::string("list systems"), std::string("list options"),
        // over the memory: the warning and the breakdown are prose
        std::string("simulate 1f1b --model llama3.1-70b --system dgx-h100 -S 4 -M 8"),
        std::string("sensitivity -S 4 -M 4 --system compute-bound --steps 3"),
        // --help: CLI11 printed each description on one line, up to 705 columns
        std::string("--help"), std::string("simulate --help"), std::string("plan --help"),
        std::string("calibrate --help"), std::string("plot --help"), std::string("cost --help")}) {
    const auto r = run(command);
    ASSERT_EQ(r.code, 0) << command << "\n" << r.err;
    EXPECT_LE(widest(r.out), kTextWidth) << command << "\n" << r.out;
  }
  // plan: the layout under its figures, the all-zero shares (A2A: no experts) left out and said;
  // --wide: every share and the layout on the line.
  auto r = run(plan);
  EXPECT_EQ(r.out.find(" A2A "), std::string::npos);
  EXPECT_NE(r.out.find("the others are 0.0% for every layout (--wide)"), std::string::npos);
  EXPECT_NE(r.out.find("\n      TP 4 · "), std::string::npos) << r.out;
  r = run(plan + " --wide");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find(" A2A "), std::string::npos);
  EXPECT_NE(r.out.find("%  TP 4 · "), std::string::npos) << r.out;
  EXPECT_GT(widest(r.out), kTextWidth);
}

// calibrate --help lists every parameter --fit takes, each name apart from its meaning (names of
// 30 characters or more once ran into it: "attention.flash2.forward_efficiencyFlashAttention-2").
TEST_F(Cli, CalibrateHelpSetsEveryParameterApartFromItsMeaning) {
  const auto r = run("calibrate --help");
  ASSERT_EQ(r.code, 0) << r.err;
  for (const auto& p : calibration_parameters()) {
    const auto at = r.out.find("\n  " + std::string(p.name) + " ");
    ASSERT_NE(at, std::string::npos) << p.name << "\n" << r.out;
    const auto meaning = r.out.find(p.meaning, at);
    ASSERT_NE(meaning, std::string::npos) << p.name;
    EXPECT_GE(meaning, at + 3 + p.name.size() + 2) << p.name;
  }
}

// `list models|systems`: the presets --model and --system take, with their TOML in JSON (the web
// page's menus and its "custom" starting points).
TEST_F(Cli, ListPresets) {
  for (const std::string kind : {"models", "systems"}) {
    const auto names = kind == "models" ? io::model_presets() : io::system_presets();
    auto r = run("list " + kind);
    ASSERT_EQ(r.code, 0) << r.err;
    // A described table: a header, then each preset's line beginning with its name (its
    // description folded under itself on lines that begin with spaces).
    std::istringstream lines(r.out);
    std::string line;
    std::getline(lines, line);
    EXPECT_TRUE(line.starts_with("name ")) << line;
    for (const auto& name : names) {
      do {
        ASSERT_TRUE(std::getline(lines, line));
      } while (line.starts_with(" "));
      EXPECT_TRUE(line.starts_with(name + " ")) << line;
    }
    r = run("list " + kind + " --format json");
    ASSERT_EQ(r.code, 0) << r.err;
    const auto j = nlohmann::json::parse(r.out);
    ASSERT_EQ(j.size(), names.size());
    for (std::size_t i = 0; i < names.size(); ++i) {
      EXPECT_EQ(j[i]["name"], names[i]);
      EXPECT_EQ(j[i]["toml"], std::string(io::preset_text(kind, names[i])));
      EXPECT_FALSE(j[i]["toml"].get<std::string>().empty()) << names[i];
      EXPECT_FALSE(j[i]["description"].get<std::string>().empty()) << names[i];
    }
  }
  // The figures are the presets' own: Llama 3.1 70B's 70.55 B parameters (its file's count),
  // DeepSeek-V3's 671 B with 37 B active (its report's title), an H100's 80 GB and 989.4 TF.
  const auto models = nlohmann::json::parse(run("list models --format json").out);
  for (const auto& m : models) {
    if (m["name"] == "llama3.1-70b") {
      EXPECT_NEAR(m["params"].get<double>() / 1e9, 70.55, 0.01);
      EXPECT_EQ(m["params"], m["active_params"]);
    }
    if (m["name"] == "deepseek-v3") {
      EXPECT_NEAR(m["params"].get<double>() / 1e9, 671, 1);
      EXPECT_NEAR(m["active_params"].get<double>() / 1e9, 37, 1);
    }
  }
  const auto systems = nlohmann::json::parse(run("list systems --format json").out);
  for (const auto& sys : systems) {
    if (sys["name"] != "dgx-h100") continue;
    EXPECT_EQ(sys["memory_bytes"], 80e9);
    EXPECT_NEAR(sys["peak_bf16_flops"].get<double>(), 989.4e12, 1e11);
  }
  expect_usage_error("list layouts",
                     "layouts not in {schedules,models,systems,options,stacks,error-bars}");
  // The error bars' checks: the text's rows are the JSON's, each run counted once per check.
  const auto bars = nlohmann::json::parse(run("list error-bars --format json").out);
  const auto text = run("list error-bars").out;
  ASSERT_FALSE(bars.empty());
  for (const auto& c : bars) {
    EXPECT_LE(c["covered"].get<int>(), c["runs"].get<int>());
    if (c["high_factor"].get<double>() > 0) {  // 0: too few presets to carry an interval
      EXPECT_LT(c["low_factor"].get<double>(), c["high_factor"].get<double>());
    }
    if (c["runs"].get<int>() > 0) {
      EXPECT_NE(text.find(fmt::format("{} of {}", c["covered"].get<int>(), c["runs"].get<int>())),
                std::string::npos);
    }
  }
}

// Presets by the names people use: a Hugging Face id, the release's own capitals and suffixes,
// another release of the same architecture; a name close to one is answered with it.
TEST_F(Cli, PresetsAsPeopleNameThem) {
  const std::vector<std::pair<std::string, std::string>> names{
      {"llama3-70b", "llama3.1-70b"},
      {"meta-llama/Llama-3.1-70B", "llama3.1-70b"},
      {"meta-llama/Meta-Llama-3-70B-Instruct", "llama3.1-70b"},
      {"meta-llama/Llama-2-7b-hf", "llama2-7b"},
      {"mistralai/Mixtral-8x7B-v0.1", "mixtral-8x7b"},
      {"Qwen/Qwen3-235B-A22B", "qwen3-235b-a22b"},
      {"deepseek-ai/DeepSeek-V3", "deepseek-v3"},
      {"openai/gpt-oss-120b", "gpt-oss-120b"},
      {"MPT-7B", "mpt-7b"}};
  for (const auto& [given, preset] : names) {
    const auto r = run("cost --model " + given + " --format json");
    ASSERT_EQ(r.code, 0) << given << ": " << r.err;
    EXPECT_EQ(nlohmann::json::parse(r.out)["model"], preset) << given;
    EXPECT_EQ(r.err, "") << given;
  }
  auto r = run("simulate 1f1b --system H100 --format json");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(nlohmann::json::parse(r.out)["system"], "dgx-h100");
  expect_usage_error("cost --model lama2-7b", "did you mean 'llama2-7b'?");
  expect_usage_error("cost --model llama3.1-7b", "did you mean 'llama3.1-70b' or 'llama3.1-8b'?");
  expect_usage_error("cost --model no-such-model-at-all", "no such preset or file (presets:");
}

// --bandwidth-scale and --latency-scale are a system file with every link so scaled.
TEST_F(Cli, LinkScalesEqualAScaledSystemFile) {
  auto system = io::load_system("dgx-a100");
  system.intra = system.intra.scaled(0.25, 3.0);
  system.inter = system.inter.scaled(0.25, 3.0);
  const auto path = file("scaled.toml", io::system_toml(system));
  const std::string common =
      "simulate 1f1b -S 4 -M 8 --model llama2-13b --tp 2 --dp 2 --format json";
  const auto scaled = run(common + " --system dgx-a100 --bandwidth-scale 0.25 --latency-scale 3");
  const auto from_file = run(common + " --system " + path);
  const auto plain = run(common + " --system dgx-a100");
  ASSERT_EQ(scaled.code, 0) << scaled.err;
  ASSERT_EQ(from_file.code, 0) << from_file.err;
  const auto a = nlohmann::json::parse(scaled.out), b = nlohmann::json::parse(from_file.out),
             c = nlohmann::json::parse(plain.out);
  EXPECT_EQ(a["runtime_s"], b["runtime_s"]);
  EXPECT_EQ(a["exposed_comm_s"], b["exposed_comm_s"]);
  // A quarter of the bandwidth costs time: the scales are not ignored.
  EXPECT_GT(a["runtime_s"].get<double>(), c["runtime_s"].get<double>());
  expect_usage_error("simulate 1f1b --bandwidth-scale 0", "not a factor between 1e-6 and 1e6");
  expect_usage_error("simulate 1f1b --latency-scale nan", "not a factor between 1e-6 and 1e6");
  expect_usage_error("compare --bandwidth-scale -2", "not a factor between 1e-6 and 1e6");
}

// plan --progress-lines: stderr is "progress PHASE DONE TOTAL" lines, checking before
// simulating, counts within their totals; stdout is what it is without them.
TEST_F(Cli, PlanProgressLines) {
  const std::string args =
      "plan --model llama2-13b --system dgx-a100 --gpus 16 --global-batch 32 "
      "--format json -j 1";
  const auto with = run(args + " --progress-lines");
  const auto without = run(args);
  ASSERT_EQ(with.code, 0) << with.err;
  EXPECT_EQ(with.out, without.out);
  std::istringstream lines(with.err);
  std::string line, last_phase;
  long long last_done = -1, last_total = -2;
  int count = 0;
  while (std::getline(lines, line)) {
    char phase[16] = {};
    long long done = -1, total = -1;
    ASSERT_EQ(std::sscanf(line.c_str(), "progress %15s %lld %lld", phase, &done, &total), 3)
        << line;
    EXPECT_TRUE(std::string(phase) == "checking" || std::string(phase) == "simulating") << line;
    EXPECT_FALSE(last_phase == "simulating" && std::string(phase) == "checking") << line;
    EXPECT_GE(done, 0);
    EXPECT_LE(done, total);
    last_phase = phase;
    last_done = done;
    last_total = total;
    ++count;
  }
  EXPECT_GE(count, 2);
  EXPECT_EQ(last_phase, "simulating");
  // It ends at its total, also when the bound prunes what was left to lower.
  EXPECT_EQ(last_done, last_total);
}

TEST_F(Cli, GroupSize) {
  // PyTorch's order for M = 10 on 4 ranks: Megatron's order in groups of 5 (docs/schedules.md).
  auto r = run("analyze interleaved -S 4 -M 10 --group-size 5 --format json");
  ASSERT_EQ(r.code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["table"]["makespan"], 34.5);
  EXPECT_EQ(j["table"]["peak_activation"], nlohmann::json({6.0, 5.0, 4.0, 3.0}));
  EXPECT_EQ(j["formula"]["makespan"], 34.5);
  // compare applies it to the schedules that take it and leaves the others alone.
  r = run("compare gpipe interleaved -S 4 -M 10 --group-size 5 --system ideal --format json");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(nlohmann::json::parse(r.out)["comparisons"][0]["schedules"].size(), 2U);
}

TEST_F(Cli, ShowGridAndExports) {
  auto r = run("show 1f1b -S 2 -M 2 --color never");
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("dev 0| F0 F1 .  .  B0--- .  B1---\n"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find('\x1b'), std::string::npos);
  r = run("show 1f1b -S 2 -M 2 --color always");
  EXPECT_NE(r.out.find('\x1b'), std::string::npos);
  r = run("show 1f1b -S 2 -M 2 --format csv");
  EXPECT_EQ(r.out, "0F0,0F1,,0B0,,0B1\n,1F0,1B0,1F1,1B1\n");
  r = run("show chimera -S 4 -M 8 --format json");
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["source"]["schedule"], "chimera");
  EXPECT_EQ(j["placement"].size(), 2U);
  const auto out = (dir_ / "t.csv").string();
  r = run("show gpipe -S 3 -M 3 --format csv -o " + out);
  EXPECT_EQ(r.code, 0);
  EXPECT_TRUE(r.out.empty());
  EXPECT_EQ(slurp(out).substr(0, 8), "0F0,0F1,");
}

TEST_F(Cli, AnalyzeFormats) {
  auto r = run("analyze 1f1b -S 4 -M 8 --format json");
  ASSERT_EQ(r.code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["schedule"], "1f1b");
  EXPECT_EQ(j["params"]["devices"], 4);
  EXPECT_EQ(j["table"]["makespan"], 33.0);
  EXPECT_EQ(j["table"]["peak_activation"], nlohmann::json({4.0, 3.0, 2.0, 1.0}));
  EXPECT_TRUE(j.contains("simulation"));
  EXPECT_EQ(run("analyze 1f1b -S 4 -M 8 --format json").out, r.out) << "not deterministic";

  r = run("analyze interleaved -S 4 -M 8 -v 4 --format csv --costs F=1,B=1");
  EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 2);
  EXPECT_EQ(r.out.rfind("schedule,params.devices,", 0), 0U);

  // Memory over time, device by device (hand-checked in test_timing_memory.cpp).
  r = run("analyze 1f1b -S 2 -M 2 --format json --memory-curves");
  EXPECT_EQ(nlohmann::json::parse(r.out)["table"]["activation_curve"],
            nlohmann::json::parse("[[[0,1],[1,2],[6,1],[9,0]], [[0,0],[1,1],[7,0]]]"));

  r = run("analyze chimera -S 4 -M 8 --variant doubling");
  EXPECT_NE(r.out.find("published bubble ratio"), std::string::npos);
  EXPECT_NE(r.out.find("variant doubling"), std::string::npos);
}

TEST_F(Cli, BadUsageIsExitTwoWithOneLine) {
  expect_usage_error("", "A subcommand is required");
  expect_usage_error("frobnicate",
                     "unknown subcommand 'frobnicate' (expected one of: list, show, analyze, "
                     "simulate, compare, validate, convert, plot, sweep, sensitivity, tune, "
                     "accuracy, calibrate, cost, plan, collective)");
  expect_usage_error("analyze", "give a schedule name (see pipetab list) or --table FILE");
  expect_usage_error("analyze nosuch", "unknown schedule 'nosuch'");
  expect_usage_error("analyze gpipe -v 2",
                     "gpipe: -v/--chunks is not a parameter of this schedule");
  expect_usage_error("analyze chimera -S 3 -M 6", "D = S = 3 must be even");
  expect_usage_error("analyze interleaved -S 4 -M 6 --group-size 4",
                     "interleaved: M = 6 with group size g = 4: M mod g = 2 must be 0 or at least "
                     "S = 4 (Megatron's dependency-bubble rule); --group-size 6 works");
  expect_usage_error("analyze gpipe --group-size 4",
                     "gpipe: --group-size is not a parameter of this schedule");
  expect_usage_error("analyze interleaved --group-size x", "'x' is not a whole number");
  expect_usage_error("analyze 1f1b -S 0", "devices (-S) = 0: must be at least 1");
  expect_usage_error("analyze 1f1b -S abc", "'abc' is not a whole number");
  expect_usage_error("analyze 1f1b -M 99999999999999999999",
                     "'99999999999999999999' is not a whole number");
  expect_usage_error("analyze interleaved -v 2.5", "'2.5' is not a whole number");
  expect_usage_error("analyze 1f1b --costs B=0", "--costs: B=0: costs must be positive");
  expect_usage_error("analyze 1f1b --format xml", "xml");
  expect_usage_error("show 1f1b --color sometimes", "sometimes");
  expect_usage_error("analyze 1f1b --input-grad-frees 2", "'2' is not a fraction between 0 and 1");
  expect_usage_error("analyze 1f1b --input-grad-frees nan",
                     "'nan' is not a fraction between 0 and 1");
  expect_usage_error("analyze 1f1b --costs ''", "--costs: empty");
  expect_usage_error("analyze 1f1b -S 0x10", "'0x10' is not a whole number");
  expect_usage_error("show 1f1b -S 64 -M 4096 --costs F=1,B=1.0000001", "use --format csv or json");
}

TEST_F(Cli, DecimalNumbersOnlyAndWriteErrors) {
  // "010" is ten, not CLI11's octal eight.
  EXPECT_EQ(run("analyze 1f1b -S 010 -M 10 --format json").out,
            run("analyze 1f1b -S 10 -M 10 --format json").out);
  const auto r = run("analyze 1f1b", "/dev/full");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("cannot write to standard output"), std::string::npos) << r.err;
}

TEST_F(Cli, Compare) {
  auto r = run("compare");
  ASSERT_EQ(r.code, 0) << r.err;
  for (const char* name : {"gpipe", "1f1b", "interleaved", "chimera", "chimera-asym", "hanayo",
                           "== compute-bound", "== balanced", "== network-bound"}) {
    EXPECT_NE(r.out.find(name), std::string::npos) << name;
  }
  EXPECT_EQ(run("compare").out, r.out) << "not deterministic";
  r = run("compare -M 16 --system balanced --format json");
  auto j = nlohmann::json::parse(r.out);
  ASSERT_EQ(j["comparisons"].size(), 1U);
  const auto& c = j["comparisons"][0];
  EXPECT_EQ(c["system"], "balanced");
  EXPECT_EQ(c["schedules"].size(), 5U);
  EXPECT_EQ(c["skipped"][0]["schedule"], "hanayo");
  EXPECT_EQ(c["skipped"][0]["reason"],
            "M = 16 must equal S = 8: only the restricted regime of one wave unit (M = S) is "
            "supported (see "
            "docs/schedules.md)");
  for (const auto& row : c["schedules"]) {
    EXPECT_TRUE(row["rank"]["simulation"].is_number());
    EXPECT_EQ(row["simulation"]["system"], "balanced");
  }
  r = run("compare 1f1b interleaved -S 4 -M 8 -v 4 --format csv");
  EXPECT_NE(r.out.find("rank.changed_simulation"), std::string::npos);
  EXPECT_NE(r.out.find("interleaved,4,16,8,4"), std::string::npos)
      << r.out;  // -v reaches interleaved only
  EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 1 + 2 * 3)
      << "one header, two rows per regime";
  expect_usage_error("compare gpipe nosuch", "unknown schedule 'nosuch'");
  expect_usage_error("compare --system nosuch", "--system nosuch: no such preset or file");
}

TEST_F(Cli, TheWholeIterationOnAModelledCluster) {
  // 175B on 8 nodes of Selene, TP 8 inside a node (a model file as a user writes it).
  const auto model = file("175b.toml",
                          "[transformer]\nlayers = 96\nhidden = 12288\nheads = 96\nseq_len = "
                          "2048\nvocab = 51200\ntensor_parallel = 8\nsequence_parallel = "
                          "true\nrecompute = \"selective\"\n");
  auto r = run("simulate interleaved -S 8 -v 3 -M 16 --model " + model +
               " --system dgx-a100 --runtime megatron --format json");
  ASSERT_EQ(r.code, 0) << r.err;
  auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["runtime"], "megatron");
  EXPECT_EQ(j["tp_overlap"], "backward");
  EXPECT_EQ(j["gpus"], 64);
  EXPECT_EQ(j["tensor_parallel"], 8);
  EXPECT_EQ(j["sequences"], 16.0);
  // MFU and HFU by Korthikanti's definitions: selective recomputation adds the attention core.
  EXPECT_GT(j["mfu"].get<double>(), 0.2);
  EXPECT_LT(j["mfu"].get<double>(), j["hfu"].get<double>());
  EXPECT_NEAR(j["tokens_per_s"].get<double>(), 16 * 2048 / j["runtime_s"].get<double>(), 1e-6);
  // The breakdown adds up on every device.
  for (std::size_t d = 0; d < 8; ++d) {
    const double sum = j["compute_s"][d].get<double>() + j["optimizer_s"][d].get<double>() +
                       j["exposed_comm_s"][d].get<double>() + j["idle_s"][d].get<double>();
    EXPECT_NEAR(sum, j["runtime_s"].get<double>(), 1e-9 * sum);
    EXPECT_GT(j["tp_comm_s"][d].get<double>(), 0.0);
    EXPECT_GT(j["optimizer_s"][d].get<double>(), 0.0);
  }
  r = run("simulate interleaved -S 8 -v 3 -M 16 --model " + model + " --system dgx-a100");
  EXPECT_NE(r.out.find("64 GPUs (tensor parallel 8, data parallel 1), 16 sequences"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("breakdown (mean per device): compute"), std::string::npos);
  // Pipeline only: no optimizer step, a shorter run.
  const auto whole = j["runtime_s"].get<double>();
  r = run("simulate interleaved -S 8 -v 3 -M 16 --model " + model +
          " --system dgx-a100 --runtime megatron --no-optimizer --format json");
  j = nlohmann::json::parse(r.out);
  EXPECT_LT(j["runtime_s"].get<double>(), whole);
  EXPECT_EQ(j["optimizer_s"][0], 0.0);
  expect_usage_error("simulate 1f1b --runtime eager",
                     "--runtime: eager not in {auto,async,megatron,pytorch,dualpipe}");
  expect_usage_error("simulate 1f1b --tp-overlap some", "--tp-overlap");
  // A schedule that the Megatron runtime's waits cannot run says where it stops.
  const auto crossed = file("crossed.csv", "0F0,0F1,0B0,0B1\n1F1,1F0,1B0,1B1\n");
  r = run("simulate --table " + crossed +
          " --system dgx-a100 --model gpt3-1.3b --runtime megatron");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("the simulation deadlocks"), std::string::npos) << r.err;
  // A deadlock the flags made names them, and the runtime that would run the table.
  r = run("simulate interleaved -S 8 -M 5 --runtime megatron");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("--runtime megatron was given: Megatron-LM's interleaved schedule needs "
                       "at least S microbatches"),
            std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find("--runtime auto picks pytorch"), std::string::npos) << r.err;
  r = run("simulate gpipe -S 4 -M 8 --blocking-send");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("--blocking-send makes every pipeline send wait for its receive"),
            std::string::npos)
      << r.err;
}

TEST_F(Cli, OneMemoryRuleForEveryCommand) {
  // Every fit test judges a peak against the same usable memory: the device's capacity less what
  // is held outside the caching allocator (the CUDA context and the layout's NCCL buffers), or
  // less --memory-reserve where one is given. simulate marks a device over it, compare ranks a
  // schedule over it after those that fit, plan ranks none over it.
  const std::string job = " -S 8 -M 16 --model llama2-7b --system dgx-h100";
  auto r = run("simulate 1f1b" + job + " --format json");
  ASSERT_EQ(r.code, 0) << r.err;
  auto j = nlohmann::json::parse(r.out);
  const double device = j["device_memory_bytes"], usable = j["memory_capacity_bytes"];
  EXPECT_EQ(device, 80e9);
  const auto& outside = j["memory_outside_allocator"];
  EXPECT_TRUE(outside["flat_reserve"].is_null());
  // Pipeline parallel alone on one DGX node: the context and the stages' sends over NVLink.
  ASSERT_EQ(outside["communicators"].size(), 1u);
  EXPECT_EQ(outside["communicators"][0]["group"], "pipeline");
  EXPECT_DOUBLE_EQ(usable, device - outside["context_bytes"].get<double>() -
                               outside["communicator_bytes"].get<double>());
  EXPECT_LT(usable, device);
  const double peak = j["peak_memory_max_bytes"];
  const auto over = [&](double reserve) {
    const auto out =
        run(fmt::format("simulate 1f1b{} --memory-reserve {} --format json", job, reserve));
    EXPECT_EQ(out.code, 0) << out.err;
    const auto m = nlohmann::json::parse(out.out);
    EXPECT_DOUBLE_EQ(m["memory_capacity_bytes"].get<double>(), device * (1 - reserve));
    const auto& flags = m["over_capacity"];
    return std::any_of(flags.begin(), flags.end(),
                       [](const auto& f) { return f.template get<bool>(); });
  };
  EXPECT_FALSE(over(1 - peak / device - 0.001));
  EXPECT_TRUE(over(1 - peak / device + 0.001));
  // compare: zb-v and dualpipev are faster than 1f1b here but need more memory; with a reserve
  // that leaves only 1f1b's peak, 1f1b ranks first and the others after it by runtime.
  const auto ranked = [&](const std::string& extra) {
    const auto out =
        run("compare 1f1b --schedules zb-v,dualpipev" + job + extra + " --format json");
    EXPECT_EQ(out.code, 0) << out.err;
    std::map<std::string, int> rank;
    const auto parsed = nlohmann::json::parse(out.out);
    for (const auto& row : parsed["comparisons"][0]["schedules"])
      rank[row["schedule"].get<std::string>()] = row["rank"]["simulation"].get<int>();
    return rank;
  };
  auto rank = ranked("");
  EXPECT_EQ(rank["1f1b"], 3);
  const double one_f_one_b = peak;
  rank = ranked(fmt::format(" --memory-reserve {}", 1 - one_f_one_b / device - 0.001));
  EXPECT_EQ(rank["1f1b"], 1);
  EXPECT_EQ(rank["dualpipev"] + rank["zb-v"], 5);
  // plan: no layout it ranks peaks above the usable memory, with either reserve.
  for (const double reserve : {0.05, 0.6}) {
    r =
        run(fmt::format("plan --model llama2-7b --system dgx-h100 --gpus 8 --global-batch 16 "
                        "--memory-reserve {} --top 20 --format json",
                        reserve));
    ASSERT_EQ(r.code, 0) << r.err;
    j = nlohmann::json::parse(r.out);
    ASSERT_FALSE(j["top"].empty());
    for (const auto& l : j["top"])
      EXPECT_LE(l["peak_memory_bytes"].get<double>(), device * (1 - reserve)) << l["description"];
  }
  expect_usage_error("simulate 1f1b --memory-reserve 0.95", "--memory-reserve");
  // Inputs once taken silently: an empty pipeline layout, and one beside a table that sizes
  // its stages itself.
  expect_usage_error("simulate 1f1b --pipeline-layout ''",
                     "--pipeline-layout: pipeline_layout = '': expected text, not nothing");
  expect_usage_error(
      "simulate chimera-asym --split 1:3 --pipeline-layout 'Et*4|t*4|t*4|t*4|t*4|t*4|t*4|t*4L'",
      "give one of the two");
  // A capacity pads every expert's input to it, so an imbalance beside it changed nothing.
  expect_usage_error(
      "simulate 1f1b --model mixtral-8x7b --ep 8 --dp 8 --moe-capacity-factor 1.5 "
      "--moe-imbalance 1.2",
      "the busiest rank takes the capacity whatever the imbalance; give one of the two");
  expect_usage_error(
      "simulate 1f1b --model mixtral-8x7b --ep 8 --dp 8 --moe-capacity-factor 1e-320",
      "expected at least 0.1");
  expect_usage_error("plan --gpus 8 --global-batch 8 --search memory_reserve=0.1,0.2",
                     "it is the rule every layout's fit is judged by");
  // A size past what the plan could use names its flag (it was "no layout ... TP must divide
  // the node", and 2·CP overflowed).
  expect_usage_error("plan --gpus 8 --global-batch 8 --cp 9223372036854775807",
                     "plan: --cp 9223372036854775807: a context-parallel size must be at most 8 "
                     "(the GPUs)");
  expect_usage_error("plan --gpus 8 --global-batch 8 --micro-batch 16",
                     "--micro-batch 16: a micro-batch size must be at most 8 (the global batch)");
}

TEST_F(Cli, CostAccuracyAndCalibrate) {
  auto r = run("cost --model gpt3-13b --system dgx-a100");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("fc1.weight_grad"), std::string::npos);
  EXPECT_NE(r.out.find("pass totals"), std::string::npos);
  r = run("cost --model gpt3-13b --system dgx-a100 --format json");
  EXPECT_GT(nlohmann::json::parse(r.out)["operators"].size(), 40U);
  // The built-in published runs, as Markdown and as JSON.
  r = run("accuracy");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("| 1T present work |"), std::string::npos);
  EXPECT_NE(r.out.find("| all iterations | 18 |"), std::string::npos);
  // Issue 23: the table says its errors are in sample, and where the out-of-sample ones are.
  EXPECT_NE(r.out.find("\nIn sample: the presets' fitted efficiencies"), std::string::npos)
      << r.out;
  EXPECT_NE(run("accuracy --system dgx-a100").out.find("These errors are in sample if"),
            std::string::npos);
  r = run("accuracy --format json");
  EXPECT_EQ(nlohmann::json::parse(r.out)["predictions"].size(), 23U);
  // A user's own layer timings: calibrate writes a system file the other commands take.
  const auto mine = file("mine.toml",
                         "[models.m]\nlayers = 2\nhidden = 4096\nheads = 32\nseq_len = 2048\n"
                         "vocab = 51200\ntensor_parallel = 8\n"
                         "[[layer]]\nid = \"one\"\nsystem = \"dgx-a100\"\nmodels = [\"m\"]\n"
                         "measured_forward_ms = 3.0\nmeasured_backward_ms = 6.5\n");
  const auto out = (dir_ / "calibrated.toml").string();
  r = run("calibrate " + mine + " --system dgx-a100 --fit gemm.max_efficiency --name mine -o " +
          out);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("calibrated dgx-a100 on 2 measurements"), std::string::npos) << r.out;
  r = run("simulate 1f1b -S 2 -M 4 --model gpt3-1.3b --system " + out);
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("simulated on mine"), std::string::npos);
  expect_usage_error("calibrate " + mine + " --system dgx-a100 --fit colour",
                     "unknown calibration parameter 'colour'");
  expect_usage_error("accuracy nosuch.toml", "nosuch.toml");
}

TEST_F(Cli, SimulationLevel) {
  // --costs at the simulation level are seconds per device share: on the ideal system the run
  // takes exactly the table's makespan (issue: analyze ... --costs F=1,B=2 --system ideal).
  auto r = run("analyze 1f1b -S 4 -M 8 --costs F=1,B=2 --system ideal --format json");
  ASSERT_EQ(r.code, 0) << r.err;
  auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["simulation"]["runtime_s"], j["table"]["makespan"]);
  EXPECT_EQ(j["simulation"]["system"], "ideal");
  EXPECT_EQ(j["simulation"]["model"], "llama2-7b");
  EXPECT_EQ(j["simulation"]["peak_memory_bytes"].size(), 4U);
  EXPECT_TRUE(j["simulation"]["explicit_costs"]);

  r = run("analyze chimera -S 4 -M 8 --system dgx-h100 --model gpt3-13b");
  // Chimera runs two pipelines: no modelled runtime runs it, and the output says so.
  EXPECT_NE(r.out.find("simulation (system dgx-h100, model gpt3-13b; runtime async: no modelled "
                       "runtime runs two pipelines"),
            std::string::npos)
      << r.out;

  const auto trace = (dir_ / "run.json").string(), svg = (dir_ / "run.svg").string();
  // The idealised runtime: one flow arrow per transfer (Megatron's adds the receivers' posts).
  r = run("simulate 1f1b -S 4 -M 8 --system balanced --model paper --runtime async --trace " +
          trace + " --svg " + svg);
  ASSERT_EQ(r.code, 0) << r.err;
  // The iteration ends with the optimizer step, after the synchronisation of all stages.
  const auto last = r.out.substr(r.out.rfind('\n', r.out.size() - 2));
  EXPECT_NE(last.find("optimizer step on device"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("over capacity"), std::string::npos);
  // balanced describes no NCCL: a flat 5% is kept back, and the memory line says why.
  EXPECT_NE(r.out.find("memory: 76 GB usable of 80 GB per GPU, a flat 5% kept back"),
            std::string::npos)
      << r.out;
  // A run that does not fit says so once, with what the worst device's memory is made of: the
  // figures of the JSON report (issue 14: the paper's model is over capacity everywhere).
  {
    const auto json = run(
        "simulate 1f1b -S 4 -M 8 --system balanced --model paper --runtime async --format json");
    const auto m = nlohmann::json::parse(json.out);
    const double peak = m["peak_memory_bytes"][0], fixed = m["static_bytes"][0];
    // The warning is folded to the terminal's width: its lines joined again.
    std::string flat = r.out;
    for (auto at = flat.find("\n  "); at != std::string::npos; at = flat.find("\n  ", at))
      flat.replace(at, 3, " ");
    EXPECT_NE(flat.find(fmt::format(
                  "warning: 4 of 4 devices need more than their 76 GB usable (of 80 GB, the "
                  "rest held outside the caching allocator: the memory line above), so "
                  "this run does not fit as configured; device 0 peaks at {:.4g} GB ({:.4g} GB "
                  "weights, gradients and "
                  "optimizer state, {:.4g} GB activations)",
                  peak / 1e9, fixed / 1e9, (peak - fixed) / 1e9)),
              std::string::npos)
        << r.out;
    EXPECT_GT(peak, 80e9);
    // The warning suggests only options simulate takes (it once suggested --tp).
    const auto help = run("simulate --help").out;
    const auto warning = flat.substr(flat.find("warning: "));
    for (std::size_t at = warning.find("--"); at != std::string::npos && at < warning.find('\n');
         at = warning.find("--", at + 2)) {
      const auto flag = warning.substr(at, warning.find_first_of(" ,)", at) - at);
      EXPECT_NE(help.find(flag), std::string::npos) << flag << " is suggested, not taken";
    }
    const auto fits = run("simulate 1f1b -S 4 -M 8 --system dgx-h100 --model gpt3-1.3b");
    ASSERT_EQ(fits.code, 0) << fits.err;
    EXPECT_EQ(fits.out.find("warning:"), std::string::npos) << fits.out;
    EXPECT_EQ(fits.out.find("over the"), std::string::npos) << fits.out;
  }
  j = nlohmann::json::parse(slurp(trace));
  std::map<std::string, int> phases;
  for (const auto& e : j["traceEvents"])
    ++phases[e["ph"].get<std::string>()];
  EXPECT_EQ(phases["X"], 64 + 4);  // the ops and each device's optimizer step
  EXPECT_EQ(phases["s"], 48);  // a flow arrow per pipeline transfer: 8 × 3 hops × 2 directions
  EXPECT_EQ(phases["f"], 48);
  EXPECT_EQ(phases["b"], phases["e"]);
  // Each transfer on the sender's track and on its 2 links; the synchronisation before the
  // optimizer step has no link (the default model's embeddings are not tied: no all-reduce).
  EXPECT_EQ(phases["b"], 48 * 3 + 1);
  EXPECT_GT(phases["C"], 4);  // memory counters
  const auto picture = slurp(svg);
  EXPECT_EQ(picture.rfind("<svg xmlns=\"http://www.w3.org/2000/svg\"", 0), 0U);
  EXPECT_NE(picture.find("time (s)"), std::string::npos);
  std::size_t boxes = 0;
  for (auto at = picture.find("<title>"); at != std::string::npos;
       at = picture.find("<title>", at + 1))
    ++boxes;
  EXPECT_EQ(boxes, 64U + 4U);
  EXPECT_EQ(std::count(picture.begin(), picture.end(), '<') -
                std::count(picture.begin(), picture.end(), '>'),
            0);

  r =
      run("simulate gpipe -S 2 -M 2 --system compute-bound --format json --no-contention "
          "--blocking-send --dp 2 --runtime async");
  j = nlohmann::json::parse(r.out);
  EXPECT_FALSE(j["contention"]);
  EXPECT_TRUE(j["blocking_send"]);
  EXPECT_EQ(j["data_parallel"], 2);
  EXPECT_EQ(j["compute_s"].size(), 2U);
  EXPECT_FALSE(j["critical_path"].empty());
  expect_usage_error("simulate 1f1b --dp 0", "--dp");
  expect_usage_error("simulate 1f1b --model nosuch", "--model nosuch: no such preset or file");
  const auto bad_model = file("bad.toml", "[transformer]\nlayers = 2\n");
  expect_usage_error("simulate 1f1b --model " + bad_model,
                     bad_model + ":1:1: key 'transformer': missing key 'hidden'");
  expect_usage_error("simulate 1f1b --model gpt3-1.3b -S 32 -M 32",
                     "24 layers cannot fill 32 stages");
  expect_usage_error("simulate 1f1b --dp 70000", "--dp");

  // A table the model cannot fill keeps its formula and table levels in analyze and compare;
  // the simulation level says why it is missing.
  r = run("analyze 1f1b --model gpt3-1.3b -S 32 -M 32 --format json");
  ASSERT_EQ(r.code, 0) << r.err;
  j = nlohmann::json::parse(r.out);
  EXPECT_TRUE(j["simulation"].is_null());
  EXPECT_NE(j["simulation_error"].get<std::string>().find("24 layers cannot fill 32 stages"),
            std::string::npos);
  EXPECT_GT(j["table"]["makespan"].get<double>(), 0.0);
  r = run("analyze 1f1b --model gpt3-1.3b -S 32 -M 32");
  EXPECT_NE(r.out.find("simulation not run: model: 24 layers cannot fill 32 stages"),
            std::string::npos)
      << r.out;
  r = run("compare 1f1b interleaved --model gpt3-1.3b -S 8 -M 8 -v 4 --system dgx-h100");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("interleaved   not simulated: model: 24 layers cannot fill 32 stages"),
            std::string::npos)
      << r.out;
  r =
      run("compare 1f1b interleaved --model gpt3-1.3b -S 8 -M 8 -v 4 --system dgx-h100 "
          "--format json");
  j = nlohmann::json::parse(r.out)["comparisons"][0];
  EXPECT_EQ(j["schedules"][0]["rank"]["simulation"], 1);
  EXPECT_TRUE(j["schedules"][1]["rank"]["simulation"].is_null());

  // Options the system cannot take fail before any work.
  const auto chain = file("chain.toml",
                          "[device]\npeak_flops = 1e15\nefficiency = 0.5\nmemory_bytes = 8e10\n"
                          "[network]\ntopology = \"chain\"\n"
                          "[network.intra]\nlatency_s = 1e-6\nbandwidth = 4e11\n");
  EXPECT_EQ(run("simulate gpipe -S 4 -M 4 --system " + chain).code, 0);
  expect_usage_error("compare --dp 2 --system " + chain, "--dp needs a switched topology");
  expect_usage_error("analyze gpipe --dp 2 --system " + chain, "--dp needs a switched topology");
}

TEST_F(Cli, CommsOrdersThatCrossAreRefusedAlikeByValidateAndSimulate) {
  // Rank 1 receives F1's activation before F0's, while rank 0 sends F0's first.
  const auto crossing = file("crossing.csv",
                             "0F0,0SEND_F0,0F1,0SEND_F1,0RECV_B0,0B0,0RECV_B1,0B1\n"
                             "1RECV_F1,1RECV_F0,1F0,1B0,1SEND_B0,1F1,1B1,1SEND_B1\n");
  const auto v = run("validate " + crossing);
  const auto s = run("simulate --table " + crossing);
  EXPECT_EQ(v.code, 2);
  EXPECT_EQ(s.code, 2);
  EXPECT_EQ(v.err,
            "pipetab: error: " + crossing +
                ":2:1: the transfers between ranks 0 and 1 cross: 1RECV_F1 (line 2, action 1 of "
                "8) is rank 1's 1st receive from rank 0, and rank 0's 1st send to rank 1 is "
                "0SEND_F0 (line 1, action 2 of 8); NCCL matches the sends and receives between "
                "two ranks in the order they are posted, so 1RECV_F1 would get microbatch 0's "
                "activations of stage 0 (wrong data, or a hang if the sizes differ): post "
                "1RECV_F0 there\n");
  EXPECT_EQ(s.err, v.err);

  // torchtitan's example validates, with a note: it hangs once messages outgrow NCCL's buffer.
  const std::string example =
      std::string(PIPETAB_SOURCE_DIR) + "/tests/data/torchtitan/example.csv";
  auto r = run("validate " + example);
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("note: it runs while each message fits NCCL's buffer (NCCL_BUFFSIZE, "
                       "4 MiB by default); with larger messages the ranks' lists deadlock"),
            std::string::npos)
      << r.out;
  r = run("simulate --table " + example + " --nccl-buffsize 1e18");
  EXPECT_EQ(r.code, 0) << r.err;
  r = run("simulate --table " + example + " --nccl-buffsize 0");
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.err.rfind("pipetab: error: the ranks' lists deadlock", 0), 0U) << r.err;
  EXPECT_EQ(r.err.find("node "), std::string::npos) << r.err;
}

TEST_F(Cli, ValidateAndConvert) {
  const auto good = file("good.csv", "0F0,0F1,,0B0,,0B1\n,1F0,1B0,1F1,1B1\n");
  auto r = run("validate " + good);
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("valid: 2 devices, 2 stages, 2 microbatches, 8 ops"), std::string::npos)
      << r.out;

  // 1B1 is missing and 1F1 comes after 1B... a duplicate 0F1 too.
  const auto bad = file("bad.csv", "0F0,0F1,,0B0,,0B1,0F1\n,1F0,1B0,1F1\n");
  r = run("validate " + bad);
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(
      r.out.find(bad +
                 ":1:19: device 0, position 4 (0F1): duplicate 0F1: it already ran at device 0, "
                 "position 1"),
      std::string::npos)
      << r.out;
  EXPECT_EQ(r.err, "pipetab: error: " + bad + ": invalid table (1 issue)\n");
  r = run("validate --format json " + bad);
  EXPECT_EQ(r.code, 2);
  EXPECT_FALSE(nlohmann::json::parse(r.out)["valid"]);

  const auto broken = file("broken.csv", "0F0,0Z0\n");
  expect_usage_error("validate " + broken, broken + ":1:6: unknown action type 'Z'");
  expect_usage_error("validate " + (dir_ / "missing.csv").string(),
                     "cannot read: No such file or directory");

  r = run("convert " + good + " --to json");
  EXPECT_EQ(r.code, 0) << r.err;
  const auto json = file("good.json", r.out);
  r = run("convert " + json + " --to csv");
  EXPECT_EQ(r.out, "0F0,0F1,,0B0,,0B1\n,1F0,1B0,1F1,1B1\n");
  expect_usage_error("convert " + bad + " --to json",
                     bad + ":1:19: invalid table: device 0, position 4 (0F1)");
  expect_usage_error("convert " + good + " --to xml", "xml");
}

TEST_F(Cli, UserTablesAreFirstClass) {
  const auto exported = file("chimera.json", run("show chimera -S 4 -M 8 --format json").out);
  auto r = run("analyze --table " + exported + " --format json");
  ASSERT_EQ(r.code, 0) << r.err;
  auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["schedule"], "chimera") << "a table regenerated exactly is recognized";
  EXPECT_FALSE(j["formula"]["bubble_ratio"].is_null());

  // A small file whose source claims a huge schedule is not regenerated to check it.
  auto huge = nlohmann::json::parse(run("show 1f1b -S 2 -M 2 --format json").out);
  huge["source"]["params"]["microbatches"] = 16777216;
  const auto claimed = file("claimed.json", huge.dump());
  r = run("analyze --table " + claimed + " --format json");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(nlohmann::json::parse(r.out)["schedule"], claimed);

  // PyTorch cannot run a two-pipeline table: the CSV export says why, and --force writes it.
  r = run("show chimera -S 4 -M 8 --format csv");
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.err.find("cannot export as csv: stage 0 runs on device 0 and on device 3"),
            std::string::npos)
      << r.err;
  r = run("show chimera -S 4 -M 8 --format csv --force");
  EXPECT_NE(r.err.find("warning: written with --force although stage 0 runs on device 0"),
            std::string::npos)
      << r.err;
  const auto csv = file("mine.csv", r.out);
  r = run("analyze --table " + csv + " --format json");
  j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["schedule"], csv);
  EXPECT_TRUE(j["formula"].is_null());
  EXPECT_EQ(j["table"]["makespan"], 30.0);
  EXPECT_EQ(j["params"]["pipelines"], 2);
  EXPECT_EQ(run("show --table " + csv + " --color never").code, 0);
  expect_usage_error("analyze --table " + csv + " -S 4", "the file sets the sizes");
  expect_usage_error("analyze 1f1b --table " + csv, "not both");
  r = run("compare 1f1b --table " + csv + " -S 4 -M 8 --system ideal --format json");
  EXPECT_EQ(nlohmann::json::parse(r.out)["comparisons"][0]["schedules"].size(), 2U);
  r = run("compare 1f1b --table " + csv + " -S 4 -M 4 --system ideal --format json");
  j = nlohmann::json::parse(r.out)["comparisons"][0];
  EXPECT_EQ(j["schedules"].size(), 1U);
  EXPECT_EQ(j["skipped"][0]["reason"], "has S = 4, M = 8; the comparison is at S = 4, M = 4");

  r = run("analyze --table " + csv);
  EXPECT_NE(r.out.find("none: a user table has no schedule family"), std::string::npos) << r.out;
  r = run("validate " + csv);
  EXPECT_NE(r.out.find(", 2 pipelines (read from the placement"), std::string::npos) << r.out;

  r = run("show chimera-asym -S 4 -M 8 --split 1:3 --format json");
  EXPECT_EQ(nlohmann::json::parse(r.out)["source"]["params"]["split"], "1:3");
}

TEST_F(Cli, ValidateListsAtMostFiftyIssues) {
  std::string text = "0F0,0B0";
  for (int i = 0; i < 60; ++i)
    text += ",0F0";
  const auto many = file("many.csv", text + "\n");
  const auto r = run("validate " + many);
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.out.find("... and 10 more\n"), std::string::npos) << r.out;
  EXPECT_EQ(r.err, "pipetab: error: " + many + ": invalid table (60 issues)\n");
}

// A study small enough to run in a moment, with skipped configurations (Chimera and interleaved
// need M a multiple of S) and two systems.
const char* kStudy = R"(
name = "cli"
[grid]
schedules = ["gpipe", "1f1b", "chimera", { name = "interleaved", chunks = [2] }]
devices = [2, 4]
microbatches = { from = 2, to = 32, times = 2 }
systems = ["balanced", "network-bound"]
)";

TEST_F(Cli, SweepThreadsShardsAndFormats) {
  const auto study = file("study.toml", kStudy);
  const auto one = (dir_ / "one.csv").string(), four = (dir_ / "four.csv").string();
  ASSERT_EQ(run("sweep " + study + " -o " + one + " -j 1").code, 0);
  const auto r = run("sweep " + study + " -o " + four + " -j 4");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.err, "");  // silent when stderr is not a terminal
  const auto whole = slurp(one);
  EXPECT_EQ(slurp(four), whole);
  EXPECT_EQ(std::count(whole.begin(), whole.end(), '\n'), 1 + 4 * 2 * 2 * 5);
  EXPECT_NE(whole.find(",skipped,"), std::string::npos);

  std::string joined;
  for (int k = 1; k <= 3; ++k) {
    const auto shard = (dir_ / ("shard" + std::to_string(k) + ".csv")).string();
    ASSERT_EQ(run(fmt::format("sweep {} -o {} --shard {}/3 -j 2", study, shard, k)).code, 0);
    joined += slurp(shard);
  }
  EXPECT_EQ(joined, whole);

  // JSON Lines: one object per configuration, keys in the CSV's column order.
  const auto jsonl = (dir_ / "rows.jsonl").string();
  ASSERT_EQ(run("sweep " + study + " -o " + jsonl + " -j 3").code, 0);
  std::istringstream lines(slurp(jsonl));
  std::string line;
  int index = 0;
  while (std::getline(lines, line)) {
    const auto row = nlohmann::ordered_json::parse(line);
    EXPECT_EQ(row["index"], index++);
    EXPECT_EQ(row.begin().key(), "index");
  }
  EXPECT_EQ(index, 80);

  expect_usage_error("sweep " + study + " -o x.csv --shard 4/3", "--shard 4/3: expected K/N");
  expect_usage_error("sweep " + study + " -o - --resume", "--resume needs an output file");
  expect_usage_error("sweep missing.toml -o x.csv", "missing.toml");
  const auto bad = file("bad.toml", "[grid]\nschedules = [\"1f1b\"]\ndevices = [4, \"8\"]\n");
  expect_usage_error("sweep " + bad + " -o x.csv",
                     bad + ":3:15: key 'grid.devices': expected whole numbers, got a string");
}

// A model file small enough to simulate in a moment.
std::string small_model(int layers) {
  return fmt::format(
      "name = \"m\"\n[transformer]\nlayers = {}\nhidden = 1024\nheads = 8\nseq_len = 1024\n"
      "micro_batch = 1\nvocab = 51200\n",
      layers);
}

TEST_F(Cli, SweepResumesWithoutLosingOrRepeatingRows) {
  const auto study = file("study.toml", kStudy);
  const auto full = (dir_ / "full.csv").string();
  ASSERT_EQ(run("sweep " + study + " -o " + full).code, 0);
  const auto whole = slurp(full);
  const auto record = slurp(full + ".sweep.json");
  // Resuming an already finished file runs nothing and changes nothing.
  ASSERT_EQ(run("sweep " + study + " -o " + full + " --resume").code, 0);
  EXPECT_EQ(slurp(full), whole);
  // A run killed after its record's last update leaves rows (and perhaps half a row) the
  // record does not cover: they are recomputed. Here the record covers the header only.
  const auto header_end = whole.find('\n') + 1;
  for (const std::size_t cut :
       {header_end, header_end + 10, whole.find('\n', whole.size() / 2) + 1, whole.size() - 5}) {
    const auto part = file("part.csv", whole.substr(0, cut));
    auto part_record = nlohmann::json::parse(record);
    part_record["bytes"] = header_end;
    part_record["lines"] = 1;
    part_record["digest"] = fmt::format("{:016x}", [&] {
      std::uint64_t h = 14695981039346656037ULL;  // FNV-1a 64 of the header, computed here
      for (const char c : whole.substr(0, header_end)) {
        h ^= static_cast<unsigned char>(c);
        h *= 1099511628211ULL;
      }
      return h;
    }());
    file("part.csv.sweep.json", part_record.dump());
    const auto r = run("sweep " + study + " -o " + part + " --resume -j 2");
    ASSERT_EQ(r.code, 0) << cut << ": " << r.err;
    EXPECT_EQ(slurp(part), whole) << "cut at " << cut;
    EXPECT_EQ(slurp(part + ".sweep.json"), record) << "cut at " << cut;
  }
}

// Issue 14: --resume kept rows of another format, rows computed from inputs that have since
// changed, and rows edited by hand. Each is refused now, naming what differs.
TEST_F(Cli, SweepResumeRefusesRowsItCannotVouchFor) {
  const auto model = file("model.toml", small_model(8));
  const auto study = file("study.toml", std::string(kStudy) + "models = [\"model.toml\"]\n");
  const auto full = (dir_ / "full.csv").string();
  ASSERT_EQ(run("sweep " + study + " -o " + full).code, 0) << run("sweep " + study + " -o -").err;
  const auto whole = slurp(full);
  const auto record = slurp(full + ".sweep.json");
  const auto restore = [&] {
    file("full.csv", whole);
    file("full.csv.sweep.json", record);
  };
  expect_usage_error("sweep " + study + " -o " + full + " --resume --format jsonl",
                     "holds CSV rows but this run writes JSON Lines");
  expect_usage_error("sweep " + study + " -o " + full + " --resume --shard 1/2",
                     "holds the rows of shard 1/1, this run is shard 1/2");
  auto edited = whole;
  edited.replace(edited.rfind(",0."), 3, ",1.");
  file("full.csv", edited);
  expect_usage_error("sweep " + study + " -o " + full + " --resume",
                     "its rows were edited after pipetab wrote them");
  restore();
  file("full.csv", whole.substr(0, whole.size() / 2));
  expect_usage_error("sweep " + study + " -o " + full + " --resume", "it was cut or edited");
  restore();
  file("model.toml", small_model(16));
  expect_usage_error("sweep " + study + " -o " + full + " --resume",
                     "model " + model + " has changed since the rows were written");
  file("model.toml", small_model(8));
  file("study.toml", std::string(kStudy) + "models = [\"model.toml\"]\n# a comment\n");
  expect_usage_error("sweep " + study + " -o " + full + " --resume",
                     "study " + study + " has changed since the rows were written");
  file("study.toml", std::string(kStudy) + "models = [\"model.toml\"]\n");
  fs::remove(full + ".sweep.json");
  expect_usage_error("sweep " + study + " -o " + full + " --resume",
                     "full.csv.sweep.json is missing");
  file("full.csv.sweep.json", "{\"format\": 1}");
  expect_usage_error("sweep " + study + " -o " + full + " --resume",
                     "not a sweep record pipetab wrote");
  restore();
  ASSERT_EQ(run("sweep " + study + " -o " + full + " --resume").code, 0);
  EXPECT_EQ(slurp(full), whole);
}

// Two sweeps writing one file used to interleave thousands of duplicated rows, both exiting 0.
TEST_F(Cli, SweepRefusesAFileAnotherSweepIsWriting) {
  const auto study = file("study.toml", kStudy);
  const auto out = file("out.csv", "");
  const int fd = ::open(out.c_str(), O_RDWR);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::flock(fd, LOCK_EX | LOCK_NB), 0);  // as a running sweep holds it
  expect_usage_error("sweep " + study + " -o " + out, "another pipetab sweep is writing it");
  expect_usage_error("sweep " + study + " -o " + out + " --resume",
                     "another pipetab sweep is writing it");
  ::close(fd);
  EXPECT_EQ(run("sweep " + study + " -o " + out).code, 0);
}

// The lock is the file's, not its name's: deleting a running sweep's output let a second sweep
// create and lock a new file beside the first, whose rows went nowhere. The first now stops
// with an error at its next flush (rows reach the file at least every 100 ms).
TEST_F(Cli, SweepStopsWhenItsOutputIsDeleted) {
  // About 12 s on two cores: far longer than the wait for its first rows.
  const auto study = file("big.toml", R"(
name = "big"
[grid]
schedules = ["gpipe", "1f1b", "chimera", { name = "interleaved", chunks = [2] }]
devices = [2, 4, 8, 16, 32]
microbatches = { from = 2, to = 4096, times = 2 }
systems = ["balanced", "network-bound"]
)");
  const auto out = (dir_ / "out.csv").string(), err = (dir_ / "err.txt").string();
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    const int e = ::open(err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    const int null = ::open("/dev/null", O_WRONLY);
    if (e < 0 || null < 0 || ::dup2(null, 1) < 0 || ::dup2(e, 2) < 0) ::_exit(126);
    ::execl(PIPETAB_BINARY, "pipetab", "sweep", study.c_str(), "-o", out.c_str(), "-j", "1",
            static_cast<char*>(nullptr));
    ::_exit(127);
  }
  int status = 0;
  bool ended = false;
  for (int i = 0; i < 6000 && !ended; ++i) {  // at most 60 s for the first rows
    std::error_code ec;
    if (fs::exists(out, ec) && fs::file_size(out, ec) > 0) break;
    ended = ::waitpid(pid, &status, WNOHANG) == pid;
    ::usleep(10000);
  }
  ASSERT_FALSE(ended) << "the sweep ended before its first rows: " << slurp(err);
  fs::remove(out);
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 2);
  EXPECT_NE(slurp(err).find("out.csv: the file was deleted or replaced while this sweep wrote it"),
            std::string::npos)
      << slurp(err);
}

// Issue 14: an output naming an input overwrote it with exit 0. Every command, every output
// option, any spelling of the path.
TEST_F(Cli, OutputsNeverOverwriteInputs) {
  const auto study = file("study.toml", kStudy);
  const auto table = file("t.csv", run("show 1f1b -S 2 -M 2 --format csv").out);
  const auto study_text = slurp(study), table_text = slurp(table);
  const auto other_spelling = (dir_ / "." / "study.toml").string();
  expect_usage_error("sweep " + study + " -o " + other_spelling,
                     "--output " + other_spelling + " is also the study argument, an input");
  expect_usage_error("convert " + table + " --to csv -o " + table, "is also the file argument");
  expect_usage_error("simulate --table " + table + " --trace " + table, "--trace");
  expect_usage_error("simulate --table " + table + " --svg " + table, "--svg");
  expect_usage_error("simulate 1f1b --trace x.json --svg x.json",
                     "--trace and --svg both name x.json");
  fs::create_symlink(table, dir_ / "link.csv");
  expect_usage_error("convert " + table + " --to json -o " + (dir_ / "link.csv").string(),
                     "an input");
  // A file the study names (here its model) is an input too.
  const auto model = file("model.toml", small_model(8));
  const auto with_model = file("m.toml", std::string(kStudy) + "models = [\"model.toml\"]\n");
  expect_usage_error("sweep " + with_model + " -o " + model, "a file the study names");
  EXPECT_EQ(slurp(study), study_text);
  EXPECT_EQ(slurp(table), table_text);
  EXPECT_EQ(slurp(model), small_model(8));
}

TEST_F(Cli, SweepInterruptedBySignalKeepsFinishedRows) {
  // Big enough to be still running when the signal comes (whether or not it is, the file must
  // be a prefix of the whole and --resume must complete it).
  const auto study = file("big.toml", R"(
[grid]
schedules = ["gpipe", "1f1b"]
devices = [16]
microbatches = { from = 64, to = 1024, step = 64 }
systems = ["balanced", "network-bound"]
)");
  const auto full = (dir_ / "full.csv").string(), cut = (dir_ / "cut.csv").string();
  ASSERT_EQ(run("sweep " + study + " -o " + full + " -j 2").code, 0);
  const auto whole = slurp(full);
  const std::string command = fmt::format(
      "sh -c '{} sweep {} -o {} -j 2 2> {} & pid=$!; sleep 0.5; kill -INT $pid; wait $pid; "
      "exit $?'",
      PIPETAB_BINARY, study, cut, (dir_ / "err").string());
  const int status = std::system(command.c_str());
  const int code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  const auto part = slurp(cut);
  ASSERT_TRUE(code == 130 || code == 0) << code;
  EXPECT_EQ(whole.rfind(part, 0), 0U) << "not a prefix of the whole output";
  EXPECT_EQ(part.back(), '\n');
  if (code == 130) {
    // Interrupted: a prefix, or all of it when the signal came after the last row was written.
    EXPECT_LE(part.size(), whole.size());
    EXPECT_NE(slurp(dir_ / "err").find("run the same command with --resume"), std::string::npos);
  }
  ASSERT_EQ(run("sweep " + study + " -o " + cut + " --resume -j 2").code, 0);
  EXPECT_EQ(slurp(cut), whole);
}

TEST_F(Cli, Sensitivity) {
  const auto r =
      run("sensitivity gpipe 1f1b chimera interleaved -S 4 -M 8 --system compute-bound --steps 3 "
          "--model paper");  // the paper's model flips rankings here
  ASSERT_EQ(r.code, 0) << r.err;
  for (const char* fragment : {"baseline s", "ranking at the baseline", "chimera", "overtakes"})
    EXPECT_NE(r.out.find(fragment), std::string::npos) << fragment << "\n" << r.out;
  const auto json =
      nlohmann::json::parse(run("sensitivity gpipe 1f1b -S 4 -M 8 --steps 3 --format json").out);
  EXPECT_EQ(json["points"].size(), 27U);
  EXPECT_EQ(json["axes"]["collective"], nlohmann::json({0.7, 1.0, 1.3}));
  const auto csv = run("sensitivity gpipe 1f1b -S 4 -M 8 --steps 3 --format csv").out;
  EXPECT_EQ(std::count(csv.begin(), csv.end(), '\n'), 1 + 27 * 2);
  // Chimera needs an even S: reported, not fatal.
  const auto odd = run("sensitivity gpipe chimera -S 3 -M 6 --steps 2");
  ASSERT_EQ(odd.code, 0) << odd.err;
  EXPECT_NE(odd.out.find("chimera         skipped: "), std::string::npos) << odd.out;
  expect_usage_error("sensitivity gpipe --bandwidth 2:4",
                     "--bandwidth factor range 2:4: expected 0 < LO <= 1 <= HI");
  expect_usage_error("sensitivity gpipe --bandwidth fast", "expected LO:HI");
  expect_usage_error("sensitivity gpipe --costs F=1,B=2", "--costs does not apply");
}

TEST_F(Cli, PlanRanksLayoutsAndWritesTheBest) {
  const std::string base = "plan --model gpt3-1.3b --system dgx-h100 --gpus 16 --global-batch 32";
  auto r = run(base + " --top 3 --explain 1");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("plan: gpt3-1.3b (24 layers"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("pruned by their lower bound"), std::string::npos);
  EXPECT_NE(r.out.find("not ranked:"), std::string::npos);
  EXPECT_NE(r.out.find("why rank 1"), std::string::npos);
  EXPECT_NE(r.out.find("against rank 2"), std::string::npos);
  EXPECT_EQ(r.err, "");  // no progress bar off a terminal
  // CSV and JSON agree with each other, and with -j.
  r = run(base + " --top 3 --format csv -j 1");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 4);
  EXPECT_EQ(r.out, run(base + " --top 3 --format csv -j 2").out);
  const auto j = nlohmann::json::parse(run(base + " --top 3 --format json").out);
  ASSERT_EQ(j["top"].size(), 3U);
  EXPECT_EQ(j["top"][0]["layout"]["tensor_parallel"].get<int>() *
                j["top"][0]["layout"]["pipeline_parallel"].get<int>() *
                j["top"][0]["layout"]["data_parallel"].get<int>(),
            16);
  EXPECT_GT(j["rejections"].size(), 0U);
  // The best layout's table, read back by the other commands; its trace and timeline.
  const auto table = (dir_ / "best.json").string();
  const auto trace = (dir_ / "best-trace.json").string();
  const auto svg = (dir_ / "best.svg").string();
  r = run(base + " --top 1 -t " + table + " --trace " + trace + " --svg " + svg);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(run("validate " + table).code, 0);
  EXPECT_NE(slurp(trace).find("traceEvents"), std::string::npos);
  EXPECT_NE(slurp(svg).find("<svg"), std::string::npos);
  // A published run's layout beside the plan's.
  r = run("plan --from-run 1.7B --keep-run-options --top 2");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("on 32 GPUs of dgx-a100"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("reference layout: TP 1 · PP 1 · DP 32, 1f1b, micro batch 16 × 1, full "
                       "recompute"),
            std::string::npos)
      << r.out;
  expect_usage_error("plan --from-run 2B", "--from-run '2B': published-runs has no such");
  // Bad requests: one line, exit 2.
  expect_usage_error("plan --gpus 4 --global-batch 3 --tp 1 --pp 1",
                     "the global batch does not divide over the data-parallel replicas");
  expect_usage_error(base + " --explain 9 --top 3", "--explain 9: the plan ranked 3 layouts");
  expect_usage_error(base + " --recompute sometimes", "--recompute sometimes");
  expect_usage_error(base + " --runtime eager", "--runtime: eager");
  expect_usage_error(base + " --shard 4/3", "--shard 4/3");
  expect_usage_error(base + " --search tp_overlap", "--search tp_overlap: expected KEY=VALUE");
  expect_usage_error(base + " --search tp_overlap=none,sometimes",
                     "tp_overlap = 'sometimes': expected one of");
  expect_usage_error(base + " --search recompute=full", "give its values with --recompute");
  expect_usage_error("plan --gpus 16", "--global-batch is required");
  expect_usage_error("plan --gpus 8 --global-batch 8 --system tiny.toml", "tiny.toml");
}

TEST_F(Cli, CollectivePrintsASweepInNcclTestsColumns) {
  // 8 B to 128 MB by doubling on a100-pcie's links named PCIe: 25 rows; each row's busbw is
  // algbw × 2(p − 1)/p and algbw the size over the time; LL first, Simple last, never LL128.
  const std::string network =
      "[network]\ndevices_per_node = 8\n[network.intra]\nlatency_s = 5e-6\nbandwidth = 32e9\n"
      "collective_efficiency = 0.625\nmedium = \"{}\"\n[network.inter]\nlatency_s = 5e-6\n"
      "bandwidth = 12.5e9\n";
  const auto pcie = file("pcie.toml", "name = \"pcie\"\n[device]\npreset = \"a100-pcie\"\n" +
                                          fmt::format(fmt::runtime(network), "pcie"));
  const auto nvlink = file("nvlink.toml", "name = \"nvlink\"\n[device]\npreset = \"dgx-a100\"\n" +
                                              fmt::format(fmt::runtime(network), "nvlink"));
  auto r = run("collective --system " + pcie + " --format csv");
  ASSERT_EQ(r.code, 0) << r.err;
  std::istringstream in(r.out);
  std::string line;
  std::getline(in, line);
  EXPECT_EQ(line, "bytes,time_us,algbw_gbs,busbw_gbs,algorithm,protocol");
  std::vector<std::vector<std::string>> rows;
  while (std::getline(in, line)) {
    std::vector<std::string> cells;
    std::istringstream cell(line);
    std::string c;
    while (std::getline(cell, c, ','))
      cells.push_back(c);
    ASSERT_EQ(cells.size(), 6U) << line;
    const double bytes = std::stod(cells[0]), us = std::stod(cells[1]);
    EXPECT_NEAR(std::stod(cells[2]), bytes / us / 1e3, 1e-4 * std::stod(cells[2]) + 1e-9);
    EXPECT_NEAR(std::stod(cells[3]), std::stod(cells[2]) * 2 * 7 / 8,
                1e-4 * std::stod(cells[3]) + 1e-9);
    EXPECT_NE(cells[5], "ll128") << line;
    rows.push_back(cells);
  }
  ASSERT_EQ(rows.size(), 25U);
  EXPECT_EQ(rows.front()[0], "8");
  EXPECT_EQ(rows.back()[0], "134217728");
  EXPECT_EQ(rows.front()[5], "ll");
  EXPECT_EQ(rows.back()[5], "simple");
  // nccl-tests' -g: a launch per GPU after the first, 2.6 µs each.
  const auto one = run("collective --system " + nvlink + " -b 8 -e 8 --format json");
  const auto eight = run("collective --system " + nvlink + " -b 8 -e 8 -g 8 --format json");
  ASSERT_EQ(eight.code, 0) << eight.err;
  EXPECT_NEAR(nlohmann::json::parse(eight.out)["rows"][0]["time_us"].get<double>() -
                  nlohmann::json::parse(one.out)["rows"][0]["time_us"].get<double>(),
              7 * 2.6, 1e-9);
  // A factor near 1 on a few bytes still steps a byte at a time: 1 to 5 B is five rows.
  const auto fine = run("collective -b 1 -e 5 -f 1.01 --format csv");
  ASSERT_EQ(fine.code, 0) << fine.err;
  EXPECT_EQ(std::count(fine.out.begin(), fine.out.end(), '\n'), 6);
  // An all-to-all as NCCL runs it for a dispatcher: grouped sends to every peer at once. Over two
  // nodes of 8 each rank sends 7/16 of its buffer over its node's PCIe (20 GB/s achieved) and 8/16
  // over its NIC (12.5 GB/s × 0.8), one latency each: the NIC's side, 5 µs + 0.5 GiB / 10 GB/s;
  // busbw algbw × 15/16 (nccl-tests' alltoall_perf).
  const auto two_nodes = file("two.toml", "name = \"two\"\n[device]\npreset = \"a100-pcie\"\n" +
                                              fmt::format(fmt::runtime(network), "pcie") +
                                              "collective_efficiency = 0.8\n");
  const auto a2a = run("collective --system " + two_nodes +
                       " --op all-to-all -n 16 --per-node 8 -b 1G -e 1G --format json");
  ASSERT_EQ(a2a.code, 0) << a2a.err;
  const auto row = nlohmann::json::parse(a2a.out)["rows"][0];
  EXPECT_NEAR(row["time_us"].get<double>(), 5.0 + 0.5 * 1073741824.0 / 10e9 * 1e6, 1e-6);
  EXPECT_NEAR(row["busbw_gbs"].get<double>(), row["algbw_gbs"].get<double>() * 15 / 16, 1e-9);
  EXPECT_EQ(row["algorithm"], "direct");
  expect_usage_error("collective --system balanced", "a group of one rank moves nothing");
  expect_usage_error("collective -b 12Q", "--min-bytes '12Q': expected a size in bytes");
  expect_usage_error("collective -b 1M -e 1K", "--max-bytes 1K is below --min-bytes 1M");
  expect_usage_error("collective -n 12 --per-node 8", "--per-node 8 must divide --ranks 12");
  expect_usage_error("collective -n 16 --per-node 16",
                     "--per-node 16: a node of system 'dgx-a100' holds 8 GPUs");
}

TEST_F(Cli, TuneWritesATableOthersRead) {
  const auto table = (dir_ / "best.csv").string();
  const auto r = run("tune -S 4 -M 8 --system network-bound --memory-limit 6 -t " + table);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("best: "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("best built-in: "), std::string::npos) << r.out;
  const auto analyzed = run("analyze --table " + table + " --format json");
  ASSERT_EQ(analyzed.code, 0) << analyzed.err;
  EXPECT_NE(analyzed.out.find("\"peak_activation_max\""), std::string::npos);
  const auto json = run("tune -S 4 -M 8 --memory-limit 6 --format json");
  ASSERT_EQ(json.code, 0) << json.err;
  EXPECT_NE(json.out.find("\"best_builtin\""), std::string::npos);
  expect_usage_error("tune -S 4 -M 8 --memory-limit 5XB", "--memory-limit 5XB: expected");
  expect_usage_error("tune -S 4 -M 8 -v 2", "does not apply");
  const auto none = run("tune -S 4 -M 8 --memory-limit 1GB");
  EXPECT_EQ(none.code, 2);
  EXPECT_NE(none.err.find("no schedule fits the memory limit of 1 GB"), std::string::npos)
      << none.err;
}

// Issue 14: control characters from an input reached the terminal raw in error messages (an ESC
// sequence in a CSV cell could recolour it); they are written as \xNN now, on one line.
TEST_F(Cli, ErrorMessagesNeverCarryControlCharacters) {
  // A file name with an ESC sequence, which the message quotes.
  const auto r = run("validate '" + (dir_ / "\x1b[31mmissing.csv").string() + "'");
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  for (const char c : r.err.substr(0, r.err.size() - 1))
    EXPECT_FALSE((static_cast<unsigned char>(c) < 0x20 && c != '\t') || c == 0x7f) << r.err;
  EXPECT_NE(r.err.find("\\x1b"), std::string::npos) << r.err;
}

// Issue 14: the text report mixed 17-digit values with 4-digit ones in one column.
TEST_F(Cli, AnalyzeTextUsesOneNotationPerColumn) {
  const auto r = run("analyze chimera-asym -S 4 -M 8");
  ASSERT_EQ(r.code, 0) << r.err;
  std::istringstream lines(r.out);
  std::string line;
  while (std::getline(lines, line)) {
    // Every number has at most four decimals and no exponent.
    for (std::size_t dot = line.find('.'); dot != std::string::npos;
         dot = line.find('.', dot + 1)) {
      std::size_t digits = 0;
      while (dot + 1 + digits < line.size() && std::isdigit(line[dot + 1 + digits]) != 0)
        ++digits;
      EXPECT_LE(digits, 4U) << line;
    }
    for (std::size_t e = 1; e + 2 < line.size(); ++e) {
      const bool exponent = std::isdigit(line[e - 1]) != 0 && line[e] == 'e' &&
                            (line[e + 1] == '+' || line[e + 1] == '-');
      EXPECT_FALSE(exponent) << line;
    }
  }
  // Device 0 is busy 24 units (floating-point sums gave 23.999999999999996) and idle 6.
  EXPECT_NE(r.out.find(fmt::format("    dev {:<6}{:>8}  {:>8}", 0, "24", "6")), std::string::npos)
      << r.out;
}

// Issue 14: a long table path pushed its row's columns out of line with the others.
TEST_F(Cli, CompareColumnsStayAlignedWithLongTablePaths) {
  const auto table =
      file("a-table-file-with-a-rather-long-name.csv", run("show 1f1b -S 4 -M 8 --format csv").out);
  const auto r = run("compare gpipe --table " + table + " -S 4 -M 8 --system balanced");
  ASSERT_EQ(r.code, 0) << r.err;
  std::istringstream lines(r.out);
  std::string line;
  std::vector<std::size_t> bars;  // the '|' positions of the header
  int rows = 0;
  while (std::getline(lines, line)) {
    if (line.find('|') == std::string::npos) continue;
    std::vector<std::size_t> here;
    for (std::size_t i = 0; i < line.size(); ++i) {
      if (line[i] == '|') here.push_back(i);
    }
    if (bars.empty()) {
      bars = here;
    } else {
      EXPECT_EQ(here, bars) << line;
      ++rows;
    }
  }
  EXPECT_EQ(rows, 3);  // the column titles, gpipe and the table
}

}  // namespace
}  // namespace pipetab
