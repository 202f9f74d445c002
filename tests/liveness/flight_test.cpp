// The flight recorder when a worker stops (SIGSTOP): the other worker's recorder names its
// commands that wait on the stopped one (a cross-node event wait, a copy, a collective);
// when the master loses the stopped node, that worker dumps its recorder to its log, and
// the master's WorkerLost names the last commands each node reported
// (docs/observability.md).
#include <doctest/doctest.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>

#include "dtr/collectives.hpp"
#include "dtr/observability.hpp"
#include "dtr/stream.hpp"
#include "liveness/liveness_support.hpp"
#include "master/cluster.hpp"

namespace {

using namespace dtr;
using namespace dtr::test;
using Clock = std::chrono::steady_clock;

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// Polls `f` (a string) until it contains every one of `parts`, for at most `limit`; the
// last text.
template <typename F>
std::string until_contains(F&& f, std::initializer_list<std::string_view> parts,
                           std::chrono::milliseconds limit) {
  auto deadline = Clock::now() + limit;
  std::string text;
  while (true) {
    text = f();
    bool all = true;
    for (std::string_view p : parts) all = all && contains(text, p);
    if (all || Clock::now() >= deadline) return text;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

TEST_CASE("flight recorder: a stopped worker's peer names its waiting commands") {
  const std::string log =
      (std::filesystem::temp_directory_path() / ("dtr-flight-" + std::to_string(getpid()) + ".log"))
          .string();
  WorkerProcess w0({"--devices", "none"}, log);
  WorkerProcess w1({"--devices", "none"});
  MasterOptions o = test_options();
  o.workers = {w0.endpoint(), w1.endpoint()};
  o.heartbeat = kTimeout / 5;
  o.heartbeat_timeout = kTimeout;
  o.sync_timeout = std::chrono::seconds(60);
  init_master_worker(o);
  SessionGuard guard;
  DistributedTensor a = with_node(1, [] { return dtr::ones({8}); });
  DistributedTensor b = with_node(0, [] { return dtr::ones({8}); });
  std::vector<DistributedTensor> pair{b, a};
  all_reduce(pair);  // the session's process group is up
  synchronize();
  Stream waits = Stream::create(0), copies = Stream::create(0);
  Stopped stopped(w1.pid());
  // Node 0 waits on node 1 three ways: an event of node 1, a copy from it, a collective.
  Event on1;
  on1.record(default_stream(1));
  waits.wait(on1);
  DistributedTensor copy;
  {
    stream_guard on(copies);
    copy = a.to(0);
  }
  all_reduce(pair);
  const std::string wait_line =
      "wait_event on stream " + std::to_string(waits.id()) + ": waiting for token";
  const std::string copy_line = "recv_from_node out %" + std::to_string(copy.id()) + " on stream " +
                                std::to_string(copies.id()) + ": waiting for token";
  const std::string collective_line = "all_reduce in %";
  std::string report = until_contains([] { return flight_recorder(0); },
                                      {wait_line, copy_line, "waiting for the members of group 0"},
                                      std::chrono::seconds(5));
  INFO(report);
  CHECK(contains(report, wait_line));
  CHECK(contains(report, copy_line));
  CHECK(contains(report, "from node 1"));
  CHECK(contains(report, collective_line));
  CHECK(contains(report, "waiting for the members of group 0"));

  // Node 1 is lost after the heartbeat timeout: the error names what node 0 reported.
  std::string lost = message_of<WorkerLost>([] { synchronize(1); });
  INFO(lost);
  CHECK(contains(lost, "node 1"));
  CHECK(contains(lost, "last commands each node reported"));
  CHECK(contains(lost, "recv_from_node"));
  CHECK(contains(lost, "node 1 (" + w1.endpoint() + "): lost"));
  // The collective node 0 was stuck in failed; its error names what each node reported.
  std::string stuck = message_of<RemoteError>([&] { (void)pair[0].to_local(); });
  INFO(stuck);
  CHECK(contains(stuck, "all_reduce failed on node 0"));
  CHECK(contains(stuck, "last commands each node reported"));
  // Node 0 dumped its recorder to its log when it learnt of the loss, naming the waits.
  std::string text = until_contains([&] { return read_file(log); },
                                    {"flight recorder (node 1 was lost", "recv_from_node"},
                                    std::chrono::seconds(5));
  CHECK(contains(text, "flight recorder (node 1 was lost"));
  CHECK(contains(text, copy_line));
  std::filesystem::remove(log);
}

size_t count_of(const std::string& text, std::string_view what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

TEST_CASE("flight recorder: collectives queued when the session ends do not each dump it") {
  // Seen from dtr-repl/Python: a master interrupted with 100 all_reduces queued left each
  // worker's log with one flight-recorder dump (about 90 lines) per queued collective.
  const auto dir = std::filesystem::temp_directory_path();
  const std::string log0 =
      (dir / ("dtr-flight-end0-" + std::to_string(getpid()) + ".log")).string();
  const std::string log1 =
      (dir / ("dtr-flight-end1-" + std::to_string(getpid()) + ".log")).string();
  {
    WorkerProcess w0({"--devices", "none", "--log-level", "info"}, log0);
    WorkerProcess w1({"--devices", "none", "--log-level", "info"}, log1);
    MasterOptions o = test_options();
    o.workers = {w0.endpoint(), w1.endpoint()};
    init_master_worker(o);
    std::vector<DistributedTensor> pair{with_node(0, [] { return dtr::ones({4 << 20}); }),
                                        with_node(1, [] { return dtr::ones({4 << 20}); })};
    all_reduce(pair);
    synchronize();  // the group is up; what follows is queued behind one another
    for (int i = 0; i < 40; ++i) all_reduce(pair);
    end_session();
    for (const std::string& log : {log0, log1}) {
      const std::string text = until_contains([&] { return read_file(log); }, {"session ended"},
                                              std::chrono::seconds(20));
      INFO(text.substr(0, 4000));
      CHECK(contains(text, "session ended (master"));  // clean: no "the session ended: ..."
      CHECK(count_of(text, "flight recorder (") == 0);
    }
  }
  std::filesystem::remove(log0);
  std::filesystem::remove(log1);
}

}  // namespace
