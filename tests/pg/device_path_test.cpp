// The CUDA-tensor paths of the process groups (pg/device_backend.hpp) that run without a
// GPU: host staging with host tensors forced through it, the NCCL set-up decision and
// signature checks, the device checks of a call, and what cuda_path() reports.
#include <doctest/doctest.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "dtr/config.hpp"
#include "pg/device_backend.hpp"
#include "pg/nccl/nccl.hpp"
#include "pg_test_util.hpp"

using namespace dtr;
using namespace dtr::pgtest;

namespace {

// Groups made in its scope stage host tensors as if they lived on a device.
struct ForceStaging {
  ForceStaging() { pg::set_stage_host_tensors_for_testing(true); }
  ~ForceStaging() { pg::set_stage_host_tensors_for_testing(false); }
  ForceStaging(const ForceStaging&) = delete;
  ForceStaging& operator=(const ForceStaging&) = delete;
};

// The backends whose groups run in threads here (mpi ranks are processes).
std::vector<std::string> backends() {
  std::vector<std::string> out{"zmq"};
  if (backend_available("nccl")) out.push_back("nccl");
  if (backend_available("gloo")) out.push_back("gloo");
  return out;
}

ProcessGroupOptions with_backend(const std::string& b) {
  ProcessGroupOptions o = fast_options();
  o.backend = b;
  return o;
}

// A tensor whose storage says it lives on cuda:63 (host bytes nobody may read).
local::Tensor fake_device_tensor(int64_t n) {
  auto bytes = std::make_shared<std::vector<float>>(static_cast<size_t>(n));
  return local::Tensor(Storage::wrap_device(63, bytes->data(), n * 4, bytes),
                       TensorMeta::contiguous(DType::Float32, {n}));
}

}  // namespace

TEST_CASE("device path: every collective and p2p call through host staging gives the results") {
  ForceStaging force;
  for (const auto& b : backends()) {
    CAPTURE(b);
    check_no_errors(run_ranks(
        3,
        [&](ProcessGroup& g) {
          every_collective(g, [](const local::Tensor& t) { return t; });
          // An any-source receive reports its sender.
          const int64_t n = 37;
          if (g.rank() == 0) {
            auto any = local::zeros(Shape{n}, DType::Int32);
            const int from = g.recv(any, kAnySource, 9);
            if (from != 2) throw Error("any-source recv: sender " + std::to_string(from));
            expect_values(
                any, [&](int64_t i) { return value_for(2, i, DType::Int32, ReduceOp::Sum); },
                "any-source recv");
          } else if (g.rank() == 2) {
            g.send(make_input(2, n, DType::Int32), 0, 9);
          }
          g.barrier();
        },
        with_backend(b)));
  }
}

TEST_CASE("device path: async staged collectives complete in order and errors reach the Work") {
  ForceStaging force;
  check_no_errors(run_ranks(2, [&](ProcessGroup& g) {
    std::vector<local::Tensor> ts;
    std::vector<Work> works;
    for (int k = 0; k < 20; ++k) {
      ts.push_back(local::full(Shape{64}, Scalar(k + g.rank()), DType::Float32));
      works.push_back(g.all_reduce_async(ts.back()));
    }
    for (int k = 0; k < 20; ++k) {
      works[k].wait();
      expect_values(
          ts[k], [&](int64_t) { return 2.0 * k + 1; }, "async all_reduce");
    }
    // Sizes that differ across ranks fail on every rank, through the staged Work.
    auto bad = local::zeros(Shape{g.rank() == 0 ? 8 : 9});
    try {
      g.all_reduce(bad);
      throw Error("a size mismatch was accepted");
    } catch (const ShapeError&) {
    }
  }));
}

TEST_CASE("device path: a staged receive fails promptly when the group shuts down") {
  ForceStaging force;
  check_no_errors(run_ranks(2, [&](ProcessGroup& g) {
    if (g.rank() == 0) {
      auto t = local::zeros(Shape{4});
      Work w = g.irecv(t, 1, 3);
      g.shutdown();
      try {
        w.wait(std::chrono::seconds(20));
        throw Error("the receive completed without a sender");
      } catch (const TimeoutError&) {
        throw;  // waited the whole bound: shutdown did not reach it
      } catch (const Error&) {
      }
    } else {
      g.shutdown();
    }
  }));
}

