// Generic dispatch of a call to an op of the op table (include/dtr/op_table.hpp).
//
// The op's help text starts with its signature, e.g.
//   "sum(x, dim?, keepdim=false): ..."   "slice(x, dim, start, end, step=1): ..."
// which gives its parameter names, their order, which are optional ('?') and their
// defaults. A call's positional and keyword arguments are bound to those parameters (as
// Python binds them), then turned into the op's tensor inputs and OpAttrs according to the
// op's OpKind:
//   - the first max_inputs parameters are tensor inputs (Binary: the second may be a
//     number, which becomes scalars[0]; a number first and a tensor second is the
//     scalar_first form); a list there becomes a tensor on the node of the call's other
//     tensor (`x + [1, 2]` with x on node 1), else on the current node;
//   - dtype -> attrs.dtype; keepdim -> attrs.keepdim; dim / dims -> attrs.ints (an int
//     or a tuple/list of ints; None: all);
//   - shape / dims / steps -> attrs.ints; a shape may be given as several ints:
//     randn(20, 20), x.view(2, -1), x.permute(1, 0);
//   - View ops: every other parameter appends to attrs.ints in order (None as a slice end:
//     to the end);
//   - every other parameter is a number and fills attrs.scalars in order (p, correction,
//     min, max, value, from, to, mean, std, start, end, step);
//   - a `generator` parameter: the call draws from the default generator (manual_seed).
// Two conventions that the signatures cannot say: arange(n) means arange(0, n) (Python's
// range), and a Create op with a dtype parameter without a default takes torch's rule
// (int64 when all its numbers are integers, else float32).
//
// Nothing here names an op: adding an op to the table makes it callable from the REPL.
//
// Thread safety: the parsed signatures are built once (function-local static) and then
// only read; prepare_op() is safe from any thread as far as its arguments are.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "dtr/op_table.hpp"
#include "repl/value.hpp"

namespace dtr::repl {

struct OpParam {
  std::string name;
  bool optional = false;       // written "name?"
  std::optional<Value> deflt;  // written "name=default"
  bool tensor = false;         // one of the op's tensor inputs
  bool int_list = false;       // shape / dims: may take several ints positionally
  bool required() const { return !optional && !deflt && name != "dtype"; }
};

struct OpSignature {
  std::string_view text;        // "sum(x, dim?, keepdim=false)"
  std::vector<OpParam> params;  // the generator parameter is left out (not a REPL value)
  bool draws_random = false;    // had a generator parameter
};

// The signature of an op, parsed from its help text.
const OpSignature& op_signature(const OpDef& def);

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

// Binds the arguments (a method's receiver is args[0]), builds inputs and attrs and runs
// the op: DistributedTensor::create / apply / apply_inplace. Throws TypeError for
// arguments that do not fit the signature (naming the op and quoting its help), and
// whatever the master's shape rules throw.
DistributedTensor call_op(const OpRef& op, std::vector<Value> args, const Kwargs& kwargs);

}  // namespace dtr::repl
