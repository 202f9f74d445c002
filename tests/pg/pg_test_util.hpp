// Helpers of the process-group tests: several ranks as threads of this process (one
// ProcessGroup each, over an in-process store), ranks as forked processes, deterministic
// test data and a plain reference for every reduction.
//
// The suite parameterised by backend: PG_BACKEND_TEST("name") defines one body that runs as
// four test cases, "name [zmq]" (collectives on the same-host path), "name [zmq sockets]"
// (on the sockets), "name [gloo]" and "name [mpi]"; the body sees `backend`
// and calls run_ranks(backend, n, ...). zmq and gloo ranks are threads of this process; mpi
// ranks are the processes of an mpirun job (ctest starts the "[mpi]" cases with mpirun -np
// 4, tests/CMakeLists.txt), each running the same test cases in the same order: a group of
// n ranks is the job's first n. A backend this dtr was built without, or an mpi job with
// too few ranks, prints "SKIPPED: ..." (ctest reports the case skipped).
//
// Thread safety: run_ranks() runs `body` on one thread per rank and collects their
// failures; doctest assertions are made on the calling thread only.
#pragma once

#include <doctest/doctest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "dtr/process_group.hpp"
#include "launcher/spawn.hpp"
#include "pg/mpi/mpi_backend.hpp"
#include "support/worker_process.hpp"

namespace dtr::pgtest {

using namespace std::chrono_literals;

inline ProcessGroupOptions fast_options(std::chrono::milliseconds timeout = 30s) {
  ProcessGroupOptions o;
  o.timeout = timeout;
  return o;
}

// Creates `n` ProcessGroups (one per thread) over one in-process store, runs body(group)
// on each rank's thread, and returns every failure as "rank r: what".
inline std::vector<std::string> run_ranks(int n, const std::function<void(ProcessGroup&)>& body,
                                          ProcessGroupOptions options = fast_options()) {
  auto store = make_hash_store();
  std::mutex m;
  std::vector<std::string> errors;
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      try {
        ProcessGroup g = ProcessGroup::create(store, r, n, options);
        body(g);
        g.shutdown();
      } catch (const std::exception& e) {
        std::lock_guard lock(m);
        errors.push_back("rank " + std::to_string(r) + ": " + e.what());
      }
    });
  }
  for (auto& t : threads) t.join();
  return errors;
}

// ---- the suite parameterised by backend ----

struct BackendCase {
  const char* name;  // "zmq", "gloo", "mpi"
  bool threads;      // ranks are threads of this process (share memory) rather than processes
  // zmq: collectives take the same-host path (ranks here always share a host); false keeps
  // them on the sockets (ProcessGroupOptions::same_host).
  bool same_host = true;
  bool is(const char* n) const { return std::string(name) == n; }
};
inline const BackendCase kZmqCase{"zmq", true};
inline const BackendCase kZmqSocketsCase{"zmq", true, false};
inline const BackendCase kGlooCase{"gloo", true};
inline const BackendCase kMpiCase{"mpi", false};

#define PG_BACKEND_TEST_IMPL(name, body)                       \
  static void body(const ::dtr::pgtest::BackendCase& backend); \
  TEST_CASE(name " [zmq]") {                                   \
    body(::dtr::pgtest::kZmqCase);                             \
  }                                                            \
  TEST_CASE(name " [zmq sockets]") {                           \
    body(::dtr::pgtest::kZmqSocketsCase);                      \
  }                                                            \
  TEST_CASE(name " [gloo]") {                                  \
    body(::dtr::pgtest::kGlooCase);                            \
  }                                                            \
  TEST_CASE(name " [mpi]") {                                   \
    body(::dtr::pgtest::kMpiCase);                             \
  }                                                            \
  static void body(const ::dtr::pgtest::BackendCase& backend)
#define PG_BACKEND_TEST(name) PG_BACKEND_TEST_IMPL(name, DOCTEST_ANONYMOUS(pg_backend_test_))

// True (after printing why) when `backend` cannot run here: not built into this dtr, or mpi
// outside an MPI launcher (ctest runs the "[mpi]" cases under mpirun as pg/mpi/...).
inline bool skip_backend(const BackendCase& backend) {
  if (!backend_available(backend.name)) {
    std::printf("SKIPPED: backend %s is not built into this dtr\n", backend.name);
    return true;
  }
  if (!backend.threads && std::getenv("OMPI_COMM_WORLD_SIZE") == nullptr &&
      std::getenv("PMIX_RANK") == nullptr && std::getenv("PMI_SIZE") == nullptr) {
    std::printf("SKIPPED: the mpi cases run under mpirun (ctest's pg/mpi/* entries)\n");
    return true;
  }
  return false;
}

