// Generic dispatch of a call to an op of the op table (include/dtr/op_table.hpp).
//
// Each op declares its signature in the table (OpDef::signature: its kind's, or the one its
// list entry writes): the parameters' names, order, types, which are optional and their
// defaults. A call's positional and keyword arguments are bound to those parameters (as
// Python binds them), then each parameter's type says what its value fills:
//   tensor     a tensor input; a list there becomes a tensor on the node of the call's
//              other tensor (`x + [1, 2]` with x on node 1), else on the current node;
//   operand    Binary: a tensor input, or a number for scalars[0] (a number first and a
//              tensor second is the scalar_first form);
//   number     the next of attrs.scalars (p, correction, min, max, value, from, to, mean,
//              std, start, end, step; an optional one left out keeps its slot None);
//   dims       attrs.ints: an int or a tuple/list of ints (None: all);
//   ints       appended to attrs.ints; positionally it takes several ints: randn(20, 20),
//              x.view(2, -1), x.permute(1, 0) (leaving one for each required parameter
//              after it);
//   int, start, end  one int appended to attrs.ints (None: nothing, 0, to the end);
//   bool       attrs.keepdim;  dtype  attrs.dtype (an optional one left out: int64 when
//              all the numbers are integers, else float32, as torch's arange);
//   generator  not a value: the call draws from the default generator (manual_seed);
//   tensors    a list of tensors (or of lists, each sent as a tensor), each an input: cat;
//   pair       an int or a pair of ints appended to attrs.ints (None, or an optional one
//              left out: 0, 0, the op's default);
//   flag       a bool appended to attrs.ints as 0 or 1;
//   reduction  'none', 'mean' or 'sum' appended to attrs.ints as 0, 1 or 2.
// Tensor parameters may stand anywhere in a signature (gather(x, dim, index)); an optional
// one left out (conv2d's bias) is no input.
// A defaulted parameter before a required one (arange's start=0) is bound positionally only
// when the arguments reach the required ones after it: arange(n) is arange(0, n).
//
// Nothing here names an op or a parameter: adding an op to the table makes it callable
// from the REPL.
//
// Thread safety: bind_args() is pure, and so is op_attrs() but for a one-element tensor
// given as a number (to_scalar reads its value); call_op() is safe from any thread as far
// as its arguments and the master's handles are.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "dtr/op_table.hpp"
#include "repl/value.hpp"

namespace dtr::repl {

// An op name as written: "add" (the op), "add_" (its in-place form) or "fill_" (a Mutate
// op, which only exists in place). nullopt when the name is no op.
struct OpRef {
  const OpDef* def;
  bool inplace;
};
std::optional<OpRef> find_op_ref(std::string_view name);
// Every name find_op_ref() accepts, in table order (op, then its in-place form).
std::vector<std::string> op_call_names();

using Kwargs = std::vector<std::pair<std::string, Value>>;

// A call's arguments bound to its op's signature: values[i] is what parameter i of
// def->signature received (positionally, the ints gathered for an `ints` parameter as a
// tuple, or by keyword), nullopt when it was left out (always for a generator).
struct BoundArgs {
  std::vector<std::optional<Value>> values;
};

// Binds the arguments (a method's receiver is args[0]) to the op's parameters. Throws
// TypeError "name(): <why>; usage: <help>" for too many arguments, an unknown keyword or
// one given twice.
BoundArgs bind_args(const OpRef& op, std::vector<Value> args, const Kwargs& kwargs);

// The attributes of a bound call: every parameter but the tensor inputs, plus a Binary
// op's number operand (not the random draw, which call_op makes). Converts no tensor
// input and sends nothing, but reads a one-element tensor given where a number goes.
// Throws TypeError naming the op, the parameter and the usage for a missing required
// argument or a value of the wrong kind.
OpAttrs op_attrs(const OpRef& op, const BoundArgs& bound);

// Binds, builds inputs and attrs and runs the op: DistributedTensor::create / apply /
// apply_inplace. Throws TypeError for arguments that do not fit the signature (naming the
// op and quoting its help), and whatever the master's shape rules throw.
DistributedTensor call_op(const OpRef& op, std::vector<Value> args, const Kwargs& kwargs);

}  // namespace dtr::repl
