// pg/nccl/nccl.hpp in a build without NCCL: CUDA tensors of every group go through host staging.
#include <fmt/format.h>

#include "dtr/error.hpp"
#include "pg/nccl/nccl.hpp"

namespace dtr::pg {

bool nccl_built() {
  return false;
}

std::string nccl_version() {
  return "";
}

std::shared_ptr<NcclComm> nccl_connect(Backend&, int device, std::chrono::milliseconds) {
  throw DeviceError(fmt::format(
      "nccl: this dtr was built without NCCL (DTR_WITH_NCCL=OFF), cannot connect cuda:{}", device));
}

}  // namespace dtr::pg
