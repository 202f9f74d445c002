// Internal: what the CUDA kernel files (tensor/cuda/kernels*.cu) share: error checks that
// name the op and the device, the device guard, launch sizes, dtype dispatch, the
// conversions of copy_into (saturating, bool = nonzero) for device code, the strided
// offset calculator (Indexer) and the generic elementwise kernels built on it.
//
// Elementwise kernels are templated on the compute type only (float for float16 and
// bfloat16: their elements are converted to float as they are loaded and rounded to
// nearest even as they are stored, by dtr/half.hpp's conversions, the CPU's own); the op is
// its OpId (the op table's code, include/dtr/op_table.hpp), a runtime value in a small
// functor that switches on it in device code (one kernel per dtype serves every unary op,
// one per dtype every binary op), and operands of another dtype are converted as they are
// loaded, so the number of instantiations stays small. No kernel file keeps its own list of
// op codes.
//
// Thread safety: the host helpers are safe from any thread (the SM-count cache is atomic);
// kernels launch on the calling thread's current stream of the tensors' device.
#pragma once

// fmt 9 (tensor/check.hpp formats every error) under nvcc: its front end cannot evaluate
// the consteval format-string checks, and fmt turns its constexpr off when it sees __NVCC__
// while keeping C++20 constexpr parts, which the host compiler then rejects. Keep constexpr
// on (as in the C++ files) and make the format-string check an ordinary call. Must come
// before anything includes fmt: kernels.cuh is the first include of every kernels*.cu.
#ifndef FMT_CONSTEVAL
#define FMT_CONSTEVAL
#endif
#ifndef FMT_USE_CONSTEXPR
#define FMT_USE_CONSTEXPR 1
#endif

#include <cuda_runtime.h>

#include <array>
#include <cmath>
#include <cstdint>
#include <limits>
#include <span>
#include <string_view>
#include <type_traits>
#include <vector>

#include "dtr/tensor.hpp"
#include "tensor/check.hpp"
#include "tensor/cuda/cuda.hpp"
#include "tensor/kernels.hpp"
#include "tensor/strided.hpp"

