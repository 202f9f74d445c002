// View ops (view, reshape, transpose, permute, narrow, slice, select, expand, squeeze,
// unsqueeze) and contiguous(): values against the reference, storage sharing (a write
// through the view changes the base) and when a copy is made.
#include <doctest/doctest.h>

#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "tensor/reference.hpp"

using namespace dtr_test;

namespace {

constexpr int64_t kEnd = std::numeric_limits<int64_t>::max();

// out[idx] = base[map(idx)] for every idx of out_shape.
Array gather(const Array& base, const Sizes& out_shape,
             const std::function<Sizes(const Sizes&)>& map) {
  Array r{base.dtype, out_shape, {}, {}};
  for (int64_t i = 0; i < numel(out_shape); ++i) r.v.push_back(base.at(map(unravel(i, out_shape))));
  return r;
}

// The same values with another shape (row-major order kept).
Array reshaped(Array a, const Sizes& shape) {
  a.shape = shape;
  return a;
}

// Writes `value` into every element of view `v` and checks that exactly the elements
// `touched(base index)` of `base` changed.
void check_writes_through(Tensor& base, Tensor v, const Array& before,
                          const std::function<bool(const Sizes&)>& touched,
                          const std::string& what) {
  REQUIRE(same_storage(base, v));
  const double value = 1234.0;
  v.fill_(value);
  Array e = before;
  for (int64_t i = 0; i < before.numel(); ++i)
    if (touched(unravel(i, before.shape))) e.v[static_cast<size_t>(i)] = value;
  check_tensor(base, e, what + ": write through the view");
}

}  // namespace

TEST_CASE("view: new shapes of a contiguous tensor, -1 inferred, storage shared") {
  for (Layout layout : {Layout::Contiguous}) {
    Array a = random_array(kF32, {2, 3, 4}, 300001);
    Tensor x = make_tensor(a, layout);
    for (const Sizes& s : std::vector<Sizes>{{6, 4}, {24}, {4, 6}, {1, 24, 1}, {2, 12}}) {
      Tensor v = x.view(to_shape(s));
      check_tensor(v, reshaped(a, s), "view " + str(s));
      CHECK(same_storage(v, x));
    }
    check_tensor(x.view({-1}), reshaped(a, {24}), "view [-1]");
    check_tensor(x.view({4, -1, 2}), reshaped(a, {4, 3, 2}), "view [4, -1, 2]");
    check_tensor(x.view({-1, 4}), reshaped(a, {6, 4}), "view [-1, 4]");
    Tensor v = x.view({6, 4});
    check_writes_through(
        x, v.select(0, 5), a, [](const Sizes& i) { return i[0] == 1 && i[1] == 2; }, "view row 5");
  }
  Tensor one = tensor_of(kI64, {1, 1}, {42});
  check_tensor(one.view({}), make_array(kI64, {}, {42}), "view [1, 1] as 0-d");
  check_tensor(one.view({}).view({1}), make_array(kI64, {1}, {42}), "view 0-d as [1]");
  check_tensor(tensor_of(kF32, {3, 0}, {}).view({0, 5}), filled(kF32, {0, 5}, 0), "view of empty");
  // A transposed tensor can still be viewed where only a dim is split.
  Array b = random_array(kF64, {3, 4}, 300002);
  Tensor y = make_tensor(b);
  Tensor yt = y.t();  // [4, 3], strides [1, 4]
  Tensor split = yt.view({2, 2, 3});
  check_tensor(split,
               gather(b, {2, 2, 3},
                      [](const Sizes& i) {
                        return Sizes{i[2], i[0] * 2 + i[1]};
                      }),
               "t().view({2, 2, 3})");
  CHECK(same_storage(split, y));
}

