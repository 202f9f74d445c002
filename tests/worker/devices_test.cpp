// Devices where there may be none: `--devices` parsing, commands naming a CUDA device a
// worker does not have (each fails naming the device; nothing else is disturbed), and
// the local engine's device errors. Runs everywhere (CI has no GPU); the `gpu` label has
// the tests that need one.
#include <doctest/doctest.h>

#include <chrono>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "dtr/device.hpp"
#include "dtr/tensor.hpp"
#include "protocol/codec.hpp"
#include "tensor/device_runtime.hpp"
#include "worker/devices.hpp"
#include "worker/session.hpp"

using namespace dtr;
namespace cmd = dtr::protocol::cmd;

namespace {
bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}
}  // namespace

TEST_CASE("--devices chooses among the visible devices") {
  using worker::select_visible_devices;
  CHECK(select_visible_devices("all", std::nullopt) == std::nullopt);
  CHECK(select_visible_devices("all", "3,1") == std::nullopt);
  CHECK(select_visible_devices("none", std::nullopt) == std::string());
  CHECK(select_visible_devices("0,2", std::nullopt) == std::string("0,2"));
  CHECK(select_visible_devices("1", "3,5,7") == std::string("5"));
  CHECK(select_visible_devices("2,0", "3,5,7") == std::string("7,3"));
  auto why = [](std::string_view devices, std::optional<std::string_view> visible) {
    try {
      (void)select_visible_devices(devices, visible);
    } catch (const InvalidArgument& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  CHECK(contains(why("x", std::nullopt), "'x' is not a device index"));
  CHECK(contains(why("0,", std::nullopt), "'' is not a device index"));
  CHECK(contains(why("-1", std::nullopt), "'-1' is not a device index"));
  CHECK(contains(why("1,1", std::nullopt), "device 1 appears twice"));
  CHECK(contains(why("3", "4,5"), "device 3 is not visible (CUDA_VISIBLE_DEVICES=4,5 shows 2)"));
  CHECK(contains(why("0", ""), "device 0 is not visible"));
}

TEST_CASE("a session fails commands naming a CUDA device its worker lacks") {
  std::vector<protocol::Reply> replies;
  std::mutex mu;
  worker::SessionOptions o;
  o.threads = 1;
  o.devices = cuda_device_count();
  worker::Session session(
      [&](worker::Outgoing&& out) {
        std::lock_guard lock(mu);
        replies.push_back(protocol::decode_reply(out.header, out.payloads.size()));
      },
      o);
  const int missing = o.devices;  // one past the last device this machine has
  cmd::RunOp full{.op = OpId::full,
                  .out = 1,
                  .attrs = creation::full({4}, 1.0, DType::Float32),
                  .device = missing};
  cmd::RunOp cpu = full;  // the same on the CPU, beside it
  cpu.out = 2;
  cpu.device = -1;
  cmd::ToDevice move{.input = 2, .out = 3, .device = missing};
  cmd::Get get{.input = 2, .request = 10};
  cmd::Stats stats{.request = 11, .device = missing};
  cmd::Sync sync{.request = 12};
  auto batch = std::make_shared<protocol::Batch>();
  batch->commands = {full, cpu, move, get, stats, sync};
  session.run(batch, {});
  REQUIRE(session.wait_idle(std::chrono::seconds(30)));
  std::lock_guard lock(mu);
  REQUIRE(replies.size() == 3);
  auto of_type = [&]<class R>(std::type_identity<R>) -> R {
    for (const protocol::Reply& r : replies)
      if (const R* x = std::get_if<R>(&r)) return *x;
    FAIL("no ", R::kName, " reply");
    return R{};
  };
  // The CPU tensor is fine.
  CHECK_FALSE(of_type(std::type_identity<protocol::reply::Get>{}).failure);
  // Stats of a missing device: an error naming it (answered at once, before the Get).
  CHECK(contains(of_type(std::type_identity<protocol::reply::ProtocolError>{}).message,
                 "no CUDA device " + std::to_string(missing)));
  // Sync reports both failed commands, each naming the device.
  const protocol::reply::Sync sync_reply = of_type(std::type_identity<protocol::reply::Sync>{});
  REQUIRE(sync_reply.failures.size() == 2);
  CHECK(sync_reply.failures[0].tensor == 1);
  CHECK(sync_reply.failures[0].op == "full");
  CHECK(sync_reply.failures[0].device == missing);  // the master's error names it
  CHECK(contains(sync_reply.failures[0].message, "this node has no CUDA device"));
  CHECK(sync_reply.failures[1].tensor == 3);
  CHECK(sync_reply.failures[1].op == "to_device");
}

TEST_CASE("local tensors name the device when there is none or it is wrong") {
  if (cuda_device_count() > 0) return;  // the gpu label covers machines with one
  local::Tensor t = local::ones({3});
  CHECK(t.device() == -1);
  CHECK(t.cpu().storage() == t.storage());  // already there: itself
  try {
    (void)t.cuda(0);
    FAIL("cuda() without a device did not throw");
  } catch (const DeviceError& e) {
    // "no CUDA device cuda:0 on this machine (...)", or "... built without CUDA".
    const std::string what = e.what();
    INFO(what);
    CHECK(contains(what, "cuda:0"));
  }
  CHECK_THROWS_AS((void)local::empty({2}, DType::Float32, 0), DeviceError);
  CHECK_THROWS_AS((void)local::empty({2}, DType::Float32, -2), DeviceError);
  CHECK(cuda::device_count() == 0);
  CHECK(!cuda_unavailable_reason().empty());
}
