// The REPL's front end without the terminal: feed it input lines one at a time, it joins
// continuation lines (open brackets), collects `with ...:` blocks, handles the `:`
// commands, parses and runs complete statements, and reports errors. Errors never end the
// session: each is written to the error stream and the next line runs as usual.
//
// Blocks: after `with ...:` the following lines indented deeper form the body. Interactive
// input ends a block with an empty line (as Python's prompt); script input ends it at the
// first line indented no deeper than the `with` (blank lines inside are allowed), or at the
// end of input (finish()).
//
// Error report format (to `err`):
//   SyntaxError: the line, a caret under the column, then "SyntaxError: <what> (column N)";
//   others: "<Kind>: <message>", Kind being the dtr::Error class (RemoteError, ShapeError,
//   ...). In scripts each report starts with "<source>:<line>: ".
//
// Thread safety: one Interpreter per thread (it drives that thread's current node).
#pragma once

#include <ostream>
#include <string>
#include <string_view>
#include <vector>

#include "repl/evaluator.hpp"

namespace dtr::repl {

struct InterpreterOptions {
  bool interactive = true;     // blocks end at an empty line; errors carry no source prefix
  std::string source;          // script name for error messages ("<stdin>", a file name)
  bool stop_on_error = false;  // quit after the first failed statement
};

class Interpreter {
 public:
  Interpreter(std::ostream& out, std::ostream& err, InterpreterOptions options = {});

  enum class Status { Ready, More };  // More: a block or bracket is open (prompt "... ")
  // One input line, without its newline.
  Status feed(std::string_view line);
  // End of input: runs a pending block; an unclosed bracket is a syntax error.
  void finish();
  // Drops a pending block or continued line without running it (Ctrl-C at the prompt).
  void cancel();

  // Statements (or syntax errors) that failed so far.
  int failures() const { return failures_; }
  bool quit_requested() const { return evaluator_.quit_requested(); }
  int exit_code() const { return evaluator_.exit_code(); }
  Evaluator& evaluator() { return evaluator_; }
  const Evaluator& evaluator() const { return evaluator_; }

 private:
  void run(const std::vector<SourceLine>& lines);
  void command(std::string_view line, int number);
  void report(const std::exception& e, int line);

  std::ostream& out_;
  std::ostream& err_;
  InterpreterOptions options_;
  Evaluator evaluator_;
  int line_number_ = 0;
  std::string continued_;  // a logical line with open brackets so far
  int continued_from_ = 0;
  std::vector<SourceLine> block_;  // a `with ...:` and its body so far
  int failures_ = 0;
};

}  // namespace dtr::repl
