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
inline constexpr uint16_t kVersion = 4;

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

// The session ends. From the master: it is over. From a worker: the worker ended it (or
// had ended it when a message of it arrived), `reason` says why ("master silent for more
// than 2500 ms"). An empty reason has no body on the wire.
struct Goodbye {
  std::string reason;
};

// Worker to worker: `token` is done. For a cross-node wait (NotifyPeer / WaitRemote) the
// event's record has run; for a copy (SendPeer / RecvPeer) the message carries the tensor's
// bytes in frame 1, or `failed` and why the source tensor could not be sent.
struct PeerNotify {
  uint64_t session = 0;
  uint32_t from_node = 0;
  uint64_t token = 0;
  bool failed = false;
  RemoteFailure failure;  // when failed
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

enum class ReplyType : uint8_t { Get = 1, Sync = 2, Stats = 3, ProtocolError = 4, Event = 5 };

//   Get            request, meta (of the payload in frame 1) or failures[0]
//   Sync           request, failures not reported before (in order)
//   Stats          request, stats
//   ProtocolError  request (0 when the message had none), message
//   Event          request, done, time_ns (steady clock of the worker, when recorded with
//                  timing), failures[0] when the stream had failed before the record
struct Reply {
  ReplyType type = ReplyType::Sync;
  uint64_t request = 0;
  TensorMeta meta;
  std::vector<RemoteFailure> failures;
  MemoryStatsWire stats;
  std::string message;
  bool done = false;
  int64_t time_ns = 0;
};

}  // namespace dtr::protocol
