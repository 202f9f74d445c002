// Session lifecycle against real worker processes: a worker that starts after the master,
// a master that dies without saying goodbye, a second master while one is served, listen
// mode (workers dial the master), and a worker killed mid-session.
#include <arpa/inet.h>
#include <doctest/doctest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <future>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "dtr/stream.hpp"
#include "launcher/spawn.hpp"
#include "master/cluster.hpp"
#include "master/session.hpp"

namespace {

using namespace dtr;
using namespace dtr::test;
using dtr::local::Tensor;
using Clock = std::chrono::steady_clock;

std::string local_endpoint(int port) {
  return "tcp://127.0.0.1:" + std::to_string(port);
}

// The session's I/O held for four heartbeat timeouts (500 ms): its two nodes still serve.
void check_session_outlives_held_io() {
  DistributedTensor x = dtr::ones({4});
  synchronize();
  detail::current_session("test")->hold_io_for_test(2000ms);
  CHECK_NOTHROW(synchronize());
  CHECK(x.sum().item<float>() == 4.0f);
  CHECK(with_node(1, [] { return dtr::ones({2}).sum().item<float>(); }) == 2.0f);
}

// Listen mode: starts a session with `o` on a free local port and `n` workers dialing it
// (as dtr-exec's jobs do). The caller's SessionGuard, made before this call, ends it.
std::vector<WorkerProcess> start_listening(MasterOptions o, int n) {
  const std::string endpoint = local_endpoint(free_port());
  o.listen = endpoint;
  o.num_workers = n;
  auto init = std::async(std::launch::async, [o] { init_master_worker(o); });
  std::vector<WorkerProcess> workers;
  workers.reserve(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i)
    workers.push_back(WorkerProcess::with_args({"--master", endpoint, "--log-level", "warn"}));
  REQUIRE(init.wait_for(15s) == std::future_status::ready);
  REQUIRE_NOTHROW(init.get());
  return workers;
}

// Waits (bounded) for a worker process to exit by itself, without reaping it (the
// WorkerProcess still owns it). Returns its exit code, or nullopt while it runs.
std::optional<int> wait_exit(const WorkerProcess& w, std::chrono::milliseconds limit) {
  auto deadline = Clock::now() + limit;
  while (true) {
    siginfo_t info{};
    if (waitid(P_PID, static_cast<id_t>(w.pid()), &info, WEXITED | WNOHANG | WNOWAIT) == 0 &&
        info.si_pid == w.pid())
      return info.si_code == CLD_EXITED ? info.si_status : 128 + info.si_status;
    if (Clock::now() >= deadline) return std::nullopt;
    std::this_thread::sleep_for(10ms);
  }
}

// The pid in a NodeInfo::worker of the form "host:pid".
int pid_of(const NodeInfo& info) {
  return std::atoi(info.worker.substr(info.worker.rfind(':') + 1).c_str());
}

// A pipe whose ends close on destruction (so that a child blocked on it is released).
struct Pipe {
  int fd[2] = {-1, -1};
  Pipe() { REQUIRE(pipe(fd) == 0); }
  ~Pipe() {
    close_read();
    close_write();
  }
  void close_read() {
    if (fd[0] >= 0) close(fd[0]);
    fd[0] = -1;
  }
  void close_write() {
    if (fd[1] >= 0) close(fd[1]);
    fd[1] = -1;
  }
};

// In a forked child: write `text` to `fd` and leave at once (no destructors, no atexit).
[[noreturn]] void child_exit(int fd, int code, const std::string& text) {
  if (fd >= 0 && !text.empty()) {
    [[maybe_unused]] ssize_t n = write(fd, text.data(), text.size());
  }
  _exit(code);
}

std::string read_all(int fd) {
  std::string out;
  char buf[512];
  ssize_t n;
  while ((n = read(fd, buf, sizeof buf)) > 0) out.append(buf, static_cast<size_t>(n));
  return out;
}

}  // namespace

