// The optimizers against their update formulas, in float64 (torch's single-tensor
// arithmetic), and their argument checks.
#include <doctest/doctest.h>

#include <cmath>
#include <string>

#include "dtr/optim.hpp"
#include "support/message_of.hpp"

namespace dtr::test {
namespace {

using local::Tensor;

TEST_CASE("optim: SGD with momentum, dampening, weight decay and nesterov") {
  for (bool nesterov : {false, true}) {
    Tensor p = local::from_vector<double>({1.0, -2.0}).requires_grad_();
    optim::SGD<Tensor> opt(
        {p}, {.lr = 0.1, .momentum = 0.9, .weight_decay = 0.01, .nesterov = nesterov});
    double w[2] = {1.0, -2.0}, buf[2] = {0, 0};
    for (int step = 0; step < 3; ++step) {
      opt.zero_grad();
      (p * p).sum().backward();  // grad 2p
      opt.step();
      for (int i = 0; i < 2; ++i) {
        double d = 2 * w[i] + 0.01 * w[i];
        buf[i] = step == 0 ? d : 0.9 * buf[i] + d;
        w[i] -= 0.1 * (nesterov ? d + 0.9 * buf[i] : buf[i]);
      }
    }
    auto got = p.to_vector<double>();
    CHECK(got[0] == doctest::Approx(w[0]).epsilon(1e-12));
    CHECK(got[1] == doctest::Approx(w[1]).epsilon(1e-12));
  }
  CHECK(has(message_of<InvalidArgument>([] {
              optim::SGD<Tensor>({local::ones({1}).requires_grad_()}, {.nesterov = true});
            }),
            "nesterov"));
  CHECK(has(message_of<InvalidArgument>([] { optim::SGD<Tensor>({local::ones({1})}, {}); }),
            "does not require grad"));
}

TEST_CASE("optim: Adam follows torch's update") {
  Tensor p = local::from_vector<double>({0.5, -1.5}).requires_grad_();
  optim::Adam<Tensor> opt({p}, {.lr = 0.01});
  double w[2] = {0.5, -1.5}, m[2] = {0, 0}, v[2] = {0, 0};
  for (int t = 1; t <= 3; ++t) {
    opt.zero_grad();
    (p * p * p).sum().backward();  // grad 3p^2
    opt.step();
    for (int i = 0; i < 2; ++i) {
      double g = 3 * w[i] * w[i];
      m[i] = 0.9 * m[i] + 0.1 * g;
      v[i] = 0.999 * v[i] + 0.001 * g * g;
      double denom = std::sqrt(v[i]) / std::sqrt(1 - std::pow(0.999, t)) + 1e-8;
      w[i] -= 0.01 / (1 - std::pow(0.9, t)) * m[i] / denom;
    }
  }
  auto got = p.to_vector<double>();
  CHECK(got[0] == doctest::Approx(w[0]).epsilon(1e-12));
  CHECK(got[1] == doctest::Approx(w[1]).epsilon(1e-12));
}

}  // namespace
}  // namespace dtr::test
