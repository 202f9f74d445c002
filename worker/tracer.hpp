// Tracer: the worker's part of the timeline (docs/observability.md) while tracing is on.
//
// Terms. A *slice* is one command on its stream's track, from its first attempt to its
// end (the time it spent waiting for an input, an event or a peer is its `wait`), with
// its op, tensors (ids, dtypes, shapes), bytes, status, and the token of the cross-node
// arrow it starts or ends (a copy's bytes, an event's notification). A *device slice* is a
// command's work on its stream's CUDA stream, timed by a pair of CUDA events and turned
// into host time at collection through a reference event per device.
//
// Cost. Off, every hook is one relaxed load of `on()`. On, a slice is one or two reads of
// the trace clock (common/trace_clock.hpp) and a record of about 100 bytes appended to
// the calling thread's log (common/thread_log.hpp): no lock, no formatting. Ticks
// become the steady clock's nanoseconds only at collection. The log's budget bounds the
// memory (past it slices are dropped and counted).
//
// Thread safety: start() from the dispatch thread; stop(), record() and the device hooks
// from any thread; collect() from any thread, one at a time (a mutex), after stop().
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <vector>

#include "common/thread_log.hpp"
#include "common/trace_clock.hpp"
#include "protocol/messages.hpp"
#include "tensor/device_runtime.hpp"

namespace dtr::worker::detail {

inline constexpr size_t kDefaultTraceBytes = size_t{256} << 20;

class Tracer {
 public:
  explicit Tracer(size_t budget_bytes = kDefaultTraceBytes);
  ~Tracer();
  Tracer(const Tracer&) = delete;
  Tracer& operator=(const Tracer&) = delete;

  bool on() const { return on_.load(std::memory_order_relaxed); }
  // Starts a trace (what an earlier one recorded is dropped).
  void start();
  void stop() { on_.store(false, std::memory_order_relaxed); }
  // Stops and forgets the trace (a session ended with one recorded or uncollected).
  void clear();

  // One slice; times are trace::ticks().
  struct Slice {
    protocol::CmdType kind = protocol::CmdType::RunOp;
    uint16_t op = 0;
    uint32_t stream = 0;
    int32_t device = -1;
    int64_t begin = 0;
    int64_t end = 0;
    int64_t wait = 0;  // ticks of [begin, end) spent waiting
    bool failed = false;
    int64_t bytes = 0;
    uint32_t peer = protocol::kNoPeer;
    protocol::TraceFlow flow = protocol::TraceFlow::None;
    uint64_t flow_id = 0;
    uint64_t detail = 0;
    bool dispatched = false;  // done at dispatch, off the stream (the dispatch track)
    uint8_t inputs = 0;       // the first `inputs` tensors were read
  };
  // A tensor of a slice; `meta` null when unknown (a failed tensor).
  struct TensorRef {
    protocol::TensorId id = protocol::kNoTensor;
    const TensorMeta* meta = nullptr;
  };
  // Records a slice (at most kMaxTraceTensors tensors) when tracing is on.
  void record(const Slice& s, std::span<const TensorRef> tensors);
  // The hot path's slice: an op run at dispatch, its inputs by id only (their shapes are
  // found at collection), its new output (kNoTensor: in place) with its shape.
  void record_op(uint32_t stream, uint16_t op, const protocol::TensorId* inputs, uint8_t n_inputs,
                 protocol::TensorId out, const TensorMeta* out_meta, int64_t begin, int64_t end,
                 bool failed);

  // CUDA: `mark_begin` before a command's work is queued on `stream` (of `device`),
  // `mark_end` after, with the slice that describes it (its times are filled at
  // collection). No-ops when tracing is off.
  struct DeviceMark {
    std::shared_ptr<cuda::Event> begin;
  };
  DeviceMark mark_begin(int device, cuda::StreamHandle stream);
  void mark_end(DeviceMark m, int device, cuda::StreamHandle stream, const Slice& s,
                std::span<const TensorRef> tensors);

  // After stop(): the next at most `max` slices, on the steady clock; `more` until the
  // last part, after which the trace's memory is freed. A tensor a slice names by id only
  // gets the shape another slice gives it, else `resolve`'s (the session's live tensors;
  // the first call's resolver is the one used).
  using Resolver = std::function<std::optional<TensorMeta>(protocol::TensorId)>;
  protocol::TraceChunk collect(size_t max, const Resolver& resolve = {});
  uint64_t dropped() const { return log_.dropped(); }

 private:
  struct DeviceSlice;
  struct Collection;
  // The device slices' events, host slices converted from the log (first collect()).
  void convert_device_slices(Collection& c);

  std::atomic<bool> on_{false};
  trace::ThreadLog log_;
  std::mutex device_mu_;  // guards device_ and refs_
  std::vector<DeviceSlice> device_;
  struct Reference {
    std::shared_ptr<cuda::Event> event;
    int64_t host_ns = 0;
  };
  std::vector<Reference> refs_;  // by device
  std::mutex collect_mu_;        // guards collection_
  std::unique_ptr<Collection> collection_;
};

// A protocol::TraceTensor of a tensor reference (tests and collection).
protocol::TraceTensor trace_tensor(const Tracer::TensorRef& t);

}  // namespace dtr::worker::detail
