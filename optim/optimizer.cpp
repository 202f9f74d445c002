// Optimizer<T>, SGD<T> and Adam<T> (dtr/optim.hpp).
#include <fmt/format.h>

#include <cmath>

#include "dtr/optim.hpp"

namespace dtr::optim {

template <typename T>
Optimizer<T>::Optimizer(std::vector<T> params) : params_(std::move(params)) {
  for (size_t i = 0; i < params_.size(); ++i)
    if (!params_[i].defined() || !params_[i].requires_grad())
      throw InvalidArgument(
          fmt::format("optimizer: parameter {} is undefined or does not require grad", i));
}

template <typename T>
void Optimizer<T>::zero_grad(bool set_to_none) {
  autograd::no_grad off;
  for (T& p : params_) {
    if (set_to_none || !p.grad().defined())
      p.set_grad(T());
    else
      p.grad().zero_();
  }
}

template <typename T>
SGD<T>::SGD(std::vector<T> params, SGDOptions options)
    : Optimizer<T>(std::move(params)), options_(options) {
  const SGDOptions& o = options_;
  if (o.lr < 0 || o.momentum < 0 || o.weight_decay < 0)
    throw InvalidArgument(fmt::format("SGD: lr {}, momentum {} and weight_decay {} must be >= 0",
                                      o.lr, o.momentum, o.weight_decay));
  if (o.nesterov && (o.momentum <= 0 || o.dampening != 0))
    throw InvalidArgument("SGD: nesterov needs a momentum and zero dampening");
  momentum_.resize(this->params_.size());
}

template <typename T>
void SGD<T>::step() {
  autograd::no_grad off;
  const SGDOptions& o = options_;
  for (size_t i = 0; i < this->params_.size(); ++i) {
    T& p = this->params_[i];
    T d = p.grad();
    if (!d.defined()) continue;
    if (o.weight_decay != 0) d = d + p * o.weight_decay;
    if (o.momentum != 0) {
      T& b = momentum_[i];
      if (!b.defined()) {
        b = d * 1.0;  // a copy
      } else {
        b.mul_(o.momentum);
        if (o.dampening == 0)
          b.add_(d);
        else
          b.add_(d * (1.0 - o.dampening));
      }
      d = o.nesterov ? d + b * o.momentum : b;
    }
    p.sub_(d * o.lr);
  }
}

template <typename T>
Adam<T>::Adam(std::vector<T> params, AdamOptions options)
    : Optimizer<T>(std::move(params)), options_(options) {
  const AdamOptions& o = options_;
  if (o.lr < 0 || o.eps < 0 || o.weight_decay < 0 || o.beta1 < 0 || o.beta1 >= 1 || o.beta2 < 0 ||
      o.beta2 >= 1)
    throw InvalidArgument(fmt::format(
        "Adam: needs lr, eps, weight_decay >= 0 and betas in [0, 1), got lr {}, betas ({}, {}), "
        "eps {}, weight_decay {}",
        o.lr, o.beta1, o.beta2, o.eps, o.weight_decay));
  m_.resize(this->params_.size());
  v_.resize(this->params_.size());
  steps_.resize(this->params_.size());
}

template <typename T>
void Adam<T>::step() {
  autograd::no_grad off;
  const AdamOptions& o = options_;
  for (size_t i = 0; i < this->params_.size(); ++i) {
    T& p = this->params_[i];
    T g = p.grad();
    if (!g.defined()) continue;
    if (o.weight_decay != 0) g = g + p * o.weight_decay;
    if (!m_[i].defined()) {
      m_[i] = g * 0.0;
      v_[i] = g * 0.0;
    }
    const auto t = static_cast<double>(++steps_[i]);
    m_[i].mul_(o.beta1).add_(g * (1.0 - o.beta1));
    v_[i].mul_(o.beta2).add_(g * g * (1.0 - o.beta2));
    const double step_size = o.lr / (1.0 - std::pow(o.beta1, t));
    const double bc2_sqrt = std::sqrt(1.0 - std::pow(o.beta2, t));
    T denom = v_[i].sqrt() / bc2_sqrt + o.eps;
    p.sub_(m_[i] / denom * step_size);
  }
}

template class Optimizer<local::Tensor>;
template class Optimizer<DistributedTensor>;
template class SGD<local::Tensor>;
template class SGD<DistributedTensor>;
template class Adam<local::Tensor>;
template class Adam<DistributedTensor>;

}  // namespace dtr::optim
