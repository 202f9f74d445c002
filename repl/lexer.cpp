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

LexResult lex(std::string_view text) {
  LexResult r;
  std::string line(text);
  std::vector<char> brackets;
  size_t i = 0;
  auto fail = [&](size_t at, std::string msg) -> void {
    throw SyntaxError(std::move(msg), static_cast<int>(at) + 1, line);
  };
  while (i < text.size()) {
    char c = text[i];
    if (c == ' ' || c == '\t' || c == '\r' || c == '\n') {
      ++i;
      continue;
    }
    if (c == '#') break;
    Token t;
    t.column = static_cast<int>(i) + 1;
    if (is_name_start(c)) {
      size_t j = i;
      while (j < text.size() && is_name_char(text[j])) ++j;
      t.text = std::string(text.substr(i, j - i));
      t.kind = TokenKind::Name;
      for (std::string_view k : kKeywords)
        if (t.text == k) t.kind = TokenKind::Keyword;
      i = j;
    } else if (is_digit(c) || (c == '.' && i + 1 < text.size() && is_digit(text[i + 1]))) {
      size_t j = i;
      bool floating = false;
      while (j < text.size() && is_digit(text[j])) ++j;
      if (j < text.size() && text[j] == '.' &&
          !(j + 2 < text.size() && text.substr(j, 3) == "...")) {
        floating = true;
        ++j;
        while (j < text.size() && is_digit(text[j])) ++j;
      }
      if (j < text.size() && (text[j] == 'e' || text[j] == 'E')) {
        size_t k = j + 1;
        if (k < text.size() && (text[k] == '+' || text[k] == '-')) ++k;
        if (k < text.size() && is_digit(text[k])) {
          floating = true;
          j = k;
          while (j < text.size() && is_digit(text[j])) ++j;
        } else {
          fail(j, "malformed number: exponent without digits");
        }
      }
      if (j < text.size() && is_name_char(text[j]))
        fail(j, fmt::format("invalid character '{}' in a number", text[j]));
      t.text = std::string(text.substr(i, j - i));
      errno = 0;
      if (floating) {
        t.kind = TokenKind::Float;
        t.float_value = std::strtod(t.text.c_str(), nullptr);
      } else {
        t.kind = TokenKind::Int;
        t.int_value = std::strtoll(t.text.c_str(), nullptr, 10);
        if (errno == ERANGE) fail(i, fmt::format("integer {} is too large (64 bits)", t.text));
      }
      i = j;
    } else if (c == '"' || c == '\'') {
      size_t j = i + 1;
      std::string value;
      bool closed = false;
      while (j < text.size()) {
        char d = text[j];
        if (d == c) {
          closed = true;
          ++j;
          break;
        }
        if (d == '\\' && j + 1 < text.size()) {
          char e = text[j + 1];
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
      i = j;
    } else {
      std::string_view found;
      for (std::string_view p : kPunct)
        if (text.substr(i, p.size()) == p) {
          found = p;
          break;
        }
      if (found.empty()) fail(i, fmt::format("unexpected character '{}'", c));
      t.kind = TokenKind::Punct;
      t.text = std::string(found);
      if (found == "(" || found == "[") {
        brackets.push_back(found[0]);
      } else if (found == ")" || found == "]") {
        char open = found == ")" ? '(' : '[';
        if (brackets.empty() || brackets.back() != open)
          fail(i, fmt::format("'{}' does not match any open bracket", found));
        brackets.pop_back();
      }
      i += found.size();
    }
    r.tokens.push_back(std::move(t));
  }
  Token end;
  end.column = static_cast<int>(text.size()) + 1;
  r.tokens.push_back(end);
  r.open_brackets = static_cast<int>(brackets.size());
  return r;
}

}  // namespace dtr::repl
