// The wire messages between a master and its workers. A message is a ZeroMQ multipart:
// frame 0 is the header (a fixed 8-byte prefix, then a Cereal portable-binary body, see
// codec.hpp), frames 1.. are raw tensor payloads referenced by index from the header.
//
//   master -> worker   Hello, Setup (node index and the session's peer table), Batch
//                      (coalesced commands, protocol/commands.hpp), Goodbye, Heartbeat
//   worker -> master   HelloReply, Reply (answers to requests, and protocol errors naming
//                      what was rejected), Heartbeat, Goodbye (the worker ended the
//                      session, and why)
//   worker -> worker   Peer (event notifications for cross-node stream waits)
//
// Thread safety: plain value types.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "dtr/tensor_meta.hpp"
#include "protocol/commands.hpp"

namespace dtr::protocol {

inline constexpr uint32_t kMagic = 0x31525444;  // "DTR1" in little-endian bytes
// Bump on any change of the bytes below; HELLO's layout (prefix + Hello) never changes.
inline constexpr uint16_t kVersion = 7;

// Heartbeat: an empty message either side may send; a worker in --master mode sends one
// first so that the master learns its address.
enum class MsgType : uint8_t {
  Hello = 1,
  HelloReply = 2,
  Batch = 3,
  Reply = 4,
  Goodbye = 5,
  Heartbeat = 6,
  Setup = 7,
  Peer = 8
};

struct DeviceInfo {
  int32_t index = -1;  // -1: the host CPU
  std::string name;
  uint64_t total_memory = 0;
  uint64_t free_memory = 0;
  int32_t compute_major = 0;  // CUDA compute capability; 0 for the CPU
  int32_t compute_minor = 0;
};

struct Hello {
  uint16_t version = kVersion;
  std::string client;  // "host:pid" of the master, for logs
};

struct HelloReply {
  uint16_t version = kVersion;
  bool accepted = false;
  std::string reason;  // why not accepted
  std::string worker;  // "host:pid"
  uint32_t threads = 0;
  std::vector<DeviceInfo> devices;  // devices[0] is the CPU
  // Where the other workers of a session reach this one; empty: the endpoint the master
  // dialed (listen mode).
  std::string peer_endpoint;
  // Where this worker's rank of the session's process group will bind.
  std::string pg_endpoint;
  // Same-host payloads (common/same_host.hpp): the worker's process and the challenge the
  // master must hold for it to read (0 and 0: not offered).
  uint32_t pid = 0;
  uint64_t challenge = 0;
};

// Sent once after every worker accepted: this worker's node index and where each node of
// the session listens for its peers. `session` is a random id that peer messages carry.
struct Setup {
  uint32_t node = 0;
  uint64_t session = 0;
  std::vector<std::string> peers;         // peers[k]: node k's peer endpoint
  std::vector<std::string> pg_endpoints;  // empty, or one per node: the session's process group
  // Liveness, both ways: the worker sends a heartbeat at least every heartbeat_ms, and ends
  // the session when nothing came from the master for master_timeout_ms (0: keep its own).
  uint32_t heartbeat_ms = 0;
  uint32_t master_timeout_ms = 0;
  // The backend of that process group for host tensors (MasterOptions::backend): "" (the
  // worker's own: zmq, with nccl for CUDA tensors where built), "gloo" or "mpi" (the
  // master and workers are one MPI job; the workers split its world without the master).
  // The decoder refuses any other name.
  std::string backend{};
};

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
};

// The session ends. From the master: it is over; a reason, when there is one, says why it
// ended before it began ("the master gave up: only 1 of 2 workers connected ..."). From a
// worker: the worker ended it (or had ended it when a message of it arrived), `reason` says
// why ("master silent for more than 2500 ms"). An empty reason has no body on the wire.
struct Goodbye {
  std::string reason;
};

// Worker to worker: `token` is done. For a cross-node wait (NotifyPeer / WaitRemote) the
// event's record has run; for a copy (SendPeer / RecvPeer) the message carries the tensor's
// bytes in frame 1, or `failed` and why the source tensor could not be sent.
//
// Same host (common/same_host.hpp; the master says so in SendPeer::by_address): the bytes
// stay with the sender, `bytes` of them at `address` in its process `pid`, until the
// receiver has read them and answers with `released` for the token. On the wire one form
// byte says which of these a message is: plain (0), failed (1), bytes at an address (2),
// released (3).
struct PeerNotify {
  uint64_t session = 0;
  uint32_t from_node = 0;
  uint64_t token = 0;
  bool failed = false;
  RemoteFailure failure;  // when failed
  uint32_t pid = 0;       // 0: the bytes (if any) are in frame 1
  uint64_t address = 0;
  uint64_t bytes = 0;
  bool released = false;
};

