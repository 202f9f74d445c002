// The layers of dtr/nn.hpp: Linear, Dropout, Dropout2d.
#include <cmath>

#include "dtr/nn.hpp"
#include "nn/tensor_factory.hpp"

namespace dtr::nn {

namespace F = functional;

namespace {
// torch's default initialization: uniform on [-1/sqrt(fan_in), 1/sqrt(fan_in)].
template <typename T>
T uniform_parameter(const Shape& shape, int64_t fan_in) {
  const double bound = fan_in > 0 ? 1.0 / std::sqrt(static_cast<double>(fan_in)) : 0.0;
  T t = detail::Factory<T>::empty(shape);
  t.uniform_(-bound, bound);
  return t;
}
}  // namespace

template <typename T>
Linear<T>::Linear(int64_t in_features, int64_t out_features, bool with_bias) {
  if (in_features <= 0 || out_features <= 0)
    throw InvalidArgument("Linear: in_features and out_features must be positive");
  weight = uniform_parameter<T>({out_features, in_features}, in_features);
  this->register_parameter("weight", weight);
  if (with_bias) {
    bias = uniform_parameter<T>({out_features}, in_features);
    this->register_parameter("bias", bias);
  }
}

template <typename T>
T Linear<T>::forward(const T& x) const {
  return F::linear(x, weight, bias);
}

template <typename T>
Conv2d<T>::Conv2d(int64_t in_channels, int64_t out_channels, int64_t kernel_size, int64_t stride,
                  int64_t padding, int64_t dilation, bool with_bias)
    : stride_(stride), padding_(padding), dilation_(dilation) {
  if (in_channels <= 0 || out_channels <= 0 || kernel_size <= 0)
    throw InvalidArgument("Conv2d: channels and kernel_size must be positive");
  const int64_t fan_in = in_channels * kernel_size * kernel_size;
  weight = uniform_parameter<T>({out_channels, in_channels, kernel_size, kernel_size}, fan_in);
  this->register_parameter("weight", weight);
  if (with_bias) {
    bias = uniform_parameter<T>({out_channels}, fan_in);
    this->register_parameter("bias", bias);
  }
}

template <typename T>
T Conv2d<T>::forward(const T& x) const {
  return F::conv2d(x, weight, bias, stride_, padding_, dilation_);
}

template <typename T>
T Dropout<T>::forward(const T& x) const {
  return F::dropout(x, p_, this->is_training(), generator_);
}

template <typename T>
T Dropout2d<T>::forward(const T& x) const {
  return F::dropout2d(x, p_, this->is_training(), generator_);
}

template class Linear<local::Tensor>;
template class Linear<DistributedTensor>;
template class Conv2d<local::Tensor>;
template class Conv2d<DistributedTensor>;
template class Dropout<local::Tensor>;
template class Dropout<DistributedTensor>;
template class Dropout2d<local::Tensor>;
template class Dropout2d<DistributedTensor>;

}  // namespace dtr::nn
