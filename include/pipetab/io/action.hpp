// PyTorch pipelining action tokens ("0F1", "2I0", "(0F7;7B3)OVERLAP_F_B", "0SEND_F1",
// "1UNSHARD"), parsed strictly (reference pytorch-interop.md §1.2, §7): the whole token must
// match, unknown types are errors, stage and microbatch are range-checked.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "pipetab/table/comm_order.hpp"
#include "pipetab/table/op.hpp"

namespace pipetab::io {

/// The outcome of parsing one cell: a compute op, a communication action (its `before` unset),
/// an idle cell (empty text), or an error message with the offset (in the cell text) where the
/// problem is.
struct ActionParse {
  std::optional<Op> op;            ///< a compute cell
  std::optional<CommAction> comm;  ///< a communication cell
  std::string error;               ///< empty on success
  std::size_t error_offset = 0;

  bool ok() const noexcept { return error.empty(); }
  bool idle() const noexcept { return ok() && !op && !comm; }
};

/// Parses one cell, after stripping surrounding spaces and tabs (as PyTorch does).
ActionParse parse_action(std::string_view cell);

}  // namespace pipetab::io
