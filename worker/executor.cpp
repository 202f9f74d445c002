// The worker's thread pool.
#include "worker/executor.hpp"

namespace dtr::worker {

Executor::Executor(unsigned threads) {
  if (threads == 0) threads = std::max(1u, std::thread::hardware_concurrency());
  threads_.reserve(threads);
  for (unsigned i = 0; i < threads; ++i) threads_.emplace_back([this] { loop(); });
}

Executor::~Executor() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  work_cv_.notify_all();
  for (std::thread& t : threads_) t.join();
  std::deque<std::shared_ptr<Runnable>> dropped;
  {
    std::lock_guard lock(mu_);
    dropped.swap(ready_);
  }
}

void Executor::schedule(std::shared_ptr<Runnable> r) {
  {
    std::lock_guard lock(mu_);
    ready_.push_back(std::move(r));
  }
  work_cv_.notify_one();
}

bool Executor::wait_idle(std::chrono::milliseconds timeout) {
  std::unique_lock lock(mu_);
  return idle_cv_.wait_for(lock, timeout, [&] { return ready_.empty() && running_ == 0; });
}

void Executor::loop() {
  std::unique_lock lock(mu_);
  while (true) {
    work_cv_.wait(lock, [&] { return stopping_ || !ready_.empty(); });
    if (stopping_) return;
    std::shared_ptr<Runnable> r = std::move(ready_.front());
    ready_.pop_front();
    ++running_;
    lock.unlock();
    r->run();
    r.reset();
    lock.lock();
    --running_;
    if (ready_.empty() && running_ == 0) idle_cv_.notify_all();
  }
}

}  // namespace dtr::worker
