// Asynchrony and session setup: long chains of queued ops, large transfers, item(), use
// from several threads, and init_master_worker() from options and from the environment.
#include <doctest/doctest.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "master/cluster.hpp"

namespace {

using namespace dtr;
using namespace dtr::test;
using dtr::local::Tensor;
using Clock = std::chrono::steady_clock;

long long ms_since(Clock::time_point t0) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t0).count();
}

}  // namespace

TEST_CASE("queued ops and large transfers and item()") {
  Cluster cluster(1);

  SUBCASE("10000 in-place adds then item()") {
    DistributedTensor x = dtr::zeros({1});
    DistributedTensor n = dtr::zeros({1}, DType::Int64);
    auto t0 = Clock::now();
    for (int i = 0; i < 10000; ++i) x.add_(1);
    auto queued_ms = ms_since(t0);
    CHECK(x.item<float>() == 10000.0f);
    MESSAGE("10,000 add_ queued in ", queued_ms, " ms, item() after ", ms_since(t0), " ms");
    for (int i = 0; i < 10000; ++i) n += 3;
    CHECK(n.item<int64_t>() == 30000);
    CHECK(n.item().is_integral());
    CHECK_NOTHROW(synchronize());
  }

  SUBCASE("1M-element tensors round-trip exactly") {
    Generator g(11);
    Tensor big = local::randn({1000, 1000}, g);
    auto t0 = Clock::now();
    DistributedTensor r = dist_send(big);
    Tensor back = r.to_local();
    MESSAGE("4 MB sent and fetched in ", ms_since(t0), " ms");
    CHECK(r.meta() == TensorMeta::contiguous(DType::Float32, {1000, 1000}));
    std::string why;
    CHECK_MESSAGE(same_values(back, big, &why), why);
    CHECK(std::memcmp(back.raw_data(), big.raw_data(), 4 * 1000 * 1000) == 0);
    // The caller may change its tensor once dist_send() returned.
    big.fill_(0);
    check_same(r.narrow(0, 0, 2), back.narrow(0, 0, 2));

    // A non-contiguous tensor arrives packed; other dtypes too.
    Tensor lt = local::arange(0, 1 << 20).view({1024, 1024}).t();
    DistributedTensor rt = dist_send(lt);
    CHECK(rt.is_contiguous());
    check_same(rt, lt);
    Tensor lb = local::rand({1 << 20}, g).gt(0.5);
    check_same(dist_send(lb), lb);
    Tensor ld = local::randn({3, 5}, g, DType::Float64);
    check_same(dist_send(ld).sum(0), ld.sum(0));
  }

  SUBCASE("item()") {
    CHECK(dtr::full({}, 2.5).item<double>() == 2.5);
    CHECK(dtr::full({1, 1}, 7, DType::Int32).item<int>() == 7);
    CHECK(dtr::arange(5).sum().item<int64_t>() == 10);
    CHECK(dtr::ones({3}, DType::Bool).sum().item().is_integral());
    std::string m = message_of<ShapeError>([] { (void)dtr::zeros({2, 3}).item(); });
    CHECK_MESSAGE((contains(m, "item") && contains(m, "[2, 3]")), m);
    CHECK_THROWS_AS((void)dtr::zeros({0}).item(), ShapeError);
  }
}

TEST_CASE("several threads share the session") {
  Cluster cluster(2);
  constexpr int kThreads = 4;
  constexpr int kOps = 1000;
  std::vector<std::thread> threads;
  std::vector<double> results(kThreads, -1);
  std::vector<std::string> errors(kThreads);
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      try {
        node_guard on(t % 2);
        DistributedTensor x = dtr::zeros({8}, DType::Float64);
        for (int i = 0; i < kOps; ++i) x.add_(t + 1);
        results[static_cast<size_t>(t)] = x.sum().item<double>();
      } catch (const std::exception& e) {
        errors[static_cast<size_t>(t)] = e.what();
      }
    });
  }
  for (auto& th : threads) th.join();
  for (int t = 0; t < kThreads; ++t) {
    INFO("thread ", t, ": ", errors[static_cast<size_t>(t)]);
    CHECK(results[static_cast<size_t>(t)] == 8.0 * kOps * (t + 1));
  }
  CHECK_NOTHROW(synchronize());
}

// Requests from several threads at once, with and without the requesters' spin: whoever
// holds the I/O reads the others' replies, and hands the I/O back when it leaves.
TEST_CASE("concurrent requests, spinning or not") {
  std::vector<WorkerProcess> workers(2);
  for (int spin_us : {0, 200, 5000}) {
    CAPTURE(spin_us);
    SessionGuard guard;
    MasterOptions o = test_options();
    o.workers = {workers[0].endpoint(), workers[1].endpoint()};
    o.spin = std::chrono::microseconds(spin_us);
    REQUIRE_NOTHROW(init_master_worker(o));
    constexpr int kThreads = 6;
    constexpr int kRounds = 60;
    std::vector<std::string> errors(kThreads);
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t) {
      threads.emplace_back([&, t] {
        try {
          node_guard on(t % 2);
          DistributedTensor x = dtr::zeros({4}, DType::Int64);
          for (int i = 0; i < kRounds; ++i) {
            x.add_(1);
            int64_t got = (x + t).sum().item<int64_t>();
            if (got != 4 * (i + 1 + t))
              throw std::runtime_error("round " + std::to_string(i) + ": " + std::to_string(got));
          }
        } catch (const std::exception& e) {
          errors[static_cast<size_t>(t)] = e.what();
        }
      });
    }
    for (auto& th : threads) th.join();
    for (int t = 0; t < kThreads; ++t)
      CHECK_MESSAGE(errors[static_cast<size_t>(t)].empty(), errors[static_cast<size_t>(t)]);
    // Async work queued after the requesters left still goes out (the I/O thread is awake).
    DistributedTensor y = dtr::zeros({1});
    for (int i = 0; i < 100; ++i) y.add_(1);
    CHECK(y.item<float>() == 100.0f);
  }
}

