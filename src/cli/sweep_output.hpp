// The file a sweep writes its rows to: locked while a sweep writes it, with a record beside it
// (OUT.sweep.json) of what its rows depend on and of the bytes written, so that --resume keeps
// only rows that this study, these inputs and this output format produced, unedited.
#pragma once

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "pipetab/digest.hpp"
#include "pipetab/study/provenance.hpp"
#include "pipetab/study/sweep.hpp"

namespace pipetab::cli {

/// What a sweep's output depends on besides its rows.
struct SweepIdentity {
  SweepFormat format = SweepFormat::Csv;
  std::string shard;  ///< "K/N"
  std::vector<StudyInput> inputs;
};

/// The record's path for an output file.
std::string sweep_record_path(const std::string& output);

class SweepOutput {
 public:
  /// Standard output ("-"): no lock, no record, no resuming. A file: opened (created if need
  /// be) and locked with flock(2) for the life of this object; throws Error naming the file if
  /// another process holds the lock.
  SweepOutput(const std::string& path, SweepIdentity identity);
  ~SweepOutput();
  SweepOutput(const SweepOutput&) = delete;
  SweepOutput& operator=(const SweepOutput&) = delete;

  /// Starts the file afresh (empties it and writes a record of no rows).
  void start();
  /// Keeps the rows a previous sweep of this study, shard and format wrote and returns their
  /// count: checks the record (format, shard, pipetab version, the digest of every input, the
  /// digest of the bytes it covers), drops the rows written after the record's last update (a
  /// run killed between the two is recomputed, not trusted), and checks each kept row's
  /// identifying columns against the plan. Throws Error naming what differs otherwise.
  std::int64_t resume(const SweepPlan& plan, bool header, std::int64_t begin, std::int64_t end);

  /// Appends a complete line. Rows reach the file (and the record) at least every 100 ms.
  void write(const std::string& line);
  /// Flushes the rows and updates the record.
  void flush();
  /// Whether the output holds no byte yet.
  bool empty() const noexcept { return bytes_ == 0; }

 private:
  void write_record();
  bool still_ours() const;
  [[noreturn]] void fail() const;

  std::string path_;
  SweepIdentity identity_;
  std::FILE* file_ = nullptr;
  int fd_ = -1;
  bool record_ = false;                 ///< false for standard output
  std::int64_t lines_ = 0, bytes_ = 0;  ///< written, the header included
  Digest digest_;                       ///< of the bytes written
  std::chrono::steady_clock::time_point flushed_ = std::chrono::steady_clock::now();
};

}  // namespace pipetab::cli
