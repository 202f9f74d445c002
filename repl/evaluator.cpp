// The REPL evaluator: expressions, statements, builtins, help and :nodes.
#include "repl/evaluator.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <exception>
#include <limits>
#include <memory>
#include <optional>

#include "dtr/generator.hpp"
#include "dtr/observability.hpp"

namespace dtr::repl {

namespace {

// ---- argument helpers for builtins ----

void expect_args(std::string_view name, const std::vector<Value>& args, size_t min, size_t max,
                 std::string_view usage) {
  if (args.size() < min || args.size() > max) {
    std::string count = min == max        ? std::to_string(min)
                        : max == SIZE_MAX ? fmt::format("at least {}", min)
                                          : fmt::format("{} to {}", min, max);
    throw TypeError(fmt::format("{}() takes {} argument{}, got {}; usage: {}", name, count,
                                max == 1 ? "" : "s", args.size(), usage));
  }
}

void no_kwargs(std::string_view name, const Kwargs& kwargs, std::string_view usage) {
  if (!kwargs.empty())
    throw TypeError(fmt::format("{}() got an unexpected keyword argument '{}'; usage: {}", name,
                                kwargs.front().first, usage));
}

// The receiver of a builtin method as a tensor.
DistributedTensor self_tensor(std::vector<Value>& args, std::string_view name) {
  return to_tensor(args.at(0), fmt::format("{}(): the receiver", name));
}

Value scalar_value(const Scalar& s) {
  switch (s.kind()) {
    case Scalar::Kind::Bool:
      return Value(s.to<bool>());
    case Scalar::Kind::Int:
      return Value(s.to_int());
    case Scalar::Kind::Float:
      return Value(s.to_double());
    case Scalar::Kind::None:
      break;
  }
  return Value();
}

Value tuple_of(const Dims& d) {
  ListValue l;
  l.tuple = true;
  for (int64_t i : d) l.items.emplace_back(i);
  return Value(std::move(l));
}

Value call_named_op(std::string_view op, std::vector<Value> args, const Kwargs& kwargs = {}) {
  std::optional<OpRef> ref = find_op_ref(op);
  if (!ref) throw NameError(fmt::format("the op table has no op '{}'", op));
  return Value(call_op(*ref, std::move(args), kwargs));
}

int device_from(const Value& v, std::string_view what) {
  if (v.is<std::string>()) {
    const std::string& s = v.as<std::string>();
    if (s == "cpu") return -1;
    if (s.rfind("cuda:", 0) == 0) {
      try {
        return std::stoi(s.substr(5));
      } catch (const std::exception&) {
      }
    }
    throw TypeError(fmt::format("{}: expected -1, 'cpu', k or 'cuda:k', got {}", what, repr(v)));
  }
  return static_cast<int>(to_int(v, what));
}

// ---- the builtins: everything callable that is not an op of the table ----

Value fill_like(std::string_view name, double value, std::vector<Value>& args,
                const Kwargs& kwargs) {
  Kwargs kw = kwargs;
  for (const auto& kv : kw)
    if (kv.first != "dtype")
      throw TypeError(fmt::format("{}() got an unexpected keyword argument '{}'", name, kv.first));
  kw.emplace_back("value", value == 0.0 ? Value(0) : Value(1));
  if (args.empty()) throw TypeError(fmt::format("{}() needs a shape, e.g. {}(3, 4)", name, name));
  return call_named_op("full", args, kw);
}

// x.float() and the like: the op `to` with a fixed dtype.
Value convert_method(std::string_view name, DType dtype, std::vector<Value>& args,
                     const Kwargs& kwargs) {
  std::string usage = fmt::format("x.{}()", name);
  no_kwargs(name, kwargs, usage);
  expect_args(name, args, 1, 1, usage);
  return call_named_op("to", {args[0], Value(dtype)});
}

const std::vector<Builtin> kBuiltins = {
    {"print", "print(value, ...): write the values, separated by spaces",
     [](Evaluator& ev, std::vector<Value>& args, const Kwargs& kw) {
       no_kwargs("print", kw, "print(value, ...)");
       std::string line;
       for (size_t i = 0; i < args.size(); ++i) {
         const Value& v = args[i];
         if (i) line += " ";
         line += str(v.is_list() ? Value(to_tensor(v, "print()")) : v);
       }
       ev.out() << line << "\n";
       return Value();
     }},
    {"help", "help(topic?): this overview, or the help of an op, builtin, method or dtype",
     [](Evaluator& ev, std::vector<Value>& args, const Kwargs& kw) {
       no_kwargs("help", kw, "help(topic?)");
       expect_args("help", args, 0, 1, "help(topic?)");
       if (args.empty()) {
         ev.help(ev.out());
       } else {
         const Value& t = args[0];
         std::string topic = t.is<FunctionValue>() ? t.as<FunctionValue>().name
                             : t.is<MethodValue>() ? t.as<MethodValue>().name
                             : t.is<std::string>() ? t.as<std::string>()
                             : t.is<DType>()       ? std::string(dtype_name(t.as<DType>()))
                                                   : std::string();
         if (topic.empty())
           throw TypeError(
               fmt::format("help(): expected a function, method or name, got {}", type_name(t)));
         ev.help(ev.out(), topic);
       }
       return Value();
     }},
    {"synchronize",
     "synchronize(node?): wait until every command sent to the node (default: all nodes) "
     "has run; raises the first remote failure not reported before",
     [](Evaluator&, std::vector<Value>& args, const Kwargs& kw) {
       no_kwargs("synchronize", kw, "synchronize(node?)");
       expect_args("synchronize", args, 0, 1, "synchronize(node?)");
       dtr::synchronize(args.empty() ? -1 : static_cast<int>(to_int(args[0], "synchronize()")));
       return Value();
     }},
    {"node", "node(k): a scope; `with node(k): ...` runs the body with node k current",
     [](Evaluator&, std::vector<Value>& args, const Kwargs& kw) {
       no_kwargs("node", kw, "node(k)");
       expect_args("node", args, 1, 1, "node(k)");
       int k = static_cast<int>(to_int(args[0], "node()"));
       if (k < 0 || k >= node_count())
         throw IndexError(fmt::format("node({}): node {} does not exist (there are {} nodes)", k, k,
                                      node_count()));
       return Value(ScopeValue{ScopeValue::Kind::Node, k, nullptr});
     }},
    {"device",
     "device(k): a scope; `with device(k): ...` makes CUDA device k current (-1 or 'cpu': "
     "the node's CPU)",
     [](Evaluator&, std::vector<Value>& args, const Kwargs& kw) {
       no_kwargs("device", kw, "device(k)");
       expect_args("device", args, 1, 1, "device(k)");
       int k = device_from(args[0], "device()");
       if (k < -1) throw IndexError(fmt::format("device({}): invalid device", k));
       return Value(ScopeValue{ScopeValue::Kind::Device, k, nullptr});
     }},
    {"graph",
     "graph(): an empty captured graph; `with capture(g): ...` records into it, g.replay() "
     "runs it again (one command per node)",
     [](Evaluator&, std::vector<Value>& args, const Kwargs& kw) {
       no_kwargs("graph", kw, "graph()");
       expect_args("graph", args, 0, 0, "graph()");
       return Value(GraphValue{std::make_shared<Graph>()});
     }},
    {"capture",
     "capture(g): a scope; `with capture(g): ...` records the body's commands into graph g "
     "instead of running them (no sync points inside)",
     [](Evaluator&, std::vector<Value>& args, const Kwargs& kw) {
       no_kwargs("capture", kw, "capture(g)");
       expect_args("capture", args, 1, 1, "capture(g)");
       if (!args[0].is<GraphValue>())
         throw TypeError(
             fmt::format("capture(): expected a graph (g = graph()), got {}", type_name(args[0])));
       return Value(ScopeValue{ScopeValue::Kind::Capture, 0, args[0].as<GraphValue>().graph});
     }},
    {"set_node", "set_node(k): make node k current from now on (outside any `with`)",
     [](Evaluator&, std::vector<Value>& args, const Kwargs& kw) {
       no_kwargs("set_node", kw, "set_node(k)");
       expect_args("set_node", args, 1, 1, "set_node(k)");
       dtr::set_node(static_cast<int>(to_int(args[0], "set_node()")));
       return Value();
     }},
    {"set_device", "set_device(k): make device k (-1: CPU) current from now on",
     [](Evaluator&, std::vector<Value>& args, const Kwargs& kw) {
       no_kwargs("set_device", kw, "set_device(k)");
       expect_args("set_device", args, 1, 1, "set_device(k)");
       int k = device_from(args[0], "set_device()");
       if (k >= device_count(current_node()))
         throw IndexError(fmt::format("set_device: node {} has no CUDA device {} (it has {})",
                                      current_node(), k, device_count(current_node())));
       dtr::set_device(k);
       return Value();
     }},
    {"current_node", "current_node(): the node new tensors go to",
     [](Evaluator&, std::vector<Value>& args, const Kwargs& kw) {
       no_kwargs("current_node", kw, "current_node()");
       expect_args("current_node", args, 0, 0, "current_node()");
       return Value(dtr::current_node());
     }},
    {"current_device", "current_device(): the device new tensors go to (-1: the CPU)",
     [](Evaluator&, std::vector<Value>& args, const Kwargs& kw) {
       no_kwargs("current_device", kw, "current_device()");
       expect_args("current_device", args, 0, 0, "current_device()");
       return Value(dtr::current_device());
     }},
    {"node_count", "node_count(): the number of nodes (workers)",
     [](Evaluator&, std::vector<Value>& args, const Kwargs& kw) {
       no_kwargs("node_count", kw, "node_count()");
       expect_args("node_count", args, 0, 0, "node_count()");
       return Value(dtr::node_count());
     }},
    {"device_count", "device_count(node?): CUDA devices on a node (default: the current one)",
     [](Evaluator&, std::vector<Value>& args, const Kwargs& kw) {
       no_kwargs("device_count", kw, "device_count(node?)");
       expect_args("device_count", args, 0, 1, "device_count(node?)");
       int n =
           args.empty() ? dtr::current_node() : static_cast<int>(to_int(args[0], "device_count()"));
       return Value(dtr::device_count(n));
     }},
    {"zeros", "zeros(shape, dtype=float32): tensor of zeros (shape: zeros(2, 3) or zeros((2, 3)))",
     [](Evaluator&, std::vector<Value>& args, const Kwargs& kw) {
       return fill_like("zeros", 0, args, kw);
     }},
    {"ones", "ones(shape, dtype=float32): tensor of ones",
     [](Evaluator&, std::vector<Value>& args, const Kwargs& kw) {
       return fill_like("ones", 1, args, kw);
     }},
    {"tensor", "tensor(data, dtype?): a tensor on the current node from a (nested) list of numbers",
     [](Evaluator&, std::vector<Value>& args, const Kwargs& kw) {
       expect_args("tensor", args, 1, 2, "tensor(data, dtype?)");
       std::optional<DType> dtype;
       if (args.size() == 2) dtype = to_dtype(args[1], "tensor(): argument 'dtype'");
       for (const auto& [k, v] : kw) {
         if (k != "dtype" || dtype)
           throw TypeError(fmt::format("tensor() got an unexpected keyword argument '{}'", k));
         dtype = to_dtype(v, "tensor(): argument 'dtype'");
       }
       if (args[0].is_tensor()) {
         DistributedTensor t = args[0].as<DistributedTensor>();
         return dtype ? call_named_op("to", {Value(t), Value(*dtype)}) : Value(t);
       }
       if (!args[0].is<ListValue>() && !args[0].is_number())
         throw TypeError(
             fmt::format("tensor(): expected a list or a number, got {}", type_name(args[0])));
       ListValue wrapped;
       local::Tensor t;
       if (args[0].is<ListValue>()) {
         t = list_to_local(args[0].as<ListValue>());
       } else {
         wrapped.items.push_back(args[0]);
         t = list_to_local(wrapped).view(Shape{});
       }
       if (dtype) t = t.to(*dtype);
       return Value(dist_send(t));
     }},
    {"manual_seed", "manual_seed(seed): reseed the default generator (rand, randn, uniform_, ...)",
     [](Evaluator&, std::vector<Value>& args, const Kwargs& kw) {
       no_kwargs("manual_seed", kw, "manual_seed(seed)");
       expect_args("manual_seed", args, 1, 1, "manual_seed(seed)");
       dtr::manual_seed(static_cast<uint64_t>(to_int(args[0], "manual_seed()")));
       return Value();
     }},
    {"exit", "exit(code=0): leave the REPL (stops the local workers)",
     [](Evaluator& ev, std::vector<Value>& args, const Kwargs& kw) {
       no_kwargs("exit", kw, "exit(code=0)");
       expect_args("exit", args, 0, 1, "exit(code=0)");
       ev.request_quit(args.empty() ? 0 : static_cast<int>(to_int(args[0], "exit()")));
       return Value();
     }},
    {"quit", "quit(): leave the REPL",
     [](Evaluator& ev, std::vector<Value>& args, const Kwargs& kw) {
       no_kwargs("quit", kw, "quit()");
       expect_args("quit", args, 0, 0, "quit()");
       ev.request_quit(0);
       return Value();
     }},
};

// Methods of a graph (args[0] is the graph).
const std::vector<Builtin> kGraphMethods = {
    {"replay", "g.replay(n=1): run the captured graph again, n times (returns at once)",
     [](Evaluator&, std::vector<Value>& args, const Kwargs& kw) {
       no_kwargs("replay", kw, "g.replay(n=1)");
       expect_args("replay", args, 1, 2, "g.replay(n=1)");
       int64_t n = args.size() == 2 ? to_int(args[1], "replay()") : 1;
       for (int64_t i = 0; i < n; ++i) args[0].as<GraphValue>().graph->replay();
       return Value();
     }},
    {"reset", "g.reset(): free the graph on its workers (later replays fail)",
     [](Evaluator&, std::vector<Value>& args, const Kwargs& kw) {
       no_kwargs("reset", kw, "g.reset()");
       expect_args("reset", args, 1, 1, "g.reset()");
       args[0].as<GraphValue>().graph->reset();
       return Value();
     }},
    {"replays", "g.replays(): how many times the graph was replayed",
     [](Evaluator&, std::vector<Value>& args, const Kwargs& kw) {
       no_kwargs("replays", kw, "g.replays()");
       expect_args("replays", args, 1, 1, "g.replays()");
       const Graph& g = *args[0].as<GraphValue>().graph;
       return Value(static_cast<int64_t>(g.defined() ? g.replays() : 0));
     }},
};

// Methods of a tensor that are not ops of the table.
const std::vector<Builtin> kMethods = {
    {"get_node", "x.get_node(): the node the tensor lives on",
     [](Evaluator&, std::vector<Value>& args, const Kwargs& kw) {
       no_kwargs("get_node", kw, "x.get_node()");
       expect_args("get_node", args, 1, 1, "x.get_node()");
       return Value(self_tensor(args, "get_node").get_node());
     }},
    {"get_device", "x.get_device(): the device the tensor lives on (-1: the node's CPU)",
     [](Evaluator&, std::vector<Value>& args, const Kwargs& kw) {
       no_kwargs("get_device", kw, "x.get_device()");
       expect_args("get_device", args, 1, 1, "x.get_device()");
       return Value(self_tensor(args, "get_device").get_device());
     }},
    {"item", "x.item(): the only element of a one-element tensor, as a number (sync point)",
     [](Evaluator&, std::vector<Value>& args, const Kwargs& kw) {
       no_kwargs("item", kw, "x.item()");
       expect_args("item", args, 1, 1, "x.item()");
       return scalar_value(self_tensor(args, "item").item());
     }},
    {"numel", "x.numel(): the number of elements",
     [](Evaluator&, std::vector<Value>& args, const Kwargs& kw) {
       no_kwargs("numel", kw, "x.numel()");
       expect_args("numel", args, 1, 1, "x.numel()");
       return Value(self_tensor(args, "numel").numel());
     }},
    {"dim", "x.dim(): the number of dims",
     [](Evaluator&, std::vector<Value>& args, const Kwargs& kw) {
       no_kwargs("dim", kw, "x.dim()");
       expect_args("dim", args, 1, 1, "x.dim()");
       return Value(self_tensor(args, "dim").dim());
     }},
    {"size", "x.size(d?): the shape, or the size of dim d",
     [](Evaluator&, std::vector<Value>& args, const Kwargs& kw) {
       no_kwargs("size", kw, "x.size(d?)");
       expect_args("size", args, 1, 2, "x.size(d?)");
       DistributedTensor t = self_tensor(args, "size");
       if (args.size() == 1) return tuple_of(t.shape());
       return Value(t.size(to_int(args[1], "size()")));
     }},
    {"is_contiguous", "x.is_contiguous(): whether the elements are packed in row-major order",
     [](Evaluator&, std::vector<Value>& args, const Kwargs& kw) {
       no_kwargs("is_contiguous", kw, "x.is_contiguous()");
       expect_args("is_contiguous", args, 1, 1, "x.is_contiguous()");
       return Value(self_tensor(args, "is_contiguous").is_contiguous());
     }},
    {"t", "x.t(): transpose(x, 0, 1)",
     [](Evaluator&, std::vector<Value>& args, const Kwargs& kw) {
       no_kwargs("t", kw, "x.t()");
       expect_args("t", args, 1, 1, "x.t()");
       return call_named_op("transpose", {args[0], Value(0), Value(1)});
     }},
    {"flatten", "x.flatten(): reshape(x, -1)",
     [](Evaluator&, std::vector<Value>& args, const Kwargs& kw) {
       no_kwargs("flatten", kw, "x.flatten()");
       expect_args("flatten", args, 1, 1, "x.flatten()");
       return call_named_op("reshape", {args[0], Value(-1)});
     }},
    {"float", "x.float(): to(x, float32)",
     [](Evaluator&, std::vector<Value>& args, const Kwargs& kw) {
       return convert_method("float", DType::Float32, args, kw);
     }},
    {"double", "x.double(): to(x, float64)",
     [](Evaluator&, std::vector<Value>& args, const Kwargs& kw) {
       return convert_method("double", DType::Float64, args, kw);
     }},
    {"half", "x.half(): to(x, float16)",
     [](Evaluator&, std::vector<Value>& args, const Kwargs& kw) {
       return convert_method("half", DType::Float16, args, kw);
     }},
    {"bfloat16", "x.bfloat16(): to(x, bfloat16)",
     [](Evaluator&, std::vector<Value>& args, const Kwargs& kw) {
       return convert_method("bfloat16", DType::BFloat16, args, kw);
     }},
    {"int", "x.int(): to(x, int32)",
     [](Evaluator&, std::vector<Value>& args, const Kwargs& kw) {
       return convert_method("int", DType::Int32, args, kw);
     }},
    {"long", "x.long(): to(x, int64)",
     [](Evaluator&, std::vector<Value>& args, const Kwargs& kw) {
       return convert_method("long", DType::Int64, args, kw);
     }},
    {"bool", "x.bool(): to(x, bool)",
     [](Evaluator&, std::vector<Value>& args, const Kwargs& kw) {
       return convert_method("bool", DType::Bool, args, kw);
     }},
    {"zero_", "x.zero_(): fill_(x, 0)",
     [](Evaluator&, std::vector<Value>& args, const Kwargs& kw) {
       no_kwargs("zero_", kw, "x.zero_()");
       expect_args("zero_", args, 1, 1, "x.zero_()");
       return call_named_op("fill_", {args[0], Value(0)});
     }},
};

const std::vector<std::string> kProperties = {"shape", "dtype", "ndim"};

const Builtin* find_builtin(const std::vector<Builtin>& table, std::string_view name) {
  for (const Builtin& b : table)
    if (b.name == name) return &b;
  return nullptr;
}

std::optional<Value> constant(const std::string& name) {
  if (name == "inf") return Value(std::numeric_limits<double>::infinity());
  if (name == "nan") return Value(std::numeric_limits<double>::quiet_NaN());
  DType t;
  if (parse_dtype(name, t)) return Value(t);
  return std::nullopt;
}

// The op name an operator stands for.
std::string_view operator_op(std::string_view op) {
  if (op == "+") return "add";
  if (op == "-") return "sub";
  if (op == "*") return "mul";
  if (op == "/") return "div";
  if (op == "**") return "pow";
  if (op == "@") return "matmul";
  if (op == "==") return "eq";
  if (op == "!=") return "ne";
  if (op == "<") return "lt";
  if (op == "<=") return "le";
  if (op == ">") return "gt";
  if (op == ">=") return "ge";
  return {};
}

bool tensor_like(const Value& v) {
  return v.is_tensor() || v.is<ListValue>();
}

// Numbers as Python does them (bools count as ints).
Value number_op(std::string_view op, const Value& a, const Value& b) {
  bool floating = a.is<double>() || b.is<double>();
  auto as_int = [](const Value& v) {
    return v.is<bool>() ? int64_t{v.as<bool>()} : v.as<int64_t>();
  };
  auto as_double = [&](const Value& v) {
    return v.is<double>() ? v.as<double>() : static_cast<double>(as_int(v));
  };
  if (op == "==" || op == "!=" || op == "<" || op == "<=" || op == ">" || op == ">=") {
    double x = as_double(a), y = as_double(b);
    if (!floating) {
      int64_t i = as_int(a), j = as_int(b);
      if (op == "==") return Value(i == j);
      if (op == "!=") return Value(i != j);
      if (op == "<") return Value(i < j);
      if (op == "<=") return Value(i <= j);
      if (op == ">") return Value(i > j);
      return Value(i >= j);
    }
    if (op == "==") return Value(x == y);
    if (op == "!=") return Value(x != y);
    if (op == "<") return Value(x < y);
    if (op == "<=") return Value(x <= y);
    if (op == ">") return Value(x > y);
    return Value(x >= y);
  }
  if (op == "@")
    throw TypeError(
        fmt::format("unsupported operand types for @: '{}' and '{}'", type_name(a), type_name(b)));
  if (op == "/") {
    if (as_double(b) == 0.0) throw InvalidArgument("division by zero");
    return Value(as_double(a) / as_double(b));
  }
  if (floating || (op == "**" && as_int(b) < 0)) {
    double x = as_double(a), y = as_double(b);
    if (op == "+") return Value(x + y);
    if (op == "-") return Value(x - y);
    if (op == "*") return Value(x * y);
    if (x == 0.0 && y < 0) throw InvalidArgument("0.0 cannot be raised to a negative power");
    return Value(std::pow(x, y));
  }
  int64_t x = as_int(a), y = as_int(b), r = 0;
  bool overflow = false;
  if (op == "+") {
    overflow = __builtin_add_overflow(x, y, &r);
  } else if (op == "-") {
    overflow = __builtin_sub_overflow(x, y, &r);
  } else if (op == "*") {
    overflow = __builtin_mul_overflow(x, y, &r);
  } else {  // "**", y >= 0
    r = 1;
    for (int64_t base = x, e = y; e > 0 && !overflow; e >>= 1) {
      if (e & 1) overflow = __builtin_mul_overflow(r, base, &r);
      if (e > 1 && !overflow) overflow = __builtin_mul_overflow(base, base, &base);
    }
  }
  if (overflow)
    throw InvalidArgument(fmt::format("integer overflow in {} {} {} (64-bit integers)", x, op, y));
  return Value(r);
}

std::string format_bytes(int64_t bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(bytes);
  int u = 0;
  while (v >= 1024.0 && u < 4) {
    v /= 1024.0;
    ++u;
  }
  return u == 0 ? fmt::format("{} B", bytes) : fmt::format("{:.1f} {}", v, units[u]);
}

std::string_view kind_name(OpKind k) {
  switch (k) {
    case OpKind::Unary:
      return "elementwise unary";
    case OpKind::Binary:
      return "elementwise binary (also operators + - * / ** == != < <= > >=)";
    case OpKind::Reduce:
      return "reductions";
    case OpKind::Clamp:
      return "clamp";
    case OpKind::Norm:
      return "norm";
    case OpKind::Moment:
      return "moments";
    case OpKind::Linalg:
      return "linear algebra (matmul also as @)";
    case OpKind::View:
      return "views (share storage)";
    case OpKind::Convert:
      return "conversions";
    case OpKind::Mutate:
      return "in place only";
    case OpKind::Create:
      return "creation (on the current node and device)";
    case OpKind::Join:
      return "joining lists of tensors";
    case OpKind::Indexing:
      return "indexing and selection";
    case OpKind::NN:
      return "neural-network layers and their gradients";
  }
  return "other";
}

}  // namespace

// ---- names ----

const std::vector<Builtin>& Evaluator::builtin_functions() {
  return kBuiltins;
}
const std::vector<Builtin>& Evaluator::builtin_methods() {
  return kMethods;
}

std::vector<std::string> Evaluator::function_names() {
  std::vector<std::string> out;
  for (const Builtin& b : kBuiltins) out.emplace_back(b.name);
  for (std::string& n : op_call_names()) out.push_back(std::move(n));
  return out;
}

std::vector<std::string> Evaluator::method_names() {
  std::vector<std::string> out;
  for (const OpDef& d : all_ops()) {
    if (d.max_inputs == 0) continue;  // creation ops take no tensor
    out.emplace_back(d.name);
    if (d.has_inplace_form) out.push_back(std::string(d.name) + "_");
  }
  for (const Builtin& b : kMethods) out.emplace_back(b.name);
  for (const std::string& p : kProperties) out.push_back(p);
  return out;
}

std::vector<std::string> Evaluator::property_names() {
  return kProperties;
}

std::vector<std::string> Evaluator::constant_names() {
  std::vector<std::string> out = {"True", "False", "None", "inf", "nan"};
  for (int i = 0; i < kNumDTypes; ++i) out.emplace_back(dtype_name(static_cast<DType>(i)));
  return out;
}

// ---- evaluation ----

Evaluator::Evaluator(std::ostream& out) : out_(out) {}

namespace {

// Edit distance of a and b (insertions, deletions, substitutions and swaps of two
// neighbours, each one edit), or limit + 1 when it is more than `limit`.
size_t edit_distance(std::string_view a, std::string_view b, size_t limit) {
  if ((a.size() > b.size() ? a.size() - b.size() : b.size() - a.size()) > limit) return limit + 1;
  const size_t w = b.size() + 1;
  std::vector<size_t> d((a.size() + 1) * w);
  for (size_t i = 0; i <= a.size(); ++i) d[i * w] = i;
  for (size_t j = 0; j <= b.size(); ++j) d[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    for (size_t j = 1; j <= b.size(); ++j) {
      size_t v = std::min({d[(i - 1) * w + j] + 1, d[i * w + j - 1] + 1,
                           d[(i - 1) * w + j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1)});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1])
        v = std::min(v, d[(i - 2) * w + j - 2] + 1);
      d[i * w + j] = v;
    }
  }
  return std::min(d[a.size() * w + b.size()], limit + 1);
}

