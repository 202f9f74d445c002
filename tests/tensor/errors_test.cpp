// Every refusal: the exception's type and a message that names the op and the shapes,
// dtypes, dims or indices involved. Shapes print as "[2, 3]", dtypes as "float32".
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "tensor/reference.hpp"

using namespace dtr_test;
namespace local = dtr::local;
using dtr::OpAttrs;
using dtr::OpId;
using dtr::OpKind;

TEST_CASE("errors: broadcasting mismatch names the op and both shapes") {
  Tensor a = local::zeros({2, 3}), b = local::zeros({4});
  CHECK_THROWS_WITH_AS(a.add(b), doctest::Contains("add"), dtr::ShapeError);
  CHECK_THROWS_WITH_AS(a.add(b), doctest::Contains("[2, 3]"), dtr::ShapeError);
  CHECK_THROWS_WITH_AS(a.add(b), doctest::Contains("[4]"), dtr::ShapeError);
  // Every binary op of the table, through execute.
  for (const dtr::OpDef& op : dtr::all_ops()) {
    if (op.kind != OpKind::Binary) continue;
    INFO("op: " << std::string(op.name));
    std::vector<Tensor> in = {a, b};
    DTR_CHECK_ERROR(dtr::ShapeError, local::execute(op.id, in, {}, false), op.name, "[2, 3]",
                    "[4]");
    DTR_CHECK_ERROR(dtr::ShapeError, local::execute(op.id, in, {}, true), op.name, "[2, 3]", "[4]");
  }
  DTR_CHECK_ERROR(dtr::ShapeError, a - local::zeros({2, 2}), "sub", "[2, 3]", "[2, 2]");
  DTR_CHECK_ERROR(dtr::ShapeError, local::zeros({5, 1, 3}) * local::zeros({2, 4, 1}), "mul",
                  "[5, 1, 3]", "[2, 4, 1]");
  DTR_CHECK_ERROR(dtr::ShapeError, local::zeros({0}) + local::zeros({2}), "add", "[0]", "[2]");
  DTR_CHECK_ERROR(dtr::ShapeError, dtr::broadcast_shapes("myop", {2, 3}, {3, 2}), "myop", "[2, 3]",
                  "[3, 2]");
}

TEST_CASE("errors: in-place ops refuse to broadcast self or to narrow the dtype") {
  Tensor v = local::zeros({3}), m = local::zeros({2, 3});
  DTR_CHECK_ERROR(dtr::ShapeError, v.add_(m), "add", "[3]", "[2, 3]");
  DTR_CHECK_ERROR(dtr::ShapeError, local::zeros({2, 1}).mul_(m), "mul", "[2, 1]", "[2, 3]");
  DTR_CHECK_ERROR(dtr::ShapeError, local::zeros({}).sub_(v), "sub", "[]", "[3]");
  check_tensor(v, filled(kF32, {3}, 0), "refused in-place op leaves self unchanged");

  Tensor i = local::zeros({2, 3}, kI32);
  DTR_CHECK_ERROR(dtr::DTypeError, i.add_(m), "add", "int32", "float32");
  DTR_CHECK_ERROR(dtr::DTypeError, i.add_(0.5), "add", "int32", "float32");
  DTR_CHECK_ERROR(dtr::DTypeError, i.div_(2), "div", "int32", "float32");
  DTR_CHECK_ERROR(dtr::DTypeError, i.div_(i), "div", "int32", "float32");
  DTR_CHECK_ERROR(dtr::DTypeError, i.exp_(), "exp", "int32", "float32");
  DTR_CHECK_ERROR(dtr::DTypeError, i.sqrt_(), "sqrt", "int32");
  DTR_CHECK_ERROR(dtr::DTypeError, i.pow_(local::zeros({3}, kF64)), "pow", "int32", "float64");
  Tensor b = local::zeros({3}, kBool);
  DTR_CHECK_ERROR(dtr::DTypeError, b.add_(1), "add", "bool", "int64");
  DTR_CHECK_ERROR(dtr::DTypeError, b.maximum_(local::zeros({3}, kI32)), "maximum", "bool", "int32");
  check_tensor(i, filled(kI32, {2, 3}, 0), "refused in-place op leaves self unchanged");
  // Allowed: a wider result that can be cast back, and comparisons into any dtype.
  CHECK_NOTHROW(i.add_(local::ones({3}, kI64)));
  CHECK_NOTHROW(local::zeros({3}).add_(local::ones({3}, kF64)));
  CHECK_NOTHROW(i.lt_(m));
}

