// The REPL parser: recursive descent over one logical line's tokens; indentation groups
// lines into `with` blocks.
#include "repl/parser.hpp"

#include <fmt/format.h>

namespace dtr::repl {

namespace {

ExprPtr make(Expr::Kind kind, int column) {
  auto e = std::make_unique<Expr>();
  e->kind = kind;
  e->column = column;
  return e;
}

bool is_assign_op(const Token& t) {
  return t.kind == TokenKind::Punct &&
         (t.text == "=" || t.text == "+=" || t.text == "-=" || t.text == "*=" || t.text == "/=");
}

class LineParser {
 public:
  LineParser(const SourceLine& line) : line_(line) {
    try {
      tokens_ = lex(line.text).tokens;
    } catch (const SyntaxError& e) {
      throw SyntaxError(e.message(), e.column(), line_.text, line_.number);
    }
  }

  // The statements of the line; `opens_block` says whether a `with` ends in ':' with its
  // body on the following lines (the With statement is then the last one, body empty).
  std::vector<Stmt> parse_line(bool& opens_block) {
    opens_block = false;
    std::vector<Stmt> out;
    if (peek().is_keyword("with")) {
      Stmt w;
      w.kind = Stmt::Kind::With;
      w.line = line_.number;
      advance();
      w.contexts.push_back(parse_expr());
      while (peek().is_punct(",")) {
        advance();
        w.contexts.push_back(parse_expr());
      }
      expect(":", "after the scopes of 'with'");
      if (peek().kind == TokenKind::End) {
        opens_block = true;
      } else {
        w.body = parse_simple_list();
      }
      out.push_back(std::move(w));
      return out;
    }
    return parse_simple_list();
  }

 private:
  const Token& peek(size_t ahead = 0) const {
    size_t i = pos_ + ahead;
    return i < tokens_.size() ? tokens_[i] : tokens_.back();
  }
  const Token& advance() {
    const Token& t = tokens_[pos_];
    if (pos_ + 1 < tokens_.size()) ++pos_;
    return t;
  }
  [[noreturn]] void fail(const Token& at, const std::string& msg) const {
    throw SyntaxError(msg, at.column, line_.text, line_.number);
  }
  void expect(std::string_view punct, std::string_view context) {
    if (!peek().is_punct(punct))
      fail(peek(), fmt::format("expected '{}' {}, found {}", punct, context, describe(peek())));
    advance();
  }

  std::vector<Stmt> parse_simple_list() {
    std::vector<Stmt> out;
    while (true) {
      out.push_back(parse_simple());
      if (peek().is_punct(";")) {
        advance();
        if (peek().kind == TokenKind::End) break;
        continue;
      }
      if (peek().kind != TokenKind::End)
        fail(peek(), fmt::format("unexpected {} after the statement", describe(peek())));
      break;
    }
    return out;
  }

  Stmt parse_simple() {
    Stmt s;
    s.line = line_.number;
    if (peek().is_keyword("with"))
      fail(peek(), "'with' must start the line (a one-line body cannot hold another 'with')");
    ExprPtr e = parse_expr();
    if (is_assign_op(peek())) {
      const Token& op = advance();
      if (e->kind != Expr::Kind::Name && e->kind != Expr::Kind::Subscript)
        fail(op, fmt::format("cannot assign to this expression with '{}' (only to a name or "
                             "an indexed tensor)",
                             op.text));
      s.kind = Stmt::Kind::Assign;
      s.op = op.text;
      s.target = std::move(e);
      s.value = parse_expr();
      if (is_assign_op(peek())) fail(peek(), "chained assignment is not supported");
      return s;
    }
    s.kind = Stmt::Kind::Expr;
    s.value = std::move(e);
    return s;
  }

  ExprPtr parse_expr() {
    ExprPtr left = parse_sum();
    const Token& t = peek();
    if (t.kind == TokenKind::Punct && (t.text == "==" || t.text == "!=" || t.text == "<" ||
                                       t.text == "<=" || t.text == ">" || t.text == ">=")) {
      advance();
      ExprPtr e = make(Expr::Kind::Binary, t.column);
      e->text = t.text;
      e->a = std::move(left);
      e->b = parse_sum();
      const Token& n = peek();
      if (n.kind == TokenKind::Punct && (n.text == "==" || n.text == "!=" || n.text == "<" ||
                                         n.text == "<=" || n.text == ">" || n.text == ">="))
        fail(n, "chained comparisons are not supported; use parentheses");
      return e;
    }
    return left;
  }

  ExprPtr parse_sum() {
    ExprPtr left = parse_term();
    while (peek().is_punct("+") || peek().is_punct("-")) {
      const Token& t = advance();
      ExprPtr e = make(Expr::Kind::Binary, t.column);
      e->text = t.text;
      e->a = std::move(left);
      e->b = parse_term();
      left = std::move(e);
    }
    return left;
  }