TEST_CASE("reshape: a view when the strides allow, otherwise a copy") {
  Array a = random_array(kI32, {3, 4}, 300101);
  Tensor x = make_tensor(a);
  Tensor r = x.reshape({2, -1});
  check_tensor(r, reshaped(a, {2, 6}), "reshape contiguous");
  CHECK_MESSAGE(same_storage(r, x), "reshape of a contiguous tensor must be a view");
  Tensor f = x.flatten();
  check_tensor(f, reshaped(a, {12}), "flatten");
  CHECK(same_storage(f, x));

  // Transposed: flattening needs a copy.
  Tensor xt = x.t();
  Array at = gather(a, {4, 3}, [](const Sizes& i) { return Sizes{i[1], i[0]}; });
  Tensor c = xt.reshape({12});
  check_tensor(c, reshaped(at, {12}), "reshape of a transpose");
  CHECK_MESSAGE(!same_storage(c, x), "reshape that cannot be a view must copy");
  CHECK(c.is_contiguous());
  c.fill_(7);
  check_tensor(x, a, "writing the copy leaves the base alone");

  // Transposed but viewable (only splits a dim): no copy.
  Tensor s = xt.reshape({2, 2, 3});
  check_tensor(s, reshaped(at, {2, 2, 3}), "reshape t() splitting dim 0");
  CHECK_MESSAGE(same_storage(s, x), "reshape that can be a view must not copy");

  // Stepped slice: a copy, values from the right elements.
  Array b = random_array(kF32, {4, 6}, 300102);
  Tensor y = make_tensor(b, Layout::Padded);
  Tensor sl = y.slice(1, 0, kEnd, 2);  // [4, 3]
  Array bs = gather(b, {4, 3}, [](const Sizes& i) { return Sizes{i[0], i[1] * 2}; });
  check_tensor(sl.reshape({-1}), reshaped(bs, {12}), "reshape of a stepped slice");
  check_tensor(sl.reshape({3, 4}), reshaped(bs, {3, 4}), "reshape of a stepped slice to [3, 4]");
  // Padded layout (non-contiguous rows): only splitting a dim is a view.
  Tensor yy = y.reshape({2, 2, 6});
  check_tensor(yy, reshaped(b, {2, 2, 6}), "reshape padded [4, 6] to [2, 2, 6]");
  CHECK(same_storage(yy, y));
  check_tensor(tensor_of(kF32, {0, 3}, {}).reshape({3, 0, 1}), filled(kF32, {3, 0, 1}, 0),
               "reshape of an empty tensor");
}

TEST_CASE("flatten: dims start_dim..end_dim merged, a view where the strides allow") {
  Array a = random_array(kF32, {2, 3, 4, 5}, 300103);
  Tensor x = make_tensor(a);
  Tensor f = x.flatten(1);
  check_tensor(f, reshaped(a, {2, 60}), "flatten(1)");
  CHECK(same_storage(f, x));
  check_tensor(x.flatten(1, 2), reshaped(a, {2, 12, 5}), "flatten(1, 2)");
  check_tensor(x.flatten(-2, -1), reshaped(a, {2, 3, 20}), "flatten(-2, -1)");
  check_tensor(x.flatten(2, 2), a, "flatten of one dim");
  // A padded layout: merging dims whose strides do not line up copies.
  Tensor p = make_tensor(a, Layout::Padded);
  Tensor pf = p.flatten(1);
  check_tensor(pf, reshaped(a, {2, 60}), "flatten of a padded tensor");
  CHECK_FALSE(same_storage(pf, p));
  Tensor zero_d = tensor_of(kI64, {}, {7});
  CHECK(zero_d.flatten().shape() == dtr::Shape{1});
  DTR_CHECK_ERROR(dtr::IndexError, x.flatten(2, 1), "flatten", "start_dim 2", "end_dim 1");
  DTR_CHECK_ERROR(dtr::IndexError, x.flatten(4), "flatten", "dim 4");
}

