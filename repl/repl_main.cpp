// dtr-repl: the interactive REPL. Starts local dtr-worker daemons (or attaches to running
// ones), connects the master session to them, then reads the REPL language from the
// terminal (readline: editing, history, completion), a script file, or piped stdin.
// Exit status: see kFooter.
//
// Thread safety: single-threaded (the master session runs its own threads internally).
#include <signal.h>
#include <unistd.h>

#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include <fstream>
#include <iostream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "dtr/config.hpp"
#include "dtr/distributed.hpp"
#include "repl/completion.hpp"
#include "repl/interpreter.hpp"
#include "repl/line_reader.hpp"
#include "repl/local_workers.hpp"
#include "tools/cli_checks.hpp"

namespace {

constexpr const char* kDescription =
    R"(dtr-repl: explore tensors held by dtr workers at a Python-like prompt.

By default it starts --workers local dtr-worker daemons on loopback and stops them on
exit; with --connect it attaches to daemons started with `dtr-worker --listen`.
With FILE, or when stdin is not a terminal, it runs the same language as a script,
without prompts. Type `help` at the prompt for the language.
)";

constexpr const char* kFooter = R"(
Exit status:
  0  the input ran without errors (interactive sessions: always, unless exit(n))
  1  a script statement failed (the script goes on after an error unless
     --stop-on-error); exit(n) in the input exits with n
  2  the workers could not be started or reached, or FILE could not be read

Environment:
  DTR_HISTORY     history file (default ~/.dtr_history)
  DTR_WORKER_BIN  the dtr-worker to start (default: next to dtr-repl)

Examples:
  dtr-repl
  dtr-repl --workers 4
  dtr-repl --connect tcp://gpu-a:7000,tcp://gpu-b:7000
  dtr-repl script.dtr
  echo 'print(randn(3, 3).sum())' | dtr-repl)";

volatile sig_atomic_t g_interrupts = 0;

// Ctrl-C while a statement runs: the master may be waiting on a worker and cannot be
// interrupted; a second Ctrl-C ends the REPL (the local workers get SIGKILL by
// PR_SET_PDEATHSIG).
void on_sigint_while_running(int) {
  if (g_interrupts == 0) {
    g_interrupts = 1;
    const char msg[] = "\n(the statement is waiting for the workers; press Ctrl-C again to quit)\n";
    ssize_t ignored = write(STDERR_FILENO, msg, sizeof msg - 1);
    (void)ignored;
    return;
  }
  signal(SIGINT, SIG_DFL);
  raise(SIGINT);
}

int run_interactive(dtr::repl::Interpreter& interp, const std::string& banner) {
  using dtr::repl::Interpreter;
  struct sigaction sa {};
  sa.sa_handler = on_sigint_while_running;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  sigaction(SIGINT, &sa, nullptr);
  std::cout << banner << std::flush;
  dtr::repl::LineReader reader(
      dtr::repl::default_history_file(),
      [&](std::string_view word) { return dtr::repl::complete(interp.evaluator(), word); }, ">>> ");
  Interpreter::Status status = Interpreter::Status::Ready;
  while (!interp.quit_requested()) {
    std::optional<std::string> line =
        reader.read(status == Interpreter::Status::More ? "... " : ">>> ");
    if (!line) {
      std::cout << "\n";
      break;
    }
    if (reader.interrupted()) interp.cancel();  // Ctrl-C dropped the pending block
    reader.remember(*line);
    g_interrupts = 0;
    status = interp.feed(*line);
    std::cout.flush();
  }
  interp.finish();
  return interp.quit_requested() ? interp.exit_code() : 0;
}

int run_script(dtr::repl::Interpreter& interp, std::istream& in) {
  for (std::string line; !interp.quit_requested() && std::getline(in, line);) interp.feed(line);
  interp.finish();
  std::cout.flush();
  if (interp.quit_requested()) return interp.exit_code();
  return interp.failures() > 0 ? 1 : 0;
}

// The command line.
struct Cli {
  std::string file, worker_bin, log_level = "warn";
  int workers = 2;
  std::vector<std::string> connect;
  bool stop_on_error = false;
  double connect_timeout_s = 20, sync_timeout_s = 120;
};