// "; did you mean 'sum'?" for the closest of `names` to `name` (at most two edits, and
// fewer than half its letters), or nothing.
std::string did_you_mean(const std::string& name, const std::vector<std::string>& names) {
  const size_t limit = std::min<size_t>(2, name.size() / 2);
  const std::string* best = nullptr;
  size_t best_d = limit + 1;
  for (const std::string& n : names) {
    const size_t d = edit_distance(name, n, limit);
    if (d < best_d) best_d = d, best = &n;
  }
  return best ? fmt::format("; did you mean '{}'?", *best) : std::string();
}

}  // namespace

Value Evaluator::lookup(const std::string& name) const {
  if (auto it = vars_.find(name); it != vars_.end()) return it->second;
  if (find_builtin(kBuiltins, name) || find_op_ref(name)) return Value(FunctionValue{name});
  if (std::optional<Value> c = constant(name)) return *c;
  std::vector<std::string> known = function_names();
  for (const auto& [var, value] : vars_) known.push_back(var);
  for (std::string& c : constant_names()) known.push_back(std::move(c));
  throw NameError(fmt::format("name '{}' is not defined{}", name, did_you_mean(name, known)));
}

Value Evaluator::attribute(const Value& obj, const std::string& name) {
  if (obj.is<GraphValue>() && find_builtin(kGraphMethods, name))
    return Value(MethodValue{std::make_shared<const Value>(obj), name});
  if (!tensor_like(obj))
    throw NameError(fmt::format("'{}' object has no attribute '{}'", type_name(obj), name));
  if (name == "shape" || name == "dtype" || name == "ndim") {
    DistributedTensor t = to_tensor(obj, name);
    if (name == "shape") return tuple_of(t.shape());
    if (name == "dtype") return Value(t.dtype());
    return Value(t.dim());
  }
  std::optional<OpRef> op = find_op_ref(name);
  if ((op && op->def->max_inputs > 0) || find_builtin(kMethods, name)) {
    // A list receiver becomes its tensor once, here.
    Value self = obj.is<ListValue>() ? Value(to_tensor(obj, name)) : obj;
    return Value(MethodValue{std::make_shared<const Value>(std::move(self)), name});
  }
  std::vector<std::string> known = method_names();
  for (std::string& p : property_names()) known.push_back(std::move(p));
  throw NameError(fmt::format("'{}' object has no attribute '{}'{}", type_name(obj), name,
                              did_you_mean(name, known)));
}

