// Checks for the command-line options of dtr's programs (dtr-worker, dtr-exec, dtr-repl),
// in place of CLI11's PositiveNumber and NonNegativeNumber, whose messages print the range
// of a double ("Value 0 not in range 0.000000 to 1797693134862315708...").
//
// Thread safety: the validators are constant; CLI11 calls them while parsing, on the
// parsing thread.
#pragma once

#include <CLI/CLI.hpp>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <string>

namespace dtr::cli {

// Empty when `text` is a finite number that is > 0 (`strict`) or >= 0; else the message.
inline std::string sign_problem(const std::string& text, bool strict) {
  const char* want = strict ? "a number above 0" : "0 or a number above 0";
  char* end = nullptr;
  errno = 0;
  const double v = std::strtod(text.c_str(), &end);
  if (text.empty() || end == text.c_str() || *end != '\0' || errno == ERANGE || !std::isfinite(v))
    return "expected " + std::string(want) + ", got '" + text + "'";
  if (strict ? !(v > 0) : !(v >= 0)) return "expected " + std::string(want) + ", got " + text;
  return {};
}

inline const CLI::Validator kPositive([](std::string& text) { return sign_problem(text, true); },
                                      "POSITIVE", "POSITIVE");
inline const CLI::Validator kNonNegative(
    [](std::string& text) { return sign_problem(text, false); }, "NONNEGATIVE", "NONNEGATIVE");

}  // namespace dtr::cli
