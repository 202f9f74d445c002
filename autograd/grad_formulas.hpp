// The longer derivative formulas of derivatives.cpp (reductions, norms, moments, matrix
// products, slices), generic over the tensor type. Each returns one gradient per tensor
// input of the op, undefined where the input needs none.
//
// Thread safety: plain functions.
#pragma once

#include <cmath>
#include <vector>

#include "autograd/derivatives.hpp"
#include "autograd/tensor_traits.hpp"

namespace dtr::autograd {

// The dims a Reduce, Norm or Moment call reduced: attrs.ints wrapped, ascending; every dim
// when attrs.ints is empty.
Dims reduced_dims(const OpAttrs& attrs, int64_t ndim, std::string_view op);

// A condition (a bool tensor) as 0/1 of `dtype`.
template <typename T>
T mask(const T& cond, DType dtype) {
  return cond.to(dtype);
}
// -1, 0 or 1 elementwise, in x's dtype.
template <typename T>
T sign_of(const T& x) {
  return mask(x > 0, x.dtype()) - mask(x < 0, x.dtype());
}
// x with its zeros replaced by ones (a divisor or a log argument that is safe to use where
// the result is multiplied by zero anyway).
template <typename T>
T ones_for_zeros(const T& x) {
  return x + mask(x == 0, x.dtype());
}

// Binary ops: the scalar operand (when !c.tensor_operand()).
template <typename T>
Scalar operand(const GradContext<T>& c) {
  return c.attrs.scalars[0];
}

template <typename T>
std::vector<T> mul_grad(const GradContext<T>& c, const T& g) {
  if (!c.tensor_operand()) return {g * operand(c)};
  return {c.needs(0) ? g * c.in(1) : T(), c.needs(1) ? g * c.in(0) : T()};
}

template <typename T>
std::vector<T> div_grad(const GradContext<T>& c, const T& g) {
  const T& a = c.in(0);
  if (!c.tensor_operand()) {
    if (!c.attrs.scalar_first) return {g / operand(c)};
    return {-(g * operand(c)) / (a * a)};  // d(s / x) = -s / x^2
  }
  const T& b = c.in(1);
  return {c.needs(0) ? g / b : T(), c.needs(1) ? -(g * a) / (b * b) : T()};
}

// remainder (floor) and fmod (trunc): the dividend's gradient passes unchanged, the
// divisor's is -g * floor(a / b) (trunc(a / b) for fmod), torch's formulas.
template <typename T>
std::vector<T> modulo_grad(const GradContext<T>& c, const T& g, bool floor) {
  const T& a = c.in(0);
  auto rounded = [floor](const T& q) { return floor ? q.floor() : q.trunc(); };
  if (!c.tensor_operand()) {
    if (!c.attrs.scalar_first) return {g};
    return {-(g * rounded(operand(c) / a))};  // the scalar divided by a
  }
  const T& b = c.in(1);
  return {c.needs(0) ? g : T(), c.needs(1) ? -(g * rounded(a / b)) : T()};
}

// floor_divide, trunc_divide: piecewise constant, so zero gradients (as torch's div with a
// rounding mode), of each tensor operand's shape.
template <typename T>
std::vector<T> rounded_division_grad(const GradContext<T>& c, const T& g) {
  std::vector<T> out{zeros_like(TensorMeta::contiguous(c.meta(0).dtype, c.meta(0).shape), g)};
  if (c.tensor_operand())
    out.push_back(zeros_like(TensorMeta::contiguous(c.meta(1).dtype, c.meta(1).shape), g));
  return out;
}

// atan2(a, b): a's gradient is g * b / (a^2 + b^2), b's is -g * a / (a^2 + b^2).
template <typename T>
std::vector<T> atan2_grad(const GradContext<T>& c, const T& g) {
  const T& a = c.in(0);
  if (!c.tensor_operand()) {
    const double s = operand(c).template to<double>();
    if (!c.attrs.scalar_first) return {g * s / (a * a + s * s)};  // atan2(a, s)
    return {-(g * s) / (a * a + s * s)};                          // atan2(s, a)
  }
  const T& b = c.in(1);
  const T denominator = a * a + b * b;
  return {c.needs(0) ? g * b / denominator : T(), c.needs(1) ? -(g * a) / denominator : T()};
}

// pow: an exponent of 0 gives 0 for the base (not 0 * inf at x = 0); a base of 0 gives 0 for
// the exponent (torch's choice where x^b is 0 or 1). A scalar base s: out * ln s (0 for
// s = 0).
template <typename T>
std::vector<T> pow_grad(const GradContext<T>& c, const T& g) {
  const T& x = c.in(0);
  if (!c.tensor_operand()) {
    const double s = operand(c).template to<double>();
    if (c.attrs.scalar_first) return {s == 0 ? g * 0.0 : g * c.output * std::log(s)};
    if (s == 0) return {g * 0.0};
    return {g * s * x.pow(s - 1)};
  }
  const T& b = c.in(1);
  return {c.needs(0) ? g * b * x.pow(b - 1.0 + mask(b == 0, b.dtype())) : T(),
          c.needs(1) ? g * c.output * ones_for_zeros(x).log() : T()};
}

// maximum (larger) / minimum: the gradient goes to the operand that was taken, half to each
// on a tie.
template <typename T>
std::vector<T> extremum_grad(const GradContext<T>& c, const T& g, bool larger) {
  const T& a = c.in(0);
  const DType dt = g.dtype();
  T to_a;
  if (c.tensor_operand()) {
    const T& b = c.in(1);
    to_a = mask(larger ? a > b : a < b, dt) + mask(a == b, dt) * 0.5;
  } else {
    to_a = mask(larger ? a > operand(c) : a < operand(c), dt) + mask(a == operand(c), dt) * 0.5;
  }
  if (!c.tensor_operand()) return {g * to_a};
  return {c.needs(0) ? g * to_a : T(), c.needs(1) ? g * (1.0 - to_a) : T()};
}

// clamp: the gradient passes where min <= x <= max (an open bound passes everything; NaN
// passes nothing).
template <typename T>
std::vector<T> clamp_grad(const GradContext<T>& c, const T& g) {
  const T& x = c.in(0);
  T m = mask(x == x, g.dtype());
  if (!c.attrs.scalars[0].is_none()) m = m * mask(x >= c.attrs.scalars[0], g.dtype());
  if (!c.attrs.scalars[1].is_none()) m = m * mask(x <= c.attrs.scalars[1], g.dtype());
  return {g * m};
}

// `r`, shaped like a reduction's output, unsqueezed at the reduced dims (unless keepdim)
// and expanded to the input's shape.
template <typename T>
T expand_back(const T& r, const GradContext<T>& c) {
  const TensorMeta& in = c.meta(0);
  T x = r;
  if (!c.attrs.keepdim && !c.attrs.ints.empty())
    for (int64_t d : reduced_dims(c.attrs, in.dim(), op_def(c.op).name)) x = x.unsqueeze(d);
  return x.expand(in.shape);
}
// The call's attributes with keepdim on (a reduction over the same dims).
inline OpAttrs keepdim_attrs(const OpAttrs& a) {
  OpAttrs k;
  k.ints = a.ints;
  k.keepdim = true;
  return k;
}
// How many elements each output element reduced.
template <typename T>
double reduced_count(const GradContext<T>& c) {
  int64_t out = c.out_meta.numel();
  return out == 0 ? 1.0 : static_cast<double>(c.meta(0).numel()) / static_cast<double>(out);
}

// prod: d/dx_i = prod_{j != i} x_j, also where x has zeros: with P the product of the
// nonzero elements and Z the count of zeros of each reduced row, nonzero x_i get P / x_i
// when Z == 0 (else 0), and a zero gets P when it is the row's only zero (else 0).
template <typename T>
std::vector<T> prod_grad(const GradContext<T>& c, const T& g) {
  const T& x = c.in(0);
  const DType dt = x.dtype();
  const OpAttrs k = keepdim_attrs(c.attrs);
  T nonzero = mask(x != 0, dt);
  T p = ones_for_zeros(x).apply(OpId::prod, k, nullptr);
  T zeros = (1.0 - nonzero).apply(OpId::sum, k, nullptr);
  T ge = expand_back(g, c);
  T at_nonzero = nonzero * mask(zeros == 0, dt) * p / ones_for_zeros(x);
  T at_zero = (1.0 - nonzero) * mask(zeros == 1, dt) * p;
  return {ge * (at_nonzero + at_zero)};
}

// max, min over dims: the gradient is shared evenly among the elements equal to the result.
template <typename T>
std::vector<T> select_reduce_grad(const GradContext<T>& c, const T& g) {
  const T& x = c.in(0);
  T hit = mask(x == expand_back(c.output, c), x.dtype());
  T count = hit.apply(OpId::sum, keepdim_attrs(c.attrs), nullptr);
  return {expand_back(g, c) * hit / count};
}

// norm(p) over dims (p = attrs.scalars[0], 2 when not given).
template <typename T>
std::vector<T> norm_grad(const GradContext<T>& c, const T& g) {
  const Scalar& ps = c.attrs.scalars[0];
  const double p = ps.is_none() ? 2.0 : ps.to<double>();
  const T& x = c.in(0);
  const DType dt = x.dtype();
  if (p == 0) return {zeros_like(TensorMeta::contiguous(dt, x.shape()), x)};
  T ge = expand_back(g, c);
  if (p == 1) return {ge * sign_of(x)};
  T n = expand_back(c.output, c);
  if (std::isinf(p)) {
    T hit = mask(x.abs() == n, dt);
    T count = hit.apply(OpId::sum, keepdim_attrs(c.attrs), nullptr);
    return {ge * sign_of(x) * hit / count};
  }
  T safe_n = ones_for_zeros(n);  // a zero norm means a zero row: its gradient is 0
  if (p == 2) return {ge * x / safe_n};
  return {ge * sign_of(x) * ones_for_zeros(x.abs()).pow(p - 1) / safe_n.pow(p - 1)};
}

// var and std over dims with `correction` (attrs.scalars[0], 1 when not given).
template <typename T>
std::vector<T> moment_grad(const GradContext<T>& c, const T& g) {
  const Scalar& cs = c.attrs.scalars[0];
  const double correction = cs.is_none() ? 1.0 : cs.to<double>();
  const double dof = reduced_count(c) - correction;
  const T& x = c.in(0);
  T centered = x - x.apply(OpId::mean, keepdim_attrs(c.attrs), nullptr);
  T ge = expand_back(g, c);
  if (c.op == OpId::var) return {ge * centered * (2.0 / dof)};
  T s = ones_for_zeros(expand_back(c.output, c));  // std 0: every element equals the mean
  return {ge * centered / (s * dof)};
}

// matmul with torch's rules: 1-D operands get a dim of 1 (dropped from the result),
// batch dims broadcast (their gradients are summed back).
template <typename T>
std::vector<T> matmul_grad(const GradContext<T>& c, const T& g) {
  const T& a = c.in(0);
  const T& b = c.in(1);
  if (a.dim() == 1 && b.dim() == 1) return {c.needs(0) ? g * b : T(), c.needs(1) ? g * a : T()};
  T a2 = a.dim() == 1 ? a.unsqueeze(0) : a;
  T b2 = b.dim() == 1 ? b.unsqueeze(1) : b;
  T g2 = g;
  if (a.dim() == 1) g2 = g2.unsqueeze(g2.dim() - 1);
  if (b.dim() == 1) g2 = g2.unsqueeze(g2.dim());
  std::vector<T> r(2);
  if (c.needs(0)) {
    T ga = g2.matmul(b2.transpose(b2.dim() - 2, b2.dim() - 1));
    r[0] = sum_to(ga, a2.shape()).reshape(a.shape());
  }
  if (c.needs(1)) {
    T gb = a2.transpose(a2.dim() - 2, a2.dim() - 1).matmul(g2);
    r[1] = sum_to(gb, b2.shape()).reshape(b.shape());
  }
  return r;
}

// narrow, slice, select: the gradient written into zeros of the input's shape, through the
// same view.
template <typename T>
std::vector<T> view_into_zeros(const GradContext<T>& c, const T& g) {
  T z = zeros_like(TensorMeta::contiguous(c.meta(0).dtype, c.meta(0).shape), g);
  T part = z.apply(c.op, c.attrs, nullptr);
  part.copy_(g);
  return {z};
}

// permute: the inverse permutation.
template <typename T>
std::vector<T> permute_grad(const GradContext<T>& c, const T& g) {
  const int64_t n = c.meta(0).dim();
  Dims inverse(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i)
    inverse[static_cast<size_t>(wrap_dim("permute", c.attrs.ints[static_cast<size_t>(i)], n))] = i;
  return {g.permute(inverse)};
}

}  // namespace dtr::autograd
