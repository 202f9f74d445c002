// Internal: the state behind a Work handle (Work::State), which every backend completes,
// and the one state shared by the calls that finished on the calling thread without an
// error (done_work_state()).
//
// Thread safety: a State's members are guarded by its mutex `m`; complete() may be called
// from any thread (the first call wins). done_work_state() may be called from any thread.
#pragma once

#include <chrono>
#include <condition_variable>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <utility>

#include "dtr/process_group.hpp"

namespace dtr {

// The shared state behind a Work handle.
struct Work::State {
  explicit State(std::string what_) : what(std::move(what_)) {}
  std::mutex m;
  std::condition_variable cv;
  bool done = false;
  std::exception_ptr error;
  int source = -1;
  std::string what;  // "all_reduce on rank 1", for wait() timeouts
  // Set (if at all) before the Work is handed out: Work::wait() calls it on its own thread
  // before it sleeps, so that a backend can make progress there (the zmq backend polls a
  // same-host group's rings for a short while).
  std::function<void(State&)> progress;
  // First call wins; later calls are ignored.
  void complete(std::exception_ptr e = nullptr, int src = -1) {
    std::lock_guard lock(m);
    if (done) return;
    done = true;
    error = std::move(e);
    source = src;
    cv.notify_all();
  }
};

namespace pg {

using Clock = std::chrono::steady_clock;

// One state, completed without an error, for every call that finished on the calling thread
// before its Work was made (a blocking call run inline): such a call allocates no state of
// its own. Nothing may complete it again or set its progress.
const std::shared_ptr<Work::State>& done_work_state();

}  // namespace pg
}  // namespace dtr
