// The timeline's clock, shared by the master and the workers (docs/observability.md).
//
// Tracing reads a clock once or twice per command, so the read must cost a few
// nanoseconds: on x86-64 with an invariant TSC (CPUID 0x80000007, EDX bit 8) ticks() is
// the TSC (`rdtsc`), elsewhere it is the steady clock in nanoseconds. to_steady_ns() turns
// ticks into nanoseconds of std::chrono::steady_clock (CLOCK_MONOTONIC, the clock every
// other time of dtr is on), by a rate measured between the first call of anchor() in the
// process and the conversion (at least 50 ms apart; a conversion sooner waits for that).
// Every event of one trace is converted with one rate, so their order and durations are
// exact to the rate's error (well under 0.1 % after 50 ms).
//
// Thread safety: every function may be called from any thread.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <mutex>
#include <thread>

#if defined(__x86_64__)
#include <cpuid.h>
#include <x86intrin.h>
#endif

namespace dtr::trace {

inline int64_t steady_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

namespace detail {
inline bool detect_invariant_tsc() {
#if defined(__x86_64__)
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (!__get_cpuid(0x80000000u, &a, &b, &c, &d) || a < 0x80000007u) return false;
  __get_cpuid(0x80000007u, &a, &b, &c, &d);
  return (d & (1u << 8)) != 0;
#else
  return false;
#endif
}
// Set when the library loads (no guard to test on each read).
inline const bool kInvariantTsc = detect_invariant_tsc();
}  // namespace detail

// Whether ticks() reads the TSC (invariant: constant rate, synchronized across cores).
inline bool uses_tsc() {
  return detail::kInvariantTsc;
}

// The clock's reading: TSC ticks or steady nanoseconds (uses_tsc()).
inline int64_t ticks() {
#if defined(__x86_64__)
  if (detail::kInvariantTsc) return static_cast<int64_t>(__rdtsc());
#endif
  return steady_ns();
}

namespace detail {
struct Anchor {
  std::once_flag once;
  int64_t ticks = 0;
  int64_t ns = 0;
};
inline Anchor& anchor_state() {
  static Anchor a;
  return a;
}
}  // namespace detail

// Notes the first (ticks, steady ns) pair of the process; call it when tracing starts.
inline void anchor() {
  detail::Anchor& a = detail::anchor_state();
  std::call_once(a.once, [&] {
    a.ns = steady_ns();
    a.ticks = ticks();
  });
}

// Converts ticks to steady-clock nanoseconds (see the file comment).
class TickConverter {
 public:
  TickConverter() {
    anchor();
    const detail::Anchor& a = detail::anchor_state();
    tick0_ = a.ticks;
    ns0_ = a.ns;
    if (!uses_tsc()) return;  // ticks are nanoseconds
    constexpr int64_t kMinSpanNs = 50'000'000;
    int64_t waited = steady_ns() - ns0_;
    if (waited < kMinSpanNs)
      std::this_thread::sleep_for(std::chrono::nanoseconds(kMinSpanNs - waited));
    int64_t ns1 = steady_ns();
    int64_t t1 = ticks();
    if (t1 > tick0_) rate_ = static_cast<double>(ns1 - ns0_) / static_cast<double>(t1 - tick0_);
  }
  int64_t to_steady_ns(int64_t t) const {
    if (!uses_tsc()) return t;
    return ns0_ + static_cast<int64_t>(static_cast<double>(t - tick0_) * rate_);
  }

 private:
  int64_t tick0_ = 0;
  int64_t ns0_ = 0;
  double rate_ = 1.0;
};

}  // namespace dtr::trace