TEST_CASE("errors: linear algebra shapes and dtypes") {
  DTR_CHECK_ERROR(dtr::ShapeError, local::zeros({2, 3}).matmul(local::zeros({4, 5})), "matmul",
                  "[2, 3]", "[4, 5]");
  DTR_CHECK_ERROR(dtr::ShapeError, local::zeros({3}).matmul(local::zeros({4})), "matmul", "[3]",
                  "[4]");
  DTR_CHECK_ERROR(dtr::ShapeError, local::zeros({2, 3, 4}).matmul(local::zeros({3, 4, 5})),
                  "matmul", "[2, 3, 4]", "[3, 4, 5]");
  DTR_CHECK_ERROR(dtr::InvalidArgument, local::zeros({}).matmul(local::zeros({3})), "matmul");
  DTR_CHECK_ERROR(dtr::DTypeError, local::zeros({2, 3}).matmul(local::zeros({3, 2}, kF64)),
                  "matmul", "float32", "float64");
  DTR_CHECK_ERROR(dtr::DTypeError, local::zeros({2, 3}, kI32).matmul(local::zeros({3, 2}, kI64)),
                  "matmul", "int32", "int64");
  DTR_CHECK_ERROR(dtr::DTypeError, local::zeros({2, 2}, kBool).matmul(local::zeros({2, 2}, kBool)),
                  "matmul", "bool");
  DTR_CHECK_ERROR(dtr::ShapeError, local::zeros({3}).dot(local::zeros({4})), "dot", "[3]", "[4]");
  DTR_CHECK_ERROR(dtr::ShapeError, local::zeros({2, 2}).dot(local::zeros({2, 2})), "dot", "[2, 2]");
  DTR_CHECK_ERROR(dtr::DTypeError, local::zeros({3}).dot(local::zeros({3}, kF64)), "dot", "float32",
                  "float64");
  DTR_CHECK_ERROR(dtr::ShapeError, local::zeros({3, 4}).mv(local::zeros({5})), "mv", "[3, 4]",
                  "[5]");
  DTR_CHECK_ERROR(dtr::ShapeError, local::zeros({4}).mv(local::zeros({4})), "mv", "[4]");
  DTR_CHECK_ERROR(dtr::ShapeError, local::zeros({3, 4}).mv(local::zeros({4, 1})), "mv", "[3, 4]",
                  "[4, 1]");
  DTR_CHECK_ERROR(dtr::DTypeError, local::zeros({3, 4}, kI64).mv(local::zeros({4})), "mv", "int64",
                  "float32");
}

