// dtr-worker: the worker daemon. Parses the command line, sets up logging to stderr,
// runs a worker::Server until SIGTERM/SIGINT (listen mode) or the end of the session
// (connect mode). Exit status: 0 after a clean stop, 1 on a startup or runtime error.
//
// Thread safety: the main thread runs the server; a second thread waits for SIGTERM,
// SIGINT and SIGUSR1 (blocked everywhere else) and calls Server::stop(), or, on SIGUSR1,
// Server::dump_flight() (the flight recorder to the log, docs/observability.md).
#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <fstream>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <thread>

#include <fmt/format.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include "dtr/device.hpp"
#include "dtr/env.hpp"
#include "dtr/error.hpp"
#include "protocol/messages.hpp"
#include "protocol/transport.hpp"
#include "tools/cli_checks.hpp"
#include "worker/collectives.hpp"
#include "worker/devices.hpp"
#include "worker/server.hpp"

namespace {

constexpr const char* kDescription =
    R"(dtr-worker: holds tensors for a dtr master and runs its commands.

Two modes, exactly one of them:
  --listen ENDPOINT  bind ENDPOINT and wait for masters to dial in; one master is served
                     at a time (others are told "busy" until it says goodbye or goes away).
                     Runs until SIGTERM or SIGINT.
  --master ENDPOINT  dial a master that listens on ENDPOINT; exits when the master says
                     goodbye or goes away.
)";

constexpr const char* kExamples = R"(
Examples:
  dtr-worker --listen tcp://127.0.0.1:* --endpoint-file /tmp/worker0.endpoint
  dtr-keygen -o cluster.key     # once; copy it (mode 0600) to every node and the master's
  dtr-worker --listen tcp://*:5555 --key cluster.key
  dtr-worker --master tcp://head-node:6000 --key cluster.key --name gpu-box-1 --log-level debug)";

std::string default_name() {
  char host[256] = {};
  if (gethostname(host, sizeof host - 1) != 0) return fmt::format("pid{}", getpid());
  return fmt::format("{}:{}", host, getpid());
}

// spdlog patterns treat '%' as a flag.
std::string escape_pattern(const std::string& s) {
  std::string out;
  for (char c : s) {
    out += c;
    if (c == '%') out += '%';
  }
  return out;
}

void setup_logging(const std::string& name, const std::string& level) {
  auto logger = spdlog::stderr_color_mt("dtr-worker");
  logger->set_pattern(
      fmt::format("[dtr-worker {}] %Y-%m-%d %H:%M:%S.%e %^%l%$: %v", escape_pattern(name)));
  spdlog::set_default_logger(logger);
  spdlog::set_level(spdlog::level::from_str(level));
}

// Writes `text` to `path` atomically: a temporary file next to it, then rename().
void write_file_atomically(const std::string& path, const std::string& text) {
  std::string tmp = fmt::format("{}.tmp.{}", path, getpid());
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << text << '\n';
    out.flush();
    if (!out) throw dtr::Error(fmt::format("cannot write the endpoint file {}", tmp));
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    int err = errno;
    std::remove(tmp.c_str());
    throw dtr::Error(fmt::format("cannot rename {} to {}: {}", tmp, path, std::strerror(err)));
  }
}

// The command line, parsed.
struct Args {
  std::string listen, master, name, log_level = "info", endpoint_file;
  int64_t max_message_bytes = dtr::worker::ServerOptions{}.max_message_bytes;
  int64_t heartbeat_ms = dtr::worker::ServerOptions{}.heartbeat.count();
  int64_t connect_timeout_ms = dtr::worker::ServerOptions{}.connect_timeout.count();
  unsigned threads = 0;
  std::string peer_host;
  int64_t collective_timeout_ms = dtr::worker::ServerOptions{}.collective_timeout.count();
  int64_t spin_us = dtr::worker::ServerOptions{}.spin.count();
  int64_t memory_limit = 0;
  std::string key_file;
  std::string devices = "all";
  bool insecure = false;
  int64_t flight_records = static_cast<int64_t>(dtr::worker::ServerOptions{}.flight_records);
  int64_t trace_buffer = static_cast<int64_t>(dtr::worker::ServerOptions{}.trace_bytes);
  int metrics_port = -1;
  std::string metrics_address = dtr::worker::ServerOptions{}.metrics_address;
};

void add_observability_options(CLI::App& app, Args& a) {
  app.add_option("--flight-records", a.flight_records,
                 "Commands the flight recorder keeps (the last ones; rounded up to a power of "
                 "two); dumped to the log on SIGUSR1, a lost peer, a stuck collective or a "
                 "session that ends badly")
      ->check(CLI::Range(int64_t{16}, int64_t{65536}))
      ->capture_default_str();
  app.add_option("--trace-buffer", a.trace_buffer,
                 "Most bytes a timeline trace may use on this worker (e.g. 256MiB); past it "
                 "slices are dropped and counted")
      ->transform(CLI::AsSizeValue(false))
      ->capture_default_str();
  app.add_option("--metrics-port", a.metrics_port,
                 "Serve Prometheus metrics at http://ADDRESS:PORT/metrics (0: a free port, "
                 "logged); default: no endpoint")
      ->check(CLI::Range(0, 65535));
  app.add_option("--metrics-address", a.metrics_address,
                 "The IPv4 address the metrics endpoint binds")
      ->capture_default_str();
}

