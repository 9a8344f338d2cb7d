// How many threads this build may run. WebAssembly built without pthreads (the web build,
// docs/web.md) has one: std::thread cannot start there, so the parallel loops run in place.
#pragma once

#include <algorithm>
#include <thread>

namespace pipetab {

#if defined(__EMSCRIPTEN__) && !defined(__EMSCRIPTEN_PTHREADS__)
inline constexpr bool kHasThreads = false;
#else
inline constexpr bool kHasThreads = true;
#endif

/// The threads a "use every core" request (-j 0, the default) gets: 1 where there are no threads.
inline unsigned hardware_threads() {
  if constexpr (!kHasThreads) return 1;
  return std::max(1U, std::thread::hardware_concurrency());
}

}  // namespace pipetab
