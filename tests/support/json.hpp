// Test support: a strict JSON reader (RFC 8259: no trailing commas, no comments, escapes
// checked, nothing after the value), enough to check a trace file. parse_json throws
// std::runtime_error naming the byte offset of the first problem.
//
// Thread safety: plain values and a stateless function.
#pragma once

#include <cctype>
#include <cstdlib>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace dtr::test {

struct Json {
  enum class Type { Null, Bool, Number, String, Array, Object } type = Type::Null;
  bool boolean = false;
  double number = 0;
  std::string text;
  std::vector<Json> items;  // Array
  // Object, in order: keys[i] names values[i] (two vectors: a pair of an incomplete Json
  // is not allowed, and clang rejects it).
  std::vector<std::string> keys;
  std::vector<Json> values;

  // The member `key` of an object; null when absent (or not an object).
  const Json* get(std::string_view key) const {
    for (size_t i = 0; i < keys.size(); ++i)
      if (keys[i] == key) return &values[i];
    return nullptr;
  }
  bool is(Type t) const { return type == t; }
};

namespace json_detail {

class Parser {
 public:
  explicit Parser(std::string_view s) : s_(s) {}
  Json document() {
    Json v = value();
    space();
    if (at_ != s_.size()) fail("trailing characters after the value");
    return v;
  }

 private:
  [[noreturn]] void fail(const std::string& why) {
    throw std::runtime_error("JSON: " + why + " at byte " + std::to_string(at_));
  }
  void space() {
    while (at_ < s_.size() &&
           (s_[at_] == ' ' || s_[at_] == '\n' || s_[at_] == '\r' || s_[at_] == '\t'))
      ++at_;
  }
  char peek() {
    space();
    if (at_ >= s_.size()) fail("unexpected end");
    return s_[at_];
  }
  void expect(char c) {
    if (peek() != c) fail(std::string("expected '") + c + "'");
    ++at_;
  }
  void literal(std::string_view word) {
    if (s_.substr(at_, word.size()) != word) fail("bad literal");
    at_ += word.size();
  }
  Json value() {
    Json v;
    char c = peek();
    if (c == '{') return object();
    if (c == '[') return array();
    if (c == '"') {
      v.type = Json::Type::String;
      v.text = string();
    } else if (c == 't' || c == 'f') {
      v.type = Json::Type::Bool;
      v.boolean = c == 't';
      literal(c == 't' ? "true" : "false");
    } else if (c == 'n') {
      literal("null");
    } else {
      v.type = Json::Type::Number;
      v.number = number();
    }
    return v;
  }
  Json object() {
    Json v;
    v.type = Json::Type::Object;
    expect('{');
    if (peek() == '}') {
      ++at_;
      return v;
    }
    while (true) {
      if (peek() != '"') fail("expected a member name");
      std::string key = string();
      expect(':');
      v.keys.push_back(std::move(key));
      v.values.push_back(value());
      if (peek() == ',') {
        ++at_;
        continue;
      }
      expect('}');
      return v;
    }
  }
  Json array() {
    Json v;
    v.type = Json::Type::Array;
    expect('[');
    if (peek() == ']') {
      ++at_;
      return v;
    }
    while (true) {
      v.items.push_back(value());
      if (peek() == ',') {
        ++at_;
        continue;
      }
      expect(']');
      return v;
    }
  }
  std::string string() {
    expect('"');
    std::string out;
    while (true) {
      if (at_ >= s_.size()) fail("unterminated string");
      char c = s_[at_++];
      if (c == '"') return out;
      if (static_cast<unsigned char>(c) < 0x20) fail("control character in a string");
      if (c != '\\') {
        out += c;
        continue;
      }
      if (at_ >= s_.size()) fail("unterminated escape");
      char e = s_[at_++];
      switch (e) {
        case '"':
        case '\\':
        case '/':
          out += e;
          break;
        case 'b':
          out += '\b';
          break;
        case 'f':
          out += '\f';
          break;
        case 'n':
          out += '\n';
          break;
        case 'r':
          out += '\r';
          break;
        case 't':
          out += '\t';
          break;
        case 'u': {
          if (at_ + 4 > s_.size()) fail("short \\u escape");
          for (int i = 0; i < 4; ++i)
            if (!std::isxdigit(static_cast<unsigned char>(s_[at_ + i]))) fail("bad \\u escape");
          unsigned code =
              static_cast<unsigned>(std::stoul(std::string(s_.substr(at_, 4)), nullptr, 16));
          at_ += 4;
          out += code < 0x80 ? static_cast<char>(code) : '?';
          break;
        }
        default:
          fail("bad escape");
      }
    }
  }
  double number() {
    size_t start = at_;
    if (at_ < s_.size() && s_[at_] == '-') ++at_;
    auto digits = [&] {
      size_t n = 0;
      while (at_ < s_.size() && std::isdigit(static_cast<unsigned char>(s_[at_]))) ++at_, ++n;
      return n;
    };
    if (at_ < s_.size() && s_[at_] == '0') {
      ++at_;
    } else if (digits() == 0) {
      fail("expected a value");
    }
    if (at_ < s_.size() && s_[at_] == '.') {
      ++at_;
      if (digits() == 0) fail("expected digits after '.'");
    }
    if (at_ < s_.size() && (s_[at_] == 'e' || s_[at_] == 'E')) {
      ++at_;
      if (at_ < s_.size() && (s_[at_] == '+' || s_[at_] == '-')) ++at_;
      if (digits() == 0) fail("expected an exponent");
    }
    return std::strtod(std::string(s_.substr(start, at_ - start)).c_str(), nullptr);
  }

  std::string_view s_;
  size_t at_ = 0;
};

}  // namespace json_detail

inline Json parse_json(std::string_view text) {
  return json_detail::Parser(text).document();
}

}  // namespace dtr::test
