// Parameter resolution and every constraint a generator enforces: impossible parameters are
// rejected with the rule that was broken.
#include <cctype>

#include "helpers.hpp"
#include <gtest/gtest.h>

#include "pipetab/error.hpp"

namespace pipetab {
namespace {

using test::sm;

void expect_rejected(const std::string& name, const ScheduleParams& p,
                     const std::string& fragment) {
  try {
    test::make(name, p);
    FAIL() << name << " accepted the parameters; expected: " << fragment;
  } catch (const ParamError& e) {
    EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
  }
}

TEST(Params, UnknownScheduleListsTheKnownOnes) {
  try {
    find_schedule("zigzag");
    FAIL();
  } catch (const ParamError& e) {
    // Every registered name, in registration order, comma-separated.
    std::string known;
    for (const auto* info : all_schedules())
      known += (known.empty() ? "" : ", ") + std::string(info->name);
    EXPECT_EQ(std::string(e.what()),
              "unknown schedule 'zigzag' (known: " + known +
                  "; PyTorch's names such as 1F1B or ScheduleInterleaved1F1B are accepted too)");
    EXPECT_EQ(known.rfind("gpipe, 1f1b, interleaved, chimera, chimera-asym, hanayo, ", 0), 0U);
  }
}

// Names as people write them: any case, and PyTorch's schedule names with or without the class
// prefix (torch.distributed.pipelining.get_schedule_class, torchtitan's
// pipeline_parallel_schedule), which pipetab itself prints in its export notes.
TEST(Params, NamesAsPeopleWriteThem) {
  const std::pair<const char*, const char*> cases[] = {
      {"1F1B", "1f1b"},
      {"Schedule1F1B", "1f1b"},
      {"GPipe", "gpipe"},
      {"ScheduleGPipe", "gpipe"},
      {"Interleaved1F1B", "interleaved"},
      {"ScheduleInterleaved1F1B", "interleaved"},
      {"interleaved1f1b", "interleaved"},
      {"LoopedBFS", "looped-bfs"},
      {"ScheduleLoopedBFS", "looped-bfs"},
      {"InterleavedZeroBubble", "interleaved-zb"},
      {"ScheduleInterleavedZeroBubble", "interleaved-zb"},
      {"ZBVZeroBubble", "zb-v"},
      {"ScheduleZBVZeroBubble", "zb-v"},
      {"DualPipeV", "dualpipev"},
      {"ScheduleDualPipeV", "dualpipev"},
      {"ZB-V", "zb-v"},
      {"Chimera", "chimera"},
  };
  for (const auto& [written, key] : cases)
    EXPECT_EQ(find_schedule(written).name, key) << written;
  // Every registered name in upper case finds itself.
  for (const auto* info : all_schedules()) {
    std::string upper(info->name);
    for (auto& c : upper)
      c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    EXPECT_EQ(&find_schedule(upper), info) << upper;
  }
  // "Schedule" alone is not a schedule.
  EXPECT_THROW(find_schedule("Schedule"), ParamError);
}

TEST(Params, UnknownNameSuggestsTheNearest) {
  const auto message = [](const char* name) {
    try {
      find_schedule(name);
    } catch (const ParamError& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  EXPECT_EQ(message("1fb1").rfind("unknown schedule '1fb1'; did you mean '1f1b'? (known: ", 0), 0U);
  EXPECT_EQ(
      message("ZBVZeroBuble").rfind("unknown schedule 'ZBVZeroBuble'; did you mean 'zb-v'?", 0),
      0U);
  EXPECT_EQ(message("hanyo").rfind("unknown schedule 'hanyo'; did you mean 'hanayo'?", 0), 0U);
  // Nothing within two edits: no suggestion.
  EXPECT_EQ(message("zigzag").find("did you mean"), std::string::npos);
}

TEST(Params, Defaults) {
  EXPECT_EQ(test::resolved("interleaved", sm(4, 8)).chunks, 2);
  EXPECT_EQ(test::resolved("interleaved", sm(4, 8)).group_size, 4);  // Megatron's default g = S
  EXPECT_EQ(test::resolved("hanayo", sm(4, 4)).waves, 2);
  EXPECT_EQ(test::resolved("chimera", sm(4, 8)).variant, "direct");
  const auto asym = test::resolved("chimera-asym", sm(4, 8));
  EXPECT_EQ(asym.split_early, 1);
  EXPECT_EQ(asym.split_late, 2);
  const auto plain = test::resolved("gpipe", sm(4, 8));
  EXPECT_EQ(plain.chunks, 1);
  EXPECT_EQ(plain.waves, 1);
  EXPECT_EQ(plain.group_size, 0);
  EXPECT_EQ(plain.variant, "");
}

TEST(Params, CommonRanges) {
  for (const auto* info : all_schedules()) {
    const std::string name(info->name);
    expect_rejected(name, sm(0, 8), "devices (-S) = 0: must be at least 1");
    expect_rejected(name, sm(-3, 8), "devices (-S) = -3: must be at least 1");
    expect_rejected(name, sm(4, 0), "microbatches (-M) = 0: must be at least 1");
    expect_rejected(name, sm(70000, 8), "devices (-S) = 70000: must be at most 65535");
    expect_rejected(name, sm(4, std::int64_t{1} << 40),
                    "microbatches (-M) = 1099511627776: must be at most");
  }
  auto p = sm(4, 8);
  p.chunks = 0;
  expect_rejected("interleaved", p, "chunks (-v) = 0: must be at least 1");
  p = sm(4, 4);
  p.waves = 0;
  expect_rejected("hanayo", p, "waves (-W) = 0: must be at least 1");
  p = sm(4, 8);
  p.group_size = -1;
  expect_rejected("interleaved", p, "group size (--group-size) = -1: must be at least 1");
  p.group_size = std::int64_t{1} << 40;
  expect_rejected("interleaved", p, "group size (--group-size) = 1099511627776: must be at most");
}

TEST(Params, OptionsASchedulesDoesNotTakeAreErrors) {
  auto p = sm(4, 8);
  p.chunks = 2;
  expect_rejected("gpipe", p, "gpipe: -v/--chunks is not a parameter of this schedule");
  p = sm(4, 8);
  p.waves = 2;
  expect_rejected("1f1b", p, "-W/--waves is not a parameter");
  p = sm(4, 8);
  p.variant = "direct";
  expect_rejected("interleaved", p, "--variant is not a parameter");
  p = sm(4, 8);
  p.split = "1:2";
  expect_rejected("chimera", p, "--split is not a parameter");
  p = sm(4, 8);
  p.group_size = 4;
  expect_rejected("1f1b", p, "1f1b: --group-size is not a parameter of this schedule");
  p = sm(4, 8);
  p.variant = "tripling";
  expect_rejected("chimera", p, "unknown variant 'tripling' (expected one of: direct, doubling)");
}

TEST(Params, Interleaved) {
  auto p = sm(4, 6);
  p.chunks = 2;
  // Megatron's group size g = S would leave a last group of 2 < S microbatches; without
  // --group-size PyTorch's g = 6 runs it (test_interleaved.cpp checks every interleaved rule).
  EXPECT_EQ(test::resolved("interleaved", p).group_size, 6);
  p.group_size = 4;
  expect_rejected("interleaved", p,
                  "M = 6 with group size g = 4: M mod g = 2 must be 0 or at least S = 4 "
                  "(Megatron's dependency-bubble rule); --group-size 6 works");
  p.group_size = 6;  // one group of 6
  EXPECT_NO_THROW(test::make("interleaved", p));
  p.group_size.reset();
  p.chunks = 1;  // one chunk is 1F1B, which has no such rule
  EXPECT_NO_THROW(test::make("interleaved", p));
  p = sm(2, 2);
  p.chunks = 40000;
  expect_rejected("interleaved", p, "80000 stages exceed the limit of 65535");
}

TEST(Params, Chimera) {
  for (const char* name : {"chimera", "chimera-asym"}) {
    expect_rejected(name, sm(3, 6), "D = S = 3 must be even");
    expect_rejected(name, sm(1, 1), "D = S = 1 must be even");
    expect_rejected(name, sm(4, 6), "N = M = 6 must be a multiple of D = S = 4");
    expect_rejected(name, sm(4, 2), "N = M = 2 must be a multiple of D = S = 4");
    auto p = sm(4, 12);
    p.variant = "doubling";
    expect_rejected(name, p, "forward doubling needs N = M = 12 to be a multiple of 2D = 8");
  }
}

TEST(Params, ChimeraAsymSplit) {
  for (const char* bad : {"1:0", "0:1", "a:b", "12", "1:2:3", ":2", "1:", "1:2000000", "-1:2"}) {
    auto p = sm(4, 8);
    p.split = bad;
    expect_rejected("chimera-asym", p, "expected E:L, two whole numbers from 1 to 1000000");
  }
  auto p = sm(4, 8);
  p.split = "3:5";
  const auto r = test::resolved("chimera-asym", p);
  EXPECT_EQ(r.split_early, 3);
  EXPECT_EQ(r.split_late, 5);
}

TEST(Params, Hanayo) {
  expect_rejected("hanayo", sm(4, 8), "M = 8 must equal S = 4");
  auto p = sm(4, 4);
  p.waves = 40000;
  expect_rejected("hanayo", p, "320000 stages exceed the limit of 65535");
}

TEST(Params, OpCountOverflowIsRejectedBeforeAllocating) {
  expect_rejected("1f1b", sm(65535, std::int64_t{1} << 24),
                  "ops exceed the table limit of 268435456 ops");
  expect_rejected("gpipe", sm(60000, 60000), "ops exceed the table limit");
  auto p = sm(64, 1 << 20);
  p.chunks = 64;
  expect_rejected("interleaved", p, "ops exceed the table limit");
  expect_rejected("chimera", sm(65534, 65534 * 8), "ops exceed the table limit");
}

}  // namespace
}  // namespace pipetab
