// Server: the worker daemon's socket loop. It owns one ZeroMQ socket and at most one
// Session (one master at a time), decodes what arrives, runs batches on the session and
// sends the replies back.
//
//   listen mode (ServerOptions::listen)  ROUTER bound to the endpoint; masters dial in,
//       HELLO opens a session (a second master is told "busy" until the first one says
//       GOODBYE or its connection goes away), the server runs until stop().
//   connect mode (ServerOptions::master) DEALER dialing a master that listens; a HEARTBEAT
//       goes out first so that the master learns this worker's address, run() returns
//       after GOODBYE or when the master's connection goes away.
//
// Peers: the workers of one session notify each other of events (cross-node stream waits)
// directly. In listen mode they dial the listen endpoint; in connect mode the worker binds
// a second ROUTER (on the address it uses towards the master, or `peer_host`) and says
// where in its HELLO reply. Commands run on the session's executor threads; their replies
// come back to the socket loop through an outbox and an eventfd.
//
// Security: see ServerOptions::security. Refused peers and failed handshakes are logged
// with the peer's address; nothing they send reaches the session.
//
// Malformed messages are answered with a ProtocolError reply and change nothing; the
// server keeps serving. While a session is open a HEARTBEAT goes to its master every
// `heartbeat` (in listen mode from a thread of its own, which run() starts and joins, so
// that a loop busy with a large message still sends them); a master that can no longer be
// reached loses its session (and tensors).
//
// Observability: the worker's recorder (worker/recorder.hpp) outlives its sessions; a
// session that ends other than by the master's goodbye dumps its flight recorder to the
// log (and says its last commands in the Goodbye it sends); the metrics endpoint
// (worker/metrics_http.hpp) runs on a thread of its own and asks the loop for snapshots.
//
// Thread safety: construct, run() and destroy from one thread at a time (run() may be on
// another thread than the constructor, not concurrently with it). stop(), dump_flight(),
// endpoint() and metrics_url() may be called from any thread at any time, stop() and
// dump_flight() also from a signal-handling thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "dtr/security.hpp"

namespace dtr::worker {

struct ServerOptions {
  std::string listen;  // endpoint to bind, e.g. "tcp://*:5555" (listen mode)
  std::string master;  // endpoint to dial, e.g. "tcp://head:6000" (connect mode)
  std::string name;    // this worker's name, for logs
  int64_t max_message_bytes = int64_t{16} << 30;
  std::chrono::milliseconds heartbeat{1000};
  std::chrono::milliseconds connect_timeout{60000};  // connect mode: wait for HELLO
  unsigned threads = 0;   // executor threads per session (the stream budget); 0: all cores
  std::string peer_host;  // address peers use; default: the one facing the master
  // Bound on a session's process-group waits (its rendezvous, each collective).
  std::chrono::milliseconds collective_timeout{300000};
  // After a message, the loop polls its sockets this long before it sleeps (a request
  // seen while spinning costs no thread wake-up: lower latency for one busy core while a
  // master is active). Zero: sleep at once.
  std::chrono::microseconds spin{200};
  // Authentication (dtr/security.hpp): with a key every link of this worker (to masters,
  // to peers, its process groups) is CURVE and only holders of the key get through; without
  // one, non-local endpoints are refused unless `insecure`. dtr-worker resolves it from
  // --key/--insecure and the environment; the default here is plain, local only.
  SecurityConfig security;
  // Observability (docs/observability.md): commands the flight recorder keeps, bytes of
  // the trace buffer, and the Prometheus endpoint (metrics_port < 0: none; 0: a port the
  // kernel picks) on `metrics_address`.
  size_t flight_records = 4096;
  size_t trace_bytes = size_t{256} << 20;
  int metrics_port = -1;
  std::string metrics_address = "127.0.0.1";
};

class Server {
 public:
  // Binds (listen) or dials (connect). Throws InvalidArgument unless exactly one of
  // `listen` and `master` is set, TransportError naming the endpoint when the socket
  // cannot bind or connect.
  explicit Server(ServerOptions options);
  ~Server();
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  // The endpoint actually bound (listen mode: "tcp://127.0.0.1:*" gives the chosen port)
  // or dialed (connect mode).
  std::string endpoint() const;

  // Serves until stop() (listen mode) or until the session is over (connect mode: after
  // GOODBYE or when the master goes away). Throws TimeoutError naming the endpoint when in
  // connect mode no HELLO arrived within connect_timeout, TransportError when the socket
  // fails.
  void run();

  // Makes run() return within about 100 ms; safe from any thread, idempotent.
  void stop();

  // Has the loop dump the flight recorder to the log (and to the session's master, if
  // any) with `reason`; safe from any thread (dtr-worker calls it on SIGUSR1).
  void dump_flight(std::string reason);
  // The metrics endpoint's URL; "" without one.
  std::string metrics_url() const;
  // Tests only: the loop sleeps `how_long` at its next turn, as one busy with a GiB-sized
  // message would (the heartbeats go on: they have a thread of their own in listen mode).
  void stall_loop_for_test(std::chrono::milliseconds how_long);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace dtr::worker
