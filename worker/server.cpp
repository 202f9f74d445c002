// The worker's server: its API, and its construction in named steps (the jobs of the
// loop are in the files worker/server_impl.hpp lists).
#include "worker/server.hpp"

#include <arpa/inet.h>
#include <fmt/format.h>
#include <netdb.h>
#include <netinet/in.h>
#include <spdlog/spdlog.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "dtr/error.hpp"
#include "worker/server_impl.hpp"

namespace dtr::worker {

namespace proto = dtr::protocol;
using namespace server_detail;

namespace server_detail {

std::string host_and_pid() {
  char host[256] = {};
  if (gethostname(host, sizeof host - 1) != 0) std::strcpy(host, "unknown-host");
  return fmt::format("{}:{}", host, static_cast<long>(getpid()));
}

// A routing identity for logs: ZeroMQ's generated ones are binary, so hex.
std::string hex(const std::string& bytes) {
  std::string out;
  for (unsigned char c : bytes) out += fmt::format("{:02x}", c);
  return out;
}

void signal_fd(int fd) {
  uint64_t one = 1;
  [[maybe_unused]] ssize_t n = write(fd, &one, sizeof one);
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

}  // namespace server_detail

namespace {

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

// Throws InvalidArgument naming the first option that is wrong.
void check_options(const ServerOptions& opt) {
  if (opt.listen.empty() == opt.master.empty())
    throw InvalidArgument(
        "worker server: set exactly one of `listen` (bind and wait for masters) and `master` "
        "(dial a master)");
  if (opt.heartbeat.count() <= 0)
    throw InvalidArgument(
        fmt::format("worker server: heartbeat must be positive, got {} ms", opt.heartbeat.count()));
  if (opt.max_message_bytes < proto::kMinMessageBytes)
    throw InvalidArgument(fmt::format(
        "worker server: max_message_bytes must be at least {} (64 KiB: room for any command "
        "header), got {}",
        proto::kMinMessageBytes, opt.max_message_bytes));
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
    // The ZAP thread's: keyed by its own line (which names the peer's address), not by the
    // loop's `source` (the loop thread's alone).
    recorder->counters.refused.fetch_add(1, std::memory_order_relaxed);
    if (std::optional<std::string> l = warnings.admit(line, line)) spdlog::warn("{}", *l);
  });
  try {
    if (listen_mode)
      open_listen_socket(where);
    else
      open_connect_socket(where);
    endpoint = socket.get(zmq::sockopt::last_endpoint);
  } catch (const zmq::error_t& e) {
    throw TransportError(fmt::format("cannot {} {}: {}", listen_mode ? "listen on" : "connect to",
                                     where, listen_mode ? proto::bind_failure(e.num()) : e.what()));
  }
  if (endpoint.empty()) endpoint = where;
  if (!listen_mode) open_peer_socket(where);
  choose_pg_host(where);
  open_wake_fds();
  std::string as = opt.name.empty() ? std::string() : fmt::format(" as {}", opt.name);
  if (listen_mode) {
    spdlog::info("listening on {}{}", endpoint, as);
  } else {
    spdlog::info("dialing master {}{}", endpoint, as);
    // Queued until the connection is up; tells the master's ROUTER who we are.
    send(nullptr, proto::encode_heartbeat());
  }
}

void Server::Impl::open_listen_socket(const std::string& where) {
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
}

void Server::Impl::open_connect_socket(const std::string& where) {
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

void Server::Impl::choose_pg_host(const std::string& where) {
  pg_host = opt.peer_host;
  if (pg_host.empty()) pg_host = tcp_host(listen_mode ? endpoint : peer_endpoint);
  if (pg_host.empty()) pg_host = local_address_towards(listen_mode ? "tcp://192.0.2.1:9" : where);
  if (pg_host.empty()) pg_host = "127.0.0.1";
}

void Server::Impl::open_wake_fds() {
  wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  beat_wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (wake_fd < 0 || beat_wake_fd < 0)
    throw TransportError(fmt::format("eventfd failed: {}", std::strerror(errno)));
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
  signal_fd(impl_->wake_fd);
}

void Server::stall_loop_for_test(std::chrono::milliseconds how_long) {
  impl_->stall_ms.store(how_long.count());
  signal_fd(impl_->wake_fd);
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
