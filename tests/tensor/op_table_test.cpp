// The op table: unique names, lookups, ids, help text and the per-kind facts, the shape
// rules (infer) against what execute() produces, and a guard that every op of the table
// has a reference test (adding an op without a test fails here).
#include <doctest/doctest.h>

#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "tensor/reference.hpp"

using namespace dtr_test;
namespace local = dtr::local;
using dtr::DTypeRule;
using dtr::InferResult;
using dtr::OpAttrs;
using dtr::OpId;
using dtr::OpKind;
using dtr::TensorMeta;

namespace {

// Each op of the table and the test case(s) that check it against the reference. Keep in
// step with the table: an op missing here fails "every op of the table has a reference test".
struct Covered {
  std::string_view op;
  std::string_view where;
};
constexpr Covered kCoveredOps[] = {
    {"neg", "elementwise_test: unary ops / unary in-place ops"},
    {"abs", "elementwise_test: unary ops / unary in-place ops"},
    {"exp", "elementwise_test: unary ops / unary in-place ops / special values"},
    {"log", "elementwise_test: unary ops / unary in-place ops / special values"},
    {"sqrt", "elementwise_test: unary ops / unary in-place ops / special values"},
    {"rsqrt", "elementwise_test: unary ops / unary in-place ops / special values"},
    {"sin", "elementwise_test: unary ops / unary in-place ops"},
    {"cos", "elementwise_test: unary ops / unary in-place ops"},
    {"tanh", "elementwise_test: unary ops / unary in-place ops / special values"},
    {"sigmoid", "elementwise_test: unary ops / unary in-place ops / special values"},
    {"relu", "elementwise_test: unary ops / unary in-place ops"},
    {"trunc", "elementwise_test: unary ops / unary in-place ops / the formula unary ops"},
    {"reciprocal", "elementwise_test: unary ops / unary in-place ops / the formula unary ops"},
    {"tan", "elementwise_test: unary ops / unary in-place ops / the formula unary ops"},
    {"asin", "elementwise_test: unary ops / unary in-place ops / the formula unary ops"},
    {"acos", "elementwise_test: unary ops / unary in-place ops / the formula unary ops"},
    {"atan", "elementwise_test: unary ops / unary in-place ops / the formula unary ops"},
    {"sinh", "elementwise_test: unary ops / unary in-place ops / the formula unary ops"},
    {"cosh", "elementwise_test: unary ops / unary in-place ops / the formula unary ops"},
    {"asinh", "elementwise_test: unary ops / unary in-place ops / the formula unary ops"},
    {"acosh", "elementwise_test: unary ops / unary in-place ops / the formula unary ops"},
    {"atanh", "elementwise_test: unary ops / unary in-place ops / the formula unary ops"},
    {"erf", "elementwise_test: unary ops / unary in-place ops / the formula unary ops"},
    {"expm1", "elementwise_test: unary ops / unary in-place ops / the formula unary ops"},
    {"log1p", "elementwise_test: unary ops / unary in-place ops / the formula unary ops"},
    {"log2", "elementwise_test: unary ops / unary in-place ops / the formula unary ops"},
    {"log10", "elementwise_test: unary ops / unary in-place ops / the formula unary ops"},
    {"silu", "elementwise_test: unary ops / unary in-place ops / the formula unary ops"},
    {"gelu", "elementwise_test: unary ops / unary in-place ops / the formula unary ops"},
    {"gelu_tanh", "elementwise_test: unary ops / unary in-place ops / the formula unary ops"},
    {"isnan", "elementwise_test: unary predicates"},
    {"isinf", "elementwise_test: unary predicates"},
    {"isfinite", "elementwise_test: unary predicates"},
    {"logical_not", "elementwise_test: unary predicates"},
    {"bitwise_not", "elementwise_test: the integer and logical binary ops / bitwise_not"},
    {"add", "elementwise_test: binary ops (tensor, scalar, scalar-first, in-place, aliasing)"},
    {"sub", "elementwise_test: binary ops (tensor, scalar, scalar-first, in-place, aliasing)"},
    {"mul", "elementwise_test: binary ops (tensor, scalar, scalar-first, in-place, aliasing)"},
    {"div", "elementwise_test: binary ops (tensor, scalar, scalar-first, in-place)"},
    {"pow", "elementwise_test: binary ops (tensor, scalar, scalar-first, in-place)"},
    {"maximum", "elementwise_test: binary ops, NaN propagation"},
    {"minimum", "elementwise_test: binary ops, NaN propagation"},
    {"eq", "elementwise_test: binary ops, operators"},
    {"ne", "elementwise_test: binary ops, operators"},
    {"lt", "elementwise_test: binary ops, operators"},
    {"le", "elementwise_test: binary ops, operators"},
    {"gt", "elementwise_test: binary ops, operators"},
    {"ge", "elementwise_test: binary ops, operators"},
    {"remainder", "elementwise_test: binary ops / remainder and fmod: signs, zero divisors"},
    {"fmod", "elementwise_test: binary ops / remainder and fmod: signs, zero divisors"},
    {"atan2", "elementwise_test: binary ops (tensor, scalar, scalar-first, in-place)"},
    {"bitwise_and", "elementwise_test: binary ops / the integer and logical binary ops"},
    {"bitwise_or", "elementwise_test: binary ops / the integer and logical binary ops"},
    {"bitwise_xor", "elementwise_test: binary ops / the integer and logical binary ops"},
    {"logical_and", "elementwise_test: binary ops / the integer and logical binary ops"},
    {"logical_or", "elementwise_test: binary ops / the integer and logical binary ops"},
    {"logical_xor", "elementwise_test: binary ops / the integer and logical binary ops"},
    {"sum", "reduce_test: whole tensor / along each dim / several dims / empty"},
    {"prod", "reduce_test: whole tensor / along each dim / several dims / empty"},
    {"mean", "reduce_test: whole tensor / along each dim / several dims / empty"},
    {"max", "reduce_test: whole tensor / along each dim / NaN / empty"},
    {"min", "reduce_test: whole tensor / along each dim / NaN / empty"},
    {"argmax", "reduce_test: whole tensor / along each dim / ties / NaN"},
    {"argmin", "reduce_test: whole tensor / along each dim / ties / NaN"},
    {"clamp", "elementwise_test: clamp and clamp_"},
    {"norm", "reduce_test: norm with p = 1, 2, inf, 3"},
    {"var", "reduce_test: var and std with correction 0 and 1"},
    {"std", "reduce_test: var and std with correction 0 and 1"},
    {"matmul", "linalg_test: matmul 1-D, 2-D, batched, views, k = 0"},
    {"dot", "linalg_test: dot and mv"},
    {"mv", "linalg_test: dot and mv"},
    {"view", "view_test: view"},
    {"reshape", "view_test: reshape"},
    {"transpose", "view_test: transpose and permute"},
    {"permute", "view_test: transpose and permute"},
    {"narrow", "view_test: narrow"},
    {"slice", "view_test: slice"},
    {"select", "view_test: select and operator[]"},
    {"expand", "view_test: expand"},
    {"squeeze", "view_test: squeeze and unsqueeze"},
    {"unsqueeze", "view_test: squeeze and unsqueeze"},
    {"contiguous", "view_test: contiguous copies only when needed"},
    {"clone", "view_test: clone copies always; repeat"},
    {"to", "convert_test: to() every dtype pair"},
    {"copy_", "convert_test: copy_ layouts, dtypes, broadcasting; elementwise_test: aliasing"},
    {"fill_", "creation_test: fill_ and zero_"},
    {"uniform_", "creation_test: uniform_ and normal_"},
    {"normal_", "creation_test: uniform_ and normal_"},
    {"empty", "creation_test: empty"},
    {"full", "creation_test: zeros, ones and full"},
    {"arange", "creation_test: arange"},
    {"linspace", "creation_test: linspace"},
    {"rand", "creation_test: rand"},
    {"randn", "creation_test: randn"},
    {"floor", "elementwise_test: unary ops / unary in-place ops / floor, ceil, round and sign"},
    {"ceil", "elementwise_test: unary ops / unary in-place ops / floor, ceil, round and sign"},
    {"round", "elementwise_test: unary ops / unary in-place ops / floor, ceil, round and sign"},
    {"sign", "elementwise_test: unary ops / unary in-place ops / floor, ceil, round and sign"},
    {"flatten", "view_test: flatten"},
    {"cat", "index_test: cat"},
    {"stack", "index_test: stack"},
    {"where", "index_test: where and masked_fill"},
    {"masked_fill", "index_test: where and masked_fill"},
    {"index_select", "index_test: index_select, gather and scatter_add"},
    {"gather", "index_test: index_select, gather and scatter_add"},
    {"scatter_add", "index_test: index_select, gather and scatter_add"},
    {"cumsum", "index_test: cumsum"},
    {"tril", "index_test: tril and triu"},
    {"triu", "index_test: tril and triu"},
    {"one_hot", "index_test: one_hot"},
    {"topk", "index_test: topk"},
    {"topk_indices", "index_test: topk"},
    {"linear", "nn_test: linear"},
    {"conv2d", "nn_test: conv2d forward / finite differences"},
    {"conv2d_input_grad", "nn_test: conv2d gradients / finite differences"},
    {"conv2d_weight_grad", "nn_test: conv2d gradients / finite differences"},
    {"max_pool2d", "nn_test: max_pool2d"},
    {"max_pool2d_indices", "nn_test: max_pool2d"},
    {"max_pool2d_backward", "nn_test: max_pool2d / finite differences"},
    {"avg_pool2d", "nn_test: avg_pool2d"},
    {"avg_pool2d_backward", "nn_test: avg_pool2d / finite differences"},
    {"softmax", "nn_test: softmax and log_softmax"},
    {"log_softmax", "nn_test: softmax and log_softmax"},
    {"softmax_backward", "nn_test: softmax and log_softmax / finite differences"},
    {"log_softmax_backward", "nn_test: softmax and log_softmax / finite differences"},
    {"nll_loss", "nn_test: nll_loss"},
    {"nll_loss_backward", "nn_test: nll_loss / finite differences"},
    {"dropout", "nn_test: dropout and dropout2d"},
    {"dropout2d", "nn_test: dropout and dropout2d"},
    {"threshold_backward", "nn_test: threshold_backward"},
    {"layer_norm", "nn_test: layer_norm"},
    {"flip", "index_test: flip and constant_pad_nd"},
    {"constant_pad_nd", "index_test: flip and constant_pad_nd"},
    {"sort_indices", "index_test: sort and argsort"},
    {"floor_divide", "elementwise_test: binary ops / floor_divide and trunc_divide"},
    {"trunc_divide", "elementwise_test: binary ops / floor_divide and trunc_divide"},
    {"diagonal", "view_test: diagonal"},
    {"scatter", "index_test: scatter"},
    {"scatter_reduce", "index_test: scatter_reduce"},
    {"layer_norm_backward", "nn_test: layer_norm / finite differences"},
    {"layer_norm_weight_grad", "nn_test: layer_norm / finite differences"},
};

// The table as its X-macro lists declare it.
struct Declared {
  std::string_view name;
  OpKind kind;
  DTypeRule rule;
  std::string_view signature;
  std::string_view help;
};
#define DTR_TEST_DECLARED(name, code, kind, rule, sig, help) \
  {#name, OpKind::kind, DTypeRule::rule, sig, help},
constexpr Declared kDeclared[] = {DTR_OPS(DTR_TEST_DECLARED)};
#undef DTR_TEST_DECLARED

// Every op code ever given, as written here by hand: the wire code of an op never changes,
// and a code is never given to another op. A new op adds its line; none is edited.
struct Frozen {
  std::string_view name;
  uint16_t code;
};
constexpr Frozen kFrozenCodes[] = {{"neg", 0},
                                   {"abs", 1},
                                   {"exp", 2},
                                   {"log", 3},
                                   {"sqrt", 4},
                                   {"rsqrt", 5},
                                   {"sin", 6},
                                   {"cos", 7},
                                   {"tanh", 8},
                                   {"sigmoid", 9},
                                   {"relu", 10},
                                   {"add", 11},
                                   {"sub", 12},
                                   {"mul", 13},
                                   {"div", 14},
                                   {"pow", 15},
                                   {"maximum", 16},
                                   {"minimum", 17},
                                   {"eq", 18},
                                   {"ne", 19},
                                   {"lt", 20},
                                   {"le", 21},
                                   {"gt", 22},
                                   {"ge", 23},
                                   {"sum", 24},
                                   {"prod", 25},
                                   {"mean", 26},
                                   {"max", 27},
                                   {"min", 28},
                                   {"argmax", 29},
                                   {"argmin", 30},
                                   {"clamp", 31},
                                   {"norm", 32},
                                   {"var", 33},
                                   {"std", 34},
                                   {"matmul", 35},
                                   {"dot", 36},
                                   {"mv", 37},
                                   {"view", 38},
                                   {"reshape", 39},
                                   {"transpose", 40},
                                   {"permute", 41},
                                   {"narrow", 42},
                                   {"slice", 43},
                                   {"select", 44},
                                   {"expand", 45},
                                   {"squeeze", 46},
                                   {"unsqueeze", 47},
                                   {"contiguous", 48},
                                   {"to", 49},
                                   {"copy_", 50},
                                   {"fill_", 51},
                                   {"uniform_", 52},
                                   {"normal_", 53},
                                   {"empty", 54},
                                   {"full", 55},
                                   {"arange", 56},
                                   {"linspace", 57},
                                   {"rand", 58},
                                   {"randn", 59},
                                   {"floor", 60},
                                   {"ceil", 61},
                                   {"round", 62},
                                   {"sign", 63},
                                   {"flatten", 64},
                                   {"cat", 65},
                                   {"stack", 66},
                                   {"where", 67},
                                   {"masked_fill", 68},
                                   {"index_select", 69},
                                   {"gather", 70},
                                   {"scatter_add", 71},
                                   {"cumsum", 72},
                                   {"one_hot", 73},
                                   {"topk", 74},
                                   {"topk_indices", 75},
                                   {"linear", 76},
                                   {"conv2d", 77},
                                   {"conv2d_input_grad", 78},
                                   {"conv2d_weight_grad", 79},
                                   {"max_pool2d", 80},
                                   {"max_pool2d_indices", 81},
                                   {"max_pool2d_backward", 82},
                                   {"avg_pool2d", 83},
                                   {"avg_pool2d_backward", 84},
                                   {"softmax", 85},
                                   {"log_softmax", 86},
                                   {"softmax_backward", 87},
                                   {"log_softmax_backward", 88},
                                   {"nll_loss", 89},
                                   {"nll_loss_backward", 90},
                                   {"dropout", 91},
                                   {"dropout2d", 92},
                                   {"threshold_backward", 93},
                                   {"trunc", 94},
                                   {"reciprocal", 95},
                                   {"tan", 96},
                                   {"asin", 97},
                                   {"acos", 98},
                                   {"atan", 99},
                                   {"sinh", 100},
                                   {"cosh", 101},
                                   {"asinh", 102},
                                   {"acosh", 103},
                                   {"atanh", 104},
                                   {"erf", 105},
                                   {"expm1", 106},
                                   {"log1p", 107},
                                   {"log2", 108},
                                   {"log10", 109},
                                   {"silu", 110},
                                   {"gelu", 111},
                                   {"gelu_tanh", 112},
                                   {"isnan", 113},
                                   {"isinf", 114},
                                   {"isfinite", 115},
                                   {"logical_not", 116},
                                   {"remainder", 117},
                                   {"fmod", 118},
                                   {"atan2", 119},
                                   {"bitwise_and", 120},
                                   {"bitwise_or", 121},
                                   {"bitwise_xor", 122},
                                   {"logical_and", 123},
                                   {"logical_or", 124},
                                   {"logical_xor", 125},
                                   {"bitwise_not", 126},
                                   {"tril", 127},
                                   {"triu", 128},
                                   {"clone", 129},
                                   {"layer_norm", 130},
                                   {"layer_norm_backward", 131},
                                   {"layer_norm_weight_grad", 132},
                                   {"flip", 133},
                                   {"constant_pad_nd", 134},
                                   {"sort_indices", 135},
                                   {"scatter", 136},
                                   {"floor_divide", 137},
                                   {"trunc_divide", 138},
                                   {"diagonal", 139},
                                   {"scatter_reduce", 140}};

}  // namespace

TEST_CASE("op table: ids, unique names, lookups and help text") {
  auto ops = dtr::all_ops();
  REQUIRE(static_cast<int>(ops.size()) == dtr::kNumOps);
  REQUIRE(sizeof(kDeclared) / sizeof(kDeclared[0]) == ops.size());
  std::set<std::string_view> names;
  for (size_t i = 0; i < ops.size(); ++i) {
    const dtr::OpDef& op = ops[i];
    INFO("op: " << std::string(op.name));
    CHECK(static_cast<uint16_t>(op.id) == dtr::detail::kOpCodes[i]);
    CHECK(dtr::op_def(op.id).id == op.id);
    CHECK(&dtr::op_def(op.id) == &op);
    CHECK_MESSAGE(names.insert(op.name).second, "duplicate op name " << std::string(op.name));
    const dtr::OpDef* found = dtr::find_op(op.name);
    REQUIRE(found != nullptr);
    CHECK(found->id == op.id);
    CHECK(!op.help.empty());
    // The help text opens with the op's call, "name(params)", then ": " and the declared text.
    CHECK(op.help.substr(0, op.name.size() + 1) == std::string(op.name) + "(");
    CHECK(op.help.substr(0, op.usage.size()) == op.usage);
    CHECK(op.usage.back() == ')');
    // As declared in the lists.
    CHECK(op.name == kDeclared[i].name);
    CHECK(op.kind == kDeclared[i].kind);
    CHECK(op.dtype_rule == kDeclared[i].rule);
    CHECK(op.help.substr(op.usage.size()) == ": " + std::string(kDeclared[i].help));
    CHECK(dtr::is_valid_op(static_cast<uint16_t>(op.id)));
  }
  CHECK_FALSE(dtr::is_valid_op(static_cast<uint16_t>(dtr::kMaxOpCode + 1)));
  CHECK_FALSE(dtr::is_valid_op(0xffff));
  CHECK_THROWS_AS(dtr::op_def(static_cast<dtr::OpId>(dtr::kMaxOpCode + 1)), dtr::InvalidArgument);
  CHECK(dtr::find_op("no_such_op") == nullptr);
  CHECK(dtr::find_op("") == nullptr);
  CHECK(dtr::find_op("ADD") == nullptr);
}

TEST_CASE("op table: wire codes are unique and never change") {
  std::set<uint16_t> codes;
  for (const dtr::OpDef& op : dtr::all_ops()) {
    INFO("op: " << std::string(op.name));
    CHECK_MESSAGE(codes.insert(static_cast<uint16_t>(op.id)).second, "a code is given twice");
  }
  // Every code given so far still names the same op (and no op was removed).
  std::set<std::string_view> frozen_names;
  for (const Frozen& f : kFrozenCodes) {
    INFO("op: " << std::string(f.name) << ", frozen code " << f.code);
    frozen_names.insert(f.name);
    REQUIRE(dtr::is_valid_op(f.code));
    CHECK(dtr::op_def(static_cast<dtr::OpId>(f.code)).name == f.name);
  }
  // Every op of the table has its line in kFrozenCodes: a new op adds one.
  for (const dtr::OpDef& op : dtr::all_ops())
    CHECK_MESSAGE(frozen_names.count(op.name) == 1, "op ", std::string(op.name),
                  " has no line in kFrozenCodes");
}

TEST_CASE("op table: inputs, in-place forms and names per kind") {
  for (const dtr::OpDef& op : dtr::all_ops()) {
    INFO("op: " << std::string(op.name));
    const bool ends_ = op.name.back() == '_';
    CHECK(ends_ == (op.kind == OpKind::Mutate));
    CHECK(op.has_inplace_form ==
          (op.kind == OpKind::Unary || op.kind == OpKind::Binary || op.kind == OpKind::Clamp));
    CHECK(op.min_inputs <= op.max_inputs);
    switch (op.kind) {
      case OpKind::Binary:
        CHECK(op.min_inputs == 1);
        CHECK(op.max_inputs == 2);
        break;
      case OpKind::Linalg:
        CHECK(op.min_inputs == 2);
        CHECK(op.max_inputs == 2);
        break;
      case OpKind::Create:
        CHECK(op.min_inputs == 0);
        CHECK(op.max_inputs == 0);
        break;
      case OpKind::Mutate:
        CHECK(op.min_inputs == (op.name == "copy_" ? 2 : 1));
        CHECK(op.max_inputs == (op.name == "copy_" ? 2 : 1));
        break;
      case OpKind::Join:
        CHECK(op.min_inputs == 1);
        CHECK(op.max_inputs == dtr::kMaxOpInputs);
        break;
      case OpKind::Indexing:
      case OpKind::NN: {
        // As many inputs as tensor parameters; an optional one may be left out.
        int required = 0, all = 0;
        for (const dtr::OpParam& p : op.signature.params()) {
          if (p.type != dtr::ParamType::Tensor) continue;
          ++all;
          required += p.optional ? 0 : 1;
        }
        CHECK(op.min_inputs == required);
        CHECK(op.max_inputs == all);
        CHECK(all >= 1);
        break;
      }
      default:
        CHECK(op.min_inputs == 1);
        CHECK(op.max_inputs == 1);
    }
  }
  // A few dtype rules the semantics depend on.
  auto rule = [](const char* n) { return dtr::find_op(n)->dtype_rule; };
  CHECK(rule("div") == DTypeRule::PromoteFloat);
  CHECK(rule("sum") == DTypeRule::SumLike);
  CHECK(rule("mean") == DTypeRule::FloatOnly);
  CHECK(rule("lt") == DTypeRule::ToBool);
  CHECK(rule("argmax") == DTypeRule::Index);
  CHECK(rule("exp") == DTypeRule::ToFloat);
}

TEST_CASE("every op of the table has a reference test") {
  std::set<std::string_view> covered;
  for (const Covered& c : kCoveredOps) {
    CHECK_MESSAGE(covered.insert(c.op).second, "listed twice: " << std::string(c.op));
    CHECK_MESSAGE(dtr::find_op(c.op) != nullptr,
                  "the covered list names " << std::string(c.op) << ", which the table lacks");
  }
  for (const dtr::OpDef& op : dtr::all_ops())
    CHECK_MESSAGE(covered.count(op.name) == 1,
                  "op " << std::string(op.name)
                        << " has no reference test: add one, then list it in "
                           "kCoveredOps (tests/tensor/op_table_test.cpp)");
}

namespace {

TensorMeta meta(DType t, const Sizes& shape) {
  return TensorMeta::contiguous(t, to_shape(shape));
}

InferResult infer1(OpId op, const TensorMeta& a, const OpAttrs& attrs = {}, bool inplace = false) {
  return dtr::infer(op, std::span<const TensorMeta>(&a, 1), attrs, inplace);
}
InferResult infer2(OpId op, const TensorMeta& a, const TensorMeta& b, const OpAttrs& attrs = {},
                   bool inplace = false) {
  TensorMeta in[2] = {a, b};
  return dtr::infer(op, in, attrs, inplace);
}

}  // namespace

namespace {

using dtr::OpParam;
using dtr::ParamType;

// The signature as "type name?=default" items, e.g. "tensor x, dims dim?, bool keepdim=false".
std::string typed(const dtr::OpSignature& sig) {
  std::string out;
  for (const OpParam& p : sig.params()) {
    if (!out.empty()) out += ", ";
    out += dtr::param_type_name(p.type);
    out += ' ';
    out += p.name;
    if (p.optional) out += '?';
    if (!p.deflt.empty()) (out += '=') += p.deflt;
  }
  return out;
}

bool is_input(const OpParam& p) {
  return p.type == ParamType::Tensor || p.type == ParamType::Operand;
}

}  // namespace

TEST_CASE("op table: keeps-dtype reductions are the Reduce ops that select an element") {
  static_assert(dtr::op_keeps_dtype(OpId::max) && dtr::op_keeps_dtype(OpId::argmin));
  static_assert(!dtr::op_keeps_dtype(OpId::sum) && !dtr::op_keeps_dtype(OpId::norm));
  std::set<std::string_view> keeps;
  for (const dtr::OpDef& op : dtr::all_ops()) {
    INFO("op: " << std::string(op.name));
    const bool selects = op.kind == OpKind::Reduce &&
                         (op.dtype_rule == DTypeRule::Same || op.dtype_rule == DTypeRule::Index);
    CHECK(dtr::op_keeps_dtype(op.id) == selects);
    if (dtr::op_keeps_dtype(op.id)) keeps.insert(op.name);
    if (op.kind != OpKind::Reduce && op.kind != OpKind::Norm && op.kind != OpKind::Moment) continue;
    // What the property means for the shape rule: the result keeps an int32 input's dtype
    // (or gives its positions), and a reduction over no element has no value.
    OpAttrs over_empty;
    over_empty.ints = {1};
    const TensorMeta empty = meta(kF32, {2, 0});
    if (dtr::op_keeps_dtype(op.id)) {
      const DType want = op.dtype_rule == DTypeRule::Index ? kI64 : kI32;
      CHECK(infer1(op.id, meta(kI32, {2, 3})).meta.dtype == want);
      CHECK_THROWS_AS(infer1(op.id, empty, over_empty), dtr::ShapeError);
    } else {
      CHECK(infer1(op.id, empty, over_empty).meta.shape == dtr::Shape{2});
    }
  }
  CHECK(keeps == std::set<std::string_view>{"max", "min", "argmax", "argmin"});
  CHECK_FALSE(dtr::op_keeps_dtype(static_cast<OpId>(dtr::kMaxOpCode + 1)));
  CHECK_FALSE(dtr::op_keeps_dtype(static_cast<OpId>(0xffff)));
}

TEST_CASE("op table: each kind's signature") {
  // The kinds whose ops all share their kind's signature (their lines write none).
  const std::vector<std::pair<OpKind, std::string>> fixed = {
      {OpKind::Unary, "tensor x"},
      {OpKind::Binary, "operand a, operand b"},
      {OpKind::Reduce, "tensor x, dims dim?, bool keepdim=false"},
      {OpKind::Clamp, "tensor x, number min?, number max?"},
      {OpKind::Norm, "tensor x, number p=2, dims dim?, bool keepdim=false"},
      {OpKind::Moment, "tensor x, dims dim?, bool keepdim=false, number correction=1"},
  };
  for (size_t i = 0; i < dtr::all_ops().size(); ++i) {
    const dtr::OpDef& op = dtr::all_ops()[i];
    INFO("op: " << std::string(op.name) << ", signature: " << typed(op.signature));
    for (const auto& [kind, want] : fixed)
      if (op.kind == kind) {
        CHECK(kDeclared[i].signature.empty());
        CHECK(typed(op.signature) == want);
      }
    const bool own =
        op.kind == OpKind::View || op.kind == OpKind::Mutate || op.kind == OpKind::Create;
    if (own) CHECK_FALSE(kDeclared[i].signature.empty());
    if (op.kind == OpKind::Linalg && kDeclared[i].signature.empty())
      CHECK(typed(op.signature) == "tensor a, tensor b");
    if (op.kind == OpKind::Convert && kDeclared[i].signature.empty())
      CHECK(typed(op.signature) == "tensor x");
  }
  CHECK(dtr::op_def(OpId::sum).usage == "sum(x, dim?, keepdim=false)");
  CHECK(dtr::op_def(OpId::add).usage == "add(a, b)");
  CHECK(dtr::op_def(OpId::slice).usage == "slice(x, dim, start, end, step=1)");
  CHECK(dtr::op_def(OpId::arange).usage == "arange(start=0, end, step=1, dtype?)");
  CHECK(dtr::op_def(OpId::rand).usage == "rand(shape, generator, dtype=float32)");
}

TEST_CASE("op table: signatures agree with each op's kind and dtype rule") {
  for (const dtr::OpDef& op : dtr::all_ops()) {
    INFO("op: " << std::string(op.name) << ", signature: " << typed(op.signature));
    std::span<const OpParam> ps = op.signature.params();
    const bool per_op_inputs =
        op.kind == OpKind::Join || op.kind == OpKind::Indexing || op.kind == OpKind::NN;
    int inputs = 0, numbers = 0, dtypes = 0, generators = 0, dims = 0, bools = 0;
    std::set<std::string_view> names;
    for (size_t j = 0; j < ps.size(); ++j) {
      const OpParam& p = ps[j];
      CHECK_MESSAGE(names.insert(p.name).second, "parameter twice: " << std::string(p.name));
      CHECK_FALSE((p.optional && !p.deflt.empty()));
      // The tensor inputs come first, as many as the kind has (Join, Indexing and NN ops:
      // anywhere, counted from the signature); operands only in Binary ops.
      if (!per_op_inputs) CHECK(is_input(p) == (static_cast<int>(j) < op.max_inputs));
      CHECK((p.type == ParamType::Operand) == (op.kind == OpKind::Binary && is_input(p)));
      inputs += is_input(p) ? 1 : p.type == ParamType::Tensors ? dtr::kMaxOpInputs : 0;
      numbers += p.type == ParamType::Number;
      dtypes += p.type == ParamType::Dtype;
      generators += p.type == ParamType::Generator;
      dims += p.type == ParamType::Dims;
      bools += p.type == ParamType::Bool;
      if (op.kind == OpKind::View && !is_input(p))
        CHECK((p.type == ParamType::Ints || p.type == ParamType::Int ||
               p.type == ParamType::Start || p.type == ParamType::End));
    }
    CHECK(inputs == op.max_inputs);
    CHECK(numbers + (op.kind == OpKind::Binary ? 1 : 0) <= 3);  // OpAttrs::scalars
    // A dtype parameter exactly where the result's dtype is the attribute's.
    CHECK((dtypes == 1) == (op.dtype_rule == DTypeRule::Attr));
    CHECK(dtypes <= 1);
    // keepdim and reduce dims exactly in the reductions.
    const bool reduces =
        op.kind == OpKind::Reduce || op.kind == OpKind::Norm || op.kind == OpKind::Moment;
    CHECK((dims == 1 && bools == 1) == reduces);
    CHECK((dims == 0 && bools == 0) == !reduces);
    // Draws only where an op fills with random values: random creation and fills, dropout.
    if (generators > 0)
      CHECK((op.kind == OpKind::Create || op.kind == OpKind::Mutate || op.kind == OpKind::NN));
    CHECK(generators <= 1);
    // The usage renders the declaration: name, then each parameter with '?' or '=default'.
    std::string usage = std::string(op.name) + "(";
    for (size_t j = 0; j < ps.size(); ++j) {
      if (j > 0) usage += ", ";
      usage += ps[j].name;
      if (ps[j].optional) usage += '?';
      if (!ps[j].deflt.empty()) (usage += '=') += ps[j].deflt;
    }
    CHECK(op.usage == usage + ")");
  }
}

TEST_CASE("infer: result metadata without data") {
  InferResult r = infer2(OpId::add, meta(kF32, {2, 3}), meta(kI32, {3}));
  CHECK(dtr::describe(r.meta) == "float32[2, 3]");
  CHECK(r.meta.is_contiguous());
  CHECK_FALSE(r.aliases_input);
  CHECK(dtr::describe(infer2(OpId::div, meta(kI64, {4, 1}), meta(kI32, {5})).meta) ==
        "float32[4, 5]");
  CHECK(dtr::describe(infer2(OpId::lt, meta(kF64, {}), meta(kI32, {2})).meta) == "bool[2]");
  OpAttrs scalar;
  scalar.scalars[0] = 0.5;
  CHECK(dtr::describe(infer1(OpId::mul, meta(kI64, {3}), scalar).meta) == "float32[3]");
  scalar.scalars[0] = 2;
  CHECK(dtr::describe(infer1(OpId::mul, meta(kI32, {3}), scalar).meta) == "int32[3]");
  CHECK(dtr::describe(infer1(OpId::exp, meta(kI32, {3})).meta) == "float32[3]");
  CHECK(dtr::describe(infer1(OpId::neg, meta(kI32, {3})).meta) == "int32[3]");

  OpAttrs red;
  red.ints = {1};
  CHECK(dtr::describe(infer1(OpId::sum, meta(kI32, {2, 3, 4}), red).meta) == "int64[2, 4]");
  red.keepdim = true;
  CHECK(dtr::describe(infer1(OpId::argmax, meta(kF32, {2, 3, 4}), red).meta) == "int64[2, 1, 4]");
  CHECK(dtr::describe(infer1(OpId::prod, meta(kBool, {2, 3})).meta) == "int64[]");
  CHECK(dtr::describe(infer2(OpId::matmul, meta(kF64, {2, 1, 3, 4}), meta(kF64, {5, 4, 6})).meta) ==
        "float64[2, 5, 3, 6]");
  CHECK(dtr::describe(infer2(OpId::matmul, meta(kF32, {4}), meta(kF32, {4})).meta) == "float32[]");
  OpAttrs to;
  to.dtype = kI64;
  CHECK(dtr::describe(infer1(OpId::to, meta(kF32, {2}), to).meta) == "int64[2]");

  // In place: the result is input 0 itself, strides and offset included.
  TensorMeta strided{kF32, {3, 2}, {1, 3}, 4};
  InferResult ip = infer2(OpId::add, strided, meta(kF64, {2}), {}, true);
  CHECK(ip.aliases_input);
  CHECK(ip.meta == strided);
  DTR_CHECK_ERROR(dtr::ShapeError, infer2(OpId::add, meta(kF32, {2}), meta(kF32, {3, 2}), {}, true),
                  "add", "[2]", "[3, 2]");
  DTR_CHECK_ERROR(dtr::DTypeError, infer2(OpId::add, meta(kI32, {2}), meta(kF32, {2}), {}, true),
                  "add", "int32", "float32");

  // Views alias and keep the storage offset.
  OpAttrs sel;
  sel.ints = {0, 1};
  InferResult v = infer1(OpId::select, TensorMeta{kF32, {3, 4}, {4, 1}, 2}, sel);
  CHECK(v.aliases_input);
  CHECK(v.meta == TensorMeta{kF32, {4}, {1}, 6});
  CHECK(infer1(OpId::contiguous, meta(kF32, {2, 2})).aliases_input);
  CHECK_FALSE(infer1(OpId::contiguous, TensorMeta{kF32, {2, 2}, {1, 2}, 0}).aliases_input);

  // Creation ops.
  OpAttrs full;
  full.ints = {2, 5};
  full.scalars[0] = 1.0;
  full.dtype = kF64;
  CHECK(dtr::describe(dtr::infer(OpId::full, {}, full).meta) == "float64[2, 5]");
  OpAttrs ar;
  ar.scalars = {Scalar(0), Scalar(10), Scalar(3)};
  ar.dtype = kI64;
  CHECK(dtr::describe(dtr::infer(OpId::arange, {}, ar).meta) == "int64[4]");
}

TEST_CASE("infer agrees with execute on metadata, views exactly") {
  Array a = random_array(kF32, {4, 6}, 600001);
  Tensor padded = make_tensor(a, Layout::Padded);
  struct Case {
    OpId op;
    OpAttrs attrs;
  };
  auto ints = [](dtr::Dims d) {
    OpAttrs at;
    at.ints = d;
    return at;
  };
  std::vector<Case> cases = {
      {OpId::view, ints({24})},
      {OpId::reshape, ints({2, 2, 6})},
      {OpId::reshape, ints({-1})},
      {OpId::transpose, ints({0, 1})},
      {OpId::permute, ints({1, 0})},
      {OpId::narrow, ints({1, 2, 3})},
      {OpId::slice, ints({1, 1, 6, 2})},
      {OpId::select, ints({0, -1})},
      {OpId::expand, ints({3, 4, 6})},
      {OpId::squeeze, ints({})},
      {OpId::unsqueeze, ints({1})},
      {OpId::contiguous, {}},
      {OpId::sum, ints({1})},
      {OpId::exp, {}},
      {OpId::norm, {}},
  };
  cases.back().attrs.scalars[0] = 2.0;
  for (const Case& c : cases) {
    const dtr::OpDef& def = dtr::op_def(c.op);
    INFO("op: " << std::string(def.name));
    Tensor x = def.name == "view" ? make_tensor(a) : padded;
    InferResult r = infer1(c.op, x.meta(), c.attrs);
    Tensor y = local::execute(c.op, std::span<const Tensor>(&x, 1), c.attrs, false);
    CHECK(dtr::describe(y.meta()) == dtr::describe(r.meta));
    CHECK(same_storage(x, y) == r.aliases_input);
    if (r.aliases_input) {
      CHECK(str(to_sizes(y.strides())) == str(to_sizes(r.meta.strides)));
      CHECK(y.meta().offset == r.meta.offset);
    }
  }
}
