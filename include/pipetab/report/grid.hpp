// The schedule drawn as the paper draws it: one row per device, one column per time unit, a
// cell per op labelled by kind and microbatch (docs/design.md §1 `pipetab show`).
#pragma once

#include <string>

#include "pipetab/table/schedule_table.hpp"
#include "pipetab/table/timing.hpp"

namespace pipetab {

struct GridOptions {
  bool color = false;                ///< ANSI colours by kind (background) and chunk (shade)
  std::int64_t max_columns = 50000;  ///< refuse wider grids (use CSV/JSON export instead)
  /// Fold the grid into blocks of whole time columns, each line at most this many characters
  /// (not counting colour codes), one block under the other with its own time axis; an op cut by
  /// a fold continues in the next block with '-' and no label. 0: one block, however wide.
  std::int64_t fold_width = 0;
};

/// Renders the grid under `timing`. The column unit is the largest time that divides every op
/// duration, so an op of cost 2 spans two columns. Labels are kind + microbatch (F3, B0); on a
/// device holding several stages a letter names the stage among the device's stages in model
/// order (a, b, ...; pipeline 0 first), and an overlapped pair reads F3a&B1b. Without colour a
/// longer op continues with '-', an idle column shows '.'. Throws Error if the grid would be
/// wider than max_columns or the durations share no common unit.
std::string render_grid(const ScheduleTable& table, const Timing& timing,
                        const GridOptions& options = {});

struct Evaluation;

/// The lines `pipetab show` prints above the grid: the schedule's summary, its makespan, bubble
/// ratio and activation peak.
std::string grid_header(const Evaluation& evaluation);

/// The line below the grid naming what its labels mean: the kinds the table holds, microbatch
/// numbers, stage letters where a device holds several stages, '.' for idle.
std::string grid_legend(const ScheduleTable& table);

}  // namespace pipetab
