// Server::Impl: the worker daemon's socket loop, split by job. Private to the server's
// files (worker/server.hpp is the API; namespace dtr::worker).
//
// The jobs, each in a file of its own:
//   worker/server.cpp         the Server API, and construction in named steps (options
//                             checked, the data socket bound or dialed, the peer socket,
//                             the process groups' host, the wake-up eventfds);
//   worker/io_loop.cpp        the loop: poll (spinning a while after a message), read what
//                             came and route it by message type, run batches on the
//                             session, send what the session posted, protocol errors, the
//                             connect-mode monitor, and requests from other threads
//                             (a flight recorder dump, a metrics snapshot);
//   worker/handshake.cpp      HELLO (version, busy, the reply with this worker's threads,
//                             devices, peer and process-group endpoints) and Setup;
//   worker/session_table.cpp  the one session: its start and end, GOODBYE, and the
//                             answers to masters whose sessions this worker ended;
//   worker/liveness.cpp       heartbeats (the heartbeat thread: its plan, its loop, the
//                             connect-mode heartbeat connection) and the master's silence;
//   worker/peer_links.cpp     the other workers: one DEALER per peer node for what the
//                             session sends them, and the peer socket and peer messages.
//
// Thread safety: every member is the loop's thread's (the thread in run(); construction
// and destruction on one thread, not concurrently with it), except: `socket`, used by the
// loop and the heartbeat thread under `socket_mu`; the heartbeat plan and its state under
// `beat_mu` (and `beat_unreachable`, atomic); `outbox` under `outbox_mu` (post() from any
// thread); the requests (`flight_wanted`, `metrics_wanted`, `stall_ms` atomic; the reason
// and snapshot under `requests_mu`); `stopping`, `running`, `loop_thread` (atomic).
#pragma once

#include <zmq.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>
#include <zmq.hpp>

#include "common/printable.hpp"
#include "protocol/codec.hpp"
#include "protocol/transport.hpp"
#include "security/curve.hpp"
#include "security/log_throttle.hpp"
#include "worker/metrics_http.hpp"
#include "worker/recorder.hpp"
#include "worker/server.hpp"
#include "worker/session.hpp"

namespace dtr::worker {

namespace server_detail {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

inline constexpr milliseconds kMaxPollWait{100};
// On a heartbeat connection nothing but heartbeats (a few bytes) is expected.
inline constexpr int64_t kMaxBeatBytes = int64_t{64} << 10;
// Messages handled per wakeup before stop() and heartbeats are looked at again.
inline constexpr int kMaxMessagesPerWakeup = 256;
// With this many commands queued on its streams the session reads no more batches until
// they drain: what waits stays in ZeroMQ's buffers as wire bytes (tens of bytes a command)
// instead of decoded tasks (hundreds).
inline constexpr size_t kMaxBacklog = size_t{1} << 16;

// "host:pid" of this process.
std::string host_and_pid();
// A routing identity for logs: ZeroMQ's generated ones are binary, so hex.
std::string hex(const std::string& bytes);
inline std::string_view view_of(const zmq::message_t& frame) {
  return {frame.data<char>(), frame.size()};
}
// Where a received frame came from: ZeroMQ's "Peer-Address" property (the TCP peer's IP,
// escaped), or "a local peer" where there is none (ipc://, inproc://). Unlike a routing id
// or a client name, a client cannot change it by reconnecting.
inline std::string source_address(zmq::message_t& frame) {
  const char* address = zmq_msg_gets(frame.handle(), "Peer-Address");
  return address && *address ? common::printable(address, 64) : std::string("a local peer");
}
// Wakes whoever polls `fd` (an eventfd).
void signal_fd(int fd);
// The address this host uses to reach `endpoint`'s host; empty when it cannot be found.
std::string local_address_towards(const std::string& endpoint);

}  // namespace server_detail

struct Server::Impl {
  using Clock = server_detail::Clock;
  using milliseconds = server_detail::milliseconds;

