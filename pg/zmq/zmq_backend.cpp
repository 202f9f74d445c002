// The zmq backend: collectives over a Mesh.
//
// Algorithms (p ranks, N bytes per rank; S = 256 KiB segments; every large message is
// cut into segments so that receiving, reducing and forwarding overlap):
//
//  all_reduce, N <= 64 KiB (or fewer elements than ranks): recursive doubling — log2(p)
//      rounds of pairwise exchange. A non power of two p folds the first 2*(p - p2) ranks in
//      pairs first (odd rank reduces, even rank waits) and sends them the result at the end.
//      Both partners compute op(lower half's value, upper half's value) in the same order,
//      so every rank ends with the same bits.
//  all_reduce, large, two ranks: each sends its whole tensor in segments and folds the
//      other's into its own as they arrive, rank 0's value first (the same bytes on the
//      wire as the ring below, without its second phase waiting on the first; in paired
//      runs over tcp 1.57x faster at 256 KiB, 1.08x at 64 MiB, even at 4 MiB).
//  all_reduce, large, more ranks: ring reduce-scatter then ring all-gather (bandwidth optimal:
//      2(p-1)/p * N sent per rank). Each chunk is reduced exactly once, along the ring, and
//      then copied, so every rank ends with the same bits. Each reduced segment is sent on
//      at once (the reduce-scatter's next step, or the all-gather's first), and the
//      all-gather forwards the received frame itself (no copy) before copying it out.
//  broadcast: binomial tree from the root, segment by segment (a segment is forwarded to
//      the children as soon as it arrives; forwarding shares the received frame).
//  reduce: binomial tree towards the root, segment by segment; a node reduces its
//      children's segments in a fixed order (lower virtual rank first) and sends the
//      partial result on while the next segment is in flight.
//  all_gather: ring, p-1 steps, forwarding received frames unchanged.
//  reduce_scatter: ring, p-1 steps; block b is reduced along the ring and ends on rank b.
//  gather / scatter: direct sends to/from the root (the root's link is the bottleneck
//      whatever the algorithm).
//  barrier: recursive doubling with empty messages (a dissemination barrier).
//
// Sends of user memory are zero-copy (ZeroMQ frames pointing at the tensor's storage, kept
// alive by a shared_ptr); an operation completes only once ZeroMQ has released every such
// frame, so the caller may write the tensor as soon as Work completes. Small recursive-
// doubling messages are copied into the frame (cheaper than tracking them).
//
// Every message carries op, dtype, per-rank element count, reduce op, root and a
// per-(sender, receiver) step number; the receiver checks each against its own call and
// fails with an error naming both ranks and both values. A failing rank sends an Abort to
// every member so that all of them fail with the same error instead of waiting.
#include <fmt/format.h>

#include <algorithm>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <functional>
#include <mutex>
#include <optional>
#include <thread>

#include "pg/zmq/zmq_backend.hpp"

#include "common/same_host.hpp"
#include "pg/backend.hpp"
#include "pg/issue_order.hpp"
#include "pg/reduce.hpp"
#include "pg/serial_executor.hpp"
#include "pg/util.hpp"
#include "pg/zmq/lane.hpp"
#include "pg/zmq/mesh.hpp"
#include "pg/zmq/shm_path.hpp"

namespace dtr::pg {
namespace {

// One segment is one frame (the most a rank accepts in one).
constexpr uint64_t kSegmentBytes = kMaxFrameBytes;
constexpr uint64_t kSmallAllReduce = 64 << 10;
// The most a lane's opening waits for its connection (lane.hpp).
constexpr auto kLaneSetupTimeout = std::chrono::seconds(5);
// How long a rank whose lane was closed by its peer waits for the peer's Abort (the cause).
constexpr auto kAbortGrace = std::chrono::milliseconds(250);
// Point-to-point payloads up to this size are copied into the message (see isend).
constexpr size_t kSmallSendBytes = 16 << 10;

uint64_t mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// A contiguous piece of memory taking part in a collective.
struct Block {
  char* data = nullptr;
  int64_t numel = 0;
  std::shared_ptr<void> keepalive;
};

Block block_of(const local::Tensor& t) {
  return {static_cast<char*>(t.raw_data()), t.meta().numel(), t.storage()};
}

// The state of one running collective on one rank.
class Run {
 public:
  // `what`: the call's name in messages (collective_name()).
  Run(Mesh& mesh, uint64_t group, uint64_t seq, const std::vector<int>& members, int rank,
      const CollectiveArgs& a, DType dtype, int64_t count, std::string what)
      : mesh_(mesh),
        group_(group),
        seq_(seq),
        members_(members),
        r_(rank),
        p_(static_cast<int>(members.size())),
        a_(a),
        dtype_(dtype),
        es_(static_cast<int64_t>(element_size(dtype))),
        count_(count),
        sent_steps_(members.size(), 0),
        recv_steps_(members.size(), 0),
        all_sends_(std::make_shared<SendTracker>()),
        what_(std::move(what)) {
    deadline_ = Clock::now() + mesh.options().timeout;
  }

  const std::string& what() const { return what_; }
  uint64_t seq() const { return seq_; }
  Clock::time_point deadline() const { return deadline_; }
  int rank() const { return r_; }
  int size() const { return p_; }
  int64_t es() const { return es_; }

  WireHeader header(int dst) {
    WireHeader h = header_template();
    h.step = sent_steps_[dst]++;
    return h;
  }
  WireHeader header_template() const {
    WireHeader h;
    h.kind = static_cast<uint8_t>(MsgKind::Data);
    h.op = static_cast<uint8_t>(a_.op);
    h.group = group_;
    h.seq = seq_;
    h.count = count_;
    h.root = a_.root;
    h.dtype = static_cast<uint8_t>(dtype_);
    h.reduce = static_cast<uint8_t>(a_.reduce);
    return h;
  }

  // Zero-copy send of memory that stays unmodified until the tracker says it is released.
  void send(int dst, const char* data, int64_t numel, const std::shared_ptr<void>& keepalive,
            const std::shared_ptr<SendTracker>& tracker) {
    Payload p;
    p.data = data;
    p.bytes = static_cast<size_t>(numel * es_);
    p.keepalive = keepalive;
    p.tracker = tracker ? tracker : all_sends_;
    if (tracker) tracked_.push_back(tracker);
    mesh_.send(members_[dst], header(dst), std::move(p));
  }
  // Copies the bytes into the frame (small messages whose memory changes right after).
  void send_copy(int dst, const char* data, int64_t numel) {
    send_bytes(dst, data, static_cast<size_t>(numel * es_));
  }
  void send_bytes(int dst, const void* bytes_at, size_t bytes) {
    const char* data = static_cast<const char*>(bytes_at);
    auto copy = std::make_shared<std::vector<char>>(data, data + bytes);
    Payload p;
    p.data = copy->data();
    p.bytes = bytes;
    p.keepalive = copy;
    p.tracker = all_sends_;
    mesh_.send(members_[dst], header(dst), std::move(p));
  }
  // Sends a received frame on, sharing its buffer.
  void forward(int dst, zmq::message_t& msg) {
    zmq::message_t copy;
    copy.copy(msg);
    Payload p;
    p.forward = &copy;
    p.tracker = all_sends_;  // tracks the header and the shared frame
    mesh_.send(members_[dst], header(dst), std::move(p));
  }

