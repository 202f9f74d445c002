// Small helpers of the process-group library: parsing and address lookup.
//
// Thread safety: pure functions (getaddrinfo is thread-safe).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace dtr::pg {

// Parses a decimal int64 ("" is 0); throws InvalidArgument naming `what`.
int64_t parse_int(const std::string& s, const std::string& what);
// An IPv4 address for host (a name or a dotted quad); throws InvalidArgument.
std::string resolve_ipv4(const std::string& host);
// The local address that routes to `ip` (127.0.0.1 for loopback; 127.0.0.1 when unknown).
std::string local_address_towards(const std::string& ip);
// "[0, 1, 3]".
std::string format_ranks(const std::vector<int>& ranks);

}  // namespace dtr::pg
