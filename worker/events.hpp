// Events and cross-node tokens: what streams, requests and peers wait for.
//
// An EventState is an event on this node. The dispatcher counts its records (`issued`); a
// wait, query or NotifyPeer refers to the latest record dispatched before it. A record
// completes its generation when its stream runs it (complete(): after the CUDA work queued
// before it), storing the stream's first failure since its previous record and a steady-
// clock time, and releases the waiters whose generation has completed: parked streams,
// EventSync requests, peers to notify. EventTable is the dispatcher's id -> event map
// (ids not 0, at most kMaxEvents live).
//
// A RemoteWait is a cross-node wait for one token: a peer's notification (with a copy's
// bytes, or the failure the sender met) and the stream that waits for it, whichever comes
// first. Tokens is the dispatcher's token -> wait map: a notification that comes first
// makes the entry and the wait takes it; a wait that comes first makes it and the
// notification fills it and wakes the stream. Tokens are single use; at most
// kMaxPendingWaits are pending.
//
// Observability: a record that notifies peers draws the start of each notification's arrow
// on the timeline (worker/trace_slices.hpp).
//
// Thread safety: EventTable, Tokens and `EventState::issued` are the dispatch thread's. An
// EventState's `mu` guards completed, failure, time_ns and waiters; a RemoteWait's `mu`
// guards arrived, waiter, from, payload and failure until `arrived` is seen by its task,
// which alone touches the entry after that. Streams are woken, and replies and
// notifications sent, with no lock held.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "worker/failures.hpp"
#include "worker/outbox.hpp"
#include "worker/session.hpp"
#include "worker/streams.hpp"

namespace dtr::worker::detail {

struct EventState {
  struct Waiter {
    uint64_t target = 0;
    StreamQueuePtr stream;  // a stream parked on a wait
    uint64_t request = 0;   // or an EventSync request to answer
    int32_t peer = -1;      // or a peer to notify of `token`
    uint64_t token = 0;
  };
  // The waiters a record released, and what the event holds after it.
  struct Released {
    std::vector<Waiter> waiters;
    int64_t time_ns = 0;
    Failure failure;
  };
  // An EventQuery's or EventSync's answer.
  struct Status {
    bool done = false;
    int64_t time_ns = 0;
    Failure failure;
  };

  // Executor threads: true when record `target` has completed; otherwise `s` is woken
  // once it has.
  bool reached_or_park(uint64_t target, const StreamQueuePtr& s);
  // Completes record `target` (unless a later one has) with `failure`, at the time now.
  Released complete(uint64_t target, Failure failure);
  // Dispatch thread: true when every issued record has completed; otherwise peer `peer`
  // is notified of `token` once they have.
  bool done_or_notify(int32_t peer, uint64_t token);
  // Dispatch thread: the answer now; nullopt when `sync` and not done (request `request`
  // is answered when it is). A query carries no failure.
  std::optional<Status> answer(uint64_t request, bool sync);

  uint64_t id = 0;
  uint64_t issued = 0;  // dispatch thread only
  std::mutex mu;
  uint64_t completed = 0;  // the highest record that has run
  Failure failure;         // carried by the latest completed record
  int64_t time_ns = 0;
  std::vector<Waiter> waiters;
};
using EventPtr = std::shared_ptr<EventState>;

// Runs a record task of stream `s`: waits for the CUDA work `s` queued (a failure becomes
// a root failure), completes record `target` of `e` with the stream's pending failure,
// and serves the released waiters.
void run_record(StreamQueue& s, EventState& e, uint64_t target, FailureLog& failures,
                Outbox& outbox);
// Wakes, answers and notifies the released waiters.
void release(const EventState::Released& r, Outbox& outbox);

class EventTable {
 public:
  EventPtr find(uint64_t id) const;  // null when never recorded (or destroyed)
  // The event a record of `id` records, made on its first record; null with *problem
  // set when `id` is 0 or the limit is reached.
  EventPtr for_record(uint64_t id, std::string* problem);
  bool erase(uint64_t id) { return events_.erase(id) != 0; }
  size_t size() const { return events_.size(); }
  // The session is ending: every event forgets its waiters.
  void drop_waiters();

 private:
  std::unordered_map<uint64_t, EventPtr> events_;
};

struct RemoteWait {
  // Executor threads: true when the notification has come; otherwise `s` is woken when it
  // comes.
  bool arrived_or_park(const StreamQueuePtr& s);

  std::mutex mu;
  bool arrived = false;
  StreamQueuePtr waiter;
  uint32_t from = 0;
  // A copy's bytes, or why the sender could not send them.
  std::optional<PayloadFrame> payload;
  std::optional<protocol::RemoteFailure> failure;
  // Or where they are (same host): `bytes` bytes at `address` in the sender's process
  // `pid`, held there until this node releases `token` (the one the sender used: a graph
  // replay's differs from its command's).
  struct At {
    uint32_t pid = 0;
    uint64_t address = 0;
    uint64_t bytes = 0;
    uint64_t token = 0;
  };
  std::optional<At> at;
};
using RemoteWaitPtr = std::shared_ptr<RemoteWait>;

class Tokens {
 public:
  // The wait for `token` from `peer`: the entry its notification made (taken out), or a
  // new one. Null with *problem set when kMaxPendingWaits are pending.
  RemoteWaitPtr wait(uint64_t token, uint32_t peer, std::string* problem);
  // A notification of `token` from `from`: fills the wait and wakes its stream, or keeps it
  // for the wait to come. False (nothing changed) when kMaxPendingWaits are pending, or
  // when the entry had arrived already (a second notification before its wait: the first
  // one stays, and the wait still completes with it).
  bool arrive(uint64_t token, uint32_t from, const PayloadFrame* payload,
              const std::optional<protocol::RemoteFailure>& failure,
              const RemoteWait::At* at = nullptr);
  // `peer` is lost to the session: every wait for a token from it that has not arrived
  // completes with `failure` (its stream woken). Returns how many.
  size_t fail_from(uint32_t peer, const protocol::RemoteFailure& failure);
  size_t pending() const { return waits_.size(); }
  // The session is ending: every wait forgets its stream.
  void drop_waiters();

 private:
  std::unordered_map<uint64_t, RemoteWaitPtr> waits_;
};

}  // namespace dtr::worker::detail