TEST_CASE("errors: dims out of range name the op and the dim") {
  Tensor x = local::zeros({2, 3});
  DTR_CHECK_ERROR(dtr::IndexError, x.sum(5), "sum", "5");
  DTR_CHECK_ERROR(dtr::IndexError, x.sum(-7), "sum", "-7");
  DTR_CHECK_ERROR(dtr::IndexError, x.mean(2, true), "mean", "2");
  DTR_CHECK_ERROR(dtr::IndexError, x.max(9), "max", "9");
  DTR_CHECK_ERROR(dtr::IndexError, x.argmin(-3), "argmin", "-3");
  DTR_CHECK_ERROR(dtr::IndexError, x.norm(2.0, 4), "norm", "4");
  DTR_CHECK_ERROR(dtr::IndexError, x.var(6), "var", "6");
  DTR_CHECK_ERROR(dtr::IndexError, x.std(-5), "std", "-5");
  DTR_CHECK_ERROR(dtr::IndexError, x.transpose(0, 5), "transpose", "5");
  DTR_CHECK_ERROR(dtr::IndexError, x.transpose(-9, 0), "transpose", "-9");
  DTR_CHECK_ERROR(dtr::IndexError, x.select(7, 0), "select", "7");
  DTR_CHECK_ERROR(dtr::IndexError, x.narrow(8, 0, 1), "narrow", "8");
  DTR_CHECK_ERROR(dtr::IndexError, x.slice(-8, 0, 1), "slice", "-8");
  DTR_CHECK_ERROR(dtr::IndexError, x.squeeze(6), "squeeze", "6");
  DTR_CHECK_ERROR(dtr::IndexError, x.unsqueeze(4), "unsqueeze", "4");
  DTR_CHECK_ERROR(dtr::IndexError, x.unsqueeze(-4), "unsqueeze", "-4");
  DTR_CHECK_ERROR(dtr::IndexError, x.size(5), "size", "5");
  DTR_CHECK_ERROR(dtr::IndexError, local::zeros({}).sum(1), "sum", "1");
  DTR_CHECK_ERROR(dtr::IndexError, dtr::wrap_dim("someop", 3, 2), "someop", "3");
  CHECK(dtr::wrap_dim("someop", -1, 2) == 1);
  CHECK(dtr::wrap_dim("someop", 0, 1) == 0);
  CHECK(dtr::wrap_dim("someop", -2, 2) == 0);
  OpAttrs twice;
  twice.ints = {0, 0};
  DTR_CHECK_ERROR(dtr::InvalidArgument,
                  local::execute(OpId::sum, std::vector<Tensor>{x}, twice, false), "sum");
  twice.ints = {1, -1};
  DTR_CHECK_ERROR(dtr::InvalidArgument,
                  local::execute(OpId::mean, std::vector<Tensor>{x}, twice, false), "mean");
}

TEST_CASE("errors: ops that need floating input") {
  for (DType dt : {kI32, kI64, kBool}) {
    Tensor x = local::zeros({2, 3}, dt);
    std::string name = str(dt);
    CAPTURE(name);
    DTR_CHECK_ERROR(dtr::DTypeError, x.mean(), "mean", name);
    DTR_CHECK_ERROR(dtr::DTypeError, x.mean(0), "mean", name);
    DTR_CHECK_ERROR(dtr::DTypeError, x.var(), "var", name);
    DTR_CHECK_ERROR(dtr::DTypeError, x.std(1), "std", name);
    DTR_CHECK_ERROR(dtr::DTypeError, x.norm(), "norm", name);
    dtr::Generator g(1);
    DTR_CHECK_ERROR(dtr::DTypeError, x.uniform_(0.0, 1.0, g), "uniform_", name);
    DTR_CHECK_ERROR(dtr::DTypeError, x.normal_(0.0, 1.0, g), "normal_", name);
  }
  dtr::Generator g(1);
  DTR_CHECK_ERROR(dtr::InvalidArgument, local::rand({2}, g, kI64), "rand");
  DTR_CHECK_ERROR(dtr::InvalidArgument, local::randn({2}, g, kBool), "randn");
}

