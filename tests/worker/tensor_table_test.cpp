// The tensor table and its slots (worker/tensor_table.hpp) without a session: id checks,
// failed outputs, missing inputs, a slot's readiness and waiters, received frames.
#include <doctest/doctest.h>

#include <cstring>

#include "tests/worker/parts_support.hpp"
#include "worker/tensor_table.hpp"

namespace {

using namespace dtr;
using namespace dtr::worker::detail;
using dtr::worker::PayloadFrame;
using dtr::worker::test::StreamRig;

TEST_CASE("tensor table: a new id must not be 0 or in use; each refusal is a root failure") {
  FailureLog failures;
  TensorTable table(failures);
  CHECK_FALSE(table.check_new_id(0, "add"));
  table.set(5, Slot::of(local::zeros({2}, DType::Float32)));
  CHECK_FALSE(table.check_new_id(5, "mul"));
  CHECK(table.check_new_id(6, "mul"));
  auto listed = failures.take_for_sync("");
  REQUIRE(listed.size() == 2);
  CHECK(listed[0].tensor == 0);
  CHECK(listed[0].op == "add");
  CHECK(listed[0].message == "output tensor id 0 is not a valid id");
  CHECK(listed[1].tensor == 5);
  CHECK(listed[1].op == "mul");
  CHECK(listed[1].message == "output tensor id %5 is already in use");
  CHECK(table.size() == 1);
}

TEST_CASE("tensor table: a missing input is reported for the target and fails the output") {
  FailureLog failures;
  TensorTable table(failures);
  table.set(1, Slot::of(local::zeros({2}, DType::Float32)));
  CHECK(table.input(1, 3, "add", 3) == table.find(1));
  CHECK_FALSE(table.contains(3));
  CHECK_FALSE(table.input(2, 3, "add", 3));
  SlotPtr out = table.find(3);
  REQUIRE(out);
  CHECK(out->ready.load());
  Failure f = out->get_failure();
  REQUIRE(f);
  CHECK(f->tensor == 3);
  CHECK(f->op == "add");
  CHECK(f->message == "input tensor %2 does not exist");
  // No output (an in-place op): only the failure.
  CHECK_FALSE(table.input(4, 1, "add_", 0));
  CHECK_FALSE(table.contains(0));
  CHECK(table.size() == 2);
  CHECK(failures.unreported() == 2);
}

TEST_CASE("tensor table: fail_new binds a failed slot only to a free, non-zero id") {
  FailureLog failures;
  TensorTable table(failures);
  SlotPtr existing = Slot::of(local::zeros({1}, DType::Float32));
  table.set(1, existing);
  Failure f = failures.root(1, "op", "why");
  table.fail_new(1, f);
  table.fail_new(0, f);
  table.fail_new(2, f);
  CHECK(table.find(1) == existing);
  CHECK_FALSE(table.find(1)->get_failure());
  CHECK_FALSE(table.contains(0));
  REQUIRE(table.find(2));
  CHECK(table.find(2)->get_failure() == f);
  SlotPtr made = table.make_output(3);
  CHECK(table.find(3) == made);
  CHECK_FALSE(made->ready.load());
  CHECK(table.erase(3));
  CHECK_FALSE(table.erase(3));
}

TEST_CASE("tensor table: a slot parks streams until published, then wakes each once") {
  StreamRig rig;
  StreamQueuePtr s = rig.streams.find(0);
  auto slot = std::make_shared<Slot>();
  CHECK_FALSE(slot->ready_or_park(s));
  CHECK(slot->waiters.size() == 1);
  slot->publish(local::full({2}, Scalar(3.0), DType::Float32));
  CHECK(slot->ready.load());
  CHECK(slot->waiters.empty());
  {
    std::lock_guard lock(s->mu);
    CHECK(s->wake_pending);  // the stream was not parked on the executor: the wake is kept
    s->wake_pending = false;
  }
  CHECK(slot->ready_or_park(s));
  CHECK(slot->waiters.empty());
  CHECK_FALSE(slot->get_failure());
  CHECK(slot->tensor.meta().numel() == 2);
  // An in-place op failing later fails the slot.
  Failure f = std::make_shared<protocol::RemoteFailure>(make_failure(1, "add_", "boom"));
  slot->fail(f);
  CHECK(slot->get_failure() == f);
}

TEST_CASE("tensor table: a received frame is wrapped when aligned and owned, else copied") {
  auto bytes = std::make_shared<std::vector<float>>(std::vector<float>{1, 2, 3, 4});
  PayloadFrame owned{bytes->data(), 16, bytes};
  TensorMeta m = TensorMeta::contiguous(DType::Float32, {2, 2});
  local::Tensor wrapped = frame_tensor(owned, m);
  CHECK(wrapped.raw_data() == bytes->data());
  CHECK(wrapped.meta().shape == Dims{2, 2});
  PayloadFrame borrowed{bytes->data(), 16, nullptr};
  local::Tensor copied = frame_tensor(borrowed, m);
  CHECK(copied.raw_data() != bytes->data());
  CHECK(std::memcmp(copied.raw_data(), bytes->data(), 16) == 0);
  CHECK(size_problem(m).empty());
  TensorMeta huge = TensorMeta::contiguous(DType::Float64, {int64_t{1} << 61});
  CHECK(size_problem(huge).find("needs more bytes than int64 can count") != std::string::npos);
}

}  // namespace
