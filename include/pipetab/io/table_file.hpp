// Table files on disk: PyTorch CSV or pipetab JSON, chosen by extension or content.
#pragma once

#include <functional>
#include <iosfwd>
#include <string>

#include "pipetab/io/table_json.hpp"
#include "pipetab/table/schedule_table.hpp"
#include "pipetab/table/validate.hpp"

namespace pipetab::io {

enum class TableFormat { Csv, Json };

/// "csv" or "json".
const char* to_string(TableFormat format);

/// A table read from a file, with what the file said about it.
struct TableFile {
  std::string path;
  std::string text;  ///< the file's contents, to point error messages at cells
  ScheduleTable table;
  TableFormat format = TableFormat::Csv;
  TableSource source;  ///< from a JSON file's "source", else empty
};

/// The format of `path`: by extension (.csv, .json), else by content (JSON starts with '{').
TableFormat detect_format(const std::string& path, std::string_view text);

/// Reads and parses a table file (not validated). Throws Error if the file cannot be read and
/// ParseError on malformed content.
TableFile load_table(const std::string& path);

/// "FILE:LINE:COLUMN" of the cell a validation issue is about; "FILE" when it is about no op.
std::string issue_location(const TableFile& file, const ValidationIssue& issue);

/// Serializes a table (a valid one) in `format`.
std::string format_table(const ScheduleTable& table, TableFormat format,
                         const TableSource& source = {});

/// Reads a whole file. Throws Error naming the file and the system's reason on failure.
std::string read_file(const std::string& path);

/// Writes a whole file atomically: into a temporary file in the same folder, renamed over `path`
/// at the end (keeping the old file's permissions; a link is followed), so that readers never
/// see a partial file and a failure leaves the old one. Devices, FIFOs and terminals are written
/// in place. Throws Error naming the file and the system's reason on failure.
void write_file(const std::string& path, std::string_view text);

/// The same, for text `write` streams out (an output far larger than what it is made from, such
/// as a padded CSV grid, is never held whole). If `write` throws, the target is left as it was.
void write_file(const std::string& path, const std::function<void(std::ostream&)>& write);

}  // namespace pipetab::io
