// Generic op dispatch from the op table's signatures.
#include "repl/op_call.hpp"

#include <fmt/format.h>

#include <cstdlib>
#include <limits>

#include "dtr/generator.hpp"

namespace dtr::repl {

namespace {

std::string trim(std::string_view s) {
  size_t b = s.find_first_not_of(' '), e = s.find_last_not_of(' ');
  return b == std::string_view::npos ? std::string() : std::string(s.substr(b, e - b + 1));
}

Value parse_default(const std::string& text) {
  if (text == "true") return Value(true);
  if (text == "false") return Value(false);
  if (text == "inf") return Value(std::numeric_limits<double>::infinity());
  DType t;
  if (parse_dtype(text, t)) return Value(t);
  char* end = nullptr;
  long long i = std::strtoll(text.c_str(), &end, 10);
  if (end && *end == '\0' && !text.empty()) return Value(static_cast<int64_t>(i));
  double d = std::strtod(text.c_str(), &end);
  if (end && *end == '\0' && !text.empty()) return Value(d);
  return Value(text);
}

OpSignature parse_signature(const OpDef& d) {
  OpSignature sig;
  size_t open = d.help.find('('), close = d.help.find(')');
  if (open == std::string_view::npos || close == std::string_view::npos || close < open) return sig;
  sig.text = d.help.substr(0, close + 1);
  std::string_view inner = d.help.substr(open + 1, close - open - 1);
  int index = 0;
  while (!inner.empty()) {
    size_t comma = inner.find(',');
    std::string item = trim(inner.substr(0, comma));
    inner = comma == std::string_view::npos ? std::string_view() : inner.substr(comma + 1);
    if (item.empty()) continue;
    OpParam p;
    if (size_t eq = item.find('='); eq != std::string::npos) {
      p.name = trim(item.substr(0, eq));
      p.deflt = parse_default(trim(item.substr(eq + 1)));
    } else if (item.back() == '?') {
      p.name = item.substr(0, item.size() - 1);
      p.optional = true;
    } else {
      p.name = item;
    }
    if (p.name == "generator") {
      sig.draws_random = true;
      continue;
    }
    p.tensor = index < d.max_inputs;
    p.int_list = !p.tensor && (p.name == "shape" || p.name == "dims");
    sig.params.push_back(std::move(p));
    ++index;
  }
  return sig;
}

bool is_tensor_like(const Value& v) {
  return v.is_tensor() || v.is<ListValue>();
}

}  // namespace

const OpSignature& op_signature(const OpDef& def) {
  static const std::vector<OpSignature> sigs = [] {
    std::vector<OpSignature> out;
    for (const OpDef& d : all_ops()) out.push_back(parse_signature(d));
    return out;
  }();
  return sigs[static_cast<size_t>(def.id)];
}

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

DistributedTensor call_op(const OpRef& op, std::vector<Value> args, const Kwargs& kwargs) {
  const OpDef& d = *op.def;
  const OpSignature& sig = op_signature(d);
  const std::string name =
      op.inplace && d.kind != OpKind::Mutate ? fmt::format("{}_", d.name) : std::string(d.name);
  auto fail = [&](const std::string& msg) -> void {
    throw TypeError(fmt::format("{}(): {}; usage: {}", name, msg, d.help));
  };
  const std::vector<OpParam>& params = sig.params;
  const size_t np = params.size();
  auto param_index = [&](std::string_view pname) -> int {
    for (size_t j = 0; j < np; ++j)
      if (params[j].name == pname) return static_cast<int>(j);
    return -1;
  };
  auto has_kw = [&](std::string_view k) {
    for (const auto& kv : kwargs)
      if (kv.first == k) return true;
    return false;
  };

  // ---- bind ----
  std::vector<std::optional<Value>> bound(np);
  const size_t n_args = args.size();
  size_t pi = 0, ai = 0;
  while (ai < n_args) {
    if (pi >= np) {
      std::string names;
      for (const OpParam& p : params) {
        if (!names.empty()) names += ", ";
        names += p.name;
      }
      fail(fmt::format("takes at most {} argument{} ({}), got {}", np, np == 1 ? "" : "s", names,
                       n_args));
    }
    const OpParam& p = params[pi];
    if (p.int_list && args[ai].is<int64_t>()) {
      size_t reserve = 0;
      for (size_t j = pi + 1; j < np; ++j)
        if (params[j].required() && !has_kw(params[j].name)) ++reserve;
      ListValue l;
      l.tuple = true;
      while (ai < n_args && args[ai].is<int64_t>() && (l.items.empty() || n_args - ai > reserve))
        l.items.push_back(std::move(args[ai++]));
      bound[pi] = Value(std::move(l));
    } else {
      bound[pi] = std::move(args[ai++]);
    }
    ++pi;
  }
  for (const auto& [k, v] : kwargs) {
    int j = param_index(k);
    if (j < 0) fail(fmt::format("unexpected keyword argument '{}'", k));
    if (bound[j]) fail(fmt::format("got multiple values for argument '{}'", k));
    bound[j] = v;
  }
  // arange(n) is arange(0, n), as Python's range.
  if (int s = param_index("start"), e = param_index("end");
      d.max_inputs == 0 && s >= 0 && e >= 0 && bound[s] && !bound[e]) {
    bound[e] = std::move(bound[s]);
    bound[s] = Value(0);
  }

  // ---- tensor inputs ----
  // Lists go to the node of the call's first tensor, so that `x + [1, 2]` works wherever x is.
  int home = -1;
  for (size_t j = 0; j < np && home < 0; ++j)
    if (params[j].tensor && bound[j] && bound[j]->is_tensor())
      home = bound[j]->as<DistributedTensor>().get_node();
  std::vector<DistributedTensor> inputs;
  OpAttrs a;
  int next_scalar = 0;
  {
    std::string names;
    int wanted = 0, given = 0;
    for (size_t j = 0; j < np; ++j)
      if (params[j].tensor) {
        if (!names.empty()) names += ", ";
        names += params[j].name;
        ++wanted;
        if (bound[j] && !bound[j]->is_none()) ++given;
      }
    if (given < wanted)
      fail(fmt::format("takes {} tensor argument{} ({}{}), got {}", wanted, wanted == 1 ? "" : "s",
                       names, d.kind == OpKind::Binary ? "; the second may be a number" : "",
                       given));
  }
  for (size_t j = 0; j < np; ++j) {
    if (!params[j].tensor) continue;
    const Value& v = *bound[j];
    std::string what = fmt::format("{}(): argument '{}'", name, params[j].name);
    if (d.kind == OpKind::Binary && j == 0 && !is_tensor_like(v)) {
      // number op tensor: the scalar_first form.
      if (op.inplace) fail("the in-place form needs a tensor as its first argument");
      const Value& other = *bound[1];
      if (!is_tensor_like(other))
        fail(fmt::format("needs a tensor operand, got {} and {}", type_name(v), type_name(other)));
      a.scalars[0] = to_scalar(v, what);
      a.scalar_first = true;
      next_scalar = 1;
      inputs.push_back(
          to_tensor(other, fmt::format("{}(): argument '{}'", name, params[1].name), home));
      break;
    }
    if (d.kind == OpKind::Binary && j == 1 && !is_tensor_like(v)) {
      a.scalars[0] = to_scalar(v, what);
      next_scalar = 1;
      continue;
    }
    inputs.push_back(to_tensor(v, what, home));
  }

  // ---- attributes ----
  bool dtype_given = false;
  for (size_t j = 0; j < np; ++j) {
    const OpParam& p = params[j];
    if (p.tensor) continue;
    std::optional<Value> v = bound[j] ? bound[j] : p.deflt;
    std::string what = fmt::format("{}(): argument '{}'", name, p.name);
    bool scalar_slot = !(p.name == "dtype" || p.name == "keepdim" || p.name == "dim" ||
                         p.int_list || p.name == "steps" || d.kind == OpKind::View);
    if (!v) {
      if (p.required() || (p.name == "dtype" && d.kind != OpKind::Create))
        fail(fmt::format("missing argument '{}'", p.name));
      if (scalar_slot) ++next_scalar;  // an open slot (e.g. clamp's min) stays None
      continue;
    }
    if (p.name == "dtype") {
      a.dtype = to_dtype(*v, what);
      dtype_given = true;
    } else if (p.name == "keepdim") {
      a.keepdim = to_bool(*v, what);
    } else if (d.kind == OpKind::View || p.int_list || p.name == "steps") {
      if (v->is_none()) {
        if (p.name == "end") a.ints.push_back(std::numeric_limits<int64_t>::max());
        if (p.name == "start") a.ints.push_back(0);
        continue;
      }
      for (int64_t i : to_dims(*v, what)) a.ints.push_back(i);
    } else if (p.name == "dim") {
      if (!v->is_none()) a.ints = to_dims(*v, what);
    } else {
      if (next_scalar >= static_cast<int>(a.scalars.size()))
        fail(fmt::format("too many number arguments (argument '{}')", p.name));
      a.scalars[next_scalar++] = to_scalar(*v, what);
    }
  }
  if (d.kind == OpKind::Create && !dtype_given && param_index("dtype") >= 0 &&
      !params[param_index("dtype")].deflt)
    a.dtype = arange_is_integral(a) ? DType::Int64 : DType::Float32;
  if (sig.draws_random) {
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

  // ---- run ----
  if (d.kind == OpKind::Create) return DistributedTensor::create(d.id, a);
  const DistributedTensor* other = inputs.size() > 1 ? &inputs[1] : nullptr;
  if (op.inplace) {
    inputs[0].apply_inplace(d.id, a, other);
    return inputs[0];
  }
  return inputs[0].apply(d.id, a, other);
}

}  // namespace dtr::repl
