// The floor under dtr's mpi backend for small calls (issue 17's wrapper goal; see
// docs/performance/history/collectives-issue-17.md, "The call's fixed cost"): what the
// backend's own message pattern costs in MPI alone, with no dtr code, against the MPI
// collective it replaces, in one run.
//
//   mpirun -np 2 --mca btl vader,self build-dev/bench/dtr_mpi_floor [BYTES] [ITERS]
//
// Rows (median of ITERS calls, on rank 0; BYTES default 4, ITERS default 200000):
//  - MPI_Allreduce in place, float32 SUM: the library called directly;
//  - direct all_reduce: MPI_Irecv + MPI_Isend to the peer, MPI_Testall until both are done,
//    then the fold (what pg/mpi/mpi_direct.cpp posts for a small all_reduce of two ranks, on a
//    communicator of its own);
//  - MPI_Bcast from rank 0 (the root's time) against MPI_Isend + MPI_Test on the root;
//  - a ping-pong (round trip) with MPI_Send / MPI_Recv against MPI_Isend / MPI_Irecv tested
//    until done (what the backend's point-to-point calls post, without their header), and
//    against the backend's message past its inline size (16 KiB): a 64-byte header, then the
//    payload, whose receive is posted once the header has come;
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

// The ping-pong rows: MPI_Send / MPI_Recv, the same tested until done, and the header step.
struct PingPong {
  double library = 0, tested = 0, header_step = 0;
};

// Messages on `comm`, barriers on `pair` (ranks 0 and 1 only).
PingPong ping_pong(int iters, int rank, MPI_Comm comm, MPI_Comm pair, std::vector<float>& a,
                   std::vector<float>& b) {
  const int n = static_cast<int>(a.size());
  const int peer = 1 - rank;
  PingPong p;
  p.library = median_us(iters, [&] {
    if (rank == 0) {
      MPI_Send(a.data(), n, MPI_FLOAT, 1, 9, comm);
      MPI_Recv(b.data(), n, MPI_FLOAT, 1, 9, comm, MPI_STATUS_IGNORE);
    } else {
      MPI_Recv(b.data(), n, MPI_FLOAT, 0, 9, comm, MPI_STATUS_IGNORE);
      MPI_Send(b.data(), n, MPI_FLOAT, 0, 9, comm);
    }
  });
  MPI_Barrier(pair);
  auto one = [&](bool send, float* data, int tag) {
    MPI_Request r;
    if (send) {
      MPI_Isend(data, n, MPI_FLOAT, peer, tag, comm, &r);
    } else {
      MPI_Irecv(data, n, MPI_FLOAT, peer, tag, comm, &r);
    }
    wait_all(&r, 1);
  };
  p.tested = median_us(iters, [&] {
    one(rank == 0, rank == 0 ? a.data() : b.data(), 10);
    one(rank != 0, b.data(), 10);
  });
  MPI_Barrier(pair);
  char header_out[64] = {}, header_in[64];
  auto send_step = [&](float* data) {
    MPI_Request r[2];
    MPI_Isend(header_out, 64, MPI_BYTE, peer, 11, comm, &r[0]);
    MPI_Isend(data, n, MPI_FLOAT, peer, 12, comm, &r[1]);
    wait_all(r, 2);
  };
  auto recv_step = [&](float* data) {
    MPI_Request r;
    MPI_Irecv(header_in, 64, MPI_BYTE, peer, 11, comm, &r);
    wait_all(&r, 1);
    MPI_Irecv(data, n, MPI_FLOAT, peer, 12, comm, &r);
    wait_all(&r, 1);
  };
  p.header_step = median_us(iters, [&] {
    if (rank == 0) {
      send_step(a.data());
      recv_step(b.data());
    } else {
      recv_step(b.data());
      send_step(b.data());
    }
  });
  MPI_Barrier(pair);
  return p;
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
  double lib = 0, pattern = 0, bcast = 0, isend = 0;
  PingPong pp;
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
    pp = ping_pong(iters, rank, direct, pair, a, b);
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
    std::printf("Send / Recv round trip          %8.3f us\n", pp.library);
    std::printf("Isend / Irecv + Test round trip %8.3f us   library / pattern %.2f\n", pp.tested,
                pp.library / pp.tested);
    std::printf("header, then payload round trip %8.3f us   library / pattern %.2f\n",
                pp.header_step, pp.library / pp.header_step);
  }
  if (pair != MPI_COMM_NULL) MPI_Comm_free(&pair);
  MPI_Comm_free(&direct);
  MPI_Finalize();
  return 0;
}
