// Printable text from bytes a peer chose: what goes into a log line or an error message
// when it came over the network (a HELLO's client name, a goodbye's reason, a failure text
// from another process). A peer that could put a newline, a carriage return, an escape
// sequence or a NUL into a log could forge whole lines, rewrite the terminal, or cut the
// line for tools that read it; so every byte outside printable ASCII is written as \xNN
// (a backslash as \\), and the text is cut at `max_bytes` of input, saying how long it was.
//
// Thread safety: pure functions.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace dtr::common {

// Printable-ASCII bytes as they are, every other byte as \xNN, a backslash as \\; at most
// `max_bytes` bytes of `text` are kept, and a cut one ends with "... (N bytes)".
inline std::string printable(std::string_view text, size_t max_bytes = 256) {
  static constexpr char kHex[] = "0123456789abcdef";
  const size_t kept = text.size() < max_bytes ? text.size() : max_bytes;
  std::string out;
  out.reserve(kept + 16);
  for (size_t i = 0; i < kept; ++i) {
    const auto c = static_cast<unsigned char>(text[i]);
    if (c == '\\') {
      out += "\\\\";
    } else if (c >= 0x20 && c < 0x7f) {
      out += static_cast<char>(c);
    } else {
      out += "\\x";
      out += kHex[c >> 4];
      out += kHex[c & 0xf];
    }
  }
  if (kept < text.size()) out += "... (" + std::to_string(text.size()) + " bytes)";
  return out;
}

}  // namespace dtr::common
