// The op table: every tensor op is declared exactly once, in the lists below, with its
// kind (which fixes its inputs, attributes and shape rule), its dtype rule and its help
// text. The op ids, the table of OpDefs, the handle methods (tensor_ops.hpp), the CPU
// kernels' dispatch, the wire opcode, the REPL's names and the tests' op list all derive
// from these lists. Adding an op: one line here with the next unused code, its kernel in
// tensor/ (CPU) and tensor/cuda/, nothing else.
//
// The shape rules (`infer`) run without touching data, so the master calls them to know a
// result's metadata before it sends the command, and a mistake throws at the caller's line.
//
// Thread safety: the table is immutable after static initialization; every function here
// is pure and safe from any thread.
#pragma once

#include <array>
#include <cstdint>
#include <iterator>
#include <span>
#include <string_view>

#include "dtr/dims.hpp"
#include "dtr/dtype.hpp"
#include "dtr/scalar.hpp"
#include "dtr/tensor_meta.hpp"

namespace dtr {

// Each list entry is X(name, code, Kind, DTypeRule, "help text"); `code` is the op's
// stable id (OpId below).
// Kinds (what inputs and attributes mean):
//   Unary     one tensor; in-place form name_.
//   Binary    two tensors broadcast together, or a tensor and scalars[0]
//             (scalar_first: the scalar is the left operand); in-place form name_.
//   Reduce    one tensor; ints = dims to reduce (empty: all), keepdim.
//   Clamp     one tensor; scalars[0] = min, scalars[1] = max (None: open).
//   Norm      as Reduce, scalars[0] = p.
//   Moment    as Reduce, scalars[0] = correction (1: unbiased).
//   Linalg    two tensors.
//   View      one tensor; result shares its storage; ints as in the help text.
//   Convert   one tensor; result is new storage, or input 0 itself when it already is in
//             the asked form (contiguous() of a contiguous tensor, to() of the same dtype).
//   Mutate    in place only: input 0 is written (copy_, fill_, random fills).
//   Create    no tensor input; ints = shape unless the help text says otherwise.
#define DTR_UNARY_OPS(X)                                                \
  X(neg, 0, Unary, Same, "neg(x): -x elementwise")                      \
  X(abs, 1, Unary, Same, "abs(x): |x| elementwise")                     \
  X(exp, 2, Unary, ToFloat, "exp(x): e^x elementwise")                  \
  X(log, 3, Unary, ToFloat, "log(x): natural logarithm elementwise")    \
  X(sqrt, 4, Unary, ToFloat, "sqrt(x): square root elementwise")        \
  X(rsqrt, 5, Unary, ToFloat, "rsqrt(x): 1/sqrt(x) elementwise")        \
  X(sin, 6, Unary, ToFloat, "sin(x): sine elementwise")                 \
  X(cos, 7, Unary, ToFloat, "cos(x): cosine elementwise")               \
  X(tanh, 8, Unary, ToFloat, "tanh(x): hyperbolic tangent elementwise") \
  X(sigmoid, 9, Unary, ToFloat, "sigmoid(x): 1/(1+e^-x) elementwise")   \
  X(relu, 10, Unary, Same, "relu(x): max(x, 0) elementwise")

#define DTR_BINARY_OPS(X)                                                            \
  X(add, 11, Binary, Promote, "add(a, b): a + b, broadcasting")                      \
  X(sub, 12, Binary, Promote, "sub(a, b): a - b, broadcasting")                      \
  X(mul, 13, Binary, Promote, "mul(a, b): a * b, broadcasting")                      \
  X(div, 14, Binary, PromoteFloat, "div(a, b): a / b (true division), broadcasting") \
  X(pow, 15, Binary, Promote, "pow(a, b): a ^ b, broadcasting")                      \
  X(maximum, 16, Binary, Promote, "maximum(a, b): larger of a and b, broadcasting")  \
  X(minimum, 17, Binary, Promote, "minimum(a, b): smaller of a and b, broadcasting") \
  X(eq, 18, Binary, ToBool, "eq(a, b): a == b as bool, broadcasting")                \
  X(ne, 19, Binary, ToBool, "ne(a, b): a != b as bool, broadcasting")                \
  X(lt, 20, Binary, ToBool, "lt(a, b): a < b as bool, broadcasting")                 \
  X(le, 21, Binary, ToBool, "le(a, b): a <= b as bool, broadcasting")                \
  X(gt, 22, Binary, ToBool, "gt(a, b): a > b as bool, broadcasting")                 \
  X(ge, 23, Binary, ToBool, "ge(a, b): a >= b as bool, broadcasting")

#define DTR_REDUCE_OPS(X)                                                                \
  X(sum, 24, Reduce, SumLike, "sum(x, dim?, keepdim=false): sum (bool/int give int64)")  \
  X(prod, 25, Reduce, SumLike, "prod(x, dim?, keepdim=false): product")                  \
  X(mean, 26, Reduce, FloatOnly, "mean(x, dim?, keepdim=false): arithmetic mean")        \
  X(max, 27, Reduce, Same, "max(x, dim?, keepdim=false): largest value (NaN wins)")      \
  X(min, 28, Reduce, Same, "min(x, dim?, keepdim=false): smallest value (NaN wins)")     \
  X(argmax, 29, Reduce, Index, "argmax(x, dim?, keepdim=false): index of the first max") \
  X(argmin, 30, Reduce, Index, "argmin(x, dim?, keepdim=false): index of the first min")

#define DTR_OTHER_OPS(X)                                                                          \
  X(clamp, 31, Clamp, Same, "clamp(x, min?, max?): limit values to [min, max]")                   \
  X(norm, 32, Norm, FloatOnly, "norm(x, p=2, dim?, keepdim=false): p-norm (p may be inf)")        \
  X(var, 33, Moment, FloatOnly, "var(x, dim?, keepdim=false, correction=1): variance")            \
  X(std, 34, Moment, FloatOnly, "std(x, dim?, keepdim=false, correction=1): standard deviation")  \
  X(matmul, 35, Linalg, Matmul, "matmul(a, b): matrix product; 1-D, 2-D and batched, broadcast")  \
  X(dot, 36, Linalg, Matmul, "dot(a, b): inner product of two 1-D tensors")                       \
  X(mv, 37, Linalg, Matmul, "mv(m, v): matrix (n, m) times vector (m)")                           \
  X(view, 38, View, Same, "view(x, shape): same data with a new shape (-1 infers one size)")      \
  X(reshape, 39, View, Same, "reshape(x, shape): view when the strides allow, else a copy")       \
  X(transpose, 40, View, Same, "transpose(x, d0, d1): swap two dims")                             \
  X(permute, 41, View, Same, "permute(x, dims): reorder all dims")                                \
  X(narrow, 42, View, Same, "narrow(x, dim, start, length): a range of one dim")                  \
  X(slice, 43, View, Same, "slice(x, dim, start, end, step=1): python-style slice of one dim")    \
  X(select, 44, View, Same, "select(x, dim, index): one index of a dim, dropping the dim")        \
  X(expand, 45, View, Same, "expand(x, shape): broadcast size-1 dims without copying (-1 keeps)") \
  X(squeeze, 46, View, Same, "squeeze(x, dims?): drop size-1 dims (all of them when none given)") \
  X(unsqueeze, 47, View, Same, "unsqueeze(x, dim): insert a size-1 dim")                          \
  X(contiguous, 48, Convert, Same, "contiguous(x): x itself if contiguous, else a packed copy")   \
  X(to, 49, Convert, Attr, "to(x, dtype): convert to another dtype")                              \
  X(copy_, 50, Mutate, Same, "copy_(dst, src): copy src (broadcast, any dtype) into dst")         \
  X(fill_, 51, Mutate, Same, "fill_(x, value): set every element to value")                       \
  X(uniform_, 52, Mutate, FloatOnly, "uniform_(x, from=0, to=1, generator): uniform draws")       \
  X(normal_, 53, Mutate, FloatOnly, "normal_(x, mean=0, std=1, generator): normal draws")         \
  X(empty, 54, Create, Attr, "empty(shape, dtype=float32): uninitialized tensor")                 \
  X(full, 55, Create, Attr, "full(shape, value, dtype=float32): tensor filled with value")        \
  X(arange, 56, Create, Attr, "arange(start, end, step=1, dtype): values start, start+step, ...") \
  X(linspace, 57, Create, Attr, "linspace(start, end, steps, dtype=float32): evenly spaced")      \
  X(rand, 58, Create, Attr, "rand(shape, generator, dtype=float32): uniform on [0, 1)")           \
  X(randn, 59, Create, Attr, "randn(shape, generator, dtype=float32): standard normal")

#define DTR_OPS(X)  \
  DTR_UNARY_OPS(X)  \
  DTR_BINARY_OPS(X) \
  DTR_REDUCE_OPS(X) \
  DTR_OTHER_OPS(X)

// Wire-stable: each op's id is the code written in its list entry, and it is the op's
// code on the wire. Codes are never reused or changed (tests/tensor/op_table_test.cpp
// freezes every code given so far); a new op takes the next unused code, wherever its line
// goes, and needs no protocol version bump.
enum class OpId : uint16_t {
#define DTR_OP_ENUM(name, code, kind, rule, doc) name = code,
  DTR_OPS(DTR_OP_ENUM)
#undef DTR_OP_ENUM
};

namespace detail {
// The codes in list order (all_ops() order).
inline constexpr uint16_t kOpCodes[] = {
#define DTR_OP_CODE(name, code, kind, rule, doc) code,
    DTR_OPS(DTR_OP_CODE)
#undef DTR_OP_CODE
};
}  // namespace detail

inline constexpr int kNumOps = static_cast<int>(std::size(detail::kOpCodes));
inline constexpr uint16_t kMaxOpCode = [] {
  uint16_t m = 0;
  for (uint16_t c : detail::kOpCodes) m = c > m ? c : m;
  return m;
}();

namespace detail {
// Position in all_ops() of each code, -1 for a code no op has.
inline constexpr auto kOpIndexOfCode = [] {
  std::array<int16_t, kMaxOpCode + 1> index{};
  for (auto& i : index) i = -1;
  for (int i = 0; i < kNumOps; ++i) index[kOpCodes[i]] = static_cast<int16_t>(i);
  return index;
}();
static_assert(
    [] {
      int named = 0;
      for (int16_t i : kOpIndexOfCode) named += i >= 0;
      return named == kNumOps;
    }(),
    "two ops of the op table share a code");
}  // namespace detail

enum class OpKind : uint8_t {
  Unary,
  Binary,
  Reduce,
  Clamp,
  Norm,
  Moment,
  Linalg,
  View,
  Convert,
  Mutate,
  Create
};

// How an op's result dtype follows from its inputs.
enum class DTypeRule : uint8_t {
  Same,          // dtype of input 0
  Promote,       // promote_types of the operands
  PromoteFloat,  // as Promote, then integral/bool -> float32
  ToFloat,       // integral/bool -> float32, floats kept
  ToBool,        // comparisons: bool
  SumLike,       // integral/bool -> int64, floats kept
  FloatOnly,     // floats kept; anything else is a DTypeError
  Index,         // int64 positions
  Matmul,        // both operands the same non-bool dtype
  Attr,          // attrs.dtype
};

namespace detail {
// Each op's kind and dtype rule in list order (all_ops() order), for the constexpr
// properties below.
inline constexpr OpKind kOpKinds[] = {
#define DTR_OP_KIND(name, code, kind, rule, doc) OpKind::kind,
    DTR_OPS(DTR_OP_KIND)
#undef DTR_OP_KIND
};
inline constexpr DTypeRule kOpRules[] = {
#define DTR_OP_RULE(name, code, kind, rule, doc) DTypeRule::rule,
    DTR_OPS(DTR_OP_RULE)
#undef DTR_OP_RULE
};
}  // namespace detail

// True for the reductions that keep their input's dtype while they reduce: those that
// select one of the input's elements (max, min, argmax, argmin; the Reduce ops whose dtype
// rule is Same or Index). They compare the elements as they are, where the others first
// convert the input to the result's dtype (sum of int32 in int64, mean of float16 in
// float32), and they have no value over zero elements. False for any other value.
constexpr bool op_keeps_dtype(OpId id) {
  const auto code = static_cast<uint16_t>(id);
  if (code > kMaxOpCode || detail::kOpIndexOfCode[code] < 0) return false;
  const int i = detail::kOpIndexOfCode[code];
  return detail::kOpKinds[i] == OpKind::Reduce &&
         (detail::kOpRules[i] == DTypeRule::Same || detail::kOpRules[i] == DTypeRule::Index);
}

// Attributes of one op call: a flat record so that every op travels in one wire format.
// Which fields an op reads is said in its kind's comment above and in its help text.
struct OpAttrs {
  Dims ints;
  std::array<Scalar, 3> scalars{};
  DType dtype = DType::Float32;
  bool keepdim = false;
  bool scalar_first = false;
  uint64_t seed = 0;    // random ops: generator seed
  uint64_t offset = 0;  // random ops: position in the generator's stream
  friend bool operator==(const OpAttrs&, const OpAttrs&) = default;
};

struct OpDef {
  OpId id;
  std::string_view name;  // as users type it; Mutate ops end in '_'
  OpKind kind;
  DTypeRule dtype_rule;
  std::string_view help;
  int min_inputs;  // tensors
  int max_inputs;
  bool has_inplace_form;  // Unary, Binary and Clamp: name_ writes into input 0
};

// The whole table, in the order of the lists (not of the codes).
std::span<const OpDef> all_ops();
// The op of a valid id (is_valid_op); throws InvalidArgument for another value.
const OpDef& op_def(OpId id);
// Looks an op up by its user-facing name; nullptr when unknown.
const OpDef* find_op(std::string_view name);
// True for raw values that name an op (validation of wire bytes).
constexpr bool is_valid_op(uint16_t raw) {
  return raw <= kMaxOpCode && detail::kOpIndexOfCode[raw] >= 0;
}

struct InferResult {
  TensorMeta meta;
  // The result is a view of input 0's storage (views, contiguous() of a contiguous
  // tensor, to() of the same dtype, reshape when no copy is needed, every in-place call).
  bool aliases_input = false;
  // The dtype the op computes; differs from meta.dtype only for an in-place call whose
  // result is converted into input 0 (an int32 tensor's add_ of an int64 tensor).
  DType computed_dtype = DType::Float32;
};

// The shape and dtype rule: the result's metadata for `op` on `inputs` with `attrs`,
// computed without touching data. With `inplace`, the result must fit input 0 (same shape,
// castable dtype) and is input 0. Throws ShapeError, DTypeError, IndexError or
// InvalidArgument with a message that names the op and the shapes or dtypes involved.
InferResult infer(OpId op, std::span<const TensorMeta> inputs, const OpAttrs& attrs,
                  bool inplace = false);

// The dtype the operands of a Binary op compute in: the two tensors' promoted dtype, or
// for a scalar operand torch's scalar rule (a float scalar makes an integral or bool tensor
// float32; an integer scalar makes a bool tensor int64). Comparisons compute in it.
DType binary_operand_dtype(std::span<const TensorMeta> inputs, const OpAttrs& attrs);

// Attributes of the creation ops, shared by every tensor type's creation functions.
namespace creation {
OpAttrs shape(const Shape& shape, DType dtype);
OpAttrs full(const Shape& shape, Scalar value, DType dtype);
// dtype: int64 when start, end and step are all integers, else float32 (as torch).
OpAttrs arange(Scalar start, Scalar end, Scalar step);
OpAttrs linspace(double start, double end, int64_t steps, DType dtype);
OpAttrs random(const Shape& shape, DType dtype, uint64_t seed, uint64_t offset);
}  // namespace creation

// True when arange's start, end and step are all integers (or bools): it then counts in
// int64, exactly.
bool arange_is_integral(const OpAttrs& attrs);

// torch/NumPy broadcasting of two shapes; throws ShapeError naming `op` and both shapes.
Shape broadcast_shapes(std::string_view op, const Shape& a, const Shape& b);
// Wraps a possibly negative dim into [0, ndim); throws IndexError naming `op`.
int64_t wrap_dim(std::string_view op, int64_t dim, int64_t ndim);

}  // namespace dtr
