// Collectives (worker/collectives.hpp) without a session: the group thread's order,
// NewGroup's checks without a process group, and a collective task failing before any
// communication (no group, no such group, the group not formed in time, the session
// ending).
#include <doctest/doctest.h>

#include <future>

#include "protocol/codec.hpp"
#include "support/replies.hpp"
#include "tests/worker/parts_support.hpp"
#include "worker/collectives.hpp"

namespace {

using namespace dtr;
using namespace dtr::worker::detail;
using dtr::worker::test::Sent;
using dtr::worker::test::StreamRig;
namespace cmd = protocol::cmd;
using std::chrono::milliseconds;

TEST_CASE("collectives: the group thread runs its jobs one at a time, in order") {
  std::vector<int> ran;
  std::promise<void> done;
  {
    GroupThread thread;
    for (int i = 0; i < 50; ++i) thread.post([&ran, i] { ran.push_back(i); });
    thread.post([&done] { done.set_value(); });
    REQUIRE(done.get_future().wait_for(std::chrono::seconds(10)) == std::future_status::ready);
  }
  REQUIRE(ran.size() == 50);
  for (int i = 0; i < 50; ++i) CHECK(ran[static_cast<size_t>(i)] == i);
}

TEST_CASE("collectives: a subgroup needs the session's process group") {
  Groups groups;
  cmd::NewGroup c{.group = 1, .ranks = {0}};
  CHECK(groups.new_group(c, 2) == "the session has no process group (no Setup with endpoints)");
  CHECK_FALSE(groups.find(0));
  CHECK_FALSE(groups.find(1));
  // Setup without one endpoint per node makes no group either.
  groups.setup({"tcp://127.0.0.1:1"}, 0, 2, 1, milliseconds(100), SecurityConfig{});
  CHECK_FALSE(groups.find(0));
}

struct CollectiveRig {
  StreamRig rig;
  FailureLog failures;
  Sent sent;
  Outbox outbox{sent.emit(), failures};
  Groups groups;
  cmd::Collective c{.kind = protocol::CollectiveKind::AllGather, .input = 1, .out = 2};
  Task t;
  CollectiveRig() {
    c.meta = TensorMeta::contiguous(DType::Float32, {4});
    t.cmd = &c;
    t.in[0] = Slot::of(local::zeros({2}, DType::Float32));
    t.out = std::make_shared<Slot>();
  }
  // Runs the task; its output's failure message.
  std::string run(milliseconds timeout) {
    StreamQueuePtr s = rig.streams.find(0);
    CHECK(run_collective(*s, s, t, {groups, failures, timeout, 0, rig.observer, outbox}));
    REQUIRE(t.out->get_failure());
    CHECK(t.out->get_failure()->op == "all_gather");
    CHECK(t.out->get_failure()->tensor == 2);
    return t.out->get_failure()->message;
  }
};

TEST_CASE("collectives: a task without its group fails its output, naming why") {
  CollectiveRig r;
  CHECK(r.run(milliseconds(100)) == "the session has no process group");
  r.c.group = 3;
  r.t.out = std::make_shared<Slot>();
  CHECK(r.run(milliseconds(100)) == "group 3 does not exist");
  CHECK(r.failures.unreported() == 2);
  CHECK(r.sent.count() == 0);  // not stuck: no flight recorder dump
}

TEST_CASE("collectives: a group that does not form in time, or a session that ends, fails it") {
  CollectiveRig r;
  std::promise<ProcessGroup> never;
  r.t.group = std::make_shared<Group>();
  r.t.group->ready = never.get_future().share();
  auto start = std::chrono::steady_clock::now();
  CHECK(r.run(milliseconds(200)) == "the session's process group was not formed within 200 ms");
  CHECK(std::chrono::steady_clock::now() - start >= milliseconds(200));
  // Waited out: the flight recorder went to the master, unasked, saying why.
  REQUIRE(r.sent.count() == 1);
  auto dump = dtr::test::decode_as<protocol::reply::Flight>(r.sent.take()[0].header, 0);
  CHECK(dump.request == 0);
  CHECK(dump.flight.reason.find("all_gather on stream 0 failed: the session's process group was "
                                "not formed") == 0);
  r.t.out = std::make_shared<Slot>();
  r.groups.close();
  CHECK(r.groups.closing());
  CHECK(r.run(std::chrono::hours(1)) == "the session ended before its process group formed");
}

TEST_CASE("collectives: a task waits for its input before anything else") {
  CollectiveRig r;
  r.t.in[0] = std::make_shared<Slot>();
  StreamQueuePtr s = r.rig.streams.find(0);
  CHECK_FALSE(run_collective(
      *s, s, r.t, {r.groups, r.failures, milliseconds(100), 0, r.rig.observer, r.outbox}));
  CHECK_FALSE(r.t.out->ready.load());
  r.t.in[0]->waiters.clear();
}

}  // namespace
