// Creation ops (empty, zeros, ones, full, fill_, arange, linspace) and the random ops
// (rand, randn, uniform_, normal_): values, dtypes, reproducibility from (seed, offset),
// and random fills of non-contiguous views.
#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "tensor/reference.hpp"

using namespace dtr_test;
namespace local = dtr::local;

TEST_CASE("empty: shape, dtype, contiguous strides, own storage") {
  for (DType dt : kAllDTypes) {
    for (const Sizes& shape : std::vector<Sizes>{{}, {0}, {3, 0}, {2, 3, 4}, {7}}) {
      std::string what = "empty " + str(dt) + str(shape);
      Tensor t = local::empty(to_shape(shape), dt);
      CHECK_MESSAGE(str(t.dtype()) == str(dt), what);
      CHECK_MESSAGE(str(to_sizes(t.shape())) == str(shape), what);
      CHECK_MESSAGE(str(to_sizes(t.strides())) == str(row_major_strides(shape)), what);
      CHECK_MESSAGE(t.meta().offset == 0, what);
      CHECK_MESSAGE(t.numel() == numel(shape), what);
      CHECK_MESSAGE(t.is_contiguous(), what);
      CHECK_MESSAGE(t.defined(), what);
      CHECK_MESSAGE(t.storage()->nbytes() >= static_cast<size_t>(numel(shape)) * elem_size(dt),
                    what);
    }
  }
  CHECK(str(local::empty({2}).dtype()) == "float32");
  Tensor a = local::empty({4}), b = local::empty({4});
  CHECK(!same_storage(a, b));
}

TEST_CASE("zeros, ones and full for every dtype") {
  for (DType dt : kAllDTypes) {
    for (const Sizes& shape : std::vector<Sizes>{{}, {5}, {2, 3}, {0, 2}}) {
      std::string what = str(dt) + str(shape);
      check_tensor(local::zeros(to_shape(shape), dt), filled(dt, shape, 0), "zeros " + what);
      check_tensor(local::ones(to_shape(shape), dt), filled(dt, shape, 1), "ones " + what);
    }
  }
  check_tensor(local::zeros({2, 2}), filled(kF32, {2, 2}, 0), "zeros default dtype");
  check_tensor(local::ones({3}), filled(kF32, {3}, 1), "ones default dtype");
  check_tensor(local::full({2, 3}, 7), filled(kF32, {2, 3}, 7), "full int value, float32");
  check_tensor(local::full({2}, 0.25, kF64), filled(kF64, {2}, 0.25), "full float64");
  check_tensor(local::full({3, 1}, -3, kI64), filled(kI64, {3, 1}, -3), "full int64");
  check_tensor(local::full({4}, -7, kI32), filled(kI32, {4}, -7), "full int32");
  check_tensor(local::full({2}, true, kBool), filled(kBool, {2}, 1), "full bool");
  check_tensor(local::full({}, 1.5), make_array(kF32, {}, {1.5}), "full 0-d");
  check_tensor(local::full({0}, 1.5), filled(kF32, {0}, 0), "full empty");
  check_tensor(local::full({2}, NAN, kF64), filled(kF64, {2}, NAN), "full NaN");
}

TEST_CASE("fill_ and zero_ on every dtype and layout, including views") {
  uint64_t seed = 400000;
  const std::vector<Scalar> values = {Scalar(3), Scalar(-2.75), Scalar(true), Scalar(0)};
  for (DType dt : kAllDTypes) {
    for (const Scalar& s : values) {
      for (Layout layout : kAllLayouts) {
        Array a = random_array(dt, {3, 4}, ++seed);
        Tensor x = make_tensor(a, layout);
        std::string what =
            "fill_(" + s.to_string() + ") on " + str(dt) + "[3, 4] " + layout_name(layout);
        auto storage = x.storage();
        x.fill_(s);
        CHECK_MESSAGE(x.storage() == storage, what);
        check_tensor(x, filled(dt, {3, 4}, cast_to(dt, scalar_value(s))), what);
        check_untouched(x, what);
      }
    }
  }
  Array a = random_array(kF64, {4, 5}, 400100);
  Tensor x = make_tensor(a);
  x.t().slice(0, 1, 5, 2).fill_(9.5);  // columns 1 and 3
  Array e = a;
  for (int64_t i = 0; i < 4; ++i)
    for (int64_t j : {1, 3}) e.v[static_cast<size_t>(i * 5 + j)] = 9.5;
  check_tensor(x, e, "fill_ through t().slice(step 2)");
  x.zero_();
  check_tensor(x, filled(kF64, {4, 5}, 0), "zero_");
  Tensor i = tensor_of(kI32, {2}, {1, 2});
  i.fill_(2.7);
  check_tensor(i, filled(kI32, {2}, 2), "fill_ 2.7 into int32 truncates");
  Tensor empty = tensor_of(kF32, {0, 3}, {});
  empty.fill_(1.0);
  CHECK(empty.numel() == 0);
}

