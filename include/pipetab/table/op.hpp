// The cells of a schedule table: one pass of one microbatch through one stage, or an overlapped
// pair of two such passes executed as one unit (docs/design.md §3).
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

namespace pipetab {

/// What a pass computes. Letters follow PyTorch pipelining: `B` is the full backward, `I` the
/// input-gradient half and `W` the weight-gradient half of a split backward (`I` + `W` = `B`;
/// the zero-bubble papers call our `I` "B"). `None` marks the absent second half of a single op.
enum class PassKind : std::uint8_t { F, B, I, W, None };

/// The letter of a kind ("F", "B", "I", "W").
char kind_letter(PassKind kind) noexcept;

/// True for the kinds that consume the forward activation of their stage (B and I).
constexpr bool is_input_backward(PassKind kind) noexcept {
  return kind == PassKind::B || kind == PassKind::I;
}

/// One computation: microbatch `microbatch` through global stage `stage` (0..stages-1 in model
/// order). Which pipeline (model replica) it runs in follows from the microbatch.
struct Pass {
  std::int32_t microbatch = 0;
  std::uint16_t stage = 0;
  PassKind kind = PassKind::None;

  friend bool operator==(const Pass&, const Pass&) = default;
};

/// One table cell: a single pass, or an overlapped pair (DualPipe's "F&B") holding a forward
/// and a full backward of different microbatches that run as one unit with their own cost.
struct Op {
  std::array<Pass, 2> halves{};

  static constexpr Op single(Pass pass) noexcept { return Op{{pass, Pass{}}}; }
  static constexpr Op pair(Pass forward, Pass backward) noexcept { return Op{{forward, backward}}; }
  static constexpr Op make(PassKind kind, std::int32_t microbatch, int stage) noexcept {
    return single(Pass{microbatch, static_cast<std::uint16_t>(stage), kind});
  }

  constexpr bool is_pair() const noexcept { return halves[1].kind != PassKind::None; }
  constexpr const Pass& first() const noexcept { return halves[0]; }
  constexpr const Pass& second() const noexcept { return halves[1]; }
  /// The passes of this op: one, or two for an overlapped pair.
  std::span<const Pass> passes() const noexcept {
    return {halves.data(), is_pair() ? std::size_t{2} : std::size_t{1}};
  }

  friend bool operator==(const Op&, const Op&) = default;
};

static_assert(sizeof(Pass) == 8, "Pass is kept at 8 bytes: tables hold millions of them");
static_assert(sizeof(Op) == 16, "Op is kept at 16 bytes: tables hold millions of them");

/// PyTorch action syntax: "3F1", "0I2", "(0F7;7B3)OVERLAP_F_B".
std::string to_string(const Op& op);
std::string to_string(const Pass& pass);

}  // namespace pipetab
