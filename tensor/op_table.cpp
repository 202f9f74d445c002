// The op table and the shape/dtype rules. Pure metadata: nothing here touches data, so the
// master runs the same rules before it sends a command.
#include "dtr/op_table.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>

#include "check.hpp"
#include "dtr/generator.hpp"
#include "op_rules.hpp"

namespace dtr {

using detail::fail;

namespace {

// ---- signatures and help text ----

// The signature an op of `kind` has when its list entry leaves it empty ("").
constexpr std::string_view kind_signature(OpKind kind) {
  switch (kind) {
    case OpKind::Unary:
    case OpKind::Convert:
      return "x: tensor";
    case OpKind::Binary:
      return "a: operand, b: operand";
    case OpKind::Reduce:
      return "x: tensor, dim?: dims, keepdim: bool = false";
    case OpKind::Clamp:
      return "x: tensor, min?: number, max?: number";
    case OpKind::Norm:
      return "x: tensor, p: number = 2, dim?: dims, keepdim: bool = false";
    case OpKind::Moment:
      return "x: tensor, dim?: dims, keepdim: bool = false, correction: number = 1";
    case OpKind::Linalg:
      return "a: tensor, b: tensor";
    case OpKind::View:
    case OpKind::Mutate:
    case OpKind::Create:
    case OpKind::Join:
    case OpKind::Indexing:
    case OpKind::NN:
      break;
  }
  return "";  // these kinds' parameters differ per op: each writes its own
}

constexpr std::string_view kParamTypeNames[] = {
    "tensor", "operand", "number",    "dims",    "ints", "int",  "start",    "end",
    "bool",   "dtype",   "generator", "tensors", "pair", "flag", "reduction"};
static_assert(std::size(kParamTypeNames) == static_cast<size_t>(ParamType::Reduction) + 1,
              "one name per ParamType, in its order");

// Kinds whose tensor parameters may stand anywhere in the signature (their inputs are
// counted from it).
constexpr bool inputs_from_signature(OpKind kind) {
  return kind == OpKind::Join || kind == OpKind::Indexing || kind == OpKind::NN;
}

constexpr std::string_view trim(std::string_view s) {
  while (!s.empty() && s.front() == ' ') s.remove_prefix(1);
  while (!s.empty() && s.back() == ' ') s.remove_suffix(1);
  return s;
}

// Not constexpr: reaching it while the table is built is a compile error at this line,
// whose call stack names the op and the offending parameter.
inline void bad_signature(const char*) {}

// One "name?: type = default" item.
constexpr OpParam parse_param(std::string_view item) {
  OpParam p;
  size_t colon = item.find(':');
  if (colon == std::string_view::npos) bad_signature("a parameter without ': type'");
  p.name = trim(item.substr(0, colon));
  std::string_view type = trim(item.substr(colon + 1));
  if (size_t eq = type.find('='); eq != std::string_view::npos) {
    p.deflt = trim(type.substr(eq + 1));
    type = trim(type.substr(0, eq));
    if (p.deflt.empty()) bad_signature("an empty default");
  }
  if (!p.name.empty() && p.name.back() == '?') {
    p.name.remove_suffix(1);
    p.optional = true;
  }
  if (p.name.empty()) bad_signature("a parameter without a name");
  if (p.optional && !p.deflt.empty()) bad_signature("both '?' and a default");
  size_t t = 0;
  while (t < std::size(kParamTypeNames) && kParamTypeNames[t] != type) ++t;
  if (t == std::size(kParamTypeNames)) bad_signature("an unknown parameter type");
  p.type = static_cast<ParamType>(t);
  return p;
}

// The signature of an op: its declared one, else its kind's; checked against the kind.
constexpr OpSignature parse_signature(OpKind kind, std::string_view declared, int max_inputs) {
  std::string_view text = declared.empty() ? kind_signature(kind) : declared;
  OpSignature sig;
  while (!text.empty()) {
    size_t comma = text.find(',');
    if (sig.count == OpSignature::kMaxParams) bad_signature("more than kMaxParams parameters");
    sig.param[sig.count++] = parse_param(text.substr(0, comma));
    text = comma == std::string_view::npos ? std::string_view() : text.substr(comma + 1);
  }
  const bool anywhere = inputs_from_signature(kind);
  bool optional_tensor = false;
  int tensors = 0;
  for (int i = 0; i < sig.count; ++i) {
    const OpParam& p = sig.param[i];
    const ParamType t = p.type;
    const bool input = t == ParamType::Tensor || t == ParamType::Operand;
    if (!anywhere && input != (i < max_inputs))
      bad_signature("tensor parameters other than the kind's inputs");
    if (!anywhere && t == ParamType::Tensors) bad_signature("a tensor list in a fixed-input kind");
    if ((t == ParamType::Operand) != (kind == OpKind::Binary && input))
      bad_signature("an operand outside a Binary op's inputs");
    if (input || t == ParamType::Tensors) {
      if (optional_tensor) bad_signature("a tensor parameter after an optional one");
      if (p.optional && t == ParamType::Tensor) optional_tensor = true;
      if (t == ParamType::Tensors && tensors > 0) bad_signature("a tensor list beside tensors");
      ++tensors;
    }
    for (int j = 0; j < i; ++j)
      if (sig.param[j].name == sig.param[i].name) bad_signature("a parameter name twice");
  }
  return sig;
}

// Join, Indexing and NN ops: tensor inputs as their signature counts them.
constexpr void inputs_of_signature(const OpSignature& sig, int& min_in, int& max_in) {
  min_in = max_in = 0;
  for (const OpParam& p : sig.params()) {
    if (p.type == ParamType::Tensors) {
      min_in = 1;
      max_in = kMaxOpInputs;
    } else if (p.type == ParamType::Tensor) {
      min_in += p.optional ? 0 : 1;
      ++max_in;
    }
  }
}

constexpr int kMaxHelp = 320;
struct HelpText {
  std::array<char, kMaxHelp> text{};
  size_t size = 0;
  size_t usage = 0;  // length of "name(params)"
  constexpr void append(std::string_view s) {
    if (size + s.size() > text.size()) bad_signature("a help text longer than kMaxHelp");
    for (char c : s) text[size++] = c;
  }
};

// "name(x, dim?, keepdim=false): doc".
constexpr HelpText render_help(std::string_view name, const OpSignature& sig,
                               std::string_view doc) {
  HelpText h;
  h.append(name);
  h.append("(");
  for (int i = 0; i < sig.count; ++i) {
    const OpParam& p = sig.param[i];
    if (i > 0) h.append(", ");
    h.append(p.name);
    if (p.optional) h.append("?");
    if (!p.deflt.empty()) {
      h.append("=");
      h.append(p.deflt);
    }
  }
  h.append(")");
  h.usage = h.size;
  h.append(": ");
  h.append(doc);
  return h;
}

// One list entry as written.
struct Entry {
  OpId id;
  std::string_view name;
  OpKind kind;
  DTypeRule rule;
  std::string_view signature;
  std::string_view doc;
};

constexpr Entry kEntries[] = {
#define DTR_OP_ENTRY(name, code, kind, rule, sig, doc) \
  {OpId::name, #name, OpKind::kind, DTypeRule::rule, sig, doc},
    DTR_OPS(DTR_OP_ENTRY)
#undef DTR_OP_ENTRY
};

constexpr OpDef make_def(const Entry& e) {
  int min_in = 1, max_in = 1;
  bool inplace = false;
  switch (e.kind) {
    case OpKind::Unary:
    case OpKind::Clamp:
      inplace = true;
      break;
    case OpKind::Binary:
      max_in = 2;  // the second operand may be a scalar attribute instead
      inplace = true;
      break;
    case OpKind::Linalg:
      min_in = max_in = 2;
      break;
    case OpKind::Mutate:
      if (e.id == OpId::copy_) min_in = max_in = 2;
      break;
    case OpKind::Create:
      min_in = max_in = 0;
      break;
    default:
      break;
  }
  const OpSignature sig = parse_signature(e.kind, e.signature, max_in);
  if (inputs_from_signature(e.kind)) inputs_of_signature(sig, min_in, max_in);
  return OpDef{e.id, e.name, e.kind, e.rule, {}, min_in, max_in, inplace, sig, {}};
}

// The help texts, rendered at compile time (OpDef::help and usage view them).
constexpr auto kHelp = [] {
  std::array<HelpText, kNumOps> out{};
  for (int i = 0; i < kNumOps; ++i) {
    OpDef d = make_def(kEntries[i]);
    out[i] = render_help(d.name, d.signature, kEntries[i].doc);
  }
  return out;
}();

constexpr auto kOps = [] {
  std::array<OpDef, kNumOps> out{};
  for (int i = 0; i < kNumOps; ++i) {
    out[i] = make_def(kEntries[i]);
    out[i].help = std::string_view(kHelp[i].text.data(), kHelp[i].size);
    out[i].usage = std::string_view(kHelp[i].text.data(), kHelp[i].usage);
  }
  return out;
}();

static_assert([] {
  for (int i = 0; i < kNumOps; ++i)
    if (static_cast<uint16_t>(kOps[i].id) != detail::kOpCodes[i]) return false;
  return true;
}());

// ---- dtype rules ----

// Result dtype of `t op s` for a scalar operand: a float scalar turns integral/bool tensors
// into float32, an integer scalar turns a bool tensor into int64 (torch's scalar rules).
DType promote_with_scalar(DType t, const Scalar& s) {
  if (s.is_floating() && !is_floating(t)) return DType::Float32;
  if (s.is_integral() && t == DType::Bool) return DType::Int64;
  return t;
}

DType to_float(DType t) {
  return is_floating(t) ? t : DType::Float32;
}

DType require_float(const OpDef& d, DType t) {
  if (!is_floating(t))
    fail<DTypeError>(d.name, "expected a floating point input (float32 or float64), got {}", t);
  return t;
}

void reject_bool(const OpDef& d, DType t) {
  if (t == DType::Bool) fail<DTypeError>(d.name, "not supported for bool tensors");
}

DType unary_dtype(const OpDef& d, DType in) {
  switch (d.dtype_rule) {
    case DTypeRule::ToFloat:
      return to_float(in);
    case DTypeRule::FloatOnly:
      return require_float(d, in);
    case DTypeRule::SumLike:
      return is_floating(in) ? in : DType::Int64;
    case DTypeRule::Index:
      return DType::Int64;
    case DTypeRule::ToBool:
      return DType::Bool;
    default:
      return in;
  }
}

// ---- shape helpers ----

Shape resolve_shape(const OpDef& d, const Shape& requested, int64_t numel, const Shape& from) {
  Shape out = requested;
  int infer_at = -1;
  int64_t known = 1;
  for (size_t i = 0; i < out.size(); ++i) {
    if (out[i] == -1) {
      if (infer_at >= 0) fail<ShapeError>(d.name, "only one size may be -1 in {}", requested);
      infer_at = static_cast<int>(i);
    } else if (out[i] < 0) {
      fail<ShapeError>(d.name, "invalid size {} in shape {}", out[i], requested);
    } else if (__builtin_mul_overflow(known, out[i], &known)) {
      fail<ShapeError>(d.name, "shape {} has more elements than int64 can count", requested);
    }
  }
  if (infer_at >= 0) {
    if (known == 0 || numel % known != 0)
      fail<ShapeError>(d.name, "shape {} is invalid for input of size {} (shape {})", requested,
                       numel, from);
    out[infer_at] = numel / known;
  } else if (numel_of(out) != numel) {
    fail<ShapeError>(d.name, "shape {} is invalid for input of size {} (shape {})", requested,
                     numel, from);
  }
  return out;
}

// Strides that let `shape` view storage laid out as (old_shape, old_strides), if any
// (torch's computeStride: merge runs of old dims that are contiguous among themselves).
std::optional<Strides> view_strides(const Shape& old_shape, const Strides& old_strides,
                                    const Shape& shape) {
  if (old_shape.empty() || numel_of(old_shape) == 0) return contiguous_strides(shape);
  Strides out(shape.size());
  int64_t view_d = static_cast<int64_t>(shape.size()) - 1;
  int64_t chunk_base_stride = old_strides.back();
  int64_t tensor_numel = 1, view_numel = 1;
  for (int64_t tensor_d = static_cast<int64_t>(old_shape.size()) - 1; tensor_d >= 0; --tensor_d) {
    tensor_numel *= old_shape[tensor_d];
    if (tensor_d == 0 || (old_shape[tensor_d - 1] != 1 &&
                          old_strides[tensor_d - 1] != tensor_numel * chunk_base_stride)) {
      while (view_d >= 0 && (view_numel < tensor_numel || shape[view_d] == 1)) {
        out[view_d] = view_numel * chunk_base_stride;
        view_numel *= shape[view_d];
        --view_d;
      }
      if (view_numel != tensor_numel) return std::nullopt;
      if (tensor_d > 0) {
        chunk_base_stride = old_strides[tensor_d - 1];
        tensor_numel = 1;
        view_numel = 1;
      }
    }
  }
  if (view_d != -1) return std::nullopt;
  return out;
}

std::array<bool, kMaxDims> reduced_dims(const OpDef& d, const TensorMeta& in, const Dims& dims) {
  std::array<bool, kMaxDims> reduce{};
  if (dims.empty()) {
    reduce.fill(true);
    return reduce;
  }
  for (int64_t raw : dims) {
    int64_t w = wrap_dim(d.name, raw, in.dim());
    if (in.dim() == 0) continue;
    if (reduce[w]) fail<InvalidArgument>(d.name, "dim {} appears more than once in {}", w, dims);
    reduce[w] = true;
  }
  return reduce;
}

InferResult contiguous_result(DType dtype, const Shape& shape) {
  return InferResult{TensorMeta::contiguous(dtype, shape), false};
}

[[noreturn]] void inplace_shape_mismatch(const OpDef& d, const Shape& result, const Shape& self) {
  fail<ShapeError>(fmt::format("{}_", d.name),
                   "result shape {} does not match the in-place tensor's shape {}", result, self);
}

void check_inplace_dtype(const OpDef& d, DType result, DType self) {
  if (!can_cast(result, self))
    fail<DTypeError>(fmt::format("{}_", d.name),
                     "result dtype {} cannot be stored in the in-place {} tensor", result, self);
}

// ---- rules per kind ----

// The dtype an elementwise op (Unary, Clamp, Binary) computes in, after its dtype checks.
DType elementwise_dtype(const OpDef& d, std::span<const TensorMeta> in, const OpAttrs& a) {
  const TensorMeta& x = in[0];
  switch (d.kind) {
    case OpKind::Unary:
      if (d.id == OpId::bitwise_not && is_floating(x.dtype))
        fail<DTypeError>(d.name, "is defined for integer and bool tensors only, got {}", x.dtype);
      if (d.dtype_rule == DTypeRule::Same && d.id != OpId::bitwise_not) reject_bool(d, x.dtype);
      return unary_dtype(d, x.dtype);
    case OpKind::Clamp:
      reject_bool(d, x.dtype);
      if (a.scalars[0].is_none() && a.scalars[1].is_none())
        fail<InvalidArgument>(d.name, "needs at least one of min and max");
      return x.dtype;
    default:
      break;
  }
  if (in.size() == 1 && a.scalars[0].is_none())
    fail<InvalidArgument>(d.name, "needs a second operand: a tensor or a scalar");
  DType operand = binary_operand_dtype(in, a);
  // The second operand's dtype, or the promoted one for a scalar (as the messages say).
  const DType other = in.size() == 2 ? in[1].dtype : operand;
  if (d.id == OpId::sub && operand == DType::Bool)
    fail<DTypeError>(d.name, "subtracting bool tensors is not supported (got {} and {})", x.dtype,
                     other);
  if ((d.id == OpId::remainder || d.id == OpId::fmod || d.id == OpId::floor_divide ||
       d.id == OpId::trunc_divide) &&
      operand == DType::Bool)
    fail<DTypeError>(d.name, "not supported for bool tensors (got {} and {})", x.dtype, other);
  const bool bitwise =
      d.id == OpId::bitwise_and || d.id == OpId::bitwise_or || d.id == OpId::bitwise_xor;
  if (bitwise && is_floating(operand))
    fail<DTypeError>(d.name, "is defined for integer and bool tensors only, got {} and {}", x.dtype,
                     other);
  if (d.dtype_rule == DTypeRule::PromoteFloat) return to_float(operand);
  if (d.dtype_rule == DTypeRule::ToBool) return DType::Bool;
  return operand;
}

// The shape of an elementwise op's result: input 0's, broadcast with input 1's.
Shape elementwise_shape(const OpDef& d, std::span<const TensorMeta> in) {
  return in.size() == 2 ? broadcast_shapes(d.name, in[0].shape, in[1].shape) : in[0].shape;
}

bool is_elementwise(OpKind k) {
  return k == OpKind::Unary || k == OpKind::Clamp || k == OpKind::Binary;
}

InferResult infer_reduce(const OpDef& d, const TensorMeta& x, const OpAttrs& a) {
  if ((d.id == OpId::argmax || d.id == OpId::argmin) && a.ints.size() > 1)
    fail<InvalidArgument>(d.name, "reduces over one dim or all of them, got dims {}", a.ints);
  DType out = unary_dtype(d, x.dtype);
  if (d.kind == OpKind::Moment && !a.scalars[0].is_none() && a.scalars[0].to_double() < 0)
    fail<InvalidArgument>(d.name, "correction must be >= 0, got {}", a.scalars[0].to_string());
  std::array<bool, kMaxDims> reduce = reduced_dims(d, x, a.ints);
  const bool needs_elements = op_keeps_dtype(d.id);  // selects an element: none has no value
  Shape shape;
  for (size_t i = 0; i < x.shape.size(); ++i) {
    if (reduce[i]) {
      if (needs_elements && x.shape[i] == 0)
        fail<ShapeError>(d.name, "cannot reduce over dim {} of size 0 (shape {})", i, x.shape);
      if (a.keepdim) shape.push_back(1);
    } else {
      shape.push_back(x.shape[i]);
    }
  }
  return contiguous_result(out, shape);
}

InferResult infer_linalg(const OpDef& d, const TensorMeta& x, const TensorMeta& y) {
  if (x.dtype != y.dtype)
    fail<DTypeError>(d.name, "expected both operands to have the same dtype, got {} and {}",
                     x.dtype, y.dtype);
  reject_bool(d, x.dtype);
  const Shape &a = x.shape, &b = y.shape;
  if (d.id == OpId::dot) {
    if (a.size() != 1 || b.size() != 1 || a[0] != b[0])
      fail<ShapeError>(d.name, "expected two 1-D tensors of the same size, got shapes {} and {}", a,
                       b);
    return contiguous_result(x.dtype, {});
  }
  if (d.id == OpId::mv) {
    if (a.size() != 2 || b.size() != 1 || a[1] != b[0])
      fail<ShapeError>(d.name, "expected a matrix (n, m) and a vector (m), got shapes {} and {}", a,
                       b);
    return contiguous_result(x.dtype, {a[0]});
  }
  if (a.empty() || b.empty())
    fail<ShapeError>(d.name, "both operands need at least 1 dim, got shapes {} and {}", a, b);
  int64_t k_a = a.back();
  int64_t k_b = b.size() == 1 ? b[0] : b[b.size() - 2];
  if (k_a != k_b)
    fail<ShapeError>(d.name, "shapes {} and {} cannot be multiplied ({} != {})", a, b, k_a, k_b);
  Shape batch_a, batch_b;
  for (size_t i = 0; i + 2 < a.size(); ++i) batch_a.push_back(a[i]);
  for (size_t i = 0; i + 2 < b.size(); ++i) batch_b.push_back(b[i]);
  Shape out;
  try {
    out = broadcast_shapes(d.name, batch_a, batch_b);
  } catch (const ShapeError&) {
    fail<ShapeError>(d.name, "batch dims of shapes {} and {} are not broadcastable", a, b);
  }
  if (a.size() >= 2) out.push_back(a[a.size() - 2]);
  if (b.size() >= 2) out.push_back(b.back());
  return contiguous_result(x.dtype, out);
}

// flatten's shape: dims start_dim..end_dim of x merged into one (a 0-d x becomes [1]).
Shape flatten_shape(const OpDef& d, const TensorMeta& x, const Dims& v) {
  if (v.size() != 2)
    fail<InvalidArgument>(d.name, "expects (start_dim, end_dim), got {} values {}", v.size(), v);
  const int64_t start = wrap_dim(d.name, v[0], x.dim()), end = wrap_dim(d.name, v[1], x.dim());
  if (start > end)
    fail<IndexError>(d.name, "start_dim {} comes after end_dim {} (shape {})", start, end, x.shape);
  if (x.dim() == 0) return Shape{1};
  Shape shape;
  for (int64_t i = 0; i < start; ++i) shape.push_back(x.shape[i]);
  int64_t merged = 1;
  for (int64_t i = start; i <= end; ++i) merged *= x.shape[i];
  shape.push_back(merged);
  for (int64_t i = end + 1; i < x.dim(); ++i) shape.push_back(x.shape[i]);
  return shape;
}

// diagonal(x, offset, dim1, dim2): dims dim1 and dim2 dropped, the diagonal a new last dim
// (stride: the sum of theirs), as torch's view.
TensorMeta diagonal_view(const OpDef& d, const TensorMeta& x, const Dims& v) {
  if (x.dim() < 2)
    fail<ShapeError>(d.name, "expected a tensor of at least 2 dims, got shape {}", x.shape);
  const int64_t d1 = wrap_dim(d.name, v[1], x.dim()), d2 = wrap_dim(d.name, v[2], x.dim());
  if (d1 == d2) fail<InvalidArgument>(d.name, "dim1 and dim2 must differ, both are {}", d1);
  const int64_t s1 = x.shape[d1], s2 = x.shape[d2];
  // Clamped first: any offset past either end gives an empty diagonal.
  const int64_t o = std::clamp<int64_t>(v[0], -s1, s2);
  const int64_t length = std::max<int64_t>(o >= 0 ? std::min(s1, s2 - o) : std::min(s1 + o, s2), 0);
  TensorMeta m = x;
  if (length > 0) m.offset += o >= 0 ? o * x.strides[d2] : -o * x.strides[d1];
  const int64_t stride = x.strides[d1] + x.strides[d2];
  for (int64_t dim : {std::max(d1, d2), std::min(d1, d2)}) {
    m.shape.erase(static_cast<size_t>(dim));
    m.strides.erase(static_cast<size_t>(dim));
  }
  m.shape.push_back(length);
  m.strides.push_back(stride);
  return m;
}

InferResult infer_view(const OpDef& d, const TensorMeta& x, const OpAttrs& a) {
  TensorMeta m = x;
  const Dims& v = a.ints;
  auto need_ints = [&](size_t n, const char* what) {
    if (v.size() != n)
      fail<InvalidArgument>(d.name, "expects {}, got {} values {}", what, v.size(), v);
  };
  auto need_dims = [&] {
    if (x.dim() == 0) fail<IndexError>(d.name, "cannot be applied to a 0-d tensor");
  };
  switch (d.id) {
    case OpId::view:
    case OpId::reshape:
    case OpId::flatten: {
      Shape shape =
          d.id == OpId::flatten ? flatten_shape(d, x, v) : resolve_shape(d, v, x.numel(), x.shape);
      std::optional<Strides> st = view_strides(x.shape, x.strides, shape);
      if (!st) {
        if (d.id == OpId::view)
          fail<ShapeError>(d.name,
                           "shape {} is incompatible with the input's layout (shape {}, strides "
                           "{}); use reshape",
                           shape, x.shape, x.strides);
        return contiguous_result(x.dtype, shape);
      }
      m.shape = shape;
      m.strides = *st;
      break;
    }
    case OpId::transpose: {
      need_ints(2, "two dims");
      int64_t d0 = wrap_dim(d.name, v[0], x.dim()), d1 = wrap_dim(d.name, v[1], x.dim());
      if (x.dim() > 0) {
        std::swap(m.shape[d0], m.shape[d1]);
        std::swap(m.strides[d0], m.strides[d1]);
      }
      break;
    }
    case OpId::permute: {
      if (static_cast<int64_t>(v.size()) != x.dim())
        fail<InvalidArgument>(d.name, "dims {} must list each of the {} dims once", v, x.dim());
      std::array<bool, kMaxDims> seen{};
      for (size_t i = 0; i < v.size(); ++i) {
        int64_t w = wrap_dim(d.name, v[i], x.dim());
        if (seen[w]) fail<InvalidArgument>(d.name, "dim {} repeats in {}", w, v);
        seen[w] = true;
        m.shape[i] = x.shape[w];
        m.strides[i] = x.strides[w];
      }
      break;
    }
    case OpId::narrow: {
      need_ints(3, "(dim, start, length)");
      need_dims();
      int64_t dim = wrap_dim(d.name, v[0], x.dim());
      int64_t size = x.shape[dim], start = v[1] < 0 ? v[1] + size : v[1], length = v[2];
      if (start < 0 || start > size || length < 0 || length > size - start)
        fail<IndexError>(d.name, "start {} and length {} do not fit dim {} of size {} (shape {})",
                         v[1], length, dim, size, x.shape);
      m.offset += start * x.strides[dim];
      m.shape[dim] = length;
      break;
    }
    case OpId::slice: {
      need_ints(4, "(dim, start, end, step)");
      need_dims();
      int64_t dim = wrap_dim(d.name, v[0], x.dim());
      int64_t size = x.shape[dim], step = v[3];
      if (step <= 0) fail<InvalidArgument>(d.name, "step must be positive, got {}", step);
      auto clamp_index = [size](int64_t i) {
        if (i < 0) i = i < -size ? 0 : i + size;
        return i > size ? size : i;
      };
      int64_t start = clamp_index(v[1]), end = clamp_index(v[2]);
      int64_t length = end > start ? (end - start + step - 1) / step : 0;
      m.offset += (length > 0 ? start : 0) * x.strides[dim];
      m.shape[dim] = length;
      m.strides[dim] = x.strides[dim] * step;
      break;
    }
    case OpId::select: {
      need_ints(2, "(dim, index)");
      need_dims();
      int64_t dim = wrap_dim(d.name, v[0], x.dim());
      int64_t size = x.shape[dim], index = v[1] < 0 ? v[1] + size : v[1];
      if (index < 0 || index >= size)
        fail<IndexError>(d.name, "index {} is out of range for dim {} of size {} (shape {})", v[1],
                         dim, size, x.shape);
      m.offset += index * x.strides[dim];
      m.shape.erase(static_cast<size_t>(dim));
      m.strides.erase(static_cast<size_t>(dim));
      break;
    }
    case OpId::diagonal:
      need_ints(3, "(offset, dim1, dim2)");
      m = diagonal_view(d, x, v);
      break;
    case OpId::expand: {
      if (static_cast<int64_t>(v.size()) < x.dim())
        fail<ShapeError>(d.name, "target shape {} has fewer dims than the input shape {}", v,
                         x.shape);
      size_t lead = v.size() - x.shape.size();
      m.shape = Shape(v.size());
      m.strides = Strides(v.size());
      for (size_t i = 0; i < v.size(); ++i) {
        if (i < lead) {
          if (v[i] < 0)
            fail<ShapeError>(d.name, "size {} is not allowed for a new leading dim ({} to {})",
                             v[i], x.shape, v);
          m.shape[i] = v[i];
          m.strides[i] = 0;
          continue;
        }
        int64_t old = x.shape[i - lead], want = v[i] == -1 ? old : v[i];
        if (want == old) {
          m.shape[i] = old;
          m.strides[i] = x.strides[i - lead];
        } else if (old == 1 && want >= 0) {
          m.shape[i] = want;
          m.strides[i] = 0;
        } else {
          fail<ShapeError>(d.name,
                           "the expanded size {} must match the existing size {} at dim {} "
                           "({} to {})",
                           v[i], old, i, x.shape, v);
        }
      }
      break;
    }
    case OpId::squeeze: {
      std::array<bool, kMaxDims> drop{};
      if (v.empty()) {
        for (size_t i = 0; i < x.shape.size(); ++i) drop[i] = x.shape[i] == 1;
      } else {
        for (int64_t raw : v) {
          int64_t w = wrap_dim(d.name, raw, x.dim());
          if (x.dim() > 0 && x.shape[w] == 1) drop[w] = true;
        }
      }
      m.shape.clear();
      m.strides.clear();
      for (size_t i = 0; i < x.shape.size(); ++i) {
        if (drop[i]) continue;
        m.shape.push_back(x.shape[i]);
        m.strides.push_back(x.strides[i]);
      }
      break;
    }
    case OpId::unsqueeze: {
      need_ints(1, "one dim");
      int64_t dim = wrap_dim(d.name, v[0], x.dim() + 1);
      int64_t stride = dim < x.dim() ? x.shape[dim] * x.strides[dim] : 1;
      m.shape.insert(static_cast<size_t>(dim), 1);
      m.strides.insert(static_cast<size_t>(dim), stride);
      break;
    }
    default:
      fail<InvalidArgument>(d.name, "is not a view op");
  }
  return InferResult{m, true};
}

InferResult infer_create(const OpDef& d, const OpAttrs& a) {
  if (!is_valid_dtype(static_cast<uint8_t>(a.dtype)))
    fail<DTypeError>(d.name, "invalid dtype code {}", static_cast<int>(a.dtype));
  switch (d.id) {
    case OpId::arange: {
      double start = a.scalars[0].to_double(), end = a.scalars[1].to_double();
      double step = a.scalars[2].is_none() ? 1.0 : a.scalars[2].to_double();
      if (a.scalars[0].is_none() || a.scalars[1].is_none())
        fail<InvalidArgument>(d.name, "needs start and end");
      if (step == 0 || !std::isfinite(start) || !std::isfinite(end) || !std::isfinite(step))
        fail<InvalidArgument>(d.name, "start {}, end {} and step {} must be finite, step non-zero",
                              start, end, step);
      if ((end - start) / step < 0)
        fail<InvalidArgument>(d.name, "end {} is not reachable from start {} with step {}", end,
                              start, step);
      if (arange_is_integral(a)) {
        __int128 span = static_cast<__int128>(a.scalars[1].to_int()) - a.scalars[0].to_int();
        __int128 istep = a.scalars[2].is_none() ? 1 : a.scalars[2].to_int();
        __int128 count = span == 0 ? 0 : (span + istep - (istep > 0 ? 1 : -1)) / istep;
        if (count > std::numeric_limits<int64_t>::max() / 8)
          fail<ShapeError>(d.name, "would have more than 2^60 elements");
        return contiguous_result(a.dtype, {static_cast<int64_t>(count)});
      }
      double n = std::ceil((end - start) / step);
      if (n > static_cast<double>(std::numeric_limits<int64_t>::max() / 8))
        fail<ShapeError>(d.name, "would have {} elements", n);
      return contiguous_result(a.dtype, {static_cast<int64_t>(n)});
    }
    case OpId::linspace:
      if (a.ints.size() != 1 || a.ints[0] < 0)
        fail<InvalidArgument>(d.name, "steps must be one number >= 0, got {}", a.ints);
      return contiguous_result(a.dtype, {a.ints[0]});
    default:
      break;
  }
  for (int64_t s : a.ints)
    if (s < 0) fail<ShapeError>(d.name, "invalid size {} in shape {}", s, a.ints);
  numel_of(a.ints);
  if ((d.id == OpId::rand || d.id == OpId::randn) && !is_floating(a.dtype))
    fail<DTypeError>(d.name, "needs a floating point dtype, got {}", a.dtype);
  if (d.id == OpId::full && a.scalars[0].is_none())
    fail<InvalidArgument>(d.name, "needs a fill value");
  return contiguous_result(a.dtype, a.ints);
}

InferResult infer_mutate(const OpDef& d, std::span<const TensorMeta> in, const OpAttrs& a) {
  const TensorMeta& dst = in[0];
  switch (d.id) {
    case OpId::copy_: {
      Shape b = broadcast_shapes(d.name, dst.shape, in[1].shape);
      if (!(b == dst.shape))
        fail<ShapeError>(d.name, "source shape {} does not broadcast to destination shape {}",
                         in[1].shape, dst.shape);
      break;
    }
    case OpId::fill_:
      if (a.scalars[0].is_none()) fail<InvalidArgument>(d.name, "needs a fill value");
      break;
    case OpId::uniform_:
      require_float(d, dst.dtype);
      if (!(a.scalars[0].to_double() <= a.scalars[1].to_double()))
        fail<InvalidArgument>(d.name, "expects from <= to, got from={} to={}",
                              a.scalars[0].to_string(), a.scalars[1].to_string());
      break;
    case OpId::normal_:
      require_float(d, dst.dtype);
      if (!(a.scalars[1].to_double() >= 0))
        fail<InvalidArgument>(d.name, "expects std >= 0, got {}", a.scalars[1].to_string());
      break;
    default:
      break;
  }
  return InferResult{dst, true, dst.dtype};
}

}  // namespace

DType binary_operand_dtype(std::span<const TensorMeta> in, const OpAttrs& a) {
  return in.size() == 2 ? promote_types(in[0].dtype, in[1].dtype)
                        : promote_with_scalar(in[0].dtype, a.scalars[0]);
}

bool arange_is_integral(const OpAttrs& a) {
  return !a.scalars[0].is_floating() && !a.scalars[1].is_floating() && !a.scalars[2].is_floating();
}

namespace creation {
OpAttrs shape(const Shape& shape, DType dtype) {
  OpAttrs a;
  a.ints = shape;
  a.dtype = dtype;
  return a;
}
OpAttrs full(const Shape& s, Scalar value, DType dtype) {
  OpAttrs a = shape(s, dtype);
  a.scalars[0] = value;
  return a;
}
OpAttrs arange(Scalar start, Scalar end, Scalar step) {
  OpAttrs a;
  a.scalars = {start, end, step};
  bool integral = !start.is_floating() && !end.is_floating() && !step.is_floating();
  a.dtype = integral ? DType::Int64 : DType::Float32;
  return a;
}
OpAttrs linspace(double start, double end, int64_t steps, DType dtype) {
  OpAttrs a;
  a.scalars = {Scalar(start), Scalar(end), Scalar()};
  a.ints = {steps};
  a.dtype = dtype;
  return a;
}
OpAttrs random(const Shape& s, DType dtype, uint64_t seed, uint64_t offset) {
  OpAttrs a = shape(s, dtype);
  a.seed = seed;
  a.offset = offset;
  return a;
}
OpAttrs random(const Shape& s, DType dtype, Generator* gen) {
  const auto n = static_cast<uint64_t>(numel_of(s));
  RandomDraw d = gen ? RandomDraw{gen->seed(), gen->advance(n)} : default_generator_advance(n);
  return random(s, dtype, d.seed, d.offset);
}
}  // namespace creation

std::string_view param_type_name(ParamType t) {
  auto i = static_cast<size_t>(t);
  return i < std::size(kParamTypeNames) ? kParamTypeNames[i] : std::string_view("?");
}

std::span<const OpDef> all_ops() {
  return kOps;
}

namespace detail {
const OpDef* const kOpTable = kOps.data();

void throw_unknown_op(uint16_t code) {
  throw InvalidArgument(fmt::format(
      "unknown op id {} (no op of the table has that code; the largest is {})", code, kMaxOpCode));
}
}  // namespace detail

const OpDef* find_op(std::string_view name) {
  for (const OpDef& d : kOps)
    if (d.name == name) return &d;
  return nullptr;
}

int64_t wrap_dim(std::string_view op, int64_t dim, int64_t ndim) {
  int64_t n = ndim > 0 ? ndim : 1;
  if (dim < -n || dim >= n)
    fail<IndexError>(op, "dim {} is out of range for a {}-d tensor (expected {} to {})", dim, ndim,
                     -n, n - 1);
  return dim < 0 ? dim + n : dim;
}

int64_t scatter_reduce_code(std::string_view reduce) {
  constexpr std::string_view names[] = {"sum", "prod", "mean", "amax", "amin"};
  for (size_t i = 0; i < std::size(names); ++i)
    if (reduce == names[i]) return static_cast<int64_t>(i);
  throw InvalidArgument(
      "scatter_reduce: reduce must be 'sum', 'prod', 'mean', 'amax' or 'amin', "
      "got '" +
      std::string(reduce) + "'");
}

Shape broadcast_shapes(std::string_view op, const Shape& a, const Shape& b) {
  size_t n = a.size() > b.size() ? a.size() : b.size();
  Shape out(n);
  for (size_t i = 0; i < n; ++i) {
    int64_t sa = i < n - a.size() ? 1 : a[i - (n - a.size())];
    int64_t sb = i < n - b.size() ? 1 : b[i - (n - b.size())];
    if (sa != sb && sa != 1 && sb != 1)
      fail<ShapeError>(op, "shapes {} and {} are not broadcastable (size {} vs {} at dim {})", a, b,
                       sa, sb, i);
    out[i] = sa == 1 ? sb : sa;
  }
  return out;
}

namespace {
// The inputs' count, and that each is a well-formed metadata (infer is public: a caller's
// TensorMeta may have strides that do not match its shape, or a dtype code out of range).
void check_input_count(const OpDef& d, std::span<const TensorMeta> in) {
  int n = static_cast<int>(in.size());
  if (n < d.min_inputs || n > d.max_inputs)
    fail<InvalidArgument>(d.name, "takes {} to {} tensor inputs, got {}", d.min_inputs,
                          d.max_inputs, n);
  for (size_t i = 0; i < in.size(); ++i) {
    const TensorMeta& m = in[i];
    if (!is_valid_dtype(static_cast<uint8_t>(m.dtype)))
      fail<DTypeError>(d.name, "input {} has an invalid dtype code {}", i,
                       static_cast<int>(m.dtype));
    if (m.strides.size() != m.shape.size())
      fail<InvalidArgument>(d.name, "input {} has {} sizes but {} strides", i, m.shape.size(),
                            m.strides.size());
  }
}

// An in-place call writes input 0: there must be one.
void check_inplace_target(const OpDef& d, std::span<const TensorMeta> in) {
  if (in.empty())
    fail<InvalidArgument>(d.name,
                          "an in-place call needs the tensor it writes (input 0); "
                          "got no inputs");
}

void check_writable(const OpDef& d, const TensorMeta& x) {
  for (size_t i = 0; i < x.shape.size(); ++i)
    if (x.strides[i] == 0 && x.shape[i] > 1)
      fail<InvalidArgument>(d.name,
                            "cannot write in place to an expanded tensor (shape {}, strides {}): "
                            "several elements share one memory location; clone it first",
                            x.shape, x.strides);
}
}  // namespace

DType infer_inplace(OpId op, std::span<const TensorMeta> in, const OpAttrs& a) {
  const OpDef& d = op_def(op);
  check_input_count(d, in);
  check_inplace_target(d, in);
  check_writable(d, in[0]);
  if (d.kind == OpKind::Mutate) return infer_mutate(d, in, a).computed_dtype;
  if (!d.has_inplace_form) fail<InvalidArgument>(d.name, "has no in-place form");
  // The result is input 0 itself: only what would give it another shape, or a dtype input
  // 0 cannot hold, is checked, and no result metadata is built. (Broadcast errors come
  // before dtype errors, as for the out-of-place form.)
  const bool same_shapes = in.size() < 2 || in[1].shape == in[0].shape;
  Shape shape;
  if (!same_shapes) shape = elementwise_shape(d, in);
  const DType computed = elementwise_dtype(d, in, a);
  if (!same_shapes && !(shape == in[0].shape)) inplace_shape_mismatch(d, shape, in[0].shape);
  check_inplace_dtype(d, computed, in[0].dtype);
  return computed;
}

InferResult infer(OpId op, std::span<const TensorMeta> in, const OpAttrs& a, bool inplace) {
  const OpDef& d = op_def(op);
  if (inplace) {
    if (d.kind == OpKind::Mutate) {
      check_input_count(d, in);
      check_inplace_target(d, in);
      check_writable(d, in[0]);
      return infer_mutate(d, in, a);
    }
    const DType computed =
        infer_inplace(op, in, a);  // before in[0] is read: it checks there is one
    return InferResult{in[0], true, computed};
  }
  check_input_count(d, in);
  if (d.kind == OpKind::Mutate) fail<InvalidArgument>(d.name, "only exists in place");
  if (is_elementwise(d.kind)) {
    // The shapes are checked first, as in place (one order whatever the compiler: a call's
    // arguments are evaluated in an unspecified order, right to left by g++, left to right by
    // clang, so an op with both a shape and a dtype error reported either).
    const Shape shape = elementwise_shape(d, in);
    return contiguous_result(elementwise_dtype(d, in, a), shape);
  }

  InferResult r;
  switch (d.kind) {
    case OpKind::Unary:
    case OpKind::Clamp:
    case OpKind::Binary:
      break;  // elementwise, above
    case OpKind::Reduce:
    case OpKind::Norm:
    case OpKind::Moment:
      r = infer_reduce(d, in[0], a);
      break;
    case OpKind::Linalg:
      r = infer_linalg(d, in[0], in[1]);
      break;
    case OpKind::View:
      r = infer_view(d, in[0], a);
      break;
    case OpKind::Convert:
      if (d.id == OpId::to) {
        if (!is_valid_dtype(static_cast<uint8_t>(a.dtype)))
          fail<DTypeError>(d.name, "invalid dtype code {}", static_cast<int>(a.dtype));
        r = a.dtype == in[0].dtype ? InferResult{in[0], true}
                                   : contiguous_result(a.dtype, in[0].shape);
      } else if (d.id == OpId::clone) {
        r = contiguous_result(in[0].dtype, in[0].shape);
      } else {
        r = in[0].is_contiguous() ? InferResult{in[0], true}
                                  : contiguous_result(in[0].dtype, in[0].shape);
      }
      break;
    case OpKind::Create:
      r = infer_create(d, a);
      break;
    case OpKind::Join:
      r = detail::infer_join(d, in, a);
      break;
    case OpKind::Indexing:
      r = detail::infer_indexing(d, in, a);
      break;
    case OpKind::NN:
      r = detail::infer_nn(d, in, a);
      break;
    case OpKind::Mutate:
      break;  // handled above
  }
  r.computed_dtype = r.meta.dtype;
  return r;
}

}  // namespace dtr
