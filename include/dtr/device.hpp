// Devices visible to this process. CUDA devices are counted only when dtr was built with
// DTR_WITH_CUDA and a driver and GPU are present; otherwise there are none.
//
// Thread safety: safe from any thread.
#pragma once

#include <string>

namespace dtr {

// Number of CUDA devices this process can use (0 without CUDA support or without a GPU).
int cuda_device_count();
// Why there are no CUDA devices ("built without CUDA", the driver's error), or "" when
// there are some.
std::string cuda_unavailable_reason();

}  // namespace dtr
