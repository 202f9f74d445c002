// CUDA creation and in-place fill kernels (empty, full, arange, linspace, rand, randn,
// copy_, fill_, uniform_, normal_) and dtr::cuda::run_kernel, which checks that every
// tensor lives on one device, makes it the current device and routes each op kind to its
// kernels (as local::run_kernel does for the CPU; View and Convert kinds copy input 0 into
// the packed out; Join, Indexing and NN ops go to kernels_index.cu, kernels_nn.cu and
// kernels_conv.cu).
//
// Values are the CPU kernels' (tensor/kernels_misc.cpp), element i in logical order
// whatever the strides: arange counts in int64 when start, end and step are integers, in
// double otherwise; linspace counts up from start in its first half and down from end in
// its second; random draws use Philox (tensor/philox.hpp) at stream position offset + i
// with attrs.seed, so they do not depend on the layout or the launch shape. Every
// floating step is written with round-to-nearest intrinsics (__dmul_rn, __dadd_rn) so that
// nvcc cannot fuse it into an FMA the CPU does not do. What matches the CPU bit-for-bit:
// arange, linspace, full, rand and uniform_ (float32 and float64: integer bits scaled
// exactly, IEEE multiply and add). randn and normal_ go through Box-Muller, whose log and
// cos come from CUDA's libdevice (within 1-2 ulp of glibc's): float64 draws may differ from
// the CPU's in the last bits, float32 draws (rounded from double) match except when the
// double lands within an ulp of a float rounding boundary (about one draw in 10^8).
//
// Thread safety: any thread; launches on the calling thread's current stream of the
// tensors' device and returns without waiting.
#include "tensor/cuda/kernels.cuh"
#include "tensor/philox.hpp"

namespace dtr::cuda::detail {

namespace {

using dtr::detail::philox_normal;
using dtr::detail::philox_uniform;

struct ArangeInt {
  int64_t start, step;
  __device__ int64_t operator()(int64_t i) const { return wrap_add(start, wrap_mul(i, step)); }
};

struct ArangeFloat {
  double start, step;
  __device__ double operator()(int64_t i) const {
    return __dadd_rn(start, __dmul_rn(static_cast<double>(i), step));
  }
};

struct Linspace {
  double start, end, step;
  int64_t steps;
  __device__ double operator()(int64_t i) const {
    if (steps == 1) return start;
    return i < steps / 2 ? __dadd_rn(start, __dmul_rn(step, static_cast<double>(i)))
                         : __dsub_rn(end, __dmul_rn(step, static_cast<double>(steps - 1 - i)));
  }
};

template <typename T>
struct Rand {
  uint64_t seed, offset;
  __device__ auto operator()(int64_t i) const {
    return philox_uniform<T>(seed, offset + static_cast<uint64_t>(i));
  }
};

struct Randn {
  uint64_t seed, offset;
  __device__ double operator()(int64_t i) const {
    return philox_normal(seed, offset + static_cast<uint64_t>(i));
  }
};

template <typename T>
struct Uniform {
  uint64_t seed, offset;
  double from, to;
  __device__ T operator()(int64_t i) const {
    double u = philox_uniform<T>(seed, offset + static_cast<uint64_t>(i));
    T v = static_cast<T>(__dadd_rn(from, __dmul_rn(__dsub_rn(to, from), u)));
    // Rounding may land on `to`; keep the interval half-open.
    if (v >= static_cast<T>(to) && to > from) {
      if constexpr (is_half_v<T>)
        return next_toward(static_cast<T>(to), static_cast<T>(from));
      else if constexpr (std::is_same_v<T, float>)
        return nextafterf(static_cast<float>(to), static_cast<float>(from));
      else
        return nextafter(to, from);
    }
    return v;
  }
};

struct Normal {
  uint64_t seed, offset;
  double mean, stddev;
  __device__ double operator()(int64_t i) const {
    return __dadd_rn(mean,
                     __dmul_rn(stddev, philox_normal(seed, offset + static_cast<uint64_t>(i))));
  }
};

bool is_half(DType t) {
  return t == DType::Float16 || t == DType::BFloat16;
}

// launch_generate of g over t of any dtype. A float16/bfloat16 t goes through the float32
// kernel of the same generator (no kernel of its own): into a float32 temporary, then
// rounded by the copy, which is the CPU's saturating_cast (double -> float -> 16 bits).
template <typename G>
void generate_any(const Ctx& c, const local::Tensor& t, G g, const char* kernel) {
  if (is_half(t.dtype())) {
    local::Tensor tmp = empty_on(c, t.shape(), DType::Float32);
    launch_generate<float>(c, tmp, g, kernel);
    copy_impl(c, t, tmp);
    return;
  }
  dispatch(t.dtype(), [&]<typename T>() {
    if constexpr (!is_half_v<T>) launch_generate<T>(c, t, g, kernel);
  });
}

// Runs make_gen<T>() over t for a floating t; the op's DTypeError otherwise. float16 and
// bfloat16 draw as torch does (Rand, Uniform: bits that are exact in T, a kernel per type);
// generators that do not depend on T go through generate_any's float32 kernel.
template <typename Make>
void generate_float(const Ctx& c, const local::Tensor& t, Make make_gen) {
  dispatch(t.dtype(), [&]<typename T>() {
    if constexpr (is_half_v<T> && std::is_same_v<decltype(make_gen.template operator()<T>()),
                                                 decltype(make_gen.template operator()<float>())>) {
      generate_any(c, t, make_gen.template operator()<float>(), "random kernel");
    } else if constexpr (is_floating_v<T>) {
      launch_generate<T>(c, t, make_gen.template operator()<T>(), "random kernel");
    } else {
      fail<DTypeError>(c.op, "expected a floating point tensor, got {}", t.dtype());
    }
  });
}

}  // namespace

void create_op(const Ctx& c, const OpDef& d, const OpAttrs& a, const local::Tensor& out) {
  switch (d.id) {
    case OpId::empty:
      return;
    case OpId::full:
      fill_impl(c, out, a.scalars[0]);
      return;
    case OpId::arange: {
      if (arange_is_integral(a)) {
        // Exact beyond 2^53: integer bounds count in int64.
        ArangeInt g{a.scalars[0].to_int(), a.scalars[2].is_none() ? 1 : a.scalars[2].to_int()};
        generate_any(c, out, g, "arange kernel");
        return;
      }
      ArangeFloat g{a.scalars[0].to_double(),
                    a.scalars[2].is_none() ? 1.0 : a.scalars[2].to_double()};
      generate_any(c, out, g, "arange kernel");
      return;
    }
    case OpId::linspace: {
      double start = a.scalars[0].to_double(), end = a.scalars[1].to_double();
      int64_t steps = out.numel();
      double step = steps > 1 ? (end - start) / static_cast<double>(steps - 1) : 0.0;
      Linspace g{start, end, step, steps};
      generate_any(c, out, g, "linspace kernel");
      return;
    }
    case OpId::rand:
      generate_float(c, out, [&]<typename T>() { return Rand<T>{a.seed, a.offset}; });
      return;
    case OpId::randn:
      generate_float(c, out, [&]<typename T>() { return Randn{a.seed, a.offset}; });
      return;
    default:
      fail<InvalidArgument>(d.name, "is not a creation op");
  }
}

void mutate_op(const Ctx& c, const OpDef& d, std::span<const local::Tensor> in, const OpAttrs& a,
               const local::Tensor& out) {
  switch (d.id) {
    case OpId::copy_: {
      Shape b = broadcast_shapes(d.name, out.shape(), in[1].shape());
      if (!(b == out.shape()))
        fail<ShapeError>(d.name, "source shape {} does not broadcast to destination shape {}",
                         in[1].shape(), out.shape());
      copy_impl(c, out, in[1]);
      return;
    }
    case OpId::fill_:
      fill_impl(c, out, a.scalars[0]);
      return;
    case OpId::uniform_: {
      double from = a.scalars[0].is_none() ? 0.0 : a.scalars[0].to_double();
      double to = a.scalars[1].is_none() ? 1.0 : a.scalars[1].to_double();
      generate_float(c, out, [&]<typename T>() { return Uniform<T>{a.seed, a.offset, from, to}; });
      return;
    }
    case OpId::normal_: {
      double mean = a.scalars[0].is_none() ? 0.0 : a.scalars[0].to_double();
      double stddev = a.scalars[1].is_none() ? 1.0 : a.scalars[1].to_double();
      generate_float(c, out, [&]<typename T>() { return Normal{a.seed, a.offset, mean, stddev}; });
      return;
    }
    default:
      fail<InvalidArgument>(d.name, "is not an in-place fill op");
  }
}

}  // namespace dtr::cuda::detail

