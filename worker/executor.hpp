// Executor: a fixed pool of threads that runs serial task queues ("strands"). Each queue
// is handed to at most one thread at a time, so its tasks run in order; different queues
// run concurrently, as many at once as there are threads. A worker's CPU streams are such
// queues, and the pool's size is the worker's thread budget.
//
// A Runnable is scheduled by whoever makes it runnable (a new task, a wake-up); the pool
// calls run() once per scheduling, and run() decides whether to schedule itself again.
//
// Thread safety: schedule() and wait_idle() may be called from any thread; the destructor
// must not race with schedule() (stop every producer first).
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace dtr::worker {

class Runnable {
 public:
  virtual ~Runnable() = default;
  virtual void run() = 0;
};

class Executor {
 public:
  // threads == 0: one per hardware thread.
  explicit Executor(unsigned threads);
  // Lets the running runnables return, drops the queued ones, joins the threads.
  ~Executor();
  Executor(const Executor&) = delete;
  Executor& operator=(const Executor&) = delete;

  void schedule(std::shared_ptr<Runnable> r);
  // Waits until nothing is queued or running; false when `timeout` passed first.
  bool wait_idle(std::chrono::milliseconds timeout);
  unsigned threads() const { return static_cast<unsigned>(threads_.size()); }

 private:
  void loop();

  std::mutex mu_;
  std::condition_variable work_cv_;
  std::condition_variable idle_cv_;
  std::deque<std::shared_ptr<Runnable>> ready_;
  size_t running_ = 0;
  bool stopping_ = false;
  std::vector<std::thread> threads_;
};

}  // namespace dtr::worker
