// Internal: the caching device allocator behind dtr::cuda::allocate (tensor/cuda/cuda.hpp),
// a simplified PyTorch CUDACachingAllocator. It includes no CUDA header: the driver is
// reached through an AllocatorBackend (tensor/cuda/runtime.cpp has the CUDA one; the unit
// tests use a fake on the host), so the caching logic is testable without a GPU.
//
// Design (one DeviceAllocator per device):
//  - Sizes are rounded up to 512 bytes (kMinBlockSize); 0 bytes takes one 512-byte block.
//  - Two pools of free blocks: small (rounded size <= 1 MiB) and large. A small request
//    takes a 2 MiB driver segment; a large one under 10 MiB a 20 MiB segment; larger ones
//    their size rounded to 2 MiB. A block larger than the request is split and the
//    remainder cached (small pool: when >= 512 bytes remain; large: when > 1 MiB
//    remain). Free neighbours of one segment merge again, so that a segment whose blocks
//    are all free becomes one block that can go back to the driver.
//  - Every segment (and every block split from it) belongs to the stream it was first
//    allocated for; a free block is reused only by allocations on that stream, where
//    stream order makes reuse safe without synchronisation.
//  - record_stream(ptr, s) marks a block as used by another stream s. When such a block is
//    freed, an event is recorded on each of those streams, and the block becomes reusable
//    only once they have all completed (polled at each allocation). Until then it counts
//    as cached, but empty_cache() cannot return it.
//  - When the driver has no memory: every cached free segment goes back to the driver
//    and the allocation is retried; then, as a last resort, the device is synchronised
//    (so that every pending event has completed), the cache emptied again and retried;
//    then a segment of just the rounded size is tried. Only then OutOfMemory, naming the
//    device, the bytes asked and what the device and the cache have free.
//  - A memory limit caps reserved bytes (held from the driver): past it, cached segments
//    are released first; if still past, OutOfMemory naming the limit.
//  - Stats are DeviceMemoryStats (cuda.hpp); allocated and reserved bytes count rounded
//    block and segment sizes, so reserved == allocated + cached always holds.
//
// Lifetime: a storage's owner keeps the allocator's state alive (shared_ptr), so a storage
// may outlive its DeviceAllocator object; the state (and its cached segments) goes back to
// the backend when the last of them is gone. The runtime keeps one immortal allocator per
// device anyway, so that nothing is freed during static destruction.
//
// Thread safety: every member function of DeviceAllocator is safe from any thread (one
// mutex per device); so is dropping a storage it returned. Backend calls are made under
// that mutex, one at a time per device.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "tensor/cuda/cuda.hpp"

namespace dtr::cuda {

// What the allocator needs of a device. Errors other than out-of-memory are thrown
// (DeviceError in the CUDA backend) and propagate from the allocator call that hit them.
class AllocatorBackend {
 public:
  virtual ~AllocatorBackend() = default;
  // `nbytes` of device memory, or nullptr when the device has not that much free.
  virtual void* raw_alloc(size_t nbytes) = 0;
  virtual void raw_free(void* ptr) = 0;
  // Bytes free on the device (for messages; 0 when unknown). Must not throw.
  virtual uint64_t free_memory() noexcept = 0;
  virtual EventHandle create_event() = 0;
  virtual void destroy_event(EventHandle event) noexcept = 0;
  // Records `event` at the current end of `stream` (replacing an earlier record).
  virtual void record_event(EventHandle event, StreamHandle stream) = 0;
  // True once the work before the event's latest record has completed.
  virtual bool event_done(EventHandle event) = 0;
  // Waits for all work on the device (every stream).
  virtual void synchronize() = 0;
};

class DeviceAllocator {
 public:
  static constexpr size_t kMinBlockSize = 512;        // rounding granularity
  static constexpr size_t kSmallSize = 1 << 20;       // largest small-pool request
  static constexpr size_t kSmallSegment = 2 << 20;    // segment for small requests
  static constexpr size_t kMinLargeAlloc = 10 << 20;  // below: kLargeSegment
  static constexpr size_t kLargeSegment = 20 << 20;   // segment for mid requests
  static constexpr size_t kRoundLarge = 2 << 20;      // large segments round to this

  DeviceAllocator(int device, std::unique_ptr<AllocatorBackend> backend);
  // Returns the cached segments to the backend (storages still alive keep the state, and
  // their segments, until they are dropped).
  ~DeviceAllocator();
  DeviceAllocator(const DeviceAllocator&) = delete;
  DeviceAllocator& operator=(const DeviceAllocator&) = delete;

  int device() const { return device_; }

  // A device storage of `nbytes` for `stream`. Throws OutOfMemory (see above); backend
  // errors propagate.
  std::shared_ptr<Storage> allocate(size_t nbytes, StreamHandle stream);
  // Marks the block at `ptr` (the data() of a storage this allocator returned, still
  // alive) as used by `stream`. A pointer it did not hand out is ignored.
  void record_stream(const void* ptr, StreamHandle stream);

  DeviceMemoryStats stats() const;
  void reset_peak();
  // Returns every free cached segment (no block of it allocated or waiting for events)
  // to the backend; polls pending events first.
  void empty_cache();
  // Caps reserved bytes (0: no cap). Throws InvalidArgument for a negative value.
  void set_memory_limit(int64_t bytes);
  int64_t memory_limit() const;

  // Rounded block size of a request (exposed for tests).
  static size_t round_size(size_t nbytes);
  // Driver segment size for a rounded request.
  static size_t segment_size(size_t rounded);

  struct State;  // the pools; shared with the storages' owners

 private:
  int device_;
  std::shared_ptr<State> state_;
};

}  // namespace dtr::cuda
