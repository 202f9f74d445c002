// The REPL language through the Interpreter (no terminal): scripted sessions with expected
// output. Cases without tensors need no workers; the others run against a Cluster of real
// dtr-worker processes.
#include <doctest/doctest.h>

#include <set>

#include "dtr/op_table.hpp"
#include "master/cluster.hpp"
#include "repl/completion.hpp"
#include "repl/op_call.hpp"
#include "repl/repl_support.hpp"

namespace {

using namespace dtr;
using namespace dtr::test;

TEST_CASE("numbers with precedence and unary minus and comparisons and assignment") {
  ReplSession s;
  CHECK(s.ok("1 + 2 * 3") == "7\n");
  CHECK(s.ok("(1 + 2) * 3") == "9\n");
  CHECK(s.ok("-2 ** 2") == "-4\n");
  CHECK(s.ok("2 ** 3 ** 2") == "512\n");
  CHECK(s.ok("2 ** -1") == "0.5\n");
  CHECK(s.ok("7 / 2") == "3.5\n");
  CHECK(s.ok("4 / 2") == "2.0\n");
  CHECK(s.ok("1.5e1 - -1") == "16.0\n");
  CHECK(s.ok("1 < 2; 2 <= 1; 3 == 3.0; 3 != 3") == "True\nFalse\nTrue\nFalse\n");
  CHECK(s.ok("n = 4\nn * n\nn += 1; n") == "16\n5\n");
  CHECK(s.ok("t = (2, 3)\nt; t[-1]; t[::-1]; (5,)") == "(2, 3)\n3\n(3, 2)\n(5,)\n");
  CHECK(s.ok("print('a', 1, 2.5, None, True, float64)") == "a 1 2.5 None True float64\n");
  CHECK(s.ok("'x' + \"y\"") == "'xy'\n");
  CHECK(s.ok("None") == "");
  CHECK(s.ok("inf; -inf") == "inf\n-inf\n");
  CHECK(s.ok("x = 1  # a comment\n# only a comment\nx") == "1\n");
}

TEST_CASE("syntax errors point at their column and the next line works") {
  ReplSession s;  // interactive: no source prefix
  auto o = s.run("x = (1 +* 2)");
  CHECK(o.out.empty());
  CHECK(o.err ==
        "SyntaxError: expected an expression, found '*' (column 9)\n"
        "  x = (1 +* 2)\n"
        "          ^\n");
  CHECK(s.ok("1 + 1") == "2\n");

  CHECK(s.run("x.sum(1,, 2)").err ==
        "SyntaxError: expected an expression, found ',' (column 9)\n"
        "  x.sum(1,, 2)\n"
        "          ^\n");
  CHECK(s.run("a = 1 2").err ==
        "SyntaxError: unexpected number 2 after the statement (column 7)\n"
        "  a = 1 2\n"
        "        ^\n");
  CHECK(s.run("1 < 2 < 3").err ==
        "SyntaxError: chained comparisons are not supported; use parentheses (column 7)\n"
        "  1 < 2 < 3\n"
        "        ^\n");
  CHECK(has(s.run("f(x) = 3").err,
            "cannot assign to this expression with '=' (only to a name or an indexed tensor) "
            "(column 6)"));
  CHECK(has(s.run("'open").err, "unterminated string (column 1)"));
  CHECK(has(s.run("x ] 1").err, "']' does not match any open bracket (column 3)"));
  CHECK(has(s.run("x $ 1").err, "unexpected character '$' (column 3)"));
  CHECK(has(s.run("  1 + 1").err, "SyntaxError: unexpected indent (column 3)"));
  CHECK(has(s.run(":bogus").err, "unknown command ':bogus'"));
  CHECK(s.interpreter().failures() == 10);
  CHECK(s.ok("2 * 21") == "42\n");
}

TEST_CASE("script errors carry the source and line and blocks end at a dedent") {
  ReplSession s(false, "demo.dtr");
  auto o = s.run("a = 1\n\nb = a +\nc = 2\nc");
  CHECK(o.err ==
        "demo.dtr:3: SyntaxError: expected an expression, found end of line (column 8)\n"
        "  b = a +\n"
        "         ^\n");
  CHECK(o.out == "2\n");
  o = s.run("with node(0):\n  1\n\n  2\n    3\n");
  CHECK(has(o.err, "demo.dtr:10: SyntaxError: unexpected indent (column 5)"));
  o = s.run("with node(0):\nx = 1");
  CHECK(has(o.err, "demo.dtr:11: SyntaxError: expected an indented block after 'with ...:'"));
  o = s.run("foo + 1");
  CHECK(o.err == "demo.dtr:13: NameError: name 'foo' is not defined\n");
  o = s.run("y = (1 +\n     2)\ny");  // brackets continue a line
  CHECK(o.err.empty());
  CHECK(o.out == "3\n");
}

TEST_CASE("every op of the table has a signature the REPL can bind") {
  std::set<std::string> functions;
  for (const std::string& f : repl::Evaluator::function_names()) functions.insert(f);
  for (const OpDef& d : all_ops()) {
    INFO(d.help);
    CHECK(d.usage.substr(0, d.name.size() + 1) == std::string(d.name) + "(");
    int tensors = 0;
    for (const OpParam& p : d.signature.params())
      tensors += p.type == ParamType::Tensor || p.type == ParamType::Operand ? 1
                 : p.type == ParamType::Tensors                              ? kMaxOpInputs
                                                                             : 0;
    CHECK(tensors == d.max_inputs);
    CHECK(functions.count(std::string(d.name)) == 1);
    if (d.has_inplace_form) CHECK(functions.count(std::string(d.name) + "_") == 1);
    auto ref = repl::find_op_ref(d.name);
    REQUIRE(ref);
    CHECK(ref->def == &d);
  }
}

TEST_CASE("completion of variables and functions and methods and commands") {
  ReplSession s;
  repl::Evaluator& ev = s.interpreter().evaluator();
  ev.set_variable("myvar", repl::Value(1));
  ev.set_variable("x", repl::Value(2));
  using V = std::vector<std::string>;
  CHECK(repl::complete(ev, "x.resh") == V{"x.reshape("});
  CHECK(repl::complete(ev, "x.su") == V{"x.sub(", "x.sub_(", "x.sum("});
  CHECK(repl::complete(ev, "x.sha") == V{"x.shape"});
  CHECK(repl::complete(ev, "x.get_n") == V{"x.get_node("});
  CHECK(repl::complete(ev, "myv") == V{"myvar"});
  CHECK(repl::complete(ev, "matm") == V{"matmul("});
  CHECK(repl::complete(ev, "synch") == V{"synchronize("});
  CHECK(repl::complete(ev, "float6") == V{"float64"});
  CHECK(repl::complete(ev, ":no") == V{":nodes"});
  CHECK(repl::complete(ev, "x[1:myv") == V{"x[1:myvar"});
  CHECK(repl::complete(ev, "1.") == V{});
  // Every op of the table completes as a function, and those with a tensor as a method.
  for (const OpDef& d : all_ops()) {
    auto f = repl::complete(ev, d.name);
    CHECK(std::find(f.begin(), f.end(), std::string(d.name) + "(") != f.end());
    auto m = repl::complete(ev, "x." + std::string(d.name));
    bool method = std::find(m.begin(), m.end(), "x." + std::string(d.name) + "(") != m.end();
    CHECK(method == (d.max_inputs > 0));
  }
}

TEST_CASE("help comes from the op table") {
  ReplSession s;
  for (const OpDef& d : all_ops()) {
    std::string out = s.ok("help(" + std::string(d.name) + ")");
    CHECK(out.substr(0, d.help.size()) == d.help);
  }
  CHECK(s.ok("help(\"add_\")") ==
        "add(a, b): a + b, broadcasting\n"
        "  add_: the in-place form; writes the result into its first tensor\n"
        "  kind: elementwise binary (also operators + - * / ** == != < <= > >=)\n");
  CHECK(s.ok("help(print)") == "print(value, ...): write the values, separated by spaces\n");
  std::string overview = s.ok("help");
  for (const OpDef& d : all_ops()) CHECK(has(overview, d.name));
  CHECK(has(overview, "synchronize(node?)"));
  CHECK(s.ok(":help") == overview);
  CHECK(s.run("help('nothing_like_this')").err ==
        "NameError: help: no op, builtin, method or dtype named 'nothing_like_this'\n");
}

// ---- with workers ----

TEST_CASE("tensor creation and printing and methods and chaining and properties") {
  Cluster cluster(2);
  ReplSession s;
  CHECK(s.ok("x = arange(6).view(2, 3)\nx") ==
        "tensor([[0, 1, 2],\n"
        "        [3, 4, 5]], shape=[2, 3], dtype=int64, node=0, device=cpu)\n");
  CHECK(s.ok("x.sum(1)") == "tensor([ 3, 12], shape=[2], dtype=int64, node=0, device=cpu)\n");
  CHECK(s.ok("x.sum(1, keepdim=True).shape") == "(2, 1)\n");
  CHECK(s.ok("x.sum(dim=(0, 1))") == "tensor(15, shape=[], dtype=int64, node=0, device=cpu)\n");
  CHECK(s.ok("x.to(float64).sum(1).mean()") ==
        "tensor(7.5000, shape=[], dtype=float64, node=0, device=cpu)\n");
  CHECK(s.ok("x.to(dtype=float32).dtype; x.dtype; x.shape; x.ndim") ==
        "float32\nint64\n(2, 3)\n2\n");
  CHECK(s.ok("x.get_node(); x.get_device(); x.numel(); x.size(-1); x.sum().item()") ==
        "0\n-1\n6\n3\n15\n");
  CHECK(s.ok("print(x.t().is_contiguous(), x.t().contiguous().is_contiguous())") == "False True\n");
  CHECK(s.ok("zeros(2, 2, dtype=int32)") ==
        "tensor([[0, 0],\n        [0, 0]], shape=[2, 2], dtype=int32, node=0, device=cpu)\n");
  CHECK(s.ok("ones((3,))") ==
        "tensor([1., 1., 1.], shape=[3], dtype=float32, node=0, device=cpu)\n");
  CHECK(s.ok("full((2,), 7)") ==
        "tensor([7., 7.], shape=[2], dtype=float32, node=0, device=cpu)\n");
  CHECK(s.ok("arange(2, 8, 3); arange(0.0, 1.0, 0.5)") ==
        "tensor([2, 5], shape=[2], dtype=int64, node=0, device=cpu)\n"
        "tensor([0.0000, 0.5000], shape=[2], dtype=float32, node=0, device=cpu)\n");
  CHECK(s.ok("linspace(0, 1, 3)") ==
        "tensor([0.0000, 0.5000, 1.0000], shape=[3], dtype=float32, node=0, device=cpu)\n");
  CHECK(s.ok("r = randn(20, 20)\nr.shape; r.dtype; randn(3, dtype=float64).dtype") ==
        "(20, 20)\nfloat32\nfloat64\n");
  std::string echoed = s.ok("big = zeros(100, 100)\nbig");
  CHECK(echoed == s.ok("print(big)"));  // echo and print agree
  CHECK(has(echoed, "...,\n"));         // a large tensor is summarized
  CHECK(has(echoed, "shape=[100, 100], dtype=float32, node=0, device=cpu)"));
  CHECK(s.ok("x.clamp(max=2)") ==
        "tensor([[0, 1, 2],\n        [2, 2, 2]], shape=[2, 3], dtype=int64, node=0, device=cpu)\n");
  CHECK(s.ok("x.to(float32).norm(1, 1)") ==
        "tensor([ 3., 12.], shape=[2], dtype=float32, node=0, device=cpu)\n");
  CHECK(s.ok("x.to(float32).var(1, correction=0)") ==
        "tensor([0.6667, 0.6667], shape=[2], dtype=float32, node=0, device=cpu)\n");
  CHECK(s.ok("x.permute(1, 0).shape; x.unsqueeze(0).shape; x.expand(4, 2, 3).shape") ==
        "(3, 2)\n(1, 2, 3)\n(4, 2, 3)\n");
  CHECK(s.ok("x.narrow(1, 1, 2).sum(); x.select(1, 2).sum(); x.slice(1, 0, 3, 2).sum()") ==
        "tensor(12, shape=[], dtype=int64, node=0, device=cpu)\n"
        "tensor(7, shape=[], dtype=int64, node=0, device=cpu)\n"
        "tensor(10, shape=[], dtype=int64, node=0, device=cpu)\n");
  CHECK(s.ok("add(x, 1).sum(); sub(10, x).sum(); maximum(x, 3).sum()") ==
        "tensor(21, shape=[], dtype=int64, node=0, device=cpu)\n"
        "tensor(45, shape=[], dtype=int64, node=0, device=cpu)\n"
        "tensor(21, shape=[], dtype=int64, node=0, device=cpu)\n");
  CHECK(s.ok("x.float().dtype; x.double().dtype; x.int().dtype; x.long().dtype; x.bool().dtype") ==
        "float32\nfloat64\nint32\nint64\nbool\n");
  CHECK(s.ok("synchronize(); synchronize(1)") == "");
}

TEST_CASE("tensor operators and lists and indexing and in-place and scopes") {
  Cluster cluster(2, cpu_only());  // device_count() is 0
  ReplSession s;
  s.ok("x = arange(6).view(2, 3)");
  CHECK(s.ok("(2 * x - 1)[1]") ==
        "tensor([5, 7, 9], shape=[3], dtype=int64, node=0, device=cpu)\n");
  CHECK(s.ok("(-x + x ** 2).sum()") == "tensor(40, shape=[], dtype=int64, node=0, device=cpu)\n");
  CHECK(s.ok("(x / 2)[0]") ==
        "tensor([0.0000, 0.5000, 1.0000], shape=[3], dtype=float32, node=0, device=cpu)\n");
  CHECK(s.ok("x > 2") ==
        "tensor([[False, False, False],\n        [ True,  True,  True]], shape=[2, 3], "
        "dtype=bool, node=0, device=cpu)\n");
  CHECK(s.ok("(x == x).sum(); (x != 1).sum(); (x <= 1).sum(); (x >= 1).sum(); (x < 5).sum()") ==
        "tensor(6, shape=[], dtype=int64, node=0, device=cpu)\n"
        "tensor(5, shape=[], dtype=int64, node=0, device=cpu)\n"
        "tensor(2, shape=[], dtype=int64, node=0, device=cpu)\n"
        "tensor(5, shape=[], dtype=int64, node=0, device=cpu)\n"
        "tensor(5, shape=[], dtype=int64, node=0, device=cpu)\n");

  // List literals: ints -> int64, any float -> float32, bools -> bool, nested -> 2-D.
  CHECK(s.ok("[1, 2, 3]") == "tensor([1, 2, 3], shape=[3], dtype=int64, node=0, device=cpu)\n");
  CHECK(s.ok("a = [[1, 2], [3, 4.5]]\na") ==
        "tensor([[1.0000, 2.0000],\n        [3.0000, 4.5000]], shape=[2, 2], dtype=float32, "
        "node=0, device=cpu)\n");
  CHECK(s.ok("[True, False].dtype; [[1], [2]].shape") == "bool\n(2, 1)\n");
  CHECK(s.ok("a @ a") ==
        "tensor([[ 7.0000, 11.0000],\n        [16.5000, 26.2500]], shape=[2, 2], "
        "dtype=float32, node=0, device=cpu)\n");
  CHECK(s.ok("matmul(a, [[1.0], [0.0]]).shape") == "(2, 1)\n");
  CHECK(s.ok("x.view([3, 2]).shape; x.sum([0, 1]).item()") == "(3, 2)\n15\n");

  // Indexing and slicing map to select / slice views.
  CHECK(s.ok("x[0]") == "tensor([0, 1, 2], shape=[3], dtype=int64, node=0, device=cpu)\n");
  CHECK(s.ok("x[-1, -1]") == "tensor(5, shape=[], dtype=int64, node=0, device=cpu)\n");
  CHECK(s.ok("x[:, 1:3]") ==
        "tensor([[1, 2],\n        [4, 5]], shape=[2, 2], dtype=int64, node=0, device=cpu)\n");
  CHECK(s.ok("x[1, ::2]; x[:, -2:]; x[..., 0]; x[None].shape; x[1:, :1].shape") ==
        "tensor([3, 5], shape=[2], dtype=int64, node=0, device=cpu)\n"
        "tensor([[1, 2],\n        [4, 5]], shape=[2, 2], dtype=int64, node=0, device=cpu)\n"
        "tensor([0, 3], shape=[2], dtype=int64, node=0, device=cpu)\n"
        "(1, 2, 3)\n(1, 1)\n");

  // In place: x[i] = ..., x += ..., name_ forms; views write through.
  CHECK(s.ok("y = zeros(2, 3)\ny[0] = 5\ny[1, 1:] = [7, 8]\ny") ==
        "tensor([[5., 5., 5.],\n        [0., 7., 8.]], shape=[2, 3], dtype=float32, node=0, "
        "device=cpu)\n");
  CHECK(s.ok("v = y[0]\nv += 1\ny[0]") ==
        "tensor([6., 6., 6.], shape=[3], dtype=float32, node=0, device=cpu)\n");
  CHECK(s.ok("y.mul_(2).sum(); y.zero_().sum(); y.fill_(1).sum()") ==
        "tensor(66., shape=[], dtype=float32, node=0, device=cpu)\n"
        "tensor(0., shape=[], dtype=float32, node=0, device=cpu)\n"
        "tensor(6., shape=[], dtype=float32, node=0, device=cpu)\n");

  // Scopes: one line, a block (ended by an empty line at the prompt), nested, device.
  CHECK(s.ok("with node(1): b = ones(2)\nb.get_node(); b") ==
        "1\ntensor([1., 1.], shape=[2], dtype=float32, node=1, device=cpu)\n");
  ReplSession::Output o = s.run("with node(1):\n    c = [1, 2]\n    c.get_node()\n", false);
  CHECK(o.out.empty());  // the block has not ended yet
  o = s.run("\n");
  CHECK(o.err.empty());
  CHECK(o.out == "1\n");
  CHECK(s.ok("c.get_node(); current_node()") == "1\n0\n");
  CHECK(s.ok("with node(1), device(-1):\n  with node(0):\n    d = ones(1)\n  e = ones(1)\n\n"
             "d.get_node(); e.get_node(); e.get_device()") == "0\n1\n-1\n");
  CHECK(s.ok("x.to(node=1).get_node(); (x.to(node=1) + b.sum()).get_node()") == "1\n1\n");
  // x.to(k) as in C++ and Python; both forms copy worker to worker (the master used to
  // fetch the tensor and send it: node 0 answered a get, and did no send_to_node).
  CHECK(s.ok("x.to(1).get_node(); (x.to(1) - x.to(node=1)).abs().sum().item()") == "1\n0\n");
  CHECK(s.ok(":nodes").find("send_to_node 5") != std::string::npos);
  // A list operand goes to the node of the tensor it meets.
  CHECK(s.ok("with node(1): q = zeros(3)\nq[1:] = [5, 6]\nq + [1, 1, 1]") ==
        "tensor([1., 6., 7.], shape=[3], dtype=float32, node=1, device=cpu)\n");
  CHECK(s.ok("set_node(1)\nones(1).get_node()\nset_node(0)\nnode_count(); device_count()") ==
        "1\n2\n0\n");
}

TEST_CASE("each kind of error is reported and the next line works") {
  Cluster cluster(2, cpu_only());  // the "no CUDA device" lines
  ReplSession s;
  s.ok("x = arange(6).view(2, 3)");

  // Unknown name.
  CHECK(s.run("y = foo + 1").err == "NameError: name 'foo' is not defined\n");
  CHECK(s.run("x.foo()").err == "NameError: 'tensor' object has no attribute 'foo'\n");
  // A near miss names the closest op, method, property, variable or constant.
  CHECK(s.run("x.sume()").err ==
        "NameError: 'tensor' object has no attribute 'sume'; did you mean 'sum'?\n");
  CHECK(s.run("x.shap").err ==
        "NameError: 'tensor' object has no attribute 'shap'; did you mean 'shape'?\n");
  CHECK(s.run("matmull(x, x)").err ==
        "NameError: name 'matmull' is not defined; did you mean 'matmul'?\n");
  CHECK(s.run("xx + 1").err == "NameError: name 'xx' is not defined; did you mean 'x'?\n");
  CHECK(s.run("ones(2).to(bfloat61)").err ==
        "NameError: name 'bfloat61' is not defined; did you mean 'bfloat16'?\n");
  // Wrong arity: the op table's arity and help text.
  std::string m = s.run("matmul(x)").err;
  CHECK(m == "TypeError: matmul(): takes 2 tensor arguments (a, b), got 1; usage: " +
                 std::string(op_def(OpId::matmul).help) + "\n");
  CHECK(s.run("x.neg(1)").err ==
        "TypeError: neg(): takes at most 1 argument (x), got 2; usage: neg(x): -x elementwise\n");
  CHECK(s.run("x.transpose(0)").err ==
        "TypeError: transpose(): missing argument 'd1'; usage: transpose(x, d0, d1): swap two "
        "dims\n");
  CHECK(has(s.run("x.sum(foo=1)").err, "TypeError: sum(): unexpected keyword argument 'foo'"));
  CHECK(has(s.run("x.to()").err, "TypeError: to(): missing argument 'dtype'"));
  // Shape errors from the master's shape rules, naming both shapes.
  CHECK(s.run("x + ones(4)").err ==
        "ShapeError: add: shapes [2, 3] and [4] are not broadcastable (size 3 vs 4 at dim 1)\n");
  CHECK(
      has(s.run("x @ x").err, "ShapeError: matmul: shapes [2, 3] and [2, 3] cannot be multiplied"));
  CHECK(has(s.run("x[0, 0, 0]").err, "IndexError: too many indices for a tensor of dimension 2"));
  CHECK(has(s.run("x[5]").err, "IndexError: select: index 5 is out of range for dim 0 of size 2"));
  CHECK(has(s.run("x[::-1]").err, "slice: step must be positive, got -1"));
  CHECK(has(s.run("x.mean()").err, "DTypeError: mean: expected a floating point input"));
  CHECK(has(s.run("[[1, 2], [3]]").err, "ShapeError: list literal is ragged"));
  CHECK(has(s.run("with device(0): z = ones(1)").err,
            "IndexError: device(0): node 0 has no CUDA device 0"));
  CHECK(has(s.run("with node(7): z = ones(1)").err, "IndexError: node(7): node 7 does not exist"));
  CHECK(has(s.run("with 3: z = 1").err, "TypeError: 'with' needs node(k) or device(k)"));
  CHECK(has(s.run("1 / 0").err, "division by zero"));
  // Tensors on different nodes.
  CHECK(has(s.run("with node(1): w = ones(2, 3)\nx + w").err,
            "add: tensors live on different nodes or devices"));

  // A remote error: accepted by the master's rules, refused by the worker's kernel; it shows
  // when the result (or one made from it) is used, with op, node and cause.
  CHECK(s.ok("bad = arange(5).pow(-1)\ndep = bad + 1") == "");
  ReplSession::Output o = s.run("print(dep)\nprint(x.sum())");
  CHECK(has(o.err, "RemoteError: add failed on node 0 (cpu) producing tensor %"));
  CHECK(has(o.err, "first cause: pow producing tensor %"));
  CHECK(has(o.err, "negative integer powers"));
  CHECK(o.out == "tensor(15, shape=[], dtype=int64, node=0, device=cpu)\n");  // next line ran
  // print(dep) raised it: synchronize() does not again; one nobody read, it does.
  CHECK(s.ok("synchronize()") == "");
  CHECK(s.ok("unread = arange(3).pow(-1)") == "");
  o = s.run("synchronize()");
  CHECK(has(o.err, "RemoteError: pow failed on node 0 (cpu)"));
  CHECK(s.ok("synchronize(); x.sum().item()") == "15\n");

  // Interactive statement echo of a remote failure.
  o = s.run("arange(3).pow(-2)");
  CHECK(has(o.err, "RemoteError: pow failed on node 0 (cpu)"));
  CHECK(s.ok("1 + 1") == "2\n");
}

TEST_CASE("captured graphs: with capture(g) records, g.replay() runs, sync points refused") {
  Cluster cluster(2, cpu_only());
  ReplSession s;
  s.ok("x = zeros(3)\ng = graph()");
  CHECK(s.ok("g") == "graph(empty)\n");
  CHECK(s.ok("with capture(g):\n    x += 1\n    y = x * 2\n    with node(1): z = ones(2) + 1\n")
            .empty());
  CHECK(s.ok("g.replays()") == "0\n");
  s.ok("g.replay(3)");
  CHECK(s.ok("x; y; z") ==
        "tensor([3., 3., 3.], shape=[3], dtype=float32, node=0, device=cpu)\n"
        "tensor([6., 6., 6.], shape=[3], dtype=float32, node=0, device=cpu)\n"
        "tensor([2., 2.], shape=[2], dtype=float32, node=1, device=cpu)\n");
  CHECK(has(s.ok("g"), "commands {0: 2, 1: 2}, replays 3)"));
  // An echo or a print inside a capture would be a sync point: no echo, print refused.
  CHECK(s.ok("h = graph()\nwith capture(h): x + 1") == "");
  CHECK(has(s.run("with capture(h): print(x)").err, "a sync point cannot be captured"));
  CHECK(has(s.run("with capture(x): x += 1").err, "capture(): expected a graph"));
  CHECK(has(s.run("with capture(g), capture(h): x += 1").err, "captures do not nest"));
  s.ok("g.reset()");
  CHECK(has(s.run("g.replay()").err, "was freed"));
  CHECK(s.ok("x.sum().item()") == "9.0\n");
  CHECK(has(s.ok("help()"), "g.replay(n=1)"));
}

TEST_CASE("the nodes command shows each node's worker and memory in use and live tensors") {
  Cluster cluster(2, cpu_only());  // the "no CUDA device" lines
  ReplSession s;
  s.ok("x = zeros(1000)");
  std::string out = s.ok(":nodes");
  INFO(out);
  CHECK(has(out, "node 0 (current)  worker "));
  CHECK(has(out, "node 1  worker "));
  CHECK(has(out, "in use 3.9 KiB"));
  CHECK(has(out, "1 live tensor\n"));
  CHECK(has(out, "0 live tensors\n"));
  CHECK(has(out, "(no CUDA devices)"));
  CHECK(worker_pids(out).size() == 2);
  // The live figures (dtr::node_metrics): commands, bytes, queues, the worker's own.
  CHECK(has(out, "  commands op 1, "));
  CHECK(has(out, "  queued   0: 0 (stream: tasks not done)"));
  CHECK(has(out, "  worker   1 session, 0 refused, master heard "));
  CHECK(has(out, "tracing off"));
}

TEST_CASE("a worker that dies fails its node's lines and the others keep working") {
  MasterOptions o = test_options();
  o.sync_timeout = 2s;
  Cluster cluster(2, o);
  ReplSession s;
  CHECK(s.ok("with node(1): a = ones(2)\nb = ones(2)\na.get_node()") == "1\n");
  REQUIRE(cluster.worker(1).stop(SIGKILL, 5s) != -1);
  ReplSession::Output r = s.run("print(a)");
  INFO(r.err);
  CHECK((has(r.err, "TimeoutError: node 1") || has(r.err, "TransportError: node 1")));
  CHECK(s.ok("b.sum().item()") == "2.0\n");
  r = s.run(":nodes");
  CHECK(has(r.out, "node 0 (current)  worker "));
  CHECK(has(r.out, "node 1  worker "));
  CHECK(has(r.out, "no answer: "));
  CHECK(has(r.err, "node 1"));
  CHECK(s.ok("print(b + 1)") == "tensor([2., 2.], shape=[2], dtype=float32, node=0, device=cpu)\n");
}

}  // namespace
