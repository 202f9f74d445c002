#include "pg/util.hpp"

#include <arpa/inet.h>
#include <fmt/format.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sched.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <cstring>
#include <ctime>

#include "dtr/error.hpp"

namespace dtr::pg {

int64_t parse_int(const std::string& s, const std::string& what) {
  if (s.empty()) return 0;
  int64_t v = 0;
  auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || ptr != s.data() + s.size()) {
    throw InvalidArgument(fmt::format("'{}' is not an integer ({})", s, what));
  }
  return v;
}

std::string resolve_ipv4(const std::string& host) {
  if (host.empty()) throw InvalidArgument("empty host name");
  in_addr a{};
  if (::inet_pton(AF_INET, host.c_str(), &a) == 1) return host;
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  const int rc = ::getaddrinfo(host.c_str(), nullptr, &hints, &res);
  if (rc != 0 || res == nullptr) {
    throw InvalidArgument(fmt::format("cannot resolve host '{}': {}", host, gai_strerror(rc)));
  }
  char buf[INET_ADDRSTRLEN] = {};
  ::inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(res->ai_addr)->sin_addr, buf, sizeof buf);
  ::freeaddrinfo(res);
  return buf;
}

std::string local_address_towards(const std::string& ip) {
  in_addr a{};
  if (::inet_pton(AF_INET, ip.c_str(), &a) != 1) return "127.0.0.1";
  if ((ntohl(a.s_addr) >> 24) == 127) return "127.0.0.1";
  const int fd = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return "127.0.0.1";
  sockaddr_in dst{};
  dst.sin_family = AF_INET;
  dst.sin_port = htons(9);
  dst.sin_addr = a;
  std::string out = "127.0.0.1";
  // connect() on a datagram socket sends nothing; it only picks the route and source.
  if (::connect(fd, reinterpret_cast<sockaddr*>(&dst), sizeof dst) == 0) {
    sockaddr_in self{};
    socklen_t len = sizeof self;
    if (::getsockname(fd, reinterpret_cast<sockaddr*>(&self), &len) == 0) {
      char buf[INET_ADDRSTRLEN] = {};
      if (::inet_ntop(AF_INET, &self.sin_addr, buf, sizeof buf) != nullptr && buf[0] != '0') {
        out = buf;
      }
    }
  }
  ::close(fd);
  return out;
}

std::string collective_name(CommOp op, uint64_t seq, std::string_view suffix) {
  std::string s;
  s.reserve(96);  // one allocation, as concat()
  collective_name_into(s, op, seq, suffix);
  return s;
}

void collective_name_into(std::string& out, CommOp op, uint64_t seq, std::string_view suffix) {
  concat_into(out, comm_op_name(op), " (collective #", seq, ")", suffix);
}

std::chrono::steady_clock::time_point coarse_now() {
  timespec ts{};
  ::clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
  return std::chrono::steady_clock::time_point(std::chrono::seconds(ts.tv_sec) +
                                               std::chrono::nanoseconds(ts.tv_nsec));
}

std::string format_ranks(const std::vector<int>& ranks) {
  std::string s = "[";
  for (size_t i = 0; i < ranks.size(); ++i) s += (i ? ", " : "") + std::to_string(ranks[i]);
  return s + "]";
}

int affinity_cpus() {
  cpu_set_t cpus;
  CPU_ZERO(&cpus);
  return ::sched_getaffinity(0, sizeof cpus, &cpus) == 0 ? std::max(1, CPU_COUNT(&cpus)) : 1;
}

}  // namespace dtr::pg