TEST_CASE("device path: a call's tensors must share one device") {
  check_no_errors(run_ranks(2, [&](ProcessGroup& g) {
    auto dev = fake_device_tensor(4);
    auto host = local::zeros(Shape{4});
    std::vector<local::Tensor> outs{dev, fake_device_tensor(4)};
    try {
      g.all_gather(outs, host);
      throw Error("mixed devices were accepted");
    } catch (const DeviceError& e) {
      const std::string m = e.what();
      if (m.find("cuda:63") == std::string::npos || m.find("cpu") == std::string::npos) {
        throw Error("message does not name both devices: " + m);
      }
    }
    g.barrier();
  }));
}

TEST_CASE("device path: a CUDA tensor on a missing device fails naming it, the group goes on") {
  for (const auto& b : backends()) {
    CAPTURE(b);
    check_no_errors(run_ranks(
        2,
        [&](ProcessGroup& g) {
          auto gpu = fake_device_tensor(4);
          for (auto call : std::vector<std::function<void()>>{[&] { g.send(gpu, 1 - g.rank()); },
                                                              [&] { g.all_reduce(gpu); },
                                                              [&] { g.broadcast(gpu, 0); }}) {
            try {
              call();
              throw Error("a tensor on a missing device was accepted");
            } catch (const DeviceError& e) {
              if (std::string(e.what()).find("cuda:63") == std::string::npos) throw Error(e.what());
            }
          }
          auto t = local::ones(Shape{4});
          g.all_reduce(t);
          expect_values(
              t, [](int64_t) { return 2.0; }, "all_reduce after the failures");
        },
        with_backend(b)));
  }
}

TEST_CASE("device path: cuda_path says how CUDA tensors travel") {
  for (const auto& b : backends()) {
    check_no_errors(run_ranks(
        1,
        [&](ProcessGroup& g) {
          const std::string path = g.cuda_path();
          if (b != "nccl") {
            if (!path.starts_with("host staging")) throw Error(b + ": " + path);
          } else if (pg::nccl_built()) {
            if (!path.starts_with("nccl: set up at the group's first collective")) {
              throw Error("nccl: " + path);
            }
          } else if (path.find("built without NCCL") == std::string::npos) {
            throw Error("nccl without NCCL: " + path);
          }
          if (g.new_group({0}).cuda_path() != path) throw Error("a subgroup reports another path");
        },
        with_backend(b)));
  }
  CHECK(backend_available("nccl") == static_cast<bool>(DTR_WITH_CUDA));
  CHECK(pg::nccl_built() == static_cast<bool>(DTR_WITH_NCCL));
  CHECK(pg::nccl_version().empty() != static_cast<bool>(DTR_WITH_NCCL));
}

TEST_CASE("device path: NCCL or staging is decided from every rank's GPU and NCCL") {
  // Three words per rank: GPU UUID (two words), built with NCCL.
  std::vector<int64_t> distinct{1, 2, 1, 3, 4, 1, 5, 6, 1};
  CHECK(pg::staging_reason(distinct.data(), 3).empty());
  std::vector<int64_t> shared{1, 2, 1, 3, 4, 1, 1, 2, 1};
  CHECK(pg::staging_reason(shared.data(), 3) ==
        "ranks 0 and 2 share one GPU, which NCCL does not allow");
  std::vector<int64_t> half_match{1, 2, 1, 1, 3, 1};  // same first word only: distinct GPUs
  CHECK(pg::staging_reason(half_match.data(), 2).empty());
  std::vector<int64_t> no_nccl{1, 2, 1, 3, 4, 0};
  CHECK(pg::staging_reason(no_nccl.data(), 2) == "rank 1 was built without NCCL");
}

