// Connecting a session to its workers: the HELLO handshake in connect mode (the master
// dials listening workers, then opens each one's heartbeat connection) or in listen mode
// (the workers dial the master), the Setup that tells each worker its node index and its
// peers, and the same-host attach that says whether tensor bytes can move by direct copy.
// MasterSession::start (master/session.cpp) runs these steps, in that order, before the
// I/O thread starts.
#include "master/session.hpp"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <random>

#include "common/same_host.hpp"
#include "master/frames.hpp"
#include "master/wait_interrupt.hpp"
#include "protocol/transport.hpp"
#include "security/curve.hpp"

namespace dtr::detail {

using protocol::MsgType;
using Clock = std::chrono::steady_clock;

namespace {

// A worker endpoint that refuses every connection this long fails the session's start.
constexpr auto kRefusedLimit = std::chrono::milliseconds(3000);
// On a heartbeat connection nothing but heartbeats (a few bytes) is expected.
constexpr int64_t kMaxBeatBytes = int64_t{64} << 10;

std::string client_name() {
  char host[256] = {};
  gethostname(host, sizeof(host) - 1);
  return fmt::format("{}:{}", host, getpid());
}

// Waits for one HelloReply on `socket` (frames [identity?] header) until `deadline`;
// `watch`, when given, is asked between polls whether the handshake failed (it throws
// AuthenticationError naming why). A signal that interrupts the poll is not an error; the
// wait interrupt check (dtr::set_wait_interrupt_check) runs after each poll and may end
// the wait by throwing.
std::optional<protocol::Received> wait_message(zmq::socket_t& socket, Clock::time_point deadline,
                                               security::HandshakeWatch* watch = nullptr) {
  while (true) {
    if (watch) {
      if (std::string why = watch->failure(); !why.empty()) {
        if (watch->not_zeromq())
          throw TransportError(fmt::format("cannot start the session: {}", why));
        throw AuthenticationError(fmt::format("cannot start the session: {}", why));
      }
      // Nothing listens there (a mistyped port, a worker not started): say so soon rather
      // than at the connect timeout.
      if (watch->refused_for() >= kRefusedLimit)
        throw TransportError(fmt::format(
            "cannot start the session: {} refused every connection for {} ms (is `dtr-worker "
            "--listen` running there, on that port?)",
            watch->peer(), watch->refused_for().count()));
    }
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    if (left.count() <= 0) return std::nullopt;
    zmq::pollitem_t item{socket.handle(), 0, ZMQ_POLLIN, 0};
    try {
      zmq::poll(&item, 1, std::min(left, std::chrono::milliseconds(100)));
    } catch (const zmq::error_t& e) {
      if (e.num() != EINTR) throw;
    }
    check_wait_interrupt();
    if (auto m = protocol::try_recv(socket, kMaxFrames)) return m;
  }
}

protocol::HelloReply check_hello_reply(const protocol::Received& msg, size_t first,
                                       const std::string& endpoint) {
  if (msg.frames.size() <= first)
    throw ProtocolError(fmt::format("worker {}: empty message during the handshake", endpoint));
  protocol::HelloReply r = protocol::decode_hello_reply(frame_view(msg.frames[first]));
  if (!r.accepted)
    throw TransportError(fmt::format("worker {} refused the session: {}", endpoint, r.reason));
  if (r.version != protocol::kVersion)
    throw ProtocolError(fmt::format("worker {} speaks protocol {}, this master speaks {}", endpoint,
                                    r.version, protocol::kVersion));
  if (r.devices.empty() || r.devices[0].index != -1)
    throw ProtocolError(fmt::format("worker {} reported no CPU device", endpoint));
  return r;
}

// How long a worker may take to answer Attach (it reads 8 bytes) before the session
// starts without the same-host path to it.
constexpr std::chrono::milliseconds kAttachTimeout{10000};

}  // namespace

std::string setup_backend(std::string name) {
  if (name.empty())
    if (const char* env = std::getenv("DTR_BACKEND")) name = env;
  if (name.empty() || name == "zmq" || name == "tcp" || name == "nccl") return "";
  if (name == "gloo" || name == "mpi") return name;
  throw InvalidArgument(fmt::format(
      "init_master_worker: unknown backend '{}' (the workers' backend: 'zmq', 'tcp', 'gloo' "
      "or 'mpi')",
      name));
}

void MasterSession::connect_workers() {
  auto deadline = Clock::now() + options_.connect_timeout;
  std::string hello = protocol::encode(protocol::Hello{protocol::kVersion, client_name()});
  // Why a handshake failed, while the HELLOs are out; gone before the I/O thread starts.
  std::vector<std::unique_ptr<security::HandshakeWatch>> watches;
  for (const std::string& endpoint : options_.workers) {
    auto node = std::make_unique<Node>();
    node->index = static_cast<int>(nodes_.size());
    node->endpoint = endpoint;
    node->dealer = std::make_unique<zmq::socket_t>(context_, zmq::socket_type::dealer);
    protocol::configure_socket(*node->dealer, kMaxMessageBytes);
    // A random 128-bit routing id: the worker's ROUTER hands a connection's session over
    // to a client presenting the same id, so it must not be guessable (ZeroMQ's own ids
    // are a counter).
    node->identity = protocol::random_routing_id();
    node->dealer->set(zmq::sockopt::routing_id, node->identity);
    node->dealer->set(zmq::sockopt::sndhwm, protocol::kDataHighWaterMark);
    guard_->client(*node->dealer, endpoint, fmt::format("worker (node {})", node->index));
    watches.push_back(std::make_unique<security::HandshakeWatch>(
        context_, *node->dealer, guard_->curve(), fmt::format("worker {}", endpoint), endpoint));
    try {
      node->dealer->connect(endpoint);
    } catch (const zmq::error_t& e) {
      throw TransportError(fmt::format("cannot connect to worker {}: {}", endpoint, e.what()));
    }
    protocol::send_message(*node->dealer, nullptr, hello, {});
    nodes_.push_back(std::move(node));
  }
  for (auto& node : nodes_) {
    std::string last_refusal;
    while (true) {
      auto msg =
          wait_message(*node->dealer, deadline, watches[static_cast<size_t>(node->index)].get());
      if (!msg) {
        if (!last_refusal.empty())
          throw TransportError(fmt::format("worker {} refused the session for {} ms: {}",
                                           node->endpoint, options_.connect_timeout.count(),
                                           last_refusal));
        throw TimeoutError(fmt::format(
            "worker {} did not answer within {} ms (is `dtr-worker --listen {}` running?)",
            node->endpoint, options_.connect_timeout.count(), node->endpoint));
      }
      if (msg->frames.empty()) continue;
      protocol::HelloReply r = protocol::decode_hello_reply(frame_view(msg->frames[0]));
      // A worker still serving a master that has just gone says "busy" until it notices;
      // ask again until the deadline.
      if (!r.accepted && r.reason.rfind("busy", 0) == 0) {
        // Busy with this very session: the same worker under a second address.
        if (r.reason.find("master " + client_name() + " since") != std::string::npos)
          throw InvalidArgument(fmt::format(
              "init_master_worker: worker {} ({}) already serves this session under another of "
              "the endpoints given: a worker is one node of a session ({})",
              node->endpoint, r.worker, r.reason));
        last_refusal = r.reason;
        std::this_thread::sleep_for(std::chrono::milliseconds(200));
        protocol::send_message(*node->dealer, nullptr, hello, {});
        continue;
      }
      node->hello = check_hello_reply(*msg, 0, node->endpoint);
      open_beat(*node, deadline);
      break;
    }
  }
}

void MasterSession::open_beat(Node& node, Clock::time_point deadline) {
  std::string peer = fmt::format("worker {} (its heartbeat connection)", node.endpoint);
  try {
    node.beat = std::make_unique<zmq::socket_t>(beat_context_, zmq::socket_type::dealer);
    protocol::configure_socket(*node.beat, kMaxBeatBytes);
    node.beat->set(zmq::sockopt::routing_id, protocol::beat_identity(node.identity));
    guard_->client(*node.beat, node.endpoint, fmt::format("worker (node {})", node.index));
    // Up before the session starts, so that closing it never cuts a handshake short (the
    // worker would log that as a failed handshake).
    security::HandshakeWatch watch(beat_context_, *node.beat, guard_->curve(), peer);
    node.beat->connect(node.endpoint);
    while (true) {
      if (std::string why = watch.failure(); !why.empty())
        throw TransportError(fmt::format("cannot start the session: {}", why));
      if (watch.succeeded()) return;
      if (Clock::now() >= deadline)
        throw TimeoutError(
            fmt::format("{} did not come up within {} ms", peer, options_.connect_timeout.count()));
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
  } catch (const zmq::error_t& e) {
    throw TransportError(
        fmt::format("cannot open the heartbeat connection to {}: {}", node.endpoint, e.what()));
  }
}

void MasterSession::accept_workers() {
  router_ = std::make_unique<zmq::socket_t>(context_, zmq::socket_type::router);
  protocol::configure_socket(*router_, kMaxMessageBytes);
  router_->set(zmq::sockopt::sndhwm, protocol::kDataHighWaterMark);
  router_->set(zmq::sockopt::router_mandatory, 1);
  guard_->server(*router_, options_.listen, "master listen endpoint");
  try {
    router_->bind(options_.listen);
  } catch (const zmq::error_t& e) {
    throw TransportError(
        fmt::format("cannot listen on {}: {}", options_.listen, protocol::bind_failure(e.num())));
  }
  auto deadline = Clock::now() + options_.connect_timeout;
  std::string hello = protocol::encode(protocol::Hello{protocol::kVersion, client_name()});
  std::unordered_map<std::string, bool> greeted;
  while (static_cast<int>(nodes_.size()) < options_.num_workers) {
    auto msg = wait_message(*router_, deadline);
    if (!msg) {
      std::string refused;
      {
        std::lock_guard lock(refusals_mu_);
        if (!last_refusal_.empty()) refused = fmt::format("; {}", last_refusal_);
      }
      std::string why = fmt::format("only {} of {} workers connected to {} within {} ms{}",
                                    nodes_.size(), options_.num_workers, options_.listen,
                                    options_.connect_timeout.count(), refused);
      // The workers that came are told why, rather than finding the master gone.
      const std::string goodbye = protocol::encode(protocol::Goodbye{"the master gave up: " + why});
      for (auto& node : nodes_)
        (void)protocol::send_message(*router_, &node->identity, goodbye, {});
      router_->set(zmq::sockopt::linger, 1000);
      throw TimeoutError(why);
    }
    if (msg->frames.size() < 2) continue;
    std::string identity(frame_view(msg->frames[0]));
    MsgType type;
    try {
      type = protocol::peek_type(frame_view(msg->frames[1]));
    } catch (const ProtocolError&) {
      continue;  // not a dtr worker; ignore it
    }
    if (node_of_identity_.count(identity)) continue;  // an accepted worker's, until Setup
    if (type == MsgType::Heartbeat && !greeted[identity]) {
      greeted[identity] = true;
      protocol::send_message(*router_, &identity, hello, {});
    } else if (type == MsgType::HelloReply && !node_of_identity_.count(identity)) {
      auto node = std::make_unique<Node>();
      node->index = static_cast<int>(nodes_.size());
      node->identity = identity;
      node->endpoint = fmt::format("{} (worker #{})", options_.listen, nodes_.size());
      node->hello = check_hello_reply(*msg, 1, node->endpoint);
      node->endpoint = fmt::format("{} ({})", node->hello.worker, options_.listen);
      node_of_identity_[identity] = static_cast<int>(nodes_.size());
      node_of_identity_[protocol::beat_identity(identity)] = static_cast<int>(nodes_.size());
      nodes_.push_back(std::move(node));
    }
  }
}

void MasterSession::send_setup() {
  std::random_device rd;
  session_id_ = (static_cast<uint64_t>(rd()) << 32) ^ rd() ^ static_cast<uint64_t>(getpid());
  protocol::Setup setup;
  setup.session = session_id_;
  for (auto& node : nodes_) {
    const std::string& own = node->hello.peer_endpoint;
    if (!own.empty()) {
      setup.peers.push_back(own);
    } else if (node->dealer) {
      setup.peers.push_back(node->endpoint);  // listen mode: the endpoint we dialed
    } else {
      throw ProtocolError(
          fmt::format("worker {} did not say where its peers reach it", node->endpoint));
    }
  }
  // The workers form a process group when every one of them said where its rank binds.
  for (auto& node : nodes_) setup.pg_endpoints.push_back(node->hello.pg_endpoint);
  if (std::any_of(setup.pg_endpoints.begin(), setup.pg_endpoints.end(),
                  [](const std::string& e) { return e.empty(); }))
    setup.pg_endpoints.clear();
  setup.backend = setup_backend(options_.backend);
  if (setup.backend == "mpi" && setup.pg_endpoints.empty())
    throw InvalidArgument(
        "init_master_worker: backend 'mpi': not every worker offered a process-group endpoint "
        "(it could not reserve a port), so the workers would form no group");
  setup.heartbeat_ms = static_cast<uint32_t>(options_.heartbeat.count());
  setup.master_timeout_ms = static_cast<uint32_t>(options_.heartbeat_timeout.count());
  for (auto& node : nodes_) {
    node->last_heard.store(Clock::now().time_since_epoch().count());
    setup.node = static_cast<uint32_t>(node->index);
    std::string header = protocol::encode(setup);
    zmq::socket_t& socket = node->dealer ? *node->dealer : *router_;
    const std::string* identity = node->dealer ? nullptr : &node->identity;
    if (!protocol::send_message(socket, identity, std::move(header), {}))
      throw TransportError(fmt::format("worker {} went away during the handshake", node->endpoint));
  }
}

void MasterSession::attach_same_host() {
  const bool enabled = options_.same_host && common::same_host_enabled();
  for (auto& node : nodes_) {
    if (!enabled) {
      node->same_host_note = options_.same_host ? "DTR_SAME_HOST is off on the master"
                                                : "MasterOptions::same_host is off";
      continue;
    }
    try {
      node->same_host_note = attach(*node);
    } catch (const Error& e) {
      node->same_host_note = fmt::format("attach failed: {}", e.what());
    }
    node->same_host = node->same_host_note.empty();
  }
}

std::string MasterSession::attach(Node& node) {
  const protocol::HelloReply& h = node.hello;
  if (h.pid == 0 || h.challenge == 0) return "the worker offered no challenge";
  node.held_challenge = h.challenge;
  const uint64_t mine = common::random_challenge();
  ReplyMessage m =
      request(node.index,
              protocol::cmd::Attach{.pid = static_cast<uint32_t>(getpid()),
                                    .address = reinterpret_cast<uint64_t>(&node.held_challenge),
                                    .challenge = mine},
              kAttachTimeout);
  const auto& reply = expect_reply<protocol::reply::Attach>(m, node.index, "attach");
  if (!reply.done) return "the worker: " + reply.message;
  // The worker read ours; now we read the worker's copy of our challenge.
  std::string problem = common::challenge_problem(h.pid, reply.address, mine);
  return problem.empty() ? "" : "the master: " + problem;
}

}  // namespace dtr::detail