Value Evaluator::call(const Value& callee, std::vector<Value> args, const Kwargs& kwargs) {
  if (callee.is<FunctionValue>()) {
    const std::string& name = callee.as<FunctionValue>().name;
    if (const Builtin* b = find_builtin(kBuiltins, name)) return b->run(*this, args, kwargs);
    if (std::optional<OpRef> op = find_op_ref(name))
      return Value(call_op(*op, std::move(args), kwargs));
    throw NameError(fmt::format("name '{}' is not defined", name));
  }
  if (callee.is<MethodValue>()) {
    const MethodValue& m = callee.as<MethodValue>();
    args.insert(args.begin(), *m.self);
    if (m.self->is<GraphValue>())
      return find_builtin(kGraphMethods, m.name)->run(*this, args, kwargs);
    if (const Builtin* b = find_builtin(kMethods, m.name)) return b->run(*this, args, kwargs);
    // x.to(k) / x.to(node=k): a copy on node k, worker to worker as DistributedTensor::to
    // (not an op of the table; x.to(dtype) is).
    if (m.name == "to") {
      const bool by_name = kwargs.size() == 1 && kwargs[0].first == "node" && args.size() == 1;
      const bool by_position = kwargs.empty() && args.size() == 2 && args[1].is<int64_t>();
      if (by_name || by_position) {
        const int node =
            static_cast<int>(to_int(by_name ? kwargs[0].second : args[1], "to(): argument 'node'"));
        return Value(to_tensor(args[0], "to()").to(node));
      }
    }
    std::optional<OpRef> op = find_op_ref(m.name);
    if (!op) throw NameError(fmt::format("no method '{}'", m.name));
    return Value(call_op(*op, std::move(args), kwargs));
  }
  throw TypeError(fmt::format("'{}' object is not callable", type_name(callee)));
}

