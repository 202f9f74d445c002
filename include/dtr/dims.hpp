// Dims: a fixed-capacity, inline list of int64 used for shapes, strides and dim lists,
// so that shape rules on the master's dispatch path never allocate.
//
// Thread safety: a value type; distinct objects may be used from distinct threads.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <iosfwd>
#include <string>

namespace dtr {

// Most dims a tensor may have (torch allows more; no real workload needs them).
inline constexpr int kMaxDims = 12;

class Dims {
 public:
  using value_type = int64_t;
  using iterator = int64_t*;
  using const_iterator = const int64_t*;

  Dims() = default;
  Dims(std::initializer_list<int64_t> values);
  // n copies of value; throws ShapeError when n exceeds kMaxDims.
  explicit Dims(size_t n, int64_t value = 0);
  template <typename It>
  Dims(It first, It last) {
    for (; first != last; ++first) push_back(static_cast<int64_t>(*first));
  }

  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  int64_t& operator[](size_t i) { return data_[i]; }
  int64_t operator[](size_t i) const { return data_[i]; }
  int64_t* data() { return data_.data(); }
  const int64_t* data() const { return data_.data(); }
  iterator begin() { return data_.data(); }
  iterator end() { return data_.data() + size_; }
  const_iterator begin() const { return data_.data(); }
  const_iterator end() const { return data_.data() + size_; }
  int64_t back() const { return data_[size_ - 1]; }

  // Throws ShapeError when the list is full.
  void push_back(int64_t v);
  void pop_back() { --size_; }
  // Inserts v before position pos (0..size()); throws ShapeError when full.
  void insert(size_t pos, int64_t v);
  void erase(size_t pos);
  void clear() { size_ = 0; }
  void resize(size_t n, int64_t value = 0);

  friend bool operator==(const Dims& a, const Dims& b) {
    if (a.size_ != b.size_) return false;
    for (size_t i = 0; i < a.size_; ++i)
      if (a.data_[i] != b.data_[i]) return false;
    return true;
  }

 private:
  std::array<int64_t, kMaxDims> data_{};
  uint8_t size_ = 0;
};

using Shape = Dims;
using Strides = Dims;

// Product of the sizes (1 for a 0-d shape). Throws ShapeError on int64 overflow.
int64_t numel_of(const Shape& shape);
// Row-major strides, in elements, for a contiguous tensor of this shape.
Strides contiguous_strides(const Shape& shape);
// "[2, 3]".
std::string to_string(const Dims& d);
std::ostream& operator<<(std::ostream& os, const Dims& d);

}  // namespace dtr
