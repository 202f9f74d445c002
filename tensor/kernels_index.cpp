// CPU kernels of the Indexing ops: where and masked_fill (strided, broadcasting),
// index_select, gather, scatter_add, one_hot (checked indices: an index out of range is an
// IndexError naming the op, the index and the range, and nothing is written past a
// tensor), cumsum and topk along a dim, tril and triu. Data is moved in its own dtype (float16 and
// bfloat16 included); cumsum runs on float32 widenings of 16-bit inputs (tensor.cpp).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <vector>

#include "index_math.hpp"
#include "kernels.hpp"
#include "parallel.hpp"

namespace dtr::local::detail {

namespace {

using dtr::detail::scatter_combine;
using dtr::detail::scatter_identity;
using dtr::detail::scatter_mean;
using dtr::detail::ScatterReduce;

template <typename T>
int64_t elem_bytes() {
  return static_cast<int64_t>(sizeof(T));
}

// a + b in T's arithmetic (wrapping integers, bool "or", 16-bit floats through float).
template <typename T>
T add_elem(T a, T b) {
  if constexpr (is_half_v<T>)
    return T(static_cast<float>(a) + static_cast<float>(b));
  else
    return wrap_add(a, b);
}

void where_kernel(std::span<const Tensor> in, const Tensor& out) {
  const Shape& shape = out.shape();
  const Tensor a = in[1].dtype() == out.dtype() ? in[1] : in[1].to(out.dtype());
  const Tensor b = in[2].dtype() == out.dtype() ? in[2] : in[2].to(out.dtype());
  dispatch(out.dtype(), [&]<typename T>() {
    for_each_strided<4>(shape,
                        {static_cast<char*>(out.raw_data()), static_cast<char*>(in[0].raw_data()),
                         static_cast<char*>(a.raw_data()), static_cast<char*>(b.raw_data())},
                        {out.strides(), broadcast_strides(in[0].meta(), shape),
                         broadcast_strides(a.meta(), shape), broadcast_strides(b.meta(), shape)},
                        {elem_bytes<T>(), 1, elem_bytes<T>(), elem_bytes<T>()},
                        [](char** p, const int64_t* s, int64_t n) {
                          for (int64_t i = 0; i < n; ++i)
                            *reinterpret_cast<T*>(p[0] + i * s[0]) =
                                *reinterpret_cast<const bool*>(p[1] + i * s[1])
                                    ? *reinterpret_cast<const T*>(p[2] + i * s[2])
                                    : *reinterpret_cast<const T*>(p[3] + i * s[3]);
                        });
  });
}

void masked_fill_kernel(std::span<const Tensor> in, const OpAttrs& a, const Tensor& out) {
  const Shape& shape = out.shape();
  dispatch(out.dtype(), [&]<typename T>() {
    const T value = a.scalars[0].to<T>();
    for_each_strided<3>(shape,
                        {static_cast<char*>(out.raw_data()), static_cast<char*>(in[0].raw_data()),
                         static_cast<char*>(in[1].raw_data())},
                        {out.strides(), broadcast_strides(in[0].meta(), shape),
                         broadcast_strides(in[1].meta(), shape)},
                        {elem_bytes<T>(), elem_bytes<T>(), 1},
                        [&](char** p, const int64_t* s, int64_t n) {
                          for (int64_t i = 0; i < n; ++i)
                            *reinterpret_cast<T*>(p[0] + i * s[0]) =
                                *reinterpret_cast<const bool*>(p[2] + i * s[2])
                                    ? value
                                    : *reinterpret_cast<const T*>(p[1] + i * s[1]);
                        });
  });
}

[[noreturn]] void index_out_of_range(const OpDef& d, int64_t index, int64_t size, int64_t dim,
                                     const Shape& shape) {
  fail<IndexError>(d.name, "index {} is out of range for dim {} of size {} (shape {})", index, dim,
                   size, shape);
}

void index_select_kernel(const OpDef& d, std::span<const Tensor> in, const OpAttrs& a,
                         const Tensor& out) {
  const Tensor x = in[0].contiguous();
  const Tensor index = packed_as(in[1], DType::Int64);
  const int64_t dim = wrap_dim(d.name, a.ints[0], x.dim());
  const DimSplit s = split_at(x.shape(), dim);
  const int64_t n = index.numel();
  const int64_t* idx = static_cast<const int64_t*>(index.raw_data());
  for (int64_t i = 0; i < n; ++i)
    if (idx[i] < 0 || idx[i] >= s.size) index_out_of_range(d, idx[i], s.size, dim, x.shape());
  const size_t row = static_cast<size_t>(s.inner) * element_size(x.dtype());
  const char* src = static_cast<const char*>(x.raw_data());
  char* dst = static_cast<char*>(out.raw_data());
  for (int64_t o = 0; o < s.outer; ++o)
    for (int64_t i = 0; i < n; ++i)
      std::memcpy(dst + (o * n + i) * row, src + (o * s.size + idx[i]) * row, row);
}

// Calls f(position of the element in `shape`'s row-major order, its multi-index) for every
// element of `shape`.
template <typename F>
void for_each_position(const Shape& shape, F&& f) {
  const int64_t n = numel_of(shape);
  int64_t coord[kMaxDims] = {};
  const int nd = static_cast<int>(shape.size());
  for (int64_t i = 0; i < n; ++i) {
    f(i, coord);
    for (int d = nd - 1; d >= 0; --d) {
      if (++coord[d] < shape[d]) break;
      coord[d] = 0;
    }
  }
}

// Offset in a tensor of `strides` of the multi-index `coord` with coord[dim] = at.
int64_t offset_with(const int64_t* coord, const Strides& strides, int64_t dim, int64_t at) {
  int64_t off = 0;
  for (size_t j = 0; j < strides.size(); ++j)
    off += (static_cast<int64_t>(j) == dim ? at : coord[j]) * strides[j];
  return off;
}

// gather: out[c] = x[c with c[dim] = index[c]]; scatter_add: out = x, then
// out[c with c[dim] = index[c]] += src[c] for every position c of index.
void gather_scatter_kernel(const OpDef& d, std::span<const Tensor> in, const OpAttrs& a,
                           const Tensor& out) {
  const Tensor& x = in[0];
  const int64_t dim = wrap_dim(d.name, a.ints[0], x.dim());
  const Tensor index = in[1].contiguous();
  const int64_t* idx = static_cast<const int64_t*>(index.raw_data());
  const int64_t size = x.dim() == 0 ? 1 : x.shape()[dim];
  const bool gather = d.id == OpId::gather;
  if (!gather) copy_into(out, x);
  const Tensor src = gather ? x.contiguous() : in[2].contiguous();
  const Strides xs = contiguous_strides(x.shape());
  dispatch(out.dtype(), [&]<typename T>() {
    const T* s = static_cast<const T*>(src.raw_data());
    T* o = static_cast<T*>(out.raw_data());
    for_each_position(index.shape(), [&](int64_t i, const int64_t* c) {
      const int64_t at = idx[i];
      if (at < 0 || at >= size) index_out_of_range(d, at, size, dim, x.shape());
      if (gather) {
        o[i] = s[offset_with(c, xs, dim, at)];
      } else if (d.id == OpId::scatter) {
        o[offset_with(c, xs, dim, at)] = s[offset_with(c, src.strides(), dim, c[dim])];
      } else {
        T& dst = o[offset_with(c, xs, dim, at)];
        dst = add_elem(dst, s[offset_with(c, src.strides(), dim, c[dim])]);
      }
    });
  });
}

// scatter_reduce: out = x (the written positions set to the reduction's identity without
// include_self), each src element folded in at its position in order, and for mean each
// written position divided by its count (plus one with include_self).
void scatter_reduce_kernel(const OpDef& d, std::span<const Tensor> in, const OpAttrs& a,
                           const Tensor& out) {
  const Tensor& x = in[0];
  const int64_t dim = wrap_dim(d.name, a.ints[0], x.dim());
  const auto r = static_cast<ScatterReduce>(a.ints[1]);
  const bool include_self = a.ints[2] != 0;
  const Tensor index = in[1].contiguous();
  const int64_t* idx = static_cast<const int64_t*>(index.raw_data());
  const int64_t size = x.dim() == 0 ? 1 : x.shape()[dim];
  for (int64_t i = 0; i < index.numel(); ++i)
    if (idx[i] < 0 || idx[i] >= size) index_out_of_range(d, idx[i], size, dim, x.shape());
  copy_into(out, x);
  const Tensor src = in[2].contiguous();
  const Strides xs = contiguous_strides(x.shape());
  std::vector<int64_t> count(r == ScatterReduce::Mean ? static_cast<size_t>(out.numel()) : 0, 0);
  dispatch(out.dtype(), [&]<typename T>() {
    if constexpr (!std::is_same_v<T, bool>) {
      using A = compute_type_t<T>;
      const T* s = static_cast<const T*>(src.raw_data());
      T* o = static_cast<T*>(out.raw_data());
      if (!include_self)
        for_each_position(index.shape(), [&](int64_t i, const int64_t* c) {
          o[offset_with(c, xs, dim, idx[i])] = static_cast<T>(scatter_identity<A>(r));
        });
      for_each_position(index.shape(), [&](int64_t i, const int64_t* c) {
        const int64_t at = offset_with(c, xs, dim, idx[i]);
        const A v = static_cast<A>(s[offset_with(c, src.strides(), dim, c[dim])]);
        o[at] = static_cast<T>(scatter_combine<A>(r, static_cast<A>(o[at]), v));
        if (r == ScatterReduce::Mean) ++count[static_cast<size_t>(at)];
      });
      for (size_t k = 0; k < count.size(); ++k)
        if (count[k] > 0)
          o[k] = static_cast<T>(
              scatter_mean<A>(static_cast<A>(o[k]), count[k] + (include_self ? 1 : 0)));
    }
  });
}

void cumsum_kernel(const OpDef& d, std::span<const Tensor> in, const OpAttrs& a,
                   const Tensor& out) {
  const Tensor x = packed_as(in[0], out.dtype());
  const DimSplit s = split_at(x.shape(), wrap_dim(d.name, a.ints[0], x.dim()));
  dispatch_wide(d.name, out.dtype(), [&]<typename T>() {
    using Acc = std::conditional_t<is_floating_v<T>, double, T>;
    const T* p = static_cast<const T*>(x.raw_data());
    T* o = static_cast<T*>(out.raw_data());
    for (int64_t r = 0; r < s.outer; ++r)
      for (int64_t j = 0; j < s.inner; ++j) {
        Acc acc = 0;
        for (int64_t i = 0; i < s.size; ++i) {
          const int64_t at = (r * s.size + i) * s.inner + j;
          acc = wrap_add<Acc>(acc, static_cast<Acc>(p[at]));
          o[at] = static_cast<T>(acc);
        }
      }
  });
}

void one_hot_kernel(const OpDef& d, std::span<const Tensor> in, const Tensor& out) {
  const Tensor x = in[0].contiguous();
  const int64_t classes = out.shape()[out.dim() - 1], n = x.numel();
  const int64_t* p = static_cast<const int64_t*>(x.raw_data());
  for (int64_t i = 0; i < n; ++i)
    if (p[i] < 0 || p[i] >= classes)
      fail<IndexError>(d.name, "class {} (element {}) is out of range for num_classes {}", p[i], i,
                       classes);
  int64_t* o = static_cast<int64_t*>(out.raw_data());
  std::fill(o, o + n * classes, int64_t{0});
  for (int64_t i = 0; i < n; ++i) o[i * classes + p[i]] = 1;
}

// topk's order: by value (NaN above everything), ties by the lower position first.
template <typename T>
bool ranks_before(T a, int64_t ia, T b, int64_t ib, bool largest) {
  const float fa = static_cast<float>(a), fb = static_cast<float>(b);
  const bool na = std::isnan(fa), nb = std::isnan(fb);
  if (na != nb) return largest ? na : nb;
  if (!na && a != b) return largest ? b < a : a < b;
  return ia < ib;
}

void topk_kernel(const OpDef& d, std::span<const Tensor> in, const OpAttrs& a, const Tensor& out) {
  const Tensor x = in[0].contiguous();
  const int64_t k = a.ints[0];
  const bool largest = a.ints[2] != 0, values = d.id == OpId::topk;
  const DimSplit s = split_at(x.shape(), wrap_dim(d.name, a.ints[1], x.dim()));
  dispatch(x.dtype(), [&]<typename T>() {
    if constexpr (std::is_same_v<T, bool>) {
      fail<DTypeError>(d.name, "not supported for bool tensors");
    } else {
      const T* p = static_cast<const T*>(x.raw_data());
      std::vector<int64_t> order(static_cast<size_t>(s.size));
      for (int64_t r = 0; r < s.outer; ++r)
        for (int64_t j = 0; j < s.inner; ++j) {
          const T* row = p + r * s.size * s.inner + j;
          std::iota(order.begin(), order.end(), int64_t{0});
          std::partial_sort(
              order.begin(), order.begin() + k, order.end(), [&](int64_t u, int64_t v) {
                return ranks_before(row[u * s.inner], u, row[v * s.inner], v, largest);
              });
          for (int64_t i = 0; i < k; ++i) {
            const int64_t at = (r * k + i) * s.inner + j;
            if (values)
              static_cast<T*>(out.raw_data())[at] = row[order[static_cast<size_t>(i)] * s.inner];
            else
              static_cast<int64_t*>(out.raw_data())[at] = order[static_cast<size_t>(i)];
          }
        }
    }
  });
}

// sort_indices: each row along the dim sorted stably by dtr::detail::sort_key, rows in
// parallel.
void sort_kernel(const OpDef& d, std::span<const Tensor> in, const OpAttrs& a, const Tensor& out) {
  const Tensor x = in[0].contiguous();
  const bool descending = a.ints[1] != 0;
  const DimSplit s = split_at(x.shape(), wrap_dim(d.name, a.ints[0], x.dim()));
  int64_t* o = static_cast<int64_t*>(out.raw_data());
  dispatch(x.dtype(), [&]<typename T>() {
    const T* p = static_cast<const T*>(x.raw_data());
    dtr::detail::parallel_for(s.outer * s.inner, [&](int64_t row) {
      const int64_t r = row / s.inner, j = row % s.inner;
      const T* base = p + r * s.size * s.inner + j;
      std::vector<std::pair<uint64_t, int64_t>> keyed(static_cast<size_t>(s.size));
      for (int64_t i = 0; i < s.size; ++i)
        keyed[static_cast<size_t>(i)] = {dtr::detail::sort_key(base[i * s.inner], descending), i};
      std::stable_sort(keyed.begin(), keyed.end(),
                       [](const auto& u, const auto& v) { return u.first < v.first; });
      for (int64_t i = 0; i < s.size; ++i)
        o[(r * s.size + i) * s.inner + j] = keyed[static_cast<size_t>(i)].second;
    });
  });
}

}  // namespace

// tril / triu: each matrix of the last two dims copied with the entries outside the kept
// triangle zeroed (row r keeps the columns [0, r + k] for tril, [r + k, cols) for triu).
void triangle_kernel(const OpDef& d, std::span<const Tensor> in, const OpAttrs& a,
                     const Tensor& out) {
  const Tensor x = in[0].contiguous();
  const Shape& shape = x.shape();
  const int64_t rows = shape[shape.size() - 2], cols = shape.back();
  if (x.numel() == 0) return;
  // Clamped so that r + k cannot overflow; any k past either end means the same.
  const int64_t k = std::clamp<int64_t>(a.ints[0], -rows - 1, cols + 1);
  const bool lower = d.id == OpId::tril;
  const int64_t matrices = x.numel() / (rows * cols);
  const size_t bytes = element_size(x.dtype());
  const char* src = static_cast<const char*>(x.raw_data());
  char* dst = static_cast<char*>(out.raw_data());
  for (int64_t m = 0; m < matrices; ++m) {
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t begin = lower ? 0 : std::clamp<int64_t>(r + k, 0, cols);
      const int64_t end = lower ? std::clamp<int64_t>(r + k + 1, 0, cols) : cols;
      const size_t at = static_cast<size_t>((m * rows + r) * cols) * bytes;
      std::memset(dst + at, 0, static_cast<size_t>(cols) * bytes);  // zero in every dtype
      if (end > begin)
        std::memcpy(dst + at + begin * bytes, src + at + begin * bytes,
                    static_cast<size_t>(end - begin) * bytes);
    }
  }
}

