// Lanes: see lane.hpp.
#include "pg/zmq/lane.hpp"

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "common/same_host.hpp"
#include "dtr/env.hpp"
#include "dtr/error.hpp"

namespace dtr::pg {
namespace {

// What the connecting rank sends first on a new lane.
struct LaneHello {
  uint32_t magic = kLaneMagic;
  uint32_t generation = 0;
  uint64_t token = 0;
};
static_assert(sizeof(LaneHello) == 16);

// What each side sends first in a collective on the lane.
struct LaneStamp {
  uint32_t magic = kLaneMagic;
  uint32_t generation = 0;
  uint64_t seq = 0;
};
static_assert(sizeof(LaneStamp) == 16);

std::string ms_of(std::chrono::nanoseconds d) {
  return concat(std::chrono::duration_cast<std::chrono::milliseconds>(d).count(), " ms");
}

void set_nodelay(int fd) {
  const int one = 1;
  (void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

// poll()'s timeout for one sleep with `left` until the deadline: at most kLanePollSlice,
// at least 1 ms.
int poll_ms(Clock::duration left) {
  const auto slice = std::min<Clock::duration>(left, kLanePollSlice);
  return static_cast<int>(
      std::max<int64_t>(1, std::chrono::ceil<std::chrono::milliseconds>(slice).count()));
}

// Waits until fd is ready for `events`, in slices, calling check between them; false at
// the deadline.
bool wait_ready(int fd, short events, Clock::time_point deadline, const LaneCheck& check) {
  for (;;) {
    const auto left = deadline - Clock::now();
    if (left <= Clock::duration::zero()) return false;
    pollfd p{fd, events, 0};
    const int n = ::poll(&p, 1, poll_ms(left));
    if (n > 0) return true;
    if (n < 0 && errno != EINTR) return true;  // the call that follows reports the error
    if (check) check();
  }
}

// Reads or writes exactly `bytes` on the non-blocking fd, bounded by the deadline; false
// when the peer closed the connection, errno set on other failures (0: the deadline).
bool move_all(int fd, char* data, size_t bytes, bool write, Clock::time_point deadline,
              const LaneCheck& check) {
  size_t done = 0;
  while (done < bytes) {
    const ssize_t k = write ? ::send(fd, data + done, bytes - done, MSG_DONTWAIT | MSG_NOSIGNAL)
                            : ::recv(fd, data + done, bytes - done, MSG_DONTWAIT);
    if (k > 0) {
      done += static_cast<size_t>(k);
      continue;
    }
    if (k == 0 && !write) {
      errno = ECONNRESET;
      return false;
    }
    if (k < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) return false;
    if (!wait_ready(fd, write ? POLLOUT : POLLIN, deadline, check)) {
      errno = 0;
      return false;
    }
  }
  return true;
}

addrinfo* resolve(const std::string& host, uint16_t port, bool passive, std::string* why) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = passive ? AI_PASSIVE : 0;
  addrinfo* res = nullptr;
  const std::string service = std::to_string(port);
  const int rc = ::getaddrinfo(host.c_str(), service.c_str(), &hints, &res);
  if (rc != 0) {
    *why = concat("cannot resolve '", host, "': ", ::gai_strerror(rc));
    return nullptr;
  }
  return res;
}

}  // namespace

bool lanes_enabled() {
  return env_flag("DTR_LANES", true);
}

std::atomic<bool>& lane_fault_for_tests() {
  static std::atomic<bool> fault{false};
  return fault;
}

std::string lane_host_of(const std::string& endpoint) {
  constexpr std::string_view kTcp = "tcp://";
  if (endpoint.rfind(kTcp, 0) != 0) return "";
  const size_t colon = endpoint.rfind(':');
  if (colon == std::string::npos || colon < kTcp.size()) return "";
  std::string host = endpoint.substr(kTcp.size(), colon - kTcp.size());
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']')
    host = host.substr(1, host.size() - 2);
  return host;
}

// ---------------------------------------------------------------- LaneListener

std::unique_ptr<LaneListener> LaneListener::open(const std::string& host, std::string* why) {
  addrinfo* res = resolve(host, 0, true, why);
  if (res == nullptr) return nullptr;
  int fd = -1;
  for (addrinfo* a = res; a != nullptr && fd < 0; a = a->ai_next) {
    fd = ::socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) continue;
    if (::bind(fd, a->ai_addr, a->ai_addrlen) != 0 || ::listen(fd, 4) != 0) {
      *why = concat("cannot listen on ", host, ": ", std::strerror(errno));
      ::close(fd);
      fd = -1;
    }
  }
  ::freeaddrinfo(res);
  if (fd < 0) return nullptr;
  sockaddr_storage bound{};
  socklen_t len = sizeof bound;
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&bound), &len) != 0) {
    *why = concat("getsockname: ", std::strerror(errno));
    ::close(fd);
    return nullptr;
  }
  const uint16_t port = bound.ss_family == AF_INET6
                            ? ntohs(reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port)
                            : ntohs(reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
  return std::unique_ptr<LaneListener>(new LaneListener(fd, port, common::random_challenge()));
}

