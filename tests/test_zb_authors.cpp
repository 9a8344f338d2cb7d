// The zero-bubble authors' own scheduler, against its output: tests/data/zb-authors-orders.jsonl
// holds the orders their scheduler/zb.py produces (made by tests/data/zb-authors-orders.py from
// their code) on a grid of S, M, memory limits and transfer delays with F = I = W = 1. pipetab's
// zb_authors.cpp must give the same orders, and `tune`, which searches them among its family,
// must never be slower than them at the same limit.
#include <fstream>
#include <map>
#include <sstream>
#include <string>

#include "helpers.hpp"
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "pipetab/io/config.hpp"
#include "pipetab/io/pytorch_csv.hpp"
#include "pipetab/schedules/zero_bubble.hpp"
#include "pipetab/study/tune.hpp"
#include "pipetab/table/memory.hpp"
#include "pipetab/table/validate.hpp"

namespace pipetab {
namespace {

struct AuthorsCase {
  int S = 0, M = 0;
  double limit = 0.0, comm = 0.0, span = 0.0;
  std::vector<std::string> rows;  // per stage: "F0 F1 I0 W0 ..."
  std::string label() const {
    return "S=" + std::to_string(S) + " M=" + std::to_string(M) +
           " limit=" + std::to_string(limit) + " comm=" + std::to_string(comm);
  }
};

const std::vector<AuthorsCase>& cases() {
  static const std::vector<AuthorsCase> all = [] {
    std::vector<AuthorsCase> out;
    std::ifstream in(std::string(PIPETAB_SOURCE_DIR) + "/tests/data/zb-authors-orders.jsonl");
    std::string line;
    while (std::getline(in, line)) {
      const auto j = nlohmann::json::parse(line);
      out.push_back({j["S"], j["M"], j["limit"], j["comm"], j["span"],
                     j["rows"].get<std::vector<std::string>>()});
    }
    return out;
  }();
  return all;
}

std::string row_text(const ScheduleTable& t, int device) {
  std::string out;
  for (auto i = t.row_begin[static_cast<std::size_t>(device)];
       i < t.row_begin[static_cast<std::size_t>(device) + 1]; ++i) {
    const Pass& p = t.ops[static_cast<std::size_t>(i)].first();
    if (!out.empty()) out += ' ';
    out += (p.kind == PassKind::F   ? "F"
            : p.kind == PassKind::I ? "I"
                                    : "W") +
           std::to_string(p.microbatch);
  }
  return out;
}

// The authors' order as a table: PyTorch's CSV, one row per stage.
ScheduleTable authors_table(const AuthorsCase& c) {
  std::string csv;
  for (int s = 0; s < c.S; ++s) {
    std::string row, pass;
    std::istringstream words(c.rows[static_cast<std::size_t>(s)]);
    while (words >> pass)
      row += (row.empty() ? "" : ",") + std::to_string(s) + pass;
    csv += row + "\n";
  }
  return io::read_pytorch_csv(csv, "authors.csv");
}

TEST(ZeroBubbleAuthors, TheirOrdersOnTheWholeGrid) {
  ASSERT_EQ(cases().size(), 216U);
  for (const auto& c : cases()) {
    auto problem = ZeroBubbleProblem::uniform(c.S, c.M, 1, 1, 1, c.limit);
    problem.comm = c.comm;
    const auto best = best_zero_bubble_authors_schedule(problem);
    ASSERT_TRUE(best.has_value()) << c.label();
    EXPECT_DOUBLE_EQ(best->max_span, c.span) << c.label();
    for (int d = 0; d < c.S; ++d)
      EXPECT_EQ(row_text(best->table, d), c.rows[static_cast<std::size_t>(d)]) << c.label();
    // Within the limit, as the authors' memory accounting says.
    const auto peaks = activation_peaks(best->table);
    EXPECT_LE(*std::max_element(peaks.begin(), peaks.end()), c.limit + 1e-9) << c.label();
  }
}

// tune at the authors' memory limit, with their transfer delay as the network's latency, is
// never slower than their order simulated the same way (issue 11: at M = S it used to lose,
// S = 16: 92 against 78, S = 8: 44 against 38, S = 4: 20 against 18).
TEST(ZeroBubbleAuthors, TuneIsNeverSlowerThanTheirSchedule) {
  SystemConfig system = io::load_system("ideal");
  for (const auto& c : cases()) {
    if (c.S > 6 && !(c.M == c.S && c.limit == c.S && c.comm == 0.5)) continue;
    system.intra.latency_s = system.inter.latency_s = c.comm;
    TuneRequest r;
    r.devices = c.S;
    r.microbatches = c.M;
    r.setup = test::setup_of(io::load_model("paper"), system);
    Costs costs;
    costs.F = costs.I = costs.W = 1;
    costs.B = 2;
    r.setup.lowering.costs = costs;
    r.limit = {MemoryLimit::Unit::Activations, c.limit};
    const auto result = tune(r);
    ASSERT_GE(result.best, 0) << c.label();
    const double theirs = simulate_table(authors_table(c), r.setup).metrics.runtime_s;
    EXPECT_LE(result.candidates[static_cast<std::size_t>(result.best)].runtime_s, theirs + 1e-9)
        << c.label();
    // The issue's figures for their order, simulated here.
    const std::map<int, double> issue{{4, 18.0}, {8, 38.0}, {16, 78.0}};
    if (c.M == c.S && c.limit == c.S && c.comm == 0.5 && issue.contains(c.S)) {
      EXPECT_EQ(theirs, issue.at(c.S)) << c.label();
    }
  }
}

// The authors' V-shape scheduler against its output (tests/data/zb-authors-v-orders.jsonl, made
// by tests/data/zb-authors-v-orders.py from their zbv.py): the same orders and largest bubbles
// where theirs succeeds, and no schedule where theirs stops on an assertion (a memory limit or a
// size its rules cannot meet).
TEST(ZeroBubbleAuthors, TheirVShapeOrders) {
  std::ifstream in(std::string(PIPETAB_SOURCE_DIR) + "/tests/data/zb-authors-v-orders.jsonl");
  std::string line;
  int planned = 0, failed = 0;
  while (std::getline(in, line)) {
    const auto j = nlohmann::json::parse(line);
    const int S = j["S"], M = j["M"];
    auto problem = ZeroBubbleProblem::uniform(S, M, j["f"], j["b"], j["w"],
                                              j["limit"].get<double>() / 2);  // M_a
    problem.comm = j["comm"];
    const std::string label = line.substr(0, line.find(", \"bubble\""));
    const auto best = best_zero_bubble_v_schedule(problem);
    if (j.contains("error")) {
      EXPECT_FALSE(best.has_value()) << label;
      ++failed;
      continue;
    }
    ++planned;
    ASSERT_TRUE(best.has_value()) << label;
    EXPECT_DOUBLE_EQ(best->max_bubble, j["bubble"].get<double>()) << label;
    const auto& t = best->table;
    for (int d = 0; d < S; ++d) {
      std::string row;
      for (auto i = t.row_begin[static_cast<std::size_t>(d)];
           i < t.row_begin[static_cast<std::size_t>(d) + 1]; ++i) {
        const Pass& p = t.ops[static_cast<std::size_t>(i)].first();
        const int cat = p.kind == PassKind::F ? 0 : p.kind == PassKind::I ? 1 : 2;
        const bool second = p.stage >= S;
        const int chunk = cat == 0 ? (second ? 1 : 0) : (second ? 0 : 1);
        if (!row.empty()) row += ' ';
        row += std::to_string(cat) + std::to_string(chunk) + std::to_string(p.microbatch);
      }
      EXPECT_EQ(row, j["rows"][static_cast<std::size_t>(d)].get<std::string>()) << label;
    }
    EXPECT_TRUE(validate(t).ok()) << label;
  }
  EXPECT_EQ(planned + failed, 234);
  EXPECT_EQ(planned, 90);
}

}  // namespace
}  // namespace pipetab
