// dtr_spawn_probe: a test process that starts children the way dtr's tests and tools do,
// writes their pids to a file, and dies by SIGKILL without stopping them
// (tests/launcher/spawn_test.cpp checks from outside that they die with it).
//
//   dtr_spawn_probe PID_FILE KIND...
//
// KIND: `worker`, a dtr-worker as the master, worker and REPL tests start one
// (tests/support/worker_process.hpp); `rank`, a forked rank as the process-group tests fork
// one (tests/pg/pg_test_util.hpp), which sleeps as a rank blocked in a collective would;
// `local_workers`, the REPL's own dtr-worker (repl/local_workers.hpp). PID_FILE gets a line
// "KIND PID START" per child (START: field 22 of /proc/PID/stat, so that a reused pid is
// not taken for the child), then "end".
//
// Thread safety: single-threaded but for the thread that forks the rank.
//
// doctest's implementation is compiled in (tests/pg/pg_test_util.hpp uses its macros); the
// probe has its own main and runs no test case.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <iostream>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "pg/pg_test_util.hpp"
#include "repl/local_workers.hpp"
#include "support/worker_process.hpp"

namespace {

// Field 22 of /proc/PID/stat (the start time in clock ticks), "" when the process is gone.
std::string start_time(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string stat;
  if (!std::getline(in, stat)) return "";
  // The command name (field 2) is in parentheses and may hold spaces: count from its end.
  const size_t close = stat.rfind(')');
  if (close == std::string::npos) return "";
  std::istringstream rest(stat.substr(close + 1));
  std::string field;
  for (int i = 3; i <= 22 && rest >> field; ++i) {
  }
  return field;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::cerr << "usage: dtr_spawn_probe PID_FILE KIND...\n";
    return 2;
  }
  std::ofstream out(argv[1]);
  auto note = [&](const std::string& kind, pid_t pid) {
    out << kind << ' ' << pid << ' ' << start_time(pid) << '\n';
    out.flush();
  };
  // What the probe started; never destroyed: the probe dies holding them.
  std::vector<std::unique_ptr<dtr::test::WorkerProcess>> workers;
  std::vector<std::unique_ptr<dtr::repl::LocalWorkers>> local;
  for (int i = 2; i < argc; ++i) {
    const std::string kind = argv[i];
    if (kind == "worker") {
      workers.push_back(std::make_unique<dtr::test::WorkerProcess>());
      note(kind, workers.back()->pid());
    } else if (kind == "rank") {
      // fork_ranks waits for its ranks: it runs on a thread of its own, which lives until
      // the probe dies; the rank reports its pid through a pipe.
      int fds[2];
      if (pipe(fds) != 0) return 3;
      std::thread([fds] {
        dtr::pgtest::fork_ranks(1, [fds](int) {
          const pid_t self = getpid();
          if (write(fds[1], &self, sizeof self) != sizeof self) return 1;
          sleep(60);
          return 0;
        });
      }).detach();
      pid_t rank = -1;
      if (read(fds[0], &rank, sizeof rank) != sizeof rank) return 3;
      note(kind, rank);
    } else if (kind == "local_workers") {
      local.push_back(
          std::make_unique<dtr::repl::LocalWorkers>(1, dtr::test::worker_binary(), "warn"));
      note(kind, local.back()->pids().at(0));
    } else {
      std::cerr << "dtr_spawn_probe: unknown kind " << kind << "\n";
      return 2;
    }
  }
  out << "end\n";
  out.close();
  raise(SIGKILL);
  return 4;
}
