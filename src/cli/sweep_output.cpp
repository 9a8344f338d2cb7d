#include "sweep_output.hpp"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>

#include <fcntl.h>
#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "pipetab/error.hpp"
#include "pipetab/io/data_table.hpp"
#include "pipetab/io/table_file.hpp"
#include "pipetab/report/output.hpp"

namespace pipetab::cli {

namespace {

constexpr const char* kRecordFormat = "pipetab-sweep-record";

const char* format_name(SweepFormat format) {
  return format == SweepFormat::Csv ? "csv" : "jsonl";
}

const char* format_words(const std::string& name) {
  return name == "csv" ? "CSV" : "JSON Lines";
}

// Where the last complete row ends: after the last line break outside a quoted CSV field.
std::size_t complete_rows_end(std::string_view text, bool csv) {
  std::size_t end = 0;
  bool quoted = false;
  for (std::size_t i = 0; i < text.size(); ++i) {
    if (csv && text[i] == '"') quoted = !quoted;
    if (text[i] == '\n' && !quoted) end = i + 1;
  }
  return end;
}

// The record as the previous run left it; Error if it is not one pipetab wrote.
nlohmann::json read_record(const std::string& path) {
  const auto text = io::read_file(path);
  const auto bad = [&](const std::string& why) {
    return Error(
        fmt::format("{}: not a sweep record pipetab wrote ({}); run without --resume to "
                    "start over",
                    path, why));
  };
  if (text.size() > (std::size_t{1} << 24)) throw bad("larger than 16 MiB");
  nlohmann::json record;
  try {
    record = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception&) {
    throw bad("invalid JSON");
  }
  if (!record.is_object() || !record.contains("format") || record["format"] != kRecordFormat) {
    throw bad(fmt::format("no \"format\": \"{}\"", kRecordFormat));
  }
  for (const char* key : {"pipetab", "output_format", "shard", "digest"}) {
    if (!record.contains(key) || !record[key].is_string()) throw bad(fmt::format("'{}'", key));
  }
  for (const char* key : {"lines", "bytes"}) {
    if (!record.contains(key) || !record[key].is_number_unsigned())
      throw bad(fmt::format("'{}'", key));
  }
  if (!record.contains("inputs") || !record["inputs"].is_array()) throw bad("'inputs'");
  for (const auto& input : record["inputs"]) {
    for (const char* key : {"role", "source", "digest"}) {
      if (!input.is_object() || !input.contains(key) || !input[key].is_string())
        throw bad(fmt::format("'inputs' entry without '{}'", key));
    }
  }
  return record;
}

// Names the first input that differs between the record and this run, or "" if none does.
std::string changed_input(const nlohmann::json& recorded, const std::vector<StudyInput>& now) {
  std::vector<StudyInput> before;
  for (const auto& input : recorded) {
    before.push_back({input["role"].get<std::string>(), input["source"].get<std::string>(),
                      input["digest"].get<std::string>()});
  }
  // The same file under another spelling (./study.toml for study.toml, a link) is the same place.
  const auto same_place = [](const StudyInput& a, const StudyInput& b) {
    if (a.role != b.role) return false;
    if (a.source == b.source) return true;
    std::error_code ec;
    return std::filesystem::equivalent(a.source, b.source, ec) && !ec;
  };
  for (const auto& input : now) {
    const auto it = std::find_if(before.begin(), before.end(),
                                 [&](const StudyInput& b) { return same_place(input, b); });
    if (it == before.end()) {
      return fmt::format("the study now names {} {}, which it did not when the rows were written",
                         input.role, input.source);
    }
    if (it->digest != input.digest) {
      return fmt::format("{} {} has changed since the rows were written", input.role, input.source);
    }
  }
  for (const auto& input : before) {
    if (std::none_of(now.begin(), now.end(),
                     [&](const StudyInput& n) { return same_place(input, n); })) {
      return fmt::format("the study no longer names {} {}, which its rows came from", input.role,
                         input.source);
    }
  }
  return {};
}

}  // namespace

std::string sweep_record_path(const std::string& output) {
  return output + ".sweep.json";
}

SweepOutput::SweepOutput(const std::string& path, SweepIdentity identity)
    : path_(path), identity_(std::move(identity)) {
  if (path.empty() || path == "-") {
    file_ = stdout;
    return;
  }
  if (io::is_special_file(path)) {
    // A device or FIFO (/dev/null, a pipe to another program) is written in place, as a stream:
    // it cannot be emptied, locked for resuming or given a record beside it (/dev/null.sweep.json).
    file_ = std::fopen(path.c_str(), "wb");
    if (file_ == nullptr) fail();
    return;
  }
  record_ = true;
  fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0666);
  if (fd_ < 0) fail();
  // Two sweeps appending to one file interleave their rows: the second is refused instead.
  if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
    const int error = errno;
    ::close(fd_);
    fd_ = -1;
    if (error == EWOULDBLOCK) {
      throw Error(
          fmt::format("{}: another pipetab sweep is writing it (it holds the file's "
                      "lock); wait for that one to finish or write to another file",
                      path));
    }
    throw Error(fmt::format("cannot lock {}: {}", path, std::strerror(error)));
  }
  if (!still_ours()) {
    throw Error(
        fmt::format("{}: the file was replaced while this sweep opened it; run it again", path));
  }
}

