// The seed tutorial's network (003, "Distributed Synchronous SGD"), written once for
// local::Tensor and DistributedTensor: two convolutions with max pooling, channel dropout
// after the second, two linear layers with dropout between them, log_softmax.
//
// Dropout draws from the generator given at construction (the seed seeds every rank with
// torch.manual_seed(1234); here each replica gets its own generator, so that replicas
// driven from one master draw what ranks in their own processes draw).
//
// Thread safety: as nn::Module.
#pragma once

#include <dtr/nn.hpp>

namespace seed {

template <typename T>
class Net : public dtr::nn::Module<T> {
 public:
  explicit Net(dtr::Generator* dropout_generator = nullptr)
      : conv2_drop(0.5, dropout_generator), generator_(dropout_generator) {
    this->register_module("conv1", conv1);
    this->register_module("conv2", conv2);
    this->register_module("conv2_drop", conv2_drop);
    this->register_module("fc1", fc1);
    this->register_module("fc2", fc2);
  }

  T forward(const T& input) const {
    namespace F = dtr::nn::functional;
    T x = F::relu(F::max_pool2d(conv1(input), 2));
    x = F::relu(F::max_pool2d(conv2_drop(conv2(x)), 2));
    x = x.view({-1, 320});
    x = F::relu(fc1(x));
    x = F::dropout(x, 0.5, this->is_training(), generator_);
    x = fc2(x);
    return F::log_softmax(x, 1);
  }
  T operator()(const T& x) const { return forward(x); }

  dtr::nn::Conv2d<T> conv1{1, 10, 5};
  dtr::nn::Conv2d<T> conv2{10, 20, 5};
  dtr::nn::Dropout2d<T> conv2_drop;
  dtr::nn::Linear<T> fc1{320, 50};
  dtr::nn::Linear<T> fc2{50, 10};

 private:
  dtr::Generator* generator_;
};

}  // namespace seed