namespace dtr::cuda {

void run_kernel(OpId op, std::span<const local::Tensor> inputs, const OpAttrs& attrs,
                const local::Tensor& out) {
  if (!is_valid_op(static_cast<uint16_t>(op)))
    throw InvalidArgument(fmt::format("invalid op code {}", static_cast<int>(op)));
  const OpDef& d = op_def(op);
  if (static_cast<int>(inputs.size()) < d.min_inputs ||
      static_cast<int>(inputs.size()) > d.max_inputs)
    detail::fail<InvalidArgument>(d.name, "takes {} to {} tensor inputs, got {}", d.min_inputs,
                                  d.max_inputs, inputs.size());
  const int device = detail::common_device(d.name, inputs, out);
  detail::Ctx c = detail::make_ctx(d.name, device);
  detail::DeviceGuard guard(c);
  switch (d.kind) {
    case OpKind::Unary:
      detail::unary_op(c, d, inputs, attrs, out);
      break;
    case OpKind::Clamp:
      detail::clamp_op(c, inputs, attrs, out);
      break;
    case OpKind::Binary:
      detail::binary_op(c, d, inputs, attrs, out);
      break;
    case OpKind::Reduce:
    case OpKind::Norm:
    case OpKind::Moment:
      detail::reduce_op(c, d, inputs, attrs, out);
      break;
    case OpKind::Linalg:
      detail::linalg_op(c, d, inputs, out);
      break;
    case OpKind::View:
    case OpKind::Convert: {
      // A materialized view (reshape that needs a copy), contiguous() or to(): the input's
      // elements in logical order into the packed output.
      const Shape& shape = inputs[0].shape();
      TensorMeta as_input{out.dtype(), shape, contiguous_strides(shape), out.meta().offset};
      detail::copy_impl(c, local::Tensor(out.storage(), as_input), inputs[0]);
      break;
    }
    case OpKind::Create:
      detail::create_op(c, d, attrs, out);
      break;
    case OpKind::Mutate:
      detail::mutate_op(c, d, inputs, attrs, out);
      break;
    case OpKind::Join:
      detail::join_op(c, d, inputs, attrs, out);
      break;
    case OpKind::Indexing:
      detail::index_op(c, d, inputs, attrs, out);
      break;
    case OpKind::NN:
      if (d.id == OpId::linear || d.id == OpId::conv2d || d.id == OpId::conv2d_input_grad ||
          d.id == OpId::conv2d_weight_grad)
        detail::conv_op(c, d, inputs, attrs, out);
      else
        detail::nn_op(c, d, inputs, attrs, out);
      break;
  }
}

}  // namespace dtr::cuda