  // The next message from group rank src, checked against this rank's call; `numel` is the
  // element count this rank expects in it.
  Incoming recv(int src, int64_t numel) {
    return recv_bytes(src, static_cast<uint64_t>(numel * es_));
  }
  // The same with a payload of `bytes` (not elements of the call's dtype).
  Incoming recv_bytes(int src, uint64_t bytes) {
    WireHeader expect = header_template();
    Incoming in = mesh_.take(group_, seq_, members_[src], deadline_, members_, what_,
                             a_.op == CommOp::Barrier ? nullptr : &expect);
    const WireHeader& h = in.h;
    if (h.src != members_[src]) {  // a mismatching message from another rank
      for (size_t i = 0; i < members_.size(); ++i) {
        if (members_[i] == h.src) src = static_cast<int>(i);
      }
    }
    const auto their_op = static_cast<CommOp>(h.op);
    if (their_op != a_.op) {
      throw InvalidArgument(fmt::format("{}: rank {} called {} at the same point", what_, src,
                                        comm_op_name(their_op)));
    }
    if (a_.op != CommOp::Barrier) {
      if (h.dtype != static_cast<uint8_t>(dtype_)) {
        throw DTypeError(fmt::format("{}: dtype mismatch: rank {} has {}, rank {} has {}", what_,
                                     src, dtype_name(static_cast<DType>(h.dtype)), r_,
                                     dtype_name(dtype_)));
      }
      if (h.count != count_) {
        throw ShapeError(
            fmt::format("{}: size mismatch: rank {} has {} elements per rank, rank {} has {}",
                        what_, src, h.count, r_, count_));
      }
      if (h.reduce != static_cast<uint8_t>(a_.reduce)) {
        throw InvalidArgument(fmt::format(
            "{}: reduce op mismatch: rank {} uses {}, rank {} uses {}", what_, src,
            reduce_op_name(static_cast<ReduceOp>(h.reduce)), r_, reduce_op_name(a_.reduce)));
      }
      if (h.root != a_.root) {
        throw InvalidArgument(
            fmt::format("{}: root mismatch: rank {} uses root {}, rank {} uses {}", what_, src,
                        h.root, r_, a_.root));
      }
    }
    if (h.step != recv_steps_[src]) {
      throw ProtocolError(fmt::format("{}: message {} from rank {} arrived as message {}", what_,
                                      recv_steps_[src], src, h.step));
    }
    ++recv_steps_[src];
    if (in.bytes() != bytes) {
      throw ProtocolError(fmt::format("{}: rank {} sent {} bytes where {} were expected", what_,
                                      src, in.bytes(), bytes));
    }
    in.join();  // one frame unless a segment is over kMaxFrameBytes (never, from dtr)
    return in;
  }

  // The payload as properly aligned memory for typed reads.
  const char* aligned(const Incoming& in, std::vector<char>& tmp) {
    const char* p = static_cast<const char*>(in.payload.data());
    if (reinterpret_cast<uintptr_t>(p) % static_cast<uintptr_t>(es_) == 0) return p;
    tmp.assign(p, p + in.payload.size());  // std::vector<char> storage is malloc-aligned
    return tmp.data();
  }

  // Copies a received payload of numel elements to dst.
  void copy_in(char* dst, const Incoming& in, int64_t numel) {
    copy_elements(dst, in.payload.data(), numel, dtype_);
  }

  void reduce(char* dst, const char* lo, const char* hi, int64_t numel) {
    reduce_into(dst, lo, hi, numel, dtype_, a_.reduce);
  }

  void wait_tracker(SendTracker& t) {
    std::vector<int> world(members_);
    mesh_.wait_sent(t, deadline_, world, what_);
  }
  void finish() {
    all_sends_->close();
    wait_tracker(*all_sends_);
    for (auto& t : tracked_) wait_tracker(*t);
  }

