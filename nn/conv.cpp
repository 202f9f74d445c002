// Convolution and pooling (dtr/nn.hpp): the op table's conv2d, max_pool2d and avg_pool2d,
// differentiated through the derivative table; pad2d, a recorded function whose backward
// slices the gradient.
#include <fmt/format.h>

#include "dtr/nn.hpp"
#include "nn/tensor_factory.hpp"

namespace dtr::nn::functional {

namespace {

void check_4d(const char* what, const TensorMeta& m) {
  if (m.dim() != 4)
    throw ShapeError(fmt::format("{}: needs input (N, C, H, W), got {}", what, describe(m)));
}

}  // namespace

template <typename T>
T pad2d(const T& x, int64_t padding) {
  if (padding == 0) return x;
  if (padding < 0) throw InvalidArgument(fmt::format("pad2d: padding {} < 0", padding));
  check_4d("pad2d", x.meta());
  Shape shape = x.shape();
  shape[2] += 2 * padding;
  shape[3] += 2 * padding;
  T out;
  {
    autograd::no_grad off;
    out = detail::Factory<T>::zeros_like(shape, x);
    out.narrow(2, padding, x.shape()[2]).narrow(3, padding, x.shape()[3]).copy_(x);
  }
  const int64_t h = x.shape()[2], w = x.shape()[3];
  return autograd::record_function<T>(
      "Pad2dBackward", {x}, {out}, [padding, h, w](const std::vector<T>& g) {
        return std::vector<T>{g[0].narrow(2, padding, h).narrow(3, padding, w)};
      })[0];
}

template <typename T>
T conv2d(const T& x, const T& weight, const T& bias, int64_t stride, int64_t padding,
         int64_t dilation) {
  if (bias.defined()) return x.conv2d(weight, bias, stride, padding, dilation);
  return x.conv2d(weight, std::nullopt, stride, padding, dilation);
}

template <typename T>
T max_pool2d(const T& x, int64_t kernel, int64_t stride) {
  return x.max_pool2d(kernel, stride == 0 ? std::optional<Int2>() : std::optional<Int2>(stride));
}

template <typename T>
T avg_pool2d(const T& x, int64_t kernel, int64_t stride) {
  return x.avg_pool2d(kernel, stride == 0 ? std::optional<Int2>() : std::optional<Int2>(stride));
}

#define DTR_INSTANTIATE(T)                                                    \
  template T pad2d(const T&, int64_t);                                        \
  template T conv2d(const T&, const T&, const T&, int64_t, int64_t, int64_t); \
  template T max_pool2d(const T&, int64_t, int64_t);                          \
  template T avg_pool2d(const T&, int64_t, int64_t);
DTR_INSTANTIATE(local::Tensor)
DTR_INSTANTIATE(DistributedTensor)
#undef DTR_INSTANTIATE

}  // namespace dtr::nn::functional
