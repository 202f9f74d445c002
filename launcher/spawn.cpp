// Child processes: fork/exec with an exec-status pipe, parent-death signals, bounded waits
// (launcher/spawn.hpp).
#include "launcher/spawn.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <poll.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <exception>
#include <thread>
#include <utility>

extern char** environ;

namespace dtr::launcher {

namespace {

using Clock = std::chrono::steady_clock;

// The signals a child gets back with their default dispositions.
constexpr int kDefaultSignals[] = {SIGINT, SIGTERM, SIGHUP, SIGPIPE};
// How long spawn() waits for the child's exec before taking it as started: a pipe end can
// be held by another thread's fork that has not exec'd yet.
constexpr auto kExecReportWait = std::chrono::seconds(30);

void close_fd(int& fd) {
  if (fd >= 0) ::close(fd);
  fd = -1;
}

// Closes every descriptor of `fds` that is open.
struct Fds {
  int v[8] = {-1, -1, -1, -1, -1, -1, -1, -1};
  ~Fds() {
    for (int& fd : v) close_fd(fd);
  }
};

// The child's environment: the starter's with `o.env` applied, or `o.env` alone.
std::vector<std::string> child_environment(const SpawnOptions& o) {
  if (o.replace_env) return o.env;
  std::vector<std::string> env;
  for (char** e = environ; e && *e; ++e) env.emplace_back(*e);
  for (const std::string& add : o.env) {
    const std::string name = add.substr(0, add.find('=') + 1);
    auto same = std::find_if(env.begin(), env.end(), [&](const std::string& e) {
      return e.compare(0, name.size(), name) == 0;
    });
    if (same != env.end())
      *same = add;
    else
      env.push_back(add);
  }
  return env;
}

// Opens what a child's output goes to (close-on-exec; the child dup2()s it): -1 to inherit.
// A pipe's read end goes to `read_end`.
int open_output(Output to, const std::string& path, const char* stream, int& read_end) {
  switch (to) {
    case Output::Inherit:
      return -1;
    case Output::Null: {
      int fd = ::open("/dev/null", O_WRONLY | O_CLOEXEC);
      if (fd < 0) throw Error(fmt::format("cannot open /dev/null: {}", std::strerror(errno)));
      return fd;
    }
    case Output::File: {
      int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
      if (fd < 0)
        throw Error(
            fmt::format("cannot open {} for a child's {}: {}", path, stream, std::strerror(errno)));
      return fd;
    }
    case Output::Pipe: {
      int p[2];
      if (::pipe2(p, O_CLOEXEC) != 0)
        throw Error(
            fmt::format("cannot make a pipe for a child's {}: {}", stream, std::strerror(errno)));
      read_end = p[0];
      return p[1];
    }
  }
  return -1;
}

}  // namespace

// The parent-death signal, then whether the starter is still there (it may have died
// before prctl took effect).
void die_with_parent(int sig, pid_t parent) {
  if (sig == 0) return;
  if (::prctl(PR_SET_PDEATHSIG, sig) != 0 || ::getppid() != parent) _exit(126);
}

ExecFailed::ExecFailed(std::string program, int error)
    : InvalidArgument(fmt::format("cannot run '{}': {}", program, std::strerror(error))),
      program_(std::move(program)),
      error_(error) {}

Child Child::spawn(const SpawnOptions& o) {
  if (o.argv.empty()) throw InvalidArgument("spawn: no program to run");
  // Everything the forked child needs is prepared before fork().
  std::vector<char*> argv, envp;
  for (const std::string& a : o.argv) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  const std::vector<std::string> env = child_environment(o);
  for (const std::string& e : env) envp.push_back(const_cast<char*>(e.c_str()));
  envp.push_back(nullptr);
  const bool search_path = o.argv[0].find('/') == std::string::npos;
  sigset_t mask;
  if (o.signal_mask)
    mask = *o.signal_mask;
  else
    sigemptyset(&mask);

  enum { kReportRead, kReportWrite, kIn, kOut, kErr, kInWrite, kOutRead, kErrRead };
  Fds fds;
  if (::pipe2(&fds.v[kReportRead], O_CLOEXEC) != 0)
    throw Error(fmt::format("spawn: pipe: {}", std::strerror(errno)));
  if (o.stdin_from == Input::Null && (fds.v[kIn] = ::open("/dev/null", O_RDONLY | O_CLOEXEC)) < 0)
    throw Error(fmt::format("cannot open /dev/null: {}", std::strerror(errno)));
  if (o.stdin_from == Input::Pipe) {
    int p[2];
    if (::pipe2(p, O_CLOEXEC) != 0)
      throw Error(fmt::format("cannot make a pipe for a child's stdin: {}", std::strerror(errno)));
    fds.v[kIn] = p[0];
    fds.v[kInWrite] = p[1];
  }
  fds.v[kOut] = open_output(o.stdout_to, o.stdout_path, "stdout", fds.v[kOutRead]);
  fds.v[kErr] = open_output(o.stderr_to, o.stderr_path, "stderr", fds.v[kErrRead]);

  std::fflush(nullptr);  // nothing buffered is written twice
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid < 0) throw Error(fmt::format("spawn: fork: {}", std::strerror(errno)));
  if (pid == 0) {
    // The child: async-signal-safe calls only.
    struct sigaction dfl {};
    dfl.sa_handler = SIG_DFL;
    for (int sig : kDefaultSignals) ::sigaction(sig, &dfl, nullptr);
    ::sigprocmask(SIG_SETMASK, &mask, nullptr);
    die_with_parent(o.parent_death_signal, parent);
    if (o.own_process_group) ::setpgid(0, 0);
    if (fds.v[kIn] >= 0) ::dup2(fds.v[kIn], STDIN_FILENO);
    if (fds.v[kOut] >= 0) ::dup2(fds.v[kOut], STDOUT_FILENO);
    if (fds.v[kErr] >= 0) ::dup2(fds.v[kErr], STDERR_FILENO);
    if (search_path)
      ::execvpe(argv[0], argv.data(), envp.data());
    else
      ::execve(argv[0], argv.data(), envp.data());
    const int err = errno;
    ssize_t ignored = ::write(fds.v[kReportWrite], &err, sizeof err);
    (void)ignored;
    _exit(127);
  }

