// float16 and bfloat16: the host (and CUDA device) element types of DType::Float16 and
// DType::BFloat16. Each is 16 bits of storage; arithmetic converts to float (implicitly) and
// results are stored back with an explicit conversion that rounds to nearest, ties to even,
// keeps the sign of zero, saturates to ±inf past the type's range and keeps NaN a NaN (a
// quiet NaN with the payload's top bits). The conversion functions are the same source on
// the host and on a CUDA device, so both round bit for bit alike. Doubles and integers
// convert through float, as torch's c10::Half and c10::BFloat16 do.
//
// Thread safety: value types and pure functions; safe from any thread.
#pragma once

#include <bit>
#include <cstdint>
#include <limits>
#include <type_traits>

// __host__ __device__ under nvcc (also for tensor/arith.hpp).
#ifndef DTR_HOST_DEVICE
#ifdef __CUDACC__
#define DTR_HOST_DEVICE __host__ __device__
#else
#define DTR_HOST_DEVICE
#endif
#endif

namespace dtr {

namespace half_detail {

DTR_HOST_DEVICE inline uint32_t float_bits(float f) {
#ifdef __CUDA_ARCH__
  return __float_as_uint(f);
#else
  return std::bit_cast<uint32_t>(f);
#endif
}
DTR_HOST_DEVICE inline float bits_float(uint32_t u) {
#ifdef __CUDA_ARCH__
  return __uint_as_float(u);
#else
  return std::bit_cast<float>(u);
#endif
}

// static_cast<float>, with a double past float's range becoming ±inf (not UB).
template <typename T>
DTR_HOST_DEVICE inline float to_float(T v) {
  if constexpr (std::is_same_v<T, double>) {
    if (v > 3.4028234663852886e38) return bits_float(0x7f800000u);
    if (v < -3.4028234663852886e38) return bits_float(0xff800000u);
  }
  return static_cast<float>(v);
}

// IEEE binary16 (1 sign, 5 exponent, 10 mantissa bits) from float, round to nearest even.
DTR_HOST_DEVICE inline uint16_t float_to_half_bits(float f) {
  uint32_t x = float_bits(f);
  const uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000u);
  x &= 0x7fffffffu;
  if (x >= 0x7f800000u) {  // inf, or NaN: quiet, keeping the payload's top bits
    if (x == 0x7f800000u) return sign | 0x7c00u;
    return static_cast<uint16_t>(sign | 0x7e00u | ((x >> 13) & 0x3ffu));
  }
  if (x >= 0x477ff000u) return sign | 0x7c00u;  // >= 65520 rounds past 65504: inf
  if (x < 0x38800000u) {                        // below 2^-14: a subnormal half or zero
    if (x <= 0x33000000u) return sign;          // <= 2^-25 (the tie goes to even 0)
    const uint32_t e = x >> 23;                 // 102..112
    const uint32_t m = (x & 0x7fffffu) | 0x800000u;
    const uint32_t shift = 126u - e;  // value = m * 2^(e-150) = (m >> shift) * 2^-24
    uint32_t h = m >> shift;
    const uint32_t rem = m & ((1u << shift) - 1u);
    const uint32_t halfway = 1u << (shift - 1u);
    if (rem > halfway || (rem == halfway && (h & 1u))) ++h;  // may carry into the exponent
    return static_cast<uint16_t>(sign | h);
  }
  uint32_t h = (x - 0x38000000u) >> 13;  // rebias the exponent 127 -> 15
  const uint32_t rem = x & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) ++h;  // a carry is still a valid half
  return static_cast<uint16_t>(sign | h);
}

// Exact: every binary16 value is a float.
DTR_HOST_DEVICE inline float half_bits_to_float(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  const uint32_t man = h & 0x3ffu;
  if (exp == 0) {
    const float mag = static_cast<float>(man) * 5.9604644775390625e-8f;  // man * 2^-24
    return bits_float(sign | float_bits(mag));
  }
  if (exp == 31) return bits_float(sign | 0x7f800000u | (man << 13));
  return bits_float(sign | ((exp + 112u) << 23) | (man << 13));
}

// bfloat16 (the top 16 bits of a float) from float, round to nearest even.
DTR_HOST_DEVICE inline uint16_t float_to_bfloat16_bits(float f) {
  const uint32_t x = float_bits(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x40u);  // NaN
  const uint32_t rounded = x + 0x7fffu + ((x >> 16) & 1u);  // overflow rounds into inf
  return static_cast<uint16_t>(rounded >> 16);
}

DTR_HOST_DEVICE inline float bfloat16_bits_to_float(uint16_t b) {
  return bits_float(static_cast<uint32_t>(b) << 16);
}

}  // namespace half_detail

// IEEE binary16: 11 significant bits, largest finite 65504.
struct float16 {
  uint16_t bits;

