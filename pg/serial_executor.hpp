// Internal: SerialExecutor, one thread that runs posted tasks one at a time, in order (a
// group's collective queue in the zmq and library backends, the device router's finisher;
// not the worker's pool of stream threads, worker::Executor). The thread starts at the
// first post(); stop() (and the destructor) runs what is queued, then joins it.
// try_begin_inline()/end_inline() let a caller run a task itself when nothing is queued.
//
// Thread safety: every method may be called from any thread; tasks must not throw, and
// must not post() after stop().
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>

namespace dtr::pg {

class SerialExecutor {
 public:
  ~SerialExecutor() { stop(); }
  void post(std::function<void()> task) {
    std::lock_guard lock(m_);
    if (!thread_.joinable()) thread_ = std::thread([this] { run(); });
    q_.push_back(std::move(task));
    cv_.notify_all();
  }
  // True when nothing is queued or running: the caller then runs its task itself and calls
  // end_inline() afterwards; the executor thread waits meanwhile.
  bool try_begin_inline() {
    std::lock_guard lock(m_);
    if (running_ || !q_.empty()) return false;
    running_ = true;
    return true;
  }
  void end_inline() {
    std::lock_guard lock(m_);
    running_ = false;
    cv_.notify_all();
  }
  void stop() {
    {
      std::lock_guard lock(m_);
      stop_ = true;
      cv_.notify_all();
    }
    if (thread_.joinable()) thread_.join();
  }

 private:
  void run() {
    std::unique_lock lock(m_);
    while (true) {
      cv_.wait(lock, [&] { return (stop_ && !running_) || (!q_.empty() && !running_); });
      if (q_.empty()) return;  // stop_ and drained
      auto task = std::move(q_.front());
      q_.pop_front();
      running_ = true;
      lock.unlock();
      task();
      lock.lock();
      running_ = false;
    }
  }
  std::mutex m_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> q_;
  bool stop_ = false;
  bool running_ = false;  // a task runs (on the executor thread or inline)
  std::thread thread_;
};

}  // namespace dtr::pg
