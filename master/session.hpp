// MasterSession: the connections to a master's workers and the I/O thread that owns them.
//
// User threads encode commands into a per-node batch (under the node's mutex) and wake
// the I/O thread only when it sleeps; the I/O thread sends whatever has accumulated as
// one message per node, so commands coalesce by themselves while it is busy. Requests
// (get, sync, stats) register a promise fulfilled from the reply; the requesting thread
// does the I/O itself while it waits whenever the I/O thread is not doing it (it flushes,
// then reads the sockets until its reply is there), so a round trip crosses no thread
// hand-off on the master.
//
// Observability (docs/observability.md): at the start the master measures each node's
// clock offset (ClockSync round trips); while a trace is recorded every queued command
// and request goes to the master's timeline (master/trace.hpp); flight recorder dumps the
// workers send unasked are kept, and the error for a lost node or a collective that failed
// waiting for its members names the last commands each node reported.
//
// Liveness: in connect mode (the master connects to listening workers) a thread of its
// own, on a ZeroMQ context of its own, sends heartbeats on each node's heartbeat connection,
// reads the node's, and declares a node lost that was silent for heartbeat_timeout. So a
// master whose callers or I/O thread are busy (a GiB-sized reply being handled, a CPU
// starved by the transfer itself) still sends and hears heartbeats on time. In listen mode
// the heartbeats share the master's one ROUTER socket, and the I/O thread handles them.
//
// Thread safety: every public member may be called from any thread. After the handshake
// (which runs before the I/O thread starts) the ZeroMQ sockets are used only under
// io_mu_, by the I/O thread or by one waiting requester; the heartbeat connections of
// connect mode only by the heartbeat thread.
//
// Where it is implemented, one job per file: master/session.cpp (start, shutdown),
// master/connect.cpp (the handshake: HELLO, heartbeat connections, Setup, same-host attach),
// master/requests.cpp (queuing commands, requests and the wait for their replies),
// master/io_loop.cpp (the I/O thread, flushes and sends), master/replies.cpp (reading and
// routing what the workers send), master/liveness.cpp (heartbeats, silence, lost nodes),
// master/observability.cpp (clocks, traces, flight reports), master/graph.cpp (captures).
// One node's state is a WorkerNode (master/worker_node.hpp).
#pragma once

#include <poll.h>

#include <atomic>
#include <chrono>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <variant>
#include <vector>
#include <zmq.hpp>

#include "dtr/distributed.hpp"
#include "dtr/error.hpp"
#include "dtr/observability.hpp"
#include "master/trace.hpp"
#include "master/worker_node.hpp"
#include "protocol/codec.hpp"
#include "protocol/messages.hpp"
#include "protocol/transport.hpp"
#include "security/curve.hpp"

namespace dtr::detail {

struct ReplyMessage {
  protocol::Reply reply;
  local::Tensor payload;  // Get replies: the tensor's values
};

// The reply of type R in `m`, node `node`'s answer to `what` ("get", "an event request");
// throws ProtocolError when the node answered with another reply.
template <class R>
R& expect_reply(ReplyMessage& m, int node, std::string_view what) {
  if (R* r = std::get_if<R>(&m.reply)) return *r;
  throw ProtocolError("node " + std::to_string(node) + " answered " + std::string(what) +
                      " with a " + std::string(protocol::reply_name(m.reply)) + " reply");
}
template <class R>
R expect_reply(ReplyMessage&& m, int node, std::string_view what) {
  return std::move(expect_reply<R>(m, node, what));
}

class MasterSession;
class Capture;  // master/capture.hpp

// The running session; throws InvalidArgument naming `what` when there is none.
std::shared_ptr<MasterSession> current_session(std::string_view what);
// Throws IndexError unless `node` is one of the session's nodes.
void check_node(std::string_view what, const MasterSession& s, int node);
std::string device_name(int device);
// The RemoteError for a failure reported by `node`.
RemoteError remote_error(int node, const protocol::RemoteFailure& f);
// The id of this thread's current stream on `node` (master/stream.cpp).
uint32_t current_stream_id(const MasterSession& s, int node);
// What Setup carries for MasterOptions::backend (its value, else $DTR_BACKEND): "" for the
// workers' default, "gloo" or "mpi"; InvalidArgument for any other name
// (master/connect.cpp).
std::string setup_backend(std::string name);

class MasterSession : public std::enable_shared_from_this<MasterSession> {
 public:
  using Clock = std::chrono::steady_clock;
  // Connects (or waits for workers), says hello to each and starts the I/O thread.
  static std::shared_ptr<MasterSession> start(const MasterOptions& options);
  ~MasterSession();
  MasterSession(const MasterSession&) = delete;
  MasterSession& operator=(const MasterSession&) = delete;

