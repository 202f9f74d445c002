// Same-host payloads: when a master and a worker share a host, tensor bytes move between
// them by one direct copy from one process's memory into the other's (Linux cross-memory
// attach, process_vm_readv, as OpenMPI's and UCX's single-copy paths do) instead of through
// sockets. No memory is shared or mapped: a copy reads the other process's tensor in
// place, so there is nothing to bound or to reclaim when a process dies (a read from a
// dead process fails with ESRCH). ZeroMQ keeps carrying the commands.
//
// Whether it applies is found out, never configured, and each side proves who it is: the
// worker's HelloReply offers its pid and a fresh random challenge; the master holds that
// challenge in its memory and sends Attach with its pid, where the challenge is, and a
// challenge of its own; the worker reads the master's memory there, and if it finds its
// challenge, holds the master's and answers where. The master reads it back from the
// worker's memory. Only a process that was given the challenge over the session's
// connection can pass, so neither side can be pointed at a third process. A read
// succeeds only on the same host, in the same PID namespace, where the kernel lets the
// reader read the other's memory (the same user, or CAP_SYS_PTRACE; Yama's ptrace_scope
// 0, or the reader being allowed). Anything else falls back to sockets. DTR_SAME_HOST=0
// in either process turns the path off.
//
// Thread safety: every function may be called from any thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace dtr::common {

// Payloads take the path from this size on (master and workers alike): below it the
// socket's copy into the message costs less than a task and a system call.
inline constexpr size_t kSameHostMinBytes = size_t{64} << 10;

// Whether DTR_SAME_HOST allows the path in this process (unset, or anything but "0").
bool same_host_enabled();
// A fresh random 64-bit value, never 0.
uint64_t random_challenge();
// Reads 8 bytes at `address` in process `pid`: "" when they are `expected`, else why not
// ("process 123 is not visible here (another host or PID namespace)", "... not permitted
// ...", "process 123 here is not the one ...").
std::string challenge_problem(uint32_t pid, uint64_t address, uint64_t expected);
// Copies `bytes` bytes from `address` in process `pid` to `dst` (any size: partial reads
// are continued). Throws TransportError naming `what`, the process and the errno text.
void read_process_memory(uint32_t pid, uint64_t address, void* dst, size_t bytes,
                         const std::string& what);

}  // namespace dtr::common
