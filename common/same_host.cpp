// Same-host payloads: the challenge check and the copy (common/same_host.hpp).
#include "common/same_host.hpp"

#include <fmt/format.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <random>

#include "dtr/env.hpp"
#include "dtr/error.hpp"

namespace dtr::common {
namespace {

// One process_vm_readv call moves at most this much (the kernel caps a call near 2 GiB).
constexpr size_t kMaxReadPerCall = size_t{1} << 30;

}  // namespace

bool same_host_enabled() {
  return env_flag("DTR_SAME_HOST", true);
}

uint64_t random_challenge() {
  std::random_device rd;
  uint64_t v = (static_cast<uint64_t>(rd()) << 32) ^ rd();
  return v == 0 ? 1 : v;
}

std::string challenge_problem(uint32_t pid, uint64_t address, uint64_t expected) {
  if (pid == 0 || address == 0) return "no process or address given";
  uint64_t got = 0;
  iovec local{&got, sizeof got};
  iovec remote{reinterpret_cast<void*>(address), sizeof got};
  ssize_t n = process_vm_readv(static_cast<pid_t>(pid), &local, 1, &remote, 1, 0);
  if (n < 0) {
    const int err = errno;
    if (err == ESRCH)
      return fmt::format("process {} is not visible here (another host or PID namespace)", pid);
    if (err == EPERM)
      return fmt::format(
          "reading process {}'s memory is not permitted (another user, or Yama's ptrace_scope)",
          pid);
    return fmt::format("reading process {}'s memory failed: {}", pid, std::strerror(err));
  }
  if (n != static_cast<ssize_t>(sizeof got) || got != expected)
    return fmt::format(
        "process {} here does not hold the challenge (another process of that number: another "
        "host or PID namespace)",
        pid);
  return "";
}

void read_process_memory(uint32_t pid, uint64_t address, void* dst, size_t bytes,
                         const std::string& what) {
  auto* out = static_cast<char*>(dst);
  size_t done = 0;
  while (done < bytes) {
    const size_t want = std::min(bytes - done, kMaxReadPerCall);
    iovec local{out + done, want};
    iovec remote{reinterpret_cast<void*>(address + done), want};
    ssize_t n = process_vm_readv(static_cast<pid_t>(pid), &local, 1, &remote, 1, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int err = n < 0 ? errno : EFAULT;
      throw TransportError(fmt::format("{}: reading {} bytes from process {} at byte {} failed: {}",
                                       what, bytes, pid, done,
                                       err == ESRCH ? "the process is gone" : std::strerror(err)));
    }
    done += static_cast<size_t>(n);
  }
}

}  // namespace dtr::common
