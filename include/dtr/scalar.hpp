// Scalar: a number passed to an op (fill value, scalar operand, clamp bound), remembering
// whether it was written as a bool, an integer or a floating value, which decides result
// dtypes the way Python scalars do in torch.
//
// Thread safety: a value type.
#pragma once

#include <cstdint>
#include <limits>
#include <string>
#include <type_traits>

#include "dtr/half.hpp"

namespace dtr {

// static_cast with a defined result where C++ leaves one undefined (values that arrive
// over the network reach every conversion): a floating value to an integer type maps NaN
// to 0 and saturates past the type's range; a double past float's range becomes ±inf.
// float16 and bfloat16 convert through float (rounding to nearest even; see dtr/half.hpp).
template <typename To, typename From>
constexpr To saturating_cast(From v) {
  if constexpr (is_half_v<From> && !std::is_same_v<To, From>) {
    return saturating_cast<To>(static_cast<float>(v));
  } else if constexpr (is_half_v<To> && !std::is_same_v<To, From>) {
    return To(saturating_cast<float>(v));
  } else if constexpr (std::is_floating_point_v<From> && std::is_integral_v<To> &&
                       !std::is_same_v<To, bool>) {
    if (v != v) return To(0);
    constexpr From hi = static_cast<From>(std::numeric_limits<To>::max());  // may round up
    constexpr From lo = static_cast<From>(std::numeric_limits<To>::min());  // exact
    if (v >= hi) return std::numeric_limits<To>::max();
    if (v <= lo) return std::numeric_limits<To>::min();
    return static_cast<To>(v);
  } else if constexpr (std::is_same_v<From, double> && std::is_same_v<To, float>) {
    if (v > static_cast<double>(std::numeric_limits<float>::max()))
      return std::numeric_limits<float>::infinity();
    if (v < -static_cast<double>(std::numeric_limits<float>::max()))
      return -std::numeric_limits<float>::infinity();
    return static_cast<float>(v);
  } else {
    return static_cast<To>(v);
  }
}

class Scalar {
 public:
  // Wire-stable numbering.
  enum class Kind : uint8_t { None = 0, Bool = 1, Int = 2, Float = 3 };

  Scalar() = default;  // None: "not given" (e.g. an open clamp bound)
  Scalar(bool v) : kind_(Kind::Bool), i_(v ? 1 : 0) {}
  template <typename T,
            std::enable_if_t<std::is_integral_v<T> && !std::is_same_v<T, bool>, int> = 0>
  Scalar(T v) : kind_(Kind::Int), i_(static_cast<int64_t>(v)) {}
  template <typename T, std::enable_if_t<is_floating_v<T>, int> = 0>
  Scalar(T v) : kind_(Kind::Float), f_(static_cast<double>(v)) {}

  Kind kind() const { return kind_; }
  bool is_none() const { return kind_ == Kind::None; }
  bool is_floating() const { return kind_ == Kind::Float; }
  bool is_integral() const { return kind_ == Kind::Int; }
  bool is_bool() const { return kind_ == Kind::Bool; }

  double to_double() const { return kind_ == Kind::Float ? f_ : static_cast<double>(i_); }
  // Floating values convert with saturating_cast (NaN: 0).
  int64_t to_int() const { return kind_ == Kind::Float ? saturating_cast<int64_t>(f_) : i_; }
  template <typename T>
  T to() const {
    if constexpr (std::is_same_v<T, bool>) {
      return kind_ == Kind::Float ? f_ != 0.0 : i_ != 0;
    } else if constexpr (is_floating_v<T>) {
      return saturating_cast<T>(to_double());
    } else if (kind_ == Kind::Float) {
      return saturating_cast<T>(f_);
    } else {
      return saturating_cast<T>(to_int());
    }
  }

  // Raw parts, for the wire codec.
  int64_t int_bits() const { return i_; }
  double float_bits() const { return f_; }
  static Scalar from_parts(Kind kind, int64_t i, double f);

  std::string to_string() const;
  friend bool operator==(const Scalar& a, const Scalar& b) {
    return a.kind_ == b.kind_ && a.i_ == b.i_ && (a.f_ == b.f_ || (a.f_ != a.f_ && b.f_ != b.f_));
  }

 private:
  Kind kind_ = Kind::None;
  int64_t i_ = 0;
  double f_ = 0.0;
};

}  // namespace dtr
