// Elementwise ops (unary, binary, comparisons, clamp) against the reference: every op, its
// scalar and scalar-first forms, its in-place form, type promotion, broadcasting corners,
// non-contiguous inputs and outputs, aliasing and zero-size tensors.
#include <doctest/doctest.h>

#include <cmath>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "tensor/reference.hpp"

using namespace dtr_test;
using dtr::OpId;

namespace {

// ---- unary ----

struct UnarySpec {
  const char* name;
  std::function<Tensor(const Tensor&)> call;
  std::function<void(Tensor&)> call_inplace;
  bool to_float;  // ToFloat dtype rule (else Same)
  std::function<double(double)> f;
  Range float_range;
  Range int_range;
};

// The method and in-place method of unary op `op`.
#define DTR_UNARY_CALLS(op) \
#op, [](const Tensor& t) { return t.op(); }, [](Tensor & t) { t.op##_(); }

std::vector<UnarySpec> unary_specs() {
  return {
      UnarySpec{DTR_UNARY_CALLS(neg), false, [](double x) { return -x; }, Range{}, Range{-9, 9}},
      UnarySpec{DTR_UNARY_CALLS(abs), false, [](double x) { return std::fabs(x); }, Range{},
                Range{-9, 9}},
      UnarySpec{DTR_UNARY_CALLS(exp), true, [](double x) { return std::exp(x); }, Range{-3, 3},
                Range{-3, 3}},
      UnarySpec{DTR_UNARY_CALLS(log), true, [](double x) { return std::log(x); }, Range{0.1, 5},
                Range{1, 9}},
      UnarySpec{DTR_UNARY_CALLS(sqrt), true, [](double x) { return std::sqrt(x); }, Range{0, 5},
                Range{0, 9}},
      UnarySpec{DTR_UNARY_CALLS(rsqrt), true, [](double x) { return 1.0 / std::sqrt(x); },
                Range{0.1, 5}, Range{1, 9}},
      UnarySpec{DTR_UNARY_CALLS(sin), true, [](double x) { return std::sin(x); }, Range{-4, 4},
                Range{-4, 4}},
      UnarySpec{DTR_UNARY_CALLS(cos), true, [](double x) { return std::cos(x); }, Range{-4, 4},
                Range{-4, 4}},
      UnarySpec{DTR_UNARY_CALLS(tanh), true, [](double x) { return std::tanh(x); }, Range{-3, 3},
                Range{-3, 3}},
      UnarySpec{DTR_UNARY_CALLS(sigmoid), true, [](double x) { return 1.0 / (1.0 + std::exp(-x)); },
                Range{-6, 6}, Range{-6, 6}},
      UnarySpec{DTR_UNARY_CALLS(relu), false, [](double x) { return x > 0 ? x : 0.0; }, Range{},
                Range{-9, 9}},
      UnarySpec{DTR_UNARY_CALLS(floor), false, [](double x) { return std::floor(x); },
                Range{-4, 4, 0.25}, Range{-9, 9}},
      UnarySpec{DTR_UNARY_CALLS(ceil), false, [](double x) { return std::ceil(x); },
                Range{-4, 4, 0.25}, Range{-9, 9}},
      // Ties (x.5) round to even.
      UnarySpec{DTR_UNARY_CALLS(round), false, [](double x) { return std::nearbyint(x); },
                Range{-4, 4, 0.5}, Range{-9, 9}},
      UnarySpec{DTR_UNARY_CALLS(sign), false,
                [](double x) { return static_cast<double>((x > 0) - (x < 0)); }, Range{-2, 2, 1},
                Range{-2, 2}},
      UnarySpec{DTR_UNARY_CALLS(trunc), false, [](double x) { return std::trunc(x); },
                Range{-4, 4, 0.25}, Range{-9, 9}},
      UnarySpec{DTR_UNARY_CALLS(reciprocal), true, [](double x) { return 1.0 / x; }, Range{0.25, 4},
                Range{1, 9}},
      UnarySpec{DTR_UNARY_CALLS(tan), true, [](double x) { return std::tan(x); }, Range{-1.2, 1.2},
                Range{-1, 1}},
      UnarySpec{DTR_UNARY_CALLS(asin), true, [](double x) { return std::asin(x); },
                Range{-0.95, 0.95}, Range{-1, 1}},
      UnarySpec{DTR_UNARY_CALLS(acos), true, [](double x) { return std::acos(x); },
                Range{-0.95, 0.95}, Range{-1, 1}},
      UnarySpec{DTR_UNARY_CALLS(atan), true, [](double x) { return std::atan(x); }, Range{-4, 4},
                Range{-9, 9}},
      UnarySpec{DTR_UNARY_CALLS(sinh), true, [](double x) { return std::sinh(x); }, Range{-3, 3},
                Range{-3, 3}},
      UnarySpec{DTR_UNARY_CALLS(cosh), true, [](double x) { return std::cosh(x); }, Range{-3, 3},
                Range{-3, 3}},
      UnarySpec{DTR_UNARY_CALLS(asinh), true, [](double x) { return std::asinh(x); }, Range{-4, 4},
                Range{-9, 9}},
      UnarySpec{DTR_UNARY_CALLS(acosh), true, [](double x) { return std::acosh(x); }, Range{1, 5},
                Range{1, 9}},
      UnarySpec{DTR_UNARY_CALLS(atanh), true, [](double x) { return std::atanh(x); },
                Range{-0.9, 0.9}, Range{0, 0}},
      UnarySpec{DTR_UNARY_CALLS(erf), true, [](double x) { return std::erf(x); }, Range{-3, 3},
                Range{-3, 3}},
      UnarySpec{DTR_UNARY_CALLS(expm1), true, [](double x) { return std::expm1(x); }, Range{-3, 3},
                Range{-3, 3}},
      UnarySpec{DTR_UNARY_CALLS(log1p), true, [](double x) { return std::log1p(x); },
                Range{-0.5, 5}, Range{0, 9}},
      UnarySpec{DTR_UNARY_CALLS(log2), true, [](double x) { return std::log2(x); }, Range{0.1, 5},
                Range{1, 9}},
      UnarySpec{DTR_UNARY_CALLS(log10), true, [](double x) { return std::log10(x); }, Range{0.1, 5},
                Range{1, 9}},
      UnarySpec{DTR_UNARY_CALLS(silu), true, [](double x) { return x / (1.0 + std::exp(-x)); },
                Range{-6, 6}, Range{-6, 6}},
      UnarySpec{DTR_UNARY_CALLS(gelu), true,
                [](double x) { return 0.5 * x * (1.0 + std::erf(x / std::sqrt(2.0))); },
                Range{-4, 4}, Range{-4, 4}},
      UnarySpec{DTR_UNARY_CALLS(gelu_tanh), true,
                [](double x) {
                  const double u = std::sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x);
                  return 0.5 * x * (1.0 + std::tanh(u));
                },
                Range{-4, 4}, Range{-4, 4}},
  };
}

const std::vector<Sizes> kUnaryShapes = {{}, {7}, {3, 4}, {2, 3, 5}, {2, 1, 4, 3}, {0}, {3, 0}};

}  // namespace

TEST_CASE("unary ops match the reference for every dtype, shape and layout") {
  uint64_t seed = 1000;
  for (const UnarySpec& op : unary_specs()) {
    for (DType dt : kAllDTypes) {
      if (dt == kBool && !op.to_float) continue;  // neg/abs/relu of bool: not torch ops
      const DType out = op.to_float ? to_float(dt) : dt;
      for (const Sizes& shape : kUnaryShapes) {
        for (Layout layout : kAllLayouts) {
          Array a = random_array(dt, shape, ++seed, is_float(dt) ? op.float_range : op.int_range);
          Tensor x = make_tensor(a, layout);
          std::string what =
              std::string(op.name) + " " + str(dt) + str(shape) + " " + layout_name(layout);
          Tensor y = op.call(x);
          check_tensor(y, ref_unary(a, out, out, op.f), what);
          CHECK_MESSAGE(y.is_contiguous(), what);
          CHECK_MESSAGE(!same_storage(x, y), what);
          check_tensor(x, a, what + " (input unchanged)");
        }
      }
    }
  }
}

