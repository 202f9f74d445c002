// The handshake (worker/server_impl.hpp): a master's HELLO (its protocol version; a
// second master told "busy"; the accepting reply with this worker's threads, devices and
// memory, where its peers and its process group reach it, and the same-host challenge) and
// its Setup (this worker's node, its peers, the heartbeat figures, the process group).
#include <arpa/inet.h>
#include <fmt/format.h>
#include <netinet/in.h>
#include <spdlog/spdlog.h>
#include <sys/socket.h>
#include <sys/sysinfo.h>
#include <unistd.h>

#include <fstream>

#include "common/same_host.hpp"
#include "dtr/error.hpp"
#include "worker/devices.hpp"
#include "worker/server_impl.hpp"

namespace dtr::worker {

namespace proto = dtr::protocol;
using namespace server_detail;

namespace {

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

void Server::Impl::on_hello(const std::string* identity, std::string_view header) {
  proto::Hello hello;
  try {
    hello = proto::decode_hello(header);
  } catch (const ProtocolError& e) {
    protocol_error(identity, e.what());
    return;
  }
  hello_seen = true;
  // The name goes into logs and into what other masters are told: escaped once, here.
  hello.client = common::printable(hello.client, 128);
  proto::HelloReply reply;
  reply.worker = host_and_pid();
  if (hello.version != proto::kVersion) {
    reply.reason = fmt::format("protocol version mismatch: master speaks {}, worker speaks {}",
                               hello.version, proto::kVersion);
    return refuse_hello(identity, hello, reply);
  }
  if (session && !make_room_for(identity, hello, reply)) return;
  start_session(identity, hello.client);
  if (!send(identity, proto::encode(accept_reply(std::move(reply)))))
    end_session("master went away before the reply");
}

void Server::Impl::refuse_hello(const std::string* identity, const proto::Hello& hello,
                                const proto::HelloReply& reply) {
  recorder->counters.refused.fetch_add(1, std::memory_order_relaxed);
  // A master asking again every 200 ms would repeat this line: once a minute.
  warn_throttled("rejected master",
                 fmt::format("rejected master {} at {}: {}", hello.client, source, reply.reason));
  send(identity, proto::encode(reply));
}

bool Server::Impl::make_room_for(const std::string* identity, const proto::Hello& hello,
                                 proto::HelloReply& reply) {
  bool same = !identity || *identity == peer;
  if (same) {
    end_session("master restarted its session");
  } else if (!send(&peer, proto::encode_heartbeat())) {
    end_session("master went away");
  } else {
    reply.reason = busy_reason();
    refuse_hello(identity, hello, reply);
    return false;
  }
  return true;
}

proto::HelloReply Server::Impl::accept_reply(proto::HelloReply reply) {
  reply.accepted = true;
  reply.threads = session->threads();
  reply.max_message_bytes = opt.max_message_bytes;
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
  return reply;
}

void Server::Impl::on_setup(const std::string* identity, std::string_view header) {
  if (!from_session_master(identity)) return;
  proto::Setup setup;
  try {
    setup = proto::decode_setup(header);
  } catch (const ProtocolError& e) {
    protocol_error(identity, e.what());
    return;
  }
  follow_setup(setup);
  set_peers(std::move(setup.peers));
  session->setup(setup.node, static_cast<uint32_t>(peers.size()), setup.session,
                 std::move(setup.pg_endpoints), std::move(setup.backend), std::move(pg_port_hold));
  spdlog::info("session with master {}: this worker is node {} of {}", peer_client, setup.node,
               peers.size());
}

}  // namespace dtr::worker
