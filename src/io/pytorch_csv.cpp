#include "pipetab/io/pytorch_csv.hpp"

#include <algorithm>
#include <functional>
#include <ostream>

#include "placement_inference.hpp"
#include "text.hpp"
#include <fmt/format.h>
#include <fmt/ranges.h>

#include "pipetab/error.hpp"
#include "pipetab/io/action.hpp"
#include "pipetab/table/timing.hpp"

namespace pipetab::io {
namespace {

class PytorchCsvReader {
 public:
  PytorchCsvReader(std::string_view text, const std::string& file) : text_(text), file_(file) {}

  detail::Cells read() && {
    pos_ = line_start_ = detail::byte_order_mark(text_);
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
    ops_in_row_ = 0;
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
    if (pos_ < text_.size() && text_[pos_] == '\r') {
      if (pos_ + 1 < text_.size() && text_[pos_ + 1] != '\n') {
        fail(pos_,
             "a carriage return (\\r) without a line feed: the file has classic Mac line "
             "endings; save it with \\n or \\r\\n line endings");
      }
      ++pos_;
    }
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
    const detail::CellLocation here{line_, static_cast<int>(start - line_start_) + 1};
    if (parsed.idle()) {
      // An empty cell between others (not a row's trailing one) is an idle slot.
      if (!cells_.first_idle && pos_ < text_.size() && text_[pos_] == ',') cells_.first_idle = here;
      return;
    }
    if (parsed.comm) {
      if (cells_.comms.size() >= static_cast<std::size_t>(kMaxOps))
        fail(start, fmt::format("more than {} communication actions", kMaxOps));
      auto action = *parsed.comm;
      action.before = ops_in_row_;
      cells_.comms.push_back(action);
      cells_.comm_device.push_back(device);
      cells_.comm_where.push_back(here);
      return;
    }
    if (parsed.op) {
      ++ops_in_row_;
      if (cells_.ops.size() >= static_cast<std::size_t>(kMaxOps))
        fail(start, fmt::format("more than {} ops", kMaxOps));
      cells_.ops.push_back(*parsed.op);
      cells_.device.push_back(device);
      cells_.slot.push_back(slot);
      cells_.where.push_back(here);
    }
  }