Value Evaluator::binary(std::string_view op, const Value& a, const Value& b) {
  if (tensor_like(a) || tensor_like(b)) return call_named_op(operator_op(op), {a, b});
  if (a.is_number() && b.is_number()) return number_op(op, a, b);
  if (op == "+" && a.is<std::string>() && b.is<std::string>())
    return Value(a.as<std::string>() + b.as<std::string>());
  if (op == "==" || op == "!=") {
    bool eq = false;
    if (a.v.index() == b.v.index()) {
      if (a.is<std::string>())
        eq = a.as<std::string>() == b.as<std::string>();
      else if (a.is<DType>())
        eq = a.as<DType>() == b.as<DType>();
      else if (a.is_none())
        eq = true;
      else
        eq = repr(a) == repr(b);
    }
    return Value(op == "==" ? eq : !eq);
  }
  throw TypeError(fmt::format("unsupported operand types for {}: '{}' and '{}'", op, type_name(a),
                              type_name(b)));
}

DistributedTensor Evaluator::index_tensor(const DistributedTensor& t,
                                          const std::vector<ExprPtr>& items) {
  // Evaluate the indices first, then count the dims they consume.
  struct Index {
    enum { Int, Slice, NewAxis, Ellipsis } kind;
    int64_t i = 0, start = 0, end = std::numeric_limits<int64_t>::max(), step = 1;
  };
  std::vector<Index> idx;
  int consumed = 0, ellipses = 0;
  for (const ExprPtr& e : items) {
    Index x{Index::Int};
    if (e->kind == Expr::Kind::Ellipsis) {
      x.kind = Index::Ellipsis;
      if (++ellipses > 1) throw IndexError("an index can only have a single ellipsis ('...')");
    } else if (e->kind == Expr::Kind::Slice) {
      x.kind = Index::Slice;
      if (e->a) {
        Value v = evaluate(*e->a);
        if (!v.is_none()) x.start = to_int(v, "slice start");
      }
      if (e->b) {
        Value v = evaluate(*e->b);
        if (!v.is_none()) x.end = to_int(v, "slice end");
      }
      if (e->c) {
        Value v = evaluate(*e->c);
        if (!v.is_none()) x.step = to_int(v, "slice step");
      }
      ++consumed;
    } else {
      Value v = evaluate(*e);
      if (v.is_none()) {
        x.kind = Index::NewAxis;
      } else if (v.is_tensor() || v.is<ListValue>()) {
        throw TypeError(
            "indexing with a tensor or a list is not supported; use integers, slices, None "
            "and ...");
      } else {
        x.i = to_int(v, "a tensor index");
        ++consumed;
      }
    }
    idx.push_back(x);
  }
  int64_t ndim = t.dim();
  if (consumed > ndim)
    throw IndexError(fmt::format("too many indices for a tensor of dimension {} (shape {}): {}",
                                 ndim, dtr::to_string(t.shape()), consumed));
  DistributedTensor r = t;
  int64_t d = 0;
  for (const Index& x : idx) {
    switch (x.kind) {
      case Index::Ellipsis:
        d += ndim - consumed;
        break;
      case Index::Int:
        r = call_named_op("select", {Value(r), Value(d), Value(x.i)}).as<DistributedTensor>();
        break;
      case Index::Slice:
        r = call_named_op("slice",
                          {Value(r), Value(d), Value(x.start), Value(x.end), Value(x.step)})
                .as<DistributedTensor>();
        ++d;
        break;
      case Index::NewAxis:
        r = call_named_op("unsqueeze", {Value(r), Value(d)}).as<DistributedTensor>();
        ++d;
        break;
    }
  }
  return r;
}

