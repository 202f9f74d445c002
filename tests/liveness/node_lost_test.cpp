// One liveness rule for a session: a worker the master finds lost (here: stopped with
// SIGSTOP, its connections open) is lost to the other workers too, within the same bound.
// Their collectives and copies that wait on it fail then, naming it, instead of waiting out
// the collective timeout; what does not involve it goes on.
#include <doctest/doctest.h>
#include <signal.h>

#include <chrono>
#include <string>

#include "dtr/collectives.hpp"
#include "liveness/liveness_support.hpp"
#include "master/cluster.hpp"
#include "support/message_of.hpp"

namespace {

using namespace dtr;
using namespace dtr::test;
using Clock = std::chrono::steady_clock;

MasterOptions options() {
  MasterOptions o = test_options();
  o.heartbeat = kTimeout / 5;
  o.heartbeat_timeout = kTimeout;
  o.sync_timeout = std::chrono::seconds(60);
  return o;
}

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

}  // namespace

TEST_CASE("a collective with a stopped member fails on the others in time; they go on") {
  Cluster cluster(3, cpu_only(), options());
  std::vector<DistributedTensor> ts;
  for (int k = 0; k < 3; ++k) ts.push_back(with_node(k, [] { return dtr::ones({16}); }));
  all_reduce(ts);
  synchronize();
  Stopped stopped(cluster.worker(2).pid());
  auto t0 = Clock::now();
  all_reduce(ts);  // nodes 0 and 1 wait for node 2 in it
  std::string why = message_of<RemoteError>([&] { (void)ts[0].sum().item<float>(); });
  double after = seconds_since(t0);
  CHECK_MESSAGE(why.find("node 2 is lost to this session") != std::string::npos, why);
  // The master's bound (its heartbeat timeout), not the collective timeout (300 s).
  CHECK_MESSAGE(after < 3.0 * std::chrono::duration<double>(kTimeout).count() + 1.0, after);
  // Nodes 0 and 1 go on, together too.
  std::vector<DistributedTensor> pair{with_node(0, [] { return dtr::ones({2}); }),
                                      with_node(1, [] { return dtr::ones({2}); })};
  all_reduce(pair);
  check_same(pair[0], local::full({2}, 2.0));
  check_same(pair[1], local::full({2}, 2.0));
}

TEST_CASE("a copy from a stopped node fails on its receiver in time, naming the node") {
  Cluster cluster(3, cpu_only(), options());
  DistributedTensor src = with_node(2, [] { return dtr::arange(8); });
  synchronize();
  Stopped stopped(cluster.worker(2).pid());
  auto t0 = Clock::now();
  DistributedTensor copy = src.to(1);  // node 1 waits for node 2's bytes
  std::string why = message_of<RemoteError>([&] { (void)copy.sum().item<int64_t>(); });
  double after = seconds_since(t0);
  CHECK_MESSAGE(why.find("node 2 is lost to this session") != std::string::npos, why);
  CHECK_MESSAGE(after < 3.0 * std::chrono::duration<double>(kTimeout).count() + 1.0, after);
  // Node 1 goes on; node 2 is WorkerLost at the call.
  CHECK(with_node(1, [] { return dtr::ones({3}).sum(); }).item<float>() == 3.0f);
  CHECK_THROWS_AS((void)src.sum(), WorkerLost);
}
