// Seeing what the cluster does (docs/observability.md): a timeline of the master's calls
// and every node's streams, the workers' flight recorders, and their live figures.
//
//   dtr::start_trace();                        // or run the program with DTR_TRACE=trace.json
//   ... the program ...
//   dtr::stop_trace("trace.json");             // open it in Perfetto or chrome://tracing
//   std::cout << dtr::flight_recorder(1);      // node 1's last commands and their state
//   dtr::NodeMetrics m = dtr::node_metrics(0); // what `dtr-worker --metrics-port` serves
//
// With DTR_TRACE=PATH (or MasterOptions::trace_path) init_master_worker() starts a trace
// and shutdown_master_worker() (also at exit) writes it to PATH.
//
// Thread safety: every function may be called from any thread; start_trace and
// stop_trace are serialized (one trace at a time per session).
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace dtr {

// ---- timeline ----

// Starts recording the session's timeline: this master's calls and sync points, and every
// command each worker runs from now on. Throws InvalidArgument when one is being recorded.
void start_trace();

struct TraceSummary {
  std::string path;
  int64_t slices = 0;           // written: the master's and the workers'
  int64_t dropped = 0;          // not recorded: a trace buffer was full (dtr-worker --trace-buffer)
  std::vector<int> lost_nodes;  // nodes lost before their slices could be collected
};
// Stops recording and writes the trace to `path` in Chrome's trace event format (JSON).
// A sync point on every node: what was issued before the call is in the trace. Throws
// InvalidArgument when no trace is being recorded, dtr::Error when `path` cannot be
// written.
TraceSummary stop_trace(const std::string& path);
bool is_tracing();

// ---- flight recorder ----

// Node `node`'s last commands in words, one per line: those not finished (queued, waiting
// and on what, running), then the last `finished` ones that are done or failed. Asks the
// worker (answered at once, not after its queued work).
std::string flight_recorder(int node, int finished = 16);

// ---- metrics ----

// A worker's live figures; `dtr-worker --metrics-port` serves the same in Prometheus text.
struct NodeMetrics {
  std::vector<std::pair<std::string, uint64_t>> commands;    // dispatched since start, by kind
  std::vector<std::pair<std::string, uint64_t>> bytes;       // moved since start, by kind
  std::vector<std::pair<uint32_t, uint64_t>> stream_queues;  // stream id, tasks not done
  struct Device {
    int device = -1;  // -1: the CPU
    int64_t live_tensors = 0;
    int64_t bytes_in_use = 0;
  };
  std::vector<Device> devices;
  uint64_t sessions = 0;  // sessions the worker has served
  bool session_active = false;
  uint64_t refused_connections = 0;
  double master_heartbeat_age_s = -1;  // since the worker last heard this master
  uint32_t threads = 0;
  uint64_t flight_records = 0;  // commands its flight recorder has seen
  bool tracing = false;
  uint64_t trace_dropped = 0;
};
// Asks node `node` (answered at once, not after its queued work).
NodeMetrics node_metrics(int node);

}  // namespace dtr
