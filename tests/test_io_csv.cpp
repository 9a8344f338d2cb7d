// PyTorch pipelining CSV: strict parsing with line and column, placement inference, writing on
// the lock-step grid, and round trips of every generator's table.
#include "helpers.hpp"
#include <gtest/gtest.h>

#include "pipetab/error.hpp"
#include "pipetab/io/action.hpp"
#include "pipetab/io/pytorch_csv.hpp"
#include "pipetab/table/validate.hpp"

#define KNOWN_TYPES \
  "(expected F, B, I, W, SEND_F, RECV_F, SEND_B, RECV_B, UNSHARD, RESHARD or REDUCE_GRAD)"

namespace pipetab {
namespace {

using io::read_pytorch_csv;
using io::write_pytorch_csv;

// The error message `read_pytorch_csv(text)` throws.
std::string error_of(const std::string& text) {
  try {
    read_pytorch_csv(text, "t.csv");
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(Action, ParsesEveryComputeToken) {
  EXPECT_EQ(io::parse_action("3F1").op, Op::make(PassKind::F, 1, 3));
  EXPECT_EQ(io::parse_action(" 2I0\t").op, Op::make(PassKind::I, 0, 2));
  EXPECT_EQ(io::parse_action("0W3").op, Op::make(PassKind::W, 3, 0));
  EXPECT_EQ(io::parse_action("0B3").op, Op::make(PassKind::B, 3, 0));
  EXPECT_EQ(io::parse_action("(0F7;7B3)OVERLAP_F_B").op,
            Op::pair({7, 0, PassKind::F}, {3, 7, PassKind::B}));
  EXPECT_TRUE(io::parse_action("").idle());
  EXPECT_TRUE(io::parse_action("  ").idle());
}

TEST(Action, RejectsWhatPyTorchSilentlyAccepts) {
  // pytorch-interop.md §1.2: prefix matching ignores trailing garbage and reads 0BW0 as B with no
  // microbatch. Here both are errors, and the legacy token is named as such.
  EXPECT_EQ(io::parse_action("0F1x").error, "unexpected 'x' after the microbatch");
  EXPECT_EQ(io::parse_action("0BW0").error,
            "'BW' is the full backward of PyTorch's legacy grammar (where B meant the "
            "input-gradient half); today's PyTorch writes B for the full backward and I for the "
            "input-gradient half");
  EXPECT_EQ(io::parse_action("1UNSHARD2").error, "unexpected '2' after the action type");
  EXPECT_EQ(io::parse_action("3SEND_F").error, "expected the microbatch (digits) here");
  EXPECT_EQ(io::parse_action("(0F1;1SEND_F0)OVERLAP_F_B").error,
            "'SEND_F' is a communication action; an overlapped pair holds computations only");
  EXPECT_EQ(io::parse_action("0F").error, "expected the microbatch (digits) here");
  EXPECT_EQ(io::parse_action("F0").error, "expected the stage (digits) here");
  EXPECT_EQ(io::parse_action("0f1").error, "unknown action type 'f' " KNOWN_TYPES);
  EXPECT_EQ(io::parse_action("0 F1").error,
            "expected an action type (F, B, I, W or a communication type) after the stage");
  EXPECT_EQ(io::parse_action("70000F0").error, "stage is too large (at most 65534)");
  EXPECT_EQ(io::parse_action("0F99999999999").error, "microbatch is too large (at most 16777215)");
  EXPECT_EQ(io::parse_action("0F1\x01").error, "unexpected '\\x01' after the microbatch");
  EXPECT_EQ(
      io::parse_action("(0F1)OVERLAP_F_B").error,
      "an overlapped pair is written (FORWARD;BACKWARD)OVERLAP_F_B, e.g. (0F7;7B3)OVERLAP_F_B");
  EXPECT_EQ(io::parse_action("(0F1;1B0)OVERLAP").error,
            "unknown compound type 'OVERLAP' (expected OVERLAP_F_B)");
  EXPECT_EQ(io::parse_action("(1B0;0F1)OVERLAP_F_B").error,
            "an overlapped pair holds a forward F then a full backward B (got B then F)");
  EXPECT_EQ(io::parse_action("(0F1;1X0)OVERLAP_F_B").error, "unknown action type 'X' " KNOWN_TYPES);
  EXPECT_EQ(io::parse_action("(0F1;1X0)OVERLAP_F_B").error_offset, 6U);
}

TEST(Csv, ReadsPyTorchLockStepTable) {
  // pytorch-interop.md §3.9 "simple_2_rank_2_stage", with CRLF line ends as Python writes them.
  const auto t = read_pytorch_csv("0F0,0F1,,0B0,,0B1\r\n,1F0,1B0,1F1,1B1\r\n", "t.csv");
  EXPECT_EQ(t.devices, 2);
  EXPECT_EQ(t.stages, 2);
  EXPECT_EQ(t.microbatches, 2);
  EXPECT_EQ(t.pipelines(), 1);
  EXPECT_EQ(t.placement.device, (std::vector<std::int32_t>{0, 1}));
  EXPECT_EQ(t.slots, (std::vector<std::int32_t>{0, 1, 3, 5, 1, 2, 3, 4}));
  EXPECT_TRUE(validate(t).ok());
}

TEST(Csv, WritesThePyTorchLockStepGrid) {
  auto p = test::sm(2, 2);
  EXPECT_EQ(write_pytorch_csv(test::make("1f1b", p)), "0F0,0F1,,0B0,,0B1\n,1F0,1B0,1F1,1B1\n");
}

TEST(Csv, AcceptsWhitespaceQuotesRaggedRowsAndNoFinalNewline) {
  const auto t = read_pytorch_csv(" 0F0 ,\"0B0\"\n\"\",1F0,1B0,,,", "t.csv");
  EXPECT_TRUE(validate(t).ok());
  EXPECT_EQ(t.slots, (std::vector<std::int32_t>{0, 1, 1, 2}));
  const auto quoted = read_pytorch_csv("0F0,\"(0F1;0B0)OVERLAP_F_B\",0B1", "t.csv");
  EXPECT_TRUE(quoted.ops[1].is_pair());
  EXPECT_TRUE(validate(quoted).ok());
}

TEST(Csv, ErrorsNameLineAndColumn) {
  EXPECT_EQ(error_of("0F0,0B0\n1F0,1X0\n"), "t.csv:2:6: unknown action type 'X' " KNOWN_TYPES);
  EXPECT_NE(
      error_of("0F0,  0BW0\n").find("t.csv:1:8: 'BW' is the full backward of PyTorch's legacy"),
      std::string::npos);
  EXPECT_EQ(error_of("0F0,\"0B0\n"), "t.csv:1:9: line break inside a quoted cell");
  EXPECT_EQ(error_of("0F0,\"0B0"), "t.csv:1:5: unterminated quoted cell");
  EXPECT_EQ(error_of("\"0F0\"x,0B0"), "t.csv:1:6: expected ',' after the closing quote");
  EXPECT_EQ(error_of("0F\"0\""), "t.csv:1:3: a quote inside an unquoted cell");
  EXPECT_EQ(error_of("0F0,0B0\r1F0"),
            "t.csv:1:8: a carriage return (\\r) without a line feed: the file has classic Mac "
            "line endings; save it with \\n or \\r\\n line endings");
  EXPECT_EQ(error_of("\"0F0\",\"0X0\""), "t.csv:1:9: unknown action type 'X' " KNOWN_TYPES);
  EXPECT_EQ(error_of(""), "t.csv:1:1: empty table: expected one line per device");
  EXPECT_EQ(error_of(",,\n,\n"), "t.csv: the table has no ops");
}

TEST(Csv, InconsistentPlacementIsAnError) {
  EXPECT_EQ(error_of("0F0,0B0\n,0F0\n"),
            "t.csv:2:2: 0F0 is on device 1, but microbatch 0 ran stage 0 on device 0 (line 1, "
            "column 1); a "
            "stage of a microbatch runs on one device");
  EXPECT_EQ(error_of("0F0,2F0,2B0,0B0\n"),
            "t.csv: stage 1 appears in no cell, so its device is unknown");
  EXPECT_EQ(error_of("0F0,0B0,5F9\n"),
            "t.csv: the cells name microbatches 0..9 and stages 0..5 but hold only 3 ops; every "
            "microbatch "
            "needs a forward and a backward on every stage");
}

TEST(Csv, AtMost255Pipelines) {
  // 17 devices, 2 stages: microbatch m runs stage 0 on device m / 17 and stage 1 on m % 17,
  // 289 different placements.
  std::vector<std::string> rows(17);
  for (int m = 0; m < 289; ++m) {
    const auto first = static_cast<std::size_t>(m / 17), second = static_cast<std::size_t>(m % 17);
    rows[first] += "0F" + std::to_string(m) + ",";
    rows[second] += "1F" + std::to_string(m) + ",1B" + std::to_string(m) + ",";
    rows[first] += "0B" + std::to_string(m) + ",";
  }
  std::string text;
  for (const auto& row : rows)
    text += row + "\n";
  EXPECT_EQ(error_of(text),
            "t.csv: the placement differs between more than 255 groups of microbatches");
}

TEST(Csv, TrailingBlankLinesAreNotDevices) {
  const auto t = read_pytorch_csv("0F0,0B0\n\n\r\n\n", "t.csv");
  EXPECT_EQ(t.devices, 1);
  EXPECT_TRUE(validate(t).ok());
  // A blank line between devices is a device without ops, which validation reports.
  EXPECT_EQ(read_pytorch_csv("0F0,0B0\n\n1F0,1B0\n", "t.csv").devices, 3);
}

TEST(Csv, AMistypedCellIsNotReadAsASecondPipeline) {
  // 1F1 and 1B1 sit on device 0 instead of 1: microbatch 1 would form a pipeline that leaves
  // device 1 out, which no real multi-pipeline schedule does.
  EXPECT_EQ(error_of("0F0,0F1,1F1,1B1,0B1,0B0\n1F0,1B0\n"),
            "t.csv:1:9: microbatch 1 runs stage 1 on device 0, but microbatch 0 runs it on device "
            "1 (line 2, "
            "column 1); differently placed microbatches form separate pipelines only if every "
            "pipeline spans "
            "every device and all hold as many microbatches");
}

TEST(Csv, TooManyLines) {
  EXPECT_EQ(error_of(std::string(65536, '\n') + "0F0"),
            "t.csv:65536:1: more than 65535 lines (devices)");
}

TEST(Csv, TwoPipelinesAreInferredFromThePlacement) {
  auto p = test::sm(4, 8);
  const auto chimera = test::make("chimera", p);
  const auto back = read_pytorch_csv(write_pytorch_csv(chimera), "c.csv");
  EXPECT_EQ(back.pipelines(), 2);
  EXPECT_EQ(back.placement, chimera.placement);
  EXPECT_EQ(back.pipeline_of, chimera.pipeline_of);
  EXPECT_TRUE(back.same_schedule(chimera));
}

// Every generator's tables, over a small grid of parameters.
std::vector<ScheduleTable> generator_tables() {
  std::vector<ScheduleTable> out;
  for (const auto* info : all_schedules()) {
    for (std::int64_t S : {1, 2, 4, 6}) {
      for (std::int64_t M : {S, 2 * S, 4 * S}) {
        auto p = test::sm(S, M);
        try {
          out.push_back(generate(*info, p));
          if (info->default_chunks) {
            p.chunks = 3;
            out.push_back(generate(*info, p));
          }
          if (info->default_waves) {
            p.waves = 3;
            out.push_back(generate(*info, p));
          }
        } catch (const ParamError&) {
          // outside this schedule's constraints
        }
      }
    }
  }
  return out;
}

TEST(Csv, EveryGeneratorRoundTrips) {
  const auto tables = generator_tables();
  ASSERT_GT(tables.size(), 40U);
  for (const auto& t : tables) {
    const auto text = write_pytorch_csv(t);
    const auto back = read_pytorch_csv(text, "t.csv");
    EXPECT_TRUE(validate(back).ok());
    // CSV carries the orders and the placement, not stage sizes (chimera-asym).
    auto expected = t;
    expected.stage_layers.clear();
    EXPECT_TRUE(back.same_schedule(expected)) << text;
    EXPECT_EQ(write_pytorch_csv(back), text);
  }
}

// Issue 14: a UTF-8 byte-order mark gave an unexplained error at 1:1, and classic Mac line
// endings (a bare \r) were not named as the cause.
TEST(Csv, ByteOrderMarkIsSkippedAndBareCarriageReturnsAreNamed) {
  const std::string table = "0F0,0B0\n1F0,1B0\n";
  const auto plain = read_pytorch_csv(table, "t.csv");
  EXPECT_TRUE(read_pytorch_csv("\xEF\xBB\xBF" + table, "t.csv").same_schedule(plain));
  EXPECT_TRUE(read_pytorch_csv("0F0,0B0\r\n1F0,1B0\r\n", "t.csv").same_schedule(plain));
  // Columns count from after the mark.
  EXPECT_EQ(error_of("\xEF\xBB\xBF"
                     "0F0,0X0\n"),
            error_of("0F0,0X0\n"));
  EXPECT_EQ(error_of("0F0,0B0\r1F0,1B0\r"),
            "t.csv:1:8: a carriage return (\\r) without a line feed: the file has classic Mac "
            "line endings; save it with \\n or \\r\\n line endings");
}

}  // namespace
}  // namespace pipetab
