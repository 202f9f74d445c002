// The session table (worker/server_impl.hpp): the one session this worker serves, its
// start (after an accepted HELLO) and end (GOODBYE, a master gone or silent, a restart),
// and the Goodbye that answers a master whose session this worker ended on its own.
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <ctime>

#include "common/flight_text.hpp"
#include "dtr/device.hpp"
#include "dtr/error.hpp"
#include "worker/server_impl.hpp"

namespace dtr::worker {

namespace proto = dtr::protocol;
using namespace server_detail;

namespace {

std::string iso_time_now() {
  std::time_t now = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&now, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

}  // namespace

std::string Server::Impl::who(const std::string* identity) const {
  if (!identity) return opt.master;
  if (session && *identity == peer) return peer_client;
  return fmt::format("peer {}", hex(*identity));
}

std::string Server::Impl::busy_reason() const {
  return fmt::format("busy: serving master {} since {}", peer_client, peer_since);
}

void Server::Impl::start_session(const std::string* identity, const std::string& client) {
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
  peer_client = client;
  heard_master();
  heartbeat_interval = opt.heartbeat;
  master_timeout = std::chrono::milliseconds(0);
  peer_since = iso_time_now();
  next_heartbeat = Clock::now() + opt.heartbeat;
  set_beats();
  spdlog::info("session started with master {}", peer_client);
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
  clear_peers();
  spdlog::info("{} (master {}); freed {} tensors", what, peer_client, n);
  peer.clear();
  peer_beat.clear();
  peer_client.clear();
  peer_since.clear();
  set_beats();
}

void Server::Impl::on_goodbye(const std::string* identity, std::string_view header) {
  if (is_peer(identity)) {
    std::string reason;  // a master that ended it for a reason says which
    try {
      reason = common::printable(proto::decode_goodbye(header).reason, 1024);  // a log line
    } catch (const ProtocolError&) {
    }
    end_session(reason.empty() ? std::string("session ended") : "session ended: " + reason, false,
                /*clean=*/true);
  } else {
    spdlog::debug("goodbye from {} without a session; ignored", who(identity));
  }
  if (!listen_mode) finished = true;
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

bool Server::Impl::from_session_master(const std::string* identity) {
  if (is_peer(identity)) return true;
  if (answer_ended(identity)) return false;
  protocol_error(identity,
                 session ? busy_reason() : "no session with this master: send HELLO first");
  return false;
}

}  // namespace dtr::worker