Value Evaluator::subscript(const Value& base, const std::vector<ExprPtr>& items) {
  if (base.is_tensor()) return Value(index_tensor(base.as<DistributedTensor>(), items));
  if (!base.is<ListValue>())
    throw TypeError(fmt::format("'{}' object is not subscriptable", type_name(base)));
  const ListValue& l = base.as<ListValue>();
  if (items.size() != 1)
    throw TypeError(fmt::format("{} indices must be one integer or slice", type_name(base)));
  const int64_t n = static_cast<int64_t>(l.items.size());
  const Expr& e = *items[0];
  if (e.kind == Expr::Kind::Slice) {
    auto get = [&](const ExprPtr& p) -> std::optional<int64_t> {
      if (!p) return std::nullopt;
      Value v = evaluate(*p);
      if (v.is_none()) return std::nullopt;
      return to_int(v, "a slice bound");
    };
    std::optional<int64_t> start = get(e.a), end = get(e.b), step_opt = get(e.c);
    int64_t step = step_opt.value_or(1);
    if (step == 0) throw InvalidArgument("slice step cannot be zero");
    auto clamp = [&](int64_t i, int64_t lo, int64_t hi) {
      if (i < 0) i += n;
      return std::clamp(i, lo, hi);
    };
    int64_t s =
        start ? clamp(*start, step > 0 ? 0 : -1, step > 0 ? n : n - 1) : (step > 0 ? 0 : n - 1);
    int64_t t = end ? clamp(*end, step > 0 ? 0 : -1, step > 0 ? n : n - 1) : (step > 0 ? n : -1);
    ListValue out;
    out.tuple = l.tuple;
    for (int64_t i = s; step > 0 ? i < t : i > t; i += step) out.items.push_back(l.items[i]);
    return Value(std::move(out));
  }
  if (e.kind == Expr::Kind::Ellipsis) return base;
  int64_t i = to_int(evaluate(e), fmt::format("{} index", type_name(base)));
  int64_t w = i < 0 ? i + n : i;
  if (w < 0 || w >= n)
    throw IndexError(fmt::format("{} index {} out of range (length {})", type_name(base), i, n));
  return l.items[w];
}

