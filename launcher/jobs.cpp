// dtr-exec's jobs: SPMD ranks, and a master program against local workers.
#include "launcher/jobs.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include <fmt/format.h>

#include "dtr/error.hpp"
#include "launcher/supervisor.hpp"

extern char** environ;

namespace dtr::launcher {

namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

// How long dtr-exec waits for a SIGKILLed child before giving up on it, and for pipes that
// descendants of exited children still hold open.
constexpr milliseconds kKillWait{5000};
constexpr milliseconds kDrainWait{1000};
// The longest single poll(); deadlines are checked at least this often.
constexpr milliseconds kTick{1000};
// A signal that repeats the one dtr-exec forwarded within this long is the same request
// delivered twice, not a second one: timeout(1) sends its signal to its child and then to
// its whole process group, dtr-exec included. (Two Ctrl-C presses are further apart.)
constexpr milliseconds kSameSignal{100};

template <typename... Args>
void say(fmt::format_string<Args...> f, Args&&... args) {
  std::string line = "dtr-exec: " + fmt::format(f, std::forward<Args>(args)...) + "\n";
  write_all(STDERR_FILENO, line);
}

std::string signal_name(int sig) {
  const char* abbrev = sigabbrev_np(sig);
  return abbrev ? fmt::format("SIG{}", abbrev) : fmt::format("signal {}", sig);
}

// dtr-exec's environment minus `drop` (names), plus `add` ("NAME=value").
std::vector<std::string> make_env(const std::set<std::string>& drop,
                                  const std::vector<std::string>& add) {
  std::set<std::string> replaced = drop;
  for (const std::string& kv : add) replaced.insert(kv.substr(0, kv.find('=')));
  std::vector<std::string> env;
  for (char** e = environ; e && *e; ++e) {
    std::string kv = *e;
    if (!replaced.count(kv.substr(0, kv.find('=')))) env.push_back(std::move(kv));
  }
  env.insert(env.end(), add.begin(), add.end());
  return env;
}

// The event loop shared by both jobs: bounded polls, and a stop sequence (a signal, then
// SIGKILL after the grace period, then giving up kKillWait later).
class Loop {
 public:
  Loop(Supervisor& sup, const CommonOptions& o) : sup_(sup), grace_(o.grace) {
    if (o.timeout) job_deadline_ = Clock::now() + *o.timeout;
  }

  // Sends `sig` to `who` and starts their grace period (if not already running).
  void stop(const std::vector<std::size_t>& who, int sig) {
    for (std::size_t i : who) {
      sup_.signal(i, sig);
      if (std::find(stopping_.begin(), stopping_.end(), i) == stopping_.end())
        stopping_.push_back(i);
    }
    if (!kill_at_) kill_at_ = Clock::now() + grace_;
  }
  // SIGKILL at once (a second signal to dtr-exec while stopping).
  void kill_now() {
    kill_at_ = Clock::now();
    killed_on_request_ = true;
    check_deadlines();
  }
  // Notes a signal dtr-exec forwarded; true when `sig` repeats the last one forwarded
  // within kSameSignal (the same request delivered twice: ignore it).
  void forwarded(int sig) {
    forwarded_sig_ = sig;
    forwarded_at_ = Clock::now();
  }
  bool repeats_forwarded(int sig) const {
    return forwarded_at_ && sig == forwarded_sig_ && Clock::now() - *forwarded_at_ < kSameSignal;
  }
  bool stopping() const { return kill_at_.has_value(); }

  PollEvents step() {
    auto now = Clock::now();
    auto next = now + kTick;
    for (const auto& d : {job_deadline_, kill_at_, give_up_at_, drain_at_})
      if (d) next = std::min(next, *d);
    auto wait = std::chrono::duration_cast<milliseconds>(next - now) + milliseconds(1);
    PollEvents ev = sup_.poll(std::max(wait, milliseconds(0)));
    check_deadlines();
    return ev;
  }

  // True once, when --timeout has expired.
  bool timed_out() {
    if (!job_deadline_ || Clock::now() < *job_deadline_) return false;
    job_deadline_.reset();
    return true;
  }

