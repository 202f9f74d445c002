// The floor under dtr's mpi backend for small calls (issue 17's wrapper goal; see
// docs/performance.md, "The call's fixed cost"): what the backend's own message pattern
// costs in MPI alone, with no dtr code, against the MPI collective it replaces, in one run.
//
//   mpirun -np 2 --mca btl vader,self build-dev/bench/dtr_mpi_floor [BYTES] [ITERS]
//
// Rows (median of ITERS calls, on rank 0; BYTES default 4, ITERS default 200000):
//  - MPI_Allreduce in place, float32 SUM: the library called directly;
//  - direct all_reduce: MPI_Irecv + MPI_Isend to the peer, MPI_Testall until both are done,
//    then the fold (what pg/mpi_direct.cpp posts for a small all_reduce of two ranks, on a
//    communicator of its own);
//  - MPI_Bcast from rank 0 (the root's time) against MPI_Isend + MPI_Test on the root;
//  - a ping-pong (round trip) with MPI_Send / MPI_Recv against MPI_Isend / MPI_Irecv tested
//    until done (what the backend's point-to-point calls post, without their header);
// and the ratios library / pattern (>= 1: the pattern is no slower than the library).
// Two ranks only; the others, if any, wait at the barriers.
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;

double median_us(int iters, const std::function<void()>& call) {
  std::vector<double> t(static_cast<size_t>(iters));
  for (int i = 0; i < iters / 10; ++i) call();  // warm up
  for (auto& v : t) {
    const auto t0 = Clock::now();
    call();
    v = std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
  }
  std::nth_element(t.begin(), t.begin() + iters / 2, t.end());
  return t[static_cast<size_t>(iters / 2)];
}

void wait_all(MPI_Request* reqs, int n) {
  int done = 0;
  while (!done) MPI_Testall(n, reqs, &done, MPI_STATUSES_IGNORE);
}

}  // namespace

int main(int argc, char** argv) {
  // DTR_FLOOR_THREADS=multiple: the thread level dtr's mpi backend asks for, to price it.
  const char* level = std::getenv("DTR_FLOOR_THREADS");
  const bool multiple = level != nullptr && std::string(level) == "multiple";
  int provided = 0;
  MPI_Init_thread(&argc, &argv, multiple ? MPI_THREAD_MULTIPLE : MPI_THREAD_SINGLE, &provided);
  int rank = 0, size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  const long bytes = argc > 1 ? std::atol(argv[1]) : 4;
  const int iters = argc > 2 ? std::atoi(argv[2]) : 200000;
  if (size < 2 || bytes < 4 || iters < 10) {
    if (rank == 0) std::fprintf(stderr, "dtr_mpi_floor: needs 2 ranks, BYTES >= 4, ITERS >= 10\n");
    MPI_Finalize();
    return 2;
  }
  const int n = static_cast<int>(bytes / 4);
  std::vector<float> a(static_cast<size_t>(n), 1.0f), b(static_cast<size_t>(n), 0.0f);
  MPI_Comm direct = MPI_COMM_NULL, pair = MPI_COMM_NULL;
  MPI_Comm_dup(MPI_COMM_WORLD, &direct);
  MPI_Comm_split(MPI_COMM_WORLD, rank < 2 ? 0 : MPI_UNDEFINED, rank, &pair);
  const int peer = 1 - rank;
  double lib = 0, pattern = 0, bcast = 0, isend = 0, pingpong = 0, tested = 0;
  MPI_Barrier(MPI_COMM_WORLD);
  if (rank < 2) {
    lib = median_us(iters, [&] {
      MPI_Allreduce(MPI_IN_PLACE, a.data(), n, MPI_FLOAT, MPI_SUM, pair);
      std::fill(a.begin(), a.end(), 1.0f);
    });
    MPI_Barrier(pair);
    pattern = median_us(iters, [&] {
      MPI_Request r[2];
      MPI_Irecv(b.data(), n, MPI_FLOAT, peer, 7, direct, &r[0]);
      MPI_Isend(a.data(), n, MPI_FLOAT, peer, 7, direct, &r[1]);
      wait_all(r, 2);
      for (int i = 0; i < n; ++i) a[static_cast<size_t>(i)] += b[static_cast<size_t>(i)];
      std::fill(a.begin(), a.end(), 1.0f);
    });
    MPI_Barrier(pair);
    bcast = median_us(iters, [&] { MPI_Bcast(a.data(), n, MPI_FLOAT, 0, pair); });
    MPI_Barrier(pair);
    isend = median_us(iters, [&] {
      MPI_Request r;
      if (rank == 0) {
        MPI_Isend(a.data(), n, MPI_FLOAT, 1, 8, direct, &r);
      } else {
        MPI_Irecv(a.data(), n, MPI_FLOAT, 0, 8, direct, &r);
      }
      wait_all(&r, 1);
    });
    MPI_Barrier(pair);
    pingpong = median_us(iters, [&] {
      if (rank == 0) {
        MPI_Send(a.data(), n, MPI_FLOAT, 1, 9, direct);
        MPI_Recv(b.data(), n, MPI_FLOAT, 1, 9, direct, MPI_STATUS_IGNORE);
      } else {
        MPI_Recv(b.data(), n, MPI_FLOAT, 0, 9, direct, MPI_STATUS_IGNORE);
        MPI_Send(b.data(), n, MPI_FLOAT, 0, 9, direct);
      }
    });
    MPI_Barrier(pair);
    tested = median_us(iters, [&] {
      MPI_Request r;
      if (rank == 0) {
        MPI_Isend(a.data(), n, MPI_FLOAT, 1, 10, direct, &r);
        wait_all(&r, 1);
        MPI_Irecv(b.data(), n, MPI_FLOAT, 1, 10, direct, &r);
        wait_all(&r, 1);
      } else {
        MPI_Irecv(b.data(), n, MPI_FLOAT, 0, 10, direct, &r);
        wait_all(&r, 1);
        MPI_Isend(b.data(), n, MPI_FLOAT, 0, 10, direct, &r);
        wait_all(&r, 1);
      }
    });
    MPI_Barrier(pair);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  if (rank == 0) {
    std::printf("%ld bytes, %d calls, medians on rank 0\n", bytes, iters);
    std::printf("MPI_Allreduce in place          %8.3f us\n", lib);
    std::printf("Irecv + Isend + Testall + fold  %8.3f us   library / pattern %.2f\n", pattern,
                lib / pattern);
    std::printf("MPI_Bcast (root)                %8.3f us\n", bcast);
    std::printf("Isend + Test (root)             %8.3f us   library / pattern %.2f\n", isend,
                bcast / isend);
    std::printf("Send / Recv round trip          %8.3f us\n", pingpong);
    std::printf("Isend / Irecv + Test round trip %8.3f us   library / pattern %.2f\n", tested,
                pingpong / tested);
  }
  if (pair != MPI_COMM_NULL) MPI_Comm_free(&pair);
  MPI_Comm_free(&direct);
  MPI_Finalize();
  return 0;
}
