// The flight recorder in words: what a worker's log and the master's errors say about a
// worker's last commands (protocol::FlightSnapshot, docs/observability.md). One formatter, so
// that the log line and the error name a command the same way:
//
//   #1234 all_reduce in %7 on stream 0: waiting for the members of group 0 for 2.3 s
//   #1230 recv_from_node out %15 on stream 2: waiting for token 77 from node 1 for 2.3 s
//   #1231 neg out %16 in %15 on stream 2: queued for 2.3 s
//   #1229 add out %12 in %10, %11 on stream 0: done 2.4 s ago
//
// Thread safety: stateless functions.
#pragma once

#include <cstddef>
#include <string>

#include "protocol/messages.hpp"

namespace dtr::common {

// The name a record or trace slice of command `kind` goes by: the op's name for RunOp
// (`op` its code), the collective's (all_reduce, ...) for Collective, else the command's.
std::string event_name(protocol::CmdType kind, uint16_t op);
// One record, its times relative to `now_ns` (the dump's clock).
std::string describe(const protocol::FlightRecord& r, int64_t now_ns);
// The dump's records that are not finished (queued, waiting, running; at most
// `max_pending`, the newest), then its last `max_done` finished ones (the failed ones
// first; asking for dumps, figures or the clock left out), one per line, each line
// starting with `indent`; "(no commands recorded)" when there are none.
std::string describe(const protocol::FlightSnapshot& d, size_t max_pending = 16,
                     size_t max_done = 4, const std::string& indent = "  ");

}  // namespace dtr::common
