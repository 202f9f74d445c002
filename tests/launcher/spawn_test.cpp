// Child processes (launcher/spawn.hpp): a program's arguments, environment, output and exit
// status; exec failures; bounded waits and stops; forked functions.
//
// Children die with the process that started them: a probe process (spawn_probe.cpp)
// starts children the way dtr's tests and the REPL do and dies by SIGKILL; every child must
// be gone within kDeathLimit, checked from here. This process is the probe's children's
// subreaper (PR_SET_CHILD_SUBREAPER), so the orphans become its children: it reaps them as
// they die and kills what is left at the end.
//
// Thread safety: doctest runs the cases one at a time on the main thread.
#include <doctest/doctest.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "launcher/spawn.hpp"
#include "support/worker_process.hpp"

namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
using dtr::launcher::Child;
using dtr::launcher::Output;
using dtr::launcher::SpawnOptions;

// Everything readable from `fd` until EOF (bounded by `limit`).
std::string read_all(int fd, std::chrono::milliseconds limit = 10s) {
  std::string out;
  const auto deadline = Clock::now() + limit;
  char buf[256];
  while (Clock::now() < deadline) {
    const ssize_t n = read(fd, buf, sizeof buf);
    if (n > 0) {
      out.append(buf, static_cast<size_t>(n));
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    break;
  }
  return out;
}

constexpr auto kDeathLimit = 5s;

struct Orphan {
  std::string kind;
  pid_t pid = -1;
  std::string start;  // field 22 of /proc/PID/stat when the probe started it
};

// Runs the probe with `kinds`, waits for it to die, and returns the children it started.
std::vector<Orphan> run_probe(const std::vector<std::string>& kinds) {
  char dir[] = "/tmp/dtr-spawn-test-XXXXXX";
  REQUIRE(mkdtemp(dir) != nullptr);
  const std::string pid_file = std::string(dir) + "/pids";
  SpawnOptions options;
  options.argv = {DTR_SPAWN_PROBE, pid_file};
  options.argv.insert(options.argv.end(), kinds.begin(), kinds.end());
  Child probe = Child::spawn(options);
  const std::optional<int> status = probe.wait_for(60s);
  CHECK_MESSAGE((status && WIFSIGNALED(*status) && WTERMSIG(*status) == SIGKILL),
                "the probe did not die by SIGKILL (wait status ", status.value_or(-1), ")");
  std::vector<Orphan> orphans;
  std::ifstream in(pid_file);
  std::string line;
  bool ended = false;
  while (std::getline(in, line)) {
    if (line == "end") {
      ended = true;
      break;
    }
    std::istringstream fields(line);
    Orphan o;
    fields >> o.kind >> o.pid >> o.start;
    orphans.push_back(o);
  }
  CHECK_MESSAGE(ended, "the probe did not start all of ", kinds.size(), " children");
  std::remove(pid_file.c_str());
  rmdir(dir);
  return orphans;
}

// Whether `o` still runs: its pid is there with the same start time and is not a zombie.
bool alive(const Orphan& o) {
  int status = 0;
  waitpid(o.pid, &status, WNOHANG);  // reaps it when it became ours and died
  std::ifstream in("/proc/" + std::to_string(o.pid) + "/stat");
  std::string stat;
  if (!std::getline(in, stat)) return false;
  const size_t close = stat.rfind(')');
  if (close == std::string::npos) return false;
  std::istringstream rest(stat.substr(close + 1));
  std::string state, field;
  rest >> state;
  for (int i = 4; i <= 22 && rest >> field; ++i) {
  }
  return state != "Z" && state != "X" && field == o.start;
}

// The children of `kinds` that still run kDeathLimit after the probe died (killed then).
std::vector<std::string> survivors(const std::vector<std::string>& kinds) {
  REQUIRE(prctl(PR_SET_CHILD_SUBREAPER, 1) == 0);
  const std::vector<Orphan> orphans = run_probe(kinds);
  const auto deadline = Clock::now() + kDeathLimit;
  std::vector<std::string> left;
  for (const Orphan& o : orphans) {
    while (alive(o) && Clock::now() < deadline) std::this_thread::sleep_for(20ms);
    if (alive(o)) {
      left.push_back(o.kind + " (pid " + std::to_string(o.pid) + ")");
      kill(o.pid, SIGKILL);
      dtr::test::wait_or_kill(o.pid, std::chrono::milliseconds(5s));
    }
  }
  return left;
}

}  // namespace

TEST_CASE("spawn: a dtr-worker a test started dies with the test process") {
  for (const std::string& s : survivors({"worker"})) FAIL_CHECK((s + " outlived the probe"));
}

TEST_CASE("spawn: a rank a process-group test forked dies with the test process") {
  for (const std::string& s : survivors({"rank"})) FAIL_CHECK((s + " outlived the probe"));
}

