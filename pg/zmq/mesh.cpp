#include "pg/zmq/mesh.hpp"

#include <fmt/format.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cstddef>
#include <cstdio>
#include <cstring>

#include "common/same_host.hpp"
#include "pg/reduce.hpp"
#include "pg/util.hpp"
#include "protocol/transport.hpp"

namespace dtr::pg {
namespace {

// How long a closed connection may wait for the peer's goodbye before it counts as death.
// The goodbye travels on the peer's own connection to this rank's ROUTER, not on the one
// that closed, so nothing orders the two: 250 ms was too short on a loaded machine (under
// ThreadSanitizer, three test processes at once: a rank that had left cleanly was reported
// dead in 2 runs of 45).
constexpr auto kDisconnectGrace = std::chrono::seconds(1);
// The largest payload by address a receiver copies before a receive takes it.
constexpr uint64_t kMaxStagedBytes = uint64_t{1} << 40;
// How long a payload by address waits for its receive before the I/O thread copies it.
constexpr auto kStageGrace = std::chrono::milliseconds(1);
// I/O loop tick: deadlines and disconnect verdicts are checked at least this often.
constexpr auto kTick = std::chrono::milliseconds(20);
// The small-message path: how long the I/O thread keeps away from the ROUTER after the last
// FastReader scope ended, how long it dozes meanwhile, how many times a reader polls the
// socket without waiting before it blocks, and the longest such block.
constexpr auto kFastGrace = std::chrono::milliseconds(2);
constexpr auto kDoze = std::chrono::milliseconds(1);
constexpr int kFastSpins = 200;
constexpr auto kFastSlice = std::chrono::milliseconds(2);

// The mesh whose FastReader scope the calling thread is in.
thread_local Mesh* t_fast_mesh = nullptr;
std::atomic<uint64_t> g_fast_reads{0}, g_io_reads{0};
std::atomic<uint64_t> g_by_address{0};
std::atomic<uint64_t> g_by_ring{0};
std::atomic<uint64_t> g_rings_sent{0};
std::atomic<uint64_t> g_ring_spins_out{0};
// A send waiting for room in a full ring: polls this many times, then sleeps kRingNap
// between looks (waking the receiver, when it sleeps, each time).
constexpr int kRingSpins = 64;
constexpr auto kRingNap = std::chrono::microseconds(50);
// How long a blocking point-to-point call polls its group's rings (spin_rings).
constexpr auto kRingSpinFor = std::chrono::microseconds(200);
// How long it polls within kBellRecent of this process waking a sleeping peer (a Ring
// message), when the group's ranks do not outnumber the CPUs. That peer answers only after
// its wake-up went through ZeroMQ and two of its threads (0.3-0.7 ms on the 2-core
// development VM): polling for 200 us, this rank fell asleep too, and the two then woke
// each other through the sockets message after message (0.4-1 ms a round trip instead of
// 14 us, until one wake-up happened to be quick).
constexpr auto kRingSpinAfterBell = std::chrono::milliseconds(2);
constexpr auto kBellRecent = std::chrono::milliseconds(5);
// After a caller's last spin on the rings, how long the I/O thread keeps sleeping without
// their bell (peers send no Ring messages meanwhile); it looks at the rings at least this
// often then. While a caller polls them, it looks only every kTick: each of its wake-ups
// takes a CPU from a polling rank on a machine with as many CPUs as ranks, and at 200 a
// second they were nearly all of a 64 KiB ping-pong's slow round trips (perf sched).
constexpr auto kRingLinger = std::chrono::milliseconds(5);

bool is_done(Work::State& w) {
  std::lock_guard lock(w.m);
  return w.done;
}

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch())
      .count();
}

struct FrameRef {
  std::shared_ptr<void> keepalive;
  std::shared_ptr<SendTracker> tracker;
};

void free_frame(void*, void* hint) {
  auto* ref = static_cast<FrameRef*>(hint);
  std::shared_ptr<SendTracker> t = std::move(ref->tracker);
  delete ref;
  if (t) t->release();
}

std::exception_ptr make_coded(ErrCode code, const std::string& text) {
  try {
    throw_coded(code, text);
  } catch (...) {
    return std::current_exception();
  }
}

}  // namespace

void Incoming::copy_to(void* dst, int64_t numel, DType dtype) const {
  // Every frame but the last holds kMaxFrameBytes, a multiple of every element size.
  const int64_t es = static_cast<int64_t>(element_size(dtype));
  char* out = static_cast<char*>(dst);
  int64_t left = numel;
  auto copy_frame = [&](const zmq::message_t& f) {
    const int64_t n = std::min<int64_t>(left, static_cast<int64_t>(f.size()) / es);
    copy_elements(out, f.data(), n, dtype);
    out += n * es;
    left -= n;
  };
  copy_frame(payload);
  for (const zmq::message_t& f : more) copy_frame(f);
}

void Incoming::join() {
  if (more.empty()) return;
  zmq::message_t whole(static_cast<size_t>(bytes()));
  char* out = static_cast<char*>(whole.data());
  std::memcpy(out, payload.data(), payload.size());
  out += payload.size();
  for (const zmq::message_t& f : more) {
    std::memcpy(out, f.data(), f.size());
    out += f.size();
  }
  payload = std::move(whole);
  more.clear();
}

void SendTracker::release() {
  std::function<void()> fn;
  {
    std::lock_guard lock(m);
    if (--pending == 0) {
      cv.notify_all();
      if (closed && on_zero) fn = std::move(on_zero);
    }
  }
  if (fn) fn();
}

void SendTracker::close() {
  std::function<void()> fn;
  {
    std::lock_guard lock(m);
    closed = true;
    if (pending == 0 && on_zero) fn = std::move(on_zero);
  }
  if (fn) fn();
}

void throw_coded(ErrCode code, const std::string& text) {
  switch (code) {
    case ErrCode::InvalidArgument:
      throw InvalidArgument(text);
    case ErrCode::Shape:
      throw ShapeError(text);
    case ErrCode::DType:
      throw DTypeError(text);
    case ErrCode::Transport:
      throw TransportError(text);
    case ErrCode::Timeout:
      throw TimeoutError(text);
    case ErrCode::Protocol:
      throw ProtocolError(text);
    case ErrCode::Error:
      break;
  }
  throw Error(text);
}

ErrCode code_of(const std::exception_ptr& e) {
  try {
    std::rethrow_exception(e);
  } catch (const ShapeError&) {
    return ErrCode::Shape;
  } catch (const DTypeError&) {
    return ErrCode::DType;
  } catch (const InvalidArgument&) {
    return ErrCode::InvalidArgument;
  } catch (const TransportError&) {
    return ErrCode::Transport;
  } catch (const TimeoutError&) {
    return ErrCode::Timeout;
  } catch (const ProtocolError&) {
    return ErrCode::Protocol;
  } catch (...) {
    return ErrCode::Error;
  }
}

