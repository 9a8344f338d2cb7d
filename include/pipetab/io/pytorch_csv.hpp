// PyTorch pipelining CSV (reference pytorch-interop.md §1.4): one line per rank, cells are action
// tokens (io/action.hpp). Two formats: compute-only (one cell per time slot, an empty cell is
// idle) and compute+comms (each rank's whole action list with its sends, receives and FSDP
// actions, no idle cells), as PyTorch's `_load_csv` formats "compute_only" / "compute_comms".
#pragma once

#include <cstdint>
#include <iosfwd>
#include <string>
#include <string_view>
#include <vector>

#include "pipetab/table/schedule_table.hpp"

namespace pipetab::io {

/// Reads a table in either format. Sizes come from the cells (stages and microbatches: largest
/// index + 1); the placement is inferred from where each (microbatch, stage) runs, and
/// microbatches whose stages sit on different devices form separate pipelines (this is how a
/// two-pipeline schedule such as Chimera is written; PyTorch itself has one pipeline). A
/// compute-only file's columns are kept as explicit slots; a compute+comms file's communication
/// actions are kept in `comms` and checked against the data flow (check_comm_order). Throws
/// ParseError ("FILE:LINE:COLUMN: ...") on bad syntax, an inconsistent placement or
/// communication order, and a file in PyTorch's legacy grammar (B for the input-gradient half);
/// the compute table is not validated otherwise.
ScheduleTable read_pytorch_csv(std::string_view text, const std::string& file);

/// Writes one line per device. A table with a communication order is written with it
/// (compute+comms). Otherwise, without explicit slots, the ops are laid on the lock-step grid
/// (timing.hpp unit_slots) so that columns line up as in PyTorch's tables. CSV carries orders
/// and placement, not stage sizes. Precondition: validate(table).ok().
/// A compute-only grid larger than kMaxCsvGridCells cells (the sum over rows of the last slot
/// + 1) throws Error naming the size, before anything is written: the lock-step grid of a
/// table with a long fill-drain, such as 1F1B at M = 1, grows with S² while its ops grow with S.
std::string write_pytorch_csv(const ScheduleTable& table);
/// The same, streamed to `out` a line at a time (memory independent of the output's size).
void write_pytorch_csv(std::ostream& out, const ScheduleTable& table);

/// The most cells a compute-only CSV's grid may have: as many as the ops a table may hold.
inline constexpr std::int64_t kMaxCsvGridCells = kMaxOps;
/// The cells write_pytorch_csv would write (0 for a table with a communication order, which is
/// written as lists, proportional to its actions).
std::int64_t pytorch_csv_grid_cells(const ScheduleTable& table);

/// Writes the compute+comms format: the table's own communication order, or the one PyTorch's
/// lowering gives it (pytorch_send_recv). Precondition: validate(table).ok().
std::string write_pytorch_comms_csv(const ScheduleTable& table);

/// What a PyTorch job must build to run a table: the stage ids of each rank, and the placement
/// style of PyTorch's and torchtitan's `stage_ids_this_rank` ("loop": stage s on rank s mod pp;
/// "v": ranks 0..pp-1, then pp-1..0, and so on), or "custom" for any other single placement.
struct PytorchPlacement {
  std::string style;
  std::vector<std::vector<std::int32_t>> stages_of_rank;
};
/// Precondition: one pipeline.
PytorchPlacement pytorch_placement(const ScheduleTable& table);

/// Why PyTorch's runtime cannot run `table` as its CSV would say, one reason per entry: stages
/// on several ranks (two pipelines), and stage sizes a CSV does not carry. Empty: runnable.
std::vector<std::string> pytorch_export_problems(const ScheduleTable& table);

/// A note for the user of an export: the stage ids per rank, the style, the stage sizes where
/// they differ, and how PyTorch and torchtitan load the file.
std::string pytorch_export_note(const ScheduleTable& table, bool comms);

}  // namespace pipetab::io