TEST_CASE("arange: values, dtype inference, negative and fractional steps") {
  check_tensor(local::arange(5), make_array(kI64, {5}, {0, 1, 2, 3, 4}), "arange(5)");
  check_tensor(local::arange(5.0), make_array(kF32, {5}, {0, 1, 2, 3, 4}), "arange(5.0)");
  check_tensor(local::arange(2, 6), make_array(kI64, {4}, {2, 3, 4, 5}), "arange(2, 6)");
  check_tensor(local::arange(0, 1, 0.25), make_array(kF32, {4}, {0, 0.25, 0.5, 0.75}),
               "arange(0, 1, 0.25)");
  check_tensor(local::arange(10, 0, -3), make_array(kI64, {4}, {10, 7, 4, 1}), "arange(10, 0, -3)");
  check_tensor(local::arange(1.0, -1.0, -0.5), make_array(kF32, {4}, {1, 0.5, 0, -0.5}),
               "arange(1.0, -1.0, -0.5)");
  check_tensor(local::arange(0, 10, 3, kF64), make_array(kF64, {4}, {0, 3, 6, 9}),
               "arange(0, 10, 3, float64)");
  check_tensor(local::arange(-2, 3, 1, kI32), make_array(kI32, {5}, {-2, -1, 0, 1, 2}),
               "arange int32");
  check_tensor(local::arange(3, 3), filled(kI64, {0}, 0), "arange(3, 3) is empty");
  check_tensor(local::arange(0), filled(kI64, {0}, 0), "arange(0) is empty");
  check_tensor(local::arange(0, 9, 4), make_array(kI64, {3}, {0, 4, 8}), "arange(0, 9, 4)");
  check_tensor(local::arange(0, 8, 4), make_array(kI64, {2}, {0, 4}), "arange end excluded");
  // Length ceil((end - start) / step), element i = start + i * step.
  Array ref{kF32, {}, {}, {}};
  for (int i = 0; i < 10; ++i) ref.v.push_back(cast_to(kF32, -1.0 + i * 0.3));
  ref.shape = {10};
  check_tensor(local::arange(-1.0, 2.0, 0.3), ref, Tol{1e-5, 1e-6, 0}, "arange(-1.0, 2.0, 0.3)");
  Tensor big = local::arange(1000);
  CHECK(big.numel() == 1000);
  CHECK(read(big).v[999] == 999.0);
}