namespace {

// ZeroMQ I/O threads per mesh: DTR_PG_IO_THREADS, else kIoThreads. Two let the sends of a
// rank and its receives run their system calls at the same time (docs/process_groups.md).
constexpr int kIoThreads = 2;
constexpr int kMaxIoThreads = 16;

int io_threads() {
  const char* v = std::getenv("DTR_PG_IO_THREADS");
  if (v == nullptr || *v == '\0') return kIoThreads;
  const int64_t n = parse_int(v, "DTR_PG_IO_THREADS");
  if (n < 1 || n > kMaxIoThreads) {
    throw InvalidArgument(
        fmt::format("DTR_PG_IO_THREADS={}: expected 1 to {} (ZeroMQ I/O threads per process "
                    "group)",
                    v, kMaxIoThreads));
  }
  return static_cast<int>(n);
}

}  // namespace

Mesh::Mesh(int world_size, const ProcessGroupOptions& options, const std::string& bind_endpoint)
    : world_(world_size),
      options_(options),
      ctx_(io_threads()),
      guard_(std::make_unique<security::Guard>(
          ctx_, options.security ? *options.security : resolve_security())),
      router_(ctx_, zmq::socket_type::router) {
  protocol::tune_allocator_for_frames();
  router_.set(zmq::sockopt::linger, 0);
  router_.set(zmq::sockopt::rcvhwm, 0);
  router_.set(zmq::sockopt::sndhwm, 0);
  router_.set(zmq::sockopt::rcvbuf, 4 << 20);
  // Every frame a rank sends fits (payloads are cut into frames of kMaxFrameBytes).
  router_.set(zmq::sockopt::maxmsgsize, static_cast<int64_t>(kMaxFrameBytes + kFrameSlackBytes));
  const int hb = static_cast<int>(std::max<int64_t>(options.heartbeat_timeout.count(), 100));
  router_.set(zmq::sockopt::heartbeat_ivl, std::max(hb / 10, 50));
  router_.set(zmq::sockopt::heartbeat_timeout, hb);
  router_.set(zmq::sockopt::heartbeat_ttl, hb);
  try {
    guard_->server(router_, bind_endpoint, "process-group endpoint");
  } catch (const AuthenticationError& e) {
    // SPMD ranks have no dtr-worker flags: say what such a program sets.
    throw AuthenticationError(fmt::format(
        "{}. In an SPMD program: when every rank runs on this host, set DTR_PG_ADDR=127.0.0.1 "
        "(or ProcessGroupOptions::bind_address) so that the group stays on loopback; across "
        "hosts, set DTR_KEY_FILE to the cluster key on every rank, or DTR_INSECURE=1",
        e.what()));
  }
  try {
    router_.bind(bind_endpoint);
  } catch (const zmq::error_t& e) {
    throw TransportError(fmt::format("process group: cannot bind {}: {}", bind_endpoint,
                                     protocol::bind_failure(e.num())));
  }
  bound_ = router_.get(zmq::sockopt::last_endpoint);
  wake_fd_ = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (wake_fd_ < 0) throw TransportError("process group: eventfd failed");
}

Mesh::~Mesh() {
  shutdown();
  if (wake_fd_ >= 0) ::close(wake_fd_);
}

std::string Mesh::describe_rank(int r) const {
  if (r >= 0 && r < static_cast<int>(endpoints_.size())) {
    return fmt::format("rank {} ({})", r, endpoints_[r]);
  }
  return fmt::format("rank {}", r);
}

void Mesh::connect(int rank, const std::vector<std::string>& endpoints, uint64_t token) {
  rank_ = rank;
  endpoints_ = endpoints;
  token_ = token;
  peers_.assign(world_, Peer{});
  peer_pids_.assign(world_, 0);
  const int hb = static_cast<int>(std::max<int64_t>(options_.heartbeat_timeout.count(), 100));
  for (int j = 0; j < world_; ++j) {
    auto d = std::make_unique<Dealer>();
    d->sock = zmq::socket_t(ctx_, zmq::socket_type::dealer);
    d->sock.set(zmq::sockopt::routing_id, fmt::format("r{}", rank));
    d->sock.set(zmq::sockopt::linger, 1000);
    d->sock.set(zmq::sockopt::sndhwm, 0);
    // A DEALER only sends: what may arrive is ZeroMQ's handshake and heartbeats, so a
    // stranger bound at a peer's address can make it hold little.
    d->sock.set(zmq::sockopt::rcvhwm, 16);
    d->sock.set(zmq::sockopt::maxmsgsize, static_cast<int64_t>(kMaxControlFrameBytes));
    d->sock.set(zmq::sockopt::sndbuf, 4 << 20);
    d->sock.set(zmq::sockopt::reconnect_ivl, 100);
    d->sock.set(zmq::sockopt::heartbeat_ivl, std::max(hb / 10, 50));
    d->sock.set(zmq::sockopt::heartbeat_timeout, hb);
    d->sock.set(zmq::sockopt::heartbeat_ttl, hb);
    if (j != rank) {
      const std::string mon = fmt::format("inproc://dtr-pg-mon-{}-{}", static_cast<void*>(this), j);
      if (zmq_socket_monitor(d->sock.handle(), mon.c_str(), ZMQ_EVENT_DISCONNECTED) != 0) {
        throw TransportError("process group: zmq_socket_monitor failed");
      }
      zmq::socket_t pair(ctx_, zmq::socket_type::pair);
      pair.set(zmq::sockopt::linger, 0);
      pair.set(zmq::sockopt::maxmsgsize, static_cast<int64_t>(kMaxControlFrameBytes));
      pair.connect(mon);
      monitors_.push_back(std::move(pair));
    } else {
      monitors_.emplace_back();
    }
    guard_->client(d->sock, endpoints[j], describe_rank(j));
    try {
      d->sock.connect(endpoints[j]);
    } catch (const zmq::error_t& e) {
      throw TransportError(
          fmt::format("process group: cannot connect to {}: {}", describe_rank(j), e.what()));
    }
    d->open = true;
    dealers_.push_back(std::move(d));
  }
  io_ = std::thread([this] { io_loop(); });

  for (int j = 0; j < world_; ++j) {
    if (j == rank_) continue;
    WireHeader h;
    h.kind = static_cast<uint8_t>(MsgKind::Hello);
    send(j, h, {});
  }
  const auto deadline = Clock::now() + options_.timeout;
  std::unique_lock lock(m_);
  while (true) {
    std::vector<int> missing;
    for (int j = 0; j < world_; ++j) {
      if (j == rank_ || peers_[j].hello) continue;
      missing.push_back(j);
      if (peers_[j].state != PeerState::Alive) {
        throw TransportError("process group rendezvous: " + peers_[j].reason);
      }
    }
    if (missing.empty()) return;
    if (Clock::now() >= deadline) {
      std::string who;
      for (int j : missing) who += (who.empty() ? "" : ", ") + describe_rank(j);
      throw TimeoutError(
          fmt::format("process group rendezvous (rank {} of {}): no hello within {} ms from {}",
                      rank_, world_, options_.timeout.count(), who));
    }
    cv_.wait_until(lock, std::min(deadline, Clock::now() + std::chrono::milliseconds(100)));
  }
}