  // ---- construction (worker/server.cpp) ----
  explicit Impl(ServerOptions options);
  ~Impl();
  void open_listen_socket(const std::string& where);
  void open_connect_socket(const std::string& where);
  void choose_pg_host(const std::string& where);
  void open_wake_fds();

  // ---- the loop (worker/io_loop.cpp) ----
  void loop();
  // Sleeps on `items` until something comes (at most until the next heartbeat is due),
  // after sending what this thread posted; false when a signal interrupted the poll.
  bool wait_for_messages(std::vector<zmq::pollitem_t>& items);
  // Connect mode, after each turn: a refused handshake, the master gone, no HELLO in time.
  void watch_master(Clock::time_point hello_deadline);
  // Before the loop's poll: polls without sleeping while a message came within opt.spin;
  // sets `wait` to 0 when something is ready.
  void spin(std::vector<zmq::pollitem_t>& items, milliseconds& wait);
  void drain_socket();
  void drain_monitor();
  // Whether `socket` has a message to read (ZMQ_EVENTS, under socket_mu).
  bool socket_readable();
  // Routes a message by its type.
  void handle(protocol::Received& msg);
  void on_batch(const std::string* identity, std::string_view header,
                std::vector<zmq::message_t>& frames, size_t first_payload);
  // Called from any thread: queues a message for the loop to send and wakes it.
  void post(Outgoing&& out);
  void drain_outbox();
  bool send(const std::string* identity, std::string header) {
    std::lock_guard lock(socket_mu);
    return protocol::send_message(socket, identity, std::move(header), {});
  }
  void protocol_error(const std::string* identity, std::string message);
  // A warning that a peer may repeat at will: logged at most once a minute per `kind` and
  // source address of the message being handled (`source`; never what the peer claims,
  // such as its name or routing id), and at most 32 a minute in total, with the counts of
  // the ones held back (docs/security.md). Peer strings in `line` must already be escaped
  // (common::printable). The loop's thread only (it reads `source`).
  void warn_throttled(const std::string& kind, std::string line);
  // On the loop's thread: what other threads asked for (a flight recorder dump, a
  // metrics snapshot).
  void serve_requests();
  // The metrics endpoint's body (its thread): a snapshot the loop makes, waited for
  // (bounded), else the last one.
  std::string metrics_text();

  // ---- the handshake (worker/handshake.cpp) ----
  void on_hello(const std::string* identity, std::string_view header);
  // A refused HELLO: counted, logged (throttled), and `reply` (saying why) sent.
  void refuse_hello(const std::string* identity, const protocol::Hello& hello,
                    const protocol::HelloReply& reply);
  // A second HELLO while a session is open: the same master restarts it, a gone one loses
  // it; false (the master told "busy") when the session stays.
  bool make_room_for(const std::string* identity, const protocol::Hello& hello,
                     protocol::HelloReply& reply);
  // The accepting reply: this worker's threads, endpoints and devices.
  protocol::HelloReply accept_reply(protocol::HelloReply reply);
  void on_setup(const std::string* identity, std::string_view header);

  // ---- the session table (worker/session_table.cpp) ----
  bool is_peer(const std::string* identity) const {
    return session && (!identity || *identity == peer);
  }
  // Listen mode: the identity of the session master's heartbeat connection.
  bool is_peer_beat(const std::string* identity) const {
    return session && identity && *identity == peer_beat;
  }
  // The identity to address the session's master with (null in connect mode).
  const std::string* peer_identity() const { return listen_mode ? &peer : nullptr; }
  std::string who(const std::string* identity) const;
  std::string busy_reason() const;
  // A session with the master `identity` (null in connect mode) whose HELLO said `client`.
  void start_session(const std::string* identity, const std::string& client);
  // Ends the session (`what` says why, for the log). `tell_master`: the worker ended it on
  // its own (the master may still be there): a Goodbye with the reason goes to the master,
  // and later messages of that master get one too (ended_), instead of a protocol error.
  // `clean`: the master said goodbye; otherwise the flight recorder goes to the log (and,
  // with `tell_master`, its summary goes with the Goodbye).
  void end_session(std::string_view what, bool tell_master = false, bool clean = false);
  void on_goodbye(const std::string* identity, std::string_view header);
  // Listen mode: answers a message from a master whose session this worker ended with a
  // Goodbye saying why; false when `identity` is not one of those.
  bool answer_ended(const std::string* identity);
  // A message that needs a session from a master that has none: a Goodbye (answer_ended)
  // or a protocol error. True when `identity` is the session's master.
  bool from_session_master(const std::string* identity);

