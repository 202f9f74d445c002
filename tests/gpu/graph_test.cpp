// Captured graphs on CUDA (ctest label `gpu`): cuda::Graph (stream capture, launch, no
// allocation while capturing), and a worker's runs of device element ops turned into CUDA
// graphs from the second replay on, bit for bit what the same ops give eagerly. Without a
// device each case prints "SKIPPED: no CUDA device" and ctest reports it skipped.
#include <doctest/doctest.h>

#include <cstdio>
#include <string>

#include "dtr/device.hpp"
#include "dtr/graph.hpp"
#include "dtr/stream.hpp"
#include "master/cluster.hpp"
#include "support/gpu.hpp"
#include "tensor/device_runtime.hpp"

using namespace dtr;
using namespace dtr::test;

TEST_CASE(
    "gpu: cuda::Graph records kernels once and launches them again, capture refuses allocation") {
  if (no_gpu()) return;
  cuda::Stream stream(0);
  cuda::StreamScope scope(0, stream.handle());
  local::Tensor x = local::zeros({1000}).cuda(0);
  OpAttrs one;
  one.scalars[0] = Scalar(int64_t{1});
  cuda::Graph g(0, stream.handle(), [&] {
    for (int i = 0; i < 10; ++i)
      local::execute_inplace(OpId::add, std::vector<local::Tensor>{x}, one);
  });
  stream.synchronize();
  CHECK(x.cpu().sum().item<double>() == 0);  // captured, not run
  for (int k = 0; k < 3; ++k) g.launch(stream.handle());
  stream.synchronize();
  CHECK(x.cpu().sum().item<double>() == 30 * 1000);
  std::string why =
      message_of<DeviceError>([&] { cuda::Graph bad(0, stream.handle(), [&] { (void)(x + 1); }); });
  CHECK(contains(why, "while a CUDA graph is captured"));
  // The stream is usable again.
  local::execute_inplace(OpId::add, std::vector<local::Tensor>{x}, one);
  stream.synchronize();
  CHECK(x.cpu().sum().item<double>() == 31 * 1000);
}

TEST_CASE("gpu: a worker's device ops replay as CUDA graphs, bit for bit as eagerly") {
  if (no_gpu()) return;
  Cluster cluster(1);
  device_guard on(0);
  Generator gen(3);
  local::Tensor host = local::randn({256, 64}, gen);
  DistributedTensor x = dist_send(host), x2 = dist_send(host);
  DistributedTensor w = dist_send(local::randn({64, 32}, gen));
  auto step = [&](DistributedTensor& x) {
    DistributedTensor h = x.matmul(w);  // not an element op: runs on its own
    DistributedTensor y = ((h * 0.5 + 1).relu() - 0.25).abs();  // a CUDA segment
    x.mul_(0.99);
    x.add_(0.01);
    return y;
  };
  DistributedTensor y;
  Graph g = capture([&] { y = step(x); });
  for (int k = 0; k < 5; ++k) {
    g.replay();
    DistributedTensor y2 = step(x2);
    std::string why;
    CHECK_MESSAGE(same_values(y.to_local(), y2.to_local(), &why), why);
    CHECK_MESSAGE(same_values(x.to_local(), x2.to_local(), &why), why);
  }
  CHECK_NOTHROW(synchronize());
  NodeMemoryStats m = memory_stats(0, 0);
  CHECK(m.graph_bytes >= static_cast<int64_t>(256 * 32 * sizeof(float)));
  g.reset();
  CHECK(memory_stats(0, 0).graph_bytes == 0);
}
