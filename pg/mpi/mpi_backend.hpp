// Internal: the mpi backend (pg/mpi/mpi_backend.cpp, built with DTR_WITH_MPI from Debian's
// libopenmpi-dev; pg/mpi/no_mpi.cpp otherwise). Rank and size are MPI's (MPI_COMM_WORLD of a job
// started by mpirun or srun; a process started alone is a world of one). MPI is initialized
// at the first mpi group with MPI_THREAD_MULTIPLE (refused when the library cannot give it)
// and finalized at exit once no mpi group is left (call destroy_process_group() first).
//
// Each group owns three communicators: one for MPI's collectives and point-to-point headers,
// one for payloads (LibraryGroup's protocol), one for dtr's own collectives over
// point-to-point messages (pg/mpi/mpi_direct.hpp: all_reduce, broadcast and all_gather when
// every member shares memory with every other, else all_reduce between two ranks or of 1 MiB
// or more; Open MPI's non-blocking collectives cost several times its blocking ones). All
// have MPI_ERRORS_RETURN, so an MPI error becomes a TransportError naming the op instead of
// aborting the job. Every operation is non-blocking, tested until done (a short spin, then yields,
// then sleeps), so every wait is bounded by Options::timeout. Reductions: in dtr's own collectives
// dtr's kernels (pg/reduce.hpp), folded in rank order; in MPI's, MPI's built-in ops where they
// agree with dtr's (sums and products of float32/float64/int32/int64, min/max of integers),
// dtr's kernels as user ops otherwise (bool, float16, bfloat16, NaN-propagating float
// min/max). Element counts and message sizes are MPI ints: a call of MPI's own over 2^31 - 1
// elements (or a message over 2^31 - 1 bytes) is refused with InvalidArgument, and tags
// must lie in [0, MPI_TAG_UB].
//
// Failure: a collective cannot be cancelled in MPI; at its deadline it fails with
// TimeoutError, its buffers stay alive until MPI completes it or the process ends, and the
// group is unusable from then on (later calls fail at once). A receive that times out is
// cancelled and the group goes on. A peer that stops answering is detected by these
// timeouts. A peer that dies: Open MPI's launcher (mpirun, its daemons) ends the whole job,
// by design; dtr cannot prevent that (see docs/process_groups.md).
//
// Thread safety: as pg::Backend.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <utility>

#include "pg/backend.hpp"

namespace dtr::pg {

// MPI's rank and size of this process (initializing MPI when needed). Throws
// InvalidArgument when not built with MPI, TransportError when MPI cannot be initialized
// with MPI_THREAD_MULTIPLE.
std::pair<int, int> mpi_world_rank_size();
// The world group: MPI_COMM_WORLD duplicated. Waits (bounded by options.timeout) until
// every rank has made its group too.
std::shared_ptr<Backend> make_mpi_world(const ProcessGroupOptions& options);
// A group of some of MPI's world: every process of the job calls either this (a member, as
// group rank `rank` of `size`) or mpi_stand_aside() (not a member), at the same point; both
// wait (bounded by the timeout) until all have. A master-worker session under `mpirun -np
// N+1 dtr-exec --launched`: the workers are the members, the master (MPI rank 0) stands
// aside. Throws InvalidArgument when the members do not make up a group of `size` in which
// this process is `rank`.
std::shared_ptr<Backend> make_mpi_world_part(const ProcessGroupOptions& options, int rank,
                                             int size);
void mpi_stand_aside(std::chrono::milliseconds timeout, const std::string& what);

}  // namespace dtr::pg