TEST_CASE("errors: view, reshape, expand, select, narrow, slice, permute") {
  Tensor x = local::zeros({2, 3});
  DTR_CHECK_ERROR(dtr::ShapeError, x.view({4}), "view", "[2, 3]", "[4]");
  DTR_CHECK_ERROR(dtr::ShapeError, x.view({-1, 4}), "view", "[2, 3]");
  DTR_CHECK_ERROR(dtr::InvalidArgument, x.view({-1, -1}), "view");
  DTR_CHECK_ERROR(dtr::InvalidArgument, x.t().view({6}), "view", "[6]");
  DTR_CHECK_ERROR(dtr::InvalidArgument, x.slice(1, 0, 3, 2).view({4}), "view", "[4]");
  DTR_CHECK_ERROR(dtr::ShapeError, x.reshape({7}), "reshape", "[2, 3]", "[7]");
  DTR_CHECK_ERROR(dtr::ShapeError, x.t().reshape({5, -1}), "reshape", "[3, 2]");
  DTR_CHECK_ERROR(dtr::ShapeError, local::zeros({3, 1}).expand({4, 4}), "expand", "[3, 1]",
                  "[4, 4]");
  DTR_CHECK_ERROR(dtr::ShapeError, x.expand({3}), "expand", "[2, 3]", "[3]");
  DTR_CHECK_ERROR(dtr::ShapeError, x.expand({2, 6}), "expand", "[2, 3]", "[2, 6]");
  DTR_CHECK_ERROR(dtr::IndexError, x.select(0, 2), "select", "2");
  DTR_CHECK_ERROR(dtr::IndexError, x.select(1, -4), "select", "-4");
  DTR_CHECK_ERROR(dtr::IndexError, x[5], "select", "5");
  DTR_CHECK_ERROR(dtr::IndexError, local::zeros({0}).select(0, 0), "select");
  DTR_CHECK_ERROR(dtr::InvalidArgument, x.narrow(1, 1, 3), "narrow");
  DTR_CHECK_ERROR(dtr::InvalidArgument, x.narrow(0, 0, -1), "narrow");
  DTR_CHECK_ERROR(dtr::InvalidArgument, x.slice(1, 0, 3, 0), "slice");
  DTR_CHECK_ERROR(dtr::InvalidArgument, x.slice(1, 0, 3, -1), "slice");
  DTR_CHECK_ERROR(dtr::InvalidArgument, x.permute({0}), "permute");
  DTR_CHECK_ERROR(dtr::InvalidArgument, x.permute({0, 0}), "permute");
  DTR_CHECK_ERROR(dtr::InvalidArgument, x.permute({0, 2}), "permute");
}

TEST_CASE("errors: copy_, item, creation and undefined tensors") {
  DTR_CHECK_ERROR(dtr::ShapeError, local::zeros({2}).copy_(local::zeros({3})), "copy_", "[2]",
                  "[3]");
  DTR_CHECK_ERROR(dtr::ShapeError, local::zeros({3}).copy_(local::zeros({2, 3})), "copy_", "[3]",
                  "[2, 3]");
  DTR_CHECK_ERROR(dtr::ShapeError, local::zeros({2, 3}).item(), "item", "[2, 3]");
  DTR_CHECK_ERROR(dtr::ShapeError, local::zeros({0}).item(), "item", "[0]");
  DTR_CHECK_ERROR(dtr::ShapeError, (local::zeros({2, 3}).item<double>()), "item");
  DTR_CHECK_ERROR(dtr::InvalidArgument, local::arange(0, 5, 0), "arange");
  DTR_CHECK_ERROR(dtr::InvalidArgument, local::zeros({2}).clamp(Scalar(), Scalar()), "clamp");
  DTR_CHECK_ERROR(dtr::InvalidArgument, local::linspace(0, 1, -1), "linspace", "-1");
  DTR_CHECK_ERROR(dtr::ShapeError, local::empty({2, -1}), "-1");
  DTR_CHECK_ERROR(dtr::ShapeError, local::zeros({-3}), "-3");
  DTR_CHECK_ERROR(dtr::ShapeError, local::from_vector<float>({1, 2, 3}, {2, 2}), "[2, 2]");
  DTR_CHECK_ERROR(dtr::ShapeError, dtr::Shape(size_t{13}, int64_t{1}), "13");
  DTR_CHECK_ERROR(dtr::ShapeError, local::zeros({1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1}).unsqueeze(0),
                  "12");
  Tensor undefined;
  DTR_CHECK_ERROR(dtr::InvalidArgument, undefined.add(undefined));
  DTR_CHECK_ERROR(dtr::InvalidArgument, undefined.sum());
  DTR_CHECK_ERROR(dtr::InvalidArgument, undefined.item());
  DTR_CHECK_ERROR(dtr::InvalidArgument, local::zeros({2}).add(undefined));
}