Value Evaluator::evaluate(const Expr& e) {
  switch (e.kind) {
    case Expr::Kind::Int:
      return Value(e.int_value);
    case Expr::Kind::Float:
      return Value(e.float_value);
    case Expr::Kind::String:
      return Value(e.text);
    case Expr::Kind::Bool:
      return Value(e.bool_value);
    case Expr::Kind::None:
      return Value();
    case Expr::Kind::Name:
      return lookup(e.text);
    case Expr::Kind::List:
    case Expr::Kind::Tuple: {
      ListValue l;
      l.tuple = e.kind == Expr::Kind::Tuple;
      for (const ExprPtr& item : e.items) l.items.push_back(evaluate(*item));
      return Value(std::move(l));
    }
    case Expr::Kind::Unary: {
      Value v = evaluate(*e.a);
      if (tensor_like(v)) {
        if (e.text == "+") return Value(to_tensor(v, "unary +"));
        return call_named_op("neg", {v});
      }
      if (e.text == "+") {
        if (!v.is_number())
          throw TypeError(fmt::format("bad operand type for unary +: '{}'", type_name(v)));
        return v.is<bool>() ? Value(int64_t{v.as<bool>()}) : v;
      }
      if (v.is<double>()) return Value(-v.as<double>());
      if (v.is<bool>()) return Value(-int64_t{v.as<bool>()});
      if (v.is<int64_t>()) {
        if (v.as<int64_t>() == std::numeric_limits<int64_t>::min())
          throw InvalidArgument("integer overflow in unary -");
        return Value(-v.as<int64_t>());
      }
      throw TypeError(fmt::format("bad operand type for unary -: '{}'", type_name(v)));
    }
    case Expr::Kind::Binary: {
      Value a = evaluate(*e.a);
      Value b = evaluate(*e.b);
      return binary(e.text, a, b);
    }
    case Expr::Kind::Attribute:
      return attribute(evaluate(*e.a), e.text);
    case Expr::Kind::Call: {
      Value callee = evaluate(*e.a);
      std::vector<Value> args;
      for (const ExprPtr& a : e.items) args.push_back(evaluate(*a));
      Kwargs kwargs;
      for (const auto& [k, v] : e.kwargs) kwargs.emplace_back(k, evaluate(*v));
      return call(callee, std::move(args), kwargs);
    }
    case Expr::Kind::Subscript:
      return subscript(evaluate(*e.a), e.items);
    case Expr::Kind::Slice:
    case Expr::Kind::Ellipsis:
      throw TypeError("a slice or '...' is only allowed inside [ ]");
  }
  return Value();
}

