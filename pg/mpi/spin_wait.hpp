// Internal: SpinWait, the pause between two polls of something that usually completes soon
// (an MPI request): pure spins first (the poll itself makes the library progress), then
// sched_yield() so that other ranks on a crowded host run, then sleeps that double from
// 50 us to 1 ms, so that a wait for a peer that never comes costs little CPU.
//
// Thread safety: one object per waiting thread.
#pragma once

#include <sched.h>

#include <algorithm>
#include <chrono>
#include <thread>

namespace dtr::pg {

class SpinWait {
 public:
  static constexpr int kSpins = 2000;
  static constexpr std::chrono::milliseconds kYieldFor{20};

  void pause() {
    if (polls_ < kSpins) {
      ++polls_;
      return;
    }
    const auto now = std::chrono::steady_clock::now();
    if (polls_ == kSpins) {
      yield_until_ = now + kYieldFor;
      ++polls_;
    }
    if (now < yield_until_) {
      ::sched_yield();
      return;
    }
    std::this_thread::sleep_for(sleep_);
    sleep_ = std::min(sleep_ * 2, std::chrono::microseconds(1000));
  }

 private:
  int polls_ = 0;
  std::chrono::steady_clock::time_point yield_until_{};
  std::chrono::microseconds sleep_{50};
};

}  // namespace dtr::pg
