#include "pipetab/io/action.hpp"

#include <array>

#include "text.hpp"
#include <fmt/format.h>

#include "pipetab/table/schedule_table.hpp"

namespace pipetab::io {
namespace {

constexpr std::string_view kPairType = "OVERLAP_F_B";

bool is_digit(char c) {
  return c >= '0' && c <= '9';
}
bool is_letter(char c) {
  return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || c == '_';
}

class Cursor {
 public:
  Cursor(std::string_view text, std::size_t base) : text_(text), base_(base) {}

  // Reads a decimal number no larger than `limit`; sets `error` if there is none.
  std::optional<std::int64_t> number(std::int64_t limit, const char* what, ActionParse& out) {
    const std::size_t start = pos_;
    std::int64_t value = 0;
    while (pos_ < text_.size() && is_digit(text_[pos_])) {
      value = value * 10 + (text_[pos_] - '0');
      if (value > limit) {
        fail(out, start, fmt::format("{} is too large (at most {})", what, limit));
        return std::nullopt;
      }
      ++pos_;
    }
    if (pos_ == start) {
      fail(out, start, fmt::format("expected the {} (digits) here", what));
      return std::nullopt;
    }
    return value;
  }
  std::string_view word() {
    const std::size_t start = pos_;
    while (pos_ < text_.size() && is_letter(text_[pos_]))
      ++pos_;
    return text_.substr(start, pos_ - start);
  }
  std::size_t pos() const { return pos_; }
  bool done() const { return pos_ == text_.size(); }
  void fail(ActionParse& out, std::size_t at, std::string message) const {
    if (!out.error.empty()) return;
    out.error = std::move(message);
    out.error_offset = base_ + at;
  }

 private:
  std::string_view text_;
  std::size_t base_;
  std::size_t pos_ = 0;
};

// "<stage><TYPE><microbatch>" with TYPE one of F, B, I, W, or (when `comm` is given) a
// communication type, whose microbatch is absent for UNSHARD, RESHARD and REDUCE_GRAD.
std::optional<Pass> parse_pass(std::string_view text, std::size_t base, ActionParse& out,
                               std::optional<CommAction>* comm = nullptr) {
  Cursor cursor(text, base);
  const auto stage = cursor.number(kMaxStages - 1, "stage", out);
  if (!stage) return std::nullopt;
  const std::size_t type_at = cursor.pos();
  const auto type = cursor.word();
  PassKind kind = PassKind::None;
  if (type == "F") kind = PassKind::F;
  if (type == "B") kind = PassKind::B;
  if (type == "I") kind = PassKind::I;
  if (type == "W") kind = PassKind::W;
  const auto comm_kind = parse_comm_kind(type);
  if (kind == PassKind::None && !comm_kind) {
    cursor.fail(out, type_at,
                type == "BW"
                    ? std::string("'BW' is the full backward of PyTorch's legacy grammar (where B "
                                  "meant the input-gradient half); today's PyTorch writes B for "
                                  "the full backward and I for the input-gradient half")
                : type.empty()
                    ? std::string("expected an action type (F, B, I, W or a communication type) "
                                  "after the stage")
                    : fmt::format("unknown action type '{}' (expected F, B, I, W, SEND_F, RECV_F, "
                                  "SEND_B, RECV_B, UNSHARD, RESHARD or REDUCE_GRAD)",
                                  type));
    return std::nullopt;
  }
  if (comm_kind && comm == nullptr) {
    cursor.fail(out, type_at,
                fmt::format("'{}' is a communication action; an overlapped pair holds "
                            "computations only",
                            type));
    return std::nullopt;
  }
  std::optional<std::int64_t> microbatch;
  if (!comm_kind || has_microbatch(*comm_kind)) {
    microbatch = cursor.number(kMaxMicrobatches - 1, "microbatch", out);
    if (!microbatch) return std::nullopt;
  }
  if (!cursor.done()) {
    cursor.fail(out, cursor.pos(),
                fmt::format("unexpected {} after the {}", detail::quoted(text.substr(cursor.pos())),
                            microbatch ? "microbatch" : "action type"));
    return std::nullopt;
  }
  if (comm_kind) {
    *comm = CommAction{microbatch ? static_cast<std::int32_t>(*microbatch) : -1,
                       static_cast<std::uint16_t>(*stage), *comm_kind, 0};
    return std::nullopt;
  }
  return Pass{static_cast<std::int32_t>(*microbatch), static_cast<std::uint16_t>(*stage), kind};
}

}  // namespace

ActionParse parse_action(std::string_view cell) {
  ActionParse out;
  std::size_t begin = 0, end = cell.size();
  while (begin < end && (cell[begin] == ' ' || cell[begin] == '\t'))
    ++begin;
  while (end > begin && (cell[end - 1] == ' ' || cell[end - 1] == '\t'))
    --end;
  const std::string_view text = cell.substr(begin, end - begin);
  if (text.empty()) return out;

  if (text.front() != '(') {
    if (const auto pass = parse_pass(text, begin, out, &out.comm)) out.op = Op::single(*pass);
    return out;
  }
  // "(a;b)OVERLAP_F_B"
  const auto close = text.find(')');
  const auto semicolon = text.find(';');
  if (close == std::string_view::npos || semicolon == std::string_view::npos || semicolon > close) {
    out.error =
        "an overlapped pair is written (FORWARD;BACKWARD)OVERLAP_F_B, e.g. (0F7;7B3)OVERLAP_F_B";
    out.error_offset = begin;
    return out;
  }
  const auto type = text.substr(close + 1);
  if (type != kPairType) {
    out.error =
        fmt::format("unknown compound type {} (expected {})", detail::quoted(type), kPairType);
    out.error_offset = begin + close + 1;
    return out;
  }
  const auto first = parse_pass(text.substr(1, semicolon - 1), begin + 1, out);
  if (!first) return out;
  const auto second =
      parse_pass(text.substr(semicolon + 1, close - semicolon - 1), begin + semicolon + 1, out);
  if (!second) return out;
  if (first->kind != PassKind::F || second->kind != PassKind::B) {
    out.error =
        fmt::format("an overlapped pair holds a forward F then a full backward B (got {} then {})",
                    kind_letter(first->kind), kind_letter(second->kind));
    out.error_offset = begin;
    return out;
  }
  out.op = Op::pair(*first, *second);
  return out;
}

}  // namespace pipetab::io