void Mesh::stamp(WireHeader& h, uint64_t payload) const {
  h.magic = kWireMagic;
  h.version = kWireVersion;
  h.token = token_;
  h.src = rank_;
  h.payload = payload;
}

void Mesh::send(int dst, WireHeader h, Payload p) {
  if (p.forward != nullptr) {
    // A received frame sent on: its bytes stay where they are, kept by the frames below.
    auto held = std::make_shared<zmq::message_t>(std::move(*p.forward));
    p.data = held->data();
    p.bytes = held->size();
    p.keepalive = std::move(held);
  }
  stamp(h, p.bytes);
  // The payload in frames of kMaxFrameBytes (what every receiver accepts), zero-copy.
  std::vector<zmq::message_t> body;
  body.reserve(static_cast<size_t>(frames_for(p.bytes)));
  for (uint64_t i = 0; i < frames_for(p.bytes); ++i) {
    auto* ref = new FrameRef{p.keepalive, p.tracker};
    if (p.tracker) p.tracker->add();
    body.emplace_back(const_cast<char*>(static_cast<const char*>(p.data)) + i * kMaxFrameBytes,
                      static_cast<size_t>(frame_bytes(p.bytes, i)), free_frame, ref);
  }
  if (dst < 0 || dst >= world_) throw InvalidArgument(fmt::format("send to rank {}", dst));
  {
    std::lock_guard lock(m_);
    if (peers_[dst].state != PeerState::Alive) throw TransportError(peers_[dst].reason);
  }
  // With a tracker the header frame is tracked too, so that "released" means the whole
  // message has left the process (header-only messages included).
  zmq::message_t hdr;
  if (p.tracker) {
    auto copy = std::make_shared<WireHeader>(h);
    void* data = copy.get();
    auto* ref = new FrameRef{std::move(copy), p.tracker};
    p.tracker->add();
    hdr = zmq::message_t(data, sizeof h, free_frame, ref);
  } else {
    hdr = zmq::message_t(&h, sizeof h);
  }
  Dealer& d = *dealers_[dst];
  std::lock_guard lock(d.m);
  if (!d.open) throw TransportError("process group: the connection was shut down");
  auto more = [](bool m) {
    return m ? zmq::send_flags::sndmore | zmq::send_flags::dontwait : zmq::send_flags::dontwait;
  };
  auto r = d.sock.send(hdr, more(!body.empty()));
  for (size_t i = 0; r && i < body.size(); ++i) r = d.sock.send(body[i], more(i + 1 < body.size()));
  if (!r)
    throw TransportError(fmt::format("process group: send to {} would block", describe_rank(dst)));
}

Incoming Mesh::take(uint64_t group, uint64_t seq, int src, Clock::time_point deadline,
                    const std::vector<int>& members, const std::string& what,
                    const WireHeader* expect) {
  std::unique_lock lock(m_);
  const auto key = std::make_pair(group, seq);
  auto odd = [&](const WireHeader& h) {
    return expect != nullptr &&
           (h.op != expect->op || h.dtype != expect->dtype || h.count != expect->count ||
            h.reduce != expect->reduce || h.root != expect->root);
  };
  while (true) {
    auto it = channels_.find(key);
    if (it != channels_.end()) {
      auto& q = it->second.msgs;
      for (auto mit = q.begin(); mit != q.end(); ++mit) {
        if (mit->h.src == src || odd(mit->h)) {
          Incoming out = std::move(*mit);
          q.erase(mit);
          return out;
        }
      }
      if (it->second.aborted) throw_coded(it->second.code, it->second.text);
    }
    if (shut_) throw Error(what + ": the process group was shut down");
    if (peers_[src].state != PeerState::Alive) {
      throw TransportError(fmt::format("{}: {}", what, peers_[src].reason));
    }
    for (int m : members) {
      if (peers_[m].state == PeerState::Dead) {
        throw TransportError(fmt::format("{}: {}", what, peers_[m].reason));
      }
    }
    if (Clock::now() >= deadline) {
      throw TimeoutError(fmt::format("{}: timed out after {} ms waiting for {}", what,
                                     options_.timeout.count(), describe_rank(src)));
    }
    if (t_fast_mesh == this) {
      // Read the ROUTER on this thread; when the I/O thread holds it, it lets go once woken.
      lock.unlock();
      const bool read = pump(deadline);
      lock.lock();
      if (read) continue;
      wake_io();
      cv_.wait_until(lock, std::min(deadline, Clock::now() + std::chrono::microseconds(200)));
      continue;
    }
    ++idle_waiters_;
    if (!io_reading_.load()) wake_io();
    cv_.wait_until(lock, deadline);
    --idle_waiters_;
  }
}

void Mesh::count_pending() {
  size_t n = 0;
  for (const auto& r : pending_) n += r.owner_reads ? 0 : 1;
  pending_count_ = n;
}

void Mesh::serve_until(Work::State& work, Clock::time_point deadline) {
  FastReader fast(*this);
  while (Clock::now() < deadline && !shut_.load()) {
    {
      std::unique_lock lock(work.m);
      if (work.done) return;
    }
    if (pump(deadline)) continue;
    wake_io();  // the I/O thread holds the ROUTER: it lets go once woken
    std::unique_lock lock(work.m);
    work.cv.wait_for(lock, std::chrono::microseconds(200), [&] { return work.done; });
  }
}

MeshReadCounts mesh_read_counts() {
  return {g_fast_reads.load(), g_io_reads.load(),   g_by_address.load(),
          g_by_ring.load(),    g_rings_sent.load(), g_ring_spins_out.load()};
}

Mesh::FastReader::FastReader(Mesh& mesh) : mesh_(mesh), previous_(t_fast_mesh) {
  t_fast_mesh = &mesh;
  ++mesh.fast_scopes_;
}

Mesh::FastReader::~FastReader() {
  mesh_.fast_ended_ns_ = now_ns();
  --mesh_.fast_scopes_;
  t_fast_mesh = previous_;
  // Someone waits without reading (a receive, another thread's collective): hand the
  // ROUTER back to the I/O thread at once.
  if (mesh_.idle_waiters_.load() > 0 || mesh_.pending_count_.load() > 0) mesh_.wake_io();
}

void Mesh::wake_io() {
  uint64_t one = 1;
  [[maybe_unused]] auto n = ::write(wake_fd_, &one, sizeof one);
}

bool Mesh::io_may_read(Clock::time_point now) const {
  if (idle_waiters_.load() > 0 || pending_count_.load() > 0) return true;
  if (fast_scopes_.load() > 0) return false;
  const auto since =
      std::chrono::nanoseconds(now.time_since_epoch().count() - fast_ended_ns_.load());
  return since >= kFastGrace;
}

