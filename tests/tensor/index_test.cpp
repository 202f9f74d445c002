// The Join and Indexing ops against the reference: cat and stack (lists of inputs, dtype
// promotion, skipped empty tensors, the input limit), where and masked_fill (broadcasting),
// index_select, gather, scatter_add, one_hot (checked indices), cumsum, topk (ties,
// NaN), tril and triu, over non-contiguous inputs, with errors that name the op and the shapes.
#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <numeric>
#include <string>
#include <vector>

#include "tensor/reference.hpp"

using namespace dtr_test;
namespace local = dtr::local;
using dtr::OpAttrs;
using dtr::OpId;

namespace {

// Reference cat along `dim` of arrays of one rank (no skipped inputs), in dtype `out`.
Array ref_cat(const std::vector<Array>& parts, int64_t dim, DType out) {
  Sizes shape = parts[0].shape;
  shape[static_cast<size_t>(dim)] = 0;
  for (const Array& p : parts) shape[static_cast<size_t>(dim)] += p.shape[static_cast<size_t>(dim)];
  Array r{out, shape, std::vector<double>(static_cast<size_t>(numel(shape))), {}};
  for (int64_t i = 0; i < r.numel(); ++i) {
    Sizes idx = unravel(i, shape);
    int64_t at = idx[static_cast<size_t>(dim)];
    for (const Array& p : parts) {
      const int64_t n = p.shape[static_cast<size_t>(dim)];
      if (at < n) {
        idx[static_cast<size_t>(dim)] = at;
        r.v[static_cast<size_t>(i)] = cast_to(out, p.at(idx));
        break;
      }
      at -= n;
    }
  }
  return r;
}

OpAttrs ints(dtr::Dims v) {
  OpAttrs a;
  a.ints = v;
  return a;
}

}  // namespace

TEST_CASE("cat: dims, promotion, layouts, skipped empty tensors and many inputs") {
  Array a = random_array(kF32, {2, 3}, 1), b = random_array(kF32, {4, 3}, 2);
  Array c = random_array(kI32, {2, 5}, 3);
  for (Layout la : kAllLayouts) {
    Tensor ta = make_tensor(a, la), tb = make_tensor(b, Layout::Padded);
    check_tensor(dtr::cat(std::vector<Tensor>{ta, tb}), ref_cat({a, b}, 0, kF32),
                 std::string("cat dim 0 ") + layout_name(la));
    check_tensor(dtr::cat(std::vector<Tensor>{ta, make_tensor(c, la)}, -1),
                 ref_cat({a, c}, 1, kF32), std::string("cat dim -1, promoted ") + layout_name(la));
  }
  // Three inputs, one of them a 1-D empty tensor (skipped, as torch does).
  Tensor empty = local::empty({0}, kI64);
  Tensor r = dtr::cat(std::vector<Tensor>{make_tensor(a), empty, make_tensor(b)}, 0);
  check_tensor(r, ref_cat({a, b}, 0, kF32), "cat skipping a [0] tensor");
  CHECK(dtr::cat(std::vector<Tensor>{empty, empty}).shape() == dtr::Shape{0});

  // The most inputs one op takes, and one more.
  std::vector<Tensor> many;
  std::vector<Array> parts;
  for (int i = 0; i < dtr::kMaxOpInputs; ++i) {
    parts.push_back(random_array(kF64, {1, 2}, 100 + static_cast<uint64_t>(i)));
    many.push_back(make_tensor(parts.back()));
  }
  check_tensor(dtr::cat(many), ref_cat(parts, 0, kF64), "cat of kMaxOpInputs tensors");
  many.push_back(many[0]);
  DTR_CHECK_ERROR(dtr::InvalidArgument, dtr::cat(many), "cat", "at most 64");

  DTR_CHECK_ERROR(dtr::ShapeError, dtr::cat(std::vector<Tensor>{make_tensor(a), make_tensor(c)}),
                  "cat", "tensor 1 has shape [2, 5]", "[2, 3]");
  DTR_CHECK_ERROR(dtr::IndexError, dtr::cat(std::vector<Tensor>{make_tensor(a)}, 2), "cat",
                  "dim 2");
  DTR_CHECK_ERROR(dtr::InvalidArgument, dtr::cat(std::vector<Tensor>{}), "cat", "got 0");
}

