// Internal: where an output element of flip and constant_pad_nd comes from, host and
// device code, so that the CPU kernels (tensor/kernels_index.cpp) and the CUDA kernels
// (tensor/cuda/kernels_index.cu) map positions the same way.
//
// The input is contiguous; the output contiguous of out_shape. Along dim d an output index
// o reads input index in_size - 1 - o (flipped) or o - before (padded; outside [0, in_size)
// it is padding).
//
// Thread safety: pure functions of a value type.
#pragma once

#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>

#include "arith.hpp"
#include "dtr/dims.hpp"
#include "dtr/half.hpp"  // DTR_HOST_DEVICE
#include "dtr/op_table.hpp"

namespace dtr::detail {

// scatter_reduce's reductions (its reduce attribute) and their one formula, for the CPU and
// CUDA kernels, in the compute type A (float for the 16-bit floats): combine(a, b) folds b
// into a (integers wrap, as torch's); identity() is what a written position starts from
// without include_self; max / min propagate NaN, as torch's.
enum class ScatterReduce : int64_t { Sum = 0, Prod = 1, Mean = 2, Amax = 3, Amin = 4 };

template <typename A>
DTR_HOST_DEVICE inline A scatter_combine(ScatterReduce r, A a, A b) {
  switch (r) {
    case ScatterReduce::Prod:
      if constexpr (std::is_integral_v<A>) {
        using U = std::make_unsigned_t<A>;
        return static_cast<A>(static_cast<U>(a) * static_cast<U>(b));
      } else {
        return a * b;
      }
    case ScatterReduce::Amax:
      return (a != a || a > b) ? a : b;  // a != a: NaN
    case ScatterReduce::Amin:
      return (a != a || a < b) ? a : b;
    default:
      return wrap_add(a, b);  // Sum, and Mean (divided by the count afterwards)
  }
}

template <typename A>
DTR_HOST_DEVICE inline A scatter_identity(ScatterReduce r) {
  using L = std::numeric_limits<A>;
  switch (r) {
    case ScatterReduce::Prod:
      return A(1);
    case ScatterReduce::Amax:
      return L::has_infinity ? -L::infinity() : L::lowest();
    case ScatterReduce::Amin:
      return L::has_infinity ? L::infinity() : L::max();
    default:
      return A(0);
  }
}

// The mean of a sum over count (> 0) elements: floor division for integers, as torch's.
template <typename A>
DTR_HOST_DEVICE inline A scatter_mean(A sum, int64_t count) {
  const A n = static_cast<A>(count);
  if constexpr (std::is_floating_point_v<A>) {
    return sum / n;
  } else {
    const A q = sum / n;
    return (sum % n != 0 && sum < 0) ? q - 1 : q;
  }
}

struct SourceMap {
  int64_t ndim = 0;
  int64_t out[kMaxDims] = {};
  int64_t in[kMaxDims] = {};
  int64_t before[kMaxDims] = {};
  bool flip[kMaxDims] = {};
};

// The input position output position i reads, or -1 for padding.
DTR_HOST_DEVICE inline int64_t source_of(const SourceMap& m, int64_t i) {
  int64_t src = 0, scale = 1;
  for (int64_t d = m.ndim - 1; d >= 0; --d) {
    const int64_t o = i % m.out[d];
    i /= m.out[d];
    const int64_t s = m.flip[d] ? m.in[d] - 1 - o : o - m.before[d];
    if (s < 0 || s >= m.in[d]) return -1;
    src += s * scale;
    scale *= m.in[d];
  }
  return src;
}

// sort_indices's order as an unsigned key: ascending keys sort as the values do, NaN after
// everything, -0 equal to +0; descending inverts the key (NaN first), so one stable sort of
// the keys gives torch's stable order either way.
template <typename T>
DTR_HOST_DEVICE uint64_t sort_key(T value, bool descending) {
  uint64_t k;
  if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double> || is_half_v<T>) {
    double v = static_cast<double>(value);
    if (v != v) {
      k = ~uint64_t{0};
    } else {
      if (v == 0) v = 0;  // -0 sorts as +0
      uint64_t bits;
      memcpy(&bits, &v, sizeof bits);
      k = (bits >> 63) != 0 ? ~bits : bits | (uint64_t{1} << 63);
    }
  } else {
    k = static_cast<uint64_t>(static_cast<int64_t>(value)) ^ (uint64_t{1} << 63);
  }
  return descending ? ~k : k;
}

// The map of flip (attrs.ints: the dims) or constant_pad_nd (attrs.ints: the pads, the last
// dim's first) from x's shape to the output's (both checked by the op's shape rule).
inline SourceMap source_map(OpId op, const Shape& in, const Shape& out, const OpAttrs& a) {
  SourceMap m;
  m.ndim = static_cast<int64_t>(in.size());
  for (size_t i = 0; i < in.size(); ++i) {
    m.in[i] = in[i];
    m.out[i] = out[i];
  }
  if (op == OpId::flip) {
    for (int64_t dim : a.ints) m.flip[wrap_dim("flip", dim, m.ndim)] = true;
  } else {
    for (size_t i = 0; i < a.ints.size() / 2; ++i) m.before[in.size() - 1 - i] = a.ints[2 * i];
  }
  return m;
}

}  // namespace dtr::detail
