// libFuzzer target: the process-group mesh's receive path (pg/zmq/mesh.cpp, Mesh::on_message
// and what consumes its messages), on the frames a peer rank could send: a ROUTER identity,
// the 64-byte WireHeader (pg/zmq/wire.hpp) and payload frames.
//
// One Mesh per input, rank `me` of 4, set up as connect() leaves it but with no peers and no
// I/O thread (MeshFuzzAccess, a friend of Mesh): its sends to peers fail as to a peer that
// is gone. Input layout: byte 0 picks the rank (bit 0) and which peers are known to share
// this host (bits 1-3: their pid is this process's, so payloads by address are read from
// here); then up to 48 actions, each a byte and its arguments:
//   0, 1  a message: [identity (1)] [header mode (1)] then either 64 raw header bytes (mode
//         bit 7) or a compact header [kind, op, group, seq, count (2), dtype, reduce, root,
//         payload (2)] whose magic, version, token and sender are right (mode bits 0-2 keep
//         them wrong instead), and payload frames [n (1)] n x [length (2), bytes]; mode bit 6
//         makes the header's payload size the frames' total, bit 5 counts one dropped frame.
//   2     a posted receive (group, tag, source or any, dtype, element count)
//   3     a take() of a collective's message (group, seq, source; deadline now), and the
//         copy of its payload into a tensor as the zmq backend does
//   4     declare a peer dead, finish a collective, or stage the payloads by address
// Then shutdown(). Checked: on_message and every call return or throw dtr::Error; every
// posted receive has completed after shutdown(); a received payload has the size its header
// says. A crash, a sanitizer report, another exception or a broken check aborts.
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>
#include <zmq.hpp>

#include "dtr/error.hpp"
#include "dtr/tensor.hpp"
#include "fuzz_input.hpp"
#include "pg/work_state.hpp"
#include "pg/zmq/mesh.hpp"

namespace dtr::pg {

struct MeshFuzzAccess {
  // As connect() leaves a rank, without hellos, monitors or the I/O thread.
  static void attach(Mesh& m, int rank, uint64_t token) {
    m.rank_ = rank;
    m.token_ = token;
    m.peers_.assign(m.world_, Mesh::Peer{});
    m.peer_pids_.assign(m.world_, 0);
    for (int j = 0; j < m.world_; ++j) {
      m.endpoints_.push_back("tcp://127.0.0.1:" + std::to_string(1 + j));
      auto d = std::make_unique<Mesh::Dealer>();
      d->sock = zmq::socket_t(m.ctx_, zmq::socket_type::dealer);
      d->sock.set(zmq::sockopt::linger, 0);
      d->open = true;  // connected to nobody: a send fails at once (dontwait)
      m.dealers_.push_back(std::move(d));
      m.monitors_.emplace_back();
    }
  }
  static void deliver(Mesh& m, std::vector<zmq::message_t>& frames, uint64_t dropped) {
    m.on_message(frames, dropped);
  }
  // Stages the payloads by address nobody received yet, as the I/O thread does.
  static void stage(Mesh& m) { m.stage_waiting(Clock::now() + std::chrono::hours(1)); }
  // Whether staging could allocate more than the fuzzer's process may hold.
  static bool staging_too_large(Mesh& m) {
    std::lock_guard lock(m.m_);
    for (const Incoming& in : m.unexpected_) {
      if (Mesh::unstaged(in) && (in.h.count < 0 || in.h.count > (int64_t{1} << 20))) return true;
    }
    return false;
  }
};

}  // namespace dtr::pg

