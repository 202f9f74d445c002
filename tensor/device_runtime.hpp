// The tensor library's CUDA runtime as the rest of dtr uses it (the worker's streams,
// events, captured graphs and device figures; the process groups' NCCL path and host
// staging): devices, streams, events, CUDA graphs, device memory figures and copies between
// host and device tensors. This is dtr::tensor's interface for those folders; how it is
// done (kernels, the caching allocator, the CUDA calls) stays internal to tensor/
// (tensor/cuda/cuda.hpp, which includes this header and adds what only the engine calls).
//
// No CUDA header is needed: streams and events travel as opaque pointers (cudaStream_t and
// cudaEvent_t are pointers). Built without CUDA (DTR_WITH_CUDA=0) the same functions exist:
// device_count() is 0 and everything that would touch a device throws dtr::DeviceError
// saying dtr was built without CUDA.
//
// Streams. Every device has a thread-local *current stream* (nullptr: the device's legacy
// default stream). Kernels, copies and allocations go to the current stream of the device
// they run on; StreamScope sets it for a scope (the worker sets it around each task of a
// dtr stream). Work on one stream runs in order; across streams, order with events.
//
// Memory. Device memory comes from a caching allocator: a freed block goes back to a
// per-device cache and is reused by later allocations on the stream it was last allocated
// on; a block that other streams used (record_stream) is reused only once the work queued
// on those streams before the free has completed. empty_cache() returns cached blocks to
// the driver.
//
// Thread safety: every function and method is safe from any thread (as the CUDA runtime
// calls beneath them); a Stream, Event or Graph must outlive every thread's use of it. A
// tensor's bytes written by one stream and read by another must be ordered by an event, as
// in CUDA.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

#include "dtr/tensor.hpp"

namespace dtr::cuda {

using StreamHandle = void*;  // a cudaStream_t; nullptr is the legacy default stream
using EventHandle = void*;   // a cudaEvent_t

// ---- devices ----
int device_count();  // 0 without CUDA or without a GPU (never throws)
// Why device_count() is 0 (the driver's error, "no CUDA device found", or that dtr was
// built without CUDA); "" when there are devices. Never throws.
std::string unavailable_reason();
struct DeviceProperties {
  int index = 0;
  std::string name;
  uint64_t total_memory = 0;
  uint64_t free_memory = 0;
  int major = 0;  // compute capability
  int minor = 0;
  int multiprocessors = 0;
  // The GPU's UUID (cudaDeviceProp::uuid): the same physical GPU has the same UUID in every
  // process, whatever CUDA_VISIBLE_DEVICES numbers it as.
  std::array<uint8_t, 16> uuid{};
};
// Throws DeviceError for an index outside [0, device_count()).
DeviceProperties device_properties(int device);
// Throws DeviceError naming the device when `device` is not in [0, device_count()).
void check_device(int device, std::string_view what);
// Waits for all work on the device (every stream).
void synchronize_device(int device);

// ---- streams and events ----
// The calling thread's current stream on `device` (nullptr: the default stream).
StreamHandle current_stream(int device);
// Sets the calling thread's current stream of `device` for its scope, and makes `device`
// the thread's current CUDA device; restores both.
class StreamScope {
 public:
  StreamScope(int device, StreamHandle stream);
  ~StreamScope();
  StreamScope(const StreamScope&) = delete;
  StreamScope& operator=(const StreamScope&) = delete;

 private:
  // Unused where CUDA is not built (tensor/cuda/no_cuda.cpp).
  [[maybe_unused]] int device_;
  [[maybe_unused]] StreamHandle previous_;
  [[maybe_unused]] int previous_device_;
};

// An owned cudaStream_t (non-blocking with respect to the default stream).
class Stream {
 public:
  explicit Stream(int device);
  ~Stream();
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  int device() const { return device_; }
  StreamHandle handle() const { return stream_; }
  void synchronize() const;  // throws DeviceError with CUDA's message on a failed kernel
  bool query() const;        // true when all work queued so far has completed

 private:
  int device_;
  StreamHandle stream_ = nullptr;
};

// An owned cudaEvent_t (timing disabled unless asked).
class Event {
 public:
  explicit Event(int device, bool timing = false);
  ~Event();
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
  int device() const { return device_; }
  EventHandle handle() const { return event_; }
  void record(StreamHandle stream);
  // `stream` (on any device) waits for the event's latest record, on the device.
  void block(StreamHandle stream) const;
  bool query() const;
  void synchronize() const;
  // Milliseconds between two recorded, completed timing events.
  float elapsed_ms(const Event& end) const;

 private:
  int device_;
  EventHandle event_ = nullptr;
};

// ---- CUDA graphs (stream capture) ----
// The work `fn` queues on `stream` (a stream of `device`, not the legacy default stream)
// recorded into a CUDA graph (cudaStreamBeginCapture, thread-local mode: nothing runs) and
// instantiated; launch() runs it again, the same kernels on the same memory, as one launch.
// While `fn` runs, allocations on this thread throw DeviceError: a captured kernel keeps
// its pointers, so memory the cache could hand to someone else must not be captured. A
// capture that fails (fn throws, CUDA refuses) throws DeviceError naming why; nothing ran.
class Graph {
 public:
  Graph(int device, StreamHandle stream, const std::function<void()>& fn);
  ~Graph();
  Graph(const Graph&) = delete;
  Graph& operator=(const Graph&) = delete;
  int device() const { return device_; }
  void launch(StreamHandle stream) const;

 private:
  int device_;
  [[maybe_unused]] void* graph_ = nullptr;  // cudaGraph_t (unused without CUDA)
  [[maybe_unused]] void* exec_ = nullptr;   // cudaGraphExec_t
};

// ---- memory figures ----
// Marks that `stream` uses `storage` (a device storage), so that its block is not reused
// before the work queued on `stream` up to its free has completed.
void record_stream(const Storage& storage, StreamHandle stream);
struct DeviceMemoryStats {
  int64_t allocated_bytes = 0;       // in live storages
  int64_t peak_allocated_bytes = 0;  // since start or reset
  int64_t reserved_bytes = 0;        // held from the driver (allocated + cached)
  int64_t cached_bytes = 0;          // reserved, not allocated
  int64_t allocations = 0;           // allocations served
  int64_t cache_hits = 0;            // of those, served from the cache
  int64_t driver_allocations = 0;    // cudaMalloc calls
  int64_t driver_frees = 0;          // cudaFree calls
  int64_t live_storages = 0;
};
DeviceMemoryStats memory_stats(int device);
// Returns every cached (unused) block of `device` to the driver.
void empty_cache(int device);

// ---- host <-> device ----
// Copies between any two tensors of the same shape and dtype where one or both live on a
// device: host to device and device to host through pinned staging buffers, device to
// device (same or other device) directly. Runs on the current stream of the device side
// (of dst for device to device); returns when the host side may be reused or read (a copy
// to the host waits for it).
void copy_between(const local::Tensor& dst, const local::Tensor& src);

}  // namespace dtr::cuda
