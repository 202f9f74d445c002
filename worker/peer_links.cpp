// Peer links (worker/server_impl.hpp): the other workers of the session. What the session
// sends a peer (event notifications, copies) goes out on one DEALER per peer node, opened
// on first use; what peers send comes in on the listen socket (listen mode) or on the peer
// socket this worker binds in connect mode, and a notification not for this session is
// dropped. Peers get no replies: a bad peer message is logged (throttled).
#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include "dtr/error.hpp"
#include "worker/server_impl.hpp"

namespace dtr::worker {

namespace proto = dtr::protocol;
using namespace server_detail;

void Server::Impl::open_peer_socket(const std::string& where) {
  // Other workers of a session send event notifications here.
  std::string host = opt.peer_host;
  if (host.empty()) host = local_address_towards(where);
  if (host.empty()) host = "127.0.0.1";
  std::string bind_at = where.rfind("ipc://", 0) == 0
                            ? fmt::format("ipc:///tmp/dtr-peer-{}", getpid())
                            : fmt::format("tcp://{}:*", host);
  try {
    peer_socket = zmq::socket_t(context, zmq::socket_type::router);
    proto::configure_socket(peer_socket, opt.max_message_bytes);
    guard->server(peer_socket, bind_at, "worker peer endpoint");
    peer_socket.bind(bind_at);
    peer_endpoint = peer_socket.get(zmq::sockopt::last_endpoint);
  } catch (const zmq::error_t& e) {
    throw TransportError(
        fmt::format("cannot listen for peers on {}: {}", bind_at, proto::bind_failure(e.num())));
  }
}

void Server::Impl::set_peers(std::vector<std::string> endpoints) {
  peers = std::move(endpoints);
  peer_dealers.clear();
  peer_dealers.resize(peers.size());
}

void Server::Impl::clear_peers() {
  peer_dealers.clear();
  peers.clear();
}

zmq::socket_t* Server::Impl::peer_dealer(int32_t node) {
  if (node < 0 || static_cast<size_t>(node) >= peers.size()) return nullptr;
  std::unique_ptr<zmq::socket_t>& d = peer_dealers[static_cast<size_t>(node)];
  if (!d) {
    try {
      d = std::make_unique<zmq::socket_t>(context, zmq::socket_type::dealer);
      proto::configure_socket(*d, opt.max_message_bytes);
      // Notifications queue until the connection is up; keep them when closing too.
      d->set(zmq::sockopt::linger, 1000);
      guard->client(*d, peers[static_cast<size_t>(node)], fmt::format("node {}", node));
      d->connect(peers[static_cast<size_t>(node)]);
    } catch (const AuthenticationError& e) {
      spdlog::error("cannot reach node {}: {}", node, e.what());
      d.reset();
      return nullptr;
    } catch (const zmq::error_t& e) {
      spdlog::error("cannot connect to node {} at {}: {}", node, peers[static_cast<size_t>(node)],
                    e.what());
      d.reset();
      return nullptr;
    }
  }
  return d.get();
}

void Server::Impl::drain_peer_socket() {
  for (int i = 0; i < kMaxMessagesPerWakeup; ++i) {
    std::optional<proto::Received> msg = proto::try_recv(peer_socket, 3);
    if (!msg) return;
    if (msg->frames.empty()) continue;
    source = source_address(msg->frames.back());
    if (msg->frames.size() < 2 || msg->truncated) continue;
    std::string id = msg->frames[0].to_string();
    std::string_view header = view_of(msg->frames[1]);
    try {
      if (proto::peek_type(header) == proto::MsgType::Peer) {
        on_peer(&id, header, msg->frames, 2);
        continue;
      }
    } catch (const ProtocolError& e) {
      warn_throttled("bad message on the peer socket",
                     fmt::format("bad message on the peer socket from {}: {}", source,
                                 common::printable(e.what(), 1024)));
      continue;
    }
    warn_throttled("unexpected message on the peer socket",
                   fmt::format("unexpected message on the peer socket from {}; dropped", source));
  }
}

void Server::Impl::on_peer(const std::string* identity, std::string_view header,
                           std::vector<zmq::message_t>& frames, size_t first_payload) {
  proto::PeerNotify n;
  try {
    n = proto::decode_peer_notify(header);
    if (frames.size() > first_payload + 1)
      throw ProtocolError(fmt::format("peer message carries {} payload frames, at most 1",
                                      frames.size() - first_payload));
  } catch (const ProtocolError& e) {
    // No reply: peers do not read them, and a stranger gets nothing to work with.
    warn_throttled("bad peer message",
                   fmt::format("bad peer message from {} at {}: {}", who(identity), source,
                               common::printable(e.what(), 1024)));
    return;
  }
  std::optional<PayloadFrame> payload;
  if (frames.size() == first_payload + 1) {
    std::shared_ptr<zmq::message_t> owner = proto::share_frame(std::move(frames[first_payload]));
    payload = PayloadFrame{owner->data(), owner->size(), owner};
  }
  if (!session || !session->notify(n, payload ? &*payload : nullptr))
    warn_throttled("stray peer notification",
                   fmt::format("peer notification from node {} at {} (session {:#x}) is not for "
                               "this session; dropped",
                               n.from_node, source, n.session));
}

}  // namespace dtr::worker
