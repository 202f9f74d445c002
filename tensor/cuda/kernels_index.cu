// CUDA kernels of the Join and Indexing ops (the CPU's are tensor/kernels_index.cpp and
// tensor.cpp's join): cat and stack (each input copied into its part of the output),
// where and masked_fill (strided, broadcasting, operands converted as they are loaded),
// index_select, gather, scatter_add and one_hot, cumsum and topk along a dim, tril and triu.
//
// Indices are checked as on the CPU: the first one out of range (in the index's row-major
// order) is reported as the same IndexError, which costs a wait for the stream
// (first_out_of_range). scatter_add adds with atomics: float sums of duplicate indices may
// come out in another order than the CPU's (integers and bools are exact). topk ranks every
// element of its row against the others (NaN above everything, ties by position), so its
// order is the CPU's exactly. 16-bit cumsum runs on a float32 copy and rounds, as the CPU.
//
// Thread safety: any thread; launches on the calling thread's current stream.
#include <cub/device/device_segmented_sort.cuh>

#include "tensor/cuda/kernels.cuh"
#include "tensor/index_math.hpp"
#include "tensor/op_rules.hpp"

namespace dtr::cuda::detail {

namespace {

__global__ void __launch_bounds__(kThreads)
    first_bad_kernel(const int64_t* p, int64_t n, int64_t lo, int64_t hi, int64_t allowed,
                     unsigned long long* first) {
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += step) {
    const int64_t v = p[i];
    if ((v < lo || v >= hi) && v != allowed) atomicMin(first, static_cast<unsigned long long>(i));
  }
}

int64_t read_int64(const Ctx& c, const void* p) {
  int64_t v = 0;
  check_cuda(c, "cudaMemcpyAsync",
             cudaMemcpyAsync(&v, p, sizeof(v), cudaMemcpyDeviceToHost, c.stream));
  check_cuda(c, "cudaStreamSynchronize", cudaStreamSynchronize(c.stream));
  return v;
}

local::Tensor int64_on(const Ctx& c, const local::Tensor& t) {
  return packed_on(c, t, DType::Int64);
}

const int64_t* int64_data(const local::Tensor& t) {
  return static_cast<const int64_t*>(t.raw_data());
}

}  // namespace

local::Tensor packed_on(const Ctx& c, const local::Tensor& t, DType dtype) {
  if (t.dtype() == dtype) return contiguous_on(c, t);
  local::Tensor out = empty_on(c, t.shape(), dtype);
  copy_impl(c, out, t);
  return out;
}

BadIndex first_out_of_range(const Ctx& c, const int64_t* p, int64_t n, int64_t lo, int64_t hi,
                            int64_t allowed) {
  if (n <= 0) return {};
  local::Tensor first = empty_on(c, {1}, DType::Int64);
  fill_impl(c, first, Scalar(std::numeric_limits<int64_t>::max()));
  first_bad_kernel<<<grid_for(c, n), kThreads, 0, c.stream>>>(
      p, n, lo, hi, allowed, static_cast<unsigned long long*>(first.raw_data()));
  check_launch(c, "index check kernel");
  const int64_t at = read_int64(c, first.raw_data());
  if (at == std::numeric_limits<int64_t>::max()) return {};
  return {at, read_int64(c, p + at)};
}

void join_op(const Ctx& c, const OpDef& d, std::span<const local::Tensor> in, const OpAttrs& a,
             const local::Tensor& out) {
  if (d.id == OpId::stack) {
    const int64_t dim = wrap_dim(d.name, a.ints[0], out.dim());
    for (size_t i = 0; i < in.size(); ++i)
      copy_impl(c, out.select(dim, static_cast<int64_t>(i)), in[i]);
    return;
  }
  int64_t offset = 0, dim = -1;
  for (const local::Tensor& t : in) {
    if (::dtr::detail::cat_skips(t.meta())) continue;
    if (dim < 0) dim = wrap_dim(d.name, a.ints[0], out.dim());
    const int64_t n = t.shape()[dim];
    copy_impl(c, out.narrow(dim, offset, n), t);
    offset += n;
  }
}