LaneListener::~LaneListener() {
  ::close(fd_);
}

int LaneListener::accept(uint32_t generation, Clock::time_point deadline, const LaneCheck& check,
                         const std::string& what) {
  for (;;) {
    if (!wait_ready(fd_, POLLIN, deadline, check)) {
      throw TimeoutError(
          concat(what, ": the other rank did not connect its lane to port ", port_, " in time"));
    }
    const int fd = ::accept4(fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) continue;  // EAGAIN, or a connection that went away: wait for the next
    // A stranger that sends nothing must not hold the wait: a second at most each.
    LaneHello hello;
    const auto by = std::min(deadline, Clock::now() + std::chrono::seconds(1));
    const bool got = move_all(fd, reinterpret_cast<char*>(&hello), sizeof hello, false, by, check);
    if (got && hello.magic == kLaneMagic && hello.token == token_ &&
        hello.generation == generation) {
      set_nodelay(fd);
      return fd;
    }
    ::close(fd);  // not the peer this lane is for
  }
}

// ---------------------------------------------------------------- Lane

std::unique_ptr<Lane> Lane::connect(const std::string& host, uint16_t port, uint64_t token,
                                    uint32_t generation, Clock::time_point deadline,
                                    const LaneCheck& check, const std::string& what,
                                    const std::string& peer) {
  std::string why;
  addrinfo* res = resolve(host, port, false, &why);
  if (res == nullptr) throw TransportError(concat(what, ": lane to ", peer, ": ", why));
  int fd = -1;
  for (addrinfo* a = res; a != nullptr && fd < 0; a = a->ai_next) {
    fd = ::socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) continue;
    if (::connect(fd, a->ai_addr, a->ai_addrlen) != 0 && errno != EINPROGRESS) {
      why = std::strerror(errno);
      ::close(fd);
      fd = -1;
    }
  }
  ::freeaddrinfo(res);
  const std::string where = concat(host, ":", port);
  if (fd < 0) throw TransportError(concat(what, ": lane to ", peer, " at ", where, ": ", why));
  auto lane = std::make_unique<Lane>(fd, generation, peer);
  if (!wait_ready(fd, POLLOUT, deadline, check)) {
    throw TimeoutError(concat(what, ": lane to ", peer, " at ", where, ": no connection"));
  }
  int err = 0;
  socklen_t len = sizeof err;
  if (::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0) err = errno;
  if (err != 0) {
    throw TransportError(concat(what, ": lane to ", peer, " at ", where, ": ", std::strerror(err)));
  }
  set_nodelay(fd);
  LaneHello hello;
  hello.generation = generation;
  hello.token = token;
  if (!move_all(fd, reinterpret_cast<char*>(&hello), sizeof hello, true, deadline, check)) {
    throw TransportError(concat(what, ": lane to ", peer, " at ", where, ": ",
                                errno != 0 ? std::strerror(errno) : "timed out"));
  }
  return lane;
}

