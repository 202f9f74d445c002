// The raw ZeroMQ baselines that the runtime and graph benchmarks measure dtr against: peer
// processes forked at start (PeerProcess), sockets with dtr's own options, and the PUSH/PULL
// rate pair: rate_peer in the child counts 64-byte messages, push_pull_seconds in the parent
// sends them and waits for the count.
//
// Terms. A peer is a forked child that binds its sockets on ephemeral loopback ports, tells
// the parent their endpoints (one line on a pipe), then serves until it is killed or idle
// for kPeerIdleMs. A rep of the rate pair is `count` messages whose last one has first byte
// 1; the peer answers that one with the number of messages it counted (8 bytes).
//
// Thread safety: PeerProcess::spawn forks, so call it before the benchmark starts threads of
// its own (dtr's session included); a socket belongs to the thread that uses it.
#pragma once

#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>
#include <zmq.hpp>

#include "bench_stats.hpp"
#include "launcher/spawn.hpp"
#include "protocol/transport.hpp"

namespace dtr::bench {

constexpr int64_t kBaselineMaxMessageBytes = int64_t{1} << 30;
constexpr int kBaselineRecvTimeoutMs = 60000;  // every raw receive in the parent
constexpr int kPeerIdleMs = 600000;            // a peer exits after this long without traffic

class PeerProcess {
 public:
  PeerProcess() = default;
  PeerProcess(const PeerProcess&) = delete;
  PeerProcess& operator=(const PeerProcess&) = delete;
  ~PeerProcess() { stop(); }

  // Forks a child running body(tell); body binds its sockets and calls tell(endpoints)
  // once, then serves. Waits (bounded) for the endpoints.
  template <typename Body>
  void spawn(const char* name, Body body) {
    int fds[2];
    if (pipe(fds) != 0) throw std::runtime_error("pipe failed");
    // Dies with this process (launcher/spawn.hpp).
    child_ = dtr::launcher::fork_child([&]() -> int {
      close(fds[0]);
      auto tell = [&](const std::vector<std::string>& eps) {
        std::string line;
        for (const std::string& e : eps) line += e + " ";
        line += "\n";
        if (write(fds[1], line.data(), line.size()) != static_cast<ssize_t>(line.size())) _exit(3);
        close(fds[1]);
      };
      try {
        body(tell);
      } catch (const std::exception& e) {
        std::fprintf(stderr, "baseline peer %s: %s\n", name, e.what());
        std::fflush(stderr);
        return 1;
      }
      return 0;
    });
    close(fds[1]);
    std::string line;
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (line.find('\n') == std::string::npos) {
      int left = static_cast<int>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                      deadline - std::chrono::steady_clock::now())
                                      .count());
      pollfd p{fds[0], POLLIN, 0};
      if (left <= 0 || poll(&p, 1, left) <= 0) break;
      char buf[512];
      ssize_t n = read(fds[0], buf, sizeof buf);
      if (n <= 0) break;
      line.append(buf, static_cast<size_t>(n));
    }
    close(fds[0]);
    std::istringstream in(line);
    for (std::string e; in >> e;) endpoints.push_back(e);
    if (endpoints.empty()) {
      stop();
      throw std::runtime_error(std::string("baseline peer ") + name +
                               " did not report its endpoints within 20 s");
    }
  }

  // SIGKILL and a bounded wait (SIGKILL cannot be ignored).
  void stop() {
    if (child_) child_.stop(SIGKILL, std::chrono::milliseconds(0));
  }

  pid_t pid() const { return child_.pid(); }
  std::vector<std::string> endpoints;

 private:
  dtr::launcher::Child child_;
};

// A peer's socket: dtr's options (protocol::configure_socket), bound to an ephemeral
// loopback port, its receives bounded by kPeerIdleMs.
inline zmq::socket_t bound_socket(zmq::context_t& ctx, zmq::socket_type type) {
  zmq::socket_t s(ctx, type);
  protocol::configure_socket(s, kBaselineMaxMessageBytes);
  s.set(zmq::sockopt::rcvtimeo, kPeerIdleMs);
  s.bind("tcp://127.0.0.1:*");
  return s;
}

// The parent's socket to a peer: dtr's options, its receives bounded by
// kBaselineRecvTimeoutMs.
inline zmq::socket_t connected_socket(zmq::context_t& ctx, zmq::socket_type type,
                                      const std::string& endpoint) {
  zmq::socket_t s(ctx, type);
  protocol::configure_socket(s, kBaselineMaxMessageBytes);
  s.set(zmq::sockopt::rcvtimeo, kBaselineRecvTimeoutMs);
  s.connect(endpoint);
  return s;
}

inline void recv_or_throw(zmq::socket_t& s, zmq::message_t& m, const char* what) {
  if (!s.recv(m)) throw std::runtime_error(std::string(what) + ": no answer within 60 s");
}

// The rate pair's peer (PeerProcess::spawn("rate", [](auto tell) { rate_peer(tell); })):
// endpoints PULL, then PUSH for the counts.
template <typename Tell>
void rate_peer(Tell tell) {
  zmq::context_t ctx(1);
  zmq::socket_t pull = bound_socket(ctx, zmq::socket_type::pull);
  zmq::socket_t ack = bound_socket(ctx, zmq::socket_type::push);
  tell({pull.get(zmq::sockopt::last_endpoint), ack.get(zmq::sockopt::last_endpoint)});
  uint64_t count = 0;
  zmq::message_t m;
  while (pull.recv(m)) {
    ++count;
    if (m.size() > 0 && m.data<uint8_t>()[0] == 1) {
      zmq::message_t reply(&count, sizeof count);
      ack.send(reply, zmq::send_flags::none);
      count = 0;
    }
  }
}

// One rep of the rate pair: sends `count` 64-byte messages on `push` and waits for the
// peer's count on `ack`. Returns the seconds until the count came; *counted_all becomes
// false when the peer counted another number.
inline double push_pull_seconds(zmq::socket_t& push, zmq::socket_t& ack, int64_t count,
                                bool* counted_all) {
  char buf[64] = {};
  auto t0 = std::chrono::steady_clock::now();
  for (int64_t i = 0; i < count; ++i) {
    buf[0] = i == count - 1 ? 1 : 0;
    zmq::message_t m(buf, sizeof buf);
    push.send(m, zmq::send_flags::none);
  }
  zmq::message_t reply;
  recv_or_throw(ack, reply, "PUSH/PULL peer");
  double dt = seconds_since(t0);
  uint64_t got = 0;
  if (reply.size() == sizeof got) std::memcpy(&got, reply.data(), sizeof got);
  if (got != static_cast<uint64_t>(count)) *counted_all = false;
  return dt;
}

}  // namespace dtr::bench
