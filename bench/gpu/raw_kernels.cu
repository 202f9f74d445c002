// Hand-written CUDA baselines for dtr_gpu_bench (bench/gpu/gpu_bench.cpp), which is plain
// C++: the cheapest kernel that does what dtr's `x.add_(1.0)` does, for the dispatch
// breakdown (a launch with nothing of dtr around it).
//
// Thread safety: launches on the stream given, from any thread.
#include "raw_kernels.hpp"

namespace dtr::bench {

namespace {
__global__ void add_scalar_kernel(float* p, float v, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) p[i] += v;
}
}  // namespace

cudaError_t launch_add_scalar(float* p, float v, int n, cudaStream_t stream) {
  add_scalar_kernel<<<(n + 255) / 256, 256, 0, stream>>>(p, v, n);
  return cudaGetLastError();
}

}  // namespace dtr::bench