TEST_CASE("linspace: values, endpoints, steps 1 and 0") {
  check_tensor(local::linspace(0, 1, 5), make_array(kF32, {5}, {0, 0.25, 0.5, 0.75, 1}),
               "linspace(0, 1, 5)");
  check_tensor(local::linspace(2, -2, 5, kF64), make_array(kF64, {5}, {2, 1, 0, -1, -2}),
               "linspace(2, -2, 5) float64");
  check_tensor(local::linspace(-1, 1, 1), make_array(kF32, {1}, {-1}), "linspace steps=1");
  check_tensor(local::linspace(-1, 1, 0), filled(kF32, {0}, 0), "linspace steps=0");
  check_tensor(local::linspace(3, 3, 4), filled(kF32, {4}, 3), "linspace constant");
  for (int64_t steps : {2, 7, 100, 1001}) {
    for (DType dt : {kF32, kF64}) {
      Array e{dt, {steps}, {}, {}};
      for (int64_t i = 0; i < steps; ++i)
        e.v.push_back(cast_to(
            dt, -3.0 + (5.5 - -3.0) * static_cast<double>(i) / static_cast<double>(steps - 1)));
      std::string what = "linspace(-3, 5.5, " + std::to_string(steps) + ") " + str(dt);
      Tensor t = local::linspace(-3, 5.5, steps, dt);
      check_tensor(t, e, dt == kF32 ? Tol{1e-5, 1e-6, 0} : Tol{1e-12, 1e-12, 0}, what);
      Array got = read(t);
      CHECK_MESSAGE(got.v.front() == -3.0, what);
      CHECK_MESSAGE(got.v.back() == 5.5, what << ": the last value must be end exactly");
    }
  }
  check_tensor(local::linspace(0, 10, 6, kI64), make_array(kI64, {6}, {0, 2, 4, 6, 8, 10}),
               "linspace int64");
}

namespace {

double mean_of(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += x;
  return s / static_cast<double>(v.size());
}
double std_of(const std::vector<double>& v) {
  double m = mean_of(v), s = 0;
  for (double x : v) s += (x - m) * (x - m);
  return std::sqrt(s / static_cast<double>(v.size() - 1));
}

}  // namespace

TEST_CASE("rand: uniform on 0 to 1 (1 excluded), reproducible from the seed") {
  for (DType dt : {kF32, kF64}) {
    CAPTURE(str(dt));
    dtr::Generator gen(1234);
    Tensor r = local::rand({100000}, gen, dt);
    CHECK(str(r.dtype()) == str(dt));
    CHECK(gen.offset() == 100000);
    Array v = read(r);
    double lo = *std::min_element(v.v.begin(), v.v.end());
    double hi = *std::max_element(v.v.begin(), v.v.end());
    CHECK(lo >= 0.0);
    CHECK(hi < 1.0);
    CHECK(lo < 0.001);
    CHECK(hi > 0.999);
    CHECK(std::fabs(mean_of(v.v) - 0.5) < 0.01);
    CHECK(std::fabs(std_of(v.v) - std::sqrt(1.0 / 12.0)) < 0.01);
    // Deciles roughly equal.
    std::vector<int> bins(10, 0);
    for (double x : v.v) bins[static_cast<size_t>(x * 10)]++;
    for (int b : bins) CHECK(std::abs(b - 10000) < 500);
  }
  dtr::Generator g1(77), g2(77), g3(78);
  Array a = read(local::rand({3, 5}, g1));
  Array b = read(local::rand({3, 5}, g2));
  Array c = read(local::rand({3, 5}, g3));
  Array d = read(local::rand({3, 5}, g1));  // the generator moved on
  CHECK(a.v == b.v);
  CHECK(a.v != c.v);
  CHECK(a.v != d.v);
  g2.manual_seed(77);
  CHECK(read(local::rand({3, 5}, g2)).v == a.v);
  // Element i of a draw depends only on (seed, offset + i): two draws of 4 and 11 are one of 15.
  dtr::Generator whole(99), parts(99);
  Array all = read(local::rand({15}, whole));
  Array p1 = read(local::rand({4}, parts));
  Array p2 = read(local::rand({11}, parts));
  std::vector<double> joined = p1.v;
  joined.insert(joined.end(), p2.v.begin(), p2.v.end());
  CHECK(joined == all.v);
  // The default generator follows manual_seed.
  dtr::manual_seed(5);
  Array d1 = read(local::rand({8}));
  dtr::manual_seed(5);
  Array d2 = read(local::rand({8}));
  Array d3 = read(local::rand({8}));
  CHECK(d1.v == d2.v);
  CHECK(d1.v != d3.v);
  CHECK(local::rand({0}, g1).numel() == 0);
}

