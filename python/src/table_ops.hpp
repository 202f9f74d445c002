// The Join, Indexing and NN ops of the op table for both tensor classes, bound from their
// declared signatures (as the REPL binds them, repl/op_call.hpp): a method on the first
// tensor parameter (x.conv2d(w, b, stride=2), x.gather(1, idx), x.topk(3)) and a module
// function taking every parameter (dtr.cat([a, b], 1), dtr.where(c, a, b),
// dtr.local.conv2d(x, w)). Positional and keyword arguments bind as Python binds them;
// each parameter's type says what it takes:
//   tensor     a tensor of the class (an optional one: None or left out)
//   tensors    a sequence of tensors
//   number     a Python number (an optional one: None or left out)
//   int        an int;  pair  an int or a pair of ints (None: the op's default)
//   flag       a bool;  reduction  'none', 'mean' or 'sum'
//   generator  a dtr.Generator, or None for the default one
// x.topk returns (values, indices) as torch does (TensorOps::topk); the function topk and
// the others return one tensor. Nothing here names an op: a new op of these kinds is bound
// by its table entry.
//
// Thread safety: called with the GIL held; the ops return at once (a remote op is queued).
#pragma once

#include <nanobind/stl/pair.h>
#include <nanobind/stl/vector.h>

#include <limits>
#include <string>
#include <vector>

#include "bindings.hpp"
#include "tensor_methods.hpp"

