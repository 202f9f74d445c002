// Test support: real dtr-worker processes on ephemeral loopback ports.
//
// WorkerProcess starts `dtr-worker --listen tcp://127.0.0.1:* --endpoint-file F` (through
// launcher/spawn.hpp), waits (bounded) for the endpoint it bound, and on destruction sends
// SIGTERM, waits (bounded) and falls back to SIGKILL. Every wait is bounded; nothing
// outlives the test: a worker is killed (SIGKILL, its parent-death signal) when the thread
// that started it ends, so a test process that crashes takes its workers with it. Start
// workers on a thread that lives as long as they should (a test's own thread).
//
// Thread safety: one object per thread; the class is not synchronized.
#pragma once

#include <signal.h>
#include <sys/types.h>

#include <chrono>
#include <string>
#include <vector>

#include "launcher/spawn.hpp"

namespace dtr::test {

// Path of the dtr-worker binary (DTR_WORKER_BIN from the build, or $DTR_WORKER_BIN).
std::string worker_binary();

class WorkerProcess {
 public:
  // Listen mode on an ephemeral port; extra arguments are appended. With `stderr_path`,
  // the worker's standard error (its log) goes to that file.
  explicit WorkerProcess(std::vector<std::string> extra_args = {},
                         const std::string& stderr_path = {});
  // Any arguments (e.g. {"--master", endpoint}); does not wait for an endpoint file.
  static WorkerProcess with_args(std::vector<std::string> args,
                                 const std::string& stderr_path = {});
  ~WorkerProcess();
  WorkerProcess(WorkerProcess&& other) noexcept;
  WorkerProcess& operator=(WorkerProcess&&) = delete;
  WorkerProcess(const WorkerProcess&) = delete;

  const std::string& endpoint() const { return endpoint_; }
  pid_t pid() const { return process_.pid(); }
  bool running();
  // Sends `sig` and waits up to `timeout` for the exit; returns the exit status or -1.
  int stop(int sig = SIGTERM, std::chrono::milliseconds timeout = std::chrono::seconds(10));

 private:
  struct NoSpawn {};
  explicit WorkerProcess(NoSpawn) {}
  void spawn(const std::vector<std::string>& args, const std::string& stderr_path = {});
  launcher::Child process_;
  std::string endpoint_;
  std::string endpoint_file_;
};

// A TCP port on 127.0.0.1 that was free a moment ago.
int free_port();

// Waits up to `limit` for the child `pid`; kills it (SIGKILL) at the deadline. Returns the
// wait status, or -1 when it had to be killed or could not be waited for.
using launcher::wait_or_kill;

}  // namespace dtr::test
