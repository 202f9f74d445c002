// The REPL's own workers: `dtr-repl` without --connect starts N dtr-worker daemons on
// loopback (`--listen tcp://127.0.0.1:* --endpoint-file F`), waits (bounded) for the
// endpoints they bound, and stops them when it ends: SIGTERM, a bounded wait, then SIGKILL.
//
// The daemons are started by launcher/spawn.hpp in their own process group, so the
// terminal's Ctrl-C reaches only the REPL, and with SIGKILL as their parent-death signal, so
// they die with a REPL that dies without stopping them. Their stdin is /dev/null; their
// stderr is the REPL's (warnings and errors only).
//
// Thread safety: not synchronized; create, query and stop from one thread (the REPL's
// main thread, which must outlive the workers: PDEATHSIG follows the forking thread).
#pragma once

#include <sys/types.h>

#include <chrono>
#include <string>
#include <vector>

#include "launcher/spawn.hpp"

namespace dtr::repl {

// The dtr-worker to run: $DTR_WORKER_BIN, else next to this executable (an installed
// bin dir), else ../worker/dtr-worker from it (the build tree). Throws dtr::Error naming
// the places tried when none exists.
std::string find_worker_binary();

class LocalWorkers {
 public:
  // Starts `count` workers. Throws dtr::Error when one cannot be started, and
  // dtr::TimeoutError when one does not report its endpoint within `timeout` (the ones
  // started are stopped first).
  LocalWorkers(int count, const std::string& worker_binary, const std::string& log_level,
               std::chrono::milliseconds timeout = std::chrono::seconds(20));
  ~LocalWorkers();
  LocalWorkers(const LocalWorkers&) = delete;
  LocalWorkers& operator=(const LocalWorkers&) = delete;

  const std::vector<std::string>& endpoints() const { return endpoints_; }
  const std::vector<pid_t>& pids() const { return pids_; }
  // SIGTERM to every worker, up to `timeout` for all to exit, then SIGKILL. Idempotent.
  void stop(std::chrono::milliseconds timeout = std::chrono::seconds(5));

 private:
  std::vector<launcher::Child> workers_;
  std::vector<pid_t> pids_;
  std::vector<std::string> endpoints_;
  std::string dir_;  // temporary directory of the endpoint files, removed once read
};

}  // namespace dtr::repl