TEST_CASE("stack: a new dim anywhere") {
  std::vector<Array> parts = {random_array(kF32, {2, 3}, 4), random_array(kF32, {2, 3}, 5),
                              random_array(kI64, {2, 3}, 6)};
  std::vector<Tensor> ts;
  for (const Array& p : parts) ts.push_back(make_tensor(p, Layout::ColumnMajor));
  for (int64_t dim : {0, 1, 2, -1}) {
    const int64_t d = dim < 0 ? dim + 3 : dim;
    // stack == cat of the unsqueezed parts.
    std::vector<Array> unsq;
    for (Array p : parts) {
      p.shape.insert(p.shape.begin() + d, 1);
      unsq.push_back(p);
    }
    check_tensor(dtr::stack(ts, dim), ref_cat(unsq, d, kF32), "stack dim " + std::to_string(dim));
  }
  DTR_CHECK_ERROR(dtr::ShapeError, dtr::stack(std::vector<Tensor>{ts[0], local::zeros({3, 2})}),
                  "stack", "[2, 3]", "[3, 2]");
}

TEST_CASE("where and masked_fill broadcast, promote and check the mask") {
  Array cond = random_array(kBool, {3, 1}, 7), a = random_array(kF32, {1, 4}, 8);
  Array b = random_array(kI64, {3, 4}, 9);
  Array want{kF32, {3, 4}, std::vector<double>(12), {}};
  for (int64_t i = 0; i < 12; ++i) {
    Sizes idx = unravel(i, {3, 4});
    want.v[static_cast<size_t>(i)] = cond.at({idx[0], 0}) ? a.at({0, idx[1]}) : b.at(idx);
  }
  for (Layout l : kAllLayouts)
    check_tensor(dtr::where(make_tensor(cond, l), make_tensor(a, l), make_tensor(b, l)), want,
                 std::string("where ") + layout_name(l));
  DTR_CHECK_ERROR(dtr::DTypeError, dtr::where(make_tensor(a), make_tensor(a), make_tensor(b)),
                  "where", "condition", "float32");

  Array x = random_array(kF64, {3, 4}, 10), mask = random_array(kBool, {4}, 11);
  Array filled = x;
  for (int64_t i = 0; i < 12; ++i)
    if (mask.v[static_cast<size_t>(i % 4)]) filled.v[static_cast<size_t>(i)] = -1.5;
  for (Layout l : kAllLayouts)
    check_tensor(make_tensor(x, l).masked_fill(make_tensor(mask, l), -1.5), filled,
                 std::string("masked_fill ") + layout_name(l));
  DTR_CHECK_ERROR(dtr::ShapeError,
                  make_tensor(mask).masked_fill(make_tensor(random_array(kBool, {3, 4}, 12)), 0),
                  "masked_fill", "[3, 4]", "[4]");
  DTR_CHECK_ERROR(dtr::DTypeError, make_tensor(x).masked_fill(make_tensor(x), 0), "masked_fill",
                  "mask", "float64");
}

