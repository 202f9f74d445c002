// The metrics endpoint (worker/metrics_http.hpp) against well-behaved and hostile clients:
// a scrape, wrong paths and methods, an oversized request, a silent client that must not
// hold a scrape up, more connections than it serves at once. Every wait is bounded.
#include <arpa/inet.h>
#include <doctest/doctest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <string>
#include <vector>

#include "dtr/error.hpp"
#include "worker/metrics_http.hpp"

namespace {

using dtr::worker::MetricsServer;
using Clock = std::chrono::steady_clock;

int connect_to(int port) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  REQUIRE(fd >= 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
  REQUIRE(connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
  timeval tv{10, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  return fd;
}

// Sends `request` and reads until the server closes (bounded by the receive timeout).
std::string exchange(int port, const std::string& request) {
  int fd = connect_to(port);
  if (!request.empty()) send(fd, request.data(), request.size(), MSG_NOSIGNAL);
  std::string out;
  char buf[4096];
  while (true) {
    ssize_t n = recv(fd, buf, sizeof buf, 0);
    if (n <= 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  close(fd);
  return out;
}

bool starts_with(const std::string& s, const std::string& p) {
  return s.rfind(p, 0) == 0;
}

TEST_CASE("metrics endpoint: a scrape, and what it refuses") {
  std::atomic<int> renders{0};
  MetricsServer server("127.0.0.1", 0, [&] {
    ++renders;
    return std::string("dtr_worker_up 1\n");
  });
  REQUIRE(server.port() > 0);
  CHECK(server.url() == "http://127.0.0.1:" + std::to_string(server.port()) + "/metrics");

  std::string ok = exchange(server.port(), "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
  INFO(ok);
  CHECK(starts_with(ok, "HTTP/1.0 200 OK\r\n"));
  CHECK(ok.find("Content-Type: text/plain; version=0.0.4") != std::string::npos);
  CHECK(ok.find("Content-Length: 16\r\n") != std::string::npos);
  CHECK(ok.substr(ok.size() - 16) == "dtr_worker_up 1\n");
  CHECK(renders.load() == 1);
  CHECK(starts_with(exchange(server.port(), "GET /metrics?x=1 HTTP/1.0\n\n"), "HTTP/1.0 200"));
  CHECK(starts_with(exchange(server.port(), "GET / HTTP/1.0\r\n\r\n"), "HTTP/1.0 404"));
  CHECK(starts_with(exchange(server.port(), "POST /metrics HTTP/1.0\r\n\r\n"), "HTTP/1.0 405"));
  CHECK(starts_with(exchange(server.port(), "garbage\r\n\r\n"), "HTTP/1.0 400"));
  CHECK(starts_with(exchange(server.port(), "GET /metrics HTTP/1.0\r\nX: " +
                                                std::string(MetricsServer::kMaxRequestBytes, 'a')),
                    "HTTP/1.0 431"));
  CHECK(renders.load() == 2);
}

TEST_CASE("metrics endpoint: silent and surplus clients hold no scrape up") {
  MetricsServer server("127.0.0.1", 0, [] { return std::string("x 1\n"); });
  // Connections that say nothing: more than it serves at once.
  std::vector<int> silent;
  for (size_t i = 0; i < MetricsServer::kMaxClients + 4; ++i)
    silent.push_back(connect_to(server.port()));
  // The surplus ones are closed at once.
  int closed = 0;
  auto deadline = Clock::now() + std::chrono::seconds(5);
  while (closed < 4 && Clock::now() < deadline) {
    closed = 0;
    for (int fd : silent) {
      pollfd p{fd, POLLIN, 0};
      if (poll(&p, 1, 0) == 1) {
        char c;
        if (recv(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT) == 0) ++closed;
      }
    }
  }
  CHECK(closed >= 4);
  for (int fd : silent) close(fd);
  // With the silent ones gone (closed by us), a scrape is answered at once.
  auto t0 = Clock::now();
  CHECK(starts_with(exchange(server.port(), "GET /metrics HTTP/1.0\r\n\r\n"), "HTTP/1.0 200"));
  CHECK(Clock::now() - t0 < std::chrono::seconds(2));
  // One silent client open while another scrapes: the scrape is not held up.
  int quiet = connect_to(server.port());
  t0 = Clock::now();
  CHECK(starts_with(exchange(server.port(), "GET /metrics HTTP/1.0\r\n\r\n"), "HTTP/1.0 200"));
  CHECK(Clock::now() - t0 < std::chrono::seconds(2));
  // The silent client is dropped after the client timeout.
  pollfd p{quiet, POLLIN, 0};
  CHECK(poll(&p, 1, static_cast<int>(MetricsServer::kClientTimeout.count()) + 3000) == 1);
  close(quiet);
}

TEST_CASE("metrics endpoint: a bad address or a port in use is an error naming it") {
  CHECK_THROWS_WITH_AS(MetricsServer("not-an-address", 0, [] { return std::string(); }),
                       doctest::Contains("not-an-address"), dtr::InvalidArgument);
  MetricsServer first("127.0.0.1", 0, [] { return std::string(); });
  CHECK_THROWS_WITH_AS(MetricsServer("127.0.0.1", first.port(), [] { return std::string(); }),
                       doctest::Contains("cannot listen on 127.0.0.1"), dtr::TransportError);
}

}  // namespace
