// PyTorch pipelining CSV (reference pytorch-interop.md §1.4): one line per rank, one cell per
// time slot, an empty cell is idle, cells are action tokens (io/action.hpp).
#pragma once

#include <string>
#include <string_view>

#include "pipetab/table/schedule_table.hpp"

namespace pipetab::io {

/// Reads a compute-only table. Sizes come from the cells (stages and microbatches: largest
/// index + 1); the placement is inferred from where each (microbatch, stage) runs, and
/// microbatches whose stages sit on different devices form separate pipelines (this is how a
/// two-pipeline schedule such as Chimera is written; PyTorch itself has one pipeline). Cells'
/// columns are kept as explicit slots. Throws ParseError ("FILE:LINE:COLUMN: ...") on bad
/// syntax or an inconsistent placement; the table is not validated otherwise.
ScheduleTable read_pytorch_csv(std::string_view text, const std::string& file);

/// Writes one line per device. Without explicit slots the ops are laid on the lock-step grid
/// (timing.hpp unit_slots) so that columns line up as in PyTorch's tables. CSV carries orders
/// and placement, not stage sizes. Precondition: validate(table).ok().
std::string write_pytorch_csv(const ScheduleTable& table);

}  // namespace pipetab::io
