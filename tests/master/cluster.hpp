// Shared helpers of the master integration tests: a cluster of real dtr-worker processes
// with a master session over them (RAII), exact tensor comparison and exception capture.
//
// Every test case builds its own Cluster; its destructor shuts the session down first and
// then stops the workers (members are destroyed after the destructor body).
#pragma once

#include <doctest/doctest.h>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <exception>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "dtr/distributed.hpp"
#include "dtr/tensor.hpp"
#include "support/message_of.hpp"
#include "support/worker_process.hpp"

namespace dtr::test {

using namespace std::chrono_literals;

inline MasterOptions test_options() {
  MasterOptions o;
  o.connect_timeout = 10s;
  o.sync_timeout = 30s;
  return o;
}

// Sets (or unsets, with nullopt) an environment variable for the scope, restoring it after.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, std::optional<std::string> value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    if (value) {
      setenv(name, value->c_str(), 1);
    } else {
      unsetenv(name);
    }
  }
  ~ScopedEnv() {
    if (old_) {
      setenv(name_, old_->c_str(), 1);
    } else {
      unsetenv(name_);
    }
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  const char* name_;
  std::optional<std::string> old_;
};

// Resets this thread's node and device and shuts the session down (if any).
inline void end_session() {
  try {
    if (is_master_worker_initialized()) set_node(0);
  } catch (...) {
  }
  set_device(-1);
  shutdown_master_worker();
}

// Calls end_session() on destruction, whatever the test did with the session.
struct SessionGuard {
  SessionGuard() = default;
  SessionGuard(const SessionGuard&) = delete;
  SessionGuard& operator=(const SessionGuard&) = delete;
  ~SessionGuard() { end_session(); }
};

// n listening workers and a master session connected to them.
// Command-line arguments for every worker of a Cluster (Cluster(n, WorkerArgs{...})).
struct WorkerArgs {
  std::vector<std::string> args;
};
// Workers that see no CUDA device whatever the machine has: for tests of CPU-only nodes,
// which would otherwise find the GPU of a GPU machine.
inline WorkerArgs cpu_only() {
  return WorkerArgs{{"--devices", "none"}};
}

class Cluster {
 public:
  explicit Cluster(int n, MasterOptions options = test_options())
      : Cluster(n, WorkerArgs{}, std::move(options)) {}
  Cluster(int n, const WorkerArgs& worker_args, MasterOptions options = test_options()) {
    workers_.reserve(static_cast<size_t>(n));
    for (int i = 0; i < n; ++i) workers_.emplace_back(worker_args.args);
    options.workers.clear();
    for (auto& w : workers_) options.workers.push_back(w.endpoint());
    init_master_worker(options);
    started_ = true;
  }
  ~Cluster() {
    if (started_) end_session();
  }
  Cluster(const Cluster&) = delete;
  Cluster& operator=(const Cluster&) = delete;

  WorkerProcess& worker(int k) { return workers_[static_cast<size_t>(k)]; }
  std::vector<std::string> endpoints() const {
    std::vector<std::string> e;
    for (const auto& w : workers_) e.push_back(w.endpoint());
    return e;
  }

 private:
  std::vector<WorkerProcess> workers_;
  bool started_ = false;
};

inline bool contains(std::string_view text, std::string_view part) {
  return text.find(part) != std::string_view::npos;
}

// Exact equality of dtype, shape and values (NaN equals NaN; the same kernels run on both
// sides, so anything else must match to the bit). On mismatch `why` says where.
inline bool same_values(const local::Tensor& a, const local::Tensor& b, std::string* why) {
  auto fail = [&](std::string s) {
    if (why) *why = std::move(s);
    return false;
  };
  if (a.dtype() != b.dtype())
    return fail("dtype " + std::string(dtype_name(a.dtype())) + " vs " +
                std::string(dtype_name(b.dtype())));
  if (!(a.shape() == b.shape()))
    return fail("shape " + to_string(a.shape()) + " vs " + to_string(b.shape()));
  if (is_floating(a.dtype())) {
    auto x = a.to_vector<double>(), y = b.to_vector<double>();
    for (size_t i = 0; i < x.size(); ++i)
      if (!(x[i] == y[i] || (std::isnan(x[i]) && std::isnan(y[i]))))
        return fail("element " + std::to_string(i) + ": " + std::to_string(x[i]) + " vs " +
                    std::to_string(y[i]));
  } else if (a.dtype() == DType::Bool) {
    auto x = a.to_vector<bool>(), y = b.to_vector<bool>();
    for (size_t i = 0; i < x.size(); ++i)
      if (x[i] != y[i]) return fail("element " + std::to_string(i) + " differs");
  } else {
    auto x = a.to_vector<int64_t>(), y = b.to_vector<int64_t>();
    for (size_t i = 0; i < x.size(); ++i)
      if (x[i] != y[i])
        return fail("element " + std::to_string(i) + ": " + std::to_string(x[i]) + " vs " +
                    std::to_string(y[i]));
  }
  return true;
}

// CHECKs that a remote tensor holds exactly the local tensor's values.
inline void check_same(const DistributedTensor& remote, const local::Tensor& expected) {
  std::string why;
  local::Tensor got = remote.to_local();
  INFO("remote ", got.to_string(), "\nlocal  ", expected.to_string());
  CHECK_MESSAGE(same_values(got, expected, &why), why);
}

}  // namespace dtr::test
