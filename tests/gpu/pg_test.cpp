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
#include "tensor/cuda/cuda.hpp"

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

void expect(const local::Tensor& t, const std::function<double(int64_t)>& f, const char* what) {
  const std::string diff = compare(t.cpu(), f);
  if (!diff.empty()) throw Error(std::string(what) + ": " + diff);
}

// Every collective on `device`, checked against the host reference (p ranks).
void every_collective(ProcessGroup& g, int device) {
  const int p = g.size(), r = g.rank();
  const int64_t n = 1000;
  auto on = [&](const local::Tensor& t) { return t.cuda(device); };
  for (auto op : {ReduceOp::Sum, ReduceOp::Product, ReduceOp::Min, ReduceOp::Max, ReduceOp::Avg}) {
    for (auto dt : {DType::Float32, DType::Float64, DType::Int64, DType::Bool}) {
      if (op == ReduceOp::Avg && (dt == DType::Int64 || dt == DType::Bool)) continue;
      auto t = on(make_input(r, n, dt, op));
      g.all_reduce(t, op);
      expect(
          t, [&](int64_t i) { return reduce_ref(p, i, dt, op); }, "all_reduce");
    }
  }
  auto red = on(make_input(r, n, DType::Int32));
  g.reduce(red, p - 1);
  expect(
      red,
      [&](int64_t i) {
        return r == p - 1 ? reduce_ref(p, i, DType::Int32, ReduceOp::Sum)
                          : value_for(r, i, DType::Int32, ReduceOp::Sum);
      },
      "reduce");
  auto bc = on(make_input(r, n, DType::Float64));
  g.broadcast(bc, 0);
  expect(
      bc, [&](int64_t i) { return value_for(0, i, DType::Float64, ReduceOp::Sum); }, "broadcast");
  auto in = on(make_input(r, n, DType::Float32));
  std::vector<local::Tensor> list;
  for (int q = 0; q < p; ++q) list.push_back(local::zeros(Shape{n}).cuda(device));
  g.all_gather(list, in);
  for (int q = 0; q < p; ++q) {
    expect(
        list[q], [&](int64_t i) { return value_for(q, i, DType::Float32, ReduceOp::Sum); },
        "all_gather");
  }
  auto flat = local::zeros(Shape{p * n}).cuda(device);
  g.all_gather_into_tensor(flat, in);
  expect(
      flat,
      [&](int64_t i) {
        return value_for(static_cast<int>(i / n), i % n, DType::Float32, ReduceOp::Sum);
      },
      "all_gather_into_tensor");
  std::vector<local::Tensor> gathered;
  for (int q = 0; q < p; ++q) gathered.push_back(local::zeros(Shape{n}).cuda(device));
  g.gather(in, r == 0 ? &gathered : nullptr, 0);
  if (r == 0) {
    for (int q = 0; q < p; ++q) {
      expect(
          gathered[q], [&](int64_t i) { return value_for(q, i, DType::Float32, ReduceOp::Sum); },
          "gather");
    }
  }
  std::vector<local::Tensor> parts;
  for (int q = 0; q < p; ++q) parts.push_back(on(make_input(q + 5, n, DType::Float32)));
  auto got = local::zeros(Shape{n}).cuda(device);
  g.scatter(got, r == 0 ? &parts : nullptr, 0);
  expect(
      got, [&](int64_t i) { return value_for(r + 5, i, DType::Float32, ReduceOp::Sum); },
      "scatter");
  std::vector<local::Tensor> blocks;
  for (int q = 0; q < p; ++q) blocks.push_back(on(make_input(r + q, n, DType::Float32)));
  auto mine = local::zeros(Shape{n}).cuda(device);
  g.reduce_scatter(mine, blocks);
  expect(
      mine,
      [&](int64_t i) {
        double s = 0;
        for (int q = 0; q < p; ++q) s += value_for(q + r, i, DType::Float32, ReduceOp::Sum);
        return s;
      },
      "reduce_scatter");
  if (p > 1) {
    auto out = on(make_input(r, n, DType::Int64));
    auto back = local::zeros(Shape{n}, DType::Int64).cuda(device);
    Work s = g.isend(out, (r + 1) % p, 4);
    Work rv = g.irecv(back, (r + p - 1) % p, 4);
    s.wait();
    rv.wait();
    expect(
        back, [&](int64_t i) { return value_for((r + p - 1) % p, i, DType::Int64, ReduceOp::Sum); },
        "ring send/recv");
  }
  g.barrier();
}

}  // namespace

TEST_CASE("gpu: a one-rank nccl group runs every collective through NCCL") {
  if (skip(1)) return;
  check_no_errors(run_ranks(
      1,
      [&](ProcessGroup& g) {
        every_collective(g, 0);
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
          every_collective(g, 0);
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
        every_collective(g, device);
        if (!g.cuda_path().starts_with("nccl ")) throw Error("path: " + g.cuda_path());
        auto bad = local::zeros(Shape{g.rank() == 0 ? 8 : 9}).cuda(device);
        try {
          g.all_reduce(bad);
          throw Error("a size mismatch was accepted");
        } catch (const ShapeError&) {
        }
        auto t = local::ones(Shape{16}).cuda(device);
        g.all_reduce(t);  // the group goes on
        expect(
            t, [](int64_t) { return 2.0; }, "all_reduce after the mismatch");
      },
      nccl_options()));
}
