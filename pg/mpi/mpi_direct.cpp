// The mpi backend's own collectives over point-to-point messages (see mpi_direct.hpp).
#include "pg/mpi/mpi_direct.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <climits>
#include <cstring>

#include "pg/library_group.hpp"
#include "pg/mpi/spin_wait.hpp"
#include "pg/reduce.hpp"

namespace dtr::pg {
namespace {

std::string mpi_error_text(int rc) {
  char text[MPI_MAX_ERROR_STRING] = {};
  int len = 0;
  if (MPI_Error_string(rc, text, &len) != MPI_SUCCESS) return fmt::format("MPI error {}", rc);
  return std::string(text, static_cast<size_t>(len));
}

size_t bytes_of(const local::Tensor& t) {
  return static_cast<size_t>(t.meta().numel()) * element_size(t.dtype());
}

// The requests of one round of a direct collective, waited for together.
class Round {
 public:
  // `a`: the call, whose tensors' storages go with requests that are given up.
  Round(MpiDirectContext& ctx, const CollectiveArgs& a)
      : ctx_(ctx), a_(a), reqs_(ctx.lists->reqs), recv_(ctx.lists->is_recv) {
    reqs_.clear();
    recv_.clear();
  }
  Round(const Round&) = delete;
  Round& operator=(const Round&) = delete;
  ~Round() { give_up(); }  // only non-empty when a post or a wait threw

  // Keeps `m` alive with the requests if they are given up.
  void keep(std::shared_ptr<void> m) { memory_.push_back(std::move(m)); }

  void send(int peer, const void* data, size_t bytes) {
    if (bytes == 0) return;
    MPI_Request req = MPI_REQUEST_NULL;
    mpi_check(MPI_Isend(data, static_cast<int>(bytes), MPI_BYTE, peer, ctx_.tag, ctx_.comm, &req),
              *ctx_.what);
    reqs_.push_back(req);
    recv_.push_back(0);
  }
  void recv(int peer, void* data, size_t bytes) {
    if (bytes == 0) return;
    MPI_Request req = MPI_REQUEST_NULL;
    mpi_check(MPI_Irecv(data, static_cast<int>(bytes), MPI_BYTE, peer, ctx_.tag, ctx_.comm, &req),
              *ctx_.what);
    reqs_.push_back(req);
    recv_.push_back(1);
  }

  // Waits for every posted request (bounded by the deadline); the round is empty after.
  void wait() {
    SpinWait spin;
    for (uint32_t polls = 1;; ++polls) {
      int done = 0;
      const int rc =
          MPI_Testall(static_cast<int>(reqs_.size()), reqs_.data(), &done, MPI_STATUSES_IGNORE);
      if (rc != MPI_SUCCESS) {
        throw TransportError(fmt::format("{}: MPI: {}", *ctx_.what, mpi_error_text(rc)));
      }
      if (done) break;
      if (ctx_.stop->load()) throw TransportError(*ctx_.what + ": the process group was shut down");
      // The clock is read every 64th poll: on VMs a clock read costs more than a poll.
      if (polls % 64 == 0 && Clock::now() >= ctx_.deadline) {
        throw TimeoutError(fmt::format(
            "{}: not complete after the group's timeout (a rank did not reach it, or stopped)",
            *ctx_.what));
      }
      spin.pause();
    }
    reqs_.clear();
    recv_.clear();
  }

 private:
  // Cancels the pending receives and hands every request left to the group, with the memory
  // it may still read or write.
  void give_up() {
    if (reqs_.empty()) return;
    auto memory = std::make_shared<std::vector<std::shared_ptr<void>>>(std::move(memory_));
    for (const auto& t : a_.inputs) memory->push_back(t.storage());
    for (const auto& t : a_.outputs) memory->push_back(t.storage());
    memory->push_back(*ctx_.scratch);
    *ctx_.scratch = std::make_shared<std::vector<char>>();
    for (size_t i = 0; i < reqs_.size(); ++i) {
      if (reqs_[i] == MPI_REQUEST_NULL) continue;
      if (recv_[i]) MPI_Cancel(&reqs_[i]);
      ctx_.give_up(reqs_[i], memory);
    }
    reqs_.clear();
  }

