// MasterSession's life: its options checked, its start (the handshake of
// master/connect.cpp, then the I/O and heartbeat threads, the clock offsets, the same-host
// attach and the trace DTR_TRACE asks for), its shutdown and its end.
#include "master/session.hpp"

#include <fmt/format.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "dtr/env.hpp"
#include "pg/mpi/mpi_backend.hpp"
#include "protocol/transport.hpp"
#include "security/curve.hpp"

namespace dtr::detail {

namespace {

// Backend mpi: the workers' communicator is MPI's world without the master, so the master
// and its workers must be one MPI job, the master its rank 0 (`mpirun -np N+1 dtr-exec
// --launched`). Checked from the launcher's variables before anything is sent: MPI_Init
// itself would wait for every process of the job.
void check_mpi_job(size_t workers) {
  const char* rank = std::getenv("OMPI_COMM_WORLD_RANK");
  const char* size = std::getenv("OMPI_COMM_WORLD_SIZE");
  if (rank == nullptr || size == nullptr) {
    rank = std::getenv("PMI_RANK");
    size = std::getenv("PMI_SIZE");
  }
  if (rank == nullptr || size == nullptr)
    throw InvalidArgument(
        "init_master_worker: backend 'mpi' needs the master and its workers started as one MPI "
        "job, the master as rank 0: mpirun -np N+1 dtr-exec --launched PROGRAM (no MPI launcher "
        "is visible in this process's environment)");
  if (std::string(rank) != "0" || std::string(size) != std::to_string(workers + 1))
    throw InvalidArgument(fmt::format(
        "init_master_worker: backend 'mpi' needs the master as rank 0 of an MPI job of its {} "
        "workers and itself ({} processes); this process is rank {} of {}",
        workers, workers + 1, rank, size));
}

// Throws InvalidArgument for options no session starts with (both or neither of workers
// and listen, a bad endpoint, heartbeat or spin, an unknown backend, mpi outside a fitting
// MPI job, listening for no workers); true when the workers' backend is mpi.
bool check_options(const MasterOptions& options) {
  check_environment();  // a DTR_* switch that is set is understood, or refused here
  if (options.workers.empty() == options.listen.empty())
    throw InvalidArgument(
        "init_master_worker: give either worker endpoints to connect to or an endpoint to "
        "listen on, not both or neither");
  for (size_t i = 0; i < options.workers.size(); ++i) {
    if (auto problem = protocol::endpoint_problem(options.workers[i], false))
      throw InvalidArgument(fmt::format("init_master_worker: worker endpoint {} of {}: {}", i + 1,
                                        options.workers.size(), *problem));
    // A worker serves one session once: listed twice, its second HELLO would be refused
    // as busy (with this very session) until the connect timeout.
    for (size_t j = 0; j < i; ++j)
      if (options.workers[j] == options.workers[i])
        throw InvalidArgument(fmt::format(
            "init_master_worker: worker endpoint {} is listed twice ({} and {} of {}): a "
            "worker is one node of a session",
            options.workers[i], j + 1, i + 1, options.workers.size()));
  }
  if (!options.listen.empty()) {
    if (auto problem = protocol::endpoint_problem(options.listen, true))
      throw InvalidArgument(fmt::format("init_master_worker: listen endpoint: {}", *problem));
  }
  if (options.heartbeat.count() <= 0 || options.heartbeat >= options.heartbeat_timeout)
    throw InvalidArgument(
        fmt::format("init_master_worker: heartbeat ({} ms) must be positive and shorter than "
                    "heartbeat_timeout ({} ms)",
                    options.heartbeat.count(), options.heartbeat_timeout.count()));
  if (options.spin.count() < 0)
    throw InvalidArgument(
        fmt::format("init_master_worker: spin must be >= 0 us, got {}", options.spin.count()));
  // Throws InvalidArgument for a bad name, or mpi outside a fitting MPI job.
  const bool mpi = setup_backend(options.backend) == "mpi";
  if (mpi)
    check_mpi_job(options.listen.empty() ? options.workers.size()
                                         : static_cast<size_t>(std::max(options.num_workers, 0)));
  if (!options.listen.empty() && options.num_workers <= 0)
    throw InvalidArgument(
        fmt::format("init_master_worker: listening on {} needs num_workers >= 1, got {}",
                    options.listen, options.num_workers));
  return mpi;
}

}  // namespace

MasterSession::MasterSession(const MasterOptions& options)
    : options_(options), context_(1), beat_context_(1) {
  guard_ = std::make_unique<security::Guard>(context_,
                                             resolve_security(options.key_file, options.insecure),
                                             [this](const std::string& line) {
                                               std::lock_guard lock(refusals_mu_);
                                               last_refusal_ = line;
                                             });
}

std::shared_ptr<MasterSession> MasterSession::start(const MasterOptions& options) {
  const bool mpi = check_options(options);
  protocol::tune_allocator_for_large_messages();
  std::shared_ptr<MasterSession> s(new MasterSession(options));
  if (options.listen.empty()) {
    s->connect_workers();
  } else {
    s->accept_workers();
  }
  s->send_setup();
  s->wake_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (s->wake_fd_ < 0)
    throw TransportError(fmt::format("eventfd failed: {}", std::strerror(errno)));
  auto watch = [&](zmq::socket_t& socket) {
    s->socket_fds_.push_back(pollfd{socket.get(zmq::sockopt::fd), POLLIN, 0});
  };
  s->beat_wake_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (s->beat_wake_fd_ < 0)
    throw TransportError(fmt::format("eventfd failed: {}", std::strerror(errno)));
  if (s->router_) {
    watch(*s->router_);
    s->beat_thread_ = std::thread([raw = s.get()] { raw->listen_beat_loop(); });
  } else {
    for (auto& node : s->nodes_) watch(*node->dealer);
    s->beat_thread_ = std::thread([raw = s.get()] { raw->beat_loop(); });
  }
  s->io_thread_ = std::thread([raw = s.get()] { raw->io_loop(); });
  // The workers split MPI's world among themselves on Setup; the master takes part and
  // stays out (pg/mpi/mpi_backend.hpp). Its heartbeats go on meanwhile: the workers end a
  // session whose master is silent for heartbeat_timeout, and MPI_Init can take longer.
  if (mpi) pg::mpi_stand_aside(options.connect_timeout, "init_master_worker (backend mpi)");
  s->measure_clocks();
  s->attach_same_host();
  if (s->options_.trace_path.empty())
    if (const char* path = std::getenv("DTR_TRACE"); path && *path) s->options_.trace_path = path;
  if (!s->options_.trace_path.empty()) s->start_trace();
  return s;
}

MasterSession::~MasterSession() {
  shutdown();
  if (wake_fd_ >= 0) close(wake_fd_);
  if (beat_wake_fd_ >= 0) close(beat_wake_fd_);
}

void MasterSession::shutdown() {
  std::lock_guard lock(shutdown_mu_);
  if (closed_.exchange(true)) return;
  stop_.store(true);
  wake();
  if (beat_thread_.joinable()) {
    uint64_t one = 1;
    [[maybe_unused]] ssize_t n = write(beat_wake_fd_, &one, sizeof(one));
    beat_thread_.join();
  }
  if (io_thread_.joinable()) io_thread_.join();
  std::lock_guard plock(pending_mu_);
  for (auto& [id, p] : pending_)
    p.promise.set_exception(std::make_exception_ptr(TransportError("the session was shut down")));
  pending_.clear();
}

}  // namespace dtr::detail