  // Flushes, says goodbye to every worker, stops the I/O thread. Idempotent.
  void shutdown();
  bool closed() const { return closed_.load(); }

  int node_count() const { return static_cast<int>(nodes_.size()); }
  const protocol::HelloReply& hello(int node) const { return nodes_[node]->hello; }
  const std::string& endpoint(int node) const { return nodes_[node]->endpoint; }

  uint64_t new_id() { return next_id_.fetch_add(1, std::memory_order_relaxed); }
  uint32_t new_stream_id() { return next_stream_.fetch_add(1, std::memory_order_relaxed); }
  uint64_t new_graph_id() { return next_graph_.fetch_add(1, std::memory_order_relaxed); }

  // Captured graphs (master/capture.hpp): whether any thread captures into this session;
  // a capture registers while it records (its thread's commands are then diverted to it).
  bool capturing() const { return capturing_.load(std::memory_order_relaxed) != 0; }
  void begin_capture(Capture* c);
  void end_capture(Capture* c);
  // Queues replay `replay` of graph `graph` on each of `nodes`; with `ordered` (the graph
  // holds collectives) under the lock that orders collectives across nodes; `small` (its
  // commands were all small work) as Wake::kLazy.
  void enqueue_replay(const std::vector<int>& nodes, uint64_t graph, uint64_t replay, bool ordered,
                      bool small);

  // Queues one collective command per node (commands[i] to nodes[i]) under one lock, so
  // that every node sees the session's collectives in the same order; makes the group of
  // `nodes` (in that order) on every node first, once. Sets each command's group.
  void enqueue_collective(const std::vector<int>& nodes,
                          std::vector<protocol::cmd::Collective> commands);
  // Who sends a queued command, and when.
  enum class Wake {
    kNow,   // the I/O thread is woken for it (and flushes within kFirstDelay or the cork)
    kLazy,  // small work (a Free, an op on a few elements): the I/O thread is woken only
            // from a long sleep; while the session is busy it goes with the next message
            // to the node (a request's, typically) or the I/O thread's next look, within
            // kDoze. A round trip after small async ops then wakes no thread for them.
    kNone,  // the caller flushes it itself (request())
  };
  // Queues a command; returns at once. `payload` (Put) must stay unchanged until the
  // worker has it: callers follow a Put with a request.
  void enqueue(int node, const protocol::Command& c, const local::Tensor* payload = nullptr,
               Wake how = Wake::kNow);
  // The same for an op (the hot path: no variant to build); true when a capture on this
  // thread took it (master/capture.hpp) instead.
  bool enqueue(int node, const protocol::cmd::RunOp& c, Wake how);
  // Message limits. ZeroMQ drops a connection that sends a frame larger than its receiver
  // takes (worker: dtr-worker --max-message-bytes, in its HelloReply; master:
  // kMaxMessageBytes), and the commands on it with it. So a tensor's bytes that would travel
  // as one frame are checked at the call site: throws InvalidArgument naming `op`, the
  // tensor, its size, the receiver and its limit. `to` is a node index, or -1 for the master.
  void check_frame(const char* op, int to, int64_t bytes, std::string_view tensor) const;
  // The largest frame node `node` takes, and the header size at which a node's batch is
  // handed to the I/O thread before more is added (half the limit: room for the commands
  // that other threads add meanwhile).
  int64_t message_limit(int node) const { return nodes_[node]->hello.max_message_bytes; }
  static constexpr int64_t kMaxMessageBytes = int64_t{16} << 30;  // the master's own
  // Same-host payloads with `node` (see WorkerNode): whether, why not, and the worker's process.
  bool same_host(int node) const { return nodes_[node]->same_host; }
  const std::string& same_host_note(int node) const { return nodes_[node]->same_host_note; }
  uint32_t worker_pid(int node) const { return nodes_[node]->hello.pid; }
  // dist_send's PutFrom of `t` to `node` ended without its reply (kept) or with it (the
  // kept ones are released: the worker has run every earlier command).
  void orphan(int node, local::Tensor t);
  void release_orphans(int node);
  // Throws WorkerLost when `node` is lost (see MasterOptions::heartbeat_timeout), naming
  // the last commands each node reported.
  void check_alive(int node);
  // Queues a request command (one with a `request` field, which is set here) and waits for
  // the reply.
  // Throws TimeoutError, WorkerLost, TransportError (session closed) or ProtocolError
  // (the worker rejected a message or sent a malformed one).
  // Sends cmd::Cancel to `node` (-1: every live node): the ops queued there and not yet
  // started do not run (dtr::cancel). Returns at once; never throws. A request whose wait
  // the wait interrupt check ends calls it for every node.
  void cancel(int node) noexcept;
  // The failures replies carried for requests nobody waited for any more (see
  // orphaned_failures_), for synchronize() to report; emptied.
  std::vector<protocol::RemoteFailure> take_orphaned_failures(int node);
  // `f` was raised to the caller (to_local, item): its cause is no longer kept for
  // synchronize() (the worker counts it reported too).
  void forget_orphaned_cause(int node, const protocol::RemoteFailure& f);
  ReplyMessage request(int node, protocol::Command c);
  ReplyMessage request(int node, protocol::Command c, std::chrono::milliseconds timeout);

