// matmul, dot and mv against the reference: 1-D, 2-D and batched operands with batch
// broadcasting, every dtype, transposed and padded layouts, and k = 0.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "tensor/reference.hpp"

using namespace dtr_test;

namespace {

Tol linalg_tol(DType t) {
  if (t == kF32) return {1e-5, 1e-6, 1e-5};
  if (t == kF64) return {1e-12, 1e-12, 1e-12};
  return {};
}

Range linalg_range(DType t) {
  return is_float(t) ? Range{-1, 1} : Range{-9, 9};
}

// The transpose of a 2-d array.
Array gather_t(const Array& a) {
  Array r{a.dtype, {a.shape[1], a.shape[0]}, {}, {}};
  for (int64_t i = 0; i < a.shape[1]; ++i)
    for (int64_t j = 0; j < a.shape[0]; ++j) r.v.push_back(a.at({j, i}));
  return r;
}

struct MatmulCase {
  Sizes a, b;
};

}  // namespace

TEST_CASE("matmul: 1-D, 2-D and batched with broadcasting, every dtype and layout") {
  const std::vector<MatmulCase> cases = {
      {{5}, {5}},                 // dot: 0-d result
      {{3, 4}, {4}},              // matrix-vector
      {{4}, {4, 3}},              // vector-matrix
      {{3, 4}, {4, 2}},           // matrix-matrix
      {{1, 1}, {1, 1}},           //
      {{2, 3, 4}, {2, 4, 5}},     // batched
      {{2, 1, 3, 4}, {5, 4, 2}},  // batch broadcasting on both sides
      {{4}, {2, 4, 3}},           // 1-D with batched
      {{2, 3, 4}, {4}},           // batched with 1-D
      {{3, 4}, {2, 4, 5}},        // 2-D broadcast against a batch
      {{2, 3, 4}, {4, 5}},        // batch against 2-D
      {{1, 3, 4}, {2, 4, 2}},     // size-1 batch
      {{33, 65}, {65, 17}},       // larger than any small-block path
  };
  uint64_t seed = 200000;
  for (DType dt : {kF32, kF64, kI32, kI64}) {
    for (const MatmulCase& c : cases) {
      for (size_t li = 0; li < 3; ++li) {
        Layout la = kAllLayouts[li], lb = kAllLayouts[(li + 1) % 3];
        Array a = random_array(dt, c.a, ++seed, linalg_range(dt));
        Array b = random_array(dt, c.b, ++seed, linalg_range(dt));
        std::string what = "matmul " + str(dt) + str(c.a) + " " + layout_name(la) + " @ " +
                           str(c.b) + " " + layout_name(lb);
        Tensor x = make_tensor(a, la), y = make_tensor(b, lb);
        check_tensor(x.matmul(y), ref_matmul(a, b, dt), linalg_tol(dt), what);
        check_tensor(x, a, what + " (lhs unchanged)");
        check_tensor(y, b, what + " (rhs unchanged)");
      }
    }
  }
}

TEST_CASE("matmul of views: transposes, slices and expanded operands") {
  Array a = random_array(kF64, {6, 8}, 210001), b = random_array(kF64, {6, 5}, 210002);
  Tensor x = make_tensor(a), y = make_tensor(b);
  // x.t() @ y: [8, 6] @ [6, 5]
  Array at{kF64, {8, 6}, {}, {}};
  for (int64_t i = 0; i < 8; ++i)
    for (int64_t j = 0; j < 6; ++j) at.v.push_back(a.v[static_cast<size_t>(j * 8 + i)]);
  check_tensor(x.t().matmul(y), ref_matmul(at, b, kF64), linalg_tol(kF64), "x.t() @ y");
  // stepped slice of columns: x[:, ::2] is [6, 4]
  Array xs{kF64, {6, 4}, {}, {}};
  for (int64_t i = 0; i < 6; ++i)
    for (int64_t j = 0; j < 8; j += 2) xs.v.push_back(a.v[static_cast<size_t>(i * 8 + j)]);
  Array w = random_array(kF64, {4, 3}, 210003);
  check_tensor(x.slice(1, 0, 8, 2).matmul(make_tensor(w)), ref_matmul(xs, w, kF64),
               linalg_tol(kF64), "x[:, ::2] @ w");
  // an expanded (stride 0) batch
  Array v = random_array(kF64, {1, 5, 3}, 210004);
  Tensor ve = make_tensor(v).expand({4, 5, 3});
  Array vfull{kF64, {4, 5, 3}, {}, {}};
  for (int r = 0; r < 4; ++r) vfull.v.insert(vfull.v.end(), v.v.begin(), v.v.end());
  check_tensor(y.matmul(ve), ref_matmul(b, vfull, kF64), linalg_tol(kF64), "y @ expanded batch");
  // Expanded matrix dims (a zero row or column stride).
  Array col = random_array(kF64, {3, 1}, 210005), row = random_array(kF64, {1, 4}, 210006);
  Array colfull =
      ref_binary(col, filled(kF64, {3, 4}, 0), kF64, kF64, [](double p, double) { return p; });
  Array rowfull =
      ref_binary(row, filled(kF64, {3, 4}, 0), kF64, kF64, [](double p, double) { return p; });
  Array w2 = random_array(kF64, {4, 2}, 210007);
  check_tensor(make_tensor(col).expand({3, 4}).matmul(make_tensor(w2)),
               ref_matmul(colfull, w2, kF64), linalg_tol(kF64), "column expanded @ w");
  check_tensor(make_tensor(row).expand({3, 4}).matmul(make_tensor(w2)),
               ref_matmul(rowfull, w2, kF64), linalg_tol(kF64), "row expanded @ w");
  check_tensor(make_tensor(w2).t().matmul(make_tensor(row).expand({3, 4}).t()),
               ref_matmul(gather_t(w2), gather_t(rowfull), kF64), linalg_tol(kF64),
               "w.t() @ expanded.t()");
  // Permuted batch dims: the batch stride is smaller than the matrix strides.
  Array p3 = random_array(kF32, {3, 2, 4}, 210008);
  Array p3perm{kF32, {2, 3, 4}, {}, {}};
  for (int64_t bi = 0; bi < 2; ++bi)
    for (int64_t i = 0; i < 3; ++i)
      for (int64_t j = 0; j < 4; ++j) p3perm.v.push_back(p3.at({i, bi, j}));
  Array q = random_array(kF32, {2, 4, 5}, 210009);
  check_tensor(make_tensor(p3).permute({1, 0, 2}).matmul(make_tensor(q, Layout::ColumnMajor)),
               ref_matmul(p3perm, q, kF32), linalg_tol(kF32),
               "permuted batch @ column-major batch");
}

