// The real dtr-repl driven through a pseudo-terminal, as a person uses it: typing, tab
// completion, history recall (up arrow, and across sessions from the history file),
// Ctrl-C at the prompt, a remote error followed by a working line, Ctrl-D to quit.
// Every read is bounded (poll with a deadline); the child is killed at the end if it is
// still there.
#include <doctest/doctest.h>
#include <poll.h>
#include <pty.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "repl/repl_support.hpp"
#include "support/sanitizers.hpp"

#if defined(DTR_TEST_TSAN)
constexpr bool kSignalsDeferred = true;
#else
constexpr bool kSignalsDeferred = false;
#endif

namespace {

using namespace dtr::test;

class PtySession {
 public:
  explicit PtySession(const std::string& history_file) {
    std::string bin = repl_binary();
    const pid_t parent = getpid();
    pid_ = forkpty(&master_, nullptr, nullptr, nullptr);
    REQUIRE(pid_ >= 0);
    if (pid_ == 0) {
      dtr::launcher::die_with_parent(SIGKILL, parent);  // as launcher/spawn.hpp's children
      setenv("TERM", "xterm", 1);
      setenv("INPUTRC", "/dev/null", 1);
      setenv("DTR_HISTORY", history_file.c_str(), 1);
      execl(bin.c_str(), bin.c_str(), "--workers", "2", static_cast<char*>(nullptr));
      _exit(127);
    }
  }
  ~PtySession() {
    if (pid_ > 0) dtr::test::wait_or_kill(pid_, 0ms);  // kills it if still running
    if (master_ >= 0) close(master_);
  }

  void type(std::string_view keys) {
    size_t done = 0;
    while (done < keys.size()) {
      ssize_t n = write(master_, keys.data() + done, keys.size() - done);
      REQUIRE(n > 0);
      done += static_cast<size_t>(n);
    }
  }

  // Reads until everything received since the last mark contains `text` (true), or the
  // deadline passes or the terminal closes (false).
  bool expect(std::string_view text, std::chrono::milliseconds limit = 20s) {
    auto deadline = Clock::now() + limit;
    while (true) {
      if (seen_.find(text, mark_) != std::string::npos) {
        mark_ = seen_.find(text, mark_) + text.size();
        return true;
      }
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
      if (left.count() <= 0) return false;
      pollfd p{master_, POLLIN, 0};
      int r = poll(&p, 1, static_cast<int>(std::min<int64_t>(left.count(), 100)));
      if (r < 0) return false;
      if (r == 0) continue;
      char buf[4096];
      ssize_t n = read(master_, buf, sizeof buf);
      if (n <= 0) return false;  // EIO: the child closed the terminal
      seen_.append(buf, static_cast<size_t>(n));
    }
  }

  // The exit status once the child ends (bounded), -1 when it had to be killed.
  int wait_exit(std::chrono::milliseconds limit) {
    // Drain the terminal so that the child never blocks on output.
    auto deadline = Clock::now() + limit;
    while (Clock::now() < deadline) {
      int status = 0;
      pid_t r = waitpid(pid_, &status, WNOHANG);
      if (r == pid_) {
        pid_ = -1;
        return status;
      }
      pollfd p{master_, POLLIN, 0};
      if (poll(&p, 1, 20) > 0) {
        char buf[4096];
        ssize_t n = read(master_, buf, sizeof buf);
        if (n > 0) seen_.append(buf, static_cast<size_t>(n));
      }
    }
    int status = dtr::test::wait_or_kill(pid_, 0ms);
    pid_ = -1;
    return status;
  }

  const std::string& seen() const { return seen_; }

