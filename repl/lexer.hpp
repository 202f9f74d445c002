// The REPL language's lexer: one logical line of text to a list of tokens, each with the
// 1-based column where it starts, so that a syntax error can point at its column.
//
// Tokens: names (identifiers), the keywords `with`, `True`, `False`, `None`, integer and
// floating literals (`3`, `1.5`, `.5`, `1e-3`), strings in single or double quotes with
// backslash escapes, punctuation and operators (`+ - * / ** @ == != < <= > >= = += -= *=
// /= ( ) [ ] , : ; . ...`). `#` starts a comment that runs to the end of the line.
// Brackets may span lines: lex() reports how many are still open at the end, and the
// interpreter then joins the next line before parsing.
//
// Thread safety: pure functions over their arguments; safe from any thread.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "dtr/error.hpp"

namespace dtr::repl {

// A line that is not in the language. `column` is 1-based; `line_text` is the logical
// line the column refers to and `line` its number in the input (0 when unknown).
class SyntaxError : public Error {
 public:
  SyntaxError(std::string message, int column, std::string line_text = {}, int line = 0)
      : Error(message),
        message_(std::move(message)),
        column_(column),
        line_text_(std::move(line_text)),
        line_(line) {}
  const std::string& message() const { return message_; }
  int column() const { return column_; }
  const std::string& line_text() const { return line_text_; }
  int line() const { return line_; }

 private:
  std::string message_;
  int column_;
  std::string line_text_;
  int line_;
};

enum class TokenKind { End, Name, Keyword, Int, Float, String, Punct };

struct Token {
  TokenKind kind = TokenKind::End;
  std::string text;  // the name, keyword or punctuation; the decoded value of a string
  int column = 0;    // 1-based; End: one past the last character
  int64_t int_value = 0;
  double float_value = 0.0;

  bool is(TokenKind k, std::string_view t) const { return kind == k && text == t; }
  bool is_punct(std::string_view t) const { return is(TokenKind::Punct, t); }
  bool is_keyword(std::string_view t) const { return is(TokenKind::Keyword, t); }
};

struct LexResult {
  std::vector<Token> tokens;  // always ends with an End token
  int open_brackets = 0;      // ( and [ not closed by the end of the text
};

// Throws SyntaxError (with the column; line_text is `text`) for a character that starts no
// token, an unterminated string, a malformed or too large number, or a closing bracket
// that matches nothing.
LexResult lex(std::string_view text);

// How a token looks in an error message: 'x', '+', "end of line", ...
std::string describe(const Token& t);

}  // namespace dtr::repl
