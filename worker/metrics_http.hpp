// MetricsServer: the worker's Prometheus endpoint (dtr-worker --metrics-port,
// docs/observability.md): `GET /metrics` answers the worker's figures in the text
// exposition format, anything else a 404 (or 405 for another method).
//
// It runs on a thread of its own, apart from the worker's socket loop, and trusts no
// client: a request may be at most kMaxRequestBytes (431 past it), a connection lives at
// most kClientTimeout from its accept (reading and writing included), at most kMaxClients
// are served at once (more are closed at accept), sockets are non-blocking and served by
// one poll() loop, so a slow or silent client holds nothing but its own connection. It
// binds loopback unless told another address.
//
// Thread safety: construct and destroy from one thread; port() from any. `render` is
// called on the server's thread.
#pragma once

#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <string>

namespace dtr::worker {

class MetricsServer {
 public:
  static constexpr size_t kMaxRequestBytes = 8192;
  static constexpr size_t kMaxClients = 16;
  static constexpr std::chrono::milliseconds kClientTimeout{5000};

  // Binds `address`:`port` (port 0: one the kernel picks) and starts serving; throws
  // TransportError naming the address when it cannot bind.
  MetricsServer(const std::string& address, int port, std::function<std::string()> render);
  // Stops serving (within about 100 ms) and closes every connection.
  ~MetricsServer();
  MetricsServer(const MetricsServer&) = delete;
  MetricsServer& operator=(const MetricsServer&) = delete;

  int port() const;
  // "http://ADDRESS:PORT/metrics"
  std::string url() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace dtr::worker
