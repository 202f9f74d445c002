#include "pg/reduce.hpp"

#include <fmt/format.h>

#include <cmath>
#include <cstring>
#include <type_traits>

namespace dtr::pg {
namespace {

template <typename T>
T wrap_add(T a, T b) {
  if constexpr (std::is_integral_v<T>) {
    using U = std::make_unsigned_t<T>;
    return static_cast<T>(static_cast<U>(a) + static_cast<U>(b));
  } else {
    return static_cast<T>(a + b);  // float16/bfloat16: in float, rounded to nearest even
  }
}

template <typename T>
T wrap_mul(T a, T b) {
  if constexpr (std::is_integral_v<T>) {
    using U = std::make_unsigned_t<T>;
    return static_cast<T>(static_cast<U>(a) * static_cast<U>(b));
  } else {
    return static_cast<T>(a * b);
  }
}

template <typename T>
T min_of(T a, T b) {
  if constexpr (is_floating_v<T>) {
    if (std::isnan(static_cast<double>(a))) return a;
    if (std::isnan(static_cast<double>(b))) return b;
  }
  return b < a ? b : a;
}

template <typename T>
T max_of(T a, T b) {
  if constexpr (is_floating_v<T>) {
    if (std::isnan(static_cast<double>(a))) return a;
    if (std::isnan(static_cast<double>(b))) return b;
  }
  return a < b ? b : a;
}

template <typename T, typename F>
void loop(void* dst, const void* lo, const void* hi, int64_t n, F f) {
  auto* d = static_cast<T*>(dst);
  const auto* a = static_cast<const T*>(lo);
  const auto* b = static_cast<const T*>(hi);
  for (int64_t i = 0; i < n; ++i) d[i] = f(a[i], b[i]);
}

template <typename T>
void typed(void* dst, const void* lo, const void* hi, int64_t n, ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum:
    case ReduceOp::Avg:
      loop<T>(dst, lo, hi, n, wrap_add<T>);
      return;
    case ReduceOp::Product:
      loop<T>(dst, lo, hi, n, wrap_mul<T>);
      return;
    case ReduceOp::Min:
      loop<T>(dst, lo, hi, n, min_of<T>);
      return;
    case ReduceOp::Max:
      loop<T>(dst, lo, hi, n, max_of<T>);
      return;
  }
}

void bools(void* dst, const void* lo, const void* hi, int64_t n, ReduceOp op) {
  // Bytes of a bool tensor are 0 or 1 locally, but received bytes may be anything: any
  // non-zero byte counts as true and the result is 0 or 1.
  auto* d = static_cast<uint8_t*>(dst);
  const auto* a = static_cast<const uint8_t*>(lo);
  const auto* b = static_cast<const uint8_t*>(hi);
  const bool is_or = op == ReduceOp::Sum || op == ReduceOp::Max || op == ReduceOp::Avg;
  if (is_or) {
    for (int64_t i = 0; i < n; ++i) d[i] = (a[i] | b[i]) != 0;
  } else {
    for (int64_t i = 0; i < n; ++i) d[i] = (a[i] != 0) & (b[i] != 0);
  }
}

// Each element divided in float and rounded back to T (float16 or bfloat16).
template <typename T>
void divide_half(void* data, int64_t n, int64_t divisor) {
  auto* p = static_cast<T*>(data);
  const float d = static_cast<float>(divisor);
  for (int64_t i = 0; i < n; ++i) p[i] = T(static_cast<float>(p[i]) / d);
}

}  // namespace

void reduce_into(void* dst, const void* lo, const void* hi, int64_t n, DType dtype, ReduceOp op) {
  if (n <= 0) return;
  switch (dtype) {
    case DType::Float32:
      return typed<float>(dst, lo, hi, n, op);
    case DType::Float64:
      return typed<double>(dst, lo, hi, n, op);
    case DType::Int32:
      return typed<int32_t>(dst, lo, hi, n, op);
    case DType::Int64:
      return typed<int64_t>(dst, lo, hi, n, op);
    case DType::Bool:
      return bools(dst, lo, hi, n, op);
    case DType::Float16:
      return typed<float16>(dst, lo, hi, n, op);
    case DType::BFloat16:
      return typed<bfloat16>(dst, lo, hi, n, op);
  }
}

void divide_by(void* data, int64_t n, DType dtype, int64_t divisor) {
  if (dtype == DType::Float32) {
    auto* p = static_cast<float*>(data);
    const float d = static_cast<float>(divisor);
    for (int64_t i = 0; i < n; ++i) p[i] /= d;
  } else if (dtype == DType::Float64) {
    auto* p = static_cast<double*>(data);
    const double d = static_cast<double>(divisor);
    for (int64_t i = 0; i < n; ++i) p[i] /= d;
  } else if (dtype == DType::Float16) {
    divide_half<float16>(data, n, divisor);
  } else if (dtype == DType::BFloat16) {
    divide_half<bfloat16>(data, n, divisor);
  }
}

void copy_elements(void* dst, const void* src, int64_t n, DType dtype) {
  if (n <= 0) return;
  if (dtype != DType::Bool) {
    std::memcpy(dst, src, static_cast<size_t>(n) * element_size(dtype));
    return;
  }
  auto* d = static_cast<uint8_t*>(dst);
  const auto* s = static_cast<const uint8_t*>(src);
  for (int64_t i = 0; i < n; ++i) d[i] = s[i] != 0;
}

void check_reducible(DType dtype, ReduceOp op, const char* what) {
  if (op == ReduceOp::Avg && !is_floating(dtype)) {
    throw DTypeError(
        fmt::format("{}: ReduceOp AVG needs a floating dtype, got {}", what, dtype_name(dtype)));
  }
}

}  // namespace dtr::pg
