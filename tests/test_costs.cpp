#include <gtest/gtest.h>

#include "pipetab/error.hpp"
#include "pipetab/table/costs.hpp"
#include "pipetab/table/op.hpp"

namespace pipetab {
namespace {

TEST(Op, PyTorchActionSyntax) {
  EXPECT_EQ(to_string(Op::make(PassKind::F, 1, 3)), "3F1");
  EXPECT_EQ(to_string(Op::make(PassKind::I, 2, 0)), "0I2");
  EXPECT_EQ(to_string(Op::make(PassKind::W, 0, 12)), "12W0");
  const Op pair = Op::pair({7, 0, PassKind::F}, {3, 7, PassKind::B});
  EXPECT_TRUE(pair.is_pair());
  EXPECT_EQ(pair.passes().size(), 2U);
  EXPECT_EQ(to_string(pair), "(0F7;7B3)OVERLAP_F_B");
  EXPECT_FALSE(Op::make(PassKind::B, 0, 0).is_pair());
  EXPECT_EQ(Op::make(PassKind::B, 0, 0).passes().size(), 1U);
}

TEST(Costs, DefaultsAreTheDesignDefaults) {
  const Costs c;
  EXPECT_EQ(c.F, 1.0);
  EXPECT_EQ(c.B, 2.0);
  EXPECT_EQ(c.I, 1.0);
  EXPECT_EQ(c.W, 1.0);
  EXPECT_EQ(c.pair(), 3.0);  // no overlap gain unless FB is given
  EXPECT_EQ(to_string(c), "F=1,B=2,I=1,W=1");
}

TEST(Costs, ParsesAllKeys) {
  const Costs c = parse_costs("F=1.5, B=4,I=3,W=1,FB=4.5");
  EXPECT_EQ(c.F, 1.5);
  EXPECT_EQ(c.B, 4.0);
  EXPECT_EQ(c.I, 3.0);
  EXPECT_EQ(c.W, 1.0);
  EXPECT_EQ(c.pair(), 4.5);
  EXPECT_EQ(parse_costs(to_string(c)), c);
}

TEST(Costs, DerivesMissingBackwardParts) {
  // docs/design.md §2: B = I + W when only I and W are given; I = W = B/2 when only B is.
  Costs c = parse_costs("I=1.5,W=0.5");
  EXPECT_EQ(c.B, 2.0);
  c = parse_costs("B=3");
  EXPECT_EQ(c.I, 1.5);
  EXPECT_EQ(c.W, 1.5);
  c = parse_costs("B=3,I=2");
  EXPECT_EQ(c.W, 1.0);
  c = parse_costs("B=3,W=2");
  EXPECT_EQ(c.I, 1.0);
  c = parse_costs("B=3,I=2,W=1");
  EXPECT_EQ(c.I, 2.0);
  c = parse_costs("F=2");
  EXPECT_EQ(c.F, 2.0);
  EXPECT_EQ(c.B, 2.0);  // untouched keys keep their defaults
}

void expect_error(const std::string& text, const std::string& fragment) {
  try {
    parse_costs(text);
    FAIL() << "accepted " << text;
  } catch (const ParamError& e) {
    EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
  }
}

TEST(Costs, RejectsBadInputNamingTheKey) {
  expect_error("", "empty");
  expect_error("F", "expected KEY=VALUE");
  expect_error("X=1", "unknown key 'X'");
  expect_error("F=1,F=2", "key 'F' given twice");
  expect_error("F=abc", "F=abc: expected a number");
  expect_error("F=1x", "F=1x: expected a number");
  expect_error("F=", "expected a number");
  expect_error("F=nan", "expected a number");
  expect_error("F=inf", "expected a number");
  expect_error("B=0", "must be positive");
  expect_error("W=-1,I=1", "must be positive");
  expect_error("I=1", "I given without W or B");
  expect_error("W=1", "W given without I or B");
  expect_error("B=1,I=2", "derived W = B - I is positive");
  expect_error("F=1,,B=2", "expected KEY=VALUE");
  expect_error("B=2,I=5,W=5",
               "--costs: B=2 but I + W = 10; the split backward must add up to the full one");
  expect_error("F=1e308", "--costs: F=1e308: costs must lie between 1e-12 and 1e+12");
  expect_error("B=1e-13", "costs must lie between");
}

}  // namespace
}  // namespace pipetab
