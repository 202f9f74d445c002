// CUDA elementwise kernels: the unary ops, clamp, copy_into (broadcast and dtype
// conversion) and fill, plus the host helpers every kernel file shares (errors, device
// guard, device checks, launch sizes, temporaries). One strided kernel per compute dtype
// serves every unary op, clamp and copy (the op, its OpId, is a runtime value in UnaryFn);
// contiguous operands of the compute dtype take the vectorized kernel (16-byte loads).
//
// float16 and bfloat16 compute in float (the float kernels; loaded and stored converted).
// Semantics are the CPU kernels' (tensor/kernels_elementwise.cpp): wrapping integer neg
// and abs, relu, sign, clamp with open ends that passes NaN through, floor/ceil/round (rint:
// ties to even), integral/bool inputs of the
// float ops converted to float32 first, copy conversions saturating (NaN to 0) and "nonzero"
// into bool. The ops of DTR_FORMULA_UNARY_OPS take their formula from tensor/unary_math.hpp,
// which the CPU kernels use too. Float math (exp, log, sin, cos, tanh, sigmoid and those)
// uses CUDA's libdevice, which may differ from glibc by an ulp or two; neg, abs, relu, sqrt and
// rsqrt (IEEE sqrt and division) and every conversion are bit-for-bit the CPU's.
//
// Thread safety: any thread; every function launches on the calling thread's current
// stream of the tensors' device and returns without waiting for the kernels.
#include <atomic>
#include <cstring>

#include "tensor/cuda/kernels.cuh"
#include "tensor/unary_math.hpp"

namespace dtr::cuda::detail {

// ---- shared host helpers ----

void throw_cuda(const Ctx& c, std::string_view what, cudaError_t err) {
  cudaGetLastError();  // clear a non-sticky error so that later calls do not see it again
  fail<DeviceError>(c.op, "{} failed on cuda:{}: {} ({})", what, c.device, cudaGetErrorString(err),
                    cudaGetErrorName(err));
}

DeviceGuard::DeviceGuard(const Ctx& c) : device_(c.device) {
  check_cuda(c, "cudaGetDevice", cudaGetDevice(&previous_));
  if (previous_ != device_) check_cuda(c, "cudaSetDevice", cudaSetDevice(device_));
}

DeviceGuard::~DeviceGuard() {
  if (previous_ >= 0 && previous_ != device_) cudaSetDevice(previous_);
}

namespace {
std::string device_name(int device) {
  return device < 0 ? std::string("cpu") : fmt::format("cuda:{}", device);
}
}  // namespace

int common_device(std::string_view op, std::span<const local::Tensor> inputs,
                  const local::Tensor& out) {
  if (!out.defined()) fail<InvalidArgument>(op, "called with an undefined output tensor");
  const int device = out.storage()->device();
  for (const local::Tensor& t : inputs) {
    if (!t.defined()) fail<InvalidArgument>(op, "called on an undefined tensor");
    int other = t.storage()->device();
    if (other != device)
      fail<DeviceError>(op, "expected all tensors on one device, got {} and {}",
                        device_name(device), device_name(other));
  }
  if (device < 0) fail<DeviceError>(op, "the CUDA kernels were given tensors on the cpu");
  return device;
}

Ctx make_ctx(std::string_view op, int device) {
  // Clear a stale non-sticky error left by an unrelated runtime call (cudaErrorNotReady of
  // a query), so that check_launch reports only what our launches caused. Sticky errors
  // (a faulted kernel) cannot be cleared and are reported by the next check.
  cudaGetLastError();
  return Ctx{op, device, static_cast<cudaStream_t>(current_stream(device))};
}

int sm_count(const Ctx& c) {
  constexpr int kCached = 64;
  static std::atomic<int> cache[kCached] = {};
  if (c.device < kCached) {
    int v = cache[c.device].load(std::memory_order_relaxed);
    if (v > 0) return v;
  }
  int v = 0;
  check_cuda(c, "cudaDeviceGetAttribute",
             cudaDeviceGetAttribute(&v, cudaDevAttrMultiProcessorCount, c.device));
  if (v < 1) v = 1;
  if (c.device < kCached) cache[c.device].store(v, std::memory_order_relaxed);
  return v;
}

local::Tensor empty_on(const Ctx& c, const Shape& shape, DType dtype) {
  TensorMeta m = TensorMeta::contiguous(dtype, shape);
  size_t bytes = static_cast<size_t>(m.numel()) * element_size(dtype);
  return local::Tensor(allocate(c.device, bytes > 0 ? bytes : 1), m);
}

local::Tensor contiguous_on(const Ctx& c, const local::Tensor& t) {
  if (t.meta().is_contiguous()) return t;
  local::Tensor out = empty_on(c, t.shape(), t.dtype());
  copy_impl(c, out, t);
  return out;
}

// ---- unary ops, clamp, copy: one functor, the op its OpId at run time ----

namespace {

// The op is the table's OpId: a Unary op, clamp, or copy_ (copy_into's conversion alone,
// which copy_impl uses).
template <typename T>
struct UnaryFn {
  OpId op = OpId::copy_;
  bool has_lo = false, has_hi = false;
  T lo{}, hi{};