TEST_CASE("errors: bool arithmetic torch refuses, bad random and creation arguments") {
  Tensor b = local::zeros({3}, kBool);
  DTR_CHECK_ERROR(dtr::DTypeError, b - b, "sub", "bool");
  DTR_CHECK_ERROR(dtr::DTypeError, b.sub(true), "sub", "bool");
  DTR_CHECK_ERROR(dtr::DTypeError, -b, "neg", "bool");
  DTR_CHECK_ERROR(dtr::DTypeError, b.neg_(), "neg", "bool");
  dtr::Generator g(3);
  Tensor x = local::zeros({4});
  DTR_CHECK_ERROR(dtr::InvalidArgument, x.uniform_(1.0, 0.0, g), "uniform_");
  DTR_CHECK_ERROR(dtr::InvalidArgument, x.normal_(0.0, -1.0, g), "normal_");
  check_tensor(x, filled(kF32, {4}, 0), "refused random fills leave the tensor alone");
  DTR_CHECK_ERROR(dtr::InvalidArgument, local::arange(0, 5, -1), "arange");
  DTR_CHECK_ERROR(dtr::InvalidArgument, local::arange(5, 0), "arange");
  DTR_CHECK_ERROR(dtr::InvalidArgument, local::arange(0.0, INFINITY), "arange");
  DTR_CHECK_ERROR(dtr::InvalidArgument, x.var(std::nullopt, false, -1), "var");
  // execute checks its input count against the table.
  DTR_CHECK_ERROR(dtr::InvalidArgument,
                  local::execute(OpId::add, std::vector<Tensor>{}, OpAttrs{}, false), "add");
  DTR_CHECK_ERROR(
      dtr::InvalidArgument,
      local::execute(OpId::matmul, std::vector<Tensor>{local::zeros({2, 2})}, OpAttrs{}, false),
      "matmul");
  DTR_CHECK_ERROR(dtr::InvalidArgument,
                  local::execute(OpId::exp, std::vector<Tensor>{x, x}, OpAttrs{}, false), "exp");
  DTR_CHECK_ERROR(dtr::InvalidArgument,
                  local::execute(OpId::empty, std::vector<Tensor>{x}, OpAttrs{}, false), "empty");
  DTR_CHECK_ERROR(dtr::InvalidArgument,
                  local::execute(OpId::add, std::vector<Tensor>{x}, OpAttrs{}, false), "add");
}

TEST_CASE("errors: every error is a dtr::Error and leaves its operands usable") {
  Tensor x = local::ones({2, 3});
  try {
    (void)x.matmul(x);
    FAIL_CHECK("matmul of [2, 3] with [2, 3] did not throw");
  } catch (const dtr::Error& e) {
    CHECK(std::string(e.what()).find("matmul") != std::string::npos);
  }
  check_tensor(x + 1.0, filled(kF32, {2, 3}, 2), "x still works after an error");
}

TEST_CASE("errors: sizes whose product overflows int64 are refused, empty or not") {
  constexpr int64_t k32 = int64_t{1} << 32;
  // An empty shape whose other sizes multiply past int64 (strides would overflow).
  DTR_CHECK_ERROR(dtr::ShapeError, dtr::numel_of(dtr::Shape{0, k32, k32}),
                  "more elements than int64 can count");
  DTR_CHECK_ERROR(dtr::ShapeError, local::empty({0, k32, k32}), "more elements");
  CHECK(dtr::numel_of(dtr::Shape{0, k32, 2}) == 0);
  // view/reshape with -1: the known sizes multiply past int64 (fuzzing found both).
  Tensor x = local::ones({4});
  DTR_CHECK_ERROR(dtr::ShapeError, x.view({-1, int64_t{1} << 48, int64_t{1} << 45}),
                  "more elements than int64 can count");
  DTR_CHECK_ERROR(dtr::ShapeError, x.reshape({int64_t{1} << 40, -1, int64_t{1} << 40}),
                  "reshape: shape [1099511627776, -1, 1099511627776] has more elements");
}

