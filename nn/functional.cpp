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
  template T scaled_dot_product_attention(const T&, const T&, const T&, const std::optional<T>&, \
                                          double, bool, std::optional<double>, Generator*);
DTR_INSTANTIATE(local::Tensor)
DTR_INSTANTIATE(DistributedTensor)
#undef DTR_INSTANTIATE

}  // namespace dtr::nn::functional