 private:
  Mesh& mesh_;
  uint64_t group_, seq_;
  const std::vector<int>& members_;
  int r_, p_;
  const CollectiveArgs& a_;
  DType dtype_;
  int64_t es_;
  int64_t count_;
  std::vector<uint32_t> sent_steps_, recv_steps_;
  std::shared_ptr<SendTracker> all_sends_;
  std::vector<std::shared_ptr<SendTracker>> tracked_;
  Clock::time_point deadline_;
  std::string what_;
};

// Segments of `numel` elements: count and the range of segment k.
struct Segments {
  int64_t per = 1;  // elements per segment
  int64_t count = 1;
  Segments(int64_t numel, int64_t es) {
    const int64_t per_bytes = static_cast<int64_t>(kSegmentBytes);
    per = std::max<int64_t>(1, per_bytes / es);
    count = std::max<int64_t>(1, (numel + per - 1) / per);
  }
  int64_t begin(int64_t k, int64_t numel) const { return std::min(k * per, numel); }
  int64_t len(int64_t k, int64_t numel) const {
    return std::max<int64_t>(0, std::min((k + 1) * per, numel) - begin(k, numel));
  }
};

// ---------------------------------------------------------------- algorithms

void recursive_doubling(Run& run, char* buf, int64_t n) {
  const int p = run.size(), r = run.rank();
  int p2 = 1;
  while (p2 * 2 <= p) p2 *= 2;
  const int rem = p - p2;
  std::vector<char> tmp;
  int vr;
  if (r < 2 * rem) {
    if (r % 2 == 0) {
      run.send_copy(r + 1, buf, n);
      Incoming in = run.recv(r + 1, n);
      if (n > 0) run.copy_in(buf, in, n);
      return;
    }
    Incoming in = run.recv(r - 1, n);
    run.reduce(buf, run.aligned(in, tmp), buf, n);
    vr = r / 2;
  } else {
    vr = r - rem;
  }
  auto real = [&](int v) { return v < rem ? 2 * v + 1 : v + rem; };
  for (int mask = 1; mask < p2; mask <<= 1) {
    const int pv = vr ^ mask;
    const int partner = real(pv);
    run.send_copy(partner, buf, n);
    Incoming in = run.recv(partner, n);
    const char* theirs = run.aligned(in, tmp);
    if (vr < pv) {
      run.reduce(buf, buf, theirs, n);
    } else {
      run.reduce(buf, theirs, buf, n);
    }
  }
  if (r < 2 * rem) run.send_copy(r - 1, buf, n);
}

void ring_all_reduce(Run& run, const Block& b) {
  const int p = run.size(), r = run.rank();
  const int64_t n = b.numel, es = run.es();
  std::vector<int64_t> off(p + 1);
  for (int c = 0; c <= p; ++c) off[c] = n * c / p;
  int64_t max_chunk = 0;
  for (int c = 0; c < p; ++c) max_chunk = std::max(max_chunk, off[c + 1] - off[c]);
  const Segments seg(max_chunk, es);
  const int left = (r - 1 + p) % p, right = (r + 1) % p;
  std::vector<std::shared_ptr<SendTracker>> trackers(p);
  for (auto& t : trackers) t = std::make_shared<SendTracker>();
  auto seg_ptr = [&](int c, int64_t k) {
    return b.data + (off[c] + seg.begin(k, off[c + 1] - off[c])) * es;
  };
  auto seg_len = [&](int c, int64_t k) { return seg.len(k, off[c + 1] - off[c]); };
  std::vector<char> tmp;
  for (int64_t k = 0; k < seg.count; ++k)
    run.send(right, seg_ptr(r, k), seg_len(r, k), b.keepalive, trackers[r]);
  for (int s = 0; s <= p - 2; ++s) {
    const int c = (r - s - 1 + p) % p;
    for (int64_t k = 0; k < seg.count; ++k) {
      const int64_t len = seg_len(c, k);
      Incoming in = run.recv(left, len);
      char* dst = seg_ptr(c, k);
      run.reduce(dst, run.aligned(in, tmp), dst, len);
      run.send(right, dst, len, b.keepalive, trackers[c]);
    }
  }
  for (int s = 0; s <= p - 2; ++s) {
    const int c = (r - s + p) % p;
    run.wait_tracker(*trackers[c]);  // chunk c was sent from this buffer; now it is overwritten
    for (int64_t k = 0; k < seg.count; ++k) {
      const int64_t len = seg_len(c, k);
      Incoming in = run.recv(left, len);
      if (s < p - 2) run.forward(right, in.payload);
      if (len > 0) run.copy_in(seg_ptr(c, k), in, len);
    }
  }
  for (auto& t : trackers) run.wait_tracker(*t);
}

// Two ranks: each sends its whole tensor, segment by segment, then folds the other's
// segments into its own as they arrive, rank 0's value first (so both end with the same
// bits). A segment is overwritten only once ZeroMQ has released its send.
void pair_all_reduce(Run& run, const Block& b) {
  const int r = run.rank(), other = 1 - r;
  const int64_t es = run.es();
  const Segments seg(b.numel, es);
  std::vector<std::shared_ptr<SendTracker>> sent(static_cast<size_t>(seg.count));
  for (int64_t k = 0; k < seg.count; ++k) {
    sent[k] = std::make_shared<SendTracker>();
    run.send(other, b.data + seg.begin(k, b.numel) * es, seg.len(k, b.numel), b.keepalive, sent[k]);
  }
  std::vector<char> tmp;
  for (int64_t k = 0; k < seg.count; ++k) {
    const int64_t len = seg.len(k, b.numel);
    Incoming in = run.recv(other, len);
    char* mine = b.data + seg.begin(k, b.numel) * es;
    run.wait_tracker(*sent[k]);
    const char* theirs = run.aligned(in, tmp);
    if (r == 0) {
      run.reduce(mine, mine, theirs, len);
    } else {
      run.reduce(mine, theirs, mine, len);
    }
  }
}

void all_reduce(Run& run, const CollectiveArgs& a) {
  const Block b = block_of(a.outputs[0]);
  const local::Tensor& t = a.outputs[0];
  if (run.size() > 1) {
    if (static_cast<uint64_t>(b.numel * run.es()) <= kSmallAllReduce || b.numel < run.size()) {
      recursive_doubling(run, b.data, b.numel);
    } else if (run.size() == 2) {
      pair_all_reduce(run, b);
    } else {
      ring_all_reduce(run, b);
    }
  }
  if (a.reduce == ReduceOp::Avg) divide_by(b.data, b.numel, t.meta().dtype, run.size());
}

void broadcast(Run& run, const CollectiveArgs& a) {
  const int p = run.size(), r = run.rank();
  const Block b = block_of(a.outputs[0]);
  const int vr = (r - a.root + p) % p;
  int mask = 1;
  while (mask < p && (vr & mask) == 0) mask <<= 1;
  const int parent = vr == 0 ? -1 : (vr - mask + a.root) % p;
  std::vector<int> children;
  for (int m = mask >> 1; m > 0; m >>= 1) {
    if (vr + m < p) children.push_back((vr + m + a.root) % p);
  }
  const Segments seg(b.numel, run.es());
  for (int64_t k = 0; k < seg.count; ++k) {
    char* ptr = b.data + seg.begin(k, b.numel) * run.es();
    const int64_t len = seg.len(k, b.numel);
    if (parent < 0) {
      for (int c : children) run.send(c, ptr, len, b.keepalive, nullptr);
    } else {
      Incoming in = run.recv(parent, len);
      for (int c : children) run.forward(c, in.payload);
      if (len > 0) run.copy_in(ptr, in, len);
    }
  }
}

void reduce(Run& run, const CollectiveArgs& a) {
  const int p = run.size(), r = run.rank();
  const Block user = block_of(a.outputs[0]);
  const int vr = (r - a.root + p) % p;
  Block acc = user;
  if (vr != 0) {  // non-roots keep their tensor unchanged: accumulate aside
    auto st = Storage::allocate(static_cast<size_t>(user.numel * run.es()));
    if (user.numel > 0)
      std::memcpy(st->data(), user.data, static_cast<size_t>(user.numel * run.es()));
    acc = {static_cast<char*>(st->data()), user.numel, st};
  }
  std::vector<int> children;
  int mask = 1;
  for (; mask < p; mask <<= 1) {
    if (vr & mask) break;
    if (vr + mask < p) children.push_back((vr + mask + a.root) % p);
  }
  const int parent = vr == 0 ? -1 : (vr - mask + a.root) % p;
  const Segments seg(user.numel, run.es());
  std::vector<char> tmp;
  for (int64_t k = 0; k < seg.count; ++k) {
    char* ptr = acc.data + seg.begin(k, acc.numel) * run.es();
    const int64_t len = seg.len(k, acc.numel);
    for (int c : children) {
      Incoming in = run.recv(c, len);
      run.reduce(ptr, ptr, run.aligned(in, tmp), len);  // own (lower virtual rank) first
    }
    if (parent >= 0) run.send(parent, ptr, len, acc.keepalive, nullptr);
  }
  if (vr == 0 && a.reduce == ReduceOp::Avg) {
    divide_by(user.data, user.numel, a.outputs[0].meta().dtype, p);
  }
}

void all_gather(Run& run, const CollectiveArgs& a) {
  const int p = run.size(), r = run.rank();
  const Block in = block_of(a.inputs[0]);
  std::vector<Block> out;
  for (const auto& t : a.outputs) out.push_back(block_of(t));
  const int64_t n = in.numel, es = run.es();
  if (n > 0 && out[r].data != in.data)
    std::memcpy(out[r].data, in.data, static_cast<size_t>(n * es));
  if (p == 1) return;
  const int left = (r - 1 + p) % p, right = (r + 1) % p;
  const Segments seg(n, es);
  for (int64_t k = 0; k < seg.count; ++k) {
    run.send(right, in.data + seg.begin(k, n) * es, seg.len(k, n), in.keepalive, nullptr);
  }
  for (int s = 0; s <= p - 2; ++s) {
    const int bidx = (r - s - 1 + p) % p;
    for (int64_t k = 0; k < seg.count; ++k) {
      const int64_t len = seg.len(k, n);
      Incoming msg = run.recv(left, len);
      if (s < p - 2) run.forward(right, msg.payload);
      if (len > 0) {
        run.copy_in(out[bidx].data + seg.begin(k, n) * es, msg, len);
      }
    }
  }
}

void gather(Run& run, const CollectiveArgs& a) {
  const int p = run.size(), r = run.rank();
  const Block in = block_of(a.inputs[0]);
  const int64_t n = in.numel, es = run.es();
  const Segments seg(n, es);
  if (r != a.root) {
    for (int64_t k = 0; k < seg.count; ++k) {
      run.send(a.root, in.data + seg.begin(k, n) * es, seg.len(k, n), in.keepalive, nullptr);
    }
    return;
  }
  std::vector<Block> out;
  for (const auto& t : a.outputs) out.push_back(block_of(t));
  if (n > 0 && out[r].data != in.data)
    std::memcpy(out[r].data, in.data, static_cast<size_t>(n * es));
  for (int i = 0; i < p; ++i) {
    if (i == r) continue;
    for (int64_t k = 0; k < seg.count; ++k) {
      const int64_t len = seg.len(k, n);
      Incoming msg = run.recv(i, len);
      if (len > 0) {
        run.copy_in(out[i].data + seg.begin(k, n) * es, msg, len);
      }
    }
  }
}

void scatter(Run& run, const CollectiveArgs& a) {
  const int p = run.size(), r = run.rank();
  const Block out = block_of(a.outputs[0]);
  const int64_t n = out.numel, es = run.es();
  const Segments seg(n, es);
  if (r == a.root) {
    for (int i = 0; i < p; ++i) {
      if (i == r) continue;
      const Block src = block_of(a.inputs[i]);
      for (int64_t k = 0; k < seg.count; ++k) {
        run.send(i, src.data + seg.begin(k, n) * es, seg.len(k, n), src.keepalive, nullptr);
      }
    }
    const Block own = block_of(a.inputs[r]);
    if (n > 0 && own.data != out.data) std::memcpy(out.data, own.data, static_cast<size_t>(n * es));
    return;
  }
  for (int64_t k = 0; k < seg.count; ++k) {
    const int64_t len = seg.len(k, n);
    Incoming msg = run.recv(a.root, len);
    if (len > 0) run.copy_in(out.data + seg.begin(k, n) * es, msg, len);
  }
}

void reduce_scatter(Run& run, const CollectiveArgs& a) {
  const int p = run.size(), r = run.rank();
  const Block out = block_of(a.outputs[0]);
  std::vector<Block> in;
  for (const auto& t : a.inputs) in.push_back(block_of(t));
  const int64_t n = out.numel, es = run.es();
  if (p == 1) {
    if (n > 0 && in[0].data != out.data)
      std::memcpy(out.data, in[0].data, static_cast<size_t>(n * es));
  } else {
    const int left = (r - 1 + p) % p, right = (r + 1) % p;
    const Segments seg(n, es);
    const int first = (r - 1 + p) % p;
    for (int64_t k = 0; k < seg.count; ++k) {
      run.send(right, in[first].data + seg.begin(k, n) * es, seg.len(k, n), in[first].keepalive,
               nullptr);
    }
    std::vector<char> tmp;
    for (int s = 0; s <= p - 2; ++s) {
      const int bidx = (r - s - 2 + 2 * p) % p;
      Block dst = out;
      if (s < p - 2) {
        auto st = Storage::allocate(static_cast<size_t>(n * es));
        dst = {static_cast<char*>(st->data()), n, st};
      }
      for (int64_t k = 0; k < seg.count; ++k) {
        const int64_t len = seg.len(k, n);
        Incoming msg = run.recv(left, len);
        char* d = dst.data + seg.begin(k, n) * es;
        run.reduce(d, run.aligned(msg, tmp), in[bidx].data + seg.begin(k, n) * es, len);
        if (s < p - 2) run.send(right, d, len, dst.keepalive, nullptr);
      }
    }
  }
  if (a.reduce == ReduceOp::Avg) divide_by(out.data, n, a.outputs[0].meta().dtype, p);
}

// ---------------------------------------------------------------- the group

// This process's same-host arena for one mesh, or why there is none.
struct HostArena {
  std::shared_ptr<shm::Arena> arena;
  int64_t refusal = 0;  // Desc::ok when there is no arena: 0 turned off, -1 not made
  std::string why;
};

// Desc::ok values other than 1: why a rank keeps a group on the sockets.
std::string refusal_text(int64_t ok) {
  switch (ok) {
    case 0:
      return "keeps to sockets (DTR_SAME_HOST=0 or ProcessGroupOptions::same_host false)";
    case -1:
      return "could not make its shared-memory arena";
    case -2:
      return fmt::format("has no free slot (at most {} groups per process use shared memory)",
                         shm::kSlots);
    case -3:
      return "could not make its shared-memory rings";
    default:
      return "sent an unknown answer";
  }
}

class ZmqGroup : public Backend {
 public:
  ZmqGroup(std::shared_ptr<Mesh> mesh, uint64_t id, std::vector<int> members,
           std::shared_ptr<const HostArena> host)
      : mesh_(std::move(mesh)), id_(id), members_(std::move(members)), arena_(std::move(host)) {
    for (size_t i = 0; i < members_.size(); ++i) {
      if (members_[i] == mesh_->rank()) rank_ = static_cast<int>(i);
    }
    call_suffix_ = fmt::format(" on rank {} of a group of {}", rank_, members_.size());
  }
  ~ZmqGroup() override {
    if (same_host_p2p_.load()) mesh_->remove_rings(id_);
    // The last handle on the mesh: shut it down first so that queued collectives fail at
    // once instead of waiting out their timeouts.
    if (mesh_.use_count() == 1) mesh_->shutdown();
    exec_.stop();
  }

