// dtr-exec: the launcher. Parses the command line and runs one of the jobs of
// launcher/jobs.hpp: N SPMD ranks (-n N), a master program against N local workers
// (--workers N), or one process of a job mpirun or srun started (--launched).
//
// Thread safety: single-threaded by design (signals are read from a signalfd, which needs
// them blocked in every thread).
#include <CLI/CLI.hpp>
#include <cstdio>
#include <exception>
#include <string>
#include <vector>

#include "dtr/error.hpp"
#include "launcher/jobs.hpp"
#include "tools/cli_checks.hpp"

namespace {

constexpr const char* kDescription =
    R"(dtr-exec: runs a dtr program as N SPMD ranks, or as a master against N local workers.

  dtr-exec -n N PROGRAM [ARGS...]
      Starts N copies of PROGRAM with RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE,
      MASTER_ADDR and MASTER_PORT set (env:// rendezvous; SLURM_PROCID/SLURM_NTASKS and
      OMPI_COMM_WORLD_* are removed so these are the only rank variables). Each output line
      is prefixed with its rank, "[2] ". When a rank fails (non-zero exit or a signal) the
      others get SIGTERM, then SIGKILL after --grace-ms; SIGINT, SIGTERM and SIGHUP sent to
      dtr-exec are forwarded to every rank. Exit status: 0 when all ranks exit 0, else the
      first failing rank's (128 + signal number for a signal).

  dtr-exec --workers N PROGRAM [ARGS...]
      Starts N local dtr-worker daemons (log lines prefixed "[w0] "), runs PROGRAM once
      with DTR_WORKERS set to their endpoints, then stops them. Exit status: the program's.
      dtr-worker is looked for next to dtr-exec (in a build tree: build/worker/),
      then at $DTR_WORKER_BIN, then on PATH.

  dtr-exec --launched PROGRAM [ARGS...]
      One process of a job that mpirun -np N+1 or srun -n N+1 started: rank 0 becomes
      PROGRAM, the master (init_master_worker() listens on MASTER_ADDR:MASTER_PORT for the
      WORLD_SIZE - 1 others), every other rank becomes a dtr-worker that dials it.
      MASTER_ADDR: 127.0.0.1 when every rank is on one host, else set it; MASTER_PORT:
      derived from the launcher's job id unless set. The exit status is the process's.

Exit status 124: --timeout expired; 127: PROGRAM could not be started.
)";

constexpr const char* kExamples = R"(
Examples:
  dtr-exec -n 4 ./pg_sgd
  dtr-exec -n 2 --master-port 29500 --timeout 600 ./train --epochs 10
  dtr-exec --workers 2 ./quickstart
  mpirun -np 4 dtr-exec --launched ./master_sgd   # a master and 3 workers as one MPI job
  srun -n 4 dtr-exec --launched ./master_sgd)";

}  // namespace

int main(int argc, char** argv) {
  CLI::App app(kDescription, "dtr-exec");
  app.footer(kExamples);
  app.prefix_command();  // PROGRAM and everything after it are not dtr-exec's options

  int nproc = 0, workers = 0, master_port = 0;
  int64_t grace_ms = 5000, worker_start_timeout_ms = 30000;
  double timeout_s = 0;
  bool no_prefix = false, launched = false;
  std::string master_addr = "127.0.0.1", worker_bin, worker_log_level = "warn";

  auto* n_opt = app.add_option("-n,--nproc", nproc, "Number of SPMD ranks to start")
                    ->check(CLI::Range(1, 4096));
  auto* w_opt = app.add_option("--workers", workers,
                               "Start this many local dtr-worker daemons and run PROGRAM "
                               "once as their master")
                    ->check(CLI::Range(1, 1024));
  auto* l_opt = app.add_flag("--launched", launched,
                             "Under mpirun/srun: rank 0 runs PROGRAM as the master, the other "
                             "ranks become its workers");
  n_opt->excludes(w_opt);
  w_opt->excludes(n_opt);
  l_opt->excludes(n_opt);
  l_opt->excludes(w_opt);
  app.add_option("--master-addr", master_addr, "MASTER_ADDR given to the ranks")
      ->capture_default_str();
  app.add_option(
         "--master-port", master_port,
         "MASTER_PORT given to the ranks (default: a free port, reserved until the job ends)")
      ->check(CLI::Range(1, 65535));
  app.add_flag("--no-prefix", no_prefix, "Do not prefix output lines with the rank");
  app.add_option("--grace-ms", grace_ms,
                 "After SIGTERM (or a forwarded signal), wait this long before SIGKILL")
      ->check(CLI::Range(int64_t{0}, int64_t{3'600'000}))
      ->capture_default_str();
  app.add_option("--timeout", timeout_s,
                 "Stop the job (exit status 124) after this many seconds; 0: no limit")
      ->check(dtr::cli::kNonNegative)
      ->capture_default_str();
  app.add_option("--worker-bin", worker_bin, "The dtr-worker binary for --workers")
      ->type_name("PATH");
  app.add_option("--worker-log-level", worker_log_level, "--log-level of the workers")
      ->check(CLI::IsMember({"trace", "debug", "info", "warn", "error"}))
      ->capture_default_str();
  app.add_option("--worker-start-timeout-ms", worker_start_timeout_ms,
                 "How long the workers may take to report their endpoints")
      ->check(dtr::cli::kPositive)
      ->capture_default_str();

  std::vector<std::string> command;
  try {
    app.parse(argc, argv);
    command = app.remaining();
    if (nproc == 0 && workers == 0 && !launched)
      throw CLI::ValidationError("one of -n N, --workers N and --launched is required");
    if (command.empty()) throw CLI::ValidationError("PROGRAM is required");
    if (!command.empty() && command.front() == "--") command.erase(command.begin());
    if (command.empty()) throw CLI::ValidationError("PROGRAM is required after --");
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }

  dtr::launcher::CommonOptions common;
  common.command = command;
  common.grace = std::chrono::milliseconds(grace_ms);
  if (timeout_s > 0)
    common.timeout = std::chrono::milliseconds(static_cast<int64_t>(timeout_s * 1000.0));
  common.prefix = !no_prefix;

  try {
    if (launched) {
      dtr::launcher::LaunchedJobOptions o;
      o.command = command;
      o.worker_bin = worker_bin;
      o.worker_log_level = worker_log_level;
      dtr::launcher::run_launched(o);
    }
    if (nproc > 0) {
      dtr::launcher::RankJobOptions o;
      o.common = common;
      o.nproc = nproc;
      o.master_addr = master_addr;
      o.master_port = master_port;
      return dtr::launcher::run_ranks(o);
    }
    dtr::launcher::WorkerJobOptions o;
    o.common = common;
    o.workers = workers;
    o.worker_bin = worker_bin;
    o.worker_log_level = worker_log_level;
    o.worker_start_timeout = std::chrono::milliseconds(worker_start_timeout_ms);
    return dtr::launcher::run_with_workers(o);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
}
