// A parallel loop over independent items with results in item order. Internal to study/.
#pragma once

#include <atomic>
#include <cstddef>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

#include "pipetab/threads.hpp"

namespace pipetab::detail {

/// Calls fn(i) for i in [0, n) on up to `threads` threads (0: all cores). The first exception
/// stops the others from taking new items and is rethrown.
template <class Fn>
void parallel_for(std::size_t n, unsigned threads, Fn&& fn) {
  if (threads == 0 || !kHasThreads) threads = hardware_threads();  // 1 without threads
  const auto workers = static_cast<std::size_t>(std::min<std::size_t>(threads, n));
  std::atomic<std::size_t> next{0};
  std::exception_ptr failure;
  std::mutex mutex;
  auto work = [&] {
    for (std::size_t i = next++; i < n; i = next++) {
      try {
        fn(i);
      } catch (...) {
        std::lock_guard lock(mutex);
        if (!failure) failure = std::current_exception();
        next = n;
      }
    }
  };
  if (workers <= 1) {
    work();
  } else {
    std::vector<std::thread> pool;
    for (std::size_t t = 0; t < workers; ++t)
      pool.emplace_back(work);
    for (auto& thread : pool)
      thread.join();
  }
  if (failure) std::rethrow_exception(failure);
}

}  // namespace pipetab::detail