TEST_CASE("matmul with k = 0 gives zeros, and other zero-size shapes") {
  for (DType dt : {kF32, kF64, kI32, kI64}) {
    CAPTURE(str(dt));
    check_tensor(tensor_of(dt, {3, 0}, {}).matmul(tensor_of(dt, {0, 4}, {})), filled(dt, {3, 4}, 0),
                 "[3, 0] @ [0, 4]");
    check_tensor(tensor_of(dt, {0, 3}, {}).matmul(random_tensor(dt, {3, 2}, 220001)),
                 filled(dt, {0, 2}, 0), "[0, 3] @ [3, 2]");
    check_tensor(tensor_of(dt, {2, 0, 3}, {}).matmul(random_tensor(dt, {2, 3, 4}, 220002)),
                 filled(dt, {2, 0, 4}, 0), "[2, 0, 3] @ [2, 3, 4]");
    check_tensor(tensor_of(dt, {0}, {}).matmul(tensor_of(dt, {0}, {})), filled(dt, {}, 0),
                 "[0] @ [0]");
    check_tensor(tensor_of(dt, {0}, {}).dot(tensor_of(dt, {0}, {})), filled(dt, {}, 0),
                 "dot of [0]");
    check_tensor(tensor_of(dt, {4, 0}, {}).mv(tensor_of(dt, {0}, {})), filled(dt, {4}, 0),
                 "mv [4, 0] by [0]");
    check_tensor(tensor_of(dt, {2, 3, 0}, {}, Layout::Padded)
                     .matmul(tensor_of(dt, {0, 5}, {}, Layout::ColumnMajor)),
                 filled(dt, {2, 3, 5}, 0), "[2, 3, 0] @ [0, 5]");
  }
}

TEST_CASE("dot and mv") {
  uint64_t seed = 230000;
  for (DType dt : {kF32, kF64, kI32, kI64}) {
    for (int64_t n : {1, 7, 100}) {
      for (Layout layout : kAllLayouts) {
        Array a = random_array(dt, {n}, ++seed, linalg_range(dt));
        Array b = random_array(dt, {n}, ++seed, linalg_range(dt));
        std::string what = "dot " + str(dt) + " n=" + std::to_string(n) + " " + layout_name(layout);
        check_tensor(make_tensor(a, layout).dot(make_tensor(b, Layout::Padded)),
                     ref_matmul(a, b, dt), linalg_tol(dt), what);
      }
    }
    for (const Sizes& ms : std::vector<Sizes>{{3, 5}, {1, 1}, {17, 9}}) {
      for (Layout layout : kAllLayouts) {
        Array m = random_array(dt, ms, ++seed, linalg_range(dt));
        Array v = random_array(dt, {ms[1]}, ++seed, linalg_range(dt));
        std::string what = "mv " + str(dt) + str(ms) + " " + layout_name(layout);
        check_tensor(make_tensor(m, layout).mv(make_tensor(v, Layout::Padded)),
                     ref_matmul(m, v, dt), linalg_tol(dt), what);
      }
    }
  }
  check_tensor(tensor_of(kI64, {3}, {1, 2, 3}).dot(tensor_of(kI64, {3}, {4, -5, 6})),
               make_array(kI64, {}, {12}), "dot([1, 2, 3], [4, -5, 6])");
  check_tensor(tensor_of(kF32, {2, 2}, {1, 2, 3, 4}).mv(tensor_of(kF32, {2}, {1, -1})),
               make_array(kF32, {2}, {-1, -1}), "mv small");
}