  // ---- liveness (worker/liveness.cpp) ----
  // Anything from the session's master: it is alive. Any thread (the loop, and the
  // heartbeat thread in connect mode); heartbeat_tick() judges silence from the stamp.
  void heard_master();
  // The loop's side: ends a silent master's session, sends heartbeats the heartbeat thread
  // does not (connect mode before Setup), ends the session when it could not.
  void heartbeat_tick();
  // The heartbeat thread (beats_loop) sends the session's heartbeats (connect mode: once
  // Setup opened the heartbeat connection); the loop tells it to whom and how often
  // (set_beats, after any change of session). wake_beats: out of its poll (connect mode).
  void set_beats();
  void wake_beats();
  // The master's Setup: its heartbeat interval and silence limit, and (connect mode) the
  // heartbeat connection, which the heartbeat thread takes over.
  void follow_setup(const protocol::Setup& setup);
  void beats_loop();
  // Listen mode, on the heartbeat thread: one heartbeat through `socket` at `plan`'s time.
  struct BeatPlan;
  void beat_through_socket(const BeatPlan& plan);
  // Connect mode, on the heartbeat thread: waits until `next` on beat_socket (the master's
  // heartbeats stamp heard_master()), then sends one and moves `next` on by `every`.
  void beat_connection(uint64_t epoch, milliseconds every, Clock::time_point& next);
  // Runs beats_loop() for its scope (the loop's run).
  struct BeatsThread {
    Impl& s;
    std::thread t;
    explicit BeatsThread(Impl& impl);
    ~BeatsThread();
  };

  // ---- peer links (worker/peer_links.cpp) ----
  // Connect mode: binds the socket where the session's other workers reach this one.
  void open_peer_socket(const std::string& where);
  // The session's peer table from Setup (dealers opened on first use).
  void set_peers(std::vector<std::string> endpoints);
  void clear_peers();
  zmq::socket_t* peer_dealer(int32_t node);
  void drain_peer_socket();
  // A peer's notification; frames[first_payload], when present, is a copy's bytes.
  void on_peer(const std::string* identity, std::string_view header,
               std::vector<zmq::message_t>& frames, size_t first_payload);

  ServerOptions opt;
  bool listen_mode;
  // Before the guard, which counts refusals in it.
  std::shared_ptr<detail::Recorder> recorder;
  // Before the guard, whose thread reports through it until the guard stops.
  security::LogThrottle warnings{std::chrono::minutes(1)};
  zmq::context_t context{1};
  // Connect mode: beat_socket's, with an I/O thread of its own, so that a GiB-sized message
  // that `context`'s I/O thread is reading or writing never holds a heartbeat back.
  zmq::context_t beat_context{1};
  // Before the sockets: they bind under its ZAP handler and close before it stops.
  std::unique_ptr<security::Guard> guard;
  std::string handshake_failure;  // connect mode: why the master refused us, if it did
  zmq::socket_t socket;
  // Every use of `socket` once the loop runs: the loop and the heartbeat thread share it.
  // The loop sleeps on its ZMQ_FD and looks at ZMQ_EVENTS before it does.
  std::mutex socket_mu;
  zmq::socket_t monitor;  // connect mode: events of `socket`
  // Connect mode: the heartbeat connection to the master (connected at Setup), whose
  // routing id is protocol::beat_identity(data_id); `socket`'s is data_id.
  zmq::socket_t beat_socket;
  std::string data_id;
  bool beat_connected = false;
  zmq::socket_t peer_socket;  // connect mode: where the session's other workers reach us
  std::string endpoint;
  std::string peer_endpoint;           // connect mode: advertised in HELLO's reply
  std::string pg_host;                 // where the sessions' process groups bind
  std::shared_ptr<void> pg_port_hold;  // the session's reserved pg port (handshake.cpp)
  int wake_fd = -1;
  std::atomic<std::thread::id> loop_thread{};  // the thread in loop(), while it runs
  std::mutex outbox_mu;
  std::vector<Outgoing> outbox;
  std::vector<std::string> peers;  // the session's peer table (from Setup)
  std::vector<std::unique_ptr<zmq::socket_t>> peer_dealers;
  std::atomic<bool> stopping{false};
  std::atomic<bool> running{false};