TEST_CASE("a worker started after the master is waited for") {
  std::string endpoint = local_endpoint(free_port());
  std::optional<WorkerProcess> worker;
  SessionGuard guard;  // destroyed first: the session ends before the worker stops
  MasterOptions o = test_options();
  o.workers = {endpoint};
  auto init = std::async(std::launch::async, [o] { init_master_worker(o); });
  std::this_thread::sleep_for(300ms);
  CHECK(init.wait_for(0ms) == std::future_status::timeout);  // still waiting for it
  worker.emplace(WorkerProcess::with_args({"--listen", endpoint, "--log-level", "warn"}));
  REQUIRE(init.wait_for(15s) == std::future_status::ready);
  REQUIRE_NOTHROW(init.get());
  CHECK(node_count() == 1);
  CHECK(pid_of(node_info(0)) == worker->pid());
  DistributedTensor x = dtr::arange(6).view({2, 3});
  check_same(x.sum(1), local::arange(6).view({2, 3}).sum(1));
  CHECK_NOTHROW(synchronize());
}

TEST_CASE("a port nobody listens on is reported as refused within seconds") {
  SessionGuard guard;
  MasterOptions o = test_options();
  o.connect_timeout = 60s;
  std::string endpoint = local_endpoint(free_port());
  o.workers = {endpoint};
  auto t0 = std::chrono::steady_clock::now();
  std::string why = message_of<TransportError>([&] { init_master_worker(o); });
  auto took = std::chrono::steady_clock::now() - t0;
  CHECK_MESSAGE((contains(why, endpoint) && contains(why, "refused")), why);
  CHECK(took < 15s);  // about 3 s, not the 60 s connect timeout
  CHECK_FALSE(is_master_worker_initialized());
}

TEST_CASE("worker endpoints are trimmed and checked before anything is sent") {
  WorkerProcess worker;
  SUBCASE("DTR_WORKERS with spaces around the commas") {
    SessionGuard guard;
    ScopedEnv w("DTR_WORKERS", " " + worker.endpoint() + " , ");
    ScopedEnv c("DTR_CONNECT_TIMEOUT_MS", "10000");
    REQUIRE_NOTHROW(init_master_worker());
    CHECK(node_count() == 1);
  }
  SUBCASE("malformed endpoints say what was expected") {
    const std::pair<std::string, std::string> cases[] = {
        {"127.0.0.1:5555", "write tcp://"},       {"tcp://127.0.0.1", "no port"},
        {"tcp://127.0.0.1:http", "not a number"}, {"tcp://127.0.0.1:70000", "not 1 to 65535"},
        {"tcp://*:5555", "for listening"},        {"udp://127.0.0.1:5555", "unknown transport"}};
    for (const auto& [endpoint_, why] : cases) {
      const std::string& endpoint = endpoint_;  // captured below (clang 14: not a binding)
      CAPTURE(endpoint);
      MasterOptions o = test_options();
      o.workers = {worker.endpoint(), endpoint};
      std::string m = message_of<InvalidArgument>([&] { init_master_worker(o); });
      CHECK_MESSAGE((contains(m, "expected tcp://HOST:PORT or ipc://PATH") &&
                     contains(m, endpoint) && contains(m, why) && contains(m, "2 of 2")),
                    m);
      CHECK_FALSE(is_master_worker_initialized());
    }
  }
}

TEST_CASE("a master gone without cleanup leaves the worker ready for the next one") {
  WorkerProcess worker;
  Pipe report;
  // Dies with this process (launcher/spawn.hpp): a crashed test leaves no master behind.
  launcher::Child forked = launcher::fork_child([&]() -> int {
    // The first master: makes tensors, then exits without shutdown or frees.
    report.close_read();
    try {
      MasterOptions o = test_options();
      o.workers = {worker.endpoint()};
      init_master_worker(o);
      DistributedTensor a = dtr::ones({1000});
      DistributedTensor b = dtr::arange(100);
      DistributedTensor c = a * 2;
      int64_t live = memory_stats(0).live_tensors;
      if (live != 3) child_exit(report.fd[1], 3, "live tensors: " + std::to_string(live));
      child_exit(report.fd[1], 0, "");
    } catch (const std::exception& e) {
      child_exit(report.fd[1], 2, e.what());
    }
    return 1;
  });
  const pid_t child = forked.release();  // reaped below
  report.close_write();
  int status = dtr::test::wait_or_kill(child, 20s);
  std::string said = read_all(report.fd[0]);
  INFO("first master: ", said);
  REQUIRE(status != -1);
  REQUIRE(WIFEXITED(status));
  REQUIRE(WEXITSTATUS(status) == 0);

  SessionGuard guard;
  MasterOptions o = test_options();
  o.workers = {worker.endpoint()};
  auto t0 = Clock::now();
  REQUIRE_NOTHROW(init_master_worker(o));  // retries while the worker still says busy
  MESSAGE("second master accepted after ",
          std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t0).count(), " ms");
  CHECK(pid_of(node_info(0)) == worker.pid());
  NodeMemoryStats s = memory_stats(0);
  CHECK(s.live_tensors == 0);  // the old session's tensors were freed
  check_same(dtr::arange(4) * 3, local::arange(0, 12, 3));
  CHECK(memory_stats(0).live_tensors == 0);
}

