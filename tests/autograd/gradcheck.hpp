// gradcheck: an op's gradient from autograd against central finite differences, in
// float64. The inputs may be any strided views (transposed, sliced); each logical element
// is perturbed through its own storage position. The output gets a random gradient, so
// that a non-scalar output's backward is checked in every direction at once.
#pragma once

#include <doctest/doctest.h>

#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "dtr/autograd.hpp"
#include "dtr/tensor.hpp"

namespace dtr::test {

using local::Tensor;
using GradFn = std::function<Tensor(const std::vector<Tensor>&)>;

// Storage position (in elements) of logical element i of t (row-major order).
inline int64_t storage_index(const Tensor& t, int64_t i) {
  int64_t pos = t.meta().offset;
  for (int64_t d = t.dim() - 1; d >= 0; --d) {
    const int64_t n = t.shape()[static_cast<size_t>(d)];
    pos += (i % n) * t.strides()[static_cast<size_t>(d)];
    i /= n;
  }
  return pos;
}

// sum(fn(inputs) * weight) without recording.
inline double weighted_sum(const GradFn& fn, const std::vector<Tensor>& inputs,
                           const Tensor& weight) {
  no_grad off;
  return (fn(inputs) * weight).sum().item<double>();
}

// CHECKs d sum(fn(x) * w) / d x_k from autograd against central differences for every
// input k (float64 leaves that require grad).
inline void gradcheck(const std::string& name, const GradFn& fn, std::vector<Tensor> inputs,
                      double eps = 1e-6, double atol = 1e-6, double rtol = 1e-5) {
  INFO("case ", name);
  for (Tensor& t : inputs) t.requires_grad_();
  Tensor out = fn(inputs);
  REQUIRE(out.requires_grad());
  Generator gen(7);
  Tensor weight = local::randn(out.shape(), gen, DType::Float64);
  std::vector<Tensor> analytic = autograd::grad<Tensor>({out}, inputs, {weight});
  for (size_t k = 0; k < inputs.size(); ++k) {
    const Tensor& x = inputs[k];
    REQUIRE(analytic[k].shape() == x.shape());
    std::vector<double> a = analytic[k].to_vector<double>();
    double* data = static_cast<double*>(x.storage()->data());
    for (int64_t i = 0; i < x.numel(); ++i) {
      double& v = data[storage_index(x, i)];
      const double keep = v;
      v = keep + eps;
      const double up = weighted_sum(fn, inputs, weight);
      v = keep - eps;
      const double down = weighted_sum(fn, inputs, weight);
      v = keep;
      const double numeric = (up - down) / (2 * eps);
      INFO("input ", k, " element ", i, ": autograd ", a[static_cast<size_t>(i)], ", numeric ",
           numeric);
      CHECK(std::abs(a[static_cast<size_t>(i)] - numeric) <= atol + rtol * std::abs(numeric));
    }
  }
}

}  // namespace dtr::test