TEST_CASE("index_select, gather and scatter_add against the reference") {
  Array x = random_array(kF32, {3, 4}, 13);
  for (Layout l : kAllLayouts) {
    Tensor tx = make_tensor(x, l);
    check_tensor(tx.index_select(0, tensor_of(kI64, {3}, {2, 0, 2})),
                 make_array(kF32, {3, 4},
                            [&] {
                              std::vector<double> v;
                              for (int64_t r : {2, 0, 2})
                                for (int64_t j = 0; j < 4; ++j) v.push_back(x.at({r, j}));
                              return v;
                            }()),
                 "index_select dim 0");
    Tensor cols = tx.index_select(-1, tensor_of(kI32, {2}, {3, 1}));
    CHECK(cols.to_vector<float>() ==
          std::vector<float>{static_cast<float>(x.at({0, 3})), static_cast<float>(x.at({0, 1})),
                             static_cast<float>(x.at({1, 3})), static_cast<float>(x.at({1, 1})),
                             static_cast<float>(x.at({2, 3})), static_cast<float>(x.at({2, 1}))});
    // gather along dim 1 with a smaller index, and along dim 0.
    Tensor idx = tensor_of(kI64, {2, 3}, {3, 0, 0, 1, 2, 3}, l);
    Tensor g1 = tx.gather(1, idx), g0 = tx.gather(0, tensor_of(kI64, {2, 3}, {2, 0, 1, 1, 2, 0}));
    CHECK(g1.to_vector<float>() ==
          std::vector<float>{static_cast<float>(x.at({0, 3})), static_cast<float>(x.at({0, 0})),
                             static_cast<float>(x.at({0, 0})), static_cast<float>(x.at({1, 1})),
                             static_cast<float>(x.at({1, 2})), static_cast<float>(x.at({1, 3}))});
    CHECK(g0.to_vector<float>() ==
          std::vector<float>{static_cast<float>(x.at({2, 0})), static_cast<float>(x.at({0, 1})),
                             static_cast<float>(x.at({1, 2})), static_cast<float>(x.at({1, 0})),
                             static_cast<float>(x.at({2, 1})), static_cast<float>(x.at({0, 2}))});
  }
  // scatter_add: duplicates accumulate, src may be larger than index.
  Tensor base = local::ones({3, 2}, kF64);
  Tensor src = tensor_of(kF64, {3, 2}, {1, 2, 3, 4, 5, 6}, Layout::Padded);
  Tensor sidx = tensor_of(kI64, {2, 2}, {2, 0, 2, 2});
  CHECK(base.scatter_add(0, sidx, src).to_vector<double>() ==
        std::vector<double>{1, 3, 1, 1, 5, 5});
  CHECK(base.scatter_add(1, tensor_of(kI64, {3, 1}, {1, 0, 1}), src).to_vector<double>() ==
        std::vector<double>{1, 2, 4, 1, 1, 6});
  CHECK(base.to_vector<double>() == std::vector<double>(6, 1.0));  // not in place

  Tensor tx = make_tensor(x);
  DTR_CHECK_ERROR(dtr::IndexError, tx.index_select(0, tensor_of(kI64, {2}, {1, 3})), "index_select",
                  "index 3", "size 3");
  DTR_CHECK_ERROR(dtr::IndexError, tx.gather(1, tensor_of(kI64, {1, 1}, {-1})), "gather",
                  "index -1", "size 4");
  DTR_CHECK_ERROR(dtr::ShapeError, tx.gather(1, tensor_of(kI64, {4, 1}, {0, 0, 0, 0})), "gather",
                  "[4, 1]", "[3, 4]");
  DTR_CHECK_ERROR(dtr::DTypeError, tx.gather(1, tensor_of(kI32, {1, 1}, {0})), "gather", "int64",
                  "int32");
  DTR_CHECK_ERROR(dtr::IndexError, base.scatter_add(0, tensor_of(kI64, {1, 1}, {3}), src),
                  "scatter_add", "index 3");
  DTR_CHECK_ERROR(dtr::DTypeError, base.scatter_add(0, sidx, src.to(kF32)), "scatter_add", "src",
                  "float32");
}

