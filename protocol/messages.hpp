// The wire messages between a master and its workers. A message is a ZeroMQ multipart:
// frame 0 is the header (a fixed 8-byte prefix, then a Cereal portable-binary body, see
// codec.hpp), frames 1.. are raw tensor payloads referenced by index from the header.
//
//   master -> worker   Hello, Setup (node index and the session's peer table), Batch
//                      (coalesced commands, protocol/commands.hpp), Goodbye, Heartbeat
//   worker -> master   HelloReply, Reply (answers to requests, and protocol errors naming
//                      what was rejected, protocol/replies.hpp), Heartbeat, Goodbye (the
//                      worker ended the session, and why)
//   worker -> worker   Peer (event notifications for cross-node stream waits)
//
// Thread safety: plain value types.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "dtr/tensor_meta.hpp"
#include "protocol/commands.hpp"
#include "protocol/replies.hpp"

namespace dtr::protocol {

inline constexpr uint32_t kMagic = 0x31525444;  // "DTR1" in little-endian bytes
// Bump on any change of the bytes of a message (here, in commands.hpp or in replies.hpp);
// HELLO's layout (prefix + Hello) never changes. 8: replies through the generic codec.
inline constexpr uint16_t kVersion = 9;

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
  // The largest message frame this worker takes (dtr-worker --max-message-bytes, at least
  // kMinMessageBytes when accepted): ZeroMQ drops a connection that sends a larger one, so
  // the master refuses such a payload at its call site and cuts its batches below it.
  int64_t max_message_bytes = 0;
};

// The smallest --max-message-bytes a worker takes: room for any single command a master
// sends but a captured graph's upload, which the master checks against the limit itself.
inline constexpr int64_t kMinMessageBytes = int64_t{64} << 10;

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

}  // namespace dtr::protocol