namespace {

// ---- where, masked_fill ----

struct SelectArgs {
  char* out;
  DType out_dtype;
  const char* mask;  // bool: where's condition, masked_fill's mask
  const char* a;     // where's a, masked_fill's x
  DType a_dtype;
  const char* b;  // where's b (masked_fill: none)
  DType b_dtype;
  Indexer<4> ix;
  int64_t n;
};

template <typename T>
__global__ void __launch_bounds__(kThreads) select_kernel(SelectArgs s, bool fill, T value) {
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < s.n;
       i += step) {
    int64_t off[4];
    s.ix.offsets(i, off);
    const bool m = *reinterpret_cast<const bool*>(s.mask + off[1]);
    T v;
    if (fill)
      v = m ? value : load_as<T>(s.a + off[2], s.a_dtype);
    else
      v = m ? load_as<T>(s.a + off[2], s.a_dtype) : load_as<T>(s.b + off[3], s.b_dtype);
    store_as<T>(s.out + off[0], s.out_dtype, v);
  }
}

// where (condition, a, b) or masked_fill (x, mask) with `value`.
void select_op(const Ctx& c, const OpDef& d, std::span<const local::Tensor> in, const OpAttrs& a,
               const local::Tensor& out) {
  const bool fill = d.id == OpId::masked_fill;
  const Shape& shape = out.shape();
  const local::Tensor& mask = fill ? in[1] : in[0];
  const local::Tensor& x = fill ? in[0] : in[1];
  const local::Tensor& y = fill ? in[0] : in[2];  // masked_fill reads no b
  SelectArgs s{static_cast<char*>(out.raw_data()),
               out.dtype(),
               static_cast<const char*>(mask.raw_data()),
               static_cast<const char*>(x.raw_data()),
               x.dtype(),
               static_cast<const char*>(y.raw_data()),
               y.dtype(),
               {},
               out.numel()};
  if (s.n == 0) return;
  auto esz = [](const local::Tensor& t) { return static_cast<int64_t>(element_size(t.dtype())); };
  s.ix = make_indexer<4>(shape,
                         {out.strides(), broadcast_strides(mask.meta(), shape),
                          broadcast_strides(x.meta(), shape), broadcast_strides(y.meta(), shape)},
                         {esz(out), 1, esz(x), esz(y)});
  dispatch_compute(out.dtype(), [&]<typename T>() {
    const T value = fill ? a.scalars[0].to<T>() : T(0);
    select_kernel<T><<<grid_for(c, s.n), kThreads, 0, c.stream>>>(s, fill, value);
  });
  check_launch(c, "where kernel");
}

// ---- index_select, gather, scatter_add ----

template <typename U>
__global__ void __launch_bounds__(kThreads)
    index_select_kernel(const U* x, const int64_t* idx, U* out, int64_t n_out, int64_t len,
                        int64_t size, int64_t inner) {
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n_out;
       i += step) {
    const int64_t j = i % inner, k = (i / inner) % len, o = i / (inner * len);
    out[i] = x[(o * size + idx[k]) * inner + j];
  }
}

// Element copies by size: the data's bits, whatever the dtype.
template <typename F>
void by_element_size(DType t, F&& f) {
  switch (element_size(t)) {
    case 1:
      return f.template operator()<uint8_t>();
    case 2:
      return f.template operator()<uint16_t>();
    case 4:
      return f.template operator()<uint32_t>();
    default:
      return f.template operator()<uint64_t>();
  }
}

[[noreturn]] void index_out_of_range(const OpDef& d, int64_t index, int64_t size, int64_t dim,
                                     const Shape& shape) {
  fail<IndexError>(d.name, "index {} is out of range for dim {} of size {} (shape {})", index, dim,
                   size, shape);
}

void index_select_op(const Ctx& c, const OpDef& d, std::span<const local::Tensor> in,
                     const OpAttrs& a, const local::Tensor& out) {
  const local::Tensor x = contiguous_on(c, in[0]), idx = int64_on(c, in[1]);
  const int64_t dim = wrap_dim(d.name, a.ints[0], x.dim());
  const local::detail::DimSplit s = local::detail::split_at(x.shape(), dim);
  const BadIndex bad = first_out_of_range(c, int64_data(idx), idx.numel(), 0, s.size);
  if (bad.position >= 0) index_out_of_range(d, bad.value, s.size, dim, x.shape());
  const int64_t n = out.numel();
  if (n == 0) return;
  by_element_size(x.dtype(), [&]<typename U>() {
    index_select_kernel<U><<<grid_for(c, n), kThreads, 0, c.stream>>>(
        static_cast<const U*>(x.raw_data()), int64_data(idx), static_cast<U*>(out.raw_data()), n,
        idx.numel(), s.size, s.inner);
  });
  check_launch(c, "index_select kernel");
}

