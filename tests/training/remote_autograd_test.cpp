// Autograd on DistributedTensor against real workers: backward queues its ops to the
// tensors' nodes and gives the gradients local autograd gives, bit for bit; x.to(node) and
// the differentiable collectives carry gradients between nodes; what autograd cannot
// record throws at the call.
#include <doctest/doctest.h>

#include "dtr/autograd.hpp"
#include "master/cluster.hpp"

namespace dtr::test {
namespace {

using local::Tensor;

std::vector<float> values(const DistributedTensor& t) {
  return t.to_local().to_vector<float>();
}

TEST_CASE("remote autograd: an MLP's gradients equal local autograd's, bit for bit") {
  Cluster cluster(2, cpu_only());
  Generator gen(3);
  Tensor x = local::randn({8, 5}, gen), w1 = local::randn({5, 7}, gen), b1 = local::randn({7}, gen);
  Tensor w2 = local::randn({7, 1}, gen);
  auto forward = [](auto& xs, auto& a, auto& b, auto& c) {
    auto h = (xs.matmul(a) + b).tanh();
    return (h.matmul(c).sigmoid() - 0.5f).pow(2).mean();
  };
  std::vector<Tensor> lp{w1.clone().requires_grad_(), b1.clone().requires_grad_(),
                         w2.clone().requires_grad_()};
  Tensor lloss = forward(x, lp[0], lp[1], lp[2]);
  lloss.backward();
  set_node(1);
  DistributedTensor rx = dist_send(x);
  std::vector<DistributedTensor> rp{dist_send(w1).requires_grad_(), dist_send(b1).requires_grad_(),
                                    dist_send(w2).requires_grad_()};
  set_node(0);
  DistributedTensor rloss = forward(rx, rp[0], rp[1], rp[2]);
  CHECK(rloss.get_node() == 1);
  rloss.backward();
  check_same(rloss, lloss.detach());
  for (size_t i = 0; i < rp.size(); ++i) {
    CHECK(rp[i].grad().get_node() == 1);
    check_same(rp[i].grad(), lp[i].grad());
  }
}

TEST_CASE("remote autograd: x.to(node) sends the gradient back to x's node") {
  Cluster cluster(2, cpu_only());
  DistributedTensor x = dist_send(local::from_vector<float>({1, 2, 3}), 0).requires_grad_();
  DistributedTensor y = x.to(1);
  CHECK(y.grad_fn_name() == "ToBackward");
  (y * y).sum().backward();
  CHECK(x.grad().get_node() == 0);
  CHECK(values(x.grad()) == std::vector<float>{2, 4, 6});
}

TEST_CASE("remote autograd: differentiable all_reduce, broadcast, all_gather, reduce_scatter") {
  Cluster cluster(2, cpu_only());
  auto leaf = [](std::vector<float> v, int node) {
    return dist_send(local::from_vector<float>(v), node).requires_grad_();
  };
  DistributedTensor w0 = dist_send(local::from_vector<float>({1, 2}), 0);
  DistributedTensor w1 = dist_send(local::from_vector<float>({10, 20}), 1);
  auto loss_of = [&](const std::vector<DistributedTensor>& ys) {
    return std::vector<DistributedTensor>{(ys[0] * w0).sum(), (ys[1] * w1).sum()};
  };
  SUBCASE("all_reduce sum and avg") {
    for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Avg}) {
      std::vector<DistributedTensor> xs{leaf({1, 1}, 0), leaf({2, 2}, 1)};
      std::vector<DistributedTensor> ys = autograd::all_reduce(xs, op);
      autograd::backward(loss_of(ys));
      const float k = op == ReduceOp::Avg ? 0.5f : 1.0f;
      CHECK(values(xs[0].grad()) == std::vector<float>{11 * k, 22 * k});
      CHECK(values(xs[1].grad()) == std::vector<float>{11 * k, 22 * k});
      CHECK(xs[1].grad().get_node() == 1);
    }
  }
  SUBCASE("broadcast from node 1") {
    std::vector<DistributedTensor> xs{leaf({1, 1}, 0), leaf({2, 2}, 1)};
    std::vector<DistributedTensor> ys = autograd::broadcast(xs, 1);
    CHECK(values(ys[0]) == std::vector<float>{2, 2});
    autograd::backward(loss_of(ys));
    CHECK_FALSE(xs[0].grad().defined());
    CHECK(values(xs[1].grad()) == std::vector<float>{11, 22});
  }
  SUBCASE("all_gather and reduce_scatter") {
    std::vector<DistributedTensor> xs{leaf({1, 2}, 0), leaf({3, 4}, 1)};
    std::vector<DistributedTensor> g = autograd::all_gather(xs);  // [2, 2] on each node
    DistributedTensor m0 = dist_send(local::from_vector<float>({1, 2, 3, 4}, {2, 2}), 0);
    DistributedTensor m1 = dist_send(local::from_vector<float>({5, 6, 7, 8}, {2, 2}), 1);
    autograd::backward<DistributedTensor>({(g[0] * m0).sum(), (g[1] * m1).sum()});
    CHECK(values(xs[0].grad()) == std::vector<float>{6, 8});    // row 0 of m0 + m1
    CHECK(values(xs[1].grad()) == std::vector<float>{10, 12});  // row 1
    std::vector<DistributedTensor> zs{leaf({1, 2, 3, 4}, 0), leaf({5, 6, 7, 8}, 1)};
    std::vector<DistributedTensor> r = autograd::reduce_scatter(zs);  // [2] each
    CHECK(values(r[1]) == std::vector<float>{10, 12});
    autograd::backward(loss_of(r));
    CHECK(values(zs[0].grad()) == std::vector<float>{1, 2, 10, 20});
    CHECK(values(zs[1].grad()) == std::vector<float>{1, 2, 10, 20});
  }
}

TEST_CASE("remote autograd: what cannot be recorded throws at the call") {
  Cluster cluster(2, cpu_only());
  DistributedTensor a = dist_send(local::ones({2}), 0).requires_grad_();
  DistributedTensor b = dist_send(local::ones({2}), 1).requires_grad_();
  std::vector<DistributedTensor> both{a, b};
  CHECK(contains(message_of<InvalidArgument>([&] { all_reduce(both); }),
                 "use dtr::autograd::all_reduce"));
  CHECK(contains(message_of<InvalidArgument>([&] { dist_send(local::ones({2}).requires_grad_()); }),
                 "not differentiable"));
  CHECK(contains(message_of<InvalidArgument>([&] { a.add_(1); }), "add_"));
  {
    no_grad off;
    all_reduce(both);  // allowed outside grad mode
  }
  CHECK(values(a) == std::vector<float>{2, 2});
  CHECK_FALSE(a.to_local().requires_grad());
}

}  // namespace
}  // namespace dtr::test