TEST_CASE("conversions: floats past an integer dtype's range saturate, NaN becomes 0") {
  Tensor f = local::from_vector<float>({1e38f, -1e38f, std::nanf(""), 3.7f, -2.5f}, {5});
  auto i32 = f.to(dtr::DType::Int32).to_vector<int64_t>();
  CHECK(i32 == std::vector<int64_t>{INT32_MAX, INT32_MIN, 0, 3, -2});
  auto i64 = f.to(dtr::DType::Int64).to_vector<int64_t>();
  CHECK(i64 == std::vector<int64_t>{INT64_MAX, INT64_MIN, 0, 3, -2});
  // Scalars too (they arrive over the network as doubles): fill and full.
  CHECK(local::full({2}, 1e300, dtr::DType::Int32).to_vector<int64_t>() ==
        std::vector<int64_t>{INT32_MAX, INT32_MAX});
  CHECK(dtr::Scalar(1e300).to<int16_t>() == INT16_MAX);
  CHECK(dtr::Scalar(-1e300).to_int() == INT64_MIN);
  CHECK(std::isinf(local::full({1}, 1e300, dtr::DType::Float32).to_vector<double>()[0]));
}

TEST_CASE("errors: infer refuses malformed arguments instead of reading past them") {
  // Every op, in place with no inputs: the refusal names the op (an in-place full with no
  // inputs read input 0 of an empty list: fuzz_worker_batch stopped on it).
  for (const dtr::OpDef& op : dtr::all_ops()) {
    INFO("op: " << std::string(op.name));
    CHECK_THROWS_AS(dtr::infer(op.id, {}, {}, true), dtr::Error);
    CHECK_THROWS_AS(dtr::infer_inplace(op.id, {}, {}), dtr::Error);
  }
  DTR_CHECK_ERROR(dtr::InvalidArgument, dtr::infer(OpId::full, {}, {}, true), "full",
                  "in-place call needs the tensor it writes");
  // Strides that do not match the shape, and a dtype code out of range.
  dtr::TensorMeta bad = dtr::TensorMeta::contiguous(dtr::DType::Float32, {2, 3});
  bad.strides.pop_back();
  std::vector<dtr::TensorMeta> in = {dtr::TensorMeta::contiguous(dtr::DType::Float32, {2, 3}), bad};
  DTR_CHECK_ERROR(dtr::InvalidArgument, dtr::infer(OpId::add, in, {}), "add", "input 1",
                  "2 sizes but 1 strides");
  DTR_CHECK_ERROR(dtr::InvalidArgument, dtr::infer(OpId::add, in, {}, true), "add", "input 1");
  in[1] = in[0];
  in[1].dtype = static_cast<dtr::DType>(200);
  DTR_CHECK_ERROR(dtr::DTypeError, dtr::infer(OpId::mul, in, {}), "mul", "invalid dtype code 200");
}

// fuzz_worker_batch (2026-11-29): a conv2d_weight_grad whose kernel size and dilation a
// message chose overflowed (k - 1) * d in the shape rules.
TEST_CASE("window ops refuse kernel sizes, strides, paddings and dilations past 2^31 - 1") {
  const dtr::TensorMeta x = dtr::TensorMeta::contiguous(dtr::DType::Float32, {1, 1, 8, 8});
  const dtr::TensorMeta g = dtr::TensorMeta::contiguous(dtr::DType::Float32, {1, 1, 8, 8});
  OpAttrs a;
  a.ints = {1090921693186, 3, 1, 1, 0, 0, 10995116277761, 1, 1};
  DTR_CHECK_ERROR(dtr::InvalidArgument,
                  dtr::infer(OpId::conv2d_weight_grad, std::vector<dtr::TensorMeta>{g, x}, a),
                  "conv2d_weight_grad", "must be at most 2147483647");
}
