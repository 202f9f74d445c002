// Internal: the formula of each floating-point unary op of the DTR_FORMULA_UNARY_OPS list,
// written once as host-and-device code, so that the CPU kernels
// (tensor/kernels_elementwise.cpp) and the CUDA kernels (tensor/cuda/kernels_elementwise.cu)
// compute the same expression in the same order (issue 42: one formula per op). T is float
// or double (float16 and bfloat16 compute in float and are rounded once).
//
// The math functions: glibc's on the host, CUDA's libdevice on the device (erff for float,
// erf for double); the two may differ by an ulp or two, as for exp and tanh.
//
// Thread safety: pure functions.
#pragma once

#include <cmath>

#include "dtr/half.hpp"  // DTR_HOST_DEVICE
#include "dtr/op_table.hpp"

// The unary ops whose formula is unary_formula below: X(name), each a ToFloat op of
// DTR_UNARY_OPS (include/dtr/op_table.hpp).
#define DTR_FORMULA_UNARY_OPS(X) \
  X(reciprocal)                  \
  X(tan)                         \
  X(asin)                        \
  X(acos)                        \
  X(atan)                        \
  X(sinh)                        \
  X(cosh)                        \
  X(asinh)                       \
  X(acosh)                       \
  X(atanh)                       \
  X(erf)                         \
  X(expm1)                       \
  X(log1p)                       \
  X(log2)                        \
  X(log10)                       \
  X(silu)                        \
  X(gelu)                        \
  X(gelu_tanh)

namespace dtr::detail::unary_math {

// fn(float) and fn(double): the C library's on the host, CUDA's (fnf, fn) on the device.
#ifdef __CUDA_ARCH__
#define DTR_UNARY_MATH_FN(fn)                  \
  DTR_HOST_DEVICE inline float fn(float v) {   \
    return ::fn##f(v);                         \
  }                                            \
  DTR_HOST_DEVICE inline double fn(double v) { \
    return ::fn(v);                            \
  }
#else
#define DTR_UNARY_MATH_FN(fn)                  \
  DTR_HOST_DEVICE inline float fn(float v) {   \
    return std::fn(v);                         \
  }                                            \
  DTR_HOST_DEVICE inline double fn(double v) { \
    return std::fn(v);                         \
  }
#endif
DTR_UNARY_MATH_FN(exp)
DTR_UNARY_MATH_FN(tanh)
DTR_UNARY_MATH_FN(tan)
DTR_UNARY_MATH_FN(asin)
DTR_UNARY_MATH_FN(acos)
DTR_UNARY_MATH_FN(atan)
DTR_UNARY_MATH_FN(sinh)
DTR_UNARY_MATH_FN(cosh)
DTR_UNARY_MATH_FN(asinh)
DTR_UNARY_MATH_FN(acosh)
DTR_UNARY_MATH_FN(atanh)
DTR_UNARY_MATH_FN(erf)
DTR_UNARY_MATH_FN(expm1)
DTR_UNARY_MATH_FN(log1p)
DTR_UNARY_MATH_FN(log2)
DTR_UNARY_MATH_FN(log10)
#undef DTR_UNARY_MATH_FN

// gelu's constants as torch writes them: 1/sqrt(2) and sqrt(2/pi).
inline constexpr double kSqrtHalf = 0.70710678118654752440;
inline constexpr double kSqrtTwoOverPi = 0.79788456080286535588;
inline constexpr double kGeluTanhCubic = 0.044715;

}  // namespace dtr::detail::unary_math

namespace dtr::detail {

// op's value at v.
template <OpId op, typename T>
DTR_HOST_DEVICE T unary_formula(T v) {
  namespace m = unary_math;
  if constexpr (op == OpId::reciprocal) {
    return T(1) / v;
  } else if constexpr (op == OpId::tan) {
    return m::tan(v);
  } else if constexpr (op == OpId::asin) {
    return m::asin(v);
  } else if constexpr (op == OpId::acos) {
    return m::acos(v);
  } else if constexpr (op == OpId::atan) {
    return m::atan(v);
  } else if constexpr (op == OpId::sinh) {
    return m::sinh(v);
  } else if constexpr (op == OpId::cosh) {
    return m::cosh(v);
  } else if constexpr (op == OpId::asinh) {
    return m::asinh(v);
  } else if constexpr (op == OpId::acosh) {
    return m::acosh(v);
  } else if constexpr (op == OpId::atanh) {
    return m::atanh(v);
  } else if constexpr (op == OpId::erf) {
    return m::erf(v);
  } else if constexpr (op == OpId::expm1) {
    return m::expm1(v);
  } else if constexpr (op == OpId::log1p) {
    return m::log1p(v);
  } else if constexpr (op == OpId::log2) {
    return m::log2(v);
  } else if constexpr (op == OpId::log10) {
    return m::log10(v);
  } else if constexpr (op == OpId::silu) {
    return v / (T(1) + m::exp(-v));  // torch's x / (1 + e^-x)
  } else if constexpr (op == OpId::gelu) {
    return v * T(0.5) * (T(1) + m::erf(v * T(m::kSqrtHalf)));
  } else {
    static_assert(op == OpId::gelu_tanh, "unary_formula: an op without a formula here");
    const T inner = T(m::kSqrtTwoOverPi) * (v + T(m::kGeluTanhCubic) * v * v * v);
    return T(0.5) * v * (T(1) + m::tanh(inner));
  }
}

}  // namespace dtr::detail
