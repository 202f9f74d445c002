// Peer copies (worker/peer_copy.hpp) without a session: what a SendPeer sends, and what a
// RecvPeer makes of what came (bytes, a wrong size, the sender's failure, nothing yet).
#include <doctest/doctest.h>
#include <unistd.h>

#include "protocol/codec.hpp"
#include "tests/worker/parts_support.hpp"
#include "worker/peer_copy.hpp"

namespace {

using namespace dtr;
using namespace dtr::worker::detail;
using dtr::worker::PayloadFrame;
using dtr::worker::test::Sent;
using dtr::worker::test::StreamRig;
namespace cmd = protocol::cmd;

struct CopyRig {
  CopyRig() : outbox(sent.emit(), failures) { outbox.setup(0, 2, 5); }
  StreamRig rig;
  Sent sent;
  FailureLog failures;
  Outbox outbox;
  StreamQueue& stream() { return *rig.streams.find(0); }
  StreamQueuePtr self() { return rig.streams.find(0); }
};

TEST_CASE("peer copy: a send waits for its input, then sends the bytes or the failure") {
  CopyRig r;
  cmd::SendPeer c{.input = 3, .peer = 1, .token = 21};
  Task t;
  t.cmd = &c;
  t.in[0] = std::make_shared<Slot>();
  CHECK_FALSE(run_send_peer(r.stream(), r.self(), t, r.failures, r.outbox));  // parked
  CHECK(r.sent.take().empty());
  t.in[0]->waiters.clear();
  t.in[0]->publish(local::full({2, 3}, Scalar(4.0), DType::Float32).transpose(0, 1));
  CHECK(run_send_peer(r.stream(), r.self(), t, r.failures, r.outbox));
  auto out = r.sent.take();
  REQUIRE(out.size() == 1);
  CHECK(out[0].peer == 1);
  protocol::PeerNotify n = protocol::decode_peer_notify(out[0].header);
  CHECK(n.token == 21);
  CHECK_FALSE(n.failed);
  REQUIRE(out[0].payloads.size() == 1);
  CHECK(out[0].payloads[0].is_contiguous());
  CHECK(out[0].payloads[0].to_vector<float>() == std::vector<float>(6, 4.0f));
  // A failed input: the receiver is told why.
  t.in[0] = Slot::failed_with(r.failures.root(3, "div", "by zero"));
  CHECK(run_send_peer(r.stream(), r.self(), t, r.failures, r.outbox));
  out = r.sent.take();
  REQUIRE(out.size() == 1);
  n = protocol::decode_peer_notify(out[0].header);
  CHECK(n.failed);
  CHECK(n.failure.message == "by zero");
  CHECK(out[0].payloads.empty());
}

TEST_CASE("peer copy: a receive makes its output from the bytes once they have come") {
  CopyRig r;
  cmd::RecvPeer c{
      .out = 8, .meta = TensorMeta::contiguous(DType::Float32, {2}), .peer = 1, .token = 22};
  Task t;
  t.cmd = &c;
  t.remote = std::make_shared<RemoteWait>();
  t.out = std::make_shared<Slot>();
  CHECK_FALSE(run_recv_peer(r.stream(), r.self(), t, r.failures, r.outbox));  // nothing yet
  CHECK(t.remote->waiter == r.self());
  auto bytes = std::make_shared<std::vector<float>>(std::vector<float>{1.5f, -2.0f});
  t.remote->arrived = true;
  t.remote->payload = PayloadFrame{bytes->data(), 8, bytes};
  CHECK(run_recv_peer(r.stream(), r.self(), t, r.failures, r.outbox));
  CHECK(t.out->ready.load());
  CHECK_FALSE(t.out->get_failure());
  CHECK(t.out->tensor.to_vector<float>() == *bytes);
  CHECK_FALSE(t.remote->payload);  // released
  CHECK(r.failures.unreported() == 0);
}

TEST_CASE("peer copy: a receive fails on a wrong size or the sender's failure") {
  CopyRig r;
  cmd::RecvPeer c{
      .out = 8, .meta = TensorMeta::contiguous(DType::Float32, {2}), .peer = 1, .token = 22};
  Task t;
  t.cmd = &c;
  t.remote = std::make_shared<RemoteWait>();
  t.remote->arrived = true;
  auto bytes = std::make_shared<std::vector<char>>(4);
  t.remote->payload = PayloadFrame{bytes->data(), 4, bytes};
  t.out = std::make_shared<Slot>();
  CHECK(run_recv_peer(r.stream(), r.self(), t, r.failures, r.outbox));
  Failure f = t.out->get_failure();
  REQUIRE(f);
  CHECK(f->op == "recv_from_node");
  CHECK(f->message.find("node 1 sent 4 bytes") == 0);
  CHECK(f->message.find("needs 8") != std::string::npos);
  CHECK(r.stream().pending_failure == f);
  CHECK(r.failures.unreported() == 1);

  t.remote = std::make_shared<RemoteWait>();
  t.remote->arrived = true;
  t.remote->failure = make_failure(3, "div", "by zero");
  t.out = std::make_shared<Slot>();
  CHECK(run_recv_peer(r.stream(), r.self(), t, r.failures, r.outbox));
  f = t.out->get_failure();
  REQUIRE(f);
  CHECK(f->tensor == 8);
  CHECK(f->message == "the tensor sent by node 1 is failed");
  CHECK(f->cause_tensor == 3);
  CHECK(f->cause_message == "by zero");
  CHECK(r.failures.unreported() == 1);  // the sender reports its own cause
}

TEST_CASE(
    "peer copy: same host, the bytes stay with the sender until the receiver releases "
    "them") {
  CopyRig r;
  local::Tensor x = local::arange(0.0, 65536.0, 1.0, DType::Float32);  // 256 KiB
  cmd::SendPeer c{.input = 3, .peer = 1, .token = 23, .by_address = true};
  Task t;
  t.cmd = &c;
  t.in[0] = Slot::of(x);
  CHECK(run_send_peer(r.stream(), r.self(), t, r.failures, r.outbox));
  auto out = r.sent.take();
  REQUIRE(out.size() == 1);
  CHECK(out[0].payloads.empty());
  protocol::PeerNotify n = protocol::decode_peer_notify(out[0].header);
  CHECK(n.pid == static_cast<uint32_t>(getpid()));
  CHECK(n.address == reinterpret_cast<uint64_t>(x.raw_data()));  // contiguous: not copied
  CHECK(n.bytes == 65536 * 4);
  CHECK(r.outbox.held() == 1);
  // Small tensors still go in the message.
  t.in[0] = Slot::of(local::ones({4}));
  CHECK(run_send_peer(r.stream(), r.self(), t, r.failures, r.outbox));
  out = r.sent.take();
  REQUIRE(out.size() == 1);
  CHECK(out[0].payloads.size() == 1);
  CHECK(r.outbox.held() == 1);

  // The receiver (here the same process) reads the bytes and releases the sender's token.
  cmd::RecvPeer rc{.out = 9, .meta = x.meta(), .peer = 1, .token = 7};
  Task rt;
  rt.cmd = &rc;
  rt.remote = std::make_shared<RemoteWait>();
  rt.remote->arrived = true;
  rt.remote->from = 1;
  rt.remote->at = RemoteWait::At{n.pid, n.address, n.bytes, 23};  // the token the sender used
  rt.out = std::make_shared<Slot>();
  CHECK(run_recv_peer(r.stream(), r.self(), rt, r.failures, r.outbox));
  REQUIRE_FALSE(rt.out->get_failure());
  CHECK(rt.out->tensor.to_vector<float>() == x.to_vector<float>());
  out = r.sent.take();
  REQUIRE(out.size() == 1);
  CHECK(out[0].peer == 1);
  protocol::PeerNotify released = protocol::decode_peer_notify(out[0].header);
  CHECK(released.released);
  CHECK(released.token == 23);
  r.outbox.release(1, 23);
  CHECK(r.outbox.held() == 0);

  // A wrong size or an unreadable address fails the output and still releases.
  rt.remote->at = RemoteWait::At{n.pid, n.address, 12, 24};
  rt.out = std::make_shared<Slot>();
  CHECK(run_recv_peer(r.stream(), r.self(), rt, r.failures, r.outbox));
  REQUIRE(rt.out->get_failure());
  CHECK(rt.out->get_failure()->message.find("node 1 sent 12 bytes") == 0);
  CHECK(protocol::decode_peer_notify(r.sent.take().at(0).header).released);
  rt.remote->at = RemoteWait::At{n.pid, 8, n.bytes, 25};
  rt.out = std::make_shared<Slot>();
  CHECK(run_recv_peer(r.stream(), r.self(), rt, r.failures, r.outbox));
  REQUIRE(rt.out->get_failure());
  CHECK(rt.out->get_failure()->message.find("reading node 1's tensor") == 0);
  CHECK(protocol::decode_peer_notify(r.sent.take().at(0).header).released);

  // A lost receiver's held copies go.
  t.in[0] = Slot::of(x);
  CHECK(run_send_peer(r.stream(), r.self(), t, r.failures, r.outbox));
  CHECK(r.outbox.held() == 1);
  r.outbox.mark_lost(1, "lost");
  CHECK(r.outbox.held() == 0);
}

}  // namespace
