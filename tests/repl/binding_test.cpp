// Argument binding of op calls from the op table's declared signatures (repl/op_call.hpp):
// positional and keyword arguments to parameters, parameters to attributes, and the errors
// for calls that do not fit. bind_args and op_attrs touch no tensor, so these cases need no
// workers (a list stands for a tensor argument); the last case runs a few calls end to end.
#include <doctest/doctest.h>

#include <limits>
#include <string>
#include <vector>

#include "dtr/op_table.hpp"
#include "master/cluster.hpp"
#include "repl/op_call.hpp"
#include "repl/repl_support.hpp"

namespace {

using namespace dtr;
using namespace dtr::test;
using repl::Kwargs;
using repl::ListValue;
using repl::Value;

repl::OpRef ref(std::string_view name) {
  std::optional<repl::OpRef> r = repl::find_op_ref(name);
  REQUIRE(r);
  return *r;
}

// A list literal: binding treats it as a tensor argument without sending it anywhere.
Value tensor_arg() {
  ListValue l;
  l.items = {Value(1), Value(2)};
  return Value(std::move(l));
}

Value tuple(std::vector<Value> items) {
  ListValue l;
  l.items = std::move(items);
  l.tuple = true;
  return Value(std::move(l));
}

OpAttrs attrs(std::string_view op, std::vector<Value> args, const Kwargs& kw = {}) {
  repl::OpRef r = ref(op);
  return repl::op_attrs(r, repl::bind_args(r, std::move(args), kw));
}

// The TypeError message of a call that does not bind (empty when it binds).
std::string error(std::string_view op, std::vector<Value> args, const Kwargs& kw = {}) {
  try {
    attrs(op, std::move(args), kw);
  } catch (const repl::TypeError& e) {
    return e.what();
  }
  return "";
}

std::string usage(OpId id) {
  return std::string(op_def(id).help);
}

}  // namespace

