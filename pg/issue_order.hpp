// Internal: how a backend runs its collectives in issue order (zmq, and gloo and mpi through
// LibraryGroup): each call is numbered under the group's lock; a blocking call that finds the
// group idle runs on the calling thread, otherwise the call is queued on the group's executor.
// An inline call allocates nothing when it succeeds: its name goes into a buffer of the group
// (one inline call at a time, guarded by the executor's gate) and its Work shares
// done_work_state().
//
// Thread safety: any thread; `m` guards `seq`, and the executor's gate guards `inline_what`.
#pragma once

#include <cstdint>
#include <exception>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>

#include "pg/backend.hpp"
#include "pg/serial_executor.hpp"
#include "pg/util.hpp"
#include "pg/work_state.hpp"

namespace dtr::pg {

// The parts of a group that issue order uses.
struct IssueOrder {
  std::mutex& m;             // numbering and queueing in one step keeps issue order
  uint64_t& seq;             // the last call's number
  SerialExecutor& exec;      // the group's executor
  std::string& inline_what;  // the name of the call running inline
  std::string_view suffix;   // collective_name()'s suffix
};

// Runs `args` in issue order. `execute(args, seq, what)` runs one collective and returns its
// error (null on success); it must outlive the queued task (a member function's lambda).
template <typename Execute>
Work run_in_issue_order(IssueOrder g, CollectiveArgs args, Execute execute) {
  std::unique_lock lock(g.m);
  const uint64_t seq = ++g.seq;
  if (args.blocking && g.exec.try_begin_inline()) {
    lock.unlock();
    collective_name_into(g.inline_what, args.op, seq, g.suffix);
    std::exception_ptr error = execute(args, seq, g.inline_what);
    std::shared_ptr<Work::State> work = done_work_state();
    if (error) {
      work = std::make_shared<Work::State>(g.inline_what);
      work->complete(std::move(error));
    }
    g.exec.end_inline();
    return Work(std::move(work));
  }
  auto work = std::make_shared<Work::State>(collective_name(args.op, seq, g.suffix));
  g.exec.post([seq, work, execute, a = std::move(args)]() mutable {
    work->complete(execute(a, seq, work->what));
  });
  return Work(work);
}

}  // namespace dtr::pg
