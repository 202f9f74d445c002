// libFuzzer target: the worker's batch decoder and dispatcher (protocol::decode_batch, then
// worker::Session::run / notify on a real session with one executor thread).
//
// Input layout (everything after the fixed prefix is the header frame, so that mutations of
// an encoded batch stay close to valid):
//   byte 0   number of payload frames (low 3 bits: 0..7)
//   byte 1   flags, see kFlag* below
//   byte 2   token of the peer notification the harness feeds (when a notify flag is set)
//   byte 3   seed of the payload bytes; bit 0 also misaligns every payload by one byte
//   then     2 bytes (LE) per payload frame: its size; the bytes are generated from byte 3
//   rest     frame 0, the header
//
// What counts as a finding: a crash, a sanitizer report, an exception other than
// dtr::Error escaping (std::terminate), a message the session emits that our own decoder
// rejects, a Get reply whose payload does not match its meta, or a session that does not
// go idle within kIdleTimeout although the batch is within the caps below.
//
// Size caps. Hostile sizes are the worker's business only up to what the host can hold:
// `full([1 << 40])` is a legal command that a real worker answers with an out-of-memory
// failure, but under libFuzzer (rss limit 2 GB, malloc limit 2 GB) or ASan it would be
// reported as a crash, or take minutes. So before running an input the harness follows
// every tensor the batch could make (Put, RecvPeer, and every RunOp through the same shape
// rules the worker uses, dtr::infer, views included because an expanded view can be read
// in full), as a set of possible metas per id so that ids whose command the session may
// reject are over-approximated, never under. It skips the input when those tensors
// together exceed kMaxTotalBytes (64 MiB), or when the element work (inputs plus outputs of
// every op, and a matmul's multiply-adds) exceeds kMaxWork (tests/fuzz/budget.hpp; a
// graph's program counts at each of its replays). The decoder itself runs on every input,
// uncapped.
#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "budget.hpp"
#include "dtr/error.hpp"
#include "dtr/op_table.hpp"
#include "protocol/codec.hpp"
#include "protocol/messages.hpp"
#include "worker/session.hpp"

namespace {

using namespace dtr;
using namespace dtr::protocol;
using fuzz::Budget;
using fuzz::safe_numel;

constexpr uint8_t kFlagNoSetup = 1 << 0;        // skip session.setup(0, 2, 42)
constexpr uint8_t kFlagNotifyBefore = 1 << 1;   // a peer notification before the batch
constexpr uint8_t kFlagNotifyAfter = 1 << 2;    // ... and/or after it
constexpr uint8_t kFlagNotifyFailed = 1 << 3;   // the notification says the source failed
constexpr uint8_t kFlagNotifyPayload = 1 << 4;  // it carries payload frame 1 as a copy's bytes
constexpr uint8_t kFlagNotifyWrong = 1 << 5;    // wrong session id or sender node
constexpr uint8_t kFlagLoopBack = 1 << 6;       // feed the peer messages it emits back to it
constexpr uint8_t kFlagTwice = 1 << 7;          // run the same batch a second time

constexpr size_t kMaxPayloads = 7;
constexpr auto kIdleTimeout = std::chrono::seconds(30);
constexpr uint32_t kNode = 0;
constexpr uint32_t kNodes = 2;
constexpr uint64_t kSession = 42;

[[noreturn]] void finding(const std::string& what) {
  std::fprintf(stderr, "fuzz_worker_batch: FINDING: %s\n", what.c_str());
  std::fflush(stderr);
  std::abort();
}

// DTR_FUZZ_VERBOSE=1 prints what the session emits (for checking seeds by hand).
const bool g_verbose = std::getenv("DTR_FUZZ_VERBOSE") != nullptr;

void print_failure(const RemoteFailure& f) {
  std::fprintf(stderr, "    failed %%%llu %s: %s (cause %s: %s)\n",
               static_cast<unsigned long long>(f.tensor), f.op.c_str(), f.message.c_str(),
               f.cause_op.c_str(), f.cause_message.c_str());
}

void print_reply(const Reply& r) {
  const auto* get = std::get_if<reply::Get>(&r);
  const auto* error = std::get_if<reply::ProtocolError>(&r);
  std::fprintf(stderr, "  reply %s request %llu %s%s\n", std::string(reply_name(r)).c_str(),
               static_cast<unsigned long long>(reply_request(r)),
               get && !get->failure ? describe(get->meta).c_str() : "",
               error ? error->message.c_str() : "");
  if (get && get->failure) print_failure(*get->failure);
  if (const auto* event = std::get_if<reply::Event>(&r); event && event->failure)
    print_failure(*event->failure);
  if (const auto* sync = std::get_if<reply::Sync>(&r))
    for (const RemoteFailure& f : sync->failures) print_failure(f);
}

struct Harness {
  std::mutex mu;
  std::vector<worker::Outgoing> peer_messages;  // emitted to peers, for the loop-back

