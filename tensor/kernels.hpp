// Internal: the CPU kernels, the strided iteration they share, and dtype dispatch.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <type_traits>

#include "arith.hpp"
#include "check.hpp"
#include "dtr/tensor.hpp"
#include "strided.hpp"

namespace dtr::local::detail {

using dtr::detail::fail;

// Calls f.template operator()<T>() with T the C++ (storage) type of `t`: dtr::float16 and
// dtr::bfloat16 for the 16-bit dtypes.
template <typename F>
decltype(auto) dispatch(DType t, F&& f) {
  switch (t) {
    case DType::Float32:
      return f.template operator()<float>();
    case DType::Float64:
      return f.template operator()<double>();
    case DType::Int32:
      return f.template operator()<int32_t>();
    case DType::Int64:
      return f.template operator()<int64_t>();
    case DType::Bool:
      return f.template operator()<bool>();
    case DType::Float16:
      return f.template operator()<float16>();
    case DType::BFloat16:
      return f.template operator()<bfloat16>();
  }
  throw DTypeError(fmt::format("invalid dtype code {}", static_cast<int>(t)));
}

// Like dispatch, but T is the type `t` computes in: float for float16 and bfloat16, whose
// elements are converted as they are loaded and rounded as they are stored.
template <typename F>
decltype(auto) dispatch_compute(DType t, F&& f) {
  return dispatch(t, [&]<typename T>() -> decltype(auto) {
    return f.template operator()<compute_type_t<T>>();
  });
}

// dispatch for the CPU's computing kernels (unary, clamp, binary, reductions, linalg),
// which never see float16 or bfloat16: execute() runs them on float32 copies and rounds
// the result (tensor.cpp, run_through_float32). Not instantiated for the 16-bit types.
template <typename F>
decltype(auto) dispatch_wide(std::string_view op, DType t, F&& f) {
  if (t == DType::Float16 || t == DType::BFloat16)
    fail<DTypeError>(op, "internal: {} operands reach the kernels as float32", t);
  return dispatch_compute(t, std::forward<F>(f));
}

// T the compute type of a floating dtype (float for float16 and bfloat16); throws
// DTypeError naming `op` for any other dtype.
template <typename F>
decltype(auto) dispatch_float(std::string_view op, DType t, F&& f) {
  switch (t) {
    case DType::Float32:
    case DType::Float16:
    case DType::BFloat16:
      return f.template operator()<float>();
    case DType::Float64:
      return f.template operator()<double>();
    default:
      break;
  }
  fail<DTypeError>(op, "expected a floating point tensor, got {}", t);
}

// Strides of `m` broadcast to `shape` (0 where m has size 1 or lacks the dim).
Strides broadcast_strides(const TensorMeta& m, const Shape& shape);

// Strided iteration over N operands of one shape. Dims of size 1 are dropped and dims that
// are contiguous with their neighbour in every operand are merged, so a contiguous tensor
// becomes one run. `loop(ptrs, inner_strides, n)` is called once per innermost run with
// byte strides.
template <size_t N, typename Loop>
void for_each_strided(const Shape& shape, std::array<char*, N> base,
                      const std::array<Strides, N>& elem_strides,
                      const std::array<int64_t, N>& elem_size, Loop&& loop) {
  const dtr::detail::CollapsedDims<N> c =
      dtr::detail::collapse_dims(shape, elem_strides, elem_size);
  if (c.empty) return;
  if (c.ndim == 0) {
    int64_t zero[N] = {};
    loop(base.data(), zero, int64_t{1});
    return;
  }
  const int inner = c.ndim - 1;
  int64_t inner_stride[N];
  for (size_t k = 0; k < N; ++k) inner_stride[k] = c.stride[k][inner];
  int64_t counter[kMaxDims] = {};
  std::array<char*, N> ptr = base;
  while (true) {
    loop(ptr.data(), inner_stride, c.size[inner]);
    int d = inner - 1;
    for (; d >= 0; --d) {
      if (++counter[d] < c.size[d]) {
        for (size_t k = 0; k < N; ++k) ptr[k] += c.stride[k][d];
        break;
      }
      for (size_t k = 0; k < N; ++k) ptr[k] -= c.stride[k][d] * (c.size[d] - 1);
      counter[d] = 0;
    }
    if (d < 0) return;
  }
}

using dtr::detail::int_pow;
using dtr::detail::wrap_add;
using dtr::detail::wrap_mul;
using dtr::detail::wrap_sub;

// Kernels, one per op kind. `out` is allocated with the meta infer() gives (for in-place
// calls, out is input 0) and does not overlap any other input.
void unary_kernel(const OpDef& d, std::span<const Tensor> in, const OpAttrs& a, const Tensor& out);
void clamp_kernel(const OpDef& d, std::span<const Tensor> in, const OpAttrs& a, const Tensor& out);
void binary_kernel(const OpDef& d, std::span<const Tensor> in, const OpAttrs& a, const Tensor& out);
void reduce_kernel(const OpDef& d, std::span<const Tensor> in, const OpAttrs& a, const Tensor& out);
void linalg_kernel(const OpDef& d, std::span<const Tensor> in, const OpAttrs& a, const Tensor& out);
void create_kernel(const OpDef& d, std::span<const Tensor> in, const OpAttrs& a, const Tensor& out);
void mutate_kernel(const OpDef& d, std::span<const Tensor> in, const OpAttrs& a, const Tensor& out);
// Indexing ops (kernels_index.cpp), the convolutions and linear (kernels_conv.cpp), the
// other NN ops (kernels_nn.cpp).
void index_kernel(const OpDef& d, std::span<const Tensor> in, const OpAttrs& a, const Tensor& out);
void conv_kernel(const OpDef& d, std::span<const Tensor> in, const OpAttrs& a, const Tensor& out);
void nn_kernel(const OpDef& d, std::span<const Tensor> in, const OpAttrs& a, const Tensor& out);
// Copies src into dst elementwise with broadcasting and dtype conversion.
void copy_into(const Tensor& dst, const Tensor& src);
// Fills every element of t with v.
void fill(const Tensor& t, Scalar v);

// A dim of a contiguous tensor as (outer, size, inner): element (o, i, j) is at
// (o * size + i) * inner + j. A 0-d tensor is (1, 1, 1).
struct DimSplit {
  int64_t outer = 1, size = 1, inner = 1;
};
inline DimSplit split_at(const Shape& shape, int64_t dim) {
  DimSplit s;
  for (int64_t i = 0; i < static_cast<int64_t>(shape.size()); ++i) {
    if (i < dim) s.outer *= shape[i];
    if (i == dim) s.size = shape[i];
    if (i > dim) s.inner *= shape[i];
  }
  return s;
}

// `t` converted to `dtype` (itself when it already is) and packed.
inline Tensor packed_as(const Tensor& t, DType dtype) {
  return t.dtype() == dtype ? t.contiguous() : t.to(dtype).contiguous();
}

}  // namespace dtr::local::detail