bool Mesh::pump(Clock::time_point deadline) {
  std::unique_lock rl(router_m_, std::try_to_lock);
  if (!rl.owns_lock()) return false;
  if (shut_.load()) return true;  // the ROUTER may be closed; take() sees shut_
  std::vector<zmq::message_t> frames;
  auto drain = [&] {
    while (read_message(frames)) ++g_fast_reads;
    drain_rings();
  };
  for (int i = 0; i < kFastSpins; ++i) {
    const bool rings = drain_rings();
    if (read_message(frames)) {
      ++g_fast_reads;
      drain();
      return true;
    }
    if (rings) return true;
  }
  // About to sleep: a peer's next ring record comes with a Ring message on the ROUTER.
  arm_rings(true);
  if (drain_rings()) {
    arm_rings(false);
    return true;
  }
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
  zmq::pollitem_t item{router_.handle(), 0, ZMQ_POLLIN, 0};
  try {
    zmq::poll(&item, 1, std::clamp(left, std::chrono::milliseconds(0), kFastSlice));
  } catch (const zmq::error_t&) {
    arm_rings(false);
    return true;  // EINTR: take() looks again
  }
  arm_rings(false);
  drain();
  return true;
}

void Mesh::finish_collective(uint64_t group, uint64_t seq) {
  std::lock_guard lock(m_);
  auto& w = done_upto_[group];
  w = std::max(w, seq);
  auto first = channels_.lower_bound({group, 0});
  auto last = channels_.upper_bound({group, seq});
  channels_.erase(first, last);
}

void Mesh::send_abort(uint64_t group, uint64_t seq, CommOp op, const std::vector<int>& members,
                      ErrCode code, const std::string& text) {
  std::string t = text.substr(0, kMaxAbortText);
  auto keep = std::make_shared<std::string>(std::move(t));
  for (int m : members) {
    if (m == rank_) continue;
    WireHeader h;
    h.kind = static_cast<uint8_t>(MsgKind::Abort);
    h.op = static_cast<uint8_t>(op);
    h.group = group;
    h.seq = seq;
    h.reduce = static_cast<uint8_t>(code);
    Payload p;
    p.data = keep->data();
    p.bytes = keep->size();
    p.keepalive = keep;
    try {
      send(m, h, std::move(p));
    } catch (const Error&) {
      // best effort: a dead or departed peer needs no abort
    }
  }
}

void Mesh::check_alive(const std::vector<int>& members, const std::string& what) {
  std::lock_guard lock(m_);
  if (shut_) throw Error(what + ": the process group was shut down");
  for (int m : members) {
    if (peers_[m].state != PeerState::Alive) {
      throw TransportError(fmt::format("{}: {}", what, peers_[m].reason));
    }
  }
}

void Mesh::wait_sent(SendTracker& t, Clock::time_point deadline, const std::vector<int>& dsts,
                     const std::string& what) {
  while (true) {
    {
      std::unique_lock lock(t.m);
      if (t.pending == 0) return;
      t.cv.wait_for(lock, std::chrono::milliseconds(20));
      if (t.pending == 0) return;
    }
    check_alive(dsts, what);
    if (Clock::now() >= deadline) {
      throw TimeoutError(
          fmt::format("{}: sends not delivered within {} ms", what, options_.timeout.count()));
    }
  }
}

void Mesh::complete_recv(RecvRequest& req, Incoming& msg) {
  const auto& h = msg.h;
  const int64_t numel = req.tensor.meta().numel();
  const DType dt = req.tensor.meta().dtype;
  int src_group = -1;
  for (size_t i = 0; i < req.members.size(); ++i) {
    if (req.members[i] == h.src) src_group = static_cast<int>(i);
  }
  try {
    if (!msg.error.empty()) throw_coded(msg.error_code, req.what + ": " + msg.error);
    const auto got_dtype = static_cast<DType>(h.dtype);
    if (got_dtype != dt) {
      throw DTypeError(
          fmt::format("{}: rank {} sent {} with {} elements, the receive tensor is "
                      "{} with {} elements",
                      req.what, src_group, dtype_name(got_dtype), h.count, dtype_name(dt), numel));
    }
    if (h.count != numel) {
      throw ShapeError(fmt::format("{}: rank {} sent {} elements, the receive tensor has {} ({})",
                                   req.what, src_group, h.count, numel,
                                   describe(req.tensor.meta())));
    }
    const uint64_t bytes = static_cast<uint64_t>(numel) * element_size(dt);
    if (static_cast<MsgKind>(h.kind) == MsgKind::DataAt) {
      read_by_address(msg, req.tensor.raw_data(), bytes, req.what, src_group);
      req.work->complete(nullptr, src_group);
      return;
    }
    if (msg.bytes() != bytes) {
      throw ProtocolError(
          fmt::format("{}: rank {} sent {} payload bytes for {} elements ({} expected)", req.what,
                      src_group, msg.bytes(), numel, bytes));
    }
    msg.copy_to(req.tensor.raw_data(), numel, dt);
    req.work->complete(nullptr, src_group);
  } catch (...) {
    if (static_cast<MsgKind>(h.kind) == MsgKind::DataAt) {
      // A mismatched receive does not take the payload: the sender may let it go.
      uint64_t offer = 0;
      std::memcpy(&offer,
                  static_cast<const char*>(msg.payload.data()) + offsetof(AddressPayload, offer),
                  sizeof offer);
      release(h.src, offer, h.group);
    }
    req.work->complete(std::current_exception(), src_group);
  }
}

void Mesh::read_by_address(const Incoming& msg, void* dst, uint64_t bytes, const std::string& what,
                           int src_group) {
  AddressPayload at;
  std::memcpy(&at, msg.payload.data(), sizeof at);
  const int src = msg.h.src;
  int64_t pid = 0;
  {
    std::lock_guard lock(m_);
    pid = peer_pids_[src];
  }
  try {
    if (pid <= 0) {
      throw ProtocolError(fmt::format(
          "{}: rank {} sent its payload by address, but no group of both agreed that they share "
          "this host",
          what, src_group));
    }
    common::read_process_memory(static_cast<uint32_t>(pid), at.address, dst,
                                static_cast<size_t>(bytes), what);
    g_by_address.fetch_add(1, std::memory_order_relaxed);
    if (static_cast<DType>(msg.h.dtype) == DType::Bool) {
      copy_elements(dst, dst, static_cast<int64_t>(bytes), DType::Bool);  // bytes to 0 or 1
    }
  } catch (...) {
    release(src, at.offer, msg.h.group);
    throw;
  }
  release(src, at.offer, msg.h.group);
}

void Mesh::release(int src, uint64_t offer, uint64_t group) {
  WireHeader released;
  released.kind = static_cast<uint8_t>(MsgKind::Released);
  released.seq = offer;
  released.group = group;
  if (ring_sets_.load(std::memory_order_relaxed) > 0) {
    // Through the group's ring back to the sender when it has room now (a blocking send
    // waits for this); never waiting, since this may run on the ROUTER's holder.
    std::lock_guard lock(rings_m_);
    for (const RingSet& set : rings_) {
      if (set.group != group) continue;
      const auto at = std::find(set.members.begin(), set.members.end(), src);
      if (at == set.members.end()) break;
      stamp(released, 0);
      bool bell = false;
      try {
        if (set.file->push(static_cast<int>(at - set.members.begin()), released, nullptr, 0,
                           &bell)) {
          if (bell) ring_bell(src);
          return;
        }
      } catch (const Error&) {
        // A corrupt ring: the sockets carry it.
      }
      break;
    }
  }
  try {
    send(src, released, Payload{});
  } catch (const Error&) {
    // The sender is gone or leaving: it holds nothing for this offer any more.
  }
}