TEST_CASE(
    "a frozen master (connection open, no heartbeats) loses its session; the next master "
    "is served") {
  // A master process stopped with SIGSTOP keeps its TCP connection but sends nothing: the
  // worker must give up on it after the heartbeat timeout (2.5 s), free its tensors and
  // serve the next master.
  WorkerProcess worker;
  // Dies with this process (launcher/spawn.hpp): a crashed test leaves no master behind.
  launcher::Child forked = launcher::fork_child([&]() -> int {
    try {
      MasterOptions fo = test_options();
      fo.workers = {worker.endpoint()};
      init_master_worker(fo);
      DistributedTensor big = dtr::ones({1 << 20});
      synchronize();
      raise(SIGSTOP);
      // Resumed after the worker gave up on it: the worker's goodbye says why.
      try {
        (void)big.sum().item<float>();
        _exit(3);
      } catch (const WorkerLost& e) {
        std::string why = e.what();
        bool named =
            why.find("ended the session: master silent for more than") != std::string::npos;
        if (!named) std::fprintf(stderr, "child: WorkerLost says: %s\n", why.c_str());
        _exit(named ? 0 : 4);
      }
    } catch (const std::exception& e) {
      std::fprintf(stderr, "child: %s\n", e.what());
      _exit(2);
    }
    return 1;
  });
  const pid_t frozen = forked.release();  // reaped below
  // Wait (bounded) until the child has stopped itself.
  int st = 0;
  bool stopped = false;
  for (auto deadline = Clock::now() + 20s; Clock::now() < deadline;) {
    pid_t r = waitpid(frozen, &st, WUNTRACED | WNOHANG);
    if (r == frozen) {
      stopped = WIFSTOPPED(st);
      break;
    }
    std::this_thread::sleep_for(10ms);
  }
  if (!stopped) kill(frozen, SIGKILL);
  REQUIRE(stopped);
  auto t0 = Clock::now();
  SessionGuard guard;
  MasterOptions next = test_options();
  next.workers = {worker.endpoint()};
  REQUIRE_NOTHROW(init_master_worker(next));  // "busy" until the worker gives up
  auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t0).count();
  MESSAGE("next master accepted ", ms, " ms after the first one froze");
  CHECK(ms <= 5000);
  CHECK(memory_stats(0).live_tensors == 0);
  // The frozen master, resumed, is told its session was dropped and why.
  kill(frozen, SIGCONT);
  int status = dtr::test::wait_or_kill(frozen, 20s);
  REQUIRE(status != -1);
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
}

TEST_CASE(
    "heartbeats go on while the master's I/O is held for four heartbeat timeouts (connect "
    "mode)") {
  // A requester handling a GiB-sized reply holds the session's I/O; the heartbeats go out
  // and are read on a thread of their own, so neither side takes the other for silent.
  MasterOptions o = test_options();
  o.heartbeat = 100ms;
  o.heartbeat_timeout = 500ms;
  Cluster c(2, o);
  check_session_outlives_held_io();
}