TEST_CASE("binding: each kind's signature fills the inputs and attributes it declares") {
  const Value x = tensor_arg();
  // Unary and Convert: one tensor, nothing else.
  repl::BoundArgs b = repl::bind_args(ref("neg"), {x}, {});
  REQUIRE(b.values.size() == 1);
  CHECK(b.values[0]->is<ListValue>());
  CHECK(attrs("contiguous", {x}) == OpAttrs{});
  // Binary: a number operand is scalars[0]; first, the scalar_first form.
  OpAttrs a = attrs("add", {x, Value(2)});
  CHECK(a.scalars[0].to_int() == 2);
  CHECK_FALSE(a.scalar_first);
  a = attrs("sub", {Value(2.5), x});
  CHECK(a.scalars[0].to_double() == 2.5);
  CHECK(a.scalar_first);
  CHECK(attrs("mul", {x, x}) == OpAttrs{});
  // Reduce: dims (an int or a tuple; None or left out: all), keepdim.
  a = attrs("sum", {x, Value(1), Value(true)});
  CHECK(a.ints == Dims{1});
  CHECK(a.keepdim);
  CHECK(attrs("max", {x, tuple({Value(0), Value(-1)})}).ints == Dims{0, -1});
  CHECK(attrs("argmin", {x, Value()}) == OpAttrs{});
  CHECK(attrs("mean", {x}) == OpAttrs{});
  // Clamp: min and max keep their slots; a left-out one stays None.
  a = attrs("clamp", {x, Value(), Value(3)});
  CHECK(a.scalars[0].is_none());
  CHECK(a.scalars[1].to_int() == 3);
  CHECK(attrs("clamp", {x}, {{"max", Value(3)}}) == a);
  // Norm: p (default 2) before the dims; Moment: correction (default 1) last.
  a = attrs("norm", {x});
  CHECK(a.scalars[0].to_int() == 2);
  CHECK(a.ints.empty());
  a = attrs("norm", {x, Value(std::numeric_limits<double>::infinity()), Value(0)});
  CHECK(a.scalars[0].to_double() == std::numeric_limits<double>::infinity());
  CHECK(a.ints == Dims{0});
  a = attrs("var", {x, Value(1)});
  CHECK(a.ints == Dims{1});
  CHECK(a.scalars[0].to_int() == 1);
  CHECK(attrs("std", {x, Value(1), Value(false), Value(0)}).scalars[0].to_int() == 0);
  // Linalg: two tensors, by the names the op declares.
  b = repl::bind_args(ref("mv"), {}, {{"v", x}, {"m", x}});
  CHECK((b.values[0] && b.values[1]));
  // View: ints in the order declared; several ints for a shape; slice bounds None.
  CHECK(attrs("view", {x, Value(2), Value(-1)}).ints == Dims{2, -1});
  CHECK(attrs("reshape", {x, tuple({Value(3), Value(2)})}).ints == Dims{3, 2});
  CHECK(attrs("transpose", {x, Value(0), Value(1)}).ints == Dims{0, 1});
  CHECK(attrs("slice", {x, Value(0), Value(), Value()}).ints ==
        Dims{0, 0, std::numeric_limits<int64_t>::max(), 1});
  CHECK(attrs("squeeze", {x}).ints.empty());
  // Convert: to's dtype.
  CHECK(attrs("to", {x, Value(DType::Float64)}).dtype == DType::Float64);
  // Mutate: value; from and to with their defaults.
  CHECK(attrs("fill_", {x, Value(5)}).scalars[0].to_int() == 5);
  a = attrs("uniform_", {x, Value(-1)});
  CHECK(a.scalars[0].to_int() == -1);
  CHECK(a.scalars[1].to_int() == 1);
  // Create: a shape as several ints leaves one for the required value after it; arange(n)
  // is arange(0, n) and its dtype follows its numbers.
  a = attrs("full", {Value(2), Value(3), Value(7)});
  CHECK(a.ints == Dims{2, 3});
  CHECK(a.scalars[0].to_int() == 7);
  CHECK(a.dtype == DType::Float32);
  a = attrs("arange", {Value(5)});
  CHECK(a.scalars[0].to_int() == 0);
  CHECK(a.scalars[1].to_int() == 5);
  CHECK(a.scalars[2].to_int() == 1);
  CHECK(a.dtype == DType::Int64);
  a = attrs("arange", {Value(1), Value(2.5), Value(0.5)});
  CHECK(a.scalars[0].to_int() == 1);
  CHECK(a.dtype == DType::Float32);
  a = attrs("linspace", {Value(0), Value(1), Value(5)});
  CHECK(a.ints == Dims{5});
  CHECK(attrs("randn", {Value(2), Value(3)}, {{"dtype", Value(DType::Float64)}}).dtype ==
        DType::Float64);
}