TEST_CASE("cumsum along each dim; integers and bools count in int64") {
  Array x = random_array(kF64, {2, 3, 4}, 14);
  for (int64_t dim = 0; dim < 3; ++dim) {
    Array want = x;
    for (int64_t i = 0; i < x.numel(); ++i) {
      Sizes idx = unravel(i, x.shape);
      double acc = 0;
      Sizes j = idx;
      for (int64_t k = 0; k <= idx[static_cast<size_t>(dim)]; ++k) {
        j[static_cast<size_t>(dim)] = k;
        acc += x.at(j);
      }
      want.v[static_cast<size_t>(i)] = acc;
    }
    check_tensor(make_tensor(x, Layout::ColumnMajor).cumsum(dim), want, sum_tol(kF64),
                 "cumsum dim " + std::to_string(dim));
  }
  CHECK(tensor_of(kBool, {4}, {1, 0, 1, 1}).cumsum(0).to_vector<int64_t>() ==
        std::vector<int64_t>{1, 1, 2, 3});
  Tensor ci = tensor_of(kI32, {2, 2}, {1, 2, 3, 4}).cumsum(0);
  CHECK(ci.dtype() == kI64);
  CHECK(ci.to_vector<int64_t>() == std::vector<int64_t>{1, 2, 4, 6});
  Tensor h = tensor_of(kF16, {3}, {1, 2, 3}).cumsum(0);
  CHECK(h.dtype() == kF16);
  CHECK(h.to_vector<double>() == std::vector<double>{1, 3, 6});
}

TEST_CASE("tril and triu: every diagonal, batches, layouts, dtypes") {
  Array x = random_array(kF64, {2, 3, 4}, 15);
  for (int64_t k :
       std::vector<int64_t>{-4, -3, -1, 0, 1, 2, 3, 5, std::numeric_limits<int64_t>::max(),
                            std::numeric_limits<int64_t>::min()}) {
    for (bool lower : {true, false}) {
      Array want = x;
      for (int64_t i = 0; i < x.numel(); ++i) {
        const Sizes idx = unravel(i, x.shape);
        const int64_t offset = idx[2] - idx[1];  // column - row
        if (!(lower ? offset <= k : offset >= k)) want.v[static_cast<size_t>(i)] = 0;
      }
      const std::string what = std::string(lower ? "tril" : "triu") + " " + std::to_string(k);
      for (Layout layout : kAllLayouts) {
        Tensor t = make_tensor(x, layout);
        check_tensor(lower ? t.tril(k) : t.triu(k), want, what + " " + layout_name(layout));
      }
    }
  }
  // Data is moved in its own dtype: bool and 16-bit floats too; zero-size matrices.
  Tensor b = tensor_of(kBool, {2, 2}, {1, 1, 1, 1});
  CHECK(b.tril().to_vector<bool>() == std::vector<bool>{true, false, true, true});
  Tensor h = tensor_of(kF16, {2, 2}, {1, 2, 3, 4}).triu();
  CHECK(h.dtype() == kF16);
  CHECK(h.to_vector<double>() == std::vector<double>{1, 2, 0, 4});
  CHECK(tensor_of(kI64, {0, 3}, {}).tril().shape() == dtr::Shape{0, 3});
  DTR_CHECK_ERROR(dtr::ShapeError, tensor_of(kF32, {3}, {1, 2, 3}).tril(), "tril", "2 dims", "[3]");
}

TEST_CASE("flip and constant_pad_nd: against index arithmetic, layouts, dtypes, errors") {
  Array x = random_array(kF64, {2, 3, 4}, 16);
  Array flipped = x, padded = make_array(kF64, {2, 4, 5}, std::vector<double>(40, -7));
  for (int64_t i = 0; i < x.numel(); ++i) {
    const Sizes idx = unravel(i, x.shape);
    flipped.v[static_cast<size_t>(((1 - idx[0]) * 3 + idx[1]) * 4 + 3 - idx[2])] =
        x.v[static_cast<size_t>(i)];
    // pad {1, 0, 2, -1}: last dim 1 before, 0 after; dim 1 two before, one cropped after.
    if (idx[1] < 2)
      padded.v[static_cast<size_t>((idx[0] * 4 + idx[1] + 2) * 5 + idx[2] + 1)] =
          x.v[static_cast<size_t>(i)];
  }
  for (Layout layout : kAllLayouts) {
    Tensor t = make_tensor(x, layout);
    check_tensor(t.flip({0, -1}), flipped, std::string("flip ") + layout_name(layout));
    check_tensor(t.constant_pad_nd({1, 0, 2, -1}, -7), padded,
                 std::string("pad ") + layout_name(layout));
  }
  Tensor h = tensor_of(kF16, {3}, {1, 2, 3});
  CHECK(h.flip({0}).to_vector<double>() == std::vector<double>{3, 2, 1});
  CHECK(h.constant_pad_nd({1, 1}, 0.5).to_vector<double>() ==
        std::vector<double>{0.5, 1, 2, 3, 0.5});
  Tensor b = tensor_of(kBool, {2}, {1, 0});
  CHECK(b.constant_pad_nd({0, 1}, 1).to_vector<bool>() == std::vector<bool>{true, false, true});
  CHECK(tensor_of(kI64, {0, 3}, {}).flip({1}).shape() == dtr::Shape{0, 3});
  CHECK(tensor_of(kI64, {2}, {1, 2}).constant_pad_nd({-1, -1}).shape() == dtr::Shape{0});
  DTR_CHECK_ERROR(dtr::InvalidArgument, h.flip({0, -1}), "flip", "twice");
  DTR_CHECK_ERROR(dtr::InvalidArgument, h.constant_pad_nd({1, 1, 1, 1}), "constant_pad_nd",
                  "even length");
  DTR_CHECK_ERROR(dtr::ShapeError, h.constant_pad_nd({-2, -2}), "constant_pad_nd", "negative");
}