  std::string_view name() const override { return "zmq"; }
  int rank() const override { return rank_; }
  int size() const override { return static_cast<int>(members_.size()); }
  const std::vector<int>& world_ranks() const override { return members_; }

  std::shared_ptr<Backend> new_group(const std::vector<int>& group_ranks) override {
    uint64_t child;
    {
      std::lock_guard lock(m_);
      child = ++children_;
    }
    std::vector<int> world;
    for (int g : group_ranks) world.push_back(members_[g]);
    return std::make_shared<ZmqGroup>(mesh_, mix(id_ ^ mix(child)), std::move(world), arena_);
  }

  Work isend(const local::Tensor& t, int dst, int tag, bool blocking) override {
    const std::string what = concat("send from rank ", rank_, " to rank ", dst, " (tag ", tag, ")");
    auto work = std::make_shared<Work::State>(what);
    WireHeader h;
    h.kind = static_cast<uint8_t>(MsgKind::Data);
    h.op = static_cast<uint8_t>(CommOp::Send);
    h.group = id_;
    h.seq = static_cast<uint64_t>(static_cast<int64_t>(tag));
    h.count = t.meta().numel();
    h.dtype = static_cast<uint8_t>(t.meta().dtype);
    const size_t bytes = static_cast<size_t>(t.meta().numel()) * element_size(t.meta().dtype);
    if (same_host_p2p_.load(std::memory_order_acquire))
      return send_same_host(t, dst, h, work, blocking);
    if (bytes <= kSmallSendBytes) {
      // Copied into the message: the tensor is free at once, and the Work completes here
      // instead of when ZeroMQ's I/O thread lets go of the frame (a thread hand-off).
      const char* data = static_cast<const char*>(t.raw_data());
      auto copy = std::make_shared<std::vector<char>>(data, data + bytes);
      Payload p;
      p.data = copy->data();
      p.bytes = bytes;
      p.keepalive = copy;
      try {
        mesh_->send(members_[dst], h, std::move(p));
        work->complete();
      } catch (...) {
        work->complete(std::current_exception());
      }
      return Work(work);
    }
    auto tracker = std::make_shared<SendTracker>();
    tracker->on_zero = [work] { work->complete(); };
    Payload p;
    p.data = t.raw_data();
    p.bytes = static_cast<size_t>(t.meta().numel()) * element_size(t.meta().dtype);
    p.keepalive = t.storage();
    p.tracker = tracker;
    try {
      mesh_->send(members_[dst], h, std::move(p));
    } catch (...) {
      work->complete(std::current_exception());
      return Work(work);
    }
    mesh_->watch_send(tracker, work, members_[dst], Clock::now() + mesh_->options().timeout, what);
    tracker->close();
    return Work(work);
  }

