// The dtr-worker daemon for benchmarks: started listening on an ephemeral loopback port
// (launcher/spawn.hpp, then a bounded wait for its endpoint file), stopped with SIGTERM and,
// after 10 s, SIGKILL; it dies with the benchmark (SIGKILL, its parent-death signal). The binary is
// $DTR_WORKER_BIN, else the one the build made (the DTR_WORKER_BIN definition of the benchmark's
// target).
//
// Thread safety: one WorkerDaemon per thread; the constructor forks, so call it before
// the benchmark starts threads of its own.
#pragma once

#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "launcher/spawn.hpp"

namespace dtr::bench {

inline std::string worker_binary() {
  const char* env = std::getenv("DTR_WORKER_BIN");
  return env && *env ? env : DTR_WORKER_BIN;
}

// The dtr-worker daemon, listening on an ephemeral loopback port: spawned, then a bounded
// wait for its endpoint file. Stopped with SIGTERM, then SIGKILL after 10 s.
class WorkerDaemon {
 public:
  // `extra`: more dtr-worker arguments.
  explicit WorkerDaemon(std::vector<std::string> extra = {}) {
    std::string bin = worker_binary();
    char tmpl[] = "/tmp/dtr-bench-endpoint-XXXXXX";
    int fd = mkstemp(tmpl);
    if (fd < 0) throw std::runtime_error("mkstemp failed");
    close(fd);
    unlink(tmpl);
    file_ = tmpl;
    launcher::SpawnOptions o;
    o.argv = {bin,           "--listen", "tcp://127.0.0.1:*", "--endpoint-file", file_,
              "--log-level", "warn"};
    o.argv.insert(o.argv.end(), extra.begin(), extra.end());
    child_ = launcher::Child::spawn(o);
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (std::chrono::steady_clock::now() < deadline) {
      std::ifstream in(file_);
      if (in && std::getline(in, endpoint_) && !endpoint_.empty()) return;
      if (!child_.running()) throw std::runtime_error("dtr-worker (" + bin + ") exited at start");
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    stop();
    throw std::runtime_error("dtr-worker did not report its endpoint within 30 s");
  }
  WorkerDaemon(const WorkerDaemon&) = delete;
  WorkerDaemon& operator=(const WorkerDaemon&) = delete;
  ~WorkerDaemon() { stop(); }

  const std::string& endpoint() const { return endpoint_; }
  pid_t pid() const { return child_.pid(); }

  void stop() {
    child_.stop(SIGTERM, std::chrono::seconds(10));
    if (!file_.empty()) {
      unlink(file_.c_str());
      file_.clear();
    }
  }

 private:
  launcher::Child child_;
  std::string file_, endpoint_;
};

}  // namespace dtr::bench
