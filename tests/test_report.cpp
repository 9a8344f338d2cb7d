// Reports: the JSON contract of docs/design.md §7, CSV rows, rankings, and the terminal grid.
#include "helpers.hpp"
#include <fmt/ranges.h>
#include <gtest/gtest.h>

#include "pipetab/error.hpp"
#include "pipetab/report/compare.hpp"
#include "pipetab/report/grid.hpp"
#include "pipetab/report/output.hpp"
#include "pipetab/report/text.hpp"

namespace pipetab {
namespace {

Evaluation evaluate_named(const std::string& name, std::int64_t S, std::int64_t M) {
  auto p = test::sm(S, M);
  const auto params = test::resolved(name, p);
  return evaluate(test::make(name, p), &params, name, Costs{});
}

TEST(Report, JsonFollowsTheDesignContract) {
  const auto j = to_json(evaluate_named("1f1b", 4, 8));
  EXPECT_EQ(j["schedule"], "1f1b");
  EXPECT_EQ(j["params"]["devices"], 4);
  EXPECT_EQ(j["params"]["stages"], 4);
  EXPECT_EQ(j["params"]["microbatches"], 8);
  EXPECT_EQ(j["params"]["chunks"], 1);
  EXPECT_EQ(j["params"]["waves"], 1);
  EXPECT_DOUBLE_EQ(j["formula"]["bubble_ratio"].get<double>(), 3.0 / 11.0);
  EXPECT_EQ(j["formula"]["peak_activation"], 4.0);
  EXPECT_EQ(j["table"]["makespan"], 33.0);
  EXPECT_DOUBLE_EQ(j["table"]["bubble_ratio"].get<double>(), 3.0 / 11.0);
  EXPECT_EQ(j["table"]["peak_activation"], nlohmann::json({4.0, 3.0, 2.0, 1.0}));
  EXPECT_EQ(j["table"]["busy"], nlohmann::json({24.0, 24.0, 24.0, 24.0}));
  EXPECT_EQ(j["table"]["idle"], nlohmann::json({9.0, 9.0, 9.0, 9.0}));
  EXPECT_FALSE(j["table"].contains("activation_curve"));
  EXPECT_TRUE(j["simulation"].is_null());
  // A user table has no formula level.
  const auto t = test::make("1f1b", {});
  EXPECT_TRUE(to_json(evaluate(t, nullptr, "mine.csv", Costs{}))["formula"].is_null());
  // Schedules without a closed form report null fields with a note.
  const auto hanayo = to_json(evaluate_named("hanayo", 4, 4));
  EXPECT_TRUE(hanayo["formula"]["bubble_ratio"].is_null());
  EXPECT_FALSE(hanayo["formula"]["note"].is_null());
}

TEST(Report, ScheduleWithoutAFormulaEntryGetsANote) {
  ResolvedParams p;
  p.schedule = "unregistered";
  const auto f = formula(p, Costs{});
  EXPECT_FALSE(f.bubble_ratio);
  EXPECT_EQ(f.note, "no closed form is known for unregistered");
}

TEST(Report, CsvRowMatchesHeader) {
  const auto e = evaluate_named("interleaved", 4, 8);
  const auto header = csv_header();
  const auto row = csv_row(e);
  ASSERT_EQ(header.size(), row.size());
  const auto column = [&](const std::string& name) {
    return row[static_cast<std::size_t>(std::find(header.begin(), header.end(), name) -
                                        header.begin())];
  };
  EXPECT_EQ(column("table.makespan"), "28.5");
  EXPECT_EQ(column("table.peak_activation"), "5.5;4.5;3.5;2.5");
  EXPECT_EQ(column("params.chunks"), "2");
  EXPECT_EQ(column("simulation.context_parallel"), "");  // not simulated: the layout is blank
  EXPECT_EQ(csv_line({"a", "b,c", "d\"e"}), "a,\"b,c\",\"d\"\"e\"\n");
}

TEST(Report, NumbersRoundTrip) {
  EXPECT_EQ(format_number(28.5), "28.5");
  EXPECT_EQ(format_number(33.0), "33");
  EXPECT_EQ(std::stod(format_number(3.0 / 11.0)), 3.0 / 11.0);
}

Evaluation fake(const std::string& name, std::optional<double> published, double table_makespan,
                double peak, std::optional<double> runtime = std::nullopt) {
  Evaluation e;
  e.schedule = name;
  if (runtime) {
    e.simulation = SimulationMetrics{};
    e.simulation->system = "sys";
    e.simulation->runtime_s = *runtime;
  }
  if (published) {
    e.formula = Formula{};
    e.formula->published_bubble_ratio = published;
  }
  e.table.makespan = table_makespan;
  e.table.peak_activation = {peak};
  return e;
}

TEST(Compare, RanksTiesAndChanges) {
  const auto c = compare({fake("a", 0.10, 12, 3, 7.0), fake("b", 0.11, 11, 3, 9.0),
                          fake("c", std::nullopt, 5, 1, 8.0), fake("d", 0.10, 12, 9, 6.0)},
                         {{"e", "needs M = S"}});
  EXPECT_EQ(c.formula_rank, (std::vector<int>{1, 3, 0, 1}));
  EXPECT_EQ(c.table_rank, (std::vector<int>{3, 2, 1, 3}));
  EXPECT_EQ(c.memory_rank, (std::vector<int>{2, 2, 1, 4}));
  // Among a, b, d (ranked at both levels): b moves from last to first.
  EXPECT_EQ(c.rank_changed, (std::vector<bool>{true, true, false, true}));
  // Simulation: d 6, a 7, c 8, b 9 against the table c 5, b 11, a 12, d 12: every place moves.
  EXPECT_EQ(c.simulation_rank, (std::vector<int>{2, 4, 3, 1}));
  EXPECT_EQ(c.simulation_rank_changed, (std::vector<bool>{true, true, true, true}));
  EXPECT_EQ(c.system, "sys");
  const auto j = to_json(c);
  EXPECT_TRUE(j["schedules"][2]["rank"]["formula"].is_null());
  EXPECT_EQ(j["skipped"][0]["reason"], "needs M = S");
  EXPECT_NE(to_text(c).find("* formula -> table"), std::string::npos);
  EXPECT_NE(to_text(c).find("* table -> simulation"), std::string::npos);
  EXPECT_NE(to_csv(c).find("rank.changed"), std::string::npos);
}

TEST(Report, PublishedRatiosSayWhichBubbleTheyAre) {
  // Reference §0: 1F1B's published ratio is the global bubble, ZB-V's "zero bubble" the
  // per-device span one, V-Half's "≈ B/2" an approximate span rate.
  const auto one_f_one_b = to_json(evaluate_named("1f1b", 4, 8));
  const auto zb_v = to_json(evaluate_named("zb-v", 4, 8));
  const auto v_half = to_json(evaluate_named("v-half", 4, 8));
  EXPECT_EQ(one_f_one_b["formula"]["published_bubble_definition"], "global");
  EXPECT_EQ(zb_v["formula"]["published_bubble_definition"], "span");
  EXPECT_EQ(v_half["formula"]["published_bubble_definition"], "approximate span");
  EXPECT_TRUE(to_json(evaluate_named("hanayo", 4, 4))["formula"]["published_bubble_definition"]
                  .is_null());  // nothing published
  EXPECT_NE(to_text(evaluate_named("zb-v", 4, 8)).find("published bubble ratio  0 (span)"),
            std::string::npos);
  std::vector<Evaluation> rows;
  for (const char* name : {"1f1b", "zb-v", "v-half"})
    rows.push_back(evaluate_named(name, 4, 8));
  const auto text = to_text(compare(std::move(rows), {}));
  EXPECT_NE(text.find(" 0.2727 "), std::string::npos) << text;
  EXPECT_NE(text.find(" 0.0000s "), std::string::npos) << text;
  EXPECT_NE(text.find(" ~0.1364s "), std::string::npos) << text;
}

TEST(Compare, PublishedChimeraFormulaIsOptimistic) {
  // S = 8, M = 16, B = 2F: Chimera's published (D-2)/(2N+D-2) = 0.158 ranks it ahead of
  // interleaved's 0.179, but its table (0.273, makespan 66) falls behind interleaved (58.5).
  std::vector<Evaluation> rows;
  for (const char* name : {"gpipe", "1f1b", "interleaved", "chimera"})
    rows.push_back(evaluate_named(name, 8, 16));
  const auto c = compare(std::move(rows), {});
  EXPECT_EQ(c.formula_rank, (std::vector<int>{3, 3, 2, 1}));
  EXPECT_EQ(c.table_rank, (std::vector<int>{3, 3, 1, 2}));
  EXPECT_EQ(c.memory_rank, (std::vector<int>{4, 1, 3, 1}));  // peaks 16, 8, 11.5, 8
  EXPECT_EQ(c.rank_changed, (std::vector<bool>{false, false, true, true}));
  // With equal F and B the published ratios are exact and nothing changes.
  std::vector<Evaluation> equal;
  for (const char* name : {"gpipe", "1f1b", "interleaved", "chimera"}) {
    auto p = test::sm(8, 16);
    const auto params = test::resolved(name, p);
    Costs costs;
    costs.B = 1;
    equal.push_back(evaluate(test::make(name, p), &params, name, costs));
  }
  const auto same = compare(std::move(equal), {});
  EXPECT_EQ(same.rank_changed, (std::vector<bool>{false, false, false, false}));
}

TEST(GridRender, TwoDevicesByHand) {
  auto p = test::sm(2, 2);
  const auto t = test::make("1f1b", p);
  const auto timing = idealized_timing(t, Costs{});
  EXPECT_EQ(render_grid(t, timing),
            "time   0  1  2  3  4  5  6  7  8\n"
            "dev 0| F0 F1 .  .  B0--- .  B1---\n"
            "dev 1| .  F0 B0--- F1 B1--- .  .\n");
  const auto colored = render_grid(t, timing, {true});
  EXPECT_NE(colored.find("\x1b[44;97mF0"), std::string::npos);
  EXPECT_NE(colored.find("\x1b[42;30mB0   \x1b[0m"), std::string::npos);
}

TEST(GridRender, ChunkLettersAndHalfUnits) {
  auto p = test::sm(2, 2);
  p.chunks = 2;
  const auto t = test::make("interleaved", p);
  const auto grid = render_grid(t, idealized_timing(t, Costs{}));
  EXPECT_NE(grid.find("dev 0| F0a F1a F0b F1b"), std::string::npos) << grid;
}

TEST(GridRender, ColoursSplitBackwardsAndPairs) {
  // One stage on one device: 0F0, the pair (0F1;0B0), 0I1, 0W1.
  auto t = test::table(1, {0}, 2, {{"0F0", "0I1", "0W1"}});
  t.ops.insert(t.ops.begin() + 1, Op::pair({1, 0, PassKind::F}, {0, 0, PassKind::B}));
  t.row_begin = {0, 4};
  const auto timing = idealized_timing(t, Costs{});
  // Widest label "F1&B0" → columns of 6; the pair costs F + B = 3 columns.
  EXPECT_EQ(render_grid(t, timing),
            "time   0     1     2     3     4     5\n"
            "dev 0| F0    F1&B0------------ I1    W1\n");
  const auto colored = render_grid(t, timing, {true});
  for (const char* code : {"\x1b[44;97mF0", "\x1b[46;30mF1&B0", "\x1b[43;30mI1", "\x1b[45;97mW1"}) {
    EXPECT_NE(colored.find(code), std::string::npos) << code;
  }
}

TEST(GridRender, RefusesDurationsTooUnequalToDraw) {
  const auto t = test::make("1f1b", test::sm(2, 2));
  Costs costs;
  costs.B = 1e9;
  try {
    render_grid(t, idealized_timing(t, costs));
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(
        std::string(e.what()),
        "the op durations are too unequal to draw on one time axis; use --format csv or json");
  }
}

TEST(Report, EveryScheduleIsListedInFormulas) {
  // A schedule missing from formulas/ (e.g. after a rename) would silently lose its closed form.
  for (const auto* info : all_schedules()) {
    ResolvedParams p;
    p.schedule = std::string(info->name);
    EXPECT_NE(formula(p, Costs{}).note, "no closed form is known for " + p.schedule) << info->name;
  }
}

TEST(GridRender, RefusesWhatItCannotDraw) {
  const auto t = test::make("1f1b", {});
  try {
    render_grid(t, idealized_timing(t, Costs{}), {false, 5});
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()),
              "the grid would be 33 columns wide (limit 5); use --format csv or json");
  }
  Costs irrational;
  irrational.B = std::sqrt(2.0);
  EXPECT_THROW(render_grid(t, idealized_timing(t, irrational)), Error);
}