namespace dtr::python {

namespace detail {

inline bool bound_from_signature(OpKind k) {
  return k == OpKind::Join || k == OpKind::Indexing || k == OpKind::NN;
}

[[noreturn]] inline void call_error(const OpDef& d, const std::string& why) {
  throw nb::type_error(
      (std::string(d.name) + "(): " + why + "; usage: " + std::string(d.help)).c_str());
}

// The arguments of one call, parameter by parameter (null where left out).
inline std::vector<nb::handle> bind_params(const OpDef& d, nb::handle self, nb::args args,
                                           nb::kwargs kwargs) {
  std::span<const OpParam> ps = d.signature.params();
  std::vector<nb::handle> values(ps.size());
  size_t next = 0;
  auto place = [&](nb::handle v) {
    while (next < ps.size() && ps[next].type == ParamType::Generator) ++next;
    if (next >= ps.size())
      call_error(d, "takes at most " + std::to_string(next) + " arguments, got more");
    values[next++] = v;
  };
  if (self.is_valid()) place(self);
  for (nb::handle a : args) place(a);
  for (auto [key, value] : kwargs) {
    const std::string name = nb::cast<std::string>(key);
    size_t j = 0;
    while (j < ps.size() && ps[j].name != name) ++j;
    if (j == ps.size()) call_error(d, "unexpected keyword argument '" + name + "'");
    if (values[j].is_valid()) call_error(d, "got multiple values for argument '" + name + "'");
    values[j] = value;
  }
  return values;
}

// A default as the signature writes it ("1", "0.5", "true", "mean", "-100").
inline nb::object parse_default(std::string_view text) {
  if (text == "true" || text == "false") return nb::bool_(text == "true");
  const std::string s(text);
  if (s.find_first_not_of("-0123456789") == std::string::npos) return nb::int_(std::stoll(s));
  if (s.find_first_not_of("-0123456789.e") == std::string::npos) return nb::float_(std::stod(s));
  return nb::str(s.c_str());
}

// One non-tensor parameter's value into the attributes.
inline void attr_value(const OpDef& d, const OpParam& p, nb::handle v, OpAttrs& a, int& scalar) {
  const std::string what = "argument '" + std::string(p.name) + "'";
  switch (p.type) {
    case ParamType::Number:
      a.scalars[scalar++] = v.is_none() ? Scalar() : scalar_arg(v, what.c_str());
      return;
    case ParamType::Int:
      a.ints.push_back(nb::cast<int64_t>(v));
      return;
    case ParamType::Ints:  // an int, or a sequence of them (flip's dims, a pad)
      if (nb::isinstance<nb::int_>(v)) {
        a.ints.push_back(nb::cast<int64_t>(v));
        return;
      }
      for (int64_t i : nb::cast<std::vector<int64_t>>(v)) a.ints.push_back(i);
      return;
    case ParamType::Pair: {
      if (v.is_none()) {
        a.ints.push_back(0);
        a.ints.push_back(0);
        return;
      }
      std::vector<int64_t> pair;
      if (nb::isinstance<nb::int_>(v))
        pair = {nb::cast<int64_t>(v), nb::cast<int64_t>(v)};
      else
        pair = nb::cast<std::vector<int64_t>>(v);
      if (pair.size() != 2) call_error(d, what + " must be an int or a pair of ints");
      a.ints.push_back(pair[0]);
      a.ints.push_back(pair[1]);
      return;
    }
    case ParamType::Flag:
      a.ints.push_back(nb::cast<bool>(v) ? 1 : 0);
      return;
    case ParamType::Reduction: {
      const std::string r = nb::cast<std::string>(v);
      const int64_t code = r == "none" ? 0 : r == "mean" ? 1 : r == "sum" ? 2 : -1;
      if (code < 0) call_error(d, what + " must be 'none', 'mean' or 'sum', got '" + r + "'");
      a.ints.push_back(code);
      return;
    }
    default:
      call_error(d, what + " has a type this binding does not take");
  }
}

// attr_value, a value of the wrong Python type a TypeError naming the parameter.
inline void attr_of(const OpDef& d, const OpParam& p, nb::handle v, OpAttrs& a, int& scalar) {
  try {
    attr_value(d, p, v, a, scalar);
  } catch (const nb::cast_error&) {
    call_error(d, "argument '" + std::string(p.name) + "' must be " +
                      std::string(param_type_name(p.type) == "pair" ? "an int or a pair of ints"
                                                                    : param_type_name(p.type)) +
                      ", got " + nb::type_name(v.type()).c_str());
  }
}

// A tensor argument of class T; a TypeError naming the parameter otherwise.
template <typename T>
T tensor_arg(const OpDef& d, const OpParam& p, nb::handle v) {
  if (!nb::isinstance<T>(v))
    call_error(d, "argument '" + std::string(p.name) + "' must be a " +
                      nb::type_name(nb::type<T>()).c_str() + ", got " +
                      nb::type_name(v.type()).c_str());
  return nb::cast<T>(v);
}

// The inputs and attributes of a call of `d` (self: the method's receiver, or null).
template <typename T>
std::pair<std::vector<T>, OpAttrs> bind_call(const OpDef& d, nb::handle self, nb::args args,
                                             nb::kwargs kwargs) {
  std::span<const OpParam> ps = d.signature.params();
  const std::vector<nb::handle> values = bind_params(d, self, args, kwargs);
  std::vector<T> inputs;
  OpAttrs a;
  int scalar = 0;
  uint64_t draws = 0;
  nb::handle generator;
  for (size_t j = 0; j < ps.size(); ++j) {
    const OpParam& p = ps[j];
    nb::handle v = values[j];
    if (p.type == ParamType::Generator) {
      generator = v;
      continue;
    }
    if (!v.is_valid() || (v.is_none() && p.type == ParamType::Tensor)) {
      if (p.required()) call_error(d, "missing argument '" + std::string(p.name) + "'");
      if (p.type == ParamType::Tensor) continue;  // an optional tensor left out
      nb::object dv = p.deflt.empty() ? nb::none() : parse_default(p.deflt);
      attr_of(d, p, dv, a, scalar);
      continue;
    }
    if (p.type == ParamType::Tensor) {
      inputs.push_back(tensor_arg<T>(d, p, v));
    } else if (p.type == ParamType::Tensors) {
      if (!nb::isinstance<nb::sequence>(v))
        call_error(d, "argument '" + std::string(p.name) + "' must be a sequence of tensors");
      for (nb::handle t : nb::borrow<nb::sequence>(v)) inputs.push_back(tensor_arg<T>(d, p, t));
    } else {
      attr_of(d, p, v, a, scalar);
    }
  }
  for (const OpParam& p : ps)
    if (p.type == ParamType::Generator) {
      draws = inputs.empty() ? 0 : static_cast<uint64_t>(inputs[0].numel());
      RandomDraw r = generator.is_valid() && !generator.is_none()
                         ? RandomDraw{nb::cast<Generator&>(generator).seed(),
                                      nb::cast<Generator&>(generator).advance(draws)}
                         : default_generator_advance(draws);
      a.seed = r.seed;
      a.offset = r.offset;
    }
  return {std::move(inputs), a};
}

// The stub signature of the op's method (`method`) or function: Python's types of the
// parameters, defaults as Python writes them.
inline std::string stub_of(const OpDef& d, const std::string& cls, const std::string& generator,
                           bool method) {
  std::string s = "def " + std::string(d.name) + "(";
  bool first = true;
  for (const OpParam& p : d.signature.params()) {
    std::string type, deflt;
    switch (p.type) {
      case ParamType::Tensor:
        type = cls;
        break;
      case ParamType::Tensors:
        type = "collections.abc.Sequence[" + cls + "]";
        break;
      case ParamType::Number:
        type = "float | int";
        break;
      case ParamType::Pair:
        type = "int | tuple[int, int]";
        break;
      case ParamType::Flag:
        type = "bool";
        break;
      case ParamType::Reduction:
        type = "str";
        break;
      case ParamType::Generator:
        type = generator;
        break;
      default:
        type = d.id == OpId::scatter_reduce && p.name == "reduce" ? "str | int" : "int";
    }
    if (p.optional || p.type == ParamType::Generator) {
      type += " | None";
      deflt = "None";
    } else if (!p.deflt.empty()) {
      deflt = p.deflt == "true" ? "True" : p.deflt == "false" ? "False" : std::string(p.deflt);
      if (p.type == ParamType::Reduction) deflt = "'" + deflt + "'";
    }
    if (!first) s += ", ";
    s += first && method ? "self" : std::string(p.name) + ": " + type;
    if (!deflt.empty() && !(first && method)) s += " = " + deflt;
    first = false;
  }
  const bool pair = method && d.id == OpId::topk;
  return s + ") -> " + (pair ? "tuple[" + cls + ", " + cls + "]" : cls);
}

// scatter_reduce's reduce given by its torch name ("sum", "amax", ...), positional at
// `at` or as a keyword, replaced by the table's code.
inline void reduce_by_name(nb::args& args, nb::kwargs& kwargs, size_t at) {
  if (args.size() > at && nb::isinstance<nb::str>(args[at])) {
    nb::list l(args);
    l[at] = nb::int_(scatter_reduce_code(nb::cast<std::string>(args[at])));
    args = nb::borrow<nb::args>(nb::tuple(l));
  }
  if (kwargs.contains("reduce") && nb::isinstance<nb::str>(kwargs["reduce"]))
    kwargs["reduce"] = nb::int_(scatter_reduce_code(nb::cast<std::string>(kwargs["reduce"])));
}

}  // namespace detail

// Methods of the class T (on the op's first tensor parameter) for every op of the new
// kinds whose first parameter is a tensor.
template <typename T>
void bind_table_methods(nb::class_<T>& c, const std::string& cls) {
  for (const OpDef& d : all_ops()) {
    if (!detail::bound_from_signature(d.kind)) continue;
    if (d.signature.count == 0 || d.signature.param[0].type != ParamType::Tensor) continue;
    const OpDef* def = &d;
    c.def(
        d.name.data(),
        [def](nb::handle self, nb::args args, nb::kwargs kwargs) -> nb::object {
          if (def->id == OpId::scatter_reduce) detail::reduce_by_name(args, kwargs, 3);
          auto [inputs, attrs] = detail::bind_call<T>(*def, self, args, kwargs);
          if (def->id == OpId::topk) {  // torch's (values, indices)
            const OpAttrs& a = attrs;
            return nb::cast(inputs[0].topk(a.ints[0], a.ints[1], a.ints[2] != 0, a.ints[3] != 0));
          }
          return nb::cast(T::apply_inputs(def->id, attrs, inputs));
        },
        nb::sig(stub_sig(detail::stub_of(d, cls, "Generator", true))), d.help.data());
  }
}

// Module functions of every op of the new kinds, for tensors of class T (`cls` and
// `generator`: the classes' names as the module's stubs spell them).
template <typename T>
void bind_table_functions(nb::module_& m, const std::string& cls, const std::string& generator) {
  for (const OpDef& d : all_ops()) {
    if (!detail::bound_from_signature(d.kind)) continue;
    const OpDef* def = &d;
    m.def(
        d.name.data(),
        [def](nb::args args, nb::kwargs kwargs) {
          if (def->id == OpId::scatter_reduce) detail::reduce_by_name(args, kwargs, 4);
          auto [inputs, attrs] = detail::bind_call<T>(*def, nb::handle(), args, kwargs);
          return T::apply_inputs(def->id, attrs, inputs);
        },
        nb::sig(stub_sig(detail::stub_of(d, cls, generator, false))), d.help.data());
  }
}

}  // namespace dtr::python