TEST_CASE("sort and argsort: stable, NaN last (first descending), -0 equal to +0, dims") {
  const double nan = std::nan("");
  Tensor x = tensor_of(kF32, {2, 5}, {3, 1, nan, -0.0, 1, 0, 2, -1, 2, 0}, Layout::ColumnMajor);
  CHECK(x.argsort(1).to_vector<int64_t>() == std::vector<int64_t>{3, 1, 4, 0, 2, 2, 0, 4, 1, 3});
  CHECK(x.argsort(1, true).to_vector<int64_t>() ==
        std::vector<int64_t>{2, 0, 1, 4, 3, 1, 3, 0, 4, 2});
  auto [v, i] = x.sort(0);
  CHECK(i.to_vector<int64_t>() == std::vector<int64_t>{1, 0, 1, 0, 1, 0, 1, 0, 1, 0});
  CHECK(v.to_vector<float>()[0] == 0.0f);
  Tensor ints = tensor_of(kI64, {4}, {5, -3, 5, 0});
  CHECK(ints.argsort(0, true).to_vector<int64_t>() == std::vector<int64_t>{0, 2, 3, 1});
  CHECK(tensor_of(kBool, {3}, {1, 0, 1}).argsort().to_vector<int64_t>() ==
        std::vector<int64_t>{1, 0, 2});
  CHECK(tensor_of(kF16, {3}, {2, -1, 0.5}).sort().first.to_vector<double>() ==
        std::vector<double>{-1, 0.5, 2});
  CHECK(local::full({}, 4.0).argsort().to_vector<int64_t>() == std::vector<int64_t>{0});
}

TEST_CASE("scatter: writes src or a value at the index, errors") {
  Tensor x = local::zeros({2, 4});
  Tensor idx = tensor_of(kI64, {2, 2}, {3, 0, 1, 2});
  Tensor src = tensor_of(kF32, {2, 3}, {1, 2, 3, 4, 5, 6});
  CHECK(x.scatter(1, idx, src).to_vector<float>() == std::vector<float>{2, 0, 0, 1, 0, 4, 5, 0});
  CHECK(x.scatter(0, tensor_of(kI64, {1, 2}, {1, 0}), 7.0).to_vector<float>() ==
        std::vector<float>{0, 7, 0, 0, 7, 0, 0, 0});
  DTR_CHECK_ERROR(dtr::IndexError, x.scatter(1, tensor_of(kI64, {1, 1}, {4}), src), "scatter", "4");
  DTR_CHECK_ERROR(dtr::DTypeError, x.scatter(1, idx, src.to(kF64)), "scatter");
}

