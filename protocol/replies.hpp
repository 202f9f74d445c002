// The replies a worker sends its master: one struct per reply, holding only its fields, and
// the values they carry (failures, memory figures, timelines, flight records, metrics).
//
// Each reply struct states, once:
//   kType    its frozen wire code (ReplyType; a code is never reused or renumbered),
//   kName    the name errors use ("reply: trace reply event 3 has end 5, ..."),
//   fields() its fields after `request`, in wire order, each with the check the decoder
//            applies to it, as a command's (protocol/commands.hpp), and
//   payload_frames() (only a reply that can carry any: Get) the payload frames its
//            message has; the others have none. The decoder checks the message against it.
// The values replies carry have fields() too, and the codec walks them the same way: a
// struct field is its fields, a list of structs is a count (checked against its Limit and
// the bytes left) and its items, an optional is a flag byte (0 or 1) and the value, a
// string is a checked count and its bytes.
//
// fields() runs on the struct being decoded, field by field in wire order, so a field may
// be written only when an earlier one says so (Attach's address or message), and a check
// may take its bound from earlier fields (a trace event ends no earlier than it begins).
//
// `Reply` is the variant of the reply structs; the decoder finds a reply's decoder by its
// code in a table built from the variant. Adding a reply: its code in ReplyType, its struct
// here (and in `Reply`), the worker's code that sends it, and the master's that reads it
// (master/session.hpp: expect_reply); the codec, the code check and the every-field
// corruption test (tests/protocol/codec_test.cpp) pick it up from the struct.
//
// Thread safety: plain value types.
#pragma once

#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "dtr/tensor_meta.hpp"
#include "protocol/commands.hpp"

