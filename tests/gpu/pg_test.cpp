// Process groups on CUDA tensors, on a machine with a GPU (ctest label `gpu`): a one-rank
// "nccl" group runs every collective through NCCL's calls; two ranks on one GPU stage
// through host memory (NCCL refuses them); with two GPUs, two ranks use NCCL and a size
// mismatch fails on both. Ranks are threads of this process. Without a device each case
// prints "SKIPPED: no CUDA device" and ctest reports it skipped.
#include <doctest/doctest.h>

#include <cstdio>
#include <string>
#include <vector>

#include "dtr/device.hpp"
#include "pg/pg_test_util.hpp"
#include "tensor/device_runtime.hpp"

using namespace dtr;
using namespace dtr::pgtest;

namespace {

bool skip(int devices_needed) {
  if (cuda_device_count() >= devices_needed) return false;
  std::printf("SKIPPED: no CUDA device (%d needed, %d found: %s)\n", devices_needed,
              cuda_device_count(), cuda_unavailable_reason().c_str());
  return true;
}

ProcessGroupOptions nccl_options() {
  ProcessGroupOptions o = fast_options();
  o.backend = "nccl";
  return o;
}

}  // namespace

TEST_CASE("gpu: a one-rank nccl group runs every collective through NCCL") {
  if (skip(1)) return;
  check_no_errors(run_ranks(
      1,
      [&](ProcessGroup& g) {
        every_collective(g, [](const local::Tensor& t) { return t.cuda(0); });
        if (!g.cuda_path().starts_with("nccl ")) throw Error("path: " + g.cuda_path());
      },
      nccl_options()));
}

TEST_CASE("gpu: two ranks on one GPU stage through host memory, in zmq and nccl groups") {
  if (skip(1)) return;
  for (const auto& options : {fast_options(), nccl_options()}) {
    CAPTURE(options.backend);
    check_no_errors(run_ranks(
        2,
        [&](ProcessGroup& g) {
          every_collective(g, [](const local::Tensor& t) { return t.cuda(0); });
          if (!g.cuda_path().starts_with("host staging")) throw Error("path: " + g.cuda_path());
        },
        options));
  }
}

TEST_CASE("gpu: two ranks on two GPUs use NCCL, and a size mismatch fails on both") {
  if (skip(2)) return;
  check_no_errors(run_ranks(
      2,
      [&](ProcessGroup& g) {
        const int device = g.rank();
        every_collective(g, [device](const local::Tensor& t) { return t.cuda(device); });
        if (!g.cuda_path().starts_with("nccl ")) throw Error("path: " + g.cuda_path());
        auto bad = local::zeros(Shape{g.rank() == 0 ? 8 : 9}).cuda(device);
        try {
          g.all_reduce(bad);
          throw Error("a size mismatch was accepted");
        } catch (const ShapeError&) {
        }
        auto t = local::ones(Shape{16}).cuda(device);
        g.all_reduce(t);  // the group goes on
        expect_values(
            t, [](int64_t) { return 2.0; }, "all_reduce after the mismatch");
      },
      nccl_options()));
}
