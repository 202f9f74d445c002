// CUDA reduction kernels: sum, prod, mean, max, min, argmax, argmin, norm, var, std, over
// all elements or over attrs.ints (keepdim only shapes the result, which infer() gave).
//
// As the CPU kernel (tensor/kernels_reduce.cpp): the input (converted to the result dtype,
// except for max/min/argmax/argmin) is permuted so that the kept dims come first and the
// reduced dims last, packed (by the copy kernel; skipped when the permuted view already is
// packed), and each output element reduces one contiguous row of `inner` elements. A row
// goes to one warp when short, to one block when long, and is split over several blocks
// (partials, then a combining kernel) when there are too few rows to fill the GPU.
//
// Semantics: floating sums, products, means, norms and variances accumulate in double as
// on the CPU, with the same formulas (norm p = inf / -inf / 0 / 1 / 2 / other; var and std
// two-pass, sum of squared deviations / max(0, n - correction)); integer sums and products
// wrap in int64. max/min/argmax/argmin give the first extreme and the first NaN when there
// is one (the combine step is index-aware, so the answer is the CPU's exactly).
// What differs: the CPU adds in element order, the GPU in a tree, so a floating result may
// differ in its last bits (float32 results, rounded from a double accumulator, almost
// always match; float64 ones by an ulp or so); norms with a general p use CUDA's pow.
//
// Thread safety: any thread; launches on the calling thread's current stream; temporaries
// come from dtr::cuda::allocate (stream-ordered) and are released after the launches.
#include "tensor/cuda/kernels.cuh"

namespace dtr::cuda::detail {

namespace {

constexpr int kWarps = kThreads / 32;

__device__ inline double nan_max(double a, double b) {
  if (isnan(a)) return a;
  if (isnan(b)) return b;
  return a > b ? a : b;
}
__device__ inline double nan_min(double a, double b) {
  if (isnan(a)) return a;
  if (isnan(b)) return b;
  return a < b ? a : b;
}

// The variant of norm() a p selects: what each element adds and how the total ends.
enum class NormP : uint8_t { Zero, One, Two, Inf, NegInf, Other };

// Floating reductions, accumulating in double. `op` is the table's OpId: sum, prod, mean,
// norm (the variant in `norm`), or var / std, whose reduction here is their second pass,
// the squared deviations from the per-row `mean`. `out` is T, or double when out_double
// (the per-row means of var/std's first pass, a mean reduction).
template <typename T>
struct FloatRed {
  using Acc = double;
  OpId op = OpId::sum;
  NormP norm = NormP::Two;
  bool out_double = false;
  double p = 2.0;
  double correction = 1.0;
  int64_t inner = 0;
  const double* mean = nullptr;  // var/std: per-row means
  void* out = nullptr;

  __device__ bool norm_is(NormP v) const { return op == OpId::norm && norm == v; }
  __device__ Acc init() const {
    if (op == OpId::prod) return 1.0;
    if (norm_is(NormP::NegInf)) return INFINITY;
    return 0.0;
  }
  __device__ Acc step(Acc a, T x, int64_t row, int64_t) const {
    double v = static_cast<double>(x);
    switch (op) {
      case OpId::sum:
      case OpId::mean:
        return a + v;
      case OpId::prod:
        return a * v;
      case OpId::norm:
        return norm_step(a, x, v);
      case OpId::var:
      case OpId::std: {
        double dv = v - mean[row];
        return a + dv * dv;
      }
      default:
        return a;
    }
  }
  __device__ Acc norm_step(Acc a, T x, double v) const {
    switch (norm) {
      case NormP::Zero:
        return a + (x != T(0) ? 1.0 : 0.0);
      case NormP::One:
        return a + fabs(v);
      case NormP::Two:
        return a + v * v;
      case NormP::Other:
        return a + pow(fabs(v), p);
      case NormP::Inf:
        return nan_max(a, fabs(v));
      case NormP::NegInf:
        return nan_min(a, fabs(v));
    }
    return a;
  }
  __device__ Acc combine(Acc a, Acc b) const {
    if (op == OpId::prod) return a * b;
    if (norm_is(NormP::Inf)) return nan_max(a, b);
    if (norm_is(NormP::NegInf)) return nan_min(a, b);
    return a + b;
  }
  __device__ static Acc shfl_down(Acc a, int delta) {
    return __shfl_down_sync(0xffffffffu, a, delta);
  }
  __device__ void write(int64_t row, Acc a) const {
    double r = a;
    switch (op) {
      case OpId::mean:
        r = a / static_cast<double>(inner);
        break;
      case OpId::norm:
        if (norm == NormP::Two)
          r = sqrt(a);
        else if (norm == NormP::Other)
          r = pow(a, 1.0 / p);
        break;
      case OpId::var:
      case OpId::std:
        r = a / fmax(0.0, static_cast<double>(inner) - correction);
        if (op == OpId::std) r = sqrt(r);
        break;
      default:
        break;
    }
    if (out_double)
      static_cast<double*>(out)[row] = r;
    else
      static_cast<T*>(out)[row] = static_cast<T>(r);
  }
};

// Integer sum and product: wrapping int64 (the dtype SumLike gives integral inputs).
struct IntRed {
  using Acc = int64_t;
  bool prod = false;
  int64_t* out = nullptr;

