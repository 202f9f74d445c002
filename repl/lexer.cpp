// The REPL lexer.
#include "repl/lexer.hpp"

#include <fmt/format.h>

#include <array>
#include <cctype>
#include <cerrno>
#include <cstdlib>

namespace dtr::repl {

namespace {

bool is_name_start(char c) {
  return std::isalpha(static_cast<unsigned char>(c)) || c == '_';
}
bool is_name_char(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) || c == '_';
}
bool is_digit(char c) {
  return std::isdigit(static_cast<unsigned char>(c)) != 0;
}

constexpr std::array<std::string_view, 4> kKeywords = {"with", "True", "False", "None"};

// Longest first, so that "**" wins over "*" and "..." over ".".
constexpr std::array<std::string_view, 26> kPunct = {
    "...", "**", "==", "!=", "<=", ">=", "+=", "-=", "*=", "/=", "+", "-", "*",
    "/",   "@",  "<",  ">",  "=",  "(",  ")",  "[",  "]",  ",",  ":", ";", "."};

}  // namespace

std::string describe(const Token& t) {
  switch (t.kind) {
    case TokenKind::End:
      return "end of line";
    case TokenKind::String:
      return "a string";
    case TokenKind::Int:
    case TokenKind::Float:
      return fmt::format("number {}", t.text);
    default:
      return fmt::format("'{}'", t.text);
  }
}

namespace {

// One line's scan: each scan_* reads the token that starts at `i` into `t` and returns
// where it ends; `brackets` holds the ( and [ not closed yet.
class Scanner {
 public:
  explicit Scanner(std::string_view text) : text_(text) {}

  LexResult run() {
    LexResult r;
    size_t i = 0;
    while (i < text_.size()) {
      char c = text_[i];
      if (c == ' ' || c == '\t' || c == '\r' || c == '\n') {
        ++i;
        continue;
      }
      if (c == '#') break;
      Token t;
      t.column = static_cast<int>(i) + 1;
      if (is_name_start(c)) {
        i = scan_name(i, t);
      } else if (is_digit(c) || (c == '.' && i + 1 < text_.size() && is_digit(text_[i + 1]))) {
        i = scan_number(i, t);
      } else if (c == '"' || c == '\'') {
        i = scan_string(i, t);
      } else {
        i = scan_punct(i, t);
      }
      r.tokens.push_back(std::move(t));
    }
    Token end;
    end.column = static_cast<int>(text_.size()) + 1;
    r.tokens.push_back(end);
    r.open_brackets = static_cast<int>(brackets_.size());
    return r;
  }

 private:
  [[noreturn]] void fail(size_t at, std::string msg) const {
    throw SyntaxError(std::move(msg), static_cast<int>(at) + 1, std::string(text_));
  }

  size_t scan_name(size_t i, Token& t) const {
    size_t j = i;
    while (j < text_.size() && is_name_char(text_[j])) ++j;
    t.text = std::string(text_.substr(i, j - i));
    t.kind = TokenKind::Name;
    for (std::string_view k : kKeywords)
      if (t.text == k) t.kind = TokenKind::Keyword;
    return j;
  }

  // Digits, a fraction (not the start of "..."), an exponent; an Int too large for 64
  // bits, an exponent without digits or a name character right after is an error.
  size_t scan_number(size_t i, Token& t) const {
    size_t j = i;
    bool floating = false;
    while (j < text_.size() && is_digit(text_[j])) ++j;
    if (j < text_.size() && text_[j] == '.' &&
        !(j + 2 < text_.size() && text_.substr(j, 3) == "...")) {
      floating = true;
      ++j;
      while (j < text_.size() && is_digit(text_[j])) ++j;
    }
    if (j < text_.size() && (text_[j] == 'e' || text_[j] == 'E')) {
      size_t k = j + 1;
      if (k < text_.size() && (text_[k] == '+' || text_[k] == '-')) ++k;
      if (k < text_.size() && is_digit(text_[k])) {
        floating = true;
        j = k;
        while (j < text_.size() && is_digit(text_[j])) ++j;
      } else {
        fail(j, "malformed number: exponent without digits");
      }
    }
    if (j < text_.size() && is_name_char(text_[j]))
      fail(j, fmt::format("invalid character '{}' in a number", text_[j]));
    t.text = std::string(text_.substr(i, j - i));
    errno = 0;
    if (floating) {
      t.kind = TokenKind::Float;
      t.float_value = std::strtod(t.text.c_str(), nullptr);
    } else {
      t.kind = TokenKind::Int;
      t.int_value = std::strtoll(t.text.c_str(), nullptr, 10);
      if (errno == ERANGE) fail(i, fmt::format("integer {} is too large (64 bits)", t.text));
    }
    return j;
  }

  // A string in the quote at `i`, its escapes decoded (\n, \t; \\, \', \" and any other
  // escaped character: the character itself).
  size_t scan_string(size_t i, Token& t) const {
    const char quote = text_[i];
    size_t j = i + 1;
    std::string value;
    bool closed = false;
    while (j < text_.size()) {
      char d = text_[j];
      if (d == quote) {
        closed = true;
        ++j;
        break;
      }
      if (d == '\\' && j + 1 < text_.size()) {
        char e = text_[j + 1];
        switch (e) {
          case 'n':
            value += '\n';
            break;
          case 't':
            value += '\t';
            break;
          default:
            value += e;  // \\ \' \" and anything else: the character itself
        }
        j += 2;
        continue;
      }
      value += d;
      ++j;
    }
    if (!closed) fail(i, "unterminated string");
    t.kind = TokenKind::String;
    t.text = std::move(value);
    return j;
  }

  // The longest punctuation at `i`; a closing bracket must match the last one open.
  size_t scan_punct(size_t i, Token& t) {
    std::string_view found;
    for (std::string_view p : kPunct)
      if (text_.substr(i, p.size()) == p) {
        found = p;
        break;
      }
    if (found.empty()) fail(i, fmt::format("unexpected character '{}'", text_[i]));
    t.kind = TokenKind::Punct;
    t.text = std::string(found);
    if (found == "(" || found == "[") {
      brackets_.push_back(found[0]);
    } else if (found == ")" || found == "]") {
      char open = found == ")" ? '(' : '[';
      if (brackets_.empty() || brackets_.back() != open)
        fail(i, fmt::format("'{}' does not match any open bracket", found));
      brackets_.pop_back();
    }
    return i + found.size();
  }

  std::string_view text_;
  std::vector<char> brackets_;
};

}  // namespace

LexResult lex(std::string_view text) {
  return Scanner(text).run();
}

}  // namespace dtr::repl
