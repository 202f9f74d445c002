// dtr-exec --launched (launcher/jobs.hpp): one process of a job that another launcher
// started (mpirun, srun): rank 0 becomes the master program, every other rank a dtr-worker
// that dials it.
#include <arpa/inet.h>
#include <fmt/format.h>
#include <netinet/in.h>
#include <sys/socket.h>
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
#include "launcher/spawn.hpp"

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
// Derived ports lie in [20000, 32768), below Linux's ephemeral range (32768-60999 by
// default), whose ports the host's outgoing connections (and dtr's own `tcp://ADDR:*`
// sockets) hold at any moment.
int agreed_port(const Launcher& l) {
  if (std::string p = env("MASTER_PORT"); !p.empty()) return parse_count("MASTER_PORT", p, 1);
  std::string id;
  for (const char* v : l.job_id) id += env(v) + "/";
  if (id.find_first_not_of('/') == std::string::npos) return 0;
  return 20000 + static_cast<int>(std::hash<std::string>{}(id) % 12768);
}

// Whether `port` is taken on `addr` (an IPv4 address of this host) right now; false when
// it cannot tell (a host name, an address of another host): the master's bind then says.
bool port_in_use(const std::string& addr, int port) {
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(static_cast<uint16_t>(port));
  if (::inet_pton(AF_INET, addr.c_str(), &sa.sin_addr) != 1) return false;
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  int one = 1;  // as ZeroMQ's listeners: a connection in TIME_WAIT does not count
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  const bool taken =
      ::bind(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0 && errno == EADDRINUSE;
  ::close(fd);
  return taken;
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
          "that every rank runs on one host; e.g. {})",
          l->name,
          std::string(l->rank) == "SLURM_PROCID"
              ? "export MASTER_ADDR=$(scontrol show hostnames \"$SLURM_JOB_NODELIST\" | head -n 1)"
              : "mpirun -x MASTER_ADDR=head-node"));
    addr = "127.0.0.1";
  }
  const int port = agreed_port(*l);
  if (port == 0)
    throw InvalidArgument(fmt::format(
        "dtr-exec --launched: set MASTER_PORT ({} gives no job id to derive one from)", l->name));
  const std::string endpoint = fmt::format("tcp://{}:{}", addr, port);
  if (rank == 0 && port_in_use(addr, port))
    throw InvalidArgument(fmt::format(
        "dtr-exec --launched: port {} on {} ({}) is in use on this host; set MASTER_PORT to a "
        "free port in every rank's environment (mpirun -x MASTER_PORT=29500; srun passes it on)",
        port, addr, env("MASTER_PORT").empty() ? "derived from the job id" : "MASTER_PORT"));
  if (rank != 0) {
    std::vector<std::string> argv = {find_worker_binary(o.worker_bin),
                                     "--master",
                                     endpoint,
                                     "--log-level",
                                     o.worker_log_level,
                                     "--name",
                                     fmt::format("rank{}", rank)};
    exec_or_exit(argv, "dtr-exec");
  }
  // The master: init_master_worker() from the environment listens on MASTER_ADDR:MASTER_PORT
  // for WORLD_SIZE - 1 workers; the other ways it could read are removed.
  for (const char* v : {"DTR_WORKERS", "DTR_LISTEN", "DTR_NUM_WORKERS"}) unsetenv(v);
  setenv("MASTER_ADDR", addr.c_str(), 1);
  setenv("MASTER_PORT", std::to_string(port).c_str(), 1);
  setenv("WORLD_SIZE", std::to_string(size).c_str(), 1);
  exec_or_exit(o.command, "dtr-exec");
}

}  // namespace dtr::launcher
