// Master-issued collectives among the workers of a session: values against the local
// library, subgroups, in-place on views, failures, and mistakes caught on the master.
#include <doctest/doctest.h>

#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <vector>

#include "dtr/collectives.hpp"
#include "dtr/process_group.hpp"
#include "dtr/stream.hpp"
#include "master/cluster.hpp"

namespace {

using namespace dtr;
using namespace dtr::test;
using dtr::local::Tensor;

// One tensor per node k in `nodes`: seeded random values (integers for integral dtypes).
std::vector<DistributedTensor> per_node(const std::vector<int>& nodes, const Shape& shape,
                                        DType dtype, uint64_t seed) {
  std::vector<DistributedTensor> out;
  for (int k : nodes) {
    node_guard on(k);
    Generator g(seed + static_cast<uint64_t>(k));
    DistributedTensor t = dtr::rand(shape, g) * 8 - 4;
    out.push_back(t.to(dtype));
  }
  return out;
}

bool bit_identical(const Tensor& a, const Tensor& b) {
  return a.dtype() == b.dtype() && a.shape() == b.shape() &&
         std::memcmp(a.contiguous().raw_data(), b.contiguous().raw_data(),
                     static_cast<size_t>(a.numel()) * element_size(a.dtype())) == 0;
}

}  // namespace

TEST_CASE("all_reduce over every node: each reduce op, dtypes, results identical on all nodes") {
  Cluster cluster(3);
  std::vector<int> nodes{0, 1, 2};
  for (DType dt : {DType::Float32, DType::Float64, DType::Int32, DType::Int64}) {
    for (ReduceOp op :
         {ReduceOp::Sum, ReduceOp::Product, ReduceOp::Min, ReduceOp::Max, ReduceOp::Avg}) {
      if (op == ReduceOp::Avg && !is_floating(dt)) continue;
      CAPTURE(dtype_name(dt));
      CAPTURE(reduce_op_name(op));
      std::vector<DistributedTensor> ts = per_node(nodes, {5, 3}, dt, 100);
      std::vector<Tensor> local;
      for (auto& t : ts) local.push_back(t.to_local());
      all_reduce(ts, op);
      Tensor first = ts[0].to_local();
      for (size_t i = 1; i < ts.size(); ++i) CHECK(bit_identical(ts[i].to_local(), first));
      // Against the local library: exact for integers, close for floats (the order of
      // additions is the algorithm's).
      Tensor want = local[0];
      for (size_t i = 1; i < local.size(); ++i) {
        switch (op) {
          case ReduceOp::Sum:
          case ReduceOp::Avg:
            want = want + local[i];
            break;
          case ReduceOp::Product:
            want = want * local[i];
            break;
          case ReduceOp::Min:
            want = want.minimum(local[i]);
            break;
          case ReduceOp::Max:
            want = want.maximum(local[i]);
            break;
        }
      }
      if (op == ReduceOp::Avg) want = want / 3;
      auto got = first.to_vector<double>();
      auto exp = want.to(first.dtype()).to_vector<double>();
      REQUIRE(got.size() == exp.size());
      for (size_t i = 0; i < got.size(); ++i)
        CHECK(got[i] == doctest::Approx(exp[i]).epsilon(1e-5));
    }
  }
  synchronize();
}

