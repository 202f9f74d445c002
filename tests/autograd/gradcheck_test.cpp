// Every differentiable op of the derivative table against central finite differences in
// float64, on broadcast and non-contiguous inputs (tests/autograd/gradcheck.hpp); a test
// fails when an op with a formula has no case here.
#include <doctest/doctest.h>

#include <map>
#include <set>

#include "autograd/derivatives.hpp"
#include "gradcheck.hpp"

namespace dtr::test {
namespace {

// A float64 tensor of `shape` laid out transposed (non-contiguous for 2+ dims): normal
// draws, or |draws| + 0.5 when `positive`.
Tensor input(const Shape& shape, uint64_t seed, bool positive = false) {
  Generator gen(seed);
  Shape flipped;
  for (size_t i = shape.size(); i-- > 0;) flipped.push_back(shape[i]);
  Tensor t = local::randn(flipped, gen, DType::Float64);
  if (positive) t = t.abs() + 0.5;
  Dims order;
  for (int64_t d = static_cast<int64_t>(shape.size()) - 1; d >= 0; --d) order.push_back(d);
  return t.permute(order);
}

struct Case {
  std::string op;  // the op it covers
  std::string name;
  GradFn fn;
  std::vector<Tensor> inputs;
};

using V = const std::vector<Tensor>&;

std::vector<Case> unary_cases() {
  std::vector<Case> c;
  auto un = [&](std::string op, Tensor (*f)(const Tensor&), bool positive) {
    c.push_back({op, op, [f](V x) { return f(x[0]); }, {input({3, 4}, 1, positive)}});
  };
  un(
      "neg", [](const Tensor& x) { return x.neg(); }, false);
  un(
      "abs", [](const Tensor& x) { return x.abs(); }, false);
  un(
      "exp", [](const Tensor& x) { return x.exp(); }, false);
  un(
      "log", [](const Tensor& x) { return x.log(); }, true);
  un(
      "sqrt", [](const Tensor& x) { return x.sqrt(); }, true);
  un(
      "rsqrt", [](const Tensor& x) { return x.rsqrt(); }, true);
  un(
      "sin", [](const Tensor& x) { return x.sin(); }, false);
  un(
      "cos", [](const Tensor& x) { return x.cos(); }, false);
  un(
      "tanh", [](const Tensor& x) { return x.tanh(); }, false);
  un(
      "sigmoid", [](const Tensor& x) { return x.sigmoid(); }, false);
  un(
      "relu", [](const Tensor& x) { return x.relu(); }, false);
  // The formula ops (tensor/unary_math.hpp); those defined on (-1, 1) or [1, inf) see their
  // input mapped into that range first.
  un(
      "reciprocal", [](const Tensor& x) { return x.reciprocal(); }, true);
  un(
      "tan", [](const Tensor& x) { return (x.tanh() * 1.2).tan(); }, false);
  un(
      "asin", [](const Tensor& x) { return (x.tanh() * 0.9).asin(); }, false);
  un(
      "acos", [](const Tensor& x) { return (x.tanh() * 0.9).acos(); }, false);
  un(
      "atan", [](const Tensor& x) { return x.atan(); }, false);
  un(
      "sinh", [](const Tensor& x) { return x.sinh(); }, false);
  un(
      "cosh", [](const Tensor& x) { return x.cosh(); }, false);
  un(
      "asinh", [](const Tensor& x) { return x.asinh(); }, false);
  un(
      "acosh", [](const Tensor& x) { return (x + 1.0).acosh(); }, true);
  un(
      "atanh", [](const Tensor& x) { return (x.tanh() * 0.9).atanh(); }, false);
  un(
      "erf", [](const Tensor& x) { return x.erf(); }, false);
  un(
      "expm1", [](const Tensor& x) { return x.expm1(); }, false);
  un(
      "log1p", [](const Tensor& x) { return x.log1p(); }, true);
  un(
      "log2", [](const Tensor& x) { return x.log2(); }, true);
  un(
      "log10", [](const Tensor& x) { return x.log10(); }, true);
  un(
      "silu", [](const Tensor& x) { return x.silu(); }, false);
  un(
      "gelu", [](const Tensor& x) { return x.gelu(); }, false);
  un(
      "gelu_tanh", [](const Tensor& x) { return x.gelu_tanh(); }, false);
  return c;
}

std::vector<Case> binary_cases() {
  std::vector<Case> c;
  // Broadcast: (3, 1) against (4) -> (3, 4); the (3, 1) one is a column of a transposed
  // tensor. The scalar forms with the scalar on either side.
  auto bin = [&](std::string op, Tensor (*f)(const Tensor&, const Tensor&),
                 Tensor (*fs)(const Tensor&), Tensor (*sf)(const Tensor&), bool positive) {
    c.push_back({op,
                 op + " broadcast",
                 [f](V x) { return f(x[0], x[1]); },
                 {input({3, 5}, 2, positive).slice(1, 1, 2), input({4}, 3, positive)}});
    c.push_back({op,
                 op + " same shape",
                 [f](V x) { return f(x[0], x[1]); },
                 {input({3, 4}, 4, positive), input({3, 4}, 5, positive)}});
    c.push_back({op, op + " scalar", [fs](V x) { return fs(x[0]); }, {input({3, 4}, 6, positive)}});
    c.push_back(
        {op, op + " scalar first", [sf](V x) { return sf(x[0]); }, {input({3, 4}, 7, positive)}});
  };
  bin(
      "add", [](const Tensor& a, const Tensor& b) { return a + b; },
      [](const Tensor& a) { return a + 2.5; }, [](const Tensor& a) { return 2.5 + a; }, false);
  bin(
      "sub", [](const Tensor& a, const Tensor& b) { return a - b; },
      [](const Tensor& a) { return a - 2.5; }, [](const Tensor& a) { return 2.5 - a; }, false);
  bin(
      "mul", [](const Tensor& a, const Tensor& b) { return a * b; },
      [](const Tensor& a) { return a * 2.5; }, [](const Tensor& a) { return 2.5 * a; }, false);
  bin(
      "div", [](const Tensor& a, const Tensor& b) { return a / b; },
      [](const Tensor& a) { return a / 2.5; }, [](const Tensor& a) { return 2.5 / a; }, true);
  bin(
      "pow", [](const Tensor& a, const Tensor& b) { return a.pow(b); },
      [](const Tensor& a) { return a.pow(2.5); },
      [](const Tensor& a) { return a.rscalar(OpId::pow, 2.5); }, true);
  bin(
      "maximum", [](const Tensor& a, const Tensor& b) { return a.maximum(b); },
      [](const Tensor& a) { return a.maximum(0.1); },
      [](const Tensor& a) { return a.rscalar(OpId::maximum, 0.1); }, false);
  bin(
      "minimum", [](const Tensor& a, const Tensor& b) { return a.minimum(b); },
      [](const Tensor& a) { return a.minimum(0.1); },
      [](const Tensor& a) { return a.rscalar(OpId::minimum, 0.1); }, false);
  // remainder and fmod are piecewise linear: the seeds' inputs keep a / b away from the
  // integers where they jump.
  bin(
      "remainder", [](const Tensor& a, const Tensor& b) { return a.remainder(b); },
      [](const Tensor& a) { return a.remainder(0.7); },
      [](const Tensor& a) { return a.rscalar(OpId::remainder, 2.5); }, true);
  bin(
      "fmod", [](const Tensor& a, const Tensor& b) { return a.fmod(b); },
      [](const Tensor& a) { return a.fmod(-0.7); },
      [](const Tensor& a) { return a.rscalar(OpId::fmod, -2.5); }, true);
  // floor_divide and trunc_divide are piecewise constant: zero gradients, away from jumps.
  bin(
      "floor_divide", [](const Tensor& a, const Tensor& b) { return a.floor_divide(b); },
      [](const Tensor& a) { return a.floor_divide(0.7); },
      [](const Tensor& a) { return a.rscalar(OpId::floor_divide, 2.5); }, true);
  bin(
      "trunc_divide", [](const Tensor& a, const Tensor& b) { return a.trunc_divide(b); },
      [](const Tensor& a) { return a.trunc_divide(-0.7); },
      [](const Tensor& a) { return a.rscalar(OpId::trunc_divide, -2.5); }, true);
  bin(
      "atan2", [](const Tensor& a, const Tensor& b) { return a.atan2(b); },
      [](const Tensor& a) { return a.atan2(-0.8); },
      [](const Tensor& a) { return a.rscalar(OpId::atan2, 0.8); }, false);
  return c;
}

// A (3, 4) input with zeros: row 0 has one, row 1 two, row 2 none (prod's cases).
Tensor with_zeros() {
  Tensor t = input({3, 4}, 8, true);
  no_grad off;
  t.select(0, 0).select(0, 1).fill_(0);
  t.select(0, 1).select(0, 0).fill_(0);
  t.select(0, 1).select(0, 3).fill_(0);
  return t;
}

std::vector<Case> reduce_cases() {
  std::vector<Case> c;
  auto x = [](uint64_t seed) { return std::vector<Tensor>{input({3, 4}, seed)}; };
  c.push_back({"sum", "sum all", [](V v) { return v[0].sum(); }, x(10)});
  c.push_back({"sum", "sum dim", [](V v) { return v[0].sum(1); }, x(11)});
  c.push_back({"sum", "sum keepdim", [](V v) { return v[0].sum(0, true); }, x(12)});
  c.push_back({"prod", "prod dim", [](V v) { return v[0].prod(1); }, x(13)});
  c.push_back({"prod", "prod with zeros", [](V v) { return v[0].prod(1); }, {with_zeros()}});
  c.push_back({"prod", "prod all", [](V v) { return v[0].prod(); }, x(14)});
  c.push_back({"mean", "mean all", [](V v) { return v[0].mean(); }, x(15)});
  c.push_back({"mean", "mean dim", [](V v) { return v[0].mean(0); }, x(16)});
  c.push_back({"max", "max all", [](V v) { return v[0].max(); }, x(17)});
  c.push_back({"max", "max dim", [](V v) { return v[0].max(1, true); }, x(18)});
  c.push_back({"min", "min dim", [](V v) { return v[0].min(0); }, x(19)});
  c.push_back({"clamp", "clamp", [](V v) { return v[0].clamp(-0.5, 0.7); }, x(20)});
  c.push_back({"clamp", "clamp min only", [](V v) { return v[0].clamp(-0.3); }, x(21)});
  c.push_back({"norm", "norm 2", [](V v) { return v[0].norm(); }, x(22)});
  c.push_back({"norm", "norm 1 dim", [](V v) { return v[0].norm(1, 1); }, x(23)});
  c.push_back({"norm", "norm 3 dim", [](V v) { return v[0].norm(3, 0, true); }, x(24)});
  c.push_back({"norm", "norm inf", [](V v) { return v[0].norm(INFINITY, 1); }, x(25)});
  c.push_back({"var", "var dim", [](V v) { return v[0].var(1); }, x(26)});
  c.push_back(
      {"var", "var all biased", [](V v) { return v[0].var(std::nullopt, false, 0); }, x(27)});
  c.push_back({"std", "std dim", [](V v) { return v[0].std(0, true); }, x(28)});
  return c;
}

std::vector<Case> linalg_cases() {
  std::vector<Case> c;
  auto mm = [](V v) { return v[0].matmul(v[1]); };
  c.push_back({"matmul", "matmul 2d", mm, {input({3, 4}, 30), input({4, 2}, 31)}});
  c.push_back({"matmul", "matmul 1d 2d", mm, {input({4}, 32), input({4, 2}, 33)}});
  c.push_back({"matmul", "matmul 2d 1d", mm, {input({3, 4}, 34), input({4}, 35)}});
  c.push_back({"matmul", "matmul 1d 1d", mm, {input({4}, 36), input({4}, 37)}});
  c.push_back(
      {"matmul", "matmul batched broadcast", mm, {input({2, 3, 4}, 38), input({4, 2}, 39)}});
  c.push_back({"matmul",
               "matmul batch dims broadcast",
               mm,
               {input({2, 1, 3, 4}, 40), input({3, 4, 2}, 41)}});
  c.push_back({"dot", "dot", [](V v) { return v[0].dot(v[1]); }, {input({5}, 42), input({5}, 43)}});
  c.push_back({"mv", "mv", [](V v) { return v[0].mv(v[1]); }, {input({3, 4}, 44), input({4}, 45)}});
  return c;
}

std::vector<Case> view_cases() {
  std::vector<Case> c;
  auto x = [](uint64_t seed) { return std::vector<Tensor>{input({3, 4}, seed)}; };
  c.push_back({"view", "view", [](V v) { return v[0].contiguous().view({4, 3}) * 1.0; }, x(50)});
  c.push_back({"reshape", "reshape", [](V v) { return v[0].reshape({2, 6}); }, x(51)});
  c.push_back({"transpose", "transpose", [](V v) { return v[0].transpose(0, 1); }, x(52)});
  c.push_back({"permute",
               "permute",
               [](V v) {
                 return v[0].permute({2, 0, 1});
               },
               {input({2, 3, 4}, 53)}});
  c.push_back({"narrow", "narrow", [](V v) { return v[0].narrow(1, 1, 2); }, x(54)});
  c.push_back({"slice", "slice step", [](V v) { return v[0].slice(1, 0, 4, 2); }, x(55)});
  c.push_back({"select", "select", [](V v) { return v[0].select(0, 1); }, x(56)});
  c.push_back({"expand",
               "expand",
               [](V v) {
                 return v[0].expand({2, 3, 4});
               },
               {input({3, 5}, 57).slice(1, 1, 2)}});
  c.push_back({"squeeze",
               "squeeze",
               [](V v) { return v[0].squeeze(); },
               {input({3, 5}, 58).slice(1, 1, 2)}});
  c.push_back({"unsqueeze", "unsqueeze", [](V v) { return v[0].unsqueeze(1); }, x(59)});
  c.push_back({"contiguous", "contiguous", [](V v) { return v[0].contiguous(); }, x(60)});
  c.push_back({"clone", "clone", [](V v) { return v[0].apply(OpId::clone, {}, nullptr); }, x(87)});
  c.push_back({"to", "to float32 and back",
               [](V v) { return v[0].to(DType::Float32).to(DType::Float64); }, x(61)});
  return c;
}

std::vector<Case> index_cases() {
  std::vector<Case> c;
  auto x = [](uint64_t seed) { return std::vector<Tensor>{input({3, 4}, seed)}; };
  for (const char* op : {"floor", "ceil", "round", "sign", "trunc"}) {
    const OpId id = find_op(op)->id;
    c.push_back({op, op, [id](V v) { return v[0].apply(id, {}, nullptr) + v[0]; }, x(70)});
  }
  c.push_back(
      {"flatten", "flatten", [](V v) { return v[0].flatten(0, 1); }, {input({2, 3, 4}, 71)}});
  c.push_back(
      {"cat", "cat", [](V v) { return cat(v, 1); }, {input({3, 2}, 72), input({3, 4}, 73)}});
  c.push_back(
      {"stack", "stack", [](V v) { return stack(v, 1); }, {input({3, 4}, 74), input({3, 4}, 75)}});
  const Tensor cond = local::from_vector<bool>({true, false, true, false}, {4});
  c.push_back({"where",
               "where broadcast",
               [cond](V v) { return where(cond, v[0], v[1]); },
               {input({3, 4}, 76), input({4}, 77)}});
  const Tensor m = local::from_vector<bool>({false, true, true, false}, {4});
  c.push_back({"masked_fill", "masked_fill", [m](V v) { return v[0].masked_fill(m, 2.0); }, x(78)});
  const Tensor idx = local::from_vector<int64_t>({2, 0, 2});
  c.push_back({"index_select", "index_select repeats",
               [idx](V v) { return v[0].index_select(1, idx); }, x(79)});
  const Tensor gi = local::from_vector<int64_t>({0, 2, 2, 1, 1, 0}, {3, 2});
  c.push_back({"gather", "gather", [gi](V v) { return v[0].gather(1, gi); }, x(80)});
  c.push_back({"scatter_add",
               "scatter_add",
               [gi](V v) { return v[0].scatter_add(1, gi, v[1]); },
               {input({3, 4}, 81), input({3, 2}, 82)}});
  c.push_back({"cumsum", "cumsum", [](V v) { return v[0].cumsum(1); }, x(83)});
  c.push_back({"tril", "tril", [](V v) { return v[0].tril(); }, x(85)});
  c.push_back({"triu", "triu above the diagonal", [](V v) { return v[0].triu(1); }, x(86)});
  OpAttrs topk;
  topk.ints = {2, 1, 1, 1};
  c.push_back(
      {"topk", "topk", [topk](V v) { return v[0].apply(OpId::topk, topk, nullptr); }, x(84)});
  return c;
}

std::vector<Case> nn_cases() {
  std::vector<Case> c;
  c.push_back({"linear",
               "linear batched with bias",
               [](V v) { return v[0].linear(v[1], v[2]); },
               {input({2, 3, 4}, 90), input({5, 4}, 91), input({5}, 92)}});
  c.push_back({"linear",
               "linear 1-D without bias",
               [](V v) { return v[0].linear(v[1]); },
               {input({4}, 93), input({5, 4}, 94)}});
  c.push_back({"conv2d",
               "conv2d stride padding bias",
               [](V v) { return v[0].conv2d(v[1], v[2], 2, 1); },
               {input({2, 2, 5, 6}, 95), input({3, 2, 3, 3}, 96), input({3}, 97)}});
  c.push_back({"conv2d",
               "conv2d dilation groups",
               [](V v) { return v[0].conv2d(v[1], std::nullopt, 1, 0, 2, 2); },
               {input({1, 4, 6, 6}, 98), input({2, 2, 2, 2}, 99)}});
  c.push_back({"max_pool2d",
               "max_pool2d",
               [](V v) { return v[0].max_pool2d(2); },
               {input({2, 2, 4, 5}, 100)}});
  c.push_back({"max_pool2d",
               "max_pool2d padded strided",
               [](V v) { return v[0].max_pool2d(3, Int2(2), 1); },
               {input({1, 2, 5, 5}, 101)}});
  c.push_back({"avg_pool2d",
               "avg_pool2d ceil mode",
               [](V v) { return v[0].avg_pool2d(2, Int2(2), 1, true, false); },
               {input({1, 2, 5, 4}, 102)}});
  const Tensor sidx = local::from_vector<int64_t>({2, 0, 1, 1, 0, 2}).view({2, 3});
  c.push_back({"scatter",
               "scatter dim 1",
               [sidx](V v) { return v[0].scatter(1, sidx, v[1]); },
               {input({2, 4}, 114), input({2, 3}, 115)}});
  // scatter_reduce: repeated positions, every reduction; amax/amin on distinct values (the
  // maximum is differentiable there), prod through a zero of src.
  const Tensor ridx = local::from_vector<int64_t>({0, 2, 0, 1, 1, 3}).view({2, 3});
  for (const char* reduce : {"sum", "prod", "mean", "amax", "amin"})
    for (bool self : {true, false})
      c.push_back(
          {"scatter_reduce",
           std::string("scatter_reduce ") + reduce + (self ? "" : " without self"),
           [ridx, reduce, self](V v) { return v[0].scatter_reduce(1, ridx, v[1], reduce, self); },
           {input({2, 4}, 118), input({2, 3}, 119)}});
  c.push_back({"scatter_reduce",
               "scatter_reduce prod through a zero",
               [ridx](V v) {
                 return v[0].scatter_reduce(
                     1, ridx, v[1] * local::from_vector<double>({1, 0, 1, 1, 1, 1}).view({2, 3}),
                     "prod");
               },
               {input({2, 4}, 120), input({2, 3}, 121)}});
  c.push_back({"(composition)",
               "sort values",
               [](V v) { return v[0].sort(1, true).first; },
               {input({3, 4}, 116)}});
  c.push_back({"diagonal",
               "diagonal offset 1",
               [](V v) { return v[0].diagonal(1, 2, 0); },
               {input({3, 2, 4}, 117)}});
  c.push_back({"flip", "flip", [](V v) { return v[0].flip({0, 2}); }, {input({2, 3, 4}, 112)}});
  c.push_back({"constant_pad_nd",
               "constant_pad_nd pad and crop",
               [](V v) {
                 return v[0].constant_pad_nd({1, -1, 2, 0}, 0.5);
               },
               {input({3, 4}, 113)}});
  c.push_back({"layer_norm",
               "layer_norm over two dims",
               [](V v) {
                 return v[0].layer_norm({3, 4}, v[1], v[2], 1e-3);
               },
               {input({2, 3, 4}, 109), input({3, 4}, 110), input({3, 4}, 111)}});
  c.push_back({"softmax", "softmax", [](V v) { return v[0].softmax(1); }, {input({3, 4}, 103)}});
  c.push_back({"log_softmax",
               "log_softmax",
               [](V v) { return v[0].log_softmax(0); },
               {input({3, 4}, 104)}});
  const Tensor t = local::from_vector<int64_t>({2, 0, 3});
  c.push_back(
      {"nll_loss", "nll_loss mean", [t](V v) { return v[0].nll_loss(t); }, {input({3, 4}, 105)}});
  const Tensor tw = local::from_vector<int64_t>({2, -100, 3});
  c.push_back({"nll_loss",
               "nll_loss weighted sum ignore_index",
               [tw](V v) {
                 return v[0].nll_loss(tw, local::from_vector<double>({1, 2, 3, 4}), Reduction::Sum);
               },
               {input({3, 4}, 106)}});
  c.push_back({"dropout",
               "dropout",
               [](V v) {
                 Generator g(3);
                 return v[0].dropout(0.4, true, g);
               },
               {input({3, 4}, 107)}});
  c.push_back({"dropout2d",
               "dropout2d",
               [](V v) {
                 Generator g(4);
                 return v[0].dropout2d(0.5, true, g);
               },
               {input({2, 3, 2, 2}, 108)}});
  return c;
}

// The compositions of tensor_ops.hpp: their gradients are their ops', checked here whole.
std::vector<Case> composition_cases() {
  std::vector<Case> c;
  c.push_back({"(composition)",
               "sum over two dims",
               [](V v) {
                 return v[0].sum({0, 2}, true);
               },
               {input({2, 3, 4}, 120)}});
  c.push_back({"(composition)",
               "var over two dims",
               [](V v) {
                 return v[0].var({0, 2});
               },
               {input({2, 3, 4}, 121)}});
  c.push_back({"(composition)",
               "leaky_relu",
               [](V v) { return v[0].leaky_relu(0.2); },
               {input({3, 4}, 122)}});
  c.push_back({"(composition)",
               "hardtanh",
               [](V v) { return v[0].hardtanh(-0.5, 0.7); },
               {input({3, 4}, 123)}});
  c.push_back(
      {"(composition)", "elu", [](V v) { return v[0].elu(1.5, 1.2, 0.8); }, {input({3, 4}, 124)}});
  c.push_back({"(composition)",
               "addmm",
               [](V v) { return v[0].addmm(v[1], v[2], 0.5, 2.0); },
               {input({4}, 125), input({3, 2}, 126), input({2, 4}, 127)}});
  const Tensor idx = local::from_vector<int64_t>({0, 3, 3, 1, 4, 0}).view({2, 3});
  c.push_back({"(composition)",
               "embedding (padding_idx: no gradient by design, not here)",
               [idx](V v) { return embedding(v[0], idx); },
               {input({5, 2}, 128)}});
  c.push_back({"(composition)",
               "slice_scatter step 2",
               [](V v) { return slice_scatter(v[0], v[1], 1, 1, std::nullopt, 2); },
               {input({3, 5}, 129), input({3, 2}, 130)}});
  c.push_back({"(composition)",
               "select_scatter",
               [](V v) { return select_scatter(v[0], v[1], 0, -1); },
               {input({3, 4}, 131), input({4}, 132)}});
  return c;
}

std::vector<Case> all_cases() {
  std::vector<Case> all;
  for (auto part : {unary_cases(), binary_cases(), reduce_cases(), linalg_cases(), view_cases(),
                    index_cases(), nn_cases(), composition_cases()})
    for (Case& c : part) all.push_back(std::move(c));
  return all;
}

TEST_CASE("gradcheck: every differentiable op against finite differences") {
  for (Case& c : all_cases()) {
    // float32 round trips lose digits: check `to` loosely.
    const bool lossy = c.op == "to";
    gradcheck(c.name, c.fn, c.inputs, lossy ? 1e-3 : 1e-6, lossy ? 1e-2 : 1e-6,
              lossy ? 1e-2 : 1e-5);
  }
}

TEST_CASE("derivative table: every op of the op table has an entry") {
  for (const OpDef& d : all_ops())
    CHECK_MESSAGE(autograd::find_derivative<Tensor>(d.id) != nullptr, "op ", d.name,
                  " has no entry in autograd/derivatives.cpp (a formula, or why it has none)");
}

TEST_CASE("gradcheck: every op with a formula has a case") {
  std::set<std::string> covered;
  for (const Case& c : all_cases()) covered.insert(c.op);
  for (const auto& d : autograd::all_derivatives<Tensor>()) {
    if (!d.formula) continue;
    std::string name(op_def(d.op).name);
    CHECK_MESSAGE(covered.count(name) == 1, "no gradcheck case for ", name);
  }
}

}  // namespace
}  // namespace dtr::test