bool Mesh::match_pending(std::unique_lock<std::mutex>& lock, Incoming& in) {
  const WireHeader& h = in.h;
  for (auto it = pending_.begin(); it != pending_.end(); ++it) {
    const bool match = it->group == h.group && it->tag == h.seq &&
                       (it->src == kAnySource ? std::find(it->members.begin(), it->members.end(),
                                                          h.src) != it->members.end()
                                              : it->src == h.src);
    if (match) {
      RecvRequest req = std::move(*it);
      pending_.erase(it);
      count_pending();
      lock.unlock();
      complete_recv(req, in);
      return true;
    }
  }
  return false;
}

bool Mesh::unstaged(const Incoming& in) {
  return static_cast<MsgKind>(in.h.kind) == MsgKind::DataAt && !in.staging && in.error.empty();
}

void Mesh::stage_waiting(Clock::time_point now) {
  while (unstaged_.load() > 0) {
    std::unique_lock lock(m_);
    auto it = std::find_if(unexpected_.begin(), unexpected_.end(), [&](const Incoming& in) {
      return unstaged(in) && now - in.arrived >= kStageGrace;
    });
    if (it == unexpected_.end()) return;
    it->staging = true;  // nobody erases or takes it meanwhile (post_recv waits)
    --unstaged_;
    lock.unlock();
    stage_by_address(*it);
    lock.lock();
    it->staging = false;
    cv_.notify_all();
  }
}

void Mesh::stage_by_address(Incoming& in) {
  const uint64_t es = element_size(static_cast<DType>(in.h.dtype));
  const std::string what =
      fmt::format("a send from rank {} (tag {})", in.h.src, static_cast<int64_t>(in.h.seq));
  try {
    if (in.h.count < 0 || static_cast<uint64_t>(in.h.count) > kMaxStagedBytes / es) {
      throw ProtocolError(fmt::format("{}: {} elements offered by address", what, in.h.count));
    }
    const uint64_t bytes = static_cast<uint64_t>(in.h.count) * es;
    zmq::message_t staged(static_cast<size_t>(bytes));
    read_by_address(in, staged.data(), bytes, what, in.h.src);
    in.h.kind = static_cast<uint8_t>(MsgKind::Data);
    in.h.payload = bytes;
    in.payload = std::move(staged);
  } catch (const std::exception& e) {
    in.error = e.what();  // the receive that takes it fails with this
    in.error_code = code_of(std::current_exception());
  }
}

void Mesh::set_peer_pid(int r, int64_t pid) {
  std::lock_guard lock(m_);
  if (r >= 0 && r < world_ && r != rank_) peer_pids_[r] = pid;
}

AddressPayload Mesh::offer(int dst, const local::Tensor& t, std::shared_ptr<Work::State> work,
                           Clock::time_point deadline, std::string what) {
  AddressPayload at;
  at.address = reinterpret_cast<uintptr_t>(t.raw_data());
  std::lock_guard lock(m_);
  at.offer = next_offer_++;
  offers_[at.offer] = Offer{t.storage(), work, dst, deadline, std::move(what)};
  return at;
}

void Mesh::withdraw(uint64_t offer) {
  std::lock_guard lock(m_);
  offers_.erase(offer);
}

// ---------------------------------------------------------------- rings

void Mesh::add_rings(uint64_t group, std::shared_ptr<shm::RingFile> rings,
                     std::vector<int> members) {
  {
    std::lock_guard lock(rings_m_);
    rings_.push_back({group, std::move(rings), std::move(members)});
    ring_sets_ = static_cast<int>(rings_.size());
  }
  wake_io();  // a sleeping I/O thread sets the new rings' bell too
}

void Mesh::remove_rings(uint64_t group) {
  std::shared_ptr<shm::RingFile> gone;  // unmapped outside the lock
  std::lock_guard lock(rings_m_);
  for (auto it = rings_.begin(); it != rings_.end(); ++it) {
    if (it->group != group) continue;
    gone = std::move(it->file);
    rings_.erase(it);
    break;
  }
  ring_sets_ = static_cast<int>(rings_.size());
}

void Mesh::ring_bell(int dst) {
  bell_rung_ns_.store(now_ns(), std::memory_order_relaxed);
  WireHeader bell;
  bell.kind = static_cast<uint8_t>(MsgKind::Ring);
  g_rings_sent.fetch_add(1, std::memory_order_relaxed);
  try {
    send(dst, bell, Payload{});
  } catch (const Error&) {
    // dst is gone: nobody reads its rings.
  }
}

void Mesh::send_ring(shm::RingFile& rings, int d, int dst, WireHeader h, const void* data,
                     size_t bytes, Clock::time_point deadline, const std::string& what) {
  stamp(h, bytes);
  for (int i = 0;; ++i) {
    {
      std::lock_guard lock(m_);
      if (shut_) throw TransportError(what + ": the process group was shut down");
      if (peers_[dst].state != PeerState::Alive) {
        throw TransportError(fmt::format("{}: {}", what, peers_[dst].reason));
      }
    }
    bool bell = false;
    if (rings.push(d, h, data, bytes, &bell)) {
      if (bell) ring_bell(dst);
      return;
    }
    // Full: the receiver reads while it runs; when it sleeps, wake it.
    if (rings.take_bell(d)) ring_bell(dst);
    if (Clock::now() >= deadline) {
      throw TimeoutError(fmt::format(
          "{}: {} read nothing from its shared-memory ring for {} ms (the ring is full)", what,
          describe_rank(dst), options_.timeout.count()));
    }
    if (i < kRingSpins) {
      std::this_thread::yield();
    } else {
      std::this_thread::sleep_for(kRingNap);
    }
  }
}

bool Mesh::spin_rings(Work::State& work, shm::RingFile& rings) {
  struct Spinner {
    Mesh& m;
    shm::RingFile& r;
    Spinner(Mesh& mesh, shm::RingFile& f) : m(mesh), r(f) {
      m.ring_spinners_.fetch_add(1);
      r.spin(1);
    }
    ~Spinner() {
      r.spin(-1);
      m.ring_spin_ended_ns_.store(now_ns());
      m.ring_spinners_.fetch_sub(1);
    }
  };
  {
    Spinner spinner(*this, rings);
    const auto now = Clock::now();
    const auto since_bell = std::chrono::nanoseconds(now.time_since_epoch().count() -
                                                     bell_rung_ns_.load(std::memory_order_relaxed));
    const bool longer = since_bell < kBellRecent && rings.ranks() <= cpus_;
    const auto until = now + (longer ? std::chrono::nanoseconds(kRingSpinAfterBell)
                                     : std::chrono::nanoseconds(kRingSpinFor));
    for (int i = 0;; ++i) {
      drain_rings();
      if (is_done(work)) break;
      if (i % 16 == 15 && Clock::now() >= until) break;
    }
  }
  drain_rings();  // what was written while this thread still counted as a spinner
  if (is_done(work)) return true;
  g_ring_spins_out.fetch_add(1, std::memory_order_relaxed);
  return false;
}