  // True when the children in `who` have all exited and their output is drained (or the
  // waits for either have run out).
  bool finished(const std::vector<std::size_t>& who) {
    if (give_up_at_ && Clock::now() >= *give_up_at_) {
      for (std::size_t i : who)
        if (sup_.running(i))
          say("{} (pid {}) did not exit after SIGKILL; leaving it", sup_.spec(i).name, sup_.pid(i));
      sup_.close_output(who);
      return true;
    }
    for (std::size_t i : who)
      if (sup_.running(i)) return false;
    if (!sup_.output_open(who)) return true;
    if (!drain_at_) drain_at_ = Clock::now() + kDrainWait;
    if (Clock::now() < *drain_at_) return false;
    // Descendants of exited children still hold the pipes: they do not outlive the job.
    for (std::size_t i : who) sup_.kill_group(i);
    sup_.close_output(who);
    return true;
  }

 private:
  void check_deadlines() {
    auto now = Clock::now();
    if (kill_at_ && now >= *kill_at_ && !give_up_at_) {
      for (std::size_t i : stopping_)
        if (sup_.running(i)) {
          if (killed_on_request_)
            say("{} (pid {}) is still running; sending SIGKILL", sup_.spec(i).name, sup_.pid(i));
          else
            say("{} (pid {}) did not stop within {} ms; sending SIGKILL", sup_.spec(i).name,
                sup_.pid(i), grace_.count());
          sup_.signal(i, SIGKILL);
        }
      give_up_at_ = now + kKillWait;
    }
  }

  Supervisor& sup_;
  milliseconds grace_;
  std::optional<Clock::time_point> job_deadline_, kill_at_, give_up_at_, drain_at_;
  std::vector<std::size_t> stopping_;
  bool killed_on_request_ = false;
  int forwarded_sig_ = 0;
  std::optional<Clock::time_point> forwarded_at_;
};

std::vector<std::size_t> running_of(const Supervisor& sup, const std::vector<std::size_t>& who) {
  std::vector<std::size_t> out;
  for (std::size_t i : who)
    if (sup.running(i)) out.push_back(i);
  return out;
}

bool is_executable(const std::string& path) {
  return !path.empty() && ::access(path.c_str(), X_OK) == 0 && !std::filesystem::is_directory(path);
}

// Removes a temporary directory and its files on scope exit.
struct TempDir {
  std::string path;
  TempDir() {
    char tmpl[] = "/tmp/dtr-exec-XXXXXX";
    if (!::mkdtemp(tmpl)) throw Error(fmt::format("dtr-exec: mkdtemp: {}", std::strerror(errno)));
    path = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
};

std::string read_endpoint(const std::string& file) {
  std::ifstream in(file);
  std::string line;
  if (in && std::getline(in, line)) return line;
  return {};
}

}  // namespace

ReservedPort::ReservedPort(const std::string& addr) {
  for (bool any : {false, true}) {
    const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) break;
    const int on = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &on, sizeof on);
    sockaddr_in sa{};
    sa.sin_family = AF_INET;
    sa.sin_port = 0;
    if (any || ::inet_pton(AF_INET, addr.c_str(), &sa.sin_addr) != 1)
      sa.sin_addr.s_addr = htonl(INADDR_ANY);
    socklen_t len = sizeof sa;
    if (::bind(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa) == 0 &&
        ::getsockname(fd, reinterpret_cast<sockaddr*>(&sa), &len) == 0 && sa.sin_port != 0) {
      fd_ = fd;
      port_ = ntohs(sa.sin_port);
      return;
    }
    ::close(fd);
  }
  throw TransportError(fmt::format("dtr-exec: cannot find a free TCP port on {}", addr));
}

ReservedPort::~ReservedPort() {
  if (fd_ >= 0) ::close(fd_);
}

std::string find_worker_binary(const std::string& explicit_path) {
  if (!explicit_path.empty()) {
    if (is_executable(explicit_path)) return explicit_path;
    throw InvalidArgument(
        fmt::format("dtr-exec: --worker-bin {} is not an executable file", explicit_path));
  }
  std::error_code ec;
  auto self = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    std::string next_to = (self.parent_path() / "dtr-worker").string();
    if (is_executable(next_to)) return next_to;
    // dtr's build tree: dtr-exec in build/launcher/, dtr-worker in build/worker/.
    if (self.parent_path().filename() == "launcher") {
      std::string in_build = (self.parent_path().parent_path() / "worker" / "dtr-worker").string();
      if (is_executable(in_build)) return in_build;
    }
  }
  if (const char* env = std::getenv("DTR_WORKER_BIN"); env && is_executable(env)) return env;
  if (const char* path = std::getenv("PATH")) {
    std::stringstream ss(path);
    for (std::string dir; std::getline(ss, dir, ':');) {
      std::string candidate = (dir.empty() ? std::string(".") : dir) + "/dtr-worker";
      if (is_executable(candidate)) return candidate;
    }
  }
  throw InvalidArgument(
      "dtr-exec: cannot find dtr-worker (looked next to dtr-exec, in the build tree's worker/, "
      "at $DTR_WORKER_BIN and on PATH); pass --worker-bin PATH");
}