TEST_CASE("transpose and permute") {
  Array a = random_array(kF64, {2, 3, 4}, 300201);
  Tensor x = make_tensor(a, Layout::Padded);
  struct T {
    int64_t d0, d1;
    Sizes shape;
    std::function<Sizes(const Sizes&)> map;
  };
  std::vector<T> cases = {
      {0,
       1,
       {3, 2, 4},
       [](const Sizes& i) {
         return Sizes{i[1], i[0], i[2]};
       }},
      {0,
       2,
       {4, 3, 2},
       [](const Sizes& i) {
         return Sizes{i[2], i[1], i[0]};
       }},
      {-1,
       -2,
       {2, 4, 3},
       [](const Sizes& i) {
         return Sizes{i[0], i[2], i[1]};
       }},
      {1, 1, {2, 3, 4}, [](const Sizes& i) { return i; }},
      {2,
       -3,
       {4, 3, 2},
       [](const Sizes& i) {
         return Sizes{i[2], i[1], i[0]};
       }},
  };
  for (const T& c : cases) {
    std::string what = "transpose(" + std::to_string(c.d0) + ", " + std::to_string(c.d1) + ")";
    Tensor t = x.transpose(c.d0, c.d1);
    check_tensor(t, gather(a, c.shape, c.map), what);
    CHECK(same_storage(t, x));
  }
  Tensor m = random_tensor(kF32, {3, 5}, 300202);
  CHECK_FALSE(m.t().is_contiguous());
  CHECK(m.t().t().is_contiguous());

  struct P {
    Sizes dims, shape;
    std::function<Sizes(const Sizes&)> map;
  };
  std::vector<P> perms = {
      {{2, 0, 1},
       {4, 2, 3},
       [](const Sizes& i) {
         return Sizes{i[1], i[2], i[0]};
       }},
      {{1, 2, 0},
       {3, 4, 2},
       [](const Sizes& i) {
         return Sizes{i[2], i[0], i[1]};
       }},
      {{0, 1, 2}, {2, 3, 4}, [](const Sizes& i) { return i; }},
      {{-1, 0, -2},
       {4, 2, 3},
       [](const Sizes& i) {
         return Sizes{i[1], i[2], i[0]};
       }},
  };
  for (const P& p : perms) {
    Tensor t = x.permute(to_shape(p.dims));
    check_tensor(t, gather(a, p.shape, p.map), "permute " + str(p.dims));
    CHECK(same_storage(t, x));
  }
  Array four = random_array(kI64, {2, 1, 3, 2}, 300203);
  check_tensor(make_tensor(four).permute({3, 1, 0, 2}),
               gather(four, {2, 1, 2, 3},
                      [](const Sizes& i) {
                        return Sizes{i[2], i[1], i[3], i[0]};
                      }),
               "permute 4-d");
  check_writes_through(
      x, x.transpose(0, 2).select(0, 3), a, [](const Sizes& i) { return i[2] == 3; },
      "transpose(0, 2)[3]");
}

TEST_CASE("diagonal: offsets, dims, layouts; a view sharing storage") {
  Array a = random_array(kF32, {3, 4, 5}, 300300);
  Tensor x = make_tensor(a, Layout::ColumnMajor);
  check_tensor(x.diagonal(),
               gather(a, {5, 3},
                      [](const Sizes& i) {
                        return Sizes{i[1], i[1], i[0]};
                      }),
               "diagonal()");
  check_tensor(x.diagonal(2, 1, 2),
               gather(a, {3, 3},
                      [](const Sizes& i) {
                        return Sizes{i[0], i[1], i[1] + 2};
                      }),
               "diagonal(2, 1, 2)");
  check_tensor(x.diagonal(-1, -1, 0),
               gather(a, {4, 3},
                      [](const Sizes& i) {
                        return Sizes{i[1], i[0], i[1] + 1};
                      }),
               "diagonal(-1, -1, 0)");
  CHECK(x.diagonal(9).shape() == dtr::Shape{5, 0});
  CHECK(x.diagonal(std::numeric_limits<int64_t>::min()).shape() == dtr::Shape{5, 0});
  Tensor m = local::zeros({3, 3});
  m.diagonal().fill_(1);
  CHECK(m.sum().item<float>() == 3.0f);
  DTR_CHECK_ERROR(dtr::InvalidArgument, x.diagonal(0, 1, -2), "diagonal", "differ");
  DTR_CHECK_ERROR(dtr::ShapeError, local::zeros({3}).diagonal(), "diagonal", "2 dims");
}

