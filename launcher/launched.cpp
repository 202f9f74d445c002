// dtr-exec --launched (launcher/jobs.hpp): one process of a job that another launcher
// started (mpirun, srun): rank 0 becomes the master program, every other rank a dtr-worker
// that dials it.
#include <fmt/format.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "dtr/error.hpp"
#include "launcher/jobs.hpp"

namespace dtr::launcher {
namespace {

std::string env(const char* name) {
  const char* v = std::getenv(name);
  return v ? v : "";
}

int parse_count(const char* name, const std::string& v, int min) {
  try {
    size_t used = 0;
    int n = std::stoi(v, &used);
    if (used == v.size() && n >= min) return n;
  } catch (const std::exception&) {
  }
  throw InvalidArgument(
      fmt::format("dtr-exec --launched: {}={} is not an integer >= {}", name, v, min));
}

// The cluster launchers' variables: rank, size, whether every rank is on this host (when
// the launcher says), and an id of the job (for a port all ranks agree on).
struct Launcher {
  const char* name;
  const char* rank;
  const char* size;
  const char* local_size;  // nullptr: not told
  std::vector<const char*> job_id;
};

const Launcher kLaunchers[] = {
    {"Open MPI (mpirun)",
     "OMPI_COMM_WORLD_RANK",
     "OMPI_COMM_WORLD_SIZE",
     "OMPI_COMM_WORLD_LOCAL_SIZE",
     {"OMPI_MCA_ess_base_jobid", "PMIX_NAMESPACE"}},
    {"Slurm (srun)", "SLURM_PROCID", "SLURM_NTASKS", nullptr, {"SLURM_JOB_ID", "SLURM_STEP_ID"}},
    {"MPICH (mpiexec)", "PMI_RANK", "PMI_SIZE", "MPI_LOCALNRANKS", {"PMI_KVSNAME"}},
    {"RANK and WORLD_SIZE", "RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", {}},
};

// MASTER_PORT, else one derived from the job id (the same on every rank); 0 for none.
int agreed_port(const Launcher& l) {
  if (std::string p = env("MASTER_PORT"); !p.empty()) return parse_count("MASTER_PORT", p, 1);
  std::string id;
  for (const char* v : l.job_id) id += env(v) + "/";
  if (id.find_first_not_of('/') == std::string::npos) return 0;
  return 20000 + static_cast<int>(std::hash<std::string>{}(id) % 30000);
}

[[noreturn]] void exec_or_die(const std::vector<std::string>& argv) {
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  execvp(args[0], args.data());
  std::fprintf(stderr, "dtr-exec: cannot start %s: %s\n", argv[0].c_str(), std::strerror(errno));
  std::fflush(stderr);
  _exit(127);
}

}  // namespace

void run_launched(const LaunchedJobOptions& o) {
  const Launcher* l = nullptr;
  for (const Launcher& c : kLaunchers)
    if (!env(c.rank).empty() && !env(c.size).empty()) {
      l = &c;
      break;
    }
  if (!l)
    throw InvalidArgument(
        "dtr-exec --launched: no rank found (start it with mpirun -np N+1, srun -n N+1, or set "
        "RANK and WORLD_SIZE)");
  const int rank = parse_count(l->rank, env(l->rank), 0);
  const int size = parse_count(l->size, env(l->size), 2);
  if (rank >= size)
    throw InvalidArgument(
        fmt::format("dtr-exec --launched: {} {} is not below {} {}", l->rank, rank, l->size, size));
  std::string addr = env("MASTER_ADDR");
  if (addr.empty()) {
    const bool one_host =
        (l->local_size && env(l->local_size) == std::to_string(size)) || env("SLURM_NNODES") == "1";
    if (!one_host)
      throw InvalidArgument(fmt::format(
          "dtr-exec --launched: set MASTER_ADDR to the address of rank 0's host ({} does not say "
          "that every rank runs on one host; e.g. mpirun -x MASTER_ADDR=head-node)",
          l->name));
    addr = "127.0.0.1";
  }
  const int port = agreed_port(*l);
  if (port == 0)
    throw InvalidArgument(fmt::format(
        "dtr-exec --launched: set MASTER_PORT ({} gives no job id to derive one from)", l->name));
  const std::string endpoint = fmt::format("tcp://{}:{}", addr, port);
  if (rank != 0) {
    std::vector<std::string> argv = {find_worker_binary(o.worker_bin),
                                     "--master",
                                     endpoint,
                                     "--log-level",
                                     o.worker_log_level,
                                     "--name",
                                     fmt::format("rank{}", rank)};
    exec_or_die(argv);
  }
  // The master: init_master_worker() from the environment listens on MASTER_ADDR:MASTER_PORT
  // for WORLD_SIZE - 1 workers; the other ways it could read are removed.
  for (const char* v : {"DTR_WORKERS", "DTR_LISTEN", "DTR_NUM_WORKERS"}) unsetenv(v);
  setenv("MASTER_ADDR", addr.c_str(), 1);
  setenv("MASTER_PORT", std::to_string(port).c_str(), 1);
  setenv("WORLD_SIZE", std::to_string(size).c_str(), 1);
  exec_or_die(o.command);
}

}  // namespace dtr::launcher