namespace dtr::protocol {

// ---- field checks replies add (besides Range and Limit, protocol/commands.hpp) ----

// An integer field must lie in `range` or be `none`.
struct RangeOrNone {
  Range range;
  int64_t none;
};
// A field that holds a command type's wire code (CmdType).
struct CommandCode {};
// A field that may not be 0.
struct NonZero {};

inline constexpr int64_t kInt64Max = std::numeric_limits<int64_t>::max();
inline constexpr Range kNonNegative{0, kInt64Max};
// A trace event or flight record that involves no other node.
inline constexpr uint32_t kNoPeer = 0xFFFFFFFFu;
inline constexpr RangeOrNone kPeerOrNone{{0, static_cast<int64_t>(kMaxNodes) - 1}, kNoPeer};

// ---- the values replies carry ----

// Why a tensor is failed on a worker. For a tensor that failed because an input had
// failed, cause_* name the first failure in the chain.
struct RemoteFailure {
  TensorId tensor = kNoTensor;
  int32_t device = -1;  // of the failed tensor: -1 CPU, k CUDA device k
  std::string op;
  std::string message;
  TensorId cause_tensor = kNoTensor;
  std::string cause_op;
  std::string cause_message;
  template <class S, class V>
  static void fields(S& c, V& v) {
    v("tensor", c.tensor);
    v("device", c.device, kDeviceRange);
    v("op", c.op);
    v("message", c.message);
    v("cause tensor", c.cause_tensor);
    v("cause op", c.cause_op);
    v("cause message", c.cause_message);
  }
  friend bool operator==(const RemoteFailure&, const RemoteFailure&) = default;
};

struct MemoryStatsWire {
  int64_t bytes_in_use = 0;
  int64_t peak_bytes = 0;
  int64_t live_tensors = 0;
  // Of those: what the session's captured graphs hold on this device (their tensors that
  // live inside the graph, and the latest replay's outputs).
  int64_t graph_bytes = 0;
  int64_t graph_tensors = 0;
  template <class S, class V>
  static void fields(S& c, V& v) {
    v("bytes in use", c.bytes_in_use);
    v("peak bytes", c.peak_bytes);
    v("live tensors", c.live_tensors);
    v("graph bytes", c.graph_bytes);
    v("graph tensors", c.graph_tensors);
  }
  friend bool operator==(const MemoryStatsWire&, const MemoryStatsWire&) = default;
};

// ---- observability (docs/observability.md) ----

inline constexpr size_t kMaxTraceEventsPerReply = size_t{1} << 16;
inline constexpr size_t kMaxTraceTensors = 3;
inline constexpr size_t kMaxFlightRecords = size_t{1} << 16;
inline constexpr size_t kMaxMetricsEntries = 4096;

// A tensor a traced command read or made: its id, and its dtype and shape when the worker
// knew them (not for a failed tensor).
struct TraceTensor {
  TensorId id = kNoTensor;
  bool shaped = false;
  TensorMeta meta;  // when shaped: dtype and shape (contiguous strides)
  template <class S, class V>
  static void fields(S& c, V& v) {
    v("id", c.id);
    v("shape flag", c.shaped);
    if (c.shaped) v("meta", c.meta);
  }
  friend bool operator==(const TraceTensor&, const TraceTensor&) = default;
};

// How a trace event takes part in a cross-node arrow: it sent token `flow_id` to `peer`
// (a copy's bytes, an event's notification), or it waited for it from `peer`.
enum class TraceFlow : uint8_t { None = 0, Out = 1, In = 2 };

// end - begin, saturated at int64's bounds (a trace event's duration, whatever the times).
constexpr int64_t span_ns(int64_t begin, int64_t end) {
  int64_t d = 0;
  if (__builtin_sub_overflow(end, begin, &d))
    return end >= begin ? kInt64Max : std::numeric_limits<int64_t>::min();
  return d;
}

// One slice of a worker's timeline: a command (or, for `device` >= 0, its work on the
// stream's CUDA stream of that device) from its start, waits included, to its end, on the
// worker's steady clock.
struct TraceEvent {
  CmdType kind = CmdType::RunOp;
  OpId op = OpId::neg;  // kind RunOp: the op; kind Collective: the CollectiveKind's code
  uint32_t stream = 0;
  int32_t device = -1;  // -1: the stream's own track; k: its CUDA stream on device k
  int64_t begin_ns = 0;
  int64_t end_ns = 0;   // >= begin_ns
  int64_t wait_ns = 0;  // of the slice, how long the command waited (an input, an event)
  bool failed = false;
  int64_t bytes = 0;        // bytes made, copied or reduced
  uint32_t peer = kNoPeer;  // the other node of a copy or cross-node wait
  TraceFlow flow = TraceFlow::None;
  uint64_t flow_id = 0;  // the token (copies and cross-node waits)
  uint64_t detail = 0;   // the event, group or request the command names
  // Done by the worker's dispatcher as it arrived, not run by its stream (a put, a free,
  // a notification, ...): on the node's dispatch track.
  bool dispatched = false;
  uint8_t inputs = 0;                // tensors[0, inputs) were read, the others made or written
  std::vector<TraceTensor> tensors;  // at most kMaxTraceTensors
  template <class S, class V>
  static void fields(S& c, V& v) {
    v("kind", c.kind, CommandCode{});
    v("op", c.op);
    v("stream", c.stream);
    v("device", c.device, kDeviceRange);
    v("begin", c.begin_ns);
    v("end", c.end_ns, Range{c.begin_ns, kInt64Max, "its begin"});
    v("wait", c.wait_ns, Range{0, span_ns(c.begin_ns, c.end_ns), "its duration"});
    v("failed flag", c.failed);
    v("bytes", c.bytes, kNonNegative);
    v("peer", c.peer, kPeerOrNone);
    v("flow", c.flow, Range{0, static_cast<int64_t>(TraceFlow::In)});
    v("flow id", c.flow_id);
    v("detail", c.detail);
    v("dispatch flag", c.dispatched);
    v("tensors", c.tensors, Limit{kMaxTraceTensors, "tensor"});
    v("inputs", c.inputs, Range{0, static_cast<int64_t>(c.tensors.size()), "its tensors"});
  }
  friend bool operator==(const TraceEvent&, const TraceEvent&) = default;
};

// A part of a worker's timeline (Trace's reply): `more` when Collect has more to give.
// `dropped`: events not recorded because the worker's trace buffer was full.
struct TraceChunk {
  std::vector<TraceEvent> events;
  uint64_t dropped = 0;
  bool more = false;
  template <class S, class V>
  static void fields(S& c, V& v) {
    v("events", c.events, Limit{kMaxTraceEventsPerReply, "event"});
    v("dropped", c.dropped);
    v("more flag", c.more);
  }
  friend bool operator==(const TraceChunk&, const TraceChunk&) = default;
};

enum class FlightState : uint8_t { Queued = 1, Waiting = 2, Running = 3, Done = 4, Failed = 5 };
// What a waiting (or long-running) command waits for.
enum class WaitKind : uint8_t {
  None = 0,
  Tensor = 1,   // tensor `wait_on`, made on another stream
  Event = 2,    // event `wait_on` of this node
  Peer = 3,     // token `wait_on` from node `peer` (a copy or a cross-node wait)
  Group = 4,    // the other members of process group `wait_on` (a collective)
  Streams = 5,  // the other streams (a barrier: Sync, Stats, Trace's Stop)
};

// One command in a worker's flight recorder. Times are the worker's steady clock; 0: not
// reached. queued_ns is the time its batch arrived; started_ns and ended_ns have the
// resolution of a coarse clock (a few ms).
struct FlightRecord {
  uint64_t seq = 0;  // the worker's count of commands, from 1
  CmdType kind = CmdType::RunOp;
  OpId op = OpId::neg;  // kind RunOp: the op; kind Collective: the CollectiveKind's code
  uint32_t stream = 0;
  FlightState state = FlightState::Queued;
  WaitKind wait = WaitKind::None;
  uint64_t wait_on = 0;
  uint32_t peer = kNoPeer;
  TensorId out = kNoTensor;
  TensorId in0 = kNoTensor;
  TensorId in1 = kNoTensor;
  uint64_t detail = 0;  // the event, token, group or request the command names
  int64_t queued_ns = 0;
  int64_t started_ns = 0;
  int64_t ended_ns = 0;
  template <class S, class V>
  static void fields(S& c, V& v) {
    v("seq", c.seq);
    v("kind", c.kind, CommandCode{});
    v("op", c.op);
    v("stream", c.stream);
    v("state", c.state,
      Range{static_cast<int64_t>(FlightState::Queued), static_cast<int64_t>(FlightState::Failed)});
    v("wait kind", c.wait,
      Range{static_cast<int64_t>(WaitKind::None), static_cast<int64_t>(WaitKind::Streams)});
    v("wait on", c.wait_on);
    v("peer", c.peer, kPeerOrNone);
    v("output", c.out);
    v("input 0", c.in0);
    v("input 1", c.in1);
    v("detail", c.detail);
    v("queued time", c.queued_ns, kNonNegative);
    v("start time", c.started_ns, kNonNegative);
    v("end time", c.ended_ns, kNonNegative);
  }
  friend bool operator==(const FlightRecord&, const FlightRecord&) = default;
};

// A snapshot of a worker's flight recorder (the Flight reply's content; the command that
// asks for one is cmd::FlightDump): the last commands (oldest first), why it was dumped,
// and the worker's clock at the dump.
struct FlightSnapshot {
  std::string reason;
  int64_t now_ns = 0;
  uint64_t total = 0;  // commands recorded since the worker started
  uint32_t capacity = 0;
  std::vector<FlightRecord> records;  // at most kMaxFlightRecords
  template <class S, class V>
  static void fields(S& c, V& v) {
    v("reason", c.reason);
    v("now", c.now_ns);
    v("total", c.total);
    v("capacity", c.capacity);
    v("records", c.records, Limit{kMaxFlightRecords, "record"});
  }
  friend bool operator==(const FlightSnapshot&, const FlightSnapshot&) = default;
};

// A worker's live figures (the Metrics reply; dtr-worker --metrics-port serves the same).
struct NodeMetrics {
  struct Count {
    uint8_t kind = 0;  // a CmdType code
    uint64_t value = 0;
    template <class S, class V>
    static void fields(S& c, V& v) {
      v("kind", c.kind, CommandCode{});
      v("value", c.value);
    }
    friend bool operator==(const Count&, const Count&) = default;
  };
  struct Queue {
    uint32_t stream = 0;
    uint64_t depth = 0;  // tasks queued and not done
    template <class S, class V>
    static void fields(S& c, V& v) {
      v("stream", c.stream);
      v("depth", c.depth);
    }
    friend bool operator==(const Queue&, const Queue&) = default;
  };
  struct Device {
    int32_t device = -1;
    int64_t live_tensors = 0;
    int64_t bytes_in_use = 0;
    template <class S, class V>
    static void fields(S& c, V& v) {
      v("device", c.device, kDeviceRange);
      v("live tensors", c.live_tensors, kNonNegative);
      v("bytes in use", c.bytes_in_use, kNonNegative);
    }
    friend bool operator==(const Device&, const Device&) = default;
  };
  std::vector<Count> commands;  // commands dispatched, by kind (since the worker started)
  std::vector<Count> bytes;     // bytes moved, by kind (put, get, copies, collectives)
  std::vector<Queue> queues;    // the session's streams
  std::vector<Device> devices;  // CPU (-1) and each CUDA device
  uint64_t sessions = 0;        // sessions started
  bool session_active = false;
  uint64_t refused = 0;                  // connections and sessions refused
  int64_t master_heartbeat_age_ns = -1;  // since the session's master was last heard (-1: none)
  uint32_t threads = 0;
  uint64_t flight_records = 0;  // commands the flight recorder has seen
  bool tracing = false;
  uint64_t trace_dropped = 0;
  template <class S, class V>
  static void fields(S& c, V& v) {
    v("commands", c.commands, Limit{kMaxMetricsEntries, "commands entry"});
    v("bytes", c.bytes, Limit{kMaxMetricsEntries, "bytes entry"});
    v("queues", c.queues, Limit{kMaxMetricsEntries, "queue"});
    v("devices", c.devices, Limit{kMaxDevices + 1, "device"});
    v("sessions", c.sessions);
    v("session flag", c.session_active);
    v("refused", c.refused);
    v("heartbeat age", c.master_heartbeat_age_ns, Range{-1, kInt64Max});
    v("threads", c.threads);
    v("flight records", c.flight_records);
    v("tracing flag", c.tracing);
    v("trace dropped", c.trace_dropped);
  }
  friend bool operator==(const NodeMetrics&, const NodeMetrics&) = default;
};

// ---- the replies ----

// Frozen wire codes, one per reply struct.
enum class ReplyType : uint8_t {
  Get = 1,
  Sync = 2,
  Stats = 3,
  ProtocolError = 4,
  Event = 5,
  Clock = 6,
  Trace = 7,
  Flight = 8,
  Metrics = 9,
  Attach = 10
  // 11-: unused (a new reply takes the next code).
};

namespace reply {

// Answers a cmd::Get: the tensor's failure, or its metadata and its bytes, in payload frame
// 1 (address 0) or, for a pulled Get (same host), at `address` in the worker's memory,
// held there until the master's cmd::Release.
struct Get {
  static constexpr ReplyType kType = ReplyType::Get;
  static constexpr std::string_view kName = "get";
  uint64_t request = 0;
  std::optional<RemoteFailure> failure{};  // set: nothing else follows
  TensorMeta meta{};                       // contiguous
  uint64_t address = 0;
  template <class S, class V>
  static void fields(S& c, V& v) {
    v("failure", c.failure);
    if (c.failure) return;
    v("meta", c.meta);
    v("address", c.address);
  }
  size_t payload_frames() const { return !failure && address == 0 ? 1 : 0; }
  friend bool operator==(const Get&, const Get&) = default;
};

// Answers a cmd::Sync: the failures not reported before, in order.
struct Sync {
  static constexpr ReplyType kType = ReplyType::Sync;
  static constexpr std::string_view kName = "sync";
  uint64_t request = 0;
  std::vector<RemoteFailure> failures{};
  template <class S, class V>
  static void fields(S& c, V& v) {
    v("failures", c.failures, Limit{kMaxErrorsPerReply, "failure"});
  }
  friend bool operator==(const Sync&, const Sync&) = default;
};

// Answers a cmd::Stats: the device's memory figures.
struct Stats {
  static constexpr ReplyType kType = ReplyType::Stats;
  static constexpr std::string_view kName = "stats";
  uint64_t request = 0;
  MemoryStatsWire stats{};
  template <class S, class V>
  static void fields(S& c, V& v) {
    MemoryStatsWire::fields(c.stats, v);
  }
  friend bool operator==(const Stats&, const Stats&) = default;
};

// The worker rejected a message (request 0) or could not answer `request`: why.
struct ProtocolError {
  static constexpr ReplyType kType = ReplyType::ProtocolError;
  static constexpr std::string_view kName = "protocol error";
  uint64_t request = 0;
  std::string message{};
  template <class S, class V>
  static void fields(S& c, V& v) {
    v("message", c.message);
  }
  friend bool operator==(const ProtocolError&, const ProtocolError&) = default;
};

// Answers a cmd::EventQuery or cmd::EventSync: whether the event's record is done, its
// time on the worker's steady clock (recorded with timing), and the failure of its stream
// before the record, if any.
struct Event {
  static constexpr ReplyType kType = ReplyType::Event;
  static constexpr std::string_view kName = "event";
  uint64_t request = 0;
  bool done = false;
  int64_t time_ns = 0;
  std::optional<RemoteFailure> failure{};
  template <class S, class V>
  static void fields(S& c, V& v) {
    v("done flag", c.done);
    v("time", c.time_ns);
    v("failure", c.failure);
  }
  friend bool operator==(const Event&, const Event&) = default;
};

// Answers a cmd::ClockSync: the worker's steady clock when it answered.
struct Clock {
  static constexpr ReplyType kType = ReplyType::Clock;
  static constexpr std::string_view kName = "clock";
  uint64_t request = 0;
  int64_t time_ns = 0;
  template <class S, class V>
  static void fields(S& c, V& v) {
    v("time", c.time_ns);
  }
  friend bool operator==(const Clock&, const Clock&) = default;
};

// Answers a cmd::Trace: a part of the worker's timeline.
struct Trace {
  static constexpr ReplyType kType = ReplyType::Trace;
  static constexpr std::string_view kName = "trace";
  uint64_t request = 0;
  TraceChunk trace{};
  template <class S, class V>
  static void fields(S& c, V& v) {
    TraceChunk::fields(c.trace, v);
  }
  friend bool operator==(const Trace&, const Trace&) = default;
};

// Answers a cmd::FlightSnapshot with the worker's flight recorder; request 0: sent unasked
// (a peer was lost, a collective failed waiting for its members, SIGUSR1).
struct Flight {
  static constexpr ReplyType kType = ReplyType::Flight;
  static constexpr std::string_view kName = "flight";
  uint64_t request = 0;
  FlightSnapshot flight{};
  template <class S, class V>
  static void fields(S& c, V& v) {
    FlightSnapshot::fields(c.flight, v);
  }
  friend bool operator==(const Flight&, const Flight&) = default;
};

// Answers a cmd::Metrics: the worker's live figures.
struct Metrics {
  static constexpr ReplyType kType = ReplyType::Metrics;
  static constexpr std::string_view kName = "metrics";
  uint64_t request = 0;
  NodeMetrics metrics{};
  template <class S, class V>
  static void fields(S& c, V& v) {
    NodeMetrics::fields(c.metrics, v);
  }
  friend bool operator==(const Metrics&, const Metrics&) = default;
};

// Answers a cmd::Attach: done (the worker found its challenge in the master's memory) with
// the address where it holds the master's challenge, or why not.
struct Attach {
  static constexpr ReplyType kType = ReplyType::Attach;
  static constexpr std::string_view kName = "attach";
  uint64_t request = 0;
  bool done = false;
  uint64_t address = 0;   // when done
  std::string message{};  // when not
  template <class S, class V>
  static void fields(S& c, V& v) {
    v("done flag", c.done);
    if (c.done)
      v("address", c.address, NonZero{});
    else
      v("message", c.message);
  }
  friend bool operator==(const Attach&, const Attach&) = default;
};

}  // namespace reply

using Reply =
    std::variant<reply::Get, reply::Sync, reply::Stats, reply::ProtocolError, reply::Event,
                 reply::Clock, reply::Trace, reply::Flight, reply::Metrics, reply::Attach>;

// Whether every alternative of the variant V (Command, Reply) has a wire code (kType) of
// its own (compared as codes: function addresses are not constant expressions under the
// sanitizers).
template <class V>
constexpr bool wire_codes_unique() {
  return []<size_t... I>(std::index_sequence<I...>) {
    constexpr uint8_t codes[] = {static_cast<uint8_t>(std::variant_alternative_t<I, V>::kType)...};
    for (size_t i = 0; i < sizeof...(I); ++i)
      for (size_t j = i + 1; j < sizeof...(I); ++j)
        if (codes[i] == codes[j]) return false;
    return true;
  }
  (std::make_index_sequence<std::variant_size_v<V>>{});
}
static_assert(wire_codes_unique<Reply>(), "two reply structs share a wire code");

// The reply's wire code, request and the name errors use.
inline ReplyType reply_type(const Reply& r) {
  return std::visit([](const auto& x) { return std::decay_t<decltype(x)>::kType; }, r);
}
inline uint64_t reply_request(const Reply& r) {
  return std::visit([](const auto& x) { return x.request; }, r);
}
inline std::string_view reply_name(const Reply& r) {
  return std::visit([](const auto& x) { return std::decay_t<decltype(x)>::kName; }, r);
}
// The payload frames a message of the reply carries (its payload_frames(), else none).
template <class R>
size_t payload_frames_of(const R& r) {
  if constexpr (requires { r.payload_frames(); })
    return r.payload_frames();
  else
    return 0;
}
inline size_t reply_payload_frames(const Reply& r) {
  return std::visit([](const auto& x) { return payload_frames_of(x); }, r);
}

}  // namespace dtr::protocol
