// Supervisor: children started by launcher/spawn.hpp, their output pipes, a signalfd, reaping.
#include "launcher/supervisor.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <thread>

#include <fmt/format.h>

#include "dtr/error.hpp"
#include "launcher/spawn.hpp"

namespace dtr::launcher {

namespace {

constexpr std::array<int, 4> kHandledSignals = {SIGINT, SIGTERM, SIGHUP, SIGCHLD};
constexpr std::size_t kReadChunk = 64 * 1024;
// Reads per pipe per poll() round, so that one chatty child cannot starve the others.
constexpr int kReadsPerRound = 16;

std::string errno_text(int err) {
  return std::strerror(err);
}

void close_fd(int& fd) {
  if (fd >= 0) ::close(fd);
  fd = -1;
}

}  // namespace

struct Supervisor::Child {
  ChildSpec spec;
  launcher::Child process;
  pid_t pid = -1;
  bool running = true;
  int status = 0;
  int out_fd = -1;
  int err_fd = -1;
  LineRelay out{STDOUT_FILENO, ""};
  LineRelay err{STDERR_FILENO, ""};
};

struct Supervisor::SavedSignals {
  sigset_t mask;
  struct sigaction pipe_action;
};

Supervisor::Supervisor() : saved_(std::make_unique<SavedSignals>()) {
  // A signal ignored by whoever started dtr-exec (a shell's `&` ignores SIGINT) must still
  // reach the signalfd: give the handled ones their default disposition, then block them.
  sigset_t set;
  sigemptyset(&set);
  for (int s : kHandledSignals) {
    if (s != SIGCHLD) ::signal(s, SIG_DFL);
    sigaddset(&set, s);
  }
  if (sigprocmask(SIG_BLOCK, &set, &saved_->mask) != 0)
    throw Error(fmt::format("dtr-exec: sigprocmask: {}", errno_text(errno)));
  struct sigaction ignore {};
  ignore.sa_handler = SIG_IGN;
  sigaction(SIGPIPE, &ignore, &saved_->pipe_action);
  signal_fd_ = signalfd(-1, &set, SFD_NONBLOCK | SFD_CLOEXEC);
  if (signal_fd_ < 0) {
    int err = errno;
    sigprocmask(SIG_SETMASK, &saved_->mask, nullptr);
    throw Error(fmt::format("dtr-exec: signalfd: {}", errno_text(err)));
  }
}

Supervisor::~Supervisor() {
  for (auto& c : children_)
    if (c->running) c->process.signal(SIGKILL);
  // SIGKILL cannot be caught; a process in uninterruptible sleep is the only thing that can
  // delay the exit, so the wait is bounded and then abandoned.
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  for (auto& c : children_) {
    if (c->running) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - std::chrono::steady_clock::now());
      if (!c->process.wait_for(std::max(left, std::chrono::milliseconds(0)))) c->process.release();
      c->running = false;
    }
    close_fd(c->out_fd);
    close_fd(c->err_fd);
  }
  // The handled signals stay blocked: one that arrived since the last poll() would
  // otherwise kill dtr-exec (default disposition) instead of letting it return its status.
  close_fd(signal_fd_);
  sigaction(SIGPIPE, &saved_->pipe_action, nullptr);
}

std::size_t Supervisor::start(ChildSpec spec) {
  if (spec.argv.empty()) throw InvalidArgument("dtr-exec: no program to run");
  auto child = std::make_unique<Child>();
  child->spec = std::move(spec);
  const ChildSpec& s = child->spec;

  SpawnOptions o;
  o.argv = s.argv;
  o.env = s.env;
  o.replace_env = true;
  if (s.own_process_group) o.stdin_from = Input::Null;
  o.own_process_group = s.own_process_group;
  if (s.capture_output) o.stdout_to = o.stderr_to = Output::Pipe;
  o.parent_death_signal = s.parent_death_signal;
  sigset_t child_mask = saved_->mask;
  for (int sig : kHandledSignals) sigdelset(&child_mask, sig);
  o.signal_mask = child_mask;
  try {
    child->process = launcher::Child::spawn(o);
  } catch (const ExecFailed& e) {
    throw InvalidArgument(fmt::format("dtr-exec: cannot run '{}' ({}): {}", e.program(), s.name,
                                      errno_text(e.error())));
  } catch (const Error& e) {
    throw Error(fmt::format("dtr-exec: {}", e.what()));
  }
  child->pid = child->process.pid();
  if (s.capture_output) {
    child->out_fd = child->process.release_stdout();
    child->err_fd = child->process.release_stderr();
    ::fcntl(child->out_fd, F_SETFL, O_NONBLOCK);
    ::fcntl(child->err_fd, F_SETFL, O_NONBLOCK);
    child->out = LineRelay(STDOUT_FILENO, s.prefix);
    child->err = LineRelay(STDERR_FILENO, s.prefix);
  }
  children_.push_back(std::move(child));
  return children_.size() - 1;
}

