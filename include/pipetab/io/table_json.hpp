// The pipetab JSON table format: the whole ScheduleTable (placement, pipelines, stage sizes,
// per-device orders), so that every generator's table round-trips exactly. Layout:
//   {"format": "pipetab-table", "version": 1,
//    "source": {"schedule": "chimera", "params": {...}},          (optional, informational)
//    "devices": 4, "stages": 4, "microbatches": 8,
//    "placement": [[0,1,2,3], [3,2,1,0]],                          (per pipeline: stage → device)
//    "microbatch_pipeline": [0,0,1,1,0,0,1,1],                     (when more than one pipeline)
//    "stage_layers": [[1,1,2,2], [1,1,2,2]],                       (when stages differ in size)
//    "rows": [["0F0","0F1",...], ...]}                             (action tokens, "" = idle slot)
#pragma once

#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "pipetab/table/schedule_table.hpp"

namespace pipetab::io {

/// Where a table came from, recorded in its file for the reader's information.
struct TableSource {
  std::string schedule;   ///< e.g. "chimera"; empty when unknown
  nlohmann::json params;  ///< e.g. {"devices": 4, ...}; null when unknown
};

/// Reads a table. Unknown or duplicate keys, wrong types and out-of-range values are errors
/// naming the line, column and path ("FILE:3:14: rows[2][5]: ..."). The table is not
/// validated beyond its shape. `source`, if given, receives the file's "source" object.
ScheduleTable read_table_json(std::string_view text, const std::string& file,
                              TableSource* source = nullptr);

/// Writes a table, one row per line. Explicit slots are kept as "" idle cells.
std::string write_table_json(const ScheduleTable& table, const TableSource& source = {});

}  // namespace pipetab::io
