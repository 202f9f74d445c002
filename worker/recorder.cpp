// Recorder (worker/recorder.hpp): dumps to the log, the recorder's figures, and their
// Prometheus text.
#include "worker/recorder.hpp"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "common/flight_text.hpp"
#include "common/trace_clock.hpp"
#include "dtr/tensor.hpp"

namespace dtr::worker::detail {

using protocol::CmdType;

namespace {

// The kinds whose bytes are counted (Counters::add_bytes): the commands whose structs say
// kCountsBytes, in the order of protocol::Command.
template <class... C>
constexpr auto byte_kinds(const std::variant<C...>*) {
  std::array<CmdType, (size_t{protocol::counts_bytes_v<C>} + ...)> kinds{};
  size_t i = 0;
  ((protocol::counts_bytes_v<C> ? (kinds[i++] = C::kType, 0) : 0), ...);
  return kinds;
}
constexpr auto kByteKinds = byte_kinds(static_cast<const protocol::Command*>(nullptr));

std::string escape_label(std::string_view v) {
  std::string out;
  for (char c : v) {
    if (c == '\\' || c == '"') {
      out += '\\';
      out += c;
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

std::string kind_name(uint8_t code) {
  std::string_view n = protocol::command_type_label(code);
  return n.empty() ? fmt::format("code_{}", code) : std::string(n);
}

std::string device_label(int32_t device) {
  return device < 0 ? std::string("cpu") : fmt::format("cuda:{}", device);
}

}  // namespace

protocol::FlightSnapshot Recorder::dump_to_log(const std::string& reason) const {
  protocol::FlightSnapshot d = flight.dump(reason);
  spdlog::warn("flight recorder ({}; {} commands recorded, the last {} kept):\n{}", reason, d.total,
               d.capacity, common::describe(d, 64, 16, "  "));
  return d;
}

bool Recorder::claim_failure_dump() {
  const int64_t now = std::chrono::duration_cast<std::chrono::nanoseconds>(
                          std::chrono::steady_clock::now().time_since_epoch())
                          .count();
  const int64_t gap = std::chrono::nanoseconds(kFailureDumpGap).count();
  int64_t last = last_failure_dump_ns_.load();
  while (last == 0 || now - last >= gap) {
    if (last_failure_dump_ns_.compare_exchange_weak(last, now)) return true;
  }
  return false;
}

void Recorder::fill(protocol::NodeMetrics& m) const {
  constexpr auto r = std::memory_order_relaxed;
  for (int code = 1; code < 256; ++code) {
    if (protocol::command_type_name(static_cast<uint8_t>(code)).empty()) continue;
    m.commands.push_back({static_cast<uint8_t>(code), counters.commands[code].load(r)});
  }
  for (CmdType k : kByteKinds)
    m.bytes.push_back({static_cast<uint8_t>(k), counters.bytes[static_cast<uint8_t>(k)].load(r)});
  m.sessions = counters.sessions.load(r);
  m.session_active = counters.session_active.load(r);
  m.refused = counters.refused.load(r);
  const int64_t heard = counters.master_heard_ns.load(r);
  m.master_heartbeat_age_ns =
      m.session_active && heard > 0 ? std::max<int64_t>(trace::steady_ns() - heard, 0) : -1;
  m.flight_records = flight.total();
  m.tracing = tracer.on();
  m.trace_dropped = tracer.dropped();
}

std::string prometheus_text(const protocol::NodeMetrics& m, const std::string& name) {
  const std::string w = fmt::format("worker=\"{}\"", escape_label(name));
  std::string out;
  auto head = [&](std::string_view metric, std::string_view type, std::string_view help) {
    out += fmt::format("# HELP dtr_worker_{} {}\n# TYPE dtr_worker_{} {}\n", metric, help, metric,
                       type);
  };
  auto line = [&](std::string_view metric, std::string_view labels, auto value) {
    out += fmt::format("dtr_worker_{}{{{}{}{}}} {}\n", metric, w, labels.empty() ? "" : ",", labels,
                       value);
  };
  head("commands_total", "counter", "Commands dispatched, by kind.");
  for (const auto& c : m.commands)
    line("commands_total", fmt::format("kind=\"{}\"", kind_name(c.kind)), c.value);
  head("bytes_total", "counter", "Bytes moved, by kind (put, get, copies, collectives).");
  for (const auto& c : m.bytes)
    line("bytes_total", fmt::format("kind=\"{}\"", kind_name(c.kind)), c.value);
  head("stream_queue_depth", "gauge", "Tasks queued on a stream of the session and not done.");
  for (const auto& q : m.queues)
    line("stream_queue_depth", fmt::format("stream=\"{}\"", q.stream), q.depth);
  head("live_tensors", "gauge", "Tensors of the session, by device.");
  for (const auto& d : m.devices)
    line("live_tensors", fmt::format("device=\"{}\"", device_label(d.device)), d.live_tensors);
  head("bytes_in_use", "gauge", "Bytes of tensor memory in use, by device.");
  for (const auto& d : m.devices)
    line("bytes_in_use", fmt::format("device=\"{}\"", device_label(d.device)), d.bytes_in_use);
  head("memory_limit_bytes", "gauge",
       "The worker's limit on tensor memory (--memory-limit), by device; absent without one.");
  if (const int64_t limit = cpu_memory_limit(); limit > 0)
    line("memory_limit_bytes", "device=\"cpu\"", limit);
  head("sessions_total", "counter", "Master sessions started.");
  line("sessions_total", "", m.sessions);
  head("session_active", "gauge", "1 while a master's session is open.");
  line("session_active", "", m.session_active ? 1 : 0);
  head("refused_connections_total", "counter",
       "Connections and sessions refused (handshakes, busy, protocol version).");
  line("refused_connections_total", "", m.refused);
  head("master_heartbeat_age_seconds", "gauge",
       "Seconds since the session's master was last heard (absent without a session).");
  if (m.master_heartbeat_age_ns >= 0)
    line("master_heartbeat_age_seconds", "",
         fmt::format("{:.6f}", static_cast<double>(m.master_heartbeat_age_ns) / 1e9));
  head("executor_threads", "gauge", "Threads that run the session's streams.");
  line("executor_threads", "", m.threads);
  head("flight_records_total", "counter", "Commands the flight recorder has seen.");
  line("flight_records_total", "", m.flight_records);
  head("tracing", "gauge", "1 while a timeline is being recorded.");
  line("tracing", "", m.tracing ? 1 : 0);
  head("trace_dropped_total", "counter", "Trace slices dropped (the trace buffer was full).");
  line("trace_dropped_total", "", m.trace_dropped);
  return out;
}

}  // namespace dtr::worker::detail
