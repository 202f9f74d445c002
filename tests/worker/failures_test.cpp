// Failures and stats (worker/failures.hpp) without a session: root failures, the
// unreported list's cap, mark_reported, what a Sync reply carries, Stats replies.
#include <doctest/doctest.h>

#include <fmt/format.h>

#include "support/replies.hpp"
#include "tensor/device_runtime.hpp"
#include "worker/failures.hpp"

namespace {

using namespace dtr;
using namespace dtr::worker::detail;
using protocol::kMaxErrorsPerReply;

TEST_CASE("failures: a root failure is its own cause and is listed until a Sync takes it") {
  FailureLog log;
  Failure f = log.root(4, "matmul", "shapes differ", 1);
  CHECK(f->tensor == 4);
  CHECK(f->op == "matmul");
  CHECK(f->message == "shapes differ");
  CHECK(f->device == 1);
  CHECK(f->cause_tensor == 4);
  CHECK(f->cause_op == "matmul");
  CHECK(f->cause_message == "shapes differ");
  CHECK(log.unreported() == 1);
  auto taken = log.take_for_sync("");
  REQUIRE(taken.size() == 1);
  CHECK(taken[0].message == "shapes differ");
  CHECK(log.unreported() == 0);
  CHECK(log.take_for_sync("").empty());
}

TEST_CASE("failures: a dependent failure points at the first cause") {
  protocol::RemoteFailure root = make_failure(1, "div", "by zero");
  Failure once = dependent_failure(2, "add", 1, root);
  Failure twice = dependent_failure(3, "mul", 2, *once);
  CHECK(twice->tensor == 3);
  CHECK(twice->op == "mul");
  CHECK(twice->message == "input %2 is failed");
  CHECK(twice->cause_tensor == 1);
  CHECK(twice->cause_op == "div");
  CHECK(twice->cause_message == "by zero");
}

TEST_CASE("failures: mark_reported drops the root a reported failure points at") {
  FailureLog log;
  Failure a = log.root(1, "div", "by zero");
  Failure b = log.root(5, "exp", "overflow");
  log.mark_reported(*dependent_failure(9, "add", 1, *a));
  CHECK(log.unreported() == 1);
  log.mark_reported(*a);  // already gone: nothing changes
  CHECK(log.unreported() == 1);
  auto taken = log.take_for_sync("");
  REQUIRE(taken.size() == 1);
  CHECK(taken[0].tensor == 5);
}

TEST_CASE("failures: the list is capped; the Sync reply says how many were not recorded") {
  FailureLog log;
  const size_t extra = 10;
  for (size_t i = 0; i < kMaxErrorsPerReply + extra; ++i)
    log.root(i + 1, "op", fmt::format("failure {}", i));
  CHECK(log.unreported() == kMaxErrorsPerReply);
  CHECK(log.dropped() == extra);
  auto taken = log.take_for_sync("stream 2: launch failed");
  REQUIRE(taken.size() == kMaxErrorsPerReply);  // the last listed one makes room for the note
  CHECK(taken.front().message == "failure 0");
  CHECK(taken[kMaxErrorsPerReply - 2].message == fmt::format("failure {}", kMaxErrorsPerReply - 2));
  CHECK(taken.back().op == "sync");
  CHECK(taken.back().message == "10 more failures were not recorded");
  CHECK(log.unreported() == 0);
  CHECK(log.dropped() == 0);
}

TEST_CASE("failures: a stream's CUDA failure is added to the Sync reply when there is room") {
  FailureLog log;
  log.root(1, "op", "first");
  auto taken = log.take_for_sync("stream 2: launch failed");
  REQUIRE(taken.size() == 2);
  CHECK(taken[1].tensor == 0);
  CHECK(taken[1].op == "sync");
  CHECK(taken[1].message == "CUDA work failed: stream 2: launch failed");
}

TEST_CASE("failures: Stats replies give the host's memory, or say a device cannot") {
  auto host = dtr::test::reply_as<protocol::reply::Stats>(stats_reply(7, -1, 12));
  CHECK(host.request == 7);
  CHECK(host.stats.live_tensors == 12);
  CHECK(host.stats.bytes_in_use >= 0);
  CHECK(host.stats.peak_bytes >= host.stats.bytes_in_use);
  const int missing = cuda::device_count();
  auto device = dtr::test::reply_as<protocol::reply::ProtocolError>(stats_reply(8, missing, 0));
  CHECK(device.request == 8);
  CHECK(device.message.rfind(fmt::format("memory_stats(cuda:{}): ", missing), 0) == 0);
}

}  // namespace