TEST_CASE("narrow") {
  Array a = random_array(kF32, {5, 6}, 300301);
  Tensor x = make_tensor(a, Layout::ColumnMajor);
  check_tensor(x.narrow(0, 1, 3),
               gather(a, {3, 6},
                      [](const Sizes& i) {
                        return Sizes{i[0] + 1, i[1]};
                      }),
               "narrow(0, 1, 3)");
  check_tensor(x.narrow(1, 2, 4),
               gather(a, {5, 4},
                      [](const Sizes& i) {
                        return Sizes{i[0], i[1] + 2};
                      }),
               "narrow(1, 2, 4)");
  check_tensor(x.narrow(-1, 0, 1),
               gather(a, {5, 1},
                      [](const Sizes& i) {
                        return Sizes{i[0], 0};
                      }),
               "narrow(-1, 0, 1)");
  check_tensor(x.narrow(0, 5, 0), filled(kF32, {0, 6}, 0), "narrow(0, 5, 0)");
  check_tensor(x.narrow(0, -2, 2),
               gather(a, {2, 6},
                      [](const Sizes& i) {
                        return Sizes{i[0] + 3, i[1]};
                      }),
               "narrow(0, -2, 2): negative start counts from the end");
  Tensor n = x.narrow(1, 1, 2).narrow(0, 2, 2);
  CHECK(same_storage(n, x));
  check_writes_through(
      x, n, a, [](const Sizes& i) { return i[0] >= 2 && i[0] < 4 && i[1] >= 1 && i[1] < 3; },
      "narrow of narrow");
}

TEST_CASE("slice: steps, negative and out-of-range bounds") {
  Array a = random_array(kI64, {10}, 300401);
  Tensor x = make_tensor(a);
  struct S {
    int64_t start, end, step;
    std::vector<int64_t> picks;
  };
  std::vector<S> cases = {
      {0, kEnd, 1, {0, 1, 2, 3, 4, 5, 6, 7, 8, 9}},
      {1, 10, 3, {1, 4, 7}},
      {-3, kEnd, 1, {7, 8, 9}},
      {-100, 100, 2, {0, 2, 4, 6, 8}},
      {5, 2, 1, {}},
      {2, -2, 2, {2, 4, 6}},
      {8, 100, 1, {8, 9}},
      {11, 20, 1, {}},
      {-1, kEnd, 5, {9}},
      {0, -11, 1, {}},
      {3, 4, 10, {3}},
  };
  for (const S& c : cases) {
    std::string what = "slice(0, " + std::to_string(c.start) + ", " +
                       (c.end == kEnd ? std::string("end") : std::to_string(c.end)) + ", " +
                       std::to_string(c.step) + ")";
    Array e{kI64, {static_cast<int64_t>(c.picks.size())}, {}, {}};
    for (int64_t p : c.picks) e.v.push_back(a.v[static_cast<size_t>(p)]);
    Tensor s = x.slice(0, c.start, c.end, c.step);
    check_tensor(s, e, what);
    CHECK_MESSAGE(same_storage(s, x), what);
  }
  Array b = random_array(kF32, {4, 7}, 300402);
  Tensor y = make_tensor(b, Layout::Padded);
  Tensor s = y.slice(-1, 1, -1, 2).slice(0, 1);  // rows 1..3, cols 1, 3, 5
  check_tensor(s,
               gather(b, {3, 3},
                      [](const Sizes& i) {
                        return Sizes{i[0] + 1, 1 + 2 * i[1]};
                      }),
               "slice(-1, 1, -1, 2).slice(0, 1)");
  check_writes_through(
      y, s, b, [](const Sizes& i) { return i[0] >= 1 && i[1] % 2 == 1 && i[1] < 6; },
      "2-d stepped slice");
}

TEST_CASE("select and operator index") {
  Array a = random_array(kF64, {3, 4, 5}, 300501);
  Tensor x = make_tensor(a, Layout::ColumnMajor);
  check_tensor(x.select(0, 1),
               gather(a, {4, 5},
                      [](const Sizes& i) {
                        return Sizes{1, i[0], i[1]};
                      }),
               "select(0, 1)");
  check_tensor(x.select(1, -1),
               gather(a, {3, 5},
                      [](const Sizes& i) {
                        return Sizes{i[0], 3, i[1]};
                      }),
               "select(1, -1)");
  check_tensor(x.select(-1, -5),
               gather(a, {3, 4},
                      [](const Sizes& i) {
                        return Sizes{i[0], i[1], 0};
                      }),
               "select(-1, -5)");
  check_tensor(x[2],
               gather(a, {4, 5},
                      [](const Sizes& i) {
                        return Sizes{2, i[0], i[1]};
                      }),
               "x[2]");
  check_tensor(x[2][3][4], make_array(kF64, {}, {a.at({2, 3, 4})}), "x[2][3][4] is 0-d");
  CHECK(x[2][3][4].item().to_double() == a.at({2, 3, 4}));
  CHECK(x[-1][-1][-1].item<double>() == a.at({2, 3, 4}));
  check_writes_through(
      x, x.select(2, 2), a, [](const Sizes& i) { return i[2] == 2; }, "select(2, 2)");
}

