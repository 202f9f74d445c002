// Reductions (sum, prod, mean, max, min, argmax, argmin, norm, var, std) against the
// reference: whole tensor and along each dim, negative dims, keepdim, several dims at once
// through execute(), every input layout, and the empty and NaN corners.
#include <doctest/doctest.h>

#include <cmath>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "tensor/reference.hpp"

using namespace dtr_test;
using dtr::OpAttrs;
using dtr::OpId;

namespace {

enum class RRule { SumLike, FloatOnly, Same, Index };

struct ReduceSpec {
  const char* name;
  std::function<Tensor(const Tensor&)> all;
  std::function<Tensor(const Tensor&, int64_t, bool)> along;
  OpId id;
  RRule rule;
  Reducer f;
  bool sum_scale;  // float tolerance grows with the sum of |terms|
  std::vector<DType> dtypes;
  Range range;
};

#define DTR_REDUCE_CALLS(op)                                                               \
#op, [](const Tensor& t) { return t.op(); },                                             \
                                            [](const Tensor& t, int64_t d,                 \
                                               bool keepdim) { return t.op(d, keepdim); }, \
                                                                                        OpId::op

double ref_sum(const std::vector<double>& g) {
  double s = 0;
  for (double x : g) s += x;
  return s;
}
double ref_prod(const std::vector<double>& g) {
  double s = 1;
  for (double x : g) s *= x;
  return s;
}
double ref_mean(const std::vector<double>& g) {
  return ref_sum(g) / static_cast<double>(g.size());
}
// Index of the first largest (or smallest) value; a NaN counts as larger than everything.
double ref_arg(const std::vector<double>& g, bool largest) {
  size_t best = 0;
  for (size_t i = 0; i < g.size(); ++i) {
    if (std::isnan(g[best])) break;
    if (std::isnan(g[i]) || (largest ? g[i] > g[best] : g[i] < g[best])) best = i;
  }
  return static_cast<double>(best);
}
double ref_max(const std::vector<double>& g) {
  return g[static_cast<size_t>(ref_arg(g, true))];
}
double ref_min(const std::vector<double>& g) {
  return g[static_cast<size_t>(ref_arg(g, false))];
}

const std::vector<DType> kNumeric = {kF32, kF64, kI32, kI64};

std::vector<ReduceSpec> reduce_specs() {
  return {
      {DTR_REDUCE_CALLS(sum),
       RRule::SumLike,
       ref_sum,
       true,
       {kF32, kF64, kI32, kI64, kBool},
       Range{}},
      {DTR_REDUCE_CALLS(prod),
       RRule::SumLike,
       ref_prod,
       false,
       {kF32, kF64, kI32, kI64, kBool},
       Range{-1.5, 1.5, 0.0, true}},
      {DTR_REDUCE_CALLS(mean), RRule::FloatOnly, ref_mean, true, {kF32, kF64}, Range{}},
      {DTR_REDUCE_CALLS(max), RRule::Same, ref_max, false, kNumeric, Range{-3, 3, 0.5}},
      {DTR_REDUCE_CALLS(min), RRule::Same, ref_min, false, kNumeric, Range{-3, 3, 0.5}},
      {DTR_REDUCE_CALLS(argmax), RRule::Index, [](const auto& g) { return ref_arg(g, true); },
       false, kNumeric, Range{-3, 3, 0.5}},
      {DTR_REDUCE_CALLS(argmin), RRule::Index, [](const auto& g) { return ref_arg(g, false); },
       false, kNumeric, Range{-3, 3, 0.5}},
  };
}

DType reduce_out(RRule rule, DType in) {
  switch (rule) {
    case RRule::SumLike:
      return sum_like(in);
    case RRule::FloatOnly:
      return in;
    case RRule::Same:
      return in;
    case RRule::Index:
      return kI64;
  }
  return in;
}

const std::vector<Sizes> kReduceShapes = {{}, {7}, {3, 5}, {2, 3, 4}, {4, 1, 3}, {2, 3, 2, 2}};

Tensor run(OpId op, const Tensor& x, const OpAttrs& attrs) {
  return dtr::local::execute(op, std::span<const Tensor>(&x, 1), attrs, false);
}

}  // namespace

