// pg/mpi/mpi_backend.hpp in a build without MPI (DTR_WITH_MPI=OFF).
#include "dtr/error.hpp"
#include "pg/mpi/mpi_backend.hpp"

namespace dtr::pg {

namespace {
[[noreturn]] void not_built() {
  throw InvalidArgument(
      "process group: backend 'mpi' is not built into this dtr (configure with MPI found: "
      "Debian's libopenmpi-dev, DTR_WITH_MPI=ON)");
}
}  // namespace

std::pair<int, int> mpi_world_rank_size() {
  not_built();
}

std::shared_ptr<Backend> make_mpi_world(const ProcessGroupOptions&) {
  not_built();
}

std::shared_ptr<Backend> make_mpi_world_part(const ProcessGroupOptions&, int, int) {
  not_built();
}

void mpi_stand_aside(std::chrono::milliseconds, const std::string&) {
  not_built();
}

}  // namespace dtr::pg
