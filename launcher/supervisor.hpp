// Supervisor: the process-keeping core of dtr-exec. Starts child processes, relays their
// output through LineRelay, reaps them, and reports the signals dtr-exec itself receives,
// all from one poll() loop that the caller drives with bounded waits.
//
// - On construction SIGINT, SIGTERM, SIGHUP and SIGCHLD are blocked and read from a
//   signalfd; SIGPIPE is ignored. Children are started by launcher/spawn.hpp: they get
//   the default dispositions and an unblocked mask back before exec, and a parent-death
//   signal (ChildSpec::parent_death_signal), so that they do not outlive a dtr-exec that
//   was killed.
// - A child with `own_process_group` leads a new process group, reads stdin from
//   /dev/null, and signals go to its whole group (its own children included). Otherwise it
//   stays in dtr-exec's group and inherits stdin (so it can use the terminal).
// - start() returns only after the child has exec'd: a program that cannot be run (not
//   found, not executable) throws dtr::InvalidArgument instead of becoming a child that
//   exits 127.
// - The destructor SIGKILLs and reaps every child still running (bounded). SIGINT,
//   SIGTERM and SIGHUP stay blocked (a late one is dropped rather than killing dtr-exec
//   before it returns its exit status); dtr-exec exits right after.
//
// Thread safety: none. One Supervisor per process, used by the thread that created it;
// dtr-exec has no other threads (a second thread would receive the blocked signals).
#pragma once

#include <signal.h>
#include <sys/types.h>

#include <chrono>
#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "launcher/line_relay.hpp"

namespace dtr::launcher {

struct ChildSpec {
  std::string name;               // in dtr-exec's messages: "rank 2", "worker 0", "the program"
  std::vector<std::string> argv;  // argv[0] is searched in PATH when it has no '/'
  std::vector<std::string> env;   // the complete environment, "NAME=value" each
  bool capture_output = true;     // relay stdout/stderr with `prefix`; else inherit them
  std::string prefix;             // prepended to each relayed line, e.g. "[2] "
  bool own_process_group = true;  // new group and /dev/null stdin; else dtr-exec's group
  // What the child gets when dtr-exec dies: SIGTERM for the user's programs (the ranks, the
  // master program), as dtr-exec's own stops begin; SIGKILL for dtr-worker daemons, which
  // hold nothing once the job is gone.
  int parent_death_signal = SIGTERM;
};

// A signal dtr-exec received. `from_terminal`: sent by the kernel (the terminal's Ctrl-C to
// the foreground group) rather than by kill(); children in dtr-exec's group got it too.
struct ReceivedSignal {
  int number = 0;
  bool from_terminal = false;
};

struct PollEvents {
  std::vector<ReceivedSignal> signals;
  std::vector<std::size_t> exited;  // children reaped during this call
};

class Supervisor {
 public:
  Supervisor();
  ~Supervisor();
  Supervisor(const Supervisor&) = delete;
  Supervisor& operator=(const Supervisor&) = delete;

  // Starts a child and returns its index (0, 1, ... in start order). Throws
  // dtr::InvalidArgument when the program cannot be executed, dtr::Error when fork or
  // pipe creation fails.
  std::size_t start(ChildSpec spec);

  // Waits at most `max_wait` for output, exits or signals; relays output and reaps.
  PollEvents poll(std::chrono::milliseconds max_wait);

  // Sends `sig` to child `i` (its process group when it has one). No-op once it is reaped.
  void signal(std::size_t i, int sig);
  void signal_all(int sig);
  // SIGKILLs what is left of an exited child's process group (descendants that still hold
  // its output pipes). No-op for a child without its own group or still running.
  void kill_group(std::size_t i);

  std::size_t size() const { return children_.size(); }
  const ChildSpec& spec(std::size_t i) const;
  pid_t pid(std::size_t i) const;
  bool running(std::size_t i) const;
  int wait_status(std::size_t i) const;  // valid once !running(i)
  bool all_exited() const;
  // True while an output pipe of a child in `who` is still open (a child or its
  // descendants may still write to it after the child itself has exited).
  bool output_open(const std::vector<std::size_t>& who) const;
  // Flushes partial lines and closes the output pipes of `who` (the end of a bounded
  // drain).
  void close_output(const std::vector<std::size_t>& who);

 private:
  struct Child;
  void reap(PollEvents& ev);
  void read_pipe(int& fd, LineRelay& relay);

  int signal_fd_ = -1;
  std::vector<std::unique_ptr<Child>> children_;
  struct SavedSignals;
  std::unique_ptr<SavedSignals> saved_;
};

// "exit status 3", "signal 9 (SIGKILL)", "signal 11 (SIGSEGV), core dumped".
std::string describe_wait_status(int wait_status);
// The shell's convention: the exit status, or 128 + the signal number.
int exit_code_of(int wait_status);
// True when the child exited 0.
bool succeeded(int wait_status);

}  // namespace dtr::launcher