namespace {

using namespace dtr;
using namespace dtr::pg;

constexpr int kWorld = 4;
constexpr uint64_t kToken = 0x5eed5eed5eed5eedULL;

[[noreturn]] void finding(const char* what, const std::string& detail = {}) {
  dtr::fuzz::report_finding("fuzz_pg_frames", what, detail);
}

using Reader = dtr::fuzz::InputReader;

std::string identity_of(uint8_t b) {
  const int r = b & 3;
  if (b & 4) return "r0" + std::to_string(r);  // not how members spell it
  if (b & 8) return "x" + std::to_string(r);
  return "r" + std::to_string(r);
}

void message(Mesh& mesh, Reader& in) {
  const std::string identity = identity_of(in.byte());
  const uint8_t mode = in.byte();
  WireHeader h;
  if (mode & 0x80) {
    in.fill(&h, sizeof h);
  } else {
    h.kind = in.byte();
    h.op = in.byte() % (kNumCommOps + 1);
    h.group = in.byte() % 4;
    h.seq = in.byte() % 4;
    h.count = static_cast<int16_t>(in.u16());
    h.dtype = in.byte() % (kNumDTypes + 1);
    h.reduce = in.byte();
    h.root = in.byte() % kWorld;
    h.payload = in.u16();
    h.token = mode & 1 ? 0 : kToken;
    if (mode & 2) h.version = 1;
    h.src = mode & 4 ? 9 : (identity.size() == 2 ? identity[1] - '0' : 0);
  }
  std::vector<zmq::message_t> frames;
  frames.emplace_back(identity.data(), identity.size());
  frames.emplace_back(&h, sizeof h);
  const int n = in.byte() % 4;
  uint64_t total = 0;
  for (int k = 0; k < n; ++k) {
    const size_t len = in.u16() % 4096;
    zmq::message_t f(len);
    in.fill(f.data(), len);
    total += len;
    frames.push_back(std::move(f));
  }
  if (mode & 0x40) {
    std::memcpy(static_cast<char*>(frames[1].data()) + offsetof(WireHeader, payload), &total,
                sizeof total);
  }
  MeshFuzzAccess::deliver(mesh, frames, (mode >> 5) & 1);
}

DType dtype_of(uint8_t b) {
  return static_cast<DType>(b % kNumDTypes);
}

void post(Mesh& mesh, Reader& in, int me, std::vector<std::shared_ptr<Work::State>>& works) {
  Mesh::RecvRequest req;
  req.group = in.byte() % 4;
  req.tag = in.byte() % 4;
  const int src = in.byte() % (kWorld + 1) - 1;
  req.src = src == me ? kAnySource : src;
  req.members = {0, 1, 2, 3};
  const int64_t numel = in.byte() % 64;
  req.tensor = local::zeros({numel}, dtype_of(in.byte()));
  req.work = std::make_shared<Work::State>("fuzz receive");
  req.deadline = Clock::now() + std::chrono::hours(1);
  req.what = "fuzz receive";
  works.push_back(req.work);
  mesh.post_recv(std::move(req));
}

void take(Mesh& mesh, Reader& in, int me) {
  const uint64_t group = in.byte() % 4, seq = in.byte() % 4;
  int src = in.byte() % kWorld;
  if (src == me) src = (src + 1) % kWorld;
  const int64_t numel = in.byte() % 64;
  const DType dtype = dtype_of(in.byte());
  WireHeader expect;
  expect.op = static_cast<uint8_t>(CommOp::AllReduce);
  expect.dtype = static_cast<uint8_t>(dtype);
  expect.count = numel;
  try {
    Incoming msg = mesh.take(group, seq, src, Clock::now(), {0, 1, 2, 3}, "fuzz take", &expect);
    // As the zmq backend does: the signature first, then the payload's size, then the copy.
    if (msg.h.op != expect.op || msg.h.dtype != expect.dtype || msg.h.count != numel) return;
    const uint64_t bytes = static_cast<uint64_t>(numel) * element_size(dtype);
    if (msg.bytes() != bytes) return;
    uint64_t held = msg.payload.size();
    for (const auto& f : msg.more) held += f.size();
    if (held != bytes)
      finding("payload size", std::to_string(held) + " vs " + std::to_string(bytes));
    local::Tensor t = local::zeros({numel}, dtype);
    msg.copy_to(t.raw_data(), numel, dtype);
  } catch (const Error&) {
  }
  if (in.byte() & 1) mesh.finish_collective(group, seq);
}

void misc(Mesh& mesh, Reader& in) {
  const uint8_t b = in.byte();
  switch (b % 3) {
    case 0:
      mesh.declare_dead(b / 3 % kWorld, "declared dead by the fuzz target");
      break;
    case 1:
      mesh.finish_collective(b / 3 % 4, in.byte() % 4);
      break;
    default:
      if (!MeshFuzzAccess::staging_too_large(mesh)) MeshFuzzAccess::stage(mesh);
  }
}

Mesh& new_mesh(std::unique_ptr<Mesh>& holder) {
  ProcessGroupOptions options;
  options.timeout = std::chrono::milliseconds(100);
  holder = std::make_unique<Mesh>(kWorld, options, "tcp://127.0.0.1:*");
  return *holder;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  Reader in(data + 1, size - 1);
  const int me = data[0] & 1;
  std::unique_ptr<Mesh> holder;
  std::vector<std::shared_ptr<Work::State>> works;
  try {
    Mesh& mesh = new_mesh(holder);
    MeshFuzzAccess::attach(mesh, me, kToken);
    for (int r = 1; r < kWorld; ++r) {
      if (data[0] & (1 << r)) mesh.set_peer_pid(r, getpid());
    }
    for (int n = 0; n < 48 && !in.empty(); ++n) {
      switch (in.byte() % 5) {
        case 0:
        case 1:
          message(mesh, in);
          break;
        case 2:
          post(mesh, in, me, works);
          break;
        case 3:
          take(mesh, in, me);
          break;
        default:
          misc(mesh, in);
      }
    }
    mesh.shutdown();
  } catch (const Error& e) {
    finding("the setup or a call outside take() threw", e.what());
  }
  for (const auto& w : works) {
    std::lock_guard lock(w->m);
    if (!w->done) finding("a posted receive did not complete by shutdown");
  }
  return 0;
}