TEST_CASE("broadcast, all_gather, reduce_scatter, subgroups in any order, views in place") {
  Cluster cluster(3);
  // Subgroup {2, 0}: rank 0 is node 2, rank 1 is node 0.
  std::vector<DistributedTensor> pair = per_node({2, 0}, {4}, DType::Float32, 7);
  Tensor from_node0 = pair[1].to_local();
  broadcast(pair, 1);
  check_same(pair[0], from_node0);
  check_same(pair[1], from_node0);
  CHECK(pair[0].get_node() == 2);

  std::vector<DistributedTensor> ts = per_node({0, 1, 2}, {2, 3}, DType::Int64, 9);
  std::vector<Tensor> local;
  for (auto& t : ts) local.push_back(t.to_local());
  std::vector<DistributedTensor> gathered = all_gather(ts);
  REQUIRE(gathered.size() == 3);
  for (int k = 0; k < 3; ++k) {
    CHECK(gathered[k].get_node() == k);
    CHECK(gathered[k].shape() == Shape{3, 2, 3});
    for (int j = 0; j < 3; ++j) check_same(gathered[k].select(0, j), local[j]);
  }

  std::vector<DistributedTensor> big = per_node({1, 2}, {4, 2}, DType::Int32, 3);
  Tensor sum = big[0].to_local() + big[1].to_local();
  std::vector<DistributedTensor> parts = reduce_scatter(big, ReduceOp::Sum);
  REQUIRE(parts.size() == 2);
  CHECK(parts[0].get_node() == 1);
  check_same(parts[0], sum.narrow(0, 0, 2).contiguous());
  check_same(parts[1], sum.narrow(0, 2, 2).contiguous());

  // The same subgroup again (reused), and a non-contiguous view reduced in place.
  std::vector<DistributedTensor> bases = per_node({2, 0}, {3, 4}, DType::Float64, 5);
  Tensor b0 = bases[0].to_local(), b1 = bases[1].to_local();
  std::vector<DistributedTensor> views{bases[0].transpose(0, 1), bases[1].transpose(0, 1)};
  all_reduce(views, ReduceOp::Max);
  check_same(bases[0], b0.maximum(b1));
  check_same(bases[1], b0.maximum(b1));
  synchronize();
}

TEST_CASE("collectives follow streams and events") {
  Cluster cluster(2);
  std::vector<Stream> streams{Stream::create(0), Stream::create(1)};
  std::vector<DistributedTensor> ts;
  for (int k = 0; k < 2; ++k) {
    node_guard on(k);
    ts.push_back(dtr::zeros({8}));
  }
  synchronize();
  for (int rep = 1; rep <= 3; ++rep) {
    for (int k = 0; k < 2; ++k) {
      stream_guard on(streams[static_cast<size_t>(k)]);
      ts[static_cast<size_t>(k)].add_(k + 1);  // node 0 adds 1, node 1 adds 2
    }
    std::vector<Event> done(2);
    {
      stream_guard on0(streams[0]);
      stream_guard on1(streams[1]);
      all_reduce(ts);
      done[0].record(streams[0]);
      done[1].record(streams[1]);
    }
    done[0].synchronize();
    done[1].synchronize();
    // Each rep adds 1 on node 0 and 2 on node 1, then both become the sum.
    float expected = 0;
    for (int r = 1; r <= rep; ++r) expected = (expected + 1) + (expected + 2);
    check_same(ts[0], local::full({8}, expected));
    check_same(ts[1], local::full({8}, expected));
  }
  synchronize();
}

TEST_CASE("a failed input fails every member's output, naming the node; later collectives work") {
  Cluster cluster(3);
  std::vector<DistributedTensor> ts = per_node({0, 1, 2}, {3}, DType::Int64, 1);
  {
    node_guard on(1);
    ts[1] = dtr::ones({3}, DType::Int64).pow(-1);  // fails on node 1
  }
  all_reduce(ts);
  // An event after the collective on node 0's stream reports the failed collective.
  Event after;
  after.record(current_stream(0));
  CHECK(contains(message_of<RemoteError>([&] { after.synchronize(); }), "input on node 1"));
  CHECK(contains(message_of<RemoteError>([&] { ts[0].to_local(); }), "input on node 1"));
  CHECK(contains(message_of<RemoteError>([&] { ts[2].to_local(); }), "input on node 1"));
  CHECK(contains(message_of<RemoteError>([&] { ts[1].to_local(); }), "first cause: pow"));
  CHECK(contains(message_of<RemoteError>([] { synchronize(); }), "pow"));
  std::vector<DistributedTensor> fresh = per_node({0, 1, 2}, {3}, DType::Int64, 2);
  Tensor want = fresh[0].to_local() + fresh[1].to_local() + fresh[2].to_local();
  all_reduce(fresh);
  for (auto& t : fresh) check_same(t, want);
}

