// Every validation error path (table/validate.hpp), each on a hand-made table.
#include "helpers.hpp"
#include <gtest/gtest.h>

#include "pipetab/error.hpp"
#include "pipetab/table/validate.hpp"

namespace pipetab {
namespace {

using test::table;

// Two devices, one stage each, two microbatches, 1F1B-like and valid.
ScheduleTable two_stage() {
  return table(2, {0, 1}, 2, {{"0F0", "0F1", "0B0", "0B1"}, {"1F0", "1B0", "1F1", "1B1"}});
}

// The only issue of `t` contains `fragment`; returns it for further checks.
ValidationIssue single_issue(const ScheduleTable& t, const std::string& fragment) {
  const auto report = validate(t);
  EXPECT_EQ(report.total, 1) << (report.issues.empty() ? "" : to_string(report.issues.front()));
  if (report.issues.empty()) return {};
  const auto& issue = report.issues.front();
  EXPECT_NE(issue.message.find(fragment), std::string::npos) << to_string(issue);
  return issue;
}

TEST(Validate, AcceptsPyTorchValidVectors) {
  // pytorch-interop.md §1.6, TestValidateSchedule: full backward, and split I + W.
  EXPECT_TRUE(validate(table(2, {0, 1}, 1, {{"0F0", "0B0"}, {"1F0", "1B0"}})).ok());
  EXPECT_TRUE(validate(table(2, {0, 1}, 1, {{"0F0", "0I0", "0W0"}, {"1F0", "1I0", "1W0"}})).ok());
  EXPECT_TRUE(validate(two_stage()).ok());
}

TEST(Validate, RejectsOnlyForwards) {
  const auto t = table(2, {0, 1}, 1, {{"0F0", "0F0"}, {"1F0", "1F0"}});
  const auto report = validate(t);
  ASSERT_FALSE(report.ok());
}

TEST(Validate, ShapeLimits) {
  auto t = two_stage();
  t.devices = 0;
  single_issue(t, "devices = 0: must be between 1 and 65535");
  t = two_stage();
  t.stages = 70000;
  EXPECT_NE(to_string(validate(t).issues.front()).find("stages = 70000"), std::string::npos);
  t = two_stage();
  t.microbatches = 0;
  single_issue(t, "microbatches = 0");
  t = two_stage();
  t.placement.pipelines = 0;
  single_issue(t, "pipelines = 0");
}

TEST(Validate, TooFewOpsForTheSizesIsCaughtBeforeAllocating) {
  auto t = two_stage();
  t.microbatches = kMaxMicrobatches;
  t.stages = 65535;
  single_issue(t, "too few for 16777216 microbatches x 65535 stages");
}

TEST(Validate, MalformedRowIndex) {
  auto t = two_stage();
  t.row_begin.pop_back();
  single_issue(t, "row index does not match");
  t = two_stage();
  t.row_begin = {0, 6, 4, 8};
  t.devices = 3;
  t.placement.device = {0, 1};
  single_issue(t, "row index is not increasing");
}

TEST(Validate, Placement) {
  auto t = two_stage();
  t.placement.device = {0};
  single_issue(t, "placement must map 1 pipeline(s) x 2 stages");
  t = two_stage();
  t.placement.device = {0, 2};
  single_issue(t, "stage 1 of pipeline 0 is on device 2, but devices are 0..1");
  t = two_stage();
  t.placement.device = {0, 0};
  const auto issue = single_issue(t, "holds no stage");
  EXPECT_EQ(issue.device, 1);
}

TEST(Validate, Pipelines) {
  auto t = two_stage();
  t.pipeline_of = {0};
  single_issue(t, "every one of the 2 microbatches needs a pipeline");
  t = two_stage();
  t.pipeline_of = {0, 1};
  single_issue(t, "microbatch 1 belongs to pipeline 1, but pipelines are 0..0");
  // Issue 14: a JSON table could declare a pipeline no microbatch runs in (its weights changed
  // memory and runtime silently); the CSV reader cannot express one. Both now refuse it.
  t = two_stage();
  t.placement.pipelines = 2;
  t.placement.device = {0, 1, 1, 0};
  t.pipeline_of = {0, 0};
  single_issue(t, "pipeline 1 carries no microbatch");
}

TEST(Validate, StageSizes) {
  auto t = two_stage();
  t.stage_layers = {1};
  single_issue(t, "expected 2 values");
  t.stage_layers = {1, 0};
  single_issue(t, "stage 1 of pipeline 0 has size 0");
  // Two pipelines must hold the same model.
  t = table(2, {0, 1}, 2, {{"0F0", "0B0", "1F1", "1B1"}, {"1F0", "1B0", "0F1", "0B1"}});
  t.placement = Placement{2, 2, {0, 1, 1, 0}};
  t.pipeline_of = {0, 1};
  ASSERT_TRUE(validate(t).ok()) << to_string(validate(t).issues.front());
  t.stage_layers = {1, 2, 2, 2};
  single_issue(t, "pipeline 1 sums to 4 but pipeline 0 to 3");
}

TEST(Validate, ExplicitSlots) {
  auto t = two_stage();
  t.slots = {0, 1};
  single_issue(t, "explicit slots do not match the ops");
  t.slots = {0, 1, 3, 2, 1, 2, 3, 4};
  const auto issue = single_issue(t, "explicit slots must increase");
  EXPECT_EQ(issue.device, 0);
  EXPECT_EQ(issue.position, 3);
}

TEST(Validate, BadOps) {
  auto t = two_stage();
  t.ops[1] = Op{};
  EXPECT_EQ(to_string(single_issue(t, "empty op")), "device 0, position 1 (0?0): empty op");

  t = two_stage();
  t.ops[1] = Op::pair({1, 0, PassKind::B}, {0, 0, PassKind::F});
  single_issue(t, "holds one F and one full backward B, in that order (got B and F)");

  t = two_stage();
  t.ops[1] = Op::make(PassKind::F, 5, 0);
  auto issue = single_issue(t, "microbatch 5 out of range (microbatches are 0..1)");
  EXPECT_EQ(issue.device, 0);
  EXPECT_EQ(issue.position, 1);
  EXPECT_EQ(issue.op, "0F5");

  t = two_stage();
  t.ops[1] = Op::make(PassKind::F, 1, 7);
  single_issue(t, "stage 7 out of range (stages are 0..1)");

  t = two_stage();
  t.ops[1] = Op::make(PassKind::F, -1, 0);
  single_issue(t, "microbatch -1 out of range");
}

TEST(Validate, WrongDevice) {
  // 1F1 sits on device 0, but stage 1 is placed on device 1 (and device 1 lacks it).
  const auto t = table(2, {0, 1}, 2, {{"0F0", "0F1", "1F1", "0B0", "0B1"}, {"1F0", "1B0", "1B1"}});
  const auto report = validate(t);
  ASSERT_FALSE(report.ok());
  EXPECT_EQ(
      to_string(report.issues.front()),
      "device 0, position 2 (1F1): stage 1 of the pipeline (microbatch 1) is placed on device 1, "
      "not device 0");
}

TEST(Validate, Duplicate) {
  const auto t =
      table(2, {0, 1}, 2, {{"0F0", "0F1", "0B0", "0B1", "0F1"}, {"1F0", "1B0", "1F1", "1B1"}});
  const auto issue = single_issue(t, "duplicate 0F1: it already ran at device 0, position 1");
  EXPECT_EQ(issue.position, 4);
}

TEST(Validate, Completeness) {
  auto issue = single_issue(table(2, {0, 1}, 1, {{"0F0", "0B0"}, {"1B0"}}),
                            "microbatch 0, stage 1: no forward F");
  EXPECT_EQ(issue.device, 1);
  EXPECT_EQ(issue.position, -1);
  EXPECT_EQ(to_string(issue), "device 1: microbatch 0, stage 1: no forward F");
  single_issue(table(1, {0}, 1, {{"0F0"}}), "no backward (a B, or an I and a W)");
  single_issue(table(1, {0}, 1, {{"0F0", "0B0", "0W0"}}),
               "has both a full backward B and a split backward");
  single_issue(table(1, {0}, 1, {{"0F0", "0I0"}}), "an I without its W");
  single_issue(table(1, {0}, 1, {{"0F0", "0W0"}}), "a W without its I");
}

TEST(Validate, DeadlockIsReportedAsItsCycle) {
  // Device 0 waits at 0B0 for 1B0; device 1 waits at 1F1 for 0F1, which device 0 reaches only
  // after 0B0.
  const auto t = table(2, {0, 1}, 2, {{"0F0", "0B0", "0F1", "0B1"}, {"1F1", "1F0", "1B0", "1B1"}});
  const auto issue = single_issue(t, "deadlock");
  EXPECT_EQ(
      issue.message,
      "deadlock: device 0 at position 1 (0B0) waits for 1B0 (device 1, position 2); device 1 at "
      "position 0 (1F1) waits for 0F1 (device 0, position 2)");
  EXPECT_EQ(issue.device, 0);
  EXPECT_EQ(issue.position, 1);
}

TEST(Validate, DependencyLaterOnTheSameDevice) {
  auto issue = single_issue(table(1, {0}, 1, {{"0B0", "0F0"}}),
                            "needs 0F0, which comes later on the same device (position 1)");
  EXPECT_EQ(issue.position, 0);
  single_issue(table(1, {0}, 1, {{"0F0", "0W0", "0I0"}}),
               "needs 0I0, which comes later on the same device");
  // The V-shape turn: stages 1 and 2 on device 1, and its backward order reversed.
  single_issue(
      table(2, {0, 1, 1, 0}, 1, {{"0F0", "3F0", "3B0", "0B0"}, {"1F0", "2F0", "1B0", "2B0"}}),
      "needs 2B0, which comes later on the same device (position 3)");
}

TEST(Validate, PairWhoseHalvesDependOnEachOther) {
  auto t = table(1, {0}, 1, {{}});
  t.ops = {Op::pair({0, 0, PassKind::F}, {0, 0, PassKind::B})};
  t.row_begin = {0, 1};
  single_issue(t, "the halves of this pair depend on each other (one needs 0F0)");
}

TEST(Validate, CountsEveryIssueButKeepsTheCap) {
  auto t = two_stage();
  for (auto& op : t.ops)
    op.halves[0].microbatch = 9;
  const auto report = validate(t, 3);
  EXPECT_EQ(report.total, 8);
  EXPECT_EQ(report.issues.size(), 3U);
}

TEST(Validate, RequireValidThrowsTheFirstIssue) {
  EXPECT_NO_THROW(require_valid(two_stage(), "t"));
  try {
    require_valid(table(1, {0}, 1, {{"0F0"}}), "mine");
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(
        std::string(e.what()),
        "mine: invalid table: device 0: microbatch 0, stage 0: no backward (a B, or an I and a W)");
  }
}

}  // namespace
}  // namespace pipetab