  // ---- observability (docs/observability.md) ----
  // Starts / stops the session's timeline (dtr/observability.hpp).
  void start_trace();
  TraceSummary stop_trace(const std::string& path);
  bool tracing() const { return trace_.on(); }
  // Where DTR_TRACE (MasterOptions::trace_path) asks the trace to go; "" for none.
  const std::string& trace_path() const { return options_.trace_path; }
  // Node `node`'s steady clock minus this master's, and the bound of that measurement.
  std::pair<int64_t, int64_t> clock_offset(int node);
  // What each node reported lately, in words: live nodes are asked now (bounded), lost
  // ones give the dump they sent before they were lost, if any.
  std::string flight_report();
  // The RemoteError for failure `f` reported by `node`; one of a collective that failed
  // waiting for its members (the node said so with a flight dump) names the last
  // commands each node reported.
  RemoteError explain(int node, const protocol::RemoteFailure& f);
  // Tests only: holds the I/O lock for `how_long`, as a requester handling a GiB-sized
  // reply would (nothing is flushed or read on the data connections meanwhile).
  void hold_io_for_test(std::chrono::milliseconds how_long);

 private:
  using Node = WorkerNode;

  // ---- master/session.cpp: start and end ----
  explicit MasterSession(const MasterOptions& options);

  // ---- master/connect.cpp: the handshake ----
  void connect_workers();
  void accept_workers();
  // Connect mode, after the worker's HELLO reply: the heartbeat connection to it, up
  // (handshake done) by `deadline` or TimeoutError.
  void open_beat(Node& node, Clock::time_point deadline);
  // Tells each worker its node index and where the other workers listen for peers.
  void send_setup();
  // Finds out, per node, whether tensor bytes can move by direct copy (Node::same_host):
  // Attach, then the challenge read back (common/same_host.hpp).
  void attach_same_host();
  // That for one node: "" when attached, else why not.
  std::string attach(Node& node);

  // ---- master/requests.cpp: queuing commands, requests ----
  // After a command was queued for `n` (`full`: its batch is at the backpressure count or
  // half the worker's largest message): tells the I/O thread, wakes whoever sleeps on the
  // sockets (unless the caller flushes itself), and holds a caller with a full batch until
  // the I/O thread has taken it.
  void after_enqueue(Node& n, bool full, Wake how);
  // request(): until `future` is ready or `deadline`, this thread does the I/O itself
  // whenever the I/O thread is not (it sends the request and takes the reply with no
  // hand-off between threads); false on timeout.
  bool await_reply(std::future<ReplyMessage>& future, Clock::time_point deadline);
  // await_reply() with io_mu_ held: flushes and reads (spinning until `spin_until`, which
  // await_reply sets once per request, then sleeping on the sockets) until the reply is
  // here (true) or `until`.
  bool hold_io(std::future<ReplyMessage>& future, Clock::time_point until,
               Clock::time_point spin_until);