// Whether the path still names the file this sweep locked. The lock belongs to the file, not its
// name: once the file is deleted or replaced, a second sweep creates and locks a new one under
// the same name, and both would run, the first one's rows going nowhere.
bool SweepOutput::still_ours() const {
  struct stat named = {};
  struct stat held = {};
  return ::stat(path_.c_str(), &named) == 0 && ::fstat(fd_, &held) == 0 &&
         named.st_dev == held.st_dev && named.st_ino == held.st_ino;
}

SweepOutput::~SweepOutput() {
  if (file_ != nullptr && file_ != stdout) {
    std::fclose(file_);  // closes fd_ and so releases the lock
  } else if (fd_ >= 0) {
    ::close(fd_);
  }
}

void SweepOutput::fail() const {
  throw Error(fmt::format("cannot write {}: {}", path_, std::strerror(errno)));
}

void SweepOutput::start() {
  if (!record_) return;
  if (::ftruncate(fd_, 0) != 0) fail();
  file_ = ::fdopen(fd_, "ab");
  if (file_ == nullptr) fail();
  write_record();
}

std::int64_t SweepOutput::resume(const SweepPlan& plan, bool header, std::int64_t begin,
                                 std::int64_t end) {
  if (!record_) {
    throw Error(
        fmt::format("{}: cannot resume: --resume needs a regular file to keep rows in, "
                    "and this is a device or FIFO; run without --resume",
                    path_));
  }
  const auto record_path = sweep_record_path(path_);
  std::error_code ec;
  std::string text = io::read_file(path_);
  if (!std::filesystem::exists(record_path, ec)) {
    if (!text.empty()) {
      throw Error(fmt::format(
          "{}: cannot resume: {} is missing, so nothing says which study, inputs and format its "
          "rows came from; run without --resume to start over",
          path_, record_path));
    }
    start();
    return 0;
  }
  const auto record = read_record(record_path);
  const auto recorded_format = record["output_format"].get<std::string>();
  if (recorded_format != format_name(identity_.format)) {
    throw Error(fmt::format(
        "{}: holds {} rows but this run writes {} (from --format or the file's extension): "
        "resume with the format it was started with",
        path_, format_words(recorded_format), format_words(format_name(identity_.format))));
  }
  if (record["shard"] != identity_.shard) {
    throw Error(fmt::format("{}: holds the rows of shard {}, this run is shard {}", path_,
                            record["shard"].get<std::string>(), identity_.shard));
  }
  if (record["pipetab"] != PIPETAB_VERSION) {
    throw Error(
        fmt::format("{}: its rows were written by pipetab {}, this is pipetab {}; run "
                    "without --resume to recompute them",
                    path_, record["pipetab"].get<std::string>(), PIPETAB_VERSION));
  }
  if (const auto changed = changed_input(record["inputs"], identity_.inputs); !changed.empty()) {
    throw Error(fmt::format("{}: {}; run without --resume to recompute its rows", path_, changed));
  }
  const auto bytes = record["bytes"].get<std::uint64_t>();
  if (text.size() < bytes) {
    throw Error(
        fmt::format("{}: holds {} bytes, fewer than the {} its record {} covers: it was "
                    "cut or edited; run without --resume to start over",
                    path_, text.size(), bytes, record_path));
  }
  // Rows after the record's last update were written by a run killed before it could record
  // them: they are recomputed rather than trusted.
  text.resize(static_cast<std::size_t>(bytes));  // bytes <= text.size(), checked above
  Digest digest;
  digest.add(text);
  if (digest.hex() != record["digest"]) {
    throw Error(
        fmt::format("{}: its rows were edited after pipetab wrote them (the first {} "
                    "bytes no longer match their digest in {}); run without --resume to "
                    "recompute them",
                    path_, bytes, record_path));
  }
  if (complete_rows_end(text, identity_.format == SweepFormat::Csv) != text.size()) {
    throw Error(
        fmt::format("{}: its record ends inside a row; run without --resume to start over", path_));
  }

  // The record vouches for the bytes; the rows are still checked against the plan, so that a
  // record copied beside another study's file cannot pass.
  const bool csv = identity_.format == SweepFormat::Csv;
  const auto expected_header = sweep_header(plan);
  if (csv && header && !text.empty() && text.rfind(expected_header, 0) != 0) {
    throw Error(
        fmt::format("{}:1: the header is not this study's (columns: {}): resume only the "
                    "file this study and shard wrote",
                    path_, expected_header.substr(0, expected_header.size() - 1)));
  }
  // A CSV shard after the first has no header of its own: read its rows under this study's.
  const auto table = io::parse_data_table(csv && !header ? expected_header + text : text, path_);
  if (!table.rows.empty() && table.columns != plan.columns()) {
    throw Error(
        fmt::format("{}: its columns are not this study's: resume only the file this study "
                    "and shard wrote",
                    path_));
  }
  const auto rows = static_cast<std::int64_t>(table.rows.size());
  if (rows > end - begin) {
    throw Error(
        fmt::format("{}: holds {} rows, more than the {} of this shard", path_, rows, end - begin));
  }
  const auto identity = plan.identity_columns();
  for (std::int64_t i = 0; i < rows; ++i) {
    const auto cfg = plan.configurations()[static_cast<std::size_t>(begin + i)];
    const auto expected = plan.identity(cfg);
    const auto& cells = table.rows[static_cast<std::size_t>(i)];
    for (std::size_t k = 0; k < identity.size(); ++k) {
      const auto c = identity[k];
      const auto want = csv_cell(expected[k]);
      if (cells[c] != want) {
        const int line = table.lines[static_cast<std::size_t>(i)] - (csv && !header ? 1 : 0);
        throw Error(fmt::format(
            "{}:{}: column '{}' holds '{}' where this study has '{}' (configuration {}): resume "
            "only the file this study and shard wrote, unchanged",
            path_, line, plan.columns()[c], cells[c], want, cfg.index));
      }
    }
  }

  if (::ftruncate(fd_, static_cast<off_t>(bytes)) != 0) fail();
  file_ = ::fdopen(fd_, "ab");
  if (file_ == nullptr) fail();
  lines_ = static_cast<std::int64_t>(std::count(text.begin(), text.end(), '\n'));
  bytes_ = static_cast<std::int64_t>(bytes);
  digest_ = digest;
  write_record();
  return rows;
}