TEST_CASE("a second live master is refused as busy") {
  WorkerProcess worker;
  Pipe go;      // parent -> child: the parent holds the session now
  Pipe report;  // child -> parent: what init_master_worker said
  // Dies with this process (launcher/spawn.hpp): a crashed test leaves no master behind.
  launcher::Child forked = launcher::fork_child([&]() -> int {
    go.close_write();
    report.close_read();
    char c = 0;
    if (read(go.fd[0], &c, 1) != 1) child_exit(report.fd[1], 4, "parent did not signal");
    MasterOptions o;
    o.workers = {worker.endpoint()};
    o.connect_timeout = 1s;
    o.sync_timeout = 5s;
    try {
      init_master_worker(o);
      child_exit(report.fd[1], 2, "init_master_worker succeeded");
    } catch (const TransportError& e) {
      child_exit(report.fd[1], contains(e.what(), "busy") ? 0 : 1, e.what());
    } catch (const std::exception& e) {
      child_exit(report.fd[1], 3, std::string("other exception: ") + e.what());
    }
    return 1;
  });
  const pid_t child = forked.release();  // reaped below
  go.close_read();
  report.close_write();

  SessionGuard guard;
  MasterOptions o = test_options();
  o.workers = {worker.endpoint()};
  init_master_worker(o);
  DistributedTensor x = dtr::full({3}, 5);
  synchronize();
  REQUIRE(write(go.fd[1], "g", 1) == 1);
  go.close_write();
  int status = dtr::test::wait_or_kill(child, 20s);
  std::string said = read_all(report.fd[0]);
  INFO("second master: ", said);
  REQUIRE(status != -1);
  REQUIRE(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
  CHECK(contains(said, "busy"));
  // The first master's session is untouched.
  check_same(x + 1, local::full({3}, 6));
  CHECK(memory_stats(0).live_tensors == 1);
}

TEST_CASE("listen mode: workers dial the master and exit after it shuts down") {
  std::string endpoint = local_endpoint(free_port());
  std::vector<WorkerProcess> workers;
  workers.reserve(2);
  SessionGuard guard;
  MasterOptions o = test_options();
  o.listen = endpoint;
  o.num_workers = 2;
  auto init = std::async(std::launch::async, [o] { init_master_worker(o); });
  std::this_thread::sleep_for(100ms);
  for (int i = 0; i < 2; ++i)
    workers.push_back(WorkerProcess::with_args({"--master", endpoint, "--log-level", "warn"}));
  REQUIRE(init.wait_for(15s) == std::future_status::ready);
  REQUIRE_NOTHROW(init.get());
  REQUIRE(node_count() == 2);

  std::set<int> pids{workers[0].pid(), workers[1].pid()};
  std::set<int> seen{pid_of(node_info(0)), pid_of(node_info(1))};
  CHECK(seen == pids);

  std::vector<DistributedTensor> xs;
  for (int k = 0; k < 2; ++k) {
    node_guard on(k);
    xs.push_back(dtr::arange(10).to(DType::Float64) * (k + 1));
    CHECK(xs.back().get_node() == k);
  }
  for (int k = 0; k < 2; ++k) {
    check_same(xs[static_cast<size_t>(k)].sum(), local::full({}, 45.0 * (k + 1), DType::Float64));
    check_same(dist_send(local::ones({3}), k) + 1, local::full({3}, 2));
    CHECK(memory_stats(k).live_tensors == 1);
  }
  CHECK_NOTHROW(synchronize());
  xs.clear();

  // Workers that dialed the master reach each other on the peer sockets they bound: a
  // stream of node 1 waits for an event of node 0, which is busy first.
  DistributedTensor m = dtr::rand({256, 256});
  Event e0;
  for (int i = 0; i < 6; ++i) m.matmul(m);
  e0.record();
  Event e1;
  {
    node_guard on(1);
    current_stream().wait(e0);
    e1.record();
  }
  e1.synchronize();
  CHECK(e0.query());
  m = DistributedTensor();

  end_session();
  for (auto& w : workers) {
    std::optional<int> code = wait_exit(w, 5s);
    CHECK_MESSAGE(code.has_value(), "worker ", w.pid(), " still runs 5 s after the shutdown");
    if (code) CHECK(*code == 0);
  }
}

TEST_CASE("listen mode: a master that gives up waiting for workers tells the ones that came") {
  const std::string endpoint = local_endpoint(free_port());
  const std::string log =
      (std::filesystem::temp_directory_path() / ("dtr-gaveup-" + std::to_string(getpid()) + ".log"))
          .string();
  MasterOptions o = test_options();
  o.listen = endpoint;
  o.num_workers = 2;
  o.connect_timeout = 1500ms;
  auto init = std::async(std::launch::async, [o] { init_master_worker(o); });
  std::this_thread::sleep_for(100ms);
  WorkerProcess w = WorkerProcess::with_args({"--master", endpoint, "--log-level", "info"}, log);
  REQUIRE(init.wait_for(15s) == std::future_status::ready);
  CHECK_THROWS_WITH_AS(init.get(), doctest::Contains("only 1 of 2 workers connected"),
                       TimeoutError);
  std::optional<int> code = wait_exit(w, 10s);
  std::ifstream in(log);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  INFO(text);
  CHECK(code.has_value());
  // Not "master went away" with a flight-recorder dump: the master's own reason.
  CHECK(text.find("session ended: the master gave up: only 1 of 2 workers connected") !=
        std::string::npos);
  CHECK(text.find("flight recorder") == std::string::npos);
  std::filesystem::remove(log);
}

TEST_CASE("a worker killed mid-session is WorkerLost on its node while other nodes keep working") {
  // The sync timeout stays long: only the heartbeats can tell the master in time.
  MasterOptions o = test_options();
  o.sync_timeout = 60s;
  Cluster cluster(2, o);
  DistributedTensor x0 = dtr::ones({4});
  DistributedTensor x1 = with_node(1, [] { return dtr::ones({4}); });
  synchronize();
  CHECK(cluster.worker(1).stop(SIGKILL, 5s) != -1);

  x1.add_(1);  // queued; nothing can fail at the call
  auto sync_outcome = [](auto&& fn) {
    auto t0 = Clock::now();
    std::string what;
    try {
      fn();
      what = "no exception";
    } catch (const WorkerLost& e) {
      what = std::string("WorkerLost: ") + e.what();
    } catch (const std::exception& e) {
      what = std::string("other: ") + e.what();
    }
    auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t0).count();
    MESSAGE("after SIGKILL: ", what, " (", ms, " ms)");
    CHECK(what.rfind("WorkerLost", 0) == 0);
    CHECK(ms <= 3000 + 1500);  // the heartbeat timeout is 2.5 s
    CHECK(contains(what, "node 1"));
  };
  sync_outcome([&] { (void)x1.to_local(); });
  sync_outcome([] { synchronize(1); });
  // Using the node again fails at the call.
  CHECK(contains(message_of<WorkerLost>([&] { x1.add_(1); }), "is lost"));
  CHECK(contains(message_of<WorkerLost>([] { with_node(1, [] { return dtr::zeros({1}); }); }),
                 "node 1"));

  // Node 0 is unaffected.
  check_same(x0 + 1, local::full({4}, 2));
  CHECK_NOTHROW(synchronize(0));
  CHECK(memory_stats(0).live_tensors == 1);
}

