// The stream scheduler (worker/streams.hpp) without a session: order, slices, park and
// wake, staging, create/destroy and the stream limit, barriers.
#include <doctest/doctest.h>

#include <numeric>

#include "tests/worker/parts_support.hpp"
#include "worker/streams.hpp"

namespace {

using namespace dtr;
using namespace dtr::worker::detail;
using dtr::worker::test::eventually;
using dtr::worker::test::StreamRig;

std::vector<int> iota(int n, int from = 1) {
  std::vector<int> v(static_cast<size_t>(n));
  std::iota(v.begin(), v.end(), from);
  return v;
}

TEST_CASE("streams: one stream runs its tasks in order, across several slices") {
  StreamRig rig;
  const int n = 3 * kTasksPerSlice + 7;
  std::vector<int> labels = iota(n);
  StreamQueuePtr s = rig.streams.find(0);
  REQUIRE(s);
  for (int l : labels) rig.streams.stage(s, StreamRig::labelled(l));
  CHECK(rig.streams.staged() == static_cast<size_t>(n));
  CHECK_FALSE(rig.streams.idle_now(s));  // staged work counts
  rig.streams.flush(nullptr);
  CHECK(rig.streams.staged() == 0);
  REQUIRE(rig.executor.wait_idle(std::chrono::seconds(10)));
  CHECK(rig.recorder.labels() == labels);
  CHECK(rig.streams.backlog() == 0);
  CHECK(rig.streams.idle_now(s));
}

TEST_CASE("streams: idle_now remembers an idle stream only until something is staged") {
  StreamRig rig;
  StreamQueuePtr s = rig.streams.find(0);
  REQUIRE(s);
  CHECK(rig.streams.idle_now(s));
  CHECK(rig.streams.idle_now(s));  // remembered
  rig.streams.stage(s, StreamRig::labelled(1));
  CHECK_FALSE(rig.streams.idle_now(s));
  rig.streams.flush(nullptr);
  REQUIRE(rig.executor.wait_idle(std::chrono::seconds(10)));
  CHECK(rig.streams.idle_now(s));
  // Staging to another stream forgets it too (it is looked at again, under its lock).
  REQUIRE_FALSE(rig.streams.create(5).has_value());
  StreamQueuePtr other = rig.streams.find(5);
  REQUIRE(other);
  rig.streams.stage(other, StreamRig::labelled(2));
  CHECK(rig.streams.idle_now(s));
  CHECK_FALSE(rig.streams.idle_now(other));
  rig.streams.flush(nullptr);
  REQUIRE(rig.executor.wait_idle(std::chrono::seconds(10)));
  CHECK(rig.recorder.labels() == std::vector<int>{1, 2});
}

TEST_CASE("streams: a task whose input is not ready parks its stream until it is") {
  StreamRig rig;
  std::vector<int> labels = iota(3);
  StreamQueuePtr s = rig.streams.find(0);
  auto input = std::make_shared<Slot>();
  Task first = StreamRig::labelled(labels[0]);
  first.in[0] = input;
  rig.streams.stage(s, std::move(first));
  rig.streams.stage(s, StreamRig::labelled(labels[1]));
  rig.streams.stage(s, StreamRig::labelled(labels[2]));
  rig.streams.flush(nullptr);
  // Parked: the pool is idle, nothing ran, the tasks are still queued.
  REQUIRE(rig.executor.wait_idle(std::chrono::seconds(10)));
  CHECK(rig.recorder.count() == 0);
  CHECK(rig.streams.backlog() == 3);
  CHECK_FALSE(rig.streams.idle_now(s));
  {
    std::lock_guard lock(s->mu);
    CHECK(s->state == StreamQueue::State::Parked);
  }
  input->publish(local::Tensor());  // wakes the stream
  REQUIRE(eventually([&] { return rig.recorder.count() == 3; }));
  CHECK(rig.recorder.labels() == labels);
  REQUIRE(rig.executor.wait_idle(std::chrono::seconds(10)));
  CHECK(rig.streams.backlog() == 0);
}

TEST_CASE("streams: a stream waits for another stream's output; streams run concurrently") {
  StreamRig rig(2);
  REQUIRE_FALSE(rig.streams.create(1));
  StreamQueuePtr a = rig.streams.find(0);
  StreamQueuePtr b = rig.streams.find(1);
  std::vector<int> labels = iota(2);
  // a's task reads what b's makes; b's is held back until a has parked.
  auto produced = std::make_shared<Slot>();
  auto gate = std::make_shared<Slot>();
  Task reader = StreamRig::labelled(labels[0]);
  reader.in[0] = produced;
  Task producer = StreamRig::labelled(labels[1]);
  producer.in[0] = gate;
  producer.out = produced;
  rig.streams.stage(a, std::move(reader));
  rig.streams.stage(b, std::move(producer));
  rig.streams.flush(nullptr);
  REQUIRE(rig.executor.wait_idle(std::chrono::seconds(10)));
  CHECK(rig.recorder.count() == 0);
  gate->publish(local::Tensor());
  REQUIRE(eventually([&] { return rig.recorder.count() == 2; }));
  CHECK(rig.recorder.labels() == std::vector<int>{2, 1});
}

TEST_CASE("streams: a wake that comes while the task runs makes it run again at once") {
  StreamRig rig(1);
  StreamQueuePtr s = rig.streams.find(0);
  int label = 7;
  int attempts = 0;
  // The first attempt parks itself and is woken before it returns.
  rig.recorder.hook = [&](StreamQueue&, const StreamQueuePtr& self, Task&) {
    if (++attempts > 1) return true;
    wake(self);
    return false;
  };
  rig.streams.stage(s, StreamRig::labelled(label));
  rig.streams.flush(nullptr);
  REQUIRE(eventually([&] { return rig.recorder.count() == 1; }));
  REQUIRE(rig.executor.wait_idle(std::chrono::seconds(10)));
  CHECK(attempts == 2);
  std::lock_guard lock(s->mu);
  CHECK(s->state == StreamQueue::State::Idle);
  CHECK_FALSE(s->wake_pending);
}

TEST_CASE("streams: create and destroy check ids, and the stream limit counts retired ones") {
  StreamRig rig;
  CHECK(rig.streams.create(0) == "stream 0 already exists");
  CHECK_FALSE(rig.streams.create(3));
  CHECK(rig.streams.create(3) == "stream 3 already exists");
  CHECK(rig.streams.destroy(0) == "the default stream (0) cannot be destroyed");
  CHECK(rig.streams.destroy(9) == "stream 9 does not exist on this worker");
  CHECK(rig.streams.size() == 2);
  CHECK_FALSE(rig.streams.destroy(3));
  CHECK(rig.streams.size() == 1);
  CHECK_FALSE(rig.streams.find(3));
  for (uint32_t id = 1; id <= protocol::kMaxStreams; ++id) REQUIRE_FALSE(rig.streams.create(id));
  CHECK(rig.streams.create(5000) ==
        "stream 5000: this worker allows at most 1024 streams per session");
  // A destroyed stream that still has work counts until it is idle.
  auto gate = std::make_shared<Slot>();
  int label = 1;
  Task t = StreamRig::labelled(label);
  t.in[0] = gate;
  rig.streams.stage(rig.streams.find(1), std::move(t));
  rig.streams.flush(nullptr);
  REQUIRE(rig.executor.wait_idle(std::chrono::seconds(10)));
  REQUIRE_FALSE(rig.streams.destroy(1));
  CHECK(rig.streams.create(5000).has_value());
  gate->publish(local::Tensor());
  REQUIRE(eventually([&] { return rig.recorder.count() == 1; }));
  REQUIRE(rig.executor.wait_idle(std::chrono::seconds(10)));
  CHECK_FALSE(rig.streams.create(5000));
}

TEST_CASE("streams: a barrier reaches every stream, retired ones too, and finishes once") {
  StreamRig rig;
  REQUIRE_FALSE(rig.streams.create(1));
  REQUIRE_FALSE(rig.streams.create(2));
  // The hook is set before any task runs (an executor thread reads it).
  std::atomic<int> arrivals{0}, finished{0};
  rig.recorder.hook = [&](StreamQueue& s, const StreamQueuePtr&, Task& t) {
    if (t.is_barrier()) {
      ++arrivals;
      if (arrive(s, *t.barrier)) ++finished;
    }
    return true;
  };
  // Stream 2 is retired with a task still waiting.
  auto gate = std::make_shared<Slot>();
  int label = 1;
  Task t = StreamRig::labelled(label);
  t.in[0] = gate;
  rig.streams.stage(rig.streams.find(2), std::move(t));
  rig.streams.flush(nullptr);
  REQUIRE_FALSE(rig.streams.destroy(2));
  auto b = std::make_shared<Barrier>();
  rig.streams.barrier(b);
  CHECK(b->remaining.load() == 3);
  rig.streams.flush(nullptr);
  REQUIRE(rig.executor.wait_idle(std::chrono::seconds(10)));
  CHECK(arrivals.load() == 2);  // stream 2's barrier waits behind its task
  CHECK(finished.load() == 0);
  gate->publish(local::Tensor());
  REQUIRE(eventually([&] { return finished.load() == 1; }));
  REQUIRE(rig.executor.wait_idle(std::chrono::seconds(10)));
  CHECK(arrivals.load() == 3);
  CHECK(finished.load() == 1);
  CHECK(b->remaining.load() == 0);
  CHECK(b->device_failure.empty());
}

TEST_CASE("streams: fail_output fails the output and keeps the stream's first failure") {
  StreamRig rig;
  StreamQueue& s = *rig.streams.find(0);
  auto first = std::make_shared<protocol::RemoteFailure>(make_failure(1, "add", "first"));
  auto second = std::make_shared<protocol::RemoteFailure>(make_failure(2, "add", "second"));
  Task a, b;
  a.out = std::make_shared<Slot>();
  b.out = std::make_shared<Slot>();
  fail_output(s, a, first);
  fail_output(s, b, second);
  CHECK(a.out->ready.load());
  CHECK(a.out->get_failure() == first);
  CHECK(b.out->get_failure() == second);
  CHECK(s.pending_failure == first);
}

TEST_CASE("streams: the session's end drops queued tasks and keeps the running one") {
  StreamRig rig;
  StreamQueuePtr s = rig.streams.find(0);
  auto gate = std::make_shared<Slot>();
  std::vector<int> labels = iota(3);
  Task first = StreamRig::labelled(labels[0]);
  first.in[0] = gate;
  rig.streams.stage(s, std::move(first));
  rig.streams.stage(s, StreamRig::labelled(labels[1]));
  rig.streams.stage(s, StreamRig::labelled(labels[2]));
  rig.streams.flush(nullptr);
  REQUIRE(rig.executor.wait_idle(std::chrono::seconds(10)));
  std::vector<Task> graveyard;
  rig.streams.drop_queued(graveyard);  // parked, not running: every task goes
  CHECK(graveyard.size() == 3);
  rig.streams.clear();
  std::lock_guard lock(s->mu);
  CHECK(s->queue.empty());
  gate->drop_waiters();
}

}  // namespace
