// Small helpers of the process-group library: parsing, address lookup, names in messages.
//
// Thread safety: pure functions (getaddrinfo is thread-safe).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
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
// A collective's name in messages: "all_reduce (collective #7)" followed by `suffix` (" on
// rank 1 of a group of 4 (mpi)", made once per group). Every call builds one, so it is put
// together without fmt (one allocation).
std::string collective_name(CommOp op, uint64_t seq, std::string_view suffix);

}  // namespace dtr::pg
