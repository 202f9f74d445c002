// Test support: spawning and stopping dtr-worker processes.
#include "support/worker_process.hpp"

#include <netinet/in.h>
#include <sys/socket.h>
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
  launcher::SpawnOptions o;
  o.argv = {worker_binary()};
  o.argv.insert(o.argv.end(), args.begin(), args.end());
  if (!stderr_path.empty()) {
    o.stderr_to = launcher::Output::File;
    o.stderr_path = stderr_path;
  }
  // A test process that crashes takes its workers with it, so that ctest reports the
  // crash at once instead of waiting for its timeout on the workers' open pipes.
  o.parent_death_signal = SIGKILL;
  process_ = launcher::Child::spawn(o);
}

WorkerProcess::WorkerProcess(WorkerProcess&& o) noexcept
    : process_(std::move(o.process_)),
      endpoint_(std::move(o.endpoint_)),
      endpoint_file_(std::move(o.endpoint_file_)) {
  o.endpoint_file_.clear();
}

WorkerProcess::~WorkerProcess() {
  if (process_.running()) stop(SIGTERM);
  if (!endpoint_file_.empty()) unlink(endpoint_file_.c_str());
}

bool WorkerProcess::running() {
  return process_.running();
}

int WorkerProcess::stop(int sig, std::chrono::milliseconds timeout) {
  return process_.stop(sig, timeout);
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