void add_mode_options(CLI::App& app, Args& a) {
  auto* listen_opt = app.add_option("--listen", a.listen,
                                    "Listen mode: bind this ZeroMQ endpoint and serve masters "
                                    "that dial in (e.g. tcp://*:5555)")
                         ->type_name("ENDPOINT");
  auto* master_opt = app.add_option("--master", a.master,
                                    "Connect mode: dial the master listening on this endpoint "
                                    "(e.g. tcp://head-node:6000)")
                         ->type_name("ENDPOINT");
  listen_opt->excludes(master_opt);
  master_opt->excludes(listen_opt);
  app.add_option("--name", a.name, "Name of this worker in logs (default: host:pid)");
  app.add_option("--log-level", a.log_level, "Log level (given twice: the last one)")
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeLast)
      ->check(CLI::IsMember({"trace", "debug", "info", "warn", "error"}))
      ->capture_default_str();
  app.add_option("--endpoint-file", a.endpoint_file,
                 "Write the endpoint to this file (atomically) once the socket is up; in "
                 "listen mode it is the bound one, with the port chosen for '*'")
      ->type_name("PATH");
  app.add_option("--max-message-bytes", a.max_message_bytes,
                 "Largest frame accepted (a header or one tensor's bytes), at least 65536; the "
                 "master refuses to send a tensor over it, naming the limit")
      ->check(CLI::Range(dtr::protocol::kMinMessageBytes, std::numeric_limits<int64_t>::max()))
      ->capture_default_str();
  app.add_option("--heartbeat-ms", a.heartbeat_ms,
                 "Interval of heartbeats to the master while a session is open")
      ->check(dtr::cli::kPositive)
      ->capture_default_str();
  app.add_option("--connect-timeout-ms", a.connect_timeout_ms,
                 "Connect mode: give up when no HELLO arrived within this time")
      ->check(dtr::cli::kPositive)
      ->capture_default_str();
  app.add_option("--spin-us", a.spin_us,
                 "After each message, poll this long before sleeping: lower latency for a "
                 "busy core while a master is active; 0: sleep at once")
      ->check(CLI::Range(int64_t{0}, int64_t{1000000}))
      ->capture_default_str();
}

void add_resource_options(CLI::App& app, Args& a) {
  app.add_option("--threads", a.threads,
                 "Threads that run a session's streams (its CPU budget); 0: one per core")
      ->capture_default_str();
  app.add_option("--peer-host", a.peer_host,
                 "The address other workers of a session use to reach this one (default: "
                 "the listen address, or the local address facing the master)")
      ->type_name("HOST");
  app.add_option("--memory-limit", a.memory_limit,
                 "Most bytes of tensor memory this worker holds (e.g. 8GiB, 512MiB); an "
                 "allocation past it fails that op with an out-of-memory error; 0: no limit")
      ->transform(CLI::AsSizeValue(false))
      ->capture_default_str();
  app.add_option("--collective-timeout-ms", a.collective_timeout_ms,
                 "Bound on each collective among a session's workers (and on forming their "
                 "process group)")
      ->check(dtr::cli::kPositive)
      ->capture_default_str();
  app.add_option("--devices", a.devices,
                 "CUDA devices this worker uses: all, none, or indices among the visible ones "
                 "(e.g. 0,2); masters see them as cuda:0, cuda:1, ... in that order")
      ->capture_default_str();
  app.add_option("--key", a.key_file,
                 "Cluster key file from dtr-keygen (default: $DTR_KEY_FILE, then $DTR_KEY): "
                 "with it every link is CURVE-encrypted and only holders of the key connect")
      ->type_name("FILE");
  app.add_flag("--insecure", a.insecure,
               "Without a key, allow plain links to non-loopback endpoints (trusted networks "
               "only; also DTR_INSECURE=1)");
}

// Chooses the CUDA devices (before anything touches the CUDA runtime, which reads
// CUDA_VISIBLE_DEVICES once); false on an error.
bool choose_devices(const Args& a) {
  try {
    const char* env = std::getenv("CUDA_VISIBLE_DEVICES");
    std::optional<std::string> visible = dtr::worker::select_visible_devices(
        a.devices, env ? std::optional<std::string_view>(env) : std::nullopt);
    if (visible) setenv("CUDA_VISIBLE_DEVICES", visible->c_str(), 1);
  } catch (const std::exception& e) {
    spdlog::error("{}", e.what());
    return false;
  }
  return true;
}

