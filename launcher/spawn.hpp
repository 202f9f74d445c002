// Child processes: the one place where dtr's programs, tests and benchmarks start them
// (dtr-exec's ranks and workers, the REPL's local workers, the tests' and benchmarks'
// dtr-workers and forked ranks).
//
// Child::spawn() forks and execs a program. Everything the child needs is prepared before
// fork(); between fork() and exec() the child makes only async-signal-safe calls, so a
// multi-threaded parent may spawn. It returns once the program runs: a program that cannot
// be executed (not found, not executable) throws instead of becoming a child that exits
// 127 (the child reports exec's errno through a close-on-exec pipe). fork_child() forks a
// function instead, for tests and benchmarks whose child runs code of the parent's.
//
// Children die with their starter: each child gets `parent_death_signal` (SIGKILL unless
// asked otherwise) when the thread that started it ends, dies or is killed
// (PR_SET_PDEATHSIG). The child checks getppid() after setting it: a starter that died in
// between leaves a child that exits at once instead of one that runs on. Start children
// on a thread that lives as long as they should (a program's main thread). Only a process
// meant to outlive its starter passes 0.
//
// A Child owns its process: its destructor kills (SIGKILL) and reaps one still running,
// within a bounded wait, so that nothing outlives a scope by accident. Every wait is
// bounded: wait_for() and stop() take a timeout, and the final wait after SIGKILL is
// bounded too (a process in uninterruptible sleep is abandoned, not waited for).
//
// Thread safety: a Child is not synchronized; use it from one thread at a time. spawn()
// and fork_child() may be called from any thread (the child's death signal follows that
// thread).
#pragma once

#include <signal.h>
#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "dtr/error.hpp"

namespace dtr::launcher {

// Where a child's standard input comes from.
enum class Input : uint8_t {
  Inherit,  // the starter's
  Null,     // /dev/null
  Pipe,     // a pipe whose write end the Child holds (Child::stdin_fd())
};

// Where a child's standard output or error goes.
enum class Output : uint8_t {
  Inherit,  // the starter's
  Null,     // /dev/null
  Pipe,     // a pipe whose read end the Child holds (Child::stdout_fd(), stderr_fd())
  File,     // a file (created or truncated, mode 0600)
};

struct SpawnOptions {
  // The program and its arguments; argv[0] is searched in PATH when it has no '/'.
  std::vector<std::string> argv;
  // "NAME=value" entries: added to the starter's environment (replacing a variable of that
  // name), or, with `replace_env`, the child's whole environment.
  std::vector<std::string> env;
  bool replace_env = false;
  Input stdin_from = Input::Inherit;
  Output stdout_to = Output::Inherit;
  std::string stdout_path;  // Output::File
  Output stderr_to = Output::Inherit;
  std::string stderr_path;  // Output::File
  // Leads a process group of its own: a terminal's Ctrl-C reaches only the starter's
  // group, and Child::signal() reaches the child's descendants too.
  bool own_process_group = false;
  // Sent to the child when the thread that started it ends (see the file comment); 0: none.
  int parent_death_signal = SIGKILL;
  // The child's signal mask (none blocked unless given). SIGINT, SIGTERM, SIGHUP and
  // SIGPIPE get their default dispositions in the child whatever the starter did with them
  // (a starter that ignores them does not pass that on).
  std::optional<sigset_t> signal_mask;
};

// What Child::spawn() throws when the program cannot be executed: "cannot run 'PROGRAM':
// ERROR", with exec's errno.
class ExecFailed : public InvalidArgument {
 public:
  ExecFailed(std::string program, int error);
  const std::string& program() const { return program_; }
  int error() const { return error_; }

 private:
  std::string program_;
  int error_;
};

class Child {
 public:
  // Starts `options.argv` (see the file comment). Throws ExecFailed when it cannot be
  // executed, dtr::Error when fork(), a pipe or an output file fails.
  static Child spawn(const SpawnOptions& options);

  Child() = default;  // no process
  ~Child();
  Child(Child&& other) noexcept;
  Child& operator=(Child&& other) noexcept;
  Child(const Child&) = delete;
  Child& operator=(const Child&) = delete;

  pid_t pid() const { return pid_; }
  explicit operator bool() const { return pid_ > 0; }
  // The write end of an Input::Pipe stdin and the read ends of Output::Pipe outputs (-1
  // otherwise), owned by the Child until released (then the caller closes them).
  int stdin_fd() const { return in_fd_; }
  int stdout_fd() const { return out_fd_; }
  int stderr_fd() const { return err_fd_; }
  int release_stdin();
  int release_stdout();
  int release_stderr();

  // Whether the process still runs (it is reaped when it has exited).
  bool running();
  // The wait status once it has exited and was reaped (running() or a wait), else nullopt.
  std::optional<int> status() const { return status_; }
  // Waits up to `timeout` for the exit: the wait status, or nullopt when it still runs.
  std::optional<int> wait_for(std::chrono::milliseconds timeout);
  // Sends `sig` to the process (to its whole group with own_process_group). No-op once it
  // has been reaped.
  void signal(int sig);
  // `sig`, then up to `grace` for the exit, then SIGKILL and a bounded wait. Returns the
  // wait status, or -1 when it had to be killed (or could not be reaped).
  int stop(int sig = SIGTERM, std::chrono::milliseconds grace = std::chrono::seconds(5));
  // Hands the process over without waiting for it or signalling it: returns its pid (-1
  // when there is none, or it was reaped), which the caller now reaps or abandons (one that
  // did not die within a bounded wait); the Child is then empty.
  pid_t release();

 private:
  friend Child fork_child(const std::function<int()>& body, int parent_death_signal);
  void close_fds();

  pid_t pid_ = -1;
  bool group_ = false;  // leads its own process group
  int in_fd_ = -1;
  int out_fd_ = -1;
  int err_fd_ = -1;
  std::optional<int> status_;
};

// Forks a child that runs `body` and leaves with _exit(its result) (no destructors, no
// atexit handlers; an exception is printed to stderr and exits 1). The child gets
// `parent_death_signal` as spawned ones do. Throws dtr::Error when fork() fails. stdout and
// stderr are flushed first, so that nothing buffered is written twice.
Child fork_child(const std::function<int()>& body, int parent_death_signal = SIGKILL);

// For a child forked by other means (forkpty): sets `sig` as its parent-death signal as
// spawn() does, and exits at once (status 126) when `parent`, the starter's pid taken
// before the fork, is already gone. Call it in the child; async-signal-safe.
void die_with_parent(int sig, pid_t parent);

// Waits up to `limit` for child `pid` of this process; kills it (SIGKILL) at the deadline.
// Returns the wait status, or -1 when it had to be killed or could not be waited for.
int wait_or_kill(pid_t pid, std::chrono::milliseconds limit);

// Replaces this process with `argv` (argv[0] searched in PATH when it has no '/'); on
// failure prints "PREFIX: cannot start PROGRAM: ERROR" to stderr and exits 127.
[[noreturn]] void exec_or_exit(const std::vector<std::string>& argv, const std::string& prefix);

}  // namespace dtr::launcher
