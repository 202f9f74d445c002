// Captured graphs against real workers (include/dtr/graph.hpp): capture and replay of every
// kind of command (ops, views, copies between nodes, collectives, events and cross-node
// waits, streams), results bit-identical to the same commands run eagerly, and every
// failure path with its message.
#include <doctest/doctest.h>

#include <csignal>
#include <thread>

#include "dtr/collectives.hpp"
#include "dtr/graph.hpp"
#include "dtr/stream.hpp"
#include "master/cluster.hpp"

using namespace dtr;
using namespace dtr::test;
using dtr::local::Tensor;

namespace {

Tensor random_local(const Shape& shape, uint64_t seed) {
  Generator g(seed);
  return local::randn(shape, g);
}

bool bit_identical(const DistributedTensor& a, const DistributedTensor& b) {
  std::string why;
  bool same = same_values(a.to_local(), b.to_local(), &why);
  if (!same) MESSAGE(why);
  return same;
}

}  // namespace

TEST_CASE("ops and views replay bit for bit as eagerly, inputs updated in place between replays") {
  Cluster cluster(1, cpu_only());
  DistributedTensor x = dist_send(random_local({8, 4}, 1));
  DistributedTensor w = dist_send(random_local({4, 3}, 2));
  DistributedTensor acc = dtr::zeros({});
  DistributedTensor x2 = dist_send(x.to_local()), w2 = dist_send(w.to_local());
  DistributedTensor acc2 = dtr::zeros({});
  auto step = [](DistributedTensor& x, DistributedTensor& w, DistributedTensor& acc) {
    DistributedTensor h = x.matmul(w).relu();
    DistributedTensor v = h.t();               // a view of a temporary
    DistributedTensor y = (v * 2 - 1).sum(1);  // kept after the capture: an output
    acc.add_(y.sum());                         // in place into an input
    x.mul_(0.5);
    return y;
  };
  DistributedTensor y;
  CHECK_FALSE(is_capturing());
  Graph g = capture([&] {
    CHECK(is_capturing());
    y = step(x, w, acc);
  });
  CHECK_FALSE(is_capturing());
  CHECK(g.nodes() == std::vector<int>{0});
  CHECK(g.commands(0) == 9);
  // Nothing ran: the output exists once a replay made it.
  CHECK(contains(message_of<RemoteError>([&] { (void)y.to_local(); }), "has not been replayed"));
  for (int k = 1; k <= 5; ++k) {
    CAPTURE(k);
    Tensor batch = random_local({8, 4}, 10 + static_cast<uint64_t>(k));
    x.copy_(dist_send(batch));
    x2.copy_(dist_send(batch));
    g.replay();
    DistributedTensor y2 = step(x2, w2, acc2);
    CHECK(bit_identical(y, y2));
    CHECK(bit_identical(acc, acc2));
    CHECK(bit_identical(x, x2));
  }
  CHECK(g.replays() == 5);
  CHECK_NOTHROW(synchronize());
}

TEST_CASE("copies between nodes, collectives, events and cross-node waits replay as eagerly") {
  Cluster cluster(2, cpu_only());
  auto make = [](int node, uint64_t seed) {
    return with_node(node, [&] { return dist_send(random_local({6}, seed)); });
  };
  DistributedTensor a = make(0, 1), b = make(1, 2);
  DistributedTensor a2 = make(0, 1), b2 = make(1, 2);
  Stream s1 = Stream::create(1);
  auto step = [&](DistributedTensor& a, DistributedTensor& b) {
    DistributedTensor c = a.to(1);  // node 0 -> node 1, worker to worker
    Event done;
    DistributedTensor d;
    {
      stream_guard on(s1);
      d = c * b + 1;  // on node 1's stream s1
      done.record();
    }
    current_stream(0).wait(done);  // node 0 waits for node 1's record
    a.add_(1);
    std::vector<DistributedTensor> pair{a, d};
    all_reduce(pair, ReduceOp::Sum);
    std::vector<DistributedTensor> rows = all_gather(pair);
    b.copy_(rows[1].sum(0));
    return rows;
  };
  std::vector<DistributedTensor> rows;
  Graph g = capture([&] { rows = step(a, b); });
  CHECK(g.nodes() == std::vector<int>({0, 1}));
  for (int k = 1; k <= 3; ++k) {
    CAPTURE(k);
    g.replay();
    std::vector<DistributedTensor> rows2 = step(a2, b2);
    CHECK(bit_identical(rows[0], rows2[0]));
    CHECK(bit_identical(rows[1], rows2[1]));
    CHECK(bit_identical(a, a2));
    CHECK(bit_identical(b, b2));
  }
  CHECK_NOTHROW(synchronize());
}

