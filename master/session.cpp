// Master-side connections, handshake and the I/O thread.
#include "master/session.hpp"

#include <fmt/format.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <random>

#include "common/same_host.hpp"
#include "common/trace_clock.hpp"
#include "master/wait_interrupt.hpp"
#include "pg/mpi/mpi_backend.hpp"
#include "protocol/transport.hpp"
#include "security/curve.hpp"

namespace dtr::detail {

using protocol::MsgType;
using Clock = std::chrono::steady_clock;

namespace {

constexpr int64_t kMaxMessageBytes = int64_t{16} << 30;
// A worker endpoint that refuses every connection this long fails the session's start.
constexpr auto kRefusedLimit = std::chrono::milliseconds(3000);
// On a heartbeat connection nothing but heartbeats (a few bytes) is expected.
constexpr int64_t kMaxBeatBytes = int64_t{64} << 10;
constexpr size_t kMaxFrames = protocol::kMaxPayloadFrames + 2;
// A user thread that has queued this many commands for one node waits for the I/O thread.
constexpr size_t kBackpressureCommands = size_t{1} << 16;
constexpr auto kIdlePoll = std::chrono::milliseconds(100);

std::string client_name() {
  char host[256] = {};
  gethostname(host, sizeof(host) - 1);
  return fmt::format("{}:{}", host, getpid());
}

std::string_view frame_view(const zmq::message_t& m) {
  return {static_cast<const char*>(m.data()), m.size()};
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
      if (std::string why = watch->failure(); !why.empty())
        throw AuthenticationError(fmt::format("cannot start the session: {}", why));
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

}  // namespace

MasterSession::MasterSession(const MasterOptions& options)
    : options_(options), context_(1), beat_context_(1) {
  guard_ = std::make_unique<security::Guard>(context_,
                                             resolve_security(options.key_file, options.insecure),
                                             [this](const std::string& line) {
                                               std::lock_guard lock(refusals_mu_);
                                               last_refusal_ = line;
                                             });
}

namespace {

// What Setup carries for MasterOptions::backend (its value, else $DTR_BACKEND): "" for the
// workers' default, "gloo"; InvalidArgument for any other name.
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

// Backend mpi: the workers' communicator is MPI's world without the master, so the master
// and its workers must be one MPI job, the master its rank 0 (`mpirun -np N+1 dtr-exec
// --launched`). Checked from the launcher's variables before anything is sent: MPI_Init
// itself would wait for every process of the job.
void check_mpi_job(size_t workers) {
  const char* rank = std::getenv("OMPI_COMM_WORLD_RANK");
  const char* size = std::getenv("OMPI_COMM_WORLD_SIZE");
  if (rank == nullptr || size == nullptr) {
    rank = std::getenv("PMI_RANK");
    size = std::getenv("PMI_SIZE");
  }
  if (rank == nullptr || size == nullptr)
    throw InvalidArgument(
        "init_master_worker: backend 'mpi' needs the master and its workers started as one MPI "
        "job, the master as rank 0: mpirun -np N+1 dtr-exec --launched PROGRAM (no MPI launcher "
        "is visible in this process's environment)");
  if (std::string(rank) != "0" || std::string(size) != std::to_string(workers + 1))
    throw InvalidArgument(fmt::format(
        "init_master_worker: backend 'mpi' needs the master as rank 0 of an MPI job of its {} "
        "workers and itself ({} processes); this process is rank {} of {}",
        workers, workers + 1, rank, size));
}

}  // namespace

std::shared_ptr<MasterSession> MasterSession::start(const MasterOptions& options) {
  if (options.workers.empty() == options.listen.empty())
    throw InvalidArgument(
        "init_master_worker: give either worker endpoints to connect to or an endpoint to "
        "listen on, not both or neither");
  for (size_t i = 0; i < options.workers.size(); ++i) {
    if (auto problem = protocol::endpoint_problem(options.workers[i], false))
      throw InvalidArgument(fmt::format("init_master_worker: worker endpoint {} of {}: {}", i + 1,
                                        options.workers.size(), *problem));
  }
  if (!options.listen.empty()) {
    if (auto problem = protocol::endpoint_problem(options.listen, true))
      throw InvalidArgument(fmt::format("init_master_worker: listen endpoint: {}", *problem));
  }
  if (options.heartbeat.count() <= 0 || options.heartbeat >= options.heartbeat_timeout)
    throw InvalidArgument(
        fmt::format("init_master_worker: heartbeat ({} ms) must be positive and shorter than "
                    "heartbeat_timeout ({} ms)",
                    options.heartbeat.count(), options.heartbeat_timeout.count()));
  if (options.spin.count() < 0)
    throw InvalidArgument(
        fmt::format("init_master_worker: spin must be >= 0 us, got {}", options.spin.count()));
  // Throws InvalidArgument for a bad name, or mpi outside a fitting MPI job.
  const bool mpi = setup_backend(options.backend) == "mpi";
  if (mpi)
    check_mpi_job(options.listen.empty() ? options.workers.size()
                                         : static_cast<size_t>(std::max(options.num_workers, 0)));
  if (!options.listen.empty() && options.num_workers <= 0)
    throw InvalidArgument(
        fmt::format("init_master_worker: listening on {} needs num_workers >= 1, got {}",
                    options.listen, options.num_workers));
  protocol::tune_allocator_for_large_messages();
  std::shared_ptr<MasterSession> s(new MasterSession(options));
  if (options.listen.empty()) {
    s->connect_workers();
  } else {
    s->accept_workers();
  }
  s->send_setup();
  s->wake_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (s->wake_fd_ < 0)
    throw TransportError(fmt::format("eventfd failed: {}", std::strerror(errno)));
  auto watch = [&](zmq::socket_t& socket) {
    s->socket_fds_.push_back(pollfd{socket.get(zmq::sockopt::fd), POLLIN, 0});
  };
  s->beat_wake_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (s->beat_wake_fd_ < 0)
    throw TransportError(fmt::format("eventfd failed: {}", std::strerror(errno)));
  if (s->router_) {
    watch(*s->router_);
    s->beat_thread_ = std::thread([raw = s.get()] { raw->listen_beat_loop(); });
  } else {
    for (auto& node : s->nodes_) watch(*node->dealer);
    s->beat_thread_ = std::thread([raw = s.get()] { raw->beat_loop(); });
  }
  s->io_thread_ = std::thread([raw = s.get()] { raw->io_loop(); });
  // The workers split MPI's world among themselves on Setup; the master takes part and
  // stays out (pg/mpi/mpi_backend.hpp). Its heartbeats go on meanwhile: the workers end a
  // session whose master is silent for heartbeat_timeout, and MPI_Init can take longer.
  if (mpi) pg::mpi_stand_aside(options.connect_timeout, "init_master_worker (backend mpi)");
  s->measure_clocks();
  s->attach_same_host();
  if (s->options_.trace_path.empty())
    if (const char* path = std::getenv("DTR_TRACE"); path && *path) s->options_.trace_path = path;
  if (!s->options_.trace_path.empty()) s->start_trace();
  return s;
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
        context_, *node->dealer, guard_->curve(), fmt::format("worker {}", endpoint)));
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

namespace {
// How long a worker may take to answer Attach (it reads 8 bytes) before the session
// starts without the same-host path to it.
constexpr std::chrono::milliseconds kAttachTimeout{10000};
}  // namespace

void MasterSession::attach_same_host() {
  const bool enabled = options_.same_host && common::same_host_enabled();
  for (auto& node : nodes_) {
    if (!enabled) {
      node->same_host_note =
          options_.same_host ? "DTR_SAME_HOST=0 on the master" : "MasterOptions::same_host is off";
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
  if (m.reply.type != protocol::ReplyType::Attach)
    throw ProtocolError(fmt::format("worker {} answered attach with reply type {}", node.endpoint,
                                    static_cast<int>(m.reply.type)));
  if (!m.reply.done) return "the worker: " + m.reply.message;
  // The worker read ours; now we read the worker's copy of our challenge.
  std::string problem = common::challenge_problem(h.pid, m.reply.address, mine);
  return problem.empty() ? "" : "the master: " + problem;
}

void MasterSession::orphan(int node, local::Tensor t) {
  Node& n = *nodes_[node];
  std::lock_guard lock(n.orphan_mu);
  n.orphans.push_back(std::move(t));
}

void MasterSession::release_orphans(int node) {
  Node& n = *nodes_[node];
  std::vector<local::Tensor> dropped;  // freed outside the lock
  std::lock_guard lock(n.orphan_mu);
  dropped.swap(n.orphans);
}

MasterSession::~MasterSession() {
  shutdown();
  if (wake_fd_ >= 0) close(wake_fd_);
  if (beat_wake_fd_ >= 0) close(beat_wake_fd_);
}

void MasterSession::shutdown() {
  std::lock_guard lock(shutdown_mu_);
  if (closed_.exchange(true)) return;
  stop_.store(true);
  wake();
  if (beat_thread_.joinable()) {
    uint64_t one = 1;
    [[maybe_unused]] ssize_t n = write(beat_wake_fd_, &one, sizeof(one));
    beat_thread_.join();
  }
  if (io_thread_.joinable()) io_thread_.join();
  std::lock_guard plock(pending_mu_);
  for (auto& [id, p] : pending_)
    p.promise.set_exception(std::make_exception_ptr(TransportError("the session was shut down")));
  pending_.clear();
}

void MasterSession::wake() {
  if (wake_fd_ < 0) return;
  uint64_t one = 1;
  [[maybe_unused]] ssize_t n = write(wake_fd_, &one, sizeof(one));
}

namespace {

// The tensor a command makes (0 for none): the id a master call's slice names.
uint64_t made_by(const protocol::Command& c) {
  return std::visit(
      [](const auto& x) -> uint64_t {
        if constexpr (requires { x.out; })
          return x.out;
        else
          return 0;
      },
      c);
}

// The op code a slice of `c` carries (common::event_name).
uint16_t op_code(const protocol::Command& c) {
  if (const auto* op = std::get_if<protocol::cmd::RunOp>(&c)) return static_cast<uint16_t>(op->op);
  if (const auto* col = std::get_if<protocol::cmd::Collective>(&c))
    return static_cast<uint16_t>(col->kind);
  return 0;
}

}  // namespace

void MasterSession::enqueue(int node, const protocol::Command& c, const local::Tensor* payload,
                            Wake how) {
  if (closed_.load(std::memory_order_relaxed)) return;
  if (capturing_.load(std::memory_order_relaxed) != 0) [[unlikely]] {
    if (divert(node, c, how)) return;
  }
  // A request's own slice is the sync point's (request()).
  const bool traced = trace_.on() && how != Wake::kNone;
  Node& n = *nodes_[node];
  size_t queued;
  {
    std::lock_guard lock(n.mu);
    if (const auto* p = std::get_if<protocol::cmd::Put>(&c); p && payload) {
      // Payload frames are numbered within the message that carries the batch.
      protocol::cmd::Put put = *p;
      put.payload = static_cast<uint32_t>(n.payloads.size() + 1);
      n.batch.add(put);
      n.payloads.push_back(*payload);
    } else {
      n.batch.add(c);
    }
    queued = n.batch.count();
  }
  after_enqueue(n, queued, how);
  if (traced)
    trace_.call(protocol::command_type(c), op_code(c), node, protocol::command_stream(c),
                made_by(c));
}

bool MasterSession::enqueue(int node, const protocol::cmd::RunOp& c, Wake how) {
  if (closed_.load(std::memory_order_relaxed)) return false;
  if (capturing_.load(std::memory_order_relaxed) != 0) [[unlikely]] {
    if (divert(node, c, how)) return true;
  }
  Node& n = *nodes_[node];
  size_t queued;
  {
    std::lock_guard lock(n.mu);
    n.batch.add(c);
    queued = n.batch.count();
  }
  after_enqueue(n, queued, how);
  if (trace_.on())
    trace_.call(protocol::CmdType::RunOp, static_cast<uint16_t>(c.op), node, c.stream, c.out);
  return false;
}

void MasterSession::after_enqueue(Node& n, size_t queued, Wake how) {
  // Each flag is read before it is written: while the I/O thread is busy they stay as they
  // are, and a plain load costs far less than a locked write to a line it also uses. (The
  // I/O thread clears work_pending_ before it takes the batches, so a command added before
  // a `true` seen here is still flushed.)
  if (!work_pending_.load()) work_pending_.store(true);
  // The I/O thread or a requester holding the I/O may sleep (both watch the wake fd).
  // Lazy work wakes neither while the I/O thread dozes: whoever flushes next takes it. (The
  // I/O thread clears dozing_ before it checks work_pending_ and sleeps long.)
  if (how == Wake::kNow) {
    if (sleeping_.load() && sleeping_.exchange(false)) wake();
    if (holder_sleeping_.load() && holder_sleeping_.exchange(false)) wake();
  } else if (how == Wake::kLazy) {
    if (sleeping_.load() && !dozing_.load() && sleeping_.exchange(false)) wake();
  }
  if (queued >= kBackpressureCommands) {
    // The I/O thread flushes it (woken here even for a caller that flushes itself).
    if (sleeping_.exchange(false)) wake();
    // Yielding first (the I/O thread usually takes the batch within microseconds), then
    // sleeping: a worker that holds the master back (full queues) may take a while.
    for (int round = 0; !closed_.load() && !n.lost.load(); ++round) {
      {
        std::lock_guard lock(n.mu);
        if (n.batch.count() < kBackpressureCommands) break;
      }
      if (round < 64)
        std::this_thread::yield();
      else
        std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }
}

ReplyMessage MasterSession::request(int node, protocol::Command c) {
  return request(node, std::move(c), options_.sync_timeout);
}

ReplyMessage MasterSession::request(int node, protocol::Command c,
                                    std::chrono::milliseconds timeout) {
  if (closed_.load()) throw TransportError("the master-worker session is shut down");
  if (capturing()) refuse_sync_point_in_capture(c);
  Node& n = *nodes_[node];
  check_alive(node);
  const uint64_t request = next_request_.fetch_add(1);
  // The sync point's slice on the master's timeline, however the wait ends.
  struct SyncSlice {
    MasterSession& s;
    const protocol::Command& c;
    int node;
    uint64_t request;
    int64_t begin = s.trace_.on() ? trace::ticks() : 0;
    ~SyncSlice() {
      if (begin != 0)
        s.trace_.sync_point(protocol::command_type(c), op_code(c), node,
                            protocol::command_stream(c), request, begin, trace::ticks());
    }
  } slice{*this, c, node, request};
  std::visit(
      [&](auto& x) {
        if constexpr (requires { x.request; })
          x.request = request;
        else
          throw InvalidArgument(fmt::format("{} is not a request", protocol::command_name(c)));
      },
      c);
  std::future<ReplyMessage> future;
  {
    std::lock_guard lock(pending_mu_);
    Pending& p = pending_[request];
    p.node = node;
    future = p.promise.get_future();
  }
  // Not woken: this thread sends the request and reads the reply itself when it can.
  enqueue(node, c, nullptr, Wake::kNone);
  // The node may have been marked lost after the check above and before the promise was
  // registered; fail_node() would then have missed it.
  if (n.lost.load()) {
    bool erased;
    {
      std::lock_guard lock(pending_mu_);
      erased = pending_.erase(request) != 0;
    }
    if (erased) throw_lost(node);
  }
  bool replied = false;
  try {
    replied = await_reply(future, Clock::now() + timeout);
  } catch (...) {  // the wait interrupt check threw: the reply, if it comes, is dropped
    std::lock_guard lock(pending_mu_);
    pending_.erase(request);
    throw;
  }
  if (!replied) {
    std::lock_guard lock(pending_mu_);
    pending_.erase(request);
    throw TimeoutError(fmt::format("node {} ({}) did not answer request {} within {} ms", node,
                                   n.endpoint, request, timeout.count()));
  }
  try {
    return future.get();
  } catch (const WorkerLost&) {
    throw_lost(node);  // the same, naming what each node reported
  }
}

bool MasterSession::await_reply(std::future<ReplyMessage>& future, Clock::time_point deadline) {
  // How long this thread waits before it looks again at the clock and the I/O lock.
  constexpr auto kWaitSlice = std::chrono::milliseconds(5);
  constexpr int kLockSpins = 200;
  auto ready = [&] {
    return future.wait_for(std::chrono::seconds(0)) == std::future_status::ready;
  };
  Clock::time_point next_interrupt_check = Clock::now() + kWaitInterruptEvery;
  // The spin is once per request, from its start: a reply that takes longer (a large
  // tensor on its way) is waited for asleep, leaving the cores to the threads moving it.
  const Clock::time_point spin_until = Clock::now() + options_.spin;
  while (!ready()) {
    Clock::time_point now = Clock::now();
    if (now >= deadline) return false;
    if (now >= next_interrupt_check) {
      check_wait_interrupt();  // may throw: request() drops the pending reply
      next_interrupt_check = now + kWaitInterruptEvery;
    }
    auto slice = std::min(std::chrono::duration_cast<std::chrono::milliseconds>(deadline - now) +
                              std::chrono::milliseconds(1),
                          std::chrono::milliseconds(kWaitSlice));
    std::unique_lock lock(io_mu_, std::try_to_lock);
    // The I/O thread holds the lock for a flush or a read (microseconds): try again for a
    // little while before leaving the reply to it.
    for (int spin = 0; spin < kLockSpins && !lock.owns_lock() && !ready(); ++spin) {
      std::this_thread::yield();
      (void)lock.try_lock();
    }
    if (ready()) return true;
    if (!lock.owns_lock() || io_closed_) {
      // Another thread does the I/O (it flushes this request and reads its reply), or the
      // session is closing: wait for the reply it hands over.
      if (lock.owns_lock()) lock.unlock();
      if (sleeping_.exchange(false)) wake();
      if (future.wait_for(slice) == std::future_status::ready) return true;
      continue;
    }
    if (hold_io(future, std::min(deadline, now + kWaitSlice), spin_until)) return true;
  }
  return true;
}

bool MasterSession::hold_io(std::future<ReplyMessage>& future, Clock::time_point until,
                            Clock::time_point spin_until) {
  auto ready = [&] {
    return future.wait_for(std::chrono::seconds(0)) == std::future_status::ready;
  };
  // This thread is the I/O thread until its reply is here: it holds the lock while it
  // waits, so nobody else reads the sockets (and takes the wake-up meant for it); the I/O
  // thread meanwhile leaves them alone, and commands other threads queue wake this one
  // through the wake fd.
  holder_.store(true);
  struct Leave {
    MasterSession& s;
    ~Leave() {
      s.holder_.store(false);
      // Replies other threads wait for, and commands queued since the last flush, are the
      // I/O thread's again: wake it if it sleeps away from the sockets. (Heartbeats are
      // the heartbeat thread's.)
      bool others;
      {
        std::lock_guard lock(s.pending_mu_);
        others = !s.pending_.empty();
      }
      if ((others || s.work_pending_.load()) && s.sleeping_.exchange(false)) s.wake();
    }
  } leave{*this};
  while (true) {
    service(true);
    if (ready()) return true;
    Clock::time_point now = Clock::now();
    if (now >= until) return false;
    if (now < spin_until) {
      // Spin first: a reply that comes while this thread polls costs no wake-up. Yielding
      // lets the ZeroMQ I/O thread that brings it run on this core.
      while (!work_pending_.load() && !input_waiting() && Clock::now() < spin_until)
        std::this_thread::yield();
      continue;
    }
    holder_sleeping_.store(true);
    if (!work_pending_.load() && !input_waiting())
      wait_sockets(std::chrono::duration_cast<std::chrono::milliseconds>(until - now) +
                       std::chrono::milliseconds(1),
                   true, true);
    holder_sleeping_.store(false);
  }
}

void MasterSession::enqueue_collective(const std::vector<int>& nodes,
                                       std::vector<protocol::cmd::Collective> commands) {
  for (int n : nodes) check_alive(n);
  std::lock_guard lock(collectives_mu_);
  uint64_t group = 0;
  bool whole = static_cast<int>(nodes.size()) == node_count();
  for (size_t i = 0; i < nodes.size() && whole; ++i) whole = nodes[i] == static_cast<int>(i);
  if (!whole) {
    auto it = groups_.find(nodes);
    if (it == groups_.end()) {
      protocol::cmd::NewGroup make{.group = next_group_++};
      for (int n : nodes) make.ranks.push_back(static_cast<uint32_t>(n));
      // Every node takes part in making a subgroup, members or not.
      for (int k = 0; k < node_count(); ++k) enqueue(k, make);
      it = groups_.emplace(nodes, make.group).first;
    }
    group = it->second;
  }
  for (size_t i = 0; i < nodes.size(); ++i) {
    commands[i].group = group;
    enqueue(nodes[i], commands[i]);
  }
}

void MasterSession::check_alive(int node) {
  if (nodes_[node]->lost.load()) throw_lost(node);
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

void MasterSession::send_beat(Node& node) {
  // Connect mode. A DEALER queues it until its connection is up (its queue has no limit:
  // one message per heartbeat interval, for at most the heartbeat timeout).
  (void)protocol::send_message(*node.beat, nullptr, protocol::encode_heartbeat(), {});
}

void MasterSession::listen_beat_loop() {
  const std::string beat = protocol::encode_heartbeat();
  pollfd woken{beat_wake_fd_, POLLIN, 0};
  Clock::time_point next = Clock::now();
  while (!stop_.load()) {
    const auto wait = std::chrono::ceil<std::chrono::milliseconds>(next - Clock::now());
    if (wait.count() > 0) {
      if (::poll(&woken, 1, static_cast<int>(wait.count())) > 0) {
        uint64_t count;
        [[maybe_unused]] ssize_t n = read(beat_wake_fd_, &count, sizeof count);
      }
      continue;
    }
    next = Clock::now() + options_.heartbeat;
    bool readable = false;
    std::string failed;
    {
      std::lock_guard lock(router_mu_);
      if (!router_) return;  // the I/O thread closed it
      try {
        for (auto& node : nodes_) {
          if (node->lost.load()) continue;
          // The worker's heartbeat connection, or its data connection until that one is up
          // (a full queue drops it: the next one follows within an interval).
          const std::string to = protocol::beat_identity(node->identity);
          if (!protocol::send_message(*router_, &to, beat, {}))
            (void)protocol::send_message(*router_, &node->identity, beat, {});
        }
        // Using the socket may have taken the ZMQ_FD signal of a message the I/O owner,
        // asleep on that fd, is to read: wake it.
        readable = (router_->get(zmq::sockopt::events) & ZMQ_POLLIN) != 0;
      } catch (const zmq::error_t& e) {
        if (e.num() != EINTR) failed = e.what();
      }
    }
    if (!failed.empty()) {
      // Not expected (only shutdown closes the socket): without heartbeats the workers end
      // the session as if this master were silent, so say why on each node now.
      if (stop_.load()) return;
      for (auto& node : nodes_)
        fail_node(node->index, fmt::format("node {} ({}): sending heartbeats failed: {}",
                                           node->index, node->endpoint, failed));
      return;
    }
    if (readable) wake();
  }
}

void MasterSession::hold_io_for_test(std::chrono::milliseconds how_long) {
  std::lock_guard lock(io_mu_);
  std::this_thread::sleep_for(how_long);
}

bool MasterSession::data_read_since_silent(Node& node, Clock::time_point now) {
  // The heartbeat thread does not read the data connections: before it blames a node,
  // the I/O owner reads them once more (a pass that starts after now), so that a goodbye,
  // or a reply, that came while this process was stopped or starved counts. Bounded: an
  // I/O owner that makes no pass for another heartbeat timeout does not hold it back.
  if (node.suspect_pass == 0) {
    node.suspect_pass = receive_passes_.load() + 2;
    node.suspect_since = now;
    if (sleeping_.exchange(false)) wake();
    return false;
  }
  return receive_passes_.load() >= node.suspect_pass ||
         now - node.suspect_since > options_.heartbeat_timeout;
}

void MasterSession::liveness(Clock::time_point now) {
  for (auto& node : nodes_) {
    if (node->lost.load()) continue;
    const Clock::time_point heard{Clock::duration(node->last_heard.load())};
    // Never negative: another thread may have stamped it after `now` was read.
    auto silent = std::chrono::duration_cast<std::chrono::milliseconds>(
        std::max(now - heard, Clock::duration::zero()));
    if (silent <= options_.heartbeat_timeout) {
      node->suspect_pass = 0;
      continue;
    }
    if (!listening() && !data_read_since_silent(*node, now)) continue;
    fail_node(node->index,
              fmt::format("node {} ({}) is lost: nothing heard from it for {} ms (heartbeat "
                          "timeout {} ms)",
                          node->index, node->endpoint, silent.count(),
                          options_.heartbeat_timeout.count()));
  }
  if (listening()) return;  // listen_beat_loop() sends them
  if (now < next_heartbeat_) return;
  next_heartbeat_ = now + options_.heartbeat;
  for (auto& node : nodes_)
    if (!node->lost.load()) send_beat(*node);
}

void MasterSession::beat_loop() {
  std::vector<zmq::pollitem_t> items;
  for (auto& node : nodes_) items.push_back({node->beat->handle(), 0, ZMQ_POLLIN, 0});
  items.push_back({nullptr, beat_wake_fd_, ZMQ_POLLIN, 0});
  next_heartbeat_ = Clock::now();
  try {
    while (!stop_.load()) {
      // Everything that came is read before a node is judged silent: a master that was
      // stopped, or starved of CPU, finds its workers' heartbeats waiting.
      for (auto& node : nodes_) {
        bool heard = false;
        while (protocol::try_recv(*node->beat, 1)) heard = true;  // heartbeats only
        if (heard) node->last_heard.store(Clock::now().time_since_epoch().count());
      }
      liveness(Clock::now());
      auto wait = std::chrono::ceil<std::chrono::milliseconds>(next_heartbeat_ - Clock::now());
      for (auto& node : nodes_)  // a suspect is looked at again soon
        if (node->suspect_pass != 0 && !node->lost.load()) wait = std::min(wait, kSuspectLook);
      try {
        zmq::poll(items, std::max(wait, std::chrono::milliseconds(0)));
      } catch (const zmq::error_t& e) {
        if (e.num() != EINTR) throw;
      }
    }
  } catch (const zmq::error_t& e) {
    // Not expected (the sockets are this thread's): without heartbeats no node can be
    // trusted to be alive, so say so on each.
    for (auto& node : nodes_)
      fail_node(node->index, fmt::format("node {} ({}): the heartbeat connection failed: {}",
                                         node->index, node->endpoint, e.what()));
  }
  for (auto& node : nodes_) node->beat.reset();
}

void MasterSession::fail_node(int node, const std::string& why) {
  Node& n = *nodes_[node];
  {
    std::lock_guard lock(pending_mu_);
    if (n.lost.load()) return;
    n.lost_reason = why;
    n.lost.store(true);
  }
  {
    std::lock_guard lock(pending_mu_);
    for (auto it = pending_.begin(); it != pending_.end();) {
      if (it->second.node == node) {
        it->second.promise.set_exception(std::make_exception_ptr(WorkerLost(why)));
        it = pending_.erase(it);
      } else {
        ++it;
      }
    }
  }
  // One liveness rule for the session: the other workers learn it too, so that copies,
  // cross-node waits and collectives that involve the node fail now rather than at their
  // own timeouts. (No backpressure here: this may run on the thread that flushes.)
  if (closed_.load()) return;
  protocol::cmd::NodeLost lost{.node = static_cast<uint32_t>(node)};
  for (auto& other : nodes_) {
    if (other->index == node || other->lost.load()) continue;
    std::lock_guard lock(other->mu);
    other->batch.add(protocol::Command(lost));
  }
  if (!work_pending_.load()) work_pending_.store(true);
  if (sleeping_.exchange(false)) wake();
}

bool MasterSession::send_to(Node& node, std::string header,
                            std::span<const local::Tensor> payloads) {
  return send_batch(node, std::make_shared<const std::string>(std::move(header)),
                    std::vector<local::Tensor>(payloads.begin(), payloads.end()));
}

bool MasterSession::send_batch(Node& node, std::shared_ptr<const std::string> header,
                               std::vector<local::Tensor> payloads) {
  switch (try_send_to(node, header, payloads)) {
    case protocol::SendResult::kSent:
      return true;
    case protocol::SendResult::kWouldBlock:
      // The worker takes no more for now (its queue and ours are at their high-water
      // marks): keep the message for the next flush. Liveness says whether it is alive.
      node.unsent = std::move(header);
      node.unsent_payloads = std::move(payloads);
      return false;
    case protocol::SendResult::kUnreachable:
      return false;  // try_send_to failed the node
  }
  return false;
}

protocol::SendResult MasterSession::try_send_to(Node& node,
                                                const std::shared_ptr<const std::string>& header,
                                                std::span<const local::Tensor> payloads) {
  protocol::SendResult r;
  if (node.dealer) {
    r = protocol::try_send(*node.dealer, nullptr, header, payloads);
  } else {
    std::lock_guard lock(router_mu_);
    r = protocol::try_send(*router_, &node.identity, header, payloads);
  }
  if (r == protocol::SendResult::kUnreachable)
    fail_node(node.index, fmt::format("node {} ({}) is lost: its connection closed", node.index,
                                      node.endpoint));
  return r;
}

void MasterSession::send_control(Node& node, std::string header) {
  // A queue at its high-water mark drops it: a heartbeat or a goodbye is not worth a wait.
  (void)try_send_to(node, std::make_shared<const std::string>(std::move(header)), {});
}

bool MasterSession::send_unsent(Node& node) {
  if (!node.unsent) return true;
  std::shared_ptr<const std::string> header = std::move(node.unsent);
  node.unsent.reset();
  return send_batch(node, std::move(header), std::move(node.unsent_payloads));
}

void MasterSession::flush_all() {
  last_flush_.store(Clock::now().time_since_epoch().count(), std::memory_order_relaxed);
  bool blocked = false;
  for (auto& node : nodes_) {
    // A message the worker could not take yet goes first; until it has, new commands stay
    // in the node's batch (whose size holds callers at the backpressure limit).
    if (!node->lost.load() && !send_unsent(*node)) {
      blocked = true;
      continue;
    }
    std::string header;
    std::vector<local::Tensor> payloads;
    {
      std::lock_guard lock(node->mu);
      if (node->batch.count() == 0) continue;
      header = node->batch.finish();
      payloads.swap(node->payloads);
    }
    if (!node->lost.load() && !send_to(*node, std::move(header), payloads)) blocked = true;
  }
  blocked_.store(blocked);
}

void MasterSession::receive_all() {
  if (router_) {
    receive(*router_, -1);
  } else {
    for (auto& node : nodes_) receive(*node->dealer, node->index);  // heartbeats: beat_loop
  }
  receive_passes_.fetch_add(1);
}

void MasterSession::service(bool flush) {
  if (io_closed_) return;
  if (flush) {
    work_pending_.store(false);
    flush_all();
  }
  // What arrived is read before a node is judged silent: a process that was stopped (or
  // starved of CPU) finds its workers' heartbeats, or a worker's goodbye and its reason,
  // before it blames them.
  receive_all();
  if (router_) liveness(Clock::now());  // connect mode: the heartbeat thread's
  // Last: every socket is left read until it has nothing (the rule for sleeping on their
  // ZMQ_FD, which may only signal again after that).
  receive_all();
}

bool MasterSession::input_waiting() {
  auto has = [](zmq::socket_t& socket) {
    return (socket.get(zmq::sockopt::events) & ZMQ_POLLIN) != 0;
  };
  if (router_) {
    std::lock_guard lock(router_mu_);
    return has(*router_);
  }
  for (auto& node : nodes_)
    if (node->dealer && has(*node->dealer)) return true;
  return false;
}

void MasterSession::wait_sockets(std::chrono::milliseconds timeout, bool with_wake,
                                 bool with_sockets) {
  std::vector<pollfd> fds;
  if (with_sockets) fds = socket_fds_;
  if (with_wake) fds.push_back(pollfd{wake_fd_, POLLIN, 0});
  ::poll(fds.data(), fds.size(), static_cast<int>(timeout.count()));
  if (with_wake && (fds.back().revents & POLLIN)) {
    uint64_t count;
    [[maybe_unused]] ssize_t n = read(wake_fd_, &count, sizeof(count));
  }
}

void MasterSession::io_loop() {
  // While callers keep it busy sending, replies and heartbeats are still read this often.
  constexpr auto kBusyService = std::chrono::milliseconds(20);
  prctl(PR_SET_TIMERSLACK, 1000UL);  // the cork's wait, to the microsecond (this thread only)
  Clock::time_point serviced = Clock::now();
  while (true) {
    // A requester holding the I/O (hold_io) flushes and reads for everyone meanwhile:
    // this thread never waits for the lock, and sleeps away from the sockets then. A
    // message a full queue refused is tried again whenever the sockets stir (ZMQ_FD also
    // signals room to send).
    if (work_pending_.load() || blocked_.load()) {
      // In a burst (work again within kCork of the last flush), the flush waits until kCork
      // after the last one, so that a message carries more commands; otherwise kFirstDelay,
      // so that a request following the work (a requester flushes at once) takes it along.
      Clock::time_point last(Clock::duration(last_flush_.load(std::memory_order_relaxed)));
      Clock::time_point woken = Clock::now();
      if (woken < last + kCork)
        std::this_thread::sleep_until(last + kCork);
      else if (!holder_.load())
        std::this_thread::sleep_until(woken + kFirstDelay);
      std::unique_lock lock(io_mu_, std::try_to_lock);
      if (lock.owns_lock()) {
        Clock::time_point now = Clock::now();
        bool full = now - serviced >= kBusyService;
        if (full) {
          service(true);
          serviced = now;
        } else if (!io_closed_) {
          work_pending_.store(false);
          flush_all();
        }
      }
    }
    if (stop_.load()) break;
    // Doze (look again soon) while the session is busy; lazy work then needs no wake-up.
    Clock::time_point last(Clock::duration(last_flush_.load(std::memory_order_relaxed)));
    const bool dozing = Clock::now() - last < kDozeWindow;
    dozing_.store(dozing);
    sleeping_.store(true);
    if (work_pending_.load() && !holder_.load()) {
      sleeping_.store(false);
      continue;
    }
    {
      // Whatever a requester left unread (it may have woken this thread's poll for
      // nothing, or left before a message arrived): read it now, then sleep.
      std::unique_lock lock(io_mu_, std::try_to_lock);
      if (lock.owns_lock()) {
        service(false);
        serviced = Clock::now();
      }
    }
    if (work_pending_.load() && !holder_.load()) {
      sleeping_.store(false);
      continue;
    }
    wait_sockets(dozing ? std::chrono::milliseconds(kDoze) : kIdlePoll, true, !holder_.load());
    sleeping_.store(false);
  }
  std::lock_guard lock(io_mu_);
  io_closed_ = true;
  flush_all();
  std::string goodbye = protocol::encode_goodbye();
  for (auto& node : nodes_)
    if (!node->lost.load()) send_control(*node, goodbye);
  // Let ZeroMQ hand the goodbyes to the kernel before the sockets close (linger is 0).
  for (auto& node : nodes_)
    if (node->dealer) node->dealer->set(zmq::sockopt::linger, 1000);
  for (auto& node : nodes_) node->dealer.reset();  // the heartbeat thread closed `beat`
  std::lock_guard rlock(router_mu_);
  if (router_) router_->set(zmq::sockopt::linger, 1000);
  router_.reset();
}

void MasterSession::receive(zmq::socket_t& socket, int node) {
  auto next = [&] {
    if (node >= 0) return protocol::try_recv(socket, kMaxFrames);
    std::lock_guard lock(router_mu_);  // listen mode: the heartbeat thread sends on it
    return protocol::try_recv(socket, kMaxFrames);
  };
  while (auto msg = next()) {
    if (node < 0) {
      if (msg->frames.empty()) continue;
      auto it = node_of_identity_.find(std::string(frame_view(msg->frames[0])));
      if (it == node_of_identity_.end()) continue;  // not one of this session's workers
      dispatch(it->second, *msg, 1);
    } else {
      dispatch(node, *msg, 0);
    }
  }
}

namespace {

// A Get reply's tensor: its payload frame, checked against `m` (wrapped without a copy when
// aligned for the dtype).
local::Tensor get_payload(const TensorMeta& m, zmq::message_t&& bytes) {
  size_t expected = static_cast<size_t>(m.numel()) * element_size(m.dtype);
  auto frame = protocol::share_frame(std::move(bytes));
  if (frame->size() != expected)
    throw ProtocolError(fmt::format("get reply carries {} bytes, {} needs {}", frame->size(),
                                    describe(m), expected));
  std::shared_ptr<Storage> storage;
  if (reinterpret_cast<uintptr_t>(frame->data()) % element_size(m.dtype) == 0) {
    storage = Storage::wrap(frame->data(), frame->size(), frame);
  } else {
    storage = Storage::allocate(expected);
    std::memcpy(storage->data(), frame->data(), expected);
  }
  return local::Tensor(std::move(storage), TensorMeta::contiguous(m.dtype, m.shape));
}

}  // namespace

void MasterSession::dispatch(int node, protocol::Received& msg, size_t first) {
  nodes_[node]->last_heard.store(Clock::now().time_since_epoch().count());
  auto fail_request = [&](uint64_t request, std::exception_ptr e) {
    std::lock_guard lock(pending_mu_);
    auto it = pending_.find(request);
    if (it == pending_.end()) return false;
    it->second.promise.set_exception(e);
    pending_.erase(it);
    return true;
  };
  // A malformed or unexpected message fails every request waiting on this node: the
  // session with it can no longer be trusted to answer them.
  auto poison = [&](const std::string& why) {
    std::lock_guard lock(pending_mu_);
    for (auto it = pending_.begin(); it != pending_.end();) {
      if (it->second.node == node) {
        it->second.promise.set_exception(std::make_exception_ptr(ProtocolError(why)));
        it = pending_.erase(it);
      } else {
        ++it;
      }
    }
  };
  if (msg.frames.size() <= first || msg.truncated) {
    poison(fmt::format("node {} sent an empty or oversized message", node));
    return;
  }
  try {
    std::string_view header = frame_view(msg.frames[first]);
    MsgType type = protocol::peek_type(header);
    if (type == MsgType::Heartbeat) return;
    if (type == MsgType::Goodbye) {
      // The worker ended the session on its own (it found this master silent for its
      // timeout, say): the node is lost to this session, and the reason says why.
      protocol::Goodbye g = protocol::decode_goodbye(header);
      fail_node(node,
                fmt::format("node {} ({}) ended the session: {}", node, nodes_[node]->endpoint,
                            g.reason.empty() ? std::string("no reason given") : g.reason));
      return;
    }
    if (type != MsgType::Reply)
      throw ProtocolError(fmt::format("unexpected message type {}", static_cast<int>(type)));
    size_t payload_frames = msg.frames.size() - first - 1;
    protocol::Reply reply = protocol::decode_reply(header, payload_frames);
    if (reply.type == protocol::ReplyType::Flight && reply.request == 0) {
      note_flight(node, std::move(reply.flight));  // sent unasked: kept for the errors
      return;
    }
    if (reply.type == protocol::ReplyType::ProtocolError) {
      auto e = std::make_exception_ptr(ProtocolError(fmt::format(
          "node {} ({}) rejected a message: {}", node, nodes_[node]->endpoint, reply.message)));
      if (reply.request == 0 || !fail_request(reply.request, e))
        poison(fmt::format("node {} ({}) rejected a message: {}", node, nodes_[node]->endpoint,
                           reply.message));
      return;
    }
    ReplyMessage out;
    if (payload_frames == 1)
      out.payload = get_payload(reply.meta, std::move(msg.frames[first + 1]));
    out.reply = std::move(reply);
    std::lock_guard lock(pending_mu_);
    auto it = pending_.find(out.reply.request);
    if (it == pending_.end()) return;  // the requester timed out and left
    it->second.promise.set_value(std::move(out));
    pending_.erase(it);
  } catch (const Error& e) {
    poison(
        fmt::format("node {} ({}) sent a bad message: {}", node, nodes_[node]->endpoint, e.what()));
  }
}

}  // namespace dtr::detail