TEST_CASE("randn: mean ~0 and std ~1 on 100k draws, reproducible") {
  for (DType dt : {kF32, kF64}) {
    CAPTURE(str(dt));
    dtr::Generator gen(4321);
    Tensor r = local::randn({100000}, gen, dt);
    CHECK(str(r.dtype()) == str(dt));
    Array v = read(r);
    CHECK(std::fabs(mean_of(v.v)) < 0.02);
    CHECK(std::fabs(std_of(v.v) - 1.0) < 0.02);
    int64_t within1 = 0, nonfinite = 0;
    for (double x : v.v) {
      if (std::fabs(x) < 1.0) ++within1;
      if (!std::isfinite(x)) ++nonfinite;
    }
    CHECK(nonfinite == 0);
    CHECK(std::fabs(static_cast<double>(within1) / 100000.0 - 0.6827) < 0.01);
  }
  dtr::Generator g1(8), g2(8), g3(9);
  Array a = read(local::randn({2, 7}, g1));
  CHECK(read(local::randn({2, 7}, g2)).v == a.v);
  CHECK(read(local::randn({2, 7}, g3)).v != a.v);
  CHECK(read(local::randn({2, 7}, g1)).v != a.v);
  dtr::Generator whole(3), parts(3);
  Array all = read(local::randn({9}, whole));
  std::vector<double> joined = read(local::randn({5}, parts)).v;
  Array rest = read(local::randn({4}, parts));
  joined.insert(joined.end(), rest.v.begin(), rest.v.end());
  CHECK(joined == all.v);
}

TEST_CASE("uniform_ and normal_ with parameters, on contiguous tensors and views") {
  dtr::Generator gen(2024);
  Tensor u = local::empty({50000}, kF64);
  u.uniform_(-3.0, 5.0, gen);
  Array uv = read(u);
  CHECK(*std::min_element(uv.v.begin(), uv.v.end()) >= -3.0);
  CHECK(*std::max_element(uv.v.begin(), uv.v.end()) < 5.0);
  CHECK(std::fabs(mean_of(uv.v) - 1.0) < 0.05);
  Tensor n = local::empty({50000}, kF32);
  n.normal_(3.0, 2.0, gen);
  Array nv = read(n);
  CHECK(std::fabs(mean_of(nv.v) - 3.0) < 0.05);
  CHECK(std::fabs(std_of(nv.v) - 2.0) < 0.05);

  // Same seed and offset: uniform_ with the defaults equals rand.
  dtr::Generator ga(11), gb(11);
  Tensor x = local::empty({4, 6});
  x.uniform_(0.0, 1.0, ga);
  CHECK(read(x).v == read(local::rand({4, 6}, gb)).v);

  // A non-contiguous view: only its elements change, in logical order of the view.
  for (DType dt : {kF32, kF64}) {
    CAPTURE(str(dt));
    Tensor base = local::zeros({6, 8}, dt);
    Tensor v = base.slice(1, 0, 8, 2).t();  // [4, 6], strides [2, 8]
    dtr::Generator g(31), ref(31);
    v.uniform_(0.0, 1.0, g);
    Array b = read(base);
    Array want = read(local::rand({4, 6}, ref, dt));
    for (int64_t i = 0; i < 6; ++i)
      for (int64_t j = 0; j < 8; ++j) {
        double got = b.v[static_cast<size_t>(i * 8 + j)];
        if (j % 2 == 1) {
          CHECK_MESSAGE(got == 0.0, "element outside the view changed at " << i << "," << j);
        } else {
          CHECK(got >= 0.0);
          CHECK(got < 1.0);
          CHECK_MESSAGE(
              got == want.v[static_cast<size_t>((j / 2) * 6 + i)],
              "view element (" << j / 2 << ", " << i << ") is not draw " << (j / 2) * 6 + i);
        }
      }
    Tensor base2 = local::zeros({5, 5}, dt);
    dtr::Generator g2(32), ref2(32);
    base2.t().normal_(0.0, 1.0, g2);
    Array want2 = read(local::randn({5, 5}, ref2, dt));
    Array got2 = read(base2.t());
    CHECK(got2.v == want2.v);
  }
  // Padded layout from the reference builder.
  Tensor p = make_tensor(filled(kF64, {3, 4}, 0), Layout::Padded);
  dtr::Generator gp(5);
  p.normal_(0.0, 1.0, gp);
  check_untouched(p, "normal_ on a padded layout");
  for (double val : read(p).v) CHECK(std::isfinite(val));
}
