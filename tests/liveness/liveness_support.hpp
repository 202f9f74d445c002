// Shared helpers of the liveness tests: how much longer limits are under sanitizers.
//
// Thread safety: constants only.
#pragma once

#include <chrono>

namespace dtr::test {

// Sanitizers slow every thread several times over (a sanitized worker's loop may not get
// to its heartbeat within 500 ms while it maps gigabytes): their builds get longer limits.
#if defined(__SANITIZE_THREAD__) || defined(__SANITIZE_ADDRESS__)
inline constexpr int kSlowdown = 4;
#else
inline constexpr int kSlowdown = 1;
#endif

}  // namespace dtr::test
