// Lanes (pg/zmq/lane.hpp): a two-rank zmq group on the sockets moves its all_reduces of 128
// KiB or more on a TCP connection of its own. First the lane's pieces alone (a stranger at the
// listener, both directions at once with the fold, a peer that closes, a deadline, ranks out
// of step), then whole groups: the lane is taken, gives the rank-order bits for every dtype
// and op, stays off where it should, and a call on it fails in time when the peer dies or
// stops.
#include <arpa/inet.h>
#include <doctest/doctest.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <cstring>
#include <future>

#include "pg/zmq/lane.hpp"
#include "pg_test_util.hpp"
#include "support/message_of.hpp"
#include "support/sanitizers.hpp"

namespace {

using namespace dtr;
using namespace dtr::pgtest;
using dtr::test::message_of;
using pg::Lane;
using pg::LaneListener;
using Clock = std::chrono::steady_clock;

#if defined(DTR_TEST_TSAN) || defined(DTR_TEST_ASAN)
constexpr double kSlow = 4;  // sanitizers run everything several times slower
#else
constexpr double kSlow = 1;
#endif

std::unique_ptr<LaneListener> listen_here() {
  std::string why;
  auto listener = LaneListener::open("127.0.0.1", &why);
  REQUIRE_MESSAGE(listener != nullptr, why);
  return listener;
}

// A connected pair of lanes on loopback: {the connecting side, the accepting side}.
std::pair<std::unique_ptr<Lane>, std::unique_ptr<Lane>> lane_pair() {
  auto listener = listen_here();
  const auto deadline = Clock::now() + 10s;
  auto connecting = std::async(std::launch::async, [&] {
    return Lane::connect("127.0.0.1", listener->port(), listener->token(), 1, deadline, nullptr,
                         "test", "rank 0");
  });
  const int fd = listener->accept(1, deadline, nullptr, "test");
  return {connecting.get(), std::make_unique<Lane>(fd, 1, "rank 1")};
}

// A plain TCP connection to 127.0.0.1:port that sends `bytes` (a stranger at a listener).
int stranger(uint16_t port, const std::string& bytes) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
  if (!bytes.empty()) REQUIRE(::send(fd, bytes.data(), bytes.size(), 0) == ssize_t(bytes.size()));
  return fd;
}

Lane::Sink into(std::vector<char>& buf) {
  Lane::Sink s;
  s.bytes = buf.size();
  s.direct = buf.data();
  return s;
}

// In a forked rank: 0 when the group's path holds `want`, else 1 (and says what it holds).
int path_holds(const ProcessGroup& g, const std::string& want) {
  const std::string path = g.host_path();
  if (path.find(want) != std::string::npos) return 0;
  std::fprintf(stderr, "rank %d: path '%s', expected '%s'\n", g.rank(), path.c_str(), want.c_str());
  return 1;
}

ProcessGroupOptions on_sockets(std::chrono::milliseconds timeout = 30s) {
  ProcessGroupOptions o = fast_options(timeout);
  o.same_host = false;
  return o;
}

}  // namespace

TEST_CASE("lanes: the listener keeps only the connection that presents its token") {
  auto listener = listen_here();
  // Two strangers first: one sends 16 wrong bytes, one sends nothing and stays connected.
  const int wrong = stranger(listener->port(), std::string(16, 'x'));
  const int silent = stranger(listener->port(), "");
  const auto deadline = Clock::now() + 10s;
  auto connecting = std::async(std::launch::async, [&] {
    return Lane::connect("127.0.0.1", listener->port(), listener->token(), 3, deadline, nullptr,
                         "test", "rank 0");
  });
  const int fd = listener->accept(3, deadline, nullptr, "test");
  Lane accepted(fd, 3, "rank 1");
  auto connected = connecting.get();
  // It is the lane's peer: a byte each way arrives.
  std::vector<char> a(1), b(1);
  auto other = std::async(std::launch::async,
                          [&] { connected->exchange("b", 1, into(b), deadline, nullptr, "test"); });
  accepted.exchange("a", 1, into(a), deadline, nullptr, "test");
  other.get();
  CHECK(a[0] == 'b');
  CHECK(b[0] == 'a');
  ::close(wrong);
  ::close(silent);
  // Nobody else comes: the wait ends at its deadline, naming the port.
  const auto t0 = Clock::now();
  const std::string timeout = message_of<TimeoutError>(
      [&] { (void)listener->accept(3, Clock::now() + 200ms, nullptr, "all_reduce (#1)"); });
  CHECK(timeout.find(std::to_string(listener->port())) != std::string::npos);
  CHECK(Clock::now() - t0 < 5s);
}

