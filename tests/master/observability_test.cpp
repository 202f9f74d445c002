// Observability against real workers (docs/observability.md): the trace of a two-node
// session with streams, a cross-node wait, a copy and a collective, parsed and checked
// (valid JSON in Chrome's trace event format, every command on its track, in order, the
// arrows connected); DTR_TRACE; the summary script; the metrics endpoint scraped and
// parsed, and node_metrics(); SIGUSR1's flight recorder dump.
#include <doctest/doctest.h>
#include <signal.h>
#include <unistd.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <thread>

#include "dtr/collectives.hpp"
#include "dtr/graph.hpp"
#include "dtr/observability.hpp"
#include "dtr/stream.hpp"
#include "master/cluster.hpp"
#include "support/json.hpp"

namespace {

using namespace dtr;
using namespace dtr::test;
using Type = Json::Type;

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

std::string temp_path(const std::string& name) {
  return (std::filesystem::temp_directory_path() /
          (name + "-" + std::to_string(getpid()) + ".json"))
      .string();
}

struct Slice {
  std::string name, cat;
  double ts = 0, dur = 0;
  int64_t pid = 0, tid = 0;
  const Json* args = nullptr;
};
struct FlowEnd {
  std::string ph;
  int64_t id = 0, pid = 0, tid = 0;
  double ts = 0;
};

// Checks every event against Chrome's trace event format and sorts them out.
struct TraceCheck {
  std::vector<Slice> slices;
  std::vector<FlowEnd> flows;
  std::map<int64_t, std::string> processes;
  std::map<std::pair<int64_t, int64_t>, std::string> tracks;