  __device__ Acc init() const { return prod ? 1 : 0; }
  __device__ Acc step(Acc a, int64_t x, int64_t, int64_t) const { return combine(a, x); }
  __device__ Acc combine(Acc a, Acc b) const { return prod ? wrap_mul(a, b) : wrap_add(a, b); }
  __device__ static Acc shfl_down(Acc a, int delta) {
    return __shfl_down_sync(0xffffffffu, static_cast<long long>(a), delta);
  }
  __device__ void write(int64_t row, Acc a) const { out[row] = a; }
};

template <typename T>
struct ArgAcc {
  T v;
  int64_t i;  // < 0: no element yet
};

// max, min, argmax, argmin: the first extreme, or the first NaN when there is one.
template <typename T>
struct ArgRed {
  using Acc = ArgAcc<T>;
  bool greater = true;
  bool want_index = false;
  void* out = nullptr;

  __device__ Acc init() const { return Acc{T(0), -1}; }
  // Elements come in increasing index order within one thread.
  __device__ Acc step(Acc a, T x, int64_t, int64_t idx) const {
    if (a.i < 0) return Acc{x, idx};
    if (is_nan(a.v)) return a;
    if (is_nan(x) || (greater ? x > a.v : x < a.v)) return Acc{x, idx};
    return a;
  }
  __device__ Acc combine(Acc a, Acc b) const {
    if (a.i < 0) return b;
    if (b.i < 0) return a;
    bool an = is_nan(a.v), bn = is_nan(b.v);
    if (an || bn) {
      if (an && bn) return a.i < b.i ? a : b;
      return an ? a : b;
    }
    if (greater ? a.v > b.v : a.v < b.v) return a;
    if (greater ? b.v > a.v : b.v < a.v) return b;
    return a.i < b.i ? a : b;
  }
  __device__ static Acc shfl_down(Acc a, int delta) {
    Acc r;
    if constexpr (std::is_same_v<T, bool>)
      r.v = __shfl_down_sync(0xffffffffu, static_cast<int>(a.v), delta) != 0;
    else if constexpr (std::is_same_v<T, int64_t>)
      r.v = __shfl_down_sync(0xffffffffu, static_cast<long long>(a.v), delta);
    else
      r.v = __shfl_down_sync(0xffffffffu, a.v, delta);
    r.i = __shfl_down_sync(0xffffffffu, static_cast<long long>(a.i), delta);
    return r;
  }
  __device__ void write(int64_t row, Acc a) const {
    if (want_index)
      static_cast<int64_t*>(out)[row] = a.i < 0 ? 0 : a.i;
    else
      static_cast<T*>(out)[row] = a.v;
  }
};

template <typename R>
__device__ inline typename R::Acc warp_reduce(const R& r, typename R::Acc a) {
#pragma unroll
  for (int delta = 16; delta > 0; delta /= 2) a = r.combine(a, R::shfl_down(a, delta));
  return a;
}

// Rows of `inner` packed elements. warp_rows: one warp per row. Otherwise one block per
// (row, chunk) item, `splits` chunks per row: with one chunk the block writes the row's
// result, with more it writes its partial accumulator to partial[row * splits + chunk].
template <typename T, typename R>
__global__ void __launch_bounds__(kThreads)
    reduce_rows_kernel(const T* in, int64_t outer, int64_t inner, int64_t chunk, int64_t splits,
                       bool warp_rows, R r, typename R::Acc* partial) {
  using Acc = typename R::Acc;
  __shared__ alignas(16) unsigned char smem_raw[sizeof(Acc) * kWarps];
  Acc* smem = reinterpret_cast<Acc*>(smem_raw);
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  if (warp_rows) {
    const int64_t step = static_cast<int64_t>(gridDim.x) * kWarps;
    for (int64_t row = static_cast<int64_t>(blockIdx.x) * kWarps + warp; row < outer; row += step) {
      const T* p = in + row * inner;
      Acc a = r.init();
      for (int64_t i = lane; i < inner; i += 32) a = r.step(a, p[i], row, i);
      a = warp_reduce(r, a);
      if (lane == 0) r.write(row, a);
    }
    return;
  }
  const int64_t items = outer * splits;
  for (int64_t w = blockIdx.x; w < items; w += gridDim.x) {
    const int64_t row = w / splits, part = w - row * splits;
    const int64_t begin = part * chunk;
    const int64_t end = begin + chunk < inner ? begin + chunk : inner;
    const T* p = in + row * inner;
    Acc a = r.init();
    for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x) a = r.step(a, p[i], row, i);
    a = warp_reduce(r, a);
    if (lane == 0) smem[warp] = a;
    __syncthreads();
    if (warp == 0) {
      a = lane < kWarps ? smem[lane] : r.init();
      a = warp_reduce(r, a);
      if (lane == 0) {
        if (splits == 1)
          r.write(row, a);
        else
          partial[w] = a;
      }
    }
    __syncthreads();  // smem is reused by the block's next item
  }
}

// One warp per row combines the row's `splits` partial accumulators and writes the result.
template <typename R>
__global__ void __launch_bounds__(kThreads)
    combine_partials_kernel(const typename R::Acc* partial, int64_t outer, int64_t splits, R r) {
  using Acc = typename R::Acc;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int64_t step = static_cast<int64_t>(gridDim.x) * kWarps;
  for (int64_t row = static_cast<int64_t>(blockIdx.x) * kWarps + warp; row < outer; row += step) {
    Acc a = r.init();
    for (int64_t i = lane; i < splits; i += 32) a = r.combine(a, partial[row * splits + i]);
    a = warp_reduce(r, a);
    if (lane == 0) r.write(row, a);
  }
}

unsigned capped_blocks(const Ctx& c, int64_t blocks) {
  int64_t cap = static_cast<int64_t>(sm_count(c)) * 32;
  if (blocks > cap) blocks = cap;
  return static_cast<unsigned>(blocks < 1 ? 1 : blocks);
}

// Reduces `outer` packed rows of `inner` elements at `in` with reducer r.
template <typename T, typename R>
void run_rows(const Ctx& c, const T* in, int64_t outer, int64_t inner, const R& r) {
  using Acc = typename R::Acc;
  const int64_t sms = sm_count(c);
  if (inner < 4096) {
    reduce_rows_kernel<T, R>
        <<<capped_blocks(c, (outer + kWarps - 1) / kWarps), kThreads, 0, c.stream>>>(
            in, outer, inner, inner, 1, true, r, nullptr);
    check_launch(c, "reduction kernel");
    return;
  }
  int64_t splits = 1;
  if (outer < sms * 2) {
    int64_t want = (sms * 4 + outer - 1) / outer;
    int64_t most = (inner + 4095) / 4096;
    splits = want < most ? want : most;
    if (splits < 1) splits = 1;
  }
  const int64_t chunk = (inner + splits - 1) / splits;
  splits = (inner + chunk - 1) / chunk;
  std::shared_ptr<Storage> tmp;
  Acc* partial = nullptr;
  if (splits > 1) {
    tmp = allocate(c.device, static_cast<size_t>(outer * splits) * sizeof(Acc));
    partial = static_cast<Acc*>(tmp->data());
  }
  reduce_rows_kernel<T, R><<<capped_blocks(c, outer * splits), kThreads, 0, c.stream>>>(
      in, outer, inner, chunk, splits, false, r, partial);
  check_launch(c, "reduction kernel");
  if (splits > 1) {
    combine_partials_kernel<R>
        <<<capped_blocks(c, (outer + kWarps - 1) / kWarps), kThreads, 0, c.stream>>>(partial, outer,
                                                                                     splits, r);
    check_launch(c, "reduction combine kernel");
  }
  // tmp is released here, after the launches: the allocator is stream-ordered.
}

}  // namespace

