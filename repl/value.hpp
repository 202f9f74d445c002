// Values of the REPL language: None, bools, integers, floats, strings, dtypes, remote
// tensors (dtr::DistributedTensor handles), lists and tuples, node/device/capture scopes,
// captured graphs and callables (a builtin or op function, or a method bound to a value).
//
// A list literal stays a list while it is an argument that takes integers (a shape, dims)
// or is indexed; wherever its value is kept or used as data (assigned, printed, echoed, an
// operand, a tensor argument, a method receiver) it becomes a tensor on the current node
// (to_tensor). A tuple, e.g. `x.shape` or `(2, 3)`, stays a tuple.
//
// Thread safety: values are plain data plus tensor handles (see distributed.hpp); use one
// value from one thread at a time.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "dtr/distributed.hpp"
#include "dtr/error.hpp"
#include "dtr/graph.hpp"

namespace dtr::repl {

// A value of the wrong type for what it is used for (Python's TypeError).
class TypeError : public InvalidArgument {
 public:
  using InvalidArgument::InvalidArgument;
};

// A name that is not a variable, builtin, op or dtype (Python's NameError).
class NameError : public InvalidArgument {
 public:
  using InvalidArgument::InvalidArgument;
};

struct Value;

struct NoneValue {
  friend bool operator==(NoneValue, NoneValue) { return true; }
};
struct ListValue {
  std::vector<Value> items;
  bool tuple = false;
};
// A captured graph (dtr/graph.hpp), empty until `with capture(g):` fills it; copies share it.
struct GraphValue {
  std::shared_ptr<Graph> graph;
};
// `node(k)`, `device(k)` or `capture(g)`: what `with` makes current (a capture records the
// body's commands into graph `graph` instead of running them).
struct ScopeValue {
  enum class Kind { Node, Device, Capture } kind;
  int index = 0;
  std::shared_ptr<Graph> graph;  // Capture
};
// A builtin function or an op used as a function, by name.
struct FunctionValue {
  std::string name;
};
// `x.name` for a method name: the receiver and the method.
struct MethodValue {
  std::shared_ptr<const Value> self;
  std::string name;
};

struct Value {
  using Variant =
      std::variant<NoneValue, bool, int64_t, double, std::string, DType, DistributedTensor,
                   ListValue, ScopeValue, FunctionValue, MethodValue, GraphValue>;
  Variant v;

  Value() : v(NoneValue{}) {}
  template <typename T>
  requires(!std::is_same_v<std::decay_t<T>, Value> && !std::is_same_v<std::decay_t<T>, int> &&
           !std::is_same_v<std::decay_t<T>, const char*>) Value(T&& x)
      : v(std::forward<T>(x)) {}
  Value(int x) : v(static_cast<int64_t>(x)) {}
  Value(const char* s) : v(std::string(s)) {}

  template <typename T>
  bool is() const {
    return std::holds_alternative<T>(v);
  }
  template <typename T>
  const T& as() const {
    return std::get<T>(v);
  }
  bool is_none() const { return is<NoneValue>(); }
  bool is_number() const { return is<int64_t>() || is<double>() || is<bool>(); }
  bool is_tensor() const { return is<DistributedTensor>(); }
  bool is_list() const { return is<ListValue>() && !as<ListValue>().tuple; }
  bool is_sequence() const { return is<ListValue>(); }
};

// "int", "float", "tensor", ... for error messages.
std::string type_name(const Value& v);

// Python-style repr, the form the REPL echoes: 'text' quoted, tensors with values (a sync
// point), lists [1, 2], tuples (1, 2). Floats keep a '.0'.
std::string repr(const Value& v);
// As print() writes it: strings without quotes, otherwise repr.
std::string str(const Value& v);
std::string format_float(double d);

// Number-ish conversions; throw TypeError naming `what` (e.g. "sum(): argument 'dim'").
Scalar to_scalar(const Value& v, std::string_view what);
int64_t to_int(const Value& v, std::string_view what);
bool to_bool(const Value& v, std::string_view what);
DType to_dtype(const Value& v, std::string_view what);
// An int, or a tuple/list of ints (nested lists are flattened one level: (2, 3) or [2, 3]).
Dims to_dims(const Value& v, std::string_view what);

// A (nested) list of numbers to a local tensor: any float makes float32, else any int
// makes int64, all bools make bool. Throws ShapeError for ragged lists, TypeError for
// non-numbers.
local::Tensor list_to_local(const ListValue& list);
// The tensor a value stands for: itself, or a list sent (dist_send) to `node` (-1: the
// current node). Throws TypeError naming `what` for anything else.
DistributedTensor to_tensor(const Value& v, std::string_view what, int node = -1);

}  // namespace dtr::repl
