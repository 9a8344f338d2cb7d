#include "pipetab/io/data_table.hpp"

#include <algorithm>
#include <cstdint>
#include <new>
#include <unordered_map>

#include "json_locate.hpp"
#include "text.hpp"
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "pipetab/error.hpp"
#include "pipetab/io/table_file.hpp"

namespace pipetab::io {

int DataTable::column(std::string_view name) const {
  for (std::size_t i = 0; i < columns.size(); ++i) {
    if (columns[i] == name) return static_cast<int>(i);
  }
  return -1;
}

DataRow::DataRow(std::vector<std::pair<std::size_t, std::string>> cells) {
  std::sort(cells.begin(), cells.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });
  columns_.reserve(cells.size());
  values_.reserve(cells.size());
  for (auto& [column, value] : cells) {
    columns_.push_back(column);
    values_.push_back(std::move(value));
  }
  // A row with every column up to its last needs no index.
  if (!columns_.empty() && columns_.back() + 1 == columns_.size()) columns_.clear();
}

const std::string& DataRow::operator[](std::size_t column) const {
  static const std::string kEmpty;
  if (columns_.empty() && !values_.empty()) {
    return column < values_.size() ? values_[column] : kEmpty;
  }
  const auto it = std::lower_bound(columns_.begin(), columns_.end(), column);
  if (it == columns_.end() || *it != column) return kEmpty;
  return values_[static_cast<std::size_t>(it - columns_.begin())];
}

std::vector<std::string> DataRow::cells(std::size_t count) const {
  std::vector<std::string> out(count);
  for (std::size_t c = 0; c < count; ++c)
    out[c] = (*this)[c];
  return out;
}

namespace {

[[noreturn]] void fail_at(std::string_view text, const std::string& file, std::size_t offset,
                          const std::string& message) {
  const auto [line, column] = detail::line_column(text, offset);
  throw ParseError(file, line, column, message);
}

// Duplicate names would make `--x NAME` ambiguous, and empty ones cannot be asked for.
void check_header(const std::vector<std::string>& names, const std::vector<std::size_t>& starts,
                  std::string_view text, const std::string& file) {
  if (names.size() > kMaxDataColumns) {
    fail_at(text, file, starts[kMaxDataColumns],
            fmt::format("the header has {} columns; a results file has at most {}", names.size(),
                        kMaxDataColumns));
  }
  std::unordered_map<std::string, std::size_t> seen;
  for (std::size_t i = 0; i < names.size(); ++i) {
    if (names[i].empty()) fail_at(text, file, starts[i], "empty column name in the header");
    const auto [it, inserted] = seen.emplace(names[i], i);
    if (!inserted) {
      fail_at(text, file, starts[i],
              fmt::format("duplicate column {} (also column {})", detail::quoted(names[i]),
                          it->second + 1));
    }
  }
}

// RFC 4180, strictly: a stray quote or a character after a closing quote is an error rather
// than guessed at, since a silently misparsed results file would plot wrong numbers.
class CsvReader {
 public:
  CsvReader(std::string_view text, const std::string& file) : text_(text), file_(file) {}

  DataTable read() {
    DataTable table;
    table.file = file_;
    pos_ = detail::byte_order_mark(text_);
    bool header = true;
    while (skip_empty_lines()) {
      const int line = line_;
      read_record();
      if (header) {
        check_header(fields_, starts_, text_, file_);
        table.columns = fields_;
        header = false;
        continue;
      }
      if (fields_.size() != table.columns.size()) {
        const std::size_t at =
            fields_.size() > table.columns.size() ? starts_[table.columns.size()] : end_;
        fail(at, fmt::format("row has {} field{}, the header has {}", fields_.size(),
                             fields_.size() == 1 ? "" : "s", table.columns.size()));
      }
      table.rows.emplace_back(fields_);
      table.lines.push_back(line);
    }
    return table;
  }

 private:
  [[noreturn]] void fail(std::size_t offset, const std::string& message) const {
    fail_at(text_, file_, offset, message);
  }

  bool at_line_end() const {
    return pos_ < text_.size() &&
           (text_[pos_] == '\n' ||
            (text_[pos_] == '\r' && pos_ + 1 < text_.size() && text_[pos_ + 1] == '\n'));
  }

  void skip_line_end() {
    if (text_[pos_] == '\r') ++pos_;
    ++pos_;
    ++line_;
  }