TEST_CASE(
    "listen mode: heartbeats go on while the master's I/O is held for four heartbeat "
    "timeouts") {
  // The topology of dtr-exec's and mpirun's jobs: the workers dial the master. The master's
  // heartbeats go out from a thread of their own through its one socket, and a worker's
  // from a thread of its own on its heartbeat connection: neither side takes the other
  // for silent while the master's I/O is held (as by a requester handling a GiB-sized
  // reply). When the I/O owner sent them, the workers ended the session ("master silent
  // for more than 500 ms").
  std::vector<WorkerProcess> workers;
  SessionGuard guard;
  MasterOptions o = test_options();
  o.heartbeat = 100ms;
  o.heartbeat_timeout = 500ms;
  workers = start_listening(o, 2);
  check_session_outlives_held_io();
}

TEST_CASE("listen mode: a worker killed mid-session fails the syncs of its node") {
  std::vector<WorkerProcess> workers;
  SessionGuard guard;
  MasterOptions o = test_options();
  o.sync_timeout = 60s;
  workers = start_listening(o, 2);
  // Nodes are numbered in order of arrival: find the one to kill.
  int victim_node = pid_of(node_info(0)) == workers[1].pid() ? 0 : 1;
  int other_node = 1 - victim_node;
  DistributedTensor xv = with_node(victim_node, [] { return dtr::ones({4}); });
  DistributedTensor xo = with_node(other_node, [] { return dtr::ones({4}); });
  synchronize();
  CHECK(workers[1].stop(SIGKILL, 5s) != -1);
  std::this_thread::sleep_for(100ms);  // let the master's socket see the disconnect

  // Queued, or refused at the call when the master has already declared the node lost
  // (the closed connection can be seen within those 100 ms): either way a WorkerLost.
  try {
    xv.add_(1);
  } catch (const WorkerLost& e) {
    CHECK(contains(e.what(), "is lost"));
  }
  for (int attempt = 0; attempt < 2; ++attempt) {
    auto t0 = Clock::now();
    std::string what;
    try {
      (void)xv.to_local();
      what = "no exception";
    } catch (const WorkerLost& e) {
      what = std::string("WorkerLost: ") + e.what();
    } catch (const std::exception& e) {
      what = std::string("other: ") + e.what();
    }
    auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t0).count();
    MESSAGE("listen mode, after SIGKILL: ", what, " (", ms, " ms)");
    CHECK(what.rfind("WorkerLost", 0) == 0);
    CHECK(ms <= 3000 + 1500);
  }
  check_same(xo * 3, local::full({4}, 3));
  CHECK_NOTHROW(synchronize(other_node));
}

