// Putting the cluster key on ZeroMQ sockets (library-internal; see dtr/security.hpp).
//
//   Guard           one per zmq context: runs the ZAP handler that admits only peers
//                   holding the cluster key, sets CURVE options on server and client
//                   sockets, refuses plain links to non-local endpoints, and reports
//                   refused peers and failed handshakes on server sockets to a callback.
//   HandshakeWatch  on a client socket: why its handshake failed, in words, so that a
//                   caller waiting for a reply can say "the worker holds another key"
//                   instead of "no answer".
//
// Thread safety: a Guard is created and destroyed on one thread; server(), client() and
// check() may be called from any thread (each socket from its owner's thread). The
// callback runs on the Guard's own thread. A HandshakeWatch belongs to its socket's thread.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <zmq.hpp>

#include "dtr/security.hpp"

namespace dtr::security {

class Guard {
 public:
  using Report = std::function<void(const std::string&)>;

  // With a key: binds the context's ZAP handler (before any server socket of the context
  // binds, so no connection is ever admitted unchecked) and starts its thread.
  // `on_report` (optional) gets one line per refused peer or failed handshake seen on a
  // server socket. Throws AuthenticationError when libzmq lacks CURVE.
  Guard(zmq::context_t& context, SecurityConfig config, Report on_report = {});
  ~Guard();
  Guard(const Guard&) = delete;
  Guard& operator=(const Guard&) = delete;

  bool curve() const { return config_.key.has_value(); }
  const SecurityConfig& config() const { return config_; }
  // "CURVE" or "plain": for logs.
  const char* mechanism() const { return curve() ? "CURVE" : "plain"; }

  // Call before socket.bind(endpoint). `what` names the socket in errors ("worker listen
  // socket"). Throws AuthenticationError for a plain non-local endpoint unless insecure.
  void server(zmq::socket_t& socket, std::string_view endpoint, std::string_view what);
  // Call before socket.connect(endpoint).
  void client(zmq::socket_t& socket, std::string_view endpoint, std::string_view what);
  // The refusal alone, for endpoints that are not bound or dialed by this process's
  // sockets (a worker announcing an address).
  void check(std::string_view endpoint, std::string_view what) const;

 private:
  void run();
  void answer_zap(zmq::socket_t& zap, const std::function<void(std::string)>& report);

  zmq::context_t& context_;
  SecurityConfig config_;
  Report report_;
  std::string public_binary_;  // the key's public half, 32 bytes
  std::mutex control_mutex_;
  zmq::socket_t control_;  // to the thread: monitor addresses to watch, "" to stop
  std::thread thread_;
};

// Whether a ZeroMQ peer listens at tcp:// `endpoint`: connects with a plain TCP socket,
// sends ZMTP's signature and reads what comes back within `wait`. "" when the reply starts
// with ZMTP's signature (or the endpoint is not tcp://, or nothing could be learnt), else a
// sentence naming `peer` and what it is instead ("it sent \"SSH-2.0-OpenSSH_9.2\" where a
// ZeroMQ peer sends its greeting", "it accepted the connection but sent nothing within
// 1000 ms"). Blocks for at most about twice `wait`.
std::string probe_zmtp(const std::string& endpoint, std::string_view peer,
                       std::chrono::milliseconds wait = std::chrono::milliseconds(1000));

// A sentence naming `peer` and the cause of a failed handshake, for a client socket's monitor
// event (`curve`: whether this side uses CURVE); "" for events that are not a failure.
std::string handshake_failure_text(uint16_t event, uint32_t value, bool curve,
                                   std::string_view peer);

class HandshakeWatch {
 public:
  // Starts watching `socket`; call before socket.connect(). `curve`: whether this side
  // uses CURVE (it decides how a mismatch is explained). `peer` names the other side in
  // the messages ("worker tcp://10.0.0.2:5555"). `endpoint`, when given, is probed
  // (probe_zmtp) once a handshake fails or has not finished within kProbeAfter of the TCP
  // connection, so that a service that is not ZeroMQ at all is named as such at once
  // rather than after ZeroMQ's 30 s handshake limit as a key problem.
  HandshakeWatch(zmq::context_t& context, zmq::socket_t& socket, bool curve, std::string peer,
                 std::string endpoint = {});
  static constexpr std::chrono::milliseconds kProbeAfter{2000};
  ~HandshakeWatch();
  HandshakeWatch(const HandshakeWatch&) = delete;
  HandshakeWatch& operator=(const HandshakeWatch&) = delete;

  // Reads the events that arrived (never blocks). Returns a sentence naming the peer and
  // the cause when a handshake failed since the last call that returned one, else "".
  std::string failure();
  // Whether the last failure() found that the peer is no ZeroMQ peer at all (probe_zmtp):
  // a transport problem, not an authentication one.
  bool not_zeromq() const { return not_zeromq_; }
  // Whether a handshake succeeded (as of the last failure() call, which reads the events).
  bool succeeded() const { return succeeded_; }
  // How long every attempt to connect has been refused (no TCP connection ever made), as
  // of the last failure() call; zero once one connected.
  std::chrono::milliseconds refused_for() const;
  const std::string& peer() const { return peer_; }

 private:
  zmq::socket_t& socket_;
  zmq::socket_t pair_;
  bool curve_;
  std::string peer_;
  std::string endpoint_;
  bool succeeded_ = false;
  bool connected_ = false;
  bool probed_ = false;
  bool not_zeromq_ = false;
  std::chrono::steady_clock::time_point connected_at_{};
  std::optional<std::chrono::steady_clock::time_point> refused_since_;
};

}  // namespace dtr::security