  MpiDirectContext& ctx_;
  const CollectiveArgs& a_;
  std::vector<std::shared_ptr<void>> memory_;  // what keep() added
  std::vector<MPI_Request>& reqs_;             // the group's lists (MpiDirectContext::lists)
  std::vector<uint8_t>& recv_;
};

// Scratch memory of at least `bytes`.
char* scratch(MpiDirectContext& ctx, size_t bytes) {
  std::vector<char>& s = **ctx.scratch;
  if (s.size() < bytes) s.resize(bytes);
  return s.data();
}

// dst = parts[0] op parts[1] op ... in rank order; parts[rank] may be dst itself when it is
// read before dst is written (rank 0 or 1, or a world of two), else it is copied to `own`.
void fold(char* dst, std::vector<const char*>& parts, int rank, char* own, int64_t n, DType dt,
          ReduceOp op) {
  const size_t bytes = static_cast<size_t>(n) * element_size(dt);
  if (rank > 1) {
    std::memcpy(own, dst, bytes);
    parts[rank] = own;
  } else {
    parts[rank] = dst;
  }
  reduce_into(dst, parts[0], parts[1], n, dt, op);
  for (size_t q = 2; q < parts.size(); ++q) reduce_into(dst, dst, parts[q], n, dt, op);
}

// Every rank sends its whole tensor to every other and folds them all.
void all_reduce_small(CollectiveArgs& a, MpiDirectContext& ctx, Round& round) {
  const local::Tensor& t = a.outputs[0];
  const size_t bytes = bytes_of(t);
  const int p = ctx.size, r = ctx.rank;
  char* out = static_cast<char*>(t.raw_data());
  char* base = scratch(ctx, bytes * static_cast<size_t>(p));
  std::vector<const char*>& parts = ctx.lists->parts;
  parts.resize(static_cast<size_t>(p));
  for (int q = 0; q < p; ++q) {
    parts[q] = base + bytes * static_cast<size_t>(q);
    if (q == r) continue;
    // In pieces that each fit one eager message of Open MPI's shared-memory transport (a
    // larger one waits for the receiver's acknowledgement), all posted at once.
    for (size_t off = 0; off < bytes; off += kPieceBytes) {
      const size_t len = std::min(kPieceBytes, bytes - off);
      round.recv(q, base + bytes * static_cast<size_t>(q) + off, len);
      round.send(q, out + off, len);
    }
  }
  round.wait();
  fold(out, parts, r, base + bytes * static_cast<size_t>(r), t.meta().numel(), t.dtype(), a.reduce);
}

// The p chunks of a large all_reduce, cut into segments of at most `seg` elements.
struct Chunks {
  int64_t n = 0, seg = 1;
  int p = 1;
  int64_t begin(int q) const { return n * q / p; }
  int64_t len(int q) const { return begin(q + 1) - begin(q); }
  // Elements of segment k of chunk q (0 past its end), and where they start.
  int64_t seg_len(int q, int64_t k) const { return std::clamp(len(q) - k * seg, int64_t{0}, seg); }
  int64_t seg_begin(int q, int64_t k) const { return begin(q) + k * seg; }
};

// Rank q folds chunk q (every rank's segment k of it, in rank order) and sends the result
// on; the all-gather of segment k travels with the reduce-scatter of segment k + 1.
void all_reduce_large(CollectiveArgs& a, MpiDirectContext& ctx, Round& round) {
  const local::Tensor& t = a.outputs[0];
  const DType dt = t.dtype();
  const size_t es = element_size(dt);
  const int p = ctx.size, r = ctx.rank;
  Chunks c;
  c.n = t.meta().numel();
  c.p = p;
  c.seg = std::max<int64_t>(1, static_cast<int64_t>(kSegmentBytes / es));
  const int64_t rounds = (c.len(p - 1) + c.seg - 1) / c.seg;  // the last chunk is the longest
  const size_t seg_bytes = static_cast<size_t>(c.seg) * es;
  char* out = static_cast<char*>(t.raw_data());
  char* base = scratch(ctx, seg_bytes * static_cast<size_t>(p));
  auto slot = [&](int q) { return base + seg_bytes * static_cast<size_t>(q); };
  auto at = [&](int q, int64_t k) { return out + static_cast<size_t>(c.seg_begin(q, k)) * es; };
  auto post_reduce_scatter = [&](int64_t k) {
    for (int q = 0; q < p; ++q) {
      if (q == r) continue;
      round.recv(q, slot(q), static_cast<size_t>(c.seg_len(r, k)) * es);
      round.send(q, at(q, k), static_cast<size_t>(c.seg_len(q, k)) * es);
    }
  };
  std::vector<const char*>& parts = ctx.lists->parts;
  parts.resize(static_cast<size_t>(p));
  auto fold_segment = [&](int64_t k) {
    for (int q = 0; q < p; ++q) parts[q] = slot(q);
    if (c.seg_len(r, k) > 0) fold(at(r, k), parts, r, slot(r), c.seg_len(r, k), dt, a.reduce);
  };
  post_reduce_scatter(0);
  round.wait();
  fold_segment(0);
  for (int64_t k = 0; k < rounds; ++k) {
    for (int q = 0; q < p; ++q) {
      if (q == r) continue;
      round.send(q, at(r, k), static_cast<size_t>(c.seg_len(r, k)) * es);
      round.recv(q, at(q, k), static_cast<size_t>(c.seg_len(q, k)) * es);
    }
    if (k + 1 < rounds) post_reduce_scatter(k + 1);
    round.wait();
    if (k + 1 < rounds) fold_segment(k + 1);
  }
}

void broadcast(CollectiveArgs& a, MpiDirectContext& ctx, Round& round) {
  const local::Tensor& t = a.outputs[0];
  const size_t bytes = bytes_of(t);
  char* data = static_cast<char*>(t.raw_data());
  // A small tensor over shared memory goes in pieces that each fit one eager message (one
  // message of 4 KiB waits for the receiver's acknowledgement).
  const size_t piece = ctx.shared_memory && bytes <= kDirectSmallBytes ? kPieceBytes : bytes;
  for (size_t off = 0; off < bytes; off += piece) {
    const size_t len = std::min(piece, bytes - off);
    if (ctx.rank != a.root) {
      round.recv(a.root, data + off, len);
    } else {
      for (int q = 0; q < ctx.size; ++q) {
        if (q != a.root) round.send(q, data + off, len);
      }
    }
  }
  round.wait();
}

void all_gather(CollectiveArgs& a, MpiDirectContext& ctx, Round& round) {
  const local::Tensor& in = a.inputs[0];
  const size_t block = bytes_of(in);
  auto flat = std::make_shared<FlatBlocks>(a.outputs, false);
  round.keep(flat);
  char* own = flat->data() + block * static_cast<size_t>(ctx.rank);
  if (in.raw_data() != own && block > 0) std::memcpy(own, in.raw_data(), block);
  for (int q = 0; q < ctx.size; ++q) {
    if (q == ctx.rank) continue;
    round.recv(q, flat->data() + block * static_cast<size_t>(q), block);
    round.send(q, own, block);
  }
  round.wait();
  flat->copy_out(a.outputs);
}

}  // namespace

void mpi_check(int rc, const std::string& what) {
  if (rc != MPI_SUCCESS) throw TransportError(fmt::format("{}: MPI: {}", what, mpi_error_text(rc)));
}

bool mpi_direct_takes(const CollectiveArgs& a, bool shared_memory, int size) {
  switch (a.op) {
    case CommOp::AllReduce: {
      const size_t bytes = bytes_of(a.outputs[0]);
      return shared_memory || size == 2 || bytes >= kDirectAcrossHostsBytes;
    }
    // Between two ranks the root's one send is every broadcast algorithm, and one exchange
    // every all_gather's; among more across hosts, Open MPI's trees do better.
    case CommOp::Broadcast:
      return (shared_memory || size == 2) && bytes_of(a.outputs[0]) <= kDirectBroadcastMax;
    case CommOp::AllGather:
      return (shared_memory || size == 2) && bytes_of(a.inputs[0]) <= static_cast<size_t>(INT_MAX);
    default:
      return false;
  }
}

void run_mpi_direct(CollectiveArgs& a, MpiDirectContext& ctx) {
  Round round(ctx, a);
  switch (a.op) {
    case CommOp::AllReduce:
      if (bytes_of(a.outputs[0]) == 0) return;  // every rank has nothing (or mismatched calls)
      if (bytes_of(a.outputs[0]) <= kDirectSmallBytes) {
        all_reduce_small(a, ctx, round);
      } else {
        all_reduce_large(a, ctx, round);
      }
      break;
    case CommOp::Broadcast:
      broadcast(a, ctx, round);
      break;
    case CommOp::AllGather:
      all_gather(a, ctx, round);
      break;
    default:
      throw InvalidArgument(fmt::format("{}: not a direct collective", *ctx.what));
  }
}

}  // namespace dtr::pg