  float16() = default;
  // From any arithmetic value, through float (a double rounds twice, as in torch).
  template <typename T, std::enable_if_t<std::is_arithmetic_v<T>, int> = 0>
  DTR_HOST_DEVICE explicit float16(T v)
      : bits(half_detail::float_to_half_bits(half_detail::to_float(v))) {}
  DTR_HOST_DEVICE operator float() const { return half_detail::half_bits_to_float(bits); }
  DTR_HOST_DEVICE static float16 from_bits(uint16_t b) {
    float16 h;
    h.bits = b;
    return h;
  }
};

// bfloat16: float's 8 exponent bits with 8 significant bits.
struct bfloat16 {
  uint16_t bits;

  bfloat16() = default;
  template <typename T, std::enable_if_t<std::is_arithmetic_v<T>, int> = 0>
  DTR_HOST_DEVICE explicit bfloat16(T v)
      : bits(half_detail::float_to_bfloat16_bits(half_detail::to_float(v))) {}
  DTR_HOST_DEVICE operator float() const { return half_detail::bfloat16_bits_to_float(bits); }
  DTR_HOST_DEVICE static bfloat16 from_bits(uint16_t b) {
    bfloat16 h;
    h.bits = b;
    return h;
  }
};

static_assert(sizeof(float16) == 2 && std::is_trivially_copyable_v<float16>);
static_assert(sizeof(bfloat16) == 2 && std::is_trivially_copyable_v<bfloat16>);

// The next value of H (float16 or bfloat16) after x in the direction of y; x and y finite.
template <typename H>
DTR_HOST_DEVICE inline H next_toward(H x, H y) {
  const float fx = x, fy = y;
  if (fx == fy) return y;
  if (fx == 0.0f) return H::from_bits(static_cast<uint16_t>(fy > 0.0f ? 0x0001u : 0x8001u));
  const bool away_from_zero = (fy > fx) == (fx > 0.0f);
  return H::from_bits(static_cast<uint16_t>(away_from_zero ? x.bits + 1u : x.bits - 1u));
}

// True for float16 and bfloat16.
template <typename T>
inline constexpr bool is_half_v = std::is_same_v<T, float16> || std::is_same_v<T, bfloat16>;

// The project's "floating element type" trait: std::is_floating_point_v is false for the
// 16-bit types, so kernels ask this instead.
template <typename T>
inline constexpr bool is_floating_v = std::is_floating_point_v<T> || is_half_v<T>;

// The type an element is computed in: float for the 16-bit types, T otherwise.
template <typename T>
using compute_type_t = std::conditional_t<is_half_v<T>, float, T>;

}  // namespace dtr

// numeric_limits, so generic code (lowest(), infinity(), quiet_NaN()) works on them.
template <>
class std::numeric_limits<dtr::float16> {
 public:
  static constexpr bool is_specialized = true;
  static constexpr bool is_signed = true;
  static constexpr bool is_integer = false;
  static constexpr bool is_exact = false;
  static constexpr bool has_infinity = true;
  static constexpr bool has_quiet_NaN = true;
  static constexpr int digits = 11;
  static constexpr int max_exponent = 16;
  static constexpr int min_exponent = -13;
  static dtr::float16 min() { return dtr::float16::from_bits(0x0400); }
  static dtr::float16 lowest() { return dtr::float16::from_bits(0xfbff); }
  static dtr::float16 max() { return dtr::float16::from_bits(0x7bff); }
  static dtr::float16 epsilon() { return dtr::float16::from_bits(0x1400); }
  static dtr::float16 infinity() { return dtr::float16::from_bits(0x7c00); }
  static dtr::float16 quiet_NaN() { return dtr::float16::from_bits(0x7e00); }
  static dtr::float16 denorm_min() { return dtr::float16::from_bits(0x0001); }
};

template <>
class std::numeric_limits<dtr::bfloat16> {
 public:
  static constexpr bool is_specialized = true;
  static constexpr bool is_signed = true;
  static constexpr bool is_integer = false;
  static constexpr bool is_exact = false;
  static constexpr bool has_infinity = true;
  static constexpr bool has_quiet_NaN = true;
  static constexpr int digits = 8;
  static constexpr int max_exponent = 128;
  static constexpr int min_exponent = -125;
  static dtr::bfloat16 min() { return dtr::bfloat16::from_bits(0x0080); }
  static dtr::bfloat16 lowest() { return dtr::bfloat16::from_bits(0xff7f); }
  static dtr::bfloat16 max() { return dtr::bfloat16::from_bits(0x7f7f); }
  static dtr::bfloat16 epsilon() { return dtr::bfloat16::from_bits(0x3c00); }
  static dtr::bfloat16 infinity() { return dtr::bfloat16::from_bits(0x7f80); }
  static dtr::bfloat16 quiet_NaN() { return dtr::bfloat16::from_bits(0x7fc0); }
  static dtr::bfloat16 denorm_min() { return dtr::bfloat16::from_bits(0x0001); }
};