// Issue 40, item 7: the same worker listed twice waited out the connect timeout (60 s) and
// then called it busy serving the caller's own process.
TEST_CASE("the same worker given twice is refused at once, by name or by another address") {
  WorkerProcess worker;
  MasterOptions o = test_options();
  o.connect_timeout = 60s;
  SUBCASE("the same endpoint twice") {
    o.workers = {worker.endpoint(), worker.endpoint()};
    std::string why = message_of<InvalidArgument>([&] { init_master_worker(o); });
    CHECK_MESSAGE((contains(why, "listed twice") && contains(why, worker.endpoint()) &&
                   contains(why, "1 and 2 of 2")),
                  why);
  }
  SUBCASE("the same worker under another address") {
    std::string other = worker.endpoint();
    other.replace(other.find("127.0.0.1"), 9, "localhost");
    o.workers = {worker.endpoint(), other};
    auto t0 = Clock::now();
    std::string why = message_of<InvalidArgument>([&] { init_master_worker(o); });
    CHECK(Clock::now() - t0 < 15s);  // at the first refusal, not the 60 s timeout
    // Both HELLOs go out at once: whichever the worker takes second is the one refused and
    // named (the test named `other` only, and failed when 127.0.0.1's came second).
    CHECK_MESSAGE(((contains(why, other) || contains(why, worker.endpoint())) &&
                   contains(why, "already serves this session")),
                  why);
  }
  CHECK_FALSE(is_master_worker_initialized());
  // The worker is free for the next master.
  SessionGuard guard;
  o.workers = {worker.endpoint()};
  init_master_worker(o);
  check_same(dtr::full({2}, 3), local::full({2}, 3));
}

// A TCP service that is not ZeroMQ: says `banner` to each connection (nothing when empty)
// and keeps it open until the test ends.
class FakeService {
 public:
  explicit FakeService(std::string banner) : banner_(std::move(banner)) {
    fd_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    REQUIRE(fd_ >= 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    REQUIRE(bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
    socklen_t len = sizeof a;
    REQUIRE(getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len) == 0);
    port_ = ntohs(a.sin_port);
    REQUIRE(listen(fd_, 16) == 0);
    thread_ = std::thread([this] {
      while (!stop_) {
        pollfd p{fd_, POLLIN, 0};
        if (poll(&p, 1, 50) != 1) continue;
        int c = accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC);
        if (c < 0) continue;
        if (!banner_.empty()) (void)!write(c, banner_.data(), banner_.size());
        clients_.push_back(c);
      }
    });
  }
  ~FakeService() {
    stop_ = true;
    thread_.join();
    for (int c : clients_) close(c);
    close(fd_);
  }
  std::string endpoint() const { return local_endpoint(port_); }

 private:
  std::string banner_;
  int fd_ = -1;
  int port_ = 0;
  std::atomic<bool> stop_{false};
  std::vector<int> clients_;
  std::thread thread_;
};

// Issue 40, item 7: a master pointed at a service that is not a dtr-worker took 30 s (ZeroMQ's
// handshake limit) and then blamed CURVE.
TEST_CASE("a service that is not ZeroMQ is named as such within seconds, not as a key problem") {
  SUBCASE("one that greets with its own banner") {
    FakeService ssh("SSH-2.0-OpenSSH_9.2p1 Debian\r\n");
    MasterOptions o = test_options();
    o.connect_timeout = 60s;
    o.workers = {ssh.endpoint()};
    auto t0 = Clock::now();
    std::string why = message_of<TransportError>([&] { init_master_worker(o); });
    CHECK(Clock::now() - t0 < 15s);
    CHECK_MESSAGE(
        (contains(why, "is not a ZeroMQ peer") && contains(why, "SSH-2.0-OpenSSH_9.2p1") &&
         contains(why, "\\x0d\\x0a") && !contains(why, "CURVE")),
        why);
  }
  SUBCASE("one that says nothing") {
    FakeService quiet("");
    MasterOptions o = test_options();
    o.connect_timeout = 60s;
    o.workers = {quiet.endpoint()};
    auto t0 = Clock::now();
    std::string why = message_of<TransportError>([&] { init_master_worker(o); });
    CHECK(Clock::now() - t0 < 15s);
    CHECK_MESSAGE((contains(why, "sent nothing") && !contains(why, "CURVE")), why);
  }
  CHECK_FALSE(is_master_worker_initialized());
}
