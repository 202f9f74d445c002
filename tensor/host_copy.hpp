// Internal: memcpy of large host buffers split across a few threads. One thread's memcpy
// moves far fewer bytes per second than the memory system (and than the DMA engines of a
// GPU's link), so the CUDA backend's pinned staging (tensor/cuda/runtime.cpp) copies its
// chunks with this. Small copies (under kParallelCopyMin) are a plain memcpy.
//
// The helper threads (at most 7, fewer on machines with fewer cores) start at the first
// large copy and live for the rest of the process, waiting on a condition variable.
//
// Thread safety: parallel_memcpy is safe from any thread; concurrent calls share the
// helpers, and every caller also copies parts of its own call, so a call never waits for
// helpers that are busy elsewhere without making progress itself.
#pragma once

#include <cstddef>

namespace dtr::detail {

inline constexpr size_t kParallelCopyMin = size_t{4} << 20;  // 4 MiB

// memcpy(dst, src, n) (the ranges must not overlap), split into parts of at least 2 MiB
// copied by the helper threads and the caller. Returns when every byte is copied.
void parallel_memcpy(void* dst, const void* src, size_t n);

// How many threads (the caller included) a copy of kParallelCopyMin or more may use.
unsigned parallel_copy_threads();

}  // namespace dtr::detail
