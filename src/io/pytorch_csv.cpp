#include "pipetab/io/pytorch_csv.hpp"

#include "placement_inference.hpp"
#include <fmt/format.h>

#include "pipetab/error.hpp"
#include "pipetab/io/action.hpp"
#include "pipetab/table/timing.hpp"

namespace pipetab::io {
namespace {

class CsvReader {
 public:
  CsvReader(std::string_view text, const std::string& file) : text_(text), file_(file) {}

  detail::Cells read() && {
    while (pos_ < text_.size())
      read_row();
    // Blank lines at the end (an editor's final newline) are not devices.
    cells_.rows -= trailing_blank_;
    if (cells_.rows == 0)
      throw ParseError(file_, 1, 1, "empty table: expected one line per device");
    return std::move(cells_);
  }

 private:
  [[noreturn]] void fail(std::size_t offset, const std::string& message) const {
    throw ParseError(file_, line_, static_cast<int>(offset - line_start_) + 1, message);
  }

  void read_row() {
    if (cells_.rows >= kMaxDevices)
      fail(pos_, fmt::format("more than {} lines (devices)", kMaxDevices));
    const auto device = cells_.rows++;
    const bool blank = pos_ == text_.size() || text_[pos_] == '\n' ||
                       (text_[pos_] == '\r' && pos_ + 1 < text_.size() && text_[pos_ + 1] == '\n');
    trailing_blank_ = blank ? trailing_blank_ + 1 : 0;
    std::int32_t slot = 0;
    while (true) {
      read_cell(device, slot);
      if (pos_ < text_.size() && text_[pos_] == ',') {
        ++pos_;
        if (++slot > kMaxOps) fail(pos_, fmt::format("more than {} cells in one line", kMaxOps));
        continue;
      }
      break;
    }
    // End of line: "\n", "\r\n" or the end of the text.
    if (pos_ < text_.size() && text_[pos_] == '\r') ++pos_;
    if (pos_ < text_.size()) {
      if (text_[pos_] != '\n') fail(pos_, "expected ',' or the end of the line");
      ++pos_;
    }
    ++line_;
    line_start_ = pos_;
  }

  void read_cell(std::int32_t device, std::int32_t slot) {
    const std::size_t start = pos_;
    std::string unquoted;
    std::string_view cell;
    std::size_t text_start = start;
    if (pos_ < text_.size() && text_[pos_] == '"') {
      // RFC 4180 quoting, as Python's csv module writes it: "" stands for one quote.
      ++pos_;
      text_start = pos_;
      while (true) {
        if (pos_ >= text_.size()) fail(start, "unterminated quoted cell");
        const char c = text_[pos_];
        if (c == '\n' || c == '\r') fail(pos_, "line break inside a quoted cell");
        if (c == '"') {
          if (pos_ + 1 < text_.size() && text_[pos_ + 1] == '"') {
            unquoted += '"';
            pos_ += 2;
            continue;
          }
          ++pos_;
          break;
        }
        unquoted += c;
        ++pos_;
      }
      if (pos_ < text_.size() && text_[pos_] != ',' && text_[pos_] != '\n' && text_[pos_] != '\r') {
        fail(pos_, "expected ',' after the closing quote");
      }
      cell = unquoted;
    } else {
      while (pos_ < text_.size() && text_[pos_] != ',' && text_[pos_] != '\n' &&
             text_[pos_] != '\r') {
        if (text_[pos_] == '"') fail(pos_, "a quote inside an unquoted cell");
        ++pos_;
      }
      cell = text_.substr(start, pos_ - start);
    }
    const auto parsed = parse_action(cell);
    if (!parsed.ok()) fail(text_start + parsed.error_offset, parsed.error);
    if (parsed.op) {
      if (cells_.ops.size() >= static_cast<std::size_t>(kMaxOps))
        fail(start, fmt::format("more than {} ops", kMaxOps));
      cells_.ops.push_back(*parsed.op);
      cells_.device.push_back(device);
      cells_.slot.push_back(slot);
      cells_.where.push_back({line_, static_cast<int>(start - line_start_) + 1});
    }
  }

  std::string_view text_;
  const std::string& file_;
  std::size_t pos_ = 0;
  std::size_t line_start_ = 0;
  int line_ = 1;
  std::int32_t trailing_blank_ = 0;
  detail::Cells cells_;
};

}  // namespace

ScheduleTable read_pytorch_csv(std::string_view text, const std::string& file) {
  auto cells = CsvReader(text, file).read();
  return detail::infer_table(std::move(cells), file);
}

std::string write_pytorch_csv(const ScheduleTable& table) {
  const auto slots = table.slots.empty() ? unit_slots(table) : table.slots;
  std::string out;
  out.reserve(table.ops.size() * 5);
  for (std::int32_t d = 0; d < table.devices; ++d) {
    const auto b = static_cast<std::size_t>(table.row_begin[static_cast<std::size_t>(d)]);
    const auto e = static_cast<std::size_t>(table.row_begin[static_cast<std::size_t>(d) + 1]);
    std::int32_t next = 0;  // next column to write
    for (auto i = b; i < e; ++i) {
      for (; next < slots[i]; ++next) {
        if (next > 0) out += ',';
      }
      if (next > 0) out += ',';
      out += to_string(table.ops[i]);
      ++next;
    }
    out += '\n';
  }
  return out;
}

}  // namespace pipetab::io
