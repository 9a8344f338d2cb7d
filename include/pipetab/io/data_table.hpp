// Tables of results (what `pipetab sweep` writes): CSV with a header row, or JSON Lines of flat
// objects, read into rows of text cells for plotting.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace pipetab::io {

/// One row's cells, by column index; a column the row has no cell in reads as empty (a missing
/// value). A JSON Lines row keeps only the keys it has, so that a file whose rows have many
/// distinct keys costs memory in proportion to its size, not rows × columns (issue 14).
class DataRow {
 public:
  DataRow() = default;
  /// Every column, in order.
  explicit DataRow(std::vector<std::string> cells) : values_(std::move(cells)) {}
  /// Only some columns: (column, cell) pairs with distinct columns, in any order.
  explicit DataRow(std::vector<std::pair<std::size_t, std::string>> cells);

  /// The cell in `column`; empty if the row has none.
  const std::string& operator[](std::size_t column) const;
  /// The cells of columns 0..count-1, empty where the row has none.
  std::vector<std::string> cells(std::size_t count) const;

 private:
  std::vector<std::size_t> columns_;  // ascending; empty: values_ holds columns 0, 1, ...
  std::vector<std::string> values_;
};

/// A results table as text cells; an empty cell is a missing value. Cells holding per-device
/// arrays are joined by ';'.
struct DataTable {
  std::string file;                  ///< the path (or name) used in error messages
  std::vector<std::string> columns;  ///< column names, e.g. "simulation.runtime_s"
  std::vector<DataRow> rows;         ///< cells by column index
  std::vector<int> lines;            ///< 1-based source line where each row starts

  /// The index of column `name`, or -1 if the table has no such column.
  int column(std::string_view name) const;
};

/// At most this many distinct columns: pipetab's own results have about a hundred, and a file
/// with a new key on every line is not a results table (and would make every chart's column
/// list unreadable).
inline constexpr std::size_t kMaxDataColumns = 10000;

/// Parses results text. The format is detected from the first non-blank character: '{' means
/// JSON Lines (one flat object per non-empty line; columns are the union of the keys in
/// first-seen order; numbers are written in shortest round-trip form, booleans as true/false,
/// null as an empty cell, arrays joined by ';'), anything else CSV (RFC 4180: a header row,
/// quoted fields with "" escapes and embedded newlines, LF or CRLF line ends; empty lines are
/// skipped). An empty or header-only text gives zero rows. Throws ParseError
/// ("FILE:LINE:COLUMN: ...") on malformed content, such as an unterminated quoted field, a row
/// with the wrong number of fields, duplicate column names, a line that is not a JSON object or
/// a nested object, or more than kMaxDataColumns distinct column names.
DataTable parse_data_table(std::string_view text, const std::string& file);

/// Reads and parses a results file (parse_data_table). Throws Error if it cannot be read,
/// including when memory runs out while reading or parsing it: a partial table is never
/// returned.
DataTable read_data_table(const std::string& path);

}  // namespace pipetab::io