namespace dtr::cuda::detail {

using dtr::detail::fail;

// ---- host side: errors, device, stream, launch sizes ----

// What one kernel call works with: the op's name (for errors), the device and its stream.
struct Ctx {
  std::string_view op;
  int device = 0;
  cudaStream_t stream = nullptr;
};

// Throws DeviceError "op: <what> failed on cuda:<device>: <CUDA's text>".
[[noreturn]] void throw_cuda(const Ctx& c, std::string_view what, cudaError_t err);
inline void check_cuda(const Ctx& c, std::string_view what, cudaError_t err) {
  if (err != cudaSuccess) throw_cuda(c, what, err);
}
// After a kernel launch: a launch error (bad configuration, a sticky earlier fault).
inline void check_launch(const Ctx& c, std::string_view kernel) {
  check_cuda(c, kernel, cudaGetLastError());
}

// Makes `device` the calling thread's current CUDA device for its scope.
class DeviceGuard {
 public:
  DeviceGuard(const Ctx& c);
  ~DeviceGuard();
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_ = -1;
  int device_;
};

// The device of `out` and every input; throws DeviceError naming the op and both devices
// when they differ (or when one lives on the host).
int common_device(std::string_view op, std::span<const local::Tensor> inputs,
                  const local::Tensor& out);
// A Ctx for `device`: its current stream.
Ctx make_ctx(std::string_view op, int device);

// Streaming multiprocessors of `device` (cached).
int sm_count(const Ctx& c);
inline constexpr int kThreads = 256;
// Blocks for a grid-stride loop over `work` items of kThreads threads each.
inline unsigned grid_for(const Ctx& c, int64_t work) {
  int64_t blocks = (work + kThreads - 1) / kThreads;
  int64_t cap = static_cast<int64_t>(sm_count(c)) * 16;
  if (blocks > cap) blocks = cap;
  if (blocks < 1) blocks = 1;
  return static_cast<unsigned>(blocks);
}

// A new contiguous tensor on the context's device (stream-ordered memory).
local::Tensor empty_on(const Ctx& c, const Shape& shape, DType dtype);
// t itself when contiguous, else a contiguous copy on the context's device.
local::Tensor contiguous_on(const Ctx& c, const local::Tensor& t);
// t converted to `dtype` (itself when it already is) and packed, on the context's device.
local::Tensor packed_on(const Ctx& c, const local::Tensor& t, DType dtype);
// Elementwise copy with broadcasting and conversion (copy_into's semantics).
void copy_impl(const Ctx& c, const local::Tensor& dst, const local::Tensor& src);
void fill_impl(const Ctx& c, const local::Tensor& t, Scalar v);

// ---- device side: arithmetic with the CPU kernels' semantics ----

// The CPU kernels' own helpers: dtype dispatch, broadcast strides (host), and the
// wrapping arithmetic of tensor/arith.hpp (host and device).
using ::dtr::detail::int_pow;
using ::dtr::detail::wrap_add;
using ::dtr::detail::wrap_mul;
using ::dtr::detail::wrap_sub;
using local::detail::broadcast_strides;
using local::detail::dispatch;
using local::detail::dispatch_compute;
using local::detail::dispatch_float;

template <typename T>
__device__ inline bool is_nan(T v) {
  if constexpr (is_floating_v<T>)
    return isnan(v);
  else
    return false;
}

// copy_into's element conversion: to bool is "nonzero", everything else saturating_cast.
template <typename O, typename S>
__host__ __device__ inline O convert(S v) {
  if constexpr (std::is_same_v<O, S>) {
    return v;
  } else if constexpr (std::is_same_v<O, bool>) {
    return v != S(0);
  } else {
    return saturating_cast<O>(v);
  }
}

// Loads the element of dtype `dt` at p converted to T (copy_into's conversion).
template <typename T>
__device__ inline T load_as(const char* p, DType dt) {
  if (dt == dtype_of_v<T>) return *reinterpret_cast<const T*>(p);
  switch (dt) {
    case DType::Float32:
      return convert<T>(*reinterpret_cast<const float*>(p));
    case DType::Float64:
      return convert<T>(*reinterpret_cast<const double*>(p));
    case DType::Int32:
      return convert<T>(*reinterpret_cast<const int32_t*>(p));
    case DType::Int64:
      return convert<T>(*reinterpret_cast<const int64_t*>(p));
    case DType::Bool:
      return convert<T>(*reinterpret_cast<const bool*>(p));
    case DType::Float16:
      return convert<T>(static_cast<float>(*reinterpret_cast<const float16*>(p)));
    case DType::BFloat16:
      return convert<T>(static_cast<float>(*reinterpret_cast<const bfloat16*>(p)));
  }
  return T(0);
}

// Stores v at p as dtype `dt` (copy_into's conversion).
template <typename T>
__device__ inline void store_as(char* p, DType dt, T v) {
  if (dt == dtype_of_v<T>) {
    *reinterpret_cast<T*>(p) = v;
    return;
  }
  switch (dt) {
    case DType::Float32:
      *reinterpret_cast<float*>(p) = convert<float>(v);
      return;
    case DType::Float64:
      *reinterpret_cast<double*>(p) = convert<double>(v);
      return;
    case DType::Int32:
      *reinterpret_cast<int32_t*>(p) = convert<int32_t>(v);
      return;
    case DType::Int64:
      *reinterpret_cast<int64_t*>(p) = convert<int64_t>(v);
      return;
    case DType::Bool:
      *reinterpret_cast<bool*>(p) = convert<bool>(v);
      return;
    case DType::Float16:
      *reinterpret_cast<float16*>(p) = float16(convert<float>(v));
      return;
    case DType::BFloat16:
      *reinterpret_cast<bfloat16*>(p) = bfloat16(convert<float>(v));
      return;
  }
}

// ---- the offset calculator ----

// Byte offsets of element `linear` (row-major over the iteration shape) in N operands.
// Built by make_indexer, which drops size-1 dims and merges dims that are contiguous with
// their inner neighbour in every operand (as the CPU's for_each_strided), so a contiguous
// operand set becomes one dim and costs one multiply per element.
template <int N>
struct Indexer {
  int ndim = 0;
  bool small = true;  // every linear index fits 32 bits: divide in 32 bits
  int64_t sizes[kMaxDims] = {};
  int64_t strides[kMaxDims][N] = {};  // bytes

