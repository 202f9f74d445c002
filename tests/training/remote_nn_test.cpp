// Modules and optimizers on DistributedTensor against real workers: a module made on a
// node trains there with SGD and Adam to the parameters the same training gives in-process,
// bit for bit; state files and Module::to(node) move parameters.
#include <doctest/doctest.h>

#include <unistd.h>

#include <cstdio>

#include "dtr/nn.hpp"
#include "dtr/optim.hpp"
#include "master/cluster.hpp"

namespace dtr::test {
namespace {

namespace F = nn::functional;

template <typename T>
struct Mlp : nn::Module<T> {
  nn::Linear<T> fc1{6, 8}, fc2{8, 3};
  Mlp() {
    this->register_module("fc1", fc1);
    this->register_module("fc2", fc2);
  }
  T forward(const T& x, Generator* gen) {
    return F::log_softmax(fc2(F::dropout(F::relu(fc1(x)), 0.25, true, gen)), 1);
  }
};

// Trains `m` for a few steps on x, y with SGD then Adam.
template <typename T>
void train(Mlp<T>& m, const T& x, const T& y) {
  Generator gen(11);
  optim::SGD<T> sgd(m.parameters(), {.lr = 0.1, .momentum = 0.9, .weight_decay = 1e-3});
  optim::Adam<T> adam(m.parameters(), {.lr = 0.01});
  for (int step = 0; step < 6; ++step) {
    optim::Optimizer<T>& opt = step < 3 ? static_cast<optim::Optimizer<T>&>(sgd) : adam;
    opt.zero_grad();
    F::nll_loss(m.forward(x, &gen), y).backward();
    opt.step();
  }
}

TEST_CASE("remote nn: training on a worker gives the in-process parameters, bit for bit") {
  Cluster cluster(2, cpu_only());
  Generator data(5);
  local::Tensor x = local::randn({10, 6}, data);
  local::Tensor y = local::from_vector<int64_t>({0, 1, 2, 0, 1, 2, 0, 1, 2, 0});
  manual_seed(3);
  Mlp<local::Tensor> lm;
  train(lm, x, y);
  manual_seed(3);
  set_node(1);
  Mlp<DistributedTensor> rm;
  set_node(0);
  CHECK(rm.fc1.weight.get_node() == 1);
  train(rm, dist_send(x, 1), dist_send(y, 1));
  auto lp = lm.parameters();
  auto rp = rm.parameters();
  for (size_t i = 0; i < lp.size(); ++i) check_same(rp[i], lp[i].detach());
}

TEST_CASE("remote nn: state files and Module::to(node)") {
  Cluster cluster(2, cpu_only());
  manual_seed(4);
  Mlp<DistributedTensor> a;
  manual_seed(5);
  Mlp<DistributedTensor> b;
  const std::string path = "/tmp/dtr_remote_nn_" + std::to_string(::getpid());
  a.save(path);
  b.to(1);
  CHECK(b.fc2.bias.get_node() == 1);
  CHECK(b.fc2.bias.requires_grad());
  b.load(path);
  auto pa = a.parameters(), pb = b.parameters();
  for (size_t i = 0; i < pa.size(); ++i) check_same(pb[i], pa[i].to_local());
  std::remove(path.c_str());
}

}  // namespace
}  // namespace dtr::test
