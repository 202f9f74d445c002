// Test support: spawning and stopping dtr-worker processes.
#include "support/worker_process.hpp"

#include <fcntl.h>
#include <netinet/in.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <stdexcept>
#include <thread>

namespace dtr::test {

std::string worker_binary() {
  if (const char* env = std::getenv("DTR_WORKER_BIN")) return env;
#ifdef DTR_WORKER_BIN
  return DTR_WORKER_BIN;
#else
  throw std::runtime_error("DTR_WORKER_BIN is not set");
#endif
}

WorkerProcess::WorkerProcess(std::vector<std::string> extra_args, const std::string& stderr_path) {
  char tmpl[] = "/tmp/dtr-endpoint-XXXXXX";
  int fd = mkstemp(tmpl);
  if (fd < 0) throw std::runtime_error("mkstemp failed");
  close(fd);
  unlink(tmpl);
  endpoint_file_ = tmpl;
  std::vector<std::string> args = {"--listen",     "tcp://127.0.0.1:*", "--endpoint-file",
                                   endpoint_file_, "--log-level",       "warn"};
  args.insert(args.end(), extra_args.begin(), extra_args.end());
  spawn(args, stderr_path);
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (std::chrono::steady_clock::now() < deadline) {
    std::ifstream in(endpoint_file_);
    if (in && std::getline(in, endpoint_) && !endpoint_.empty()) return;
    if (!running()) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  stop(SIGKILL);
  throw std::runtime_error("dtr-worker did not report its endpoint within 20 s");
}

WorkerProcess WorkerProcess::with_args(std::vector<std::string> args,
                                       const std::string& stderr_path) {
  WorkerProcess w{NoSpawn{}};
  w.spawn(args, stderr_path);
  return w;
}

void WorkerProcess::spawn(const std::vector<std::string>& args, const std::string& stderr_path) {
  std::string bin = worker_binary();
  std::vector<char*> argv;
  argv.push_back(bin.data());
  for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  const pid_t parent = getpid();
  pid_ = fork();
  if (pid_ < 0) throw std::runtime_error("fork failed");
  if (pid_ == 0) {
    // A test process that crashes takes its workers with it, so that ctest reports the
    // crash at once instead of waiting for its timeout on the workers' open pipes. The
    // signal comes when the forking thread ends: tests make workers on their main thread.
    if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 || getppid() != parent) _exit(125);
    if (!stderr_path.empty()) {
      int fd = open(stderr_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
      if (fd < 0 || dup2(fd, STDERR_FILENO) < 0) _exit(126);
    }
    execv(bin.c_str(), argv.data());
    _exit(127);
  }
}

WorkerProcess::WorkerProcess(WorkerProcess&& o) noexcept
    : pid_(o.pid_), endpoint_(std::move(o.endpoint_)), endpoint_file_(std::move(o.endpoint_file_)) {
  o.pid_ = -1;
  o.endpoint_file_.clear();
}

WorkerProcess::~WorkerProcess() {
  if (pid_ > 0) stop(SIGTERM);
  if (!endpoint_file_.empty()) unlink(endpoint_file_.c_str());
}

bool WorkerProcess::running() {
  if (pid_ <= 0) return false;
  int status;
  pid_t r = waitpid(pid_, &status, WNOHANG);
  if (r == pid_) pid_ = -1;  // reaped: stop() must not signal the pid again
  return r == 0;
}

int WorkerProcess::stop(int sig, std::chrono::milliseconds timeout) {
  if (pid_ <= 0) return -1;
  kill(pid_, sig);
  auto deadline = std::chrono::steady_clock::now() + timeout;
  int status = 0;
  while (std::chrono::steady_clock::now() < deadline) {
    pid_t r = waitpid(pid_, &status, WNOHANG);
    if (r == pid_) {
      pid_ = -1;
      return status;
    }
    if (r < 0) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  kill(pid_, SIGKILL);
  waitpid(pid_, &status, 0);
  pid_ = -1;
  return -1;
}

int wait_or_kill(pid_t pid, std::chrono::milliseconds limit) {
  auto deadline = std::chrono::steady_clock::now() + limit;
  int status = 0;
  while (std::chrono::steady_clock::now() < deadline) {
    pid_t r = waitpid(pid, &status, WNOHANG);
    if (r == pid) return status;
    if (r < 0) return -1;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  kill(pid, SIGKILL);
  waitpid(pid, &status, 0);
  return -1;
}

int free_port() {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
  socklen_t len = sizeof(addr);
  getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  int port = ntohs(addr.sin_port);
  close(fd);
  return port;
}

}  // namespace dtr::test
