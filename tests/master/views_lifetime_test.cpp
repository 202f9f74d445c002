// Views share storage on the worker (a write through a view shows in its base and the
// other way round), and remote tensors live exactly as long as their handles: the worker's
// live-tensor count and bytes rise with new tensors and fall back when the handles go.
#include <doctest/doctest.h>

#include <vector>

#include "master/cluster.hpp"

namespace {

using namespace dtr;
using namespace dtr::test;
using dtr::local::Tensor;

}  // namespace

TEST_CASE("views share storage on the worker") {
  Cluster cluster(1);
  // A remote tensor and its local mirror take the same steps; they must stay equal.
  DistributedTensor x = dtr::zeros({4, 5});
  Tensor lx = local::zeros({4, 5});
  check_same(x, lx);

  SUBCASE("narrow, transpose, select, view") {
    DistributedTensor v = x.narrow(0, 1, 2);
    v.fill_(7);
    lx.narrow(0, 1, 2).fill_(7);
    check_same(x, lx);
    Tensor got = x.to_local();
    CHECK(got.select(0, 0).sum().item<float>() == 0.0f);
    CHECK(got.select(0, 1).sum().item<float>() == 35.0f);

    DistributedTensor t = x.t();
    t.add_(1);
    lx.t().add_(1);
    check_same(x, lx);
    CHECK(x.to_local().sum().item<float>() == 70.0f + 20.0f);

    x[1].mul_(3);  // through a temporary view
    lx[1].mul_(3);
    check_same(x, lx);
    CHECK(x.to_local().select(0, 1).select(0, 0).item<float>() == 24.0f);

    DistributedTensor flat = x.view({20});
    flat.narrow(0, 3, 4).sub_(5);
    lx.view({20}).narrow(0, 3, 4).sub_(5);
    check_same(x, lx);
    check_same(flat, lx.view({20}));

    // contiguous() of a contiguous tensor is the tensor itself.
    DistributedTensor same = x.contiguous();
    same.add_(0.5);
    lx.contiguous().add_(0.5);
    check_same(x, lx);

    // copy_ into a column.
    x.select(1, 4).copy_(dist_send(local::arange(0, 4).to(DType::Float32)));
    lx.select(1, 4).copy_(local::arange(0, 4).to(DType::Float32));
    check_same(x, lx);

    // A write to the base shows through an older view.
    x.fill_(2);
    lx.fill_(2);
    check_same(v, local::full({2, 5}, 2));
    check_same(t, local::full({5, 4}, 2));
  }

  SUBCASE("a view chain matches local") {
    Generator g(3);
    Tensor lb = local::randn({4, 5, 6}, g);
    DistributedTensor b = dist_send(lb);
    DistributedTensor c = b.transpose(0, 2).slice(0, 1, 6, 2).select(1, 3);
    Tensor lc = lb.transpose(0, 2).slice(0, 1, 6, 2).select(1, 3);
    CHECK(c.meta() == lc.meta());
    CHECK(c.shape() == Shape{3, 4});
    CHECK_FALSE(c.is_contiguous());
    check_same(c, lc);
    c.mul_(-3);
    lc.mul_(-3);
    check_same(c, lc);
    check_same(b, lb);  // the base saw the write
    DistributedTensor d = c.unsqueeze(0).permute({2, 0, 1}).squeeze(1);
    Tensor ld = lc.unsqueeze(0).permute({2, 0, 1}).squeeze(1);
    CHECK(d.meta() == ld.meta());
    d.add_(d.t().t());  // overlapping operand, same layout
    ld.add_(ld.t().t());
    check_same(b, lb);
    check_same(d.reshape({-1}), ld.reshape({-1}));  // a copy: non-contiguous input
  }

  SUBCASE("a view keeps its storage after the base handle is gone") {
    DistributedTensor v;
    Tensor lv;
    {
      DistributedTensor base = dtr::arange(10).to(DType::Float32);
      v = base.narrow(0, 2, 3);
      lv = local::arange(10).to(DType::Float32).narrow(0, 2, 3);
    }
    synchronize();  // the base's free has run on the worker
    check_same(v, lv);
    v.add_(1);
    lv.add_(1);
    check_same(v, lv);
    CHECK(v.sum().item<float>() == 2.0f + 3 + 4 + 3);
  }

  SUBCASE("an expanded view cannot be written in place") {
    DistributedTensor e = x[0].unsqueeze(0).expand({3, 5});
    std::string m = message_of<InvalidArgument>([&] { e.add_(1); });
    CHECK_MESSAGE(contains(m, "expanded"), m);
    check_same(e, local::zeros({3, 5}));  // reading it is fine
  }
  CHECK_NOTHROW(synchronize());
}

