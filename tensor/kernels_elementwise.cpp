// Elementwise CPU kernels: unary, clamp, binary (with broadcasting), copy with conversion,
// fill. Each runs over the strided iteration of kernels.hpp; contiguous runs take a plain
// indexed loop that the compiler vectorizes.
#include <cmath>
#include <limits>
#include <memory>

#include "binary_math.hpp"
#include "kernels.hpp"
#include "parallel.hpp"
#include "unary_math.hpp"

namespace dtr::local::detail {

Strides broadcast_strides(const TensorMeta& m, const Shape& shape) {
  Strides out(shape.size(), 0);
  size_t lead = shape.size() - m.shape.size();
  for (size_t i = 0; i < m.shape.size(); ++i) out[lead + i] = m.shape[i] == 1 ? 0 : m.strides[i];
  return out;
}

namespace {

template <typename T>
int64_t sz() {
  return static_cast<int64_t>(sizeof(T));
}

// True when `t` is contiguous with out's shape: it is then read by the flat index.
bool flat_like(const Tensor& t, const Tensor& out) {
  return t.shape() == out.shape() && t.meta().is_contiguous();
}

// Runs body(begin, end) over [0, n): one call for small n, else chunks of fixed size in
// parallel (elementwise results do not depend on how the range is split).
template <typename Body>
void flat_chunks(int64_t n, Body body) {
  constexpr int64_t kChunk = int64_t{1} << 15;
  if (n < 4 * kChunk) return body(int64_t{0}, n);
  dtr::detail::parallel_for((n + kChunk - 1) / kChunk,
                            [&](int64_t c) { body(c * kChunk, std::min(n, (c + 1) * kChunk)); });
}

// out[i] = f(a[i]) over same-shaped tensors.
template <typename O, typename T, typename F>
void map1(const Tensor& out, const Tensor& a, F f) {
  if (out.meta().is_contiguous() && flat_like(a, out)) {
    // One flat loop (small tensors skip the strided iteration's setup), in parallel chunks
    // when large.
    O* o = static_cast<O*>(out.raw_data());
    const T* x = static_cast<const T*>(a.raw_data());
    flat_chunks(out.numel(), [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) o[i] = f(x[i]);
    });
    return;
  }
  for_each_strided<2>(out.shape(),
                      {static_cast<char*>(out.raw_data()), static_cast<char*>(a.raw_data())},
                      {out.strides(), broadcast_strides(a.meta(), out.shape())}, {sz<O>(), sz<T>()},
                      [&](char** p, const int64_t* s, int64_t n) {
                        if (s[0] == sz<O>() && s[1] == sz<T>()) {
                          O* o = reinterpret_cast<O*>(p[0]);
                          const T* x = reinterpret_cast<const T*>(p[1]);
                          for (int64_t i = 0; i < n; ++i) o[i] = f(x[i]);
                        } else {
                          for (int64_t i = 0; i < n; ++i)
                            *reinterpret_cast<O*>(p[0] + i * s[0]) =
                                f(*reinterpret_cast<const T*>(p[1] + i * s[1]));
                        }
                      });
}

// out[i] = f(a[i], b[i]) with a and b broadcast to out's shape.
template <typename O, typename T, typename F>
void map2(const Tensor& out, const Tensor& a, const Tensor& b, F f) {
  const Shape& shape = out.shape();
  if (out.meta().is_contiguous() && flat_like(a, out) && flat_like(b, out)) {
    O* o = static_cast<O*>(out.raw_data());
    const T* x = static_cast<const T*>(a.raw_data());
    const T* y = static_cast<const T*>(b.raw_data());
    flat_chunks(out.numel(), [&](int64_t lo, int64_t hi) {
      for (int64_t i = lo; i < hi; ++i) o[i] = f(x[i], y[i]);
    });
    return;
  }
  for_each_strided<3>(
      shape,
      {static_cast<char*>(out.raw_data()), static_cast<char*>(a.raw_data()),
       static_cast<char*>(b.raw_data())},
      {out.strides(), broadcast_strides(a.meta(), shape), broadcast_strides(b.meta(), shape)},
      {sz<O>(), sz<T>(), sz<T>()}, [&](char** p, const int64_t* s, int64_t n) {
        O* o = reinterpret_cast<O*>(p[0]);
        const T* x = reinterpret_cast<const T*>(p[1]);
        const T* y = reinterpret_cast<const T*>(p[2]);
        if (s[0] == sz<O>() && s[1] == sz<T>() && s[2] == sz<T>()) {
          for (int64_t i = 0; i < n; ++i) o[i] = f(x[i], y[i]);
        } else if (s[0] == sz<O>() && s[1] == sz<T>() && s[2] == 0) {
          const T yv = *y;
          for (int64_t i = 0; i < n; ++i) o[i] = f(x[i], yv);
        } else if (s[0] == sz<O>() && s[1] == 0 && s[2] == sz<T>()) {
          const T xv = *x;
          for (int64_t i = 0; i < n; ++i) o[i] = f(xv, y[i]);
        } else {
          for (int64_t i = 0; i < n; ++i)
            *reinterpret_cast<O*>(p[0] + i * s[0]) =
                f(*reinterpret_cast<const T*>(p[1] + i * s[1]),
                  *reinterpret_cast<const T*>(p[2] + i * s[2]));
        }
      });
}

// `t` itself when it holds `dtype`, else a converted copy kept in `converted`. (A
// std::optional<Tensor> would cost a zeroing on every call with g++ 12.)
const Tensor& as_dtype(const Tensor& t, DType dtype, std::unique_ptr<Tensor>& converted) {
  if (t.dtype() == dtype) return t;
  converted = std::make_unique<Tensor>(t.to(dtype));
  return *converted;
}

template <typename T>
T nan_max(T a, T b) {
  if constexpr (is_floating_v<T>) {
    if (std::isnan(a) || std::isnan(b)) return std::numeric_limits<T>::quiet_NaN();
  }
  return a > b ? a : b;
}
template <typename T>
T nan_min(T a, T b) {
  if constexpr (is_floating_v<T>) {
    if (std::isnan(a) || std::isnan(b)) return std::numeric_limits<T>::quiet_NaN();
  }
  return a < b ? a : b;
}

// Refuses an integer remainder or fmod whose divisor (the tensor, else the scalar) holds a
// zero, before anything is written (torch's CPU kernels refuse it too; here it would be a
// SIGFPE).
template <typename T>
void refuse_zero_divisor(const OpDef& d, const Tensor* divisor, T scalar) {
  const bool zero =
      divisor ? divisor->numel() > 0 && divisor->abs().min().item<T>() == T(0) : scalar == T(0);
  if (zero) fail<InvalidArgument>(d.name, "integer division by zero (a divisor is 0)");
}

}  // namespace