// The mpi job's world size (MPI is initialized at the first call).
inline int mpi_job_size() {
  static const int size = pg::mpi_world_rank_size().second;
  return size;
}

// A group of the whole mpi job with default options, for the harness's own barriers, made
// at the first use; released by release_mpi_sync_group() before the process exits
// (tests/pg/main.cpp), so that MPI is finalized.
inline std::unique_ptr<ProcessGroup>& mpi_sync_slot() {
  static std::unique_ptr<ProcessGroup> sync;
  return sync;
}
inline ProcessGroup& mpi_sync_group() {
  auto& sync = mpi_sync_slot();
  if (!sync) {
    ProcessGroupOptions o;
    o.backend = "mpi";
    o.timeout = 120s;
    const auto [rank, size] = pg::mpi_world_rank_size();
    sync = std::make_unique<ProcessGroup>(ProcessGroup::create(make_hash_store(), rank, size, o));
  }
  return *sync;
}
inline void release_mpi_sync_group() {
  mpi_sync_slot().reset();
}

// mpi: body(group) on the first n processes of the job, in a group made with `options`.
inline std::vector<std::string> run_mpi_ranks(int n, const std::function<void(ProcessGroup&)>& body,
                                              const ProcessGroupOptions& options) {
  if (mpi_job_size() < n) {
    std::printf("SKIPPED: needs %d mpi ranks, this job has %d (ctest runs mpirun -np 4)\n", n,
                mpi_job_size());
    return {};
  }
  std::vector<std::string> errors;
  const auto [rank, size] = pg::mpi_world_rank_size();
  try {
    ProcessGroup all = ProcessGroup::create(make_hash_store(), rank, size, options);
    std::vector<int> first(n);
    for (int i = 0; i < n; ++i) first[i] = i;
    ProcessGroup g = n == size ? all : all.new_group(first);
    if (g.is_member()) body(g);
    g.shutdown();
  } catch (const std::exception& e) {
    errors.push_back("rank " + std::to_string(rank) + ": " + e.what());
  }
  mpi_sync_group().barrier();  // every process is done with this case before the next
  return errors;
}

// run_ranks for any backend: threads (zmq, gloo) or the mpi job's processes; nothing (after
// a SKIPPED line) when the backend is not built.
inline std::vector<std::string> run_ranks(const BackendCase& backend, int n,
                                          const std::function<void(ProcessGroup&)>& body,
                                          ProcessGroupOptions options = fast_options()) {
  if (skip_backend(backend)) return {};
  options.backend = backend.name;
  options.same_host = backend.same_host;
  if (!backend.threads) return run_mpi_ranks(n, body, options);
  return run_ranks(n, body, options);
}

// A one-shot signal between the ranks of a test, without a clock: one rank raises it, the
// others wait for it (bounded). It lives in a file, so that ranks in other processes (mpi)
// see it too; rank 0 picks the name, broadcasts it over `g` (every rank constructs it) and
// removes the file when its process exits (the others may still be looking for it when
// rank 0's test body returns).
class RankSignal {
 public:
  explicit RankSignal(ProcessGroup& g) {
    auto token = local::full(Shape{1}, 0, DType::Int64);
    if (g.rank() == 0) {
      token = local::full(Shape{1}, static_cast<double>((::getpid() << 16) ^ counter()++),
                          DType::Int64);
    }
    g.broadcast(token, 0);
    path_ = "/tmp/dtr-pg-signal-" + std::to_string(token.item<int64_t>());
    if (g.rank() == 0) remove_at_exit(path_);
  }
  RankSignal(const RankSignal&) = delete;
  RankSignal& operator=(const RankSignal&) = delete;
  void raise() const {
    if (FILE* f = std::fopen(path_.c_str(), "w")) std::fclose(f);
  }
  // Throws when the signal does not come within `limit`.
  void wait(std::chrono::milliseconds limit = 60s) const {
    const auto deadline = std::chrono::steady_clock::now() + limit;
    while (::access(path_.c_str(), F_OK) != 0) {
      if (std::chrono::steady_clock::now() > deadline) throw Error("RankSignal: never raised");
      std::this_thread::sleep_for(1ms);
    }
  }

 private:
  static std::atomic<int64_t>& counter() {
    static std::atomic<int64_t> c{0};
    return c;
  }
  static void remove_at_exit(const std::string& path) {
    static std::mutex m;
    static std::vector<std::string> paths;
    std::lock_guard lock(m);
    if (paths.empty()) {
      std::atexit([] {
        for (const auto& p : paths) ::unlink(p.c_str());
      });
    }
    paths.push_back(path);
  }
  std::string path_;
};

