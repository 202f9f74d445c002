// The REPL's evaluator: runs parsed statements against the master-worker session, with an
// environment of variables.
//
// Names resolve as: variables, then the builtins below, then op names from the op table
// (include/dtr/op_table.hpp; `add` and its in-place form `add_`), then constants (dtype
// names, inf, nan). Calling an op goes through the generic dispatch of op_call.hpp;
// operators map to ops by name (+ add, - sub, * mul, / div, ** pow, @ matmul, == eq,
// != ne, < lt, <= le, > gt, >= ge, unary - neg), so whatever the table holds is what the
// language has. Only the non-op builtins are listed here, in one table (evaluator.cpp,
// kBuiltins); a new builtin (streams, events, collectives as they land in the API) is one
// entry there: name, help line, handler.
//
// Thread safety: an Evaluator is used by one thread (the REPL's); it reads and sets that
// thread's current node and device (node_guard / device_guard).
#pragma once

#include <functional>
#include <map>
#include <ostream>
#include <string>
#include <string_view>
#include <vector>

#include "repl/op_call.hpp"
#include "repl/parser.hpp"
#include "repl/value.hpp"

namespace dtr::repl {

class Evaluator;

// A builtin function (`print(...)`) or a builtin method (`x.item()`; args[0] is the
// receiver).
struct Builtin {
  std::string_view name;
  std::string_view help;  // "print(value, ...): ..." (the signature, then what it does)
  std::function<Value(Evaluator&, std::vector<Value>&, const Kwargs&)> run;
};

class Evaluator {
 public:
  // Echoes and print() write to `out`.
  explicit Evaluator(std::ostream& out);

  // Runs one statement. An expression statement writes its value's repr when `echo` and
  // the value is not None. Throws dtr::Error (SyntaxError never: the input is parsed).
  void execute(const Stmt& s, bool echo = true);
  Value evaluate(const Expr& e);

  const std::map<std::string, Value>& variables() const { return vars_; }
  void set_variable(const std::string& name, Value v) { vars_[name] = std::move(v); }
  // Drops every variable (their tensors are freed on the workers).
  void clear_variables() { vars_.clear(); }

  // exit() / quit() were called.
  bool quit_requested() const { return quit_; }
  int exit_code() const { return exit_code_; }
  void request_quit(int code) {
    quit_ = true;
    exit_code_ = code;
  }

  std::ostream& out() { return out_; }

  // `help` / help(topic): an overview, or one op, builtin, method or dtype.
  void help(std::ostream& os) const;
  void help(std::ostream& os, std::string_view topic) const;
  // `:nodes`: each node's worker, devices, memory in use and live tensors (sync points).
  void print_nodes(std::ostream& os) const;

  // Names for completion.
  static std::vector<std::string> function_names();  // builtins, ops, in-place forms
  static std::vector<std::string> method_names();    // tensor methods and properties
  static std::vector<std::string> property_names();  // shape, dtype, ndim
  static std::vector<std::string> constant_names();  // dtypes, inf, nan, True, False, None
  static const std::vector<Builtin>& builtin_functions();
  static const std::vector<Builtin>& builtin_methods();

  // The value of an operator on two values (`op` as written: "+", "==", "@", ...).
  Value binary(std::string_view op, const Value& a, const Value& b);
  Value call(const Value& callee, std::vector<Value> args, const Kwargs& kwargs);

 private:
  Value lookup(const std::string& name) const;
  Value attribute(const Value& obj, const std::string& name);
  Value subscript(const Value& base, const std::vector<ExprPtr>& items);
  DistributedTensor index_tensor(const DistributedTensor& t, const std::vector<ExprPtr>& items);
  void assign(const Stmt& s);
  void run_with(const Stmt& s, bool echo);

  std::ostream& out_;
  std::map<std::string, Value> vars_;
  bool quit_ = false;
  int exit_code_ = 0;
};

// "ShapeError", "RemoteError", "SyntaxError", "TypeError", ...: the most derived dtr
// error class of `e` ("Error" for a plain dtr::Error, "error" for anything else).
std::string error_kind(const std::exception& e);

}  // namespace dtr::repl