  std::string_view text_;
  const std::string& file_;
  std::size_t pos_ = 0;
  std::size_t line_start_ = 0;
  int line_ = 1;
  std::int32_t trailing_blank_ = 0;
  std::int32_t ops_in_row_ = 0;
  detail::Cells cells_;
};

// PyTorch's older grammar wrote the input-gradient half as B (and the full backward as BW): a
// file with B and W but no I, where a W follows the B of its stage and microbatch, is in it.
void reject_legacy_grammar(const ScheduleTable& t, const std::vector<detail::CellLocation>& where,
                           const std::string& file) {
  bool has_i = false, has_b = false, has_w = false;
  for (const Op& op : t.ops) {
    for (const Pass& p : op.passes()) {
      has_i = has_i || p.kind == PassKind::I;
      has_b = has_b || p.kind == PassKind::B;
      has_w = has_w || p.kind == PassKind::W;
    }
  }
  if (has_i || !has_b || !has_w) return;
  const auto N = static_cast<std::size_t>(t.stages);
  std::vector<std::int64_t> b_at(static_cast<std::size_t>(t.microbatches) * N, -1);
  for (std::size_t i = 0; i < t.ops.size(); ++i) {
    const Op& op = t.ops[i];
    if (op.is_pair()) continue;
    const Pass& p = op.first();
    const auto key = static_cast<std::size_t>(p.microbatch) * N + p.stage;
    if (p.kind == PassKind::B && b_at[key] < 0) b_at[key] = static_cast<std::int64_t>(i);
    if (p.kind != PassKind::W || b_at[key] < 0) continue;
    const auto j = static_cast<std::size_t>(b_at[key]);
    throw ParseError(
        file, where[j].line, where[j].column,
        fmt::format("this file is in PyTorch's legacy grammar, where B was the input-gradient "
                    "half of a split backward and BW the full backward: {} is followed by {} "
                    "(line {}, column {}) and the file has no I. Today's PyTorch and pipetab "
                    "write that half I and a full backward B; rename with "
                    "sed -E 's/([0-9])B([0-9])/\\1I\\2/g; s/BW/B/g'",
                    to_string(t.ops[j]), to_string(op), where[i].line, where[i].column));
  }
}

}  // namespace

ScheduleTable read_pytorch_csv(std::string_view text, const std::string& file) {
  auto cells = PytorchCsvReader(text, file).read();
  const auto where = cells.where;
  const auto comm_where = cells.comm_where;
  const auto first_idle = cells.first_idle;
  const bool with_comms = !cells.comms.empty();
  auto table = detail::infer_table(std::move(cells), file);
  reject_legacy_grammar(table, where, file);
  if (!with_comms) return table;
  if (first_idle) {
    throw ParseError(file, first_idle->line, first_idle->column,
                     "an empty cell in a compute+comms table: its rows are the runtime's action "
                     "lists, which have no idle slots (PyTorch's compute_comms format refuses "
                     "them too)");
  }
  if (const auto issue = check_comm_order(table)) {
    if (issue->action >= 0) {
      const auto& at = comm_where[static_cast<std::size_t>(issue->action)];
      throw ParseError(file, at.line, at.column, issue->message);
    }
    throw ParseError(file, issue->device + 1, 1, issue->message);
  }
  // The same point-to-point check as the simulation's (sim/lower.cpp), with every message
  // within NCCL's buffer: what fails here fails whatever the sizes.
  if (const auto issue = check_p2p(table, table.comms, {}, true)) {
    const auto& at = issue->action >= 0 ? comm_where[static_cast<std::size_t>(issue->action)]
                                        : detail::CellLocation{issue->device + 1, 1};
    throw ParseError(file, at.line, at.column, issue->message);
  }
  return table;
}

namespace {

// The widest row of the grid: its last slot + 1.
std::int64_t grid_width(const ScheduleTable& table, const std::vector<std::int32_t>& slots) {
  std::int64_t width = 0;
  for (std::int32_t d = 0; d < table.devices; ++d) {
    const auto e = table.row_begin[static_cast<std::size_t>(d) + 1];
    if (e > table.row_begin[static_cast<std::size_t>(d)])
      width = std::max<std::int64_t>(width, slots[static_cast<std::size_t>(e) - 1] + 1);
  }
  return width;
}

// Cells of the grid: per row, its last slot + 1 (idle cells after a row's last op are not
// written).
std::int64_t grid_cells(const ScheduleTable& table, const std::vector<std::int32_t>& slots) {
  std::int64_t cells = 0;
  for (std::int32_t d = 0; d < table.devices; ++d) {
    const auto e = table.row_begin[static_cast<std::size_t>(d) + 1];
    if (e > table.row_begin[static_cast<std::size_t>(d)])
      cells += slots[static_cast<std::size_t>(e) - 1] + 1;
  }
  return cells;
}

// Each device's whole list, compute ops and communication actions in order, one line each.
std::string write_lists(const ScheduleTable& table) {
  std::string out;
  out.reserve((table.ops.size() + table.comms.actions.size()) * 8);
  for (std::int32_t d = 0; d < table.devices; ++d) {
    bool first = true;
    for (const auto& item : merged_row(table, d)) {
      if (!first) out += ',';
      first = false;
      const auto i = static_cast<std::size_t>(item.index);
      out += item.comm ? to_string(table.comms.actions[i]) : to_string(table.ops[i]);
    }
    out += '\n';
  }
  return out;
}

}  // namespace

namespace {

// The compute-only grid: each device's ops at their slots (the file's, else the lock-step grid of
// unit_slots), an empty cell for every idle slot before an op, handed to `put` piece by piece.
// Its size is checked first (pytorch_csv_grid_cells), so nothing is written that is refused.
template <class Put>
void write_grid(const ScheduleTable& table, Put&& put) {
  const auto slots = table.slots.empty() ? unit_slots(table) : table.slots;
  const auto cells = grid_cells(table, slots);
  if (cells > kMaxCsvGridCells) {
    throw Error(fmt::format(
        "cannot write a compute-only CSV of this table: that format lays each device's ops on "
        "the lock-step grid, one cell per time slot, and this table's grid has {} cells ({} "
        "devices, up to {} slots each; at least {} bytes), more than the limit of {} cells; "
        "--format pytorch-comms (each device's action list, no idle cells) or json writes its "
        "ops alone",
        cells, table.devices, grid_width(table, slots), cells, kMaxCsvGridCells));
  }
  std::string line;
  for (std::int32_t d = 0; d < table.devices; ++d) {
    const auto b = static_cast<std::size_t>(table.row_begin[static_cast<std::size_t>(d)]);
    const auto e = static_cast<std::size_t>(table.row_begin[static_cast<std::size_t>(d) + 1]);
    std::int32_t next = 0;  // next column to write
    line.clear();
    for (auto i = b; i < e; ++i) {
      // A comma ends every cell before this op's: columns max(next, 1) .. slot each start
      // with one (column 0 has none before it).
      const std::int32_t from = std::max(next, 1);
      if (slots[i] >= from) line.append(static_cast<std::size_t>(slots[i] - from + 1), ',');
      line += to_string(table.ops[i]);
      next = slots[i] + 1;
      if (line.size() >= (std::size_t{1} << 16)) {
        put(std::string_view(line));
        line.clear();
      }
    }
    line += '\n';
    put(std::string_view(line));
  }
}

}  // namespace

std::int64_t pytorch_csv_grid_cells(const ScheduleTable& table) {
  if (!table.comms.empty()) return 0;
  return grid_cells(table, table.slots.empty() ? unit_slots(table) : table.slots);
}

std::string write_pytorch_csv(const ScheduleTable& table) {
  if (!table.comms.empty()) return write_lists(table);
  std::string out;
  out.reserve(table.ops.size() * 5);
  write_grid(table, [&out](std::string_view piece) { out += piece; });
  return out;
}

void write_pytorch_csv(std::ostream& out, const ScheduleTable& table) {
  if (!table.comms.empty()) {
    out << write_lists(table);
    return;
  }
  write_grid(table, [&out](std::string_view piece) {
    out.write(piece.data(), static_cast<std::streamsize>(piece.size()));
  });
}

std::string write_pytorch_comms_csv(const ScheduleTable& table) {
  if (!table.comms.empty()) return write_lists(table);
  ScheduleTable lowered = table;
  lowered.comms = pytorch_send_recv(table);
  return write_lists(lowered);
}

PytorchPlacement pytorch_placement(const ScheduleTable& table) {
  PytorchPlacement out;
  const auto pp = table.devices;
  out.stages_of_rank.resize(static_cast<std::size_t>(pp));
  bool loop = true, v = true;
  for (std::int32_t s = 0; s < table.stages; ++s) {
    const auto rank = table.placement.device_of(0, s);
    out.stages_of_rank[static_cast<std::size_t>(rank)].push_back(s);
    loop = loop && rank == s % pp;
    // V style: ranks 0..pp-1, then pp-1..0, and so on (PyTorch's generate_stage_to_rank_mapping).
    const auto turn = s / pp, offset = s % pp;
    v = v && rank == (turn % 2 == 0 ? offset : pp - 1 - offset);
  }
  out.style = loop ? "loop" : v ? "v" : "custom";
  return out;
}

std::vector<std::string> pytorch_export_problems(const ScheduleTable& table) {
  std::vector<std::string> problems;
  if (table.pipelines() > 1) {
    for (std::int32_t s = 0; s < table.stages; ++s) {
      for (std::int32_t p = 1; p < table.pipelines(); ++p) {
        if (table.placement.device_of(p, s) == table.placement.device_of(0, s)) continue;
        problems.push_back(fmt::format(
            "stage {} runs on device {} and on device {}: the table has {} pipelines (model "
            "replicas, as in Chimera or DualPipe), but PyTorch places each stage on one rank",
            s, table.placement.device_of(0, s), table.placement.device_of(p, s),
            table.pipelines()));
        return problems;
      }
    }
  }
  const auto units = table.stage_units();
  if (std::adjacent_find(units.begin(), units.end(), std::not_equal_to<>()) != units.end()) {
    problems.push_back(
        "its stages differ in size and a PyTorch CSV does not say so: a job that builds equal "
        "stages runs another schedule");
  }
  return problems;
}

std::string pytorch_export_note(const ScheduleTable& table, bool comms) {
  std::string out = fmt::format("PyTorch {} CSV: {} ranks, {} stages, {} microbatches",
                                comms ? "compute+comms" : "compute-only", table.devices,
                                table.stages, table.microbatches);
  if (table.pipelines() > 1) return out + "\n";
  const auto placement = pytorch_placement(table);
  out += fmt::format("; placement style {}", placement.style);
  if (placement.style == "loop") out += fmt::format(" (stage s on rank s mod {})", table.devices);
  if (placement.style == "v") out += " (ranks 0..pp-1, then pp-1..0)";
  out += "\n";
  // One line per rank, but a note of thousands of lines is noise: the first and the last
  // kNoteRanks / 2 ranks, the style above states the rule for the rest.
  constexpr std::size_t kNoteRanks = 16;
  const auto ranks = placement.stages_of_rank.size();
  for (std::size_t r = 0; r < ranks; ++r) {
    if (ranks > kNoteRanks && r == kNoteRanks / 2) {
      out +=
          fmt::format("  ... ranks {} to {} {}\n", r, ranks - kNoteRanks / 2 - 1,
                      placement.style == "custom" ? "(their stages: the CSV's ids)" : "likewise");
      r = ranks - kNoteRanks / 2;
    }
    out += fmt::format("  rank {} builds stages {}\n", r,
                       fmt::join(placement.stages_of_rank[r], ", "));
  }
  const auto units = table.stage_units();
  if (std::adjacent_find(units.begin(), units.end(), std::not_equal_to<>()) != units.end()) {
    out += fmt::format("  stage sizes (relative, stage 0..{}): {}\n", table.stages - 1,
                       fmt::join(units.begin(), units.begin() + table.stages, " "));
  }
  out += fmt::format(
      "  load: _PipelineScheduleRuntime(stages, n_microbatches={})._load_csv(FILE, format=\"{}\")"
      "\n",
      table.microbatches, comms ? "compute_comms" : "compute_only");
  if (placement.style == "custom") {
    out +=
        "  torchtitan builds only loop or v placements (stage_ids_this_rank); build these "
        "stages by hand\n";
  } else {
    out += fmt::format(
        "  torchtitan: --parallelism.pipeline_parallel_schedule_csv FILE "
        "--parallelism.pipeline_parallel_degree {} --parallelism.pipeline_parallel_schedule {} "
        "(its {} stage ids) and {} stages in all\n",
        table.devices, placement.style == "v" ? "ZBVZeroBubble" : "Interleaved1F1B",
        placement.style, table.stages);
  }
  return out;
}

}  // namespace pipetab::io