  std::unique_ptr<Session> session;
  std::string peer;       // routing identity of the session's master (listen mode)
  std::string peer_beat;  // ... and of its heartbeat connection
  // Sessions this worker ended on its own: the master's identity and why (the last few).
  std::deque<std::pair<std::string, std::string>> ended_;
  std::string peer_client;  // its "host:pid", from HELLO (escaped: common::printable)
  // The source address of the message the loop is handling ("10.0.0.5", or "a local peer"
  // for ipc:// and inproc://), for warn_throttled's keys and lines.
  std::string source;
  std::string peer_since;  // when the session began, ISO 8601 UTC
  Clock::time_point next_heartbeat;
  std::chrono::milliseconds heartbeat_interval{1000};  // this session's (Setup may lower it)
  std::chrono::milliseconds master_timeout{0};         // 0: no silence limit (before Setup)
  // What the heartbeat thread sends, set by the loop (under beat_mu). Its own thread, so
  // that a loop busy with a GiB-sized message, or starved of CPU by the transfer, still
  // sends them on time. Listen mode: through `socket` (shared under socket_mu). Connect
  // mode: once Setup connected `beat_socket`, the thread owns it (sends, and reads the
  // master's heartbeats); before that the loop sends them on the data connection.
  struct BeatPlan {
    bool on = false;
    bool own_socket = false;   // connect mode: beat_socket is the thread's
    std::string to, fallback;  // listen mode: the master's heartbeat and data connections
    milliseconds every{1000};
    uint64_t epoch = 0;  // which session (and interval) the plan is for
  };
  std::mutex beat_mu;
  std::condition_variable beat_cv;
  BeatPlan beat_plan;
  bool beat_stop = false;
  // The plan's epoch when the master could not be reached at all: the loop ends that
  // session, saying beat_failure (under beat_mu), or "master went away".
  std::atomic<uint64_t> beat_unreachable{0};
  std::string beat_failure;
  int beat_wake_fd = -1;  // wakes the heartbeat thread from its poll (connect mode)

  // connect mode
  bool connected = false;
  bool master_gone = false;
  bool hello_seen = false;
  bool finished = false;           // run() returns
  Clock::time_point active_until;  // the loop spins before it sleeps until then (spin())
  bool backlogged = false;         // the session's streams have enough queued: stop reading

  // Observability: requests from other threads, served by the loop (serve_requests()).
  std::atomic<bool> flight_wanted{false};
  std::mutex requests_mu;  // guards flight_reason and the metrics snapshot
  std::condition_variable metrics_cv;
  std::string flight_reason;
  std::atomic<bool> metrics_wanted{false};
  std::atomic<int64_t> stall_ms{0};  // stall_loop_for_test
  std::string metrics_snapshot;
  uint64_t metrics_version = 0;
  std::unique_ptr<MetricsServer> metrics;  // last: it stops before the rest goes
};

}  // namespace dtr::worker