void SweepOutput::write(const std::string& line) {
  if (std::fwrite(line.data(), 1, line.size(), file_) != line.size()) fail();
  digest_.add(line);
  bytes_ += static_cast<std::int64_t>(line.size());
  ++lines_;
  // Rows reach the file at least every 100 ms and at the end: a flush per row costs a system
  // call each (a tenth of a 10,000-row table-level sweep on this machine), and a run killed
  // between flushes leaves whole rows and perhaps a partial last one, which --resume drops.
  const auto now = std::chrono::steady_clock::now();
  if (now - flushed_ >= std::chrono::milliseconds(100)) flush();
}

void SweepOutput::flush() {
  if (std::fflush(file_) != 0) fail();
  flushed_ = std::chrono::steady_clock::now();
  if (record_ && !still_ours()) {
    throw Error(fmt::format(
        "{}: the file was deleted or replaced while this sweep wrote it, so its rows no longer "
        "reach it and another sweep may now be writing that name; this sweep stops (run it "
        "again, with --resume to keep rows a finished file holds)",
        path_));
  }
  // After the rows: a record never covers bytes the file does not hold.
  if (record_) write_record();
}

void SweepOutput::write_record() {
  nlohmann::json inputs = nlohmann::json::array();
  for (const auto& input : identity_.inputs)
    inputs.push_back({{"role", input.role}, {"source", input.source}, {"digest", input.digest}});
  const nlohmann::ordered_json record = {{"format", kRecordFormat},
                                         {"version", 1},
                                         {"pipetab", PIPETAB_VERSION},
                                         {"output_format", format_name(identity_.format)},
                                         {"shard", identity_.shard},
                                         {"inputs", inputs},
                                         {"lines", lines_},
                                         {"bytes", bytes_},
                                         {"digest", digest_.hex()}};
  io::write_file(sweep_record_path(path_), record.dump(2) + "\n");
}

}  // namespace pipetab::cli