namespace {

// The unary predicates (dtype rule ToBool): bool of each element of x, in x's own dtype.
void predicate_kernel(const OpDef& d, const Tensor& x, const Tensor& out) {
  dispatch_wide(d.name, x.dtype(), [&]<typename T>() {
    auto run = [&](auto f) { map1<bool, T>(out, x, f); };
    switch (d.id) {
      case OpId::isnan:
        run([](T v) {
          if constexpr (is_floating_v<T>) return std::isnan(v);
          return false;
        });
        return;
      case OpId::isinf:
        run([](T v) {
          if constexpr (is_floating_v<T>) return std::isinf(v);
          return false;
        });
        return;
      case OpId::isfinite:
        run([](T v) {
          if constexpr (is_floating_v<T>) return std::isfinite(v);
          return true;
        });
        return;
      case OpId::logical_not:
        run([](T v) { return v == T(0); });  // NaN is true, as in torch
        return;
      default:
        fail<InvalidArgument>(d.name, "is not a unary predicate");
    }
  });
}

}  // namespace

void unary_kernel(const OpDef& d, std::span<const Tensor> in, const OpAttrs&, const Tensor& out) {
  if (d.dtype_rule == DTypeRule::ToBool) return predicate_kernel(d, in[0], out);
  std::unique_ptr<Tensor> converted;
  const Tensor& x = as_dtype(in[0], out.dtype(), converted);
  auto run = [&]<typename T>(auto f) { map1<T, T>(out, x, f); };
  auto float_op = [&](auto f) {
    dispatch_float(d.name, out.dtype(), [&]<typename T>() { run.template operator()<T>(f); });
  };
  switch (d.id) {
    case OpId::neg:
      dispatch_wide(d.name, out.dtype(), [&]<typename T>() {
        run.template operator()<T>([](T v) { return wrap_sub(T(0), v); });
      });
      return;
    case OpId::abs:
      dispatch_wide(d.name, out.dtype(), [&]<typename T>() {
        run.template operator()<T>([](T v) {
          if constexpr (is_floating_v<T>)
            return std::abs(v);
          else
            return v < T(0) ? wrap_sub(T(0), v) : v;
        });
      });
      return;
    case OpId::relu:
      dispatch_wide(d.name, out.dtype(), [&]<typename T>() {
        run.template operator()<T>([](T v) { return v > T(0) ? v : T(0); });
      });
      return;
    case OpId::floor:
    case OpId::ceil:
    case OpId::round:
    case OpId::trunc:
      dispatch_wide(d.name, out.dtype(), [&]<typename T>() {
        if constexpr (!is_floating_v<T>) {
          run.template operator()<T>([](T v) { return v; });  // integers are whole already
        } else if (d.id == OpId::floor) {
          run.template operator()<T>([](T v) { return std::floor(v); });
        } else if (d.id == OpId::ceil) {
          run.template operator()<T>([](T v) { return std::ceil(v); });
        } else if (d.id == OpId::trunc) {
          run.template operator()<T>([](T v) { return std::trunc(v); });
        } else {
          run.template operator()<T>([](T v) { return std::nearbyint(v); });  // ties to even
        }
      });
      return;
    case OpId::bitwise_not:
      dispatch_wide(d.name, out.dtype(), [&]<typename T>() {
        if constexpr (std::is_same_v<T, bool>) {
          run.template operator()<T>([](T v) { return !v; });
        } else if constexpr (!is_floating_v<T>) {
          run.template operator()<T>([](T v) { return static_cast<T>(~v); });
        } else {
          fail<DTypeError>(d.name, "is defined for integer and bool tensors only, got {}",
                           out.dtype());
        }
      });
      return;
    case OpId::sign:
      dispatch_wide(d.name, out.dtype(), [&]<typename T>() {
        run.template operator()<T>([](T v) { return static_cast<T>((T(0) < v) - (v < T(0))); });
      });
      return;
    case OpId::exp:
      float_op([](auto v) { return std::exp(v); });
      return;
    case OpId::log:
      float_op([](auto v) { return std::log(v); });
      return;
    case OpId::sqrt:
      float_op([](auto v) { return std::sqrt(v); });
      return;
    case OpId::rsqrt:
      float_op([](auto v) { return static_cast<decltype(v)>(1) / std::sqrt(v); });
      return;
    case OpId::sin:
      float_op([](auto v) { return std::sin(v); });
      return;
    case OpId::cos:
      float_op([](auto v) { return std::cos(v); });
      return;
    case OpId::tanh:
      float_op([](auto v) { return std::tanh(v); });
      return;
    case OpId::sigmoid:
      float_op([](auto v) {
        using T = decltype(v);
        return T(1) / (T(1) + std::exp(-v));
      });
      return;
      // The formulas shared with the CUDA kernels (unary_math.hpp).
#define DTR_FORMULA_CASE(name)                                                               \
  case OpId::name:                                                                           \
    float_op([](auto v) { return dtr::detail::unary_formula<OpId::name, decltype(v)>(v); }); \
    return;
      DTR_FORMULA_UNARY_OPS(DTR_FORMULA_CASE)
#undef DTR_FORMULA_CASE
    default:
      fail<InvalidArgument>(d.name, "is not a unary op");
  }
}

