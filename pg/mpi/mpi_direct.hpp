// Internal: the mpi backend's own collectives over MPI point-to-point messages
// (pg/mpi/mpi_direct.cpp), for all_reduce, broadcast up to kDirectBroadcastMax bytes and
// all_gather; which calls take them is mpi_direct_takes().
//
// Why: the backend must bound every wait by the group's timeout, so it cannot call MPI's
// blocking collectives; Open MPI implements the non-blocking ones (MPI_Iallreduce, ...)
// in its libnbc component, which costs 5–10× more per small call than its blocking
// collectives over shared memory and reaches under half their bandwidth there. These
// algorithms post MPI_Isend/MPI_Irecv on a communicator of their own and test them until
// done, as every other wait of the backend:
//  - all_reduce up to kDirectSmallBytes: every rank sends its tensor to every other (in
//    pieces of kPieceBytes, which fit one eager message of Open MPI's shared-memory
//    transport, all posted at once) and folds all of them in rank order;
//  - larger all_reduce: the tensor is cut into p chunks; rank q folds chunk q from every
//    rank in rank order, kSegmentBytes at a time, and sends the result to the others
//    (2(p-1)/p of the tensor in and out per rank, as a ring, with one round per segment
//    instead of p - 1);
//  - broadcast: the root sends to every rank (over shared memory, up to kDirectSmallBytes
//    in eager pieces, as the small all_reduce); all_gather: every rank sends its block to
//    every other.
// Each element is folded as ((x0 op x1) op x2) ... in rank order, exactly once, and then
// copied, so every rank holds the same bits, and the same bits as the zmq backend's
// same-host path.
//
// Failure: at the deadline, when `stop` is set, or on an MPI error, pending receives are
// cancelled, every request left is handed to `give_up` with the memory it uses, and the
// call throws (TimeoutError, TransportError); the group is then broken, as after any failed
// collective of the backend.
//
// Thread safety: one call at a time per communicator (the group's collective order).
#pragma once

#include <mpi.h>

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "pg/backend.hpp"
#include "pg/work_state.hpp"

namespace dtr::pg {

constexpr size_t kDirectSmallBytes = 8 << 10;
constexpr size_t kPieceBytes = 4000;
constexpr size_t kSegmentBytes = 1 << 20;
constexpr size_t kDirectBroadcastMax = 1 << 30;
// Across hosts: between two ranks every one of them goes direct (one exchange, one send, or
// two rounds that are a ring's: what any algorithm does for two, without libnbc's cost);
// among more only all_reduce from 1 MiB (below, Open MPI's recursive doubling measured
// faster; its broadcast and all_gather trees beat a linear one).
constexpr size_t kDirectAcrossHostsBytes = 1 << 20;

// What a direct collective uses of its group.
struct MpiDirectContext {
  MPI_Comm comm = MPI_COMM_NULL;  // used by these collectives only
  int rank = 0;
  int size = 1;
  int tag = 0;                 // distinct from the group's previous collective
  bool shared_memory = false;  // Open MPI's shared-memory transport carries the messages
  Clock::time_point deadline;
  const std::atomic<bool>* stop = nullptr;
  const std::string* what = nullptr;
  // Reusable scratch memory of the group; replaced when a failed call gives it up.
  std::shared_ptr<std::vector<char>>* scratch = nullptr;
  // The lists a call fills, kept by the group and reused (one call at a time), so that a
  // call allocates nothing once they have grown.
  struct Lists {
    std::vector<MPI_Request> reqs;
    std::vector<uint8_t> is_recv;
    std::vector<const char*> parts;
  };
  Lists* lists = nullptr;
  // Keeps a request nobody waits for any more, with the memory it uses.
  std::function<void(MPI_Request, std::shared_ptr<void>)> give_up;
};

// Whether run_mpi_direct() runs this call (else MPI's non-blocking collective does).
// `shared_memory`: every member shares memory with every other (Open MPI's shared-memory
// transport carries the messages); `size`: the group's.
bool mpi_direct_takes(const CollectiveArgs& a, bool shared_memory, int size);
// Runs the collective (Avg as Sum). Throws as described above.
void run_mpi_direct(CollectiveArgs& a, MpiDirectContext& ctx);

// Shared with pg/mpi/mpi_backend.cpp: throws TransportError naming `what` for an MPI error code.
void mpi_check(int rc, const std::string& what);

}  // namespace dtr::pg
