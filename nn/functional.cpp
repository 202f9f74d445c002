// torch.nn.functional's functions (dtr/nn.hpp), composed of op-table ops so that autograd
// differentiates them through the derivative table.
#include <fmt/format.h>

#include "dtr/nn.hpp"
#include "nn/tensor_factory.hpp"

namespace dtr::nn::functional {

template <typename T>
T relu(const T& x) {
  return x.relu();
}

template <typename T>
T linear(const T& x, const T& weight, const T& bias) {
  T y = x.matmul(weight.t());
  return bias.defined() ? y + bias : y;
}

namespace {
// x * mask / (1 - p), the mask drawn with `mask_shape` (broadcast over x).
template <typename T>
T dropout_with(const T& x, const Shape& mask_shape, double p, bool training, Generator* gen,
               const char* what) {
  if (p < 0 || p > 1)
    throw InvalidArgument(fmt::format("{}: p must be in [0, 1], got {}", what, p));
  if (!training || p == 0) return x;
  if (p == 1) return x * 0.0;
  T keep = (detail::Factory<T>::rand_like(x, mask_shape, gen) >= p).to(x.dtype());
  return x * (keep * (1.0 / (1.0 - p)));
}
}  // namespace

template <typename T>
T dropout(const T& x, double p, bool training, Generator* generator) {
  return dropout_with(x, x.shape(), p, training, generator, "dropout");
}

template <typename T>
T dropout2d(const T& x, double p, bool training, Generator* generator) {
  if (x.dim() < 2)
    throw ShapeError(
        fmt::format("dropout2d: needs (N, C, ...) input, got shape {}", to_string(x.shape())));
  Shape mask(static_cast<size_t>(x.dim()), 1);
  mask[0] = x.shape()[0];
  mask[1] = x.shape()[1];
  return dropout_with(x, mask, p, training, generator, "dropout2d");
}

template <typename T>
T log_softmax(const T& x, int64_t dim) {
  T shifted = x - x.max(dim, true).detach();
  return shifted - shifted.exp().sum(dim, true).log();
}

template <typename T>
T softmax(const T& x, int64_t dim) {
  T e = (x - x.max(dim, true).detach()).exp();
  return e / e.sum(dim, true);
}

template <typename T>
T nll_loss(const T& input, const T& target) {
  if (input.dim() != 2 || target.dim() != 1 || target.shape()[0] != input.shape()[0])
    throw ShapeError(
        fmt::format("nll_loss: needs input (N, C) and target (N), got input {} and target {}",
                    to_string(input.shape()), to_string(target.shape())));
  if (target.dtype() != DType::Int64 && target.dtype() != DType::Int32)
    throw DTypeError(fmt::format("nll_loss: target must hold class indices (int64), got {}",
                                 dtype_name(target.dtype())));
  T classes = detail::Factory<T>::arange_like(input.shape()[1], target);
  T picked = (target.unsqueeze(1) == classes).to(input.dtype());
  return -(input * picked).sum() / static_cast<double>(input.shape()[0]);
}

template <typename T>
T cross_entropy(const T& input, const T& target) {
  return nll_loss(log_softmax(input, 1), target);
}

#define DTR_INSTANTIATE(T)                                  \
  template T relu(const T&);                                \
  template T linear(const T&, const T&, const T&);          \
  template T dropout(const T&, double, bool, Generator*);   \
  template T dropout2d(const T&, double, bool, Generator*); \
  template T log_softmax(const T&, int64_t);                \
  template T softmax(const T&, int64_t);                    \
  template T nll_loss(const T&, const T&);                  \
  template T cross_entropy(const T&, const T&);
DTR_INSTANTIATE(local::Tensor)
DTR_INSTANTIATE(DistributedTensor)
#undef DTR_INSTANTIATE

}  // namespace dtr::nn::functional