// Positions of gather and scatter_add: element i of the index (row-major over its shape)
// and where it lands in x (its coordinates, dim's replaced by the index value) and in src.
struct GatherArgs {
  int nd = 0;
  int64_t dim = 0;
  int64_t shape[kMaxDims] = {};    // the index's
  int64_t xstride[kMaxDims] = {};  // x's (contiguous)
  int64_t sstride[kMaxDims] = {};  // src's (contiguous), scatter_add
  int64_t n = 0;
  __device__ void offsets(int64_t i, int64_t at, int64_t& x_off, int64_t& src_off) const {
    x_off = 0;
    src_off = 0;
    for (int d = nd - 1; d >= 0; --d) {
      const int64_t coord = i % shape[d];
      i /= shape[d];
      x_off += (d == dim ? at : coord) * xstride[d];
      src_off += coord * sstride[d];
    }
  }
};

template <typename U>
__global__ void __launch_bounds__(kThreads)
    gather_kernel(GatherArgs g, const U* x, const int64_t* idx, U* out) {
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < g.n;
       i += step) {
    int64_t xo, so;
    g.offsets(i, idx[i], xo, so);
    out[i] = x[xo];
  }
}

// Adds src into the workspace `ws` (type W, atomics: float, double, int32, int64 as
// unsigned wrapping sums).
template <typename W>
__global__ void __launch_bounds__(kThreads)
    scatter_add_kernel(GatherArgs g, W* ws, const int64_t* idx, const char* src, DType src_dtype,
                       int64_t esz) {
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < g.n;
       i += step) {
    int64_t xo, so;
    g.offsets(i, idx[i], xo, so);
    const W v = load_as<W>(src + so * esz, src_dtype);
    if constexpr (std::is_same_v<W, int64_t>)
      atomicAdd(reinterpret_cast<unsigned long long*>(ws + xo), static_cast<unsigned long long>(v));
    else
      atomicAdd(ws + xo, v);
  }
}

// scatter: out[x position] = src[i] (of duplicate positions, one write wins).
template <typename U>
__global__ void __launch_bounds__(kThreads)
    scatter_kernel(GatherArgs g, U* out, const int64_t* idx, const U* src) {
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < g.n;
       i += step) {
    int64_t xo, so;
    g.offsets(i, idx[i], xo, so);
    out[xo] = src[so];
  }
}

// The index of gather / scatter_add / scatter / scatter_reduce as int64 on the device,
// checked against x's size along dim (IndexError naming the first bad one), and the
// positions' layout over it, x and src (contiguous copies where they are not).
struct GatherPlan {
  local::Tensor idx, src;
  GatherArgs g;
};
GatherPlan gather_plan(const Ctx& c, const OpDef& d, const local::Tensor& x,
                       const local::Tensor& index, const local::Tensor& source, int64_t dim) {
  const int64_t size = x.dim() == 0 ? 1 : x.shape()[dim];
  GatherPlan p{int64_on(c, index), contiguous_on(c, source), {}};
  const BadIndex bad = first_out_of_range(c, int64_data(p.idx), p.idx.numel(), 0, size);
  if (bad.position >= 0) index_out_of_range(d, bad.value, size, dim, x.shape());
  p.g.nd = static_cast<int>(p.idx.dim());
  p.g.dim = dim;
  p.g.n = p.idx.numel();
  const Strides xs = contiguous_strides(x.shape());
  for (int k = 0; k < p.g.nd; ++k) {
    p.g.shape[k] = p.idx.shape()[k];
    p.g.xstride[k] = xs[k];
    p.g.sstride[k] = p.src.strides()[k];
  }
  return p;
}

// The dtype scatter_add and scatter_reduce fold into: one with device atomics (float for the
// 16-bit floats, int32 for the narrower integers), converted back to x's at the end.
DType atomic_workspace_dtype(DType x) {
  if (is_floating(x)) return x == DType::Float64 ? DType::Float64 : DType::Float32;
  return x == DType::Int64 ? DType::Int64 : DType::Int32;
}

