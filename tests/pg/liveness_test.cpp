// Liveness on the library backends: a rank that dies or stops is detected within the group's
// timeout. gloo: a killed rank's connections close, so the others fail at once; a stopped
// rank is caught by the timeout. mpi: a stopped rank is caught by the timeout (a killed rank
// ends the whole job: Open MPI's launcher does that by design, tests/pg/mpi_killed_rank_test.sh).
// zmq's own cases (heartbeats, connection monitors) are in failure_test.cpp.
#include <doctest/doctest.h>
#include <signal.h>

#include "pg_test_util.hpp"

using namespace dtr;
using namespace dtr::pgtest;

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

}  // namespace

TEST_CASE("liveness: a killed rank (SIGKILL) fails the others at once [gloo]") {
  if (skip_backend(kGlooCase)) return;
  const std::string file = "/tmp/dtr-pg-gloo-kill-" + std::to_string(getpid());
  ::unlink(file.c_str());
  auto codes = fork_ranks(
      3,
      [&](int i) {
        ProcessGroupOptions o;
        o.backend = "gloo";
        o.timeout = std::chrono::seconds(100);  // past the test's limit: only detection ends it
        o.bind_address = "127.0.0.1";
        ProcessGroup g = ProcessGroup::create(make_file_store(file), i, 3, o);
        g.barrier();
        if (i == 2) ::raise(SIGKILL);
        const auto start = Clock::now();
        try {
          for (int k = 0; k < 1000000; ++k) {
            auto big = local::ones(Shape{100000});
            g.all_reduce(big);
          }
        } catch (const TransportError& e) {
          if (seconds_since(start) > 30) {
            std::fprintf(stderr, "child %d: detected late: %s\n", i, e.what());
            return 3;
          }
          // gloo's socket error alone names an address; the message says what it means.
          if (std::string(e.what()).find("a member of the group closed its connection") ==
              std::string::npos) {
            std::fprintf(stderr, "child %d: the cause is not named: %s\n", i, e.what());
            return 5;
          }
          return 0;
        }
        return 4;
      },
      std::chrono::seconds(60));
  ::unlink(file.c_str());
  CHECK(codes[0] == 0);
  CHECK(codes[1] == 0);
  CHECK(codes[2] == -1);  // killed
}

TEST_CASE("liveness: a stopped rank (SIGSTOP) is detected by the group's timeout [gloo]") {
  if (skip_backend(kGlooCase)) return;
  const int port = test::free_port();
  ProcessGroupOptions o;
  o.backend = "gloo";
  o.timeout = std::chrono::milliseconds(1000);
  const pid_t stopped = fork_rank_that_stops(port, o);
  std::string message;
  double took = 0;
  {
    ProcessGroup g = ProcessGroup::create(make_tcp_store("127.0.0.1", port, true), 0, 2, o);
    g.barrier();
    auto t = local::zeros(Shape{4});
    const auto start = Clock::now();
    try {
      g.all_reduce(t);
    } catch (const TimeoutError& e) {
      message = e.what();
    }
    took = seconds_since(start);
  }
  ::kill(stopped, SIGKILL);
  test::wait_or_kill(stopped, std::chrono::seconds(10));
  CHECK(message.find("all_reduce") != std::string::npos);
  CHECK(took < 30);
}

// Rank 1 stops right after a barrier; rank 0's all_reduce fails at the group's timeout and
// then lets rank 1 go on, whose all_reduce completes the one MPI kept pending on rank 0 (no
// signature check, so that the two calls match), and the job ends cleanly.
TEST_CASE("liveness: a stopped rank (SIGSTOP) is detected by the group's timeout [mpi]") {
  ProcessGroupOptions o = fast_options(std::chrono::milliseconds(1000));
  o.verify_collectives = false;
  check_no_errors(run_ranks(
      kMpiCase, 2,
      [&](ProcessGroup& g) {
        auto pids = local::zeros(Shape{2}, DType::Int64);
        g.all_gather_into_tensor(pids, local::full(Shape{1}, ::getpid(), DType::Int64));
        auto t = local::ones(Shape{4});
        g.barrier();
        if (g.rank() == 1) {
          ::raise(SIGSTOP);
          g.all_reduce(t);
          return;
        }
        const auto start = Clock::now();
        try {
          g.all_reduce(t);
          throw Error("no timeout");
        } catch (const TimeoutError& e) {
          if (std::string(e.what()).find("all_reduce") == std::string::npos) throw;
        }
        const double took = seconds_since(start);
        ::kill(static_cast<pid_t>(pids.to_vector<int64_t>()[1]), SIGCONT);
        if (took > 30) throw Error("detected after " + std::to_string(took) + " s");
      },
      o));
}

// Run by tests/pg/mpi_killed_rank_test.sh only (it ends the job): rank 1 is killed while
// rank 0 waits in an all_reduce whose own timeout (100 s) is far away. Open MPI's launcher
// ends the job at once; the script checks that it did, and how fast.
TEST_CASE("mpi killed rank: the launcher ends the job [mpi]") {
  if (std::getenv("DTR_PG_MPI_KILL_TEST") == nullptr) {
    std::printf("SKIPPED: run by tests/pg/mpi_killed_rank_test.sh\n");
    return;
  }
  check_no_errors(run_ranks(
      kMpiCase, 2,
      [&](ProcessGroup& g) {
        g.barrier();
        if (g.rank() == 1) ::raise(SIGKILL);
        auto t = local::ones(Shape{4});
        g.all_reduce(t);
      },
      fast_options(std::chrono::seconds(100))));
}