  ExprPtr parse_term() {
    ExprPtr left = parse_unary();
    while (peek().is_punct("*") || peek().is_punct("/") || peek().is_punct("@")) {
      const Token& t = advance();
      ExprPtr e = make(Expr::Kind::Binary, t.column);
      e->text = t.text;
      e->a = std::move(left);
      e->b = parse_unary();
      left = std::move(e);
    }
    return left;
  }

  ExprPtr parse_unary() {
    if (peek().is_punct("-") || peek().is_punct("+")) {
      const Token& t = advance();
      ExprPtr e = make(Expr::Kind::Unary, t.column);
      e->text = t.text;
      e->a = parse_unary();
      return e;
    }
    return parse_power();
  }

  ExprPtr parse_power() {
    ExprPtr base = parse_postfix();
    if (peek().is_punct("**")) {
      const Token& t = advance();
      ExprPtr e = make(Expr::Kind::Binary, t.column);
      e->text = "**";
      e->a = std::move(base);
      e->b = parse_unary();
      return e;
    }
    return base;
  }

  ExprPtr parse_postfix() {
    ExprPtr e = parse_atom();
    while (true) {
      if (peek().is_punct(".")) {
        const Token& dot = advance();
        if (peek().kind != TokenKind::Name)
          fail(peek(), fmt::format("expected a method or attribute name after '.', found {}",
                                   describe(peek())));
        ExprPtr a = make(Expr::Kind::Attribute, dot.column);
        a->text = advance().text;
        a->a = std::move(e);
        e = std::move(a);
      } else if (peek().is_punct("(")) {
        const Token& open = advance();
        ExprPtr call = make(Expr::Kind::Call, open.column);
        call->a = std::move(e);
        parse_args(*call);
        e = std::move(call);
      } else if (peek().is_punct("[")) {
        const Token& open = advance();
        ExprPtr sub = make(Expr::Kind::Subscript, open.column);
        sub->a = std::move(e);
        if (peek().is_punct("]")) fail(peek(), "expected an index or a slice inside '[]'");
        sub->items.push_back(parse_subscript());
        while (peek().is_punct(",")) {
          advance();
          if (peek().is_punct("]")) break;
          sub->items.push_back(parse_subscript());
        }
        expect("]", "to close the index");
        e = std::move(sub);
      } else {
        return e;
      }
    }
  }

  void parse_args(Expr& call) {
    bool keywords = false;
    while (!peek().is_punct(")")) {
      if (peek().kind == TokenKind::Name && peek(1).is_punct("=")) {
        std::string name = advance().text;
        advance();
        for (const auto& kw : call.kwargs)
          if (kw.first == name) fail(peek(), fmt::format("keyword argument '{}' repeated", name));
        call.kwargs.emplace_back(name, parse_expr());
        keywords = true;
      } else {
        if (keywords) fail(peek(), "positional argument after a keyword argument");
        call.items.push_back(parse_expr());
      }
      if (peek().is_punct(",")) {
        advance();
        continue;
      }
      if (!peek().is_punct(")"))
        fail(peek(),
             fmt::format("expected ',' or ')' in the arguments, found {}", describe(peek())));
    }
    advance();
  }

  bool at_subscript_end() const {
    return peek().is_punct(",") || peek().is_punct("]") || peek().kind == TokenKind::End;
  }

  ExprPtr parse_subscript() {
    if (peek().is_punct("...")) return make(Expr::Kind::Ellipsis, advance().column);
    int column = peek().column;
    ExprPtr start;
    if (!peek().is_punct(":")) {
      start = parse_expr();
      if (!peek().is_punct(":")) return start;
    }
    ExprPtr s = make(Expr::Kind::Slice, column);
    s->a = std::move(start);
    advance();  // ':'
    if (!at_subscript_end() && !peek().is_punct(":")) s->b = parse_expr();
    if (peek().is_punct(":")) {
      advance();
      if (!at_subscript_end()) s->c = parse_expr();
    }
    return s;
  }

  ExprPtr parse_atom() {
    const Token& t = peek();
    switch (t.kind) {
      case TokenKind::Int:
      case TokenKind::Float:
      case TokenKind::String:
      case TokenKind::Name:
        return parse_leaf();
      case TokenKind::Keyword:
        if (t.text == "True" || t.text == "False") {
          ExprPtr e = make(Expr::Kind::Bool, t.column);
          e->bool_value = t.text == "True";
          advance();
          return e;
        }
        if (t.text == "None") {
          advance();
          return make(Expr::Kind::None, t.column);
        }
        break;
      case TokenKind::Punct:
        if (t.text == "(") return parse_parenthesized();
        if (t.text == "[") return parse_list();
        break;
      case TokenKind::End:
        break;
    }
    fail(t, fmt::format("expected an expression, found {}", describe(t)));
  }