TEST_CASE("expand") {
  Array a = random_array(kF32, {3, 1}, 300601);
  Tensor x = make_tensor(a);
  Tensor e = x.expand({3, 4});
  check_tensor(e,
               gather(a, {3, 4},
                      [](const Sizes& i) {
                        return Sizes{i[0], 0};
                      }),
               "expand [3, 4]");
  CHECK(same_storage(e, x));
  CHECK(e.strides()[1] == 0);
  check_tensor(x.expand({2, 3, 5}),
               gather(a, {2, 3, 5},
                      [](const Sizes& i) {
                        return Sizes{i[1], 0};
                      }),
               "expand adding a leading dim");
  check_tensor(x.expand({-1, 2}),
               gather(a, {3, 2},
                      [](const Sizes& i) {
                        return Sizes{i[0], 0};
                      }),
               "expand with -1");
  check_tensor(x.expand({3, 0}), filled(kF32, {3, 0}, 0), "expand size 1 to 0");
  Array s = make_array(kI32, {}, {9});
  check_tensor(make_tensor(s).expand({2, 2}), filled(kI32, {2, 2}, 9), "expand 0-d");
  Array v = random_array(kI64, {4}, 300602);
  check_tensor(make_tensor(v, Layout::Padded).expand({3, 4}),
               gather(v, {3, 4}, [](const Sizes& i) { return Sizes{i[1]}; }),
               "expand [4] to [3, 4]");
  // A write through an expanded view reaches the one underlying element.
  Tensor base = tensor_of(kF32, {3, 1}, {1, 2, 3});
  base.expand({3, 4}).select(1, 2).fill_(5.0);
  check_tensor(base, filled(kF32, {3, 1}, 5), "write through expand");
}

TEST_CASE("squeeze and unsqueeze") {
  Array a = random_array(kF32, {1, 3, 1, 4, 1}, 300701);
  Tensor x = make_tensor(a);
  check_tensor(x.squeeze(), reshaped(a, {3, 4}), "squeeze()");
  check_tensor(x.squeeze(0), reshaped(a, {3, 1, 4, 1}), "squeeze(0)");
  check_tensor(x.squeeze(2), reshaped(a, {1, 3, 4, 1}), "squeeze(2)");
  check_tensor(x.squeeze(-1), reshaped(a, {1, 3, 1, 4}), "squeeze(-1)");
  check_tensor(x.squeeze(1), reshaped(a, {1, 3, 1, 4, 1}), "squeeze(1) of a size-3 dim: no-op");
  CHECK(same_storage(x.squeeze(), x));
  check_tensor(tensor_of(kF64, {1, 1}, {2}).squeeze(), make_array(kF64, {}, {2}), "squeeze to 0-d");
  check_tensor(tensor_of(kF64, {}, {2}).squeeze(), make_array(kF64, {}, {2}), "squeeze of 0-d");
  check_tensor(tensor_of(kF64, {0, 1}, {}).squeeze(), filled(kF64, {0}, 0), "squeeze keeps 0 dims");

  Array b = random_array(kI32, {2, 3}, 300702);
  Tensor y = make_tensor(b, Layout::ColumnMajor);
  const std::vector<std::pair<int64_t, Sizes>> cases = {{0, {1, 2, 3}},  {1, {2, 1, 3}},
                                                        {2, {2, 3, 1}},  {-1, {2, 3, 1}},
                                                        {-3, {1, 2, 3}}, {-2, {2, 1, 3}}};
  for (const auto& [d, shape] : cases) {
    Tensor u = y.unsqueeze(d);
    check_tensor(u, reshaped(b, shape), "unsqueeze(" + std::to_string(d) + ")");
    CHECK(same_storage(u, y));
  }
  check_tensor(tensor_of(kF32, {}, {3}).unsqueeze(0), make_array(kF32, {1}, {3}), "unsqueeze 0-d");
  Tensor u = y.unsqueeze(1).squeeze(1);
  check_writes_through(
      y, u.select(1, 2), b, [](const Sizes& i) { return i[1] == 2; },
      "unsqueeze/squeeze then select");
}

