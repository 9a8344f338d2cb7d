// Tables as commands (the CLI, the Python package) read and write them: a file's table checked
// and recognised as the generated schedule it came from, and a table written in a chosen format
// with the problems that would make it lossy or unrunnable named. One implementation for every
// front end, so that their outputs cannot drift apart.
#pragma once

#include <iosfwd>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "pipetab/io/table_file.hpp"
#include "pipetab/schedules/registry.hpp"

namespace pipetab::io {

/// A generated table's parameters as a JSON table's "source.params" holds them.
nlohmann::json params_json(const ResolvedParams& params);

/// The parameters that regenerate exactly `file`'s table, when its "source" names a schedule
/// and parameters that do (its formula level then applies); nullopt otherwise. Regenerates only
/// what could be this table: the same S and M, and a size bounded by the file's.
std::optional<ResolvedParams> recognized_params(const TableFile& file);

/// Throws Error naming the file, the cell and the first issue when `file`'s table is invalid.
void require_valid(const TableFile& file);

/// `validate`'s report on `file` as JSON: the file (named `path`), its format and size, whether it
/// is valid, and each reported issue with its located cell.
nlohmann::json validation_json(const std::string& path, const TableFile& file,
                               const ValidationReport& report);

/// The formats a table can be written in.
const std::vector<std::string>& export_formats();

/// A table written for export.
struct TableExport {
  std::string text;  ///< empty when it was written to a stream
  /// Problems written anyway because `force` was set (lossy or not runnable by PyTorch).
  std::vector<std::string> forced;
  bool compute_only = false;  ///< a comms table written as compute-only ("pytorch")
  std::string pytorch_note;   ///< for PyTorch formats: the stage ids, style and _load_csv call
};

/// Writes `table` as `format` (export_formats()). Throws Error for an unknown format, or,
/// unless `force`, when the table cannot be written without loss or run by PyTorch (two
/// pipelines, unequal stage sizes, a communication order JSON cannot hold).
TableExport export_table(const ScheduleTable& table, std::string_view format,
                         const TableSource& source, bool force);

/// The same, written to `text` as it is made (nothing is written when it is refused).
TableExport export_table(const ScheduleTable& table, std::string_view format,
                         const TableSource& source, bool force, std::ostream& text);

}  // namespace pipetab::io