TEST_CASE("lanes: exchange moves both directions at once and folds chunk by chunk") {
  auto [x, y] = lane_pair();
  const size_t n = 3 * pg::kLaneChunkBytes + 12;  // three whole chunks and a short one
  std::vector<char> from_x(n), from_y(n + 5);
  for (size_t i = 0; i < n; ++i) from_x[i] = static_cast<char>(i * 7);
  for (size_t i = 0; i < from_y.size(); ++i) from_y[i] = static_cast<char>(i * 13 + 1);
  const auto deadline = Clock::now() + 30s;
  // x folds what y sends through a chunk buffer; y receives straight into memory.
  std::vector<char> chunk(pg::kLaneChunkBytes), folded(from_y.size());
  std::vector<std::pair<size_t, size_t>> calls;
  Lane::Sink fold;
  fold.bytes = from_y.size();
  fold.chunk = chunk.data();
  fold.fold = [&](size_t offset, const char* data, size_t bytes) {
    calls.emplace_back(offset, bytes);
    std::memcpy(folded.data() + offset, data, bytes);
  };
  std::vector<char> at_y(n);
  auto other = std::async(std::launch::async, [&, yy = y.get()] {
    yy->exchange(from_y.data(), from_y.size(), into(at_y), deadline, nullptr, "test");
  });
  x->exchange(from_x.data(), n, fold, deadline, nullptr, "test");
  other.get();
  CHECK(at_y == from_x);
  CHECK(folded == from_y);
  REQUIRE(calls.size() == 4);
  for (size_t k = 0; k < calls.size(); ++k) CHECK(calls[k].first == k * pg::kLaneChunkBytes);
  CHECK(calls[3].second == from_y.size() - 3 * pg::kLaneChunkBytes);
}

TEST_CASE("lanes: ranks out of step, a deadline, a failed check and a closed peer fail clearly") {
  auto [x_, y] = lane_pair();
  auto& x = x_;  // captured (clang 14: not a binding)
  const auto deadline = Clock::now() + 10s;
  SUBCASE("stamps of different collectives") {
    auto other = std::async(std::launch::async, [&, yy = y.get()] {
      CHECK_THROWS_AS(yy->stamp(6, deadline, nullptr, "test"), ProtocolError);
    });
    const std::string error =
        message_of<ProtocolError>([&] { x->stamp(5, deadline, nullptr, "all_reduce (#5)"); });
    CHECK(error.find("out of step: expected collective #5 of lane 1, got #6") != std::string::npos);
    other.get();
  }
  SUBCASE("nothing comes before the deadline") {
    std::vector<char> buf(100);
    const auto t0 = Clock::now();
    const std::string error = message_of<TimeoutError>(
        [&] { x->exchange(nullptr, 0, into(buf), Clock::now() + 300ms, nullptr, "test"); });
    CHECK(error.find("received 0 of 100") != std::string::npos);
    const auto took = Clock::now() - t0;
    CHECK(took >= 300ms);
    CHECK(took < 5s);
  }
  SUBCASE("the check throws while it waits") {
    std::vector<char> buf(100);
    int checks = 0;
    auto check = [&] {
      if (++checks == 3) throw TransportError("rank 1 died");
    };
    CHECK_THROWS_WITH_AS(x->exchange(nullptr, 0, into(buf), deadline, check, "test"), "rank 1 died",
                         TransportError);
    CHECK(checks == 3);
  }
  SUBCASE("the peer closes its end") {
    std::vector<char> buf(100);
    std::vector<char> half(40, 'z');
    auto other = std::async(std::launch::async, [&, yy = std::move(y)]() mutable {
      std::vector<char> none;
      yy->exchange(half.data(), half.size(), into(none), deadline, nullptr, "test");
      yy.reset();  // closes its end
    });
    const std::string error = message_of<TransportError>(
        [&] { x->exchange(nullptr, 0, into(buf), deadline, nullptr, "test"); });
    CHECK(error.find("rank 0 closed the lane after 40 of 100 bytes") != std::string::npos);
    other.get();
  }
}

