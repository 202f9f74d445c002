// Element types of dtr tensors and the promotion rules between them (torch semantics).
//
// Thread safety: pure functions and constants; safe from any thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "dtr/half.hpp"

namespace dtr {

// Wire-stable numbering: values are sent in commands, never reorder them.
enum class DType : uint8_t {
  Float32 = 0,
  Float64 = 1,
  Int32 = 2,
  Int64 = 3,
  Bool = 4,
  Float16 = 5,   // IEEE binary16 (dtr::float16)
  BFloat16 = 6,  // bfloat16 (dtr::bfloat16)
};

inline constexpr int kNumDTypes = 7;

// True for the values that name a DType (used to validate bytes from the wire).
constexpr bool is_valid_dtype(uint8_t raw) {
  return raw < kNumDTypes;
}

constexpr size_t element_size(DType t) {
  switch (t) {
    case DType::Float32:
      return 4;
    case DType::Float64:
      return 8;
    case DType::Int32:
      return 4;
    case DType::Int64:
      return 8;
    case DType::Bool:
      return 1;
    case DType::Float16:
    case DType::BFloat16:
      return 2;
  }
  return 0;
}

constexpr std::string_view dtype_name(DType t) {
  switch (t) {
    case DType::Float32:
      return "float32";
    case DType::Float64:
      return "float64";
    case DType::Int32:
      return "int32";
    case DType::Int64:
      return "int64";
    case DType::Bool:
      return "bool";
    case DType::Float16:
      return "float16";
    case DType::BFloat16:
      return "bfloat16";
  }
  return "invalid";
}

constexpr bool is_floating(DType t) {
  return t == DType::Float32 || t == DType::Float64 || t == DType::Float16 || t == DType::BFloat16;
}
constexpr bool is_integral(DType t) {
  return t == DType::Int32 || t == DType::Int64;
}

// Rank in the promotion lattice bool < int32 < int64 < {float16, bfloat16} < float32 <
// float64. float16 and bfloat16 share a rank and are not ordered: see promote_types.
constexpr int promotion_rank(DType t) {
  switch (t) {
    case DType::Bool:
      return 0;
    case DType::Int32:
      return 1;
    case DType::Int64:
      return 2;
    case DType::Float16:
    case DType::BFloat16:
      return 3;
    case DType::Float32:
      return 4;
    case DType::Float64:
      return 5;
  }
  return -1;
}

// The dtype two tensor operands compute in (torch.result_type for two tensors). Not a
// maximum of ranks: float16 with bfloat16 is float32, where neither holds the other.
constexpr DType promote_types(DType a, DType b) {
  if (a != b && promotion_rank(a) == promotion_rank(b)) return DType::Float32;
  return promotion_rank(a) >= promotion_rank(b) ? a : b;
}

// Whether an in-place op may store a `from` result into a `to` tensor (torch.can_cast):
// no float into an integral tensor, nothing but bool into a bool tensor.
constexpr bool can_cast(DType from, DType to) {
  if (is_floating(from) && !is_floating(to)) return false;
  if (from != DType::Bool && to == DType::Bool) return false;
  return true;
}

// Parses "float32", "float", "int64", "long", "float16", "half", "bfloat16", "bf16", ...; returns
// false for unknown names.
bool parse_dtype(std::string_view name, DType& out);

// Maps a C++ element type to its DType.
template <typename T>
struct dtype_of;
template <>
struct dtype_of<float> {
  static constexpr DType value = DType::Float32;
};
template <>
struct dtype_of<double> {
  static constexpr DType value = DType::Float64;
};
template <>
struct dtype_of<int32_t> {
  static constexpr DType value = DType::Int32;
};
template <>
struct dtype_of<int64_t> {
  static constexpr DType value = DType::Int64;
};
template <>
struct dtype_of<bool> {
  static constexpr DType value = DType::Bool;
};
template <>
struct dtype_of<float16> {
  static constexpr DType value = DType::Float16;
};
template <>
struct dtype_of<bfloat16> {
  static constexpr DType value = DType::BFloat16;
};
template <typename T>
inline constexpr DType dtype_of_v = dtype_of<T>::value;

}  // namespace dtr
