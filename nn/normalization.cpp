// Group and batch normalization (dtr/nn.hpp): both normalize rows with the layer_norm op
// (one fused pass per row on the worker, its gradient the layer_norm_backward op) and apply
// the per-channel affine as broadcast ops, so autograd differentiates them through ops the
// table already has.
#include <fmt/format.h>

#include "dtr/nn.hpp"

namespace dtr::nn::functional {
namespace {

// The shape (1, C, 1, ...) that broadcasts a per-channel vector over x (N, C, *).
template <typename T>
Shape channel_shape(const T& x) {
  Shape s(static_cast<size_t>(x.dim()), 1);
  s[1] = x.size(1);
  return s;
}

// Checks x is (N, C, *) and floating, and each given per-channel tensor is (C).
template <typename T>
void check_channels(const char* fn, const T& x,
                    std::initializer_list<std::pair<const char*, const std::optional<T>*>> vecs) {
  if (x.dim() < 2)
    throw ShapeError(fmt::format("{}: expected an input of at least 2 dims (N, C, *), got shape {}",
                                 fn, dtr::to_string(x.shape())));
  if (!is_floating(x.dtype()))
    throw DTypeError(fmt::format("{}: defined for floating-point tensors only, got {}", fn,
                                 dtype_name(x.dtype())));
  for (const auto& [label, t] : vecs)
    if (*t && !((*t)->shape() == Shape{x.size(1)}))
      throw ShapeError(fmt::format("{}: {} of shape {} for an input of {} channels (shape {})", fn,
                                   label, dtr::to_string((*t)->shape()), x.size(1),
                                   dtr::to_string(x.shape())));
}

// y * weight + bias per channel (either left out).
template <typename T>
T channel_affine(const T& y, const std::optional<T>& weight, const std::optional<T>& bias) {
  const Shape s = channel_shape(y);
  T out = y;
  if (weight) out = out * weight->view(s);
  if (bias) out = out + bias->view(s);
  return out;
}

// The rows of group normalization: (N * G, C / G * prod(*)).
template <typename T>
Shape group_rows(const T& x, int64_t num_groups) {
  const int64_t n = x.size(0), c = x.size(1);
  if (num_groups <= 0 || c % num_groups != 0)
    throw InvalidArgument(
        fmt::format("group_norm: num_groups {} must divide the {} channels of "
                    "the input (shape {})",
                    num_groups, c, dtr::to_string(x.shape())));
  const int64_t rows = n * num_groups;
  return {rows, rows == 0 ? 0 : x.numel() / rows};
}

template <typename T>
Dims all_but_channels(const T& x) {
  Dims d{0};
  for (int64_t i = 2; i < x.dim(); ++i) d.push_back(i);
  return d;
}

}  // namespace

template <typename T>
T group_norm(const T& x, int64_t num_groups, const std::optional<T>& weight,
             const std::optional<T>& bias, double eps) {
  check_channels("group_norm", x, {{"weight", &weight}, {"bias", &bias}});
  const Shape rows = group_rows(x, num_groups);
  if (x.numel() == 0) return channel_affine(x.clone(), weight, bias);
  const T y = x.reshape(rows).layer_norm({rows[1]}, std::nullopt, std::nullopt, eps);
  return channel_affine(y.view(x.shape()), weight, bias);
}

template <typename T>
std::tuple<T, T, T> group_norm_backward(const T& grad, const T& x, int64_t num_groups,
                                        const std::optional<T>& weight, double eps) {
  check_channels("group_norm_backward", x, {{"weight", &weight}});
  if (!(grad.shape() == x.shape()))
    throw ShapeError(fmt::format("group_norm_backward: grad of shape {} for an input of shape {}",
                                 dtr::to_string(grad.shape()), dtr::to_string(x.shape())));
  const Shape rows = group_rows(x, num_groups);
  const T x_rows = x.reshape(rows);
  const T ones = x.new_ones({rows[1]});
  const T g = weight ? grad * weight->view(channel_shape(x)) : grad;
  OpAttrs a;
  a.scalars[0] = eps;
  const std::array<T, 3> in{g.reshape(rows), x_rows, ones};
  const T grad_input =
      T::apply_inputs(OpId::layer_norm_backward, a, std::span<const T>(in)).view(x.shape());
  const T xhat = x_rows.layer_norm({rows[1]}, std::nullopt, std::nullopt, eps).view(x.shape());
  const Dims reduce = all_but_channels(x);
  return {grad_input, (grad * xhat).sum(reduce), grad.sum(reduce)};
}

template <typename T>
T batch_norm(const T& x, const std::optional<T>& running_mean, const std::optional<T>& running_var,
             const std::optional<T>& weight, const std::optional<T>& bias, bool training,
             double momentum, double eps) {
  check_channels("batch_norm", x,
                 {{"running_mean", &running_mean},
                  {"running_var", &running_var},
                  {"weight", &weight},
                  {"bias", &bias}});
  if (running_mean.has_value() != running_var.has_value())
    throw InvalidArgument("batch_norm: running_mean and running_var go together (one is None)");
  const Shape s = channel_shape(x);
  if (!training) {
    if (!running_mean)
      throw InvalidArgument(
          "batch_norm: running_mean and running_var are required when not "
          "training (eval mode)");
    T alpha = (*running_var + eps).rsqrt();
    if (weight) alpha = alpha * *weight;
    const T shifted = *running_mean * alpha;
    const T beta = bias ? *bias - shifted : -shifted;
    return x * alpha.view(s) + beta.view(s);
  }
  const int64_t c = x.size(1), per_channel = c == 0 ? 0 : x.numel() / c;
  if (per_channel <= 1)
    throw InvalidArgument(
        fmt::format("batch_norm: expected more than 1 value per channel when "
                    "training, got input of shape {}",
                    dtr::to_string(x.shape())));
  const T xt = x.transpose(0, 1);
  const T rows = xt.reshape({c, per_channel});
  const T y = rows.layer_norm({per_channel}, std::nullopt, std::nullopt, eps)
                  .view(xt.shape())
                  .transpose(0, 1);
  if (running_mean) {
    const T r = rows.detach();
    T rm = *running_mean, rv = *running_var;
    rm.copy_(r.mean(1) * momentum + rm * (1 - momentum));
    rv.copy_(r.var(1, false, 1) * momentum + rv * (1 - momentum));
  }
  return weight || bias ? channel_affine(y, weight, bias) : y.contiguous();
}

#define DTR_INSTANTIATE(T)                                                                   \
  template T group_norm(const T&, int64_t, const std::optional<T>&, const std::optional<T>&, \
                        double);                                                             \
  template std::tuple<T, T, T> group_norm_backward(const T&, const T&, int64_t,              \
                                                   const std::optional<T>&, double);         \
  template T batch_norm(const T&, const std::optional<T>&, const std::optional<T>&,          \
                        const std::optional<T>&, const std::optional<T>&, bool, double, double);
DTR_INSTANTIATE(local::Tensor)
DTR_INSTANTIATE(DistributedTensor)
#undef DTR_INSTANTIATE

}  // namespace dtr::nn::functional
