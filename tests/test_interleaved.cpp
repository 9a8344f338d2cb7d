// The interleaved family against Megatron-LM and PyTorch:
//  - Megatron's schedule-table example (its forward_backward_pipelining_with_interleaving
//    comment: PP 2, group size 3, M 5, VP 2) and the orders Megatron's rules give for it;
//  - PyTorch's ScheduleInterleavedZeroBubble artifact (tests/data/pytorch/zb1p_compute_new.csv);
//  - PyTorch's per-rank rules for Interleaved1F1B and InterleavedZeroBubble (pytorch-interop.md
//    §2: stage of op k from k div (microbatches per round), microbatches counted per stage, no
//    schedule table), written here independently of the generators, over a grid of S, v, M;
//  - the rules with their messages.
#include <algorithm>
#include <deque>
#include <fstream>
#include <map>
#include <optional>
#include <span>
#include <sstream>
#include <utility>
#include <vector>

#include "helpers.hpp"
#include <fmt/format.h>
#include <gtest/gtest.h>

#include "pipetab/error.hpp"
#include "pipetab/table/validate.hpp"

namespace pipetab {
namespace {

ScheduleParams params(int S, int M, int v, std::optional<int> group = std::nullopt) {
  auto p = test::sm(S, M);
  p.chunks = v;
  if (group) p.group_size = *group;
  return p;
}

std::vector<std::string> split(const std::string& text) {
  std::istringstream in(text);
  std::vector<std::string> out;
  for (std::string token; in >> token;)
    out.push_back(token);
  return out;
}

// PyTorch's order of rank r (pytorch-interop.md §2, _get_1f1b_rank_ops with its two callers),
// idle slots left out: rounds = max(1, n div pp), mpr = n / rounds; warm-up
// min(vn, (v-1)·mpr + factor·(pp-1-r)) with factor 2 (Interleaved1F1B) or 1 (ZB); op k's forward
// runs stage ((k div mpr) mod v)·pp + r, the j-th backward stage (v-1-((j div mpr) mod v))·pp + r,
// each stage counting its own microbatches. ZB: the backward is I, and after the j-th I for
// j >= r the W of the oldest I without one; the rest of the W at the end.
std::vector<std::string> pytorch_rank(int pp, int v, int n, int r, bool zero_bubble) {
  const int rounds = std::max(1, n / pp), per_round = n / rounds, total = v * n;
  const int warmup = std::min(total, (v - 1) * per_round + (zero_bubble ? 1 : 2) * (pp - 1 - r));
  std::map<int, int> forwards, backwards, weights;
  std::deque<int> pending;  // stages of the I without a W yet, oldest first
  std::vector<std::string> out;
  const auto emit = [&](int stage, char kind, std::map<int, int>& count) {
    out.push_back(std::to_string(stage) + kind + std::to_string(count[stage]++));
  };
  const auto weight = [&] {
    emit(pending.front(), 'W', weights);
    pending.pop_front();
  };
  for (int op = 0; op < total + warmup; ++op) {
    if (op < total) emit(((op / per_round) % v) * pp + r, 'F', forwards);
    if (op < warmup) continue;
    const int j = op - warmup;
    const int stage = (v - 1 - (j / per_round) % v) * pp + r;
    emit(stage, zero_bubble ? 'I' : 'B', backwards);
    pending.push_back(stage);
    if (zero_bubble && j >= r) weight();
  }
  while (zero_bubble && !pending.empty())
    weight();
  return out;
}

bool pytorch_accepts(int pp, int n) {
  return n % std::max(1, n / pp) == 0;
}

TEST(Interleaved, MegatronScheduleTableExample) {
  // Megatron-LM schedules.py: "the tunable schedule table for PP2 N3M5 with VP2":
  //   virtual_microbatch_id | 0 1 2 3 4 5 6 7 8 9
  //   microbatch_id         | 0 1 2 0 1 2 3 4 3 4
  //   model_chunk_id        | 0 0 0 1 1 1 0 0 1 1
  // Every device runs its forwards in that order.
  const auto t = test::make("interleaved", params(2, 5, 2, 3));
  ASSERT_TRUE(validate(t).ok()) << to_string(validate(t).issues.front());
  for (int d = 0; d < 2; ++d) {
    std::vector<int> microbatches, chunks;
    for (const Op& op : t.row(d)) {
      if (op.first().kind != PassKind::F) continue;
      microbatches.push_back(op.first().microbatch);
      chunks.push_back(op.first().stage / 2);
    }
    EXPECT_EQ(microbatches, (std::vector<int>{0, 1, 2, 0, 1, 2, 3, 4, 3, 4})) << "device " << d;
    EXPECT_EQ(chunks, (std::vector<int>{0, 0, 0, 1, 1, 1, 0, 0, 1, 1})) << "device " << d;
  }
  // Megatron's loop on that table, by hand: warm-up 2(S-d-1) + (v-1)g = 5 forwards on rank 0, 3
  // on rank 1; backward k runs entry k's microbatch on the other chunk.
  EXPECT_EQ(test::row_tokens(t, 0), split("0F0 0F1 0F2 2F0 2F1 2F2 2B0 0F3 2B1 0F4 2B2 2F3 0B0 "
                                          "2F4 0B1 0B2 2B3 2B4 0B3 0B4"));
  EXPECT_EQ(test::row_tokens(t, 1), split("1F0 1F1 1F2 3F0 3B0 3F1 3B1 3F2 3B2 1F3 1B0 1F4 1B1 "
                                          "3F3 1B2 3F4 3B3 3B4 1B3 1B4"));
}

TEST(Interleaved, PyTorchS2V2M4) {
  // pytorch-interop.md §3.3 (ScheduleInterleaved1F1B pp=2, n=4, idle slots removed): PyTorch's
  // group of n / max(1, n div pp) = 2 microbatches is Megatron's default g = S.
  const std::vector<std::string> rank0 =
      split("0F0 0F1 2F0 2F1 0F2 2B0 0F3 2B1 2F2 0B0 2F3 0B1 2B2 2B3 0B2 0B3");
  const std::vector<std::string> rank1 =
      split("1F0 1F1 3F0 3B0 3F1 3B1 1F2 1B0 1F3 1B1 3F2 3B2 3F3 3B3 1B2 1B3");
  for (const auto& p : {params(2, 4, 2), params(2, 4, 2, 2)}) {
    const auto t = test::make("interleaved", p);
    EXPECT_EQ(test::row_tokens(t, 0), rank0);
    EXPECT_EQ(test::row_tokens(t, 1), rank1);
  }
  EXPECT_EQ(pytorch_rank(2, 2, 4, 0, false), rank0);  // the re-derivation agrees
  EXPECT_EQ(pytorch_rank(2, 2, 4, 1, false), rank1);
}

TEST(Interleaved, PyTorchPp4N10IsMegatronWithGroupFive) {
  // pytorch-interop.md §4.1: Megatron's default g = 4 rejects M = 10 at PP 4 (10 mod 4 = 2 < 4);
  // PyTorch runs it in 2 rounds of 5, which is Megatron's order with g = 5.
  const auto t = test::make("interleaved", params(4, 10, 2, 5));
  ASSERT_TRUE(validate(t).ok());
  for (int r = 0; r < 4; ++r)
    EXPECT_EQ(test::row_tokens(t, r), pytorch_rank(4, 2, 10, r, false)) << "rank " << r;
}

TEST(InterleavedZb, PyTorchArtifact) {
  // PyTorch's test artifact: ScheduleInterleavedZeroBubble, 2 ranks, 2 stages each, 8
  // microbatches. Its idle cells come from _add_bubbles_to_actions and change no order.
  std::ifstream in(std::string(PIPETAB_SOURCE_DIR) + "/tests/data/pytorch/zb1p_compute_new.csv");
  ASSERT_TRUE(in) << "tests/data/pytorch/zb1p_compute_new.csv";
  std::vector<std::vector<std::string>> rows;
  for (std::string line; std::getline(in, line);) {
    std::vector<std::string> row;
    std::istringstream cells(line);
    for (std::string cell; std::getline(cells, cell, ',');) {
      cell.erase(std::remove_if(cell.begin(), cell.end(), ::isspace), cell.end());
      if (!cell.empty()) row.push_back(cell);
    }
    rows.push_back(std::move(row));
  }
  ASSERT_EQ(rows.size(), 2U);
  ASSERT_EQ(rows[0].size(), 48U);  // 2 stages × 8 microbatches × F, I, W
  const auto t = test::make("interleaved-zb", params(2, 8, 2));
  ASSERT_TRUE(validate(t).ok()) << to_string(validate(t).issues.front());
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(test::row_tokens(t, r), rows[static_cast<std::size_t>(r)]) << "rank " << r;
    EXPECT_EQ(pytorch_rank(2, 2, 8, r, true), rows[static_cast<std::size_t>(r)]) << "rank " << r;
  }
}

TEST(Interleaved, PyTorchRulesOverAGrid) {
  // Every (pp, v, n) PyTorch accepts, pp 1-8, v 2-4 (Interleaved1F1B) or 1-4 (ZB), n 1-32:
  // interleaved with g = n / max(1, n div pp) and interleaved-zb give PyTorch's per-rank orders.
  int compared = 0;
  for (int pp = 1; pp <= 8; ++pp) {
    for (int v = 1; v <= 4; ++v) {
      for (int n = 1; n <= 32; ++n) {
        if (!pytorch_accepts(pp, n)) continue;
        const int group = n / std::max(1, n / pp);
        const auto zb = test::make("interleaved-zb", params(pp, n, v));
        for (int r = 0; r < pp; ++r) {
          EXPECT_EQ(test::row_tokens(zb, r), pytorch_rank(pp, v, n, r, true))
              << "interleaved-zb pp=" << pp << " v=" << v << " n=" << n << " rank " << r;
        }
        ++compared;
        // PyTorch's Interleaved1F1B with one stage per rank warms up 2(pp-1-r) forwards, which
        // is not 1F1B; Megatron (and pipetab's -v 1) runs 1F1B there.
        if (v == 1) continue;
        const auto one = test::make("interleaved", params(pp, n, v, group));
        for (int r = 0; r < pp; ++r) {
          EXPECT_EQ(test::row_tokens(one, r), pytorch_rank(pp, v, n, r, false))
              << "interleaved pp=" << pp << " v=" << v << " n=" << n << " g=" << group << " rank "
              << r;
        }
        ++compared;
      }
    }
  }
  EXPECT_GT(compared, 1000);
}

void expect_rejected(const std::string& name, const ScheduleParams& p, const std::string& message) {
  try {
    test::make(name, p);
    FAIL() << name << " accepted the parameters; expected: " << message;
  } catch (const ParamError& e) {
    EXPECT_EQ(std::string(e.what()), message);
  }
}

TEST(Interleaved, Rules) {
  // Megatron: S <= g <= M, and M mod g 0 or at least S ("dependency bubbles"). An explicit
  // --group-size that breaks a rule is refused, naming the group size that works.
  expect_rejected("interleaved", params(4, 10, 2, 4),
                  "interleaved: M = 10 with group size g = 4: M mod g = 2 must be 0 or at least "
                  "S = 4 (Megatron's dependency-bubble rule); --group-size 5 works");
  expect_rejected("interleaved", params(4, 8, 2, 9),
                  "interleaved: group size g = 9 exceeds M = 8: Megatron's interleaved schedule "
                  "needs S <= g <= M (microbatch_group_size_per_vp_stage); --group-size 4 works");
  expect_rejected("interleaved", params(4, 8, 2, 2),
                  "interleaved: group size g = 2 is less than S = 4: Megatron's interleaved "
                  "schedule needs S <= g <= M (microbatch_group_size_per_vp_stage); a smaller "
                  "group is possible only as one group of all M < S microbatches (PyTorch's "
                  "rule); --group-size 4 works");
  expect_rejected("interleaved", params(4, 3, 2, 4),
                  "interleaved: group size g = 4 exceeds M = 3: Megatron's interleaved schedule "
                  "needs S <= g <= M (microbatch_group_size_per_vp_stage); --group-size 3 works");
  auto bad = params(4, 8, 2);
  bad.group_size = 0;
  expect_rejected("interleaved", bad,
                  "interleaved: group size (--group-size) = 0: must be at least 1");
  // Accepted: the remainder at least S, one group of M < S, and -v 1 (1F1B) whatever g.
  EXPECT_NO_THROW(test::make("interleaved", params(4, 10, 2, 6)));  // 10 mod 6 = 4
  EXPECT_NO_THROW(test::make("interleaved", params(4, 3, 2, 3)));
  EXPECT_NO_THROW(test::make("interleaved", params(4, 6, 1)));
  EXPECT_EQ(test::resolved("interleaved", params(4, 8, 2)).group_size, 4);
  EXPECT_EQ(test::resolved("interleaved", params(4, 8, 2, 8)).group_size, 8);
}

// Without --group-size every (S, M) runs: Megatron's g = S where M is a multiple of S, else
// PyTorch's Interleaved1F1B group M / max(1, M div S) where M is a multiple of its rounds (what
// PyTorch itself runs), else the smallest g Megatron's rules admit; each fallback says so.
TEST(Interleaved, DefaultGroupSizeAlwaysRuns) {
  for (int S = 1; S <= 9; ++S) {
    for (int M = 1; M <= 40; ++M) {
      const auto r = test::resolved("interleaved", params(S, M, 2));
      const int g = r.group_size, rounds = std::max(1, M / S);
      if (M >= S && M % S == 0) {
        EXPECT_EQ(g, S) << S << " " << M;
        EXPECT_EQ(r.note, "") << S << " " << M;
      } else {
        EXPECT_NE(r.note.find("--group-size " + std::to_string(g)), std::string::npos) << r.note;
        if (M % rounds == 0) {
          EXPECT_EQ(g, M / rounds) << S << " " << M;
        }
      }
      // The rules hold for the chosen g (the generator would refuse otherwise) ...
      EXPECT_NO_THROW(test::make("interleaved", params(S, M, 2))) << S << " " << M;
      // ... and no smaller admitted g was skipped when PyTorch's does not apply.
      if (M % rounds != 0) {
        for (int smaller = S; smaller < g; ++smaller)
          EXPECT_ANY_THROW(test::make("interleaved", params(S, M, 2, smaller))) << S << " " << M;
      }
    }
  }
  EXPECT_EQ(test::resolved("interleaved", params(4, 6, 2)).note,
            "interleaved: M = 6 is not a multiple of S = 4, which Megatron's default group size "
            "g = S needs; using PyTorch's Interleaved1F1B group size g = M / max(1, M div S) = 6 "
            "(--group-size 6)");
}

// Megatron-Core's combined 1F1B (--overlap-moe-expert-parallel-comm, ScheduleParams::
// combined_1f1b): get_pp_rank_microbatches warms every device up with one forward more than the
// interleaved schedule's 2(S-d-1) + (v-1)g, "to ensure the forward and backward computations
// are independent in all 1f1b steps". Over a grid of S, v, M (group sizes by default and given):
// each row starts with that many forwards, then alternates backward and forward; it runs the
// same forwards and the same backwards in the same orders as the plain table; and each forward
// right before a backward in the steady state is of another microbatch, which the plain table's
// last device breaks.
TEST(Interleaved, Combined1F1BWarmsUpOneMoreForward) {
  int plain_dependent = 0;
  for (int S = 1; S <= 6; ++S) {
    for (int v = 2; v <= 4; ++v) {
      for (int M = 1; M <= 4 * S; ++M) {
        for (const std::optional<int> g : {std::optional<int>{}, std::optional<int>{M}}) {
          if (g && !(*g >= S || *g == M)) continue;
          auto p = params(S, M, v, g);
          ScheduleTable plain;
          try {
            plain = test::make("interleaved", p);
          } catch (const ParamError&) {
            continue;  // a group size Megatron's rules refuse (Interleaved.Rules)
          }
          p.combined_1f1b = true;
          const auto t = test::make("interleaved", p);
          const std::string where = fmt::format("S {} v {} M {} g {}", S, v, M, g.value_or(0));
          ASSERT_TRUE(validate(t, 1).ok()) << where;
          const int group = test::resolved("interleaved", p).group_size;
          for (int d = 0; d < S; ++d) {
            const auto row = t.row(d);
            const auto old = plain.row(d);
            // w warm-up forwards, then the steady state's forward-backward steps, forward
            // first: w + 1 forwards lead (every one, when w reaches vM).
            const int warmup = 2 * (S - d - 1) + (v - 1) * group + 1;
            const int forwards_first = std::min(v * M, warmup + 1);
            int leading = 0;
            while (leading < static_cast<int>(row.size()) &&
                   row[static_cast<std::size_t>(leading)].first().kind == PassKind::F)
              ++leading;
            EXPECT_EQ(leading, forwards_first) << where << " device " << d;
            // Then a backward and a forward in turn while forwards remain, then backwards.
            const auto turns = static_cast<std::size_t>(2 * (v * M - forwards_first));
            for (std::size_t i = static_cast<std::size_t>(leading); i < row.size(); ++i) {
              const std::size_t after = i - static_cast<std::size_t>(leading);
              const bool backward_turn = after % 2 == 0 || after >= turns;
              EXPECT_EQ(row[i].first().kind, backward_turn ? PassKind::B : PassKind::F)
                  << where << " device " << d << " op " << i;
            }
            // The same passes in the same order, kind by kind.
            const auto of_kind = [](std::span<const Op> ops, PassKind kind) {
              std::vector<std::pair<int, int>> out;
              for (const Op& op : ops)
                if (op.first().kind == kind)
                  out.emplace_back(op.first().microbatch, op.first().stage);
              return out;
            };
            for (const auto kind : {PassKind::F, PassKind::B})
              EXPECT_EQ(of_kind(row, kind), of_kind(old, kind)) << where << " device " << d;
            // Each steady step's forward and backward are independent (a row whose warm-up
            // holds every forward has no steady state: its last forward and first backward
            // are two steps, Megatron's all_warmup).
            const auto dependent = [](std::span<const Op> ops) {
              int n = 0;
              std::size_t first_backward = 0;
              while (first_backward < ops.size() && ops[first_backward].first().kind == PassKind::F)
                ++first_backward;
              if (std::none_of(ops.begin() + static_cast<std::ptrdiff_t>(first_backward), ops.end(),
                               [](const Op& op) { return op.first().kind == PassKind::F; }))
                return 0;
              for (std::size_t i = 0; i + 1 < ops.size(); ++i)
                n += ops[i].first().kind == PassKind::F && ops[i + 1].first().kind == PassKind::B &&
                     ops[i].first().microbatch == ops[i + 1].first().microbatch;
              return n;
            };
            EXPECT_EQ(dependent(row), 0) << where << " device " << d;
            plain_dependent += dependent(old);
          }
        }
      }
    }
  }
  EXPECT_GT(plain_dependent, 0);  // what the extra forward is for
  // With one chunk the interleaved schedule is 1F1B, which combines only at S = 1.
  // 1F1B has it only without pipelining (S = 1: one more warm-up forward, F0 F1 B0 F2 B1 ...),
  // as Megatron-Core, which needs model chunks to combine when PP > 1.
  auto other = test::sm(4, 8);
  other.combined_1f1b = true;
  expect_rejected("1f1b", other,
                  "1f1b: --a2a-overlap with 4 pipeline stages and no model chunks: Megatron-Core "
                  "combines the interleaved schedule's steps when PP > 1 (it requires virtual "
                  "pipeline stages), and 1F1B's only without pipelining (S = 1); use interleaved "
                  "with v >= 2");
  auto interleaved_one = params(4, 8, 1);
  interleaved_one.combined_1f1b = true;
  EXPECT_THROW((void)test::make("interleaved", interleaved_one), ParamError);
  for (const std::int32_t M : {1, 2, 5, 9}) {
    auto single = test::sm(1, M);
    single.combined_1f1b = true;
    const auto t = test::make("1f1b", single);
    ASSERT_EQ(t.ops.size(), static_cast<std::size_t>(2 * M));
    std::vector<std::pair<PassKind, std::int32_t>> expected{{PassKind::F, 0}};
    for (std::int32_t i = 0; i + 1 < M; ++i) {
      expected.emplace_back(PassKind::F, i + 1);
      expected.emplace_back(PassKind::B, i);
    }
    expected.emplace_back(PassKind::B, M - 1);
    for (std::size_t i = 0; i < t.ops.size(); ++i) {
      EXPECT_EQ(t.ops[i].first().kind, expected[i].first) << "M " << M << " op " << i;
      EXPECT_EQ(t.ops[i].first().microbatch, expected[i].second) << "M " << M << " op " << i;
    }
  }
  auto gpipe = test::sm(1, 4);
  gpipe.combined_1f1b = true;
  expect_rejected("gpipe", gpipe, "gpipe: --a2a-overlap is not a parameter of this schedule");
}

TEST(InterleavedZb, Rules) {
  // PyTorch: n a multiple of its rounds max(1, n div pp); no group-size parameter.
  expect_rejected("interleaved-zb", params(4, 9, 2),
                  "interleaved-zb: M = 9 must be a multiple of its number of rounds max(1, M div "
                  "S) = 2 (PyTorch's ScheduleInterleavedZeroBubble rule)");
  expect_rejected("interleaved-zb", params(4, 8, 2, 4),
                  "interleaved-zb: --group-size is not a parameter of this schedule");
  EXPECT_NO_THROW(test::make("interleaved-zb", params(4, 10, 2)));  // 2 rounds of 5
  EXPECT_NO_THROW(test::make("interleaved-zb", params(4, 3, 2)));   // one round of 3
  EXPECT_EQ(test::resolved("interleaved-zb", test::sm(4, 8)).chunks, 2);
}

TEST(InterleavedZb, GroupSizeIsAnInterleavedOption) {
  // Only the interleaved orders with groups take --group-size: Megatron's and PipeOffload's GIS.
  for (const auto* info : all_schedules()) {
    auto p = test::sm(4, 8);
    p.group_size = 4;
    if (info->takes_group_size) {
      EXPECT_TRUE(info->name == "interleaved" || info->name == "gis") << info->name;
      continue;
    }
    try {
      test::make(std::string(info->name), p);
      ADD_FAILURE() << info->name << " took --group-size";
    } catch (const ParamError& e) {
      EXPECT_NE(std::string(e.what()).find("--group-size is not a parameter"), std::string::npos)
          << e.what();
    }
  }
}

}  // namespace
}  // namespace pipetab
