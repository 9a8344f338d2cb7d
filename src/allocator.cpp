#include "pipetab/allocator.hpp"

#include <cstdlib>  // defines __GLIBC__ where the C library is glibc

#if defined(__GLIBC__)
#include <malloc.h>
#endif

namespace pipetab {

void keep_freed_memory() {
#if defined(__GLIBC__)
  // 256 MiB before the heap's top is trimmed; blocks up to 32 MiB (glibc's largest mmap
  // threshold on 64-bit) from the heap rather than from mmap.
  mallopt(M_TRIM_THRESHOLD, 256 << 20);
  mallopt(M_MMAP_THRESHOLD, 32 << 20);
#endif
}

}  // namespace pipetab