TEST_CASE("binding: tensor lists, tensors anywhere, pairs, flags and reductions") {
  const Value x = tensor_arg();
  ListValue list;
  list.items = {x, x, x};
  // cat: a list of tensors, then the dim.
  repl::BoundArgs b = repl::bind_args(ref("cat"), {Value(list), Value(1)}, {});
  CHECK(b.values[0]->is<ListValue>());
  CHECK(attrs("cat", {Value(list)}).ints == Dims{0});
  // gather(x, dim, index): the tensors around an int.
  CHECK(attrs("gather", {x, Value(1), x}).ints == Dims{1});
  // conv2d: bias left out, pairs given as an int or two; padding by keyword.
  CHECK(attrs("conv2d", {x, x}).ints == Dims{1, 1, 0, 0, 1, 1, 1});
  CHECK(
      attrs("conv2d", {x, x, Value(), tuple({Value(2), Value(1)})}, {{"padding", Value(3)}}).ints ==
      Dims{2, 1, 3, 3, 1, 1, 1});
  // max_pool2d: a left-out stride is 0, 0 (the kernel size); a flag is 0 or 1.
  CHECK(attrs("max_pool2d", {x, Value(2)}).ints == Dims{2, 2, 0, 0, 0, 0, 1, 1, 0});
  CHECK(attrs("max_pool2d", {x, Value(3), Value(1)}, {{"ceil_mode", Value(true)}}).ints ==
        Dims{3, 3, 1, 1, 0, 0, 1, 1, 1});
  // avg_pool2d's optional divisor is scalars[0].
  OpAttrs a = attrs("avg_pool2d", {x, Value(2)}, {{"divisor_override", Value(3)}});
  CHECK(a.ints == Dims{2, 2, 0, 0, 0, 0, 0, 1});
  CHECK(a.scalars[0].to_int() == 3);
  // nll_loss: a reduction by name, ignore_index after it.
  CHECK(attrs("nll_loss", {x, x}).ints == Dims{1, -100});
  CHECK(attrs("nll_loss", {x, x}, {{"reduction", Value("sum")}, {"ignore_index", Value(0)}}).ints ==
        Dims{2, 0});
  // dropout: p, the training flag; the draw is made at the call.
  a = attrs("dropout", {x, Value(0.25)});
  CHECK(a.scalars[0].to_double() == 0.25);
  CHECK(a.ints == Dims{1});
  CHECK(contains(error("nll_loss", {x, x}, {{"reduction", Value("avg")}}),
                 "argument 'reduction' must be 'none', 'mean' or 'sum', got 'avg'"));
  CHECK(contains(error("conv2d", {x, x, Value(), tuple({Value(1), Value(2), Value(3)})}),
                 "argument 'stride' must be an int or a pair of ints, got 3 ints"));
}

TEST_CASE("binding: keyword arguments") {
  const Value x = tensor_arg();
  OpAttrs a = attrs("sum", {x}, {{"keepdim", Value(true)}, {"dim", Value(1)}});
  CHECK(a.ints == Dims{1});
  CHECK(a.keepdim);
  a = attrs("var", {x}, {{"correction", Value(0)}});
  CHECK(a.scalars[0].to_int() == 0);
  CHECK(a.ints.empty());
  // A keyword for the required parameter after a shape: the shape takes every int.
  a = attrs("full", {Value(2), Value(3)}, {{"value", Value(1.5)}});
  CHECK(a.ints == Dims{2, 3});
  CHECK(a.scalars[0].to_double() == 1.5);
  // arange by keywords, and its start left out.
  a = attrs("arange", {}, {{"end", Value(4)}});
  CHECK(a.scalars[0].to_int() == 0);
  CHECK(a.scalars[1].to_int() == 4);
  // Tensor inputs by keyword.
  repl::BoundArgs b = repl::bind_args(ref("add"), {}, {{"b", Value(1)}, {"a", x}});
  CHECK(b.values[0]->is<ListValue>());
  CHECK(b.values[1]->is<int64_t>());
}