  void on_emit(worker::Outgoing&& o) {
    std::string_view header = o.header;
    try {
      if (o.peer < 0) {
        Reply r = decode_reply(header, o.payloads.size());
        if (g_verbose) print_reply(r);
        if (const auto* get = std::get_if<reply::Get>(&r); get && o.payloads.size() == 1) {
          const local::Tensor& t = o.payloads[0];
          if (t.meta().shape != get->meta.shape || t.meta().dtype != get->meta.dtype)
            finding("a Get reply's payload does not match its meta " + describe(get->meta));
        }
      } else {
        PeerNotify n = decode_peer_notify(header);
        if (g_verbose)
          std::fprintf(stderr, "  peer %d token %llu%s\n", o.peer,
                       static_cast<unsigned long long>(n.token), n.failed ? " failed" : "");
        std::lock_guard lock(mu);
        if (peer_messages.size() < 64) peer_messages.push_back(std::move(o));
      }
    } catch (const ProtocolError& e) {
      finding(std::string("the session emitted a message our decoder rejects: ") + e.what());
    }
  }
};

worker::PayloadFrame frame_of(const local::Tensor& t) {
  worker::PayloadFrame f;
  auto keep = std::make_shared<local::Tensor>(t);
  const TensorMeta& m = t.meta();
  int64_t n = safe_numel(m);
  f.size = n > 0 ? static_cast<size_t>(n) * element_size(m.dtype) : 0;
  f.data = t.storage() ? static_cast<char*>(t.storage()->data()) +
                             static_cast<size_t>(m.offset) * element_size(m.dtype)
                       : nullptr;
  f.owner = std::move(keep);
  return f;
}

void wait_idle(worker::Session& s) {
  if (!s.wait_idle(std::chrono::duration_cast<std::chrono::milliseconds>(kIdleTimeout)))
    finding("the session did not go idle (a lost wake-up or a deadlock?)");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 4) return 0;
  const size_t n_payloads = std::min<size_t>(data[0] & 7, kMaxPayloads);
  const uint8_t flags = data[1];
  const uint8_t token = data[2];
  const uint8_t seed = data[3];
  size_t pos = 4;
  if (size < pos + 2 * n_payloads) return 0;

  // Payload frames: generated bytes (an LCG from `seed`), sizes from the input.
  std::vector<worker::PayloadFrame> payloads;
  for (size_t i = 0; i < n_payloads; ++i) {
    size_t n = static_cast<size_t>(data[pos]) | (static_cast<size_t>(data[pos + 1]) << 8);
    pos += 2;
    auto buf = std::make_shared<std::vector<unsigned char>>(n + 1);
    uint32_t x = seed * 2654435761u + static_cast<uint32_t>(i);
    for (auto& b : *buf) {
      x = x * 1664525u + 1013904223u;
      b = static_cast<unsigned char>(x >> 24);
    }
    worker::PayloadFrame f;
    f.data = buf->data() + (seed & 1);
    f.size = n;
    f.owner = std::move(buf);
    payloads.push_back(std::move(f));
  }
  std::string_view header(reinterpret_cast<const char*>(data) + pos, size - pos);

  Batch batch;
  try {
    batch = decode_batch(header, payloads.size());
  } catch (const ProtocolError& e) {
    if (g_verbose) std::fprintf(stderr, "  rejected: %s\n", e.what());
    return 0;  // rejected: the worker answers with a ProtocolError reply and runs nothing
  }

  {
    Budget budget;
    if (!budget.follow(batch, payloads) ||
        ((flags & kFlagTwice) && !budget.follow(batch, payloads))) {
      if (g_verbose) std::fprintf(stderr, "  skipped: over the size caps\n");
      return 0;
    }
  }

  Harness h;
  worker::SessionOptions options;
  options.threads = 1;
  options.collective_timeout = std::chrono::milliseconds(50);
  auto session = std::make_unique<worker::Session>(
      [&h](worker::Outgoing&& o) { h.on_emit(std::move(o)); }, options);
  if (!(flags & kFlagNoSetup)) session->setup(kNode, kNodes, kSession);

  auto notify = [&] {
    PeerNotify n;
    n.session = (flags & kFlagNotifyWrong) && (token & 1) ? kSession + 1 : kSession;
    n.from_node = (flags & kFlagNotifyWrong) && !(token & 1) ? kNodes : 1;
    n.token = token;
    n.failed = flags & kFlagNotifyFailed;
    if (n.failed) {
      n.failure.tensor = token;
      n.failure.op = "fuzz";
      n.failure.message = "the source failed";
    }
    const worker::PayloadFrame* p =
        (flags & kFlagNotifyPayload) && !payloads.empty() ? &payloads[0] : nullptr;
    session->notify(n, p);
  };

  auto shared = std::make_shared<const Batch>(std::move(batch));
  if (flags & kFlagNotifyBefore) notify();
  try {
    session->run(shared, payloads);
    if (flags & kFlagTwice) session->run(shared, payloads);
  } catch (const Error&) {
    // Not expected (the session reports failures as replies), but a dtr::Error is a
    // clean rejection, not a memory error.
  }
  if (flags & kFlagNotifyAfter) notify();
  wait_idle(*session);

  if (flags & kFlagLoopBack) {
    // Node 0's messages to node 1 come back as if node 1 had sent them: a SendPeer in the
    // batch then feeds a RecvPeer of the same token.
    std::vector<worker::Outgoing> msgs;
    {
      std::lock_guard lock(h.mu);
      msgs.swap(h.peer_messages);
    }
    for (const worker::Outgoing& o : msgs) {
      PeerNotify n = decode_peer_notify(o.header);
      n.from_node = 1;
      if (o.payloads.empty()) {
        session->notify(n);
      } else {
        worker::PayloadFrame f = frame_of(o.payloads[0]);
        session->notify(n, &f);
      }
    }
    wait_idle(*session);
  }
  session.reset();
  return 0;
}