  // Empty lines carry no record (a one-column file cannot tell an empty cell from a blank
  // line; trailing blank lines are common). False at the end of the text.
  bool skip_empty_lines() {
    while (at_line_end())
      skip_line_end();
    return pos_ < text_.size();
  }

  void read_record() {
    fields_.clear();
    starts_.clear();
    for (;;) {
      starts_.push_back(pos_);
      fields_.push_back(pos_ < text_.size() && text_[pos_] == '"' ? quoted_field() : plain_field());
      if (pos_ < text_.size() && text_[pos_] == ',') {
        ++pos_;
        continue;
      }
      end_ = pos_;
      if (pos_ < text_.size()) skip_line_end();
      return;
    }
  }

  std::string quoted_field() {
    const std::size_t open = pos_++;
    std::string value;
    for (;;) {
      if (pos_ >= text_.size()) {
        fail(open, "unterminated quoted field (the quote opened here is never closed)");
      }
      const char c = text_[pos_];
      if (c == '"') {
        if (pos_ + 1 < text_.size() && text_[pos_ + 1] == '"') {
          value += '"';
          pos_ += 2;
          continue;
        }
        ++pos_;
        break;
      }
      if (c == '\n') ++line_;
      value += c;
      ++pos_;
    }
    if (pos_ < text_.size() && text_[pos_] != ',' && !at_line_end()) {
      fail(pos_, fmt::format("unexpected {} after a quoted field (write \"\" for a quote inside "
                             "quotes)",
                             detail::quoted(text_.substr(pos_, 1))));
    }
    return value;
  }

  std::string plain_field() {
    const std::size_t start = pos_;
    while (pos_ < text_.size() && text_[pos_] != ',' && !at_line_end()) {
      if (text_[pos_] == '"') {
        fail(pos_,
             "quote inside an unquoted field (quote the whole field and double the quote: "
             "\"a\"\"b\")");
      }
      if (text_[pos_] == '\r') fail(pos_, "carriage return not followed by a line feed");
      ++pos_;
    }
    return std::string(text_.substr(start, pos_ - start));
  }

  std::string_view text_;
  const std::string& file_;
  std::size_t pos_ = 0;
  int line_ = 1;
  std::vector<std::string> fields_;
  std::vector<std::size_t> starts_;
  std::size_t end_ = 0;
};

using ordered_json = nlohmann::ordered_json;

std::string scalar_cell(const ordered_json& value) {
  switch (value.type()) {
    case ordered_json::value_t::string:
      return value.get<std::string>();
    case ordered_json::value_t::number_integer:
      return fmt::format("{}", value.get<std::int64_t>());
    case ordered_json::value_t::number_unsigned:
      return fmt::format("{}", value.get<std::uint64_t>());
    case ordered_json::value_t::number_float:
      return fmt::format("{}", value.get<double>());  // shortest round trip, as sweep's CSV
    case ordered_json::value_t::boolean:
      return value.get<bool>() ? "true" : "false";
    default:
      return "";
  }
}

class JsonLinesReader {
 public:
  JsonLinesReader(std::string_view text, const std::string& file) : text_(text), file_(file) {}

  DataTable read() {
    DataTable table;
    table.file = file_;
    std::unordered_map<std::string, std::size_t> index;
    std::size_t start = 0;
    for (int line = 1; start <= text_.size(); ++line) {
      auto end = text_.find('\n', start);
      if (end == std::string_view::npos) end = text_.size();
      std::string_view content = text_.substr(start, end - start);
      if (!content.empty() && content.back() == '\r') content.remove_suffix(1);
      const std::size_t offset = start;
      start = end + 1;
      if (content.find_first_not_of(" \t\r") == std::string_view::npos) continue;
      std::vector<std::pair<std::size_t, std::string>> row;
      for (auto& [key, value] : parse_object(content, offset)) {
        const auto [it, inserted] = index.emplace(key, table.columns.size());
        if (inserted) {
          if (table.columns.size() == kMaxDataColumns) {
            fail(key_offset(content, offset, key),
                 fmt::format("key '{}' would be column {}: a results file has at most {} "
                             "distinct keys (columns)",
                             key, kMaxDataColumns + 1, kMaxDataColumns));
          }
          table.columns.push_back(key);
        }
        row.emplace_back(it->second, std::move(value));
      }
      // Only the keys this line has: rows × columns would not be bounded by the file's size.
      table.rows.emplace_back(std::move(row));
      table.lines.push_back(line);
    }
    return table;
  }

