// Events and cross-node tokens (worker/events.hpp) without a session: a record releases
// parked streams, EventSync requests and peers; generations; queries; tokens whose
// notification comes before or after their wait.
#include <doctest/doctest.h>

#include "protocol/codec.hpp"
#include "support/replies.hpp"
#include "tests/worker/parts_support.hpp"
#include "worker/events.hpp"

namespace {

using namespace dtr;
using namespace dtr::worker::detail;
namespace cmd = dtr::protocol::cmd;
using dtr::worker::PayloadFrame;
using dtr::worker::test::eventually;
using dtr::worker::test::Sent;
using dtr::worker::test::StreamRig;

// A rig whose tasks wait on events and tokens as the session's do.
struct EventRig : StreamRig {
  EventRig() {
    recorder.hook = [](StreamQueue&, const StreamQueuePtr& self, Task& t) {
      if (std::holds_alternative<const cmd::WaitEvent*>(t.cmd))
        return t.event->reached_or_park(t.target, self);
      if (std::holds_alternative<const cmd::WaitRemote*>(t.cmd))
        return t.remote->arrived_or_park(self);
      return true;
    };
  }
};

TEST_CASE("events: a record releases a parked stream, an EventSync and a peer") {
  EventRig rig;
  Sent sent;
  FailureLog failures;
  Outbox outbox(sent.emit(), failures);
  outbox.setup(0, 2, 42);
  EventTable events;
  std::string problem;
  EventPtr e = events.for_record(9, &problem);
  REQUIRE(e);
  const uint64_t generation = ++e->issued;
  // Stream 0 waits for the record; a sync request and a peer wait too.
  const cmd::WaitEvent wait_event{.event = 9};  // outlives the task
  Task wait = StreamRig::labelled(1);
  wait.cmd = &wait_event;
  wait.event = e;
  wait.target = generation;
  rig.streams.stage(rig.streams.find(0), std::move(wait));
  rig.streams.flush(nullptr);
  REQUIRE(rig.executor.wait_idle(std::chrono::seconds(10)));
  CHECK(rig.recorder.count() == 0);
  CHECK_FALSE(e->answer(7, true));         // parked as a waiter
  CHECK_FALSE(e->answer(8, false)->done);  // a query answers now
  CHECK_FALSE(e->done_or_notify(1, 99));
  CHECK(sent.take().empty());
  // Stream 1 runs the record, with a failure pending on it.
  REQUIRE_FALSE(rig.streams.create(1));
  StreamQueue& recorder = *rig.streams.find(1);
  Failure cause = failures.root(3, "div", "boom");
  recorder.pending_failure = cause;
  run_record(recorder, *e, generation, failures, outbox);
  CHECK_FALSE(recorder.pending_failure);
  REQUIRE(eventually([&] { return rig.recorder.count() == 1; }));
  std::vector<dtr::worker::Outgoing> out = sent.take();
  REQUIRE(out.size() == 2);
  CHECK(out[0].peer == -1);
  auto r = dtr::test::decode_as<protocol::reply::Event>(out[0].header, 0);
  CHECK(r.request == 7);
  CHECK(r.done);
  CHECK(r.time_ns > 0);
  REQUIRE(r.failure);
  CHECK(r.failure->message == "boom");
  CHECK(failures.unreported() == 0);  // the sync reported it
  CHECK(out[1].peer == 1);
  protocol::PeerNotify n = protocol::decode_peer_notify(out[1].header);
  CHECK(n.session == 42);
  CHECK(n.from_node == 0);
  CHECK(n.token == 99);
  CHECK_FALSE(n.failed);
  CHECK(e->waiters.empty());
  // Done now: a query says so without the failure, a sync carries it.
  auto q = e->answer(10, false);
  REQUIRE(q);
  CHECK(q->done);
  CHECK_FALSE(q->failure);
  auto s = e->answer(11, true);
  REQUIRE(s);
  CHECK(s->failure == cause);
  CHECK(e->done_or_notify(1, 100));
}

TEST_CASE("events: a record completes its generation only; an older one changes nothing") {
  auto e = std::make_shared<EventState>();
  e->issued = 2;
  EventRig rig;
  StreamQueuePtr s = rig.streams.find(0);
  CHECK_FALSE(e->reached_or_park(2, s));
  EventState::Released first = e->complete(1, nullptr);
  CHECK(first.waiters.empty());  // waits for generation 2
  CHECK(e->completed == 1);
  auto f = std::make_shared<protocol::RemoteFailure>(make_failure(1, "add", "late"));
  EventState::Released second = e->complete(2, f);
  REQUIRE(second.waiters.size() == 1);
  CHECK(second.waiters[0].stream == s);
  CHECK(second.failure == f);
  const int64_t time = second.time_ns;
  EventState::Released old = e->complete(1, nullptr);  // ran late: ignored
  CHECK(e->completed == 2);
  CHECK(old.failure == f);
  CHECK(old.time_ns == time);
  CHECK(e->reached_or_park(2, s));
}

TEST_CASE("events: the table refuses id 0 and finds events until destroyed") {
  EventTable events;
  std::string problem;
  CHECK_FALSE(events.for_record(0, &problem));
  CHECK(problem == "event id 0 is not a valid id");
  EventPtr e = events.for_record(4, &problem);
  REQUIRE(e);
  CHECK(e->id == 4);
  CHECK(events.for_record(4, &problem) == e);
  CHECK(events.find(4) == e);
  CHECK_FALSE(events.find(5));
  CHECK(events.size() == 1);
  CHECK(events.erase(4));
  CHECK_FALSE(events.erase(4));
  CHECK_FALSE(events.find(4));
}

TEST_CASE("tokens: a notification that comes first is kept for its wait") {
  Tokens tokens;
  auto bytes = std::make_shared<std::vector<char>>(8);
  PayloadFrame frame{bytes->data(), bytes->size(), bytes};
  CHECK(tokens.arrive(5, 1, &frame, std::nullopt));
  CHECK(tokens.pending() == 1);
  std::string problem;
  RemoteWaitPtr w = tokens.wait(5, 1, &problem);
  REQUIRE(w);
  CHECK(tokens.pending() == 0);
  EventRig rig;
  CHECK(w->arrived_or_park(rig.streams.find(0)));
  CHECK(w->from == 1);
  REQUIRE(w->payload);
  CHECK(w->payload->size == 8);
  CHECK_FALSE(w->failure);
}

TEST_CASE("tokens: a wait that comes first parks its stream until the notification") {
  EventRig rig;
  Tokens tokens;
  std::string problem;
  RemoteWaitPtr w = tokens.wait(6, 2, &problem);
  REQUIRE(w);
  CHECK(tokens.pending() == 1);
  const cmd::WaitRemote wait_remote{.peer = 2, .token = 6};  // outlives the task
  Task t = StreamRig::labelled(1);
  t.cmd = &wait_remote;
  t.remote = w;
  rig.streams.stage(rig.streams.find(0), std::move(t));
  rig.streams.flush(nullptr);
  REQUIRE(rig.executor.wait_idle(std::chrono::seconds(10)));
  CHECK(rig.recorder.count() == 0);
  protocol::RemoteFailure why = make_failure(3, "send_to_node", "gone");
  CHECK(tokens.arrive(6, 2, nullptr, why));
  CHECK(tokens.pending() == 0);
  REQUIRE(eventually([&] { return rig.recorder.count() == 1; }));
  std::lock_guard lock(w->mu);
  CHECK(w->arrived);
  REQUIRE(w->failure);
  CHECK(w->failure->message == "gone");
  CHECK_FALSE(w->payload);
}

TEST_CASE("tokens: a second notification before the wait is refused; the first one stays") {
  Tokens tokens;
  protocol::RemoteFailure f;
  f.message = "second";
  CHECK(tokens.arrive(8, 1, nullptr, std::nullopt));
  CHECK_FALSE(tokens.arrive(8, 2, nullptr, f));
  CHECK(tokens.pending() == 1);
  std::string problem;
  RemoteWaitPtr w = tokens.wait(8, 1, &problem);
  REQUIRE(w);
  std::lock_guard lock(w->mu);
  CHECK(w->arrived);
  CHECK(w->from == 1);
  CHECK_FALSE(w->failure);
  CHECK(tokens.pending() == 0);
}

}  // namespace
