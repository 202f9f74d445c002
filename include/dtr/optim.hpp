// Optimizers (library dtr::optim; docs/training.md), as torch.optim, for local::Tensor and
// DistributedTensor parameters: step() updates each parameter in place with ops on its own
// node and device (under no_grad), from the gradient backward() left in grad(); a parameter
// without a gradient is skipped. The arithmetic follows torch's single-tensor
// implementations.
//
//   dtr::optim::SGD<T> opt(model.parameters(), {.lr = 0.01, .momentum = 0.5});
//   opt.zero_grad(); loss.backward(); opt.step();
//
// Thread safety: an optimizer is used by one thread at a time, the one that runs backward
// over its parameters.
#pragma once

#include <cstdint>
#include <vector>

#include "dtr/autograd.hpp"

namespace dtr::optim {

template <typename T>
class Optimizer {
 public:
  // Throws InvalidArgument for an undefined parameter or one that does not require grad.
  explicit Optimizer(std::vector<T> params);
  virtual ~Optimizer() = default;
  Optimizer(const Optimizer&) = delete;
  Optimizer& operator=(const Optimizer&) = delete;

  virtual void step() = 0;
  // Clears the gradients (set_to_none), or zeroes them in place.
  void zero_grad(bool set_to_none = true);
  const std::vector<T>& params() const { return params_; }

 protected:
  std::vector<T> params_;
};

struct SGDOptions {
  double lr = 0.01;
  double momentum = 0;
  double dampening = 0;
  double weight_decay = 0;
  bool nesterov = false;
};

// Stochastic gradient descent with momentum (torch.optim.SGD): with g the gradient
// (+ weight_decay * p), b = g at the first step and b = momentum * b + (1 - dampening) * g
// after; p -= lr * (g + momentum * b) with nesterov, else lr * b (g without momentum).
template <typename T>
class SGD : public Optimizer<T> {
 public:
  // Throws InvalidArgument for a negative lr, momentum or weight decay, or nesterov without
  // momentum or with dampening.
  SGD(std::vector<T> params, SGDOptions options);
  void step() override;
  const SGDOptions& options() const { return options_; }

 private:
  SGDOptions options_;
  std::vector<T> momentum_;  // per parameter; undefined before its first step
};

struct AdamOptions {
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0;
};

// Adam (torch.optim.Adam, without amsgrad): m = beta1 m + (1 - beta1) g,
// v = beta2 v + (1 - beta2) g^2, p -= lr / (1 - beta1^t) * m / (sqrt(v) / sqrt(1 - beta2^t)
// + eps), g including weight_decay * p.
template <typename T>
class Adam : public Optimizer<T> {
 public:
  Adam(std::vector<T> params, AdamOptions options);
  void step() override;

 private:
  AdamOptions options_;
  std::vector<T> m_, v_;
  std::vector<int64_t> steps_;
};

}  // namespace dtr::optim