void add_options(CLI::App& app, Cli& cli) {
  app.add_option("FILE", cli.file, "Run this script (the REPL language) instead of a prompt");
  auto* workers_opt =
      app.add_option("-w,--workers", cli.workers, "Start this many local dtr-worker daemons")
          ->check(CLI::Range(1, 256))
          ->capture_default_str();
  app.add_option("-c,--connect", cli.connect,
                 "Attach to running daemons instead (node k is the k-th endpoint), e.g. "
                 "tcp://a:7000,tcp://b:7000")
      ->expected(1)  // one list per --connect: a FILE after it is the script, not an endpoint
      ->allow_extra_args(false)
      ->type_name("ENDPOINTS")
      ->excludes(workers_opt);
  app.add_flag("--stop-on-error", cli.stop_on_error,
               "Scripts: stop at the first failed statement (default: report it and go on)");
  app.add_option("--worker-bin", cli.worker_bin,
                 "The dtr-worker to start (default: $DTR_WORKER_BIN, or next to dtr-repl)")
      ->type_name("PATH");
  app.add_option("--worker-log-level", cli.log_level, "Log level of the local workers")
      ->check(CLI::IsMember({"trace", "debug", "info", "warn", "error"}))
      ->capture_default_str();
  app.add_option("--connect-timeout", cli.connect_timeout_s, "Seconds to wait for the workers")
      ->check(dtr::cli::kPositive)
      ->capture_default_str();
  app.add_option("--sync-timeout", cli.sync_timeout_s,
                 "Seconds a sync point (printing a tensor, synchronize(), :nodes) waits for a "
                 "worker before it reports a TimeoutError (a worker that died is noticed so)")
      ->check(dtr::cli::kPositive)
      ->capture_default_str();
}

// The endpoints of the --connect lists: comma-separated, each endpoint trimmed.
std::vector<std::string> connect_endpoints(const std::vector<std::string>& lists) {
  std::vector<std::string> out;
  for (const std::string& list : lists) {
    std::stringstream ss(list);
    for (std::string e; std::getline(ss, e, ',');) {
      e.erase(0, e.find_first_not_of(" \t"));
      e.erase(e.find_last_not_of(" \t") + 1);
      if (!e.empty()) out.push_back(e);
    }
  }
  return out;
}

// Starts the local workers (unless --connect names running ones) and the master session
// with them; throws what either throws. `local` keeps the local workers.
dtr::MasterOptions start_session(const Cli& cli, std::unique_ptr<dtr::repl::LocalWorkers>& local) {
  dtr::MasterOptions options;
  options.connect_timeout =
      std::chrono::milliseconds(static_cast<int64_t>(cli.connect_timeout_s * 1000));
  options.sync_timeout = std::chrono::milliseconds(static_cast<int64_t>(cli.sync_timeout_s * 1000));
  if (!cli.connect.empty()) {
    options.workers = connect_endpoints(cli.connect);
  } else {
    local = std::make_unique<dtr::repl::LocalWorkers>(
        cli.workers, cli.worker_bin.empty() ? dtr::repl::find_worker_binary() : cli.worker_bin,
        cli.log_level, options.connect_timeout);
    options.workers = local->endpoints();
  }
  dtr::init_master_worker(options);
  return options;
}

std::string banner(size_t workers, bool local) {
  std::string where =
      fmt::format("{} {} worker{}", workers, local ? "local" : "attached", workers == 1 ? "" : "s");
  return fmt::format(
      "dtr-repl {} on {} (nodes 0-{}). Type help for help, :nodes for the nodes, Ctrl-D to "
      "quit.\n",
      DTR_VERSION_STRING, where, workers - 1);
}

// Runs the prompt or the script (FILE, else stdin) in the running session; the exit status.
int run(const Cli& cli, bool interactive, std::istream& script, const std::string& greeting) {
  dtr::repl::InterpreterOptions io;
  io.interactive = interactive;
  io.source = cli.file.empty() ? "<stdin>" : cli.file;
  io.stop_on_error = cli.stop_on_error;
  dtr::repl::Interpreter interp(std::cout, std::cerr, io);
  int status = interactive ? run_interactive(interp, greeting) : run_script(interp, script);
  interp.evaluator().clear_variables();
  return status;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app(kDescription, "dtr-repl");
  app.footer(kFooter);
  Cli cli;
  add_options(app, cli);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }

  std::ifstream script;
  if (!cli.file.empty()) {
    script.open(cli.file);
    if (!script) {
      std::cerr << "dtr-repl: cannot read " << cli.file << "\n";
      return 2;
    }
  }
  const bool interactive = cli.file.empty() && isatty(STDIN_FILENO);

  std::unique_ptr<dtr::repl::LocalWorkers> local;
  dtr::MasterOptions options;
  try {
    options = start_session(cli, local);
  } catch (const std::exception& e) {
    std::cerr << "dtr-repl: " << e.what() << "\n";
    return 2;
  }

  const std::string greeting =
      interactive ? banner(options.workers.size(), local != nullptr) : std::string();
  int status = run(cli, interactive, cli.file.empty() ? std::cin : script, greeting);
  dtr::shutdown_master_worker();
  if (local) local->stop();
  return status;
}
