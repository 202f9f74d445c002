// CUDA device discovery through the runtime API (when built with CUDA).
#include "dtr/device.hpp"

#include "dtr/config.hpp"
#include "tensor/cuda/cuda.hpp"

#if DTR_WITH_CUDA
#include <cuda_runtime_api.h>
#endif

namespace dtr {

int cuda_device_count() {
  return cuda::device_count();
}

std::string cuda_unavailable_reason() {
#if DTR_WITH_CUDA
  int n = 0;
  cudaError_t err = cudaGetDeviceCount(&n);
  if (err != cudaSuccess) {
    cudaGetLastError();
    return cudaGetErrorString(err);
  }
  return n > 0 ? "" : "no CUDA device found";
#else
  return "dtr was built without CUDA (DTR_WITH_CUDA=OFF)";
#endif
}

}  // namespace dtr