  __device__ inline void offsets(int64_t linear, int64_t (&off)[N]) const {
#pragma unroll
    for (int k = 0; k < N; ++k) off[k] = 0;
    if (ndim == 1) {
#pragma unroll
      for (int k = 0; k < N; ++k) off[k] = linear * strides[0][k];
      return;
    }
    if (small) {
      uint32_t rem = static_cast<uint32_t>(linear);
      for (int d = ndim - 1; d > 0; --d) {
        uint32_t size = static_cast<uint32_t>(sizes[d]);
        uint32_t q = rem / size;
        int64_t c = rem - q * size;
        rem = q;
#pragma unroll
        for (int k = 0; k < N; ++k) off[k] += c * strides[d][k];
      }
      if (ndim > 0) {
#pragma unroll
        for (int k = 0; k < N; ++k) off[k] += static_cast<int64_t>(rem) * strides[0][k];
      }
    } else {
      int64_t rem = linear;
      for (int d = ndim - 1; d > 0; --d) {
        int64_t q = rem / sizes[d];
        int64_t c = rem - q * sizes[d];
        rem = q;
#pragma unroll
        for (int k = 0; k < N; ++k) off[k] += c * strides[d][k];
      }
      if (ndim > 0) {
#pragma unroll
        for (int k = 0; k < N; ++k) off[k] += rem * strides[0][k];
      }
    }
  }
};

// Indexer over `shape` for N operands with element strides `st` (each of shape.size()
// entries, already broadcast) and element sizes `esz`.
template <int N>
Indexer<N> make_indexer(const Shape& shape, const std::array<Strides, N>& st,
                        const std::array<int64_t, N>& esz) {
  Indexer<N> ix;
  const auto c = ::dtr::detail::collapse_dims(shape, st, esz);
  ix.ndim = c.ndim;
  int64_t n = 1;
  for (int d = 0; d < ix.ndim; ++d) {
    ix.sizes[d] = c.size[d];
    n *= ix.sizes[d];
    for (int k = 0; k < N; ++k) ix.strides[d][k] = c.stride[k][d];
  }
  ix.small = n <= std::numeric_limits<int32_t>::max();
  return ix;
}

// ---- generic elementwise kernels ----

// Operands of a strided elementwise kernel: out plus NIn inputs of any dtype.
template <int NIn>
struct EwArgs {
  char* out;
  DType out_dtype;
  const char* in[NIn];
  DType in_dtype[NIn];
  Indexer<NIn + 1> ix;
  int64_t n;
};

// out[i] = f(in0[i] (, in1[i])) with the inputs converted to T as they are loaded and the
// result (T) converted to out's dtype as it is stored; any strides, 64-bit positions.
template <typename T, int NIn, typename F>
__global__ void __launch_bounds__(kThreads) ew_strided_kernel(EwArgs<NIn> a, F f) {
  int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < a.n;
       i += step) {
    int64_t off[NIn + 1];
    a.ix.offsets(i, off);
    T x = load_as<T>(a.in[0] + off[1], a.in_dtype[0]);
    T r;
    if constexpr (NIn == 1) {
      r = f(x);
    } else {
      r = f(x, load_as<T>(a.in[1] + off[2], a.in_dtype[1]));
    }
    store_as<T>(a.out + off[0], a.out_dtype, r);
  }
}

template <typename T, int V>
struct alignas(sizeof(T) * V) Pack {
  T v[V];
};

