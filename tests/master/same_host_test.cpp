// Same-host payloads (common/same_host.hpp): with master and worker on one host,
// dist_send and to_local move tensor bytes by direct copy between the two processes
// (cmd::PutFrom, pulled cmd::Get); found out at start, with a reason when not, and off
// with DTR_SAME_HOST=0 on either side or MasterOptions::same_host = false.
#include <doctest/doctest.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <string>
#include <thread>

#include "common/same_host.hpp"
#include "dtr/graph.hpp"
#include "dtr/observability.hpp"
#include "master/cluster.hpp"

namespace {

using namespace dtr;
using namespace dtr::test;
using dtr::local::Tensor;

uint64_t command_count(int node, const std::string& kind) {
  for (const auto& [k, n] : node_metrics(node).commands)
    if (k == kind) return n;
  return 0;
}

// Bytes that differ per element and per tensor, of several dtypes and sizes (around the
// same-host threshold of 64 KiB too).
void round_trips(int node) {
  Generator gen(7);
  for (int64_t n : {int64_t{1}, int64_t{16383}, int64_t{16384}, int64_t{300001}}) {
    Tensor f = local::rand({n}, gen);
    DistributedTensor r = dist_send(f, node);
    Tensor back = r.to_local();
    REQUIRE(back.numel() == n);
    CHECK(std::memcmp(back.raw_data(), f.raw_data(), static_cast<size_t>(n) * 4) == 0);
    // Computed on the worker, read back: the worker's own bytes, not a echo of ours.
    check_same(r * 2.0, f * 2.0);
  }
  Tensor ints = local::arange(0.0, 100000.0, 1.0).to(DType::Int64).reshape({1000, 100});
  check_same(dist_send(ints, node), ints);
  // A non-contiguous tensor is packed before it goes; a view made on the worker is
  // packed there before it comes back.
  Tensor wide = local::rand({300, 400}, gen);
  check_same(dist_send(wide.transpose(0, 1), node), wide.transpose(0, 1).contiguous());
  check_same(dist_send(wide, node).transpose(0, 1), wide.transpose(0, 1).contiguous());
}

}  // namespace

TEST_CASE("same host: a local worker is attached and moves bytes by direct copy") {
  Cluster c(2);
  for (int k = 0; k < 2; ++k) {
    NodeInfo info = node_info(k);
    CHECK_MESSAGE(info.same_host, info.same_host_note);
    CHECK(info.same_host_note.empty());
  }
  const uint64_t puts_before = command_count(1, "put_from");
  round_trips(1);
  // The large tensors went by address, the small ones in the message.
  CHECK(command_count(1, "put_from") >= puts_before + 3);
  CHECK(command_count(1, "release") >= 3);
  CHECK(command_count(1, "put") >= 1);
  // Released pulls leave nothing behind: temporaries read back leave the worker's memory
  // where it was.
  DistributedTensor big = dist_send(local::ones({1 << 20}), 1);
  synchronize();
  NodeMemoryStats before = memory_stats(1);
  for (int i = 0; i < 5; ++i) CHECK((big * 2.0).to_local().sum().item<double>() == 2 << 20);
  synchronize();
  CHECK(memory_stats(1).bytes_in_use == before.bytes_in_use);
}

