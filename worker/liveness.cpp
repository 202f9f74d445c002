// Liveness (worker/server_impl.hpp): the session's heartbeats go out from a thread of
// their own (through the shared ROUTER in listen mode; on a heartbeat connection of their
// own, on a ZeroMQ context of its own, in connect mode once Setup opened it), so that a
// loop busy with a GiB-sized message still sends them; the loop ends the session of a
// master silent for its timeout, or one the heartbeat thread could not reach.
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <array>
#include <cerrno>

#include "worker/server_impl.hpp"

namespace dtr::worker {

namespace proto = dtr::protocol;
using namespace server_detail;

void Server::Impl::heard_master() {
  recorder->counters.master_heard_ns.store(
      std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch()).count(),
      std::memory_order_relaxed);
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

void Server::Impl::follow_setup(const proto::Setup& setup) {
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
  signal_fd(beat_wake_fd);
}

Server::Impl::BeatsThread::BeatsThread(Impl& impl) : s(impl) {
  {
    std::lock_guard lock(s.beat_mu);
    s.beat_stop = false;
  }
  t = std::thread([this] { s.beats_loop(); });
}

Server::Impl::BeatsThread::~BeatsThread() {
  if (!t.joinable()) return;
  {
    std::lock_guard lock(s.beat_mu);
    s.beat_stop = true;
  }
  s.beat_cv.notify_one();
  s.wake_beats();
  t.join();
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
    beat_through_socket(plan);
    lock.lock();
    next = Clock::now() + plan.every;
  }
}

void Server::Impl::beat_through_socket(const BeatPlan& plan) {
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
  if (!sent || readable) signal_fd(wake_fd);
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

}  // namespace dtr::worker
