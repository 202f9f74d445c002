// Device ordering (worker/device_order.hpp) without a session: CPU tensors need none; on a
// CUDA device (when there is one), a write is recorded and readers on other CUDA streams
// wait for it.
#include <doctest/doctest.h>

#include "tensor/device_runtime.hpp"
#include "worker/device_order.hpp"

namespace {

using namespace dtr;
using namespace dtr::worker::detail;

TEST_CASE("device order: CPU tensors are used as they are, with no CUDA stream") {
  CudaStreams mine;
  CHECK(mine.get(-1) == nullptr);
  CHECK(mine.finish().empty());
  SlotPtr slot = Slot::of(local::full({4}, Scalar(2.0), DType::Float32));
  local::Tensor t = use(mine, *slot);
  CHECK(t.storage() == slot->tensor.storage());
  CHECK_FALSE(slot->written);
  CHECK(mine.finish().empty());
}

TEST_CASE("device order: without the device, a CUDA stream or an upload throws") {
  const int missing = cuda::device_count();
  CudaStreams mine;
  CHECK_THROWS(mine.get(missing));
  CHECK_THROWS(uploaded(local::zeros({2}, DType::Float32), missing));
}

TEST_CASE("device order: a CUDA write is recorded; another stream's use waits for it") {
  if (cuda::device_count() == 0) {
    MESSAGE("no CUDA device: the device half is not run");
    return;
  }
  CudaStreams a, b;
  SlotPtr slot = uploaded(local::full({4}, Scalar(3.0), DType::Float32), 0);
  REQUIRE(slot->written);
  CHECK(slot->written_on == nullptr);  // the default stream
  CHECK(slot->tensor.device() == 0);
  local::Tensor t = use(a, *slot);
  CHECK(t.device() == 0);
  wrote(a, *slot, t);
  CHECK(slot->written_on == a.get(0));
  CHECK(a.get(0) != b.get(0));
  use(b, *slot);
  wrote(b, *slot, t);
  CHECK(slot->written_on == b.get(0));
  CHECK(a.finish().empty());
  CHECK(b.finish().empty());
  CHECK(t.cpu().to_vector<float>() == std::vector<float>{3, 3, 3, 3});
}

}  // namespace
