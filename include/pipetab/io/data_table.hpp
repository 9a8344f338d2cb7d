// Tables of results (what `pipetab sweep` writes): CSV with a header row, or JSON Lines of flat
// objects, read into rows of text cells for plotting.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace pipetab::io {

/// A results table as text cells. Every row has columns.size() cells; an empty cell is a
/// missing value. Cells holding per-device arrays are joined by ';'.
struct DataTable {
  std::string file;                            ///< the path (or name) used in error messages
  std::vector<std::string> columns;            ///< column names, e.g. "simulation.runtime_s"
  std::vector<std::vector<std::string>> rows;  ///< cells, in column order
  std::vector<int> lines;                      ///< 1-based source line where each row starts

  /// The index of column `name`, or -1 if the table has no such column.
  int column(std::string_view name) const;
};

/// Parses results text. The format is detected from the first non-blank character: '{' means
/// JSON Lines (one flat object per non-empty line; columns are the union of the keys in
/// first-seen order; numbers are written in shortest round-trip form, booleans as true/false,
/// null as an empty cell, arrays joined by ';'), anything else CSV (RFC 4180: a header row,
/// quoted fields with "" escapes and embedded newlines, LF or CRLF line ends; empty lines are
/// skipped). An empty or header-only text gives zero rows. Throws ParseError
/// ("FILE:LINE:COLUMN: ...") on malformed content, such as an unterminated quoted field, a row
/// with the wrong number of fields, duplicate column names, a line that is not a JSON object or
/// a nested object.
DataTable parse_data_table(std::string_view text, const std::string& file);

/// Reads and parses a results file (parse_data_table). Throws Error if it cannot be read.
DataTable read_data_table(const std::string& path);

}  // namespace pipetab::io
