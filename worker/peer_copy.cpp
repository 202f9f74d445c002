// Peer copies (worker/peer_copy.hpp).
#include "worker/peer_copy.hpp"

#include <fmt/format.h>

#include "common/same_host.hpp"
#include "protocol/commands.hpp"
#include "worker/recorder.hpp"

namespace dtr::worker::detail {

namespace cmd = protocol::cmd;

namespace {

// RecvPeer of bytes the sender holds at an address (same host): read, then released.
bool recv_peer_at(StreamQueue& s, Task& t, FailureLog& failures, Outbox& outbox, size_t expected) {
  const auto& c = t.command<cmd::RecvPeer>();
  const RemoteWait::At at = *t.remote->at;
  const auto sender = static_cast<int32_t>(t.remote->from);
  try {
    if (at.bytes != expected)
      throw ProtocolError(fmt::format("node {} sent {} bytes, {} needs {}", c.peer, at.bytes,
                                      describe(c.meta), expected));
    local::Tensor received = local::empty(c.meta.shape, c.meta.dtype);
    common::read_process_memory(at.pid, at.address, received.raw_data(), expected,
                                fmt::format("reading node {}'s tensor", c.peer));
    outbox.send_released(sender, at.token);
    s.owner.recorder.counters.add_bytes<cmd::RecvPeer>(static_cast<int64_t>(expected));
    if (c.device >= 0) {
      cuda::StreamScope scope(c.device, s.cuda.get(c.device));
      received = received.to_device(c.device);
      wrote(s.cuda, *t.out, received);
    }
    t.out->publish(std::move(received));
  } catch (const std::exception& e) {
    outbox.send_released(sender, at.token);
    fail_output(s, t, failures.root(c.out, "recv_from_node", e.what()));
  }
  return true;
}

}  // namespace

bool run_send_peer(StreamQueue& s, const StreamQueuePtr& self, Task& t, FailureLog& failures,
                   Outbox& outbox) {
  const auto& c = t.command<cmd::SendPeer>();
  if (!t.in[0]->ready_or_park(self)) {
    waiting_for_tensor(s, t, c.input);
    return false;
  }
  auto peer = static_cast<int32_t>(c.peer);
  if (Failure f = t.in[0]->get_failure()) {
    outbox.send_notify(peer, c.token, f.get());
    return true;
  }
  try {
    local::Tensor packed = use(s.cuda, *t.in[0]);
    if (packed.device() >= 0) {
      cuda::StreamScope scope(packed.device(), s.cuda.get(packed.device()));
      packed = packed.cpu();
    }
    packed = packed.contiguous();
    const int64_t bytes = packed.numel() * static_cast<int64_t>(element_size(packed.dtype()));
    s.owner.recorder.counters.add_bytes<cmd::SendPeer>(bytes);
    // Same host: the peer reads the bytes here (held until it releases them); small ones,
    // or past the limit of held copies, go in the message.
    if (c.by_address && static_cast<size_t>(bytes) >= common::kSameHostMinBytes &&
        outbox.send_tensor_at(peer, c.token, packed))
      return true;
    outbox.send_tensor(peer, c.token, std::move(packed));
  } catch (const std::exception& e) {
    protocol::RemoteFailure f = make_failure(c.input, "send_to_node", e.what());
    failures.root(f.tensor, f.op, f.message);
    outbox.send_notify(peer, c.token, &f);
  }
  return true;
}

bool run_recv_peer(StreamQueue& s, const StreamQueuePtr& self, Task& t, FailureLog& failures,
                   Outbox& outbox) {
  const auto& c = t.command<cmd::RecvPeer>();
  RemoteWait& w = *t.remote;
  if (!w.arrived_or_park(self)) return false;
  // Arrived: only this task touches the entry now.
  const TensorMeta& m = c.meta;
  if (w.failure) {
    Failure f = dependent_failure(c.out, "recv_from_node", w.failure->tensor, *w.failure);
    auto g = std::make_shared<protocol::RemoteFailure>(*f);
    g->message = fmt::format("the tensor sent by node {} is failed", c.peer);
    fail_output(s, t, std::move(g));
    return true;
  }
  size_t expected = static_cast<size_t>(m.numel()) * element_size(m.dtype);
  if (w.at) return recv_peer_at(s, t, failures, outbox, expected);
  if (!w.payload || w.payload->size != expected) {
    fail_output(
        s, t,
        failures.root(c.out, "recv_from_node",
                      fmt::format("node {} sent {} bytes, {} needs {}", c.peer,
                                  w.payload ? w.payload->size : size_t{0}, describe(m), expected)));
    return true;
  }
  try {
    s.owner.recorder.counters.add_bytes<cmd::RecvPeer>(static_cast<int64_t>(w.payload->size));
    local::Tensor received = frame_tensor(*w.payload, m);
    if (c.device >= 0) {
      cuda::StreamScope scope(c.device, s.cuda.get(c.device));
      received = received.to_device(c.device);
      wrote(s.cuda, *t.out, received);
    }
    w.payload.reset();
    t.out->publish(std::move(received));
  } catch (const std::exception& e) {
    fail_output(s, t, failures.root(c.out, "recv_from_node", e.what()));
  }
  return true;
}

}  // namespace dtr::worker::detail
