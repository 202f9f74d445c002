// Scalar: a number passed to an op (fill value, scalar operand, clamp bound), remembering
// whether it was written as a bool, an integer or a floating value, which decides result
// dtypes the way Python scalars do in torch.
//
// Thread safety: a value type.
#pragma once

#include <cstdint>
#include <string>
#include <type_traits>

namespace dtr {

class Scalar {
 public:
  // Wire-stable numbering.
  enum class Kind : uint8_t { None = 0, Bool = 1, Int = 2, Float = 3 };

  Scalar() = default;  // None: "not given" (e.g. an open clamp bound)
  Scalar(bool v) : kind_(Kind::Bool), i_(v ? 1 : 0) {}
  template <typename T,
            std::enable_if_t<std::is_integral_v<T> && !std::is_same_v<T, bool>, int> = 0>
  Scalar(T v) : kind_(Kind::Int), i_(static_cast<int64_t>(v)) {}
  template <typename T, std::enable_if_t<std::is_floating_point_v<T>, int> = 0>
  Scalar(T v) : kind_(Kind::Float), f_(static_cast<double>(v)) {}

  Kind kind() const { return kind_; }
  bool is_none() const { return kind_ == Kind::None; }
  bool is_floating() const { return kind_ == Kind::Float; }
  bool is_integral() const { return kind_ == Kind::Int; }
  bool is_bool() const { return kind_ == Kind::Bool; }

  double to_double() const { return kind_ == Kind::Float ? f_ : static_cast<double>(i_); }
  int64_t to_int() const { return kind_ == Kind::Float ? static_cast<int64_t>(f_) : i_; }
  template <typename T>
  T to() const {
    if constexpr (std::is_same_v<T, bool>) {
      return kind_ == Kind::Float ? f_ != 0.0 : i_ != 0;
    } else if constexpr (std::is_floating_point_v<T>) {
      return static_cast<T>(to_double());
    } else {
      return static_cast<T>(to_int());
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
