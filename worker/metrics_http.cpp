// The metrics endpoint (worker/metrics_http.hpp): one poll() loop over the listening
// socket, the connections and a stop eventfd.
#include "worker/metrics_http.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <string_view>
#include <thread>
#include <vector>

#include "dtr/error.hpp"

namespace dtr::worker {

namespace {

using Clock = std::chrono::steady_clock;

std::string response(int code, std::string_view reason, std::string_view type,
                     const std::string& body) {
  return fmt::format(
      "HTTP/1.0 {} {}\r\nContent-Type: {}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{}",
      code, reason, type, body.size(), body);
}

// The answer to a complete request head `head`.
std::string answer(std::string_view head, const std::function<std::string()>& render) {
  size_t eol = head.find_first_of("\r\n");
  std::string_view line = head.substr(0, eol);
  size_t sp1 = line.find(' ');
  size_t sp2 = sp1 == std::string_view::npos ? sp1 : line.find(' ', sp1 + 1);
  if (sp1 == std::string_view::npos || sp2 == std::string_view::npos)
    return response(400, "Bad Request", "text/plain", "bad request line\n");
  std::string_view method = line.substr(0, sp1);
  std::string_view path = line.substr(sp1 + 1, sp2 - sp1 - 1);
  if (size_t q = path.find('?'); q != std::string_view::npos) path = path.substr(0, q);
  if (method != "GET") return response(405, "Method Not Allowed", "text/plain", "GET only\n");
  if (path != "/metrics") return response(404, "Not Found", "text/plain", "try /metrics\n");
  std::string body;
  try {
    body = render();
  } catch (const std::exception& e) {
    return response(500, "Internal Server Error", "text/plain", std::string(e.what()) + "\n");
  }
  return response(200, "OK", "text/plain; version=0.0.4; charset=utf-8", body);
}

}  // namespace

struct MetricsServer::Impl {
  // One HTTP connection.
  struct Client {
    int fd = -1;
    Clock::time_point deadline;
    std::string in;
    std::string out;  // the response, once the request is read
    size_t sent = 0;
  };

  std::string address;
  int listen_fd = -1;
  int stop_fd = -1;
  int port = 0;
  std::function<std::string()> render;
  std::vector<Client> clients;
  std::thread thread;

  void loop();
  void accept_clients();
  // Reads or writes what the client's socket allows; false when it is done with.
  bool serve(Client& c, short revents);
};

MetricsServer::MetricsServer(const std::string& address, int port,
                             std::function<std::string()> render)
    : impl_(std::make_unique<Impl>()) {
  Impl& m = *impl_;
  m.address = address;
  m.render = std::move(render);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  if (port < 0 || port > 65535 || inet_pton(AF_INET, address.c_str(), &addr.sin_addr) != 1)
    throw InvalidArgument(
        fmt::format("metrics endpoint: {}:{} is not an IPv4 address and port", address, port));
  m.listen_fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  int one = 1;
  setsockopt(m.listen_fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (m.listen_fd < 0 || bind(m.listen_fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
      listen(m.listen_fd, 16) != 0) {
    std::string why = std::strerror(errno);
    if (m.listen_fd >= 0) close(m.listen_fd);
    throw TransportError(
        fmt::format("metrics endpoint: cannot listen on {}:{}: {}", address, port, why));
  }
  socklen_t len = sizeof addr;
  getsockname(m.listen_fd, reinterpret_cast<sockaddr*>(&addr), &len);
  m.port = ntohs(addr.sin_port);
  m.stop_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  m.thread = std::thread([&m] { m.loop(); });
}

MetricsServer::~MetricsServer() {
  Impl& m = *impl_;
  uint64_t one = 1;
  [[maybe_unused]] ssize_t n = write(m.stop_fd, &one, sizeof one);
  if (m.thread.joinable()) m.thread.join();
  for (Impl::Client& c : m.clients) close(c.fd);
  close(m.listen_fd);
  close(m.stop_fd);
}

int MetricsServer::port() const {
  return impl_->port;
}

std::string MetricsServer::url() const {
  return fmt::format("http://{}:{}/metrics", impl_->address, impl_->port);
}

void MetricsServer::Impl::accept_clients() {
  while (true) {
    int fd = accept4(listen_fd, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) return;
    if (clients.size() >= kMaxClients) {
      close(fd);  // busy: the scraper tries again later
      continue;
    }
    clients.push_back(Client{fd, Clock::now() + kClientTimeout, {}, {}, 0});
  }
}

bool MetricsServer::Impl::serve(Client& c, short revents) {
  if (revents & (POLLERR | POLLNVAL)) return false;
  if (c.out.empty()) {
    char buf[1024];
    ssize_t n = ::recv(c.fd, buf, sizeof buf, 0);
    if (n == 0) return false;  // closed before a whole request
    if (n < 0) return errno == EAGAIN || errno == EINTR;
    c.in.append(buf, static_cast<size_t>(n));
    size_t end = c.in.find("\r\n\r\n");
    if (end == std::string::npos) end = c.in.find("\n\n");
    if (end == std::string::npos) {
      if (c.in.size() < kMaxRequestBytes) return true;
      c.out = response(431, "Request Header Fields Too Large", "text/plain",
                       fmt::format("a request has at most {} bytes\n", kMaxRequestBytes));
    } else {
      c.out = answer(std::string_view(c.in).substr(0, end), render);
    }
  }
  while (c.sent < c.out.size()) {
    ssize_t n = ::send(c.fd, c.out.data() + c.sent, c.out.size() - c.sent, MSG_NOSIGNAL);
    if (n < 0) return errno == EAGAIN || errno == EINTR;
    c.sent += static_cast<size_t>(n);
  }
  return false;  // answered
}

void MetricsServer::Impl::loop() {
  std::vector<pollfd> fds;
  while (true) {
    fds.clear();
    fds.push_back({stop_fd, POLLIN, 0});
    fds.push_back({listen_fd, POLLIN, 0});
    for (const Client& c : clients)
      fds.push_back({c.fd, static_cast<short>(c.out.empty() ? POLLIN : POLLOUT), 0});
    if (poll(fds.data(), fds.size(), 100) < 0 && errno != EINTR) return;
    if (fds[0].revents & POLLIN) return;
    Clock::time_point now = Clock::now();
    std::vector<Client> kept;
    for (size_t i = 0; i < clients.size(); ++i) {
      Client& c = clients[i];
      short revents = fds[i + 2].revents;
      bool keep = now < c.deadline && (revents == 0 || serve(c, revents));
      if (keep) {
        kept.push_back(std::move(c));
      } else {
        close(c.fd);
      }
    }
    clients = std::move(kept);
    if (fds[1].revents & POLLIN) accept_clients();
  }
}

}  // namespace dtr::worker
