// Outbox (worker/outbox.hpp).
#include "worker/outbox.hpp"

#include <fmt/format.h>

#include "protocol/codec.hpp"

namespace dtr::worker::detail {

void Outbox::setup(uint32_t node, uint32_t nodes, uint64_t session_id) {
  has_setup_ = true;
  node_ = node;
  nodes_ = nodes;
  session_id_ = session_id;
}

std::optional<std::string> Outbox::peer_problem(uint32_t peer) const {
  if (!has_setup_) return std::string("the session has no peer table (no Setup)");
  if (peer >= nodes_ || peer == node_)
    return fmt::format("node {} is not a peer of node {} ({} nodes)", peer, node_, nodes_);
  if (peer < lost_.size() && !lost_[peer].empty()) return lost_[peer];
  return std::nullopt;
}

void Outbox::mark_lost(uint32_t peer, std::string why) {
  if (peer >= nodes_) return;
  lost_.resize(nodes_);
  lost_[peer] = std::move(why);
}

void Outbox::reply(const protocol::Reply& r) {
  emit_(Outgoing{protocol::encode(r), {}, -1});
}

void Outbox::reply_event(uint64_t request, bool done, int64_t time_ns, const Failure& failure) {
  protocol::Reply r;
  r.type = protocol::ReplyType::Event;
  r.request = request;
  r.done = done;
  r.time_ns = time_ns;
  if (done && failure) {
    r.failures.push_back(*failure);
    failures_.mark_reported(*failure);
  }
  reply(r);
}

void Outbox::reply_failure(bool get, uint64_t request, protocol::RemoteFailure f) {
  protocol::Reply r;
  r.type = get ? protocol::ReplyType::Get : protocol::ReplyType::Event;
  r.request = request;
  r.failures.push_back(std::move(f));
  reply(r);
}

void Outbox::send_notify(int32_t peer, uint64_t token, const protocol::RemoteFailure* failure) {
  protocol::PeerNotify n;
  n.session = session_id_;
  n.from_node = node_;
  n.token = token;
  if (failure) {
    n.failed = true;
    n.failure = *failure;
  }
  emit_(Outgoing{protocol::encode(n), {}, peer});
}

void Outbox::send_tensor(int32_t peer, uint64_t token, local::Tensor tensor) {
  protocol::PeerNotify n;
  n.session = session_id_;
  n.from_node = node_;
  n.token = token;
  emit_(Outgoing{protocol::encode(n), {std::move(tensor)}, peer});
}

void Outbox::send_flight(protocol::FlightDump d) {
  protocol::Reply r;
  r.type = protocol::ReplyType::Flight;
  r.request = 0;
  r.flight = std::move(d);
  reply(r);
}

void Outbox::send_get(const protocol::Reply& r, std::vector<local::Tensor> payloads) {
  emit_(Outgoing{protocol::encode(r), std::move(payloads), -1});
}

}  // namespace dtr::worker::detail
