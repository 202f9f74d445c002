// The REPL language's parser: logical lines to statements (an AST).
//
// Grammar (Python-like; one statement per line, or several separated by ';'):
//   program    := { line }                       (indentation delimits `with` blocks)
//   line       := 'with' scope {',' scope} ':' [simple {';' simple}]   (empty: a block follows)
//              |  simple {';' simple} [';']
//   simple     := target ('=' | '+=' | '-=' | '*=' | '/=') expr  |  expr
//   target     := NAME | postfix '[' subscripts ']'
//   expr       := sum [('==' | '!=' | '<' | '<=' | '>' | '>=') sum]    (no chaining)
//   sum        := term {('+' | '-') term}
//   term       := unary {('*' | '/' | '@') unary}
//   unary      := ('-' | '+') unary | power
//   power      := postfix ['**' unary]                 (right-associative, binds tighter
//                                                       than unary minus: -2**2 == -4)
//   postfix    := atom {'.' NAME | '(' args ')' | '[' subscripts ']'}
//   args       := [arg {',' arg} [',']];   arg := expr | NAME '=' expr
//   subscripts := subscript {',' subscript};  subscript := expr | [expr] ':' [expr] [':' [expr]] |
//   '...' atom       := NUMBER | STRING | NAME | 'True' | 'False' | 'None'
//              |  '(' expr ')' | '(' [expr ',' {expr ','} [expr]] ')'   (tuple)
//              |  '[' [expr {',' expr} [',']] ']'                          (list)
// A block: the lines after `with ...:` indented deeper than it, all at one indentation.
//
// Thread safety: pure functions; the AST is a value type.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "repl/lexer.hpp"

namespace dtr::repl {

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

struct Expr {
  enum class Kind {
    Int,     // int_value
    Float,   // float_value
    String,  // text
    Bool,    // bool_value
    None,
    Name,       // text
    List,       // items
    Tuple,      // items
    Unary,      // text = "-" or "+", a
    Binary,     // text = operator, a, b (arithmetic and comparisons)
    Attribute,  // a.text
    Call,       // a(items, kwargs)
    Subscript,  // a[items]
    Slice,      // a:b:c inside a subscript; each may be null
    Ellipsis,   // ... inside a subscript
  };
  Kind kind;
  int column = 0;  // 1-based, in the logical line
  std::string text;
  int64_t int_value = 0;
  double float_value = 0.0;
  bool bool_value = false;
  ExprPtr a, b, c;
  std::vector<ExprPtr> items;
  std::vector<std::pair<std::string, ExprPtr>> kwargs;
};

struct Stmt {
  enum class Kind { Expr, Assign, With };
  Kind kind = Kind::Expr;
  int line = 0;                   // input line number of the statement
  std::string op;                 // Assign: "=", "+=", "-=", "*=", "/="
  ExprPtr target;                 // Assign: Name or Subscript
  ExprPtr value;                  // Expr and Assign
  std::vector<ExprPtr> contexts;  // With: the scope expressions
  std::vector<Stmt> body;         // With
};

// A logical line of input (continuation lines already joined) and its line number.
struct SourceLine {
  std::string text;
  int number = 0;
};

// Parses lines that form complete statements (a block's lines included). Blank and
// comment-only lines are skipped. Throws SyntaxError with the line number, the line's text
// and the column.
std::vector<Stmt> parse_program(const std::vector<SourceLine>& lines);

// True when `line` is `with ...:` with nothing after the colon, i.e. a block follows.
// False for anything that does not lex.
bool opens_block(std::string_view line);

// Open brackets at the end of `text` (0 when it does not lex: the parser reports that).
int open_brackets(std::string_view text);

// Columns of leading whitespace (a tab counts as one).
int indentation(std::string_view line);

// True for a line with only whitespace and possibly a comment.
bool is_blank(std::string_view line);

}  // namespace dtr::repl