struct MemoryStatsWire {
  int64_t bytes_in_use = 0;
  int64_t peak_bytes = 0;
  int64_t live_tensors = 0;
  // Of those: what the session's captured graphs hold on this device (their tensors that
  // live inside the graph, and the latest replay's outputs).
  int64_t graph_bytes = 0;
  int64_t graph_tensors = 0;
};

// ---- observability (docs/observability.md) ----

inline constexpr size_t kMaxTraceEventsPerReply = size_t{1} << 16;
inline constexpr size_t kMaxTraceTensors = 3;
inline constexpr size_t kMaxFlightRecords = size_t{1} << 16;
inline constexpr size_t kMaxMetricsEntries = 4096;
// A trace event or flight record that involves no other node.
inline constexpr uint32_t kNoPeer = 0xFFFFFFFFu;

// A tensor a traced command read or made: its id, and its dtype and shape when the worker
// knew them (not for a failed tensor).
struct TraceTensor {
  TensorId id = kNoTensor;
  bool shaped = false;
  TensorMeta meta;  // when shaped: dtype and shape (contiguous strides)
  friend bool operator==(const TraceTensor&, const TraceTensor&) = default;
};

// How a trace event takes part in a cross-node arrow: it sent token `flow_id` to `peer`
// (a copy's bytes, an event's notification), or it waited for it from `peer`.
enum class TraceFlow : uint8_t { None = 0, Out = 1, In = 2 };

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
  friend bool operator==(const TraceEvent&, const TraceEvent&) = default;
};

// A part of a worker's timeline (Trace's reply): `more` when Collect has more to give.
// `dropped`: events not recorded because the worker's trace buffer was full.
struct TraceChunk {
  std::vector<TraceEvent> events;
  uint64_t dropped = 0;
  bool more = false;
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
  friend bool operator==(const FlightSnapshot&, const FlightSnapshot&) = default;
};

// A worker's live figures (the Metrics reply; dtr-worker --metrics-port serves the same).
struct NodeMetrics {
  struct Count {
    uint8_t kind = 0;  // a CmdType code
    uint64_t value = 0;
    friend bool operator==(const Count&, const Count&) = default;
  };
  struct Queue {
    uint32_t stream = 0;
    uint64_t depth = 0;  // tasks queued and not done
    friend bool operator==(const Queue&, const Queue&) = default;
  };
  struct Device {
    int32_t device = -1;
    int64_t live_tensors = 0;
    int64_t bytes_in_use = 0;
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
  friend bool operator==(const NodeMetrics&, const NodeMetrics&) = default;
};

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
};

//   Get            request, meta (of the payload in frame 1, or, for a pulled Get, of the
//                  bytes at `address` in the worker's memory) or failures[0]
//   Sync           request, failures not reported before (in order)
//   Stats          request, stats
//   ProtocolError  request (0 when the message had none), message
//   Event          request, done, time_ns (steady clock of the worker, when recorded with
//                  timing), failures[0] when the stream had failed before the record
//   Clock          request, time_ns (the worker's steady clock when it answered)
//   Trace          request, trace
//   Flight         request (0: sent unasked, when a peer was lost, a collective failed
//                  waiting for its members, or on SIGUSR1), flight
//   Metrics        request, metrics
//   Attach         request, done (the worker found its challenge in the master's memory),
//                  address (where it holds the master's challenge) or message (why not)
struct Reply {
  ReplyType type = ReplyType::Sync;
  uint64_t request = 0;
  TensorMeta meta;
  std::vector<RemoteFailure> failures;
  MemoryStatsWire stats;
  std::string message;
  bool done = false;
  int64_t time_ns = 0;
  TraceChunk trace;
  FlightSnapshot flight;
  NodeMetrics metrics;
  // Get: where a pulled tensor's bytes are (0: in frame 1); Attach: where the worker holds
  // the master's challenge.
  uint64_t address = 0;
};

}  // namespace dtr::protocol
