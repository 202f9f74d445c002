// Generic op dispatch from the op table's declared signatures.
#include "repl/op_call.hpp"

#include <fmt/format.h>

#include <cstdlib>
#include <limits>

#include "dtr/generator.hpp"

namespace dtr::repl {

namespace {

// A default as the signature writes it, as a REPL value: true/false, inf, a dtype, an
// integer or a float.
Value parse_default(std::string_view text) {
  if (text == "true") return Value(true);
  if (text == "false") return Value(false);
  if (text == "inf") return Value(std::numeric_limits<double>::infinity());
  const std::string s(text);
  DType t;
  if (parse_dtype(s, t)) return Value(t);
  char* end = nullptr;
  long long i = std::strtoll(s.c_str(), &end, 10);
  if (end && *end == '\0' && !s.empty()) return Value(static_cast<int64_t>(i));
  double d = std::strtod(s.c_str(), &end);
  if (end && *end == '\0' && !s.empty()) return Value(d);
  return Value(s);
}

bool is_tensor_like(const Value& v) {
  return v.is_tensor() || v.is<ListValue>();
}

bool is_input(const OpParam& p) {
  return p.type == ParamType::Tensor || p.type == ParamType::Operand ||
         p.type == ParamType::Tensors;
}

// The name of the call as written: "add_" for an in-place form, else the op's name.
std::string call_name(const OpRef& op) {
  const OpDef& d = *op.def;
  return op.inplace && d.kind != OpKind::Mutate ? fmt::format("{}_", d.name) : std::string(d.name);
}

[[noreturn]] void fail_call(const OpRef& op, std::string_view msg) {
  throw TypeError(fmt::format("{}(): {}; usage: {}", call_name(op), msg, op.def->help));
}

// Runs a conversion of one argument; its TypeError gets the op's usage appended.
template <typename F>
auto converting(const OpRef& op, F f) {
  try {
    return f();
  } catch (const TypeError& e) {
    throw TypeError(fmt::format("{}; usage: {}", e.what(), op.def->help));
  }
}

// Parameters the arguments bind to: all but generators, with their positions.
std::vector<int> value_params(const OpDef& d) {
  std::vector<int> out;
  std::span<const OpParam> ps = d.signature.params();
  for (int i = 0; i < static_cast<int>(ps.size()); ++i)
    if (ps[i].type != ParamType::Generator) out.push_back(i);
  return out;
}

void bind_positional(const OpRef& op, std::vector<Value>& args, const Kwargs& kwargs,
                     BoundArgs& b) {
  std::span<const OpParam> ps = op.def->signature.params();
  const std::vector<int> order = value_params(*op.def);
  auto by_keyword = [&](std::string_view name) {
    for (const auto& kv : kwargs)
      if (kv.first == name) return true;
    return false;
  };
  // Required parameters after order[k] that no keyword fills: arguments to keep for them.
  auto reserve_after = [&](size_t k) {
    size_t n = 0;
    for (size_t j = k + 1; j < order.size(); ++j)
      n += ps[order[j]].required() && !by_keyword(ps[order[j]].name);
    return n;
  };
  const size_t n_args = args.size();
  size_t k = 0, ai = 0;
  while (ai < n_args) {
    if (k >= order.size()) {
      std::string names;
      for (int i : order) names += fmt::format("{}{}", names.empty() ? "" : ", ", ps[i].name);
      fail_call(op, fmt::format("takes at most {} argument{} ({}), got {}", order.size(),
                                order.size() == 1 ? "" : "s", names, n_args));
    }
    const OpParam& p = ps[order[k]];
    const size_t reserve = reserve_after(k);
    if (!p.deflt.empty() && reserve > 0 && n_args - ai <= reserve) {
      ++k;  // arange(n): the defaulted start stays 0
      continue;
    }
    if (p.type == ParamType::Ints && args[ai].is<int64_t>()) {
      ListValue l;
      l.tuple = true;
      while (ai < n_args && args[ai].is<int64_t>() && (l.items.empty() || n_args - ai > reserve))
        l.items.push_back(std::move(args[ai++]));
      b.values[order[k]] = Value(std::move(l));
    } else {
      b.values[order[k]] = std::move(args[ai++]);
    }
    ++k;
  }
}

// A Binary op's number operand, a tensor's other operand, or a tensor input: nothing here.
void operand_attr(const OpRef& op, size_t index, const BoundArgs& b, OpAttrs& a, int& next) {
  const std::optional<Value>& v = b.values[index];
  if (!v || is_tensor_like(*v)) return;
  std::span<const OpParam> ps = op.def->signature.params();
  if (index == 0) {
    // number op tensor: the scalar_first form.
    if (op.inplace) fail_call(op, "the in-place form needs a tensor as its first argument");
    const std::optional<Value>& other = b.values[1];
    if (other && !is_tensor_like(*other))
      fail_call(op, fmt::format("needs a tensor operand, got {} and {}", type_name(*v),
                                type_name(*other)));
    a.scalar_first = true;
  }
  std::string what = fmt::format("{}(): argument '{}'", call_name(op), ps[index].name);
  a.scalars[next++] = converting(op, [&] { return to_scalar(*v, what); });
}

// One non-input parameter's value into the attributes.
void param_attr(const OpRef& op, const OpParam& p, const Value& v, OpAttrs& a, int& next) {
  std::string what = fmt::format("{}(): argument '{}'", call_name(op), p.name);
  switch (p.type) {
    case ParamType::Dtype:
      a.dtype = converting(op, [&] { return to_dtype(v, what); });
      return;
    case ParamType::Bool:
      a.keepdim = converting(op, [&] { return to_bool(v, what); });
      return;
    case ParamType::Dims:
      if (!v.is_none()) a.ints = converting(op, [&] { return to_dims(v, what); });
      return;
    case ParamType::Ints:
    case ParamType::Int:
    case ParamType::Start:
    case ParamType::End:
      if (v.is_none()) {
        if (p.type == ParamType::Start) a.ints.push_back(0);
        if (p.type == ParamType::End) a.ints.push_back(std::numeric_limits<int64_t>::max());
        return;
      }
      for (int64_t i : converting(op, [&] { return to_dims(v, what); })) a.ints.push_back(i);
      return;
    case ParamType::Number:
      if (next >= static_cast<int>(a.scalars.size()))
        fail_call(op, fmt::format("too many number arguments (argument '{}')", p.name));
      a.scalars[next++] = converting(op, [&] { return to_scalar(v, what); });
      return;
    case ParamType::Pair: {
      if (v.is_none()) {  // the op's default (pooling's stride: the kernel size)
        a.ints.push_back(0);
        a.ints.push_back(0);
        return;
      }
      const Dims d = converting(op, [&] { return to_dims(v, what); });
      if (d.size() != 1 && d.size() != 2)
        fail_call(op, fmt::format("argument '{}' must be an int or a pair of ints, got {} ints",
                                  p.name, d.size()));
      a.ints.push_back(d[0]);
      a.ints.push_back(d[d.size() - 1]);
      return;
    }
    case ParamType::Flag:
      a.ints.push_back(converting(op, [&] { return to_bool(v, what); }) ? 1 : 0);
      return;
    case ParamType::Reduction: {
      static constexpr std::string_view kNames[] = {"none", "mean", "sum"};
      for (int64_t i = 0; i < 3; ++i)
        if (v.is<std::string>() && v.as<std::string>() == kNames[i]) return a.ints.push_back(i);
      fail_call(op, fmt::format("argument '{}' must be 'none', 'mean' or 'sum', got {}", p.name,
                                v.is<std::string>() ? repr(v) : type_name(v)));
    }
    case ParamType::Tensor:
    case ParamType::Operand:
    case ParamType::Tensors:
    case ParamType::Generator:
      return;
  }
}

// The first tensor among a call's tensor arguments (a tensor list's items included): its
// node, or -1.
int home_node(std::span<const OpParam> ps, const BoundArgs& b) {
  for (size_t j = 0; j < ps.size(); ++j) {
    const std::optional<Value>& v = b.values[j];
    if (!is_input(ps[j]) || !v) continue;
    if (v->is_tensor()) return v->as<DistributedTensor>().get_node();
    if (ps[j].type == ParamType::Tensors && v->is<ListValue>())
      for (const Value& item : v->as<ListValue>().items)
        if (item.is_tensor()) return item.as<DistributedTensor>().get_node();
  }
  return -1;
}

// The tensor inputs of a bound call, in signature order (a tensor list gives its items), lists
// sent to the node of the call's first tensor (so that `x + [1, 2]` works wherever x is).
std::vector<DistributedTensor> op_inputs(const OpRef& op, const BoundArgs& b) {
  std::span<const OpParam> ps = op.def->signature.params();
  const int home = home_node(ps, b);
  std::string names;
  int wanted = 0, given = 0;
  for (size_t j = 0; j < ps.size(); ++j) {
    if (!is_input(ps[j]) || ps[j].optional) continue;
    const std::optional<Value>& v = b.values[j];
    names += fmt::format("{}{}", names.empty() ? "" : ", ", ps[j].name);
    ++wanted;
    given += v && !v->is_none();
  }
  if (given < wanted)
    fail_call(
        op, fmt::format("takes {} tensor argument{} ({}{}), got {}", wanted, wanted == 1 ? "" : "s",
                        names, op.def->kind == OpKind::Binary ? "; the second may be a number" : "",
                        given));
  std::vector<DistributedTensor> inputs;
  for (size_t j = 0; j < ps.size(); ++j) {
    if (!is_input(ps[j]) || !b.values[j] || b.values[j]->is_none()) continue;  // optional
    const Value& v = *b.values[j];
    if (ps[j].type == ParamType::Operand && !is_tensor_like(v)) continue;  // in attrs
    std::string what = fmt::format("{}(): argument '{}'", call_name(op), ps[j].name);
    if (ps[j].type != ParamType::Tensors) {
      inputs.push_back(converting(op, [&] { return to_tensor(v, what, home); }));
      continue;
    }
    if (!v.is<ListValue>() || v.as<ListValue>().items.empty())
      fail_call(op, fmt::format("argument '{}' must be a list of tensors", ps[j].name));
    for (const Value& item : v.as<ListValue>().items)
      inputs.push_back(converting(op, [&] { return to_tensor(item, what, home); }));
  }
  return inputs;
}

// The random draw of a call with a generator parameter: its seed and stream offset.
void draw_random(const OpDef& d, const std::vector<DistributedTensor>& inputs, OpAttrs& a) {
  int64_t n = 0;
  if (d.kind == OpKind::Create) {
    bool valid = true;
    for (int64_t s : a.ints) valid = valid && s >= 0;
    n = valid ? numel_of(a.ints) : 0;
  } else if (!inputs.empty()) {
    n = inputs[0].numel();
  }
  RandomDraw r = default_generator_advance(static_cast<uint64_t>(n));
  a.seed = r.seed;
  a.offset = r.offset;
}

}  // namespace

std::optional<OpRef> find_op_ref(std::string_view name) {
  if (const OpDef* d = find_op(name)) return OpRef{d, d->kind == OpKind::Mutate};
  if (name.size() > 1 && name.back() == '_') {
    const OpDef* d = find_op(name.substr(0, name.size() - 1));
    if (d && d->has_inplace_form) return OpRef{d, true};
  }
  return std::nullopt;
}

std::vector<std::string> op_call_names() {
  std::vector<std::string> out;
  for (const OpDef& d : all_ops()) {
    out.emplace_back(d.name);
    if (d.has_inplace_form) out.push_back(std::string(d.name) + "_");
  }
  return out;
}

BoundArgs bind_args(const OpRef& op, std::vector<Value> args, const Kwargs& kwargs) {
  std::span<const OpParam> ps = op.def->signature.params();
  BoundArgs b;
  b.values.resize(ps.size());
  bind_positional(op, args, kwargs, b);
  for (const auto& [k, v] : kwargs) {
    size_t j = 0;
    while (j < ps.size() && !(ps[j].name == k && ps[j].type != ParamType::Generator)) ++j;
    if (j == ps.size()) fail_call(op, fmt::format("unexpected keyword argument '{}'", k));
    if (b.values[j]) fail_call(op, fmt::format("got multiple values for argument '{}'", k));
    b.values[j] = v;
  }
  return b;
}

OpAttrs op_attrs(const OpRef& op, const BoundArgs& b) {
  std::span<const OpParam> ps = op.def->signature.params();
  OpAttrs a;
  int next_scalar = 0;
  bool infer_dtype = false;
  for (size_t j = 0; j < ps.size(); ++j) {
    const OpParam& p = ps[j];
    if (p.type == ParamType::Operand) operand_attr(op, j, b, a, next_scalar);
    if (is_input(p) || p.type == ParamType::Generator) continue;
    std::optional<Value> v = b.values[j];
    if (!v && !p.deflt.empty()) v = parse_default(p.deflt);
    if (!v) {
      if (p.required()) fail_call(op, fmt::format("missing argument '{}'", p.name));
      if (p.type == ParamType::Number) ++next_scalar;  // an open slot (clamp's min) stays None
      if (p.type == ParamType::Pair) param_attr(op, p, Value(), a, next_scalar);  // 0, 0
      infer_dtype = infer_dtype || p.type == ParamType::Dtype;
      continue;
    }
    param_attr(op, p, *v, a, next_scalar);
  }
  if (infer_dtype) a.dtype = arange_is_integral(a) ? DType::Int64 : DType::Float32;
  return a;
}

DistributedTensor call_op(const OpRef& op, std::vector<Value> args, const Kwargs& kwargs) {
  const OpDef& d = *op.def;
  const BoundArgs b = bind_args(op, std::move(args), kwargs);
  std::vector<DistributedTensor> inputs = op_inputs(op, b);
  OpAttrs a = op_attrs(op, b);
  for (const OpParam& p : d.signature.params())
    if (p.type == ParamType::Generator) draw_random(d, inputs, a);

  if (d.kind == OpKind::Create) return DistributedTensor::create(d.id, a);
  if (d.kind == OpKind::Join || d.kind == OpKind::Indexing || d.kind == OpKind::NN)
    return DistributedTensor::apply_inputs(d.id, a, inputs);
  const DistributedTensor* other = inputs.size() > 1 ? &inputs[1] : nullptr;
  if (op.inplace) {
    inputs[0].apply_inplace(d.id, a, other);
    return inputs[0];
  }
  return inputs[0].apply(d.id, a, other);
}

}  // namespace dtr::repl