TEST_CASE("contiguous copies only when needed") {
  Array a = random_array(kF32, {3, 4}, 300801);
  Tensor x = make_tensor(a);
  Tensor c = x.contiguous();
  CHECK_MESSAGE(same_storage(c, x), "contiguous() of a contiguous tensor must not copy");
  check_tensor(c, a, "contiguous of contiguous");
  for (Layout layout : {Layout::ColumnMajor, Layout::Padded}) {
    Tensor y = make_tensor(a, layout);
    Tensor yc = y.contiguous();
    CHECK(!same_storage(yc, y));
    CHECK(yc.is_contiguous());
    CHECK(str(to_sizes(yc.strides())) == "[4, 1]");
    check_tensor(yc, a, std::string("contiguous of ") + layout_name(layout));
    yc.fill_(0.0);
    check_tensor(y, a, "the copy is independent");
  }
  Tensor t = x.t().contiguous();
  check_tensor(t,
               gather(a, {4, 3},
                      [](const Sizes& i) {
                        return Sizes{i[1], i[0]};
                      }),
               "t().contiguous()");
  Tensor e = tensor_of(kI64, {2, 1}, {5, 6}).expand({2, 3}).contiguous();
  check_tensor(e, make_array(kI64, {2, 3}, {5, 5, 5, 6, 6, 6}), "expand().contiguous()");
  CHECK(e.is_contiguous());
  // Size-1 dims with odd strides and narrow-at-offset views are contiguous already.
  Tensor row = x.narrow(0, 1, 1);
  CHECK(row.is_contiguous());
  CHECK(same_storage(row.contiguous(), x));
  check_tensor(row.contiguous(),
               gather(a, {1, 4},
                      [](const Sizes& i) {
                        return Sizes{1, i[1]};
                      }),
               "contiguous of a row at an offset");
}

TEST_CASE("chains of views compose") {
  Array a = random_array(kF64, {4, 5, 6}, 300901);
  Tensor x = make_tensor(a, Layout::Padded);
  Tensor v = x.permute({2, 0, 1}).slice(0, 1, kEnd, 2).narrow(2, 1, 3).select(1, -1).unsqueeze(0);
  // v[0, k, j] = x[3, 1 + j, 1 + 2k], shape [1, 3, 3]
  Array e = gather(a, {1, 3, 3}, [](const Sizes& i) { return Sizes{3, 1 + i[2], 1 + 2 * i[1]}; });
  check_tensor(v, e, "permute.slice.narrow.select.unsqueeze");
  check_tensor(v.reshape({9}), reshaped(e, {9}), "reshape of the chain");
  check_writes_through(
      x, v, a, [](const Sizes& i) { return i[0] == 3 && i[1] >= 1 && i[1] < 4 && i[2] % 2 == 1; },
      "write through the chain");
}

TEST_CASE("split, split_with_sizes and chunk: views of consecutive pieces") {
  Tensor x = tensor_of(kF32, {2, 5}, {0, 1, 2, 3, 4, 5, 6, 7, 8, 9});
  std::vector<Tensor> p = x.split(2, 1);
  REQUIRE(p.size() == 3);
  CHECK(p[0].shape() == dtr::Shape{2, 2});
  CHECK(p[2].shape() == dtr::Shape{2, 1});
  CHECK(p[1].to_vector<float>() == std::vector<float>{2, 3, 7, 8});
  CHECK(p[2].storage() == x.storage());  // a view
  p = x.split_with_sizes({1, 4}, -1);
  REQUIRE(p.size() == 2);
  CHECK(p[1].to_vector<float>() == std::vector<float>{1, 2, 3, 4, 6, 7, 8, 9});
  // torch's chunk: ceil(5 / 4) = 2 per piece, so 3 pieces, not 4.
  CHECK(x.chunk(4, 1).size() == 3);
  CHECK(x.chunk(2, 0).size() == 2);
  CHECK(x.chunk(5, 1)[4].to_vector<float>() == std::vector<float>{4, 9});
  CHECK(tensor_of(kF32, {0}, {}).split(3).size() == 1);
  DTR_CHECK_ERROR(dtr::InvalidArgument, x.split(0, 1), "split", "positive", "0");
  DTR_CHECK_ERROR(dtr::InvalidArgument, x.split_with_sizes({2, 2}, 1), "split_with_sizes",
                  "add up to 4", "not to 5", "[2, 2]");
  DTR_CHECK_ERROR(dtr::InvalidArgument, x.split_with_sizes({6, -1}, 1), "split_with_sizes",
                  "[6, -1]");
  DTR_CHECK_ERROR(dtr::InvalidArgument, x.chunk(0), "chunk", "positive");
  CHECK(x.chunk(std::numeric_limits<int64_t>::max(), 1).size() == 5);  // no overflow
}

