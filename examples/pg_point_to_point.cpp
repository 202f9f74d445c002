// pg_point_to_point: point-to-point messages between the ranks of an SPMD job, as in the
// first example of the torch.distributed tutorial. Needs 4 ranks:
//
//   dtr-exec -n 4 ./pg_point_to_point
//
// 1. Blocking: rank 0 sends a one-element tensor to rank 3 with send()/recv().
// 2. Non-blocking: the same with isend()/irecv(), which return at once; wait() completes
//    them (bounded by a timeout).
// 3. Any source: ranks 1 and 2 each send their rank to rank 3, which receives from whoever
//    comes first and learns the sender from recv()'s return value.
#include <chrono>
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

}  // namespace

int main() {
  try {
    dtr::init_process_group("zmq", "env://");  // RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT
    const int rank = dtr::get_rank();
    if (dtr::get_world_size() != 4) {
      if (rank == 0) std::cerr << "pg_point_to_point needs 4 ranks (dtr-exec -n 4)\n";
      dtr::destroy_process_group();
      return 2;
    }

    // 1. Blocking.
    dtr::local::Tensor t = dtr::local::zeros({1});
    if (rank == 0) {
      t += 1;
      dtr::send(t, /*dst=*/3);
    } else if (rank == 3) {
      dtr::recv(t, /*src=*/0);
    }
    std::cout << "blocking: rank " << rank << " has data " << values(t) << "\n";

    // 2. Non-blocking: the call returns a Work at once; the tensor must not be touched
    // until wait() has returned.
    dtr::local::Tensor u = dtr::local::zeros({4});
    dtr::Work request;
    if (rank == 0) {
      u.copy_(dtr::local::arange(1, 5).to(dtr::DType::Float32));  // [1, 2, 3, 4]
      request = dtr::isend(u, /*dst=*/3);
    } else if (rank == 3) {
      request = dtr::irecv(u, /*src=*/0);
    }
    if (request.valid()) request.wait(std::chrono::seconds(60));
    std::cout << "non-blocking: rank " << rank << " has data " << values(u) << "\n";

    // 3. Any source: rank 3 takes two messages in arrival order.
    dtr::local::Tensor v = dtr::local::full({1}, rank);
    if (rank == 1 || rank == 2) {
      dtr::send(v, 3);
    } else if (rank == 3) {
      float total = 0;
      for (int i = 0; i < 2; ++i) {
        int from = dtr::recv(v, dtr::kAnySource);
        if (from != static_cast<int>(v.item<float>()))
          throw dtr::Error("recv(any source) returned the wrong sender");
        total += v.item<float>();
      }
      std::cout << "any source: rank 3 received from ranks 1 and 2, total " << total << "\n";
    }

    dtr::barrier();
    dtr::destroy_process_group();
  } catch (const std::exception& e) {
    std::cerr << "pg_point_to_point: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
