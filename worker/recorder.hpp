// Recorder: what a worker keeps about its own work, for people (docs/observability.md):
// the flight recorder (its last commands, always on), the tracer (its timeline, when
// asked) and the counters behind its metrics. One per worker process (the server makes
// it; a Session made without one makes its own), shared by its sessions, so that the
// flight recorder of a session that ended badly can still be read.
//
// The session's parts feed it where the facts are: the dispatcher records each command
// and counts it (session.cpp), a stream notes when its task starts, waits and ends
// (streams.cpp), a run that parks says on what (the session's runners, peer_copy.cpp,
// collectives.cpp), events draw the arrows of their notifications (events.cpp), copies,
// gets, puts and collectives count their bytes, a failure counts itself (failures.cpp).
//
// Thread safety: the members follow their own headers (FlightRecorder, Tracer); the
// counters are atomics. `commands` has one writer, the dispatch thread (a plain
// load-and-store increment, no locked instruction); `bytes` and the server's figures are
// written from any thread. Which commands count bytes is their structs' kCountsBytes
// (protocol/commands.hpp).
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>

#include "protocol/messages.hpp"
#include "worker/flight_recorder.hpp"
#include "worker/tracer.hpp"

namespace dtr::worker::detail {

struct Counters {
  std::array<std::atomic<uint64_t>, 256> commands{};  // by CmdType code
  std::array<std::atomic<uint64_t>, 256> bytes{};     // by CmdType code
  std::atomic<uint64_t> sessions{0};                  // sessions started
  std::atomic<uint64_t> refused{0};                   // connections and sessions refused
  std::atomic<bool> session_active{false};
  std::atomic<int64_t> master_heard_ns{0};  // steady clock; 0: no session

  // Dispatch thread only.
  void count_command(protocol::CmdType kind) {
    auto& c = commands[static_cast<uint8_t>(kind)];
    c.store(c.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
  }
  // `n` bytes moved by a command of type C (any thread). Only a command whose struct says
  // kCountsBytes may count (the metrics list those; a PutFrom counts as a Put).
  template <class C>
  void add_bytes(int64_t n) {
    static_assert(protocol::counts_bytes_v<C>,
                  "bytes are counted only for a command whose struct says kCountsBytes "
                  "(protocol/commands.hpp): the metrics list those");
    if (n > 0)
      bytes[static_cast<uint8_t>(C::kType)].fetch_add(static_cast<uint64_t>(n),
                                                      std::memory_order_relaxed);
  }
};

struct RecorderOptions {
  size_t flight_records = kDefaultFlightRecords;
  size_t trace_bytes = kDefaultTraceBytes;
};

class Recorder {
 public:
  explicit Recorder(RecorderOptions options = {})
      : flight(options.flight_records), tracer(options.trace_bytes) {}

  FlightRecorder flight;
  Tracer tracer;
  Counters counters;

  // The flight recorder now, also written to the worker's log (spdlog, as a warning)
  // with `reason`.
  protocol::FlightSnapshot dump_to_log(const std::string& reason) const;
  // True for the first failed command of a burst: when no failure dumped the recorder in
  // the last kFailureDumpGap. A lost node fails every collective queued behind the stuck
  // one, each of which would otherwise log the same recorder again.
  bool claim_failure_dump();
  static constexpr std::chrono::seconds kFailureDumpGap{5};
  // Fills the figures the recorder holds (commands, bytes, the server's, the flight
  // recorder's and the tracer's) into `m`.
  void fill(protocol::NodeMetrics& m) const;

 private:
  std::atomic<int64_t> last_failure_dump_ns_{0};  // steady clock; 0: none yet
};

// The Prometheus text exposition format (version 0.0.4) of `m`, every metric prefixed
// dtr_worker_ and labelled with the worker's `name`.
std::string prometheus_text(const protocol::NodeMetrics& m, const std::string& name);

}  // namespace dtr::worker::detail
