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
#include <sstream>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

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

// Runs dtr-repl with `args`, writes `input` to its stdin (then closes it), collects stdout
// and stderr until it exits; everything within `limit`.
inline ProcessResult run_repl(const std::vector<std::string>& args, const std::string& input,
                              std::chrono::milliseconds limit = 30s) {
  int in[2], out[2], err[2];
  REQUIRE(pipe(in) == 0);
  REQUIRE(pipe(out) == 0);
  REQUIRE(pipe(err) == 0);
  std::string bin = repl_binary();
  std::vector<std::string> all = {bin};
  all.insert(all.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (std::string& a : all) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t pid = fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    dup2(in[0], 0);
    dup2(out[1], 1);
    dup2(err[1], 2);
    for (int fd : {in[0], in[1], out[0], out[1], err[0], err[1]}) close(fd);
    execv(argv[0], argv.data());
    _exit(127);
  }
  close(in[0]);
  close(out[1]);
  close(err[1]);
  signal(SIGPIPE, SIG_IGN);
  ProcessResult r;
  size_t written = 0;
  int in_fd = in[1];
  fcntl(in_fd, F_SETFL, O_NONBLOCK);
  if (input.empty()) {
    close(in_fd);
    in_fd = -1;
  }
  auto deadline = Clock::now() + limit;
  bool out_open = true, err_open = true;
  while ((out_open || err_open) && Clock::now() < deadline) {
    pollfd fds[3] = {{out_open ? out[0] : -1, POLLIN, 0},
                     {err_open ? err[0] : -1, POLLIN, 0},
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
  close(out[0]);
  close(err[0]);
  r.status =
      dtr::test::wait_or_kill(pid, std::chrono::duration_cast<std::chrono::milliseconds>(
                                       std::max(deadline - Clock::now(), Clock::duration(1s))));
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
