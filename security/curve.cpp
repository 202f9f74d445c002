// The ZAP handler, CURVE socket options and handshake diagnosis.
#include "security/curve.hpp"

#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <vector>

#include <fmt/format.h>

#include "common/printable.hpp"
#include "dtr/error.hpp"

namespace dtr::security {

namespace {

constexpr const char* kZapEndpoint = "inproc://zeromq.zap.01";
constexpr const char* kZapDomain = "dtr";
constexpr int kHandshakeEvents = ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL |
                                 ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL |
                                 ZMQ_EVENT_HANDSHAKE_FAILED_AUTH | ZMQ_EVENT_HANDSHAKE_SUCCEEDED;

std::string next_inproc(const char* what) {
  static std::atomic<uint64_t> counter{0};
  return fmt::format("inproc://dtr-{}-{}", what, counter++);
}

struct MonitorEvent {
  uint16_t event = 0;
  uint32_t value = 0;
  std::string address;
};

// One event from a monitor PAIR socket, without blocking.
std::optional<MonitorEvent> read_event(zmq::socket_t& pair) {
  zmq::message_t head;
  if (!pair.recv(head, zmq::recv_flags::dontwait)) return std::nullopt;
  MonitorEvent ev;
  if (head.size() >= 6) {
    std::memcpy(&ev.event, head.data(), 2);
    std::memcpy(&ev.value, static_cast<const char*>(head.data()) + 2, 4);
  }
  while (head.more()) {
    zmq::message_t part;
    (void)pair.recv(part, zmq::recv_flags::none);
    ev.address = part.to_string();
    if (!part.more()) break;
  }
  return ev;
}

std::string protocol_error_text(uint32_t code) {
  switch (code) {
    case ZMQ_PROTOCOL_ERROR_ZMTP_MECHANISM_MISMATCH:
      return "one side uses CURVE and the other does not";
    case ZMQ_PROTOCOL_ERROR_ZMTP_CRYPTOGRAPHIC:
      return "the CURVE handshake did not verify (different cluster keys)";
    default:
      if ((code & 0xF0000000u) == ZMQ_PROTOCOL_ERROR_ZAP_UNSPECIFIED)
        return fmt::format("the authentication handler failed (ZAP error {:#x})", code);
      return fmt::format("ZMTP protocol error {:#x}", code);
  }
}

void refuse_plain(const SecurityConfig& config, std::string_view endpoint, std::string_view what) {
  if (config.key || config.insecure || is_local_endpoint(endpoint)) return;
  throw AuthenticationError(fmt::format(
      "{} {}: this endpoint is not loopback, and dtr authenticates and encrypts such links. "
      "Make a cluster key once with `dtr-keygen -o dtr.key`, give it to the master and every "
      "worker (DTR_KEY_FILE=dtr.key, or dtr-worker --key dtr.key), or set DTR_INSECURE=1 "
      "(dtr-worker --insecure) on a network you trust",
      what, endpoint));
}

}  // namespace

Guard::Guard(zmq::context_t& context, SecurityConfig config, Report on_report)
    : context_(context), config_(std::move(config)), report_(std::move(on_report)) {
  if (!curve() && !report_) return;  // nothing to run
  zmq::socket_t zap;
  if (curve()) {
    if (!zmq_has("curve"))
      throw AuthenticationError(
          "this libzmq was built without CURVE (libsodium); dtr cannot authenticate links");
    public_binary_.resize(32);
    if (!zmq_z85_decode(reinterpret_cast<uint8_t*>(public_binary_.data()),
                        config_.key->public_key.c_str()))
      throw InvalidArgument("the cluster key's public half is not Z85");
    zap = zmq::socket_t(context_, zmq::socket_type::rep);
    zap.set(zmq::sockopt::linger, 0);
    try {
      zap.bind(kZapEndpoint);
    } catch (const zmq::error_t& e) {
      throw AuthenticationError(
          fmt::format("cannot start the authentication handler: {}", e.what()));
    }
  }
  std::string control_address = next_inproc("guard-control");
  control_ = zmq::socket_t(context_, zmq::socket_type::pair);
  control_.set(zmq::sockopt::linger, 0);
  control_.bind(control_address);
  zmq::socket_t control_end(context_, zmq::socket_type::pair);
  control_end.set(zmq::sockopt::linger, 0);
  control_end.connect(control_address);
  thread_ = std::thread([this, zap = std::move(zap), ctl = std::move(control_end)]() mutable {
    std::vector<zmq::socket_t> monitors;
    // A client retrying every 100 ms would repeat the same line: say it once a minute.
    std::string last_line;
    auto last_time = std::chrono::steady_clock::time_point();
    auto report = [&](std::string line) {
      auto now = std::chrono::steady_clock::now();
      if (line == last_line && now - last_time < std::chrono::minutes(1)) return;
      last_line = line;
      last_time = now;
      report_(line);
    };
    while (true) {
      try {
        std::vector<zmq::pollitem_t> items;
        items.push_back({ctl.handle(), 0, ZMQ_POLLIN, 0});
        if (zap) items.push_back({zap.handle(), 0, ZMQ_POLLIN, 0});
        for (auto& m : monitors) items.push_back({m.handle(), 0, ZMQ_POLLIN, 0});
        try {
          zmq::poll(items.data(), items.size(), std::chrono::milliseconds(-1));
        } catch (const zmq::error_t& e) {
          if (e.num() == EINTR) continue;
          return;  // the context is going away
        }
        if (items[0].revents & ZMQ_POLLIN) {
          zmq::message_t msg;
          (void)ctl.recv(msg, zmq::recv_flags::none);
          if (msg.size() == 0) return;  // stop
          zmq::socket_t m(context_, zmq::socket_type::pair);
          m.set(zmq::sockopt::linger, 0);
          m.connect(msg.to_string());
          monitors.push_back(std::move(m));
          continue;  // the poll set changed
        }
        size_t next = 1;
        if (zap) {
          if (items[next].revents & ZMQ_POLLIN) answer_zap(zap, report);
          ++next;
        }
        for (size_t i = 0; i < monitors.size(); ++i) {
          if (!(items[next + i].revents & ZMQ_POLLIN)) continue;
          while (std::optional<MonitorEvent> ev = read_event(monitors[i])) {
            if (!report_) continue;
            if (ev->event == ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL)
              report(fmt::format("refused a connection on {}: {}", ev->address,
                                 protocol_error_text(ev->value)));
            else if (ev->event == ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL)
              report(fmt::format("a handshake on {} failed (connection closed or invalid)",
                                 ev->address));
            // Refusals by key (HANDSHAKE_FAILED_AUTH) were reported by answer_zap with the
            // peer's address.
          }
        }
      } catch (const zmq::error_t&) {
        return;  // the context is going away (ETERM); nothing is left to guard
      } catch (const std::exception&) {
        // A failing report (the owner's logger) must not end the authentication handler.
      }
    }
  });
}

Guard::~Guard() {
  if (!thread_.joinable()) return;
  {
    std::lock_guard<std::mutex> lock(control_mutex_);
    try {
      control_.send(zmq::message_t(), zmq::send_flags::none);
    } catch (const zmq::error_t&) {
    }
  }
  thread_.join();
}

void Guard::answer_zap(zmq::socket_t& zap, const std::function<void(std::string)>& report) {
  // RFC 27: version, request id, domain, address, identity, mechanism, credentials...
  std::vector<zmq::message_t> frames;
  while (true) {
    zmq::message_t part;
    if (!zap.recv(part, zmq::recv_flags::dontwait)) break;
    bool more = part.more();
    if (frames.size() < 16) frames.push_back(std::move(part));
    if (!more) break;
  }
  if (frames.empty()) return;
  std::string request_id = frames.size() > 1 ? frames[1].to_string() : std::string();
  std::string address = frames.size() > 3 ? frames[3].to_string() : std::string("?");
  std::string mechanism = frames.size() > 5 ? frames[5].to_string() : std::string();
  bool ok = mechanism == "CURVE" && frames.size() > 6 && frames[6].size() == 32 &&
            std::memcmp(frames[6].data(), public_binary_.data(), 32) == 0;
  std::string status = ok ? "200" : "400";
  std::string text = ok ? "OK" : "not a holder of this cluster's key";
  if (!ok && report_)
    report(fmt::format("refused a {} peer from {}: it does not hold this cluster's key",
                       mechanism.empty() ? "?" : mechanism, address));
  std::string_view reply[] = {"1.0", request_id, status, text, ok ? "dtr" : "", ""};
  for (size_t i = 0; i < 6; ++i)
    zap.send(zmq::buffer(reply[i]), i + 1 < 6 ? zmq::send_flags::sndmore : zmq::send_flags::none);
}

void Guard::check(std::string_view endpoint, std::string_view what) const {
  refuse_plain(config_, endpoint, what);
}

void Guard::server(zmq::socket_t& socket, std::string_view endpoint, std::string_view what) {
  refuse_plain(config_, endpoint, what);
  if (curve()) {
    socket.set(zmq::sockopt::curve_server, 1);
    socket.set(zmq::sockopt::curve_secretkey, config_.key->secret_key);
    socket.set(zmq::sockopt::zap_domain, kZapDomain);
  }
  if (!report_ || !thread_.joinable()) return;
  std::string address = next_inproc("guard-monitor");
  if (zmq_socket_monitor(
          socket.handle(), address.c_str(),
          ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL | ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL) != 0)
    return;  // diagnosis only: the socket works without it
  std::lock_guard<std::mutex> lock(control_mutex_);
  control_.send(zmq::buffer(address), zmq::send_flags::none);
}

void Guard::client(zmq::socket_t& socket, std::string_view endpoint, std::string_view what) {
  refuse_plain(config_, endpoint, what);
  if (!curve()) return;
  // Every holder of the cluster key is both a CURVE server and a client with the same pair.
  socket.set(zmq::sockopt::curve_serverkey, config_.key->public_key);
  socket.set(zmq::sockopt::curve_publickey, config_.key->public_key);
  socket.set(zmq::sockopt::curve_secretkey, config_.key->secret_key);
}

std::string handshake_failure_text(uint16_t event, uint32_t value, bool curve,
                                   std::string_view peer) {
  switch (event) {
    case ZMQ_EVENT_HANDSHAKE_FAILED_AUTH:
      return fmt::format("{} refused this process's key (status {}): it holds another cluster key",
                         peer, value);
    case ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL:
      if (value != ZMQ_PROTOCOL_ERROR_ZMTP_MECHANISM_MISMATCH)
        return fmt::format("the handshake with {} failed: {}", peer, protocol_error_text(value));
      return curve ? fmt::format(
                         "{} does not use CURVE, but this process has a cluster key: "
                         "start it with the same key (DTR_KEY_FILE or --key)",
                         peer)
                   : fmt::format(
                         "{} requires CURVE authentication and this process has no "
                         "key: set DTR_KEY_FILE (or --key) to the cluster's key file",
                         peer);
    case ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL:
      return curve ? fmt::format(
                         "the CURVE handshake with {} failed: it holds another cluster "
                         "key, or does not use CURVE",
                         peer)
                   : fmt::format(
                         "the handshake with {} failed: it probably requires CURVE and "
                         "this process has no key (set DTR_KEY_FILE or --key)",
                         peer);
    default:
      return {};
  }
}

std::string probe_zmtp(const std::string& endpoint, std::string_view peer,
                       std::chrono::milliseconds wait) {
  constexpr std::string_view tcp = "tcp://";
  if (endpoint.rfind(tcp, 0) != 0) return {};
  const std::string rest = endpoint.substr(tcp.size());
  const size_t colon = rest.rfind(':');
  if (colon == std::string::npos) return {};
  std::string host = rest.substr(0, colon);
  if (host.size() > 2 && host.front() == '[' && host.back() == ']')
    host = host.substr(1, host.size() - 2);
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  if (getaddrinfo(host.c_str(), rest.substr(colon + 1).c_str(), &hints, &res) != 0 || !res)
    return {};
  const int fd = socket(res->ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  const int rc = fd < 0 ? -1 : connect(fd, res->ai_addr, res->ai_addrlen);
  const int connect_errno = errno;
  freeaddrinfo(res);
  if (fd < 0) return {};
  auto done = [&](std::string why) {
    close(fd);
    return why;
  };
  pollfd p{fd, POLLOUT, 0};
  if ((rc != 0 && connect_errno != EINPROGRESS) || poll(&p, 1, static_cast<int>(wait.count())) != 1)
    return done({});
  int error = 0;
  socklen_t len = sizeof error;
  if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &len) != 0 || error != 0) return done({});
  // ZMTP's signature: 0xFF, 8 bytes of length, 0x7F; every ZeroMQ peer starts with it.
  const unsigned char signature[10] = {0xFF, 0, 0, 0, 0, 0, 0, 0, 1, 0x7F};
  if (send(fd, signature, sizeof signature, MSG_NOSIGNAL) != static_cast<ssize_t>(sizeof signature))
    return done({});
  char got[64];
  p = pollfd{fd, POLLIN, 0};
  if (poll(&p, 1, static_cast<int>(wait.count())) != 1)
    return done(
        fmt::format("{} accepted the connection but sent nothing within {} ms, where a "
                    "ZeroMQ peer sends its greeting at once: it is not a dtr-worker, or its "
                    "process is stopped or hung",
                    peer, wait.count()));
  const ssize_t n = recv(fd, got, sizeof got, 0);
  if (n <= 0)
    return done(
        fmt::format("{} closed the connection before sending anything, where a ZeroMQ "
                    "peer sends its greeting: is a dtr-worker listening on that port?",
                    peer));
  if (static_cast<unsigned char>(got[0]) == 0xFF) return done({});
  return done(
      fmt::format("{} is not a ZeroMQ peer: it sent \"{}\" where a ZeroMQ peer sends "
                  "its greeting (is that port a dtr-worker's?)",
                  peer, common::printable(std::string_view(got, static_cast<size_t>(n)))));
}