// The fast path: out (element type O) and the inputs (T) contiguous and of one shape;
// 16-byte loads when every pointer is aligned for them (`vec`), a grid-stride loop.
template <typename T, typename O, int NIn, typename F>
__global__ void __launch_bounds__(kThreads)
    ew_contig_kernel(O* out, const T* a, const T* b, int64_t n, bool vec, F f) {
  constexpr int V = 16 / sizeof(T);
  int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  int64_t tid = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  int64_t head = 0;
  if (vec) {
    int64_t nv = n / V;
    for (int64_t i = tid; i < nv; i += step) {
      Pack<T, V> x = reinterpret_cast<const Pack<T, V>*>(a)[i];
      Pack<O, V> r;
      if constexpr (NIn == 1) {
#pragma unroll
        for (int j = 0; j < V; ++j) r.v[j] = convert<O>(f(x.v[j]));
      } else {
        Pack<T, V> y = reinterpret_cast<const Pack<T, V>*>(b)[i];
#pragma unroll
        for (int j = 0; j < V; ++j) r.v[j] = convert<O>(f(x.v[j], y.v[j]));
      }
      reinterpret_cast<Pack<O, V>*>(out)[i] = r;
    }
    head = nv * V;
  }
  for (int64_t i = head + tid; i < n; i += step) {
    if constexpr (NIn == 1) {
      out[i] = convert<O>(f(a[i]));
    } else {
      out[i] = convert<O>(f(a[i], b[i]));
    }
  }
}

inline bool aligned(const void* p, size_t bytes) {
  return reinterpret_cast<uintptr_t>(p) % bytes == 0;
}

// Runs f elementwise: out = f(inputs...) broadcast to out's shape. T is the compute type;
// inputs of other dtypes are converted on load, the result converted to out's dtype.
// Contiguous operands of one shape and dtype T take the vectorized kernel (whose output
// is T, or bool when kBoolOut: the comparisons).
template <typename T, int NIn, bool kBoolOut = false, typename F>
void launch_elementwise(const Ctx& c, const local::Tensor& out,
                        std::array<const local::Tensor*, NIn> in, F f, const char* kernel) {
  const int64_t n = out.numel();
  if (n == 0) return;
  const Shape& shape = out.shape();
  bool fast = out.meta().is_contiguous() &&
              (out.dtype() == dtype_of_v<T> || (kBoolOut && out.dtype() == DType::Bool));
  for (int k = 0; k < NIn; ++k)
    fast = fast && in[k]->dtype() == dtype_of_v<T> && in[k]->shape() == shape &&
           in[k]->meta().is_contiguous();
  if (fast) {
    const T* a = static_cast<const T*>(in[0]->raw_data());
    const T* b = NIn == 2 ? static_cast<const T*>(in[NIn - 1]->raw_data()) : nullptr;
    constexpr int V = 16 / sizeof(T);
    auto launch = [&]<typename O>() {
      O* o = static_cast<O*>(out.raw_data());
      bool vec = aligned(o, sizeof(O) * V) && aligned(a, 16) && (NIn == 1 || aligned(b, 16));
      ew_contig_kernel<T, O, NIn, F>
          <<<grid_for(c, vec ? (n + V - 1) / V : n), kThreads, 0, c.stream>>>(o, a, b, n, vec, f);
    };
    if constexpr (kBoolOut && !std::is_same_v<T, bool>) {
      if (out.dtype() == DType::Bool)
        launch.template operator()<bool>();
      else
        launch.template operator()<T>();
    } else {
      launch.template operator()<T>();
    }
    check_launch(c, kernel);
    return;
  }
  EwArgs<NIn> args;
  args.out = static_cast<char*>(out.raw_data());
  args.out_dtype = out.dtype();
  std::array<Strides, NIn + 1> st;
  std::array<int64_t, NIn + 1> esz;
  st[0] = out.strides();
  esz[0] = static_cast<int64_t>(element_size(out.dtype()));
  for (int k = 0; k < NIn; ++k) {
    args.in[k] = static_cast<const char*>(in[k]->raw_data());
    args.in_dtype[k] = in[k]->dtype();
    st[k + 1] = broadcast_strides(in[k]->meta(), shape);
    esz[k + 1] = static_cast<int64_t>(element_size(in[k]->dtype()));
  }
  args.ix = make_indexer<NIn + 1>(shape, st, esz);
  args.n = n;
  ew_strided_kernel<T, NIn, F><<<grid_for(c, n), kThreads, 0, c.stream>>>(args, f);
  check_launch(c, kernel);
}

// Writes g(i) (converted to T as copy_into would: saturating) to element i, logical order,
// of a tensor of any strides.
template <typename T, typename G>
__global__ void __launch_bounds__(kThreads)
    generate_kernel(char* base, Indexer<1> ix, int64_t n, G g) {
  int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += step) {
    int64_t off[1];
    ix.offsets(i, off);
    *reinterpret_cast<T*>(base + off[0]) = saturating_cast<T>(g(i));
  }
}