  explicit TraceCheck(const Json& doc) {
    REQUIRE(doc.is(Type::Object));
    const Json* events = doc.get("traceEvents");
    REQUIRE(events);
    REQUIRE(events->is(Type::Array));
    for (const Json& e : events->items) add(e);
  }
  static int64_t integer(const Json& e, const char* key) {
    const Json* v = e.get(key);
    REQUIRE_MESSAGE(v, key);
    REQUIRE(v->is(Type::Number));
    return static_cast<int64_t>(v->number);
  }
  static const std::string& string(const Json& e, const char* key) {
    const Json* v = e.get(key);
    REQUIRE_MESSAGE(v, key);
    REQUIRE(v->is(Type::String));
    return v->text;
  }
  void add(const Json& e) {
    REQUIRE(e.is(Type::Object));
    const std::string& ph = string(e, "ph");
    const int64_t pid = integer(e, "pid");
    if (ph == "M") {
      const std::string& name = string(e, "name");
      const Json* args = e.get("args");
      REQUIRE(args);
      if (name == "process_name") processes[pid] = string(*args, "name");
      if (name == "thread_name") tracks[{pid, integer(e, "tid")}] = string(*args, "name");
      CHECK((name == "process_name" || name == "thread_name" || name == "process_sort_index" ||
             name == "thread_sort_index"));
      return;
    }
    if (ph == "X") {
      Slice s{string(e, "name"), string(e, "cat"), e.get("ts")->number, e.get("dur")->number, pid,
              integer(e, "tid"), e.get("args")};
      CHECK(s.ts >= 0);
      CHECK(s.dur >= 0);
      REQUIRE(s.args);
      CHECK(s.args->is(Type::Object));
      slices.push_back(s);
      return;
    }
    REQUIRE_MESSAGE((ph == "s" || ph == "f"), ph);
    CHECK(string(e, "cat") == "flow");
    if (ph == "f") CHECK(string(e, "bp") == "e");
    flows.push_back({ph, integer(e, "id"), pid, integer(e, "tid"), e.get("ts")->number});
  }
  // The slices of one track, in time order.
  std::vector<Slice> track(int64_t pid, int64_t tid) const {
    std::vector<Slice> out;
    for (const Slice& s : slices)
      if (s.pid == pid && s.tid == tid) out.push_back(s);
    std::sort(out.begin(), out.end(), [](const Slice& a, const Slice& b) { return a.ts < b.ts; });
    return out;
  }
  std::vector<std::string> names(int64_t pid, int64_t tid) const {
    std::vector<std::string> out;
    for (const Slice& s : track(pid, tid)) out.push_back(s.name);
    return out;
  }
  // A slice of the track encloses `ts`.
  bool inside_slice(int64_t pid, int64_t tid, double ts) const {
    for (const Slice& s : slices)
      if (s.pid == pid && s.tid == tid && s.ts <= ts + 1e-6 && ts <= s.ts + s.dur + 1e-6)
        return true;
    return false;
  }
};

// `want` appears in `got` in this order (other names between).
bool in_order(const std::vector<std::string>& got, const std::vector<std::string>& want) {
  size_t i = 0;
  for (const std::string& g : got)
    if (i < want.size() && g == want[i]) ++i;
  return i == want.size();
}

std::string joined(const std::vector<std::string>& v) {
  std::string out;
  for (const auto& s : v) out += s + " ";
  return out;
}

// The arrows: a copy and a notification, from node 0 to node 1, each end on a slice.
void check_arrows(const TraceCheck& t) {
  std::map<int64_t, std::vector<FlowEnd>> by_id;
  for (const FlowEnd& f : t.flows) by_id[f.id].push_back(f);
  CHECK(by_id.size() >= 2);
  for (const auto& [id_, ends] : by_id) {
    const int64_t id = id_;  // captured (clang 14: not a binding)
    CAPTURE(id);
    REQUIRE(ends.size() == 2);
    const FlowEnd& s = ends[0].ph == "s" ? ends[0] : ends[1];
    const FlowEnd& f = ends[0].ph == "s" ? ends[1] : ends[0];
    CHECK(s.ph == "s");
    CHECK(f.ph == "f");
    CHECK(s.pid == 1);
    CHECK(f.pid == 2);
    CHECK(t.inside_slice(s.pid, s.tid, s.ts));
    CHECK(t.inside_slice(f.pid, f.tid, f.ts));
    CHECK(f.ts >= s.ts - 1000);  // one host: the clocks agree to far better than 1 ms
  }
}

// scripts/trace_summary.py reads the trace (when python3 is there).
void check_summary(const std::string& path) {
  std::string cmd =
      std::string("python3 ") + DTR_SOURCE_DIR + "/scripts/trace_summary.py " + path + " 2>&1";
  if (FILE* p = popen(cmd.c_str(), "r")) {
    std::string out;
    char buf[512];
    while (size_t n = fread(buf, 1, sizeof buf, p)) out.append(buf, n);
    int rc = pclose(p);
    INFO(out);
    if (WEXITSTATUS(rc) != 127) {  // python3 is there
      CHECK(rc == 0);
      CHECK(out.find("top ops by time") != std::string::npos);
      CHECK(out.find("matmul") != std::string::npos);
      CHECK(out.find("idle") != std::string::npos);
      CHECK(out.find("waits") != std::string::npos);
    }
  }
}

TEST_CASE("trace of a two-node session: streams, a cross-node wait, a copy, a collective") {
  Cluster cluster(2, cpu_only());
  const std::string path = temp_path("dtr-trace");
  start_trace();
  CHECK(is_tracing());
  CHECK_THROWS_AS(start_trace(), InvalidArgument);
  DistributedTensor x = with_node(0, [] { return dtr::ones({4, 4}); });
  Stream side = Stream::create(0);
  Event ready;
  DistributedTensor y;
  {
    stream_guard on(side);
    y = x.matmul(x);  // on node 0's second stream
    ready.record();
  }
  current_stream(1).wait(ready);  // node 1's default stream waits for node 0's event
  DistributedTensor z = y.to(1);  // a copy, node 0 to node 1
  std::vector<DistributedTensor> both{x * 1, with_node(1, [] { return dtr::ones({4, 4}); })};
  all_reduce(both);
  float total = (z + both[1]).sum().item<float>();
  CHECK(total == 16 * 4 + 16 * 2);
  TraceSummary summary = stop_trace(path);
  CHECK_FALSE(is_tracing());
  CHECK(summary.lost_nodes.empty());
  CHECK(summary.dropped == 0);
  CHECK(summary.slices > 20);
  CHECK_THROWS_AS(stop_trace(path), InvalidArgument);

  Json doc = parse_json(read_file(path));  // throws on invalid JSON
  TraceCheck t(doc);
  CHECK(t.processes[0].rfind("master (", 0) == 0);
  CHECK(t.processes[1].rfind("node 0 (", 0) == 0);
  CHECK(t.processes[2].rfind("node 1 (", 0) == 0);
  const int64_t side_tid = side.id();
  CHECK(t.tracks[{1, 0}] == "stream 0 (default)");
  CHECK(t.tracks[{1, side_tid}] == "stream " + std::to_string(side_tid));
  // Every command on its track, in order.
  std::vector<std::string> n0 = t.names(1, 0), n0_side = t.names(1, side_tid), n1 = t.names(2, 0);
  INFO("node 0 stream 0: ", joined(n0));
  INFO("node 0 side stream: ", joined(n0_side));
  INFO("node 1 stream 0: ", joined(n1));
  CHECK(in_order(n0, {"full", "send_to_node", "mul", "all_reduce"}));
  CHECK(in_order(n0_side, {"matmul", "record_event"}));
  CHECK(in_order(n1, {"wait_event", "recv_from_node", "full", "all_reduce", "add", "sum", "get"}));
  // One command at a time on a track: a slice starts after the previous one ended, or
  // lies inside it (an event's notification, inside its record).
  for (const auto& [key, name_] : t.tracks) {
    const auto& name = name_;  // captured (clang 14: not a binding)
    std::vector<Slice> tr = t.track(key.first, key.second);
    double open_end = -1;
    for (size_t i = 0; i < tr.size(); ++i) {
      const double end = tr[i].ts + tr[i].dur;
      const bool after = tr[i].ts + 0.002 >= open_end, inside = end <= open_end + 0.002;
      CHECK_MESSAGE((after || inside), name, ": ", tr[i].name, " overlaps the slice before");
      if (after) open_end = end;
    }
  }
  // The slices say what they did.
  for (const Slice& s : t.slices) {
    if (s.pid == 1 && s.name == "matmul") {
      const Json* tensors = s.args->get("tensors");
      REQUIRE(tensors);
      REQUIRE(tensors->items.size() == 3);
      CHECK(tensors->items[2].text.find("out %") == 0);
      CHECK(tensors->items[2].text.find("float32[4,4]") != std::string::npos);
      CHECK(s.args->get("bytes")->number == 64);
      CHECK(s.args->get("status")->text == "ok");
    }
  }
  check_arrows(t);
  // The master's calls and sync points, on its own process.
  bool call = false, sync_point = false;
  for (const Slice& s : t.slices) {
    if (s.pid != 0) continue;
    call = call || (s.cat == "call" && s.name == "matmul");
    sync_point = sync_point || (s.cat == "sync point" && s.name == "get");
  }
  CHECK(call);
  CHECK(sync_point);

  check_summary(path);
  if (!std::getenv("DTR_TEST_KEEP_TRACE")) std::remove(path.c_str());  // keep it to look at
}

TEST_CASE("DTR_TRACE: the session's trace is written at shutdown") {
  const std::string path = temp_path("dtr-env-trace");
  std::remove(path.c_str());
  {
    ScopedEnv env("DTR_TRACE", path);
    Cluster cluster(1, cpu_only());
    CHECK(is_tracing());
    CHECK(dtr::arange(10).sum().item<int64_t>() == 45);
  }
  TraceCheck t(parse_json(read_file(path)));
  std::vector<std::string> n0 = t.names(1, 0);
  CHECK(in_order(n0, {"arange", "sum", "get"}));
  std::remove(path.c_str());
}

TEST_CASE("trace of a captured graph: each replay is a slice on its stream, with its number") {
  const std::string path = temp_path("dtr-graph-trace");
  Cluster cluster(1, cpu_only());
  auto x = dtr::zeros({8});
  dtr::Graph g = dtr::capture([&] { x.add_(1); });
  start_trace();
  for (int i = 0; i < 3; ++i) g.replay();
  CHECK(x.sum().item<float>() == 24.0f);
  stop_trace(path);
  const Json doc = parse_json(read_file(path));  // the slices point into it
  TraceCheck t(doc);
  std::vector<double> replays;
  for (const Slice& s : t.track(1, 0))
    if (s.name == "replay_graph") {
      REQUIRE(s.args->get("replay"));
      replays.push_back(s.args->get("replay")->number);
    }
  CHECK(replays == std::vector<double>{1, 2, 3});
  std::remove(path.c_str());
}

// An HTTP GET of `path` on 127.0.0.1:`port`: the whole response.
std::string http_get(int port, const std::string& path) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  REQUIRE(fd >= 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
  timeval tv{10, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  std::string out;
  for (int attempt = 0; attempt < 100; ++attempt) {  // the worker may still be starting
    if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  std::string req = "GET " + path + " HTTP/1.1\r\nHost: localhost\r\n\r\n";
  send(fd, req.data(), req.size(), MSG_NOSIGNAL);
  char buf[4096];
  while (true) {
    ssize_t n = recv(fd, buf, sizeof buf, 0);
    if (n <= 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  close(fd);
  return out;
}

// Prometheus text: "name{labels}" -> value; comment lines checked for their form.
std::map<std::string, double> parse_prometheus(const std::string& body) {
  std::map<std::string, double> out;
  std::istringstream in(body);
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    if (line[0] == '#') {
      CHECK((line.rfind("# HELP dtr_worker_", 0) == 0 || line.rfind("# TYPE dtr_worker_", 0) == 0));
      continue;
    }
    size_t space = line.rfind(' ');
    REQUIRE(space != std::string::npos);
    std::string key = line.substr(0, space);
    CHECK(key.rfind("dtr_worker_", 0) == 0);
    CHECK(std::count(key.begin(), key.end(), '{') == 1);
    CHECK(key.back() == '}');
    CHECK_MESSAGE(out.count(key) == 0, "a series twice: ", key);
    out[key] = std::stod(line.substr(space + 1));
  }
  return out;
}

// The value of the metric whose key starts with `name{` and contains `label` (e.g.
// kind="op"); -1 when absent.
double metric(const std::map<std::string, double>& m, const std::string& name,
              const std::string& label = "") {
  for (const auto& [k, v] : m)
    if (k.rfind(name + "{", 0) == 0 && k.find(label) != std::string::npos) return v;
  return -1;
}

TEST_CASE("metrics: the endpoint scraped and parsed, and node_metrics says the same") {
  const int port = free_port();
  WorkerProcess worker(
      {"--devices", "none", "--metrics-port", std::to_string(port), "--name", "metrics-test"});
  std::map<std::string, double> idle = [&] {
    std::string r = http_get(port, "/metrics");
    REQUIRE(r.rfind("HTTP/1.0 200 OK", 0) == 0);
    return parse_prometheus(r.substr(r.find("\r\n\r\n") + 4));
  }();
  CHECK(metric(idle, "dtr_worker_sessions_total") == 0);
  CHECK(metric(idle, "dtr_worker_session_active") == 0);
  CHECK(metric(idle, "dtr_worker_master_heartbeat_age_seconds") == -1);
  CHECK(metric(idle, "dtr_worker_commands_total", "worker=\"metrics-test\"") >= 0);

  MasterOptions o = test_options();
  o.workers = {worker.endpoint()};
  init_master_worker(o);
  SessionGuard guard;
  DistributedTensor x = dtr::ones({256});
  for (int i = 0; i < 10; ++i) x.add_(1);
  DistributedTensor keep = dist_send(dtr::local::ones({3}));
  synchronize();
  std::string r = http_get(port, "/metrics");
  INFO(r);
  std::map<std::string, double> m = parse_prometheus(r.substr(r.find("\r\n\r\n") + 4));
  CHECK(metric(m, "dtr_worker_commands_total", "kind=\"op\"") >= 11);
  CHECK(metric(m, "dtr_worker_commands_total", "kind=\"sync\"") >= 1);
  CHECK(metric(m, "dtr_worker_bytes_total", "kind=\"put\"") == 12);
  CHECK(metric(m, "dtr_worker_sessions_total") == 1);
  CHECK(metric(m, "dtr_worker_session_active") == 1);
  CHECK(metric(m, "dtr_worker_live_tensors", "device=\"cpu\"") == 2);
  CHECK(metric(m, "dtr_worker_bytes_in_use", "device=\"cpu\"") >= 256 * 4 + 12);
  CHECK(metric(m, "dtr_worker_stream_queue_depth", "stream=\"0\"") == 0);
  double age = metric(m, "dtr_worker_master_heartbeat_age_seconds");
  CHECK(age >= 0);
  CHECK(age < 5);
  CHECK(metric(m, "dtr_worker_flight_records_total") >= 13);

  NodeMetrics nm = node_metrics(0);
  CHECK(nm.session_active);
  CHECK(nm.sessions == 1);
  REQUIRE(!nm.devices.empty());
  CHECK(nm.devices[0].device == -1);
  CHECK(nm.devices[0].live_tensors == 2);
  bool ops = false;
  for (const auto& [kind, n] : nm.commands) ops = ops || (kind == "op" && n >= 11);
  CHECK(ops);
  CHECK(nm.master_heartbeat_age_s >= 0);
  CHECK(nm.threads > 0);
}

TEST_CASE("flight recorder: SIGUSR1 dumps it to the worker log, and the master can ask for it") {
  const std::string log = temp_path("dtr-worker-log");
  WorkerProcess worker({"--devices", "none"}, log);
  MasterOptions o = test_options();
  o.workers = {worker.endpoint()};
  init_master_worker(o);
  SessionGuard guard;
  DistributedTensor x = dtr::arange(6).reshape({2, 3});
  DistributedTensor y = x * 2;
  synchronize();
  std::string mine = flight_recorder(0);
  INFO(mine);
  CHECK(mine.find("arange out %") != std::string::npos);
  CHECK(mine.find("mul out %") != std::string::npos);
  CHECK(mine.find(": done") != std::string::npos);
  REQUIRE(kill(worker.pid(), SIGUSR1) == 0);
  bool logged = false;
  for (int i = 0; i < 200 && !logged; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(25));
    std::string text = read_file(log);
    logged = text.find("flight recorder (SIGUSR1") != std::string::npos &&
             text.find("mul out %") != std::string::npos;
  }
  CHECK(logged);
  std::remove(log.c_str());
}

}  // namespace