namespace {
bool is_half(DType t) {
  return t == DType::Float16 || t == DType::BFloat16;
}
void reduce_rows(const Ctx& c, const OpDef& d, const OpAttrs& a, const local::Tensor& src,
                 DType work, bool keeps_dtype, const local::Tensor& out);
}  // namespace

void reduce_op(const Ctx& c, const OpDef& d, std::span<const local::Tensor> in, const OpAttrs& a,
               const local::Tensor& final_out) {
  const local::Tensor& src = in[0];
  const bool keeps_dtype = op_keeps_dtype(d.id);
  // float16/bfloat16 reduce as the CPU does: over the input converted to float32 (by the
  // packing copy) into a float32 result, rounded into the 16-bit output at the end.
  DType work = keeps_dtype ? src.dtype() : final_out.dtype();
  if (is_half(work)) work = DType::Float32;
  const bool round_at_end = is_half(final_out.dtype());
  const local::Tensor out =
      round_at_end ? empty_on(c, final_out.shape(), DType::Float32) : final_out;
  reduce_rows(c, d, a, src, work, keeps_dtype, out);
  if (round_at_end) copy_impl(c, final_out, out);
}

namespace {

NormP norm_variant(double p) {
  if (std::isinf(p)) return p > 0 ? NormP::Inf : NormP::NegInf;
  if (p == 0) return NormP::Zero;
  if (p == 1) return NormP::One;
  if (p == 2) return NormP::Two;
  return NormP::Other;
}

// sum, prod, mean, norm, var, std of floating rows into `out` (T).
template <typename T>
void run_float_rows(const Ctx& c, const OpDef& d, DType work, const T* base, int64_t outer,
                    int64_t inner, double p_or_corr, void* out) {
  FloatRed<T> r;
  r.op = d.id;
  r.inner = inner;
  r.out = out;
  switch (d.id) {
    case OpId::sum:
    case OpId::prod:
    case OpId::mean:
      break;
    case OpId::norm:
      r.p = p_or_corr;
      r.norm = norm_variant(p_or_corr);
      break;
    case OpId::var:
    case OpId::std: {
      // Pass 1: per-row means in double; pass 2: squared deviations from them.
      std::shared_ptr<Storage> means = allocate(c.device, static_cast<size_t>(outer) * 8);
      FloatRed<T> m = r;
      m.op = OpId::mean;
      m.out_double = true;
      m.out = means->data();
      run_rows(c, base, outer, inner, m);
      r.mean = static_cast<const double*>(means->data());
      r.correction = p_or_corr;
      run_rows(c, base, outer, inner, r);
      return;
    }
    default:
      fail<DTypeError>(d.name, "has no kernel for {}", work);
  }
  run_rows(c, base, outer, inner, r);
}

void reduce_rows(const Ctx& c, const OpDef& d, const OpAttrs& a, const local::Tensor& src,
                 DType work, bool keeps_dtype, const local::Tensor& out) {
  // Kept dims first, reduced dims last.
  std::array<bool, kMaxDims> reduce{};
  if (a.ints.empty()) {
    reduce.fill(true);
  } else {
    for (int64_t raw : a.ints) reduce[wrap_dim(d.name, raw, src.dim())] = true;
  }
  Shape shape;
  Strides strides;
  int64_t inner = 1;
  for (int64_t i = 0; i < src.dim(); ++i)
    if (!reduce[i]) {
      shape.push_back(src.shape()[i]);
      strides.push_back(src.strides()[i]);
    }
  for (int64_t i = 0; i < src.dim(); ++i)
    if (reduce[i]) {
      shape.push_back(src.shape()[i]);
      strides.push_back(src.strides()[i]);
      inner *= src.shape()[i];
    }
  const int64_t outer = out.numel();
  if (outer == 0) return;
  TensorMeta pm{src.dtype(), shape, strides, src.meta().offset};
  local::Tensor packed(src.storage(), pm);
  if (work != src.dtype() || !pm.is_contiguous()) {
    local::Tensor tmp = empty_on(c, shape, work);
    copy_impl(c, tmp, packed);
    packed = tmp;
  }
  const double p_or_corr =
      a.scalars[0].is_none() ? (d.kind == OpKind::Norm ? 2.0 : 1.0) : a.scalars[0].to_double();

  dispatch_compute(work, [&]<typename T>() {
    const T* base = static_cast<const T*>(packed.raw_data());
    if (keeps_dtype) {
      ArgRed<T> r;
      r.greater = d.id == OpId::max || d.id == OpId::argmax;
      r.want_index = d.id == OpId::argmax || d.id == OpId::argmin;
      r.out = out.raw_data();
      run_rows(c, base, outer, inner, r);
      return;
    }
    if constexpr (is_floating_v<T>) {
      run_float_rows<T>(c, d, work, base, outer, inner, p_or_corr, out.raw_data());
      return;
    } else if constexpr (std::is_same_v<T, int64_t>) {
      if (d.id == OpId::sum || d.id == OpId::prod) {
        IntRed r;
        r.prod = d.id == OpId::prod;
        r.out = static_cast<int64_t*>(out.raw_data());
        run_rows(c, base, outer, inner, r);
        return;
      }
    }
    fail<DTypeError>(d.name, "has no kernel for {}", work);
  });
}

}  // namespace

}  // namespace dtr::cuda::detail