  __device__ T operator()(T v) const {
    switch (op) {
      case OpId::copy_:
        return v;
      case OpId::neg:
        return wrap_sub(T(0), v);
      case OpId::abs:
        if constexpr (is_floating_v<T>)
          return fabs(v);
        else
          return v < T(0) ? wrap_sub(T(0), v) : v;
      case OpId::relu:
        return v > T(0) ? v : T(0);
      case OpId::sign:
        return static_cast<T>((T(0) < v) - (v < T(0)));
      case OpId::isnan:
        return T(is_nan(v));
      case OpId::isinf:
        if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>)
          return T(isinf(v));
        else
          return T(0);
      case OpId::isfinite:
        if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>)
          return T(isfinite(v));
        else
          return T(1);
      case OpId::logical_not:
        return T(v == T(0));
      case OpId::bitwise_not:
        if constexpr (std::is_same_v<T, bool>)
          return !v;
        else if constexpr (!is_floating_v<T>)
          return static_cast<T>(~v);
        else
          return v;  // unreachable: refused on the host
      case OpId::floor:
      case OpId::ceil:
      case OpId::round:
      case OpId::trunc:
        if constexpr (!is_floating_v<T>) return v;  // integers are whole already
        break;
      case OpId::clamp:
        if (is_nan(v)) return v;
        if (has_lo && v < lo) v = lo;
        if (has_hi && v > hi) v = hi;
        return v;
      default:
        break;
    }
    if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
      // The formulas shared with the CPU kernels (tensor/unary_math.hpp).
      switch (op) {
#define DTR_FORMULA_CASE(name) \
  case OpId::name:             \
    return dtr::detail::unary_formula<OpId::name, T>(v);
        DTR_FORMULA_UNARY_OPS(DTR_FORMULA_CASE)
#undef DTR_FORMULA_CASE
        default:
          break;
      }
    }
    if constexpr (std::is_same_v<T, float>) {
      switch (op) {
        case OpId::exp:
          return expf(v);
        case OpId::log:
          return logf(v);
        case OpId::sqrt:
          return sqrtf(v);
        case OpId::rsqrt:
          return 1.0f / sqrtf(v);
        case OpId::sin:
          return sinf(v);
        case OpId::cos:
          return cosf(v);
        case OpId::tanh:
          return tanhf(v);
        case OpId::sigmoid:
          return 1.0f / (1.0f + expf(-v));
        case OpId::floor:
          return floorf(v);
        case OpId::ceil:
          return ceilf(v);
        case OpId::round:
          return rintf(v);  // ties to even, as the CPU's nearbyint
        case OpId::trunc:
          return truncf(v);
        default:
          break;
      }
    } else if constexpr (std::is_same_v<T, double>) {
      switch (op) {
        case OpId::exp:
          return exp(v);
        case OpId::log:
          return log(v);
        case OpId::sqrt:
          return sqrt(v);
        case OpId::rsqrt:
          return 1.0 / sqrt(v);
        case OpId::sin:
          return sin(v);
        case OpId::cos:
          return cos(v);
        case OpId::tanh:
          return tanh(v);
        case OpId::sigmoid:
          return 1.0 / (1.0 + exp(-v));
        case OpId::floor:
          return ::floor(v);
        case OpId::ceil:
          return ::ceil(v);
        case OpId::round:
          return rint(v);
        case OpId::trunc:
          return ::trunc(v);
        default:
          break;
      }
    }
    return v;  // unreachable: the host refuses float ops on other dtypes
  }
};

template <typename T>
void run_unary(const Ctx& c, const local::Tensor& out, const local::Tensor& in, UnaryFn<T> f) {
  launch_elementwise<T, 1>(c, out, {&in}, f, "unary kernel");
}

// A Unary op: the float ones (dtype rule ToFloat) have no kernel for other dtypes.
void run_unary_any(const Ctx& c, const OpDef& d, const local::Tensor& out,
                   const local::Tensor& in) {
  dispatch_compute(out.dtype(), [&]<typename T>() {
    if constexpr (!is_floating_v<T>) {
      if (d.dtype_rule == DTypeRule::ToFloat)
        fail<DTypeError>(d.name, "expected a floating point tensor, got {}", out.dtype());
    } else {
      if (d.id == OpId::bitwise_not)
        fail<DTypeError>(d.name, "is defined for integer and bool tensors only, got {}",
                         out.dtype());
    }
    UnaryFn<T> f;
    f.op = d.id;
    run_unary<T>(c, out, in, f);
  });
}

}  // namespace

