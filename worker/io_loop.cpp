// The worker's socket loop (worker/server_impl.hpp): it sleeps on its sockets (spinning a
// while after a message), reads what came and routes it by type, runs batches on the
// session, sends what the session posted, and serves what other threads asked for.
#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "dtr/error.hpp"
#include "protocol/codec.hpp"
#include "worker/server_impl.hpp"

namespace dtr::worker {

namespace proto = dtr::protocol;
using namespace server_detail;

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
    if (!wait_for_messages(items)) continue;  // a signal interrupted the poll
    if (!backlogged && socket_readable()) active_until = Clock::now() + opt.spin;
    drain_socket();
    drain_outbox();
    if (!listen_mode) {
      drain_peer_socket();
      drain_monitor();
      watch_master(hello_deadline);
    }
    heartbeat_tick();
    serve_requests();
  }
}

bool Server::Impl::wait_for_messages(std::vector<zmq::pollitem_t>& items) {
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
    if (e.num() == EINTR) return false;
    throw;
  }
  return true;
}

void Server::Impl::watch_master(Clock::time_point hello_deadline) {
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
    throw TimeoutError(
        fmt::format("no HELLO from master {} within {} ms", endpoint, opt.connect_timeout.count()));
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

bool Server::Impl::socket_readable() {
  std::lock_guard lock(socket_mu);
  return (socket.get(zmq::sockopt::events) & ZMQ_POLLIN) != 0;
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

void Server::Impl::handle(proto::Received& msg) {
  std::vector<zmq::message_t>& frames = msg.frames;
  if (frames.empty()) return;
  source = source_address(frames.back());
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

void Server::Impl::on_batch(const std::string* identity, std::string_view header,
                            std::vector<zmq::message_t>& frames, size_t first_payload) {
  if (!from_session_master(identity)) return;
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
    spdlog::error("batch from master {} failed: {}", peer_client,
                  common::printable(e.what(), 1024));
    protocol_error(identity, fmt::format("worker failed running the batch: {}", e.what()));
  }
  drain_outbox();
}

void Server::Impl::post(Outgoing&& out) {
  {
    std::lock_guard lock(outbox_mu);
    outbox.push_back(std::move(out));
  }
  // On the loop's own thread (a reply made while it dispatches) the loop sends it before
  // it sleeps again: no wake-up needed.
  if (std::this_thread::get_id() == loop_thread.load(std::memory_order_relaxed)) return;
  signal_fd(wake_fd);
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

void Server::Impl::protocol_error(const std::string* identity, std::string message) {
  warn_throttled("protocol error", fmt::format("protocol error from {} at {}: {}", who(identity),
                                               source, common::printable(message, 1024)));
  proto::reply::ProtocolError r;
  r.request = 0;
  r.message = std::move(message);
  send(identity, proto::encode(r));
}

void Server::Impl::warn_throttled(const std::string& kind, std::string line) {
  if (std::optional<std::string> l = warnings.admit(kind + " from " + source, std::move(line)))
    spdlog::warn("{}", *l);
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
      proto::reply::Flight r;
      r.flight = std::move(d);
      post(Outgoing{proto::encode(r), {}, -1});
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
  signal_fd(wake_fd);
  // The loop answers within its next round (it wakes at least every 100 ms); a loop busy
  // with a long batch gets the last snapshot served instead.
  metrics_cv.wait_for(lock, std::chrono::milliseconds(1000),
                      [&] { return metrics_version != seen; });
  if (metrics_version == 0) return "# no snapshot yet: the worker's loop is busy\n";
  return metrics_snapshot;
}

}  // namespace dtr::worker