TEST_CASE("reductions over the whole tensor and along each dim, keepdim or not") {
  uint64_t seed = 100000;
  for (const ReduceSpec& op : reduce_specs()) {
    for (DType dt : op.dtypes) {
      const DType out = reduce_out(op.rule, dt);
      const Tol tol = op.sum_scale ? sum_tol(out) : default_tol(out);
      const Reducer scale = op.sum_scale ? Reducer(abs_sum) : Reducer();
      for (const Sizes& shape : kReduceShapes) {
        for (Layout layout : kAllLayouts) {
          Array a = random_array(dt, shape, ++seed, op.range);
          Tensor x = make_tensor(a, layout);
          std::string base =
              std::string(op.name) + " of " + str(dt) + str(shape) + " " + layout_name(layout);
          Array e = ref_reduce(a, {}, false, out, op.f, scale);
          if (std::string(op.name) == "mean")
            for (double& s : e.scale) s /= static_cast<double>(std::max<int64_t>(a.numel(), 1));
          check_tensor(op.all(x), e, tol, base + " (all)");
          const int64_t n = static_cast<int64_t>(shape.size());
          for (int64_t d = -n; d < n; ++d) {
            for (bool keepdim : {false, true}) {
              const int64_t wrapped = d < 0 ? d + n : d;
              Array ed = ref_reduce(a, {wrapped}, keepdim, out, op.f, scale);
              if (std::string(op.name) == "mean")
                for (double& s : ed.scale)
                  s /= static_cast<double>(shape[static_cast<size_t>(wrapped)]);
              check_tensor(op.along(x, d, keepdim), ed, tol,
                           base + " dim " + std::to_string(d) + (keepdim ? " keepdim" : ""));
            }
          }
          check_tensor(x, a, base + " (input unchanged)");
        }
      }
    }
  }
}

TEST_CASE("reductions over several dims at once (execute with a dim list)") {
  uint64_t seed = 110000;
  struct Case {
    OpId id;
    const char* name;
    Reducer f;
    Sizes dims;
  };
  std::vector<Case> cases = {
      {OpId::sum, "sum", ref_sum, {0, 2}},    {OpId::sum, "sum", ref_sum, {-1, 0}},
      {OpId::mean, "mean", ref_mean, {1, 2}}, {OpId::prod, "prod", ref_prod, {0, 1}},
      {OpId::max, "max", ref_max, {2, 0}},    {OpId::min, "min", ref_min, {-2, -1}},
      {OpId::sum, "sum", ref_sum, {0, 1, 2}},
  };
  for (const Case& c : cases) {
    for (bool keepdim : {false, true}) {
      Array a = random_array(kF64, {3, 4, 5}, ++seed, Range{-1.5, 1.5, 0.0, true});
      Tensor x = make_tensor(a, Layout::Padded);
      OpAttrs attrs;
      attrs.ints = to_shape(c.dims);
      attrs.keepdim = keepdim;
      Sizes wrapped;
      for (int64_t d : c.dims) wrapped.push_back(d < 0 ? d + 3 : d);
      Array e = ref_reduce(a, wrapped, keepdim, kF64, c.f);
      check_tensor(run(c.id, x, attrs), e, sum_tol(kF64),
                   std::string(c.name) + " over " + str(c.dims) + (keepdim ? " keepdim" : ""));
    }
  }
  // norm, var and std over several dims
  Array a = random_array(kF32, {3, 4, 5}, ++seed);
  Tensor x = make_tensor(a, Layout::ColumnMajor);
  OpAttrs attrs;
  attrs.ints = {0, 2};
  attrs.scalars[0] = 2.0;
  check_tensor(run(OpId::norm, x, attrs),
               ref_reduce(a, {0, 2}, false, kF32,
                          [](const std::vector<double>& g) {
                            double s = 0;
                            for (double v : g) s += v * v;
                            return std::sqrt(s);
                          }),
               Tol{1e-4, 1e-5, 0}, "norm p=2 over [0, 2]");
  attrs.scalars[0] = 1;
  attrs.keepdim = true;
  check_tensor(run(OpId::var, x, attrs),
               ref_reduce(a, {0, 2}, true, kF32,
                          [](const std::vector<double>& g) {
                            double m = ref_mean(g), s = 0;
                            for (double v : g) s += (v - m) * (v - m);
                            return s / static_cast<double>(g.size() - 1);
                          }),
               Tol{1e-4, 1e-5, 0}, "var correction 1 over [0, 2] keepdim");
}

namespace {

double ref_norm(const std::vector<double>& g, double p) {
  if (std::isinf(p)) {
    double m = 0;
    for (double x : g) m = std::max(m, std::fabs(x));
    return m;
  }
  double s = 0;
  for (double x : g) s += std::pow(std::fabs(x), p);
  return std::pow(s, 1.0 / p);
}

double ref_var(const std::vector<double>& g, int64_t correction) {
  double m = ref_mean(g), s = 0;
  for (double x : g) s += (x - m) * (x - m);
  return s / static_cast<double>(static_cast<int64_t>(g.size()) - correction);
}

}  // namespace

