// Idealized timing and activation memory on small tables computed by hand.
#include "helpers.hpp"
#include <gtest/gtest.h>

#include "pipetab/table/memory.hpp"
#include "pipetab/table/timing.hpp"
#include "pipetab/table/validate.hpp"

namespace pipetab {
namespace {

using test::table;

ScheduleTable two_stage() {
  return table(2, {0, 1}, 2, {{"0F0", "0F1", "0B0", "0B1"}, {"1F0", "1B0", "1F1", "1B1"}});
}

TEST(Timing, TwoDevicesByHand) {
  // dev0: 0F0 [0,1] 0F1 [1,2] 0B0 [4,6] 0B1 [7,9]; dev1: 1F0 [1,2] 1B0 [2,4] 1F1 [4,5] 1B1 [5,7].
  const auto t = two_stage();
  const auto timing = idealized_timing(t, Costs{});
  EXPECT_EQ(timing.start, (std::vector<double>{0, 1, 4, 7, 1, 2, 4, 5}));
  EXPECT_EQ(timing.end, (std::vector<double>{1, 2, 6, 9, 2, 4, 5, 7}));
  EXPECT_EQ(timing.busy, (std::vector<double>{6, 6}));
  EXPECT_EQ(timing.first_start, (std::vector<double>{0, 1}));
  EXPECT_EQ(timing.last_end, (std::vector<double>{9, 7}));
  EXPECT_EQ(timing.makespan, 9.0);
  EXPECT_DOUBLE_EQ(bubble_ratio(timing), 1.0 - 12.0 / 18.0);
  EXPECT_DOUBLE_EQ(span_bubble_ratio(timing), 1.0 - 6.0 / 9.0);
}

TEST(Timing, UnitSlotsReproducePyTorchLockStepGrid) {
  // pytorch-interop.md §3.9 test_send_recv "simple_2_rank_2_stage":
  // r0 = [0F0, 0F1, _, 0B0, _, 0B1], r1 = [_, 1F0, 1B0, 1F1, 1B1].
  EXPECT_EQ(unit_slots(two_stage()), (std::vector<std::int32_t>{0, 1, 3, 5, 1, 2, 3, 4}));
}

TEST(Timing, CostsScaleWithStageShare) {
  // Interleaved placement: 4 stages on 2 devices, each a half device share.
  const auto t =
      table(2, {0, 1, 0, 1}, 1, {{"0F0", "2F0", "2B0", "0B0"}, {"1F0", "3F0", "3B0", "1B0"}});
  ASSERT_TRUE(validate(t).ok());
  EXPECT_EQ(op_durations(t, Costs{}), (std::vector<double>{0.5, 0.5, 1, 1, 0.5, 0.5, 1, 1}));
  // One microbatch: the chain 0F 1F 2F 3F 3B 2B 1B 0B.
  EXPECT_EQ(idealized_timing(t, Costs{}).makespan, 4 * 0.5 + 4 * 1.0);
}

TEST(Timing, OverlappedPairHasItsOwnCost) {
  // Two stages on one device; the pair runs F of microbatch 1 with B of microbatch 0.
  auto t = table(1, {0, 0}, 2, {{"0F0", "1F0", "1B0", "", "1F1", "1B1", "0B1"}});
  t.ops.insert(t.ops.begin() + 3, Op::pair({1, 0, PassKind::F}, {0, 0, PassKind::B}));
  t.row_begin = {0, 7};
  ASSERT_TRUE(validate(t).ok()) << to_string(validate(t).issues.front());
  Costs costs;
  costs.FB = 2.5;
  // Shares are 1/2: F 0.5, B 1, the pair 2.5 / 2.
  EXPECT_DOUBLE_EQ(idealized_timing(t, costs).makespan, 0.5 + 0.5 + 1 + 1.25 + 0.5 + 1 + 1);
  EXPECT_DOUBLE_EQ(idealized_timing(t, Costs{}).makespan, 0.5 + 0.5 + 1 + 1.5 + 0.5 + 1 + 1);
}

TEST(Timing, EmptyTimingHasNoBubble) {
  const Timing none;
  EXPECT_EQ(bubble_ratio(none), 0.0);
  EXPECT_EQ(span_bubble_ratio(none), 0.0);
}

TEST(Memory, PeaksAndCurvesByHand) {
  const auto t = two_stage();
  EXPECT_EQ(activation_peaks(t), (std::vector<double>{2, 1}));
  const auto timing = idealized_timing(t, Costs{});
  EXPECT_EQ(activation_curve(t, timing, 0),
            (std::vector<MemorySample>{{0, 1}, {1, 2}, {6, 1}, {9, 0}}));
  // 1B0 frees at 4 and 1F1 allocates at 4: the two cancel.
  EXPECT_EQ(activation_curve(t, timing, 1), (std::vector<MemorySample>{{0, 0}, {1, 1}, {7, 0}}));
  EXPECT_EQ(activation_peak_times(t, timing), (std::vector<double>{1, 1}));
}

TEST(Memory, SplitBackwardFreesPerOption) {
  const auto t = table(1, {0}, 1, {{"0F0", "0I0", "0W0"}});
  const auto timing = idealized_timing(t, Costs{});  // F [0,1] I [1,2] W [2,3]
  EXPECT_EQ(activation_curve(t, timing, 0), (std::vector<MemorySample>{{0, 1}, {3, 0}}));
  const MemoryOptions half{0.5};
  EXPECT_EQ(activation_curve(t, timing, 0, half),
            (std::vector<MemorySample>{{0, 1}, {2, 0.5}, {3, 0}}));
  const MemoryOptions all{1.0};
  EXPECT_EQ(activation_curve(t, timing, 0, all), (std::vector<MemorySample>{{0, 1}, {2, 0}}));
}

TEST(Memory, FractionalFreesReturnExactlyToZero) {
  // Stage sizes 3:1 and I freeing 0.3: A − f·P keeps the accounting exact.
  auto t = table(
      2, {0, 1}, 2,
      {{"0F0", "0F1", "0I0", "0W0", "0I1", "0W1"}, {"1F0", "1I0", "1W0", "1F1", "1I1", "1W1"}});
  t.stage_layers = {3, 1};
  ASSERT_TRUE(validate(t).ok());
  const MemoryOptions frees{0.3};
  const auto timing = idealized_timing(t, Costs{});
  for (int d = 0; d < 2; ++d)
    EXPECT_EQ(activation_curve(t, timing, d, frees).back().value, 0.0);
  EXPECT_EQ(activation_peaks(t, frees), (std::vector<double>{3.0, 0.5}));
}

TEST(Memory, StageSizesWeighActivations) {
  // Two stages of sizes 1 and 3 on two devices: device shares are 0.5 and 1.5.
  auto t = table(2, {0, 1}, 1, {{"0F0", "0B0"}, {"1F0", "1B0"}});
  t.stage_layers = {1, 3};
  ASSERT_TRUE(validate(t).ok());
  EXPECT_EQ(activation_peaks(t), (std::vector<double>{0.5, 1.5}));
  EXPECT_EQ(op_durations(t, Costs{}), (std::vector<double>{0.5, 1, 1.5, 3}));
}

TEST(Memory, PairAllocatesBeforeItFrees) {
  // One stage: 0F0, then the pair (0F1;0B0): its forward allocates before its backward frees.
  auto t = table(1, {0}, 2, {{"0F0", "0B1"}});
  t.ops.insert(t.ops.begin() + 1, Op::pair({1, 0, PassKind::F}, {0, 0, PassKind::B}));
  t.row_begin = {0, 3};
  ASSERT_TRUE(validate(t).ok()) << to_string(validate(t).issues.front());
  EXPECT_EQ(activation_peaks(t), (std::vector<double>{2}));
}

}  // namespace
}  // namespace pipetab