TEST_CASE("repeat: tiles along each dim, leading dims added, one copy") {
  Tensor x = tensor_of(kI64, {2, 3}, {1, 2, 3, 4, 5, 6});
  Tensor r = x.repeat({2, 1});
  CHECK(r.shape() == dtr::Shape{4, 3});
  CHECK(r.to_vector<int64_t>() == std::vector<int64_t>{1, 2, 3, 4, 5, 6, 1, 2, 3, 4, 5, 6});
  r = x.repeat({1, 2});
  CHECK(r.to_vector<int64_t>() == std::vector<int64_t>{1, 2, 3, 1, 2, 3, 4, 5, 6, 4, 5, 6});
  r = x.transpose(0, 1).repeat({2, 1, 2});  // non-contiguous, a new leading dim
  CHECK(r.shape() == dtr::Shape{2, 3, 4});
  CHECK(r.select(0, 1).select(0, 2).to_vector<int64_t>() == std::vector<int64_t>{3, 6, 3, 6});
  CHECK(x.repeat({0, 2}).shape() == dtr::Shape{0, 6});
  CHECK(tensor_of(kF32, {1}, {7}).repeat({3}).to_vector<float>() == std::vector<float>{7, 7, 7});
  r = x.repeat({1, 1});
  r.fill_(0);  // a copy, never a view of x
  CHECK(x.to_vector<int64_t>() == std::vector<int64_t>{1, 2, 3, 4, 5, 6});
  DTR_CHECK_ERROR(dtr::InvalidArgument, x.repeat({2}), "repeat", "1 repeats", "2 dims");
  DTR_CHECK_ERROR(dtr::InvalidArgument, x.repeat({2, -1}), "repeat", "[2, -1]");
  DTR_CHECK_ERROR(dtr::InvalidArgument, x.repeat({1, std::numeric_limits<int64_t>::max() / 2}),
                  "repeat", "past int64");
  DTR_CHECK_ERROR(dtr::InvalidArgument,
                  tensor_of(kF32, {2, 2, 2, 2, 2, 2, 2}, std::vector<double>(128, 1.0))
                      .repeat({2, 2, 2, 2, 2, 2, 2}),
                  "repeat", "14 dims");
}

TEST_CASE("clone copies always; repeat") {
  Tensor x = tensor_of(kF32, {2, 2}, {1, 2, 3, 4});
  Tensor c = x.apply(dtr::OpId::clone, {}, nullptr);
  CHECK(c.storage() != x.storage());
  CHECK(c.meta().is_contiguous());
  CHECK(c.to_vector<float>() == x.to_vector<float>());
  Tensor t = x.transpose(0, 1).apply(dtr::OpId::clone, {}, nullptr);
  CHECK(t.meta().is_contiguous());
  CHECK(t.to_vector<float>() == std::vector<float>{1, 3, 2, 4});
  // repeat through a stride-0 expand alone (no dim split) still gives packed new storage.
  Tensor one = tensor_of(kF32, {1, 2}, {5, 6});
  Tensor r = one.repeat({3, 1});
  CHECK(r.meta().is_contiguous());
  CHECK(r.storage() != one.storage());
  CHECK(r.to_vector<float>() == std::vector<float>{5, 6, 5, 6, 5, 6});
}
