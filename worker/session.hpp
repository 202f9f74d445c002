// Session: one master's tensors, streams and events on this worker, and the execution of
// its commands. Knows nothing of sockets: the server hands it decoded batches, payload
// frames and peer notifications, and sends what it emits, so tests and fuzzers drive it
// directly.
//
// Dispatch and execution. run() checks and resolves each command on the calling (the
// dispatch) thread: ids become references to tensor slots, stream ids become streams.
// What needs no data (put, free, stream and event bookkeeping, queries) is done there;
// the rest becomes a task on the command's stream. Streams are serial queues on a thread
// pool (worker/executor.hpp): one stream runs in order, different streams concurrently.
// Small CPU work (an op other than a matrix product, or a get, with ready inputs of at
// most 32 Ki elements) on an idle stream runs at once on the dispatch thread instead, a
// bounded amount per batch: nothing of that stream is pending, so the order holds.
//
// Parts. worker/session.cpp is a thin multiplexer: it routes each command (protocol/
// commands.hpp) to its handler, which checks and resolves the command with the parts below
// and stages its task, and each task to its runner (a visit of the task's typed command).
// The handlers and runners live by area (worker/session_impl.hpp lists the files). Each
// part is internal (namespace dtr::worker::detail), in its own header, which states its
// thread-safety contract:
//  - worker/tensor_table.hpp  Slot (a tensor's readiness, failure, parked streams, CUDA
//                             write event) and the id -> slot table with its id checks;
//  - worker/streams.hpp       Task, StreamQueue (serial queue, park and wake, slices), the
//                             staging and flush of dispatched tasks, stream create and
//                             destroy, retired streams, barriers (Sync, Stats);
//  - worker/events.hpp        EventState (records, waiters), the record's run, the
//                             cross-node tokens (RemoteWait) and their limits;
//  - worker/peer_copy.hpp     SendPeer and RecvPeer tasks;
//  - worker/collectives.hpp   process groups (Group, GroupThread, NewGroup) and the
//                             collective task;
//  - worker/device_order.hpp  the per-stream CUDA streams and the ordering of CUDA work
//                             between them (use(), wrote());
//  - worker/failures.hpp      root and dependent failures, the unreported list and its
//                             cap, mark_reported, Sync's failures and Stats replies;
//  - worker/outbox.hpp        what the session sends (replies, peer notifications) and
//                             this node's identity from Setup.
//
// Ordering rules, the same for CPU streams as CUDA's:
//  - commands of one stream run in the order sent;
//  - a stream that waits on an event runs nothing after the wait until the event's latest
//    record (as of the wait) has run; the event may live on another node, whose worker
//    notifies this one directly (NotifyPeer / WaitRemote, see protocol/messages.hpp);
//  - Sync and Stats are barriers over every stream.
//  - A copy to another node (SendPeer here, RecvPeer there) sends the tensor's bytes
//    worker to worker when the sending stream gets to it; the receiving stream waits for
//    them. A failed source fails the copy on the receiving node, naming the cause.
//  - A collective (all_reduce, broadcast, all_gather, reduce_scatter over the session's
//    process group or a subgroup) runs when its stream gets there, on an executor thread
//    that blocks until every member has joined (bounded by collective_timeout). The
//    members first agree on whether every input is valid; if one failed, every member's
//    output fails naming the node, and nobody computes with it.
// Unlike CUDA, reading a tensor that another stream has not finished producing waits for
// it instead of reading unwritten memory; writes in place to a tensor another stream
// reads are not ordered unless events order them (the user's job, as in CUDA).
//
// Memory safety: a queued command holds its tensors, so a tensor freed by the master
// while another stream still uses it lives until that use has run.
//
// Errors: every command is checked before it is queued (ids unknown, reused or zero;
// payload sizes; streams; events); a failing op marks its output failed, dependents fail
// with a pointer to the first cause, other streams go on. An event recorded on a stream
// after a failure carries the first failure since the stream's previous record.
//
// Where the parts keep these rules: a stream pops a task only after it has run, and runs
// on one thread at a time (streams.hpp); a wait parks its stream on the event's waiters
// for the generation current at dispatch (events.hpp); a barrier is one task per stream,
// retired ones included (streams.hpp); a task holds its slots (tensor_table.hpp); CUDA
// work on one tensor from different streams is ordered by the slot's write event
// (device_order.hpp). No part wakes a stream or emits with one of its locks held.
//
// Observability (docs/observability.md): every command goes to the worker's flight
// recorder, its count to the metrics, and while tracing, its slice to the timeline
// (worker/recorder.hpp); ClockSync, Trace, FlightDump and Metrics are answered at dispatch
// (Trace's Stop after a barrier, as Sync). A lost peer (NodeLost) or a collective that
// fails waiting for its members dumps the flight recorder to the log and to the master.
//
// Thread safety: run(), setup(), notify(), live_tensors(), metrics() and the destructor
// are called from one dispatch thread. `emit` is called from any thread (executor threads too),
// never with a session lock held. wait_idle() and stats() from any thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "dtr/security.hpp"
#include "dtr/tensor.hpp"
#include "protocol/messages.hpp"

