// The commands a master sends a worker: one struct per command, holding only its fields.
//
// Each struct states, once:
//   kType    its frozen wire code (CmdType; a code is never reused or renumbered),
//   kName    the name errors use (RunOp uses its op's name instead),
//   fields() its fields after `stream`, in wire order, each with the check the decoder
//            applies to it (a Range, a Limit, the payload rule; bool, OpId, DType,
//            TensorMeta, OpAttrs and Inputs carry their own rules, see codec.hpp),
// and, as `static constexpr bool` members beside kType, the facts the rest of dtr keys on
// (a struct that does not name one has its default; read them through the accessors
// below, which give it):
//   kInGraph     (false) it may be part of a captured graph's program;
//   kOnStream    (false) the worker runs it as a task on its stream (an executor thread;
//                small CPU work on an idle stream runs at once instead), not at dispatch;
//                a graph replay's parts are its tasks. The worker's task variant has one
//                alternative per such command, and a runner for each (worker/streams.hpp);
//   kBarrier     (false) it is a barrier over every stream (one task on each; done when the
//                last one reaches it), as Sync and Stats are, and Trace when it stops;
//   kCountsBytes (false) the worker counts the bytes it moves (the bytes_total metric);
//   kTraced      (true)  it is a slice of the worker's timeline (not: the observability
//                commands themselves, the same-host bookkeeping, and NotifyPeer, which is
//                drawn when it notifies).
// A command with neither kOnStream nor kBarrier is done (or answered) by its handler on
// the worker's dispatch thread.
// `Command` is the variant of all of them; the codec (protocol/codec.cpp) encodes and
// decodes any alternative from its fields(), and the worker has one handler per struct
// (worker/session_impl.hpp). Adding a command: docs/architecture.md, "How to add a
// command".
//
// Captured graphs (GraphUpload, GraphReplay, GraphFree): a node's part of a graph travels
// once as GraphUpload, whose program holds the recorded commands themselves, encoded and
// checked by the same codec (a command may be part of a graph when its struct says
// kInGraph); a replay is one GraphReplay naming the graph and the replay's number.
//
// Every command names a stream of its node (0: the default stream). Tensor ids are the
// master's; 0 is never a tensor. `device`: where the command's tensors live, -1 for the
// worker's CPU, k for its CUDA device k.
//
// Thread safety: plain value types.
#pragma once

#include <cstdint>
#include <memory>
#include <string_view>
#include <variant>
#include <vector>

#include "dtr/op_table.hpp"
#include "dtr/reduce_op.hpp"
#include "dtr/tensor_meta.hpp"

