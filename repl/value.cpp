// REPL values: printing, conversions, lists to tensors.
#include "repl/value.hpp"

#include <fmt/format.h>

#include <cmath>

namespace dtr::repl {

namespace {

template <class... F>
struct Overloaded : F... {
  using F::operator()...;
};
template <class... F>
Overloaded(F...) -> Overloaded<F...>;  // clang 14 lacks C++20's deduction for aggregates

std::string quote(const std::string& s) {
  std::string out = "'";
  for (char c : s) {
    if (c == '\'' || c == '\\') out += '\\';
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out += c;
  }
  return out + "'";
}

}  // namespace

std::string format_float(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d > 0 ? "inf" : "-inf";
  std::string s = fmt::format("{}", d);
  if (s.find_first_of(".en") == std::string::npos) s += ".0";
  return s;
}

std::string type_name(const Value& v) {
  return std::visit(
      Overloaded{[](const NoneValue&) -> std::string { return "None"; },
                 [](bool) -> std::string { return "bool"; },
                 [](int64_t) -> std::string { return "int"; },
                 [](double) -> std::string { return "float"; },
                 [](const std::string&) -> std::string { return "str"; },
                 [](DType) -> std::string { return "dtype"; },
                 [](const DistributedTensor&) -> std::string { return "tensor"; },
                 [](const ListValue& l) -> std::string { return l.tuple ? "tuple" : "list"; },
                 [](const ScopeValue&) -> std::string { return "scope"; },
                 [](const FunctionValue&) -> std::string { return "function"; },
                 [](const MethodValue&) -> std::string { return "method"; },
                 [](const GraphValue&) -> std::string { return "graph"; }},
      v.v);
}

std::string repr(const Value& v) {
  return std::visit(
      Overloaded{[](const NoneValue&) -> std::string { return "None"; },
                 [](bool b) -> std::string { return b ? "True" : "False"; },
                 [](int64_t i) -> std::string { return std::to_string(i); },
                 [](double d) -> std::string { return format_float(d); },
                 [](const std::string& s) -> std::string { return quote(s); },
                 [](DType t) -> std::string { return std::string(dtype_name(t)); },
                 [](const DistributedTensor& t) -> std::string { return t.to_string(); },
                 [](const ListValue& l) -> std::string {
                   std::string out = l.tuple ? "(" : "[";
                   for (size_t i = 0; i < l.items.size(); ++i) {
                     if (i) out += ", ";
                     out += repr(l.items[i]);
                   }
                   if (l.tuple && l.items.size() == 1) out += ",";
                   return out + (l.tuple ? ")" : "]");
                 },
                 [](const ScopeValue& s) -> std::string {
                   if (s.kind == ScopeValue::Kind::Capture) return "capture(graph)";
                   return fmt::format(
                       "{}({})", s.kind == ScopeValue::Kind::Node ? "node" : "device", s.index);
                 },
                 [](const FunctionValue& f) -> std::string {
                   return fmt::format("<function {}>", f.name);
                 },
                 [](const MethodValue& m) -> std::string {
                   return fmt::format("<method {} of {}>", m.name, type_name(*m.self));
                 },
                 [](const GraphValue& g) -> std::string {
                   if (!g.graph->defined()) return "graph(empty)";
                   std::string commands;
                   for (int n : g.graph->nodes())
                     commands += fmt::format("{}{}: {}", commands.empty() ? "" : ", ", n,
                                             g.graph->commands(n));
                   return fmt::format("graph({}, commands {{{}}}, replays {})", g.graph->id(),
                                      commands, g.graph->replays());
                 }},
      v.v);
}

std::string str(const Value& v) {
  if (v.is<std::string>()) return v.as<std::string>();
  return repr(v);
}

Scalar to_scalar(const Value& v, std::string_view what) {
  if (v.is<bool>()) return Scalar(v.as<bool>());
  if (v.is<int64_t>()) return Scalar(v.as<int64_t>());
  if (v.is<double>()) return Scalar(v.as<double>());
  if (v.is_none()) return Scalar();
  if (v.is_tensor() && v.as<DistributedTensor>().numel() == 1)
    return v.as<DistributedTensor>().item();
  throw TypeError(fmt::format("{} must be a number, got {}", what, type_name(v)));
}

int64_t to_int(const Value& v, std::string_view what) {
  if (v.is<int64_t>()) return v.as<int64_t>();
  if (v.is<bool>()) return v.as<bool>() ? 1 : 0;
  throw TypeError(fmt::format("{} must be an integer, got {}", what, type_name(v)));
}

bool to_bool(const Value& v, std::string_view what) {
  if (v.is<bool>()) return v.as<bool>();
  if (v.is<int64_t>()) return v.as<int64_t>() != 0;
  throw TypeError(fmt::format("{} must be True or False, got {}", what, type_name(v)));
}

DType to_dtype(const Value& v, std::string_view what) {
  if (v.is<DType>()) return v.as<DType>();
  DType t;
  if (v.is<std::string>() && parse_dtype(v.as<std::string>(), t)) return t;
  throw TypeError(fmt::format(
      "{} must be a dtype (float32, float64, float16, bfloat16, int32, int64, bool), got {}", what,
      v.is<std::string>() ? repr(v) : type_name(v)));
}

Dims to_dims(const Value& v, std::string_view what) {
  Dims out;
  if (v.is<ListValue>()) {
    for (const Value& item : v.as<ListValue>().items) out.push_back(to_int(item, what));
    return out;
  }
  out.push_back(to_int(v, what));
  return out;
}

namespace {

struct Flattened {
  std::vector<double> floats;
  std::vector<int64_t> ints;
  bool any_float = false;
  bool all_bool = true;
};

void flatten(const Value& v, size_t depth, Shape& shape, bool& shape_known, Flattened& out) {
  if (v.is<ListValue>()) {
    const auto& items = v.as<ListValue>().items;
    if (!shape_known) {
      if (depth >= static_cast<size_t>(kMaxDims))
        throw ShapeError(fmt::format("list literal: more than {} levels of nesting", kMaxDims));
      shape.push_back(static_cast<int64_t>(items.size()));
      if (items.empty()) shape_known = true;
    } else if (depth >= shape.size() || shape[depth] != static_cast<int64_t>(items.size())) {
      throw ShapeError(fmt::format(
          "list literal is ragged: a list of {} items where the first row at that depth has "
          "{}{}",
          items.size(), depth < shape.size() ? std::to_string(shape[depth]) : "none",
          depth < shape.size() ? "" : " (a number there)"));
    }
    for (const Value& item : items) flatten(item, depth + 1, shape, shape_known, out);
    return;
  }
  if (!shape_known) {
    shape_known = true;
  } else if (depth != shape.size()) {
    throw ShapeError("list literal is ragged: a number where a list was expected");
  }
  if (v.is<bool>()) {
    out.floats.push_back(v.as<bool>() ? 1.0 : 0.0);
    out.ints.push_back(v.as<bool>() ? 1 : 0);
    return;
  }
  out.all_bool = false;
  if (v.is<int64_t>()) {
    out.floats.push_back(static_cast<double>(v.as<int64_t>()));
    out.ints.push_back(v.as<int64_t>());
  } else if (v.is<double>()) {
    out.any_float = true;
    out.floats.push_back(v.as<double>());
    out.ints.push_back(0);
  } else {
    throw TypeError(
        fmt::format("a list literal holds numbers (or nested lists of them), got a {}{}",
                    type_name(v), v.is_tensor() ? " (stacking tensors is not supported)" : ""));
  }
}

}  // namespace

local::Tensor list_to_local(const ListValue& list) {
  Shape shape;
  bool shape_known = false;
  Flattened f;
  flatten(Value(list), 0, shape, shape_known, f);
  if (f.ints.empty()) return local::empty(shape, DType::Float32);
  if (f.any_float) {
    std::vector<float> v(f.floats.begin(), f.floats.end());
    return local::from_vector(v, shape);
  }
  if (f.all_bool) {
    std::vector<bool> v;
    for (int64_t i : f.ints) v.push_back(i != 0);
    return local::from_vector(v, shape);
  }
  return local::from_vector(f.ints, shape);
}

DistributedTensor to_tensor(const Value& v, std::string_view what, int node) {
  if (v.is_tensor()) return v.as<DistributedTensor>();
  if (v.is<ListValue>()) return dist_send(list_to_local(v.as<ListValue>()), node);
  throw TypeError(fmt::format("{} must be a tensor, got {}", what, type_name(v)));
}

}  // namespace dtr::repl
