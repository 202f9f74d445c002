// Streams and events against real workers: ordering by events within a node and across
// nodes (worker-to-worker notification), query/synchronize, failures on one stream,
// lifetime of tensors used by another stream, stream scoping.
#include <doctest/doctest.h>

#include <chrono>
#include <random>
#include <thread>
#include <vector>

#include "dtr/stream.hpp"
#include "master/cluster.hpp"

namespace {

using namespace dtr;
using namespace dtr::test;
using dtr::local::Tensor;
using Clock = std::chrono::steady_clock;

// Queues `reps` matmuls of an n x n tensor on the current stream of its node: slow work
// that keeps a stream busy. Returns the last product (so the work is not dead).
DistributedTensor busy_work(const DistributedTensor& m, int reps) {
  DistributedTensor out = m;
  for (int i = 0; i < reps; ++i) out = m.matmul(m);
  return out;
}

}  // namespace

TEST_CASE("stream scoping: current, default, guards and per-node current streams") {
  Cluster cluster(2);
  CHECK(current_stream().is_default());
  CHECK(current_stream().node() == 0);
  CHECK(current_stream(1).node() == 1);
  Stream s = Stream::create(1);
  CHECK(s.node() == 1);
  CHECK_FALSE(s.is_default());
  CHECK(s.id() > 0);
  Stream t = Stream::create();
  CHECK(t.node() == 0);
  CHECK(t.id() != s.id());
  {
    stream_guard on(s);
    CHECK(current_node() == 1);
    CHECK(current_stream() == s);
    CHECK(current_stream(1) == s);
    CHECK(current_stream(0).is_default());
    {
      stream_guard inner(t);
      CHECK(current_node() == 0);
      CHECK(current_stream() == t);
      CHECK(current_stream(1) == s);  // each node keeps its own current stream
    }
    CHECK(current_stream() == s);
  }
  CHECK(current_node() == 0);
  CHECK(current_stream(1).is_default());
  CHECK(default_stream(1).node() == 1);
  CHECK(default_stream(1).is_default());
  CHECK(message_of<InvalidArgument>([] { Stream().id(); }).find("undefined stream") !=
        std::string::npos);
  CHECK(message_of<IndexError>([] { Stream::create(5); }).find("node 5 does not exist") !=
        std::string::npos);
  // Another thread starts on the default streams.
  std::thread([&] {
    stream_guard on(s);
    CHECK(current_stream() == s);
  }).join();
  CHECK(current_stream(1).is_default());

  // Work on user streams gives the same values as on the default stream.
  DistributedTensor a = dtr::arange(12).reshape({3, 4}).to(DType::Float32);
  DistributedTensor expected = (a * 3 + 1).sum(1);
  DistributedTensor got;
  {
    stream_guard on(t);
    got = (a * 3 + 1).sum(1);
  }
  t.synchronize();
  check_same(got, expected.to_local());
  synchronize();
}

TEST_CASE("an event orders a dependent op on another stream (repeated, random sizes)") {
  Cluster cluster(1);
  std::mt19937 rng(20261121);
  Stream producer = Stream::create();
  Stream consumer = Stream::create();
  for (int rep = 0; rep < 25; ++rep) {
    int64_t n = std::uniform_int_distribution<int64_t>(8, 160)(rng);
    CAPTURE(n);
    DistributedTensor a = dtr::zeros({n});
    DistributedTensor b = dtr::rand({n, n});
    synchronize();
    Event ready;
    {
      stream_guard on(producer);
      // Slow, then a write in place to `a`, which exists already: nothing but the event
      // orders the consumer after it.
      DistributedTensor m = busy_work(b, 3);
      a.add_(m.sum(1));
      ready.record();
    }
    DistributedTensor c;
    {
      stream_guard on(consumer);
      consumer.wait(ready);
      c = a * 2;
    }
    Tensor bl = b.to_local();
    Tensor expected = bl.matmul(bl).sum(1) * 2;
    check_same(c, expected);
  }
  synchronize();
}

TEST_CASE("cross-node waits with three workers, chained, waits issued before the records run") {
  Cluster cluster(3);
  std::vector<Stream> streams;
  for (int k = 0; k < 3; ++k) streams.push_back(Stream::create(k));
  std::vector<DistributedTensor> m;
  for (int k = 0; k < 3; ++k) {
    node_guard on(k);
    m.push_back(dtr::rand({256, 256}));
  }
  synchronize();
  for (int rep = 0; rep < 3; ++rep) {
    CAPTURE(rep);
    // node 0: slow work, then e0. node 1 waits for e0, works, records e1. node 2 waits for
    // e1 and records e2. Every wait is queued while node 0 is still busy, so the
    // notifications arrive after the waits.
    Event e0, e1, e2;
    {
      stream_guard on(streams[0]);
      busy_work(m[0], 12);
      e0.record();
    }
    {
      stream_guard on(streams[1]);
      streams[1].wait(e0);
      busy_work(m[1], 2);
      e1.record();
    }
    {
      stream_guard on(streams[2]);
      streams[2].wait(e1);
      e2.record();
    }
    e2.synchronize();
    // e2 ran after e1, which ran after e0: both must be done by now.
    CHECK(e1.query());
    CHECK(e0.query());
  }
  // Default streams wait on user streams of other nodes too, and an event recorded on a
  // default stream can be waited on from anywhere.
  Event d0;
  {
    node_guard on(0);
    busy_work(m[0], 4);
    d0.record();
  }
  Event d2;
  {
    node_guard on(2);
    current_stream().wait(d0);
    d2.record();
  }
  d2.synchronize();
  CHECK(d0.query());
  synchronize();
}

