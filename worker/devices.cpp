// --devices and the device list of HELLO.
#include "worker/devices.hpp"

#include <fmt/format.h>

#include <charconv>

#include "dtr/error.hpp"
#include "tensor/device_runtime.hpp"

namespace dtr::worker {

namespace {
std::vector<std::string> split(std::string_view s) {
  std::vector<std::string> out;
  size_t start = 0;
  while (true) {
    size_t comma = s.find(',', start);
    out.emplace_back(s.substr(start, comma == std::string_view::npos ? comma : comma - start));
    if (comma == std::string_view::npos) return out;
    start = comma + 1;
  }
}
}  // namespace

std::optional<std::string> select_visible_devices(std::string_view devices,
                                                  std::optional<std::string_view> visible) {
  if (devices == "all") return std::nullopt;
  if (devices == "none") return std::string();
  std::vector<std::string> pool;
  if (visible) pool = visible->empty() ? std::vector<std::string>{} : split(*visible);
  std::vector<std::string> chosen;
  std::vector<long> seen;
  for (const std::string& item : split(devices)) {
    long index = -1;
    auto [end, ec] = std::from_chars(item.data(), item.data() + item.size(), index);
    if (item.empty() || ec != std::errc() || end != item.data() + item.size() || index < 0)
      throw InvalidArgument(fmt::format(
          "--devices {}: '{}' is not a device index (give all, none, or indices like 0,2)", devices,
          item));
    for (long s : seen)
      if (s == index)
        throw InvalidArgument(fmt::format("--devices {}: device {} appears twice", devices, index));
    seen.push_back(index);
    if (visible) {
      if (static_cast<size_t>(index) >= pool.size())
        throw InvalidArgument(
            fmt::format("--devices {}: device {} is not visible (CUDA_VISIBLE_DEVICES={} shows {})",
                        devices, index, *visible, pool.size()));
      chosen.push_back(pool[static_cast<size_t>(index)]);
    } else {
      chosen.push_back(std::to_string(index));
    }
  }
  std::string out;
  for (const std::string& c : chosen) out += (out.empty() ? "" : ",") + c;
  return out;
}

std::vector<protocol::DeviceInfo> describe_devices() {
  std::vector<protocol::DeviceInfo> out;
  const int n = cuda::device_count();
  for (int d = 0; d < n && out.size() + 1 < protocol::kMaxDevices; ++d) {
    cuda::DeviceProperties p = cuda::device_properties(d);
    protocol::DeviceInfo info;
    info.index = d;
    info.name = p.name;
    info.total_memory = p.total_memory;
    info.free_memory = p.free_memory;
    info.compute_major = p.major;
    info.compute_minor = p.minor;
    out.push_back(std::move(info));
  }
  return out;
}

}  // namespace dtr::worker