int run_ranks(const RankJobOptions& o) {
  const int n = o.nproc;
  // A port of dtr-exec's choosing stays reserved until the job ends (see ReservedPort).
  std::optional<ReservedPort> reserved;
  if (o.master_port <= 0) reserved.emplace(o.master_addr);
  const int port = reserved ? reserved->port() : o.master_port;
  Supervisor sup;
  std::vector<std::size_t> ranks;
  try {
    for (int r = 0; r < n; ++r) {
      ChildSpec spec;
      spec.name = fmt::format("rank {}", r);
      spec.argv = o.common.command;
      spec.env = make_env(
          {"SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", "OMPI_COMM_WORLD_RANK",
           "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE",
           "PMI_RANK", "PMI_SIZE"},
          {fmt::format("RANK={}", r), fmt::format("WORLD_SIZE={}", n),
           fmt::format("LOCAL_RANK={}", r), fmt::format("LOCAL_WORLD_SIZE={}", n),
           fmt::format("MASTER_ADDR={}", o.master_addr), fmt::format("MASTER_PORT={}", port)});
      spec.prefix = o.common.prefix ? fmt::format("[{}] ", r) : "";
      ranks.push_back(sup.start(std::move(spec)));
    }
  } catch (const InvalidArgument& e) {
    say("{}", std::string(e.what()).substr(std::strlen("dtr-exec: ")));
    return 127;  // ~Supervisor kills the ranks already started
  }

  Loop loop(sup, o.common);
  std::optional<int> result;
  while (!loop.finished(ranks)) {
    PollEvents ev = loop.step();
    for (const ReceivedSignal& s : ev.signals) {
      if (loop.repeats_forwarded(s.number)) continue;
      if (loop.stopping() && running_of(sup, ranks).size() > 0 && result) {
        say("got {} again; killing the ranks", signal_name(s.number));
        loop.kill_now();
        continue;
      }
      say("got {}; forwarding it to the ranks", signal_name(s.number));
      if (!result) result = 128 + s.number;
      loop.stop(running_of(sup, ranks), s.number);
      loop.forwarded(s.number);
    }
    for (std::size_t i : ev.exited) {
      int st = sup.wait_status(i);
      if (succeeded(st) || result) continue;
      result = exit_code_of(st);
      auto rest = running_of(sup, ranks);
      say("{} (pid {}) failed with {}{}", sup.spec(i).name, sup.pid(i), describe_wait_status(st),
          rest.empty() ? "" : "; stopping the other ranks");
      loop.stop(rest, SIGTERM);
    }
    if (loop.timed_out()) {
      say("--timeout of {} ms expired; stopping the ranks", o.common.timeout->count());
      if (!result) result = 124;
      loop.stop(running_of(sup, ranks), SIGTERM);
    }
  }
  return result.value_or(0);
}