TEST_CASE("query goes from false to true; synchronize waits") {
  Cluster cluster(1);
  DistributedTensor m = dtr::rand({384, 384});
  synchronize();
  Stream s = Stream::create();
  bool saw_false = false;
  // Slow work first: the query right after must find it unfinished. Should a loaded
  // machine have finished it already, try again with more work.
  for (int reps = 8; reps <= 64 && !saw_false; reps *= 2) {
    Event e;
    {
      stream_guard on(s);
      busy_work(m, reps);
      e.record();
    }
    saw_false = !e.query();
    auto deadline = Clock::now() + std::chrono::seconds(60);
    while (!e.query() && Clock::now() < deadline) std::this_thread::sleep_for(1ms);
    CHECK(e.query());
    e.synchronize();
  }
  CHECK(saw_false);
  // Never recorded: done, and nothing to wait for.
  Event never;
  CHECK(never.query());
  CHECK_FALSE(never.recorded());
  CHECK(never.node() == -1);
  never.synchronize();
  current_stream().wait(never);
  CHECK(s.query() == true);
  s.synchronize();
}

TEST_CASE("an op failing on one stream: the event after it throws, other streams go on") {
  Cluster cluster(1);
  Stream bad = Stream::create();
  Stream good = Stream::create();
  DistributedTensor a = dtr::ones({4});
  DistributedTensor i = dtr::ones({3}, DType::Int32);
  synchronize();
  Event after_failure;
  DistributedTensor failed;
  {
    stream_guard on(bad);
    failed = i.pow(-1);  // integers to a negative power fail on the worker
    after_failure.record();
  }
  DistributedTensor fine;
  {
    stream_guard on(good);
    fine = a + 1;
  }
  check_same(fine, local::full({4}, 2.0f));
  std::string message = message_of<RemoteError>([&] { after_failure.synchronize(); });
  CHECK(contains(message, "pow failed on node 0"));
  CHECK(contains(message, "negative"));
  // Reported once: synchronize() does not report it again, but the tensor stays failed.
  synchronize();
  CHECK(contains(message_of<RemoteError>([&] { failed.to_local(); }), "pow"));
  // The stream is usable again; the next event has nothing to report.
  Event clean;
  {
    stream_guard on(bad);
    DistributedTensor ok = a * 5;
    clean.record();
    check_same(ok, local::full({4}, 5.0f));
  }
  clean.synchronize();
  // A dependent op on another stream fails too, pointing at the first cause.
  Event dep;
  {
    stream_guard on(good);
    DistributedTensor d = failed + 1;
    dep.record();
  }
  std::string dep_message = message_of<RemoteError>([&] { dep.synchronize(); });
  CHECK(contains(dep_message, "first cause: pow"));
  synchronize();
}

TEST_CASE("a tensor dropped by the master lives until another stream's use has run") {
  Cluster cluster(1);
  Stream s = Stream::create();
  NodeMemoryStats before = memory_stats(0);
  DistributedTensor result;
  Tensor expected;
  {
    DistributedTensor x = dtr::rand({300, 300});
    DistributedTensor y = dtr::rand({300, 300});
    expected = x.to_local().matmul(y.to_local()).sum();
    Event made;
    made.record();
    stream_guard on(s);
    s.wait(made);
    busy_work(y, 6);  // keeps s busy while the master lets go of x
    result = x.matmul(y).sum();
  }  // x and y freed on the master here, while s still has to use them
  check_same(result, expected);
  synchronize();
  result = DistributedTensor();
  NodeMemoryStats after = memory_stats(0);
  CHECK(after.live_tensors == before.live_tensors);
  CHECK(after.bytes_in_use == before.bytes_in_use);
}

TEST_CASE("events: timing, one node per event, errors name what was wrong") {
  Cluster cluster(2);
  DistributedTensor m = dtr::rand({128, 128});
  Event start(true), end(true);
  start.record();
  busy_work(m, 4);
  end.record();
  double ms = start.elapsed_time(end);
  CHECK(ms >= 0.0);
  CHECK(ms < 600000.0);
  Event plain;
  plain.record();
  CHECK(contains(message_of<InvalidArgument>([&] { start.elapsed_time(plain); }), "enable_timing"));
  Event unrecorded(true);
  CHECK(contains(message_of<InvalidArgument>([&] { start.elapsed_time(unrecorded); }),
                 "end event was never recorded"));
  Event other(true);
  other.record(Stream::create(1));
  CHECK(contains(message_of<InvalidArgument>([&] { start.elapsed_time(other); }), "nodes 0 and 1"));
  CHECK(contains(message_of<InvalidArgument>([&] { plain.record(default_stream(1)); }),
                 "belongs to node 0"));
  CHECK(plain.node() == 0);
  // Recording again moves the event: synchronize waits for the latest record.
  plain.record();
  plain.synchronize();
  synchronize();
}

TEST_CASE("many short-lived streams and events") {
  Cluster cluster(1);
  DistributedTensor acc = dtr::zeros({1});
  Event previous;                   // orders the in-place adds of successive streams
  for (int i = 0; i < 1500; ++i) {  // more than a worker's limit of live streams
    Stream s = Stream::create();
    Event e;
    {
      stream_guard on(s);
      s.wait(e);  // never recorded: nothing to wait for
      s.wait(previous);
      acc.add_(1);
      e.record();
    }
    previous = e;
  }
  current_stream().wait(previous);
  synchronize();
  CHECK(acc.item<float>() == 1500.0f);
}
