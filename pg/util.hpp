// Small helpers of the process-group library: parsing, address lookup, names in messages.
//
// Thread safety: pure functions (getaddrinfo is thread-safe).
#pragma once

#include <charconv>
#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "dtr/process_group.hpp"

namespace dtr::pg {

// Parses a decimal int64 ("" is 0); throws InvalidArgument naming `what`.
int64_t parse_int(const std::string& s, const std::string& what);
// An IPv4 address for host (a name or a dotted quad); throws InvalidArgument.
std::string resolve_ipv4(const std::string& host);
// The local address that routes to `ip` (127.0.0.1 for loopback; 127.0.0.1 when unknown).
std::string local_address_towards(const std::string& ip);
// "[0, 1, 3]".
std::string format_ranks(const std::vector<int>& ranks);
// The CPUs this process may run on (its affinity mask; 1 when it cannot be read).
int affinity_cpus();
namespace detail {
inline void append_part(std::string& s, std::string_view v) {
  s.append(v);
}
template <typename T>
requires std::is_integral_v<T>
void append_part(std::string& s, T v) {
  char digits[24];
  const auto [end, ec] = std::to_chars(digits, digits + sizeof digits, v);
  (void)ec;  // 24 characters hold any 64-bit integer
  s.append(digits, end);
}
}  // namespace detail

// Strings and integers put together in one allocation: the names in messages that every
// call builds ("send from rank 0 to rank 1 (tag 5, mpi)"), cheaper than fmt::format.
template <typename... Parts>
std::string concat(const Parts&... parts) {
  std::string s;
  s.reserve(96);
  (detail::append_part(s, parts), ...);
  return s;
}
// The same into `out` (cleared first), which keeps its capacity: no allocation once it is
// large enough.
template <typename... Parts>
void concat_into(std::string& out, const Parts&... parts) {
  out.clear();
  (detail::append_part(out, parts), ...);
}

// A collective's name in messages: "all_reduce (collective #7)" followed by `suffix` (" on
// rank 1 of a group of 4 (mpi)", made once per group).
std::string collective_name(CommOp op, uint64_t seq, std::string_view suffix);
void collective_name_into(std::string& out, CommOp op, uint64_t seq, std::string_view suffix);

// CLOCK_MONOTONIC read at the kernel's tick (the clock of std::chrono::steady_clock, up to
// one tick, a few ms, behind it), several times cheaper than a full read on VMs: for
// deadlines of seconds computed on every call.
std::chrono::steady_clock::time_point coarse_now();

}  // namespace dtr::pg