namespace dtr::protocol {

// Limits every decoder enforces before it allocates.
inline constexpr size_t kMaxCommandsPerBatch = size_t{1} << 20;
inline constexpr size_t kMaxPayloadFrames = size_t{1} << 16;
inline constexpr size_t kMaxErrorsPerReply = 4096;
inline constexpr size_t kMaxStringBytes = size_t{64} << 10;
inline constexpr size_t kMaxDevices = 256;
inline constexpr size_t kMaxNodes = 4096;
// Per session on one worker: user streams, live events, pending cross-node waits.
inline constexpr size_t kMaxStreams = 1024;
inline constexpr size_t kMaxEvents = size_t{1} << 20;
inline constexpr size_t kMaxPendingWaits = size_t{1} << 20;
// Per session on one worker: live graphs; per graph part: the tensors it declares as inputs
// and the ones it leaves to the master (outputs).
inline constexpr size_t kMaxGraphs = 4096;
inline constexpr size_t kMaxGraphTensors = size_t{1} << 20;
// Linux's PID_MAX_LIMIT on 64-bit systems: no process id is larger.
inline constexpr int64_t kMaxPid = int64_t{1} << 22;

// Ids name tensors within one session; the master assigns them, 0 is never a tensor.
using TensorId = uint64_t;
inline constexpr TensorId kNoTensor = 0;

// Frozen wire codes, one per command struct.
enum class CmdType : uint8_t {
  RunOp = 1,
  Put = 2,
  Get = 3,
  Free = 4,
  Sync = 5,
  Stats = 6,
  CreateStream = 7,
  DestroyStream = 8,
  Record = 9,
  WaitEvent = 10,
  NotifyPeer = 11,
  WaitRemote = 12,
  EventQuery = 13,
  EventSync = 14,
  DestroyEvent = 15,
  SendPeer = 16,
  RecvPeer = 17,
  NewGroup = 18,
  Collective = 19,
  ToDevice = 20,
  NodeLost = 21,
  ClockSync = 22,
  Trace = 23,
  FlightDump = 24,
  Metrics = 25,
  Attach = 26,
  PutFrom = 27,
  Release = 28,
  Cancel = 29,
  // 30-39: unused (codes are never reused or renumbered; a new command takes a free one).
  GraphUpload = 40,
  GraphReplay = 41,
  GraphFree = 42
};

// What a cmd::Trace asks of the worker's timeline (docs/observability.md).
enum class TraceAction : uint8_t {
  Start = 1,    // start recording (what an earlier trace recorded is dropped)
  Stop = 2,     // a barrier over every stream; then recording stops
  Collect = 3,  // the next events of the stopped trace (at most kMaxTraceEventsPerReply)
};

// Master-issued collectives among the session's workers (cmd::Collective).
enum class CollectiveKind : uint8_t {
  AllReduce = 1,
  Broadcast = 2,
  AllGather = 3,
  ReduceScatter = 4
};

// ---- field checks (applied by the decoder; see fields() below) ----

// An integer or enum field must lie in [lo, hi]; `note`, if any, says where a bound comes
// from (errors add it: "expected at least 9 (its begin)").
struct Range {
  int64_t lo;
  int64_t hi;
  const char* note = nullptr;
};
// A list field holds at most `max` items; `item` names one of them in errors ("event 3").
struct Limit {
  size_t max;
  const char* item = nullptr;
};
// A payload frame index: one of this message's frames (1..), referenced by one command.
struct PayloadRule {};
// A RunOp's flag byte: the inplace flag and OpAttrs' flags (keepdim, scalar_first, and
// whether seed and offset follow the attributes), no other bits.
struct OpFlagsRule {};

inline constexpr Range kDeviceRange{-1, static_cast<int64_t>(kMaxDevices) - 1};

// A RunOp's tensor inputs: n ids, at most kMax (the op table's kMaxOpInputs). The first
// kInline live in `ids` (the 1- and 2-input ops of the hot path allocate nothing); the
// others, only for ops of more inputs (conv2d with a bias, cat), in `more`. On the wire:
// n (u8), then n ids.
struct Inputs {
  static constexpr size_t kInline = 2;
  static constexpr size_t kMax = static_cast<size_t>(dtr::kMaxOpInputs);
  uint8_t n = 0;
  TensorId ids[kInline] = {kNoTensor, kNoTensor};
  std::vector<TensorId> more{};  // inputs kInline.. (n - kInline of them)
  TensorId operator[](size_t i) const { return i < kInline ? ids[i] : more[i - kInline]; }
  // Appends an id (the caller keeps n <= kMax).
  void push_back(TensorId id) {
    if (n < kInline)
      ids[n] = id;
    else
      more.push_back(id);
    ++n;
  }
  friend bool operator==(const Inputs&, const Inputs&) = default;
};

// A tensor a graph part reads that exists before the graph (an input), as the master
// knows it: id and metadata, strides and offset included (a view may be an input). The
// decoder checks the metadata (dtype, sizes and strides >= 0, an extent int64 can count).
struct GraphInput {
  TensorId id = kNoTensor;
  TensorMeta meta{};
  friend bool operator==(const GraphInput&, const GraphInput&) = default;
};

struct Batch;  // below: a graph's program is a batch of commands
// A graph part's commands; the decoder refuses a command whose struct is not kInGraph
// (puts, requests, stream and event bookkeeping, graph commands themselves).
using GraphProgram = std::shared_ptr<const Batch>;

// Cross-node tokens inside a graph are unique per replay: both nodes of a pair derive the
// token of replay `replay` from the recorded one (below kGraphTokenLimit) in the same way.
// Bit 63 keeps them apart from the master's own tokens (ids, far below 2^63); 2^23 replays
// pass before a pair's token repeats, more than the pending waits a worker allows.
inline constexpr uint64_t kGraphTokenLimit = uint64_t{1} << 40;
constexpr uint64_t graph_token(uint64_t recorded, uint64_t replay) {
  return (uint64_t{1} << 63) | ((replay & ((uint64_t{1} << 23) - 1)) << 40) |
         (recorded & (kGraphTokenLimit - 1));
}

namespace cmd {

// Runs `op` on `inputs`: into a new tensor `out`, or in place into inputs.ids[0]
// (`inplace`, out == kNoTensor). Its encoding has a bound (the local-buffer path of the
// codec) while it has at most Inputs::kInline inputs.
struct RunOp {
  static constexpr CmdType kType = CmdType::RunOp;
  static constexpr bool kOnStream = true;
  static constexpr bool kInGraph = true;
  static constexpr std::string_view kName = "op";
  uint32_t stream = 0;
  OpId op = OpId::add;
  bool inplace = false;
  Inputs inputs{};
  TensorId out = kNoTensor;
  OpAttrs attrs{};
  int32_t device = -1;
  template <class S, class V>
  static void fields(S& c, V& v) {
    v("op", c.op);
    v("flags", c.inplace, c.attrs, OpFlagsRule{});
    v("inputs", c.inputs);
    v("output", c.out);
    v("attributes", c.attrs);  // all but the flags
    v("device", c.device, kDeviceRange);
  }
  friend bool operator==(const RunOp&, const RunOp&) = default;
};

// `out` is the tensor whose bytes are payload frame `payload` of the message.
struct Put {
  static constexpr CmdType kType = CmdType::Put;
  static constexpr bool kCountsBytes = true;
  static constexpr std::string_view kName = "put";
  uint32_t stream = 0;
  TensorId out = kNoTensor;
  TensorMeta meta{};  // contiguous
  uint32_t payload = 0;
  int32_t device = -1;
  template <class S, class V>
  static void fields(S& c, V& v) {
    v("output", c.out);
    v("meta", c.meta);
    v("payload frame", c.payload, PayloadRule{});
    v("device", c.device, kDeviceRange);
  }
  friend bool operator==(const Put&, const Put&) = default;
};

// Answers `request` with the bytes of `input` once `stream` gets there. With `pull` (the
// master and this worker share a host, see Attach) a host tensor's bytes stay here: the
// reply names their address, and the worker keeps them unchanged until Release{request}.
struct Get {
  static constexpr CmdType kType = CmdType::Get;
  static constexpr bool kOnStream = true;
  static constexpr bool kCountsBytes = true;
  static constexpr std::string_view kName = "get";
  uint32_t stream = 0;
  TensorId input = kNoTensor;
  uint64_t request = 0;
  bool pull = false;
  template <class S, class V>
  static void fields(S& c, V& v) {
    v("input", c.input);
    v("request", c.request);
    v("pull", c.pull);
  }
  friend bool operator==(const Get&, const Get&) = default;
};

// The master dropped its handle of `input`.
struct Free {
  static constexpr CmdType kType = CmdType::Free;
  static constexpr std::string_view kName = "free";
  uint32_t stream = 0;
  TensorId input = kNoTensor;
  template <class S, class V>
  static void fields(S& c, V& v) {
    v("input", c.input);
  }
  friend bool operator==(const Free&, const Free&) = default;
};

// A barrier over every stream; the reply carries the failures not reported before.
struct Sync {
  static constexpr CmdType kType = CmdType::Sync;
  static constexpr bool kBarrier = true;
  static constexpr std::string_view kName = "sync";
  uint32_t stream = 0;
  uint64_t request = 0;
  template <class S, class V>
  static void fields(S& c, V& v) {
    v("request", c.request);
  }
  friend bool operator==(const Sync&, const Sync&) = default;
};

// A barrier over every stream; the reply carries `device`'s memory figures.
struct Stats {
  static constexpr CmdType kType = CmdType::Stats;
  static constexpr bool kBarrier = true;
  static constexpr std::string_view kName = "stats";
  uint32_t stream = 0;
  uint64_t request = 0;
  int32_t device = -1;
  template <class S, class V>
  static void fields(S& c, V& v) {
    v("request", c.request);
    v("device", c.device, kDeviceRange);
  }
  friend bool operator==(const Stats&, const Stats&) = default;
};

// Makes (drops) stream `stream`.
struct CreateStream {
  static constexpr CmdType kType = CmdType::CreateStream;
  static constexpr std::string_view kName = "create_stream";
  uint32_t stream = 0;
  template <class S, class V>
  static void fields(S&, V&) {}
  friend bool operator==(const CreateStream&, const CreateStream&) = default;
};
struct DestroyStream {
  static constexpr CmdType kType = CmdType::DestroyStream;
  static constexpr std::string_view kName = "destroy_stream";
  uint32_t stream = 0;
  template <class S, class V>
  static void fields(S&, V&) {}
  friend bool operator==(const DestroyStream&, const DestroyStream&) = default;
};

// The event's next record, at this point of `stream` (with its time when `timing`).
struct Record {
  static constexpr CmdType kType = CmdType::Record;
  static constexpr bool kOnStream = true;
  static constexpr bool kInGraph = true;
  static constexpr std::string_view kName = "record_event";
  uint32_t stream = 0;
  uint64_t event = 0;
  bool timing = false;
  template <class S, class V>
  static void fields(S& c, V& v) {
    v("event", c.event);
    v("timing flag", c.timing);
  }
  friend bool operator==(const Record&, const Record&) = default;
};

// `stream` waits for the event's latest record (this node).
struct WaitEvent {
  static constexpr CmdType kType = CmdType::WaitEvent;
  static constexpr bool kOnStream = true;
  static constexpr bool kInGraph = true;
  static constexpr std::string_view kName = "wait_event";
  uint32_t stream = 0;
  uint64_t event = 0;
  template <class S, class V>
  static void fields(S& c, V& v) {
    v("event", c.event);
  }
  friend bool operator==(const WaitEvent&, const WaitEvent&) = default;
};

// When the event's latest record completes, tell node `peer` that `token` is done.
struct NotifyPeer {
  static constexpr CmdType kType = CmdType::NotifyPeer;
  static constexpr bool kTraced = false;  // drawn when it notifies
  static constexpr bool kInGraph = true;
  static constexpr std::string_view kName = "notify_peer";
  uint32_t stream = 0;
  uint64_t event = 0;
  uint32_t peer = 0;
  uint64_t token = 0;
  template <class S, class V>
  static void fields(S& c, V& v) {
    v("event", c.event);
    v("peer", c.peer, Range{0, static_cast<int64_t>(kMaxNodes) - 1});
    v("token", c.token);
  }
  friend bool operator==(const NotifyPeer&, const NotifyPeer&) = default;
};

// `stream` waits for node `peer`'s notification of `token`.
struct WaitRemote {
  static constexpr CmdType kType = CmdType::WaitRemote;
  static constexpr bool kOnStream = true;
  static constexpr bool kInGraph = true;
  static constexpr std::string_view kName = "wait_event";
  uint32_t stream = 0;
  uint32_t peer = 0;
  uint64_t token = 0;
  template <class S, class V>
  static void fields(S& c, V& v) {
    v("peer", c.peer, Range{0, static_cast<int64_t>(kMaxNodes) - 1});
    v("token", c.token);
  }
  friend bool operator==(const WaitRemote&, const WaitRemote&) = default;
};

// Answers `request`: whether the event's latest record is done (EventQuery), or once it
// is (EventSync).
struct EventQuery {
  static constexpr CmdType kType = CmdType::EventQuery;
  static constexpr std::string_view kName = "query_event";
  uint32_t stream = 0;
  uint64_t event = 0;
  uint64_t request = 0;
  template <class S, class V>
  static void fields(S& c, V& v) {
    v("event", c.event);
    v("request", c.request);
  }
  friend bool operator==(const EventQuery&, const EventQuery&) = default;
};
struct EventSync {
  static constexpr CmdType kType = CmdType::EventSync;
  static constexpr std::string_view kName = "synchronize_event";
  uint32_t stream = 0;
  uint64_t event = 0;
  uint64_t request = 0;
  template <class S, class V>
  static void fields(S& c, V& v) {
    v("event", c.event);
    v("request", c.request);
  }
  friend bool operator==(const EventSync&, const EventSync&) = default;
};

struct DestroyEvent {
  static constexpr CmdType kType = CmdType::DestroyEvent;
  static constexpr std::string_view kName = "destroy_event";
  uint32_t stream = 0;
  uint64_t event = 0;
  template <class S, class V>
  static void fields(S& c, V& v) {
    v("event", c.event);
  }
  friend bool operator==(const DestroyEvent&, const DestroyEvent&) = default;
};

// When `stream` gets there, send the bytes of `input` to node `peer` under `token`
// (worker to worker).
struct SendPeer {
  static constexpr CmdType kType = CmdType::SendPeer;
  static constexpr bool kOnStream = true;
  static constexpr bool kCountsBytes = true;
  static constexpr bool kInGraph = true;
  static constexpr std::string_view kName = "send_to_node";
  uint32_t stream = 0;
  TensorId input = kNoTensor;
  uint32_t peer = 0;
  uint64_t token = 0;
  // Both nodes share the master's host: the bytes may stay here for the peer to read
  // (common/same_host.hpp; PeerNotify's bytes at an address).
  bool by_address = false;
  template <class S, class V>
  static void fields(S& c, V& v) {
    v("input", c.input);
    v("peer", c.peer, Range{0, static_cast<int64_t>(kMaxNodes) - 1});
    v("token", c.token);
    v("by address", c.by_address);
  }
  friend bool operator==(const SendPeer&, const SendPeer&) = default;
};

// `out` (of `meta`, on `device`) is the tensor node `peer` sends under `token`; `stream`
// waits for it.
struct RecvPeer {
  static constexpr CmdType kType = CmdType::RecvPeer;
  static constexpr bool kOnStream = true;
  static constexpr bool kCountsBytes = true;
  static constexpr bool kInGraph = true;
  static constexpr std::string_view kName = "recv_from_node";
  uint32_t stream = 0;
  TensorId out = kNoTensor;
  TensorMeta meta{};  // contiguous
  uint32_t peer = 0;
  uint64_t token = 0;
  int32_t device = -1;
  template <class S, class V>
  static void fields(S& c, V& v) {
    v("output", c.out);
    v("meta", c.meta);
    v("peer", c.peer, Range{0, static_cast<int64_t>(kMaxNodes) - 1});
    v("token", c.token);
    v("device", c.device, kDeviceRange);
  }
  friend bool operator==(const RecvPeer&, const RecvPeer&) = default;
};

// Group `group` of the session's process group, of `ranks` (every node gets it, in the
// same order).
struct NewGroup {
  static constexpr CmdType kType = CmdType::NewGroup;
  static constexpr std::string_view kName = "new_group";
  uint32_t stream = 0;
  uint64_t group = 0;
  std::vector<uint32_t> ranks{};
  template <class S, class V>
  static void fields(S& c, V& v) {
    v("group", c.group);
    v("ranks", c.ranks, Limit{kMaxNodes});
  }
  friend bool operator==(const NewGroup&, const NewGroup&) = default;
};

// A collective of `group` (0: the session's whole process group) on `input`; AllGather
// and ReduceScatter make `out` of `meta`, the others write `input` in place (out 0).
struct Collective {
  static constexpr CmdType kType = CmdType::Collective;
  static constexpr bool kOnStream = true;
  static constexpr bool kCountsBytes = true;
  static constexpr bool kInGraph = true;
  static constexpr std::string_view kName = "collective";
  uint32_t stream = 0;
  uint64_t group = 0;
  CollectiveKind kind = CollectiveKind::AllReduce;
  ReduceOp reduce_op = ReduceOp::Sum;
  int32_t root = 0;  // rank within the group
  TensorId input = kNoTensor;
  TensorId out = kNoTensor;
  TensorMeta meta{};
  int32_t device = -1;
  template <class S, class V>
  static void fields(S& c, V& v) {
    v("group", c.group);
    v("kind", c.kind, Range{1, 4});
    v("reduce op", c.reduce_op, Range{0, 4});
    v("root", c.root, Range{0, static_cast<int64_t>(kMaxNodes) - 1});
    v("input", c.input);
    v("output", c.out);
    v("meta", c.meta);
    v("device", c.device, kDeviceRange);
  }
  bool makes_tensor() const {
    return kind == CollectiveKind::AllGather || kind == CollectiveKind::ReduceScatter;
  }
  friend bool operator==(const Collective&, const Collective&) = default;
};

// `out` is a copy of `input` on `device`.
struct ToDevice {
  static constexpr CmdType kType = CmdType::ToDevice;
  static constexpr bool kOnStream = true;
  static constexpr bool kCountsBytes = true;
  static constexpr bool kInGraph = true;
  static constexpr std::string_view kName = "to_device";
  uint32_t stream = 0;
  TensorId input = kNoTensor;
  TensorId out = kNoTensor;
  int32_t device = -1;
  template <class S, class V>
  static void fields(S& c, V& v) {
    v("input", c.input);
    v("output", c.out);
    v("device", c.device, kDeviceRange);
  }
  friend bool operator==(const ToDevice&, const ToDevice&) = default;
};

// The master lost `node` (silent for its heartbeat timeout, its connection closed, or it
// ended the session): for this worker it is gone too. Waits for it (copies, cross-node
// event waits) fail, the session's process groups shut down so that collectives blocked on
// it fail at once, and later commands naming it fail: one liveness rule for a session.
struct NodeLost {
  static constexpr CmdType kType = CmdType::NodeLost;
  static constexpr std::string_view kName = "node_lost";
  uint32_t stream = 0;
  uint32_t node = 0;
  template <class S, class V>
  static void fields(S& c, V& v) {
    v("node", c.node, Range{0, static_cast<int64_t>(kMaxNodes) - 1});
  }
  friend bool operator==(const NodeLost&, const NodeLost&) = default;
};

// The master interrupted its program (Ctrl-C at a sync point, or dtr::cancel): every op
// this worker was sent before this command and has not started does not run; its output
// (an in-place op's target) fails, naming the cancel, and synchronize() reports the cancel
// once. Ops already running finish; copies, events, collectives and graph replays run as
// queued (the other nodes wait for them). Answered at dispatch; the session goes on.
struct Cancel {
  static constexpr CmdType kType = CmdType::Cancel;
  static constexpr std::string_view kName = "cancel";
  uint32_t stream = 0;
  template <class S, class V>
  static void fields(S&, V&) {}
  friend bool operator==(const Cancel&, const Cancel&) = default;
};

// ---- observability (docs/observability.md); each is answered at dispatch, except
// Trace's Stop, which is a barrier as Sync is ----

// Answers `request` with the worker's steady clock (reply::Clock): the master measures
// each node's clock offset from the round trips.
struct ClockSync {
  static constexpr CmdType kType = CmdType::ClockSync;
  static constexpr bool kTraced = false;
  static constexpr std::string_view kName = "clock_sync";
  uint32_t stream = 0;
  uint64_t request = 0;
  template <class S, class V>
  static void fields(S& c, V& v) {
    v("request", c.request);
  }
  friend bool operator==(const ClockSync&, const ClockSync&) = default;
};

// Starts, stops or collects the worker's timeline; answers `request` with a TraceChunk.
struct Trace {
  static constexpr CmdType kType = CmdType::Trace;
  static constexpr bool kBarrier = true;  // its Stop (Start and Collect are answered at dispatch)
  static constexpr bool kTraced = false;
  static constexpr std::string_view kName = "trace";
  uint32_t stream = 0;
  TraceAction action = TraceAction::Start;
  uint64_t request = 0;
  template <class S, class V>
  static void fields(S& c, V& v) {
    v("action", c.action, Range{1, 3});
    v("request", c.request);
  }
  friend bool operator==(const Trace&, const Trace&) = default;
};

// Answers `request` with the worker's flight recorder (its last commands and their state).
struct FlightDump {
  static constexpr CmdType kType = CmdType::FlightDump;
  static constexpr bool kTraced = false;
  static constexpr std::string_view kName = "flight_dump";
  uint32_t stream = 0;
  uint64_t request = 0;
  template <class S, class V>
  static void fields(S& c, V& v) {
    v("request", c.request);
  }
  friend bool operator==(const FlightDump&, const FlightDump&) = default;
};

// Answers `request` with the worker's live figures (NodeMetrics).
struct Metrics {
  static constexpr CmdType kType = CmdType::Metrics;
  static constexpr bool kTraced = false;
  static constexpr std::string_view kName = "metrics";
  uint32_t stream = 0;
  uint64_t request = 0;
  template <class S, class V>
  static void fields(S& c, V& v) {
    v("request", c.request);
  }
  friend bool operator==(const Metrics&, const Metrics&) = default;
};

// Same-host payloads (common/same_host.hpp). Attach (26): the master (process `pid`)
// holds the worker's challenge (HelloReply::challenge) at `address`; the worker answers
// `request`: done when it found it there, with the address where it now holds the
// master's `challenge` (reply::Attach::address), else why not (its message). Only after a
// done does the master send PutFrom or pulled Gets.
struct Attach {
  static constexpr CmdType kType = CmdType::Attach;
  static constexpr bool kTraced = false;
  static constexpr std::string_view kName = "attach";
  uint32_t stream = 0;
  uint64_t request = 0;
  uint32_t pid = 0;
  uint64_t address = 0;
  uint64_t challenge = 0;
  template <class S, class V>
  static void fields(S& c, V& v) {
    v("request", c.request);
    v("pid", c.pid, Range{1, kMaxPid});
    v("address", c.address);
    v("challenge", c.challenge);
  }
  friend bool operator==(const Attach&, const Attach&) = default;
};

// Put by address (27): `out` is the contiguous tensor whose bytes the worker reads from
// the attached master's memory at `address` (the master keeps them unchanged until a
// later request of it is answered).
struct PutFrom {
  static constexpr CmdType kType = CmdType::PutFrom;
  static constexpr bool kOnStream = true;  // its bytes count as a Put's
  static constexpr std::string_view kName = "put_from";
  uint32_t stream = 0;
  TensorId out = kNoTensor;
  TensorMeta meta{};  // contiguous
  uint64_t address = 0;
  int32_t device = -1;
  template <class S, class V>
  static void fields(S& c, V& v) {
    v("output", c.out);
    v("meta", c.meta);
    v("address", c.address);
    v("device", c.device, kDeviceRange);
  }
  friend bool operator==(const PutFrom&, const PutFrom&) = default;
};

// The master has read the bytes a pulled Get (`request`) left here (28).
struct Release {
  static constexpr CmdType kType = CmdType::Release;
  static constexpr bool kTraced = false;
  static constexpr std::string_view kName = "release";
  uint32_t stream = 0;
  uint64_t request = 0;
  template <class S, class V>
  static void fields(S& c, V& v) {
    v("request", c.request);
  }
  friend bool operator==(const Release&, const Release&) = default;
};

// Node's part `graph` of a captured graph (40): `program` is the part's commands in the
// order the master issued them; `inputs` the tensors they read that exist already (each
// with its metadata, which the worker checks); `outputs` the tensors the program makes that
// the master still holds handles of (bound to their ids on this worker, read like any
// tensor; the other tensors the program makes live inside the graph). The worker checks
// the program once, here; the graph holds its streams, events and input tensors.
struct GraphUpload {
  static constexpr CmdType kType = CmdType::GraphUpload;
  static constexpr std::string_view kName = "upload_graph";
  uint32_t stream = 0;
  uint64_t graph = 0;
  std::vector<TensorId> outputs{};
  std::vector<GraphInput> inputs{};
  GraphProgram program{};
  template <class S, class V>
  static void fields(S& c, V& v) {
    v("graph", c.graph);
    v("outputs", c.outputs, Limit{kMaxGraphTensors});
    v("inputs", c.inputs, Limit{kMaxGraphTensors});
    v("program", c.program, Limit{kMaxCommandsPerBatch});
  }
};
// Programs compare by their commands (defined below Batch).
inline bool operator==(const GraphUpload& a, const GraphUpload& b);

// Replay number `replay` (1, 2, ... in order) of graph `graph` (41): its program runs again
// on this node, each command on its stream.
struct GraphReplay {
  static constexpr CmdType kType = CmdType::GraphReplay;
  static constexpr bool kOnStream = true;  // one task per part, on the part's stream
  static constexpr std::string_view kName = "replay_graph";
  uint32_t stream = 0;
  uint64_t graph = 0;
  uint64_t replay = 0;
  template <class S, class V>
  static void fields(S& c, V& v) {
    v("graph", c.graph);
    v("replay", c.replay);
  }
  friend bool operator==(const GraphReplay&, const GraphReplay&) = default;
};

// The master dropped graph `graph` (42): its tensors go once its replays have run.
struct GraphFree {
  static constexpr CmdType kType = CmdType::GraphFree;
  static constexpr std::string_view kName = "free_graph";
  uint32_t stream = 0;
  uint64_t graph = 0;
  template <class S, class V>
  static void fields(S& c, V& v) {
    v("graph", c.graph);
  }
  friend bool operator==(const GraphFree&, const GraphFree&) = default;
};

}  // namespace cmd

// The facts of command struct C (see the opening comment), with their defaults for a
// struct that does not state them.
template <class C>
inline constexpr bool in_graph_v = [] {
  if constexpr (requires { C::kInGraph; })
    return C::kInGraph;
  else
    return false;
}();
template <class C>
inline constexpr bool on_stream_v = [] {
  if constexpr (requires { C::kOnStream; })
    return C::kOnStream;
  else
    return false;
}();
template <class C>
inline constexpr bool barrier_v = [] {
  if constexpr (requires { C::kBarrier; })
    return C::kBarrier;
  else
    return false;
}();
template <class C>
inline constexpr bool counts_bytes_v = [] {
  if constexpr (requires { C::kCountsBytes; })
    return C::kCountsBytes;
  else
    return false;
}();
template <class C>
inline constexpr bool traced_v = [] {
  if constexpr (requires { C::kTraced; })
    return C::kTraced;
  else
    return true;
}();
// Done (or answered) by its handler on the worker's dispatch thread.
template <class C>
inline constexpr bool at_dispatch_v = !on_stream_v<C> && !barrier_v<C>;

// The tensors a command reads, in order (an in-place op's target first), generic over the
// structs: a RunOp's inputs, or an `input` field.
template <class C, class F>
void for_each_command_input(const C& c, F&& f) {
  if constexpr (requires { c.inputs.n; }) {
    for (size_t i = 0; i < c.inputs.n; ++i) f(c.inputs.ids[i]);
  } else if constexpr (requires { c.input; }) {
    f(c.input);
  }
}
// The tensor a command makes: `out`, unless it writes in place (kNoTensor when none).
template <class C>
TensorId command_output(const C& c) {
  if constexpr (requires { c.inplace; })
    return c.inplace ? kNoTensor : c.out;
  else if constexpr (requires { c.makes_tensor(); })
    return c.makes_tensor() ? c.out : kNoTensor;
  else if constexpr (requires { c.out; })
    return c.out;
  else
    return kNoTensor;
}

using Command =
    std::variant<cmd::RunOp, cmd::Put, cmd::Get, cmd::Free, cmd::Sync, cmd::Stats,
                 cmd::CreateStream, cmd::DestroyStream, cmd::Record, cmd::WaitEvent,
                 cmd::NotifyPeer, cmd::WaitRemote, cmd::EventQuery, cmd::EventSync,
                 cmd::DestroyEvent, cmd::SendPeer, cmd::RecvPeer, cmd::NewGroup, cmd::Collective,
                 cmd::ToDevice, cmd::NodeLost, cmd::ClockSync, cmd::Trace, cmd::FlightDump,
                 cmd::Metrics, cmd::Attach, cmd::PutFrom, cmd::Release, cmd::GraphUpload,
                 cmd::GraphReplay, cmd::GraphFree, cmd::Cancel>;

// The facts agree with each other, for every command: a barrier is not also one stream's
// task, and it names the request its reply answers.
template <class... C>
constexpr bool facts_agree(const std::variant<C...>*) {
  return ((!(on_stream_v<C> && barrier_v<C>)) && ...) &&
         ((!barrier_v<C> || requires(const C& c) { c.request; }) && ...);
}
static_assert(facts_agree(static_cast<const Command*>(nullptr)),
              "a command is both kOnStream and kBarrier, or a barrier without a request");

// The command's wire code, stream, and the name errors use (a RunOp's op name).
CmdType command_type(const Command& c);
uint32_t command_stream(const Command& c);
std::string_view command_name(const Command& c);
// The name of the command type with wire code `code` ("op" for RunOp); "" for none.
std::string_view command_type_name(uint8_t code);
// The same, unique per type (metrics label them): WaitRemote, which errors call
// "wait_event" as WaitEvent, is "wait_remote".
std::string_view command_type_label(uint8_t code);

struct Batch {
  std::vector<Command> commands;
  friend bool operator==(const Batch&, const Batch&) = default;
};

inline bool cmd::operator==(const cmd::GraphUpload& a, const cmd::GraphUpload& b) {
  auto program_equal = [](const GraphProgram& x, const GraphProgram& y) {
    if (!x || !y) return (!x || x->commands.empty()) && (!y || y->commands.empty());
    return *x == *y;
  };
  return a.stream == b.stream && a.graph == b.graph && a.outputs == b.outputs &&
         a.inputs == b.inputs && program_equal(a.program, b.program);
}

}  // namespace dtr::protocol
