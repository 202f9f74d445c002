// Helpers of the REPL tests: an Interpreter fed from a string with its output captured,
// and the dtr-repl binary run as a child process (pipes or a pseudo-terminal) with every
// wait bounded.
//
// Thread safety: one object per thread.
#pragma once

#include <doctest/doctest.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "launcher/spawn.hpp"
#include "repl/interpreter.hpp"
#include "support/worker_process.hpp"

namespace dtr::test {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

// An Interpreter over string streams. run() feeds text line by line and returns what
// those lines wrote (out, err).
class ReplSession {
 public:
  explicit ReplSession(bool interactive = true, std::string source = "test.dtr")
      : interp_(out_, err_, repl::InterpreterOptions{interactive, std::move(source), false}) {}

  struct Output {
    std::string out, err;
  };
  Output run(std::string_view text, bool finish = true) {
    out_.str("");
    err_.str("");
    std::string_view rest = text;
    while (!rest.empty()) {
      size_t nl = rest.find('\n');
      interp_.feed(rest.substr(0, nl));
      rest = nl == std::string_view::npos ? std::string_view() : rest.substr(nl + 1);
    }
    if (finish) interp_.finish();
    return {out_.str(), err_.str()};
  }
  // Output of lines that must not fail.
  std::string ok(std::string_view text) {
    Output o = run(text);
    CHECK_MESSAGE(o.err.empty(), "input:\n", text, "\nerrors:\n", o.err);
    return o.out;
  }
  repl::Interpreter& interpreter() { return interp_; }

 private:
  std::ostringstream out_, err_;
  repl::Interpreter interp_;
};

inline std::string repl_binary() {
  return DTR_REPL_BIN;
}

inline bool has(std::string_view text, std::string_view part) {
  return text.find(part) != std::string_view::npos;
}

inline size_t count_of(std::string_view text, std::string_view part) {
  size_t n = 0;
  for (size_t at = text.find(part); at != std::string_view::npos; at = text.find(part, at + 1)) ++n;
  return n;
}

struct ProcessResult {
  int status = -1;  // wait status; -1 when killed at the deadline
  std::string out, err;
  int exit_code() const { return status >= 0 && WIFEXITED(status) ? WEXITSTATUS(status) : -1; }
};

// Runs dtr-repl with `args` (it dies with this test process), writes `input` to its stdin
// (then closes it), collects stdout and stderr until it exits; everything within `limit`.
inline ProcessResult run_repl(const std::vector<std::string>& args, const std::string& input,
                              std::chrono::milliseconds limit = 30s) {
  launcher::SpawnOptions o;  // dtr-repl dies with this test process (launcher/spawn.hpp)
  o.argv = {repl_binary()};
  o.argv.insert(o.argv.end(), args.begin(), args.end());
  o.stdin_from = launcher::Input::Pipe;
  o.stdout_to = o.stderr_to = launcher::Output::Pipe;
  launcher::Child repl = launcher::Child::spawn(o);
  signal(SIGPIPE, SIG_IGN);
  ProcessResult r;
  size_t written = 0;
  int in_fd = repl.release_stdin();
  fcntl(in_fd, F_SETFL, O_NONBLOCK);
  if (input.empty()) {
    close(in_fd);
    in_fd = -1;
  }
  auto deadline = Clock::now() + limit;
  bool out_open = true, err_open = true;
  while ((out_open || err_open) && Clock::now() < deadline) {
    pollfd fds[3] = {{out_open ? repl.stdout_fd() : -1, POLLIN, 0},
                     {err_open ? repl.stderr_fd() : -1, POLLIN, 0},
                     {in_fd, POLLOUT, 0}};
    if (poll(fds, 3, 100) < 0) break;
    char buf[4096];
    for (int k = 0; k < 2; ++k) {
      if (!(fds[k].revents & (POLLIN | POLLHUP))) continue;
      ssize_t n = read(fds[k].fd, buf, sizeof buf);
      if (n <= 0) {
        (k == 0 ? out_open : err_open) = false;
      } else {
        (k == 0 ? r.out : r.err).append(buf, static_cast<size_t>(n));
      }
    }
    if (in_fd >= 0 && (fds[2].revents & (POLLOUT | POLLERR))) {
      ssize_t n = write(in_fd, input.data() + written, input.size() - written);
      if (n > 0) written += static_cast<size_t>(n);
      if (n < 0 || written == input.size()) {
        close(in_fd);
        in_fd = -1;
      }
    }
  }
  if (in_fd >= 0) close(in_fd);
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
      std::max(deadline - Clock::now(), Clock::duration(1s)));
  const std::optional<int> status = repl.wait_for(left);
  if (!status) repl.stop(SIGKILL, 0ms);  // killed at the deadline
  r.status = status.value_or(-1);
  return r;
}

// The worker pids that `:nodes` printed ("worker host:PID").
inline std::vector<pid_t> worker_pids(const std::string& nodes_output) {
  std::vector<pid_t> pids;
  std::istringstream in(nodes_output);
  for (std::string line; std::getline(in, line);) {
    size_t w = line.find("worker ");
    if (w == std::string::npos) continue;
    size_t colon = line.find(':', w);
    size_t comma = line.find(',', w);
    if (colon == std::string::npos || comma == std::string::npos) continue;
    pids.push_back(static_cast<pid_t>(std::stol(line.substr(colon + 1, comma - colon - 1))));
  }
  return pids;
}

// True when none of `pids` exists any more, within `limit`.
inline bool all_gone(const std::vector<pid_t>& pids, std::chrono::milliseconds limit = 10s) {
  auto deadline = Clock::now() + limit;
  while (Clock::now() < deadline) {
    bool any = false;
    for (pid_t p : pids) any = any || kill(p, 0) == 0;
    if (!any) return true;
    std::this_thread::sleep_for(10ms);
  }
  return false;
}

}  // namespace dtr::test