TEST_CASE("norm with p = 1, 2, inf, 3 over everything and along each dim") {
  uint64_t seed = 120000;
  const double inf = std::numeric_limits<double>::infinity();
  for (double p : {1.0, 2.0, inf, 3.0}) {
    for (DType dt : {kF32, kF64}) {
      const Tol tol = dt == kF32 ? Tol{1e-4, 1e-6, 0} : Tol{1e-12, 1e-13, 0};
      Reducer f = [p](const std::vector<double>& g) { return ref_norm(g, p); };
      for (const Sizes& shape : kReduceShapes) {
        for (Layout layout : kAllLayouts) {
          Array a = random_array(dt, shape, ++seed);
          Tensor x = make_tensor(a, layout);
          std::string base =
              "norm p=" + fmt_value(p) + " of " + str(dt) + str(shape) + " " + layout_name(layout);
          check_tensor(x.norm(p), ref_reduce(a, {}, false, dt, f), tol, base);
          const int64_t n = static_cast<int64_t>(shape.size());
          for (int64_t d = -n; d < n; ++d)
            for (bool keepdim : {false, true})
              check_tensor(x.norm(p, d, keepdim),
                           ref_reduce(a, {d < 0 ? d + n : d}, keepdim, dt, f), tol,
                           base + " dim " + std::to_string(d) + (keepdim ? " keepdim" : ""));
        }
      }
    }
  }
  check_tensor(tensor_of(kF32, {2}, {3, -4}).norm(), make_array(kF32, {}, {5}), "norm([3, -4])");
  check_tensor(tensor_of(kF64, {3}, {1, -7, 2}).norm(inf), make_array(kF64, {}, {7}), "inf-norm");
  check_tensor(tensor_of(kF64, {2, 3}, {0, -7, 2, 0, 0, 0.5}).norm(0.0, 1),
               make_array(kF64, {2}, {2, 1}), "0-norm counts non-zeros");
  check_tensor(tensor_of(kF64, {2, 3}, {1, -7, 2, 3, -0.5, 4}).norm(-inf, 1),
               make_array(kF64, {2}, {1, 0.5}), "-inf-norm is the smallest |x|");
}

TEST_CASE("var and std with correction 0 and 1") {
  uint64_t seed = 130000;
  for (int64_t correction : {0, 1}) {
    for (DType dt : {kF32, kF64}) {
      const Tol tol = dt == kF32 ? Tol{1e-4, 1e-6, 0} : Tol{1e-11, 1e-13, 0};
      Reducer var = [correction](const std::vector<double>& g) { return ref_var(g, correction); };
      Reducer sd = [correction](const std::vector<double>& g) {
        return std::sqrt(ref_var(g, correction));
      };
      for (const Sizes& shape : std::vector<Sizes>{{7}, {3, 5}, {2, 3, 4}, {4, 2, 3}}) {
        for (Layout layout : kAllLayouts) {
          Array a = random_array(dt, shape, ++seed);
          Tensor x = make_tensor(a, layout);
          std::string base = "correction " + std::to_string(correction) + " of " + str(dt) +
                             str(shape) + " " + layout_name(layout);
          check_tensor(x.var(std::nullopt, false, correction), ref_reduce(a, {}, false, dt, var),
                       tol, "var " + base);
          check_tensor(x.std(std::nullopt, false, correction), ref_reduce(a, {}, false, dt, sd),
                       tol, "std " + base);
          const int64_t n = static_cast<int64_t>(shape.size());
          for (int64_t d = -n; d < n; ++d)
            for (bool keepdim : {false, true}) {
              Sizes dims = {d < 0 ? d + n : d};
              std::string what = base + " dim " + std::to_string(d) + (keepdim ? " keepdim" : "");
              check_tensor(x.var(d, keepdim, correction), ref_reduce(a, dims, keepdim, dt, var),
                           tol, "var " + what);
              check_tensor(x.std(d, keepdim, correction), ref_reduce(a, dims, keepdim, dt, sd), tol,
                           "std " + what);
            }
        }
      }
    }
  }
  // Defaults: unbiased, over everything.
  Tensor x = tensor_of(kF64, {4}, {1, 2, 3, 4});
  check_tensor(x.var(), make_array(kF64, {}, {5.0 / 3.0}), "var([1, 2, 3, 4])");
  check_tensor(x.std(), make_array(kF64, {}, {std::sqrt(5.0 / 3.0)}), "std([1, 2, 3, 4])");
  check_tensor(x.var(0, false, 0), make_array(kF64, {}, {1.25}), "var correction 0");
  // One element with correction 1: 0 / 0.
  check_tensor(tensor_of(kF32, {1}, {3}).var(), make_array(kF32, {}, {NAN}), "var of one element");
  check_tensor(tensor_of(kF32, {3, 1}, {1, 2, 3}).std(1), make_array(kF32, {3}, {NAN, NAN, NAN}),
               "std over a size-1 dim");
  check_tensor(tensor_of(kF32, {3, 1}, {1, 2, 3}).var(1, true, 0), filled(kF32, {3, 1}, 0),
               "var correction 0 over a size-1 dim");
}

