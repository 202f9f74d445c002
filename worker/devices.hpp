// Which CUDA devices a worker uses (`dtr-worker --devices`), and what it tells masters
// about them at HELLO.
//
// Thread safety: select_visible_devices is pure; describe_devices may be called from any
// thread (it queries the CUDA runtime).
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "protocol/messages.hpp"

namespace dtr::worker {

// The CUDA_VISIBLE_DEVICES value that makes the worker use `devices`: "all" (keep what is
// visible), "none" (no device), or a comma-separated list of indices among the devices
// visible now (`visible`: the current CUDA_VISIBLE_DEVICES, nullopt when unset), each at
// most once. nullopt: leave the variable as it is. Throws InvalidArgument naming the bad
// entry.
std::optional<std::string> select_visible_devices(std::string_view devices,
                                                  std::optional<std::string_view> visible);

// One DeviceInfo per CUDA device this process uses (index 0, 1, ...): name, memory and
// compute capability; empty without CUDA or without a GPU.
std::vector<protocol::DeviceInfo> describe_devices();

}  // namespace dtr::worker
