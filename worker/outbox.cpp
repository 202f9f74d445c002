// Outbox (worker/outbox.hpp).
#include "worker/outbox.hpp"

#include <fmt/format.h>
#include <unistd.h>

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
  // Copies held for it will never be released.
  std::vector<local::Tensor> dropped;  // freed outside the lock
  std::lock_guard lock(held_mu_);
  for (auto it = held_.lower_bound({peer, 0}); it != held_.end() && it->first.first == peer;) {
    dropped.push_back(std::move(it->second));
    it = held_.erase(it);
  }
}

void Outbox::reply(const protocol::Reply& r) {
  emit_(Outgoing{protocol::encode(r), {}, -1});
}

void Outbox::reply_event(uint64_t request, bool done, int64_t time_ns, const Failure& failure) {
  protocol::reply::Event r{.request = request, .done = done, .time_ns = time_ns};
  if (done && failure) {
    r.failure = *failure;
    failures_.mark_reported(*failure);
  }
  reply(r);
}

void Outbox::reply_failure(bool get, uint64_t request, protocol::RemoteFailure f) {
  if (get)
    reply(protocol::reply::Get{.request = request, .failure = std::move(f)});
  else
    reply(protocol::reply::Event{.request = request, .failure = std::move(f)});
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

bool Outbox::send_tensor_at(int32_t peer, uint64_t token, local::Tensor tensor) {
  protocol::PeerNotify n;
  n.session = session_id_;
  n.from_node = node_;
  n.token = token;
  n.pid = static_cast<uint32_t>(getpid());
  n.address = reinterpret_cast<uint64_t>(tensor.raw_data());
  n.bytes = static_cast<uint64_t>(tensor.numel()) * element_size(tensor.dtype());
  {
    std::lock_guard lock(held_mu_);
    if (held_.size() >= kMaxHeld) return false;
    held_[{static_cast<uint32_t>(peer), token}] = std::move(tensor);
  }
  emit_(Outgoing{protocol::encode(n), {}, peer});
  return true;
}

void Outbox::release(uint32_t peer, uint64_t token) {
  local::Tensor dropped;  // freed outside the lock
  std::lock_guard lock(held_mu_);
  auto it = held_.find({peer, token});
  if (it == held_.end()) return;
  dropped = std::move(it->second);
  held_.erase(it);
}

void Outbox::send_released(int32_t peer, uint64_t token) {
  protocol::PeerNotify n;
  n.session = session_id_;
  n.from_node = node_;
  n.token = token;
  n.released = true;
  emit_(Outgoing{protocol::encode(n), {}, peer});
}

size_t Outbox::held() const {
  std::lock_guard lock(held_mu_);
  return held_.size();
}

void Outbox::send_tensor(int32_t peer, uint64_t token, local::Tensor tensor) {
  protocol::PeerNotify n;
  n.session = session_id_;
  n.from_node = node_;
  n.token = token;
  emit_(Outgoing{protocol::encode(n), {std::move(tensor)}, peer});
}

void Outbox::send_flight(protocol::FlightSnapshot d) {
  reply(protocol::reply::Flight{.request = 0, .flight = std::move(d)});
}

void Outbox::send_get(const protocol::Reply& r, std::vector<local::Tensor> payloads) {
  emit_(Outgoing{protocol::encode(r), std::move(payloads), -1});
}

}  // namespace dtr::worker::detail
