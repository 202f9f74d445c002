// Copies between nodes (x.to(node)): sent worker to worker, ordered by streams, failures
// carried across, every dtype and layout.
#include <doctest/doctest.h>

#include <vector>

#include "dtr/stream.hpp"
#include "master/cluster.hpp"

namespace {

using namespace dtr;
using namespace dtr::test;
using dtr::local::Tensor;

}  // namespace

TEST_CASE("x.to(node): every dtype, views, empty and 0-d tensors, chains over three nodes") {
  Cluster cluster(3);
  Generator gen(7);
  for (DType dt : {DType::Float32, DType::Float64, DType::Int32, DType::Int64, DType::Bool,
                   DType::Float16, DType::BFloat16}) {
    CAPTURE(dtype_name(dt));
    DistributedTensor x = (dtr::rand({5, 7}, gen) * 100).to(dt);
    Tensor expected = x.to_local();
    DistributedTensor y = x.to(1);
    CHECK(y.get_node() == 1);
    CHECK(y.dtype() == dt);
    check_same(y, expected);
    // A non-contiguous view goes as its values.
    DistributedTensor t = x.transpose(0, 1).to(2);
    check_same(t, expected.transpose(0, 1).contiguous());
  }
  DistributedTensor empty = dtr::zeros({0, 3});
  check_same(empty.to(2), local::zeros({0, 3}));
  DistributedTensor scalar = dtr::full({}, 4.5);
  check_same(scalar.to(1), local::full({}, 4.5));

  // Same node: the tensor itself.
  DistributedTensor a = dtr::arange(6).to(DType::Float32);
  CHECK(a.to(0).id() == a.id());

  // 0 -> 1 -> 2 -> 0 with work on each node in between.
  DistributedTensor b = a.to(1) * 2;
  DistributedTensor c;
  {
    node_guard on(2);
    c = b.to(2) + 1;
  }
  DistributedTensor back = c.to(0) - a;
  check_same(back, local::arange(6).to(DType::Float32) + 1);
  CHECK(back.get_node() == 0);

  CHECK(contains(message_of<IndexError>([&] { a.to(3); }), "node 3 does not exist"));
  synchronize();
}

TEST_CASE("x.to(node): a large tensor, and memory returns to where it was") {
  Cluster cluster(2);
  NodeMemoryStats before0 = memory_stats(0), before1 = memory_stats(1);
  {
    Generator gen(11);
    DistributedTensor x = dtr::randn({1 << 22}, gen);  // 16 MiB
    DistributedTensor y = x.to(1);
    CHECK(y.sum().item<float>() == x.sum().item<float>());
    check_same(y.narrow(0, 1000, 50), x.narrow(0, 1000, 50).to_local());
  }
  synchronize();
  NodeMemoryStats after0 = memory_stats(0), after1 = memory_stats(1);
  CHECK(after0.live_tensors == before0.live_tensors);
  CHECK(after1.live_tensors == before1.live_tensors);
  CHECK(after0.bytes_in_use == before0.bytes_in_use);
  CHECK(after1.bytes_in_use == before1.bytes_in_use);
}

TEST_CASE("x.to(node) of a failed tensor fails on the receiving node, naming the cause") {
  Cluster cluster(2);
  DistributedTensor bad = dtr::ones({3}, DType::Int64).pow(-2);
  DistributedTensor moved = bad.to(1);
  DistributedTensor used = moved + 1;
  std::string message = message_of<RemoteError>([&] { used.to_local(); });
  CHECK(contains(message, "node 1"));
  CHECK(contains(message, "first cause: pow"));
  CHECK(contains(message_of<RemoteError>([&] { moved.to_local(); }), "sent by node 0 is failed"));
  CHECK(contains(message_of<RemoteError>([] { synchronize(); }), "pow"));
  // Both nodes keep working.
  check_same(dtr::ones({2}).to(1) * 3, local::full({2}, 3.0));
}

TEST_CASE(
    "x.to(node) follows the streams: the send waits for its stream, the receiver's "
    "stream waits for the bytes") {
  Cluster cluster(2);
  Stream s0 = Stream::create(0);
  Stream s1 = Stream::create(1);
  DistributedTensor m = dtr::rand({200, 200});
  DistributedTensor acc = dtr::zeros({200});
  synchronize();
  for (int rep = 0; rep < 5; ++rep) {
    DistributedTensor moved;
    {
      stream_guard on(s0);
      // Slow work, then a write in place that the copy must see.
      for (int i = 0; i < 4; ++i) m.matmul(m);
      acc.add_(1);
      moved = acc.to(1);
    }
    DistributedTensor doubled;
    {
      stream_guard on(s1);
      doubled = moved * 2;
    }
    check_same(doubled, local::full({200}, 2.0 * (rep + 1)));
  }
  synchronize();
}