  Child child;
  child.pid_ = pid;
  child.group_ = o.own_process_group;
  std::swap(child.in_fd_, fds.v[kInWrite]);
  std::swap(child.out_fd_, fds.v[kOutRead]);
  std::swap(child.err_fd_, fds.v[kErrRead]);
  close_fd(fds.v[kReportWrite]);
  // EOF on the report pipe: the exec succeeded (the pipe is close-on-exec); an errno: it
  // failed. The child execs or exits right away, so the wait is short.
  int exec_errno = 0;
  ssize_t n = -1;
  pollfd p{fds.v[kReportRead], POLLIN, 0};
  const auto deadline = Clock::now() + kExecReportWait;
  while (true) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    if (left <= 0) break;
    const int r = ::poll(&p, 1, static_cast<int>(std::min<int64_t>(left, 1000)));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) continue;
    n = ::read(fds.v[kReportRead], &exec_errno, sizeof exec_errno);
    if (n < 0 && errno == EINTR) continue;
    break;
  }
  if (n > 0) {
    child.wait_for(std::chrono::seconds(5));  // it exits 127 at once
    throw ExecFailed(o.argv[0], exec_errno);
  }
  return child;
}

Child fork_child(const std::function<int()>& body, int parent_death_signal) {
  std::fflush(nullptr);
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid < 0) throw Error(fmt::format("fork: {}", std::strerror(errno)));
  if (pid == 0) {
    die_with_parent(parent_death_signal, parent);
    int code = 1;
    try {
      code = body();
    } catch (const std::exception& e) {
      std::fprintf(stderr, "%s\n", e.what());
    } catch (...) {
      std::fprintf(stderr, "unknown exception\n");
    }
    std::fflush(nullptr);
    _exit(code);
  }
  Child child;
  child.pid_ = pid;
  return child;
}