void gather_scatter_op(const Ctx& c, const OpDef& d, std::span<const local::Tensor> in,
                       const OpAttrs& a, const local::Tensor& out) {
  const local::Tensor& x = in[0];
  const int64_t dim = wrap_dim(d.name, a.ints[0], x.dim());
  const GatherPlan plan = gather_plan(c, d, x, in[1], d.id == OpId::gather ? x : in[2], dim);
  const local::Tensor& idx = plan.idx;
  const local::Tensor& src = plan.src;
  const GatherArgs& g = plan.g;
  if (d.id == OpId::gather) {
    if (g.n == 0) return;
    by_element_size(x.dtype(), [&]<typename U>() {
      gather_kernel<U><<<grid_for(c, g.n), kThreads, 0, c.stream>>>(
          g, static_cast<const U*>(src.raw_data()), int64_data(idx),
          static_cast<U*>(out.raw_data()));
    });
    check_launch(c, "gather kernel");
    return;
  }
  if (d.id == OpId::scatter) {
    copy_impl(c, out, x);
    if (g.n == 0) return;
    by_element_size(x.dtype(), [&]<typename U>() {
      scatter_kernel<U><<<grid_for(c, g.n), kThreads, 0, c.stream>>>(
          g, static_cast<U*>(out.raw_data()), int64_data(idx),
          static_cast<const U*>(src.raw_data()));
    });
    check_launch(c, "scatter kernel");
    return;
  }
  // scatter_add: a workspace of an atomic type holds x, takes the sums, and is stored back.
  const DType w = atomic_workspace_dtype(x.dtype());
  local::Tensor ws = w == out.dtype() ? out : empty_on(c, out.shape(), w);
  copy_impl(c, ws, x);
  if (g.n > 0) {
    dispatch(w, [&]<typename W>() {
      if constexpr (std::is_same_v<W, float> || std::is_same_v<W, double> ||
                    std::is_same_v<W, int32_t> || std::is_same_v<W, int64_t>) {
        scatter_add_kernel<W><<<grid_for(c, g.n), kThreads, 0, c.stream>>>(
            g, static_cast<W*>(ws.raw_data()), int64_data(idx),
            static_cast<const char*>(src.raw_data()), src.dtype(),
            static_cast<int64_t>(element_size(src.dtype())));
      }
    });
    check_launch(c, "scatter_add kernel");
  }
  if (ws.raw_data() != out.raw_data()) copy_impl(c, out, ws);
}

// ---- scatter_reduce: the workspace of scatter_add, folded by compare-and-swap ----

using ::dtr::detail::ScatterReduce;

// Folds v into *p by r atomically: sums by atomicAdd (int64 as unsigned wrapping sums),
// the others by a compare-and-swap loop on the bits of W (4 or 8 bytes).
template <typename W>
__device__ void atomic_fold(W* p, W v, ScatterReduce r) {
  if (r == ScatterReduce::Sum || r == ScatterReduce::Mean) {
    if constexpr (std::is_same_v<W, int64_t>)
      atomicAdd(reinterpret_cast<unsigned long long*>(p), static_cast<unsigned long long>(v));
    else
      atomicAdd(p, v);
    return;
  }
  using Bits = std::conditional_t<sizeof(W) == 4, unsigned int, unsigned long long>;
  Bits* bits = reinterpret_cast<Bits*>(p);
  Bits old = *bits, seen;
  do {
    seen = old;
    W cur;
    memcpy(&cur, &seen, sizeof(W));
    const W next = ::dtr::detail::scatter_combine<W>(r, cur, v);
    Bits next_bits;
    memcpy(&next_bits, &next, sizeof(W));
    if (next_bits == seen) return;
    old = atomicCAS(bits, seen, next_bits);
  } while (old != seen);
}

// Without include_self: each written position of the workspace starts at the identity.
template <typename W>
__global__ void __launch_bounds__(kThreads)
    scatter_identity_kernel(GatherArgs g, W* ws, const int64_t* idx, ScatterReduce r) {
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < g.n;
       i += step) {
    int64_t xo, so;
    g.offsets(i, idx[i], xo, so);
    ws[xo] = ::dtr::detail::scatter_identity<W>(r);
  }
}