TEST_CASE("scatter_reduce: every reduction, with and without self, dtypes, errors") {
  Tensor x = tensor_of(kF32, {2, 3}, {1, 2, 3, 4, 5, 6});
  Tensor idx = tensor_of(kI64, {2, 3}, {0, 0, 2, 1, 1, 1});
  Tensor src = tensor_of(kF32, {2, 3}, {10, -2, 7, 3, 0.5, 8});
  const auto row = [](const Tensor& t) { return t.to_vector<float>(); };
  // Row 0 gets 10 and -2 at 0 and 7 at 2; row 1 gets 3, 0.5, 8 at 1.
  CHECK(row(x.scatter_reduce(1, idx, src, "sum")) == std::vector<float>{9, 2, 10, 4, 16.5, 6});
  CHECK(row(x.scatter_reduce(1, idx, src, "sum", false)) ==
        std::vector<float>{8, 2, 7, 4, 11.5, 6});
  CHECK(row(x.scatter_reduce(1, idx, src, "prod")) == std::vector<float>{-20, 2, 21, 4, 60, 6});
  CHECK(row(x.scatter_reduce(1, idx, src, "mean")) == std::vector<float>{3, 2, 5, 4, 4.125, 6});
  CHECK(row(x.scatter_reduce(1, idx, src, "mean", false)) ==
        std::vector<float>{4, 2, 7, 4, 11.5f / 3, 6});
  CHECK(row(x.scatter_reduce(1, idx, src, "amax")) == std::vector<float>{10, 2, 7, 4, 8, 6});
  CHECK(row(x.scatter_reduce(1, idx, src, "amin", false)) ==
        std::vector<float>{-2, 2, 7, 4, 0.5, 6});
  // Integers: mean rounds down (floor), sums wrap.
  Tensor xi = tensor_of(kI64, {3}, {0, -7, 5});
  Tensor ii = tensor_of(kI64, {2}, {1, 1});
  CHECK(xi.scatter_reduce(0, ii, tensor_of(kI64, {2}, {1, 2}), "mean").to_vector<int64_t>() ==
        std::vector<int64_t>{0, -2, 5});
  CHECK(xi.to(kI32)
            .scatter_reduce(0, ii, tensor_of(kI32, {2}, {9, 1}), "amax")
            .to_vector<int32_t>() == std::vector<int32_t>{0, 9, 5});
  // NaN wins amax; half precision through float.
  Tensor n = tensor_of(kF64, {1}, {std::nan("")});
  CHECK(std::isnan(local::zeros({1}, kF64)
                       .scatter_reduce(0, tensor_of(kI64, {1}, {0}), n, "amax")
                       .item<double>()));
  CHECK(tensor_of(kF16, {2}, {1, 2})
            .scatter_reduce(0, ii.narrow(0, 0, 1), tensor_of(kF16, {1}, {3}), "prod")
            .to_vector<double>() == std::vector<double>{1, 6});
  DTR_CHECK_ERROR(dtr::IndexError, x.scatter_reduce(1, tensor_of(kI64, {1, 1}, {3}), src, "sum"),
                  "scatter_reduce", "3");
  DTR_CHECK_ERROR(dtr::InvalidArgument, x.scatter_reduce(1, idx, src, "max"), "scatter_reduce",
                  "'amax'");
  DTR_CHECK_ERROR(dtr::DTypeError, x.scatter_reduce(1, idx, src.to(kF64), "sum"), "scatter_reduce");
  DTR_CHECK_ERROR(dtr::DTypeError, x.gt(0).scatter_reduce(1, idx, x.gt(1), "sum"), "bool");
}