// The workers' process group on gloo (MasterOptions::backend): the same collectives, the
// same values, and each worker's log says which backend its group is up on.
TEST_CASE("the workers' backend: gloo carries master-issued collectives") {
  if (!backend_available("gloo")) {
    MESSAGE("this dtr is built without gloo: skipped");
    return;
  }
  std::vector<std::string> logs;
  std::vector<WorkerProcess> workers;
  for (int k = 0; k < 3; ++k) {
    logs.push_back(std::filesystem::temp_directory_path() /
                   ("dtr-gloo-worker-" + std::to_string(getpid()) + "-" + std::to_string(k)));
    workers.emplace_back(std::vector<std::string>{"--log-level", "info", "--devices", "none"},
                         logs.back());
  }
  MasterOptions o = test_options();
  for (auto& w : workers) o.workers.push_back(w.endpoint());
  o.backend = "gloo";
  init_master_worker(o);
  SessionGuard guard;
  std::vector<DistributedTensor> ts = per_node({0, 1, 2}, {5, 3}, DType::Int64, 11);
  Tensor sum = ts[0].to_local() + ts[1].to_local() + ts[2].to_local();
  all_reduce(ts, ReduceOp::Sum);
  for (auto& t : ts) check_same(t, sum);
  std::vector<DistributedTensor> fs = per_node({0, 1, 2}, {64}, DType::Float32, 12);
  Tensor avg = (fs[0].to_local() + fs[1].to_local() + fs[2].to_local()) / 3;
  all_reduce(fs, ReduceOp::Avg);
  Tensor first = fs[0].to_local();
  for (auto& t : fs) CHECK(bit_identical(t.to_local(), first));
  auto got = first.to_vector<double>(), want = avg.to_vector<double>();
  for (size_t i = 0; i < got.size(); ++i) CHECK(got[i] == doctest::Approx(want[i]).epsilon(1e-5));
  std::vector<DistributedTensor> pair = per_node({2, 0}, {4}, DType::Float32, 7);
  Tensor from_node0 = pair[1].to_local();
  broadcast(pair, 1);  // a subgroup: rank 1 is node 0
  check_same(pair[0], from_node0);
  std::vector<DistributedTensor> gathered = all_gather(ts);
  for (int k = 0; k < 3; ++k)
    for (int j = 0; j < 3; ++j) check_same(gathered[k].select(0, j), sum);
  std::vector<DistributedTensor> big = per_node({1, 2}, {4, 2}, DType::Int32, 3);
  Tensor both = big[0].to_local() + big[1].to_local();
  std::vector<DistributedTensor> parts = reduce_scatter(big, ReduceOp::Sum);
  check_same(parts[1], both.narrow(0, 2, 2).contiguous());
  synchronize();
  for (const std::string& path : logs) {
    std::ifstream in(path);
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    CHECK_MESSAGE(
        text.find("process group of 3 workers is up on backend gloo") != std::string::npos, text);
    std::remove(path.c_str());
  }
}

TEST_CASE(
    "the workers' backend: mpi outside an MPI job and unknown names are refused before "
    "connecting") {
  MasterOptions o = test_options();
  o.workers = {"tcp://127.0.0.1:1"};  // never reached: the options are checked first
  o.backend = "mpi";
  {
    ScopedEnv rank("OMPI_COMM_WORLD_RANK", std::nullopt), pmi("PMI_RANK", std::nullopt);
    CHECK_THROWS_WITH_AS(init_master_worker(o),
                         doctest::Contains("mpirun -np N+1 dtr-exec --launched PROGRAM"),
                         InvalidArgument);
  }
  {
    // An MPI job of the wrong size for the session: rank 0 of 3 with one worker.
    ScopedEnv rank("OMPI_COMM_WORLD_RANK", "0"), size("OMPI_COMM_WORLD_SIZE", "3");
    CHECK_THROWS_WITH_AS(init_master_worker(o),
                         doctest::Contains("an MPI job of its 1 workers and itself (2 processes); "
                                           "this process is rank 0 of 3"),
                         InvalidArgument);
  }
  o.backend = "glo";
  CHECK_THROWS_WITH_AS(init_master_worker(o), doctest::Contains("unknown backend 'glo'"),
                       InvalidArgument);
  o.backend.clear();
  ScopedEnv env("DTR_BACKEND", "carrier-pigeon");
  CHECK_THROWS_WITH_AS(init_master_worker(o), doctest::Contains("unknown backend 'carrier-pigeon'"),
                       InvalidArgument);
  CHECK_FALSE(is_master_worker_initialized());
}