template <typename W>
__global__ void __launch_bounds__(kThreads)
    scatter_fold_kernel(GatherArgs g, W* ws, unsigned long long* count, const int64_t* idx,
                        const char* src, DType src_dtype, int64_t esz, ScatterReduce r) {
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < g.n;
       i += step) {
    int64_t xo, so;
    g.offsets(i, idx[i], xo, so);
    atomic_fold<W>(ws + xo, load_as<W>(src + so * esz, src_dtype), r);
    if (count) atomicAdd(count + xo, 1ULL);
  }
}

template <typename W>
__global__ void __launch_bounds__(kThreads)
    scatter_mean_kernel(W* ws, const unsigned long long* count, int64_t n, int64_t self) {
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += step)
    if (count[i] > 0)
      ws[i] = ::dtr::detail::scatter_mean<W>(ws[i], static_cast<int64_t>(count[i]) + self);
}

void scatter_reduce_op(const Ctx& c, const OpDef& d, std::span<const local::Tensor> in,
                       const OpAttrs& a, const local::Tensor& out) {
  const local::Tensor& x = in[0];
  const int64_t dim = wrap_dim(d.name, a.ints[0], x.dim());
  const auto r = static_cast<ScatterReduce>(a.ints[1]);
  const bool include_self = a.ints[2] != 0;
  const GatherPlan plan = gather_plan(c, d, x, in[1], in[2], dim);
  const local::Tensor& idx = plan.idx;
  const local::Tensor& src = plan.src;
  const GatherArgs& g = plan.g;
  const DType w = atomic_workspace_dtype(x.dtype());
  local::Tensor ws = w == out.dtype() ? out : empty_on(c, out.shape(), w);
  copy_impl(c, ws, x);
  const bool mean = r == ScatterReduce::Mean;
  const local::Tensor count = mean ? empty_on(c, out.shape(), DType::Int64) : local::Tensor();
  if (mean)
    check_cuda(
        c, "cudaMemsetAsync",
        cudaMemsetAsync(count.raw_data(), 0, static_cast<size_t>(count.numel()) * 8, c.stream));
  auto* counts = mean ? static_cast<unsigned long long*>(count.raw_data()) : nullptr;
  if (g.n > 0) {
    dispatch(w, [&]<typename W>() {
      if constexpr (std::is_same_v<W, float> || std::is_same_v<W, double> ||
                    std::is_same_v<W, int32_t> || std::is_same_v<W, int64_t>) {
        W* p = static_cast<W*>(ws.raw_data());
        if (!include_self)
          scatter_identity_kernel<W>
              <<<grid_for(c, g.n), kThreads, 0, c.stream>>>(g, p, int64_data(idx), r);
        scatter_fold_kernel<W><<<grid_for(c, g.n), kThreads, 0, c.stream>>>(
            g, p, counts, int64_data(idx), static_cast<const char*>(src.raw_data()), src.dtype(),
            static_cast<int64_t>(element_size(src.dtype())), r);
        if (mean)
          scatter_mean_kernel<W><<<grid_for(c, ws.numel()), kThreads, 0, c.stream>>>(
              p, counts, ws.numel(), include_self ? 1 : 0);
      }
    });
    check_launch(c, "scatter_reduce kernel");
  }
  if (ws.raw_data() != out.raw_data()) copy_impl(c, out, ws);
}

// ---- cumsum, one_hot, topk ----

template <typename T>
__global__ void __launch_bounds__(kThreads)
    cumsum_kernel(const T* x, T* out, int64_t rows, int64_t size, int64_t inner) {
  using Acc = std::conditional_t<is_floating_v<T>, double, T>;
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t r = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; r < rows;
       r += step) {
    const int64_t base = (r / inner) * size * inner + r % inner;
    Acc acc = 0;
    for (int64_t i = 0; i < size; ++i) {
      acc = wrap_add<Acc>(acc, static_cast<Acc>(x[base + i * inner]));
      out[base + i * inner] = static_cast<T>(acc);
    }
  }
}

