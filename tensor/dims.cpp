// Dims: the inline int64 list behind shapes and strides.
#include "dtr/dims.hpp"

#include <ostream>

#include "check.hpp"

namespace dtr {

namespace {
[[noreturn]] void too_many_dims(size_t n) {
  throw ShapeError(fmt::format("a tensor may have at most {} dims, not {}", kMaxDims, n));
}
}  // namespace

Dims::Dims(std::initializer_list<int64_t> values) {
  if (values.size() > kMaxDims) too_many_dims(values.size());
  for (int64_t v : values) data_[size_++] = v;
}

Dims::Dims(size_t n, int64_t value) {
  resize(n, value);
}

void Dims::push_back(int64_t v) {
  if (size_ >= kMaxDims) too_many_dims(size_ + 1u);
  data_[size_++] = v;
}

void Dims::insert(size_t pos, int64_t v) {
  if (size_ >= kMaxDims) too_many_dims(size_ + 1u);
  for (size_t i = size_; i > pos; --i) data_[i] = data_[i - 1];
  data_[pos] = v;
  ++size_;
}

void Dims::erase(size_t pos) {
  for (size_t i = pos; i + 1 < size_; ++i) data_[i] = data_[i + 1];
  --size_;
}

void Dims::resize(size_t n, int64_t value) {
  if (n > kMaxDims) too_many_dims(n);
  for (size_t i = size_; i < n; ++i) data_[i] = value;
  size_ = static_cast<uint8_t>(n);
}

int64_t numel_of(const Shape& shape) {
  // The product of the sizes, and of the sizes with zeros counted as ones: the latter is
  // what contiguous strides multiply, so it must fit too ([0, 2^32, 2^32] is refused).
  int64_t n = 1, strided = 1;
  for (int64_t s : shape) {
    if (s < 0) throw ShapeError(fmt::format("negative size {} in shape {}", s, shape));
    if (__builtin_mul_overflow(strided, s > 0 ? s : 1, &strided))
      throw ShapeError(fmt::format("shape {} has more elements than int64 can count", shape));
    n *= s;  // |n| <= strided: no overflow
  }
  return n;
}

Strides contiguous_strides(const Shape& shape) {
  Strides st(shape.size());
  int64_t acc = 1;
  for (size_t i = shape.size(); i-- > 0;) {
    st[i] = acc;
    // Saturates for shapes numel_of() refuses; such strides never address memory.
    if (__builtin_mul_overflow(acc, shape[i] > 0 ? shape[i] : 1, &acc)) acc = INT64_MAX;
  }
  return st;
}

std::string to_string(const Dims& d) {
  std::string s = "[";
  for (size_t i = 0; i < d.size(); ++i) {
    if (i) s += ", ";
    s += std::to_string(d[i]);
  }
  return s + "]";
}

std::ostream& operator<<(std::ostream& os, const Dims& d) {
  return os << to_string(d);
}

}  // namespace dtr