bool Mesh::rings_lingering(Clock::time_point now) const {
  if (ring_spinners_.load() > 0) return true;
  const auto since =
      std::chrono::nanoseconds(now.time_since_epoch().count() - ring_spin_ended_ns_.load());
  return since < kRingLinger;
}

bool Mesh::drain_rings() {
  if (ring_sets_.load(std::memory_order_relaxed) == 0) return false;
  bool any = false;
  std::lock_guard lock(rings_m_);
  for (const RingSet& set : rings_) {
    const int me = set.file->rank();
    for (int q = 0; q < set.file->ranks(); ++q) {
      if (q == me) continue;
      const int src = set.members[static_cast<size_t>(q)];
      std::string why;
      const int n = set.file->drain(
          q,
          [&](const WireHeader& h, const char* data, size_t bytes) {
            return on_ring_record(set.group, src, h, data, bytes);
          },
          &why);
      if (n > 0) any = true;
      if (n < 0) {
        std::lock_guard ml(m_);
        mark_peer(src, PeerState::Dead,
                  fmt::format("{} wrote a malformed record to its shared-memory ring ({})",
                              describe_rank(src), why));
      }
    }
  }
  return any;
}

void Mesh::arm_rings(bool armed) {
  if (ring_sets_.load(std::memory_order_relaxed) == 0) return;
  std::lock_guard lock(rings_m_);
  for (const RingSet& set : rings_) {
    if (armed) {
      set.file->arm();
    } else {
      set.file->disarm();
    }
  }
}

std::string Mesh::on_ring_record(uint64_t group, int src, const WireHeader& h, const char* data,
                                 size_t bytes) {
  std::string err = check_header(h, token_, world_);
  const auto kind = static_cast<MsgKind>(h.kind);
  const bool send = (kind == MsgKind::Data || kind == MsgKind::DataAt) &&
                    h.op == static_cast<uint8_t>(CommOp::Send);
  if (err.empty() && !send && kind != MsgKind::Released) {
    err = fmt::format("a message of kind {} op {} (only sends and releases travel by ring)", h.kind,
                      h.op);
  }
  if (err.empty() && (h.group != group || h.src != src)) {
    err = fmt::format("a message that says it is rank {}'s in another group", h.src);
  }
  if (!err.empty()) return err;
  if (kind == MsgKind::Released) {
    on_released(h);
    return "";
  }
  try {
    Incoming in{h, zmq::message_t(data, bytes), {}, {}, ErrCode::Error};
    std::unique_lock lock(m_);
    file_p2p(lock, in);
  } catch (const std::exception& e) {
    // Only allocation failures get here; the message is lost, reading goes on.
    std::fprintf(stderr, "dtr process group: dropped a message: %s\n", e.what());
  }
  g_by_ring.fetch_add(1, std::memory_order_relaxed);
  return "";
}

void Mesh::on_released(const WireHeader& h) {
  std::shared_ptr<Work::State> work;
  std::shared_ptr<void> keepalive;  // let go outside the lock (it may free the tensor)
  {
    std::lock_guard lock(m_);
    auto it = offers_.find(h.seq);
    if (it == offers_.end() || it->second.dst != h.src) return;  // not an offer to that rank
    work = std::move(it->second.work);
    keepalive = std::move(it->second.keepalive);
    offers_.erase(it);
  }
  work->complete();  // no effect when it failed already
}

void Mesh::post_recv(RecvRequest req) {
  std::unique_lock lock(m_);
  auto matches = [&](const Incoming& in) {
    if (in.h.group != req.group || in.h.seq != req.tag) return false;
    if (req.src != kAnySource) return in.h.src == req.src;
    return std::find(req.members.begin(), req.members.end(), in.h.src) != req.members.end();
  };
  while (true) {
    auto it = std::find_if(unexpected_.begin(), unexpected_.end(), matches);
    if (it == unexpected_.end()) break;
    if (it->staging) {  // the I/O thread is copying it: it stays first in order
      cv_.wait_for(lock, std::chrono::milliseconds(1));
      continue;
    }
    if (unstaged(*it)) --unstaged_;
    Incoming msg = std::move(*it);
    unexpected_.erase(it);
    lock.unlock();
    complete_recv(req, msg);
    return;
  }
  if (shut_) {
    req.work->complete(make_coded(ErrCode::Error, req.what + ": the process group was shut down"));
    return;
  }
  if (req.src != kAnySource && peers_[req.src].state != PeerState::Alive) {
    req.work->complete(make_coded(ErrCode::Transport, req.what + ": " + peers_[req.src].reason));
    return;
  }
  const bool owner_reads = req.owner_reads;
  pending_.push_back(std::move(req));
  count_pending();
  if (!owner_reads && !io_reading_.load()) wake_io();
}

void Mesh::watch_send(std::shared_ptr<SendTracker> t, std::shared_ptr<Work::State> work, int dst,
                      Clock::time_point deadline, std::string what) {
  std::lock_guard lock(m_);
  watches_.push_back({std::move(t), std::move(work), dst, deadline, std::move(what)});
}

void Mesh::declare_dead(int r, std::string why) {
  if (r < 0 || r >= world_ || r == rank_) return;
  std::lock_guard lock(m_);
  mark_peer(r, PeerState::Dead, std::move(why));
}

void Mesh::mark_peer(int r, PeerState s, std::string reason) {
  if (peers_[r].state != PeerState::Alive) return;
  peers_[r].state = s;
  peers_[r].reason = std::move(reason);
  for (auto it = pending_.begin(); it != pending_.end();) {
    const bool hit =
        it->src == r || (it->src == kAnySource && s == PeerState::Dead &&
                         std::find(it->members.begin(), it->members.end(), r) != it->members.end());
    if (hit) {
      it->work->complete(make_coded(ErrCode::Transport, it->what + ": " + peers_[r].reason));
      it = pending_.erase(it);
      count_pending();
    } else {
      ++it;
    }
  }
  for (auto it = watches_.begin(); it != watches_.end();) {
    if (it->dst == r && !it->tracker->idle()) {
      it->work->complete(make_coded(ErrCode::Transport, it->what + ": " + peers_[r].reason));
      it = watches_.erase(it);
    } else {
      ++it;
    }
  }
  // Payloads r offered by address and nobody took yet: r's memory may be gone.
  unexpected_.remove_if([this, r](const Incoming& in) {
    const bool drop = in.h.src == r && unstaged(in);
    if (drop) --unstaged_;
    return drop;
  });
  for (auto it = offers_.begin(); it != offers_.end();) {
    if (it->second.dst == r) {
      it->second.work->complete(
          make_coded(ErrCode::Transport, it->second.what + ": " + peers_[r].reason));
      it = offers_.erase(it);
    } else {
      ++it;
    }
  }
  cv_.notify_all();
}