void cumsum_op(const Ctx& c, const OpDef& d, std::span<const local::Tensor> in, const OpAttrs& a,
               const local::Tensor& out) {
  const bool half = out.dtype() == DType::Float16 || out.dtype() == DType::BFloat16;
  const DType work = half ? DType::Float32 : out.dtype();
  const local::Tensor x = packed_on(c, in[0], work);
  const local::Tensor y = half ? empty_on(c, out.shape(), work) : out;
  const local::detail::DimSplit s =
      local::detail::split_at(x.shape(), wrap_dim(d.name, a.ints[0], x.dim()));
  const int64_t rows = s.outer * s.inner;
  if (rows > 0 && s.size > 0) {
    dispatch(work, [&]<typename T>() {
      if constexpr (!is_half_v<T> && !std::is_same_v<T, bool>)
        cumsum_kernel<T><<<grid_for(c, rows), kThreads, 0, c.stream>>>(
            static_cast<const T*>(x.raw_data()), static_cast<T*>(y.raw_data()), rows, s.size,
            s.inner);
    });
    check_launch(c, "cumsum kernel");
  }
  if (half) copy_impl(c, out, y);
}

__global__ void __launch_bounds__(kThreads)
    one_hot_kernel(const int64_t* x, int64_t* out, int64_t n, int64_t classes) {
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += step)
    out[i * classes + x[i]] = 1;
}

void one_hot_op(const Ctx& c, const OpDef& d, std::span<const local::Tensor> in,
                const local::Tensor& out) {
  const local::Tensor x = int64_on(c, in[0]);
  const int64_t classes = out.shape()[out.dim() - 1], n = x.numel();
  const BadIndex bad = first_out_of_range(c, int64_data(x), n, 0, classes);
  if (bad.position >= 0)
    fail<IndexError>(d.name, "class {} (element {}) is out of range for num_classes {}", bad.value,
                     bad.position, classes);
  fill_impl(c, out, Scalar(0));
  if (n == 0 || classes == 0) return;
  one_hot_kernel<<<grid_for(c, n), kThreads, 0, c.stream>>>(
      int64_data(x), static_cast<int64_t*>(out.raw_data()), n, classes);
  check_launch(c, "one_hot kernel");
}

// topk's order (the CPU's ranks_before): NaN above everything, ties by position.
template <typename T>
__device__ bool ranks_before(T a, int64_t ia, T b, int64_t ib, bool largest) {
  using C = compute_type_t<T>;
  const C x = static_cast<C>(a), y = static_cast<C>(b);
  const bool na = is_nan(x), nb = is_nan(y);
  if (na != nb) return largest ? na : nb;
  if (!na && x != y) return largest ? y < x : x < y;
  return ia < ib;
}

// One thread per element of a row: its rank among the row's elements; the first k ranks
// are written in order.
template <typename T>
__global__ void __launch_bounds__(kThreads)
    topk_kernel(const T* x, T* values, int64_t* indices, int64_t rows, int64_t size, int64_t inner,
                int64_t k, bool largest) {
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t total = rows * size;
  for (int64_t t = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; t < total;
       t += step) {
    const int64_t r = t / size, i = t % size;
    const int64_t o = r / inner, j = r % inner;
    const T* row = x + o * size * inner + j;
    const T v = row[i * inner];
    int64_t rank = 0;
    for (int64_t e = 0; e < size && rank < k; ++e)
      rank += ranks_before(row[e * inner], e, v, i, largest) ? 1 : 0;
    if (rank >= k) continue;
    const int64_t at = (o * k + rank) * inner + j;
    if (values) values[at] = v;
    if (indices) indices[at] = i;
  }
}

// ---- tril, triu ----

// out[i] = x[i] where column - row <= k (tril) or >= k (triu) in its matrix, else 0.
template <typename U>
__global__ void __launch_bounds__(kThreads)
    triangle_kernel(const U* x, U* out, int64_t n, int64_t rows, int64_t cols, int64_t k,
                    bool lower) {
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += step) {
    const int64_t col = i % cols, row = (i / cols) % rows;
    const bool keep = lower ? col - row <= k : col - row >= k;
    out[i] = keep ? x[i] : U(0);  // all-zero bits: zero in every dtype
  }
}

