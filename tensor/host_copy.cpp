// Parallel host memcpy (tensor/host_copy.hpp): a queue of parts served by immortal helper
// threads and by the callers themselves.
#include "tensor/host_copy.hpp"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <mutex>
#include <thread>

namespace dtr::detail {

namespace {

constexpr size_t kMinPart = size_t{2} << 20;  // 2 MiB
constexpr unsigned kMaxCopyThreads = 8;       // the caller and 7 helpers

// One call of parallel_memcpy: its parts not yet finished.
struct Call {
  std::atomic<size_t> remaining{0};
  std::mutex mu;
  std::condition_variable done;
};

struct Part {
  char* dst;
  const char* src;
  size_t n;
  Call* call;
};

class CopyPool {
 public:
  explicit CopyPool(unsigned helpers) {
    for (unsigned i = 0; i < helpers; ++i) std::thread([this] { loop(); }).detach();
  }

  void copy(char* dst, const char* src, size_t n, unsigned parts) {
    Call call;
    call.remaining.store(parts, std::memory_order_relaxed);
    const size_t each = (n + parts - 1) / parts;
    {
      std::lock_guard lock(mu_);
      for (unsigned i = 1; i < parts; ++i) {
        size_t off = std::min(n, each * i);
        queue_.push_back(Part{dst + off, src + off, std::min(each, n - off), &call});
      }
    }
    cv_.notify_all();
    run(Part{dst, src, std::min(each, n), &call});
    // Help with whatever is queued (this call's parts or another's) until ours are done.
    while (call.remaining.load(std::memory_order_acquire) > 0) {
      Part p{};
      {
        std::unique_lock lock(mu_);
        if (queue_.empty()) break;
        p = queue_.front();
        queue_.pop_front();
      }
      run(p);
    }
    std::unique_lock lock(call.mu);
    call.done.wait(lock, [&] { return call.remaining.load(std::memory_order_acquire) == 0; });
  }

 private:
  static void run(const Part& p) {
    std::memcpy(p.dst, p.src, p.n);
    // Counted down and notified under the call's mutex: the caller returns (and destroys
    // the Call) only after taking that mutex with nothing left, so never while a helper
    // still touches it.
    std::lock_guard lock(p.call->mu);
    if (p.call->remaining.fetch_sub(1, std::memory_order_acq_rel) == 1) p.call->done.notify_all();
  }

  void loop() {
    for (;;) {
      Part p{};
      {
        std::unique_lock lock(mu_);
        cv_.wait(lock, [&] { return !queue_.empty(); });
        p = queue_.front();
        queue_.pop_front();
      }
      run(p);
    }
  }

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Part> queue_;
};

CopyPool& copy_pool() {
  // Never destroyed: helper threads blocked in loop() outlive static destruction.
  static CopyPool* p = new CopyPool(parallel_copy_threads() - 1);
  return *p;
}

}  // namespace

unsigned parallel_copy_threads() {
  static const unsigned n = std::clamp(std::thread::hardware_concurrency(), 1u, kMaxCopyThreads);
  return n;
}

void parallel_memcpy(void* dst, const void* src, size_t n) {
  if (n == 0) return;
  const auto parts = static_cast<unsigned>(
      std::min<size_t>(parallel_copy_threads(), std::max<size_t>(1, n / kMinPart)));
  if (n < kParallelCopyMin || parts < 2) {
    std::memcpy(dst, src, n);
    return;
  }
  copy_pool().copy(static_cast<char*>(dst), static_cast<const char*>(src), n, parts);
}

}  // namespace dtr::detail
