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

/// Where a file a command writes goes, for every output option (-o, --trace, --svg, -t, ...).
/// A symbolic link is followed: its target is written and the link kept. A regular file (or a
/// new one) is written through a temporary file beside it, renamed over it by commit() (keeping
/// its permissions), so that readers never see a partial file and a failure leaves the old one.
/// Anything else that exists (a character device such as /dev/null or /dev/full, a FIFO, a
/// terminal) is written in place: renaming over it would replace the device node or the pipe.
/// The destructor removes a temporary that was not committed.
class OutputFile {
 public:
  /// Throws Error naming `path` if it is a directory.
  explicit OutputFile(std::string path);
  ~OutputFile();
  OutputFile(const OutputFile&) = delete;
  OutputFile& operator=(const OutputFile&) = delete;

  /// The path to open for writing (truncating): the temporary, or the target itself in place.
  const std::string& write_path() const { return write_path_; }
  /// Whether the target is written in place (it exists and is not a regular file).
  bool in_place() const { return in_place_; }
  /// Renames the temporary over the target; nothing in place. Throws Error naming the path.
  void commit();

 private:
  std::string path_, target_, write_path_;
  bool in_place_ = false, done_ = false;
};

/// Whether `path` (a link followed) exists and is not a regular file: a device, FIFO, socket.
bool is_special_file(const std::string& path);

/// Writes a whole file atomically: into a temporary file in the same folder, renamed over `path`
/// at the end (keeping the old file's permissions; a link is followed), so that readers never
/// see a partial file and a failure leaves the old one. Devices, FIFOs and terminals are written
/// in place. Throws Error naming the file and the system's reason on failure.
void write_file(const std::string& path, std::string_view text);

/// The same, for text `write` streams out (an output far larger than what it is made from, such
/// as a padded CSV grid, is never held whole). If `write` throws, the target is left as it was.
void write_file(const std::string& path, const std::function<void(std::ostream&)>& write);

}  // namespace pipetab::io
