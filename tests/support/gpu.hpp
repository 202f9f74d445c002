// Test support: the skip of the CUDA tests (ctest label `gpu`) on a machine without a device.
//
// Thread safety: a function that reads the CUDA runtime's device count.
#pragma once

#include <cstdio>

#include "dtr/device.hpp"

namespace dtr::test {

// True (and "SKIPPED: ..." printed, which ctest reports as skipped) when this machine has no
// CUDA device.
inline bool no_gpu() {
  if (cuda_device_count() > 0) return false;
  std::printf("SKIPPED: no CUDA device (%s)\n", cuda_unavailable_reason().c_str());
  return true;
}

}  // namespace dtr::test
