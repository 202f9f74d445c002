// The worker's socket loop: framing, the one session, heartbeats and the connect-mode
// monitor. Message handling is shared by both modes; in connect mode there is no identity
// frame and the single peer is implicit.
#include "worker/server.hpp"

#include <arpa/inet.h>
#include <fmt/format.h>
#include <netdb.h>
#include <netinet/in.h>
#include <spdlog/spdlog.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/sysinfo.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <ctime>
#include <deque>
#include <fstream>
#include <mutex>
#include <optional>
#include <random>
#include <string_view>
#include <thread>
#include <vector>
#include <zmq.hpp>

#include "common/flight_text.hpp"
#include "common/same_host.hpp"
#include "common/trace_clock.hpp"
#include "dtr/device.hpp"
#include "dtr/error.hpp"
#include "protocol/codec.hpp"
#include "protocol/transport.hpp"
#include "security/curve.hpp"
#include "security/log_throttle.hpp"
#include "worker/devices.hpp"
#include "worker/metrics_http.hpp"
#include "worker/recorder.hpp"
#include "worker/session.hpp"

namespace dtr::worker {

namespace proto = dtr::protocol;
using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

namespace {

constexpr milliseconds kMaxPollWait{100};
// On a heartbeat connection nothing but heartbeats (a few bytes) is expected.
constexpr int64_t kMaxBeatBytes = int64_t{64} << 10;
// Messages handled per wakeup before stop() and heartbeats are looked at again.
constexpr int kMaxMessagesPerWakeup = 256;
// With this many commands queued on its streams the session reads no more batches until
// they drain: what waits stays in ZeroMQ's buffers as wire bytes (tens of bytes a command)
// instead of decoded tasks (hundreds).
constexpr size_t kMaxBacklog = size_t{1} << 16;

std::string host_and_pid() {
  char host[256] = {};
  if (gethostname(host, sizeof host - 1) != 0) std::strcpy(host, "unknown-host");
  return fmt::format("{}:{}", host, static_cast<long>(getpid()));
}

uint64_t physical_memory() {
  long pages = sysconf(_SC_PHYS_PAGES);
  long page_size = sysconf(_SC_PAGE_SIZE);
  if (pages <= 0 || page_size <= 0) return 0;
  return static_cast<uint64_t>(pages) * static_cast<uint64_t>(page_size);
}

uint64_t available_memory() {
  std::ifstream in("/proc/meminfo");
  std::string key;
  uint64_t kib = 0;
  while (in >> key >> kib) {
    if (key == "MemAvailable:") return kib * 1024;
    in.ignore(1 << 10, '\n');
  }
  struct sysinfo si {};
  if (sysinfo(&si) == 0) return static_cast<uint64_t>(si.freeram) * si.mem_unit;
  return 0;
}

std::string iso_time_now() {
  std::time_t now = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&now, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

// A routing identity for logs: ZeroMQ's generated ones are binary, so hex.
std::string hex(const std::string& bytes) {
  std::string out;
  for (unsigned char c : bytes) out += fmt::format("{:02x}", c);
  return out;
}

std::string_view view_of(const zmq::message_t& frame) {
  return {frame.data<char>(), frame.size()};
}

// The address this host uses to reach `endpoint`'s host (a UDP socket "connected" there
// sends nothing but learns its local address); empty when it cannot be found.
std::string local_address_towards(const std::string& endpoint) {
  constexpr std::string_view tcp = "tcp://";
  if (endpoint.rfind(tcp, 0) != 0) return {};
  std::string rest = endpoint.substr(tcp.size());
  size_t colon = rest.rfind(':');
  if (colon == std::string::npos) return {};
  std::string host = rest.substr(0, colon);
  if (host.size() > 2 && host.front() == '[') host = host.substr(1, host.size() - 2);
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* res = nullptr;
  if (getaddrinfo(host.c_str(), "9", &hints, &res) != 0 || !res) return {};
  std::string out;
  int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd >= 0 && connect(fd, res->ai_addr, res->ai_addrlen) == 0) {
    sockaddr_in local{};
    socklen_t len = sizeof local;
    char text[INET_ADDRSTRLEN] = {};
    if (getsockname(fd, reinterpret_cast<sockaddr*>(&local), &len) == 0 &&
        inet_ntop(AF_INET, &local.sin_addr, text, sizeof text))
      out = text;
  }
  if (fd >= 0) close(fd);
  freeaddrinfo(res);
  return out;
}

// The host part of a tcp:// endpoint ("" for others and for wildcards).
std::string tcp_host(const std::string& endpoint) {
  constexpr std::string_view tcp = "tcp://";
  if (endpoint.rfind(tcp, 0) != 0) return {};
  std::string rest = endpoint.substr(tcp.size());
  size_t colon = rest.rfind(':');
  std::string host = colon == std::string::npos ? rest : rest.substr(0, colon);
  if (host == "*" || host == "0.0.0.0") return {};
  return host;
}

// An endpoint for this worker's rank of a session's process group: a TCP port the kernel
// picks on `host`, released here and bound again when the master's Setup arrives
// (milliseconds later; the kernel does not hand a just-released port out again at once).
// A port for the session's process group on `host`, chosen by the kernel, and a hold that
// keeps it bound (not listening) until the group binds it: while it is held, no other bind
// of this host (a port the kernel picks for a listener, a lane, a test's server) can take
// it. Released at once, the port was taken in between now and then ("cannot bind ...:
// Address already in use" when the group formed, in a CI run). "" when none.
std::string reserve_pg_endpoint(const std::string& host, std::shared_ptr<void>& hold) {
  hold.reset();
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return {};
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = 0;
  std::string out;
  if (inet_pton(AF_INET, host.c_str(), &addr.sin_addr) == 1 &&
      bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0) {
    socklen_t len = sizeof addr;
    if (getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0)
      out = fmt::format("tcp://{}:{}", host, ntohs(addr.sin_port));
  }
  if (out.empty()) {
    close(fd);
    return out;
  }
  hold = std::shared_ptr<void>(nullptr, [fd](void*) { close(fd); });
  return out;
}

}  // namespace

struct Server::Impl {
  explicit Impl(ServerOptions options);
  ~Impl();

