// Internal: element arithmetic with dtr's semantics, shared by the CPU kernels and the CUDA
// kernels (host and device functions under nvcc): wrapping integer add/sub/mul (no
// signed-overflow UB; bool add is "or", mul is "and") and integer pow by squaring.
//
// Thread safety: pure functions.
#pragma once

#include <type_traits>

#include "dtr/half.hpp"  // DTR_HOST_DEVICE

namespace dtr::detail {

template <typename T>
DTR_HOST_DEVICE inline T wrap_add(T a, T b) {
  if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
    using U = std::make_unsigned_t<T>;
    return static_cast<T>(static_cast<U>(a) + static_cast<U>(b));
  } else if constexpr (std::is_same_v<T, bool>) {
    return a || b;
  } else {
    return a + b;
  }
}
template <typename T>
DTR_HOST_DEVICE inline T wrap_sub(T a, T b) {
  if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
    using U = std::make_unsigned_t<T>;
    return static_cast<T>(static_cast<U>(a) - static_cast<U>(b));
  } else {
    return static_cast<T>(a - b);
  }
}
template <typename T>
DTR_HOST_DEVICE inline T wrap_mul(T a, T b) {
  if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
    using U = std::make_unsigned_t<T>;
    return static_cast<T>(static_cast<U>(a) * static_cast<U>(b));
  } else if constexpr (std::is_same_v<T, bool>) {
    return a && b;
  } else {
    return a * b;
  }
}

// base^exp for integral (and bool) T; 0 for a negative exponent, which the kernels refuse
// before they get here.
template <typename T>
DTR_HOST_DEVICE inline T int_pow(T base, T exp) {
  if constexpr (std::is_same_v<T, bool>) {
    return base || !exp;
  } else {
    if (exp < 0) return 0;
    T result = 1;
    while (exp) {
      if (exp & 1) result = wrap_mul(result, base);
      exp >>= 1;
      if (exp) base = wrap_mul(base, base);
    }
    return result;
  }
}

}  // namespace dtr::detail
