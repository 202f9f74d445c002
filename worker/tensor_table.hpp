// Tensor table: a session's tensors by the master's ids.
//
// A Slot is one tensor: its value once ready, or its failure; the streams parked until it
// is ready; and, for a CUDA tensor, the event of its latest write (worker/device_order.hpp).
// The table maps ids to slots. A task holds the slots it reads and writes, so dropping an
// id (Free) never frees memory a queued task still uses.
//
// The table checks ids: a new output id must not be 0 or in use; an input must exist. A
// failed check records a root failure (worker/failures.hpp) with the texts the master's
// errors show, and an output the command would have made exists failed, so that its users
// learn why.
//
// Thread safety: TensorTable is the dispatch thread's only. A Slot is shared between the
// dispatch thread and executor threads: `tensor` is written once, by the task that
// produces it, before `ready` is set (release) and read only after `ready` is seen
// (acquire); `mu` guards `failure` (set once more by an in-place op failing), `waiters`
// and the CUDA write event (`written`, `written_on`). Streams are woken (wake()) after
// `mu` is released.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "dtr/tensor.hpp"
#include "protocol/messages.hpp"
#include "tensor/device_runtime.hpp"
#include "worker/failures.hpp"
#include "worker/session.hpp"

namespace dtr::worker::detail {

struct StreamQueue;
using StreamQueuePtr = std::shared_ptr<StreamQueue>;
// Makes a parked stream run again (worker/streams.cpp); called once per successful park.
void wake(const StreamQueuePtr& s);

struct Slot {
  local::Tensor tensor;
  std::atomic<bool> ready{false};
  std::atomic<bool> failed{false};
  std::mutex mu;
  Failure failure;
  std::vector<StreamQueuePtr> waiters;
  // A CUDA tensor: its latest write's completion on the device, and the CUDA stream that
  // wrote it (under mu). Readers on other CUDA streams wait for it on the device.
  std::shared_ptr<cuda::Event> written;
  cuda::StreamHandle written_on = nullptr;

  // A ready slot holding `t`, or failed with `f`.
  static std::shared_ptr<Slot> of(local::Tensor t);
  static std::shared_ptr<Slot> failed_with(Failure f);
  // The failure, or null (any thread).
  Failure get_failure();
  // True when ready; otherwise `s` is woken once it is.
  bool ready_or_park(const StreamQueuePtr& s);
  // The producer's end: the value (or failure) is set, the slot ready, its waiters woken.
  void publish(local::Tensor t);
  void fail(Failure f);
  // Forgets the parked streams without waking them (the session is ending).
  void drop_waiters();

 private:
  void finish(Failure f);
};
using SlotPtr = std::shared_ptr<Slot>;

// The bytes of a received frame as a tensor of `meta`'s dtype and shape (the caller checked
// the size): the frame itself when suitably aligned and owned, else a copy.
local::Tensor frame_tensor(const PayloadFrame& frame, const TensorMeta& meta);
// Why `meta` cannot be allocated (its byte count overflows int64), or "".
std::string size_problem(const TensorMeta& meta);

class TensorTable {
 public:
  explicit TensorTable(FailureLog& failures) : failures_(failures) {}

  SlotPtr find(protocol::TensorId id) const;  // null when absent
  bool contains(protocol::TensorId id) const { return slots_.count(id) != 0; }
  size_t size() const { return slots_.size(); }
  // Binds `id` (replacing what it named).
  void set(protocol::TensorId id, SlotPtr slot) { slots_[id] = std::move(slot); }
  // Drops the id; false when it was not there.
  bool erase(protocol::TensorId id) { return slots_.erase(id) != 0; }

  // `id` may name `op`'s new output: not 0, not in use. Otherwise false, a root failure
  // recorded.
  bool check_new_id(protocol::TensorId id, std::string_view op);
  // `id` (when not 0 and not bound) becomes a failed tensor: its users learn why.
  void fail_new(protocol::TensorId id, Failure f);
  // `op`'s input `id`, or null when it does not exist: then a root failure "input tensor
  // %id does not exist" is recorded for `target`, and `out` (when not 0) made failed.
  // (A reference into the table, or to a null pointer: valid until `id` is erased.)
  const SlotPtr& input(protocol::TensorId id, protocol::TensorId target, std::string_view op,
                       protocol::TensorId out);
  // A new pending slot bound to `id` (a reference into the table, as input()'s).
  const SlotPtr& make_output(protocol::TensorId id);
  // The session is ending: every slot forgets its parked streams.
  void drop_waiters();
  // f(const Slot&) for every tensor (live figures, docs/observability.md).
  template <class F>
  void for_each(F&& f) const {
    for (const auto& [id, slot] : slots_) f(*slot);
  }

 private:
  FailureLog& failures_;
  std::unordered_map<protocol::TensorId, SlotPtr> slots_;
};

}  // namespace dtr::worker::detail