TEST_CASE(
    "same host: copies between two local workers, eager and replayed, read the sender's "
    "memory") {
  bool same_host = true;
  SUBCASE("by direct copy") {}
  SUBCASE("over the sockets") {
    same_host = false;
  }
  MasterOptions o = test_options();
  o.same_host = same_host;
  Cluster c(2, o);
  Generator gen(11);
  Tensor x = local::rand({256, 300}, gen);  // 300 KiB
  DistributedTensor a = dist_send(x, 0);
  DistributedTensor there = a.to(1);
  check_same(there, x);
  check_same(there.to(0) * 3.0, x * 3.0);
  // A view on the sender is packed there first; a small copy goes in the message.
  check_same(a.transpose(0, 1).to(1), x.transpose(0, 1).contiguous());
  check_same(dist_send(local::ones({3}), 0).to(1), local::ones({3}));
  // Replays use a token per replay: each release must name the one its bytes went under.
  DistributedTensor out;
  Graph g = capture([&] {
    a.add_(1);
    out = a.to(1) + 0.5;
  });
  for (int k = 1; k <= 3; ++k) {
    g.replay();
    check_same(out, x + static_cast<double>(k) + 0.5);
  }
  // What the sender held for the copies goes once they were read: temporaries sent on
  // leave its memory as it was. The receiver's `released` travels worker to worker, so it
  // is not ordered with the master's synchronize: it is waited for, within a bound.
  synchronize();
  NodeMemoryStats before = memory_stats(0);
  for (int i = 0; i < 4; ++i) (void)(a * 2.0).to(1);
  synchronize();
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  int64_t in_use = memory_stats(0).bytes_in_use;
  while (in_use != before.bytes_in_use && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    in_use = memory_stats(0).bytes_in_use;
  }
  CHECK(in_use == before.bytes_in_use);
}

TEST_CASE(
    "same host: DTR_SAME_HOST=0 or MasterOptions::same_host = false keep bytes on the "
    "sockets, with the reason") {
  SUBCASE("off on the master") {
    ScopedEnv off("DTR_SAME_HOST", "0");
    Cluster c(1);
    CHECK_FALSE(node_info(0).same_host);
    CHECK(node_info(0).same_host_note == "DTR_SAME_HOST is off on the master");
    round_trips(0);
    CHECK(command_count(0, "put_from") == 0);
    CHECK(command_count(0, "release") == 0);
  }
  SUBCASE("off in the options") {
    MasterOptions o = test_options();
    o.same_host = false;
    Cluster c(1, o);
    CHECK(node_info(0).same_host_note == "MasterOptions::same_host is off");
    round_trips(0);
    CHECK(command_count(0, "put_from") == 0);
  }
  SUBCASE("off on the worker") {
    std::optional<WorkerProcess> w;
    {
      ScopedEnv off("DTR_SAME_HOST", "0");
      w.emplace();
    }
    SessionGuard guard;
    MasterOptions o = test_options();
    o.workers = {w->endpoint()};
    init_master_worker(o);
    CHECK_FALSE(node_info(0).same_host);
    CHECK(node_info(0).same_host_note == "the worker offered no challenge");
    round_trips(0);
    CHECK(command_count(0, "put_from") == 0);
  }
}

TEST_CASE("same host: a challenge check names why another process cannot be read") {
  const uint64_t challenge = common::random_challenge();
  CHECK(challenge != 0);
  CHECK(common::random_challenge() != challenge);
  const auto pid = static_cast<uint32_t>(getpid());
  const auto at = reinterpret_cast<uint64_t>(&challenge);
  CHECK(common::challenge_problem(pid, at, challenge).empty());
  CHECK(common::challenge_problem(0, at, challenge) == "no process or address given");
  // What another process of this number would hold.
  CHECK(contains(common::challenge_problem(pid, at, challenge ^ 1), "does not hold the challenge"));
  // A process that does not exist here (pid_max is at most 2^22).
  const uint32_t gone = (1u << 22) + 17;
  CHECK(contains(common::challenge_problem(gone, at, challenge), "is not visible here"));
  CHECK(contains(common::challenge_problem(pid, 8, challenge), "Bad address"));
  // Reads that fail name what was read, from where, and why.
  char buf[16];
  std::string why = message_of<TransportError>(
      [&] { common::read_process_memory(gone, at, buf, sizeof buf, "a test"); });
  CHECK(contains(why, "a test: reading 16 bytes from process"));
  CHECK(contains(why, "the process is gone"));
  why = message_of<TransportError>(
      [&] { common::read_process_memory(pid, 8, buf, sizeof buf, "a test"); });
  CHECK(contains(why, "Bad address"));
}
