// Starting and stopping the REPL's local dtr-worker daemons.
#include "repl/local_workers.hpp"

#include <dirent.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fmt/format.h>

#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <thread>

#include "dtr/error.hpp"
#include "launcher/spawn.hpp"

namespace dtr::repl {

namespace {

using Clock = std::chrono::steady_clock;

bool is_executable(const std::string& path) {
  struct stat st {};
  return stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) && access(path.c_str(), X_OK) == 0;
}

std::string self_dir() {
  char buf[PATH_MAX];
  ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n <= 0) return ".";
  std::string path(buf, static_cast<size_t>(n));
  size_t slash = path.rfind('/');
  return slash == std::string::npos ? "." : path.substr(0, slash);
}

}  // namespace

std::string find_worker_binary() {
  if (const char* env = std::getenv("DTR_WORKER_BIN"); env && *env) {
    if (!is_executable(env))
      throw Error(fmt::format("DTR_WORKER_BIN={} is not an executable file", env));
    return env;
  }
  std::string dir = self_dir();
  std::vector<std::string> tried = {dir + "/dtr-worker", dir + "/../worker/dtr-worker"};
  for (const std::string& p : tried)
    if (is_executable(p)) return p;
  throw Error(fmt::format(
      "cannot find dtr-worker (tried {} and {}); set DTR_WORKER_BIN, pass --worker-bin, or "
      "attach to running workers with --connect",
      tried[0], tried[1]));
}

LocalWorkers::LocalWorkers(int count, const std::string& worker_binary,
                           const std::string& log_level, std::chrono::milliseconds timeout) {
  char tmpl[] = "/tmp/dtr-repl-XXXXXX";
  if (!mkdtemp(tmpl))
    throw Error(fmt::format("cannot create a temporary directory: {}", std::strerror(errno)));
  dir_ = tmpl;
  std::vector<std::string> files;
  for (int i = 0; i < count; ++i) {
    std::string file = fmt::format("{}/worker{}.endpoint", dir_, i);
    std::string name = fmt::format("repl-worker-{}", i);
    launcher::SpawnOptions o;
    o.argv = {worker_binary,     "--listen", "tcp://127.0.0.1:*",
              "--endpoint-file", file,       "--log-level",
              log_level,         "--name",   name};
    o.stdin_from = launcher::Input::Null;
    o.own_process_group = true;
    o.parent_death_signal = SIGKILL;
    try {
      workers_.push_back(launcher::Child::spawn(o));
    } catch (const Error& e) {
      stop();
      throw Error(fmt::format("cannot start dtr-worker: {}", e.what()));
    }
    pids_.push_back(workers_.back().pid());
    files.push_back(file);
  }
  auto deadline = Clock::now() + timeout;
  for (size_t i = 0; i < files.size(); ++i) {
    std::string endpoint;
    while (true) {
      std::ifstream in(files[i]);
      if (in && std::getline(in, endpoint) && !endpoint.empty()) break;
      if (!workers_[i].running()) {
        const int status = workers_[i].status().value_or(0);
        stop();
        throw Error(fmt::format("dtr-worker ({}) exited {} {} before reporting its endpoint",
                                worker_binary, WIFEXITED(status) ? "with status" : "on signal",
                                WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status)));
      }
      if (Clock::now() >= deadline) {
        stop();
        throw TimeoutError(
            fmt::format("dtr-worker did not report its endpoint within {} ms", timeout.count()));
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    endpoints_.push_back(endpoint);
    unlink(files[i].c_str());  // read once; nothing is left behind if the REPL is killed
  }
  rmdir(dir_.c_str());
  dir_.clear();
}

LocalWorkers::~LocalWorkers() {
  stop();
}

void LocalWorkers::stop(std::chrono::milliseconds timeout) {
  for (launcher::Child& w : workers_) w.signal(SIGTERM);
  auto deadline = Clock::now() + timeout;
  for (launcher::Child& w : workers_) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    if (!w.wait_for(std::max(left, std::chrono::milliseconds(0))))
      w.stop(SIGKILL, std::chrono::milliseconds(0));
  }
  workers_.clear();
  pids_.clear();
  if (!dir_.empty()) {
    if (DIR* d = opendir(dir_.c_str())) {
      while (dirent* e = readdir(d)) {
        std::string n = e->d_name;
        if (n != "." && n != "..") unlink((dir_ + "/" + n).c_str());
      }
      closedir(d);
    }
    rmdir(dir_.c_str());
    dir_.clear();
  }
}

}  // namespace dtr::repl