template <typename T, typename G>
void launch_generate(const Ctx& c, const local::Tensor& t, G g, const char* kernel) {
  const int64_t n = t.numel();
  if (n == 0) return;
  Indexer<1> ix = make_indexer<1>(t.shape(), {t.strides()}, {static_cast<int64_t>(sizeof(T))});
  generate_kernel<T, G>
      <<<grid_for(c, n), kThreads, 0, c.stream>>>(static_cast<char*>(t.raw_data()), ix, n, g);
  check_launch(c, kernel);
}

// ---- the kernel families (one .cu file each) ----

void unary_op(const Ctx& c, const OpDef& d, std::span<const local::Tensor> in, const OpAttrs& a,
              const local::Tensor& out);
void clamp_op(const Ctx& c, std::span<const local::Tensor> in, const OpAttrs& a,
              const local::Tensor& out);
void binary_op(const Ctx& c, const OpDef& d, std::span<const local::Tensor> in, const OpAttrs& a,
               const local::Tensor& out);
void reduce_op(const Ctx& c, const OpDef& d, std::span<const local::Tensor> in, const OpAttrs& a,
               const local::Tensor& out);
void linalg_op(const Ctx& c, const OpDef& d, std::span<const local::Tensor> in,
               const local::Tensor& out);
void create_op(const Ctx& c, const OpDef& d, const OpAttrs& a, const local::Tensor& out);
void mutate_op(const Ctx& c, const OpDef& d, std::span<const local::Tensor> in, const OpAttrs& a,
               const local::Tensor& out);
// The Join, Indexing and NN kinds (kernels_index.cu, kernels_nn.cu, kernels_conv.cu).
void join_op(const Ctx& c, const OpDef& d, std::span<const local::Tensor> in, const OpAttrs& a,
             const local::Tensor& out);
void index_op(const Ctx& c, const OpDef& d, std::span<const local::Tensor> in, const OpAttrs& a,
              const local::Tensor& out);
void nn_op(const Ctx& c, const OpDef& d, std::span<const local::Tensor> in, const OpAttrs& a,
           const local::Tensor& out);
void conv_op(const Ctx& c, const OpDef& d, std::span<const local::Tensor> in, const OpAttrs& a,
             const local::Tensor& out);

// Runs f(inputs, out) on float32 copies of float16/bfloat16 inputs into a float32 result
// rounded into `out` (the CPU's run_through_float32), or on the tensors themselves when none
// is 16-bit: the NN kernels compute in float32 or float64 only.
template <typename F>
void widened(const Ctx& c, std::span<const local::Tensor> in, const local::Tensor& out, F&& f) {
  auto half = [](DType t) { return t == DType::Float16 || t == DType::BFloat16; };
  bool any = half(out.dtype());
  for (const local::Tensor& t : in) any = any || half(t.dtype());
  if (!any) return f(in, out);
  std::vector<local::Tensor> wide(in.size());
  for (size_t i = 0; i < in.size(); ++i)
    wide[i] = half(in[i].dtype()) ? packed_on(c, in[i], DType::Float32) : in[i];
  const local::Tensor result = half(out.dtype()) ? empty_on(c, out.shape(), DType::Float32) : out;
  f(std::span<const local::Tensor>(wide), result);
  if (result.raw_data() != out.raw_data()) copy_impl(c, out, result);
}

// ---- checked indices (kernels_index.cu) ----

// The first position i < n whose int64 value p[i] lies outside [lo, hi) and differs from
// `allowed` (nll_loss's ignore_index), and that value; {-1, 0} when there is none. Waits for
// the stream: an index op reports a bad index as the CPU does (an IndexError naming it),
// at the cost of one synchronization.
struct BadIndex {
  int64_t position = -1;
  int64_t value = 0;
};
BadIndex first_out_of_range(const Ctx& c, const int64_t* p, int64_t n, int64_t lo, int64_t hi,
                            int64_t allowed = std::numeric_limits<int64_t>::min());

}  // namespace dtr::cuda::detail
