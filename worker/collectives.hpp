// Collectives: the session's process groups and the collective task's run.
//
// Groups holds the session's process groups: 0 is the whole one, formed from the Setup's
// endpoints; NewGroup makes subgroups. Forming a group blocks until every member has
// joined, and every node must form its groups in the same order, so each is made by a job
// on the GroupThread (one thread, jobs in order) and held as a shared future.
//
// A collective task runs when its stream gets there, on that stream's executor thread,
// and blocks until every member has joined (bounded by the collective timeout; the session
// ending stops the wait). The members first all-reduce one flag each: whose input is
// failed (then every output fails naming that node, and nothing is computed) and whose is
// a CUDA tensor (only when all are does the group get device tensors).
//
// Thread safety: Groups' members are the dispatch thread's, except closing() and close()
// (any thread; close() is called by the session's destructor). A Group's future may be
// waited on from any thread. GroupThread's `mu` guards its job queue and stop flag; jobs
// capture only values, so a session that ends while one still waits for its peers does
// not wait for it: the thread is detached, finishes that job on its own and exits; jobs
// not started are dropped. run_collective() is called on executor threads.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "dtr/process_group.hpp"
#include "dtr/security.hpp"
#include "protocol/commands.hpp"
#include "worker/failures.hpp"
#include "worker/outbox.hpp"
#include "worker/recorder.hpp"
#include "worker/streams.hpp"

namespace dtr::worker::detail {

// A process group of the session (the whole one, or a subgroup).
struct Group {
  std::shared_future<ProcessGroup> ready;
};
using GroupPtr = std::shared_ptr<Group>;

// Runs jobs one at a time, in order, on its own (detached) thread.
class GroupThread {
 public:
  GroupThread();
  // Drops the jobs not started; the one running finishes on its own.
  ~GroupThread();
  GroupThread(const GroupThread&) = delete;
  GroupThread& operator=(const GroupThread&) = delete;
  void post(std::function<void()> job);
  // Jobs running now in any GroupThread of the process (one forming a group for a session
  // that has ended may run until the group's timeout). A process that exits while one runs
  // must not run its static destructors under it (dtr-worker's main).
  static int running();

 private:
  struct State {
    std::mutex mu;  // guards jobs and stop
    std::condition_variable cv;
    std::deque<std::function<void()>> jobs;
    bool stop = false;
  };
  static void loop(State& s);
  std::shared_ptr<State> state_;
};

class Groups {
 public:
  // Forms group 0 from `endpoints` (one per node; this node binds endpoints[node]) in the
  // background, unless there is no endpoint per node or group 0 exists.
  // `backend`: "" for the default (zmq; nccl for CUDA tensors where built) or "gloo".
  // `port_hold` keeps endpoints[node]'s port bound until the group binds it (released
  // just before; see reserve_pg_endpoint in handshake.cpp).
  void setup(std::vector<std::string> endpoints, uint32_t node, uint32_t nodes, uint64_t session_id,
             std::chrono::milliseconds timeout, const SecurityConfig& security,
             const std::string& backend = {}, std::shared_ptr<void> port_hold = nullptr);
  // Makes subgroup `c.group` of group 0 (ranks < nodes); why not, nullopt when queued.
  std::optional<std::string> new_group(const protocol::cmd::NewGroup& c, uint32_t nodes);
  GroupPtr find(uint64_t id) const;  // null when absent
  // The session is ending: collective waits stop, and formed groups shut down (their
  // blocked collectives fail at once).
  void close();
  bool closing() const { return closing_.load(); }
  // Node `node` is lost to the session (cmd::NodeLost): collectives that involve it, in
  // every formed group, fail now with `why`; those among the other nodes go on.
  void lost(uint32_t node, const std::string& why);

 private:
  // Each formed group's handle (groups still forming are skipped).
  template <class F>
  void for_each_formed(F&& f);

  std::unordered_map<uint64_t, GroupPtr> groups_;
  std::unique_ptr<GroupThread> thread_;
  std::atomic<bool> closing_{false};
};

// What a collective task needs besides the task.
struct CollectiveContext {
  const Groups& groups;
  FailureLog& failures;
  std::chrono::milliseconds timeout;  // for the group to form
  uint32_t node;
  // While it waits for the other members the flight recorder says so; a collective that
  // fails in its process group (a member lost, the timeout) dumps the flight recorder to
  // the log and to the master.
  Recorder& recorder;
  Outbox& outbox;
};

// Runs collective task `t` of stream `s`: true when done (its output published or
// failed); false when `self` was parked until the input is ready.
bool run_collective(StreamQueue& s, const StreamQueuePtr& self, Task& t,
                    const CollectiveContext& ctx);

}  // namespace dtr::worker::detail
