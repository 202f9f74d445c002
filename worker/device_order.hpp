// Device (CUDA) ordering: how a dtr stream's CUDA work is ordered against other streams'.
//
// Each dtr stream owns one CUDA stream per device it uses (CudaStreams, made on first
// use). A CUDA tensor's slot remembers its latest write: an event recorded on the writer's
// CUDA stream (wrote()). A stream that reads or writes the tensor on another CUDA stream
// first makes its CUDA stream wait for that event on the device, and marks the memory used
// by its stream (record_stream) so that it is not reused before that work has run (use()).
// CPU tensors need none of this: a slot is ready only once its producer has run.
//
// Thread safety: a CudaStreams belongs to one dtr stream and is used only by the thread
// running that stream (and by the session's destructor once nothing runs). use() and
// wrote() may be called from any executor thread; they take the slot's `mu`, which guards
// its write event. uploaded() is the dispatch thread's (Put to a device).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "tensor/device_runtime.hpp"
#include "worker/tensor_table.hpp"

namespace dtr::worker::detail {

class CudaStreams {
 public:
  // This stream's CUDA stream on `device` (made on first use); null for the CPU (< 0).
  cuda::StreamHandle get(int device);
  // Waits until the CUDA work queued on these streams has run; "" or why it failed.
  std::string finish();
  // An event recorded now on each of these streams (none for a stream that used no device).
  std::vector<std::shared_ptr<cuda::Event>> record_all();

 private:
  std::vector<std::unique_ptr<cuda::Stream>> streams_;  // by device
};

// `slot`'s tensor, ready to be read or written on `mine`: a CUDA tensor last written on
// another CUDA stream is waited for on the device, and its memory kept from reuse until
// what `mine` queues on it has run.
local::Tensor use(CudaStreams& mine, Slot& slot);
// Notes that `mine` has just queued a write of `t` (a CUDA tensor) into `slot`.
void wrote(CudaStreams& mine, Slot& slot, const local::Tensor& t);
// A ready slot holding `host` copied to CUDA device `device` on the device's default
// stream; its write event orders the streams that use it after the copy.
SlotPtr uploaded(const local::Tensor& host, int device);

}  // namespace dtr::worker::detail