  // A send once the group agreed on the same-host path: through the group's ring to dst,
  // the payload in the record when it fits one (up to half a ring), else offered by
  // address (the receiver reads the bytes from this process, wire.hpp DataAt; a blocking
  // send reads the release itself, as a blocking receive reads its message). Every send of
  // the group to dst takes the ring, so they are received in the order they were sent.
  Work send_same_host(const local::Tensor& t, int dst, WireHeader h,
                      const std::shared_ptr<Work::State>& work, bool blocking) {
    const size_t bytes = static_cast<size_t>(t.meta().numel()) * element_size(t.meta().dtype);
    const auto deadline = Clock::now() + mesh_->options().timeout;
    // In the ring whenever a record holds it: two copies through memory both processes
    // have mapped beat one process_vm_readv, whose page pinning cost 10-20 us for 64 KiB
    // on this VM and 40-160 us for one read in eight (the by-address 64 KiB ping-pong's
    // p99 was 4-5x its median, in the ring 1.5-2.5x).
    const bool inline_payload = rings_->fits(bytes);
    try {
      if (inline_payload) {
        mesh_->send_ring(*rings_, dst, members_[dst], h, t.raw_data(), bytes, deadline, work->what);
        work->complete();  // the bytes are in the ring: the tensor is free
        return Work(work);
      }
      if (!blocking) poll_rings_in_wait(*work);  // before anyone else sees the Work
      const AddressPayload at = mesh_->offer(members_[dst], t, work, deadline, work->what);
      h.kind = static_cast<uint8_t>(MsgKind::DataAt);
      try {
        mesh_->send_ring(*rings_, dst, members_[dst], h, &at, sizeof at, deadline, work->what);
      } catch (...) {
        mesh_->withdraw(at.offer);
        throw;
      }
    } catch (...) {
      work->complete(std::current_exception());
      return Work(work);
    }
    if (blocking && !mesh_->spin_rings(*work, *rings_)) mesh_->serve_until(*work, deadline);
    return Work(work);
  }

  // A Work of this group's rings that is waited on later: wait() first polls the rings on
  // the waiting thread, as a blocking call does (without it, the receiver's I/O thread
  // would be woken by a Ring message: four thread hand-offs). The group and its mesh may be
  // gone by then: nothing is kept alive for it.
  void poll_rings_in_wait(Work::State& work) {
    work.progress = [mesh = std::weak_ptr<Mesh>(mesh_),
                     rings = std::weak_ptr<shm::RingFile>(rings_)](Work::State& w) {
      auto m = mesh.lock();
      auto r = rings.lock();
      if (m && r && !m->is_shut_down()) m->spin_rings(w, *r);
    };
  }

  Work irecv(const local::Tensor& t, int src, int tag, bool blocking) override {
    const std::string what =
        src == kAnySource ? concat("recv on rank ", rank_, " from any rank (tag ", tag, ")")
                          : concat("recv on rank ", rank_, " from rank ", src, " (tag ", tag, ")");
    auto work = std::make_shared<Work::State>(what);
    Mesh::RecvRequest req;
    req.group = id_;
    req.tag = static_cast<uint64_t>(static_cast<int64_t>(tag));
    req.src = src == kAnySource ? kAnySource : members_[src];
    req.members = members_;
    req.tensor = t;
    req.work = work;
    req.deadline = Clock::now() + mesh_->options().timeout;
    req.what = what;
    req.owner_reads = blocking;
    const auto deadline = req.deadline;
    const bool rings = same_host_p2p_.load(std::memory_order_acquire);
    if (rings && !blocking) poll_rings_in_wait(*work);
    mesh_->post_recv(std::move(req));
    // The small-message path: a blocking receive reads its message on this thread (first
    // from the group's rings alone, when it has them).
    if (!blocking) return Work(work);
    if (!rings || !mesh_->spin_rings(*work, *rings_)) mesh_->serve_until(*work, deadline);
    return Work(work);
  }