// Logs the chosen devices and sets the memory limit. Called once the endpoint is bound:
// the CUDA runtime's start (seconds on a loaded GPU machine) must not leave a master that
// dials in meanwhile with refused connections, which it reports as "nothing listens".
void set_up_devices(const Args& a) {
  for (const auto& d : dtr::worker::describe_devices())
    spdlog::info("cuda:{}: {}, {} MiB, compute capability {}.{}", d.index, d.name,
                 d.total_memory >> 20, d.compute_major, d.compute_minor);
  if (dtr::cuda_device_count() == 0)
    spdlog::info("no CUDA device: {}", dtr::cuda_unavailable_reason());
  dtr::protocol::tune_allocator_for_large_messages();
  dtr::set_cpu_memory_limit(a.memory_limit);
  if (a.memory_limit > 0) spdlog::info("memory limit: {} bytes of tensors", a.memory_limit);
}

// The server's options; throws when the security setup is wrong.
dtr::worker::ServerOptions server_options(const Args& a) {
  dtr::worker::ServerOptions options;
  options.listen = a.listen;
  options.master = a.master;
  options.name = a.name;
  options.max_message_bytes = a.max_message_bytes;
  options.heartbeat = std::chrono::milliseconds(a.heartbeat_ms);
  options.connect_timeout = std::chrono::milliseconds(a.connect_timeout_ms);
  options.threads = a.threads;
  options.peer_host = a.peer_host;
  options.collective_timeout = std::chrono::milliseconds(a.collective_timeout_ms);
  options.spin = std::chrono::microseconds(a.spin_us);
  options.flight_records = static_cast<size_t>(a.flight_records);
  options.trace_bytes = static_cast<size_t>(a.trace_buffer);
  options.metrics_port = a.metrics_port;
  options.metrics_address = a.metrics_address;
  options.security = dtr::resolve_security(a.key_file, a.insecure);
  if (options.security.key)
    spdlog::info("CURVE on every link; cluster key {} from {}", options.security.key->public_key,
                 options.security.key_source);
  else if (options.security.insecure)
    spdlog::warn("no cluster key and --insecure: links are neither encrypted nor authenticated");
  return options;
}

// Runs the server until it ends or a signal in `signals` stops it; the exit status.
int serve(dtr::worker::Server& server, const sigset_t& signals) {
  std::atomic<bool> done{false};
  std::thread waiter([&] {
    while (!done.load()) {
      timespec tick{0, 100'000'000};
      int sig = sigtimedwait(&signals, nullptr, &tick);
      if (sig == SIGUSR1) server.dump_flight("SIGUSR1");
      if (sig == SIGTERM || sig == SIGINT) {
        spdlog::info("stopping ({})", sig == SIGTERM ? "SIGTERM" : "SIGINT");
        server.stop();
      }
    }
  });
  int rc = 0;
  try {
    server.run();
  } catch (const std::exception& e) {
    spdlog::error("{}", e.what());
    rc = 1;
  }
  done.store(true);
  waiter.join();
  return rc;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app(kDescription, "dtr-worker");
  app.footer(kExamples);
  Args args;
  add_mode_options(app, args);
  add_resource_options(app, args);
  add_observability_options(app, args);
  // Options from a file too (the systemd unit's /etc/dtr/worker-NAME.conf): `name = value`
  // lines, the long options without their dashes; the command line wins. A key the worker
  // does not know is an error, not a setting silently ignored.
  app.set_config("--config", "",
                 "Read options from this file: one `option = value` per line (the long "
                 "options without dashes, e.g. listen = \"tcp://*:5555\", memory-limit = "
                 "\"8GiB\"); the command line wins")
      ->check(CLI::ExistingFile);
  app.allow_config_extras(CLI::config_extras_mode::error);
  try {
    app.parse(argc, argv);
    if (args.listen.empty() == args.master.empty())
      throw CLI::ValidationError(
          "exactly one of --listen ENDPOINT and --master ENDPOINT is required");
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 1;  // --help: 0; a usage error: the message, then 1
  }
  if (args.name.empty()) args.name = default_name();
  try {
    dtr::check_environment();  // DTR_SAME_HOST=flase is refused here, not ignored
  } catch (const dtr::Error& e) {
    std::fprintf(stderr, "dtr-worker: %s\n", e.what());
    return 1;
  }

  // Signals go to the waiting thread only: block them before any thread (ZeroMQ's I/O
  // threads included) exists, so that every thread inherits the mask.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGUSR1);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  try {
    setup_logging(args.name, args.log_level);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "dtr-worker: cannot set up logging: %s\n", e.what());
    return 1;
  }
  if (!choose_devices(args)) return 1;
  std::unique_ptr<dtr::worker::Server> server;
  try {
    server = std::make_unique<dtr::worker::Server>(server_options(args));
    set_up_devices(args);
    if (!args.endpoint_file.empty()) write_file_atomically(args.endpoint_file, server->endpoint());
  } catch (const std::exception& e) {
    spdlog::error("{}", e.what());
    return 1;
  }
  int rc = serve(*server, signals);
  server.reset();
  spdlog::info("exiting");
  if (dtr::worker::detail::GroupThread::running() > 0) {
    // A process group still forming for an ended session (it gives up at its timeout) runs
    // on a detached thread: the static destructors (spdlog's registry, ZeroMQ's) must not
    // run under it. The log is flushed; the kernel closes the rest.
    spdlog::default_logger()->flush();
    std::fflush(nullptr);
    std::_Exit(rc);
  }
  return rc;
}
