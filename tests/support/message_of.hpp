// Test support: the message of the exception a call throws, for checks on its text, and
// whether a text has a part.
//
// Thread safety: stateless functions.
#pragma once

#include <exception>
#include <string>

namespace dtr::test {

// The message of the E that fn() throws; "<no exception>" or "<other exception: ...>"
// otherwise, so that a failed check on it says what happened.
template <typename E, typename F>
std::string message_of(F&& fn) {
  try {
    fn();
  } catch (const E& e) {
    return e.what();
  } catch (const std::exception& e) {
    return std::string("<other exception: ") + e.what() + ">";
  }
  return "<no exception>";
}

// Whether `part` occurs in `s`.
inline bool has(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

}  // namespace dtr::test