void triangle_op(const Ctx& c, const OpDef& d, std::span<const local::Tensor> in, const OpAttrs& a,
                 const local::Tensor& out) {
  const local::Tensor x = contiguous_on(c, in[0]);
  const int64_t n = x.numel();
  if (n == 0) return;
  const int64_t rows = x.shape()[x.dim() - 2], cols = x.shape()[x.dim() - 1];
  // Clamped so that column - row against k cannot overflow; any k past either end is alike.
  const int64_t k = std::clamp<int64_t>(a.ints[0], -rows - 1, cols + 1);
  by_element_size(x.dtype(), [&]<typename U>() {
    triangle_kernel<U><<<grid_for(c, n), kThreads, 0, c.stream>>>(
        static_cast<const U*>(x.raw_data()), static_cast<U*>(out.raw_data()), n, rows, cols, k,
        d.id == OpId::tril);
  });
  check_launch(c, "tril/triu kernel");
}

// ---- flip, constant_pad_nd: out[i] = x[source_of(i)], or the pad value ----

template <typename U>
__global__ void __launch_bounds__(kThreads)
    remap_kernel(const U* x, U* out, int64_t n, ::dtr::detail::SourceMap m, U fill) {
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += step) {
    const int64_t s = ::dtr::detail::source_of(m, i);
    out[i] = s < 0 ? fill : x[s];
  }
}

void remap_op(const Ctx& c, const OpDef& d, std::span<const local::Tensor> in, const OpAttrs& a,
              const local::Tensor& out) {
  const local::Tensor x = contiguous_on(c, in[0]);
  const int64_t n = out.numel();
  if (n == 0) return;
  const ::dtr::detail::SourceMap m = ::dtr::detail::source_map(d.id, x.shape(), out.shape(), a);
  const Scalar fill = a.scalars[0].is_none() ? Scalar(0) : a.scalars[0];
  dispatch(x.dtype(), [&]<typename T>() {
    const T value = fill.to<T>();
    if constexpr (is_half_v<T>) {  // the rounded bits
      remap_kernel<uint16_t><<<grid_for(c, n), kThreads, 0, c.stream>>>(
          static_cast<const uint16_t*>(x.raw_data()), static_cast<uint16_t*>(out.raw_data()), n, m,
          value.bits);
    } else {
      remap_kernel<T><<<grid_for(c, n), kThreads, 0, c.stream>>>(
          static_cast<const T*>(x.raw_data()), static_cast<T*>(out.raw_data()), n, m, value);
    }
  });
  check_launch(c, "flip/constant_pad_nd kernel");
}

// ---- sort_indices: a key per element (dtr::detail::sort_key), then CUB's stable
// segmented sort of (key, position) pairs, one segment per row; a dim other than the last
// is moved last first (a packed copy) and the positions written back through the same swap.

template <typename T>
__global__ void __launch_bounds__(kThreads)
    sort_keys_kernel(const T* x, uint64_t* keys, int64_t* pos, int64_t n, int64_t size,
                     bool descending) {
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += step) {
    keys[i] = ::dtr::detail::sort_key(x[i], descending);
    pos[i] = i % size;
  }
}

__global__ void __launch_bounds__(kThreads)
    row_offsets_kernel(int64_t* offsets, int64_t rows, int64_t size) {
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t r = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; r <= rows;
       r += step)
    offsets[r] = r * size;
}

// t with dims a and b swapped (a view: the same storage).
local::Tensor swapped(const local::Tensor& t, int64_t a, int64_t b) {
  TensorMeta m = t.meta();
  std::swap(m.shape[static_cast<size_t>(a)], m.shape[static_cast<size_t>(b)]);
  std::swap(m.strides[static_cast<size_t>(a)], m.strides[static_cast<size_t>(b)]);
  return local::Tensor(t.storage(), m);
}

