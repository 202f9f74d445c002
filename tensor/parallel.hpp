// Internal: intra-op parallelism for the heavy CPU kernels (the convolutions). A loop of n
// independent iterations runs on the calling thread and on helper threads of one
// process-wide pool; the caller works too, so a call never waits for helpers that are busy
// elsewhere without making progress itself (host_copy.cpp's pattern).
//
// Results must not depend on the number of threads: callers split their work into parts
// fixed by the shapes alone and combine partial results in a fixed order.
//
// Thread safety: parallel_for may be called from any thread, concurrently; a call made
// from inside an iteration (nested) runs its iterations serially on that thread.
#pragma once

#include <cstdint>
#include <functional>

namespace dtr::detail {

// Threads (the caller included) parallel_for uses: $DTR_NUM_THREADS when set (1: none
// but the caller), else the hardware's threads, at most 8.
unsigned parallel_threads();

// Runs f(i) for every i in [0, n), in any order and concurrently, and returns when all
// have run. The first exception an iteration throws is rethrown here once the others have
// finished (iterations not yet started are skipped).
void parallel_for(int64_t n, const std::function<void(int64_t)>& f);

}  // namespace dtr::detail
