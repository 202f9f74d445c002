// Multipart framing over ZeroMQ sockets: receiving a whole message with a frame limit,
// sending a header frame plus tensor payloads zero-copy, and tuning sockets and the
// allocator for large transfers.
//
// Thread safety: a zmq socket belongs to one thread at a time; these functions add no
// locking of their own.
#pragma once

#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>
#include <zmq.hpp>

#include "dtr/tensor.hpp"

namespace dtr::protocol {

// Receives one whole multipart message without blocking; nullopt when none is waiting (or
// a signal interrupted the look: call again).
// Frames past `max_frames` are read and dropped, and `truncated` set, so one bad message
// never leaves the socket mid-message.
struct Received {
  std::vector<zmq::message_t> frames;
  bool truncated = false;
};
std::optional<Received> try_recv(zmq::socket_t& socket, size_t max_frames);

// Sends [identity] header payload... ; payload bytes are handed to ZeroMQ without a copy
// and the tensors' storage is kept alive until ZeroMQ is done with it. Payload tensors
// must be contiguous and must not be written until the peer has them. Returns false
// when the peer is unreachable (ROUTER with ZMQ_ROUTER_MANDATORY) or the send would block.
bool send_message(zmq::socket_t& socket, const std::string* identity, std::string header,
                  std::span<const local::Tensor> payloads);

// The high-water mark (messages) of the queues of a master-worker data connection: the
// master's sending side and the worker's receiving side. With the kernel's buffers between
// them they bound what a master that never waits has in flight to a node; past them the
// master keeps its batch and holds callers at its backpressure limit.
inline constexpr int kDataHighWaterMark = 16;

// What try_send() did.
enum class SendResult {
  kSent,
  kWouldBlock,   // the peer's queue is at its high-water mark: nothing was sent
  kUnreachable,  // ROUTER (ZMQ_ROUTER_MANDATORY): no connection with that identity
};

// send_message() that never blocks: the first frame goes with ZMQ_DONTWAIT, and when the
// peer's queue is full nothing is sent (the rest of a message can never be refused once
// its first frame is in). The header is shared, so that the caller keeps it for a later
// try.
SendResult try_send(zmq::socket_t& socket, const std::string* identity,
                    const std::shared_ptr<const std::string>& header,
                    std::span<const local::Tensor> payloads);

// Why `endpoint` is not one dtr can use, or nullopt: tcp://HOST:PORT (PORT 1 to 65535, or
// `*` with `bind`: a port the kernel picks; HOST may be `*` with `bind`) or ipc://PATH.
// The text names what was given ("expected tcp://HOST:PORT or ipc://PATH, got ...").
std::optional<std::string> endpoint_problem(std::string_view endpoint, bool bind);

// Why binding failed, from ZeroMQ's errno: its text, and what it means for a listen
// endpoint where that is not plain ("No such device": the host is not an address of this
// machine or an interface name; the port is taken; a port below 1024 needs privileges).
std::string bind_failure(int err);

// `list` split at commas, each item trimmed of white space; empty items are dropped.
std::vector<std::string> split_endpoints(std::string_view list);

// A random 128-bit routing id (never starting with a zero byte, which ZeroMQ reserves): a
// ROUTER hands a connection's session over to a client presenting the same id, so ids of
// dtr's connections must not be guessable.
std::string random_routing_id();

// The routing id of the heartbeat connection that goes with the data connection whose
// routing id is `data_id`. Master and worker exchange heartbeats on a connection of their
// own (the same endpoint, a second ZeroMQ socket), so that a large message in flight on
// the data connection never delays them: liveness does not depend on message size.
std::string beat_identity(const std::string& data_id);

// A frame's bytes as shared memory that outlives the message object.
std::shared_ptr<zmq::message_t> share_frame(zmq::message_t&& frame);

// Socket options common to every dtr socket: no linger on close, bounded message size,
// TCP keepalive, no send high-water drop.
void configure_socket(zmq::socket_t& socket, int64_t max_message_bytes);

// Keeps large freed blocks in the heap so that received 64 MiB buffers are reused instead
// of page-faulted in on every message (glibc mallopt). Call once at process start.
void tune_allocator_for_large_messages();
// The milder setting of a process that runs process groups (their frames are at most
// 256 KiB): blocks under 1 MiB come from the heap, which keeps up to 64 MiB free at its top
// (glibc's M_MMAP_THRESHOLD and M_TRIM_THRESHOLD). Once per process; nothing after
// tune_allocator_for_large_messages(), or with DTR_TUNE_MALLOC=0.
void tune_allocator_for_frames();

}  // namespace dtr::protocol
