// Internal: the formulas of the binary ops remainder, fmod and atan2, written once as
// host-and-device code, so that the CPU kernels (tensor/kernels_elementwise.cpp) and the
// CUDA kernels (tensor/cuda/kernels_binary.cu) compute the same expression (issue 42: one
// formula per op). T is a compute type: float or double (float16 and bfloat16 compute in
// float), or an integer type. Bool operands are refused before these are reached.
//
// Integer remainder and fmod by zero are refused before any kernel runs (the callers check
// the divisor), as torch's CPU kernels do: on the host it would be a SIGFPE, on a GPU an
// unspecified value.
//
// Thread safety: pure functions.
#pragma once

#include <cmath>
#include <type_traits>

#include "dtr/half.hpp"  // DTR_HOST_DEVICE

namespace dtr::detail::binary_math {

// a - trunc(a / b) * b, the sign of a (C's fmod). For integers b is not 0; b = -1 gives 0
// without dividing (the one quotient that overflows: the lowest value divided by -1).
template <typename T>
DTR_HOST_DEVICE inline T fmod_of(T a, T b) {
  if constexpr (std::is_floating_point_v<T>) {
#ifdef __CUDA_ARCH__
    if constexpr (std::is_same_v<T, float>)
      return ::fmodf(a, b);
    else
      return ::fmod(a, b);
#else
    return std::fmod(a, b);
#endif
  } else {
    if constexpr (std::is_signed_v<T>) {
      if (b == T(-1)) return T(0);
    }
    return static_cast<T>(a % b);
  }
}

// a - floor(a / b) * b, the sign of b (Python's %, torch's remainder): fmod moved by b when
// the signs differ, as torch computes it (so remainder(-1, inf) is inf, as in torch).
template <typename T>
DTR_HOST_DEVICE inline T remainder_of(T a, T b) {
  T r = fmod_of(a, b);
  if (r != T(0) && ((r < T(0)) != (b < T(0)))) r = static_cast<T>(r + b);
  return r;
}

// trunc(a / b). For integers b is not 0; b = -1 negates (wrapping the lowest value, as
// torch's).
template <typename T>
DTR_HOST_DEVICE inline T trunc_divide_of(T a, T b) {
  if constexpr (std::is_floating_point_v<T>) {
#ifdef __CUDA_ARCH__
    return ::trunc(a / b);
#else
    return std::trunc(a / b);
#endif
  } else {
    if constexpr (std::is_signed_v<T>) {
      if (b == T(-1))
        return static_cast<T>(std::make_unsigned_t<T>(0) - std::make_unsigned_t<T>(a));
    }
    return static_cast<T>(a / b);
  }
}

// floor(a / b), as torch computes it: for floats from fmod (exact where a / b rounds to an
// integer), b = 0 giving a / b (inf or NaN); for integers the truncated quotient moved
// down when the signs differ and it is inexact.
template <typename T>
DTR_HOST_DEVICE inline T floor_divide_of(T a, T b) {
  if constexpr (std::is_floating_point_v<T>) {
    if (b == T(0)) return a / b;
    const T mod = fmod_of(a, b);
    T div = (a - mod) / b;
    if (mod != T(0) && ((b < T(0)) != (mod < T(0)))) div -= T(1);
    if (div == T(0)) {
#ifdef __CUDA_ARCH__
      return ::copysign(T(0), a / b);
#else
      return std::copysign(T(0), a / b);
#endif
    }
#ifdef __CUDA_ARCH__
    T floordiv = ::floor(div);
#else
    T floordiv = std::floor(div);
#endif
    if (div - floordiv > T(0.5)) floordiv += T(1);
    return floordiv;
  } else {
    const T q = trunc_divide_of(a, b);
    if constexpr (std::is_signed_v<T>) {
      if (b != T(-1) && a % b != T(0) && ((a < T(0)) != (b < T(0))))
        return static_cast<T>(q - T(1));
    }
    return q;
  }
}

// The angle of the point (b, a) in radians, in [-pi, pi].
template <typename T>
DTR_HOST_DEVICE inline T atan2_of(T a, T b) {
#ifdef __CUDA_ARCH__
  if constexpr (std::is_same_v<T, float>)
    return ::atan2f(a, b);
  else
    return ::atan2(a, b);
#else
  return std::atan2(a, b);
#endif
}

}  // namespace dtr::detail::binary_math