TEST_CASE("init_master_worker from options and from the environment") {
  std::vector<WorkerProcess> workers(2);

  SUBCASE("DTR_WORKERS") {
    SessionGuard guard;
    ScopedEnv w("DTR_WORKERS", workers[0].endpoint() + "," + workers[1].endpoint());
    ScopedEnv c("DTR_CONNECT_TIMEOUT_MS", "10000");
    ScopedEnv s("DTR_SYNC_TIMEOUT_MS", "30000");
    REQUIRE_NOTHROW(init_master_worker());
    CHECK(is_master_worker_initialized());
    CHECK(node_count() == 2);
    check_same(with_node(1, [] { return dtr::arange(3) + 1; }), local::arange(1, 4));
    std::string m = message_of<InvalidArgument>([] { init_master_worker(); });
    CHECK_MESSAGE(contains(m, "already running"), m);
    end_session();
    CHECK_FALSE(is_master_worker_initialized());
    // A new session after the shutdown.
    REQUIRE_NOTHROW(init_master_worker());
    CHECK(memory_stats(0).live_tensors == 0);
  }

  SUBCASE("nothing set") {
    ScopedEnv a("DTR_WORKERS", std::nullopt);
    ScopedEnv b("DTR_LISTEN", std::nullopt);
    ScopedEnv c("MASTER_ADDR", std::nullopt);
    ScopedEnv d("MASTER_PORT", std::nullopt);
    std::string m = message_of<InvalidArgument>([] { init_master_worker(); });
    CHECK_MESSAGE(contains(m, "DTR_WORKERS"), m);
    CHECK_FALSE(is_master_worker_initialized());
  }

  SUBCASE("bad values") {
    ScopedEnv a("DTR_WORKERS", std::nullopt);
    ScopedEnv b("DTR_LISTEN", "tcp://127.0.0.1:" + std::to_string(free_port()));
    ScopedEnv c("DTR_NUM_WORKERS", "two");
    std::string m = message_of<InvalidArgument>([] { init_master_worker(); });
    CHECK_MESSAGE((contains(m, "DTR_NUM_WORKERS") && contains(m, "two")), m);
    CHECK_FALSE(is_master_worker_initialized());
  }

  SUBCASE("bad options") {
    MasterOptions both = test_options();
    both.workers = {workers[0].endpoint()};
    both.listen = "tcp://127.0.0.1:" + std::to_string(free_port());
    both.num_workers = 1;
    CHECK_THROWS_AS(init_master_worker(both), InvalidArgument);
    CHECK_THROWS_AS(init_master_worker(test_options()), InvalidArgument);
    MasterOptions no_count = test_options();
    no_count.listen = "tcp://127.0.0.1:" + std::to_string(free_port());
    CHECK_THROWS_AS(init_master_worker(no_count), InvalidArgument);
    MasterOptions slow_beat = test_options();
    slow_beat.workers = {workers[0].endpoint()};
    slow_beat.heartbeat = std::chrono::milliseconds(3000);
    std::string beat = message_of<InvalidArgument>([&] { init_master_worker(slow_beat); });
    CHECK_MESSAGE((contains(beat, "3000 ms") && contains(beat, "heartbeat_timeout")), beat);
    MasterOptions negative_spin = test_options();
    negative_spin.workers = {workers[0].endpoint()};
    negative_spin.spin = std::chrono::microseconds(-1);
    std::string m = message_of<InvalidArgument>([&] { init_master_worker(negative_spin); });
    CHECK_MESSAGE((contains(m, "spin") && contains(m, "-1")), m);
    CHECK_FALSE(is_master_worker_initialized());
  }

  SUBCASE("DTR_SPIN_US") {
    ScopedEnv w("DTR_WORKERS", workers[0].endpoint());
    ScopedEnv c("DTR_CONNECT_TIMEOUT_MS", "10000");
    {
      ScopedEnv s("DTR_SPIN_US", "often");
      std::string m = message_of<InvalidArgument>([] { init_master_worker(); });
      CHECK_MESSAGE((contains(m, "DTR_SPIN_US") && contains(m, "often")), m);
    }
    ScopedEnv s("DTR_SPIN_US", "0");
    SessionGuard guard;
    REQUIRE_NOTHROW(init_master_worker());
    check_same(dtr::ones({2}) + 1, local::full({2}, 2.0));
  }

  SUBCASE("an endpoint nobody serves times out, naming it") {
    MasterOptions o = test_options();
    std::string endpoint = "tcp://127.0.0.1:" + std::to_string(free_port());
    o.workers = {workers[0].endpoint(), endpoint};
    // Long enough for the live worker to answer even under a sanitizer on a loaded machine.
    o.connect_timeout = 2000ms;
    auto t0 = Clock::now();
    std::string m = message_of<TimeoutError>([&] { init_master_worker(o); });
    CHECK_MESSAGE(contains(m, endpoint), m);
    CHECK(ms_since(t0) < 6000);
    CHECK_FALSE(is_master_worker_initialized());
    // The worker that did answer is free for the next master.
    SessionGuard guard;
    o.workers = {workers[0].endpoint()};
    o.connect_timeout = 10s;
    REQUIRE_NOTHROW(init_master_worker(o));
    check_same(dtr::ones({2}), local::ones({2}));
  }
}
