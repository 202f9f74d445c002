// The shape and dtype rules of the Join, Indexing and NN ops (tensor/op_rules.hpp), and the
// reading of the conv/pool attributes (tensor/nn_params.hpp). Pure metadata.
#include "tensor/op_rules.hpp"

#include <cmath>

#include "tensor/check.hpp"
#include "tensor/nn_params.hpp"

namespace dtr::detail {

namespace {

InferResult result(DType dtype, const Shape& shape) {
  InferResult r{TensorMeta::contiguous(dtype, shape), false};
  r.computed_dtype = dtype;
  return r;
}

void need_float(const OpDef& d, const char* what, const TensorMeta& m) {
  if (!is_floating(m.dtype))
    fail<DTypeError>(d.name, "expected a floating point {}, got {} ({})", what, m.dtype,
                     describe(m));
}

void need_same_dtype(const OpDef& d, const char* a, const TensorMeta& x, const char* b,
                     const TensorMeta& y) {
  if (x.dtype != y.dtype)
    fail<DTypeError>(d.name, "expected {} and {} of one dtype, got {} and {}", a, b, x.dtype,
                     y.dtype);
}

void need_dtype(const OpDef& d, const char* what, const TensorMeta& m, DType want) {
  if (m.dtype != want)
    fail<DTypeError>(d.name, "expected {} of dtype {}, got {} ({})", what, want, m.dtype,
                     describe(m));
}

void need_index(const OpDef& d, const char* what, const TensorMeta& m) {
  if (m.dtype != DType::Int64 && m.dtype != DType::Int32)
    fail<DTypeError>(d.name, "expected {} of an integer dtype (int64 or int32), got {}", what,
                     m.dtype);
}

void need_ints(const OpDef& d, const OpAttrs& a, size_t n) {
  if (a.ints.size() != n)
    fail<InvalidArgument>(d.name, "expects {} int attributes (its parameters: {}), got {}", n,
                          d.usage, a.ints);
}

// The flag at ints[i]: 0 or 1.
bool flag_at(const OpDef& d, const OpAttrs& a, size_t i) {
  if (a.ints[i] != 0 && a.ints[i] != 1)
    fail<InvalidArgument>(d.name, "a flag attribute must be 0 or 1, got {} (attributes {})",
                          a.ints[i], a.ints);
  return a.ints[i] == 1;
}

// Each of kernel size, stride, padding and dilation at most kMaxWindowAttr (a crafted
// message overflowed (k - 1) * d).
void check_axis_bounds(const OpDef& d, const Axis& x, const OpAttrs& a) {
  if (x.k > kMaxWindowAttr || x.s > kMaxWindowAttr || x.p > kMaxWindowAttr || x.d > kMaxWindowAttr)
    fail<InvalidArgument>(d.name,
                          "kernel size, stride, padding and dilation must be at most {}, got "
                          "{}, {}, {} and {} ({})",
                          kMaxWindowAttr, x.k, x.s, x.p, x.d, a.ints);
}

Axis axis(const OpDef& d, const OpAttrs& a, size_t k, size_t s, size_t p, size_t dil) {
  Axis x{k == SIZE_MAX ? 1 : a.ints[k], a.ints[s], a.ints[p], dil == SIZE_MAX ? 1 : a.ints[dil]};
  if (x.k <= 0) fail<InvalidArgument>(d.name, "kernel size must be positive, got {}", a.ints);
  if (x.s <= 0) fail<InvalidArgument>(d.name, "stride must be positive, got {}", a.ints);
  if (x.p < 0) fail<InvalidArgument>(d.name, "padding must be non-negative, got {}", a.ints);
  if (x.d <= 0) fail<InvalidArgument>(d.name, "dilation must be positive, got {}", a.ints);
  check_axis_bounds(d, x, a);
  return x;
}

}  // namespace

Conv2dArgs conv2d_args(const OpDef& d, const OpAttrs& a, size_t at) {
  if (a.ints.size() != at + 7) need_ints(d, a, at + 7);
  Conv2dArgs c;
  c.h = axis(d, a, SIZE_MAX, at, at + 2, at + 4);
  c.w = axis(d, a, SIZE_MAX, at + 1, at + 3, at + 5);
  c.groups = a.ints[at + 6];
  if (c.groups <= 0) fail<InvalidArgument>(d.name, "groups must be positive, got {}", c.groups);
  return c;
}

namespace {
// Pooling strides of 0, 0 (left out) are the kernel size.
void default_stride(OpAttrs& a, size_t at) {
  if (a.ints[at + 2] == 0 && a.ints[at + 3] == 0) {
    a.ints[at + 2] = a.ints[at];
    a.ints[at + 3] = a.ints[at + 1];
  }
}
void check_pool_padding(const OpDef& d, const Pool2dArgs& p) {
  // torch's rule: the padding is at most half the kernel's extent.
  if (p.h.p > p.h.extent() / 2 || p.w.p > p.w.extent() / 2)
    fail<InvalidArgument>(d.name,
                          "padding ({}, {}) must be at most half the kernel's extent ({}, {})",
                          p.h.p, p.w.p, p.h.extent(), p.w.extent());
}
}  // namespace

Pool2dArgs max_pool2d_args(const OpDef& d, const OpAttrs& attrs, size_t at) {
  if (attrs.ints.size() != at + 9) need_ints(d, attrs, at + 9);
  OpAttrs a = attrs;
  default_stride(a, at);
  Pool2dArgs p;
  p.h = axis(d, a, at, at + 2, at + 4, at + 6);
  p.w = axis(d, a, at + 1, at + 3, at + 5, at + 7);
  p.ceil_mode = flag_at(d, a, at + 8);
  check_pool_padding(d, p);
  return p;
}

Pool2dArgs avg_pool2d_args(const OpDef& d, const OpAttrs& attrs, size_t at) {
  if (attrs.ints.size() != at + 8) need_ints(d, attrs, at + 8);
  OpAttrs a = attrs;
  default_stride(a, at);
  Pool2dArgs p;
  p.h = axis(d, a, at, at + 2, at + 4, SIZE_MAX);
  p.w = axis(d, a, at + 1, at + 3, at + 5, SIZE_MAX);
  p.ceil_mode = flag_at(d, a, at + 6);
  p.count_include_pad = flag_at(d, a, at + 7);
  check_pool_padding(d, p);
  if (!a.scalars[0].is_none()) {
    p.has_divisor = true;
    p.divisor = a.scalars[0].to_double();
    if (p.divisor == 0 || !std::isfinite(p.divisor))
      fail<InvalidArgument>(d.name, "divisor_override must be finite and non-zero, got {}",
                            a.scalars[0].to_string());
  }
  return p;
}

// ---- Join ----

namespace {

InferResult infer_cat(const OpDef& d, std::span<const TensorMeta> in, const OpAttrs& a) {
  const TensorMeta* first = nullptr;
  DType dtype = in[0].dtype;
  for (const TensorMeta& m : in) dtype = promote_types(dtype, m.dtype);
  for (const TensorMeta& m : in)
    if (!cat_skips(m)) {
      first = &m;
      break;
    }
  if (!first) return result(dtype, {0});
  if (first->dim() == 0)
    fail<ShapeError>(d.name, "zero-dimensional tensor {} cannot be concatenated", describe(*first));
  const int64_t dim = wrap_dim(d.name, a.ints[0], first->dim());
  Shape shape = first->shape;
  shape[dim] = 0;
  for (size_t i = 0; i < in.size(); ++i) {
    const TensorMeta& m = in[i];
    if (cat_skips(m)) continue;
    bool fits = m.dim() == first->dim();
    for (int64_t j = 0; fits && j < m.dim(); ++j) fits = j == dim || m.shape[j] == first->shape[j];
    if (!fits)
      fail<ShapeError>(d.name,
                       "tensor {} has shape {}, expected {} but for dim {} (the shape of the "
                       "first tensor)",
                       i, m.shape, first->shape, dim);
    shape[dim] += m.shape[dim];
  }
  return result(dtype, shape);
}

InferResult infer_stack(const OpDef& d, std::span<const TensorMeta> in, const OpAttrs& a) {
  DType dtype = in[0].dtype;
  for (size_t i = 0; i < in.size(); ++i) {
    dtype = promote_types(dtype, in[i].dtype);
    if (!(in[i].shape == in[0].shape))
      fail<ShapeError>(d.name, "expects tensors of one shape, got {} (tensor 0) and {} (tensor {})",
                       in[0].shape, in[i].shape, i);
  }
  const int64_t dim = wrap_dim(d.name, a.ints[0], in[0].dim() + 1);
  Shape shape = in[0].shape;
  shape.insert(static_cast<size_t>(dim), static_cast<int64_t>(in.size()));
  return result(dtype, shape);
}

}  // namespace

InferResult infer_join(const OpDef& d, std::span<const TensorMeta> in, const OpAttrs& a) {
  need_ints(d, a, 1);
  return d.id == OpId::cat ? infer_cat(d, in, a) : infer_stack(d, in, a);
}

// ---- Indexing ----

namespace {

InferResult infer_where(const OpDef& d, std::span<const TensorMeta> in) {
  need_dtype(d, "a condition", in[0], DType::Bool);
  Shape shape = broadcast_shapes(d.name, in[0].shape, in[1].shape);
  shape = broadcast_shapes(d.name, shape, in[2].shape);
  return result(promote_types(in[1].dtype, in[2].dtype), shape);
}

InferResult infer_masked_fill(const OpDef& d, std::span<const TensorMeta> in, const OpAttrs& a) {
  need_dtype(d, "a mask", in[1], DType::Bool);
  if (a.scalars[0].is_none()) fail<InvalidArgument>(d.name, "needs a fill value");
  if (!(broadcast_shapes(d.name, in[0].shape, in[1].shape) == in[0].shape))
    fail<ShapeError>(d.name, "mask of shape {} does not broadcast to x's shape {}", in[1].shape,
                     in[0].shape);
  return result(in[0].dtype, in[0].shape);
}

// gather and scatter_add: index has x's number of dims and fits `bound` but along dim.
void check_index_shape(const OpDef& d, const TensorMeta& x, const TensorMeta& index,
                       const TensorMeta& bound, const char* bound_name, int64_t dim) {
  need_dtype(d, "an index", index, DType::Int64);
  if (index.dim() != x.dim())
    fail<ShapeError>(d.name, "index of shape {} must have as many dims as x of shape {}",
                     index.shape, x.shape);
  for (int64_t j = 0; j < x.dim(); ++j) {
    if (j != dim && index.shape[j] > x.shape[j])
      fail<ShapeError>(d.name, "index of shape {} is larger than x of shape {} at dim {}",
                       index.shape, x.shape, j);
    if (index.shape[j] > bound.shape[j])
      fail<ShapeError>(d.name, "index of shape {} is larger than {} of shape {} at dim {}",
                       index.shape, bound_name, bound.shape, j);
  }
}

InferResult infer_select_like(const OpDef& d, std::span<const TensorMeta> in, const OpAttrs& a) {
  const TensorMeta& x = in[0];
  const int64_t dim = wrap_dim(d.name, a.ints[0], x.dim());
  switch (d.id) {
    case OpId::index_select: {
      need_index(d, "an index", in[1]);
      if (in[1].dim() > 1)
        fail<ShapeError>(d.name, "expects a 1-D index, got shape {}", in[1].shape);
      if (x.dim() == 0) fail<ShapeError>(d.name, "cannot select from a 0-d tensor");
      Shape shape = x.shape;
      shape[dim] = in[1].numel();
      return result(x.dtype, shape);
    }
    case OpId::gather:
      check_index_shape(d, x, in[1], x, "x", dim);
      return result(x.dtype, in[1].shape);
    default:  // scatter_add
      need_same_dtype(d, "x", x, "src", in[2]);
      if (in[2].dim() != x.dim())
        fail<ShapeError>(d.name, "src of shape {} must have as many dims as x of shape {}",
                         in[2].shape, x.shape);
      check_index_shape(d, x, in[1], in[2], "src", dim);
      return result(x.dtype, x.shape);
  }
}

InferResult infer_topk(const OpDef& d, const TensorMeta& x, const OpAttrs& a) {
  need_ints(d, a, 4);
  flag_at(d, a, 2);
  flag_at(d, a, 3);
  if (x.dtype == DType::Bool) fail<DTypeError>(d.name, "not supported for bool tensors");
  const int64_t dim = wrap_dim(d.name, a.ints[1], x.dim());
  const int64_t size = x.dim() == 0 ? 1 : x.shape[dim];
  if (a.ints[0] < 0 || a.ints[0] > size)
    fail<IndexError>(d.name, "k {} is out of range for dim {} of size {} (shape {})", a.ints[0],
                     dim, size, x.shape);
  Shape shape = x.shape;
  if (x.dim() > 0) shape[dim] = a.ints[0];
  return result(d.id == OpId::topk ? x.dtype : DType::Int64, shape);
}

}  // namespace

InferResult infer_indexing(const OpDef& d, std::span<const TensorMeta> in, const OpAttrs& a) {
  const TensorMeta& x = in[0];
  switch (d.id) {
    case OpId::where:
      return infer_where(d, in);
    case OpId::masked_fill:
      return infer_masked_fill(d, in, a);
    case OpId::cumsum:
      need_ints(d, a, 1);
      wrap_dim(d.name, a.ints[0], x.dim());
      return result(is_floating(x.dtype) ? x.dtype : DType::Int64, x.shape);
    case OpId::one_hot: {
      need_ints(d, a, 1);
      need_dtype(d, "an index tensor", x, DType::Int64);
      if (a.ints[0] < 0)
        fail<InvalidArgument>(d.name,
                              "num_classes must be given (>= 0, got {}): the result's shape "
                              "cannot depend on the values, it is known before the op runs",
                              a.ints[0]);
      Shape shape = x.shape;
      shape.push_back(a.ints[0]);
      return result(DType::Int64, shape);
    }
    case OpId::topk:
    case OpId::topk_indices:
      return infer_topk(d, x, a);
    case OpId::sort_indices: {
      need_ints(d, a, 2);
      flag_at(d, a, 1);
      wrap_dim(d.name, a.ints[0], x.dim());
      return result(DType::Int64, x.shape);
    }
    case OpId::flip: {
      std::array<bool, kMaxDims> seen{};
      for (int64_t dim : a.ints) {
        const auto k = static_cast<size_t>(wrap_dim(d.name, dim, x.dim()));
        if (seen[k]) fail<InvalidArgument>(d.name, "dim {} appears twice in dims {}", k, a.ints);
        seen[k] = true;
      }
      return result(x.dtype, x.shape);
    }
    case OpId::constant_pad_nd: {
      if (a.ints.size() % 2 != 0 || static_cast<int64_t>(a.ints.size()) > 2 * x.dim())
        fail<InvalidArgument>(d.name,
                              "pad must have an even length of at most 2 * {} (two per dim of "
                              "x {}), got {}",
                              x.dim(), x.shape, a.ints);
      Shape shape = x.shape;
      for (size_t i = 0; i < a.ints.size() / 2; ++i) {
        const size_t dim = shape.size() - 1 - i;
        const int64_t before = a.ints[2 * i], after = a.ints[2 * i + 1];
        const int64_t limit = std::numeric_limits<int64_t>::max() / 4;
        if (std::abs(before) > limit || std::abs(after) > limit)
          fail<InvalidArgument>(d.name, "pad {} is out of range", a.ints);
        const int64_t size = shape[dim] + before + after;
        if (size < 0)
          fail<ShapeError>(d.name, "pad {} makes dim {} of x {} negative ({})", a.ints, dim,
                           x.shape, size);
        shape[dim] = size;
      }
      return result(x.dtype, shape);
    }
    case OpId::tril:
    case OpId::triu:
      need_ints(d, a, 1);
      if (x.dim() < 2)
        fail<ShapeError>(d.name,
                         "expected a tensor of at least 2 dims (matrices in the last two), got "
                         "shape {}",
                         x.shape);
      return result(x.dtype, x.shape);
    case OpId::scatter_reduce:
      need_ints(d, a, 3);
      if (a.ints[1] < 0 || a.ints[1] > 4)
        fail<InvalidArgument>(d.name,
                              "reduce must be 0 (sum), 1 (prod), 2 (mean), 3 (amax) or 4 (amin), "
                              "got {}",
                              a.ints[1]);
      flag_at(d, a, 2);
      if (x.dtype == DType::Bool) fail<DTypeError>(d.name, "is not defined for bool tensors");
      return infer_select_like(d, in, a);
    default:
      need_ints(d, a, 1);
      return infer_select_like(d, in, a);
  }
}

// ---- NN ----

namespace {

// The (C, H, W) or (N, C, H, W) input of a window op: its planes' shape.
void need_planes(const OpDef& d, const char* what, const TensorMeta& m) {
  if (m.dim() != 3 && m.dim() != 4)
    fail<ShapeError>(d.name, "expected {} of 3 dims (C, H, W) or 4 (N, C, H, W), got shape {}",
                     what, m.shape);
}

// `shape` with its last two sizes replaced.
Shape with_plane(Shape shape, int64_t h, int64_t w) {
  shape[shape.size() - 2] = h;
  shape[shape.size() - 1] = w;
  return shape;
}

void check_out_size(const OpDef& d, const TensorMeta& x, int64_t oh, int64_t ow) {
  if (oh <= 0 || ow <= 0)
    fail<ShapeError>(d.name,
                     "output size would be {}x{}: the input {} is too small for the kernel, "
                     "stride, padding and dilation {}",
                     oh, ow, x.shape, d.usage);
}

InferResult infer_linear(const OpDef& d, std::span<const TensorMeta> in) {
  const TensorMeta &x = in[0], &w = in[1];
  need_float(d, "x", x);
  need_same_dtype(d, "x", x, "weight", w);
  if (w.dim() != 2 || x.dim() < 1 || x.shape[x.dim() - 1] != w.shape[1])
    fail<ShapeError>(d.name, "expected x (..., in) and weight (out, in), got shapes {} and {}",
                     x.shape, w.shape);
  if (in.size() == 3) {
    need_same_dtype(d, "x", x, "bias", in[2]);
    if (in[2].dim() != 1 || in[2].shape[0] != w.shape[0])
      fail<ShapeError>(d.name, "expected bias of shape [{}] for weight {}, got {}", w.shape[0],
                       w.shape, in[2].shape);
  }
  Shape shape = x.shape;
  shape[shape.size() - 1] = w.shape[0];
  return result(x.dtype, shape);
}

// conv2d's weight against the C input channels of `x` (the input, or the gradient):
// (Cout, C / groups, kh, kw).
void check_weight(const OpDef& d, const TensorMeta& w, const TensorMeta& x, int64_t c,
                  int64_t groups) {
  if (w.dim() != 4)
    fail<ShapeError>(d.name, "expected a weight of 4 dims (out, in/groups, kh, kw) for {}, got {}",
                     x.shape, w.shape);
  if (c % groups != 0 || w.shape[0] % groups != 0 || w.shape[1] != c / groups)
    fail<ShapeError>(d.name,
                     "weight {} with groups {} does not fit {} input channels of {} (expected "
                     "in/groups = {} and out divisible by groups)",
                     w.shape, groups, c, x.shape, groups > 0 ? c / groups : 0);
}

InferResult infer_conv2d(const OpDef& d, std::span<const TensorMeta> in, const OpAttrs& a) {
  const TensorMeta &x = in[0], &w = in[1];
  Conv2dArgs c = conv2d_args(d, a, 0);
  need_float(d, "x", x);
  need_same_dtype(d, "x", x, "weight", w);
  need_planes(d, "x", x);
  check_weight(d, w, x, x.shape[x.dim() - 3], c.groups);
  if (in.size() == 3) {
    need_same_dtype(d, "x", x, "bias", in[2]);
    if (in[2].dim() != 1 || in[2].shape[0] != w.shape[0])
      fail<ShapeError>(d.name, "expected bias of shape [{}] for weight {}, got {}", w.shape[0],
                       w.shape, in[2].shape);
  }
  c.h.k = w.shape[2];
  c.w.k = w.shape[3];
  check_axis_bounds(d, c.h, a);
  check_axis_bounds(d, c.w, a);
  const int64_t oh = conv_out_size(x.shape[x.dim() - 2], c.h);
  const int64_t ow = conv_out_size(x.shape[x.dim() - 1], c.w);
  check_out_size(d, x, oh, ow);
  Shape shape = with_plane(x.shape, oh, ow);
  shape[shape.size() - 3] = w.shape[0];
  return result(x.dtype, shape);
}

// conv2d_input_grad (grad, weight) and conv2d_weight_grad (grad, x).
InferResult infer_conv2d_grad(const OpDef& d, std::span<const TensorMeta> in, const OpAttrs& a) {
  const TensorMeta &g = in[0], &other = in[1];
  Conv2dArgs c = conv2d_args(d, a, 2);
  need_float(d, "grad", g);
  need_same_dtype(d, "grad", g, d.id == OpId::conv2d_input_grad ? "weight" : "x", other);
  need_planes(d, "grad", g);
  const int64_t cout = g.shape[g.dim() - 3];
  int64_t ih, iw, cin;
  Shape out;
  if (d.id == OpId::conv2d_input_grad) {
    ih = a.ints[0];
    iw = a.ints[1];
    if (other.dim() != 4 || other.shape[0] != cout)
      fail<ShapeError>(d.name, "weight {} does not fit grad {} ({} output channels)", other.shape,
                       g.shape, cout);
    if (__builtin_mul_overflow(other.shape[1], c.groups, &cin))
      fail<ShapeError>(d.name, "weight {} with {} groups: the input channels overflow", other.shape,
                       c.groups);
    check_weight(d, other, g, cin, c.groups);
    c.h.k = other.shape[2];
    c.w.k = other.shape[3];
    out = with_plane(g.shape, ih, iw);
    out[out.size() - 3] = cin;
  } else {
    need_planes(d, "x", other);
    if (other.dim() != g.dim() || (g.dim() == 4 && other.shape[0] != g.shape[0]))
      fail<ShapeError>(d.name, "x {} and grad {} differ in their batch", other.shape, g.shape);
    cin = other.shape[other.dim() - 3];
    ih = other.shape[other.dim() - 2];
    iw = other.shape[other.dim() - 1];
    c.h.k = a.ints[0];
    c.w.k = a.ints[1];
    if (c.h.k <= 0 || c.w.k <= 0 || cin % c.groups != 0 || cout % c.groups != 0)
      fail<ShapeError>(d.name, "kernel size {}x{} with groups {} does not fit x {} and grad {}",
                       c.h.k, c.w.k, c.groups, other.shape, g.shape);
    out = Shape{cout, cin / c.groups, c.h.k, c.w.k};
  }
  check_axis_bounds(d, c.h, a);
  check_axis_bounds(d, c.w, a);
  if (ih < 0 || iw < 0 || conv_out_size(ih, c.h) != g.shape[g.dim() - 2] ||
      conv_out_size(iw, c.w) != g.shape[g.dim() - 1])
    fail<ShapeError>(d.name, "grad {} is not conv2d's output size for an input of {}x{} ({})",
                     g.shape, ih, iw, a.ints);
  return result(g.dtype, out);
}

InferResult infer_pool(const OpDef& d, std::span<const TensorMeta> in, const OpAttrs& a) {
  const TensorMeta& x = in[0];
  const bool avg = d.id == OpId::avg_pool2d;
  const Pool2dArgs p = avg ? avg_pool2d_args(d, a, 0) : max_pool2d_args(d, a, 0);
  need_float(d, "x", x);
  need_planes(d, "x", x);
  const int64_t oh = pool_out_size(x.shape[x.dim() - 2], p.h, p.ceil_mode);
  const int64_t ow = pool_out_size(x.shape[x.dim() - 1], p.w, p.ceil_mode);
  check_out_size(d, x, oh, ow);
  return result(d.id == OpId::max_pool2d_indices ? DType::Int64 : x.dtype,
                with_plane(x.shape, oh, ow));
}

InferResult infer_pool_backward(const OpDef& d, std::span<const TensorMeta> in, const OpAttrs& a) {
  const TensorMeta& g = in[0];
  need_float(d, "grad", g);
  need_planes(d, "grad", g);
  if (a.ints.size() < 2) need_ints(d, a, 2);
  const int64_t ih = a.ints[0], iw = a.ints[1];
  if (d.id == OpId::max_pool2d_backward) {
    need_ints(d, a, 2);
    need_dtype(d, "indices", in[1], DType::Int64);
    if (!(in[1].shape == g.shape))
      fail<ShapeError>(d.name, "indices of shape {} must have grad's shape {}", in[1].shape,
                       g.shape);
  } else {
    const Pool2dArgs p = avg_pool2d_args(d, a, 2);
    if (pool_out_size(ih, p.h, p.ceil_mode) != g.shape[g.dim() - 2] ||
        pool_out_size(iw, p.w, p.ceil_mode) != g.shape[g.dim() - 1])
      fail<ShapeError>(d.name, "grad {} is not avg_pool2d's output size for an input of {}x{}",
                       g.shape, ih, iw);
  }
  if (ih <= 0 || iw <= 0)
    fail<ShapeError>(d.name, "input_size must be positive, got {}x{}", ih, iw);
  return result(g.dtype, with_plane(g.shape, ih, iw));
}

InferResult infer_softmax(const OpDef& d, std::span<const TensorMeta> in, const OpAttrs& a) {
  need_ints(d, a, 1);
  need_float(d, in.size() == 1 ? "x" : "grad", in[0]);
  wrap_dim(d.name, a.ints[0], in[0].dim());
  if (in.size() == 2) {
    need_same_dtype(d, "grad", in[0], "output", in[1]);
    if (!(in[0].shape == in[1].shape))
      fail<ShapeError>(d.name, "grad {} and output {} must have one shape", in[0].shape,
                       in[1].shape);
  }
  return result(in[0].dtype, in[0].shape);
}

}  // namespace

namespace {

// nll_loss (x, target, weight?) and nll_loss_backward (grad, x, target, weight?).
InferResult infer_nll(const OpDef& d, std::span<const TensorMeta> in, const OpAttrs& a) {
  const bool backward = d.id == OpId::nll_loss_backward;
  const size_t xi = backward ? 1 : 0;
  const TensorMeta &x = in[xi], &t = in[xi + 1];
  need_ints(d, a, 2);
  if (a.ints[0] < 0 || a.ints[0] > 2)
    fail<InvalidArgument>(d.name, "reduction must be 0 (none), 1 (mean) or 2 (sum), got {}",
                          a.ints[0]);
  need_float(d, "x", x);
  need_dtype(d, "a target", t, DType::Int64);
  if ((x.dim() != 1 && x.dim() != 2) || t.dim() != x.dim() - 1 ||
      (x.dim() == 2 && t.shape[0] != x.shape[0]))
    fail<ShapeError>(d.name,
                     "expected x (N, C) with target (N), or x (C) with target (), got {} "
                     "and {}",
                     x.shape, t.shape);
  if (in.size() == xi + 3) {
    const TensorMeta& w = in[xi + 2];
    need_same_dtype(d, "x", x, "weight", w);
    if (w.dim() != 1 || w.shape[0] != x.shape[x.dim() - 1])
      fail<ShapeError>(d.name, "expected weight of shape [{}] for x {}, got {}",
                       x.shape[x.dim() - 1], x.shape, w.shape);
  }
  const Shape loss = a.ints[0] == 0 ? t.shape : Shape{};
  if (!backward) return result(x.dtype, loss);
  need_same_dtype(d, "grad", in[0], "x", x);
  if (!(in[0].shape == loss))
    fail<ShapeError>(d.name, "grad of shape {} must have the loss's shape {}", in[0].shape, loss);
  return result(x.dtype, x.shape);
}

InferResult infer_dropout(const OpDef& d, const TensorMeta& x, const OpAttrs& a) {
  need_ints(d, a, 1);
  need_float(d, "x", x);
  const double p = a.scalars[0].is_none() ? 0.5 : a.scalars[0].to_double();
  if (!(p >= 0 && p <= 1))
    fail<InvalidArgument>(d.name, "p must be in [0, 1], got {}", a.scalars[0].to_string());
  if (d.id == OpId::dropout2d && x.dim() != 3 && x.dim() != 4)
    fail<ShapeError>(d.name, "expected x of 3 dims (C, H, W) or 4 (N, C, H, W), got shape {}",
                     x.shape);
  if (!flag_at(d, a, 0)) {  // not training: x itself
    InferResult r{x, true};
    r.computed_dtype = x.dtype;
    return r;
  }
  return result(x.dtype, x.shape);
}

// layer_norm (x, weight, bias), layer_norm_backward (grad, x, weight) and
// layer_norm_weight_grad (grad, x, weight): x (..., normalized) with weight and bias of the
// normalized shape (x's last weight.dim() dims).
InferResult infer_layer_norm(const OpDef& d, std::span<const TensorMeta> in, const OpAttrs& a) {
  need_ints(d, a, 0);
  const bool forward = d.id == OpId::layer_norm;
  const TensorMeta& x = in[forward ? 0 : 1];
  const TensorMeta& w = in[forward ? 1 : 2];
  need_float(d, "x", x);
  need_same_dtype(d, "x", x, "weight", w);
  const double eps = a.scalars[0].is_none() ? 1e-5 : a.scalars[0].to_double();
  if (!(eps >= 0)) fail<InvalidArgument>(d.name, "eps must be >= 0, got {}", eps);
  const int64_t k = w.dim();
  bool fits = k >= 1 && k <= x.dim();
  for (int64_t i = 0; fits && i < k; ++i) fits = w.shape[i] == x.shape[x.dim() - k + i];
  if (!fits)
    fail<ShapeError>(d.name,
                     "weight of shape {} must be the normalized shape: the last dims of x {} "
                     "(at least one)",
                     w.shape, x.shape);
  if (forward) {
    need_same_dtype(d, "x", x, "bias", in[2]);
    if (!(in[2].shape == w.shape))
      fail<ShapeError>(d.name, "bias of shape {} must have weight's shape {}", in[2].shape,
                       w.shape);
    return result(x.dtype, x.shape);
  }
  need_same_dtype(d, "grad", in[0], "x", x);
  if (!(in[0].shape == x.shape))
    fail<ShapeError>(d.name, "grad {} and x {} must have one shape", in[0].shape, x.shape);
  return result(x.dtype, d.id == OpId::layer_norm_backward ? x.shape : w.shape);
}

InferResult infer_threshold_backward(const OpDef& d, std::span<const TensorMeta> in,
                                     const OpAttrs& a) {
  need_ints(d, a, 0);
  if (in[0].dtype == DType::Bool || in[1].dtype == DType::Bool)
    fail<DTypeError>(d.name, "not supported for bool tensors (got {} and {})", in[0].dtype,
                     in[1].dtype);
  if (a.scalars[0].is_none()) fail<InvalidArgument>(d.name, "needs a threshold");
  return result(in[0].dtype, broadcast_shapes(d.name, in[0].shape, in[1].shape));
}

}  // namespace

InferResult infer_nn(const OpDef& d, std::span<const TensorMeta> in, const OpAttrs& a) {
  switch (d.id) {
    case OpId::linear:
      need_ints(d, a, 0);
      return infer_linear(d, in);
    case OpId::conv2d:
      return infer_conv2d(d, in, a);
    case OpId::conv2d_input_grad:
    case OpId::conv2d_weight_grad:
      return infer_conv2d_grad(d, in, a);
    case OpId::max_pool2d:
    case OpId::max_pool2d_indices:
    case OpId::avg_pool2d:
      return infer_pool(d, in, a);
    case OpId::max_pool2d_backward:
    case OpId::avg_pool2d_backward:
      return infer_pool_backward(d, in, a);
    case OpId::softmax:
    case OpId::log_softmax:
    case OpId::softmax_backward:
    case OpId::log_softmax_backward:
      return infer_softmax(d, in, a);
    case OpId::nll_loss:
    case OpId::nll_loss_backward:
      return infer_nll(d, in, a);
    case OpId::dropout:
    case OpId::dropout2d:
      return infer_dropout(d, in[0], a);
    case OpId::threshold_backward:
      return infer_threshold_backward(d, in, a);
    case OpId::layer_norm:
    case OpId::layer_norm_backward:
    case OpId::layer_norm_weight_grad:
      return infer_layer_norm(d, in, a);
    default:
      fail<InvalidArgument>(d.name, "is not a neural-network op");
  }
}

}  // namespace dtr::detail
