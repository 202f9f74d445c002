// CUDA binary kernels: add, sub, mul, div, pow, maximum, minimum, the comparisons, remainder,
// fmod, atan2 and the bitwise and logical ops,
// over two broadcast tensors or a tensor and a scalar operand (attrs.scalars[0], on the
// left when scalar_first). One kernel per compute dtype and operand count serves every op
// (the op, its OpId, is a runtime value in BinaryFn); contiguous same-shaped operands take the
// vectorized kernel.
//
// Semantics are the CPU kernel's (tensor/kernels_elementwise.cpp): operands converted to
// the result dtype (comparisons: to binary_operand_dtype) as they are loaded; wrapping
// integer add/sub/mul; bool add = or, mul = and; div is true division (integral operands
// compute in float32, there is no integer division); integer pow by squaring with wrapping
// multiplies, a negative integer exponent refused with InvalidArgument before anything is
// written; maximum/minimum return NaN when either operand is NaN. Float pow uses CUDA's
// pow (within an ulp or two of glibc's); everything else is bit-for-bit the CPU's.
//
// The negative-exponent check of an integer pow whose exponent is a tensor reads the
// exponent's minimum on the host, and the zero-divisor check of an integer remainder or
// fmod whose divisor is a tensor reads whether it holds a 0: both wait for the current stream
// (the only calls here that do). A scalar exponent or divisor is checked without touching
// the device.
//
// Thread safety: any thread; launches on the calling thread's current stream.
#include "tensor/binary_math.hpp"
#include "tensor/cuda/kernels.cuh"

namespace dtr::cuda::detail {

namespace {

// The op is the table's OpId (one of the Binary ops; binary_op checks the kind).
template <typename T>
struct BinaryFn {
  OpId op = OpId::add;
  bool scalar_first = false;
  T s{};  // the scalar operand (one-input form)

  __device__ T apply(T u, T v) const {
    switch (op) {
      case OpId::add:
        return wrap_add(u, v);
      case OpId::sub:
        return wrap_sub(u, v);
      case OpId::mul:
        return wrap_mul(u, v);
      case OpId::div:
        if constexpr (is_floating_v<T>)
          return u / v;
        else
          return T(0);  // unreachable: refused on the host
      case OpId::pow:
        if constexpr (std::is_same_v<T, float>)
          return powf(u, v);
        else if constexpr (std::is_same_v<T, double>)
          return pow(u, v);
        else
          return int_pow(u, v);
      case OpId::maximum:
        if (is_nan(u) || is_nan(v)) return std::numeric_limits<T>::quiet_NaN();
        return u > v ? u : v;
      case OpId::minimum:
        if (is_nan(u) || is_nan(v)) return std::numeric_limits<T>::quiet_NaN();
        return u < v ? u : v;
      // Comparisons give 1 or 0 in T; the store converts to bool (nonzero).
      case OpId::eq:
        return T(u == v);
      case OpId::ne:
        return T(u != v);
      case OpId::lt:
        return T(u < v);
      case OpId::le:
        return T(u <= v);
      case OpId::gt:
        return T(u > v);
      case OpId::ge:
        return T(u >= v);
      case OpId::logical_and:
        return T(u != T(0) && v != T(0));  // NaN is true, as in torch
      case OpId::logical_or:
        return T(u != T(0) || v != T(0));
      case OpId::logical_xor:
        return T((u != T(0)) != (v != T(0)));
      default:
        break;
    }
    return other_ops(u, v);
  }
  // The ops defined for some compute types only (the host refuses the others).
  __device__ T other_ops(T u, T v) const {
    namespace bm = dtr::detail::binary_math;
    if constexpr (is_floating_v<T>) {
      if (op == OpId::atan2) return bm::atan2_of(u, v);
    } else {
      if (op == OpId::bitwise_and) return static_cast<T>(u & v);
      if (op == OpId::bitwise_or) return static_cast<T>(u | v);
      if (op == OpId::bitwise_xor) return static_cast<T>(u ^ v);
    }
    if constexpr (!std::is_same_v<T, bool>) {
      if (op == OpId::fmod) return bm::fmod_of(u, v);
      if (op == OpId::remainder) return bm::remainder_of(u, v);
      if (op == OpId::floor_divide) return bm::floor_divide_of(u, v);
      if (op == OpId::trunc_divide) return bm::trunc_divide_of(u, v);
    }
    return T(0);
  }
  __device__ T operator()(T u, T v) const { return apply(u, v); }
  __device__ T operator()(T u) const { return scalar_first ? apply(s, u) : apply(u, s); }
};

// *lowest = min(*lowest, every negative element of t converted to T).
template <typename T>
__global__ void __launch_bounds__(kThreads)
    negative_min_kernel(const char* p, DType dt, Indexer<1> ix, int64_t n,
                        unsigned long long* lowest) {
  int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  long long local = 0;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += step) {
    int64_t off[1];
    ix.offsets(i, off);
    T v = load_as<T>(p + off[0], dt);
    if (v < local) local = v;
  }
  if (local < 0) atomicMin(reinterpret_cast<long long*>(lowest), local);
}

// *found = 1 when an element of t converted to T is 0.
template <typename T>
__global__ void __launch_bounds__(kThreads)
    zero_kernel(const char* p, DType dt, Indexer<1> ix, int64_t n, unsigned int* found) {
  int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += step) {
    int64_t off[1];
    ix.offsets(i, off);
    if (load_as<T>(p + off[0], dt) == T(0)) {
      *found = 1;
      return;
    }
  }
}