void Evaluator::assign(const Stmt& s) {
  Value v = evaluate(*s.value);
  const Expr& target = *s.target;
  if (s.op == "=") {
    if (target.kind == Expr::Kind::Name) {
      if (v.is_list()) v = Value(to_tensor(v, "the assigned list"));
      vars_[target.text] = std::move(v);
      return;
    }
    Value base = evaluate(*target.a);
    if (!base.is_tensor())
      throw TypeError(fmt::format("'{}' object does not support item assignment", type_name(base)));
    Value view(index_tensor(base.as<DistributedTensor>(), target.items));
    if (v.is_tensor() || v.is<ListValue>())  // a list goes to the view's node
      call_named_op("copy_", {view, v});
    else
      call_named_op("fill_", {view, v});
    return;
  }
  // Augmented: in place for tensors (as torch), rebinding for numbers.
  std::string op = s.op.substr(0, 1);
  Value current = evaluate(target);
  if (current.is_tensor()) {
    std::string inplace = std::string(operator_op(op)) + "_";
    call_named_op(inplace, {current, v});
    return;
  }
  if (target.kind != Expr::Kind::Name)
    throw TypeError(fmt::format("'{}' object does not support item assignment",
                                type_name(evaluate(*target.a))));
  vars_[target.text] = binary(op, current, v);
}

void Evaluator::run_with(const Stmt& s, bool echo) {
  std::vector<std::unique_ptr<node_guard>> nodes;
  std::vector<std::unique_ptr<device_guard>> devices;
  std::shared_ptr<Graph> into;  // `capture(g)`: the body is recorded into g
  bool device_scoped = false;
  for (const ExprPtr& c : s.contexts) {
    Value v = evaluate(*c);
    if (!v.is<ScopeValue>())
      throw TypeError(
          fmt::format("'with' needs node(k) or device(k) (or capture(g)), got {}", type_name(v)));
    const ScopeValue& sc = v.as<ScopeValue>();
    if (sc.kind == ScopeValue::Kind::Node) {
      nodes.push_back(std::make_unique<node_guard>(sc.index));
    } else if (sc.kind == ScopeValue::Kind::Device) {
      devices.push_back(std::make_unique<device_guard>(sc.index));
      device_scoped = true;
    } else {
      if (into) throw InvalidArgument("'with': one capture(g) at a time (captures do not nest)");
      into = sc.graph;
    }
  }
  if (device_scoped && current_device() >= device_count(current_node()))
    throw IndexError(fmt::format("device({}): node {} has no CUDA device {} (it has {})",
                                 current_device(), current_node(), current_device(),
                                 device_count(current_node())));
  auto body = [&](bool show) {
    for (const Stmt& b : s.body) {
      execute(b, show);
      if (quit_) break;
    }
  };
  if (!into) return body(echo);
  // Recorded, not run: nothing to echo (an echo would be a sync point).
  *into = dtr::capture([&] { body(false); });
}

void Evaluator::execute(const Stmt& s, bool echo) {
  switch (s.kind) {
    case Stmt::Kind::Expr: {
      // A bare `help` is help().
      if (s.value->kind == Expr::Kind::Name && s.value->text == "help" && !vars_.count("help")) {
        help(out_);
        return;
      }
      Value v = evaluate(*s.value);
      if (v.is_list()) v = Value(to_tensor(v, "the list"));
      if (echo && !v.is_none()) out_ << repr(v) << "\n";
      return;
    }
    case Stmt::Kind::Assign:
      assign(s);
      return;
    case Stmt::Kind::With:
      run_with(s, echo);
      return;
  }
}

// ---- help and :nodes ----

void Evaluator::help(std::ostream& os) const {
  os << "dtr-repl: Python-like statements over tensors held by the workers.\n"
        "  x = randn(20, 20)            y = x @ x.t() + 1       z = (y > 0).sum(1)\n"
        "  x[0], x[:, 1:3], x[-1, ::2]  x.sum(1, keepdim=True)  x.to(float64)\n"
        "  a = [[1, 2], [3, 4]]         (a list literal becomes a tensor on the current node)\n"
        "  with node(1): w = ones(3)    with node(1), device(0):   (then an indented block)\n"
        "  x += 1 (in place)            x[0] = 5 (fills the view)   print(x, x.shape, x.dtype)\n"
        "Values print with their node and device; printing a tensor waits for it (a sync point).\n"
        "\nBuiltins:\n";
  for (const Builtin& b : kBuiltins) os << "  " << b.help << "\n";
  os << "Tensor methods besides the ops (and the properties shape, dtype, ndim):\n";
  for (const Builtin& b : kMethods) os << "  " << b.help << "\n";
  os << "  x.to(k), x.to(node=k): a copy of x on node k (worker to worker)\n";
  os << "Graph methods (g = graph(); with capture(g): ...):\n";
  for (const Builtin& b : kGraphMethods) os << "  " << b.help << "\n";
  os << "Ops (functions, and methods on their first tensor; help(name) for one):\n";
  for (int k = 0; k <= static_cast<int>(OpKind::NN); ++k) {
    std::string names;
    for (const OpDef& d : all_ops())
      if (static_cast<int>(d.kind) == k) {
        if (!names.empty()) names += " ";
        names += d.name;
      }
    if (!names.empty())
      os << fmt::format("  {}:\n    {}\n", kind_name(static_cast<OpKind>(k)), names);
  }
  os << "  Unary, binary and clamp ops have an in-place form name_ (x.add_(1)).\n"
        "Constants: True False None inf nan; dtypes: float32 float64 float16 bfloat16 int32 "
        "int64 bool.\n"
        "Commands: :nodes (devices, memory, live tensors and figures per node)  :help  :quit "
        "(or Ctrl-D)\n";
}

