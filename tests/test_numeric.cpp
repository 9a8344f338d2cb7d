// parse_double's two implementations agree: the web build's (grammar by hand + strtod, used where
// the standard library lacks floating-point from_chars) against std::from_chars, on what users
// type and on what fuzzers would: the characters read, the error, and the value bit for bit.
#include <array>
#include <charconv>
#include <cstring>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include "pipetab/names.hpp"
#include "pipetab/numeric.hpp"

namespace pipetab {
namespace {

void expect_same(const std::string& text) {
  double a = -7.0, b = -7.0;
  const auto* first = text.data();
  const auto* last = text.data() + text.size();
  const auto want = std::from_chars(first, last, a);
  const auto got = detail::parse_double_strtod(first, last, b);
  EXPECT_EQ(got.ec, want.ec) << "'" << text << "'";
  if (want.ec == std::errc::invalid_argument) return;  // nothing read either way
  EXPECT_EQ(got.ptr - first, want.ptr - first) << "'" << text << "'";
  if (want.ec == std::errc{}) {
    EXPECT_EQ(std::memcmp(&a, &b, sizeof a) == 0 || (a != a && b != b), true)
        << "'" << text << "': " << a << " vs " << b;
  }
}

TEST(ParseDouble, TheWebImplementationReadsWhatFromCharsReads) {
  for (const char* text : {"0",
                           "1",
                           "-1",
                           "5.5",
                           "8e10",
                           "8E10",
                           "1e-3",
                           "1e+3",
                           "1e",
                           "1e+",
                           "1.",
                           ".5",
                           "-.5",
                           ".",
                           "-",
                           "",
                           "+1",
                           " 1",
                           "1 ",
                           "0x10",
                           "1,5",
                           "12abc",
                           "inf",
                           "-inf",
                           "INF",
                           "infinity",
                           "Infinity",
                           "infin",
                           "nan",
                           "NaN",
                           "-nan",
                           "1e400",
                           "-1e400",
                           "1e-400",
                           "4.9406564584124654e-324",
                           "2.2250738585072014e-308",
                           "0.1",
                           "123456789012345678901234567890",
                           "1.7976931348623157e308",
                           "00012.5000",
                           "3.14159265358979323846",
                           "1e-5x",
                           "9.",
                           "e5",
                           "--1",
                           "1..2",
                           "1.2.3"})
    expect_same(text);
}

RC_GTEST_PROP(ParseDouble, AgreesOnStringsOfNumberCharacters, ()) {
  // Strings drawn from the characters a number is made of, so that most are near-numbers.
  const auto text = *rc::gen::container<std::string>(rc::gen::elementOf(std::vector<char>{
      '0', '1', '5', '9', '.', 'e', 'E', '-', '+', 'i', 'n', 'f', 'a', 'x', ' '}));
  double a = 0.0, b = 0.0;
  const auto want = std::from_chars(text.data(), text.data() + text.size(), a);
  const auto got = detail::parse_double_strtod(text.data(), text.data() + text.size(), b);
  RC_ASSERT(got.ec == want.ec);
  if (want.ec != std::errc::invalid_argument) RC_ASSERT(got.ptr == want.ptr);
  if (want.ec == std::errc{}) RC_ASSERT(a == b || (a != a && b != b));
}

}  // namespace
// "Did you mean": every candidate at the least distance, none past the bound, the nearest of a
// name's spellings counting; checked against edit distances worked by hand.
TEST(NearestNames, EveryCandidateAtTheLeastDistanceWithinTheBound) {
  const std::vector<std::string> names{"zb-h1", "zb-h2", "zb-v", "1f1b"};
  using Indices = std::vector<std::size_t>;
  EXPECT_EQ(nearest_names(names, std::array{std::string("zb-h3")}, 2), (Indices{0, 1}));
  EXPECT_EQ(nearest_names(names, std::array{std::string("1f1bb")}, 2), (Indices{3}));
  EXPECT_EQ(nearest_names(names, std::array{std::string("gpipe")}, 2), Indices{});
  // "ZB-V" is 3 edits from "zb-v", its lower-case spelling none.
  EXPECT_EQ(nearest_names(names, std::array{std::string("ZB-V")}, 2), Indices{});
  EXPECT_EQ(nearest_names(names, std::array{std::string("ZB-V"), std::string("zb-v")}, 2),
            (Indices{2}));
  EXPECT_EQ(did_you_mean({}), "");
  EXPECT_EQ(did_you_mean({"a", "b"}), "; did you mean 'a' or 'b'?");
  EXPECT_EQ(lower_case("ScheduleZBV-1F1B"), "schedulezbv-1f1b");
}

}  // namespace pipetab