  // A number, a string or a name: one token, its text and value (a token's int_value and
  // float_value are 0 but for an Int's and a Float's).
  ExprPtr parse_leaf() {
    const Token& t = advance();
    Expr::Kind kind = t.kind == TokenKind::Int      ? Expr::Kind::Int
                      : t.kind == TokenKind::Float  ? Expr::Kind::Float
                      : t.kind == TokenKind::String ? Expr::Kind::String
                                                    : Expr::Kind::Name;
    ExprPtr e = make(kind, t.column);
    e->text = t.text;
    e->int_value = t.int_value;
    e->float_value = t.float_value;
    return e;
  }

  // After '(': `()` (an empty tuple), `(expr)` (the expression itself) or a tuple.
  ExprPtr parse_parenthesized() {
    const Token& open = advance();
    if (peek().is_punct(")")) {
      advance();
      return make(Expr::Kind::Tuple, open.column);
    }
    ExprPtr first = parse_expr();
    if (peek().is_punct(")")) {
      advance();
      return first;
    }
    ExprPtr tuple = make(Expr::Kind::Tuple, open.column);
    tuple->items.push_back(std::move(first));
    while (peek().is_punct(",")) {
      advance();
      if (peek().is_punct(")")) break;
      tuple->items.push_back(parse_expr());
    }
    expect(")", "to close the parenthesis");
    return tuple;
  }

  // After '[': a list, a trailing ',' allowed.
  ExprPtr parse_list() {
    ExprPtr list = make(Expr::Kind::List, advance().column);
    while (!peek().is_punct("]")) {
      list->items.push_back(parse_expr());
      if (peek().is_punct(",")) {
        advance();
        continue;
      }
      if (!peek().is_punct("]"))
        fail(peek(), fmt::format("expected ',' or ']' in the list, found {}", describe(peek())));
    }
    advance();
    return list;
  }

  const SourceLine& line_;
  std::vector<Token> tokens_;
  size_t pos_ = 0;
};

// Parses lines[pos..] at indentation `indent` until a line indented less.
std::vector<Stmt> parse_suite(const std::vector<SourceLine>& lines, size_t& pos, int indent) {
  std::vector<Stmt> out;
  while (pos < lines.size()) {
    const SourceLine& l = lines[pos];
    if (is_blank(l.text)) {
      ++pos;
      continue;
    }
    int ind = indentation(l.text);
    if (ind < indent) break;
    if (ind > indent) throw SyntaxError("unexpected indent", ind + 1, l.text, l.number);
    bool opens = false;
    std::vector<Stmt> stmts = LineParser(l).parse_line(opens);
    ++pos;
    if (opens) {
      size_t next = pos;
      while (next < lines.size() && is_blank(lines[next].text)) ++next;
      if (next >= lines.size() || indentation(lines[next].text) <= indent) {
        const SourceLine& at = next < lines.size() ? lines[next] : l;
        throw SyntaxError(
            "expected an indented block after 'with ...:'",
            next < lines.size() ? indentation(at.text) + 1 : static_cast<int>(at.text.size()) + 1,
            at.text, at.number);
      }
      pos = next;
      int body_indent = indentation(lines[next].text);
      stmts.back().body = parse_suite(lines, pos, body_indent);
      if (pos < lines.size()) {
        int after = indentation(lines[pos].text);
        if (after > indent && after < body_indent)
          throw SyntaxError("unindent does not match any outer indentation level", after + 1,
                            lines[pos].text, lines[pos].number);
      }
    }
    for (Stmt& s : stmts) out.push_back(std::move(s));
  }
  return out;
}

}  // namespace

int indentation(std::string_view line) {
  int n = 0;
  while (static_cast<size_t>(n) < line.size() && (line[n] == ' ' || line[n] == '\t')) ++n;
  return n;
}

bool is_blank(std::string_view line) {
  size_t i = static_cast<size_t>(indentation(line));
  while (i < line.size() && (line[i] == '\r' || line[i] == '\n')) ++i;
  return i == line.size() || line[i] == '#';
}

std::vector<Stmt> parse_program(const std::vector<SourceLine>& lines) {
  size_t pos = 0;
  std::vector<Stmt> out = parse_suite(lines, pos, 0);
  if (pos < lines.size())  // a line indented less than 0 cannot exist; defensive
    throw SyntaxError("unindent does not match any outer indentation level", 1, lines[pos].text,
                      lines[pos].number);
  return out;
}

bool opens_block(std::string_view line) {
  try {
    LexResult r = lex(line);
    const auto& t = r.tokens;
    return t.size() >= 3 && t.front().is_keyword("with") && t[t.size() - 2].is_punct(":") &&
           r.open_brackets == 0;
  } catch (const SyntaxError&) {
    return false;
  }
}

int open_brackets(std::string_view text) {
  try {
    return lex(text).open_brackets;
  } catch (const SyntaxError&) {
    return 0;
  }
}

}  // namespace dtr::repl
