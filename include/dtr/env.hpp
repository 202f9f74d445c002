// How dtr reads its switches from the environment (DTR_SAME_HOST, DTR_LANES,
// DTR_TUNE_MALLOC, DTR_INSECURE, DTR_NUM_THREADS): one parser, so that a value is either
// understood or refused, never silently taken as the default. A flag is one of 1, true,
// yes, on / 0, false, no, off (any case; unset or empty: the default); a count is a
// positive integer. Anything else throws InvalidArgument naming the variable, its value and
// what was expected ("DTR_SAME_HOST='flase': expected 1/true/yes/on or 0/false/no/off").
//
// Thread safety: reads the environment only (std::getenv); safe from any thread while
// nobody changes the environment.
#pragma once

#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "dtr/error.hpp"

namespace dtr {

inline bool env_flag(const char* name, bool fallback) {
  const char* raw = std::getenv(name);
  if (raw == nullptr || *raw == '\0') return fallback;
  std::string v(raw);
  for (char& c : v) c = static_cast<char>(c >= 'A' && c <= 'Z' ? c - 'A' + 'a' : c);
  if (v == "1" || v == "true" || v == "yes" || v == "on") return true;
  if (v == "0" || v == "false" || v == "no" || v == "off") return false;
  throw InvalidArgument(std::string(name) + "='" + raw +
                        "': expected 1/true/yes/on or 0/false/no/off");
}

// A positive integer, or `fallback` when unset or empty.
inline int64_t env_count(const char* name, int64_t fallback) {
  const char* raw = std::getenv(name);
  if (raw == nullptr || *raw == '\0') return fallback;
  char* end = nullptr;
  errno = 0;
  const long long v = std::strtoll(raw, &end, 10);
  if (errno != 0 || end == raw || *end != '\0' || v < 1)
    throw InvalidArgument(std::string(name) + "='" + raw + "': expected a positive integer");
  return static_cast<int64_t>(v);
}

// Reads every switch above once, so that a bad value is refused where a program or daemon
// starts (init_master_worker, init_process_group, dtr-worker) rather than at first use.
inline void check_environment() {
  for (const char* flag : {"DTR_SAME_HOST", "DTR_LANES", "DTR_TUNE_MALLOC", "DTR_INSECURE"})
    (void)env_flag(flag, false);
  (void)env_count("DTR_NUM_THREADS", 1);
}

}  // namespace dtr
