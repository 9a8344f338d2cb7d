// PyTorch pipelining action tokens ("0F1", "2I0", "(0F7;7B3)OVERLAP_F_B"), parsed strictly
// (reference pytorch-interop.md §1.2, §7): the whole token must match, unknown types and
// communication actions are errors, stage and microbatch are range-checked.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "pipetab/table/op.hpp"

namespace pipetab::io {

/// The outcome of parsing one cell: an op, an idle cell (empty text), or an error message
/// with the offset (in the cell text) where the problem is.
struct ActionParse {
  std::optional<Op> op;  ///< unset for an idle cell or on error
  std::string error;     ///< empty on success
  std::size_t error_offset = 0;

  bool ok() const noexcept { return error.empty(); }
  bool idle() const noexcept { return ok() && !op; }
};

/// Parses one cell, after stripping surrounding spaces and tabs (as PyTorch does).
ActionParse parse_action(std::string_view cell);

}  // namespace pipetab::io