TEST_CASE("collective mistakes are caught on the master, naming what is wrong") {
  Cluster cluster(2);
  DistributedTensor a = dtr::zeros({4});
  DistributedTensor a2 = dtr::zeros({4});
  DistributedTensor b, c, d;
  {
    node_guard on(1);
    b = dtr::zeros({5});
    c = dtr::zeros({4}, DType::Int32);
    d = dtr::zeros({4});
  }
  std::vector<DistributedTensor> none;
  CHECK(contains(message_of<InvalidArgument>([&] { all_reduce(none); }), "no tensors"));
  std::vector<DistributedTensor> twice{a, a2};
  std::string m = message_of<InvalidArgument>([&] { all_reduce(twice); });
  CHECK_MESSAGE((contains(m, "tensors 0 and 1") && contains(m, "node 0")), m);
  std::vector<DistributedTensor> shapes{a, b};
  CHECK(contains(message_of<ShapeError>([&] { all_reduce(shapes); }), "shape [5]"));
  std::vector<DistributedTensor> dtypes{a, c};
  CHECK(contains(message_of<DTypeError>([&] { all_gather(dtypes); }), "int32"));
  std::vector<DistributedTensor> ok{a, d};
  CHECK(contains(message_of<IndexError>([&] { broadcast(ok, 2); }), "root 2"));
  std::vector<DistributedTensor> odd{dtr::zeros({3}), d.narrow(0, 0, 3)};
  CHECK(contains(message_of<ShapeError>([&] { reduce_scatter(odd); }), "2 equal parts"));
  std::vector<DistributedTensor> bools{dtr::zeros({4}, DType::Bool), d.to(DType::Bool)};
  CHECK(contains(message_of<DTypeError>([&] { all_reduce(bools); }), "bool"));
  all_reduce(bools, ReduceOp::Max);  // logical or: fine
  check_same(bools[1], local::zeros({4}, DType::Bool));
  synchronize();
}

TEST_CASE("a collective with a killed member fails on the others instead of hanging") {
  MasterOptions o = test_options();
  o.sync_timeout = 60s;
  Cluster cluster(3, o);
  std::vector<DistributedTensor> ts = per_node({0, 1, 2}, {64}, DType::Float32, 4);
  all_reduce(ts);
  synchronize();
  CHECK(cluster.worker(2).stop(SIGKILL, 5s) != -1);
  auto t0 = std::chrono::steady_clock::now();
  // Issued right away the master may not know yet; either way nothing hangs.
  std::string outcome;
  try {
    all_reduce(ts);
    (void)ts[0].to_local();
    outcome = "no exception";
  } catch (const WorkerLost& e) {
    outcome = std::string("WorkerLost: ") + e.what();
  } catch (const RemoteError& e) {
    outcome = std::string("RemoteError: ") + e.what();
  }
  auto ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t0)
          .count();
  MESSAGE(outcome, " (", ms, " ms)");
  CHECK((outcome.rfind("WorkerLost", 0) == 0 || outcome.rfind("RemoteError", 0) == 0));
  CHECK(contains(outcome, "2"));
  // Nodes 0 and 1 still work, together too.
  std::vector<DistributedTensor> pair{ts[0], ts[1]};
  pair[0] = with_node(0, [] { return dtr::ones({2}); });
  pair[1] = with_node(1, [] { return dtr::ones({2}); });
  all_reduce(pair);
  check_same(pair[0], local::full({2}, 2.0));
  check_same(pair[1], local::full({2}, 2.0));
}