TEST_CASE("a stream made in the capture, dropped handles: the graph keeps what it uses") {
  Cluster cluster(1, cpu_only());
  DistributedTensor x = dtr::ones({5});
  DistributedTensor eager = dtr::ones({5});
  Graph g = capture([&] {
    Stream s = Stream::create();
    stream_guard on(s);
    DistributedTensor t = x * 3;  // a temporary dropped inside the capture
    x.add_(t);
    x = x + 0;  // the handle of the input is replaced: the graph still holds it
    // A temporary whose last handle goes on another thread, during the capture.
    DistributedTensor elsewhere = x * 0;
    std::thread([t = std::move(elsewhere)]() mutable { t = DistributedTensor(); }).join();
  });
  DistributedTensor out = x;  // the last temporary, an output
  for (int k = 0; k < 3; ++k) {
    g.replay();
    eager.add_(eager * 3);
  }
  CHECK(bit_identical(out, eager));
  // Nothing failed along the way (no spurious free of the graph's temporaries).
  CHECK_NOTHROW(synchronize());
  NodeMemoryStats m = memory_stats(0);
  CHECK(m.graph_tensors == 3);
  CHECK(m.graph_bytes >= 2 * 5 * 4);
  g.reset();
  CHECK(memory_stats(0).graph_bytes == 0);
}

TEST_CASE("sync points inside a capture are refused, naming the call, the session goes on") {
  Cluster cluster(1, cpu_only());
  DistributedTensor x = dtr::ones({3});
  Event e;
  e.record();
  auto refused = [&](const std::function<void()>& call) {
    return message_of<InvalidArgument>([&] { (void)capture(call); });
  };
  CHECK(contains(refused([&] { (void)(x + 1).to_local(); }), "to_local / item: a sync point"));
  CHECK(contains(refused([&] { (void)x.sum().item(); }), "to_local / item: a sync point"));
  CHECK(contains(refused([] { synchronize(); }), "synchronize: a sync point cannot be captured"));
  CHECK(contains(refused([] { (void)dist_send(local::ones({2})); }), "dist_send: a sync point"));
  CHECK(contains(refused([] { (void)memory_stats(0); }), "memory_stats"));
  CHECK(contains(refused([&] { (void)e.query(); }), "Event::query"));
  CHECK(contains(refused([] { current_stream().synchronize(); }), "Stream::synchronize"));
  CHECK(contains(refused([] { (void)capture([] {}); }), "captures do not nest"));
  Graph g = capture([&] { x.add_(1); });
  CHECK(contains(refused([&] { g.replay(); }), "replayed inside dtr::capture"));
  // A tensor made inside a capture that threw fails when read, saying why.
  DistributedTensor made;
  CHECK_THROWS_AS((void)capture([&] {
                    made = x * 2;
                    synchronize();
                  }),
                  InvalidArgument);
  CHECK(contains(message_of<RemoteError>([&] { (void)made.to_local(); }), "graph"));
  CHECK_FALSE(is_capturing());
  check_same(x, local::ones({3}));  // nothing captured ran
  g.replay();
  check_same(x, local::full({3}, 2.0));
  CHECK_NOTHROW(synchronize());
}

TEST_CASE("a failing op in a replay names op and replay, dependents fail, later replays run") {
  Cluster cluster(1, cpu_only());
  DistributedTensor base = dtr::full({3}, 2, DType::Int64);
  DistributedTensor exponent = dtr::full({3}, 3, DType::Int64);
  DistributedTensor p, q;
  Graph g = capture([&] {
    p = base.pow(exponent);
    q = p + 1;
  });
  g.replay();
  check_same(q, local::full({3}, 9, DType::Int64));
  exponent.fill_(-1);
  g.replay();
  std::string failed = message_of<RemoteError>([] { synchronize(); });
  CHECK(contains(failed, "pow failed on node 0"));
  CHECK(contains(failed, "negative integer powers"));
  CHECK(contains(failed, "replay 2 of graph " + std::to_string(g.id())));
  std::string dependent = message_of<RemoteError>([&] { (void)q.to_local(); });
  CHECK(contains(dependent, "pow"));
  CHECK(contains(dependent, "replay 2"));
  exponent.fill_(2);
  g.replay();
  check_same(q, local::full({3}, 5, DType::Int64));
  CHECK_NOTHROW(synchronize());
}

TEST_CASE("replay of a freed graph, or after a node was lost, fails clearly") {
  MasterOptions o = test_options();
  o.heartbeat = 100ms;
  o.heartbeat_timeout = 600ms;
  Cluster cluster(2, cpu_only(), o);
  DistributedTensor x = dtr::ones({2});
  DistributedTensor y = with_node(1, [] { return dtr::ones({2}); });
  Graph g = capture([&] { x.add_(1); });
  Graph h = capture([&] { y.add_(1); });
  Graph empty = capture([] {});
  empty.replay();  // nothing to do
  CHECK(empty.nodes().empty());
  g.replay();
  g.reset();
  CHECK(contains(message_of<InvalidArgument>([&] { g.replay(); }),
                 "graph " + std::to_string(g.id()) + " was freed"));
  CHECK(contains(message_of<InvalidArgument>([] { Graph().replay(); }), "undefined graph"));
  CHECK(cluster.worker(1).stop(SIGKILL, 5s) != -1);
  std::string lost;
  for (int i = 0; i < 100 && lost.empty(); ++i) {
    try {
      h.replay();
      std::this_thread::sleep_for(50ms);
    } catch (const WorkerLost& e) {
      lost = e.what();
    }
  }
  CHECK(contains(lost, "Graph::replay: graph " + std::to_string(h.id()) + " has a part on node 1"));
  check_same(x, local::full({2}, 2.0));
  // Graphs outlive their session inertly; replaying one says why it cannot.
  Graph kept = capture([&] { x.add_(1); });
  shutdown_master_worker();
  CHECK(contains(message_of<InvalidArgument>([&] { kept.replay(); }), "was shut down"));
}