Child::~Child() {
  if (running()) {
    signal(SIGKILL);
    if (!wait_for(std::chrono::seconds(5))) release();
  }
  close_fds();
}

Child::Child(Child&& o) noexcept
    : pid_(std::exchange(o.pid_, -1)),
      group_(o.group_),
      in_fd_(std::exchange(o.in_fd_, -1)),
      out_fd_(std::exchange(o.out_fd_, -1)),
      err_fd_(std::exchange(o.err_fd_, -1)),
      status_(std::exchange(o.status_, std::nullopt)) {}

Child& Child::operator=(Child&& o) noexcept {
  if (this != &o) {
    Child old(std::move(*this));  // stops what this held
    pid_ = std::exchange(o.pid_, -1);
    group_ = o.group_;
    in_fd_ = std::exchange(o.in_fd_, -1);
    out_fd_ = std::exchange(o.out_fd_, -1);
    err_fd_ = std::exchange(o.err_fd_, -1);
    status_ = std::exchange(o.status_, std::nullopt);
  }
  return *this;
}

void Child::close_fds() {
  close_fd(in_fd_);
  close_fd(out_fd_);
  close_fd(err_fd_);
}

int Child::release_stdin() {
  return std::exchange(in_fd_, -1);
}

int Child::release_stdout() {
  return std::exchange(out_fd_, -1);
}

int Child::release_stderr() {
  return std::exchange(err_fd_, -1);
}

bool Child::running() {
  if (pid_ <= 0 || status_) return false;
  int st = 0;
  const pid_t r = ::waitpid(pid_, &st, WNOHANG);
  if (r == pid_) {
    status_ = st;
    return false;
  }
  if (r < 0 && errno != EINTR) {  // not ours to wait for (reaped elsewhere)
    pid_ = -1;
    return false;
  }
  return true;
}

std::optional<int> Child::wait_for(std::chrono::milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  auto pause = std::chrono::microseconds(200);
  while (running()) {
    if (Clock::now() >= deadline) return std::nullopt;
    std::this_thread::sleep_for(std::min<Clock::duration>(pause, deadline - Clock::now()));
    pause = std::min(pause * 2, std::chrono::microseconds(10'000));
  }
  return status_;
}

void Child::signal(int sig) {
  if (pid_ <= 0 || status_) return;
  if (group_ && ::kill(-pid_, sig) == 0) return;
  ::kill(pid_, sig);
}

int Child::stop(int sig, std::chrono::milliseconds grace) {
  if (!running()) return status_.value_or(-1);
  signal(sig);
  if (auto st = wait_for(grace)) return *st;
  signal(SIGKILL);
  // SIGKILL cannot be caught: only a process in uninterruptible sleep is not gone soon.
  if (!wait_for(std::chrono::seconds(5))) release();
  return -1;
}

pid_t Child::release() {
  const pid_t pid = status_ ? -1 : pid_;
  pid_ = -1;
  status_.reset();
  return pid;
}

int wait_or_kill(pid_t pid, std::chrono::milliseconds limit) {
  const auto deadline = Clock::now() + limit;
  int status = 0;
  while (Clock::now() < deadline) {
    const pid_t r = ::waitpid(pid, &status, WNOHANG);
    if (r == pid) return status;
    if (r < 0 && errno != EINTR) return -1;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  ::kill(pid, SIGKILL);
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  return -1;
}

[[noreturn]] void exec_or_exit(const std::vector<std::string>& argv, const std::string& prefix) {
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  if (!argv.empty()) ::execvp(args[0], args.data());
  std::fprintf(stderr, "%s: cannot start %s: %s\n", prefix.c_str(),
               argv.empty() ? "(nothing)" : argv[0].c_str(), std::strerror(errno));
  std::fflush(stderr);
  _exit(127);
}

}  // namespace dtr::launcher
