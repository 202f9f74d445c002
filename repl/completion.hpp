// Tab completion for the REPL: what may follow the word being typed, from the op table,
// the builtins and the current variables. Pure (no readline), so it can be tested.
//
//   "x.su"   -> "x.sub(", "x.sub_(", "x.sum("   (tensor methods and properties after a '.')
//   "ma"     -> "matmul(", "max(", "maximum(", "manual_seed(", and variables starting "ma"
//   ":no"    -> ":nodes"
// Callables end in '(' so that the completion is ready for its arguments; variables,
// properties, constants and dtypes do not.
//
// Thread safety: reads the evaluator's variables; call it from the evaluator's thread.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "repl/evaluator.hpp"

namespace dtr::repl {

// Characters that end a word for completion ('.' is not one: "x.su" is one word).
inline constexpr const char* kCompletionWordBreaks = " \t\n\"'`@$><=;|&{(,)}[]+-*/%!~";

// Sorted, without duplicates. `word` is the text from the last word break to the cursor.
std::vector<std::string> complete(const Evaluator& ev, std::string_view word);

}  // namespace dtr::repl
