// Node and device scoping with two and three workers: guards nest and restore, creation
// follows the current node, results follow their inputs, mixing nodes is refused on the
// master, and CPU-only nodes refuse CUDA devices.
#include <doctest/doctest.h>

#include <fstream>
#include <functional>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "master/cluster.hpp"

namespace {

using namespace dtr;
using namespace dtr::test;
using dtr::local::Tensor;

void check_node_scoping(int n) {
  CHECK(is_master_worker_initialized());
  CHECK(node_count() == n);
  CHECK(current_node() == 0);
  CHECK(current_device() == -1);

  SUBCASE("devices: CPU-only nodes") {
    std::set<std::string> names;
    for (int k = 0; k < n; ++k) {
      CHECK(device_count(k) == 0);
      NodeInfo info = node_info(k);
      CHECK(!info.worker.empty());
      CHECK(info.cuda_devices.empty());
      CHECK(info.threads > 0);
      CHECK(info.cpu_total_memory > 0);
      names.insert(info.worker);
    }
    CHECK(names.size() == static_cast<size_t>(n));  // host:pid differs per worker
    CHECK_THROWS_AS(device_count(n), IndexError);
    CHECK_THROWS_AS(device_count(-1), IndexError);
    CHECK_THROWS_AS(node_info(n), IndexError);

    DistributedTensor x = dtr::zeros({2});
    CHECK(x.get_device() == -1);
    {
      device_guard on_cuda(0);
      CHECK(current_device() == 0);
      // A missing device is a DeviceError (error.hpp), naming the node and what it has.
      std::string m = message_of<DeviceError>([] { (void)dtr::zeros({2}); });
      CHECK_MESSAGE((contains(m, "has no CUDA device 0") && contains(m, "it has none")), m);
      m = message_of<DeviceError>([] { (void)DistributedTensor({3}); });
      CHECK_MESSAGE(contains(m, "has no CUDA device"), m);
      m = message_of<DeviceError>([] { (void)memory_stats(0, 0); });
      CHECK_MESSAGE(contains(m, "has no CUDA device"), m);
      m = message_of<DeviceError>([&] { (void)x.cuda(); });
      CHECK_MESSAGE((contains(m, "to_device") && contains(m, "no CUDA device 0")), m);
      // Ops on existing tensors follow the tensors, not the current device.
      CHECK((x + 1).get_device() == -1);
    }
    CHECK(current_device() == -1);
    CHECK(dtr::ones({2}).get_device() == -1);
    CHECK_THROWS_AS(set_device(-2), IndexError);
    CHECK(current_device() == -1);
  }

  SUBCASE("set_node, node_guard, with_node") {
    set_node(n - 1);
    CHECK(current_node() == n - 1);
    CHECK(dtr::zeros({1}).get_node() == n - 1);
    set_node(0);
    CHECK(current_node() == 0);
    CHECK_THROWS_AS(set_node(n), IndexError);
    CHECK_THROWS_AS(set_node(-1), IndexError);
    std::string m = message_of<IndexError>([&] { set_node(n + 5); });
    CHECK_MESSAGE(contains(m, "node " + std::to_string(n + 5) + " does not exist"), m);
    CHECK(current_node() == 0);  // a refused set_node changes nothing

    {
      node_guard outer(1);
      CHECK(current_node() == 1);
      CHECK(dtr::arange(3).get_node() == 1);
      {
        node_guard inner(n - 1);
        CHECK(current_node() == n - 1);
        CHECK(dtr::arange(3).get_node() == n - 1);
        {
          node_guard back(0);
          CHECK(current_node() == 0);
        }
        CHECK(current_node() == n - 1);
      }
      CHECK(current_node() == 1);
      CHECK_THROWS_AS([&] { node_guard bad(n); }(), IndexError);
      CHECK(current_node() == 1);
    }
    CHECK(current_node() == 0);

    DistributedTensor y = with_node(n - 1, [] { return dtr::full({2}, 3.0); });
    CHECK(y.get_node() == n - 1);
    CHECK(current_node() == 0);
    int seen = with_node(1, [] { return current_node(); });
    CHECK(seen == 1);
    // The guard restores the node when fn throws.
    CHECK_THROWS_AS(with_node(1, []() -> int { throw std::runtime_error("boom"); }),
                    std::runtime_error);
    CHECK(current_node() == 0);

    // The current node is per thread.
    {
      node_guard on(1);
      int other_thread_node = -1;
      int other_thread_tensor_node = -1;
      std::thread t([&] {
        other_thread_node = current_node();
        other_thread_tensor_node = dtr::zeros({1}).get_node();
      });
      t.join();
      CHECK(other_thread_node == 0);
      CHECK(other_thread_tensor_node == 0);
      CHECK(current_node() == 1);
    }
  }

  SUBCASE("creation follows the scope, results follow the inputs") {
    std::vector<DistributedTensor> xs;
    for (int k = 0; k < n; ++k) {
      node_guard on(k);
      xs.push_back(dtr::full({2, 3}, static_cast<double>(k + 1)));
      CHECK(xs.back().get_node() == k);
      CHECK(DistributedTensor({2}).get_node() == k);
      CHECK(dtr::empty({2}).get_node() == k);
      CHECK(dtr::linspace(0, 1, 3).get_node() == k);
      CHECK(dtr::rand({2}).get_node() == k);
      CHECK(dtr::dist_send(local::ones({2})).get_node() == k);  // default: current node
    }
    // dist_send to an explicit node, whatever the current one.
    for (int k = 0; k < n; ++k) {
      DistributedTensor s = dist_send(local::full({2}, k), k);
      CHECK(s.get_node() == k);
      check_same(s, local::full({2}, k));
    }
    CHECK_THROWS_AS(dist_send(local::ones({2}), n), IndexError);

    // From node 0's scope, ops on tensors of other nodes run where the tensors are.
    for (int k = 0; k < n; ++k) {
      INFO("node ", k);
      DistributedTensor& x = xs[static_cast<size_t>(k)];
      DistributedTensor y = (x * 2 + 1).sum(1);
      CHECK(y.get_node() == k);
      CHECK(x.t().get_node() == k);
      CHECK(x.matmul(x.t()).get_node() == k);
      CHECK(y.get_device() == -1);
      check_same(y, local::full({2}, 3.0 * (2 * (k + 1) + 1)));
      x.add_(10);
      CHECK(x.get_node() == k);
      check_same(x, local::full({2, 3}, 11.0 + k));
    }

    // Mixing nodes is refused on the master, naming both nodes.
    DistributedTensor& a = xs[0];
    DistributedTensor& b = xs[1];
    for (auto [what_, fn] : std::vector<std::pair<const char*, std::function<void()>>>{
             {"add", [&] { (void)(a + b); }},
             {"mul", [&] { (void)a.mul(b); }},
             {"matmul", [&] { (void)a.matmul(b.t()); }},
             {"add_", [&] { a.add_(b); }},
             {"copy_", [&] { a.copy_(b); }},
             {"eq", [&] { (void)(a == b); }}}) {
      const char* what = what_;  // captured by INFO (clang 14: not a binding)
      std::string m = message_of<InvalidArgument>(fn);
      INFO(what, ": ", m);
      CHECK(contains(m, what));
      CHECK(contains(m, "node 0"));
      CHECK(contains(m, "node 1"));
    }
    if (n > 2) {
      std::string m = message_of<InvalidArgument>([&] { (void)(xs[2] - b); });
      CHECK_MESSAGE((contains(m, "node 2") && contains(m, "node 1")), m);
    }
    // The refused calls changed nothing.
    check_same(a, local::full({2, 3}, 11.0));
    check_same(b, local::full({2, 3}, 12.0));
    CHECK_NOTHROW(synchronize());
  }
}

}  // namespace