void sort_op(const Ctx& c, const OpDef& d, std::span<const local::Tensor> in, const OpAttrs& a,
             const local::Tensor& out) {
  const local::Tensor& x = in[0];
  const int64_t n = x.numel();
  if (n == 0) return;
  if (x.dim() == 0) {
    fill_impl(c, out, Scalar(0));
    return;
  }
  const int64_t dim = wrap_dim(d.name, a.ints[0], x.dim()), last = x.dim() - 1;
  const local::Tensor rows_x = contiguous_on(c, dim == last ? x : swapped(x, dim, last));
  const int64_t size = rows_x.shape()[static_cast<size_t>(last)], rows = n / size;
  const local::Tensor keys = empty_on(c, {2 * n}, DType::Int64);
  const local::Tensor pos = empty_on(c, {n}, DType::Int64);
  const local::Tensor sorted = dim == last ? out : empty_on(c, rows_x.shape(), DType::Int64);
  const local::Tensor offsets = empty_on(c, {rows + 1}, DType::Int64);
  auto* key_in = static_cast<uint64_t*>(keys.raw_data());
  dispatch(x.dtype(), [&]<typename T>() {
    sort_keys_kernel<T><<<grid_for(c, n), kThreads, 0, c.stream>>>(
        static_cast<const T*>(rows_x.raw_data()), key_in, static_cast<int64_t*>(pos.raw_data()), n,
        size, a.ints[1] != 0);
  });
  row_offsets_kernel<<<grid_for(c, rows + 1), kThreads, 0, c.stream>>>(
      static_cast<int64_t*>(offsets.raw_data()), rows, size);
  check_launch(c, "sort key kernels");
  const auto* off = static_cast<const int64_t*>(offsets.raw_data());
  size_t temp_bytes = 0;
  auto run = [&](void* temp) {
    return cub::DeviceSegmentedSort::StableSortPairs(
        temp, temp_bytes, key_in, key_in + n, static_cast<const int64_t*>(pos.raw_data()),
        static_cast<int64_t*>(sorted.raw_data()), n, rows, off, off + 1, c.stream);
  };
  check_cuda(c, "cub::DeviceSegmentedSort (size)", run(nullptr));
  const local::Tensor temp = empty_on(c, {static_cast<int64_t>(temp_bytes / 8 + 1)}, DType::Int64);
  check_cuda(c, "cub::DeviceSegmentedSort", run(temp.raw_data()));
  if (dim != last) copy_impl(c, swapped(out, dim, last), sorted);
}

void topk_op(const Ctx& c, const OpDef& d, std::span<const local::Tensor> in, const OpAttrs& a,
             const local::Tensor& out) {
  const local::Tensor x = contiguous_on(c, in[0]);
  const int64_t k = a.ints[0];
  const bool largest = a.ints[2] != 0, values = d.id == OpId::topk;
  const local::detail::DimSplit s =
      local::detail::split_at(x.shape(), wrap_dim(d.name, a.ints[1], x.dim()));
  const int64_t rows = s.outer * s.inner;
  if (rows * s.size == 0 || k == 0) return;
  dispatch(x.dtype(), [&]<typename T>() {
    if constexpr (std::is_same_v<T, bool>) {
      fail<DTypeError>(d.name, "not supported for bool tensors");
    } else {
      topk_kernel<T><<<grid_for(c, rows * s.size), kThreads, 0, c.stream>>>(
          static_cast<const T*>(x.raw_data()), values ? static_cast<T*>(out.raw_data()) : nullptr,
          values ? nullptr : static_cast<int64_t*>(out.raw_data()), rows, s.size, s.inner, k,
          largest);
    }
  });
  check_launch(c, "topk kernel");
}

}  // namespace

void index_op(const Ctx& c, const OpDef& d, std::span<const local::Tensor> in, const OpAttrs& a,
              const local::Tensor& out) {
  switch (d.id) {
    case OpId::where:
    case OpId::masked_fill:
      return select_op(c, d, in, a, out);
    case OpId::index_select:
      return index_select_op(c, d, in, a, out);
    case OpId::gather:
    case OpId::scatter_add:
    case OpId::scatter:
      return gather_scatter_op(c, d, in, a, out);
    case OpId::scatter_reduce:
      return scatter_reduce_op(c, d, in, a, out);
    case OpId::sort_indices:
      return sort_op(c, d, in, a, out);
    case OpId::cumsum:
      return cumsum_op(c, d, in, a, out);
    case OpId::flip:
    case OpId::constant_pad_nd:
      return remap_op(c, d, in, a, out);
    case OpId::one_hot:
      return one_hot_op(c, d, in, out);
    case OpId::topk:
    case OpId::topk_indices:
      return topk_op(c, d, in, a, out);
    case OpId::tril:
    case OpId::triu:
      return triangle_op(c, d, in, a, out);
    default:
      fail<InvalidArgument>(d.name, "is not an indexing op");
  }
}

}  // namespace dtr::cuda::detail