 private:
  [[noreturn]] void fail(std::size_t offset, const std::string& message) const {
    fail_at(text_, file_, offset, message);
  }

  // The object on one line as (key, cell) pairs in the line's order.
  std::vector<std::pair<std::string, std::string>> parse_object(std::string_view line,
                                                                std::size_t offset) const {
    // nlohmann keeps the last of duplicate keys silently; a results row with two values for
    // one column is malformed.
    std::vector<std::string> keys;
    std::string duplicate;
    const auto on_event = [&](int depth, ordered_json::parse_event_t event, ordered_json& parsed) {
      if (event == ordered_json::parse_event_t::key && depth == 1 && duplicate.empty()) {
        const auto& key = parsed.get_ref<const std::string&>();
        for (const auto& k : keys) {
          if (k == key) duplicate = key;
        }
        keys.push_back(key);
      }
      return true;
    };
    if (const auto deep = detail::too_deep(line); deep != std::string_view::npos) {
      fail(offset + deep, fmt::format("JSON nested deeper than {} levels (a results row is one "
                                      "flat object)",
                                      detail::max_json_depth));
    }
    ordered_json object;
    try {
      object = ordered_json::parse(line.begin(), line.end(), on_event);
    } catch (const ordered_json::parse_error& e) {
      // "[json.exception.parse_error.101] parse error at line 1, column C: what": keep "what"
      // and locate it in the whole file from the byte index.
      std::string what = e.what();
      const auto colon = what.find(": ", what.find("column"));
      if (colon != std::string::npos) what = what.substr(colon + 2);
      fail(offset + (e.byte > 0 ? e.byte - 1 : 0), "invalid JSON: " + what);
    } catch (const ordered_json::exception& e) {
      // Number overflow ("1e400") comes without a position.
      std::string what = e.what();
      fail(offset + line.find_first_not_of(" \t"),
           "invalid JSON: " + what.substr(what.find(']') + 2));
    }
    const std::size_t first = offset + line.find_first_not_of(" \t");
    if (!object.is_object()) {
      fail(first, "line is not a JSON object (JSON Lines results hold one flat object per line)");
    }
    if (!duplicate.empty())
      fail(key_offset(line, offset, duplicate), fmt::format("duplicate key '{}'", duplicate));
    std::vector<std::pair<std::string, std::string>> out;
    for (const auto& [key, value] : object.items()) {
      if (value.is_object()) {
        fail(key_offset(line, offset, key),
             fmt::format("key '{}' holds an object; results rows are flat (write nested keys as "
                         "dotted names, \"{}.name\")",
                         key, key));
      }
      std::string cell;
      if (value.is_array()) {
        for (std::size_t i = 0; i < value.size(); ++i) {
          if (value[i].is_structured()) {
            fail(key_offset(line, offset, key),
                 fmt::format("key '{}' holds an array of arrays or objects; only arrays of "
                             "numbers, strings or booleans can be a cell",
                             key));
          }
          if (i) cell += ';';
          cell += scalar_cell(value[i]);
        }
      } else {
        cell = scalar_cell(value);
      }
      out.emplace_back(key, std::move(cell));
    }
    return out;
  }

  // Where `key` is written on the line, to point at it; the line's start if it is escaped.
  static std::size_t key_offset(std::string_view line, std::size_t offset, const std::string& key) {
    const auto at = line.find('"' + key + '"');
    return offset + (at == std::string_view::npos ? 0 : at);
  }

  std::string_view text_;
  const std::string& file_;
};

}  // namespace

DataTable parse_data_table(std::string_view text, const std::string& file) {
  const auto first = text.find_first_not_of(" \t\r\n");
  if (first == std::string_view::npos) return DataTable{file, {}, {}, {}};
  if (text[first] == '{') return JsonLinesReader(text, file).read();
  return CsvReader(text, file).read();
}

DataTable read_data_table(const std::string& path) {
  const std::string text = read_file(path);  // names the file itself if it does not fit
  try {
    return parse_data_table(text, path);
  } catch (const std::bad_alloc&) {
    // Never a partial table: a chart of part of the rows would look like the whole.
    throw Error(
        fmt::format("{}: out of memory while parsing its {} bytes: the table needs more "
                    "memory than this process may use",
                    path, text.size()));
  }
}

}  // namespace pipetab::io
