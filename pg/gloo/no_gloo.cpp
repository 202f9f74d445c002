// pg/gloo/gloo_backend.hpp in a build without gloo (DTR_WITH_GLOO=OFF).
#include "dtr/error.hpp"
#include "pg/gloo/gloo_backend.hpp"

namespace dtr::pg {

std::shared_ptr<Backend> make_gloo_world(std::shared_ptr<Store>, int, int, const std::string&,
                                         const ProcessGroupOptions&) {
  throw InvalidArgument(
      "process group: backend 'gloo' is not built into this dtr (configure with gloo found: "
      "Debian's libgloo-dev, DTR_WITH_GLOO=ON)");
}

}  // namespace dtr::pg