TEST_CASE("floor, ceil, round and sign: special values") {
  const double nan = std::nan(""), inf = std::numeric_limits<double>::infinity();
  Tensor x = tensor_of(kF32, {7}, {nan, inf, -inf, -0.5, 2.5, -2.5, -0.0});
  check_tensor(x.floor(), make_array(kF32, {7}, {nan, inf, -inf, -1, 2, -3, -0.0}), "floor");
  check_tensor(x.ceil(), make_array(kF32, {7}, {nan, inf, -inf, -0.0, 3, -2, -0.0}), "ceil");
  check_tensor(x.round(), make_array(kF32, {7}, {nan, inf, -inf, -0.0, 2, -2, -0.0}), "round");
  // torch.sign: NaN gives 0.
  check_tensor(x.sign(), make_array(kF32, {7}, {0, 1, -1, -1, 1, -1, 0}), "sign");
  Tensor ints = tensor_of(kI64, {3}, {7, -5, 0});
  CHECK(ints.round().to_vector<int64_t>() == std::vector<int64_t>{7, -5, 0});
  CHECK(ints.floor().to_vector<int64_t>() == std::vector<int64_t>{7, -5, 0});
  CHECK(ints.sign().to_vector<int64_t>() == std::vector<int64_t>{1, -1, 0});
  DTR_CHECK_ERROR(dtr::DTypeError, tensor_of(kBool, {2}, {1, 0}).floor(), "floor", "bool");
}

TEST_CASE("the formula unary ops: special values and values from torch") {
  const double nan = std::nan(""), inf = std::numeric_limits<double>::infinity();
  Tensor x = tensor_of(kF64, {5}, {nan, inf, -inf, 0.0, -0.0});
  check_tensor(x.trunc(), make_array(kF64, {5}, {nan, inf, -inf, 0.0, -0.0}), "trunc");
  check_tensor(x.reciprocal(), make_array(kF64, {5}, {nan, 0.0, -0.0, inf, -inf}), "reciprocal");
  check_tensor(x.erf(), make_array(kF64, {5}, {nan, 1, -1, 0.0, -0.0}), "erf");
  check_tensor(x.expm1(), make_array(kF64, {5}, {nan, inf, -1, 0.0, -0.0}), "expm1");
  check_tensor(x.silu(), make_array(kF64, {5}, {nan, inf, nan, 0.0, -0.0}), "silu");
  check_tensor(x.gelu(), make_array(kF64, {5}, {nan, inf, nan, 0.0, -0.0}), "gelu");
  // Near 0, where exp(x) - 1 and log(1 + x) lose every digit.
  Tensor tiny = tensor_of(kF64, {1}, {1e-12});
  CHECK(tiny.expm1().item<double>() == doctest::Approx(1e-12).epsilon(1e-9));
  CHECK(tiny.log1p().item<double>() == doctest::Approx(1e-12).epsilon(1e-9));
  // torch.nn.functional.gelu(torch.tensor([-1., 0.5, 2.], dtype=torch.float64)) and with
  // approximate='tanh', as torch 1.13 (Debian's python3-torch) gives them.
  Tensor v = tensor_of(kF64, {3}, {-1.0, 0.5, 2.0});
  check_tensor(
      v.gelu(),
      make_array(kF64, {3}, {-0.15865525393145702, 0.34573123063700656, 1.9544997361036416}),
      "gelu against torch");
  check_tensor(
      v.gelu_tanh(),
      make_array(kF64, {3}, {-0.15880800939172324, 0.34571400982514394, 1.954597694087775}),
      "gelu_tanh against torch");
  // Integral inputs compute in float32, as torch's.
  CHECK(tensor_of(kI64, {1}, {2}).reciprocal().dtype() == kF32);
  CHECK(tensor_of(kI64, {2}, {7, -5}).trunc().to_vector<int64_t>() == std::vector<int64_t>{7, -5});
  DTR_CHECK_ERROR(dtr::DTypeError, tensor_of(kBool, {2}, {1, 0}).trunc(), "trunc", "bool");
}

TEST_CASE("unary predicates: isnan, isinf, isfinite and logical_not in every dtype and layout") {
  const double nan = std::nan(""), inf = std::numeric_limits<double>::infinity();
  struct Pred {
    const char* name;
    std::function<Tensor(const Tensor&)> call;
    std::function<bool(double)> f;
  };
  const std::vector<Pred> preds = {
      {"isnan", [](const Tensor& t) { return t.isnan(); }, [](double v) { return std::isnan(v); }},
      {"isinf", [](const Tensor& t) { return t.isinf(); }, [](double v) { return std::isinf(v); }},
      {"isfinite", [](const Tensor& t) { return t.isfinite(); },
       [](double v) { return std::isfinite(v); }},
      {"logical_not", [](const Tensor& t) { return t.logical_not(); },
       [](double v) { return v == 0; }},
  };
  const std::vector<double> values = {nan, inf, -inf, 0.0, -0.0, 1.5, -2.0, 3.0};
  for (const Pred& p : preds) {
    for (DType dt : kAllDTypes) {
      for (Layout layout : kAllLayouts) {
        std::vector<double> v;
        for (double x : values) {
          if (!is_float(dt) && !std::isfinite(x)) continue;  // not representable
          v.push_back(dt == kBool ? (x != 0) : is_float(dt) ? x : std::trunc(x));
        }
        v.resize(6, 1.0);
        Array a = make_array(dt, {2, 3}, v);
        std::vector<double> expected;
        for (double x : a.v) expected.push_back(p.f(x) ? 1 : 0);
        std::string what = std::string(p.name) + " " + str(dt) + " " + layout_name(layout);
        Tensor y = p.call(make_tensor(a, layout));
        CHECK_MESSAGE(y.dtype() == kBool, what);
        check_tensor(y, make_array(kBool, {2, 3}, expected), what);
      }
    }
  }
  // In place, the 0 or 1 is written in the tensor's own dtype, as torch's logical_not_.
  Tensor x = tensor_of(kF32, {3}, {0.0, nan, 2.0});
  x.logical_not_();
  check_tensor(x, make_array(kF32, {3}, {1, 0, 0}), "logical_not_");
}

TEST_CASE("unary in-place ops write through any layout, including views") {
  uint64_t seed = 2000;
  for (const UnarySpec& op : unary_specs()) {
    for (DType dt : {kF32, kF64, kI32, kI64}) {
      if (!is_float(dt) && op.to_float) continue;  // float result into int: refused (errors_test)
      for (const Sizes& shape : kUnaryShapes) {
        for (Layout layout : kAllLayouts) {
          Array a = random_array(dt, shape, ++seed, is_float(dt) ? op.float_range : op.int_range);
          Tensor x = make_tensor(a, layout);
          std::string what =
              std::string(op.name) + "_ " + str(dt) + str(shape) + " " + layout_name(layout);
          op.call_inplace(x);
          check_tensor(x, ref_unary(a, dt, dt, op.f), what);
          CHECK_MESSAGE(
              str(to_sizes(x.strides())) == str(to_sizes(make_tensor(a, layout).strides())),
              what << ": in-place op changed the strides");
        }
      }
    }
  }
  // Through a transposed view and a stepped slice: the base sees the change, the elements
  // outside the view do not change.
  Array base = random_array(kF32, {4, 6}, 77, Range{-3, 3});
  Tensor x = make_tensor(base);
  Tensor v = x.slice(1, 1, 6, 2).t();  // [3, 4], strides [2, 6]
  v.exp_();
  Array expected = base;
  for (int64_t i = 0; i < 4; ++i)
    for (int64_t j = 1; j < 6; j += 2) {
      size_t p = static_cast<size_t>(i * 6 + j);
      expected.v[p] = cast_to(kF32, std::exp(base.v[p]));
    }
  check_tensor(x, expected, "exp_ through slice(step 2).t()");
}

TEST_CASE("unary ops: special values") {
  Tensor x = tensor_of(kF32, {5}, {0.0, -1.0, INFINITY, -INFINITY, NAN});
  double inf = INFINITY, nan = NAN;
  check_tensor(x.log(), make_array(kF32, {5}, {-inf, nan, inf, nan, nan}), "log specials");
  check_tensor(x.sqrt(), make_array(kF32, {5}, {0.0, nan, inf, nan, nan}), "sqrt specials");
  check_tensor(x.rsqrt(), make_array(kF32, {5}, {inf, nan, 0.0, nan, nan}), "rsqrt specials");
  check_tensor(x.exp(), make_array(kF32, {5}, {1.0, std::exp(-1.0), inf, 0.0, nan}),
               "exp specials");
  check_tensor(x.tanh(), make_array(kF32, {5}, {0.0, std::tanh(-1.0), 1.0, -1.0, nan}),
               "tanh specials");
  check_tensor(x.sigmoid(), make_array(kF32, {5}, {0.5, 1 / (1 + std::exp(1.0)), 1.0, 0.0, nan}),
               "sigmoid specials");
  check_tensor(x.abs(), make_array(kF32, {5}, {0.0, 1.0, inf, inf, nan}), "abs specials");
  Tensor big = tensor_of(kF64, {3}, {-800.0, 800.0, 0.0});
  check_tensor(big.sigmoid(), make_array(kF64, {3}, {0.0, 1.0, 0.5}), "sigmoid of +-800");
  Tensor i = tensor_of(kI64, {3}, {-4, 0, 9});
  check_tensor(i.sqrt(), make_array(kF32, {3}, {nan, 0.0, 3.0}), "sqrt of int64 gives float32");
}