  void loop();
  // Before the loop's poll: polls without sleeping while a message came within opt.spin;
  // sets `wait` to 0 when something is ready.
  void spin(std::vector<zmq::pollitem_t>& items, milliseconds& wait);
  void drain_socket();
  void drain_monitor();
  void drain_peer_socket();
  // The heartbeat thread (beats_loop) sends the session's heartbeats (connect mode: once
  // Setup opened the heartbeat connection); the loop tells it to whom and how often
  // (set_beats, after any change of session). wake_beats: out of its poll (connect mode).
  void set_beats();
  void wake_beats();
  void beats_loop();
  // Connect mode, on the heartbeat thread: waits until `next` on beat_socket (the master's
  // heartbeats stamp heard_master()), then sends one and moves `next` on by `every`.
  void beat_connection(uint64_t epoch, milliseconds every, Clock::time_point& next);
  struct BeatsThread;
  // Whether `socket` has a message to read (ZMQ_EVENTS, under socket_mu).
  bool socket_readable();
  void handle(proto::Received& msg);
  void on_hello(const std::string* identity, std::string_view header);
  void on_batch(const std::string* identity, std::string_view header,
                std::vector<zmq::message_t>& frames, size_t first_payload);
  void on_goodbye(const std::string* identity, std::string_view header);
  void on_setup(const std::string* identity, std::string_view header);
  // A peer's notification; frames[first_payload], when present, is a copy's bytes.
  void on_peer(const std::string* identity, std::string_view header,
               std::vector<zmq::message_t>& frames, size_t first_payload);
  void heartbeat_tick();
  // Called from any thread: queues a message for the loop to send and wakes it.
  void post(Outgoing&& out);
  void drain_outbox();
  zmq::socket_t* peer_dealer(int32_t node);