int run_with_workers(const WorkerJobOptions& o) {
  std::string worker_bin;
  try {
    worker_bin = find_worker_binary(o.worker_bin);
  } catch (const InvalidArgument& e) {
    say("{}", std::string(e.what()).substr(std::strlen("dtr-exec: ")));
    return 127;
  }
  TempDir dir;
  Supervisor sup;
  Loop loop(sup, o.common);
  std::vector<std::size_t> workers;
  std::vector<std::string> files;
  std::set<std::size_t> reported;  // workers whose exit was already reported

  // Stops the workers (SIGTERM, SIGKILL after the grace period or at a signal to dtr-exec;
  // bounded) and returns `code`.
  auto stop_workers = [&](int code) {
    Loop stopper(sup, CommonOptions{{}, o.common.grace, std::nullopt, true});
    stopper.stop(running_of(sup, workers), SIGTERM);
    while (!stopper.finished(workers)) {
      PollEvents ev = stopper.step();
      for (const ReceivedSignal& s : ev.signals)
        if (!loop.repeats_forwarded(s.number)) {
          stopper.kill_now();
          break;
        }
    }
    for (std::size_t i : workers)
      if (!sup.running(i) && !succeeded(sup.wait_status(i)) && reported.insert(i).second)
        say("{} (pid {}) exited with {}", sup.spec(i).name, sup.pid(i),
            describe_wait_status(sup.wait_status(i)));
    return code;
  };

  try {
    for (int w = 0; w < o.workers; ++w) {
      files.push_back(fmt::format("{}/worker{}.endpoint", dir.path, w));
      ChildSpec spec;
      spec.name = fmt::format("worker {}", w);
      spec.argv = {worker_bin,   "--listen",    "tcp://127.0.0.1:*", "--endpoint-file",
                   files.back(), "--log-level", o.worker_log_level};
      spec.env = make_env({}, {});
      spec.prefix = o.common.prefix ? fmt::format("[w{}] ", w) : "";
      spec.parent_death_signal = SIGKILL;
      workers.push_back(sup.start(std::move(spec)));
    }
  } catch (const InvalidArgument& e) {
    say("{}", std::string(e.what()).substr(std::strlen("dtr-exec: ")));
    return stop_workers(1);
  }

  // Wait (bounded) for every worker's endpoint file.
  std::vector<std::string> endpoints(workers.size());
  auto start_deadline = Clock::now() + o.worker_start_timeout;
  for (;;) {
    bool all = true;
    for (std::size_t w = 0; w < workers.size(); ++w) {
      if (endpoints[w].empty()) endpoints[w] = read_endpoint(files[w]);
      all = all && !endpoints[w].empty();
    }
    if (all) break;
    PollEvents ev = sup.poll(milliseconds(10));
    if (!ev.signals.empty()) {
      say("got {} while starting the workers; stopping them",
          signal_name(ev.signals.front().number));
      return stop_workers(128 + ev.signals.front().number);
    }
    for (std::size_t i : ev.exited) {
      say("{} (pid {}) exited with {} before reporting its endpoint", sup.spec(i).name, sup.pid(i),
          describe_wait_status(sup.wait_status(i)));
      return stop_workers(1);
    }
    if (Clock::now() >= start_deadline) {
      say("the workers did not report their endpoints within {} ms",
          o.worker_start_timeout.count());
      return stop_workers(1);
    }
  }
  std::string joined;
  for (const std::string& e : endpoints) joined += (joined.empty() ? "" : ",") + e;

  ChildSpec spec;
  spec.name = "the program";
  spec.argv = o.common.command;
  spec.env = make_env({"DTR_LISTEN", "DTR_NUM_WORKERS"}, {"DTR_WORKERS=" + joined});
  spec.capture_output = false;
  spec.own_process_group = false;
  std::size_t program;
  try {
    program = sup.start(std::move(spec));
  } catch (const InvalidArgument& e) {
    say("{}", std::string(e.what()).substr(std::strlen("dtr-exec: ")));
    return stop_workers(127);
  }

  std::optional<int> result;
  while (!loop.finished({program})) {
    PollEvents ev = loop.step();
    for (const ReceivedSignal& s : ev.signals) {
      if (loop.repeats_forwarded(s.number)) continue;
      if (loop.stopping() && result) {
        say("got {} again; killing the program", signal_name(s.number));
        loop.kill_now();
        continue;
      }
      // The terminal's Ctrl-C reached the program already (same process group); it decides.
      if (s.from_terminal) continue;
      say("got {}; forwarding it to the program", signal_name(s.number));
      if (!result) result = 128 + s.number;
      loop.stop({program}, s.number);
      loop.forwarded(s.number);
    }
    for (std::size_t i : ev.exited)
      if (i != program && reported.insert(i).second)
        say("{} (pid {}) exited with {} while the program was running", sup.spec(i).name,
            sup.pid(i), describe_wait_status(sup.wait_status(i)));
    if (loop.timed_out()) {
      say("--timeout of {} ms expired; stopping the program", o.common.timeout->count());
      if (!result) result = 124;
      loop.stop({program}, SIGTERM);
    }
  }
  int code = result.value_or(sup.running(program) ? 1 : exit_code_of(sup.wait_status(program)));
  if (!sup.running(program) && !succeeded(sup.wait_status(program)) && !result)
    say("the program (pid {}) failed with {}", sup.pid(program),
        describe_wait_status(sup.wait_status(program)));
  return stop_workers(code);
}

}  // namespace dtr::launcher
