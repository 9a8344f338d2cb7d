#include "pipetab/io/table_file.hpp"

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <new>
#include <stdexcept>

#include "json_locate.hpp"
#include "text.hpp"
#include <fmt/format.h>
#include <unistd.h>

#include "pipetab/error.hpp"
#include "pipetab/io/pytorch_csv.hpp"

namespace pipetab::io {

const char* to_string(TableFormat format) {
  return format == TableFormat::Csv ? "csv" : "json";
}

namespace {
bool ends_with(const std::string& s, std::string_view suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}
}  // namespace

TableFormat detect_format(const std::string& path, std::string_view text) {
  if (ends_with(path, ".json") || ends_with(path, ".JSON")) return TableFormat::Json;
  if (ends_with(path, ".csv") || ends_with(path, ".CSV")) return TableFormat::Csv;
  const auto first = text.find_first_not_of(" \t\r\n");
  return first != std::string_view::npos && text[first] == '{' ? TableFormat::Json
                                                               : TableFormat::Csv;
}

std::string read_file(const std::string& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec))
    throw Error(fmt::format("{}: cannot read: it is a directory", path));
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(fmt::format("{}: cannot read: {}", path, std::strerror(errno)));
  // Read into the string directly, in chunks. An ostringstream (`buffer << in.rdbuf()`) swallows
  // a failed allocation (libstdc++'s stringbuf::overflow returns EOF), so a file larger than the
  // memory left was cut short without a word and parsed as if whole. Here a failed allocation
  // names the file and its size instead.
  constexpr std::size_t kChunk = std::size_t{1} << 20;
  const auto size = std::filesystem::file_size(path, ec);  // unknown (a pipe): grown as read
  std::string text;
  try {
    if (!ec) text.reserve(static_cast<std::size_t>(size) + kChunk);  // the last read's room
    while (in) {
      const std::size_t have = text.size();
      text.resize(have + kChunk);
      in.read(text.data() + have, static_cast<std::streamsize>(kChunk));
      text.resize(have + static_cast<std::size_t>(in.gcount()));
    }
  } catch (const std::bad_alloc&) {
    throw Error(fmt::format("{}: too large to read: out of memory after {} bytes{}", path,
                            text.size(), ec ? "" : fmt::format(" of its {}", size)));
  } catch (const std::length_error&) {
    throw Error(fmt::format("{}: too large to read ({} bytes)", path, ec ? text.size() : size));
  }
  if (in.bad()) throw Error(fmt::format("{}: read error: {}", path, std::strerror(errno)));
  return text;
}

void write_file(const std::string& path, std::string_view text) {
  write_file(path, [text](std::ostream& out) {
    out.write(text.data(), static_cast<std::streamsize>(text.size()));
  });
}

namespace {

// The file a link (a chain of links) names, even one that does not exist yet; `path` if it is
// no link.
std::filesystem::path link_target(const std::string& path) {
  namespace fs = std::filesystem;
  fs::path p = path;
  std::error_code ec;
  for (int hops = 0; hops < 40 && fs::is_symlink(p, ec); ++hops) {
    const fs::path next = fs::read_symlink(p, ec);
    if (ec) break;
    p = next.is_absolute() ? next : p.parent_path() / next;
  }
  return p;
}

}  // namespace

bool is_special_file(const std::string& path) {
  std::error_code ec;
  const auto status = std::filesystem::status(path, ec);
  return !ec && std::filesystem::exists(status) && !std::filesystem::is_regular_file(status) &&
         !std::filesystem::is_directory(status);
}

OutputFile::OutputFile(std::string path) : path_(std::move(path)) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (fs::is_directory(path_, ec))
    throw Error(fmt::format("{}: cannot write: it is a directory", path_));
  const fs::path target = link_target(path_);
  target_ = target.string();
  in_place_ = is_special_file(target_);
  write_path_ = in_place_ ? target_
                          : (target.parent_path() /
                             fmt::format(".{}.{}.tmp", target.filename().string(), ::getpid()))
                                .string();
}

OutputFile::~OutputFile() {
  if (!done_ && !in_place_) {
    std::error_code ec;
    std::filesystem::remove(write_path_, ec);
  }
}

void OutputFile::commit() {
  namespace fs = std::filesystem;
  done_ = true;
  if (in_place_) return;
  std::error_code ec;
  // Keep the replaced file's permissions.
  if (fs::exists(target_, ec))
    fs::permissions(write_path_, fs::status(target_, ec).permissions(), ec);
  fs::rename(write_path_, target_, ec);
  if (ec) {
    std::error_code ignored;
    fs::remove(write_path_, ignored);
    throw Error(fmt::format("{}: cannot write: {}", path_, ec.message()));
  }
}

void write_file(const std::string& path, const std::function<void(std::ostream&)>& write) {
  OutputFile output(path);
  {
    std::ofstream out(output.write_path(), std::ios::binary | std::ios::trunc);
    if (!out) throw Error(fmt::format("{}: cannot write: {}", path, std::strerror(errno)));
    write(out);  // if it throws, the temporary goes with `output`
    errno = 0;
    out.close();
    if (!out) {
      const int error = errno;
      throw Error(fmt::format("{}: write error: {}", path,
                              error != 0 ? std::strerror(error) : "the data did not reach it"));
    }
  }
  output.commit();
}

TableFile load_table(const std::string& path) {
  TableFile file;
  file.path = path;
  file.text = read_file(path);
  file.format = detect_format(path, file.text);
  file.table = file.format == TableFormat::Json ? read_table_json(file.text, path, &file.source)
                                                : read_pytorch_csv(file.text, path);
  return file;
}

namespace {

// Byte offset of cell `cell` of line `line` (0-based) of CSV text; npos if there is none.
std::size_t csv_cell_offset(std::string_view text, std::int64_t line, std::int64_t cell) {
  std::size_t pos = 0;
  for (std::int64_t l = 0; l < line; ++l) {
    pos = text.find('\n', pos);
    if (pos == std::string_view::npos) return pos;
    ++pos;
  }
  bool quoted = false;
  for (std::int64_t c = 0; c < cell && pos < text.size(); ++pos) {
    const char ch = text[pos];
    if (ch == '"') quoted = !quoted;
    if (ch == '\n' && !quoted) return std::string_view::npos;
    if (ch == ',' && !quoted) ++c;
  }
  return pos;
}

}  // namespace

std::string issue_location(const TableFile& file, const ValidationIssue& issue) {
  if (issue.device < 0 || issue.position < 0) return file.path;
  const auto& t = file.table;
  const auto index = static_cast<std::size_t>(t.row_begin[static_cast<std::size_t>(issue.device)] +
                                              issue.position);
  const std::int64_t cell = t.slots.empty() ? issue.position : t.slots[index];
  const std::size_t offset =
      file.format == TableFormat::Csv
          ? csv_cell_offset(file.text, issue.device, cell)
          : detail::locate(file.text, {{"rows"}, {{}, issue.device}, {{}, cell}});
  if (offset == std::string_view::npos) return file.path;
  const auto [line, column] = detail::line_column(file.text, offset);
  return fmt::format("{}:{}:{}", file.path, line, column);
}

std::string format_table(const ScheduleTable& table, TableFormat format,
                         const TableSource& source) {
  return format == TableFormat::Json ? write_table_json(table, source) : write_pytorch_csv(table);
}

}  // namespace pipetab::io