TEST_CASE("node scoping with two workers") {
  Cluster cluster(2, cpu_only());
  check_node_scoping(2);
}

TEST_CASE("node scoping with three workers") {
  Cluster cluster(3, cpu_only());
  check_node_scoping(3);
}

namespace {

// Whether process `pid` ("self" for this one) has a cuBLAS library mapped.
bool maps_cublas(const std::string& pid) {
  std::ifstream maps("/proc/" + pid + "/maps");
  for (std::string line; std::getline(maps, line);)
    if (line.find("libcublas") != std::string::npos) return true;
  return false;
}

long rss_kib(const std::string& pid) {
  std::ifstream status("/proc/" + pid + "/status");
  for (std::string line; std::getline(status, line);)
    if (line.rfind("VmRSS:", 0) == 0) return std::stol(line.substr(6));
  return -1;
}

}  // namespace

// Issue 40, item 7: an idle dtr-worker or master held about 167 MB resident, 150 MB of it
// cuBLAS (libcublasLt's relocated tables), linked by the tensor library whether a GPU was
// there or not. cuBLAS is now loaded at the first matmul on a CUDA device.
TEST_CASE("a CPU-only worker and its master do not load cuBLAS") {
  Cluster cluster(1, cpu_only());
  DistributedTensor a = dtr::ones({8, 8});
  check_same(a.matmul(a), local::full({8, 8}, 8.0f));
  const std::string worker = std::to_string(cluster.worker(0).pid());
  MESSAGE("resident: worker ", rss_kib(worker), " KiB, master ", rss_kib("self"), " KiB");
  CHECK_FALSE(maps_cublas(worker));
  CHECK_FALSE(maps_cublas("self"));
}
