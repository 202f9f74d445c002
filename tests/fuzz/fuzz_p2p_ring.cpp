// libFuzzer target: the reader of a same-host point-to-point ring (pg/zmq/p2p_ring.hpp,
// RingFile::drain), on whatever a broken or hostile peer process could leave in the ring it
// writes, and the writer (RingFile::push) after that peer overwrote the ring's tail.
//
// Input layout: byte 0 the number of valid records written and read first (low 6 bits;
// they move the read position round the ring), byte 1 their payload size in 256-byte units,
// bytes 2-9 the published head as an offset from the read position (little-endian; values
// past the ring's size and "negative" ones, bit 63 set, included), byte 10 flags (bit 0: the
// reader's check refuses records whose payload starts with 0xEE; bit 1: then overwrite the
// tail with bytes 11-18 and write one more record), then the raw bytes, written at the read
// position.
//
// Checked: drain() returns -1 (and never reads that ring again), or the number of records,
// each of them within the ring and of the size its header says; push() after a corrupt tail
// either writes or throws dtr::ProtocolError. A crash, a sanitizer report, another exception
// or a broken check aborts (a finding).
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "dtr/error.hpp"
#include "pg/zmq/p2p_ring.hpp"

namespace {

using namespace dtr;
using namespace dtr::pg;

[[noreturn]] void finding(const char* what, const std::string& detail = {}) {
  std::fprintf(stderr, "fuzz_p2p_ring: FINDING: %s %s\n", what, detail.c_str());
  std::fflush(stderr);
  std::abort();
}

uint64_t le64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

struct Pair {
  std::shared_ptr<shm::RingFile> writer, reader;
};

Pair make_pair() {
  std::string why;
  Pair p{shm::RingFile::create(2, 0, &why), shm::RingFile::create(2, 1, &why)};
  if (!p.writer || !p.reader) finding("create", why);
  if (!p.writer->map_peer(1, getpid(), p.reader->fd(), &why) ||
      !p.reader->map_peer(0, getpid(), p.writer->fd(), &why)) {
    finding("map_peer", why);
  }
  return p;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 11) return 0;
  Pair p = make_pair();
  // Valid records first: the read position ends anywhere in the ring.
  const int warm = data[0] & 63;
  std::vector<char> payload(static_cast<size_t>(data[1]) * 256, 'x');
  WireHeader h;
  h.kind = static_cast<uint8_t>(MsgKind::Data);
  h.op = static_cast<uint8_t>(CommOp::Send);
  h.payload = payload.size();
  const auto ok = [](const WireHeader&, const char*, size_t) { return std::string(); };
  std::string why;
  for (int i = 0; i < warm; ++i) {
    bool bell = false;
    if (!p.writer->push(1, h, payload.data(), payload.size(), &bell)) finding("warm-up push");
    if (p.reader->drain(0, ok, &why) != 1) finding("warm-up drain", why);
  }
  const uint64_t tail = p.reader->read_of(0);
  const uint64_t offset = le64(data + 2);
  const uint64_t head = (offset >> 63) != 0 ? tail - (offset & 0xffff)
                                            : tail + offset % (2 * p.writer->ring_bytes() + 64);
  const uint8_t flags = data[10];
  p.writer->scribble(1, tail % p.writer->ring_bytes(), data + 11, size - 11, head);

  const bool refuse = (flags & 1) != 0;
  size_t records = 0;
  auto check = [&](const WireHeader& got, const char* bytes, size_t n) -> std::string {
    if (n != got.payload) finding("a record's payload size differs from its header's");
    unsigned sum = 0;
    for (size_t i = 0; i < n; ++i) sum += static_cast<unsigned char>(bytes[i]);  // in bounds
    ++records;
    if (refuse && n > 0 && static_cast<unsigned char>(bytes[0]) == 0xEE) return "refused";
    return sum == 0xFFFFFFFFu ? "unreachable" : "";
  };
  const int n = p.reader->drain(0, check, &why);
  if (n < -1) finding("drain returned", std::to_string(n));
  if (n == -1 && why.empty()) finding("drain failed without saying why");
  if (n >= 0 && static_cast<size_t>(n) != records) finding("drain's count");
  if (n == -1 && p.reader->drain(0, check, &why) != 0) finding("a failed ring was read again");

  if ((flags & 2) != 0 && size >= 19) {
    p.reader->scribble_tail(0, le64(data + 11));
    try {
      bool bell = false;
      (void)p.writer->push(1, h, payload.data(), payload.size(), &bell);
    } catch (const ProtocolError&) {
      // A corrupt tail is reported, not followed.
    }
  }
  return 0;
}