// ---- binary ----

namespace {

enum class Rule { Promote, PromoteFloat, ToBool };

struct BinarySpec {
  const char* name;
  std::function<Tensor(const Tensor&, const Tensor&)> call;
  std::function<Tensor(const Tensor&, Scalar)> call_scalar;
  OpId id;
  std::function<void(Tensor&, const Tensor&)> call_inplace;
  std::function<void(Tensor&, Scalar)> call_inplace_scalar;
  Rule rule;
  std::function<double(double, double)> f;
  bool bool_ok;
};

// The name, methods and in-place methods of binary op `op`.
#define DTR_BINARY_CALLS(op) \
#op, [](const Tensor& a, const Tensor& b) { return a.op(b); },                        \
      [](const Tensor& a, Scalar s) { return a.op(s); }, OpId::op,                      \
      [](Tensor& a, const Tensor& b) { a.op##_(b); }, [](Tensor& a, Scalar s) { a.op##_(s); }

double ref_max(double x, double y) {
  if (std::isnan(x) || std::isnan(y)) return NAN;
  return x > y ? x : y;
}
double ref_min(double x, double y) {
  if (std::isnan(x) || std::isnan(y)) return NAN;
  return x < y ? x : y;
}
// Python's %: the sign of the divisor.
double ref_remainder(double x, double y) {
  double r = std::fmod(x, y);
  if (r != 0 && ((r < 0) != (y < 0))) r += y;
  return r;
}

std::vector<BinarySpec> binary_specs() {
  return {
      BinarySpec{DTR_BINARY_CALLS(add), Rule::Promote, [](double x, double y) { return x + y; },
                 true},
      BinarySpec{DTR_BINARY_CALLS(sub), Rule::Promote, [](double x, double y) { return x - y; },
                 false},
      BinarySpec{DTR_BINARY_CALLS(mul), Rule::Promote, [](double x, double y) { return x * y; },
                 true},
      BinarySpec{DTR_BINARY_CALLS(div), Rule::PromoteFloat,
                 [](double x, double y) { return x / y; }, true},
      BinarySpec{DTR_BINARY_CALLS(pow), Rule::Promote,
                 [](double x, double y) { return std::pow(x, y); }, false},
      BinarySpec{DTR_BINARY_CALLS(maximum), Rule::Promote, ref_max, true},
      BinarySpec{DTR_BINARY_CALLS(minimum), Rule::Promote, ref_min, true},
      BinarySpec{DTR_BINARY_CALLS(eq), Rule::ToBool,
                 [](double x, double y) { return x == y ? 1.0 : 0.0; }, true},
      BinarySpec{DTR_BINARY_CALLS(ne), Rule::ToBool,
                 [](double x, double y) { return x != y ? 1.0 : 0.0; }, true},
      BinarySpec{DTR_BINARY_CALLS(lt), Rule::ToBool,
                 [](double x, double y) { return x < y ? 1.0 : 0.0; }, true},
      BinarySpec{DTR_BINARY_CALLS(le), Rule::ToBool,
                 [](double x, double y) { return x <= y ? 1.0 : 0.0; }, true},
      BinarySpec{DTR_BINARY_CALLS(gt), Rule::ToBool,
                 [](double x, double y) { return x > y ? 1.0 : 0.0; }, true},
      BinarySpec{DTR_BINARY_CALLS(ge), Rule::ToBool,
                 [](double x, double y) { return x >= y ? 1.0 : 0.0; }, true},
      BinarySpec{DTR_BINARY_CALLS(remainder), Rule::Promote, ref_remainder, false},
      BinarySpec{DTR_BINARY_CALLS(fmod), Rule::Promote,
                 [](double x, double y) { return std::fmod(x, y); }, false},
      BinarySpec{DTR_BINARY_CALLS(floor_divide), Rule::Promote,
                 [](double x, double y) { return std::floor(x / y); }, false},
      BinarySpec{DTR_BINARY_CALLS(trunc_divide), Rule::Promote,
                 [](double x, double y) { return std::trunc(x / y); }, false},
      BinarySpec{DTR_BINARY_CALLS(atan2), Rule::PromoteFloat,
                 [](double x, double y) { return std::atan2(x, y); }, true},
      BinarySpec{DTR_BINARY_CALLS(logical_and), Rule::ToBool,
                 [](double x, double y) { return x != 0 && y != 0 ? 1.0 : 0.0; }, true},
      BinarySpec{DTR_BINARY_CALLS(logical_or), Rule::ToBool,
                 [](double x, double y) { return x != 0 || y != 0 ? 1.0 : 0.0; }, true},
      BinarySpec{DTR_BINARY_CALLS(logical_xor), Rule::ToBool,
                 [](double x, double y) { return (x != 0) != (y != 0) ? 1.0 : 0.0; }, true},
  };
}

// The dtype the op computes in, and its result dtype.
DType compute_dtype(const BinarySpec& op, DType promoted) {
  return op.rule == Rule::PromoteFloat ? to_float(promoted) : promoted;
}
DType result_dtype(const BinarySpec& op, DType promoted) {
  return op.rule == Rule::ToBool ? kBool : compute_dtype(op, promoted);
}

// Operand ranges that keep every op well defined and exact enough: pow gets a positive or
// small integral base and a small exponent; div gets divisors away from zero; comparisons
// get values on a coarse grid so that ties occur.
Range lhs_range(const BinarySpec& op, DType dt) {
  std::string n = op.name;
  if (n == "pow") return is_float(dt) ? Range{0.25, 2.0} : Range{0, 4};
  if (op.rule == Rule::ToBool || n == "maximum" || n == "minimum")
    return is_float(dt) ? Range{-2, 2, 0.5} : Range{-3, 3};
  return is_float(dt) ? Range{-3, 3} : Range{-9, 9};
}
Range rhs_range(const BinarySpec& op, DType dt) {
  std::string n = op.name;
  if (n == "pow") return is_float(dt) ? Range{-2.0, 2.0} : Range{0, 3};
  if (n == "div" || n == "remainder" || n == "fmod" || n == "floor_divide" || n == "trunc_divide")
    return is_float(dt) ? Range{-3, 3, 0.0, true} : Range{-9, 9, 0.0, true};
  return lhs_range(op, dt);
}

struct DTypePair {
  DType a, b;
};
const std::vector<DTypePair> kDTypePairs = {
    {kF32, kF32}, {kF64, kF64}, {kI32, kI32},  {kI64, kI64},  {kI32, kI64},   {kI64, kF32},
    {kF32, kF64}, {kI32, kF64}, {kBool, kI32}, {kF32, kBool}, {kBool, kBool},
};

struct ShapePair {
  Sizes a, b;
};
const std::vector<ShapePair> kBroadcastPairs = {
    {{2, 3}, {2, 3}},     // same shape
    {{4, 1, 3}, {5, 1}},  // size-1 dims on both sides, different ranks
    {{}, {3, 2}},         // 0-d with n-d
    {{3, 2}, {}},         // n-d with 0-d
    {{3}, {2, 1, 3}},     // trailing dims
    {{1, 4}, {3, 1}},     // outer product
    {{2, 3, 4}, {4}},     // trailing vector
    {{2, 3, 4}, {3, 1}},  // middle dim
    {{1}, {}},            // one element each
    {{0}, {1}},           // zero-size with size-1
    {{3, 0}, {1, 0}},     // zero-size both
    {{3, 0}, {3, 1}},     // zero-size broadcast against size 1
    {{2, 1, 3, 1}, {1, 4, 1, 5}},
};

bool pair_allowed(const BinarySpec& op, DType a, DType b) {
  return op.bool_ok || (a != kBool && b != kBool);
}

}  // namespace

TEST_CASE("binary ops: tensor-tensor with promotion, broadcasting and layouts") {
  uint64_t seed = 10000;
  for (const BinarySpec& op : binary_specs()) {
    for (const DTypePair& dp : kDTypePairs) {
      if (!pair_allowed(op, dp.a, dp.b)) continue;
      const DType promoted = promote(dp.a, dp.b);
      const DType compute = compute_dtype(op, promoted), out = result_dtype(op, promoted);
      for (const ShapePair& sp : kBroadcastPairs) {
        for (size_t li = 0; li < 3; ++li) {
          Layout la = kAllLayouts[li], lb = kAllLayouts[(li + 1) % 3];
          Array a = random_array(dp.a, sp.a, ++seed, lhs_range(op, dp.a));
          Array b = random_array(dp.b, sp.b, ++seed, rhs_range(op, dp.b));
          Tensor x = make_tensor(a, la), y = make_tensor(b, lb);
          std::string what = std::string(op.name) + " " + str(dp.a) + str(sp.a) + " " +
                             layout_name(la) + " with " + str(dp.b) + str(sp.b) + " " +
                             layout_name(lb);
          Tensor r = op.call(x, y);
          check_tensor(r, ref_binary(a, b, compute, out, op.f), what);
          check_tensor(x, a, what + " (lhs unchanged)");
          check_tensor(y, b, what + " (rhs unchanged)");
        }
      }
    }
  }
}

TEST_CASE("binary ops: tensor-scalar and scalar-first forms") {
  uint64_t seed = 20000;
  const std::vector<Scalar> scalars = {Scalar(3), Scalar(0.5), Scalar(-1.25), Scalar(true)};
  for (const BinarySpec& op : binary_specs()) {
    for (DType dt : kAllDTypes) {
      for (const Scalar& s : scalars) {
        if (!op.bool_ok && (dt == kBool || s.is_bool())) continue;
        const DType promoted = promote_scalar(dt, s);
        const DType compute = compute_dtype(op, promoted), out = result_dtype(op, promoted);
        for (Layout layout : kAllLayouts) {
          Array a = random_array(dt, {3, 4}, ++seed, lhs_range(op, dt));
          Array b = scalar_array(s);
          Tensor x = make_tensor(a, layout);
          std::string what = std::string(op.name) + " " + str(dt) + "[3, 4] " +
                             layout_name(layout) + " with scalar " + s.to_string();
          check_tensor(op.call_scalar(x, s), ref_binary(a, b, compute, out, op.f), what);
          // scalar first: s op x
          Array pos = random_array(dt, {3, 4}, ++seed, rhs_range(op, dt));
          Tensor xp = make_tensor(pos, layout);
          check_tensor(xp.rscalar(op.id, s), ref_binary(b, pos, compute, out, op.f),
                       what + " (scalar first)");
        }
      }
    }
  }
}

TEST_CASE("operators: arithmetic and comparisons, with scalars on either side") {
  Array a = random_array(kF32, {3, 5}, 31, Range{-3, 3, 0.5});
  Array b = random_array(kF32, {5}, 32, Range{-3, 3, 0.5, true});
  Tensor x = make_tensor(a, Layout::ColumnMajor), y = make_tensor(b, Layout::Padded);
  auto bin = [&](const Array& l, const Array& r, auto f, DType out = kF32) {
    return ref_binary(l, r, kF32, out, f);
  };
  auto plus = [](double p, double q) { return p + q; };
  auto minus = [](double p, double q) { return p - q; };
  auto times = [](double p, double q) { return p * q; };
  auto over = [](double p, double q) { return p / q; };
  check_tensor(x + y, bin(a, b, plus), "x + y");
  check_tensor(x - y, bin(a, b, minus), "x - y");
  check_tensor(x * y, bin(a, b, times), "x * y");
  check_tensor(x / y, bin(a, b, over), "x / y");
  Array two = scalar_array(Scalar(2.0)), three = scalar_array(Scalar(3));
  check_tensor(x + 2.0, bin(a, two, plus), "x + 2.0");
  check_tensor(x - 2.0, bin(a, two, minus), "x - 2.0");
  check_tensor(x * 3, bin(a, three, times), "x * 3");
  check_tensor(x / 3, bin(a, three, over), "x / 3");
  check_tensor(2.0 + x, bin(two, a, plus), "2.0 + x");
  check_tensor(2.0 - x, bin(two, a, minus), "2.0 - x");
  check_tensor(3 * x, bin(three, a, times), "3 * x");
  check_tensor(2.0 / y, bin(two, b, over), "2.0 / y");
  check_tensor(-x, ref_unary(a, kF32, kF32, [](double p) { return -p; }), "-x");
  auto cmp = [&](auto f) { return ref_binary(a, b, kF32, kBool, f); };
  check_tensor(x == y, cmp([](double p, double q) { return double(p == q); }), "x == y");
  check_tensor(x != y, cmp([](double p, double q) { return double(p != q); }), "x != y");
  check_tensor(x < y, cmp([](double p, double q) { return double(p < q); }), "x < y");
  check_tensor(x <= y, cmp([](double p, double q) { return double(p <= q); }), "x <= y");
  check_tensor(x > y, cmp([](double p, double q) { return double(p > q); }), "x > y");
  check_tensor(x >= y, cmp([](double p, double q) { return double(p >= q); }), "x >= y");
  Array half = scalar_array(Scalar(0.5));
  check_tensor(x == 0.5,
               ref_binary(a, half, kF32, kBool, [](double p, double q) { return double(p == q); }),
               "x == 0.5");
  check_tensor(x < 0.5,
               ref_binary(
                   a, half, kF32, kBool, [](double p, double q) { return double(p < q); }),
               "x < 0.5");
  check_tensor(x >= 0.5,
               ref_binary(a, half, kF32, kBool, [](double p, double q) { return double(p >= q); }),
               "x >= 0.5");

  // Compound assignment writes into the left operand's storage.
  Tensor z = make_tensor(a, Layout::Padded);
  auto storage = z.storage();
  z += y;
  z -= 1.0;
  z *= y;
  z /= 2;
  Array e = bin(bin(bin(a, b, plus), scalar_array(Scalar(1.0)), minus), b, times);
  e = bin(e, scalar_array(Scalar(2)), over);
  check_tensor(z, e, "((x + y - 1) * y) / 2 with compound assignment");
  CHECK(z.storage() == storage);
}

TEST_CASE("promotion of a float scalar with int tensors, and true division") {
  Tensor i32 = tensor_of(kI32, {3}, {1, 2, 7});
  Tensor i64 = tensor_of(kI64, {3}, {1, 2, 7});
  Tensor b = tensor_of(kBool, {3}, {1, 0, 1});
  CHECK(str((i32 + 0.5).dtype()) == "float32");
  CHECK(str((i64 * 1.5).dtype()) == "float32");
  CHECK(str((i32 + 2).dtype()) == "int32");
  CHECK(str((i64 + 2).dtype()) == "int64");
  CHECK(str((b + 2).dtype()) == "int64");
  CHECK(str((b + 2.0).dtype()) == "float32");
  CHECK(str((i32 + i64).dtype()) == "int64");
  CHECK(str((i32 / 2).dtype()) == "float32");
  CHECK(str((i64 / i64).dtype()) == "float32");
  CHECK(str((tensor_of(kF64, {1}, {1}) / i32).dtype()) == "float64");
  CHECK(str((i32 < 2.5).dtype()) == "bool");
  check_tensor(i32 / 2, make_array(kF32, {3}, {0.5, 1.0, 3.5}), "int32 / 2");
  check_tensor(i64 / i32, make_array(kF32, {3}, {1, 1, 1}), "int64 / int32");
  check_tensor(tensor_of(kI32, {3}, {1, -1, 0}) / tensor_of(kI32, {3}, {0, 0, 0}),
               make_array(kF32, {3}, {INFINITY, -INFINITY, NAN}), "int / 0");
  check_tensor(i32 + 0.5, make_array(kF32, {3}, {1.5, 2.5, 7.5}), "int32 + 0.5");
  check_tensor(i64.pow(2), make_array(kI64, {3}, {1, 4, 49}), "int64 pow 2");
  check_tensor(i64.pow(0.5), make_array(kF32, {3}, {1, std::sqrt(2.0), std::sqrt(7.0)}),
               "int64 pow 0.5");
  check_tensor(i64.rscalar(OpId::pow, 2), make_array(kI64, {3}, {2, 4, 128}), "2 ** int64");
  check_tensor(i32 < 2.5, make_array(kBool, {3}, {1, 1, 0}), "int32 < 2.5");
  check_tensor(i32.maximum(1.5), make_array(kF32, {3}, {1.5, 2, 7}), "int32 maximum 1.5");
  check_tensor(b * b, make_array(kBool, {3}, {1, 0, 1}), "bool * bool");
  check_tensor(b + b, make_array(kBool, {3}, {1, 0, 1}), "bool + bool");
}

TEST_CASE("binary ops: NaN propagation in maximum/minimum and comparisons") {
  Tensor x = tensor_of(kF64, {4}, {NAN, 1.0, NAN, -2.0});
  Tensor y = tensor_of(kF64, {4}, {0.0, NAN, NAN, 3.0});
  check_tensor(x.maximum(y), make_array(kF64, {4}, {NAN, NAN, NAN, 3.0}), "maximum with NaN");
  check_tensor(x.minimum(y), make_array(kF64, {4}, {NAN, NAN, NAN, -2.0}), "minimum with NaN");
  check_tensor(x.eq(y), make_array(kBool, {4}, {0, 0, 0, 0}), "eq with NaN");
  check_tensor(x.ne(y), make_array(kBool, {4}, {1, 1, 1, 1}), "ne with NaN");
  check_tensor(x.lt(y), make_array(kBool, {4}, {0, 0, 0, 1}), "lt with NaN");
  check_tensor(x.ge(y), make_array(kBool, {4}, {0, 0, 0, 0}), "ge with NaN");
}

TEST_CASE("binary ops / remainder and fmod: signs, zero divisors") {
  const double inf = std::numeric_limits<double>::infinity();
  // The values torch gives.
  Tensor a = tensor_of(kI32, {5}, {-3, -3, 3, 3, 5}), b = tensor_of(kI32, {5}, {2, -2, 2, -2, 5});
  check_tensor(a.remainder(b), make_array(kI32, {5}, {1, -1, 1, -1, 0}), "int remainder");
  check_tensor(a.fmod(b), make_array(kI32, {5}, {-1, -1, 1, 1, 0}), "int fmod");
  check_tensor(a.remainder(-2), make_array(kI32, {5}, {-1, -1, -1, -1, -1}), "int remainder -2");
  check_tensor(a.rscalar(OpId::remainder, 7), make_array(kI32, {5}, {-2, -2, 1, 1, 2}),
               "7 remainder int");
  Tensor lowest = tensor_of(kI64, {2}, {double(INT64_MIN), -7});
  check_tensor(lowest.remainder(-1), make_array(kI64, {2}, {0, 0}), "lowest int64 remainder -1");
  check_tensor(lowest.fmod(-1), make_array(kI64, {2}, {0, 0}), "lowest int64 fmod -1");
  Tensor x = tensor_of(kF64, {5}, {-1.5, 1.5, 5.0, -1.0, -1.0});
  Tensor y = tensor_of(kF64, {5}, {1.0, -1.0, 0.0, inf, -inf});
  check_tensor(x.remainder(y), make_array(kF64, {5}, {0.5, -0.5, NAN, inf, -1.0}),
               "float remainder");
  check_tensor(x.fmod(y), make_array(kF64, {5}, {-0.5, 0.5, NAN, -1.0, -1.0}), "float fmod");
  check_tensor(tensor_of(kF32, {2}, {7.5, -7.5}).remainder(2), make_array(kF32, {2}, {1.5, 0.5}),
               "float32 remainder int scalar");
  // Integer division by zero is refused before anything is written (tensor, scalar, and the
  // scalar-first form's tensor divisor).
  Tensor zero = tensor_of(kI32, {5}, {1, 2, 0, 4, 5});
  Tensor kept = a.clone();
  for (OpId op : {OpId::remainder, OpId::fmod}) {
    const std::string name = op == OpId::remainder ? "remainder" : "fmod";
    CHECK_THROWS_WITH_AS(kept.apply_inplace(op, {}, &zero), doctest::Contains("division by zero"),
                         dtr::InvalidArgument);
    check_tensor(kept, make_array(kI32, {5}, {-3, -3, 3, 3, 5}), name + " in place, unchanged");
    CHECK_THROWS_WITH_AS(a.apply(op, {}, &zero), doctest::Contains(name.c_str()),
                         dtr::InvalidArgument);
    CHECK_THROWS_WITH_AS(zero.rscalar(op, 3), doctest::Contains("division by zero"),
                         dtr::InvalidArgument);
  }
  CHECK_THROWS_WITH_AS(a.remainder(0), doctest::Contains("division by zero"), dtr::InvalidArgument);
  CHECK_THROWS_WITH_AS(a.fmod(0), doctest::Contains("fmod"), dtr::InvalidArgument);
  // Bool operands are refused, naming the op and both dtypes.
  Tensor flags = tensor_of(kBool, {2}, {1, 0});
  CHECK_THROWS_WITH_AS(flags.remainder(flags), doctest::Contains("remainder"), dtr::DTypeError);
  CHECK_THROWS_WITH_AS(flags.fmod(flags), doctest::Contains("bool"), dtr::DTypeError);
}

TEST_CASE("compositions: clamp with tensor bounds, addcmul, addcdiv, lerp") {
  const double nan = std::nan("");
  Tensor x = tensor_of(kF32, {2, 3}, {-2.0, 0.5, 3.0, nan, 1.0, -1.0});
  Tensor lo = tensor_of(kF32, {3}, {-1.0, 1.0, nan}), hi = tensor_of(kF32, {2, 1}, {2.0, 0.0});
  // NaN in x or a bound gives NaN; a lower bound above the upper gives the upper (row 1).
  check_tensor(x.clamp(lo, hi), make_array(kF32, {2, 3}, {-1.0, 1.0, nan, nan, 0.0, nan}),
               "clamp(lo, hi) broadcast");
  check_tensor(x.clamp_min(lo), make_array(kF32, {2, 3}, {-1.0, 1.0, nan, nan, 1.0, nan}),
               "clamp_min");
  check_tensor(x.clamp_max(hi), make_array(kF32, {2, 3}, {-2.0, 0.5, 2.0, nan, 0.0, -1.0}),
               "clamp_max");
  CHECK(tensor_of(kI32, {2}, {1, 5}).clamp_max(tensor_of(kF64, {1}, {2.5})).dtype() == kF64);

  Array a = random_array(kF32, {3, 4}, 41), b = random_array(kF32, {3, 4}, 42);
  Array c = random_array(kF32, {4}, 43, Range{0.5, 2.0});
  Tensor t = make_tensor(a, Layout::ColumnMajor), t1 = make_tensor(b, Layout::Padded),
         t2 = make_tensor(c, Layout::Contiguous);
  auto ternary = [&](auto f) {
    Array r = a;
    for (int64_t i = 0; i < a.numel(); ++i) {
      const Sizes idx = unravel(i, a.shape);
      r.v[static_cast<size_t>(i)] = f(a.at(idx), b.at(idx), c.at({idx[1]}));
    }
    return r;
  };
  check_tensor(t.addcmul(t1, t2, 0.5),
               ternary([](double p, double q, double r) { return p + 0.5 * q * r; }), "addcmul");
  check_tensor(t.addcmul(t1, t2), ternary([](double p, double q, double r) { return p + q * r; }),
               "addcmul value 1");
  check_tensor(t.addcdiv(t1, t2, -2),
               ternary([](double p, double q, double r) { return p - 2 * q / r; }), "addcdiv");
  // lerp: torch's two forms either side of weight 0.5; weight 1 gives end exactly.
  for (double w : {0.0, 0.25, 0.5, 0.75, 1.0}) {
    check_tensor(t.lerp(t1, w),
                 ternary([w](double p, double q, double) { return p + w * (q - p); }),
                 "lerp " + std::to_string(w));
  }
  CHECK(t.lerp(t1, 1.0).to_vector<float>() == t1.to_vector<float>());  // end, exactly
  Tensor weights = tensor_of(kF32, {4}, {0.0, 0.3, 0.7, 1.0});
  Array by_column = a;
  const double ws[] = {0.0, 0.3, 0.7, 1.0};
  for (int64_t i = 0; i < a.numel(); ++i) {
    const Sizes idx = unravel(i, a.shape);
    const double w = ws[idx[1]];
    by_column.v[static_cast<size_t>(i)] = a.at(idx) + w * (b.at(idx) - a.at(idx));
  }
  check_tensor(t.lerp(t1, weights), by_column, "lerp with a tensor of weights");
}

TEST_CASE("binary ops / floor_divide and trunc_divide: signs, exact quotients, zero divisors") {
  Tensor a = tensor_of(kI32, {5}, {7, -7, 7, -7, 0}), b = tensor_of(kI32, {5}, {2, 2, -2, -2, 3});
  check_tensor(a.floor_divide(b), make_array(kI32, {5}, {3, -4, -4, 3, 0}), "int floor");
  check_tensor(a.trunc_divide(b), make_array(kI32, {5}, {3, -3, -3, 3, 0}), "int trunc");
  Tensor lowest = tensor_of(kI64, {1}, {static_cast<double>(std::numeric_limits<int64_t>::min())});
  CHECK(lowest.floor_divide(-1).item<int64_t>() == std::numeric_limits<int64_t>::min());
  const double inf = INFINITY;
  Tensor x = tensor_of(kF64, {5}, {7.5, -7.5, 1, -1, 0.3}),
         y = tensor_of(kF64, {5}, {2, 2, 0, 0, 0.1});
  check_tensor(x.floor_divide(y), make_array(kF64, {5}, {3, -4, inf, -inf, 2}), "float floor");
  check_tensor(x.trunc_divide(y), make_array(kF64, {5}, {3, -3, inf, -inf, 2}), "float trunc");
  CHECK(std::signbit(tensor_of(kF64, {1}, {0.0}).floor_divide(-2).item<double>()));  // -0
  CHECK(tensor_of(kF64, {1}, {-0.5}).floor_divide(2).item<double>() == -1.0);
  CHECK(std::signbit(tensor_of(kF64, {1}, {-0.5}).trunc_divide(2).item<double>()));
  CHECK_THROWS_WITH_AS(a.floor_divide(0), doctest::Contains("division by zero"),
                       dtr::InvalidArgument);
  CHECK_THROWS_WITH_AS(a.trunc_divide(a), doctest::Contains("division by zero"),
                       dtr::InvalidArgument);
}

TEST_CASE("the integer and logical binary ops / bitwise_not") {
  Tensor a = tensor_of(kI32, {4}, {12, -1, 0, 5}), b = tensor_of(kI64, {4}, {10, 7, -1, 3});
  check_tensor(a.bitwise_and(b), make_array(kI64, {4}, {8, 7, 0, 1}), "int32 & int64");
  check_tensor(a.bitwise_or(b), make_array(kI64, {4}, {14, -1, -1, 7}), "int32 | int64");
  check_tensor(a.bitwise_xor(b), make_array(kI64, {4}, {6, -8, -1, 6}), "int32 ^ int64");
  check_tensor(a.bitwise_and(6), make_array(kI32, {4}, {4, 6, 0, 4}), "int32 & 6");
  check_tensor(a.bitwise_not(), make_array(kI32, {4}, {-13, 0, -1, -6}), "~int32");
  Tensor p = tensor_of(kBool, {4}, {1, 1, 0, 0}), q = tensor_of(kBool, {4}, {1, 0, 1, 0});
  check_tensor(p.bitwise_and(q), make_array(kBool, {4}, {1, 0, 0, 0}), "bool &");
  check_tensor(p.bitwise_or(q), make_array(kBool, {4}, {1, 1, 1, 0}), "bool |");
  check_tensor(p.bitwise_xor(q), make_array(kBool, {4}, {0, 1, 1, 0}), "bool ^");
  check_tensor(p.bitwise_not(), make_array(kBool, {4}, {0, 0, 1, 1}), "~bool");
  check_tensor(p.bitwise_and(2), make_array(kI64, {4}, {0, 0, 0, 0}), "bool & 2 (int64)");
  Tensor c = a.clone();
  c.bitwise_xor_(tensor_of(kI32, {1}, {1}));
  check_tensor(c, make_array(kI32, {4}, {13, -2, 1, 4}), "^= broadcast in place");
  c.bitwise_not_();
  check_tensor(c, make_array(kI32, {4}, {-14, 1, -2, -5}), "~ in place");
  // Floats are refused, naming the op and the dtypes.
  Tensor f = tensor_of(kF32, {4}, {1, 2, 3, 4});
  CHECK_THROWS_WITH_AS(f.bitwise_and(a), doctest::Contains("bitwise_and"), dtr::DTypeError);
  CHECK_THROWS_WITH_AS(a.bitwise_or(1.5), doctest::Contains("float32"), dtr::DTypeError);
  CHECK_THROWS_WITH_AS(f.bitwise_not(), doctest::Contains("bitwise_not"), dtr::DTypeError);
  // The logical ops read any dtype as nonzero or not (NaN is true) and give bool.
  Tensor x = tensor_of(kF32, {4}, {0.0, NAN, 2.5, -0.0});
  check_tensor(x.logical_and(a), make_array(kBool, {4}, {0, 1, 0, 0}), "float and int");
  check_tensor(x.logical_or(0), make_array(kBool, {4}, {0, 1, 1, 0}), "float or 0");
  check_tensor(x.logical_xor(p), make_array(kBool, {4}, {1, 0, 1, 0}), "float xor bool");
}

namespace {

bool castable(DType from, DType to) {
  if (is_float(from) && !is_float(to)) return false;
  if (from != kBool && to == kBool) return false;
  return true;
}

const std::vector<ShapePair> kInplacePairs = {
    {{2, 3}, {2, 3}},    {{2, 3}, {3}}, {{2, 3}, {2, 1}}, {{4, 3, 2}, {}},
    {{4, 3, 2}, {3, 1}}, {{3, 0}, {1}}, {{}, {}},         {{5}, {1}},
};

}  // namespace

TEST_CASE("binary in-place ops: every op, castable dtype pairs, self in any layout") {
  uint64_t seed = 30000;
  for (const BinarySpec& op : binary_specs()) {
    for (const DTypePair& dp : kDTypePairs) {
      if (!pair_allowed(op, dp.a, dp.b)) continue;
      const DType promoted = promote(dp.a, dp.b);
      const DType compute = compute_dtype(op, promoted), out = result_dtype(op, promoted);
      for (const ShapePair& sp : kInplacePairs) {
        for (size_t li = 0; li < 3; ++li) {
          Layout la = kAllLayouts[li], lb = kAllLayouts[(li + 2) % 3];
          Array a = random_array(dp.a, sp.a, ++seed, lhs_range(op, dp.a));
          Array b = random_array(dp.b, sp.b, ++seed, rhs_range(op, dp.b));
          Tensor x = make_tensor(a, la), y = make_tensor(b, lb);
          std::string what = std::string(op.name) + "_ into " + str(dp.a) + str(sp.a) + " " +
                             layout_name(la) + " from " + str(dp.b) + str(sp.b) + " " +
                             layout_name(lb);
          if (!castable(out, dp.a)) {
            DTR_CHECK_ERROR(dtr::DTypeError, op.call_inplace(x, y), op.name, str(dp.a));
            check_tensor(x, a, what + " (refused, unchanged)");
            continue;
          }
          auto storage = x.storage();
          op.call_inplace(x, y);
          Array expected = ref_binary(a, b, compute, out, op.f);
          expected = make_array(dp.a, expected.shape, expected.v);
          check_tensor(x, expected, what);
          CHECK_MESSAGE(x.storage() == storage, what);
          check_untouched(x, what);
          check_tensor(y, b, what + " (source unchanged)");
        }
      }
    }
  }
}

TEST_CASE("binary in-place ops with a scalar") {
  uint64_t seed = 40000;
  const std::vector<Scalar> scalars = {Scalar(2), Scalar(0.5), Scalar(true)};
  for (const BinarySpec& op : binary_specs()) {
    for (DType dt : kAllDTypes) {
      for (const Scalar& s : scalars) {
        if (!op.bool_ok && (dt == kBool || s.is_bool())) continue;
        const DType promoted = promote_scalar(dt, s);
        const DType compute = compute_dtype(op, promoted), out = result_dtype(op, promoted);
        Array a = random_array(dt, {2, 3, 2}, ++seed, lhs_range(op, dt));
        Tensor x = make_tensor(a, Layout::Padded);
        std::string what =
            std::string(op.name) + "_ into " + str(dt) + "[2, 3, 2] with scalar " + s.to_string();
        if (!castable(out, dt)) {
          DTR_CHECK_ERROR(dtr::DTypeError, op.call_inplace_scalar(x, s), op.name, str(dt));
          continue;
        }
        op.call_inplace_scalar(x, s);
        Array expected = ref_binary(a, scalar_array(s), compute, out, op.f);
        check_tensor(x, make_array(dt, expected.shape, expected.v), what);
        check_untouched(x, what);
      }
    }
  }
}

TEST_CASE("in-place ops on non-contiguous views write through to the base") {
  SUBCASE("x.t().add_(y)") {
    Array a = random_array(kF32, {3, 4}, 51), b = random_array(kF32, {4, 3}, 52);
    Tensor x = make_tensor(a), y = make_tensor(b, Layout::Padded);
    x.t().add_(y);
    Array e = a;
    for (int64_t i = 0; i < 3; ++i)
      for (int64_t j = 0; j < 4; ++j)
        e.v[static_cast<size_t>(i * 4 + j)] = cast_to(
            kF32, a.v[static_cast<size_t>(i * 4 + j)] + b.v[static_cast<size_t>(j * 3 + i)]);
    check_tensor(x, e, "x.t().add_(y)");
  }
  SUBCASE("slice with step then mul_") {
    Array a = random_array(kI64, {10}, 53);
    Tensor x = make_tensor(a);
    x.slice(0, 1, 10, 3).mul_(2);
    Array e = a;
    for (size_t i : {1u, 4u, 7u}) e.v[i] *= 2;
    check_tensor(x, e, "x.slice(0, 1, 10, 3).mul_(2)");
  }
  SUBCASE("select row and column, broadcast other") {
    Array a = random_array(kF64, {4, 5}, 54), b = random_array(kF64, {1}, 55);
    Tensor x = make_tensor(a, Layout::ColumnMajor), y = make_tensor(b);
    x.select(1, -2).sub_(y);
    Array e = a;
    for (int64_t i = 0; i < 4; ++i) e.v[static_cast<size_t>(i * 5 + 3)] -= b.v[0];
    check_tensor(x, e, "x.select(1, -2).sub_(y)");
  }
  SUBCASE("dtype-changing in-place ops into transposed views") {
    Array a = random_array(kI32, {3, 4}, 58), b = random_array(kI64, {4, 3}, 59);
    Tensor x = make_tensor(a), y = make_tensor(b, Layout::Padded);
    x.t().add_(y);  // int64 result stored into an int32 view
    Array e = a;
    for (int64_t i = 0; i < 3; ++i)
      for (int64_t j = 0; j < 4; ++j)
        e.v[static_cast<size_t>(i * 4 + j)] += b.v[static_cast<size_t>(j * 3 + i)];
    check_tensor(x, e, "int32 x.t().add_(int64 y)");
    Array f = random_array(kF32, {3, 4}, 60, Range{-2, 2, 0.5});
    Tensor z = make_tensor(f, Layout::Padded);
    z.t().lt_(0.5);  // bool result stored as 0/1 floats
    check_tensor(z, ref_unary(f, kF32, kF32, [](double v) { return v < 0.5 ? 1.0 : 0.0; }),
                 "float32 z.t().lt_(0.5)");
    check_untouched(z, "lt_ through a view of a padded tensor");
  }
  SUBCASE("permuted 3-d view with a broadcast operand") {
    Array a = random_array(kF32, {2, 3, 4}, 56), b = random_array(kF32, {3, 1}, 57);
    Tensor x = make_tensor(a), y = make_tensor(b);
    Tensor v = x.permute({2, 1, 0});  // [4, 3, 2]
    v.mul_(y.unsqueeze(0).expand({4, 3, 2}));
    Array e = a;
    for (int64_t i = 0; i < 2; ++i)
      for (int64_t j = 0; j < 3; ++j)
        for (int64_t k = 0; k < 4; ++k) {
          size_t p = static_cast<size_t>((i * 3 + j) * 4 + k);
          e.v[p] = cast_to(kF32, a.v[p] * b.v[static_cast<size_t>(j)]);
        }
    check_tensor(x, e, "x.permute({2, 1, 0}).mul_(expanded y)");
  }
}

TEST_CASE("aliasing: in-place ops whose operand overlaps self") {
  SUBCASE("x.add_(x)") {
    Array a = random_array(kF32, {4, 5}, 61);
    Tensor x = make_tensor(a, Layout::Padded);
    x.add_(x);
    check_tensor(x, ref_unary(a, kF32, kF32, [](double v) { return 2 * v; }), "x.add_(x)");
  }
  SUBCASE("x.mul_(x) and x.sub_(x)") {
    Array a = random_array(kF64, {3, 3}, 62);
    Tensor x = make_tensor(a);
    x.mul_(x);
    check_tensor(x, ref_unary(a, kF64, kF64, [](double v) { return v * v; }), "x.mul_(x)");
    x.sub_(x);
    check_tensor(x, filled(kF64, {3, 3}, 0.0), "x.sub_(x)");
  }
  SUBCASE("x.add_(x.t()) and x.t().sub_(x) on square matrices") {
    for (int64_t n : {2, 5, 33}) {
      for (DType dt : {kF32, kF64, kI64}) {
        CAPTURE(n);
        CAPTURE(str(dt));
        Array a = random_array(dt, {n, n}, 63 + static_cast<uint64_t>(n));
        Tensor x = make_tensor(a);
        Tensor expected = x + x.t();
        Array e = read(expected);
        x.add_(x.t());
        check_tensor(x, e, "x.add_(x.t()) equals x + x.t()");
        Tensor z = make_tensor(a, Layout::ColumnMajor);
        z.t().sub_(z);
        Array e2 = a;
        for (int64_t i = 0; i < n; ++i)
          for (int64_t j = 0; j < n; ++j)
            e2.v[static_cast<size_t>(j * n + i)] =
                a.v[static_cast<size_t>(j * n + i)] - a.v[static_cast<size_t>(i * n + j)];
        check_tensor(z, e2, "z.t().sub_(z) equals (z.t() - z).t()");
      }
    }
  }
  SUBCASE("copy_ from its own transpose") {
    Array a = random_array(kF32, {6, 6}, 71);
    Tensor x = make_tensor(a);
    x.copy_(x.t());
    Array e = a;
    for (int64_t i = 0; i < 6; ++i)
      for (int64_t j = 0; j < 6; ++j)
        e.v[static_cast<size_t>(i * 6 + j)] = a.v[static_cast<size_t>(j * 6 + i)];
    check_tensor(x, e, "x.copy_(x.t())");
  }
  SUBCASE("broadcast from a row of self") {
    Array a = random_array(kF64, {4, 3}, 72);
    Tensor x = make_tensor(a);
    x.add_(x.select(0, 0));
    Array e = a;
    for (int64_t i = 0; i < 4; ++i)
      for (int64_t j = 0; j < 3; ++j)
        e.v[static_cast<size_t>(i * 3 + j)] += a.v[static_cast<size_t>(j)];
    check_tensor(x, e, "x.add_(x.select(0, 0)) uses the row's old values");
  }
}

TEST_CASE("zero-size tensors: elementwise ops") {
  for (const Sizes& shape : std::vector<Sizes>{{0}, {3, 0}, {0, 4}}) {
    CAPTURE(str(shape));
    Tensor x = tensor_of(kF32, shape, {});
    check_tensor(x.exp(), filled(kF32, shape, 0), "exp of empty");
    check_tensor(x + 1.0, filled(kF32, shape, 0), "empty + 1.0");
    check_tensor(x + x, filled(kF32, shape, 0), "empty + empty");
    check_tensor(x < x, filled(kBool, shape, 0), "empty < empty");
    x.add_(1.0);
    x.exp_();
    check_tensor(x, filled(kF32, shape, 0), "in-place on empty");
  }
  check_tensor(tensor_of(kF32, {3, 0}, {}) + tensor_of(kF32, {3, 1}, {1, 2, 3}),
               filled(kF32, {3, 0}, 0), "[3, 0] + [3, 1]");
  check_tensor(tensor_of(kF32, {0}, {}) * tensor_of(kF32, {2, 1}, {1, 2}), filled(kF32, {2, 0}, 0),
               "[0] * [2, 1]");
}

// ---- clamp ----

TEST_CASE("clamp and clamp_ with both, one or inverted bounds") {
  struct Bounds {
    Scalar lo, hi;
  };
  uint64_t seed = 50000;
  for (DType dt : {kF32, kF64, kI32, kI64}) {
    std::vector<Bounds> bounds;
    if (is_float(dt))
      bounds = {{Scalar(-0.5), Scalar(1.25)},
                {Scalar(0.3), Scalar()},
                {Scalar(), Scalar(-0.7)},
                {Scalar(1.0), Scalar(-1.0)},
                {Scalar(-1), Scalar(1)}};
    else
      bounds = {{Scalar(-2), Scalar(3)},
                {Scalar(1), Scalar()},
                {Scalar(), Scalar(-4)},
                {Scalar(2), Scalar(-2)}};
    for (const Bounds& bd : bounds) {
      for (const Sizes& shape : std::vector<Sizes>{{}, {9}, {3, 4}, {2, 0}}) {
        for (Layout layout : kAllLayouts) {
          Array a = random_array(dt, shape, ++seed);
          double lo = bd.lo.is_none() ? -INFINITY : cast_to(dt, scalar_value(bd.lo));
          double hi = bd.hi.is_none() ? INFINITY : cast_to(dt, scalar_value(bd.hi));
          // torch: min(max(x, lo), hi), so hi wins when lo > hi.
          Array e = ref_unary(a, dt, dt, [&](double v) { return std::min(std::max(v, lo), hi); });
          std::string what = "clamp " + str(dt) + str(shape) + " " + layout_name(layout) + " [" +
                             bd.lo.to_string() + ", " + bd.hi.to_string() + "]";
          Tensor x = make_tensor(a, layout);
          check_tensor(x.clamp(bd.lo, bd.hi), e, what);
          check_tensor(x, a, what + " (input unchanged)");
          x.clamp_(bd.lo, bd.hi);
          check_tensor(x, e, what + " in place");
        }
      }
    }
  }
  Tensor n = tensor_of(kF32, {3}, {NAN, -5, 5});
  check_tensor(n.clamp(Scalar(-1.0), Scalar(1.0)), make_array(kF32, {3}, {NAN, -1, 1}),
               "clamp keeps NaN");
  Tensor sliced = tensor_of(kF64, {6}, {-3, -2, -1, 1, 2, 3});
  sliced.slice(0, 0, 6, 2).clamp_(Scalar(0.0));
  check_tensor(sliced, make_array(kF64, {6}, {0, -2, 0, 1, 2, 3}), "clamp_ on a stepped slice");
}

TEST_CASE("elementwise ops on larger tensors (vectorized runs and their remainders)") {
  uint64_t seed = 60000;
  for (Layout layout : kAllLayouts) {
    for (const UnarySpec& op : unary_specs()) {
      for (DType dt : {kF32, kI64}) {
        Array a = random_array(dt, {37, 53}, ++seed, is_float(dt) ? op.float_range : op.int_range);
        const DType out = op.to_float ? to_float(dt) : dt;
        std::string what = std::string(op.name) + " " + str(dt) + "[37, 53] " + layout_name(layout);
        check_tensor(op.call(make_tensor(a, layout)), ref_unary(a, out, out, op.f), what);
      }
    }
    for (const BinarySpec& op : binary_specs()) {
      for (const ShapePair& sp : std::vector<ShapePair>{
               {{37, 53}, {37, 53}}, {{37, 53}, {53}}, {{37, 1}, {37, 53}}, {{1, 53}, {37, 1}}}) {
        for (const DTypePair& dp : std::vector<DTypePair>{{kF32, kF32}, {kF64, kI32}}) {
          Array a = random_array(dp.a, sp.a, ++seed, lhs_range(op, dp.a));
          Array b = random_array(dp.b, sp.b, ++seed, rhs_range(op, dp.b));
          const DType promoted = promote(dp.a, dp.b);
          std::string what = std::string(op.name) + " " + str(dp.a) + str(sp.a) + " with " +
                             str(dp.b) + str(sp.b) + " " + layout_name(layout);
          Array e = ref_binary(a, b, compute_dtype(op, promoted), result_dtype(op, promoted), op.f);
          check_tensor(op.call(make_tensor(a, layout), make_tensor(b, layout)), e, what);
          if (sp.a == e.shape && castable(e.dtype, dp.a)) {
            Tensor x = make_tensor(a, layout);
            op.call_inplace(x, make_tensor(b));
            check_tensor(x, make_array(dp.a, e.shape, e.v), what + " in place");
          }
        }
      }
    }
  }
}

TEST_CASE("int64 values beyond 2^53 stay exact") {
  const int64_t big = (int64_t{1} << 53) + 1;  // not representable as a double
  auto vals = [](const Tensor& t) { return t.to_vector<int64_t>(); };
  Tensor x = dtr::local::from_vector<int64_t>({big, big + 2, -big});
  Tensor one = dtr::local::from_vector<int64_t>({1, 1, 1});
  CHECK(vals(x + one) == std::vector<int64_t>{big + 1, big + 3, -big + 1});
  CHECK(vals(x - one) == std::vector<int64_t>{big - 1, big + 1, -big - 1});
  CHECK(vals(x + 2) == std::vector<int64_t>{big + 2, big + 4, -big + 2});
  CHECK(vals(x * 3) == std::vector<int64_t>{3 * big, 3 * (big + 2), -3 * big});
  CHECK(vals(x.maximum(Scalar(big + 1))) == std::vector<int64_t>{big + 1, big + 2, big + 1});
  CHECK(vals(x.eq(Scalar(big - 1))) == std::vector<int64_t>{0, 0, 0});
  CHECK(vals(x.gt(Scalar(big - 1))) == std::vector<int64_t>{1, 1, 0});
  CHECK(x.sum().item().to_int() == big + 2);
  CHECK(x.max().item().to_int() == big + 2);
  CHECK(x.argmin().item().to_int() == 2);
  CHECK(vals(x.clamp(Scalar(-big + 1), Scalar(big + 1))) ==
        std::vector<int64_t>{big, big + 1, -big + 1});
  CHECK(vals(x.neg()) == std::vector<int64_t>{-big, -big - 2, big});
  CHECK(x.dot(one).item().to_int() == big + 2);
  CHECK(vals(dtr::local::full({2}, big, kI64)) == std::vector<int64_t>{big, big});
  Tensor f = dtr::local::zeros({2}, kI64);
  f.fill_(big);
  CHECK(vals(f) == std::vector<int64_t>{big, big});
  Tensor c = dtr::local::zeros({3}, kI64);
  c.copy_(x);
  CHECK(vals(c) == vals(x));
  CHECK(vals(x.to(kI64)) == vals(x));
  CHECK(vals(x.clone()) == vals(x));
  CHECK(vals(dtr::local::arange(Scalar(big - 1), Scalar(big + 3))) ==
        std::vector<int64_t>{big - 1, big, big + 1, big + 2});
  CHECK(vals(dtr::local::arange(Scalar(big), Scalar(big + 1))) == std::vector<int64_t>{big});
  CHECK(vals(dtr::local::arange(Scalar(big), Scalar(big - 6), Scalar(-2))) ==
        std::vector<int64_t>{big, big - 2, big - 4});
}

TEST_CASE("integer pow with negative exponents: refused, or torch's values, never half-done") {
  Tensor x = tensor_of(kI64, {3}, {2, 3, 4});
  DTR_CHECK_ERROR(dtr::InvalidArgument, x.pow(-1), "pow");
  DTR_CHECK_ERROR(dtr::InvalidArgument, x.pow_(-2), "pow");
  check_tensor(x, make_array(kI64, {3}, {2, 3, 4}), "x after a refused pow_(-2)");
  // Tensor exponents: torch gives 0 for |base| > 1 (and 1 / -1 for bases 1 / -1); an
  // implementation may refuse instead, but then must leave self untouched.
  Tensor base = tensor_of(kI64, {4}, {2, 3, 1, -1});
  Tensor e = tensor_of(kI64, {4}, {2, -1, -3, -3});
  try {
    Tensor r = base.pow(e);
    check_tensor(r, make_array(kI64, {4}, {4, 0, 1, -1}), "int pow with negative tensor exponent");
  } catch (const dtr::InvalidArgument& err) {
    CHECK(std::string(err.what()).find("pow") != std::string::npos);
  }
  try {
    base.pow_(e);
    check_tensor(base, make_array(kI64, {4}, {4, 0, 1, -1}), "int pow_ with negative exponent");
  } catch (const dtr::InvalidArgument&) {
    check_tensor(base, make_array(kI64, {4}, {2, 3, 1, -1}),
                 "pow_ refused with a negative exponent but left self half-written");
  }
  // Negative bases with integral exponents.
  check_tensor(tensor_of(kI32, {3}, {-2, -3, 5}).pow(3), make_array(kI32, {3}, {-8, -27, 125}),
               "negative int base");
  check_tensor(tensor_of(kF64, {2}, {-2, -0.5}).pow(3.0), make_array(kF64, {2}, {-8, -0.125}),
               "negative float base, integral exponent");
  check_tensor(tensor_of(kF32, {3}, {1, -1, 0}) / tensor_of(kF32, {3}, {0, 0, 0}),
               make_array(kF32, {3}, {INFINITY, -INFINITY, NAN}), "float division by zero");
}