TEST_CASE("binding: calls that do not fit the signature say why, with the usage") {
  const Value x = tensor_arg();
  // An unknown keyword.
  CHECK(error("sum", {x}, {{"keep", Value(true)}}) ==
        "sum(): unexpected keyword argument 'keep'; usage: " + usage(OpId::sum));
  CHECK(error("rand", {Value(2)}, {{"generator", Value(1)}}) ==
        "rand(): unexpected keyword argument 'generator'; usage: " + usage(OpId::rand));
  // An argument of the wrong kind.
  CHECK(error("sum", {x}, {{"keepdim", Value(DType::Float32)}}) ==
        "sum(): argument 'keepdim' must be True or False, got dtype; usage: " + usage(OpId::sum));
  CHECK(error("full", {Value(2)}, {{"value", Value("a")}}) ==
        "full(): argument 'value' must be a number, got str; usage: " + usage(OpId::full));
  CHECK(error("transpose", {x, Value(0), Value(1.5)}) ==
        "transpose(): argument 'd1' must be an integer, got float; usage: " +
            usage(OpId::transpose));
  CHECK(error("add", {Value(1), Value(2)}) ==
        "add(): needs a tensor operand, got int and int; usage: " + usage(OpId::add));
  CHECK(error("add_", {Value(1), x}) ==
        "add_(): the in-place form needs a tensor as its first argument; usage: " +
            usage(OpId::add));
  // Too many arguments.
  CHECK(error("neg", {x, Value(2)}) ==
        "neg(): takes at most 1 argument (x), got 2; usage: " + usage(OpId::neg));
  CHECK(error("sum", {x, Value(0), Value(true), Value(1)}) ==
        "sum(): takes at most 3 arguments (x, dim, keepdim), got 4; usage: " + usage(OpId::sum));
  CHECK(error("rand", {Value(2), Value(DType::Float32), Value(1)}) ==
        "rand(): takes at most 2 arguments (shape, dtype), got 3; usage: " + usage(OpId::rand));
  // The same parameter twice; one missing.
  CHECK(error("sum", {x, Value(0)}, {{"dim", Value(1)}}) ==
        "sum(): got multiple values for argument 'dim'; usage: " + usage(OpId::sum));
  CHECK(error("transpose", {x, Value(0)}) ==
        "transpose(): missing argument 'd1'; usage: " + usage(OpId::transpose));
  CHECK(error("to", {x}) == "to(): missing argument 'dtype'; usage: " + usage(OpId::to));
  CHECK(error("full", {}, {{"value", Value(1)}}) ==
        "full(): missing argument 'shape'; usage: " + usage(OpId::full));
  CHECK(error("full", {Value(2)}) ==
        "full(): missing argument 'value'; usage: " + usage(OpId::full));
}

TEST_CASE("binding: keyword and positional calls run on the workers") {
  Cluster cluster(1);
  ReplSession s;
  CHECK(s.ok("x = arange(6).view(2, 3)\nx.sum(dim=1, keepdim=True).shape") == "(2, 1)\n");
  CHECK(s.ok("x.sum(1, True).shape; sum(x, keepdim=False).item()") == "(2, 1)\n15\n");
  CHECK(s.ok("arange(end=3).sum().item(); arange(1, 4).sum().item()") == "3\n6\n");
  CHECK(s.ok("clamp(x, max=2).sum().item()") == "9\n");
  CHECK(s.ok("y = full(2, 2, value=7, dtype=int32)\ny.dtype; y.sum().item()") == "int32\n28\n");
  CHECK(s.ok("arange(4).float().var(correction=0).item()") == "1.25\n");
  // Ops of more inputs and lists, on the worker.
  CHECK(s.ok("z = cat([x, x, x], 1)\nz.shape; z.sum().item()") == "(2, 9)\n45\n");
  CHECK(s.ok("stack([x, x]).shape; where(x > 2, x, 0 * x).sum().item()") == "(2, 2, 3)\n12\n");
  CHECK(s.ok("gather(x, 1, [[2, 0], [1, 1]]).sum().item()") == "10\n");
  CHECK(s.ok("i = arange(16).float().view(1, 1, 4, 4)\n"
             "max_pool2d(i, 2).sum().item(); avg_pool2d(i, kernel_size=2).sum().item()") ==
        "40.0\n30.0\n");
  CHECK(s.ok("w = ones(1, 1, 2, 2)\nconv2d(i, w, ones(1), stride=2).sum().item()") == "124.0\n");
  CHECK(s.ok("lp = full(2, 3, value=-1.5)\nnll_loss(lp, [0, 2], reduction='sum').item()") ==
        "3.0\n");
  CHECK(s.ok("topk(arange(5).float(), 2).sum().item(); topk_indices(arange(5), 1).item()") ==
        "7.0\n4\n");
  CHECK(s.run("x.sum(keep=True)").err ==
        "TypeError: sum(): unexpected keyword argument 'keep'; "
        "usage: " +
            usage(OpId::sum) + "\n");
}
