// CUDA through the whole runtime, on a machine with a GPU (ctest label `gpu`): the local
// engine's device tensors and caching allocator, and workers with a device: what HELLO
// reports, device scopes, cuda()/cpu(), CUDA streams ordered by events across streams and
// nodes, copies of CUDA tensors between nodes, collectives on CUDA tensors (host staged),
// out-of-memory on a worker (named, and the worker goes on), --devices. Without a device
// each case prints "SKIPPED: no CUDA device" and ctest reports it skipped.
#include <doctest/doctest.h>

#include <cstdio>
#include <string>
#include <vector>

#include "dtr/collectives.hpp"
#include "dtr/device.hpp"
#include "dtr/stream.hpp"
#include "master/cluster.hpp"
#include "support/gpu.hpp"
#include "tensor/device_runtime.hpp"

using namespace dtr;
using namespace dtr::test;

namespace {
void check_same_local(const local::Tensor& got, const local::Tensor& want) {
  std::string why;
  CHECK_MESSAGE(same_values(got, want, &why), why);
}

}  // namespace

TEST_CASE("gpu: local tensors move to the device and back, and ops stay there") {
  if (no_gpu()) return;
  Generator gen(7);
  local::Tensor a = local::randn({64, 33}, gen);
  local::Tensor g = a.cuda();
  CHECK(g.device() == 0);
  CHECK(g.cpu().device() == -1);
  check_same_local(g.cpu(), a);
  local::Tensor sum = (g * 2.0 + 1.0).sum();
  CHECK(sum.device() == 0);
  CHECK(std::abs(sum.item<double>() - (a * 2.0 + 1.0).sum().item<double>()) < 1e-2);
  // A strided view goes through too.
  check_same_local(g.t().contiguous().cpu(), a.t().contiguous());
  // Mixing devices is an error naming the op and both devices.
  std::string why = message_of<DeviceError>([&] { (void)(g + a); });
  CHECK(contains(why, "add"));
  CHECK(contains(why, "cuda:0"));
  CHECK(contains(why, "cpu"));
}

TEST_CASE("gpu: the caching allocator reuses blocks, empties its cache, and names OOM") {
  if (no_gpu()) return;
  cuda::synchronize_device(0);
  cuda::DeviceMemoryStats before = cuda::memory_stats(0);
  for (int i = 0; i < 100; ++i) {
    local::Tensor t = local::empty({1 << 20}, DType::Float32, 0);
    t.fill_(1.0);
  }
  cuda::DeviceMemoryStats after = cuda::memory_stats(0);
  CHECK(after.allocations - before.allocations >= 100);
  CHECK(after.driver_allocations - before.driver_allocations <= 2);  // the rest were cached
  CHECK(after.cached_bytes > 0);
  cuda::empty_cache(0);
  CHECK(cuda::memory_stats(0).cached_bytes == 0);
  // Far more than any GPU holds: OutOfMemory naming the device and the bytes, not a crash.
  std::string why =
      message_of<OutOfMemory>([] { (void)local::empty({int64_t{1} << 40}, DType::Float32, 0); });
  CHECK(contains(why, "cuda:0"));
  CHECK(contains(why, std::to_string(int64_t{4} << 40)));
  // And the device still works.
  CHECK(local::ones({4}, DType::Float32).cuda().sum().item<double>() == 4.0);
}

TEST_CASE("gpu: a worker reports its GPU and runs ops, copies and streams on it") {
  if (no_gpu()) return;
  Cluster cluster(2);
  REQUIRE(device_count(0) >= 1);
  NodeInfo info = node_info(0);
  REQUIRE(!info.cuda_devices.empty());
  CHECK(info.cuda_devices[0] == cuda::device_properties(0).name);

  Generator gen(11);
  local::Tensor a = local::randn({256, 128}, gen), b = local::randn({128, 64}, gen);
  DistributedTensor ga, gb;
  {
    device_guard on_gpu(0);
    ga = dist_send(a);
    gb = dist_send(b);
    CHECK(ga.get_device() == 0);
    DistributedTensor z = zeros({3});
    CHECK(z.get_device() == 0);
  }
  DistributedTensor c = ga.matmul(gb);
  CHECK(c.get_device() == 0);
  local::Tensor want = a.matmul(b);
  local::Tensor got = c.to_local();
  CHECK((got - want).abs().max().item<double>() < 1e-3);

  // cpu() and cuda() on handles.
  DistributedTensor on_cpu = c.cpu();
  CHECK(on_cpu.get_device() == -1);
  DistributedTensor back = on_cpu.cuda(0);
  CHECK(back.get_device() == 0);
  check_same(back, got);

  // Work on a second stream waits for the first through an event (CUDA streams, ordered on
  // the device).
  Stream s1 = Stream::create(0), s2 = Stream::create(0);
  DistributedTensor x;
  Event done;
  {
    stream_guard g1(s1);
    device_guard on_gpu(0);
    x = zeros({1 << 20});
    for (int i = 0; i < 20; ++i) x.add_(1.0);
    done.record();
  }
  DistributedTensor y;
  {
    stream_guard g2(s2);
    s2.wait(done);
    y = x.sum();
  }
  CHECK(y.to_local().item<double>() == 20.0 * (1 << 20));

  // A CUDA tensor to another node (staged through the hosts), then onto its GPU.
  DistributedTensor moved = c.to(1);
  CHECK(moved.get_node() == 1);
  check_same(moved, got);
  DistributedTensor moved_gpu = moved.cuda(0);
  check_same(moved_gpu, got);

  // A collective on CUDA tensors of two nodes (both on one GPU here: host staging).
  std::vector<DistributedTensor> parts;
  for (int node = 0; node < 2; ++node) {
    node_guard on(node);
    device_guard on_gpu(0);
    parts.push_back(full({1000}, node + 1));
  }
  all_reduce(parts);
  for (auto& p : parts) {
    CHECK(p.get_device() == 0);
    CHECK(p.to_local().min().item<double>() == 3.0);
  }

  NodeMemoryStats m = memory_stats(0, 0);
  CHECK(m.bytes_in_use > 0);
  CHECK_NOTHROW(synchronize());
}

TEST_CASE("gpu: out of memory on a worker names node, device and bytes, and the worker goes on") {
  if (no_gpu()) return;
  Cluster cluster(1);
  device_guard on_gpu(0);
  DistributedTensor huge = empty({int64_t{1} << 40});  // 4 TiB
  std::string why = message_of<RemoteError>([&] { (void)huge.to_local(); });
  CHECK(contains(why, "node 0"));
  CHECK(contains(why, "cuda:0"));
  CHECK(contains(why, std::to_string(int64_t{4} << 40)));
  CHECK_THROWS_AS(synchronize(), RemoteError);
  CHECK(ones({5}).sum().item<double>() == 5.0);
  CHECK_NOTHROW(synchronize());
}

TEST_CASE("gpu: --devices none hides the GPU from masters") {
  if (no_gpu()) return;
  WorkerProcess w({"--devices", "none"});
  MasterOptions o = test_options();
  o.workers = {w.endpoint()};
  init_master_worker(o);
  CHECK(device_count(0) == 0);
  std::string why = message_of<IndexError>([] {
    device_guard on_gpu(0);
    (void)zeros({2});
  });
  CHECK(contains(why, "node 0 has no CUDA device 0"));
  end_session();
}
