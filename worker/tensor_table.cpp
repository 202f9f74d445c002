// Tensor table (worker/tensor_table.hpp).
#include "worker/tensor_table.hpp"

#include <fmt/format.h>

#include <cstring>
#include <limits>

namespace dtr::worker::detail {

using protocol::TensorId;

std::shared_ptr<Slot> Slot::of(local::Tensor t) {
  auto s = std::make_shared<Slot>();
  s->tensor = std::move(t);
  s->ready.store(true, std::memory_order_relaxed);
  return s;
}

std::shared_ptr<Slot> Slot::failed_with(Failure f) {
  auto s = std::make_shared<Slot>();
  s->failure = std::move(f);
  s->failed.store(true, std::memory_order_relaxed);
  s->ready.store(true, std::memory_order_relaxed);
  return s;
}

Failure Slot::get_failure() {
  if (!failed.load(std::memory_order_acquire)) return nullptr;
  std::lock_guard lock(mu);
  return failure;
}

bool Slot::ready_or_park(const StreamQueuePtr& s) {
  if (ready.load(std::memory_order_acquire)) return true;
  std::lock_guard lock(mu);
  if (ready.load(std::memory_order_relaxed)) return true;
  waiters.push_back(s);
  return false;
}

void Slot::publish(local::Tensor t) {
  tensor = std::move(t);
  finish(nullptr);
}

void Slot::fail(Failure f) {
  finish(std::move(f));
}

void Slot::drop_waiters() {
  std::lock_guard lock(mu);
  waiters.clear();
}

void Slot::finish(Failure f) {
  std::vector<StreamQueuePtr> woken;
  {
    std::lock_guard lock(mu);
    if (f) {
      failure = std::move(f);
      failed.store(true, std::memory_order_release);
    }
    ready.store(true, std::memory_order_release);
    woken.swap(waiters);
  }
  for (const StreamQueuePtr& s : woken) wake(s);
}

local::Tensor frame_tensor(const PayloadFrame& frame, const TensorMeta& m) {
  std::shared_ptr<Storage> storage;
  bool aligned = reinterpret_cast<uintptr_t>(frame.data) % element_size(m.dtype) == 0;
  if (aligned && frame.owner) {
    storage = Storage::wrap(frame.data, frame.size, frame.owner);
  } else {
    storage = Storage::allocate(frame.size);
    if (frame.size) std::memcpy(storage->data(), frame.data, frame.size);
  }
  return local::Tensor(std::move(storage), TensorMeta::contiguous(m.dtype, m.shape));
}

std::string size_problem(const TensorMeta& m) {
  // numel * element size must not wrap around (2^61 float64 elements would need 0 bytes).
  if (static_cast<uint64_t>(m.numel()) >
      std::numeric_limits<int64_t>::max() / element_size(m.dtype))
    return fmt::format("{} needs more bytes than int64 can count", describe(m));
  return {};
}

SlotPtr TensorTable::find(TensorId id) const {
  auto it = slots_.find(id);
  return it == slots_.end() ? nullptr : it->second;
}

bool TensorTable::check_new_id(TensorId id, std::string_view op) {
  if (id == protocol::kNoTensor) {
    failures_.root(id, op, "output tensor id 0 is not a valid id");
    return false;
  }
  if (slots_.count(id)) {
    failures_.root(id, op, fmt::format("output tensor id %{} is already in use", id));
    return false;
  }
  return true;
}

void TensorTable::fail_new(TensorId id, Failure f) {
  if (id != protocol::kNoTensor && !slots_.count(id)) slots_[id] = Slot::failed_with(std::move(f));
}

const SlotPtr& TensorTable::input(TensorId id, TensorId target, std::string_view op, TensorId out) {
  static const SlotPtr kNone;
  if (auto it = slots_.find(id); it != slots_.end()) return it->second;
  fail_new(out, failures_.root(target, op, fmt::format("input tensor %{} does not exist", id)));
  return kNone;
}

const SlotPtr& TensorTable::make_output(TensorId id) {
  SlotPtr& slot = slots_[id];
  slot = std::make_shared<Slot>();
  return slot;
}

void TensorTable::drop_waiters() {
  for (auto& [id, slot] : slots_) slot->drop_waiters();
}

}  // namespace dtr::worker::detail
