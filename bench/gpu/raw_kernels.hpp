// Hand-written CUDA baselines for dtr_gpu_bench (raw_kernels.cu): plain launches with no
// dtr code around them.
//
// Thread safety: launches on the stream given, from any thread.
#pragma once

#include <cuda_runtime.h>

namespace dtr::bench {

// p[i] += v for i < n, one thread per element; returns the launch's error.
cudaError_t launch_add_scalar(float* p, float v, int n, cudaStream_t stream);

}  // namespace dtr::bench
