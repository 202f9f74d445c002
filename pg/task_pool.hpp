// Internal: TaskPool, threads that run posted tasks concurrently (the library backends'
// asynchronous point-to-point waits, which block until their message has gone or come). A
// task that finds every thread busy starts one more, so no task waits behind another's
// blocking wait; idle threads stay for reuse. stop() (and the destructor) runs what is
// queued, then joins every thread.
//
// Thread safety: every method may be called from any thread; tasks must not throw, and must
// not post() after stop().
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace dtr::pg {

class TaskPool {
 public:
  TaskPool() = default;
  TaskPool(const TaskPool&) = delete;
  TaskPool& operator=(const TaskPool&) = delete;
  ~TaskPool() { stop(); }

  void post(std::function<void()> task) {
    std::lock_guard lock(m_);
    q_.push_back(std::move(task));
    if (idle_ < q_.size()) threads_.emplace_back([this] { run(); });
    cv_.notify_one();
  }

  void stop() {
    std::vector<std::thread> threads;
    {
      std::lock_guard lock(m_);
      stop_ = true;
      cv_.notify_all();
      threads.swap(threads_);
    }
    for (auto& t : threads) t.join();
  }

 private:
  void run() {
    std::unique_lock lock(m_);
    while (true) {
      ++idle_;
      cv_.wait(lock, [&] { return stop_ || !q_.empty(); });
      --idle_;
      if (q_.empty()) return;  // stopping and drained
      auto task = std::move(q_.front());
      q_.pop_front();
      lock.unlock();
      task();
      lock.lock();
    }
  }

  std::mutex m_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> q_;
  std::vector<std::thread> threads_;
  size_t idle_ = 0;  // threads waiting for a task
  bool stop_ = false;
};

}  // namespace dtr::pg
