// The round trip with PyTorch's runtime: real files from PyTorch and torchtitan
// (tests/data/pytorch, tests/data/torchtitan; sources and licences in their READMEs) load,
// validate and give the same file back; PyTorch's lowering (`_add_send_recv`) is reproduced
// cell for cell on its own artifact and on the literal vectors of its tests
// (pytorch-interop.md §3.9); every error of a compute+comms table is located and explained;
// exports PyTorch cannot run are refused with the reason.
#include <algorithm>
#include <fstream>
#include <sstream>
#include <string>

#include "helpers.hpp"
#include <gtest/gtest.h>

#include "pipetab/error.hpp"
#include "pipetab/io/pytorch_csv.hpp"
#include "pipetab/schedules/registry.hpp"
#include "pipetab/table/comm_order.hpp"
#include "pipetab/table/validate.hpp"

namespace pipetab {
namespace {

std::string data(const std::string& name) {
  std::ifstream in(std::string(PIPETAB_SOURCE_DIR) + "/tests/data/" + name, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  EXPECT_FALSE(text.str().empty()) << name;
  return text.str();
}

std::string error_of(const std::string& text) {
  try {
    io::read_pytorch_csv(text, "t.csv");
  } catch (const ParseError& e) {
    return e.what();
  }
  return "no error";
}

// Each device's whole list, comm actions included, as PyTorch writes it.
std::vector<std::string> lists(const ScheduleTable& t) {
  std::vector<std::string> out;
  std::istringstream in(io::write_pytorch_comms_csv(t));
  for (std::string line; std::getline(in, line);)
    out.push_back(line);
  return out;
}

TEST(PyTorchFiles, EveryRealFileLoadsValidatesAndComesBackByteForByte) {
  for (const char* name :
       {"pytorch/zb1p_compute_new.csv", "pytorch/zb1p_comms_new.csv",
        "pytorch/dualpipev_4rank_10mb.csv", "torchtitan/2-rank.csv", "torchtitan/4-rank.csv",
        "torchtitan/8-rank.csv", "torchtitan/example.csv"}) {
    const auto text = data(name);
    const auto t = io::read_pytorch_csv(text, name);
    EXPECT_TRUE(validate(t).ok()) << name;
    EXPECT_EQ(io::write_pytorch_csv(t), text) << name;
    EXPECT_EQ(t.pipelines(), 1) << name;
  }
}

TEST(PyTorchFiles, CommsFilesKeepEveryActionWhereItStands) {
  const auto t = io::read_pytorch_csv(data("pytorch/zb1p_comms_new.csv"), "comms.csv");
  EXPECT_FALSE(t.comms.empty());
  // Rank 0 starts 0F0, 0SEND_F0, 2RECV_F0, 0F1: the receive sits after one compute op.
  const auto row = t.comms.row(0);
  ASSERT_GE(row.size(), 2U);
  EXPECT_EQ(to_string(row[0]), "0SEND_F0");
  EXPECT_EQ(row[0].before, 1);
  EXPECT_EQ(to_string(row[1]), "2RECV_F0");
  EXPECT_EQ(row[1].before, 1);
  // torchtitan's example keeps its FSDP actions in place.
  const auto example = io::read_pytorch_csv(data("torchtitan/example.csv"), "example.csv");
  EXPECT_EQ(to_string(example.comms.row(0)[0]), "0UNSHARD");
  EXPECT_EQ(to_string(example.comms.row(0)[1]), "2UNSHARD");
}

TEST(PyTorchLowering, ReproducesPyTorchsZb1pCommsArtifactCellForCell) {
  // PyTorch's test_csv: the compute artifact, I+W merged into B (_merge_bw), then
  // _add_send_recv, equals zb1p_2rank_2stagep_comms.csv.
  const auto compute = io::read_pytorch_csv(data("pytorch/zb1p_compute_new.csv"), "c.csv");
  const auto merged = merge_split_backward(compute);
  EXPECT_TRUE(validate(merged).ok());
  EXPECT_EQ(io::write_pytorch_comms_csv(merged), data("pytorch/zb1p_comms_new.csv"));
}

TEST(PyTorchLowering, ReproducesTheLiteralSendRecvVectorOfPyTorchsTests) {
  // pytorch-interop.md §3.9, test_send_recv "simple_2_rank_2_stage": _add_send_recv on the padded
  // table, whose idle cells take turns.
  auto t = io::read_pytorch_csv("0F0,0F1,,0B0,,0B1\n,1F0,1B0,1F1,1B1,\n", "t.csv");
  const auto padded = pytorch_send_recv(t, true);
  t.comms = padded;
  const auto got = lists(t);
  ASSERT_EQ(got.size(), 2U);
  EXPECT_EQ(got[0], "0F0,0SEND_F0,0F1,0SEND_F1,0RECV_B0,0B0,0RECV_B1,0B1");
  EXPECT_EQ(got[1], "1RECV_F0,1RECV_F1,1F0,1B0,1SEND_B0,1F1,1B1,1SEND_B1");
  // The runtime compacts the lists first: dev1's receive of F1's activation follows its F0.
  t.comms = pytorch_send_recv(t);
  EXPECT_EQ(lists(t)[1], "1RECV_F0,1F0,1RECV_F1,1B0,1SEND_B0,1F1,1B1,1SEND_B1");
}

TEST(PyTorchLowering, EveryGeneratedSingleTableLowersToAnOrderThatChecks) {
  // Property: over the registry, a valid table's lowering passes check_comm_order (one send and
  // one receive per cross-device dependency, each on the right side of its op), and reading
  // its compute+comms file back gives the same table with the same order.
  for (const auto* info : all_schedules()) {
    for (const std::int64_t S : {2, 4}) {
      for (const std::int64_t M : {2 * S, 3 * S}) {
        ScheduleTable t;
        try {
          t = generate(*info, test::sm(S, M));
        } catch (const ParamError&) {
          continue;
        }
        const auto label = std::string(info->name) + " S=" + std::to_string(S);
        auto lowered = t;
        lowered.comms = pytorch_send_recv(t);
        EXPECT_FALSE(check_comm_order(lowered)) << label;
        if (t.pipelines() > 1 || !t.stage_layers.empty()) continue;
        const auto back = io::read_pytorch_csv(io::write_pytorch_comms_csv(t), "x.csv");
        EXPECT_EQ(back.comms, lowered.comms) << label;
        EXPECT_EQ(back.row_begin, t.row_begin) << label;
        EXPECT_EQ(back.ops, t.ops) << label;
      }
    }
  }
}

// PyTorch's `_add_send_recv` loop as it reads, round by round (every remaining rank, in rank
// order, tries its next op once per round): the oracle for the linear-time lowering.
CommOrder send_recv_round_by_round(const ScheduleTable& t, bool idle_slots) {
  const auto N = static_cast<std::size_t>(t.stages);
  const auto D = static_cast<std::size_t>(t.devices);
  std::vector<char> forward(static_cast<std::size_t>(t.microbatches) * N, 0);
  std::vector<char> backward(forward.size(), 0);
  const auto at = [N](const Pass& p) {
    return static_cast<std::size_t>(p.microbatch) * N + p.stage;
  };
  const auto ready = [&](const Pass& p) {
    if (p.kind == PassKind::F) return p.stage == 0 || forward[at(p) - 1] != 0;
    if (is_input_backward(p.kind)) return p.stage + 1U == N || backward[at(p) + 1] != 0;
    return true;
  };
  std::vector<std::vector<CommAction>> rows(D);
  std::vector<std::int64_t> next(t.row_begin.begin(), t.row_begin.end() - 1), column(D, 0);
  std::vector<std::int32_t> placed(D, 0);
  const auto pending = [&] {
    for (std::size_t d = 0; d < D; ++d)
      if (next[d] < t.row_begin[d + 1]) return true;
    return false;
  };
  while (pending()) {
    bool progress = false;
    for (std::size_t d = 0; d < D; ++d) {
      if (next[d] == t.row_begin[d + 1]) continue;
      const auto i = static_cast<std::size_t>(next[d]);
      const auto passes = t.ops[i].passes();
      if (idle_slots && !t.slots.empty() && column[d] < t.slots[i]) {
        ++column[d];
        progress = true;
        continue;
      }
      if (!std::all_of(passes.begin(), passes.end(), ready)) continue;
      progress = true;
      ++column[d];
      ++next[d];
      const auto here = ++placed[d];  // a send follows its op
      for (const Pass& p : passes) {
        const bool f = p.kind == PassKind::F;
        if (!f && !is_input_backward(p.kind)) continue;
        (f ? forward : backward)[at(p)] = 1;
        const int to_stage = f ? p.stage + 1 : p.stage - 1;
        if (to_stage < 0 || to_stage >= t.stages) continue;
        const auto to = static_cast<std::size_t>(
            t.placement.device_of(t.pipeline_of_microbatch(p.microbatch), to_stage));
        if (to == d) continue;
        rows[d].push_back({p.microbatch, static_cast<std::uint16_t>(p.stage),
                           f ? CommKind::SendF : CommKind::SendB, here});
        rows[to].push_back({p.microbatch, static_cast<std::uint16_t>(to_stage),
                            f ? CommKind::RecvF : CommKind::RecvB, placed[to]});
      }
    }
    if (!progress) throw Error("stalled");
  }
  CommOrder order;
  for (const auto& row : rows) {
    order.actions.insert(order.actions.end(), row.begin(), row.end());
    order.row_begin.push_back(static_cast<std::int64_t>(order.actions.size()));
  }
  if (order.actions.empty()) order.row_begin = {0};
  return order;
}

TEST(PyTorchLowering, TakesTheSameTurnsAsPyTorchsRoundByRoundLoopOverTheRegistry) {
  // Property over every generator, pipeline depths from 2 to 9 and microbatch counts from 1 to
  // 3S, with idle cells taking turns or not: the event-driven lowering gives the very lists of
  // the loop as PyTorch writes it.
  std::int64_t compared = 0;
  for (const auto* info : all_schedules()) {
    for (std::int64_t S = 2; S <= 9; ++S) {
      for (const std::int64_t M : {std::int64_t{1}, S - 1, S, S + 1, 2 * S, 3 * S}) {
        ScheduleTable t;
        try {
          t = generate(*info, test::sm(S, M));
        } catch (const ParamError&) {
          continue;
        }
        for (const bool idle : {false, true}) {
          auto fast = t, oracle = t;
          fast.comms = pytorch_send_recv(t, idle);
          oracle.comms = send_recv_round_by_round(t, idle);
          EXPECT_EQ(lists(fast), lists(oracle))
              << info->name << " S=" << S << " M=" << M << " idle=" << idle;
          ++compared;
        }
      }
    }
  }
  EXPECT_GT(compared, 500);
}

TEST(PyTorchFiles, LegacyGrammarIsNamed) {
  const auto message = error_of(data("pytorch/zb1p_compute_legacy.csv"));
  EXPECT_EQ(message.rfind("t.csv:1:18: this file is in PyTorch's legacy grammar", 0), 0U)
      << message;
  EXPECT_NE(message.find("2B0 is followed by 2W0 (line 1, column 22)"), std::string::npos);
  // A table with B and W but also I is not legacy: it is an invalid current table.
  EXPECT_EQ(error_of("0F0,0B0,0W0,0F1,0I1,0W1\n"), "no error");
}

TEST(CommOrder, EveryMistakeIsLocatedAndExplained) {
  // Two ranks, one stage each, one microbatch: 0F0 SEND_F0 RECV_B0 0B0 / RECV_F0 1F0 1B0 SEND_B0.
  const std::string good = "0F0,0SEND_F0,0RECV_B0,0B0\n1RECV_F0,1F0,1B0,1SEND_B0\n";
  EXPECT_EQ(error_of(good), "no error");
  EXPECT_EQ(error_of("0SEND_F0,0F0,0RECV_B0,0B0\n1RECV_F0,1F0,1B0,1SEND_B0\n"),
            "t.csv:1:1: 0SEND_F0 on device 0: it comes before 0F0, whose output it sends; a send "
            "follows its producer");
  EXPECT_EQ(error_of("0F0,0SEND_F0,0RECV_B0,0B0\n1F0,1RECV_F0,1B0,1SEND_B0\n"),
            "t.csv:2:5: 1RECV_F0 on device 1: it comes after 1F0, which consumes it; a receive "
            "precedes its consumer");
  EXPECT_EQ(error_of("0F0,0SEND_F0,0SEND_F0,0RECV_B0,0B0\n1RECV_F0,1F0,1B0,1SEND_B0\n"),
            "t.csv:1:14: 0SEND_F0 on device 0: it appears twice");
  EXPECT_EQ(error_of("0F0,0SEND_F0,0RECV_B0,0B0\n1RECV_F0,1F0,1B0,0SEND_B0\n"),
            "t.csv:2:18: 0SEND_B0 on device 1: stage 0 of microbatch 0 runs on device 0");
  EXPECT_EQ(error_of("0F0,0SEND_F0,0RECV_B0,0B0\n1RECV_F0,1F0,1SEND_F0,1B0,1SEND_B0\n"),
            "t.csv:2:14: 1SEND_F0 on device 1: stage 1 is the last stage: it sends to no other "
            "stage");
  EXPECT_EQ(error_of("0F0,0SEND_F0,0RECV_B0,0B0\n1RECV_F0,1F0,1B0,1SEND_B0,1SEND_B3\n"),
            "t.csv:2:27: 1SEND_B3 on device 1: microbatch 3 does not exist (the table has "
            "microbatches 0..0)");
  EXPECT_EQ(error_of("0F0,0SEND_F0,0RECV_B0,0B0\n1RECV_F0,1F0,1B0,1SEND_B0,7UNSHARD\n"),
            "t.csv:2:27: 7UNSHARD on device 1: stage 7 does not exist (the table has stages 0..1)");
  EXPECT_EQ(error_of("0F0,0SEND_F0,0RECV_B0,0B0\n1RECV_F0,1F0,1B0,1SEND_B0,0RESHARD\n"),
            "t.csv:2:27: 0RESHARD on device 1: stage 0 does not run on this device");
  // A backward transfer across a boundary no backward crosses has no other end (the check of
  // the ranks' waits read before its array on it: found by fuzz_csv under UBSan).
  EXPECT_EQ(error_of("0F0,0SEND_F0,0RECV_B0,0B0\n1RECV_F0,1F0\n"),
            "t.csv:1:14: 0RECV_B0 on device 0: stage 1 of microbatch 0 has no input-gradient "
            "backward (device 1), so nothing sends it");
  EXPECT_EQ(error_of("0F0,0SEND_F0\n1RECV_F0,1F0,1B0,1SEND_B0\n"),
            "t.csv:2:18: 1SEND_B0 on device 1: stage 0 of microbatch 0 has no input-gradient "
            "backward (device 0), so nothing receives it");
  // FSDP's actions as PyTorch's runtime asserts them.
  EXPECT_EQ(error_of("0F0,0SEND_F0,0RECV_B0,0B0,0UNSHARD\n1RECV_F0,1F0,1B0,1SEND_B0\n"),
            "t.csv:1:1: 0F0 on device 0 computes on stage 0 while it is sharded: an 0UNSHARD must "
            "come before it (PyTorch raises \"Attempted to compute on sharded stage_idx=0\")");
  EXPECT_EQ(error_of("0UNSHARD,0F0,0SEND_F0,0RESHARD,0RECV_B0,0B0\n1RECV_F0,1F0,1B0,1SEND_B0\n"),
            "t.csv:1:1: 0B0 on device 0 computes on stage 0 while it is sharded: an 0UNSHARD must "
            "come before it (PyTorch raises \"Attempted to compute on sharded stage_idx=0\")");
  EXPECT_EQ(error_of("0UNSHARD,0F0,0UNSHARD,0SEND_F0,0RECV_B0,0B0\n1RECV_F0,1F0,1B0,1SEND_B0\n"),
            "t.csv:1:14: 0UNSHARD on device 0: stage 0 is already unsharded (PyTorch's runtime "
            "asserts: \"Unsharding the same stage_idx twice\")");
  EXPECT_EQ(error_of("0F0,0SEND_F0,0RECV_B0,0B0\n1RESHARD,1RECV_F0,1F0,1B0,1SEND_B0\n"),
            "t.csv:2:1: 1RESHARD on device 1: stage 1 is not unsharded (PyTorch's runtime asserts: "
            "\"Resharding stage_idx without unsharding\")");
  EXPECT_EQ(error_of("0UNSHARD,0F0,0SEND_F0,0RECV_B0,0B0,0RESHARD\n1RECV_F0,1F0,1B0,1SEND_B0\n"),
            "no error");
  EXPECT_EQ(error_of("0F0,0SEND_F0,0RECV_B0,0B0\n1F0,1B0,1SEND_B0\n"),
            "t.csv:2:1: device 1 has no 1RECV_F0: stage 0 runs on device 0");
  EXPECT_EQ(error_of("0F0,0RECV_B0,0B0\n1RECV_F0,1F0,1B0,1SEND_B0\n"),
            "t.csv:1:1: device 0 has no 0SEND_F0: stage 1 runs on device 1");
  // Stages on one rank pass tensors directly (PyTorch's V-turn): a send between them is wrong.
  EXPECT_EQ(error_of("0F0,0SEND_F0,1F0,1B0,0B0\n"),
            "t.csv:1:5: 0SEND_F0 on device 0: stages 0 and 1 of microbatch 0 both run on this "
            "device, so nothing is sent (PyTorch hands the tensor over directly)");
  // A compute+comms list has no idle slots.
  EXPECT_EQ(error_of("0F0,0SEND_F0,,0RECV_B0,0B0\n1RECV_F0,1F0,1B0,1SEND_B0\n"),
            "t.csv:1:14: an empty cell in a compute+comms table: its rows are the runtime's "
            "action lists, which have no idle slots (PyTorch's compute_comms format refuses them "
            "too)");
}

TEST(PyTorchExport, RefusesWhatPyTorchCannotRunAndStatesWhatEachRankBuilds) {
  const auto chimera = test::make("chimera", test::sm(4, 4));
  const auto problems = io::pytorch_export_problems(chimera);
  ASSERT_EQ(problems.size(), 1U);
  EXPECT_EQ(
      problems[0].rfind("stage 0 runs on device 0 and on device 3: the table has 2 pipelines", 0),
      0U)
      << problems[0];
  ScheduleParams asym = test::sm(4, 4);
  EXPECT_FALSE(io::pytorch_export_problems(test::make("chimera-asym", asym)).empty());
  EXPECT_TRUE(io::pytorch_export_problems(test::make("1f1b", test::sm(4, 8))).empty());

  auto interleaved = test::sm(2, 4);
  interleaved.chunks = 2;
  const auto loop = io::pytorch_placement(test::make("interleaved", interleaved));
  EXPECT_EQ(loop.style, "loop");
  EXPECT_EQ(loop.stages_of_rank, (std::vector<std::vector<std::int32_t>>{{0, 2}, {1, 3}}));
  const auto v = io::pytorch_placement(test::make("zb-v", test::sm(4, 8)));
  EXPECT_EQ(v.style, "v");
  EXPECT_EQ(v.stages_of_rank[0], (std::vector<std::int32_t>{0, 7}));
  const auto note = io::pytorch_export_note(test::make("zb-v", test::sm(4, 8)), true);
  EXPECT_NE(note.find("rank 3 builds stages 3, 4"), std::string::npos) << note;
  EXPECT_NE(note.find("ZBVZeroBubble"), std::string::npos) << note;
  EXPECT_NE(note.find("format=\"compute_comms\""), std::string::npos) << note;
  // Thousands of ranks: the first and last eight are listed, the rest summed up in one line.
  const auto wide = io::pytorch_export_note(test::make("1f1b", test::sm(3000, 1)), false);
  EXPECT_EQ(std::count(wide.begin(), wide.end(), '\n'), 1 + 16 + 1 + 2) << wide;
  EXPECT_NE(wide.find("rank 7 builds stages 7\n  ... ranks 8 to 2991 likewise\n  rank 2992 "
                      "builds stages 2992\n"),
            std::string::npos)
      << wide;
}

}  // namespace
}  // namespace pipetab