namespace dtr::worker {

namespace detail {
class Recorder;  // worker/recorder.hpp
}

// A received payload frame: its bytes, kept alive by `owner`.
struct PayloadFrame {
  void* data = nullptr;
  size_t size = 0;
  std::shared_ptr<void> owner;
};

// A message to send: the header frame, then one frame per payload tensor's bytes.
// peer < 0: a reply to the master; otherwise a peer message for node `peer`.
struct Outgoing {
  std::string header;
  std::vector<local::Tensor> payloads;  // each contiguous
  int32_t peer = -1;
};

using Emit = std::function<void(Outgoing&&)>;

struct SessionOptions {
  unsigned threads = 0;  // executor threads; 0: one per hardware thread
  // Bound on the session's process-group waits (rendezvous, each collective).
  std::chrono::milliseconds collective_timeout{300000};
  // The links of the session's process group use the worker's key (dtr/security.hpp).
  SecurityConfig security;
  // CUDA devices commands may name (cuda:0 to cuda:devices-1); the server passes
  // cuda::device_count().
  int devices = 0;
  // The worker's flight recorder, tracer and counters (worker/recorder.hpp), shared by
  // its sessions; null: the session makes its own.
  std::shared_ptr<detail::Recorder> recorder;
};

class Session {
 public:
  explicit Session(Emit emit, SessionOptions options = {});
  // Drops queued commands, waits for running ones, frees everything.
  ~Session();
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

  // Checks, resolves and queues the commands in order. payloads[i] is frame i+1 of the
  // message. Replies are emitted when their commands run.
  void run(std::shared_ptr<const protocol::Batch> batch, std::span<const PayloadFrame> payloads);
  // This worker's node index and the session's id (from the master's Setup). With
  // `pg_endpoints` (one per node), the workers form the session's process group in the
  // background: this node binds pg_endpoints[node]; collectives wait for it. `backend`:
  // the group's backend for host tensors ("" for this worker's default, or "gloo").
  // `port_hold`: see Groups::setup.
  void setup(uint32_t node, uint32_t nodes, uint64_t session_id,
             std::vector<std::string> pg_endpoints = {}, std::string backend = {},
             std::shared_ptr<void> port_hold = nullptr);
  // A peer's notification, with the tensor's bytes for a copy; false (and nothing
  // changed) when it is not for this session.
  bool notify(const protocol::PeerNotify& n, const PayloadFrame* payload = nullptr);

  // Waits until every stream has run what it was given or is waiting on an event.
  bool wait_idle(std::chrono::milliseconds timeout);
  size_t live_tensors() const;
  size_t streams() const;
  // Tasks queued on the streams and not yet run (any thread; approximate).
  size_t backlog() const;
  unsigned threads() const;
  // The challenge a master must hold in its memory for this session to read it there
  // (HelloReply::challenge; common/same_host.hpp). Fixed for the session.
  uint64_t same_host_challenge() const;
  protocol::MemoryStatsWire stats() const;
  // The live figures (docs/observability.md): the recorder's, and the session's streams'
  // queues, tensors per device and threads. Dispatch thread.
  protocol::NodeMetrics metrics() const;
  detail::Recorder& recorder();

  struct Impl;  // implementation (worker/session_impl.hpp)

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace dtr::worker