TEST_CASE("index and index_put: torch's layouts, negative indices, accumulate, errors") {
  Tensor x = local::arange(0, 24).view({2, 3, 4});
  Tensor i = tensor_of(kI64, {2}, {2, -1}), j = tensor_of(kI64, {2, 1}, {0, 1});
  // One index on dim 1: B in its place.
  Tensor a = x.index({Tensor(), i});
  CHECK(a.shape() == dtr::Shape{2, 2, 4});
  CHECK(a.contiguous().to_vector<int64_t>() ==
        std::vector<int64_t>{8, 9, 10, 11, 8, 9, 10, 11, 20, 21, 22, 23, 20, 21, 22, 23});
  // Dims 0 and 2 (not adjacent): B = (2, 2) first.
  Tensor b = x.index({j, Tensor(), i});
  CHECK(b.shape() == dtr::Shape{2, 2, 3});
  CHECK(b.contiguous().to_vector<int64_t>() ==
        std::vector<int64_t>{2, 6, 10, 3, 7, 11, 14, 18, 22, 15, 19, 23});
  Tensor put = x.index_put({Tensor(), i}, local::full({}, int64_t{-1}, kI64));
  CHECK(put.select(1, 2).to_vector<int64_t>() == std::vector<int64_t>(8, -1));
  CHECK(put.select(1, 0).sum().item<int64_t>() == x.select(1, 0).sum().item<int64_t>());
  Tensor acc = local::zeros({3}).index_put({tensor_of(kI64, {3}, {1, 1, 2})},
                                           tensor_of(kF32, {3}, {1, 2, 3}), true);
  CHECK(acc.to_vector<float>() == std::vector<float>{0, 3, 3});
  DTR_CHECK_ERROR(dtr::IndexError, x.index({tensor_of(kI64, {1}, {2})}).contiguous(), "index", "2");
  DTR_CHECK_ERROR(dtr::IndexError, x.index({x.gt(3)}), "index", "mask");
}

TEST_CASE("one_hot: rows of num_classes, checked values") {
  Tensor x = tensor_of(kI64, {2, 2}, {0, 2, 1, 2});
  Tensor r = x.one_hot(3);
  CHECK(r.shape() == dtr::Shape{2, 2, 3});
  CHECK(r.dtype() == kI64);
  CHECK(r.to_vector<int64_t>() == std::vector<int64_t>{1, 0, 0, 0, 0, 1, 0, 1, 0, 0, 0, 1});
  DTR_CHECK_ERROR(dtr::IndexError, x.one_hot(2), "one_hot", "class 2", "num_classes 2");
  DTR_CHECK_ERROR(dtr::InvalidArgument, x.one_hot(-1), "one_hot", "num_classes must be given");
  DTR_CHECK_ERROR(dtr::DTypeError, x.to(kF32).one_hot(3), "one_hot", "int64", "float32");
}

TEST_CASE("topk: values and positions, largest and smallest, ties and NaN") {
  const double nan = std::nan("");
  Tensor x = tensor_of(kF32, {2, 5}, {3, 1, 3, nan, 2, 0, -1, 5, 5, 4}, Layout::ColumnMajor);
  auto [v, i] = x.topk(3);
  CHECK(i.to_vector<int64_t>() == std::vector<int64_t>{3, 0, 2, 2, 3, 4});
  std::vector<float> vals = v.to_vector<float>();
  CHECK(std::isnan(vals[0]));
  CHECK(std::vector<float>(vals.begin() + 1, vals.end()) == std::vector<float>{3, 3, 5, 5, 4});
  CHECK(x.topk_indices(2, 1, false).to_vector<int64_t>() == std::vector<int64_t>{1, 4, 1, 0});
  // The op `topk` gives the values the pair gathers.
  OpAttrs a = ints({2, 0, 1, 1});
  Tensor by_op = local::execute(OpId::topk, std::span<const Tensor>(&x, 1), a, false);
  check_tensor(by_op, read(x.topk(2, 0).first), "the op topk against topk().first");
  CHECK(x.topk(2, 0).second.to_vector<int64_t>() ==
        std::vector<int64_t>{0, 0, 1, 0, 1, 1, 1, 0, 1, 0});
  CHECK(x.topk(0).first.shape() == dtr::Shape{2, 0});
  Tensor ints_x = tensor_of(kI64, {4}, {7, -2, 7, 9});
  CHECK(ints_x.topk(3).first.to_vector<int64_t>() == std::vector<int64_t>{9, 7, 7});
  DTR_CHECK_ERROR(dtr::IndexError, x.topk(6), "topk_indices", "k 6", "size 5");
}
