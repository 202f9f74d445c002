// The longer derivative formulas of the join, indexing and neural-network ops
// (derivatives.cpp), generic over the tensor type. The NN ops' gradients are ops of the op
// table themselves (conv2d_input_grad, max_pool2d_backward, ...), run through the
// handles' multi-input hook.
//
// Thread safety: plain functions.
#pragma once

#include <array>
#include <cmath>
#include <vector>

#include "autograd/grad_formulas.hpp"

namespace dtr::autograd {

// op(inputs...) through the multi-input hook of the tensor type.
template <typename T, typename... Ts>
T call(OpId op, const OpAttrs& attrs, const Ts&... inputs) {
  const std::array<T, sizeof...(Ts)> in{inputs...};
  return T::apply_inputs(op, attrs, in);
}

inline OpAttrs with_ints(const Dims& ints) {
  OpAttrs a;
  a.ints = ints;
  return a;
}

template <typename T>
T zeros_of_input(const GradContext<T>& c, size_t i, const T& like) {
  return zeros_like(TensorMeta::contiguous(c.meta(i).dtype, c.meta(i).shape), like);
}

// relu: the gradient where the output is positive (threshold_backward at 0).
template <typename T>
T relu_grad(const GradContext<T>& c, const T& g) {
  OpAttrs a;
  a.scalars[0] = 0;
  return call<T>(OpId::threshold_backward, a, g, c.output);
}

// silu: s * (1 + x * (1 - s)), s = sigmoid(x).
template <typename T>
T silu_grad(const GradContext<T>& c, const T& g) {
  const T& x = c.in(0);
  const T s = x.sigmoid();
  return g * (s * (x * (1.0 - s) + 1.0));
}

// gelu: Phi(x) + x * phi(x) = (1 + erf(x / sqrt 2)) / 2 + x * exp(-x^2 / 2) / sqrt(2 pi).
template <typename T>
T gelu_grad(const GradContext<T>& c, const T& g) {
  const T& x = c.in(0);
  const T cdf = ((x * M_SQRT1_2).erf() + 1.0) * 0.5;
  const T pdf = (x * x * -0.5).exp() * (M_2_SQRTPI * M_SQRT1_2 * 0.5);
  return g * (cdf + x * pdf);
}

// gelu's tanh approximation, as torch differentiates it: with u = sqrt(2/pi) (x + k x^3) and
// t = tanh(u), 0.5 (1 + t) + 0.5 x (1 - t^2) sqrt(2/pi) (1 + 3k x^2).
template <typename T>
T gelu_tanh_grad(const GradContext<T>& c, const T& g) {
  constexpr double kBeta = M_SQRT2 * M_2_SQRTPI * 0.5, kKappa = 0.044715;
  const T& x = c.in(0);
  const T x_sq = x * x;
  const T t = ((x + x_sq * x * kKappa) * kBeta).tanh();
  const T left = (t + 1.0) * 0.5;
  const T right = x * 0.5 * (1.0 - t * t) * ((x_sq * (3.0 * kKappa) + 1.0) * kBeta);
  return g * (left + right);
}

// cat: each input's slice of the gradient along dim.
template <typename T>
std::vector<T> cat_grad(const GradContext<T>& c, const T& g) {
  const int64_t dim = wrap_dim("cat", c.attrs.ints.empty() ? 0 : c.attrs.ints[0], g.dim());
  std::vector<T> r(c.metas.size());
  int64_t offset = 0;
  for (size_t i = 0; i < c.metas.size(); ++i) {
    const TensorMeta& m = c.meta(i);
    if (m.dim() != g.dim()) continue;  // a 1-D empty tensor, which cat skips
    const int64_t n = m.shape[static_cast<size_t>(dim)];
    if (c.needs(i)) r[i] = g.narrow(dim, offset, n);
    offset += n;
  }
  return r;
}

template <typename T>
std::vector<T> stack_grad(const GradContext<T>& c, const T& g) {
  const int64_t dim = wrap_dim("stack", c.attrs.ints.empty() ? 0 : c.attrs.ints[0], g.dim());
  std::vector<T> r(c.metas.size());
  for (size_t i = 0; i < c.metas.size(); ++i)
    if (c.needs(i)) r[i] = g.select(dim, static_cast<int64_t>(i));
  return r;
}

// index_select (1-D index along dim) and gather: the gradient added back at the indices.
template <typename T>
std::vector<T> index_select_grad(const GradContext<T>& c, const T& g) {
  const int64_t dim = wrap_dim("index_select", c.attrs.ints[0], std::max<int64_t>(g.dim(), 1));
  Shape view(static_cast<size_t>(g.dim()), 1);
  if (g.dim() > 0) view[static_cast<size_t>(dim)] = c.in(1).numel();
  T index = g.dim() > 0 ? c.in(1).reshape(view).expand(g.shape()) : c.in(1);
  return {call<T>(OpId::scatter_add, c.attrs, zeros_of_input(c, 0, g), index, g), T()};
}
template <typename T>
std::vector<T> gather_grad(const GradContext<T>& c, const T& g) {
  return {call<T>(OpId::scatter_add, c.attrs, zeros_of_input(c, 0, g), c.in(1), g), T()};
}
// scatter_add(x, dim, index, src): x's gradient passes, src's is gathered at index.
template <typename T>
std::vector<T> scatter_add_grad(const GradContext<T>& c, const T& g) {
  return {g, T(), c.needs(2) ? call<T>(OpId::gather, c.attrs, g, c.in(1)) : T()};
}
// scatter(x, dim, index, src): x's gradient with the written positions zeroed, src's
// gathered at index.
template <typename T>
std::vector<T> scatter_grad(const GradContext<T>& c, const T& g) {
  T gx = c.needs(0) ? call<T>(OpId::scatter, c.attrs, g, c.in(1), zeros_of_input(c, 2, g)) : T();
  return {gx, T(), c.needs(2) ? call<T>(OpId::gather, c.attrs, g, c.in(1)) : T()};
}
// scatter_reduce(x, dim, index, src, reduce, include_self), torch's formulas. written: the
// positions src lands on; x's gradient is zeroed there without include_self.
// sum: x's passes, src's gathered. mean: both divided by the count at the position.
// amax / amin: shared evenly by every value equal to the result there. prod: the product
// of the others (zeros handled as torch does: a zero's gradient is the product of the rest).
template <typename T>
std::vector<T> scatter_reduce_grad(const GradContext<T>& c, const T& g) {
  const T& x = c.in(0);
  const T& index = c.in(1);
  const T& src = c.in(2);
  const OpAttrs d = with_ints({c.attrs.ints[0]});
  const int64_t reduce = c.attrs.ints[1];
  const bool self_in = c.attrs.ints[2] != 0;
  const T zeros = zeros_like(TensorMeta::contiguous(x.dtype(), x.shape()), g);
  const T hits =
      call<T>(OpId::scatter_add, d, zeros, index, src.full_here(src.shape(), 1, x.dtype()));
  const T written = hits.gt(0);
  const auto self_part = [&](const T& gx) { return self_in ? gx : gx.masked_fill(written, 0); };
  T gx, gs;
  if (reduce == 0) {  // sum
    gx = self_part(g);
    gs = call<T>(OpId::gather, d, g, index);
  } else if (reduce == 2) {  // mean
    const T n = self_in ? hits + 1 : hits;
    const T gn = g / n.masked_fill(n.eq(0), 1);
    gx = self_part(gn);
    gs = call<T>(OpId::gather, d, gn, index);
  } else if (reduce == 3 || reduce == 4) {  // amax, amin
    const T& out = c.output;
    const T value = call<T>(OpId::gather, d, out, index);
    const T src_is = src.eq(value).to(x.dtype());
    const T self_is = self_part(x.eq(out).to(x.dtype()));
    const T share = g / call<T>(OpId::scatter_add, d, self_is, index, src_is);
    gx = self_is * share;
    gs = src_is * call<T>(OpId::gather, d, share, index);
  } else {  // prod
    const T masked_self = x.masked_fill(x.eq(0), 1);
    gx = self_part(g * call<T>(OpId::scatter_reduce, c.attrs, masked_self, index, src) /
                   masked_self);
    const T src_zero = src.eq(0);
    const T zeros_at =
        call<T>(OpId::gather, d,
                call<T>(OpId::scatter_add, d, zeros, index, src_zero.to(x.dtype())), index);
    const T single_zero = src_zero.logical_and(zeros_at.eq(1));
    const T without_zero =
        call<T>(OpId::scatter_reduce, c.attrs, x, index, src.masked_fill(single_zero, 1));
    gs = where(single_zero, call<T>(OpId::gather, d, g * without_zero, index),
               call<T>(OpId::gather, d, g * c.output, index) / src.masked_fill(src_zero, 1));
  }
  return {c.needs(0) ? gx : T(), T(), c.needs(2) ? gs : T()};
}

// cumsum: the reversed cumulative sum, sum - cumsum + g.
template <typename T>
std::vector<T> cumsum_grad(const GradContext<T>& c, const T& g) {
  const int64_t dim = c.attrs.ints[0];
  OpAttrs k;
  k.ints = {dim};
  k.keepdim = true;
  return {g.apply(OpId::sum, k, nullptr) - g.apply(OpId::cumsum, c.attrs, nullptr) + g};
}
// topk: the gradient scattered to the positions topk took (recomputed from the saved input).
template <typename T>
std::vector<T> topk_grad(const GradContext<T>& c, const T& g) {
  const T& x = c.in(0);
  T idx = x.apply(OpId::topk_indices, c.attrs, nullptr);
  OpAttrs d;
  d.ints = {wrap_dim("topk", c.attrs.ints.size() > 1 ? c.attrs.ints[1] : -1,
                     std::max<int64_t>(x.dim(), 1))};
  return {call<T>(OpId::scatter_add, d, zeros_of_input(c, 0, g), idx, g)};
}

// constant_pad_nd: the gradient cropped back (the pads negated), with no value.
template <typename T>
T constant_pad_grad(const GradContext<T>& c, const T& g) {
  OpAttrs a;
  for (int64_t p : c.attrs.ints) a.ints.push_back(-p);
  return g.apply(OpId::constant_pad_nd, a, nullptr);
}

// layer_norm(x, w, b): the input gradient and the weight's are ops of their own (the row
// statistics recomputed from x); the bias's is g summed over the rows.
template <typename T>
std::vector<T> layer_norm_grad(const GradContext<T>& c, const T& g) {
  const T &x = c.in(0), &w = c.in(1);
  std::vector<T> out(3);
  if (c.needs(0)) out[0] = call<T>(OpId::layer_norm_backward, c.attrs, g, x, w);
  if (c.needs(1)) out[1] = call<T>(OpId::layer_norm_weight_grad, c.attrs, g, x, w);
  if (c.needs(2)) {
    Dims rows;
    for (int64_t i = 0; i < g.dim() - w.dim(); ++i) rows.push_back(i);
    out[2] = rows.empty() ? g : g.apply(OpId::sum, with_ints(rows), nullptr);
  }
  return out;
}

// linear(x, w, b): x (..., in), w (out, in).
template <typename T>
std::vector<T> linear_grad(const GradContext<T>& c, const T& g) {
  const T& x = c.in(0);
  const T& w = c.in(1);
  std::vector<T> r(c.metas.size());
  if (c.needs(0)) r[0] = g.matmul(w);
  if (c.needs(1)) {
    const int64_t out = w.shape()[0], in = w.shape()[1];
    r[1] = g.reshape({-1, out}).t().matmul(x.reshape({-1, in}));
  }
  if (c.metas.size() > 2 && c.needs(2)) r[2] = sum_to(g, c.meta(2).shape);
  return r;
}

// conv2d(x, w, b; stride, padding, dilation, groups as attrs.ints).
template <typename T>
std::vector<T> conv2d_grad(const GradContext<T>& c, const T& g) {
  const TensorMeta& xm = c.meta(0);
  const TensorMeta& wm = c.meta(1);
  const size_t h = static_cast<size_t>(xm.dim() - 2);
  std::vector<T> r(c.metas.size());
  if (c.needs(0)) {
    Dims ints{xm.shape[h], xm.shape[h + 1]};
    for (int64_t v : c.attrs.ints) ints.push_back(v);
    r[0] = call<T>(OpId::conv2d_input_grad, with_ints(ints), g, c.in(1));
  }
  if (c.needs(1)) {
    Dims ints{wm.shape[2], wm.shape[3]};
    for (int64_t v : c.attrs.ints) ints.push_back(v);
    r[1] = call<T>(OpId::conv2d_weight_grad, with_ints(ints), g, c.in(0));
  }
  if (c.metas.size() > 2 && c.needs(2)) {
    OpAttrs s;
    s.ints = xm.dim() == 4 ? Dims{0, 2, 3} : Dims{1, 2};
    r[2] = g.apply(OpId::sum, s, nullptr);
  }
  return r;
}

template <typename T>
std::vector<T> max_pool2d_grad(const GradContext<T>& c, const T& g) {
  const TensorMeta& xm = c.meta(0);
  const size_t h = static_cast<size_t>(xm.dim() - 2);
  T idx = c.in(0).apply(OpId::max_pool2d_indices, c.attrs, nullptr);
  return {call<T>(OpId::max_pool2d_backward, with_ints({xm.shape[h], xm.shape[h + 1]}), g, idx)};
}

template <typename T>
std::vector<T> avg_pool2d_grad(const GradContext<T>& c, const T& g) {
  const TensorMeta& xm = c.meta(0);
  const size_t h = static_cast<size_t>(xm.dim() - 2);
  OpAttrs a = c.attrs;
  a.ints = {xm.shape[h], xm.shape[h + 1]};
  for (int64_t v : c.attrs.ints) a.ints.push_back(v);
  return {g.apply(OpId::avg_pool2d_backward, a, nullptr)};
}

// nll_loss(x, target, weight?): x's gradient only.
template <typename T>
std::vector<T> nll_loss_grad(const GradContext<T>& c, const T& g) {
  std::vector<T> r(c.metas.size());
  if (c.metas.size() > 2)
    r[0] = call<T>(OpId::nll_loss_backward, c.attrs, g, c.in(0), c.in(1), c.in(2));
  else
    r[0] = call<T>(OpId::nll_loss_backward, c.attrs, g, c.in(0), c.in(1));
  return r;
}

}  // namespace dtr::autograd