  Work collective(CollectiveArgs args) override {
    return run_in_issue_order(IssueOrder{m_, seq_, exec_, inline_what_, call_suffix_},
                              std::move(args),
                              [this](CollectiveArgs& a, uint64_t seq, const std::string& what) {
                                return execute(a, seq, what);
                              });
  }

  void shutdown() override { mesh_->shutdown(); }
  void declare_lost(int world_rank, const std::string& why) override {
    mesh_->declare_dead(world_rank, why);
  }
  std::string host_path() const override {
    std::lock_guard lock(note_m_);
    return lane_note_.empty() ? host_note_ : host_note_ + "; " + lane_note_;
  }

 private:
  // All-gathers n int64 words over the sockets, as collective `seq` of this group's setup
  // channel (the same-host agreement below); errors name `what`.
  std::vector<int64_t> gather_words(const int64_t* words, int n, uint64_t seq,
                                    const std::string& what) {
    const uint64_t setup = mix(id_ ^ 0x73686d2d73657475ull);
    CollectiveArgs args;
    args.op = CommOp::AllGather;
    args.inputs.push_back(local::empty(Shape{n}, DType::Int64));
    std::memcpy(args.inputs[0].raw_data(), words, static_cast<size_t>(n) * sizeof(int64_t));
    for (int q = 0; q < size(); ++q) args.outputs.push_back(local::empty(Shape{n}, DType::Int64));
    Run run(*mesh_, setup, seq, members_, rank_, args, DType::Int64, n,
            what + " (agreeing on the same-host path)");
    all_gather(run, args);
    run.finish();
    mesh_->finish_collective(setup, seq);
    std::vector<int64_t> all;
    for (const auto& t : args.outputs) {
      const auto* w = static_cast<const int64_t*>(t.raw_data());
      all.insert(all.end(), w, w + n);
    }
    return all;
  }

  // At the group's first collective: whether every member can take the same-host path
  // (shm_path.hpp). Every rank reaches the same answer from the same gathered words. When
  // the agreement itself fails (a rank that never comes, a dead rank), this rank stays on
  // the sockets; each stage has its own deadline, so a rank that completes it while
  // another failed it needs that one to stop answering between two messages.
  void decide_host_path(const std::string& what) {
    host_decided_ = true;
    const int p = size();
    std::string why;
    std::exception_ptr failed;
    if (p < 2 || p > shm::kMaxRanks) {
      why = p < 2 ? "one rank: nothing to move" : fmt::format("more than {} ranks", shm::kMaxRanks);
    } else {
      int slot = -1;
      try {
        why = agree_host_path(what, slot);
      } catch (const std::exception& e) {
        why = fmt::format("the agreement failed: {}", e.what());
        failed = std::current_exception();
      }
      // host_ is set only on success; a slot still held here is this rank's to give back.
      if (!why.empty() && slot >= 0) arena_->arena->release(slot);
    }
    {
      std::lock_guard lock(note_m_);
      host_note_ = why.empty() ? "shared memory" : "sockets (" + why + ")";
    }
    if (failed) std::rethrow_exception(failed);
  }

  // The two stages of the agreement; "" when every rank can take the path (host_ is then
  // set and owns `slot`), else why not.
  std::string agree_host_path(const std::string& what, int& slot) {
    const int p = size();
    shm::Desc mine;
    mine.ok = arena_->refusal;
    std::string rings_why;
    std::shared_ptr<shm::RingFile> rings;
    if (arena_->arena) {
      slot = arena_->arena->acquire(id_);
      if (slot >= 0) mine = arena_->arena->describe(slot);
      if (slot < 0) mine.ok = -2;
      if (slot >= 0) rings = shm::RingFile::create(p, rank_, &rings_why);
      if (slot >= 0 && !rings) mine.ok = -3;
      if (rings) mine.rings_fd = rings->fd();
    }
    std::vector<int64_t> words =
        gather_words(reinterpret_cast<const int64_t*>(&mine), shm::kDescWords, 1, what);
    std::vector<shm::Desc> all(p);
    std::memcpy(static_cast<void*>(all.data()), words.data(), all.size() * sizeof(shm::Desc));
    std::string why;
    for (int q = 0; q < p && why.empty(); ++q) {
      if (all[q].ok != 1) why = fmt::format("rank {} {}", q, refusal_text(all[q].ok));
      // This rank's own arena failure: the system's reason, which only it knows.
      if (q == rank_ && all[q].ok == -1) why += ": " + arena_->why;
      if (q == rank_ && all[q].ok == -3) why += ": " + rings_why;
    }
    std::unique_ptr<shm::GroupPath> path;
    if (why.empty()) path = shm::GroupPath::open(arena_->arena, id_, all, rank_, &why);
    for (int q = 0; path && q < p; ++q) {
      if (q != rank_ && !rings->map_peer(q, all[q].pid, all[q].rings_fd, &why)) path.reset();
    }
    // This rank may read every peer (open() checked): payloads they send by address are
    // read from these processes.
    if (path) {
      for (int q = 0; q < p; ++q) mesh_->set_peer_pid(members_[q], all[q].pid);
    }
    const int64_t yes = path ? 1 : 0;
    const std::vector<int64_t> votes = gather_words(&yes, 1, 2, what);
    for (int q = 0; q < p && why.empty(); ++q) {
      if (votes[q] != 1) why = fmt::format("rank {} could not map every peer's arena", q);
    }
    if (why.empty()) {
      host_ = std::move(path);
      slot = -1;  // host_ releases it
      rings_ = rings;
      mesh_->add_rings(id_, std::move(rings), members_);
      same_host_p2p_.store(true, std::memory_order_release);
    }
    return why;
  }