 private:
  pid_t pid_ = -1;
  int master_ = -1;
  std::string seen_;
  size_t mark_ = 0;
};

TEST_CASE(
    "a terminal session with typing and completion and history and errors and Ctrl-C and Ctrl-D") {
  char tmpl[] = "/tmp/dtr-repl-history-XXXXXX";
  int fd = mkstemp(tmpl);
  REQUIRE(fd >= 0);
  close(fd);
  std::string history = tmpl;
  {
    PtySession t(history);
    INFO("terminal output so far:\n", t.seen());
    REQUIRE(t.expect("Type help for help"));
    REQUIRE(t.expect(">>> "));

    // Typing a statement.
    t.type("x = arange(6)\r");
    REQUIRE(t.expect(">>> "));

    // Tab completion of a method: "x.resh" + TAB becomes "x.reshape(".
    t.type("x.resh\t");
    CHECK(t.expect("ape("));
    t.type("2, 3)\r");
    CHECK(t.expect("shape=[2, 3], dtype=int64, node=0, device=cpu)"));
    REQUIRE(t.expect(">>> "));

    // Two TABs list the choices ("x.su": sub, sub_, sum); typing on completes the line.
    t.type("x.su\t\t");
    CHECK(t.expect("x.sum("));
    t.type("m()\r");
    CHECK(t.expect("tensor(15, shape=[], dtype=int64, node=0, device=cpu)"));
    REQUIRE(t.expect(">>> "));

    // Tab completion of a variable.
    t.type("my_long_name = 20\r");
    REQUIRE(t.expect(">>> "));
    t.type("my_lo\t + 22\r");
    CHECK(t.expect("42"));
    REQUIRE(t.expect(">>> "));

    // History: the up arrow recalls the previous line; Enter runs it again.
    t.type("\x1b[A");
    CHECK(t.expect("my_long_name + 22"));
    t.type("\r");
    CHECK(t.expect("42"));
    REQUIRE(t.expect(">>> "));

    // A remote error, then a line that works.
    t.type("arange(5).pow(-1)\r");
    CHECK(t.expect("RemoteError: pow failed on node 0 (cpu)"));
    CHECK(t.expect("negative integer powers"));
    REQUIRE(t.expect(">>> "));
    t.type("x.sum().item() * 2\r");
    CHECK(t.expect("30"));
    REQUIRE(t.expect(">>> "));

    // A block at the prompt: "... " until the empty line.
    t.type("with node(1):\r");
    CHECK(t.expect("... "));
    t.type("    w = ones(2)\r");
    CHECK(t.expect("... "));
    t.type("\r");
    REQUIRE(t.expect(">>> "));
    t.type("w.get_node() + 100\r");
    CHECK(t.expect("101"));
    REQUIRE(t.expect(">>> "));

    // Skipped under ThreadSanitizer: the REPL's SIGINT handler resets the line with
    // readline calls (not async-signal-safe, which TSan reports), and TSan delivers the
    // signal late besides.
    if (kSignalsDeferred) {
      MESSAGE("Ctrl-C steps skipped under ThreadSanitizer (see the comment above)");
    } else {
      // Ctrl-C at the prompt drops the line and keeps the session.
      t.type("this line is abandoned\x03");
      REQUIRE(t.expect(">>> "));
      t.type("7 * 6 + 1000\r");
      CHECK(t.expect("1042"));
      REQUIRE(t.expect(">>> "));

      // Ctrl-C in a block drops the block.
      t.type("with node(1):\r");
      CHECK(t.expect("... "));
      t.type("\x03");
      REQUIRE(t.expect(">>> "));
      t.type("5 + 5\r");
      CHECK(t.expect("10"));
      REQUIRE(t.expect(">>> "));
      CHECK_FALSE(has(t.seen(), "SyntaxError"));
    }

    // Ctrl-D ends the session; status 0.
    t.type("\x04");
    int status = t.wait_exit(15s);
    CHECK(status >= 0);
    CHECK((WIFEXITED(status) && WEXITSTATUS(status) == 0));
  }

  // The history was saved, and the next session recalls it.
  std::ifstream in(history);
  std::stringstream saved;
  saved << in.rdbuf();
  CHECK(has(saved.str(), "x.reshape(2, 3)"));
  CHECK(has(saved.str(), "my_long_name + 22"));
  // The last lines typed were those of the Ctrl-C steps, or "w.get_node() + 100" without.
  const std::string last_line = kSignalsDeferred ? "w.get_node() + 100" : "5 + 5";
  if (!kSignalsDeferred) CHECK(has(saved.str(), "7 * 6 + 1000\nwith node(1):\n5 + 5\n"));
  CHECK_FALSE(has(saved.str(), "abandoned"));
  {
    PtySession t(history);
    INFO("terminal output so far:\n", t.seen());
    REQUIRE(t.expect(">>> "));
    t.type("\x1b[A");  // the last line of the previous session
    CHECK(t.expect(last_line));
    t.type("\r");
    CHECK(t.expect(kSignalsDeferred ? "NameError" : "10"));  // w is from the last session
    REQUIRE(t.expect(">>> "));
    t.type(":quit\r");
    int status = t.wait_exit(15s);
    CHECK((status >= 0 && WIFEXITED(status) && WEXITSTATUS(status) == 0));
  }
  std::remove(history.c_str());
}

}  // namespace
