// Helpers for the unit tests of the session's parts (worker/*.hpp, namespace detail):
// a task runner that records what ran, an emit that keeps what was sent, bounded waits.
#pragma once

#include <doctest/doctest.h>

#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "worker/executor.hpp"
#include "worker/recorder.hpp"
#include "worker/session.hpp"
#include "worker/streams.hpp"

namespace dtr::worker::test {

// Polls `done` until it holds or `timeout` passes; whether it held.
inline bool eventually(const std::function<bool()>& done,
                       std::chrono::milliseconds timeout = std::chrono::seconds(10)) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!done()) {
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return true;
}

// Runs tasks labelled by their flight record (`flight`, numbered from 1 as the dispatcher
// numbers commands; 0: not labelled): a task waits for its in[0] slot when it has one
// (parking its stream), records its label, and then publishes an empty tensor into its
// `out` slot when it has one (so that a task woken by that output records after it). Other
// behaviour per task through `hook` (returns false to park; the task then runs again when
// woken).
struct Recorder : detail::TaskRunner {
  bool execute(detail::StreamQueue& s, const detail::StreamQueuePtr& self,
               detail::Task& t) override {
    if (hook && !hook(s, self, t)) return false;
    if (t.in[0] && !t.in[0]->ready_or_park(self)) return false;
    if (t.flight != 0) {
      std::lock_guard lock(mu);
      ran.push_back(static_cast<int>(t.flight));
    }
    if (t.out) t.out->publish(local::Tensor());
    return true;
  }
  std::vector<int> labels() {
    std::lock_guard lock(mu);
    return ran;
  }
  size_t count() { return labels().size(); }

  std::function<bool(detail::StreamQueue&, const detail::StreamQueuePtr&, detail::Task&)> hook;
  std::mutex mu;
  std::vector<int> ran;
};

// An executor, a recorder and streams over them (stream 0 made), and the worker's
// observability recorder they report to.
struct StreamRig {
  explicit StreamRig(unsigned threads = 2)
      : executor(threads), streams(executor, recorder, observer) {}
  ~StreamRig() { CHECK(executor.wait_idle(std::chrono::seconds(10))); }
  // A task labelled `label` (at least 1).
  static detail::Task labelled(int label) {
    REQUIRE(label >= 1);
    detail::Task t;
    t.flight = static_cast<uint64_t>(label);
    return t;
  }
  Recorder recorder;
  detail::Recorder observer;
  Executor executor;
  detail::Streams streams;
};

// An emit that keeps what was sent (any thread).
struct Sent {
  Emit emit() {
    return [this](Outgoing&& o) {
      std::lock_guard lock(mu);
      out.push_back(std::move(o));
    };
  }
  std::vector<Outgoing> take() {
    std::lock_guard lock(mu);
    std::vector<Outgoing> o;
    o.swap(out);
    return o;
  }
  size_t count() {
    std::lock_guard lock(mu);
    return out.size();
  }
  std::mutex mu;
  std::vector<Outgoing> out;
};

}  // namespace dtr::worker::test