void unary_op(const Ctx& c, const OpDef& d, std::span<const local::Tensor> in, const OpAttrs&,
              const local::Tensor& out) {
  if (d.kind != OpKind::Unary) fail<InvalidArgument>(d.name, "is not a unary op");
  if (d.dtype_rule == DTypeRule::ToBool) {
    // The predicates: computed in the input's own dtype, stored as bool (0 or 1).
    dispatch_compute(in[0].dtype(), [&]<typename T>() {
      UnaryFn<T> f;
      f.op = d.id;
      launch_elementwise<T, 1, true>(c, out, {&in[0]}, f, "unary kernel");
    });
    return;
  }
  // As the CPU kernel: the input converted to the result's dtype (int -> float32 for exp).
  run_unary_any(c, d, out, in[0]);
}

void clamp_op(const Ctx& c, std::span<const local::Tensor> in, const OpAttrs& a,
              const local::Tensor& out) {
  dispatch_compute(out.dtype(), [&]<typename T>() {
    UnaryFn<T> f;
    f.op = OpId::clamp;
    f.has_lo = !a.scalars[0].is_none();
    f.has_hi = !a.scalars[1].is_none();
    f.lo = f.has_lo ? a.scalars[0].to<T>() : T(0);
    f.hi = f.has_hi ? a.scalars[1].to<T>() : T(0);
    run_unary<T>(c, out, in[0], f);
  });
}

void copy_impl(const Ctx& c, const local::Tensor& dst, const local::Tensor& src) {
  if (dst.numel() == 0) return;
  if (dst.dtype() == src.dtype() && dst.shape() == src.shape() && dst.meta().is_contiguous() &&
      src.meta().is_contiguous()) {
    if (dst.raw_data() == src.raw_data()) return;
    check_cuda(c, "cudaMemcpyAsync",
               cudaMemcpyAsync(dst.raw_data(), src.raw_data(),
                               static_cast<size_t>(dst.numel()) * element_size(dst.dtype()),
                               cudaMemcpyDeviceToDevice, c.stream));
    return;
  }
  // The compute type is dst's (float for float16/bfloat16): load_as converts each source
  // element as copy_into does, store_as rounds to a 16-bit dst.
  dispatch_compute(dst.dtype(), [&]<typename T>() { run_unary<T>(c, dst, src, UnaryFn<T>{}); });
}

namespace {
template <typename T>
struct Constant {
  T v;
  __device__ T operator()(int64_t) const { return v; }
};
}  // namespace

void fill_impl(const Ctx& c, const local::Tensor& t, Scalar v) {
  if (t.numel() == 0) return;
  dispatch(t.dtype(), [&]<typename T>() {
    const T value = v.to<T>();
    unsigned char bytes[sizeof(T)];
    std::memcpy(bytes, &value, sizeof(T));
    bool zero = true;
    for (unsigned char b : bytes) zero = zero && b == 0;
    if (zero && t.meta().is_contiguous()) {
      check_cuda(
          c, "cudaMemsetAsync",
          cudaMemsetAsync(t.raw_data(), 0, static_cast<size_t>(t.numel()) * sizeof(T), c.stream));
      return;
    }
    if constexpr (is_half_v<T>)  // one kernel for both 16-bit types: the rounded bits
      launch_generate<uint16_t>(c, t, Constant<uint16_t>{value.bits}, "fill kernel");
    else
      launch_generate<T>(c, t, Constant<T>{value}, "fill kernel");
  });
}

}  // namespace dtr::cuda::detail

namespace dtr::cuda {

void copy_into(const local::Tensor& dst, const local::Tensor& src) {
  int device = detail::common_device("copy", std::span<const local::Tensor>(&src, 1), dst);
  detail::Ctx c = detail::make_ctx("copy", device);
  detail::DeviceGuard guard(c);
  Shape b = broadcast_shapes("copy", dst.shape(), src.shape());
  if (!(b == dst.shape()))
    detail::fail<ShapeError>("copy", "source shape {} does not broadcast to destination shape {}",
                             src.shape(), dst.shape());
  detail::copy_impl(c, dst, src);
}

void fill(const local::Tensor& t, Scalar v) {
  int device = detail::common_device("fill", {}, t);
  detail::Ctx c = detail::make_ctx("fill", device);
  detail::DeviceGuard guard(c);
  detail::fill_impl(c, t, v);
}

}  // namespace dtr::cuda
