// pg_reduce_broadcast: the two collectives of the torch.distributed tutorial, on any
// number of ranks:
//
//   dtr-exec -n 4 ./pg_reduce_broadcast
//   mpirun -np 4 ./pg_reduce_broadcast mpi     (the backend, when given, is argument 1)
//
// reduce_tensor: every rank contributes rank + 1; all_reduce(SUM) divided by the world size
// leaves the mean, (n + 1) / 2, on every rank (bit-identical everywhere). ReduceOp::Avg
// gives the same in one call; ReduceOp::Max gives n.
// broadcast_tensor: rank 0's tensor is copied into every rank's tensor.
#include <iostream>
#include <sstream>
#include <string>

#include <dtr/process_group.hpp>
#include <dtr/tensor.hpp>

namespace {

std::string values(const dtr::local::Tensor& t) {
  std::ostringstream os;
  os << "[";
  auto v = t.to_vector<float>();
  for (std::size_t i = 0; i < v.size(); ++i) os << (i ? ", " : "") << v[i];
  os << "]";
  return os.str();
}

// all_reduce(SUM) / world size: the mean of every rank's tensor, in place.
void reduce_tensor(dtr::local::Tensor& t) {
  dtr::all_reduce(t, dtr::ReduceOp::Sum);
  t /= static_cast<float>(dtr::get_world_size());
}

// Rank `root`'s tensor into every rank's `t`.
void broadcast_tensor(dtr::local::Tensor& t, int root) {
  dtr::broadcast(t, root);
}

}  // namespace

int main(int argc, char** argv) {
  try {
    // The backend may be named (zmq by default; mpi takes its ranks from mpirun).
    const std::string backend = argc > 1 ? argv[1] : "zmq";
    dtr::init_process_group(backend);  // env://: RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT
    const int rank = dtr::get_rank();
    const int size = dtr::get_world_size();

    dtr::local::Tensor t = dtr::local::full({3}, rank + 1);
    reduce_tensor(t);
    std::cout << "reduce_tensor: rank " << rank << " has " << values(t) << "\n";

    dtr::local::Tensor avg = dtr::local::full({3}, rank + 1);
    dtr::all_reduce(avg, dtr::ReduceOp::Avg);
    dtr::local::Tensor mx = dtr::local::full({3}, rank + 1);
    dtr::all_reduce(mx, dtr::ReduceOp::Max);
    std::cout << "avg: rank " << rank << " has " << values(avg) << ", max " << values(mx) << "\n";

    dtr::local::Tensor b = dtr::local::zeros({4});
    if (rank == 0) b.copy_(dtr::local::arange(4).to(dtr::DType::Float32) * 10);
    broadcast_tensor(b, 0);
    std::cout << "broadcast_tensor: rank " << rank << " has " << values(b) << "\n";

    if (rank == 0) std::cout << "world size " << size << "\n";
    dtr::destroy_process_group();
  } catch (const std::exception& e) {
    std::cerr << "pg_reduce_broadcast: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