inline void check_no_errors(const std::vector<std::string>& errors) {
  for (const auto& e : errors) FAIL_CHECK(e);
  CHECK(errors.empty());
}

// Forks `n` children running body(i) (launcher/spawn.hpp: each dies with this process);
// each exits 0 on success, 1 on an exception (printed), and is killed at `limit`. Returns
// the exit codes (-1 killed or crashed).
inline std::vector<int> fork_ranks(int n, const std::function<int(int)>& body,
                                   std::chrono::milliseconds limit = 60s) {
  std::vector<launcher::Child> ranks;
  for (int i = 0; i < n; ++i) {
    ranks.push_back(launcher::fork_child([&body, i] {
      try {
        return body(i);
      } catch (const std::exception& e) {
        std::fprintf(stderr, "child %d: %s\n", i, e.what());
        return 1;
      }
    }));
  }
  std::vector<int> codes;
  const auto deadline = std::chrono::steady_clock::now() + limit;
  for (launcher::Child& rank : ranks) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    std::optional<int> st = rank.wait_for(std::max(left, std::chrono::milliseconds(1)));
    if (!st) rank.stop(SIGKILL, std::chrono::milliseconds(0));
    codes.push_back(st && WIFEXITED(*st) ? WEXITSTATUS(*st) : -1);
  }
  return codes;
}

// Deterministic per-rank values, exact in every dtype (small integers).
// Forks rank 1 of a group of two (options `o`) on the tcp store at `port`, which rank 0
// hosts: it joins, takes part in one barrier (on zmq, this agrees on the same-host path) and
// stops itself (SIGSTOP). Returns its pid (it dies with this process, launcher/spawn.hpp).
inline pid_t fork_rank_that_stops(int port, const ProcessGroupOptions& o) {
  launcher::Child rank = launcher::fork_child([port, o] {
    try {
      ProcessGroup g = ProcessGroup::create(make_tcp_store("127.0.0.1", port, false), 1, 2, o);
      g.barrier();
      ::raise(SIGSTOP);
      return 0;
    } catch (const std::exception& e) {
      std::fprintf(stderr, "child: %s\n", e.what());
      return 1;
    }
  });
  return rank.release();  // the caller kills and reaps it
}

inline double value_for(int rank, int64_t i, DType dt, ReduceOp op) {
  if (dt == DType::Bool) return ((i * 7 + rank * 3) % 5) < 2 ? 1 : 0;
  if (op == ReduceOp::Product)
    return ((i + rank) % 3) - 1 == 0 ? 1 : (((i + rank) % 3) == 2 ? 2 : -1);
  return static_cast<double>(((i * 31 + rank * 17) % 23) - 11);
}

inline local::Tensor make_input(int rank, int64_t n, DType dt, ReduceOp op = ReduceOp::Sum) {
  std::vector<double> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[i] = value_for(rank, i, dt, op);
  return local::from_vector<double>(v, Shape{n}).to(dt);
}

inline double reduce_ref(int p, int64_t i, DType dt, ReduceOp op) {
  double acc = value_for(0, i, dt, op);
  for (int r = 1; r < p; ++r) {
    double x = value_for(r, i, dt, op);
    switch (op) {
      case ReduceOp::Sum:
      case ReduceOp::Avg:
        acc = dt == DType::Bool ? (acc != 0 || x != 0) : acc + x;
        break;
      case ReduceOp::Product:
        acc = dt == DType::Bool ? (acc != 0 && x != 0) : acc * x;
        break;
      case ReduceOp::Min:
        acc = std::min(acc, x);
        break;
      case ReduceOp::Max:
        acc = std::max(acc, x);
        break;
    }
  }
  if (op == ReduceOp::Avg) acc /= p;
  return acc;
}

// "" when t holds expected(i) at every i, else the first difference.
inline std::string compare(const local::Tensor& t, const std::function<double(int64_t)>& expected) {
  auto v = t.to_vector<double>();
  for (size_t i = 0; i < v.size(); ++i) {
    const double e = expected(static_cast<int64_t>(i));
    // float16/bfloat16 hold Avg's quotients to about 2^-9 (bfloat16) of their size.
    const bool half = t.dtype() == DType::Float16 || t.dtype() == DType::BFloat16;
    const double tol = half ? std::ldexp(1.0, -8) : 1e-6;
    const bool ok = std::abs(v[i] - e) <= tol * std::max(1.0, std::abs(e));
    if (!ok) {
      return "element " + std::to_string(i) + ": got " + std::to_string(v[i]) + ", expected " +
             std::to_string(e);
    }
  }
  return "";
}

