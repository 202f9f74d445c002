// The process-group wire format: every message is [header(64 bytes)] followed by its
// payload, if any, cut into frames of kMaxFrameBytes (the last one shorter). The header is
// a fixed little-endian POD; check_header() and check_frames() check every field and every
// frame's size before anything uses them.
//
// Version 2 added the point-to-point payload by address between ranks on one host: DataAt
// is a Data message of a send whose payload is an AddressPayload (where the tensor's bytes
// lie in the sender, and the offer's id) instead of the bytes; the receiver reads them
// from the sender's process (whose pid the group's same-host agreement proved) and answers
// Released (seq: the offer's id), after which the sender lets the tensor go.
//
// Version 3 added Ring (no payload): the sender has written records to the receiver's
// shared-memory point-to-point ring (pg/zmq/p2p_ring.hpp) while the receiver slept; reading the
// message wakes it, and it reads its rings.
//
// Thread safety: value types and pure functions.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>

#include "dtr/dtype.hpp"
#include "dtr/process_group.hpp"

namespace dtr::pg {

inline constexpr uint32_t kWireMagic = 0x47505444;  // "DTPG"
inline constexpr uint16_t kWireVersion = 3;

enum class MsgKind : uint8_t {
  Hello = 1,
  Data = 2,
  Abort = 3,
  Goodbye = 4,
  DataAt = 5,
  Released = 6,
  Ring = 7
};

// Error classes carried by an Abort so that every rank throws the same type.
enum class ErrCode : uint8_t {
  Error = 0,
  InvalidArgument = 1,
  Shape = 2,
  DType = 3,
  Transport = 4,
  Timeout = 5,
  Protocol = 6
};

struct WireHeader {
  uint32_t magic = kWireMagic;
  uint16_t version = kWireVersion;
  uint8_t kind = 0;  // MsgKind
  uint8_t op = 0;    // CommOp
  uint64_t token = 0;
  uint64_t group = 0;
  uint64_t seq = 0;      // collective sequence number, or the p2p tag
  int64_t count = 0;     // collective: elements per rank; p2p: elements
  uint64_t payload = 0;  // bytes in frame 2
  int32_t src = 0;       // world rank of the sender
  int32_t root = 0;
  uint8_t dtype = 0;
  uint8_t reduce = 0;  // ReduceOp, or ErrCode for Abort
  uint16_t reserved = 0;
  uint32_t step = 0;
};
static_assert(sizeof(WireHeader) == 64);

// The payload of a DataAt message.
struct AddressPayload {
  uint64_t address = 0;  // the tensor's first byte in the sender's process
  uint64_t offer = 0;    // the sender's id of this offer, echoed by Released
};
static_assert(sizeof(AddressPayload) == 16);

// Largest Abort text accepted.
inline constexpr uint64_t kMaxAbortText = 4096;

// Largest frame a rank sends and accepts (with kFrameSlackBytes, ZMQ_MAXMSGSIZE of the
// mesh's ROUTER): payloads travel in frames of this size, the last one shorter. Collectives send
// segments of at most this size anyway; point-to-point payloads are cut into several frames of one
// message.
inline constexpr uint64_t kMaxFrameBytes = 256 << 10;
// What the ROUTER's ZMQ_MAXMSGSIZE adds to that: ZeroMQ checks the frame as it travels, and
// a security mechanism wraps each one (CURVE: 33 bytes).
inline constexpr uint64_t kFrameSlackBytes = 1024;
// What a mesh DEALER accepts: it receives nothing but ZeroMQ's own handshake and heartbeat
// commands (tens to a few hundred bytes).
inline constexpr uint64_t kMaxControlFrameBytes = 4096;
static_assert(kMaxFrameBytes >= kMaxAbortText && kMaxFrameBytes >= sizeof(WireHeader));
static_assert(kMaxFrameBytes % 8 == 0, "frames hold whole elements of every dtype");

// How many payload frames carry `bytes` bytes (0 for none).
inline constexpr uint64_t frames_for(uint64_t bytes) {
  return bytes / kMaxFrameBytes + (bytes % kMaxFrameBytes != 0 ? 1 : 0);
}
// The size payload frame `i` (from 0) of a `bytes`-byte payload must have.
inline constexpr uint64_t frame_bytes(uint64_t bytes, uint64_t i) {
  const uint64_t begin = i * kMaxFrameBytes;
  return bytes - begin < kMaxFrameBytes ? bytes - begin : kMaxFrameBytes;
}

// Checks the payload frames against the header's payload size: `frames` of them arrived
// (extra ones counted but not kept), frame i of size_of(i) bytes. Returns "" or what is
// wrong, with the expected and the actual size.
template <typename SizeOf>
std::string check_frames(const WireHeader& h, uint64_t frames, SizeOf size_of) {
  const uint64_t want = frames_for(h.payload);
  if (frames != want) {
    return "header says " + std::to_string(h.payload) + " payload bytes (" + std::to_string(want) +
           " frames of at most " + std::to_string(kMaxFrameBytes) + " bytes), message has " +
           std::to_string(frames) + " payload frames";
  }
  for (uint64_t i = 0; i < frames; ++i) {
    const uint64_t got = size_of(i), expected = frame_bytes(h.payload, i);
    if (got != expected) {
      return "payload frame " + std::to_string(i + 1) + " of " + std::to_string(frames) + " has " +
             std::to_string(got) + " bytes, expected " + std::to_string(expected) +
             " (header says " + std::to_string(h.payload) + " payload bytes)";
    }
  }
  return "";
}

// Checks what can be checked without context; returns "" or what is wrong. The payload's
// frames are checked by check_frames().
inline std::string check_header(const WireHeader& h, uint64_t token, int world_size) {
  if (h.magic != kWireMagic) return "bad magic";
  if (h.version != kWireVersion) return "protocol version " + std::to_string(h.version);
  if (h.token != token) return "message from another job (token mismatch)";
  if (h.kind < 1 || h.kind > 7) return "unknown message kind " + std::to_string(h.kind);
  if (h.src < 0 || h.src >= world_size) return "sender rank " + std::to_string(h.src);
  if (h.op >= kNumCommOps) return "unknown op " + std::to_string(h.op);
  const auto kind = static_cast<MsgKind>(h.kind);
  if (kind == MsgKind::DataAt) {
    if (h.op != static_cast<uint8_t>(CommOp::Send)) return "a payload by address outside a send";
    if (h.payload != sizeof(AddressPayload)) {
      return "payload by address of " + std::to_string(h.payload) + " bytes (expected " +
             std::to_string(sizeof(AddressPayload)) + ")";
    }
  }
  if (kind == MsgKind::Data || kind == MsgKind::DataAt) {
    if (!is_valid_dtype(h.dtype)) return "unknown dtype " + std::to_string(h.dtype);
    if (h.count < 0) return "negative element count";
    if (h.reduce > static_cast<uint8_t>(ReduceOp::Avg)) return "unknown reduce op";
  }
  if (kind == MsgKind::Abort && h.payload > kMaxAbortText) {
    return "abort text of " + std::to_string(h.payload) + " bytes (at most " +
           std::to_string(kMaxAbortText) + ")";
  }
  if (kind != MsgKind::Data && kind != MsgKind::DataAt && kind != MsgKind::Abort &&
      h.payload != 0) {
    return "unexpected payload of " + std::to_string(h.payload) + " bytes in a message of kind " +
           std::to_string(h.kind) + " (expected none)";
  }
  return "";
}

}  // namespace dtr::pg
