// The outbox (worker/outbox.hpp) without a session: who is a peer, and what replies and
// notifications look like on the wire.
#include <doctest/doctest.h>

#include "protocol/codec.hpp"
#include "support/replies.hpp"
#include "tests/worker/parts_support.hpp"
#include "worker/outbox.hpp"

namespace {

using namespace dtr;
using namespace dtr::worker::detail;
using dtr::worker::test::Sent;

TEST_CASE("outbox: peers are the other nodes of the Setup") {
  Sent sent;
  FailureLog failures;
  Outbox outbox(sent.emit(), failures);
  CHECK(outbox.peer_problem(1) == "the session has no peer table (no Setup)");
  outbox.setup(1, 3, 77);
  CHECK_FALSE(outbox.peer_problem(0));
  CHECK_FALSE(outbox.peer_problem(2));
  CHECK(outbox.peer_problem(1) == "node 1 is not a peer of node 1 (3 nodes)");
  CHECK(outbox.peer_problem(3) == "node 3 is not a peer of node 1 (3 nodes)");
}

TEST_CASE("outbox: notifications carry the session and node; event replies report failures") {
  Sent sent;
  FailureLog failures;
  Outbox outbox(sent.emit(), failures);
  outbox.setup(1, 3, 77);
  protocol::RemoteFailure why = make_failure(4, "send_to_node", "gone");
  outbox.send_notify(2, 11, &why);
  outbox.send_tensor(0, 12, local::full({3}, Scalar(1.5), DType::Float32));
  Failure root = failures.root(4, "div", "by zero");
  outbox.reply_event(13, true, 123, root);
  outbox.reply_failure(true, 14, why);
  auto out = sent.take();
  REQUIRE(out.size() == 4);
  CHECK(out[0].peer == 2);
  protocol::PeerNotify n = protocol::decode_peer_notify(out[0].header);
  CHECK(n.session == 77);
  CHECK(n.from_node == 1);
  CHECK(n.token == 11);
  CHECK(n.failed);
  CHECK(n.failure.message == "gone");
  CHECK(out[1].peer == 0);
  REQUIRE(out[1].payloads.size() == 1);
  CHECK_FALSE(protocol::decode_peer_notify(out[1].header).failed);
  auto event = dtr::test::decode_as<protocol::reply::Event>(out[2].header, 0);
  CHECK(event.done);
  CHECK(event.time_ns == 123);
  REQUIRE(event.failure);
  CHECK(failures.unreported() == 0);
  auto get = dtr::test::decode_as<protocol::reply::Get>(out[3].header, 0);
  CHECK(get.request == 14);
  REQUIRE(get.failure);
  CHECK(get.failure->message == "gone");
}

}  // namespace