Lane::Lane(int fd, uint32_t generation, std::string peer)
    : fd_(fd), generation_(generation), peer_(std::move(peer)) {}

Lane::~Lane() {
  ::close(fd_);
}

void Lane::stamp(uint64_t seq, Clock::time_point deadline, const LaneCheck& check,
                 const std::string& what) {
  LaneStamp mine;
  mine.generation = generation_;
  mine.seq = seq;
  LaneStamp theirs;
  Sink in;
  in.bytes = sizeof theirs;
  in.direct = reinterpret_cast<char*>(&theirs);
  exchange(reinterpret_cast<const char*>(&mine), sizeof mine, in, deadline, check, what);
  if (theirs.magic != kLaneMagic || theirs.generation != generation_ || theirs.seq != seq) {
    throw ProtocolError(concat(what, ": the lane to ", peer_, " is out of step: expected ",
                               "collective #", seq, " of lane ", generation_, ", got #", theirs.seq,
                               " of lane ", theirs.generation));
  }
}

void Lane::exchange(const char* out, size_t out_bytes, const Sink& in, Clock::time_point deadline,
                    const LaneCheck& check, const std::string& what) {
  size_t sent = 0, got = 0, chunk_at = 0;  // chunk_at: offset of the chunk being filled
  auto last_move = Clock::now();
  for (;;) {
    bool moved = false;
    if (sent < out_bytes) {
      const size_t len = std::min(out_bytes - sent, kLaneChunkBytes);
      const ssize_t k = ::send(fd_, out + sent, len, MSG_DONTWAIT | MSG_NOSIGNAL);
      if (k > 0) {
        sent += static_cast<size_t>(k);
        moved = true;
      } else if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
        throw TransportError(concat(what, ": the lane to ", peer_, " broke while sending (",
                                    std::strerror(errno), ")"));
      }
    }
    if (got < in.bytes) {
      char* to = in.direct != nullptr ? in.direct + got : in.chunk + (got - chunk_at);
      const size_t room = in.direct != nullptr
                              ? in.bytes - got
                              : std::min(in.bytes, chunk_at + kLaneChunkBytes) - got;
      const ssize_t k = ::recv(fd_, to, std::min(room, kLaneChunkBytes), MSG_DONTWAIT);
      if (k > 0) {
        got += static_cast<size_t>(k);
        moved = true;
        if (in.direct == nullptr && (got - chunk_at == kLaneChunkBytes || got == in.bytes)) {
          in.fold(chunk_at, in.chunk, got - chunk_at);
          chunk_at = got;
        }
      } else if (k == 0) {
        throw TransportError(concat(what, ": ", peer_, " closed the lane after ", got, " of ",
                                    in.bytes, " bytes (its process ended, or its call failed)"));
      } else if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
        throw TransportError(concat(what, ": the lane to ", peer_, " broke while receiving (",
                                    std::strerror(errno), ")"));
      }
    }
    if (sent == out_bytes && got == in.bytes) return;
    const auto now = Clock::now();
    if (moved) {
      last_move = now;
      continue;
    }
    if (now - last_move < kLaneSpin) continue;
    if (now >= deadline) {
      throw TimeoutError(concat(what, ": timed out on the lane to ", peer_, " (sent ", sent, " of ",
                                out_bytes, " bytes, received ", got, " of ", in.bytes,
                                "; the last bytes moved ", ms_of(now - last_move), " ago)"));
    }
    pollfd p{fd_, 0, 0};
    if (sent < out_bytes) p.events |= POLLOUT;
    if (got < in.bytes) p.events |= POLLIN;
    if (::poll(&p, 1, poll_ms(deadline - now)) == 0 && check) check();
  }
}

}  // namespace dtr::pg