TEST_CASE("lanes: two-rank all_reduces of 128 KiB or more take the lane, every dtype and op") {
  std::mutex m;
  std::vector<std::vector<char>> bits[2];
  std::string notes[2];
  check_no_errors(run_ranks(
      2,
      [&](ProcessGroup& g) {
        for (DType dt : {DType::Float32, DType::Float64, DType::Int64, DType::Int32, DType::Float16,
                         DType::BFloat16, DType::Bool}) {
          const int64_t es = static_cast<int64_t>(element_size(dt));
          // The smallest size on the lane, and one of a few chunks with an odd tail.
          for (int64_t n :
               {static_cast<int64_t>(pg::kLaneMinBytes) / es, int64_t{3 << 20} / es + 3}) {
            for (ReduceOp op :
                 {ReduceOp::Sum, ReduceOp::Product, ReduceOp::Min, ReduceOp::Max, ReduceOp::Avg}) {
              if (op == ReduceOp::Avg &&
                  (dt == DType::Int64 || dt == DType::Int32 || dt == DType::Bool))
                continue;
              local::Tensor t = make_input(g.rank(), n, dt, op);
              g.all_reduce(t, op);
              const std::string what = std::string("all_reduce ") +
                                       std::string(reduce_op_name(op)) + " of " +
                                       std::to_string(n) + " " + std::string(dtype_name(dt));
              expect_values(
                  t, [&](int64_t i) { return reduce_ref(2, i, dt, op); }, what.c_str());
              const char* p = static_cast<const char*>(t.raw_data());
              std::lock_guard lock(m);
              bits[g.rank()].emplace_back(p, p + n * es);
            }
          }
        }
        std::lock_guard lock(m);
        notes[g.rank()] = g.host_path();
      },
      on_sockets()));
  for (int r = 0; r < 2; ++r) {
    CAPTURE(notes[r]);
    CHECK(notes[r].find("all_reduces of 128 KiB or more on a lane (tcp 127.0.0.1:") !=
          std::string::npos);
  }
  REQUIRE(bits[0].size() == bits[1].size());
  for (size_t k = 0; k < bits[0].size(); ++k) CHECK(bits[0][k] == bits[1][k]);
}

TEST_CASE(
    "lanes: not below 128 KiB, not for three ranks, and mismatched calls still fail clearly") {
  std::mutex m;
  std::vector<std::string> notes, errors;
  // Sum of 1..p at every element, and the paths the ranks took.
  auto all_reduce_ones = [&](int p, int64_t n) {
    check_no_errors(run_ranks(
        p,
        [&](ProcessGroup& g) {
          auto t = local::full(Shape{n}, g.rank() + 1);
          g.all_reduce(t);
          expect_values(
              t, [&](int64_t) { return p * (p + 1) / 2.0; }, "all_reduce");
          std::lock_guard lock(m);
          notes.push_back(g.host_path());
        },
        on_sockets()));
  };
  SUBCASE("below 128 KiB") {
    all_reduce_ones(2, (1 << 15) - 1);
  }
  SUBCASE("three ranks") {
    all_reduce_ones(3, 1 << 20);
  }
  for (const auto& n : notes) {
    CAPTURE(n);
    CHECK(n.rfind("sockets (", 0) == 0);
    CHECK(n.find("lane") == std::string::npos);
  }
  SUBCASE("sizes that differ, both on the lane's side of 128 KiB") {
    errors = run_ranks(
        2,
        [&](ProcessGroup& g) {
          auto t = local::ones(Shape{g.rank() == 0 ? (1 << 19) : (1 << 18)});
          g.all_reduce(t);
        },
        on_sockets(10s));
    REQUIRE(errors.size() == 2);
    for (const auto& e : errors) {
      CAPTURE(e);
      CHECK(e.find("size mismatch") != std::string::npos);
    }
  }
}

TEST_CASE("lanes: DTR_LANES=0 in one rank keeps the pair on ZeroMQ, with the same result") {
  const int port = test::free_port();
  const auto codes = fork_ranks(2, [&](int r) {
    if (r == 1) ::setenv("DTR_LANES", "0", 1);
    ProcessGroup g =
        ProcessGroup::create(make_tcp_store("127.0.0.1", port, r == 0), r, 2, on_sockets());
    auto t = local::full(Shape{1 << 20}, r + 1);
    g.all_reduce(t);
    expect_values(
        t, [](int64_t) { return 3.0; }, "all_reduce");
    return path_holds(g, r == 1 ? "no lane (DTR_LANES=0)" : "no lane (rank 1 keeps to ZeroMQ)");
  });
  CHECK(codes[0] == 0);
  CHECK(codes[1] == 0);
}