  // Runs one collective; returns its error (null on success). `what`: the call's name.
  std::exception_ptr execute(CollectiveArgs& a, uint64_t seq, const std::string& what) {
    // On the sockets this thread reads its own messages (mesh.hpp). Not on the same-host
    // path: a FastReader scope keeps the I/O thread polling every millisecond, which on a
    // host with as many ranks as cores takes a core from a rank now and then.
    std::optional<Mesh::FastReader> fast;
    if (!host_) fast.emplace(*mesh_);
    const local::Tensor* ref = reference_tensor(a);
    const DType dtype = ref != nullptr ? ref->meta().dtype : DType::Float32;
    const int64_t count = ref != nullptr ? ref->meta().numel() : 0;
    try {
      if (mesh_->is_shut_down()) throw Error(what + ": the process group was shut down");
      if (!host_decided_) decide_host_path(what);
    } catch (...) {
      return std::current_exception();
    }
    if (host_) {
      fast.reset();
      try {
        host_->run(a, seq, dtype, count, mesh_->options().timeout, what,
                   [&](int q) { mesh_->check_alive({members_[static_cast<size_t>(q)]}, what); });
        return nullptr;
      } catch (...) {
        return std::current_exception();
      }
    }
    // The sockets' state of this call (step counters, send trackers): built only here.
    Run run(*mesh_, id_, seq, members_, rank_, a, dtype, count, what);
    try {
      run_on_sockets(run, a, dtype, count);
      run.finish();
      mesh_->finish_collective(id_, seq);
      return nullptr;
    } catch (...) {
      auto e = std::current_exception();
      std::string text;
      try {
        std::rethrow_exception(e);
      } catch (const std::exception& ex) {
        text = ex.what();
      }
      mesh_->send_abort(id_, seq, a.op, members_, code_of(e), text);
      mesh_->finish_collective(id_, seq);
      return e;
    }
  }

  // ------------------------------------------------------------ lanes (lane.hpp)

  // Why this rank offers no lane; "" when it may.
  std::string lane_refusal() const {
    if (!lanes_enabled()) return "DTR_LANES=0";
    if (!lane_refused_.empty()) return lane_refused_;
    if (mesh_->options().transport != "tcp")
      return concat("the group's transport is ", mesh_->options().transport);
    if (mesh_->encrypted()) return "the mesh is encrypted (CURVE), a lane is not";
    if (lane_host_of(mesh_->endpoint_of(members_[0])).empty())
      return concat("rank 0's endpoint ", mesh_->endpoint_of(members_[0]), " is not tcp");
    return "";
  }

  void set_lane_note(std::string note) {
    std::lock_guard lock(note_m_);
    lane_note_ = std::move(note);
  }

  // This rank's offer; rank 0 without a lane listens for one (a failure to listen is
  // this rank's refusal, written in the note).
  LaneOffer lane_offer(std::string& refusal) {
    LaneOffer o;
    refusal = lane_refusal();
    if (!refusal.empty()) return o;
    o.wants = 1;
    o.generation = lane_ ? lane_->generation() : 0;
    if (rank_ == 0 && !lane_) {
      std::string why;
      if (!listener_)
        listener_ = LaneListener::open(lane_host_of(mesh_->endpoint_of(members_[0])), &why);
      if (!listener_) {
        refusal = "could not listen for a lane: " + why;
        o.wants = 0;
        return o;
      }
      o.port = listener_->port();
      o.token = listener_->token();
    }
    return o;
  }

  // Throws when the group is shut down or a member is known dead: between a lane's sleeps.
  LaneCheck lane_check(const std::string& what) {
    return [this, &what] {
      if (mesh_->is_shut_down()) throw Error(what + ": the process group was shut down");
      mesh_->check_alive(members_, what);
    };
  }

  // A two-rank all_reduce on the group's lane, when both ranks can take one; false when
  // this call goes through ZeroMQ instead (both ranks decide alike from the two offers).
  bool lane_all_reduce(Run& run, const CollectiveArgs& a) {
    const int other = 1 - rank_;
    std::string refusal;
    const LaneOffer mine = lane_offer(refusal);
    run.send_bytes(other, &mine, sizeof mine);
    Incoming in = run.recv_bytes(other, sizeof(LaneOffer));
    LaneOffer theirs;
    std::memcpy(&theirs, in.payload.data(), sizeof theirs);
    if (theirs.magic != kLaneMagic) {
      throw ProtocolError(
          concat(run.what(), ": rank ", other, " sent a lane offer that is not one"));
    }
    const LaneOffer& o0 = rank_ == 0 ? mine : theirs;
    const LaneOffer& o1 = rank_ == 0 ? theirs : mine;
    if (o0.wants == 0 || o1.wants == 0) {
      set_lane_note(refusal.empty() ? concat("no lane (rank ", other, " keeps to ZeroMQ)")
                                    : concat("no lane (", refusal, ")"));
      return false;
    }
    if (o0.generation == 0 || o0.generation != o1.generation) {
      lane_.reset();                   // one side lost it (a failed call): both start a new one
      if (o0.port == 0) return false;  // rank 0 listens from the next call on
      if (!open_lane(run, o0, std::max(o0.generation, o1.generation) + 1)) return false;
    }
    try {
      lane_halves(run, a);
    } catch (...) {
      lane_failed(run, std::current_exception());
    }
    if (a.reduce == ReduceOp::Avg) {
      divide_by(a.outputs[0].raw_data(), a.outputs[0].meta().numel(), a.outputs[0].meta().dtype, 2);
    }
    return true;
  }

  // Opens a new lane (rank 0 accepts, rank 1 connects), each side bounded by
  // kLaneSetupTimeout, then both tell each other whether they have it. false when either
  // has not: the call goes through ZeroMQ, and so do the group's later ones (a firewall
  // between the hosts is not waited out at every call); the note says why.
  bool open_lane(Run& run, const LaneOffer& o0, uint32_t generation) {
    const int other = 1 - rank_;
    const std::string peer = mesh_->describe_rank(members_[static_cast<size_t>(other)]);
    const std::string host = lane_host_of(mesh_->endpoint_of(members_[0]));
    const LaneCheck check = lane_check(run.what());
    const auto by = std::min(run.deadline(), Clock::now() + kLaneSetupTimeout);
    std::string why;
    try {
      if (lane_fault_for_tests().load()) throw TransportError("the test's fault");
      if (rank_ == 0) {
        const int fd = listener_->accept(generation, by, check, run.what());
        lane_ = std::make_unique<Lane>(fd, generation, peer);
      } else {
        lane_ = Lane::connect(host, static_cast<uint16_t>(o0.port), o0.token, generation, by, check,
                              run.what(), peer);
      }
    } catch (const std::exception& e) {
      check();  // the peer's death or the group's end is not the lane's failure: thrown
      why = e.what();
    }
    listener_.reset();
    const uint32_t mine = lane_ ? 1 : 0;
    run.send_bytes(other, &mine, sizeof mine);
    Incoming in = run.recv_bytes(other, sizeof mine);
    uint32_t theirs = 0;
    std::memcpy(&theirs, in.payload.data(), sizeof theirs);
    if (mine == 1 && theirs == 1) {
      set_lane_note(concat("all_reduces of ", kLaneMinBytes >> 10, " KiB or more on a lane (tcp ",
                           host, ":", o0.port, ")"));
      return true;
    }
    lane_.reset();
    lane_refused_ = why.empty() ? concat("rank ", other, " could not open the lane")
                                : concat("could not open the lane: ", why);
    set_lane_note(concat("no lane (", lane_refused_, ")"));
    return false;
  }