// Throws naming `what` and the first difference when t (on any device) does not hold f(i).
inline void expect_values(const local::Tensor& t, const std::function<double(int64_t)>& f,
                          const char* what) {
  const std::string diff = compare(t.cpu(), f);
  if (!diff.empty()) throw Error(std::string(what) + ": " + diff);
}

// Every collective and a tagged ring of isend/irecv on tensors placed by `place` (t itself,
// or t.cuda(k)), checked against the host reference; throws on the first difference.
inline void every_collective(ProcessGroup& g,
                             const std::function<local::Tensor(const local::Tensor&)>& place) {
  const int p = g.size(), r = g.rank();
  const int64_t n = 1000;
  auto on = [&](const local::Tensor& t) { return place(t); };
  for (auto op : {ReduceOp::Sum, ReduceOp::Product, ReduceOp::Min, ReduceOp::Max, ReduceOp::Avg}) {
    for (auto dt : {DType::Float32, DType::Float64, DType::Int64, DType::Bool}) {
      if (op == ReduceOp::Avg && (dt == DType::Int64 || dt == DType::Bool)) continue;
      auto t = on(make_input(r, n, dt, op));
      g.all_reduce(t, op);
      expect_values(
          t, [&](int64_t i) { return reduce_ref(p, i, dt, op); }, "all_reduce");
    }
  }
  auto red = on(make_input(r, n, DType::Int32));
  g.reduce(red, p - 1);
  expect_values(
      red,
      [&](int64_t i) {
        return r == p - 1 ? reduce_ref(p, i, DType::Int32, ReduceOp::Sum)
                          : value_for(r, i, DType::Int32, ReduceOp::Sum);
      },
      "reduce");
  auto bc = on(make_input(r, n, DType::Float64));
  g.broadcast(bc, 0);
  expect_values(
      bc, [&](int64_t i) { return value_for(0, i, DType::Float64, ReduceOp::Sum); }, "broadcast");
  auto in = on(make_input(r, n, DType::Float32));
  std::vector<local::Tensor> list;
  for (int q = 0; q < p; ++q) list.push_back(on(local::zeros(Shape{n})));
  g.all_gather(list, in);
  for (int q = 0; q < p; ++q) {
    expect_values(
        list[q], [&](int64_t i) { return value_for(q, i, DType::Float32, ReduceOp::Sum); },
        "all_gather");
  }
  auto flat = on(local::zeros(Shape{p * n}));
  g.all_gather_into_tensor(flat, in);
  expect_values(
      flat,
      [&](int64_t i) {
        return value_for(static_cast<int>(i / n), i % n, DType::Float32, ReduceOp::Sum);
      },
      "all_gather_into_tensor");
  std::vector<local::Tensor> gathered;
  for (int q = 0; q < p; ++q) gathered.push_back(on(local::zeros(Shape{n})));
  g.gather(in, r == 0 ? &gathered : nullptr, 0);
  if (r == 0) {
    for (int q = 0; q < p; ++q) {
      expect_values(
          gathered[q], [&](int64_t i) { return value_for(q, i, DType::Float32, ReduceOp::Sum); },
          "gather");
    }
  }
  std::vector<local::Tensor> parts;
  for (int q = 0; q < p; ++q) parts.push_back(on(make_input(q + 5, n, DType::Float32)));
  auto got = on(local::zeros(Shape{n}));
  g.scatter(got, r == 0 ? &parts : nullptr, 0);
  expect_values(
      got, [&](int64_t i) { return value_for(r + 5, i, DType::Float32, ReduceOp::Sum); },
      "scatter");
  std::vector<local::Tensor> blocks;
  for (int q = 0; q < p; ++q) blocks.push_back(on(make_input(r + q, n, DType::Float32)));
  auto mine = on(local::zeros(Shape{n}));
  g.reduce_scatter(mine, blocks);
  expect_values(
      mine,
      [&](int64_t i) {
        double s = 0;
        for (int q = 0; q < p; ++q) s += value_for(q + r, i, DType::Float32, ReduceOp::Sum);
        return s;
      },
      "reduce_scatter");
  if (p > 1) {
    auto out = on(make_input(r, n, DType::Int64));
    auto back = on(local::zeros(Shape{n}, DType::Int64));
    Work s = g.isend(out, (r + 1) % p, 4);
    Work rv = g.irecv(back, (r + p - 1) % p, 4);
    s.wait();
    rv.wait();
    expect_values(
        back, [&](int64_t i) { return value_for((r + p - 1) % p, i, DType::Int64, ReduceOp::Sum); },
        "ring send/recv");
  }
  g.barrier();
}

}  // namespace dtr::pgtest
