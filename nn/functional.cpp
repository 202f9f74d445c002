// torch.nn.functional's functions (dtr/nn.hpp): the op table's ops, which autograd
// differentiates through the derivative table.
#include <fmt/format.h>

#include <cmath>
#include <limits>

#include "dtr/nn.hpp"
#include "nn/tensor_factory.hpp"

namespace dtr::nn::functional {

template <typename T>
T relu(const T& x) {
  return x.relu();
}

template <typename T>
T linear(const T& x, const T& weight, const T& bias) {
  return bias.defined() ? x.linear(weight, bias) : x.linear(weight);
}

// In eval mode (or p = 0) the identity, drawing nothing (the generator is left where it is).
template <typename T>
T dropout(const T& x, double p, bool training, Generator* generator) {
  if (!training || p == 0) return x;
  return generator ? x.dropout(p, training, *generator) : x.dropout(p, training);
}

template <typename T>
T dropout2d(const T& x, double p, bool training, Generator* generator) {
  if (!training || p == 0) return x;
  return generator ? x.dropout2d(p, training, *generator) : x.dropout2d(p, training);
}

template <typename T>
T log_softmax(const T& x, int64_t dim) {
  return x.log_softmax(dim);
}

template <typename T>
T softmax(const T& x, int64_t dim) {
  return x.softmax(dim);
}

template <typename T>
T nll_loss(const T& input, const T& target) {
  return input.nll_loss(target);
}

template <typename T>
T cross_entropy(const T& input, const T& target) {
  return nll_loss(log_softmax(input, 1), target);
}

template <typename T>
T nll_loss_nd(const T& input, const T& target, const std::optional<T>& weight, Reduction reduction,
              int64_t ignore_index) {
  const auto mismatch = [&] {
    return ShapeError(
        fmt::format("nll_loss: target of shape {} does not fit input of shape {} "
                    "(expected (N) for (N, C), () for (C), (N, d1, ...) for (N, C, "
                    "d1, ...))",
                    dtr::to_string(target.shape()), dtr::to_string(input.shape())));
  };
  if (input.dim() == 0) throw mismatch();
  if (input.dim() == 1) {
    if (target.dim() != 0) throw mismatch();
    const T out = input.unsqueeze(0).nll_loss(target.reshape({1}), weight, reduction, ignore_index);
    return reduction == Reduction::None ? out.reshape({}) : out;
  }
  if (input.dim() == 2) return input.nll_loss(target, weight, reduction, ignore_index);
  Shape want{input.size(0)};
  for (int64_t d = 2; d < input.dim(); ++d) want.push_back(input.size(d));
  if (!(target.shape() == want)) throw mismatch();
  Dims perm{0};
  for (int64_t d = 2; d < input.dim(); ++d) perm.push_back(d);
  perm.push_back(1);
  const T rows = input.permute(perm).reshape({-1, input.size(1)});
  const T out = rows.nll_loss(target.reshape({-1}), weight, reduction, ignore_index);
  return reduction == Reduction::None ? out.view(want) : out;
}

namespace {

// -sum over the class dim of log p (times the class weights, broadcast along class_dim).
template <typename T>
T weighted_neg_sum(const T& logp, const std::optional<T>& weight, int64_t class_dim) {
  if (!weight) return -logp.sum(class_dim);
  Shape s(static_cast<size_t>(logp.dim()), 1);
  s[static_cast<size_t>(class_dim)] = weight->numel();
  return -(logp * weight->view(s)).sum(class_dim);
}

template <typename T>
T reduce_loss(const T& per_sample, Reduction reduction, const T& mean_divisor) {
  if (reduction == Reduction::None) return per_sample;
  return reduction == Reduction::Sum ? per_sample.sum() : per_sample.sum() / mean_divisor;
}

}  // namespace

template <typename T>
T cross_entropy(const T& input, const T& target, const std::optional<T>& weight,
                int64_t ignore_index, Reduction reduction, double label_smoothing) {
  if (label_smoothing < 0 || label_smoothing > 1)
    throw InvalidArgument(
        fmt::format("cross_entropy: label_smoothing must be in [0, 1], got {}", label_smoothing));
  if (input.dim() == 0)
    throw ShapeError("cross_entropy: the input must have a class dim, got a 0-d tensor");
  const int64_t class_dim = input.dim() == 1 ? 0 : 1, classes = input.size(class_dim);
  if (weight && !(weight->shape() == Shape{classes}))
    throw ShapeError(fmt::format("cross_entropy: weight of shape {} for {} classes",
                                 dtr::to_string(weight->shape()), classes));
  const T logp = input.log_softmax(class_dim);
  const double eps = label_smoothing;
  if (is_floating(target.dtype())) {  // class probabilities
    if (!(target.shape() == input.shape()))
      throw ShapeError(
          fmt::format("cross_entropy: probability targets must have the input's "
                      "shape {}, got {}",
                      dtr::to_string(input.shape()), dtr::to_string(target.shape())));
    if (ignore_index != -100)
      throw InvalidArgument(
          "cross_entropy: ignore_index is not supported for probability "
          "targets");
    const T p = eps > 0 ? target * (1 - eps) + eps / static_cast<double>(classes) : target;
    const T per = weighted_neg_sum(logp * p, weight, class_dim);
    const double samples = static_cast<double>(input.numel() / std::max<int64_t>(classes, 1));
    return reduce_loss(per, reduction, input.full_here({}, samples, input.dtype()));
  }
  if (target.dtype() != DType::Int64)
    throw DTypeError(
        fmt::format("cross_entropy: targets must be int64 class indices or "
                    "floating class probabilities, got {}",
                    dtype_name(target.dtype())));
  const T nll = nll_loss_nd(logp, target, weight, reduction, ignore_index);
  if (eps == 0) return nll;
  const T ignored = target.eq(ignore_index);
  const T smooth = weighted_neg_sum(logp, weight, class_dim).masked_fill(ignored, 0);
  T divisor = ignored.logical_not().sum();
  if (weight && reduction == Reduction::Mean)
    divisor = weight->index_select(0, target.masked_fill(ignored, 0).reshape({-1}))
                  .masked_fill(ignored.reshape({-1}), 0)
                  .sum();
  return nll * (1 - eps) + reduce_loss(smooth, reduction, divisor) * (eps / classes);
}

template <typename T>
T scaled_dot_product_attention(const T& q, const T& k, const T& v,
                               const std::optional<T>& attn_mask, double dropout_p, bool is_causal,
                               std::optional<double> scale, Generator* generator) {
  const auto shapes = [&] {
    return fmt::format("q {}, k {}, v {}", dtr::to_string(q.shape()), dtr::to_string(k.shape()),
                       dtr::to_string(v.shape()));
  };
  if (q.dim() < 2 || k.dim() < 2 || v.dim() < 2 || q.size(-1) != k.size(-1) ||
      k.size(-2) != v.size(-2))
    throw ShapeError(
        "scaled_dot_product_attention: expected q (..., L, E), k (..., S, E) and "
        "v (..., S, Ev), got " +
        shapes());
  if (!is_floating(q.dtype()))
    throw DTypeError(
        fmt::format("scaled_dot_product_attention: defined for floating-point "
                    "tensors only, got {}",
                    dtype_name(q.dtype())));
  if (is_causal && attn_mask)
    throw InvalidArgument(
        "scaled_dot_product_attention: an explicit attn_mask should not be "
        "set when is_causal=True");
  if (dropout_p < 0 || dropout_p > 1)
    throw InvalidArgument(
        fmt::format("scaled_dot_product_attention: dropout_p must be in "
                    "[0, 1], got {}",
                    dropout_p));
  const double factor =
      std::sqrt(scale ? *scale : 1.0 / std::sqrt(static_cast<double>(q.size(-1))));
  T scores = (q * factor).matmul(k.transpose(-2, -1) * factor);
  const double inf = std::numeric_limits<double>::infinity();
  if (is_causal) {
    const T keep = q.new_ones({q.size(-2), k.size(-2)}, DType::Bool).tril(0);
    scores = scores.masked_fill(keep.logical_not(), -inf);
  } else if (attn_mask) {
    if (attn_mask->dtype() == DType::Bool)
      scores = scores.masked_fill(attn_mask->logical_not(), -inf);
    else if (attn_mask->dtype() == q.dtype())
      scores = scores + *attn_mask;
    else
      throw DTypeError(
          fmt::format("scaled_dot_product_attention: attn_mask must be bool or "
                      "of the query's dtype {}, got {}",
                      dtype_name(q.dtype()), dtype_name(attn_mask->dtype())));
  }
  T weights = scores.softmax(-1);
  if (dropout_p > 0) weights = dropout(weights, dropout_p, true, generator);
  return weights.matmul(v);
}

#define DTR_INSTANTIATE(T)                                                                       \
  template T relu(const T&);                                                                     \
  template T linear(const T&, const T&, const T&);                                               \
  template T dropout(const T&, double, bool, Generator*);                                        \
  template T dropout2d(const T&, double, bool, Generator*);                                      \
  template T log_softmax(const T&, int64_t);                                                     \
  template T softmax(const T&, int64_t);                                                         \
  template T nll_loss(const T&, const T&);                                                       \
  template T cross_entropy(const T&, const T&);                                                  \
  template T nll_loss_nd(const T&, const T&, const std::optional<T>&, Reduction, int64_t);       \
  template T cross_entropy(const T&, const T&, const std::optional<T>&, int64_t, Reduction,      \
                           double);                                                              \
  template T scaled_dot_product_attention(const T&, const T&, const T&, const std::optional<T>&, \
                                          double, bool, std::optional<double>, Generator*);
DTR_INSTANTIATE(local::Tensor)
DTR_INSTANTIATE(DistributedTensor)
#undef DTR_INSTANTIATE

}  // namespace dtr::nn::functional