  // Halves, as Open MPI's all_reduce of two ranks: each rank sends the other's half and
  // folds the other's copy of its own half into it as it arrives (rank 0's value first,
  // so both end with the same bits as the pair all_reduce), then they swap folded halves.
  void lane_halves(Run& run, const CollectiveArgs& a) {
    const Block b = block_of(a.outputs[0]);
    const int64_t es = run.es();
    const int64_t first = b.numel / 2;  // rank 0's half: [0, first); rank 1's: [first, n)
    const int r = rank_;
    char* mine = b.data + (r == 0 ? 0 : first) * es;
    char* theirs = b.data + (r == 0 ? first : 0) * es;
    const auto mine_bytes = static_cast<size_t>((r == 0 ? first : b.numel - first) * es);
    const auto theirs_bytes = static_cast<size_t>((r == 0 ? b.numel - first : first) * es);
    const LaneCheck check = lane_check(run.what());
    lane_->stamp(run.seq(), run.deadline(), check, run.what());
    lane_chunk_.resize(kLaneChunkBytes);
    Lane::Sink fold;
    fold.bytes = mine_bytes;
    fold.chunk = lane_chunk_.data();
    fold.fold = [&](size_t offset, const char* data, size_t bytes) {
      char* dst = mine + offset;
      const auto n = static_cast<int64_t>(bytes) / es;
      if (r == 0) {
        run.reduce(dst, dst, data, n);
      } else {
        run.reduce(dst, data, dst, n);
      }
    };
    lane_->exchange(theirs, theirs_bytes, fold, run.deadline(), check, run.what());
    Lane::Sink gather;
    gather.bytes = theirs_bytes;
    gather.direct = theirs;
    lane_->exchange(mine, mine_bytes, gather, run.deadline(), check, run.what());
  }

  // A failed call on the lane: the lane is closed (the peer, if it still waits, sees it
  // close). When the peer closed it first, its Abort on the mesh says why: that error is
  // thrown if it comes within kAbortGrace.
  [[noreturn]] void lane_failed(Run& run, std::exception_ptr e) {
    lane_.reset();
    bool closed = false;
    try {
      std::rethrow_exception(e);
    } catch (const TransportError&) {
      closed = true;
    } catch (...) {
    }
    if (closed) {
      try {
        (void)mesh_->take(id_, run.seq(), members_[static_cast<size_t>(1 - rank_)],
                          Clock::now() + kAbortGrace, members_, run.what());
      } catch (const TimeoutError&) {
        // no Abort came: the lane's own error stands
      }
    }
    std::rethrow_exception(e);
  }

  // The tensor whose dtype and element count every rank's call must match (nullptr for a
  // barrier).
  static const local::Tensor* reference_tensor(const CollectiveArgs& a) {
    switch (a.op) {
      case CommOp::Broadcast:
      case CommOp::AllReduce:
      case CommOp::Reduce:
      case CommOp::Scatter:
      case CommOp::ReduceScatter:
        return &a.outputs[0];
      case CommOp::AllGather:
      case CommOp::Gather:
        return &a.inputs[0];
      default:
        return nullptr;
    }
  }

  void run_on_sockets(Run& run, CollectiveArgs& a, DType dtype, int64_t count) {
    switch (a.op) {
      case CommOp::Broadcast:
        if (size() > 1) broadcast(run, a);
        return;
      case CommOp::AllReduce:
        if (size() == 2 && count >= 2 &&
            static_cast<size_t>(count) * element_size(dtype) >= kLaneMinBytes &&
            lane_all_reduce(run, a))
          return;
        return all_reduce(run, a);
      case CommOp::Reduce:
        if (size() > 1) {
          reduce(run, a);
        } else if (a.reduce == ReduceOp::Avg) {
          divide_by(a.outputs[0].raw_data(), count, dtype, 1);
        }
        return;
      case CommOp::AllGather:
        return all_gather(run, a);
      case CommOp::Gather:
        return gather(run, a);
      case CommOp::Scatter:
        return scatter(run, a);
      case CommOp::ReduceScatter:
        return reduce_scatter(run, a);
      case CommOp::Barrier:
        if (size() > 1) recursive_doubling(run, nullptr, 0);
        return;
      default:
        throw InvalidArgument(fmt::format("{} is not a collective", comm_op_name(a.op)));
    }
  }

  std::shared_ptr<Mesh> mesh_;
  uint64_t id_;
  std::vector<int> members_;
  int rank_ = -1;
  std::string call_suffix_;  // " on rank 1 of a group of 4", for collective_name()
  std::string inline_what_;  // the name of the call running inline (guarded by exec_'s gate)
  std::mutex m_;
  uint64_t seq_ = 0;
  uint64_t children_ = 0;
  std::shared_ptr<const HostArena> arena_;
  bool host_decided_ = false;  // the collectives' thread only
  std::unique_ptr<shm::GroupPath> host_;
  // Set once the same-host path is agreed (after rings_): sends go through rings_.
  std::atomic<bool> same_host_p2p_{false};
  std::shared_ptr<shm::RingFile> rings_;
  mutable std::mutex note_m_;
  std::string host_note_;
  std::string lane_note_;  // large all_reduces of a two-rank group on the sockets
  // The lane of a two-rank group on the sockets (lane.hpp), rank 0's listener for a new
  // one, and the chunk its folds read from: the collectives' thread only.
  std::unique_ptr<Lane> lane_;
  std::unique_ptr<LaneListener> listener_;
  std::vector<char> lane_chunk_;
  std::string lane_refused_;  // set when a lane could not be opened: none is tried again
  SerialExecutor exec_;
};

}  // namespace

std::shared_ptr<Backend> make_zmq_world(std::shared_ptr<Mesh> mesh) {
  std::vector<int> all(mesh->size());
  for (int i = 0; i < mesh->size(); ++i) all[i] = i;
  auto host = std::make_shared<HostArena>();
  if (mesh->options().same_host && common::same_host_enabled()) {
    host->arena = shm::Arena::create(&host->why);
    host->refusal = -1;
  }
  return std::make_shared<ZmqGroup>(std::move(mesh), 1, std::move(all), std::move(host));
}

}  // namespace dtr::pg
