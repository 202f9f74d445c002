// The jobs dtr-exec runs: the first two to completion, returning dtr-exec's exit status; the
// third (--launched) by becoming one of the job's processes.
//
// run_ranks (dtr-exec -n N): N copies of a program as the ranks of an SPMD job, each with
// RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR and MASTER_PORT set (and the
// cluster launchers' rank variables removed, so that dtr-exec's are the only ones a rank
// sees). Output lines get a "[RANK] " prefix. The first rank to fail (non-zero exit or a
// signal) is named on stderr and the others are stopped: SIGTERM to each rank's process
// group, SIGKILL after the grace period. Signals dtr-exec receives are forwarded to every
// rank, which then get the grace period to exit. Exit status: 0 when every rank exited 0;
// else the first failing rank's status (128 + signal for a signal), 128 + signal when
// dtr-exec was signalled, 124 when --timeout expired.
//
// run_with_workers (dtr-exec --workers N): N local dtr-worker daemons (listen mode on
// ephemeral loopback ports, log lines prefixed "[wI] "), then the program once with
// DTR_WORKERS set to their endpoints; the program keeps dtr-exec's terminal (stdin,
// stdout, stderr, process group). Afterwards the workers are stopped (SIGTERM, SIGKILL
// after the grace period). Exit status: the program's (as above), 1 when the workers could
// not be started, 124 on --timeout.
//
// Every wait is bounded: by --timeout, the grace period, the worker start timeout, and a
// final 5 s after SIGKILL.
//
// Thread safety: call from the main thread of a process with no other threads.
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <vector>

namespace dtr::launcher {

struct CommonOptions {
  std::vector<std::string> command;  // PROGRAM ARGS...
  std::chrono::milliseconds grace{5000};
  std::optional<std::chrono::milliseconds> timeout;  // the whole job
  bool prefix = true;
};

struct RankJobOptions {
  CommonOptions common;
  int nproc = 1;
  std::string master_addr = "127.0.0.1";
  int master_port = 0;  // 0: pick a free one
};

struct WorkerJobOptions {
  CommonOptions common;
  int workers = 1;
  std::string worker_bin;  // empty: next to dtr-exec, $DTR_WORKER_BIN, PATH
  std::string worker_log_level = "warn";
  std::chrono::milliseconds worker_start_timeout{30000};
};

// One process of a job another launcher started (mpirun -np N+1, srun -n N+1, or any that
// sets RANK and WORLD_SIZE): run_launched reads the rank and size (Open MPI's
// OMPI_COMM_WORLD_*, Slurm's SLURM_PROCID/SLURM_NTASKS, MPICH's PMI_RANK/PMI_SIZE, else
// RANK/WORLD_SIZE) and replaces this process: rank 0 with the program, as the master
// (MASTER_ADDR, MASTER_PORT and WORLD_SIZE set, DTR_WORKERS/DTR_LISTEN removed, so that
// init_master_worker() listens for the others), every other rank with `dtr-worker --master`
// dialing it. MASTER_ADDR defaults to 127.0.0.1 when the launcher says every rank is on one
// host; MASTER_PORT to a port derived from the launcher's job id (the same on every rank).
// Throws dtr::InvalidArgument when no rank is found or the address or port cannot be
// agreed.
struct LaunchedJobOptions {
  std::vector<std::string> command;  // PROGRAM ARGS... (rank 0)
  std::string worker_bin;            // empty: next to dtr-exec, $DTR_WORKER_BIN, PATH
  std::string worker_log_level = "warn";
};

int run_ranks(const RankJobOptions& options);
int run_with_workers(const WorkerJobOptions& options);
[[noreturn]] void run_launched(const LaunchedJobOptions& options);

// A free TCP port on `addr` (or on any address when `addr` cannot be bound), held for as
// long as the object lives: bound with SO_REUSEADDR and not listening. The kernel then
// gives it to no other process that asks for a free port (bind to port 0, or an outgoing
// connection), which closes the race between picking a port and rank 0 binding it, while
// rank 0's store, which binds with SO_REUSEADDR (as ZeroMQ and torch's TCPStore do), can
// still listen on it. Throws dtr::TransportError when no port can be had.
class ReservedPort {
 public:
  explicit ReservedPort(const std::string& addr);
  ~ReservedPort();
  ReservedPort(const ReservedPort&) = delete;
  ReservedPort& operator=(const ReservedPort&) = delete;
  int port() const { return port_; }

 private:
  int fd_ = -1;
  int port_ = 0;
};

// The dtr-worker binary: `explicit_path` when set, else the one next to this executable
// (or, in dtr's build tree, the one in worker/ beside this launcher/), else
// $DTR_WORKER_BIN, else the first on PATH. Throws dtr::InvalidArgument when none.
std::string find_worker_binary(const std::string& explicit_path);

}  // namespace dtr::launcher