TEST_CASE("reductions of a large-ish float32 tensor stay accurate") {
  Array a = random_array(kF32, {4000}, 140001, Range{0.0, 1.0});
  Tensor x = make_tensor(a);
  Array s = ref_reduce(a, {}, false, kF32, ref_sum, abs_sum);
  check_tensor(x.sum(), s, sum_tol(kF32), "sum of 4000 float32");
  check_tensor(x.mean(), ref_reduce(a, {}, false, kF32, ref_mean), Tol{1e-4, 1e-6, 0},
               "mean of 4000 float32");
  check_tensor(x.var(), ref_reduce(a, {}, false, kF32, [](const auto& g) { return ref_var(g, 1); }),
               Tol{1e-4, 1e-6, 0}, "var of 4000 float32");
  // A large common offset: a naive one-pass E[x^2] - E[x]^2 loses everything here.
  Array shifted = a;
  for (double& v : shifted.v) v = cast_to(kF32, v + 1000.0);
  check_tensor(make_tensor(shifted).var(),
               ref_reduce(shifted, {}, false, kF32, [](const auto& g) { return ref_var(g, 1); }),
               Tol{1e-2, 1e-4, 0}, "var of 4000 float32 around 1000");
}

TEST_CASE("reductions: NaN wins in max/min and argmax/argmin point at it") {
  Tensor x = tensor_of(kF32, {2, 4}, {1, NAN, 3, 2, -1, -2, -3, -4});
  check_tensor(x.max(), make_array(kF32, {}, {NAN}), "max with NaN");
  check_tensor(x.min(), make_array(kF32, {}, {NAN}), "min with NaN");
  check_tensor(x.max(1), make_array(kF32, {2}, {NAN, -1}), "max(1) with NaN");
  check_tensor(x.min(1), make_array(kF32, {2}, {NAN, -4}), "min(1) with NaN");
  check_tensor(x.max(0), make_array(kF32, {4}, {1, NAN, 3, 2}), "max(0) with NaN");
  check_tensor(x.argmax(1), make_array(kI64, {2}, {1, 0}), "argmax(1) with NaN");
  check_tensor(x.argmin(1), make_array(kI64, {2}, {1, 3}), "argmin(1) with NaN");
  check_tensor(x.argmax(), make_array(kI64, {}, {1}), "argmax() with NaN");
  check_tensor(x.sum(1), make_array(kF32, {2}, {NAN, -10}), "sum with NaN");
}

TEST_CASE("reductions: ties pick the first index, bool and int sums give int64") {
  Tensor x = tensor_of(kI32, {2, 5}, {3, 7, 7, 1, 7, 2, 2, 0, 0, 5});
  check_tensor(x.argmax(1), make_array(kI64, {2}, {1, 4}), "argmax ties");
  check_tensor(x.argmin(1), make_array(kI64, {2}, {3, 2}), "argmin ties");
  check_tensor(x.argmax(), make_array(kI64, {}, {1}), "argmax() ties");
  check_tensor(x.argmin(), make_array(kI64, {}, {7}), "argmin() ties");
  check_tensor(x.argmax(0, true), make_array(kI64, {1, 5}, {0, 0, 0, 0, 0}), "argmax(0) keepdim");
  check_tensor(x.sum(), make_array(kI64, {}, {34}), "int32 sum gives int64");
  check_tensor(x.max(), make_array(kI32, {}, {7}), "int32 max stays int32");
  Tensor b = tensor_of(kBool, {2, 3}, {1, 0, 1, 1, 1, 1});
  check_tensor(b.sum(), make_array(kI64, {}, {5}), "bool sum counts");
  check_tensor(b.sum(0), make_array(kI64, {3}, {2, 1, 2}), "bool sum(0)");
  check_tensor(b.prod(1), make_array(kI64, {2}, {0, 1}), "bool prod(1)");
  // int32 sums that overflow int32 but not int64
  Tensor big = tensor_of(kI32, {3}, {2000000000, 2000000000, 2000000000});
  check_tensor(big.sum(), make_array(kI64, {}, {6000000000.0}), "int32 sum accumulates in int64");
}

