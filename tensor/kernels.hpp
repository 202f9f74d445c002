// Internal: the CPU kernels, the strided iteration they share, and dtype dispatch.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <type_traits>

#include "check.hpp"
#include "dtr/tensor.hpp"

namespace dtr::local::detail {

using dtr::detail::fail;

// Calls f.template operator()<T>() with T the C++ type of `t`.
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
  }
  throw DTypeError(fmt::format("invalid dtype code {}", static_cast<int>(t)));
}

template <typename F>
decltype(auto) dispatch_float(std::string_view op, DType t, F&& f) {
  switch (t) {
    case DType::Float32:
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
  int64_t size[kMaxDims];
  int64_t stride[N][kMaxDims];
  int nd = 0;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == 0) return;
    if (shape[i] == 1) continue;
    size[nd] = shape[i];
    for (size_t k = 0; k < N; ++k) stride[k][nd] = elem_strides[k][i] * elem_size[k];
    ++nd;
  }
  // Merge dim i into dim i+1 (inner) when every operand steps contiguously across them.
  int out = nd - 1;
  for (int i = nd - 2; i >= 0; --i) {
    bool merge = true;
    for (size_t k = 0; k < N; ++k) merge &= stride[k][i] == stride[k][out] * size[out];
    if (merge) {
      size[out] *= size[i];
    } else {
      --out;
      size[out] = size[i];
      for (size_t k = 0; k < N; ++k) stride[k][out] = stride[k][i];
    }
  }
  int first = nd > 0 ? out : 0;
  int ndims = nd - first;
  if (ndims <= 0) {
    int64_t zero[N] = {};
    loop(base.data(), zero, int64_t{1});
    return;
  }
  int inner = nd - 1;
  int64_t inner_stride[N];
  for (size_t k = 0; k < N; ++k) inner_stride[k] = stride[k][inner];
  int64_t counter[kMaxDims] = {};
  std::array<char*, N> ptr = base;
  while (true) {
    loop(ptr.data(), inner_stride, size[inner]);
    int d = inner - 1;
    for (; d >= first; --d) {
      if (++counter[d] < size[d]) {
        for (size_t k = 0; k < N; ++k) ptr[k] += stride[k][d];
        break;
      }
      for (size_t k = 0; k < N; ++k) ptr[k] -= stride[k][d] * (size[d] - 1);
      counter[d] = 0;
    }
    if (d < first) return;
  }
}

// Wrapping integer arithmetic (no signed-overflow UB), plain arithmetic otherwise.
template <typename T>
T wrap_add(T a, T b) {
  if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
    using U = std::make_unsigned_t<T>;
    return static_cast<T>(static_cast<U>(a) + static_cast<U>(b));
  } else if constexpr (std::is_same_v<T, bool>) {
    return a || b;
  } else {
    return a + b;
  }
}
template <typename T>
T wrap_sub(T a, T b) {
  if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
    using U = std::make_unsigned_t<T>;
    return static_cast<T>(static_cast<U>(a) - static_cast<U>(b));
  } else {
    return a - b;
  }
}
template <typename T>
T wrap_mul(T a, T b) {
  if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
    using U = std::make_unsigned_t<T>;
    return static_cast<T>(static_cast<U>(a) * static_cast<U>(b));
  } else if constexpr (std::is_same_v<T, bool>) {
    return a && b;
  } else {
    return a * b;
  }
}

// Kernels, one per op kind. `out` is allocated with the meta infer() gives (for in-place
// calls, out is input 0) and does not overlap any other input.
void unary_kernel(const OpDef& d, std::span<const Tensor> in, const OpAttrs& a, const Tensor& out);
void clamp_kernel(const OpDef& d, std::span<const Tensor> in, const OpAttrs& a, const Tensor& out);
void binary_kernel(const OpDef& d, std::span<const Tensor> in, const OpAttrs& a, const Tensor& out);
void reduce_kernel(const OpDef& d, std::span<const Tensor> in, const OpAttrs& a, const Tensor& out);
void linalg_kernel(const OpDef& d, std::span<const Tensor> in, const OpAttrs& a, const Tensor& out);
void create_kernel(const OpDef& d, std::span<const Tensor> in, const OpAttrs& a, const Tensor& out);
void mutate_kernel(const OpDef& d, std::span<const Tensor> in, const OpAttrs& a, const Tensor& out);
// Copies src into dst elementwise with broadcasting and dtype conversion.
void copy_into(const Tensor& dst, const Tensor& src);
// Fills every element of t with v.
void fill(const Tensor& t, Scalar v);

}  // namespace dtr::local::detail
