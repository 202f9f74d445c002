// Outbox: the messages a session sends, and who it may send peer messages to.
//
// Replies to the master (event answers, a request's failure, protocol errors, any reply)
// and notifications to peer workers (a token, possibly with a copy's bytes or a failure)
// all leave through the session's `emit` (worker/session.hpp). The outbox also holds this
// node's identity from the master's Setup (node index, node count, session id), which
// peer messages carry and peer commands are checked against.
//
// Thread safety: the send members may be called from any thread, with no session lock
// held (emit's contract). The identity is written by setup() on the dispatch thread; it is
// read on executor threads only by tasks dispatched after it (whose hand-off to the
// executor orders the write before the read).
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "dtr/tensor.hpp"
#include "protocol/messages.hpp"
#include "worker/failures.hpp"
#include "worker/session.hpp"

namespace dtr::worker::detail {

class Outbox {
 public:
  Outbox(Emit emit, FailureLog& failures) : emit_(std::move(emit)), failures_(failures) {}

  void setup(uint32_t node, uint32_t nodes, uint64_t session_id);
  bool has_setup() const { return has_setup_; }
  uint32_t node() const { return node_; }
  uint32_t nodes() const { return nodes_; }
  uint64_t session_id() const { return session_id_; }
  // Why `peer` cannot be talked to (no Setup, out of range, this node, lost); nullopt if
  // it can. Dispatch thread.
  std::optional<std::string> peer_problem(uint32_t peer) const;
  // The master lost `peer` (cmd::NodeLost): peer_problem() says `why` from now on, and
  // the copies held for it go. Dispatch thread.
  void mark_lost(uint32_t peer, std::string why);

  // Any reply to the master.
  void reply(const protocol::Reply& r);
  // Answers an EventQuery / EventSync; a failure it carries (when done) counts as
  // reported.
  void reply_event(uint64_t request, bool done, int64_t time_ns, const Failure& failure);
  // Answers `request` (a Get, or else an event request) with failure `f`.
  void reply_failure(bool get, uint64_t request, protocol::RemoteFailure f);
  // Tells `peer` that `token` has come, or that it never will (`failure`).
  void send_notify(int32_t peer, uint64_t token, const protocol::RemoteFailure* failure = nullptr);
  // Sends `peer` the bytes of `tensor` (contiguous, on the host) for `token`.
  void send_tensor(int32_t peer, uint64_t token, local::Tensor tensor);
  // Same host: tells `peer` where `tensor`'s bytes are, and holds them until it releases
  // `token`. False (nothing sent) when kMaxHeld copies are held already.
  bool send_tensor_at(int32_t peer, uint64_t token, local::Tensor tensor);
  // `peer` has read the bytes of `token` (its PeerNotify::released): they go. Any thread.
  void release(uint32_t peer, uint64_t token);
  // Tells `peer` that this node has read its bytes for `token`.
  void send_released(int32_t peer, uint64_t token);
  // Copies held for peers (tests).
  size_t held() const;
  static constexpr size_t kMaxHeld = 4096;
  // Sends a Get's reply with the bytes of `payload` (contiguous, on the host), if any.
  void send_get(const protocol::Reply& r, std::vector<local::Tensor> payloads);
  // Sends the master a flight recorder dump it did not ask for (request 0): a peer
  // was lost, a collective failed waiting for its members, SIGUSR1 (docs/observability.md).
  void send_flight(protocol::FlightSnapshot d);

 private:
  Emit emit_;
  FailureLog& failures_;
  bool has_setup_ = false;
  uint32_t node_ = 0;
  uint32_t nodes_ = 1;
  uint64_t session_id_ = 0;
  std::vector<std::string> lost_;  // per node: why it is lost, "" while it is not
  // Same-host copies held until their receiver releases them, by (peer, token).
  mutable std::mutex held_mu_;
  std::map<std::pair<uint32_t, uint64_t>, local::Tensor> held_;
};

}  // namespace dtr::worker::detail