TEST_CASE("device path: NCCL signatures that disagree fail with the rank and both values") {
  auto sig = [](CommOp op, DType dt, int64_t n, int root, ReduceOp red, int device,
                int comm_device) {
    pg::CollectiveArgs a;
    a.op = op;
    a.root = root;
    a.reduce = red;
    a.outputs = {local::zeros(Shape{n}, dt)};
    if (op == CommOp::AllGather || op == CommOp::Gather) a.inputs = a.outputs;
    return pg::nccl_signature(a, device, comm_device);
  };
  auto both = [](const std::vector<int64_t>& x, const std::vector<int64_t>& y) {
    std::vector<int64_t> all = x;
    all.insert(all.end(), y.begin(), y.end());
    return all;
  };
  auto base = sig(CommOp::AllReduce, DType::Float32, 10, 0, ReduceOp::Sum, 0, 0);
  auto same = both(base, sig(CommOp::AllReduce, DType::Float32, 10, 1, ReduceOp::Sum, 1, 1));
  CHECK_NOTHROW(pg::check_nccl_signatures(CommOp::AllReduce, same.data(), 2));  // root unused

  auto count = both(base, sig(CommOp::AllReduce, DType::Float32, 11, 0, ReduceOp::Sum, 0, 0));
  CHECK_THROWS_WITH_AS(pg::check_nccl_signatures(CommOp::AllReduce, count.data(), 2),
                       "all_reduce (nccl): rank 0 has element count 10, rank 1 has 11", ShapeError);
  auto dtype = both(base, sig(CommOp::AllReduce, DType::Float64, 10, 0, ReduceOp::Sum, 0, 0));
  CHECK_THROWS_WITH_AS(pg::check_nccl_signatures(CommOp::AllReduce, dtype.data(), 2),
                       "all_reduce (nccl): rank 0 has dtype float32, rank 1 has float64",
                       DTypeError);
  auto red = both(base, sig(CommOp::AllReduce, DType::Float32, 10, 0, ReduceOp::Max, 0, 0));
  CHECK_THROWS_AS(pg::check_nccl_signatures(CommOp::AllReduce, red.data(), 2), InvalidArgument);
  auto op = both(base, sig(CommOp::Broadcast, DType::Float32, 10, 0, ReduceOp::Sum, 0, 0));
  CHECK_THROWS_AS(pg::check_nccl_signatures(CommOp::AllReduce, op.data(), 2), InvalidArgument);

  auto b0 = sig(CommOp::Broadcast, DType::Int64, 5, 0, ReduceOp::Sum, 0, 0);
  auto roots = both(b0, sig(CommOp::Broadcast, DType::Int64, 5, 1, ReduceOp::Sum, 0, 0));
  CHECK_THROWS_WITH_AS(pg::check_nccl_signatures(CommOp::Broadcast, roots.data(), 2),
                       "broadcast (nccl): rank 0 has root 0, rank 1 has 1", InvalidArgument);
  auto reduce_ops = both(b0, sig(CommOp::Broadcast, DType::Int64, 5, 0, ReduceOp::Max, 0, 0));
  CHECK_NOTHROW(pg::check_nccl_signatures(CommOp::Broadcast, reduce_ops.data(), 2));

  auto dev = both(base, sig(CommOp::AllReduce, DType::Float32, 10, 0, ReduceOp::Sum, 1, 0));
  CHECK_THROWS_WITH_AS(pg::check_nccl_signatures(CommOp::AllReduce, dev.data(), 2),
                       "all_reduce (nccl): rank 1 passed a tensor on cuda:1, but its NCCL "
                       "communicator for this group is on cuda:0 (a group uses one GPU per rank)",
                       DeviceError);
  auto gather = both(sig(CommOp::AllGather, DType::Float32, 3, 0, ReduceOp::Sum, 0, 0),
                     sig(CommOp::AllGather, DType::Float32, 4, 0, ReduceOp::Sum, 0, 0));
  CHECK_THROWS_AS(pg::check_nccl_signatures(CommOp::AllGather, gather.data(), 2), ShapeError);
}