TEST_CASE("lanes: a lane that cannot be opened leaves the pair on ZeroMQ, and says why") {
  const int port = test::free_port();
  const auto codes = fork_ranks(2, [&](int r) {
    if (r == 1) pg::lane_fault_for_tests() = true;  // as a firewall would
    ProcessGroup g =
        ProcessGroup::create(make_tcp_store("127.0.0.1", port, r == 0), r, 2, on_sockets());
    for (int k = 0; k < 3; ++k) {
      auto t = local::full(Shape{1 << 20}, r + k);
      g.all_reduce(t);
      expect_values(
          t, [&](int64_t) { return 1.0 + 2 * k; }, "all_reduce");
    }
    // Rank 0 waited for a connection that never came.
    return path_holds(g, r == 1 ? "no lane (could not open the lane: the test's fault)"
                                : "the other rank did not connect its lane to port");
  });
  CHECK(codes[0] == 0);
  CHECK(codes[1] == 0);
}

namespace {

// Rank 1 of a group of two on the tcp store at `port` (rank 0 hosts it), forked: it runs
// 64 MiB all_reduces on the lane until it is killed (or this process dies).
pid_t fork_rank_on_the_lane(int port, const ProcessGroupOptions& o) {
  launcher::Child rank = launcher::fork_child([port, o] {
    try {
      ProcessGroup g = ProcessGroup::create(make_tcp_store("127.0.0.1", port, false), 1, 2, o);
      auto t = local::ones(Shape{16 << 20});
      for (;;) g.all_reduce(t, ReduceOp::Max);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "child: %s\n", e.what());
    }
    return 1;
  });
  return rank.release();  // the caller kills and reaps it
}

// Rank 0 against fork_rank_on_the_lane: once the lane is up, `signal` hits rank 1 in the
// middle of the next all_reduces. Returns the error and how long after the signal it came.
std::pair<std::string, double> lose_the_peer(int signal) {
  const int port = test::free_port();
  ProcessGroupOptions o = on_sockets(100s);  // only the peer's loss can end the wait in time
  o.heartbeat_timeout = 1000ms;
  const pid_t child = fork_rank_on_the_lane(port, o);
  std::string message, path;
  Clock::time_point hit{}, failed{};
  {
    ProcessGroup g = ProcessGroup::create(make_tcp_store("127.0.0.1", port, true), 0, 2, o);
    auto t = local::ones(Shape{16 << 20});
    g.all_reduce(t, ReduceOp::Max);
    path = g.host_path();
    auto signaller = std::async(std::launch::async, [&] {
      std::this_thread::sleep_for(20ms);
      hit = Clock::now();
      ::kill(child, signal);
    });
    try {
      for (int k = 0; k < 10000; ++k) g.all_reduce(t, ReduceOp::Max);
    } catch (const Error& e) {
      failed = Clock::now();
      message = e.what();
    }
    signaller.get();
  }
  const double after = std::chrono::duration<double>(failed - hit).count();
  ::kill(child, SIGKILL);
  test::wait_or_kill(child, 10s);
  CHECK(path.find("on a lane") != std::string::npos);
  return {message, after};
}

}  // namespace

TEST_CASE("lanes: a peer killed during lane all_reduces fails the other rank at once") {
  const auto [message, after] = lose_the_peer(SIGKILL);
  MESSAGE(after << " s after the kill: " << message);
  CHECK(message.find("rank 1") != std::string::npos);
  CHECK(after < 10.0);  // the connection closes: no timeout to wait out
}

TEST_CASE("lanes: a peer stopped during lane all_reduces is lost within the heartbeat timeout") {
  const auto [message, after] = lose_the_peer(SIGSTOP);
  MESSAGE(after << " s after the stop: " << message);
  CHECK(message.find("rank 1") != std::string::npos);
  CHECK(after < 2.0 * kSlow * 1.0 + 3.0);  // twice the heartbeat timeout, and slack
}
