// What the master reads from its workers, on whichever thread holds the I/O: each message
// routed to its node, replies handed to the requests waiting for them (a Get's tensor
// checked against its metadata), heartbeats, goodbyes, flight dumps sent unasked, and
// malformed messages, which fail the node's pending requests.
#include "master/session.hpp"

#include <fmt/format.h>

#include <cstring>

#include "master/frames.hpp"
#include "protocol/transport.hpp"

namespace dtr::detail {

using protocol::MsgType;

void MasterSession::receive_all() {
  if (router_) {
    receive(*router_, -1);
  } else {
    for (auto& node : nodes_) receive(*node->dealer, node->index);  // heartbeats: beat_loop
  }
  receive_passes_.fetch_add(1);
}

void MasterSession::receive(zmq::socket_t& socket, int node) {
  auto next = [&] {
    if (node >= 0) return protocol::try_recv(socket, kMaxFrames);
    std::lock_guard lock(router_mu_);  // listen mode: the heartbeat thread sends on it
    return protocol::try_recv(socket, kMaxFrames);
  };
  while (auto msg = next()) {
    if (node < 0) {
      if (msg->frames.empty()) continue;
      auto it = node_of_identity_.find(std::string(frame_view(msg->frames[0])));
      if (it == node_of_identity_.end()) continue;  // not one of this session's workers
      dispatch(it->second, *msg, 1);
    } else {
      dispatch(node, *msg, 0);
    }
  }
}

namespace {

// A Get reply's tensor: its payload frame, checked against `m` (wrapped without a copy when
// aligned for the dtype).
local::Tensor get_payload(const TensorMeta& m, zmq::message_t&& bytes) {
  size_t expected = static_cast<size_t>(m.numel()) * element_size(m.dtype);
  auto frame = protocol::share_frame(std::move(bytes));
  if (frame->size() != expected)
    throw ProtocolError(fmt::format("get reply carries {} bytes, {} needs {}", frame->size(),
                                    describe(m), expected));
  std::shared_ptr<Storage> storage;
  if (reinterpret_cast<uintptr_t>(frame->data()) % element_size(m.dtype) == 0) {
    storage = Storage::wrap(frame->data(), frame->size(), frame);
  } else {
    storage = Storage::allocate(expected);
    std::memcpy(storage->data(), frame->data(), expected);
  }
  return local::Tensor(std::move(storage), TensorMeta::contiguous(m.dtype, m.shape));
}

}  // namespace

void MasterSession::keep_orphaned_failures(int node, const protocol::Reply& reply) {
  std::vector<protocol::RemoteFailure>& kept = orphaned_failures_[node];
  auto keep = [&](const protocol::RemoteFailure& f) {
    if (kept.size() < protocol::kMaxErrorsPerReply) kept.push_back(f);
  };
  if (const auto* sync = std::get_if<protocol::reply::Sync>(&reply))
    for (const protocol::RemoteFailure& f : sync->failures) keep(f);
  if (const auto* get = std::get_if<protocol::reply::Get>(&reply); get && get->failure)
    keep(*get->failure);
}

std::vector<protocol::RemoteFailure> MasterSession::take_orphaned_failures(int node) {
  std::lock_guard lock(pending_mu_);
  auto it = orphaned_failures_.find(node);
  if (it == orphaned_failures_.end()) return {};
  std::vector<protocol::RemoteFailure> out = std::move(it->second);
  orphaned_failures_.erase(it);
  return out;
}

void MasterSession::forget_orphaned_cause(int node, const protocol::RemoteFailure& f) {
  std::lock_guard lock(pending_mu_);
  auto it = orphaned_failures_.find(node);
  if (it == orphaned_failures_.end()) return;
  std::erase_if(it->second, [&](const protocol::RemoteFailure& kept) {
    return kept.cause_tensor == f.cause_tensor && kept.cause_op == f.cause_op &&
           kept.cause_message == f.cause_message;
  });
}

void MasterSession::dispatch(int node, protocol::Received& msg, size_t first) {
  nodes_[node]->last_heard.store(Clock::now().time_since_epoch().count());
  auto fail_request = [&](uint64_t request, std::exception_ptr e) {
    std::lock_guard lock(pending_mu_);
    auto it = pending_.find(request);
    if (it == pending_.end()) return false;
    it->second.promise.set_exception(e);
    pending_.erase(it);
    return true;
  };
  // A malformed or unexpected message fails every request waiting on this node: the
  // session with it can no longer be trusted to answer them.
  auto poison = [&](const std::string& why) {
    std::lock_guard lock(pending_mu_);
    for (auto it = pending_.begin(); it != pending_.end();) {
      if (it->second.node == node) {
        it->second.promise.set_exception(std::make_exception_ptr(ProtocolError(why)));
        it = pending_.erase(it);
      } else {
        ++it;
      }
    }
  };
  if (msg.frames.size() <= first || msg.truncated) {
    poison(fmt::format("node {} sent an empty or oversized message", node));
    return;
  }
  try {
    std::string_view header = frame_view(msg.frames[first]);
    MsgType type = protocol::peek_type(header);
    if (type == MsgType::Heartbeat) return;
    if (type == MsgType::Goodbye) {
      // The worker ended the session on its own (it found this master silent for its
      // timeout, say): the node is lost to this session, and the reason says why.
      protocol::Goodbye g = protocol::decode_goodbye(header);
      fail_node(node,
                fmt::format("node {} ({}) ended the session: {}", node, nodes_[node]->endpoint,
                            g.reason.empty() ? std::string("no reason given") : g.reason));
      return;
    }
    if (type != MsgType::Reply)
      throw ProtocolError(fmt::format("unexpected message type {}", static_cast<int>(type)));
    size_t payload_frames = msg.frames.size() - first - 1;
    protocol::Reply reply = protocol::decode_reply(header, payload_frames);
    auto* flight = std::get_if<protocol::reply::Flight>(&reply);
    if (flight && flight->request == 0) {
      note_flight(node, std::move(flight->flight));  // sent unasked: kept for the errors
      return;
    }
    if (auto* error = std::get_if<protocol::reply::ProtocolError>(&reply)) {
      auto e = std::make_exception_ptr(ProtocolError(fmt::format(
          "node {} ({}) rejected a message: {}", node, nodes_[node]->endpoint, error->message)));
      if (error->request == 0 || !fail_request(error->request, e))
        poison(fmt::format("node {} ({}) rejected a message: {}", node, nodes_[node]->endpoint,
                           error->message));
      return;
    }
    ReplyMessage out;
    if (payload_frames == 1)  // the decoder checked: a Get's bytes
      out.payload =
          get_payload(std::get<protocol::reply::Get>(reply).meta, std::move(msg.frames[first + 1]));
    out.reply = std::move(reply);
    std::lock_guard lock(pending_mu_);
    auto it = pending_.find(protocol::reply_request(out.reply));
    if (it == pending_.end()) {  // the requester timed out or was interrupted, and left
      keep_orphaned_failures(node, out.reply);
      return;
    }
    it->second.promise.set_value(std::move(out));
    pending_.erase(it);
  } catch (const Error& e) {
    poison(
        fmt::format("node {} ({}) sent a bad message: {}", node, nodes_[node]->endpoint, e.what()));
  }
}

}  // namespace dtr::detail
