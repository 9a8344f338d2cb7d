// How the process's allocator keeps freed memory: a process-wide choice the programs built on
// the library (the pipetab command, the benchmarks) make once at start.
#pragma once

namespace pipetab {

/// Keeps freed memory for reuse instead of giving it back to the kernel at once. glibc returns a
/// freed block above 128 KiB at the top of the heap to the kernel and serves large blocks by
/// mmap, so a sweep that builds and frees an execution graph per configuration faults its pages
/// in again every time: `pipetab sweep` on 1,000 simulated configurations took 1.1 s with
/// 38,000 minor faults, and takes 0.35 s with 800 once freed memory is kept (glibc's
/// M_TRIM_THRESHOLD and M_MMAP_THRESHOLD raised). The process keeps its peak resident size.
/// No effect on other C libraries.
void keep_freed_memory();

}  // namespace pipetab
