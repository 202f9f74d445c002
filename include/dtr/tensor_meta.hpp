// TensorMeta: everything about a tensor but its bytes (dtype, shape, strides, offset).
// The master keeps one per remote handle; the shape rules map metas to metas.
//
// Thread safety: a value type.
#pragma once

#include <cstdint>
#include <string>

#include "dtr/dims.hpp"
#include "dtr/dtype.hpp"

namespace dtr {

struct TensorMeta {
  DType dtype = DType::Float32;
  Shape shape;
  Strides strides;     // in elements; may be 0 (expanded) but never negative
  int64_t offset = 0;  // in elements from the start of the storage

  int64_t dim() const { return static_cast<int64_t>(shape.size()); }
  int64_t numel() const { return numel_of(shape); }
  bool is_contiguous() const {
    int64_t expected = 1;
    for (size_t i = shape.size(); i-- > 0;) {
      if (shape[i] == 1) continue;
      if (shape[i] == 0) return true;
      if (strides[i] != expected) return false;
      expected *= shape[i];
    }
    return true;
  }
  // Number of storage elements the view reaches: 1 + offset + sum((size-1)*stride),
  // 0 for an empty tensor.
  int64_t storage_extent() const;

  static TensorMeta contiguous(DType dtype, const Shape& shape) {
    return TensorMeta{dtype, shape, contiguous_strides(shape), 0};
  }
  friend bool operator==(const TensorMeta&, const TensorMeta&) = default;
};

// "float32[2, 3]".
std::string describe(const TensorMeta& m);

}  // namespace dtr
