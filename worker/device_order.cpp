// Device (CUDA) ordering (worker/device_order.hpp).
#include "worker/device_order.hpp"

namespace dtr::worker::detail {

cuda::StreamHandle CudaStreams::get(int device) {
  if (device < 0) return nullptr;
  if (streams_.size() <= static_cast<size_t>(device))
    streams_.resize(static_cast<size_t>(device) + 1);
  auto& cs = streams_[static_cast<size_t>(device)];
  if (!cs) cs = std::make_unique<cuda::Stream>(device);
  return cs->handle();
}

std::string CudaStreams::finish() {
  std::string why;
  for (const auto& cs : streams_) {
    if (!cs) continue;
    try {
      cs->synchronize();
    } catch (const std::exception& e) {
      if (why.empty()) why = e.what();
    }
  }
  return why;
}

std::vector<std::shared_ptr<cuda::Event>> CudaStreams::record_all() {
  std::vector<std::shared_ptr<cuda::Event>> events;
  for (const auto& cs : streams_) {
    if (!cs) continue;
    auto e = std::make_shared<cuda::Event>(cs->device());
    e->record(cs->handle());
    events.push_back(std::move(e));
  }
  return events;
}

local::Tensor use(CudaStreams& s, Slot& slot) {
  const local::Tensor& t = slot.tensor;
  if (t.device() < 0) return t;
  cuda::StreamHandle mine = s.get(t.device());
  std::lock_guard lock(slot.mu);
  if (slot.written && slot.written_on != mine) {
    slot.written->block(mine);
    cuda::record_stream(*t.storage(), mine);
  }
  return t;
}

void wrote(CudaStreams& s, Slot& slot, const local::Tensor& t) {
  cuda::StreamHandle mine = s.get(t.device());
  std::lock_guard lock(slot.mu);
  // The slot's event is recorded again rather than replaced by a new one per write (an
  // event create and destroy per op): only the slot holds it, readers block on it under
  // `mu`, and a stream that waits takes the record current at the time of its wait.
  if (!slot.written || slot.written->device() != t.device())
    slot.written = std::make_shared<cuda::Event>(t.device());
  slot.written->record(mine);
  slot.written_on = mine;
}

SlotPtr uploaded(const local::Tensor& host, int device) {
  cuda::StreamScope scope(device, nullptr);
  local::Tensor on_device = host.to_device(device);
  auto written = std::make_shared<cuda::Event>(device);
  written->record(nullptr);
  SlotPtr slot = Slot::of(std::move(on_device));
  slot->written = std::move(written);
  return slot;
}

}  // namespace dtr::worker::detail
