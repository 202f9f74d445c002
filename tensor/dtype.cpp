// DType parsing, Scalar text and TensorMeta helpers.
#include "dtr/dtype.hpp"

#include <cmath>

#include "check.hpp"
#include "dtr/scalar.hpp"
#include "dtr/tensor_meta.hpp"

namespace dtr {

bool parse_dtype(std::string_view name, DType& out) {
  struct Alias {
    std::string_view name;
    DType dtype;
  };
  static constexpr Alias kAliases[] = {
      {"float32", DType::Float32}, {"float", DType::Float32}, {"float64", DType::Float64},
      {"double", DType::Float64},  {"int32", DType::Int32},   {"int", DType::Int32},
      {"int64", DType::Int64},     {"long", DType::Int64},    {"bool", DType::Bool},
      {"float16", DType::Float16}, {"half", DType::Float16},  {"bfloat16", DType::BFloat16},
      {"bf16", DType::BFloat16},
  };
  for (const Alias& a : kAliases) {
    if (a.name == name) {
      out = a.dtype;
      return true;
    }
  }
  return false;
}

Scalar Scalar::from_parts(Kind kind, int64_t i, double f) {
  Scalar s;
  s.kind_ = kind;
  if (kind == Kind::Float) {
    s.f_ = f;
  } else if (kind == Kind::Bool) {
    s.i_ = i != 0;
  } else if (kind == Kind::Int) {
    s.i_ = i;
  }
  return s;
}

std::string Scalar::to_string() const {
  switch (kind_) {
    case Kind::None:
      return "None";
    case Kind::Bool:
      return i_ ? "True" : "False";
    case Kind::Int:
      return std::to_string(i_);
    case Kind::Float:
      return fmt::format("{}", f_);
  }
  return "?";
}

int64_t TensorMeta::storage_extent() const {
  int64_t extent = offset + 1;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == 0) return 0;
    extent += (shape[i] - 1) * strides[i];
  }
  return extent;
}

std::string describe(const TensorMeta& m) {
  return fmt::format("{}{}", dtype_name(m.dtype), to_string(m.shape));
}

}  // namespace dtr
