// Internal: the dim collapsing every strided loop starts with, shared by the CPU kernels
// (kernels.hpp, for_each_strided) and the CUDA indexer (cuda/kernels.cuh, make_indexer).
// Dims of size 1 are dropped and a dim is merged into its inner neighbour when every
// operand steps contiguously across the two, so a contiguous tensor becomes one run.
//
// Thread safety: pure functions.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>

#include "dtr/dims.hpp"

namespace dtr::detail {

template <size_t N>
struct CollapsedDims {
  int ndim = 0;        // 0: a single element (every dim had size 1)
  bool empty = false;  // some dim has size 0: nothing to visit
  int64_t size[kMaxDims];
  int64_t stride[N][kMaxDims];  // in bytes: element strides times element sizes
};

// `elem_strides[k]` are operand k's element strides (already broadcast to `shape`),
// `elem_size[k]` its element size.
template <size_t N>
CollapsedDims<N> collapse_dims(const Shape& shape, const std::array<Strides, N>& elem_strides,
                               const std::array<int64_t, N>& elem_size) {
  CollapsedDims<N> c;
  int64_t size[kMaxDims];
  int64_t stride[N][kMaxDims];
  int nd = 0;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == 0) {
      c.empty = true;
      return c;
    }
    if (shape[i] == 1) continue;
    size[nd] = shape[i];
    for (size_t k = 0; k < N; ++k) stride[k][nd] = elem_strides[k][i] * elem_size[k];
    ++nd;
  }
  // Merge dim i into dim `out` (the next kept one, inner) when every operand steps
  // contiguously across them.
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
  const int first = nd > 0 ? out : 0;
  c.ndim = nd - first;
  for (int d = 0; d < c.ndim; ++d) {
    c.size[d] = size[first + d];
    for (size_t k = 0; k < N; ++k) c.stride[k][d] = stride[k][first + d];
  }
  return c;
}

}  // namespace dtr::detail