void Supervisor::read_pipe(int& fd, LineRelay& relay) {
  char buf[kReadChunk];
  for (int round = 0; round < kReadsPerRound && fd >= 0; ++round) {
    ssize_t n = ::read(fd, buf, sizeof buf);
    if (n > 0) {
      relay.feed(std::string_view(buf, static_cast<std::size_t>(n)));
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
    relay.finish();  // EOF (or a read error): the stream is over
    close_fd(fd);
  }
}

void Supervisor::reap(PollEvents& ev) {
  for (std::size_t i = 0; i < children_.size(); ++i) {
    Child& c = *children_[i];
    if (c.running && !c.process.running()) {
      c.running = false;
      c.status = c.process.status().value_or(1 << 8);  // not ours to wait for: exit status 1
      ev.exited.push_back(i);
    }
  }
}

PollEvents Supervisor::poll(std::chrono::milliseconds max_wait) {
  PollEvents ev;
  std::vector<pollfd> fds;
  std::vector<std::pair<std::size_t, bool>> owners;  // child index, is stderr
  fds.push_back({signal_fd_, POLLIN, 0});
  for (std::size_t i = 0; i < children_.size(); ++i) {
    if (children_[i]->out_fd >= 0) {
      fds.push_back({children_[i]->out_fd, POLLIN, 0});
      owners.emplace_back(i, false);
    }
    if (children_[i]->err_fd >= 0) {
      fds.push_back({children_[i]->err_fd, POLLIN, 0});
      owners.emplace_back(i, true);
    }
  }
  int timeout = static_cast<int>(std::clamp<int64_t>(max_wait.count(), 0, 60'000));
  int n = ::poll(fds.data(), fds.size(), timeout);
  if (n < 0 && errno != EINTR) throw Error(fmt::format("dtr-exec: poll: {}", errno_text(errno)));
  if (n > 0) {
    if (fds[0].revents & POLLIN) {
      signalfd_siginfo info;
      while (::read(signal_fd_, &info, sizeof info) == static_cast<ssize_t>(sizeof info)) {
        if (static_cast<int>(info.ssi_signo) == SIGCHLD) continue;  // reaped below
        ev.signals.push_back({static_cast<int>(info.ssi_signo), info.ssi_code == SI_KERNEL});
      }
    }
    for (std::size_t k = 1; k < fds.size(); ++k) {
      if (!(fds[k].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      auto [i, is_err] = owners[k - 1];
      Child& c = *children_[i];
      if (is_err)
        read_pipe(c.err_fd, c.err);
      else
        read_pipe(c.out_fd, c.out);
    }
  }
  reap(ev);
  return ev;
}

void Supervisor::signal(std::size_t i, int sig) {
  Child& c = *children_.at(i);
  if (c.running) c.process.signal(sig);  // its process group when it leads one
}

void Supervisor::signal_all(int sig) {
  for (std::size_t i = 0; i < children_.size(); ++i) signal(i, sig);
}

void Supervisor::kill_group(std::size_t i) {
  Child& c = *children_.at(i);
  if (c.running || !c.spec.own_process_group) return;
  if (c.out_fd >= 0 || c.err_fd >= 0) ::kill(-c.pid, SIGKILL);
}

const ChildSpec& Supervisor::spec(std::size_t i) const {
  return children_.at(i)->spec;
}
pid_t Supervisor::pid(std::size_t i) const {
  return children_.at(i)->pid;
}
bool Supervisor::running(std::size_t i) const {
  return children_.at(i)->running;
}
int Supervisor::wait_status(std::size_t i) const {
  return children_.at(i)->status;
}

bool Supervisor::all_exited() const {
  return std::none_of(children_.begin(), children_.end(), [](const auto& c) { return c->running; });
}

bool Supervisor::output_open(const std::vector<std::size_t>& who) const {
  return std::any_of(who.begin(), who.end(), [&](std::size_t i) {
    return children_.at(i)->out_fd >= 0 || children_.at(i)->err_fd >= 0;
  });
}

void Supervisor::close_output(const std::vector<std::size_t>& who) {
  for (std::size_t i : who) {
    Child& c = *children_.at(i);
    if (c.out_fd >= 0) c.out.finish();
    if (c.err_fd >= 0) c.err.finish();
    close_fd(c.out_fd);
    close_fd(c.err_fd);
  }
}

std::string describe_wait_status(int wait_status) {
  if (WIFEXITED(wait_status)) return fmt::format("exit status {}", WEXITSTATUS(wait_status));
  if (WIFSIGNALED(wait_status)) {
    int sig = WTERMSIG(wait_status);
    const char* abbrev = sigabbrev_np(sig);
    return fmt::format("signal {} (SIG{}){}", sig, abbrev ? abbrev : "?",
                       WCOREDUMP(wait_status) ? ", core dumped" : "");
  }
  return fmt::format("wait status {:#x}", wait_status);
}

int exit_code_of(int wait_status) {
  if (WIFEXITED(wait_status)) return WEXITSTATUS(wait_status);
  if (WIFSIGNALED(wait_status)) return 128 + WTERMSIG(wait_status);
  return 1;
}

bool succeeded(int wait_status) {
  return WIFEXITED(wait_status) && WEXITSTATUS(wait_status) == 0;
}

}  // namespace dtr::launcher