void Evaluator::help(std::ostream& os, std::string_view topic) const {
  if (std::optional<OpRef> op = find_op_ref(topic)) {
    const OpDef& d = *op->def;
    os << d.help << "\n";
    if (op->inplace && d.kind != OpKind::Mutate)
      os << fmt::format("  {}_: the in-place form; writes the result into its first tensor\n",
                        d.name);
    os << fmt::format("  kind: {}", kind_name(d.kind));
    if (d.has_inplace_form && !op->inplace) os << fmt::format("; in-place form: {}_", d.name);
    os << "\n";
    if (d.name == "to") os << "  x.to(k), x.to(node=k): a copy of x on node k (worker to worker)\n";
    return;
  }
  if (const Builtin* b = find_builtin(kBuiltins, topic)) {
    os << b->help << "\n";
    return;
  }
  if (const Builtin* b = find_builtin(kMethods, topic)) {
    os << b->help << "\n";
    return;
  }
  if (topic == "shape" || topic == "dtype" || topic == "ndim") {
    os << fmt::format("x.{}: the tensor's {}\n", topic,
                      topic == "ndim" ? "number of dims" : std::string(topic));
    return;
  }
  DType t;
  if (parse_dtype(topic, t)) {
    os << fmt::format("{}: a dtype ({} bytes per element); x.to({}) converts\n", dtype_name(t),
                      element_size(t), dtype_name(t));
    return;
  }
  throw NameError(fmt::format("help: no op, builtin, method or dtype named '{}'", topic));
}

namespace {

// A node's live figures (dtr::node_metrics, what its metrics endpoint serves).
void print_figures(std::ostream& os, const NodeMetrics& m) {
  std::string commands, bytes, queues;
  for (const auto& [kind, n] : m.commands)
    if (n > 0) commands += fmt::format("{}{} {}", commands.empty() ? "" : ", ", kind, n);
  for (const auto& [kind, n] : m.bytes)
    if (n > 0)
      bytes += fmt::format("{}{} {}", bytes.empty() ? "" : ", ", kind,
                           format_bytes(static_cast<int64_t>(n)));
  for (const auto& [stream, depth] : m.stream_queues)
    queues += fmt::format("{}{}: {}", queues.empty() ? "" : ", ", stream, depth);
  os << fmt::format("  commands {}\n", commands.empty() ? "none" : commands);
  os << fmt::format("  bytes    {}\n", bytes.empty() ? "none" : bytes);
  os << fmt::format("  queued   {} (stream: tasks not done)\n", queues.empty() ? "-" : queues);
  for (const auto& d : m.devices)
    if (d.device >= 0)
      os << fmt::format("  cuda:{}   in use {}, {} live tensor{}\n", d.device,
                        format_bytes(d.bytes_in_use), d.live_tensors,
                        d.live_tensors == 1 ? "" : "s");
  os << fmt::format(
      "  worker   {} session{}, {} refused, master heard {:.0f} ms ago, flight recorder {} "
      "commands, tracing {}\n",
      m.sessions, m.sessions == 1 ? "" : "s", m.refused_connections, m.master_heartbeat_age_s * 1e3,
      m.flight_records, m.tracing ? "on" : "off");
}

}  // namespace

void Evaluator::print_nodes(std::ostream& os) const {
  // A node that does not answer is shown as such; the others are still listed, and the
  // first failure is raised at the end.
  std::exception_ptr first_failure;
  int n = node_count();
  for (int k = 0; k < n; ++k) {
    NodeInfo info = node_info(k);  // from the connection's hello: no round trip
    os << fmt::format("node {}{}  worker {}, {} threads\n", k,
                      k == current_node() ? " (current)" : "", info.worker, info.threads);
    try {
      NodeMemoryStats m = memory_stats(k);
      os << fmt::format("  cpu      {} total; in use {} (peak {}), {} live tensor{}\n",
                        format_bytes(info.cpu_total_memory), format_bytes(m.bytes_in_use),
                        format_bytes(m.peak_bytes), m.live_tensors, m.live_tensors == 1 ? "" : "s");
      print_figures(os, node_metrics(k));
    } catch (const Error& e) {
      os << fmt::format("  cpu      {} total; no answer: {}: {}\n",
                        format_bytes(info.cpu_total_memory), error_kind(e), e.what());
      if (!first_failure) first_failure = std::current_exception();
    }
    for (size_t i = 0; i < info.cuda_devices.size(); ++i)
      os << fmt::format("  cuda:{}   {}\n", i, info.cuda_devices[i]);
    if (info.cuda_devices.empty()) os << "  (no CUDA devices)\n";
  }
  if (first_failure) std::rethrow_exception(first_failure);
}

std::string error_kind(const std::exception& e) {
  if (dynamic_cast<const SyntaxError*>(&e)) return "SyntaxError";
  if (dynamic_cast<const NameError*>(&e)) return "NameError";
  if (dynamic_cast<const TypeError*>(&e)) return "TypeError";
  if (dynamic_cast<const RemoteError*>(&e)) return "RemoteError";
  if (dynamic_cast<const ShapeError*>(&e)) return "ShapeError";
  if (dynamic_cast<const DTypeError*>(&e)) return "DTypeError";
  if (dynamic_cast<const IndexError*>(&e)) return "IndexError";
  if (dynamic_cast<const InvalidArgument*>(&e)) return "InvalidArgument";
  if (dynamic_cast<const OutOfMemory*>(&e)) return "OutOfMemory";
  if (dynamic_cast<const ProtocolError*>(&e)) return "ProtocolError";
  if (dynamic_cast<const TransportError*>(&e)) return "TransportError";
  if (dynamic_cast<const TimeoutError*>(&e)) return "TimeoutError";
  if (dynamic_cast<const Error*>(&e)) return "Error";
  return "error";
}

}  // namespace dtr::repl
