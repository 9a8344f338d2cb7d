// Private to io/: turning the cells of a grid file into a table when the file does not state
// the placement (PyTorch CSV).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "pipetab/table/schedule_table.hpp"

namespace pipetab::io::detail {

/// Where a cell is in its file (1-based).
struct CellLocation {
  int line = 0;
  int column = 0;
};

/// The non-idle cells of a grid file, row by row, in order.
struct Cells {
  std::int32_t rows = 0;
  std::vector<Op> ops;
  std::vector<std::int32_t> device;  ///< row of each op
  std::vector<std::int32_t> slot;    ///< column of each op
  std::vector<CellLocation> where;
  /// Communication actions (compute+comms files), each placed by `before` within its row.
  std::vector<CommAction> comms;
  std::vector<std::int32_t> comm_device;  ///< row of each action, non-decreasing
  std::vector<CellLocation> comm_where;
  std::optional<CellLocation> first_idle;  ///< the first empty cell between others, if any
};

/// Infers sizes, placement and pipelines: stages and microbatches are the largest indices + 1;
/// each (microbatch, stage) must run on one device; microbatches that place their stages on
/// the same devices share a pipeline (numbered by first microbatch). Throws ParseError at the
/// first cell that contradicts the placement, Error for problems of the whole file.
ScheduleTable infer_table(Cells cells, const std::string& file);

}  // namespace pipetab::io::detail
