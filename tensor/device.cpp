// CUDA device discovery, through the CUDA backend (tensor/cuda/cuda.hpp), which caches
// what the driver said.
#include "dtr/device.hpp"

#include "tensor/cuda/cuda.hpp"

namespace dtr {

int cuda_device_count() {
  return cuda::device_count();
}

std::string cuda_unavailable_reason() {
  return cuda::unavailable_reason();
}

}  // namespace dtr
