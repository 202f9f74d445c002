// The process-group wire format: every message is [header(64 bytes)] or
// [header, payload]. The header is a fixed little-endian POD; decode() checks every field
// before anything uses it.
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
inline constexpr uint16_t kWireVersion = 1;

enum class MsgKind : uint8_t { Hello = 1, Data = 2, Abort = 3, Goodbye = 4 };

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

// Largest Abort text accepted.
inline constexpr uint64_t kMaxAbortText = 4096;

// Checks what can be checked without context; returns "" or what is wrong.
inline std::string check_header(const WireHeader& h, uint64_t token, int world_size,
                                size_t payload_bytes) {
  if (h.magic != kWireMagic) return "bad magic";
  if (h.version != kWireVersion) return "protocol version " + std::to_string(h.version);
  if (h.token != token) return "message from another job (token mismatch)";
  if (h.kind < 1 || h.kind > 4) return "unknown message kind " + std::to_string(h.kind);
  if (h.src < 0 || h.src >= world_size) return "sender rank " + std::to_string(h.src);
  if (h.payload != payload_bytes) {
    return "header says " + std::to_string(h.payload) + " payload bytes, frame has " +
           std::to_string(payload_bytes);
  }
  if (h.op >= kNumCommOps) return "unknown op " + std::to_string(h.op);
  const auto kind = static_cast<MsgKind>(h.kind);
  if (kind == MsgKind::Data) {
    if (!is_valid_dtype(h.dtype)) return "unknown dtype " + std::to_string(h.dtype);
    if (h.count < 0) return "negative element count";
    if (h.reduce > static_cast<uint8_t>(ReduceOp::Avg)) return "unknown reduce op";
  }
  if (kind == MsgKind::Abort && h.payload > kMaxAbortText) return "abort text too long";
  if (kind != MsgKind::Data && kind != MsgKind::Abort && h.payload != 0) {
    return "unexpected payload";
  }
  return "";
}

}  // namespace dtr::pg
