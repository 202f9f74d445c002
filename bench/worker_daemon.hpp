// The dtr-worker daemon for benchmarks: started listening on an ephemeral loopback port
// (fork/exec, then a bounded wait for its endpoint file), stopped with SIGTERM and, after
// 10 s, SIGKILL. The binary is $DTR_WORKER_BIN, else the one the build made (the
// DTR_WORKER_BIN definition of the benchmark's target).
//
// Thread safety: one WorkerDaemon per thread; the constructor forks, so call it before
// the benchmark starts threads of its own.
#pragma once

#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace dtr::bench {

inline std::string worker_binary() {
  const char* env = std::getenv("DTR_WORKER_BIN");
  return env && *env ? env : DTR_WORKER_BIN;
}

// The dtr-worker daemon, listening on an ephemeral loopback port: fork/exec, then a
// bounded wait for its endpoint file. Stopped with SIGTERM, then SIGKILL after 10 s.
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
    std::vector<std::string> args = {
        bin, "--listen", "tcp://127.0.0.1:*", "--endpoint-file", file_, "--log-level", "warn"};
    args.insert(args.end(), extra.begin(), extra.end());
    std::vector<char*> argv;
    for (std::string& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    std::fflush(stdout);
    std::fflush(stderr);
    pid_ = fork();
    if (pid_ < 0) throw std::runtime_error("fork failed");
    if (pid_ == 0) {
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      execv(bin.c_str(), argv.data());
      _exit(127);
    }
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (std::chrono::steady_clock::now() < deadline) {
      std::ifstream in(file_);
      if (in && std::getline(in, endpoint_) && !endpoint_.empty()) return;
      int status = 0;
      if (waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        throw std::runtime_error("dtr-worker (" + bin + ") exited at start");
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    stop();
    throw std::runtime_error("dtr-worker did not report its endpoint within 30 s");
  }
  WorkerDaemon(const WorkerDaemon&) = delete;
  WorkerDaemon& operator=(const WorkerDaemon&) = delete;
  ~WorkerDaemon() { stop(); }

  const std::string& endpoint() const { return endpoint_; }
  pid_t pid() const { return pid_; }

  void stop() {
    if (pid_ > 0) {
      kill(pid_, SIGTERM);
      auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
      int status = 0;
      bool gone = false;
      while (std::chrono::steady_clock::now() < deadline) {
        if (waitpid(pid_, &status, WNOHANG) != 0) {
          gone = true;
          break;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
      }
      if (!gone) {
        kill(pid_, SIGKILL);
        waitpid(pid_, &status, 0);  // bounded: SIGKILL cannot be ignored
      }
      pid_ = -1;
    }
    if (!file_.empty()) {
      unlink(file_.c_str());
      file_.clear();
    }
  }

 private:
  pid_t pid_ = -1;
  std::string file_, endpoint_;
};

}  // namespace dtr::bench
