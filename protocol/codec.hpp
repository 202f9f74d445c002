// Encoding and decoding of header frames. The only code that knows the byte layout.
//
// Layout of frame 0: magic (u32 LE) | version (u16 LE) | type (u8) | reserved (u8) |
// Cereal body in the portable-binary layout (protocol/archive.hpp). A batch's body is a
// u32 count, then per command its type (u8), stream (u32) and fields in the order its
// struct's fields() lists them (protocol/commands.hpp). Every decoder checks the prefix, every
// count against its limit and the bytes left, every enum and id field, and throws ProtocolError
// naming the message, the field and the bad value; nothing is allocated from an unchecked count.
//
// Thread safety: stateless functions.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "protocol/messages.hpp"

namespace dtr::protocol {

inline constexpr size_t kPrefixBytes = 8;

std::string encode(const Hello& m);
std::string encode(const HelloReply& m);
std::string encode(const Batch& m);
std::string encode(const Reply& m);
std::string encode(const Setup& m);
std::string encode(const PeerNotify& m);
std::string encode(const Goodbye& m);
std::string encode_goodbye();  // encode(Goodbye{})
std::string encode_heartbeat();

// Reads the prefix; throws ProtocolError on a short frame, bad magic or unknown type, and
// on a version other than kVersion (for any type but Hello, whose decoder reports it).
MsgType peek_type(std::string_view frame);

Hello decode_hello(std::string_view frame);
HelloReply decode_hello_reply(std::string_view frame);
Setup decode_setup(std::string_view frame);
Goodbye decode_goodbye(std::string_view frame);
PeerNotify decode_peer_notify(std::string_view frame);
// `payload_frames` is the number of frames after the header; Put commands must reference
// one of them.
Batch decode_batch(std::string_view frame, size_t payload_frames);
Reply decode_reply(std::string_view frame, size_t payload_frames);

// Appends the encoding of one command to an encoder in progress (the master's hot path
// builds a batch incrementally).
class BatchWriter {
 public:
  BatchWriter();
  ~BatchWriter();
  BatchWriter(const BatchWriter&) = delete;
  BatchWriter& operator=(const BatchWriter&) = delete;
  void add(const Command& c);
  // The same for a RunOp (the hot path: no variant to build and visit).
  void add(const cmd::RunOp& c);
  size_t count() const { return count_; }
  size_t bytes() const;
  // The finished header frame; the writer is empty again afterwards.
  std::string finish();

 private:
  void start();
  struct Impl;
  static constexpr size_t kReserveMax = size_t{1} << 20;
  std::unique_ptr<Impl> impl_;
  size_t count_ = 0;
  size_t last_bytes_ = 0;  // the size of the last finished batch
};

}  // namespace dtr::protocol