  bool is_peer(const std::string* identity) const {
    return session && (!identity || *identity == peer);
  }
  // Listen mode: the identity of the session master's heartbeat connection.
  bool is_peer_beat(const std::string* identity) const {
    return session && identity && *identity == peer_beat;
  }
  // The identity to address the session's master with (null in connect mode).
  const std::string* peer_identity() const { return listen_mode ? &peer : nullptr; }
  std::string who(const std::string* identity) const {
    if (!identity) return opt.master;
    if (session && *identity == peer) return peer_client;
    return fmt::format("peer {}", hex(*identity));
  }
  std::string busy_reason() const {
    return fmt::format("busy: serving master {} since {}", peer_client, peer_since);
  }
  bool send(const std::string* identity, std::string header) {
    std::lock_guard lock(socket_mu);
    return proto::send_message(socket, identity, std::move(header), {});
  }
  void protocol_error(const std::string* identity, std::string message);
  // A warning that a peer may repeat at will: logged at most once a minute per `key`, with
  // the count of the ones held back (docs/security.md).
  void warn_throttled(const std::string& key, std::string line) {
    if (std::optional<std::string> l = warnings.admit(key, std::move(line))) spdlog::warn("{}", *l);
  }
  // Ends the session (`what` says why, for the log). `tell_master`: the worker ended it on
  // its own (the master may still be there): a Goodbye with the reason goes to the master,
  // and later messages of that master get one too (ended_), instead of a protocol error.
  // `clean`: the master said goodbye; otherwise the flight recorder goes to the log (and,
  // with `tell_master`, its summary goes with the Goodbye).
  void end_session(std::string_view what, bool tell_master = false, bool clean = false);
  // Anything from the session's master: it is alive. Any thread (the loop, and the
  // heartbeat thread in connect mode); heartbeat_tick() judges silence from the stamp.
  void heard_master() {
    recorder->counters.master_heard_ns.store(
        std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch())
            .count(),
        std::memory_order_relaxed);
  }
  // On the loop's thread: what other threads asked for (a flight recorder dump, a
  // metrics snapshot).
  void serve_requests();
  // The metrics endpoint's body (its thread): a snapshot the loop makes, waited for
  // (bounded), else the last one.
  std::string metrics_text();
  // Listen mode: answers a message from a master whose session this worker ended with a
  // Goodbye saying why; false when `identity` is not one of those.
  bool answer_ended(const std::string* identity);

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
  std::shared_ptr<void> pg_port_hold;  // the session's reserved pg port (reserve_pg_endpoint)
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
  std::string peer_client;  // its "host:pid", from HELLO
  std::string peer_since;   // when the session began, ISO 8601 UTC
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

namespace {

// Throws InvalidArgument naming the first option that is wrong.
void check_options(const ServerOptions& opt) {
  if (opt.listen.empty() == opt.master.empty())
    throw InvalidArgument(
        "worker server: set exactly one of `listen` (bind and wait for masters) and `master` "
        "(dial a master)");
  if (opt.heartbeat.count() <= 0)
    throw InvalidArgument(
        fmt::format("worker server: heartbeat must be positive, got {} ms", opt.heartbeat.count()));
  if (opt.max_message_bytes <= 0)
    throw InvalidArgument(fmt::format("worker server: max_message_bytes must be positive, got {}",
                                      opt.max_message_bytes));
  // Before ZeroMQ sees it: it would bind or dial port 70000 as 4464, and take a missing
  // tcp:// for a non-local address.
  const bool listen = !opt.listen.empty();
  if (auto problem = proto::endpoint_problem(listen ? opt.listen : opt.master, listen))
    throw InvalidArgument(fmt::format(
        "{}: {}", listen ? "worker listen endpoint" : "worker's master endpoint", *problem));
}

}  // namespace

Server::Impl::Impl(ServerOptions options)
    : opt(std::move(options)),
      recorder(std::make_shared<detail::Recorder>(
          detail::RecorderOptions{opt.flight_records, opt.trace_bytes})) {
  check_options(opt);
  listen_mode = !opt.listen.empty();
  const std::string& where = listen_mode ? opt.listen : opt.master;
  guard = std::make_unique<security::Guard>(context, opt.security, [this](const std::string& line) {
    recorder->counters.refused.fetch_add(1, std::memory_order_relaxed);
    warn_throttled(line, line);
  });
  try {
    if (listen_mode) {
      socket = zmq::socket_t(context, zmq::socket_type::router);
      proto::configure_socket(socket, opt.max_message_bytes);
      // A master that sends faster than this worker runs is held back (see
      // protocol::kDataHighWaterMark): what waits stays in bounded queues.
      socket.set(zmq::sockopt::rcvhwm, proto::kDataHighWaterMark);
      guard->server(socket, where, "worker listen endpoint");
      socket.set(zmq::sockopt::router_mandatory, 1);
      // A master that reconnects under the same routing id takes its identity over.
      socket.set(zmq::sockopt::router_handover, 1);
      socket.bind(where);
    } else {
      socket = zmq::socket_t(context, zmq::socket_type::dealer);
      proto::configure_socket(socket, opt.max_message_bytes);
      socket.set(zmq::sockopt::rcvhwm, proto::kDataHighWaterMark);
      data_id = proto::random_routing_id();
      socket.set(zmq::sockopt::routing_id, data_id);
      beat_socket = zmq::socket_t(beat_context, zmq::socket_type::dealer);
      proto::configure_socket(beat_socket, kMaxBeatBytes);
      beat_socket.set(zmq::sockopt::routing_id, proto::beat_identity(data_id));
      // The monitor goes on before connect() so that no event is missed.
      static std::atomic<uint64_t> counter{0};
      std::string address = fmt::format("inproc://dtr-worker-monitor-{}", counter++);
      if (zmq_socket_monitor(
              socket.handle(), address.c_str(),
              ZMQ_EVENT_CONNECTED | ZMQ_EVENT_DISCONNECTED | ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL |
                  ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL | ZMQ_EVENT_HANDSHAKE_FAILED_AUTH) != 0)
        throw zmq::error_t();
      monitor = zmq::socket_t(context, zmq::socket_type::pair);
      proto::configure_socket(monitor, opt.max_message_bytes);
      monitor.connect(address);
      guard->client(socket, where, "master endpoint");
      socket.connect(where);
    }
    endpoint = socket.get(zmq::sockopt::last_endpoint);
  } catch (const zmq::error_t& e) {
    throw TransportError(fmt::format("cannot {} {}: {}", listen_mode ? "listen on" : "connect to",
                                     where, listen_mode ? proto::bind_failure(e.num()) : e.what()));
  }
  if (endpoint.empty()) endpoint = where;
  if (!listen_mode) {
    // Other workers of a session send event notifications here.
    std::string host = opt.peer_host;
    if (host.empty()) host = local_address_towards(where);
    if (host.empty()) host = "127.0.0.1";
    std::string bind_at = where.rfind("ipc://", 0) == 0
                              ? fmt::format("ipc:///tmp/dtr-peer-{}", getpid())
                              : fmt::format("tcp://{}:*", host);
    try {
      peer_socket = zmq::socket_t(context, zmq::socket_type::router);
      proto::configure_socket(peer_socket, opt.max_message_bytes);
      guard->server(peer_socket, bind_at, "worker peer endpoint");
      peer_socket.bind(bind_at);
      peer_endpoint = peer_socket.get(zmq::sockopt::last_endpoint);
    } catch (const zmq::error_t& e) {
      throw TransportError(
          fmt::format("cannot listen for peers on {}: {}", bind_at, proto::bind_failure(e.num())));
    }
  }
  pg_host = opt.peer_host;
  if (pg_host.empty()) pg_host = tcp_host(listen_mode ? endpoint : peer_endpoint);
  if (pg_host.empty()) pg_host = local_address_towards(listen_mode ? "tcp://192.0.2.1:9" : where);
  if (pg_host.empty()) pg_host = "127.0.0.1";
  wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  beat_wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (wake_fd < 0 || beat_wake_fd < 0)
    throw TransportError(fmt::format("eventfd failed: {}", std::strerror(errno)));
  std::string as = opt.name.empty() ? std::string() : fmt::format(" as {}", opt.name);
  if (listen_mode) {
    spdlog::info("listening on {}{}", endpoint, as);
  } else {
    spdlog::info("dialing master {}{}", endpoint, as);
    // Queued until the connection is up; tells the master's ROUTER who we are.
    send(nullptr, proto::encode_heartbeat());
  }
}

Server::Impl::~Impl() {
  metrics.reset();
  session.reset();
  peer_dealers.clear();
  if (beat_socket) beat_socket.close();
  if (peer_socket) peer_socket.close();
  if (wake_fd >= 0) close(wake_fd);
  if (beat_wake_fd >= 0) close(beat_wake_fd);
  if (monitor) {
    zmq_socket_monitor(socket.handle(), nullptr, 0);
    monitor.close();
  }
  socket.close();
}

void Server::Impl::protocol_error(const std::string* identity, std::string message) {
  warn_throttled("protocol error from " + who(identity),
                 fmt::format("protocol error from {}: {}", who(identity), message));
  send(identity,
       proto::encode(proto::reply::ProtocolError{.request = 0, .message = std::move(message)}));
}

void Server::Impl::end_session(std::string_view what, bool tell_master, bool clean) {
  if (!session) return;
  pg_port_hold.reset();
  recorder->counters.session_active.store(false, std::memory_order_relaxed);
  std::string summary;
  if (!clean) {
    protocol::FlightSnapshot d = recorder->dump_to_log(fmt::format("the session ended: {}", what));
    summary = fmt::format("; its last commands:\n{}", common::describe(d, 8, 4, "  "));
  }
  if (tell_master) {
    std::string reason = std::string(what) + summary;
    (void)send(peer_identity(), proto::encode(proto::Goodbye{reason}));
    if (listen_mode) {
      constexpr size_t kRemembered = 16;
      ended_.emplace_back(peer, reason);
      if (ended_.size() > kRemembered) ended_.pop_front();
    }
  }
  size_t n = session->live_tensors();
  session.reset();           // joins its executor threads: nothing posts after this
  recorder->tracer.clear();  // a trace is the session's: the next one starts without it
  {
    std::lock_guard lock(outbox_mu);
    outbox.clear();
  }
  peer_dealers.clear();
  peers.clear();
  spdlog::info("{} (master {}); freed {} tensors", what, peer_client, n);
  peer.clear();
  peer_beat.clear();
  peer_client.clear();
  peer_since.clear();
  set_beats();
}

void Server::Impl::handle(proto::Received& msg) {
  std::vector<zmq::message_t>& frames = msg.frames;
  if (frames.empty()) return;
  std::optional<std::string> id;
  if (listen_mode) id = frames[0].to_string();
  const std::string* identity = id ? &*id : nullptr;
  size_t header_index = listen_mode ? 1 : 0;
  if (is_peer(identity)) heard_master();  // it is alive
  if (is_peer_beat(identity)) {
    // The master's heartbeat connection: anything on it says the master is alive, and
    // nothing but heartbeats is taken from it.
    heard_master();
    return;
  }

  if (frames.size() <= header_index) {
    protocol_error(identity, "message has no header frame");
    return;
  }
  if (msg.truncated) {
    protocol_error(identity, fmt::format("message has more than {} payload frames (the limit)",
                                         proto::kMaxPayloadFrames));
    return;
  }
  std::string_view header = view_of(frames[header_index]);
  proto::MsgType type;
  try {
    type = proto::peek_type(header);
  } catch (const ProtocolError& e) {
    protocol_error(identity, e.what());
    return;
  }
  switch (type) {
    case proto::MsgType::Hello:
      on_hello(identity, header);
      break;
    case proto::MsgType::Batch:
      on_batch(identity, header, frames, header_index + 1);
      break;
    case proto::MsgType::Goodbye:
      on_goodbye(identity, header);
      break;
    case proto::MsgType::Heartbeat:
      break;
    case proto::MsgType::Setup:
      on_setup(identity, header);
      break;
    case proto::MsgType::Peer:
      on_peer(identity, header, frames, header_index + 1);
      break;
    case proto::MsgType::HelloReply:
    case proto::MsgType::Reply:
      protocol_error(identity, fmt::format("unexpected message type {}", static_cast<int>(type)));
      break;
  }
}

void Server::Impl::on_hello(const std::string* identity, std::string_view header) {
  proto::Hello hello;
  try {
    hello = proto::decode_hello(header);
  } catch (const ProtocolError& e) {
    protocol_error(identity, e.what());
    return;
  }
  hello_seen = true;
  proto::HelloReply reply;
  reply.worker = host_and_pid();
  if (hello.version != proto::kVersion) {
    reply.reason = fmt::format("protocol version mismatch: master speaks {}, worker speaks {}",
                               hello.version, proto::kVersion);
    recorder->counters.refused.fetch_add(1, std::memory_order_relaxed);
    warn_throttled("rejected master " + hello.client,
                   fmt::format("rejected master {}: {}", hello.client, reply.reason));
    send(identity, proto::encode(reply));
    return;
  }
  if (session) {
    bool same = !identity || *identity == peer;
    if (same) {
      end_session("master restarted its session");
    } else if (!send(&peer, proto::encode_heartbeat())) {
      end_session("master went away");
    } else {
      reply.reason = busy_reason();
      recorder->counters.refused.fetch_add(1, std::memory_order_relaxed);
      // A master asking again every 200 ms would repeat this line: once a minute.
      warn_throttled("rejected master " + hello.client,
                     fmt::format("rejected master {}: {}", hello.client, reply.reason));
      send(identity, proto::encode(reply));
      return;
    }
  }
  SessionOptions so;
  so.threads = opt.threads;
  so.collective_timeout = opt.collective_timeout;
  so.security = opt.security;
  so.devices = cuda_device_count();
  so.recorder = recorder;
  session = std::make_unique<Session>([this](Outgoing&& out) { post(std::move(out)); }, so);
  recorder->counters.sessions.fetch_add(1, std::memory_order_relaxed);
  recorder->counters.session_active.store(true, std::memory_order_relaxed);
  peer = identity ? *identity : std::string();
  peer_beat = identity ? proto::beat_identity(*identity) : std::string();
  peer_client = hello.client;
  heard_master();
  heartbeat_interval = opt.heartbeat;
  master_timeout = std::chrono::milliseconds(0);
  peer_since = iso_time_now();
  next_heartbeat = Clock::now() + opt.heartbeat;
  set_beats();
  spdlog::info("session started with master {}", peer_client);

  reply.accepted = true;
  reply.threads = session->threads();
  reply.peer_endpoint = peer_endpoint;
  reply.pg_endpoint = reserve_pg_endpoint(pg_host, pg_port_hold);
  if (common::same_host_enabled()) {
    reply.pid = static_cast<uint32_t>(getpid());
    reply.challenge = session->same_host_challenge();
  }
  proto::DeviceInfo cpu;
  cpu.index = -1;
  cpu.name = "cpu";
  cpu.total_memory = physical_memory();
  cpu.free_memory = available_memory();
  reply.devices.push_back(std::move(cpu));
  for (proto::DeviceInfo& d : describe_devices()) reply.devices.push_back(std::move(d));
  if (!send(identity, proto::encode(reply))) end_session("master went away before the reply");
}

bool Server::Impl::answer_ended(const std::string* identity) {
  if (!identity) return false;
  for (auto it = ended_.rbegin(); it != ended_.rend(); ++it) {
    if (it->first != *identity) continue;
    (void)send(identity, proto::encode(proto::Goodbye{it->second}));
    return true;
  }
  return false;
}

void Server::Impl::on_batch(const std::string* identity, std::string_view header,
                            std::vector<zmq::message_t>& frames, size_t first_payload) {
  if (!is_peer(identity)) {
    if (answer_ended(identity)) return;
    protocol_error(identity,
                   session ? busy_reason() : "no session with this master: send HELLO first");
    return;
  }
  size_t n_payloads = frames.size() - first_payload;
  auto batch = std::make_shared<proto::Batch>();
  try {
    *batch = proto::decode_batch(header, n_payloads);
  } catch (const ProtocolError& e) {
    protocol_error(identity, e.what());
    return;
  }
  std::vector<PayloadFrame> payloads;
  payloads.reserve(n_payloads);
  for (size_t i = first_payload; i < frames.size(); ++i) {
    std::shared_ptr<zmq::message_t> owner = proto::share_frame(std::move(frames[i]));
    // data() after the move: a small message keeps its bytes inside the object.
    payloads.push_back(PayloadFrame{owner->data(), owner->size(), owner});
  }
  try {
    session->run(std::move(batch), payloads);
  } catch (const std::exception& e) {
    spdlog::error("batch from master {} failed: {}", peer_client, e.what());
    protocol_error(identity, fmt::format("worker failed running the batch: {}", e.what()));
  }
  drain_outbox();
}

void Server::Impl::on_setup(const std::string* identity, std::string_view header) {
  if (!is_peer(identity)) {
    if (answer_ended(identity)) return;
    protocol_error(identity,
                   session ? busy_reason() : "no session with this master: send HELLO first");
    return;
  }
  proto::Setup setup;
  try {
    setup = proto::decode_setup(header);
  } catch (const ProtocolError& e) {
    protocol_error(identity, e.what());
    return;
  }
  peers = std::move(setup.peers);
  if (setup.heartbeat_ms > 0)
    heartbeat_interval = std::min(opt.heartbeat, std::chrono::milliseconds(setup.heartbeat_ms));
  if (setup.master_timeout_ms > 0)
    master_timeout = std::chrono::milliseconds(setup.master_timeout_ms);
  next_heartbeat = Clock::now();
  if (!listen_mode && !beat_connected) {
    try {
      guard->client(beat_socket, opt.master, "master endpoint");
      beat_socket.connect(opt.master);
      beat_connected = true;  // the heartbeat thread's from set_beats() on
    } catch (const zmq::error_t& e) {
      spdlog::error("cannot open the heartbeat connection to master {}: {}", opt.master, e.what());
    }
  }
  set_beats();
  peer_dealers.clear();
  peer_dealers.resize(peers.size());
  session->setup(setup.node, static_cast<uint32_t>(peers.size()), setup.session,
                 std::move(setup.pg_endpoints), std::move(setup.backend), std::move(pg_port_hold));
  spdlog::info("session with master {}: this worker is node {} of {}", peer_client, setup.node,
               peers.size());
}

void Server::Impl::on_peer(const std::string* identity, std::string_view header,
                           std::vector<zmq::message_t>& frames, size_t first_payload) {
  proto::PeerNotify n;
  try {
    n = proto::decode_peer_notify(header);
    if (frames.size() > first_payload + 1)
      throw ProtocolError(fmt::format("peer message carries {} payload frames, at most 1",
                                      frames.size() - first_payload));
  } catch (const ProtocolError& e) {
    // No reply: peers do not read them, and a stranger gets nothing to work with.
    warn_throttled("bad peer message from " + who(identity),
                   fmt::format("bad peer message from {}: {}", who(identity), e.what()));
    return;
  }
  std::optional<PayloadFrame> payload;
  if (frames.size() == first_payload + 1) {
    std::shared_ptr<zmq::message_t> owner = proto::share_frame(std::move(frames[first_payload]));
    payload = PayloadFrame{owner->data(), owner->size(), owner};
  }
  if (!session || !session->notify(n, payload ? &*payload : nullptr))
    spdlog::warn("peer notification from node {} (session {:#x}) is not for this session; dropped",
                 n.from_node, n.session);
}

void Server::Impl::post(Outgoing&& out) {
  {
    std::lock_guard lock(outbox_mu);
    outbox.push_back(std::move(out));
  }
  // On the loop's own thread (a reply made while it dispatches) the loop sends it before
  // it sleeps again: no wake-up needed.
  if (std::this_thread::get_id() == loop_thread.load(std::memory_order_relaxed)) return;
  uint64_t one = 1;
  [[maybe_unused]] ssize_t n = write(wake_fd, &one, sizeof one);
}

zmq::socket_t* Server::Impl::peer_dealer(int32_t node) {
  if (node < 0 || static_cast<size_t>(node) >= peers.size()) return nullptr;
  std::unique_ptr<zmq::socket_t>& d = peer_dealers[static_cast<size_t>(node)];
  if (!d) {
    try {
      d = std::make_unique<zmq::socket_t>(context, zmq::socket_type::dealer);
      proto::configure_socket(*d, opt.max_message_bytes);
      // Notifications queue until the connection is up; keep them when closing too.
      d->set(zmq::sockopt::linger, 1000);
      guard->client(*d, peers[static_cast<size_t>(node)], fmt::format("node {}", node));
      d->connect(peers[static_cast<size_t>(node)]);
    } catch (const AuthenticationError& e) {
      spdlog::error("cannot reach node {}: {}", node, e.what());
      d.reset();
      return nullptr;
    } catch (const zmq::error_t& e) {
      spdlog::error("cannot connect to node {} at {}: {}", node, peers[static_cast<size_t>(node)],
                    e.what());
      d.reset();
      return nullptr;
    }
  }
  return d.get();
}

void Server::Impl::drain_outbox() {
  uint64_t count;
  [[maybe_unused]] ssize_t n = read(wake_fd, &count, sizeof count);
  std::vector<Outgoing> out;
  {
    std::lock_guard lock(outbox_mu);
    out.swap(outbox);
  }
  for (Outgoing& o : out) {
    if (o.peer >= 0) {
      zmq::socket_t* d = peer_dealer(o.peer);
      if (!d || !proto::send_message(*d, nullptr, std::move(o.header), o.payloads))
        spdlog::error("could not notify node {}", o.peer);
      continue;
    }
    if (!session) continue;
    bool sent;
    {
      std::lock_guard lock(socket_mu);
      sent = proto::send_message(socket, peer_identity(), std::move(o.header), o.payloads);
    }
    if (!sent) {
      // A master that ended its session cleanly said goodbye before it went: read what it
      // sent before calling it gone (and dumping the flight recorder for nothing).
      drain_socket();
      if (session) end_session("master went away");
      return;
    }
  }
}

void Server::Impl::on_goodbye(const std::string* identity, std::string_view header) {
  if (is_peer(identity)) {
    std::string reason;  // a master that ended it for a reason says which
    try {
      reason = proto::decode_goodbye(header).reason.substr(0, 1024);  // a log line
    } catch (const ProtocolError&) {
    }
    end_session(reason.empty() ? std::string("session ended") : "session ended: " + reason, false,
                /*clean=*/true);
  } else {
    spdlog::debug("goodbye from {} without a session; ignored", who(identity));
  }
  if (!listen_mode) finished = true;
}

void Server::Impl::heartbeat_tick() {
  if (!session) return;
  Clock::time_point now = Clock::now();
  const Clock::time_point heard{
      std::chrono::duration_cast<Clock::duration>(std::chrono::nanoseconds(
          recorder->counters.master_heard_ns.load(std::memory_order_relaxed)))};
  if (master_timeout.count() > 0 && now - heard > master_timeout) {
    end_session(fmt::format("master silent for more than {} ms", master_timeout.count()),
                /*tell_master=*/true);
    if (!listen_mode) finished = true;
    return;
  }
  if (now < next_heartbeat) return;
  next_heartbeat = now + heartbeat_interval;
  if (listen_mode || beat_connected) {
    // The heartbeat thread sends them; it says when the master could not be reached.
    uint64_t epoch;
    std::string why;
    {
      std::lock_guard lock(beat_mu);
      epoch = beat_plan.epoch;
      why = beat_failure;
    }
    if (beat_unreachable.load() == epoch) end_session(why.empty() ? "master went away" : why);
    return;
  }
  // Connect mode before Setup opened the heartbeat connection: on the data connection.
  if (!send(nullptr, proto::encode_heartbeat())) end_session("master went away");
}

void Server::Impl::set_beats() {
  {
    std::lock_guard lock(beat_mu);
    beat_plan.on = session != nullptr && (listen_mode || beat_connected);
    beat_plan.own_socket = !listen_mode;
    beat_plan.to = peer_beat;
    beat_plan.fallback = peer;
    beat_plan.every = heartbeat_interval;
    ++beat_plan.epoch;
  }
  beat_cv.notify_one();
  wake_beats();
}

void Server::Impl::wake_beats() {
  uint64_t one = 1;
  [[maybe_unused]] ssize_t n = write(beat_wake_fd, &one, sizeof one);
}

bool Server::Impl::socket_readable() {
  std::lock_guard lock(socket_mu);
  return (socket.get(zmq::sockopt::events) & ZMQ_POLLIN) != 0;
}

void Server::Impl::beats_loop() {
  std::unique_lock lock(beat_mu);
  uint64_t epoch = 0;  // the plan being followed
  Clock::time_point next;
  while (!beat_stop) {
    if (!beat_plan.on) {
      beat_cv.wait(lock, [&] { return beat_stop || beat_plan.on; });
      continue;
    }
    if (beat_plan.epoch != epoch) {
      // A new session, or its Setup's interval: the first beat one interval from now (the
      // master reads the HELLO reply first on the data connection).
      epoch = beat_plan.epoch;
      next = Clock::now() + beat_plan.every;
    }
    if (beat_plan.own_socket) {
      const milliseconds every = beat_plan.every;
      lock.unlock();
      beat_connection(epoch, every, next);
      lock.lock();
      continue;
    }
    if (beat_cv.wait_until(lock, next, [&] { return beat_stop || beat_plan.epoch != epoch; }))
      continue;
    const BeatPlan plan = beat_plan;
    lock.unlock();
    bool sent, readable;
    {
      std::lock_guard socket_lock(socket_mu);
      // The master's heartbeat connection, or its data connection until that one is up.
      sent = proto::send_message(socket, &plan.to, proto::encode_heartbeat(), {}) ||
             proto::send_message(socket, &plan.fallback, proto::encode_heartbeat(), {});
      // Using the socket may have taken the ZMQ_FD signal of a message the loop is to read.
      readable = (socket.get(zmq::sockopt::events) & ZMQ_POLLIN) != 0;
    }
    if (!sent) beat_unreachable.store(plan.epoch);
    if (!sent || readable) {
      uint64_t one = 1;
      [[maybe_unused]] ssize_t n = write(wake_fd, &one, sizeof one);
    }
    lock.lock();
    next = Clock::now() + plan.every;
  }
}

void Server::Impl::beat_connection(uint64_t epoch, milliseconds every, Clock::time_point& next) {
  std::array<zmq::pollitem_t, 2> items{
      {{beat_socket.handle(), 0, ZMQ_POLLIN, 0}, {nullptr, beat_wake_fd, ZMQ_POLLIN, 0}}};
  try {
    const auto wait = std::chrono::ceil<milliseconds>(next - Clock::now());
    zmq::poll(items.data(), items.size(), std::max(wait, milliseconds{0}));
    if (items[1].revents & ZMQ_POLLIN) {
      uint64_t count;
      [[maybe_unused]] ssize_t n = read(beat_wake_fd, &count, sizeof count);
    }
    // Anything on it says the master is alive (nothing but heartbeats is taken from it).
    bool heard = false;
    while (proto::try_recv(beat_socket, 1)) heard = true;
    if (heard) heard_master();
    if (Clock::now() >= next) {
      (void)proto::send_message(beat_socket, nullptr, proto::encode_heartbeat(), {});
      next = Clock::now() + every;
    }
  } catch (const zmq::error_t& e) {
    if (e.num() == EINTR) return;
    // Not expected (the socket is this thread's): without heartbeats the master will count
    // this worker lost, so end the session now, saying why.
    std::lock_guard lock(beat_mu);
    beat_failure =
        fmt::format("the heartbeat connection to master {} failed: {}", opt.master, e.what());
    beat_unreachable.store(epoch);
    beat_plan.on = false;
  }
}

void Server::Impl::drain_socket() {
  size_t max_frames = proto::kMaxPayloadFrames + (listen_mode ? 2 : 1);
  for (int i = 0; i < kMaxMessagesPerWakeup && !stopping.load() && !finished; ++i) {
    backlogged = session && session->backlog() >= kMaxBacklog;
    if (backlogged) {
      // Unread messages wait: the master is not silent, this worker is behind.
      heard_master();
      return;
    }
    std::optional<proto::Received> msg;
    {
      std::lock_guard lock(socket_mu);
      msg = proto::try_recv(socket, max_frames);
    }
    if (!msg) return;
    handle(*msg);
  }
}

void Server::Impl::drain_peer_socket() {
  for (int i = 0; i < kMaxMessagesPerWakeup; ++i) {
    std::optional<proto::Received> msg = proto::try_recv(peer_socket, 3);
    if (!msg) return;
    if (msg->frames.size() < 2 || msg->truncated) continue;
    std::string id = msg->frames[0].to_string();
    std::string_view header = view_of(msg->frames[1]);
    try {
      if (proto::peek_type(header) == proto::MsgType::Peer) {
        on_peer(&id, header, msg->frames, 2);
        continue;
      }
    } catch (const ProtocolError& e) {
      warn_throttled("bad message on the peer socket",
                     fmt::format("bad message on the peer socket: {}", e.what()));
      continue;
    }
    warn_throttled("unexpected message on the peer socket",
                   "unexpected message on the peer socket; dropped");
  }
}

void Server::Impl::drain_monitor() {
  while (std::optional<proto::Received> ev = proto::try_recv(monitor, 2)) {
    if (ev->frames.empty() || ev->frames[0].size() < sizeof(uint16_t)) continue;
    uint16_t event = 0;
    std::memcpy(&event, ev->frames[0].data(), sizeof event);
    if (event == ZMQ_EVENT_CONNECTED) {
      connected = true;
      spdlog::info("connected to master {}", endpoint);
    } else if (event == ZMQ_EVENT_DISCONNECTED && connected) {
      master_gone = true;
    } else if (event == ZMQ_EVENT_HANDSHAKE_FAILED_AUTH ||
               event == ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL ||
               event == ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL) {
      uint32_t value = 0;
      if (ev->frames[0].size() >= 6)
        std::memcpy(&value, static_cast<const char*>(ev->frames[0].data()) + 2, sizeof value);
      std::string why =
          security::handshake_failure_text(event, value, guard->curve(), "the master");
      if (why != handshake_failure) spdlog::error("master {}: {}", endpoint, why);
      handshake_failure = why;
    }
  }
}

void Server::Impl::spin(std::vector<zmq::pollitem_t>& items, milliseconds& wait) {
  // Soon after a message: poll without sleeping (yielding, so that the ZeroMQ I/O thread
  // that brings the next one runs), then sleep as usual once nothing came for opt.spin.
  // items[0] is `socket`'s ZMQ_FD: its messages are seen in ZMQ_EVENTS.
  while (wait.count() > 0 && Clock::now() < active_until && !stopping.load()) {
    if ((items[0].events != 0 && socket_readable()) ||
        zmq::poll(items.data() + 1, items.size() - 1, milliseconds{0}) > 0) {
      wait = milliseconds{0};  // the poll below returns at once with the same events
      return;
    }
    std::this_thread::yield();
  }
}

// Runs beats_loop() for the scope (the loop's run).
struct Server::Impl::BeatsThread {
  Impl& s;
  std::thread t;
  explicit BeatsThread(Impl& impl) : s(impl) {
    {
      std::lock_guard lock(s.beat_mu);
      s.beat_stop = false;
    }
    t = std::thread([this] { s.beats_loop(); });
  }
  ~BeatsThread() {
    if (!t.joinable()) return;
    {
      std::lock_guard lock(s.beat_mu);
      s.beat_stop = true;
    }
    s.beat_cv.notify_one();
    s.wake_beats();
    t.join();
  }
};

void Server::Impl::loop() {
  loop_thread.store(std::this_thread::get_id());
  struct Leave {
    std::atomic<std::thread::id>& id;
    ~Leave() { id.store(std::thread::id{}); }
  } leave{loop_thread};
  Clock::time_point hello_deadline = Clock::now() + opt.connect_timeout;
  int socket_fd;
  {
    std::lock_guard lock(socket_mu);
    socket_fd = socket.get(zmq::sockopt::fd);
  }
  // `socket` is polled through its ZMQ_FD (the heartbeat thread uses it too): readable
  // when the socket's state may have changed, its messages then seen in ZMQ_EVENTS.
  std::vector<zmq::pollitem_t> items{{nullptr, socket_fd, ZMQ_POLLIN, 0},
                                     {nullptr, wake_fd, ZMQ_POLLIN, 0}};
  BeatsThread beats(*this);  // the session's heartbeats go out from it
  if (!listen_mode) {
    items.push_back({monitor.handle(), 0, ZMQ_POLLIN, 0});
    items.push_back({peer_socket.handle(), 0, ZMQ_POLLIN, 0});
  }

  while (!stopping.load() && !finished) {
    milliseconds wait = kMaxPollWait;
    if (session) {
      auto until = std::chrono::ceil<milliseconds>(next_heartbeat - Clock::now());
      wait = std::clamp(until, milliseconds{0}, kMaxPollWait);
    }
    // Behind: look again soon, without waking for the messages that are left unread.
    if (backlogged && session && session->backlog() < kMaxBacklog) backlogged = false;
    items[0].events = backlogged ? 0 : ZMQ_POLLIN;
    if (backlogged) wait = std::min(wait, milliseconds{1});
    drain_outbox();  // what this thread posted since its last drain (post() did not wake it)
    try {
      spin(items, wait);
      // A message already waiting does not signal the ZMQ_FD again: look before sleeping.
      if (!backlogged && socket_readable()) wait = milliseconds{0};
      zmq::poll(items, wait);
    } catch (const zmq::error_t& e) {
      if (e.num() == EINTR) continue;
      throw;
    }
    if (!backlogged && socket_readable()) active_until = Clock::now() + opt.spin;
    drain_socket();
    drain_outbox();
    if (!listen_mode) {
      drain_peer_socket();
      drain_monitor();
      // A refused handshake does not get better by retrying: say why and stop.
      if (!hello_seen && !finished && !handshake_failure.empty())
        throw AuthenticationError(
            fmt::format("cannot join master {}: {}", endpoint, handshake_failure));
      if (master_gone && !finished) {
        drain_socket();  // what the master sent before it went
        if (!finished) {
          if (session) {
            end_session("master went away");
          } else {
            spdlog::warn("master {} went away", endpoint);
          }
          finished = true;
        }
      }
      if (!hello_seen && !finished && Clock::now() >= hello_deadline)
        throw TimeoutError(fmt::format("no HELLO from master {} within {} ms", endpoint,
                                       opt.connect_timeout.count()));
    }
    heartbeat_tick();
    serve_requests();
  }
}

void Server::Impl::serve_requests() {
  if (int64_t ms = stall_ms.exchange(0); ms > 0) std::this_thread::sleep_for(milliseconds(ms));
  if (flight_wanted.exchange(false)) {
    std::string reason;
    {
      std::lock_guard lock(requests_mu);
      reason = flight_reason;
    }
    protocol::FlightSnapshot d = recorder->dump_to_log(reason);
    if (session) {  // the master gets it too
      post(Outgoing{proto::encode(proto::reply::Flight{.flight = std::move(d)}), {}, -1});
    }
  }
  if (metrics_wanted.exchange(false)) {
    proto::NodeMetrics m;
    if (session) {
      m = session->metrics();
    } else {
      recorder->fill(m);
      m.devices.push_back({-1, 0, cpu_memory_stats().bytes_in_use});
      m.threads = opt.threads;
    }
    std::string text = detail::prometheus_text(m, opt.name.empty() ? host_and_pid() : opt.name);
    {
      std::lock_guard lock(requests_mu);
      metrics_snapshot = std::move(text);
      ++metrics_version;
    }
    metrics_cv.notify_all();
  }
}

std::string Server::Impl::metrics_text() {
  std::unique_lock lock(requests_mu);
  const uint64_t seen = metrics_version;
  metrics_wanted.store(true);
  uint64_t one = 1;
  [[maybe_unused]] ssize_t n = write(wake_fd, &one, sizeof one);
  // The loop answers within its next round (it wakes at least every 100 ms); a loop busy
  // with a long batch gets the last snapshot served instead.
  metrics_cv.wait_for(lock, std::chrono::milliseconds(1000),
                      [&] { return metrics_version != seen; });
  if (metrics_version == 0) return "# no snapshot yet: the worker's loop is busy\n";
  return metrics_snapshot;
}

Server::Server(ServerOptions options) : impl_(std::make_unique<Impl>(std::move(options))) {
  Impl& m = *impl_;
  if (m.opt.metrics_port >= 0) {
    m.metrics = std::make_unique<MetricsServer>(m.opt.metrics_address, m.opt.metrics_port,
                                                [&m] { return m.metrics_text(); });
    spdlog::info("metrics on {}", m.metrics->url());
  }
}

void Server::dump_flight(std::string reason) {
  {
    std::lock_guard lock(impl_->requests_mu);
    impl_->flight_reason = std::move(reason);
  }
  impl_->flight_wanted.store(true);
  uint64_t one = 1;
  [[maybe_unused]] ssize_t n = write(impl_->wake_fd, &one, sizeof one);
}

void Server::stall_loop_for_test(std::chrono::milliseconds how_long) {
  impl_->stall_ms.store(how_long.count());
  uint64_t one = 1;
  [[maybe_unused]] ssize_t n = write(impl_->wake_fd, &one, sizeof one);
}

std::string Server::metrics_url() const {
  return impl_->metrics ? impl_->metrics->url() : std::string();
}

Server::~Server() = default;

std::string Server::endpoint() const {
  return impl_->endpoint;
}

void Server::run() {
  if (impl_->running.exchange(true)) throw InvalidArgument("Server::run: already running");
  struct Reset {
    std::atomic<bool>& flag;
    ~Reset() { flag.store(false); }
  } reset{impl_->running};
  try {
    impl_->loop();
  } catch (const zmq::error_t& e) {
    throw TransportError(fmt::format("worker socket {} failed: {}", impl_->endpoint, e.what()));
  }
}

void Server::stop() {
  impl_->stopping.store(true);
}

}  // namespace dtr::worker
