// The autograd engine and tensor API on local tensors: accumulation, graphs that fan out
// and in, retain_graph, no_grad, detach, set_grad, custom functions, and the errors (in
// place on tensors that require grad, a second backward, a non-scalar output without a
// gradient, an op without a derivative).
#include <doctest/doctest.h>

#include "autograd/op_node.hpp"
#include "dtr/autograd.hpp"
#include "support/message_of.hpp"

namespace dtr::test {
namespace {

using local::Tensor;

std::vector<float> values(const Tensor& t) {
  return t.to_vector<float>();
}
bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

TEST_CASE("autograd: leaves, grad_fn and accumulation") {
  Tensor w = local::from_vector<float>({1, 2, 3}).requires_grad_();
  Tensor x = local::from_vector<float>({4, 5, 6});
  CHECK(w.requires_grad());
  CHECK(w.is_leaf());
  CHECK_FALSE(x.requires_grad());
  Tensor y = (w * x).sum();
  CHECK(y.requires_grad());
  CHECK_FALSE(y.is_leaf());
  CHECK(y.grad_fn_name() == "SumBackward");
  y.backward();
  CHECK(values(w.grad()) == std::vector<float>{4, 5, 6});
  CHECK_FALSE(x.grad().defined());
  (w * w).sum().backward();  // accumulates: + 2w
  CHECK(values(w.grad()) == std::vector<float>{6, 9, 12});
  w.set_grad(Tensor());
  CHECK_FALSE(w.grad().defined());
}

TEST_CASE("autograd: a tensor used twice gets the sum, copies share the state") {
  Tensor a = local::from_vector<float>({2}).requires_grad_();
  Tensor b = a;  // a copy of the handle shares the leaf's state
  Tensor y = a * b + a.exp() * 0.0f + a;
  y.backward();
  CHECK(values(a.grad()) == std::vector<float>{5});  // 2a + 1
  CHECK(values(b.grad()) == std::vector<float>{5});
}

TEST_CASE("autograd: gradients never alias each other or the caller's tensor") {
  Tensor a = local::from_vector<float>({1, 2}).requires_grad_();
  Tensor b = local::from_vector<float>({3, 4}).requires_grad_();
  Tensor g = local::from_vector<float>({1, 1});
  (a + b).backward(g);
  a.grad().mul_(10);
  CHECK(values(b.grad()) == std::vector<float>{1, 1});
  CHECK(values(g) == std::vector<float>{1, 1});
}

TEST_CASE("autograd: no_grad, detach and requires_grad_ rules") {
  Tensor w = local::ones({2}).requires_grad_();
  {
    no_grad off;
    CHECK_FALSE(autograd::is_grad_enabled());
    CHECK_FALSE((w * 2).requires_grad());
    w.sub_(local::ones({2}));  // an update under no_grad is allowed
    {
      enable_grad on;
      CHECK((w * 2).requires_grad());
    }
  }
  CHECK(autograd::is_grad_enabled());
  CHECK_FALSE(w.detach().requires_grad());
  CHECK(w.detach().storage() == w.storage());
  Tensor y = w * 2;
  CHECK(contains(message_of<InvalidArgument>([&] { y.requires_grad_(false); }), "not a leaf"));
  CHECK(
      contains(message_of<InvalidArgument>([] { local::ones({2}, DType::Int64).requires_grad_(); }),
               "only floating tensors"));
}

TEST_CASE("autograd: in-place ops on tensors that require grad throw, naming the op") {
  Tensor w = local::ones({2}).requires_grad_();
  std::string m = message_of<InvalidArgument>([&] { w.add_(1); });
  CHECK(contains(m, "add_"));
  CHECK(contains(m, "requires grad"));
  Tensor x = local::ones({2});
  CHECK(contains(message_of<InvalidArgument>([&] { x.mul_(w); }), "its operand"));
  CHECK(contains(message_of<InvalidArgument>([&] { w.fill_(0); }), "fill_"));
}

TEST_CASE("autograd: backward errors say what to do") {
  Tensor w = local::ones({2, 3}).requires_grad_();
  Tensor y = w * 2;
  std::string m = message_of<InvalidArgument>([&] { y.backward(); });
  CHECK(contains(m, "one-element output"));
  CHECK(contains(m, "[2, 3]"));
  CHECK(contains(message_of<ShapeError>([&] { y.backward(local::ones({3})); }), "[3]"));
  CHECK(contains(message_of<InvalidArgument>([] { local::ones({1}).backward(); }),
                 "does not require grad"));
  Tensor s = (w * w).sum();
  s.backward();
  CHECK(contains(message_of<InvalidArgument>([&] { s.backward(); }), "retain_graph"));
  Tensor r = (w * w).sum();
  r.backward(true);
  r.backward();
  CHECK(values(w.grad()) == std::vector<float>(6, 6.0f));  // 2 + 2 + 2 (first backward: 2)
}

TEST_CASE("autograd: an op without a derivative says so when backward reaches it") {
  autograd::OpNode<Tensor> node(OpId::exp, {}, nullptr);
  node.next_metas.push_back(TensorMeta::contiguous(DType::Float32, {4, 5}));
  node.next_edges.emplace_back();
  std::vector<Tensor> grads{local::ones({4, 5})};
  std::string m = message_of<InvalidArgument>([&] { node.apply(grads); });
  CHECK(contains(m, "op exp has no derivative"));
  CHECK(contains(m, "float32[4, 5]"));
}

TEST_CASE("autograd: grad() returns gradients without touching grad()") {
  Tensor x = local::from_vector<double>({1, 2, 3}).requires_grad_();
  Tensor h = x * x;
  Tensor y = h.sum();
  std::vector<Tensor> g = autograd::grad<Tensor>({y}, {x, h}, {}, true);
  CHECK(g[0].to_vector<double>() == std::vector<double>{2, 4, 6});
  CHECK(g[1].to_vector<double>() == std::vector<double>{1, 1, 1});
  CHECK_FALSE(x.grad().defined());
  Tensor unused = local::ones({1}, DType::Float64).requires_grad_();
  CHECK(contains(
      message_of<InvalidArgument>([&] { autograd::grad<Tensor>({y}, {unused}, {}, true); }),
      "allow_unused"));
  CHECK_FALSE(autograd::grad<Tensor>({y}, {unused}, {}, true, true)[0].defined());
}

TEST_CASE("autograd: record_function with several outputs") {
  Tensor a = local::from_vector<float>({1, 2}).requires_grad_();
  std::vector<Tensor> outs;
  {
    no_grad off;
    outs = {a * 3, a * 4};
  }
  outs =
      autograd::record_function<Tensor>("TwoScales", {a}, outs, [](const std::vector<Tensor>& g) {
        Tensor r = g[0].defined() ? g[0] * 3 : Tensor();
        if (g[1].defined()) r = r.defined() ? r + g[1] * 4 : g[1] * 4;
        return std::vector<Tensor>{r};
      });
  CHECK(outs[0].grad_fn_name() == "TwoScales");
  (outs[0].sum() + outs[1].sum() * 2).backward();
  CHECK(values(a.grad()) == std::vector<float>{11, 11});
}

TEST_CASE("autograd: mixed dtypes give each input its own dtype") {
  Tensor a = local::from_vector<float>({1, 2}).requires_grad_();
  Tensor b = local::from_vector<double>({3, 4}).requires_grad_();
  (a * b).sum().backward();
  CHECK(a.grad().dtype() == DType::Float32);
  CHECK(b.grad().dtype() == DType::Float64);
  CHECK(values(a.grad()) == std::vector<float>{3, 4});
}

}  // namespace
}  // namespace dtr::test