TEST_CASE("remote tensors are freed when their handles go") {
  Cluster cluster(2);
  NodeMemoryStats s0 = memory_stats(0);
  NodeMemoryStats s0_node1 = memory_stats(1);
  CHECK(s0.live_tensors == 0);
  CHECK(s0.peak_bytes >= s0.bytes_in_use);

  SUBCASE("creation and copies of handles") {
    {
      std::vector<DistributedTensor> ts;
      for (int i = 0; i < 10; ++i) ts.push_back(dtr::zeros({1000}));
      NodeMemoryStats s1 = memory_stats(0);
      CHECK(s1.live_tensors == s0.live_tensors + 10);
      CHECK(s1.bytes_in_use >= s0.bytes_in_use + 10 * 4000);
      CHECK(s1.peak_bytes >= s1.bytes_in_use);
      // Node 1 saw none of it.
      CHECK(memory_stats(1).live_tensors == s0_node1.live_tensors);

      DistributedTensor keep = ts[3];  // a second handle to one tensor
      ts.clear();
      NodeMemoryStats s2 = memory_stats(0);
      CHECK(s2.live_tensors == s0.live_tensors + 1);
      CHECK(s2.bytes_in_use >= s0.bytes_in_use + 4000);
      CHECK(s2.bytes_in_use < s1.bytes_in_use);
      check_same(keep, local::zeros({1000}));
    }
    NodeMemoryStats s3 = memory_stats(0);
    CHECK(s3.live_tensors == s0.live_tensors);
    CHECK(s3.bytes_in_use == s0.bytes_in_use);
  }

  SUBCASE("temporaries of an expression") {
    DistributedTensor x = dtr::ones({100});
    DistributedTensor y = ((x + 1) * 2 - 3).sum();  // three temporaries
    NodeMemoryStats s1 = memory_stats(0);
    CHECK(s1.live_tensors == s0.live_tensors + 2);  // x and y
    CHECK(y.item<float>() == 100.0f);
  }

  SUBCASE("sent tensors and views") {
    NodeMemoryStats s1;
    {
      DistributedTensor v;
      {
        DistributedTensor big = dist_send(local::zeros({1 << 18}));  // 1 MiB
        v = big.narrow(0, 10, 5);
        s1 = memory_stats(0);
        CHECK(s1.live_tensors == s0.live_tensors + 2);
        CHECK(s1.bytes_in_use >= s0.bytes_in_use + (1 << 20));
      }
      // The base handle is gone; its storage lives on in the view.
      NodeMemoryStats s2 = memory_stats(0);
      CHECK(s2.live_tensors == s0.live_tensors + 1);
      CHECK(s2.bytes_in_use >= s0.bytes_in_use + (1 << 20));
      check_same(v, local::zeros({5}));
    }
    synchronize();  // a sync point after the free was queued
    NodeMemoryStats s3 = memory_stats(0);
    CHECK(s3.live_tensors == s0.live_tensors);
    CHECK(s3.bytes_in_use < s0.bytes_in_use + (1 << 20));
    CHECK(s3.peak_bytes >= s0.bytes_in_use + (1 << 20));
  }

  SUBCASE("many tensors on both nodes") {
    {
      std::vector<DistributedTensor> ts;
      for (int i = 0; i < 500; ++i) {
        node_guard on(i % 2);
        ts.push_back(dtr::full({16}, i));
      }
      CHECK(memory_stats(0).live_tensors == s0.live_tensors + 250);
      CHECK(memory_stats(1).live_tensors == s0_node1.live_tensors + 250);
      check_same(ts[499], local::full({16}, 499));
    }
    CHECK(memory_stats(0).live_tensors == s0.live_tensors);
    CHECK(memory_stats(1).live_tensors == s0_node1.live_tensors);
    CHECK(memory_stats(0).bytes_in_use == s0.bytes_in_use);
  }

  SUBCASE("handles that outlive the session are inert") {
    DistributedTensor x = dtr::ones({4});
    synchronize();
    shutdown_master_worker();
    CHECK_FALSE(is_master_worker_initialized());
    std::string m = message_of<TransportError>([&] { (void)x.to_local(); });
    CHECK_MESSAGE(contains(m, "shut down"), m);
    CHECK(x.shape() == Shape{4});  // metadata stays readable
    m = message_of<InvalidArgument>([] { (void)node_count(); });
    CHECK_MESSAGE(contains(m, "init_master_worker"), m);
    m = message_of<InvalidArgument>([] { (void)dtr::zeros({1}); });
    CHECK_MESSAGE(contains(m, "init_master_worker"), m);
    // x is destroyed after the session: nothing is sent, nothing breaks.
  }
}
