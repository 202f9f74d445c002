// A plain reference for the tensor tests: dense row-major arrays of double with the dtype a
// result must have, and the ops written as loops with hand-done index arithmetic. Nothing
// here uses the library's iteration: tensors are built by writing their storage by hand
// (in any layout: contiguous, column-major, padded with an offset) and read back the same
// way, from their metadata and raw storage.
#pragma once

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <initializer_list>
#include <limits>
#include <memory>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "dtr/dtype.hpp"
#include "dtr/error.hpp"
#include "dtr/op_table.hpp"
#include "dtr/scalar.hpp"
#include "dtr/tensor.hpp"

// doctest prints vectors in failed checks (first 20 elements).
namespace doctest {
template <typename T>
struct StringMaker<std::vector<T>> {
  static String convert(const std::vector<T>& v) {
    std::ostringstream os;
    os.precision(17);
    os << "{";
    for (size_t i = 0; i < v.size() && i < 20; ++i) os << (i ? ", " : "") << +v[i];
    if (v.size() > 20) os << ", ... (" << v.size() << " elements)";
    os << "}";
    return String(os.str().c_str());
  }
};
}  // namespace doctest

namespace dtr_test {

using dtr::DType;
using dtr::Scalar;
using dtr::local::Tensor;
using Sizes = std::vector<int64_t>;

inline constexpr DType kF32 = DType::Float32;
inline constexpr DType kF64 = DType::Float64;
inline constexpr DType kI32 = DType::Int32;
inline constexpr DType kI64 = DType::Int64;
inline constexpr DType kBool = DType::Bool;
inline constexpr DType kF16 = DType::Float16;
inline constexpr DType kBF16 = DType::BFloat16;
inline constexpr DType kAllDTypes[] = {kF32, kF64, kI32, kI64, kBool};

// ---------------------------------------------------------------------------------------
// Index arithmetic.

inline int64_t numel(const Sizes& shape) {
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  return n;
}

inline Sizes row_major_strides(const Sizes& shape) {
  Sizes st(shape.size(), 1);
  int64_t acc = 1;
  for (size_t i = shape.size(); i-- > 0;) {
    st[i] = acc;
    acc *= std::max<int64_t>(shape[i], 1);
  }
  return st;
}

// Multi-index of row-major position `linear` in `shape`.
inline Sizes unravel(int64_t linear, const Sizes& shape) {
  Sizes idx(shape.size(), 0);
  for (size_t i = shape.size(); i-- > 0;) {
    idx[i] = linear % shape[i];
    linear /= shape[i];
  }
  return idx;
}

inline int64_t ravel(const Sizes& idx, const Sizes& shape) {
  int64_t linear = 0;
  for (size_t i = 0; i < shape.size(); ++i) linear = linear * shape[i] + idx[i];
  return linear;
}

inline dtr::Shape to_shape(const Sizes& s) {
  return dtr::Shape(s.begin(), s.end());
}
inline Sizes to_sizes(const dtr::Dims& d) {
  return Sizes(d.begin(), d.end());
}

inline std::string str(const Sizes& s) {
  return dtr::to_string(to_shape(s));
}
inline std::string str(DType t) {
  return std::string(dtr::dtype_name(t));
}

// ---------------------------------------------------------------------------------------
// dtype semantics, written out independently of the library's helpers.

inline bool is_float(DType t) {
  return t == kF32 || t == kF64 || t == kF16 || t == kBF16;
}
inline bool is_int(DType t) {
  return t == kI32 || t == kI64;
}

inline int rank(DType t) {
  switch (t) {
    case DType::Bool:
      return 0;
    case DType::Int32:
      return 1;
    case DType::Int64:
      return 2;
    case DType::Float32:
      return 3;
    case DType::Float64:
      return 4;
    case DType::Float16:
    case DType::BFloat16:
      return -1;  // not in the tests of the five older dtypes (see half_test.cpp)
  }
  return -1;
}

// Two tensors: the higher of bool < int32 < int64 < float32 < float64.
inline DType promote(DType a, DType b) {
  return rank(a) >= rank(b) ? a : b;
}

// A tensor and a Python-style scalar: the scalar only matters when it is of a higher
// category (bool < integer < floating), and then gives that category's default dtype.
inline DType promote_scalar(DType t, const Scalar& s) {
  int tcat = is_float(t) ? 2 : is_int(t) ? 1 : 0;
  int scat = s.is_floating() ? 2 : s.is_integral() ? 1 : 0;
  if (scat <= tcat) return t;
  return scat == 2 ? kF32 : kI64;
}

inline DType to_float(DType t) {
  return is_float(t) ? t : kF32;
}
inline DType sum_like(DType t) {
  return is_float(t) ? t : kI64;
}

// The value `x` becomes when stored in a `t` element (floats to ints truncate).
inline double cast_to(DType t, double x) {
  switch (t) {
    case DType::Float32:
      return static_cast<double>(static_cast<float>(x));
    case DType::Float64:
      return x;
    case DType::Int32:
      return static_cast<double>(static_cast<int32_t>(x));
    case DType::Int64:
      return static_cast<double>(static_cast<int64_t>(x));
    case DType::Bool:
      return x != 0.0 ? 1.0 : 0.0;
    case DType::Float16:
      return static_cast<double>(static_cast<float>(dtr::float16(static_cast<float>(x))));
    case DType::BFloat16:
      return static_cast<double>(static_cast<float>(dtr::bfloat16(static_cast<float>(x))));
  }
  return x;
}

inline double scalar_value(const Scalar& s) {
  return s.is_floating() ? s.to_double() : static_cast<double>(s.to_int());
}

// ---------------------------------------------------------------------------------------
// Raw element access.

inline size_t elem_size(DType t) {
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

inline double load(const void* base, DType t, int64_t pos) {
  switch (t) {
    case DType::Float32:
      return static_cast<const float*>(base)[pos];
    case DType::Float64:
      return static_cast<const double*>(base)[pos];
    case DType::Int32:
      return static_cast<const int32_t*>(base)[pos];
    case DType::Int64:
      return static_cast<double>(static_cast<const int64_t*>(base)[pos]);
    case DType::Bool:
      return static_cast<const uint8_t*>(base)[pos];  // 0/1 expected
    case DType::Float16:
      return static_cast<float>(static_cast<const dtr::float16*>(base)[pos]);
    case DType::BFloat16:
      return static_cast<float>(static_cast<const dtr::bfloat16*>(base)[pos]);
  }
  return 0;
}

inline void store(void* base, DType t, int64_t pos, double v) {
  switch (t) {
    case DType::Float32:
      static_cast<float*>(base)[pos] = static_cast<float>(v);
      break;
    case DType::Float64:
      static_cast<double*>(base)[pos] = v;
      break;
    case DType::Int32:
      static_cast<int32_t*>(base)[pos] = static_cast<int32_t>(v);
      break;
    case DType::Int64:
      static_cast<int64_t*>(base)[pos] = static_cast<int64_t>(v);
      break;
    case DType::Bool:
      static_cast<uint8_t*>(base)[pos] = v != 0.0 ? 1 : 0;
      break;
    case DType::Float16:
      static_cast<dtr::float16*>(base)[pos] = dtr::float16(static_cast<float>(v));
      break;
    case DType::BFloat16:
      static_cast<dtr::bfloat16*>(base)[pos] = dtr::bfloat16(static_cast<float>(v));
      break;
  }
}

// ---------------------------------------------------------------------------------------
// Reference arrays.

struct Array {
  DType dtype = kF32;
  Sizes shape;
  std::vector<double> v;  // row-major, values already representable in dtype
  // Optional per-element magnitude of the terms that made the value (sum of |terms|);
  // a float check allows scale_tol * scale[i] on top of its tolerance.
  std::vector<double> scale;

  int64_t numel() const { return dtr_test::numel(shape); }
  double at(const Sizes& idx) const { return v[static_cast<size_t>(ravel(idx, shape))]; }
};

inline Array make_array(DType t, Sizes shape, std::vector<double> values) {
  Array a{t, std::move(shape), std::move(values), {}};
  for (double& x : a.v) x = cast_to(t, x);
  return a;
}

inline Array filled(DType t, Sizes shape, double value) {
  return make_array(t, shape, std::vector<double>(static_cast<size_t>(numel(shape)), value));
}

// Range of the random values: floats uniform in [lo, hi), integers uniform in
// [ceil(lo), floor(hi)], bools fair coins. `quantum` > 0 rounds floats to multiples of it
// (to make ties for comparisons).
struct Range {
  double lo = -2.0;
  double hi = 2.0;
  double quantum = 0.0;
  bool avoid_zero = false;  // |value| >= some margin (divisors)
};

inline Array random_array(DType t, Sizes shape, uint64_t seed, Range r = {}) {
  std::mt19937_64 rng(seed * 0x9E3779B97F4A7C15ull + 0x1234567ull);
  std::uniform_real_distribution<double> uf(r.lo, r.hi);
  std::uniform_int_distribution<int64_t> ui(static_cast<int64_t>(std::ceil(r.lo)),
                                            static_cast<int64_t>(std::floor(r.hi)));
  Array a{t, std::move(shape), {}, {}};
  a.v.resize(static_cast<size_t>(a.numel()));
  for (double& x : a.v) {
    for (;;) {
      if (t == kBool) {
        x = static_cast<double>(rng() & 1);
      } else if (is_int(t)) {
        x = static_cast<double>(ui(rng));
      } else {
        x = uf(rng);
        if (r.quantum > 0) x = std::round(x / r.quantum) * r.quantum;
      }
      if (!r.avoid_zero || t == kBool) break;
      if (is_int(t) ? x != 0.0 : std::fabs(x) >= 0.25) break;
    }
    x = cast_to(t, x);
  }
  return a;
}

// ---------------------------------------------------------------------------------------
// Building tensors in a chosen memory layout, and reading them back by hand.

enum class Layout {
  Contiguous,   // row-major, offset 0
  ColumnMajor,  // dims laid out in reverse order (a transposed tensor)
  Padded,       // row-major over padded sizes, innermost stride 2, offset 3
};
inline constexpr Layout kAllLayouts[] = {Layout::Contiguous, Layout::ColumnMajor, Layout::Padded};

inline const char* layout_name(Layout l) {
  switch (l) {
    case Layout::Contiguous:
      return "contiguous";
    case Layout::ColumnMajor:
      return "column-major";
    case Layout::Padded:
      return "padded";
  }
  return "?";
}

// A value that no test data takes, written in storage no element uses.
inline constexpr double kSentinel = 77777.0;

inline Tensor make_tensor(const Array& a, Layout layout = Layout::Contiguous) {
  const size_t n = a.shape.size();
  Sizes strides(n, 1);
  int64_t offset = 0;
  switch (layout) {
    case Layout::Contiguous:
      strides = row_major_strides(a.shape);
      break;
    case Layout::ColumnMajor: {
      int64_t acc = 1;
      for (size_t i = 0; i < n; ++i) {
        strides[i] = acc;
        acc *= std::max<int64_t>(a.shape[i], 1);
      }
      break;
    }
    case Layout::Padded: {
      int64_t acc = 2;
      for (size_t i = n; i-- > 0;) {
        strides[i] = acc;
        acc *= std::max<int64_t>(a.shape[i], 1) + 1;
      }
      offset = 3;
      break;
    }
  }
  int64_t extent = offset + 1;
  for (size_t i = 0; i < n; ++i) extent += (std::max<int64_t>(a.shape[i], 1) - 1) * strides[i];
  extent += 2;  // slack after the last element, also sentinel-filled
  auto storage = dtr::Storage::allocate(static_cast<size_t>(extent) * elem_size(a.dtype));
  for (int64_t p = 0; p < extent; ++p) store(storage->data(), a.dtype, p, kSentinel);
  const int64_t count = a.numel();
  for (int64_t i = 0; i < count; ++i) {
    Sizes idx = unravel(i, a.shape);
    int64_t pos = offset;
    for (size_t d = 0; d < n; ++d) pos += idx[d] * strides[d];
    store(storage->data(), a.dtype, pos, a.v[static_cast<size_t>(i)]);
  }
  dtr::TensorMeta meta{a.dtype, to_shape(a.shape), to_shape(strides), offset};
  return Tensor(storage, meta);
}

// The tensor's elements in row-major logical order, read from its storage through its
// metadata with hand-done index arithmetic.
inline Array read(const Tensor& t) {
  REQUIRE(t.defined());
  const dtr::TensorMeta& m = t.meta();
  Array a{m.dtype, to_sizes(m.shape), {}, {}};
  const int64_t count = a.numel();
  a.v.resize(static_cast<size_t>(count));
  if (count == 0) return a;
  int64_t last = m.offset;
  for (size_t d = 0; d < a.shape.size(); ++d) {
    REQUIRE(m.strides[d] >= 0);
    last += (a.shape[d] - 1) * m.strides[d];
  }
  REQUIRE(m.offset >= 0);
  REQUIRE(static_cast<size_t>(last + 1) * elem_size(m.dtype) <= t.storage()->nbytes());
  for (int64_t i = 0; i < count; ++i) {
    Sizes idx = unravel(i, a.shape);
    int64_t pos = m.offset;
    for (size_t d = 0; d < idx.size(); ++d) pos += idx[d] * m.strides[d];
    a.v[static_cast<size_t>(i)] = load(t.storage()->data(), m.dtype, pos);
  }
  return a;
}

inline Tensor tensor_of(DType t, Sizes shape, std::vector<double> values,
                        Layout layout = Layout::Contiguous) {
  return make_tensor(make_array(t, std::move(shape), std::move(values)), layout);
}

inline Tensor random_tensor(DType t, Sizes shape, uint64_t seed, Range r = {},
                            Layout layout = Layout::Contiguous) {
  return make_tensor(random_array(t, std::move(shape), seed, r), layout);
}

// ---------------------------------------------------------------------------------------
// Comparing a tensor with a reference.

struct Tol {
  double rtol = 0.0;
  double atol = 0.0;
  double scale_tol = 0.0;  // times Array::scale[i]
};

inline Tol default_tol(DType t) {
  if (t == kF32) return {1e-5, 1e-6, 0.0};
  if (t == kF64) return {1e-12, 1e-12, 0.0};
  return {0.0, 0.0, 0.0};
}
// Sums of many float terms: accumulation order differs from the reference's.
inline Tol sum_tol(DType t) {
  if (t == kF32) return {1e-4, 1e-5, 1e-5};
  if (t == kF64) return {1e-12, 1e-12, 1e-12};
  return {0.0, 0.0, 0.0};
}

inline bool close(double actual, double expected, double tol) {
  if (std::isnan(expected)) return std::isnan(actual);
  if (std::isinf(expected)) return actual == expected;
  return std::fabs(actual - expected) <= tol;
}

inline std::string fmt_value(double x) {
  std::ostringstream os;
  os.precision(10);
  os << x;
  return os.str();
}

// Checks dtype, shape and every element of `actual` against `expected`; on a mismatch,
// reports the first few differing elements with their multi-indices.
inline void check_tensor(const Tensor& actual, const Array& expected, std::optional<Tol> tol,
                         const std::string& what) {
  INFO(what);
  REQUIRE(actual.defined());
  CHECK(str(actual.dtype()) == str(expected.dtype));
  CHECK(str(to_sizes(actual.shape())) == str(expected.shape));
  if (actual.dtype() != expected.dtype || to_sizes(actual.shape()) != expected.shape) return;
  Tol t = tol ? *tol : default_tol(expected.dtype);
  Array got = read(actual);
  int64_t bad = 0;
  std::ostringstream msg;
  for (size_t i = 0; i < expected.v.size(); ++i) {
    double e = expected.v[i];
    double limit = t.atol + t.rtol * std::fabs(e);
    if (!expected.scale.empty()) limit += t.scale_tol * expected.scale[i];
    if (!close(got.v[i], e, limit)) {
      if (bad < 6)
        msg << "  at " << str(unravel(static_cast<int64_t>(i), expected.shape)) << ": got "
            << fmt_value(got.v[i]) << ", expected " << fmt_value(e) << "\n";
      ++bad;
    }
  }
  CHECK_MESSAGE(bad == 0, what << ": " << bad << " of " << expected.v.size() << " elements differ\n"
                               << msg.str());
}

inline void check_tensor(const Tensor& actual, const Array& expected, const std::string& what) {
  check_tensor(actual, expected, std::nullopt, what);
}

inline bool same_storage(const Tensor& a, const Tensor& b) {
  return a.storage() != nullptr && a.storage().get() == b.storage().get();
}

// The elements of `t`'s storage that its view does not reach must still hold kSentinel.
inline void check_untouched(const Tensor& t, const std::string& what) {
  if (t.dtype() == kBool) return;
  const dtr::TensorMeta& m = t.meta();
  const int64_t total = static_cast<int64_t>(t.storage()->nbytes() / elem_size(m.dtype));
  std::vector<bool> used(static_cast<size_t>(total), false);
  Sizes shape = to_sizes(m.shape);
  for (int64_t i = 0; i < numel(shape); ++i) {
    Sizes idx = unravel(i, shape);
    int64_t pos = m.offset;
    for (size_t d = 0; d < idx.size(); ++d) pos += idx[d] * m.strides[d];
    used[static_cast<size_t>(pos)] = true;
  }
  int64_t changed = 0;
  for (int64_t p = 0; p < total; ++p)
    if (!used[static_cast<size_t>(p)] && load(t.storage()->data(), m.dtype, p) != kSentinel)
      ++changed;
  CHECK_MESSAGE(changed == 0, what << ": " << changed << " storage elements outside the view "
                                   << "were written");
}

// ---------------------------------------------------------------------------------------
// Reference ops.

// Elementwise f(x) with x cast to `compute` first, the result stored as `out`.
inline Array ref_unary(const Array& a, DType compute, DType out,
                       const std::function<double(double)>& f) {
  Array r{out, a.shape, {}, {}};
  r.v.resize(a.v.size());
  for (size_t i = 0; i < a.v.size(); ++i) r.v[i] = cast_to(out, f(cast_to(compute, a.v[i])));
  return r;
}

// torch broadcasting, written out; nullopt when the shapes do not broadcast.
inline std::optional<Sizes> ref_broadcast(const Sizes& a, const Sizes& b) {
  size_t n = std::max(a.size(), b.size());
  Sizes out(n, 1);
  for (size_t i = 0; i < n; ++i) {
    int64_t sa = i < n - a.size() ? 1 : a[i - (n - a.size())];
    int64_t sb = i < n - b.size() ? 1 : b[i - (n - b.size())];
    if (sa != sb && sa != 1 && sb != 1) return std::nullopt;
    out[i] = sa == 1 ? sb : sa;
  }
  return out;
}

// Position in `in_shape` of output multi-index `idx` under broadcasting.
inline int64_t broadcast_source(const Sizes& idx, const Sizes& in_shape) {
  size_t lead = idx.size() - in_shape.size();
  int64_t linear = 0;
  for (size_t i = 0; i < in_shape.size(); ++i) {
    int64_t k = in_shape[i] == 1 ? 0 : idx[lead + i];
    linear = linear * in_shape[i] + k;
  }
  return linear;
}

// Elementwise f(a, b) with broadcasting; both operands cast to `compute` first.
inline Array ref_binary(const Array& a, const Array& b, DType compute, DType out,
                        const std::function<double(double, double)>& f) {
  std::optional<Sizes> shape = ref_broadcast(a.shape, b.shape);
  REQUIRE(shape.has_value());
  Array r{out, *shape, {}, {}};
  int64_t count = r.numel();
  r.v.resize(static_cast<size_t>(count));
  for (int64_t i = 0; i < count; ++i) {
    Sizes idx = unravel(i, r.shape);
    double x = cast_to(compute, a.v[static_cast<size_t>(broadcast_source(idx, a.shape))]);
    double y = cast_to(compute, b.v[static_cast<size_t>(broadcast_source(idx, b.shape))]);
    r.v[static_cast<size_t>(i)] = cast_to(out, f(x, y));
  }
  return r;
}

inline Array scalar_array(const Scalar& s) {
  return Array{s.is_floating() ? kF64 : kI64, {}, {scalar_value(s)}, {}};
}

// Values of one reduction group, in row-major order of the reduced dims, and their
// absolute values' sum (for the tolerance).
using Reducer = std::function<double(const std::vector<double>&)>;

// Reduces `dims` (non-negative, distinct; empty = all) of `a` with `f`.
inline Array ref_reduce(const Array& a, Sizes dims, bool keepdim, DType out, const Reducer& f,
                        const Reducer& scale = nullptr) {
  const size_t n = a.shape.size();
  if (dims.empty())
    for (size_t i = 0; i < n; ++i) dims.push_back(static_cast<int64_t>(i));
  std::vector<bool> reduced(n, false);
  for (int64_t d : dims) reduced[static_cast<size_t>(d)] = true;
  Sizes kept_shape, red_shape, out_shape;
  for (size_t i = 0; i < n; ++i) {
    if (reduced[i]) {
      red_shape.push_back(a.shape[i]);
      if (keepdim) out_shape.push_back(1);
    } else {
      kept_shape.push_back(a.shape[i]);
      out_shape.push_back(a.shape[i]);
    }
  }
  Array r{out, out_shape, {}, {}};
  const int64_t outer = numel(kept_shape), inner = numel(red_shape);
  r.v.resize(static_cast<size_t>(outer));
  if (scale) r.scale.resize(static_cast<size_t>(outer));
  std::vector<double> group(static_cast<size_t>(inner));
  for (int64_t o = 0; o < outer; ++o) {
    Sizes ko = unravel(o, kept_shape);
    for (int64_t k = 0; k < inner; ++k) {
      Sizes kr = unravel(k, red_shape);
      Sizes idx(n);
      size_t ik = 0, ir = 0;
      for (size_t i = 0; i < n; ++i) idx[i] = reduced[i] ? kr[ir++] : ko[ik++];
      group[static_cast<size_t>(k)] = a.at(idx);
    }
    r.v[static_cast<size_t>(o)] = cast_to(out, f(group));
    if (scale) r.scale[static_cast<size_t>(o)] = scale(group);
  }
  return r;
}

inline double abs_sum(const std::vector<double>& g) {
  double s = 0;
  for (double x : g) s += std::fabs(x);
  return s;
}

// torch.matmul: 1-D operands get a dim prepended (left) or appended (right), batch dims
// broadcast, and the added dims are dropped from the result. Computed in double.
inline Array ref_matmul(const Array& a, const Array& b, DType out) {
  Sizes as = a.shape, bs = b.shape;
  bool a1 = as.size() == 1, b1 = bs.size() == 1;
  if (a1) as.insert(as.begin(), 1);
  if (b1) bs.push_back(1);
  REQUIRE(as.size() >= 2);
  REQUIRE(bs.size() >= 2);
  const int64_t n = as[as.size() - 2], k = as.back(), m = bs.back();
  REQUIRE(bs[bs.size() - 2] == k);
  Sizes abatch(as.begin(), as.end() - 2), bbatch(bs.begin(), bs.end() - 2);
  std::optional<Sizes> batch = ref_broadcast(abatch, bbatch);
  REQUIRE(batch.has_value());
  Sizes full = *batch;
  full.push_back(n);
  full.push_back(m);
  Array r{out, full, {}, {}};
  r.v.assign(static_cast<size_t>(numel(full)), 0.0);
  r.scale.assign(r.v.size(), 0.0);
  const int64_t nb = numel(*batch);
  for (int64_t bi = 0; bi < nb; ++bi) {
    Sizes bidx = unravel(bi, *batch);
    int64_t ab = broadcast_source(bidx, abatch), bb = broadcast_source(bidx, bbatch);
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < m; ++j) {
        double acc = 0, mag = 0;
        for (int64_t p = 0; p < k; ++p) {
          double x = a.v[static_cast<size_t>((ab * n + i) * k + p)];
          double y = b.v[static_cast<size_t>((bb * k + p) * m + j)];
          acc += x * y;
          mag += std::fabs(x * y);
        }
        size_t o = static_cast<size_t>((bi * n + i) * m + j);
        r.v[o] = cast_to(out, acc);
        r.scale[o] = mag;
      }
  }
  Sizes result = *batch;
  if (!a1) result.push_back(n);
  if (!b1) result.push_back(m);
  r.shape = result;
  return r;
}

// ---------------------------------------------------------------------------------------
// Error checks: the exception's type and parts of its message.

inline void check_error_impl(const std::function<void()>& f, const char* expected_type_c,
                             const std::function<bool(const std::exception&)>& type_ok,
                             std::initializer_list<std::string_view> parts, const char* expr_c,
                             const char* file, int line) {
  const std::string expr = expr_c, expected_type = expected_type_c;
  try {
    f();
  } catch (const std::exception& e) {
    std::string msg = e.what();
    if (!type_ok(e)) {
      ADD_FAIL_CHECK_AT(
          file, line, expr << " threw the wrong type (expected " << expected_type << "): " << msg);
      return;
    }
    for (std::string_view p : parts) {
      if (msg.find(p) == std::string::npos)
        ADD_FAIL_CHECK_AT(file, line,
                          expr << ": message \"" << msg << "\" lacks \"" << std::string(p) << "\"");
    }
    return;
  }
  ADD_FAIL_CHECK_AT(file, line, expr << " did not throw (expected " << expected_type << ")");
}

// DTR_CHECK_ERROR(dtr::ShapeError, a.add(b), "add", "[2, 3]", "[4]")
#define DTR_CHECK_ERROR(Type, expr, ...)                                                  \
  ::dtr_test::check_error_impl(                                                           \
      [&] { (void)(expr); }, #Type,                                                       \
      [](const std::exception& e_) { return dynamic_cast<const Type*>(&e_) != nullptr; }, \
      {__VA_ARGS__}, #expr, __FILE__, __LINE__)

}  // namespace dtr_test
