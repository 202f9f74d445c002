// libFuzzer target: every header-frame decoder of protocol/codec.hpp (the worker's:
// decode_hello, decode_setup, decode_goodbye, decode_peer_notify, decode_batch; the
// master's: decode_reply, decode_hello_reply, decode_goodbye) and peek_type, on the same
// frame.
//
// Input layout: byte 0 chooses the payload-frame count passed to decode_batch and
// decode_reply (low 3 bits: 0..7; 0xFF: one more than kMaxPayloadFrames); the rest is the
// frame.
//
// When a decoder accepts the frame, the harness checks that the value is stable: encoding
// it, decoding that and encoding again gives the same bytes; that peek_type agrees with the
// decoder; and, for a batch, that a reused BatchWriter encodes it the same way again. A
// mismatch aborts (a finding), as does a crash, a sanitizer report or an exception other
// than dtr::ProtocolError.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "dtr/error.hpp"
#include "protocol/codec.hpp"
#include "protocol/messages.hpp"

namespace {

using namespace dtr;
using namespace dtr::protocol;

[[noreturn]] void finding(const char* what, const std::string& detail = {}) {
  std::fprintf(stderr, "fuzz_codec: FINDING: %s %s\n", what, detail.c_str());
  std::fflush(stderr);
  std::abort();
}

void check_type(std::string_view frame, MsgType want, const char* name) {
  MsgType got;
  try {
    got = peek_type(frame);
  } catch (const ProtocolError& e) {
    finding(name, std::string("decoded, but peek_type rejects it: ") + e.what());
  }
  if (got != want) finding(name, "decoded, but peek_type names another type");
}

// decode(frame) succeeded with `first`: re-encode, decode, re-encode; the bytes must agree.
template <typename Decode>
void check_stable(const char* name, const std::string& first, Decode decode) {
  std::string second;
  try {
    second = encode(decode(first));
  } catch (const ProtocolError& e) {
    finding(name, std::string("the re-encoded message does not decode: ") + e.what());
  }
  if (first != second) finding(name, "round trip is not stable");
}

template <typename Decode>
void try_decoder(std::string_view frame, const char* name, MsgType type, Decode decode) {
  std::string first;
  try {
    first = encode(decode(frame));
  } catch (const ProtocolError&) {
    return;  // rejected: expected for most inputs
  }
  check_type(frame, type, name);
  check_stable(name, first, decode);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const size_t payloads = data[0] == 0xFF ? kMaxPayloadFrames + 1 : (data[0] & 7);
  std::string_view frame(reinterpret_cast<const char*>(data) + 1, size - 1);

  try {
    (void)peek_type(frame);
  } catch (const ProtocolError&) {
  }

  try_decoder(frame, "hello", MsgType::Hello, [](std::string_view f) { return decode_hello(f); });
  try_decoder(frame, "hello_reply", MsgType::HelloReply,
              [](std::string_view f) { return decode_hello_reply(f); });
  try_decoder(frame, "setup", MsgType::Setup, [](std::string_view f) { return decode_setup(f); });
  try_decoder(frame, "goodbye", MsgType::Goodbye,
              [](std::string_view f) { return decode_goodbye(f); });
  try_decoder(frame, "peer_notify", MsgType::Peer,
              [](std::string_view f) { return decode_peer_notify(f); });
  try_decoder(frame, "reply", MsgType::Reply,
              [payloads](std::string_view f) { return decode_reply(f, payloads); });
  try_decoder(frame, "batch", MsgType::Batch,
              [payloads](std::string_view f) { return decode_batch(f, payloads); });

  // The master reuses one BatchWriter: after finish() it must start from empty.
  Batch b;
  try {
    b = decode_batch(frame, payloads);
  } catch (const ProtocolError&) {
    return 0;
  }
  BatchWriter w;
  std::string once[2];
  for (std::string& out : once) {
    for (const Command& c : b.commands) w.add(c);
    if (w.count() != b.commands.size()) finding("batch", "BatchWriter miscounts");
    out = w.finish();
  }
  if (once[0] != once[1]) finding("batch", "a reused BatchWriter encodes differently");
  return 0;
}
