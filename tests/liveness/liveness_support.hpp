// Shared helpers of the liveness tests: how much longer limits are under sanitizers, the
// heartbeat timeout they use, and a scope that keeps a process stopped (SIGSTOP).
//
// Thread safety: constants; a Stopped belongs to one thread.
#pragma once

#include <doctest/doctest.h>
#include <signal.h>
#include <sys/types.h>

#include <chrono>

#include "support/sanitizers.hpp"

namespace dtr::test {

// Sanitizers slow every thread several times over (a sanitized worker's loop may not get
// to its heartbeat within 500 ms while it maps gigabytes): their builds get longer limits.
#if defined(DTR_TEST_TSAN) || defined(DTR_TEST_ASAN)
inline constexpr int kSlowdown = 4;
#else
inline constexpr int kSlowdown = 1;
#endif

// The heartbeat timeout of the liveness tests' sessions and groups.
inline constexpr std::chrono::milliseconds kTimeout(1000 * kSlowdown);

// Stops process `pid` (SIGSTOP) for its scope, then lets it go on (SIGCONT).
struct Stopped {
  pid_t pid;
  explicit Stopped(pid_t p) : pid(p) { REQUIRE(kill(pid, SIGSTOP) == 0); }
  ~Stopped() { kill(pid, SIGCONT); }
  Stopped(const Stopped&) = delete;
  Stopped& operator=(const Stopped&) = delete;
};

}  // namespace dtr::test
