// Shared by the long-running commands (sweep, plan): a progress bar on a terminal, and --shard.
// Internal to the CLI.
#pragma once

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>
#include <utility>

#include <fmt/format.h>
#include <unistd.h>

#include "pipetab/error.hpp"

namespace pipetab::cli {

// A progress bar with rate and ETA on stderr, drawn only when stderr is a terminal.
class Progress {
 public:
  Progress(std::int64_t total, std::int64_t already)
      : total_(total), already_(already), tty_(isatty(fileno(stderr)) != 0) {}

  void update(std::int64_t done, bool final = false) {
    if (!tty_) return;
    const auto now = Clock::now();
    if (!final && now - last_ < std::chrono::milliseconds(100)) return;
    last_ = now;
    const double elapsed = std::chrono::duration<double>(now - start_).count();
    const auto fresh = done - already_;
    const double rate = elapsed > 0.0 ? static_cast<double>(fresh) / elapsed : 0.0;
    const double fraction = total_ ? static_cast<double>(done) / static_cast<double>(total_) : 1.0;
    constexpr int kWidth = 30;
    const auto filled = static_cast<int>(fraction * kWidth);
    std::string eta = "--:--";
    if (rate > 0.0) eta = clock_text(static_cast<double>(total_ - done) / rate);
    std::fprintf(stderr, "\r[%s%s] %lld/%lld %5.1f%%  %.1f/s  ETA %s  ",
                 std::string(static_cast<std::size_t>(filled), '#').c_str(),
                 std::string(static_cast<std::size_t>(kWidth - filled), '.').c_str(),
                 static_cast<long long>(done), static_cast<long long>(total_), 100.0 * fraction,
                 rate, eta.c_str());
    if (final) std::fprintf(stderr, "\n");
    std::fflush(stderr);
  }

  bool tty() const noexcept { return tty_; }
  double seconds() const { return std::chrono::duration<double>(Clock::now() - start_).count(); }

 private:
  using Clock = std::chrono::steady_clock;
  static std::string clock_text(double seconds) {
    const auto s = static_cast<long long>(seconds + 0.5);
    return s >= 3600 ? fmt::format("{}:{:02}:{:02}", s / 3600, s / 60 % 60, s % 60)
                     : fmt::format("{}:{:02}", s / 60, s % 60);
  }
  std::int64_t total_, already_;
  bool tty_;
  Clock::time_point start_ = Clock::now(), last_{};
};

// "K/N" with 1 <= K <= N.
inline std::pair<std::int64_t, std::int64_t> parse_shard(const std::string& text) {
  long long k = 0, n = 0;
  char tail = 0;
  if (std::sscanf(text.c_str(), "%lld/%lld%c", &k, &n, &tail) != 2 || k < 1 || n < 1 || k > n ||
      n > (1 << 20)) {
    throw Error(
        fmt::format("--shard {}: expected K/N with 1 <= K <= N <= 1048576, e.g. 3/8", text));
  }
  return {k, n};
}

}  // namespace pipetab::cli