TEST_CASE("reductions of zero-size tensors") {
  Tensor e0 = tensor_of(kF32, {0}, {});
  Tensor e30 = tensor_of(kF32, {3, 0}, {}, Layout::Padded);
  check_tensor(e0.sum(), make_array(kF32, {}, {0}), "sum of [0]");
  check_tensor(e0.prod(), make_array(kF32, {}, {1}), "prod of [0]");
  check_tensor(e0.mean(), make_array(kF32, {}, {NAN}), "mean of [0]");
  check_tensor(e30.sum(), make_array(kF32, {}, {0}), "sum of [3, 0]");
  check_tensor(e30.sum(1), filled(kF32, {3}, 0), "sum(1) of [3, 0]");
  check_tensor(e30.sum(1, true), filled(kF32, {3, 1}, 0), "sum(1, keepdim) of [3, 0]");
  check_tensor(e30.sum(0), filled(kF32, {0}, 0), "sum(0) of [3, 0]");
  check_tensor(e30.prod(1), filled(kF32, {3}, 1), "prod(1) of [3, 0]");
  check_tensor(e30.mean(1), filled(kF32, {3}, NAN), "mean(1) of [3, 0]");
  check_tensor(e30.mean(0), filled(kF32, {0}, 0), "mean(0) of [3, 0]");
  check_tensor(e30.norm(2.0, 1), filled(kF32, {3}, 0), "norm(1) of [3, 0]");
  check_tensor(tensor_of(kI32, {3, 0}, {}).sum(1), filled(kI64, {3}, 0), "int sum(1) of [3, 0]");
  check_tensor(tensor_of(kI32, {0}, {}).prod(), make_array(kI64, {}, {1}), "int prod of [0]");
  // max/argmax over an empty dim have no answer; over a non-empty dim of an empty tensor
  // the result is itself empty.
  check_tensor(e30.max(0), filled(kF32, {0}, 0), "max(0) of [3, 0]");
  check_tensor(e30.argmax(0), filled(kI64, {0}, 0), "argmax(0) of [3, 0]");
  DTR_CHECK_ERROR(dtr::InvalidArgument, e30.max(1), "max");
  DTR_CHECK_ERROR(dtr::InvalidArgument, e30.min(1), "min");
  DTR_CHECK_ERROR(dtr::InvalidArgument, e30.argmax(1), "argmax");
  DTR_CHECK_ERROR(dtr::InvalidArgument, e30.argmin(-1), "argmin");
  DTR_CHECK_ERROR(dtr::InvalidArgument, e0.max(), "max");
  DTR_CHECK_ERROR(dtr::InvalidArgument, e0.argmin(), "argmin");
}

TEST_CASE("reductions of a 0-d tensor and of expanded (stride 0) inputs") {
  Tensor s = tensor_of(kF64, {}, {2.5});
  check_tensor(s.sum(), make_array(kF64, {}, {2.5}), "sum of 0-d");
  check_tensor(s.max(), make_array(kF64, {}, {2.5}), "max of 0-d");
  check_tensor(s.argmax(), make_array(kI64, {}, {0}), "argmax of 0-d");
  check_tensor(s.mean(), make_array(kF64, {}, {2.5}), "mean of 0-d");
  // torch lets a 0-d tensor reduce over dim 0 or -1.
  check_tensor(s.sum(0), make_array(kF64, {}, {2.5}), "sum(0) of 0-d");
  check_tensor(s.max(-1, true), make_array(kF64, {}, {2.5}), "max(-1, keepdim) of 0-d");
  check_tensor(s.argmin(0), make_array(kI64, {}, {0}), "argmin(0) of 0-d");
  Array a = random_array(kF64, {3, 1}, 150001);
  Tensor x = make_tensor(a).expand({3, 4});
  Array full =
      ref_binary(a, filled(kF64, {3, 4}, 0), kF64, kF64, [](double p, double) { return p; });
  check_tensor(x.sum(1), ref_reduce(full, {1}, false, kF64, ref_sum), "sum(1) of expanded");
  check_tensor(x.sum(0), ref_reduce(full, {0}, false, kF64, ref_sum), "sum(0) of expanded");
  check_tensor(x.var(1), filled(kF64, {3}, 0), "var(1) of expanded");
  check_tensor(x.argmax(1), filled(kI64, {3}, 0), "argmax(1) of expanded");
}