// Folding over a grid of paragraphs and widths: every line within the width unless it holds one
// word too long for any line, the words and their order kept, the prefixes where they belong,
// and no line ending before a word that would have fitted on it.
TEST(TextWrap, FoldsEveryParagraphWithinItsWidth) {
  const std::vector<std::string> words = {
      "a", "TP",   "4",         "·",           "CP",         "2",
      "×", "256,", "recompute", "distributed", "optimizer;", "exceeds-any-narrow-line-by-itself"};
  int checked = 0;
  for (std::size_t count = 0; count <= 40; count += 3) {
    for (const std::size_t width : {8U, 13U, 20U, 40U, 120U}) {
      std::vector<std::string> paragraph;
      for (std::size_t i = 0; i < count; ++i)
        paragraph.push_back(words[(i * 7 + count) % words.size()]);
      const std::string text = fmt::format("{}", fmt::join(paragraph, "  "));
      const auto out = wrap(text, width, "> ", "  ");
      ASSERT_TRUE(out.ends_with('\n'));
      std::vector<std::string> lines, seen;
      for (std::size_t at = 0; at < out.size();) {
        const auto end = out.find('\n', at);
        lines.push_back(out.substr(at, end - at));
        at = end + 1;
      }
      for (std::size_t l = 0; l < lines.size(); ++l) {
        const auto& line = lines[l];
        const std::string prefix = l == 0 ? "> " : "  ";
        ASSERT_TRUE(line.starts_with(prefix)) << line;
        const auto body = line.substr(prefix.size());
        const auto first_space = body.find(' ');
        const bool one_word = first_space == std::string::npos;
        if (!one_word) {
          EXPECT_LE(text_columns(line), width) << line;
        }
        for (std::size_t at = 0; at < body.size();) {
          const auto end = std::min(body.find(' ', at), body.size());
          seen.push_back(body.substr(at, end - at));
          at = end + 1;
        }
        // Greedy: the next line's first word did not fit on this one.
        if (l + 1 < lines.size()) {
          const auto next = lines[l + 1].substr(2);
          const auto word = next.substr(0, next.find(' '));
          EXPECT_GT(text_columns(line) + 1 + text_columns(word), width) << line;
        }
        ++checked;
      }
      EXPECT_EQ(seen, paragraph) << text;
    }
  }
  EXPECT_GT(checked, 200);
  EXPECT_EQ(text_columns("TP 4 · CP 2 × 8"), 15U);
}

}  // namespace
}  // namespace pipetab
