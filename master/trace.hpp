// The timeline on the master (docs/observability.md): its own part (MasterTrace: the
// calls that queued commands and the sync points, per calling thread) and the trace file
// that joins it with the workers' parts (write_chrome_trace).
//
// A trace file is JSON in Chrome's trace event format (what Perfetto and chrome://tracing
// open): process 0 is the master, with one track per calling thread; process k + 1 is node
// k, with one track per stream ("stream 3") and one per CUDA stream a stream used
// ("stream 3 / cuda:0"). Each command is a complete ("X") slice with its op, tensors,
// bytes and status in `args`; a copy or cross-node wait is a flow arrow ("s" at the end of
// the sender's slice, "f" bound to the end of the receiver's), with the token as its id.
// Times are microseconds since the trace started, on the master's steady clock: a
// worker's times are moved by the offset of its clock measured at the session's start
// (MasterSession::clock_offset).
//
// Thread safety: MasterTrace::record() from any thread (each thread writes its own log,
// common/thread_log.hpp); start(), stop() and collect() from any thread, not
// concurrently with each other. write_chrome_trace is a plain function.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

#include "common/thread_log.hpp"
#include "protocol/messages.hpp"

namespace dtr::detail {

class MasterTrace {
 public:
  MasterTrace();
  bool on() const { return on_.load(std::memory_order_relaxed); }
  // Starts recording (what an earlier trace recorded is dropped); the trace's time 0.
  void start();
  void stop() { on_.store(false, std::memory_order_relaxed); }
  int64_t start_ns() const { return start_ns_; }

  // A call that queued command `kind` (op `op`; `id`: the tensor it makes) for `node`, at
  // the end of its queueing: a moment. Identical calls in a row on a thread make one slice,
  // a *run* (`count` calls, from the first one's time to about the last one's), so that a
  // call costs a few instructions: the clock is read at a run's start and every 64th call
  // of it; a pause of about a millisecond between two reads ends the run.
  void call(protocol::CmdType kind, uint16_t op, int node, uint32_t stream, uint64_t id);
  // A sync point: request `request` of command `kind` to `node`, between trace::ticks()
  // `begin` and `end`.
  void sync_point(protocol::CmdType kind, uint16_t op, int node, uint32_t stream, uint64_t request,
                  int64_t begin, int64_t end);

  struct Event {
    bool sync = false;
    protocol::CmdType kind = protocol::CmdType::RunOp;
    uint16_t op = 0;
    int32_t node = 0;
    uint32_t stream = 0;
    uint32_t thread = 0;  // the calling thread, numbered from 1 in order of first record
    uint64_t id = 0;
    uint64_t count = 1;    // calls of the run
    int64_t begin_ns = 0;  // steady clock
    int64_t end_ns = 0;
  };
  // What was recorded, on the steady clock (after stop()); frees the trace's memory.
  std::vector<Event> collect();
  uint64_t dropped() const { return log_.dropped(); }

 private:
  // A run or a sync point in the log (master/trace.cpp); null when the log is full.
  void* append(bool sync, protocol::CmdType kind, uint16_t op, int node, uint32_t stream,
               uint64_t id, int64_t begin, int64_t end);
  // Ends the calling thread's open run (at its last clock read).
  void end_run();

  std::atomic<bool> on_{false};
  int64_t start_ns_ = 0;
  trace::ThreadLog log_;
};

// One node's part of a trace file.
struct NodeTrace {
  std::string name;             // "host:pid" of its worker
  int64_t offset_ns = 0;        // its steady clock minus the master's
  int64_t offset_error_ns = 0;  // the bound of that measurement (half the best round trip)
  bool lost = false;            // lost before its slices could be collected
  uint64_t dropped = 0;         // slices its trace buffer could not keep
  std::vector<protocol::TraceEvent> events;
};

struct TraceFile {
  std::string master;  // "host:pid"
  int64_t start_ns = 0;
  std::vector<MasterTrace::Event> calls;
  uint64_t calls_dropped = 0;
  std::vector<NodeTrace> nodes;
};

// Writes `t` to `path` (replacing it); returns the number of slices written. Throws
// dtr::Error naming the path when it cannot be written.
int64_t write_chrome_trace(const std::string& path, const TraceFile& t);

}  // namespace dtr::detail