  // ---- master/io_loop.cpp: the I/O thread, flushes and sends ----
  void wake();
  void io_loop();
  // One round of the I/O work, under io_mu_: flush the batches (`flush`), heartbeats and
  // the silence check, then read every socket until it has nothing.
  void service(bool flush);
  // Sleeps until a socket (with `with_sockets`) or the wake fd (with `with_wake`) may have
  // input, or timeout; without io_mu_.
  void wait_sockets(std::chrono::milliseconds timeout, bool with_wake, bool with_sockets);
  // Under io_mu_: whether a socket has a message to read (ZMQ_EVENTS; its ZMQ_FD need not
  // signal for one that arrived while the socket was in use).
  bool input_waiting();
  void flush_all();
  // Sends a batch message without blocking: false when the worker's queue is full (the
  // message is kept as the node's `unsent`) or the node is lost (fail_node).
  bool send_to(Node& node, std::string header, std::span<const local::Tensor> payloads);
  // The node's unsent message, first: true when it went (or there was none).
  bool send_unsent(Node& node);
  // send_to() of a message already shared (a retry keeps the same bytes).
  bool send_batch(Node& node, std::shared_ptr<const std::string> header,
                  std::vector<local::Tensor> payloads);
  // One non-blocking send to the node; an unreachable node is failed (fail_node).
  protocol::SendResult try_send_to(Node& node, const std::shared_ptr<const std::string>& header,
                                   std::span<const local::Tensor> payloads);
  // A message outside the batches (heartbeat, goodbye): dropped when the queue is full.
  void send_control(Node& node, std::string header);
  // In a burst of commands, the I/O thread's next flush waits until this long after the
  // last one (io_loop).
  static constexpr std::chrono::microseconds kCork{30};
  // Outside a burst the I/O thread waits this long before it flushes work it was woken
  // for, unless a requester holds the I/O: a program's async commands followed by a
  // request (`(x + 1).item()`) then leave as one message, which the requester sends.
  static constexpr std::chrono::microseconds kFirstDelay{15};
  // While anything was flushed within kDozeWindow the idle I/O thread looks again after
  // kDoze (so Wake::kLazy work waits at most that long); then it sleeps for kIdlePoll.
  static constexpr std::chrono::milliseconds kDoze{1};
  static constexpr std::chrono::milliseconds kDozeWindow{100};

  // ---- master/replies.cpp: reading what the workers send ----
  void receive_all();
  // node < 0: a ROUTER whose first frame names the worker.
  void receive(zmq::socket_t& socket, int node);
  void dispatch(int node, protocol::Received& msg, size_t first);
  // A reply whose request nobody waits for: its failures go to orphaned_failures_ (under
  // pending_mu_, which the caller holds).
  void keep_orphaned_failures(int node, const protocol::Reply& reply);

  // ---- master/liveness.cpp: heartbeats, silence, lost nodes ----
  // Marks the node lost (once) and fails its pending requests with WorkerLost(why).
  void fail_node(int node, const std::string& why);
  // The silence check, by the I/O owner in listen mode, by the heartbeat thread in connect
  // mode; and in connect mode the heartbeats to the workers.
  void liveness(Clock::time_point now);
  // Connect mode: the heartbeat thread (reads and sends on the heartbeat connections,
  // checks silence) until shutdown() wakes it through beat_wake_fd_.
  void beat_loop();
  // Listen mode: the heartbeat thread sends the workers' heartbeats through router_ (under
  // router_mu_) every MasterOptions::heartbeat, so that they go out on time while the I/O
  // owner is busy or starved of CPU (the workers end a session whose master is silent),
  // until shutdown() wakes it through beat_wake_fd_. The I/O owner reads what comes.
  void listen_beat_loop();
  // Listen mode (the workers dialed this master). Any thread (router_ itself is not).
  bool listening() const { return !options_.listen.empty(); }
  // The heartbeat thread, for a node silent past the timeout: whether the data connections
  // were read since it was first found so (else asks the I/O owner for a pass).
  bool data_read_since_silent(Node& node, Clock::time_point now);
  // How soon the heartbeat thread looks again at a node it suspects.
  static constexpr std::chrono::milliseconds kSuspectLook{2};
  // One heartbeat to `node`, on its heartbeat connection when that is up.
  void send_beat(Node& node);