TEST_CASE("spawn: the REPL's local workers die with the REPL") {
  for (const std::string& s : survivors({"local_workers"})) FAIL_CHECK((s + " outlived the probe"));
}

TEST_CASE("spawn: a program's arguments, added environment, output pipes and exit status") {
  SpawnOptions o;
  o.argv = {"sh", "-c", "echo \"$1 $DTR_SPAWN_TEST\"; echo to-stderr >&2; exit 3", "sh", "arg"};
  o.env = {"DTR_SPAWN_TEST=added"};
  o.stdout_to = o.stderr_to = Output::Pipe;
  o.stdin_from = dtr::launcher::Input::Null;
  Child c = Child::spawn(o);
  CHECK(c.pid() > 0);
  CHECK(read_all(c.stdout_fd()) == "arg added\n");
  CHECK(read_all(c.stderr_fd()) == "to-stderr\n");
  const std::optional<int> st = c.wait_for(10s);
  REQUIRE(st);
  CHECK(WIFEXITED(*st));
  CHECK(WEXITSTATUS(*st) == 3);
  CHECK_FALSE(c.running());
  CHECK(c.status() == st);
}

TEST_CASE("spawn: replace_env gives the child exactly the environment asked for") {
  SpawnOptions o;
  o.argv = {"/bin/sh", "-c", "echo \"${HOME-unset} $ONLY\""};
  o.env = {"ONLY=this"};
  o.replace_env = true;
  o.stdout_to = Output::Pipe;
  Child c = Child::spawn(o);
  CHECK(read_all(c.stdout_fd()) == "unset this\n");
  CHECK(c.wait_for(10s).has_value());
}

TEST_CASE("spawn: output to a file") {
  char dir[] = "/tmp/dtr-spawn-file-XXXXXX";
  REQUIRE(mkdtemp(dir) != nullptr);
  const std::string path = std::string(dir) + "/out";
  SpawnOptions o;
  o.argv = {"sh", "-c", "echo into-the-file"};
  o.stdout_to = Output::File;
  o.stdout_path = path;
  Child c = Child::spawn(o);
  REQUIRE(c.wait_for(10s).has_value());
  std::ifstream in(path);
  std::string line;
  CHECK(std::getline(in, line));
  CHECK(line == "into-the-file");
  std::remove(path.c_str());
  rmdir(dir);
}

TEST_CASE("spawn: a program that cannot be executed throws, naming it and exec's error") {
  SpawnOptions o;
  o.argv = {"/nonexistent/program", "x"};
  try {
    Child::spawn(o);
    FAIL("spawn did not throw");
  } catch (const dtr::launcher::ExecFailed& e) {
    CHECK(e.program() == "/nonexistent/program");
    CHECK(e.error() == ENOENT);
    CHECK(std::string(e.what()).find("cannot run '/nonexistent/program'") != std::string::npos);
  }
  o.argv = {"dtr-no-such-program-on-path"};
  CHECK_THROWS_AS(Child::spawn(o), dtr::InvalidArgument);
}

TEST_CASE("spawn: waits are bounded, and stop() escalates to SIGKILL after the grace period") {
  SpawnOptions o;
  o.argv = {"sh", "-c", "trap '' TERM; echo ready; while :; do sleep 0.05; done"};
  o.stdout_to = Output::Pipe;
  Child c = Child::spawn(o);
  char ready[6] = {};
  REQUIRE(read(c.stdout_fd(), ready, 6) == 6);  // the trap is set
  const auto t0 = Clock::now();
  CHECK_FALSE(c.wait_for(100ms).has_value());
  CHECK(c.running());
  CHECK(c.stop(SIGTERM, 200ms) == -1);  // it ignores SIGTERM: killed
  CHECK(Clock::now() - t0 < 8s);
  CHECK_FALSE(c.running());
}

TEST_CASE("spawn: a Child that goes out of scope kills its process") {
  pid_t pid = -1;
  {
    SpawnOptions o;
    o.argv = {"sleep", "30"};
    Child c = Child::spawn(o);
    pid = c.pid();
    CHECK(kill(pid, 0) == 0);
  }
  CHECK(kill(pid, 0) == -1);  // killed and reaped
}

TEST_CASE("spawn: fork_child runs a function and exits with its result") {
  Child c = dtr::launcher::fork_child([] { return 7; });
  const std::optional<int> st = c.wait_for(10s);
  REQUIRE(st);
  CHECK(WIFEXITED(*st));
  CHECK(WEXITSTATUS(*st) == 7);
  Child thrower = dtr::launcher::fork_child([]() -> int { throw std::runtime_error("thrown"); });
  const std::optional<int> st2 = thrower.wait_for(10s);
  REQUIRE(st2);
  CHECK(WEXITSTATUS(*st2) == 1);
}
