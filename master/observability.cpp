// Observability on the master (dtr/observability.hpp, docs/observability.md): clock
// offsets, the timeline's start and stop, flight reports in errors, node metrics.
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>

#include "common/flight_text.hpp"
#include "common/trace_clock.hpp"
#include "master/capture.hpp"
#include "master/session.hpp"

namespace dtr {

using detail::MasterSession;
namespace cmd = protocol::cmd;
using std::chrono::milliseconds;

namespace detail {

namespace {

// A flight dump request waits at most this long per node, and a report at most
// kReportBudget in all: errors are not held up by a node that does not answer.
constexpr milliseconds kDumpTimeout{1000};
constexpr milliseconds kReportBudget{2000};
constexpr int kClockSamples = 4;

bool is_collective(std::string_view op) {
  return op == "all_reduce" || op == "broadcast" || op == "all_gather" || op == "reduce_scatter";
}

std::string ago(MasterSession::Clock::time_point t) {
  auto ms = std::chrono::duration_cast<milliseconds>(MasterSession::Clock::now() - t).count();
  return ms < 1000 ? fmt::format("{} ms", ms) : fmt::format("{:.1f} s", ms / 1000.0);
}

// Marks the calling thread as making a flight report: a node lost meanwhile is reported
// without one (no report within a report).
struct Reporting {
  static bool& active() {
    static thread_local bool on = false;
    return on;
  }
  Reporting() { active() = true; }
  ~Reporting() { active() = false; }
};

}  // namespace

void MasterSession::measure_clocks() {
  for (auto& node : nodes_) {
    int64_t best_rtt = -1, offset = 0;
    for (int i = 0; i < kClockSamples && !node->lost.load(); ++i) {
      try {
        const int64_t t0 = trace::steady_ns();
        ReplyMessage m = request(node->index, cmd::ClockSync{}, kDumpTimeout);
        const int64_t t1 = trace::steady_ns();
        if (best_rtt < 0 || t1 - t0 < best_rtt) {
          best_rtt = t1 - t0;
          offset = expect_reply<protocol::reply::Clock>(m, node->index, "clock_sync").time_ns -
                   (t0 + (t1 - t0) / 2);
        }
      } catch (const std::exception&) {
        break;  // the node's offset stays unknown; its slices keep their own clock
      }
    }
    std::lock_guard lock(clock_mu_);
    if (best_rtt < 0) continue;
    node->clock_offset_ns = offset;
    node->clock_error_ns = best_rtt / 2;
  }
}

std::pair<int64_t, int64_t> MasterSession::clock_offset(int node) {
  std::lock_guard lock(clock_mu_);
  return {nodes_[node]->clock_offset_ns, nodes_[node]->clock_error_ns};
}

void MasterSession::note_flight(int node, protocol::FlightSnapshot d) {
  Node& n = *nodes_[node];
  std::lock_guard lock(n.flight_mu);
  n.reported = std::move(d);
  n.reported_at = Clock::now();
}

std::string MasterSession::flight_report() {
  Reporting reporting;
  std::string out = "last commands each node reported (flight recorders):";
  const Clock::time_point deadline = Clock::now() + kReportBudget;
  // Inside a capture on this thread a request is refused (a sync point): the dumps the
  // nodes sent unasked are all there is.
  const bool ask = !(capturing() && Capture::active(*this));
  for (auto& node : nodes_) {
    Node& n = *node;
    if (ask && !n.lost.load()) {
      auto left = std::chrono::duration_cast<milliseconds>(deadline - Clock::now());
      try {
        ReplyMessage m =
            request(n.index, cmd::FlightDump{}, std::clamp(left, milliseconds(100), kDumpTimeout));
        const auto& dump = expect_reply<protocol::reply::Flight>(m, n.index, "flight_dump");
        out += fmt::format("\n  node {} ({}), now:\n{}", n.index, n.endpoint,
                           common::describe(dump.flight, 16, 4, "    "));
        continue;
      } catch (const std::exception& e) {
        out += fmt::format("\n  node {} ({}): no answer ({})", n.index, n.endpoint, e.what());
      }
    }
    std::lock_guard lock(n.flight_mu);
    if (n.reported)
      out += fmt::format("\n  node {} ({}){}, {} before ({}):\n{}", n.index, n.endpoint,
                         n.lost.load() ? " (lost)" : "", ago(n.reported_at), n.reported->reason,
                         common::describe(*n.reported, 16, 4, "    "));
    else if (n.lost.load())
      out += fmt::format("\n  node {} ({}): lost; it reported nothing", n.index, n.endpoint);
  }
  return out;
}

void MasterSession::throw_lost(int node) {
  Node& n = *nodes_[node];
  if (Reporting::active()) throw WorkerLost(n.lost_reason);
  std::optional<std::string> report;
  {
    std::lock_guard lock(n.flight_mu);
    report = n.lost_report;
  }
  if (!report) {
    // Made once per lost node (two threads may both make it; the first one is kept).
    std::string made = flight_report();
    std::lock_guard lock(n.flight_mu);
    if (!n.lost_report) n.lost_report = std::move(made);
    report = n.lost_report;
  }
  throw WorkerLost(fmt::format("{}\n{}", n.lost_reason, *report));
}

RemoteError MasterSession::explain(int node, const protocol::RemoteFailure& f) {
  RemoteError e = remote_error(node, f);
  const std::string& op = is_collective(f.cause_op) ? f.cause_op : f.op;
  if (!is_collective(op)) return e;
  // Did the node say the collective failed waiting for its members?
  bool stuck = false;
  {
    Node& n = *nodes_[node];
    std::lock_guard lock(n.flight_mu);
    stuck = n.reported && n.reported->reason.rfind(op, 0) == 0;
  }
  if (!stuck) return e;
  return RemoteError(fmt::format("{}\n{}", e.what(), flight_report()), e.failure_ptr());
}

void MasterSession::start_trace() {
  std::lock_guard lock(trace_mu_);
  if (trace_.on())
    throw InvalidArgument("start_trace: a trace is being recorded; stop_trace(path) ends it");
  measure_clocks();  // fresh offsets for this trace
  for (auto& node : nodes_)
    if (!node->lost.load())
      request(node->index, cmd::Trace{.action = protocol::TraceAction::Start});
  trace_.start();
}

namespace {

// Node `k`'s slices, collected part by part (Trace's Stop, then Collect until done).
void collect_node(MasterSession& s, int k, NodeTrace& n) {
  ReplyMessage m = s.request(k, cmd::Trace{.action = protocol::TraceAction::Stop});
  while (true) {
    protocol::TraceChunk& c = expect_reply<protocol::reply::Trace>(m, k, "trace").trace;
    n.dropped = c.dropped;
    std::move(c.events.begin(), c.events.end(), std::back_inserter(n.events));
    if (!c.more) break;
    m = s.request(k, cmd::Trace{.action = protocol::TraceAction::Collect});
  }
  // Each track in time order.
  std::stable_sort(n.events.begin(), n.events.end(), [](const auto& a, const auto& b) {
    return std::tie(a.stream, a.device, a.begin_ns) < std::tie(b.stream, b.device, b.begin_ns);
  });
}

}  // namespace

TraceSummary MasterSession::stop_trace(const std::string& path) {
  std::lock_guard lock(trace_mu_);
  if (!trace_.on())
    throw InvalidArgument("stop_trace: no trace is being recorded (start_trace() starts one)");
  trace_.stop();
  TraceFile f;
  char host[256] = {};
  gethostname(host, sizeof host - 1);
  f.master = fmt::format("{}:{}", host, getpid());
  f.start_ns = trace_.start_ns();
  f.calls_dropped = trace_.dropped();
  f.calls = trace_.collect();
  TraceSummary summary;
  summary.path = path;
  summary.dropped = static_cast<int64_t>(f.calls_dropped);
  for (int k = 0; k < node_count(); ++k) {
    NodeTrace& n = f.nodes.emplace_back();
    n.name = hello(k).worker;
    std::tie(n.offset_ns, n.offset_error_ns) = clock_offset(k);
    try {
      if (nodes_[k]->lost.load()) throw WorkerLost("lost");
      collect_node(*this, k, n);
    } catch (const WorkerLost&) {
      n.lost = true;
      summary.lost_nodes.push_back(k);
    }
    summary.dropped += static_cast<int64_t>(n.dropped);
  }
  summary.slices = write_chrome_trace(path, f);
  return summary;
}

}  // namespace detail

// ---- the public API ----

void start_trace() {
  detail::current_session("start_trace")->start_trace();
}

TraceSummary stop_trace(const std::string& path) {
  return detail::current_session("stop_trace")->stop_trace(path);
}

bool is_tracing() {
  return is_master_worker_initialized() && detail::current_session("is_tracing")->tracing();
}

std::string flight_recorder(int node, int finished) {
  auto s = detail::current_session("flight_recorder");
  detail::check_node("flight_recorder", *s, node);
  detail::ReplyMessage m = s->request(node, cmd::FlightDump{});
  const protocol::FlightSnapshot& d =
      detail::expect_reply<protocol::reply::Flight>(m, node, "flight_dump").flight;
  return fmt::format(
      "node {}: {} commands recorded, the last {} kept\n{}\n", node, d.total, d.capacity,
      common::describe(d, d.records.size(), static_cast<size_t>(std::max(finished, 0)), "  "));
}

NodeMetrics node_metrics(int node) {
  auto s = detail::current_session("node_metrics");
  detail::check_node("node_metrics", *s, node);
  detail::ReplyMessage reply = s->request(node, cmd::Metrics{});
  const protocol::NodeMetrics& m =
      detail::expect_reply<protocol::reply::Metrics>(reply, node, "metrics").metrics;
  NodeMetrics out;
  for (const auto& c : m.commands)
    out.commands.emplace_back(std::string(protocol::command_type_label(c.kind)), c.value);
  for (const auto& c : m.bytes)
    out.bytes.emplace_back(std::string(protocol::command_type_label(c.kind)), c.value);
  for (const auto& q : m.queues) out.stream_queues.emplace_back(q.stream, q.depth);
  for (const auto& d : m.devices) out.devices.push_back({d.device, d.live_tensors, d.bytes_in_use});
  out.sessions = m.sessions;
  out.session_active = m.session_active;
  out.refused_connections = m.refused;
  out.master_heartbeat_age_s =
      m.master_heartbeat_age_ns < 0 ? -1.0 : static_cast<double>(m.master_heartbeat_age_ns) / 1e9;
  out.threads = m.threads;
  out.flight_records = m.flight_records;
  out.tracing = m.tracing;
  out.trace_dropped = m.trace_dropped;
  return out;
}

}  // namespace dtr