// flip and constant_pad_nd: each output element copied from the input position
// dtr::detail::source_of gives, or set to the pad value; in parallel over blocks of the
// output.
void remap_kernel(const OpDef& d, std::span<const Tensor> in, const OpAttrs& a, const Tensor& out) {
  const Tensor x = in[0].contiguous();
  const dtr::detail::SourceMap m = dtr::detail::source_map(d.id, x.shape(), out.shape(), a);
  const int64_t n = out.numel();
  if (n == 0) return;
  const size_t bytes = element_size(x.dtype());
  // The pad value in the tensor's dtype, as bytes.
  const Tensor value =
      local::full({}, a.scalars[0].is_none() ? Scalar(0) : a.scalars[0], x.dtype());
  const char* fill = static_cast<const char*>(value.raw_data());
  const char* src = static_cast<const char*>(x.raw_data());
  char* dst = static_cast<char*>(out.raw_data());
  constexpr int64_t kBlock = 1 << 14;
  dtr::detail::parallel_for((n + kBlock - 1) / kBlock, [&](int64_t b) {
    for (int64_t i = b * kBlock; i < std::min(n, (b + 1) * kBlock); ++i) {
      const int64_t s = dtr::detail::source_of(m, i);
      std::memcpy(dst + static_cast<size_t>(i) * bytes,
                  s < 0 ? fill : src + static_cast<size_t>(s) * bytes, bytes);
    }
  });
}

void index_kernel(const OpDef& d, std::span<const Tensor> in, const OpAttrs& a, const Tensor& out) {
  switch (d.id) {
    case OpId::where:
      return where_kernel(in, out);
    case OpId::masked_fill:
      return masked_fill_kernel(in, a, out);
    case OpId::index_select:
      return index_select_kernel(d, in, a, out);
    case OpId::gather:
    case OpId::scatter_add:
    case OpId::scatter:
      return gather_scatter_kernel(d, in, a, out);
    case OpId::scatter_reduce:
      return scatter_reduce_kernel(d, in, a, out);
    case OpId::sort_indices:
      return sort_kernel(d, in, a, out);
    case OpId::cumsum:
      return cumsum_kernel(d, in, a, out);
    case OpId::one_hot:
      return one_hot_kernel(d, in, out);
    case OpId::topk:
    case OpId::topk_indices:
      return topk_kernel(d, in, a, out);
    case OpId::tril:
    case OpId::triu:
      return triangle_kernel(d, in, a, out);
    case OpId::flip:
    case OpId::constant_pad_nd:
      return remap_kernel(d, in, a, out);
    default:
      fail<InvalidArgument>(d.name, "is not an indexing op");
  }
}

}  // namespace dtr::local::detail