HandshakeWatch::HandshakeWatch(zmq::context_t& context, zmq::socket_t& socket, bool curve,
                               std::string peer, std::string endpoint)
    : socket_(socket), curve_(curve), peer_(std::move(peer)), endpoint_(std::move(endpoint)) {
  std::string address = next_inproc("handshake-watch");
  if (zmq_socket_monitor(socket_.handle(), address.c_str(),
                         kHandshakeEvents | ZMQ_EVENT_DISCONNECTED | ZMQ_EVENT_CONNECTED |
                             ZMQ_EVENT_CONNECT_RETRIED) != 0)
    throw zmq::error_t();
  pair_ = zmq::socket_t(context, zmq::socket_type::pair);
  pair_.set(zmq::sockopt::linger, 0);
  pair_.connect(address);
}

std::chrono::milliseconds HandshakeWatch::refused_for() const {
  if (connected_ || !refused_since_) return std::chrono::milliseconds(0);
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() -
                                                               *refused_since_);
}

HandshakeWatch::~HandshakeWatch() {
  zmq_socket_monitor(socket_.handle(), nullptr, 0);
}

std::string HandshakeWatch::failure() {
  std::string why;
  while (std::optional<MonitorEvent> ev = read_event(pair_)) {
    switch (ev->event) {
      case ZMQ_EVENT_HANDSHAKE_SUCCEEDED:
        succeeded_ = true;
        break;
      case ZMQ_EVENT_CONNECTED:
        if (!connected_) connected_at_ = std::chrono::steady_clock::now();
        connected_ = true;
        refused_since_.reset();
        break;
      case ZMQ_EVENT_CONNECT_RETRIED:
        if (!connected_ && !refused_since_) refused_since_ = std::chrono::steady_clock::now();
        break;
      case ZMQ_EVENT_HANDSHAKE_FAILED_AUTH:
      case ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL:
      case ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL:
        why = handshake_failure_text(ev->event, ev->value, curve_, peer_);
        break;
      case ZMQ_EVENT_DISCONNECTED:
        // A CURVE server that cannot open our HELLO (it holds another key) just closes.
        // A more precise reason from the same batch of events wins.
        if (!succeeded_ && curve_ && why.empty())
          why = fmt::format(
              "{} closed the connection during the CURVE handshake: it holds another cluster "
              "key, or does not use CURVE",
              peer_);
        break;
      default:
        break;
    }
  }
  // A service that is not ZeroMQ: say so, once, rather than blame a key (or wait out
  // ZeroMQ's handshake limit).
  const bool slow =
      connected_ && !succeeded_ && std::chrono::steady_clock::now() - connected_at_ >= kProbeAfter;
  if (!probed_ && !endpoint_.empty() && !succeeded_ && (!why.empty() || slow)) {
    probed_ = true;
    if (std::string other = probe_zmtp(endpoint_, peer_); !other.empty()) {
      not_zeromq_ = true;
      return other;
    }
  }
  return why;
}

}  // namespace dtr::security
