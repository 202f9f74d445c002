// The intra-op thread pool (tensor/parallel.hpp): immortal helper threads serving a queue
// of loop calls; each call's iterations are handed out by an atomic counter.
#include "tensor/parallel.hpp"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdlib>
#include <deque>
#include <exception>
#include <mutex>
#include <thread>

#include "dtr/env.hpp"

namespace dtr::detail {

namespace {

constexpr unsigned kMaxThreads = 8;
thread_local bool t_in_loop = false;  // running an iteration: nested calls run serially

// One parallel_for call: its next iteration, and the helpers still working on it.
struct Loop {
  const std::function<void(int64_t)>* f = nullptr;
  int64_t n = 0;
  std::atomic<int64_t> next{0};
  std::atomic<bool> failed{false};
  std::exception_ptr error;  // the first failure (written under mu)
  int helpers = 0;           // helpers that joined and have not finished (under mu)
  std::mutex mu;
  std::condition_variable done;

  // Runs iterations until none is left or one failed.
  void work() {
    const bool was = t_in_loop;
    t_in_loop = true;
    for (int64_t i; !failed.load(std::memory_order_relaxed) &&
                    (i = next.fetch_add(1, std::memory_order_relaxed)) < n;) {
      try {
        (*f)(i);
      } catch (...) {
        std::lock_guard lock(mu);
        if (!error) error = std::current_exception();
        failed.store(true, std::memory_order_relaxed);
      }
    }
    t_in_loop = was;
  }
};

class Pool {
 public:
  explicit Pool(unsigned helpers) {
    for (unsigned i = 0; i < helpers; ++i) std::thread([this] { serve(); }).detach();
  }

  void run(Loop& loop, unsigned helpers) {
    {
      std::lock_guard lock(mu_);
      for (unsigned i = 0; i < helpers; ++i) queue_.push_back(&loop);
    }
    cv_.notify_all();
    loop.work();
    // Withdraw the offers no helper took (they would find nothing to do), then wait for
    // the helpers that joined.
    {
      std::lock_guard lock(mu_);
      queue_.erase(std::remove(queue_.begin(), queue_.end(), &loop), queue_.end());
    }
    std::unique_lock lock(loop.mu);
    loop.done.wait(lock, [&] { return loop.helpers == 0; });
  }

 private:
  void serve() {
    for (;;) {
      Loop* loop = nullptr;
      {
        std::unique_lock lock(mu_);
        cv_.wait(lock, [&] { return !queue_.empty(); });
        loop = queue_.front();
        queue_.pop_front();
        // Joined under the pool's lock: the caller cannot withdraw this offer and return
        // while the helper is about to touch the loop.
        std::lock_guard join(loop->mu);
        ++loop->helpers;
      }
      loop->work();
      // Counted down and notified under the loop's mutex: the caller returns (destroying
      // the Loop) only after taking that mutex with no helper left.
      std::lock_guard lock(loop->mu);
      if (--loop->helpers == 0) loop->done.notify_all();
    }
  }

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Loop*> queue_;
};

Pool& pool() {
  // Never destroyed: helper threads blocked in serve() outlive static destruction.
  static Pool* p = new Pool(parallel_threads() - 1);
  return *p;
}

}  // namespace

unsigned parallel_threads() {
  static const unsigned n = [] {
    // Refused, not ignored, when it is not a positive integer (dtr/env.hpp).
    const int64_t hardware = std::clamp(std::thread::hardware_concurrency(), 1u, kMaxThreads);
    return static_cast<unsigned>(
        std::min<int64_t>(env_count("DTR_NUM_THREADS", hardware), kMaxThreads));
  }();
  return n;
}

void parallel_for(int64_t n, const std::function<void(int64_t)>& f) {
  if (n <= 0) return;
  const auto helpers =
      static_cast<unsigned>(std::min<int64_t>(n - 1, static_cast<int64_t>(parallel_threads()) - 1));
  if (helpers == 0 || t_in_loop) {
    for (int64_t i = 0; i < n; ++i) f(i);
    return;
  }
  Loop loop;
  loop.f = &f;
  loop.n = n;
  pool().run(loop, helpers);
  if (loop.error) std::rethrow_exception(loop.error);
}

}  // namespace dtr::detail