  // ---- master/observability.cpp ----
  // Throws the WorkerLost of lost node `node`, with the flight report (made once).
  [[noreturn]] void throw_lost(int node);
  // Measures each live node's clock offset (a few ClockSync round trips each).
  void measure_clocks();
  // A flight dump node `node` sent unasked (I/O thread).
  void note_flight(int node, protocol::FlightSnapshot d);

  // ---- master/graph.cpp: captures ----
  // While a thread captures: the command is the capture's (true), or goes out (false).
  bool divert(int node, const protocol::Command& c, Wake how);
  bool divert(int node, const protocol::cmd::RunOp& c, Wake how);
  // Throws InvalidArgument when the calling thread captures: `c` is a sync point.
  void refuse_sync_point_in_capture(const protocol::Command& c) const;

  MasterOptions options_;
  zmq::context_t context_;
  // Connect mode: the heartbeat connections' own context (its own ZeroMQ I/O thread, which
  // no GiB-sized message keeps busy).
  zmq::context_t beat_context_;
  // Before the guard: its thread writes them (the refusal callback) until it is stopped.
  std::mutex refusals_mu_;
  std::string last_refusal_;  // listen mode: the last peer the guard refused
  // Before the sockets: they bind under its ZAP handler and close before it stops.
  std::unique_ptr<security::Guard> guard_;
  std::unique_ptr<zmq::socket_t> router_;  // listen mode
  // Listen mode, once the session runs: every use of router_ (the I/O owner's, and the
  // heartbeat thread's sends). Held for one socket call at a time, never while waiting.
  std::mutex router_mu_;
  std::vector<std::unique_ptr<Node>> nodes_;
  std::unordered_map<std::string, int> node_of_identity_;

  std::atomic<uint64_t> next_id_{1};
  std::atomic<uint32_t> next_stream_{1};
  std::atomic<uint64_t> next_graph_{1};
  std::atomic<int> capturing_{0};  // captures recording now (any thread)
  std::mutex captures_mu_;         // guards captures_
  std::vector<Capture*> captures_;
  std::mutex collectives_mu_;  // orders collectives and group creation across nodes
  std::map<std::vector<int>, uint64_t> groups_;
  uint64_t next_group_ = 1;
  uint64_t session_id_ = 0;
  std::atomic<uint64_t> next_request_{1};
  std::mutex pending_mu_;
  struct Pending {
    int node;
    std::promise<ReplyMessage> promise;
  };
  std::unordered_map<uint64_t, Pending> pending_;
  // Failures a reply carried after its requester had left (an interrupted synchronize() or
  // to_local()): the worker counts them reported, so they are kept here, by node, for the
  // next synchronize() (under pending_mu_; at most kMaxErrorsPerReply per node).
  std::map<int, std::vector<protocol::RemoteFailure>> orphaned_failures_;

  // The sockets are used by whichever thread holds io_mu_: the I/O thread, or a requester
  // waiting for its reply (request()). They sleep on the sockets' ZMQ_FDs without it.
  std::mutex io_mu_;
  bool io_closed_ = false;  // under io_mu_: the sockets are closed
  std::vector<pollfd> socket_fds_;
  Clock::time_point next_heartbeat_;  // connect mode: the heartbeat thread's
  int wake_fd_ = -1;
  std::atomic<bool> work_pending_{false};
  std::atomic<bool> sleeping_{false};         // the I/O thread sleeps
  std::atomic<bool> dozing_{false};           // ... and looks again within kDoze
  std::atomic<bool> holder_sleeping_{false};  // a requester holding the I/O sleeps
  std::atomic<bool> holder_{false};           // a requester holds the I/O (hold_io)
  std::atomic<Clock::rep> last_flush_{0};     // when flush_all last ran (steady clock)
  std::atomic<bool> blocked_{false};          // the last flush left a message unsent (a full queue)
  std::atomic<bool> stop_{false};
  std::atomic<bool> closed_{false};
  std::mutex shutdown_mu_;
  std::thread io_thread_;
  std::thread beat_thread_;                  // beat_loop() or listen_beat_loop()
  int beat_wake_fd_ = -1;                    // wakes the heartbeat thread to stop
  std::atomic<uint64_t> receive_passes_{0};  // receive_all() calls ended
  MasterTrace trace_;
  std::mutex trace_mu_;  // serializes start_trace and stop_trace
  std::mutex clock_mu_;  // guards the nodes' clock offsets
};

}  // namespace dtr::detail
