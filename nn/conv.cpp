// Convolution and pooling (dtr/nn.hpp), composed of op-table ops so that autograd
// differentiates them: a kernel position (i, j) selects a strided window view of the
// padded input; the convolution sums weight[:, :, i, j] (O, C) times that window, laid out
// (C, N*Ho*Wo), over every position (one matmul per position), pooling takes the
// elementwise maximum or sum of the windows, (N, C, Ho, Wo). Padding is a recorded function whose
// backward slices the gradient.
#include <fmt/format.h>

#include "dtr/nn.hpp"
#include "nn/tensor_factory.hpp"

namespace dtr::nn::functional {

namespace {

// The window of kernel position (i, j): rows i*d, i*d + s, ... (ho of them), the same for
// columns.
template <typename T>
T window(const T& x, int64_t i, int64_t j, int64_t ho, int64_t wo, int64_t stride,
         int64_t dilation) {
  return x.slice(2, i * dilation, i * dilation + (ho - 1) * stride + 1, stride)
      .slice(3, j * dilation, j * dilation + (wo - 1) * stride + 1, stride);
}

int64_t out_size(const char* what, int64_t in, int64_t k, int64_t stride, int64_t dilation) {
  const int64_t span = dilation * (k - 1) + 1;
  if (in < span)
    throw ShapeError(
        fmt::format("{}: input size {} is smaller than the kernel's span {}", what, in, span));
  return (in - span) / stride + 1;
}

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
  check_4d("conv2d", x.meta());
  if (weight.dim() != 4 || weight.shape()[1] != x.shape()[1])
    throw ShapeError(
        fmt::format("conv2d: weight {} does not fit input {} (needs (C_out, {}, kH, kW))",
                    describe(weight.meta()), describe(x.meta()), x.shape()[1]));
  if (stride < 1 || dilation < 1)
    throw InvalidArgument(
        fmt::format("conv2d: stride {} and dilation {} must be >= 1", stride, dilation));
  // Channels first, (C, N, H, W), so that each kernel position is one (O, C) x (C, N*Ho*Wo)
  // product rather than N small ones.
  const T xp = pad2d(x, padding).transpose(0, 1);
  const int64_t n = x.shape()[0], c = x.shape()[1], o = weight.shape()[0];
  const int64_t kh = weight.shape()[2], kw = weight.shape()[3];
  const int64_t ho = out_size("conv2d", xp.shape()[2], kh, stride, dilation);
  const int64_t wo = out_size("conv2d", xp.shape()[3], kw, stride, dilation);
  T acc;
  for (int64_t i = 0; i < kh; ++i) {
    for (int64_t j = 0; j < kw; ++j) {
      T cols = window(xp, i, j, ho, wo, stride, dilation).reshape({c, n * ho * wo});
      T term = weight.select(3, j).select(2, i).matmul(cols);  // (O, N*Ho*Wo)
      acc = acc.defined() ? acc + term : term;
    }
  }
  T y = acc.view({o, n, ho, wo}).transpose(0, 1);
  return bias.defined() ? y + bias.view({1, o, 1, 1}) : y;
}

template <typename T>
T max_pool2d(const T& x, int64_t kernel, int64_t stride) {
  check_4d("max_pool2d", x.meta());
  if (stride == 0) stride = kernel;
  if (kernel < 1 || stride < 1)
    throw InvalidArgument(
        fmt::format("max_pool2d: kernel {} and stride {} must be >= 1", kernel, stride));
  const int64_t ho = out_size("max_pool2d", x.shape()[2], kernel, stride, 1);
  const int64_t wo = out_size("max_pool2d", x.shape()[3], kernel, stride, 1);
  T out;
  for (int64_t i = 0; i < kernel; ++i)
    for (int64_t j = 0; j < kernel; ++j) {
      T w = window(x, i, j, ho, wo, stride, 1);
      out = out.defined() ? out.maximum(w) : w;
    }
  return out;
}

template <typename T>
T avg_pool2d(const T& x, int64_t kernel, int64_t stride) {
  check_4d("avg_pool2d", x.meta());
  if (stride == 0) stride = kernel;
  if (kernel < 1 || stride < 1)
    throw InvalidArgument(
        fmt::format("avg_pool2d: kernel {} and stride {} must be >= 1", kernel, stride));
  const int64_t ho = out_size("avg_pool2d", x.shape()[2], kernel, stride, 1);
  const int64_t wo = out_size("avg_pool2d", x.shape()[3], kernel, stride, 1);
  T sum;
  for (int64_t i = 0; i < kernel; ++i)
    for (int64_t j = 0; j < kernel; ++j) {
      T w = window(x, i, j, ho, wo, stride, 1);
      sum = sum.defined() ? sum + w : w;
    }
  return sum / static_cast<double>(kernel * kernel);
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