// True when an element of t (as T) is 0. Waits for the stream.
template <typename T>
bool has_zero(const Ctx& c, const local::Tensor& t) {
  const int64_t n = t.numel();
  if (n == 0) return false;
  std::shared_ptr<Storage> tmp = allocate(c.device, sizeof(unsigned int));
  check_cuda(c, "cudaMemsetAsync", cudaMemsetAsync(tmp->data(), 0, sizeof(unsigned int), c.stream));
  Indexer<1> ix =
      make_indexer<1>(t.shape(), {t.strides()}, {static_cast<int64_t>(element_size(t.dtype()))});
  zero_kernel<T>
      <<<grid_for(c, n), kThreads, 0, c.stream>>>(static_cast<const char*>(t.raw_data()), t.dtype(),
                                                  ix, n, static_cast<unsigned int*>(tmp->data()));
  check_launch(c, "divisor check kernel");
  unsigned int found = 0;
  check_cuda(c, "cudaMemcpyAsync",
             cudaMemcpyAsync(&found, tmp->data(), sizeof found, cudaMemcpyDeviceToHost, c.stream));
  check_cuda(c, "cudaStreamSynchronize", cudaStreamSynchronize(c.stream));
  return found != 0;
}

// The smallest element of t (as T) when it is negative, else 0. Waits for the stream.
template <typename T>
int64_t lowest_negative(const Ctx& c, const local::Tensor& t) {
  const int64_t n = t.numel();
  if (n == 0) return 0;
  std::shared_ptr<Storage> tmp = allocate(c.device, sizeof(long long));
  check_cuda(c, "cudaMemsetAsync", cudaMemsetAsync(tmp->data(), 0, sizeof(long long), c.stream));
  Indexer<1> ix =
      make_indexer<1>(t.shape(), {t.strides()}, {static_cast<int64_t>(element_size(t.dtype()))});
  negative_min_kernel<T><<<grid_for(c, n), kThreads, 0, c.stream>>>(
      static_cast<const char*>(t.raw_data()), t.dtype(), ix, n,
      static_cast<unsigned long long*>(tmp->data()));
  check_launch(c, "pow exponent check kernel");
  long long lowest = 0;
  check_cuda(
      c, "cudaMemcpyAsync",
      cudaMemcpyAsync(&lowest, tmp->data(), sizeof(long long), cudaMemcpyDeviceToHost, c.stream));
  check_cuda(c, "cudaStreamSynchronize", cudaStreamSynchronize(c.stream));
  return lowest;
}

}  // namespace

void binary_op(const Ctx& c, const OpDef& d, std::span<const local::Tensor> in, const OpAttrs& a,
               const local::Tensor& out) {
  // Comparisons compute in the dtype both operands promote to; the rest in the result's.
  DType compute = out.dtype();
  if (d.dtype_rule == DTypeRule::ToBool) {
    std::array<TensorMeta, 2> metas{in[0].meta(), in.size() == 2 ? in[1].meta() : TensorMeta{}};
    compute = binary_operand_dtype(std::span<const TensorMeta>(metas.data(), in.size()), a);
  }
  if (d.kind != OpKind::Binary) fail<InvalidArgument>(d.name, "is not a binary op");
  const OpId op = d.id;
  // float16/bfloat16 compute in float: converted on load, rounded on store.
  dispatch_compute(compute, [&]<typename T>() {
    const bool scalar = in.size() == 1;
    BinaryFn<T> f;
    f.op = op;
    f.scalar_first = scalar && a.scalar_first;
    f.s = scalar ? a.scalars[0].to<T>() : T(0);
    if constexpr (!is_floating_v<T>) {
      if (op == OpId::div) fail<InvalidArgument>(d.name, "has no kernel for {}", compute);
    }
    if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
      if (op == OpId::pow) {
        // Refuse before writing anything, so an in-place pow_ never half-updates.
        int64_t lowest = f.s;  // the exponent: y, x when the scalar is the base, else s
        if (!scalar || f.scalar_first) lowest = lowest_negative<T>(c, scalar ? in[0] : in[1]);
        if (lowest < 0)
          fail<InvalidArgument>(
              "pow", "integers to negative integer powers are not allowed (exponent {})", lowest);
      }
      if (op == OpId::remainder || op == OpId::fmod || op == OpId::floor_divide ||
          op == OpId::trunc_divide) {
        // Refused before writing anything, as on the CPU (a GPU would give an unspecified
        // value). The divisor: y, x when the scalar is the dividend, else the scalar.
        const bool zero = !scalar          ? has_zero<T>(c, in[1])
                          : f.scalar_first ? has_zero<T>(c, in[0])
                                           : f.s == T(0);
        if (zero) fail<InvalidArgument>(d.name, "integer division by zero (a divisor is 0)");
      }
    }
    if (scalar)
      launch_elementwise<T, 1, true>(c, out, {&in[0]}, f, "binary kernel");
    else
      launch_elementwise<T, 2, true>(c, out, {&in[0], &in[1]}, f, "binary kernel");
  });
}

}  // namespace dtr::cuda::detail