void Mesh::on_message(std::vector<zmq::message_t>& f, uint64_t dropped) {
  if (f.size() < 2 || f[1].size() != sizeof(WireHeader)) return;  // not ours
  WireHeader h;
  std::memcpy(&h, f[1].data(), sizeof h);
  std::string err = check_header(h, token_, world_);
  if (err.empty()) {
    // Frames past what read_message() keeps were counted, not kept: only their number is
    // known (more than the header announces, since it keeps one more than that).
    const uint64_t count = f.size() - 2 + dropped;
    err = dropped > 0 ? fmt::format(
                            "header says {} payload bytes ({} frames), message has {} "
                            "payload frames",
                            h.payload, frames_for(h.payload), count)
                      : check_frames(h, count, [&](uint64_t i) { return f[i + 2].size(); });
  }
  const std::string identity = f[0].to_string();
  if (err.empty() && identity != fmt::format("r{}", h.src)) {
    // A peer claiming another rank's identity: drop it.
    return;
  }
  if (!err.empty()) {
    // Messages of another job (a stale process on a reused port) are dropped; anything else
    // malformed from a peer of this job fails that peer.
    if (h.magic == kWireMagic && h.token == token_ && identity.size() > 1 && identity[0] == 'r') {
      int r = -1;
      try {
        r = static_cast<int>(parse_int(identity.substr(1), "rank"));
      } catch (const Error&) {
      }
      // Only a member's own identity, spelled as members spell it ("r01" is not rank 1).
      if (r >= 0 && r < world_ && r != rank_ && identity == fmt::format("r{}", r)) {
        std::lock_guard lock(m_);
        mark_peer(r, PeerState::Dead,
                  fmt::format("{} sent a malformed message ({})", describe_rank(r), err));
      }
    }
    return;
  }
  const auto kind = static_cast<MsgKind>(h.kind);
  Incoming in{h, f.size() >= 3 ? std::move(f[2]) : zmq::message_t(), {}, {}, ErrCode::Error};
  for (size_t i = 3; i < f.size(); ++i) in.more.push_back(std::move(f[i]));
  std::unique_lock lock(m_);
  switch (kind) {
    case MsgKind::Hello:
      peers_[h.src].hello = true;
      cv_.notify_all();
      return;
    case MsgKind::Goodbye:  // the text is matched by worker/collectives.cpp (report_stuck)
      mark_peer(h.src, PeerState::Left,
                fmt::format("{} left the process group (shut down)", describe_rank(h.src)));
      return;
    case MsgKind::Abort: {
      auto w = done_upto_.find(h.group);
      if (w != done_upto_.end() && h.seq <= w->second) return;
      auto& ch = channels_[{h.group, h.seq}];
      if (!ch.aborted) {
        ch.aborted = true;
        ch.code = h.reduce <= static_cast<uint8_t>(ErrCode::Protocol)
                      ? static_cast<ErrCode>(h.reduce)
                      : ErrCode::Error;
        ch.text = std::string(static_cast<const char*>(in.payload.data()), in.payload.size());
      }
      cv_.notify_all();
      return;
    }
    case MsgKind::Released:
      lock.unlock();
      on_released(h);
      return;
    case MsgKind::Ring:
      return;  // whoever read it reads the rings next (pump, io_loop)
    case MsgKind::Data:
    case MsgKind::DataAt:
      break;
  }
  if (static_cast<CommOp>(h.op) == CommOp::Send) {
    file_p2p(lock, in);
    return;
  }
  auto w = done_upto_.find(h.group);
  if (w != done_upto_.end() && h.seq <= w->second) return;  // a finished (failed) collective
  channels_[{h.group, h.seq}].msgs.push_back(std::move(in));
  cv_.notify_all();
}

void Mesh::file_p2p(std::unique_lock<std::mutex>& lock, Incoming& in) {
  if (match_pending(lock, in)) return;
  unexpected_.push_back(std::move(in));
  if (static_cast<MsgKind>(unexpected_.back().h.kind) == MsgKind::DataAt) {
    // Nobody receives it yet. Unless a receive takes it within kStageGrace, the I/O
    // thread copies its bytes (stage_waiting), so that the sender's send completes as on
    // the sockets: a send does not wait for its receive.
    unexpected_.back().arrived = Clock::now();
    ++unstaged_;
    wake_io();
  }
}

void Mesh::on_monitor(int peer, zmq::socket_t& mon) {
  while (true) {
    zmq::message_t ev;
    if (!mon.recv(ev, zmq::recv_flags::dontwait)) return;
    bool more = ev.more();
    uint16_t event = 0;
    if (ev.size() >= 2) std::memcpy(&event, ev.data(), 2);
    while (more) {
      zmq::message_t rest;
      if (!mon.recv(rest, zmq::recv_flags::dontwait)) break;
      more = rest.more();
    }
    if (event == ZMQ_EVENT_DISCONNECTED) {
      std::lock_guard lock(m_);
      if (peers_[peer].state == PeerState::Alive && !peers_[peer].disconnect_pending) {
        peers_[peer].disconnect_pending = true;
        peers_[peer].disconnected = Clock::now();
      }
    }
  }
}

void Mesh::sweep(Clock::time_point now) {
  std::lock_guard lock(m_);
  for (int r = 0; r < world_; ++r) {
    auto& p = peers_[r];
    if (p.disconnect_pending && p.state == PeerState::Alive &&
        now - p.disconnected >= kDisconnectGrace) {
      mark_peer(r, PeerState::Dead,
                fmt::format("{} closed its connection without leaving the group (process died, "
                            "was killed, or stopped answering heartbeats)",
                            describe_rank(r)));
    }
  }
  for (auto it = pending_.begin(); it != pending_.end();) {
    if (now >= it->deadline) {
      it->work->complete(make_coded(
          ErrCode::Timeout,
          fmt::format("{}: no message within {} ms", it->what, options_.timeout.count())));
      it = pending_.erase(it);
      count_pending();
    } else {
      ++it;
    }
  }
  for (auto it = watches_.begin(); it != watches_.end();) {
    if (it->tracker->idle()) {
      it = watches_.erase(it);
    } else if (now >= it->deadline) {
      it->work->complete(make_coded(
          ErrCode::Timeout,
          fmt::format("{}: not delivered within {} ms", it->what, options_.timeout.count())));
      it = watches_.erase(it);
    } else {
      ++it;
    }
  }
  for (auto& [id, offer] : offers_) {
    if (!offer.failed && now >= offer.deadline) {
      offer.failed = true;  // held on: the receiver may still read it
      offer.work->complete(make_coded(
          ErrCode::Timeout, fmt::format("{}: the receiver did not take the payload within {} ms",
                                        offer.what, options_.timeout.count())));
    }
  }
}