void clamp_kernel(const OpDef& d, std::span<const Tensor> in, const OpAttrs& a, const Tensor& out) {
  (void)d;
  dispatch_wide(d.name, out.dtype(), [&]<typename T>() {
    bool has_lo = !a.scalars[0].is_none(), has_hi = !a.scalars[1].is_none();
    T lo = has_lo ? a.scalars[0].to<T>() : T(0), hi = has_hi ? a.scalars[1].to<T>() : T(0);
    map1<T, T>(out, in[0], [=](T v) {
      if constexpr (is_floating_v<T>) {
        if (std::isnan(v)) return v;
      }
      if (has_lo && v < lo) v = lo;
      if (has_hi && v > hi) v = hi;
      return v;
    });
  });
}

void binary_kernel(const OpDef& d, std::span<const Tensor> in, const OpAttrs& a,
                   const Tensor& out) {
  // Comparisons compute in the dtype both operands promote to; the rest in the result's.
  DType compute = out.dtype();
  if (d.dtype_rule == DTypeRule::ToBool) {
    std::array<TensorMeta, 2> metas{in[0].meta(), in.size() == 2 ? in[1].meta() : TensorMeta{}};
    compute = binary_operand_dtype(std::span<const TensorMeta>(metas.data(), in.size()), a);
  }
  dispatch_wide(d.name, compute, [&]<typename T>() {
    std::unique_ptr<Tensor> converted[2];
    const Tensor& x = as_dtype(in[0], compute, converted[0]);
    const bool scalar = in.size() == 1;
    // With a scalar operand there is no y (x stands in; it is not read as y).
    const Tensor& y = scalar ? x : as_dtype(in[1], compute, converted[1]);
    const T s = scalar ? a.scalars[0].to<T>() : T(0);
    const bool scalar_first = scalar && a.scalar_first;
    // f elementwise into `out` (element type O): over x and y, or over x and the scalar
    // (on the side the call put it), without materializing the scalar as a tensor.
    auto run = [&]<typename O>(auto f) {
      if (!scalar) {
        map2<O, T>(out, x, y, f);
      } else if (scalar_first) {
        map1<O, T>(out, x, [f, s](T u) { return f(s, u); });
      } else {
        map1<O, T>(out, x, [f, s](T u) { return f(u, s); });
      }
    };
    auto arith = [&](auto f) { run.template operator()<T>(f); };
    auto compare = [&](auto f) { run.template operator()<bool>(f); };
    switch (d.id) {
      case OpId::add:
        arith([](T u, T v) { return wrap_add(u, v); });
        return;
      case OpId::sub:
        arith([](T u, T v) { return wrap_sub(u, v); });
        return;
      case OpId::mul:
        arith([](T u, T v) { return wrap_mul(u, v); });
        return;
      case OpId::div:
        if constexpr (is_floating_v<T>) {
          arith([](T u, T v) { return u / v; });
          return;
        }
        break;
      case OpId::pow:
        if constexpr (is_floating_v<T>) {
          arith([](T u, T v) { return std::pow(u, v); });
        } else {
          // Refuse before writing anything, so an in-place pow_ never half-updates.
          if constexpr (!std::is_same_v<T, bool>) {
            T lowest = s;  // the exponent: y, x when the scalar is the base, else the scalar
            const Tensor& exponent = scalar ? x : y;
            if (!scalar || scalar_first)
              lowest = exponent.numel() == 0 ? T(0) : exponent.min().template item<T>();
            if (lowest < 0)
              fail<InvalidArgument>(
                  "pow", "integers to negative integer powers are not allowed (exponent {})",
                  lowest);
          }
          arith([](T u, T v) { return int_pow(u, v); });
        }
        return;
      case OpId::maximum:
        arith([](T u, T v) { return nan_max(u, v); });
        return;
      case OpId::minimum:
        arith([](T u, T v) { return nan_min(u, v); });
        return;
      case OpId::eq:
        compare([](T u, T v) { return u == v; });
        return;
      case OpId::ne:
        compare([](T u, T v) { return u != v; });
        return;
      case OpId::lt:
        compare([](T u, T v) { return u < v; });
        return;
      case OpId::le:
        compare([](T u, T v) { return u <= v; });
        return;
      case OpId::gt:
        compare([](T u, T v) { return u > v; });
        return;
      case OpId::ge:
        compare([](T u, T v) { return u >= v; });
        return;
      case OpId::logical_and:
        compare([](T u, T v) { return u != T(0) && v != T(0); });  // NaN is true, as in torch
        return;
      case OpId::logical_or:
        compare([](T u, T v) { return u != T(0) || v != T(0); });
        return;
      case OpId::logical_xor:
        compare([](T u, T v) { return (u != T(0)) != (v != T(0)); });
        return;
      case OpId::remainder:
      case OpId::fmod:
      case OpId::floor_divide:
      case OpId::trunc_divide:
        if constexpr (!std::is_same_v<T, bool>) {
          if constexpr (!is_floating_v<T>) {
            // The divisor: y, x when the scalar is the dividend, else the scalar.
            const Tensor* divisor = !scalar ? &y : scalar_first ? &x : nullptr;
            refuse_zero_divisor<T>(d, divisor, s);
          }
          namespace bm = dtr::detail::binary_math;
          if (d.id == OpId::fmod)
            arith([](T u, T v) { return bm::fmod_of(u, v); });
          else if (d.id == OpId::remainder)
            arith([](T u, T v) { return bm::remainder_of(u, v); });
          else if (d.id == OpId::floor_divide)
            arith([](T u, T v) { return bm::floor_divide_of(u, v); });
          else
            arith([](T u, T v) { return bm::trunc_divide_of(u, v); });
          return;
        }
        break;
      case OpId::atan2:
        if constexpr (is_floating_v<T>) {
          arith([](T u, T v) { return dtr::detail::binary_math::atan2_of(u, v); });
          return;
        }
        break;
      case OpId::bitwise_and:
      case OpId::bitwise_or:
      case OpId::bitwise_xor:
        if constexpr (!is_floating_v<T>) {
          if (d.id == OpId::bitwise_and)
            arith([](T u, T v) { return static_cast<T>(u & v); });
          else if (d.id == OpId::bitwise_or)
            arith([](T u, T v) { return static_cast<T>(u | v); });
          else
            arith([](T u, T v) { return static_cast<T>(u ^ v); });
          return;
        }
        break;
      default:
        break;
    }
    fail<InvalidArgument>(d.name, "has no kernel for {}", compute);
  });
}

void copy_into(const Tensor& dst, const Tensor& src) {
  dispatch(dst.dtype(), [&]<typename O>() {
    dispatch(src.dtype(), [&]<typename T>() {
      if constexpr (std::is_same_v<O, bool>) {
        map1<O, T>(dst, src, [](T v) { return v != T(0); });
      } else {
        map1<O, T>(dst, src, [](T v) { return saturating_cast<O>(v); });
      }
    });
  });
}

void fill(const Tensor& t, Scalar v) {
  dispatch(t.dtype(), [&]<typename T>() {
    const T value = v.to<T>();
    for_each_strided<1>(t.shape(), {static_cast<char*>(t.raw_data())}, {t.strides()}, {sz<T>()},
                        [&](char** p, const int64_t* s, int64_t n) {
                          if (s[0] == sz<T>()) {
                            T* o = reinterpret_cast<T*>(p[0]);
                            for (int64_t i = 0; i < n; ++i) o[i] = value;
                          } else {
                            for (int64_t i = 0; i < n; ++i)
                              *reinterpret_cast<T*>(p[0] + i * s[0]) = value;
                          }
                        });
  });
}

}  // namespace dtr::local::detail
