// Internal to tensor/: the CUDA backend of the tensor engine. A local::Tensor whose storage
// lives on a CUDA device (Storage::device() >= 0) runs every op through the functions here;
// the engine (tensor/tensor.cpp) routes to them, nothing else calls kernels directly. Other
// folders use tensor/device_runtime.hpp (devices, streams, events, graphs, memory figures,
// copies), which this header includes; what is declared here is for the engine, the
// allocator and tensor/'s own tests.
//
// Built without CUDA (DTR_WITH_CUDA=0), the same functions exist (tensor/cuda/no_cuda.cpp)
// and throw dtr::DeviceError saying dtr was built without CUDA.
//
// Memory. Device memory comes from a caching allocator (tensor/cuda/allocator.hpp; see
// tensor/device_runtime.hpp for its reuse rules). No cudaMalloc per op. When the driver has
// no memory left even after the cache was emptied, allocate() throws OutOfMemory naming
// the device, the bytes asked, and what the device and the cache have free.
//
// Thread safety: every function is safe from any thread. A tensor's bytes written by one
// stream and read by another must be ordered by an event, as in CUDA.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>

#include "dtr/tensor.hpp"
#include "tensor/device_runtime.hpp"

namespace dtr::cuda {

// ---- memory (tensor/cuda/allocator.hpp is the cache itself) ----
// A storage of `nbytes` on `device`, allocated for the current stream of that device.
std::shared_ptr<Storage> allocate(int device, size_t nbytes);
// A cap on the bytes reserved on `device` (0: none); allocations past it throw OutOfMemory.
void set_memory_limit(int device, int64_t bytes);

// ---- kernels (tensor/cuda/kernels*.cu) ----
// As local::run_kernel for tensors that all live on one device (out included): runs the
// op's kernel on the current stream of that device. Inputs may be strided and broadcast;
// out is as infer() describes it (contiguous for new results, input 0 for in-place).
void run_kernel(OpId op, std::span<const local::Tensor> inputs, const OpAttrs& attrs,
                const local::Tensor& out);
// Copies src into dst elementwise (broadcast, dtype conversion), both on dst's device.
void copy_into(const local::Tensor& dst, const local::Tensor& src);
// Sets every element of t (on a device) to v.
void fill(const local::Tensor& t, Scalar v);

}  // namespace dtr::cuda