bool Mesh::read_message(std::vector<zmq::message_t>& frames) {
  frames.clear();
  bool got = false;
  // Identity, header and the payload frames the header announces, plus one to tell that
  // there are too many; the rest of a longer message is read and dropped.
  uint64_t keep = 4, dropped = 0;
  while (true) {
    zmq::message_t m;
    if (!router_.recv(m, zmq::recv_flags::dontwait)) break;
    got = true;
    const bool more = m.more();
    if (frames.size() == 1 && m.size() == sizeof(WireHeader)) {
      uint64_t payload;
      std::memcpy(&payload, static_cast<const char*>(m.data()) + offsetof(WireHeader, payload),
                  sizeof payload);
      keep = 3 + frames_for(payload);
    }
    if (frames.size() < keep) {
      frames.push_back(std::move(m));
    } else {
      ++dropped;
    }
    if (!more) break;
  }
  if (!got) return false;
  try {
    on_message(frames, dropped);
  } catch (const std::exception& e) {
    // Only allocation failures get here; the message is lost, reading goes on.
    std::fprintf(stderr, "dtr process group: dropped a message: %s\n", e.what());
  }
  return true;
}

void Mesh::io_loop() {
  std::vector<zmq::pollitem_t> items;
  std::vector<int> item_peer;
  items.push_back({router_.handle(), 0, ZMQ_POLLIN, 0});
  item_peer.push_back(-1);
  items.push_back({nullptr, wake_fd_, ZMQ_POLLIN, 0});
  item_peer.push_back(-2);
  for (int j = 0; j < world_; ++j) {
    if (j == rank_) continue;
    items.push_back({monitors_[j].handle(), 0, ZMQ_POLLIN, 0});
    item_peer.push_back(j);
  }
  auto next_sweep = Clock::now() + kTick;
  std::vector<zmq::message_t> frames;
  while (!stop_io_.load()) {
    // The ROUTER is polled only while this thread may hold it (see FastReader); otherwise
    // this thread dozes on its wake-up fd and the monitors.
    std::unique_lock rl(router_m_, std::defer_lock);
    if (io_may_read(Clock::now())) (void)rl.try_lock();
    io_reading_ = rl.owns_lock();
    // Not holding it, this thread must not touch the socket at all (zmq_poll would): the
    // ROUTER's item is left out.
    const size_t first = rl.owns_lock() ? 0 : 1;
    items[0].revents = 0;
    auto slice = unstaged_.load() > 0 ? kStageGrace : rl.owns_lock() ? kTick : kDoze;
    if (rl.owns_lock()) {
      if (rings_lingering(Clock::now())) {
        // A caller polls the rings or will be back soon: no bell (a Ring message costs the
        // sender a socket send and both processes' I/O threads a wake-up, in the middle of
        // the exchange); this thread looks at them every kRingLinger meanwhile, or at the
        // tick while the caller still polls them.
        if (ring_spinners_.load() == 0) {
          slice = std::min<std::chrono::milliseconds>(slice, kRingLinger);
        }
      } else {
        // Sleeping with the ROUTER: a peer's next ring record comes with a Ring message.
        arm_rings(true);
      }
      if (drain_rings()) slice = std::chrono::milliseconds(0);
    }
    try {
      zmq::poll(items.data() + first, items.size() - first, slice);
    } catch (const zmq::error_t&) {
      if (rl.owns_lock()) arm_rings(false);
      io_reading_ = false;
      continue;  // EINTR
    }
    if (rl.owns_lock()) {
      arm_rings(false);
      drain_rings();
    }
    if (rl.owns_lock() && (items[0].revents & ZMQ_POLLIN)) {
      for (int n = 0; n < 512 && read_message(frames); ++n) ++g_io_reads;
      drain_rings();
    }
    io_reading_ = false;
    if (rl.owns_lock()) rl.unlock();
    if (items[1].revents & ZMQ_POLLIN) {
      uint64_t v;
      [[maybe_unused]] auto n = ::read(wake_fd_, &v, sizeof v);
    }
    for (size_t i = 2; i < items.size(); ++i) {
      if (items[i].revents & ZMQ_POLLIN) on_monitor(item_peer[i], monitors_[item_peer[i]]);
    }
    const auto now = Clock::now();
    if (unstaged_.load() > 0) stage_waiting(now);
    if (now >= next_sweep) {
      sweep(now);
      next_sweep = now + kTick;
    }
  }
}

void Mesh::shutdown() {
  std::lock_guard guard(shutdown_m_);
  if (shut_.exchange(true)) return;
  const bool running = io_.joinable();
  if (running) {
    for (int j = 0; j < static_cast<int>(dealers_.size()); ++j) {
      if (j == rank_) continue;
      WireHeader h;
      h.kind = static_cast<uint8_t>(MsgKind::Goodbye);
      h.magic = kWireMagic;
      h.version = kWireVersion;
      h.token = token_;
      h.src = rank_;
      Dealer& d = *dealers_[j];
      std::lock_guard lock(d.m);
      zmq::message_t hdr(&h, sizeof h);
      try {
        (void)d.sock.send(hdr, zmq::send_flags::dontwait);
      } catch (const zmq::error_t&) {
      }
    }
  }
  {
    std::lock_guard lock(m_);
    for (auto& r : pending_) {
      r.work->complete(make_coded(ErrCode::Error, r.what + ": the process group was shut down"));
    }
    pending_.clear();
    count_pending();
    for (auto& w : watches_) {
      if (!w.tracker->idle()) {
        w.work->complete(make_coded(ErrCode::Error, w.what + ": the process group was shut down"));
      }
    }
    watches_.clear();
    // Offers stay held (a receiver may be reading them) until the mesh is destroyed.
    for (auto& [id, offer] : offers_) {
      offer.work->complete(
          make_coded(ErrCode::Error, offer.what + ": the process group was shut down"));
    }
    cv_.notify_all();
  }
  if (running) {
    stop_io_ = true;
    uint64_t one = 1;
    [[maybe_unused]] auto n = ::write(wake_fd_, &one, sizeof one);
    io_.join();
  }
  for (int j = 0; j < static_cast<int>(dealers_.size()); ++j) {
    Dealer& d = *dealers_[j];
    std::lock_guard lock(d.m);
    bool alive;
    {
      std::lock_guard l2(m_);
      alive = peers_[j].state == PeerState::Alive;
    }
    if (!alive) d.sock.set(zmq::sockopt::linger, 0);
    // Stop the monitor first: libzmq 4.3 leaks an event message sent to a monitor socket
    // that is already closed.
    if (j != rank_) zmq_socket_monitor(d.sock.handle(), nullptr, 0);
    d.open = false;
    d.sock.close();
  }
  for (auto& m : monitors_) {
    if (m.handle() != nullptr) m.close();
  }
  {
    std::lock_guard rl(router_m_);  // a FastReader may be reading it
    router_.close();
  }
  {
    std::lock_guard lock(m_);
    unexpected_.clear();
    channels_.clear();
  }
  guard_.reset();  // its sockets close before the context does
  ctx_.close();
}

}  // namespace dtr::pg
