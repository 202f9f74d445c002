#include "pg/library_group.hpp"

#include <fmt/format.h>

#include <cstring>

#include "pg/issue_order.hpp"
#include "pg/reduce.hpp"
#include "pg/signature.hpp"
#include "pg/util.hpp"

namespace dtr::pg {
namespace {

constexpr uint32_t kHeaderMagic = 0x50727464;  // "dtrP"
constexpr uint8_t kHeaderVersion = 1;
// A payload larger than this is refused before anything is allocated for it.
constexpr uint64_t kMaxPayloadBytes = uint64_t{1} << 40;

// The point-to-point header (LibraryGroup::kHeaderBytes on the wire, host byte order: the
// library backends run between ranks of one architecture, as the libraries themselves do).
struct Header {
  uint32_t magic = kHeaderMagic;
  uint8_t version = kHeaderVersion;
  uint8_t dtype = 0;
  uint8_t inline_payload = 0;  // 1: the payload follows in this message
  uint8_t reserved = 0;
  int32_t src = -1;  // sender's group rank
  int64_t numel = 0;
  uint64_t payload_id = 0;
  uint64_t bytes = 0;
};
static_assert(sizeof(Header) <= LibraryGroup::kHeaderBytes);

uint32_t collective_tag(uint64_t seq, bool signature) {
  return static_cast<uint32_t>((seq << 1) | (signature ? 1 : 0));
}

// The Avg step after the library summed (every rank holding a result divides it).
void finish_average(CollectiveArgs& a, int rank, int size) {
  if (a.reduce != ReduceOp::Avg || a.outputs.empty()) return;
  if (a.op == CommOp::Reduce && rank != a.root) return;
  if (a.op != CommOp::AllReduce && a.op != CommOp::Reduce && a.op != CommOp::ReduceScatter) return;
  const local::Tensor& t = a.outputs[0];
  divide_by(t.raw_data(), t.meta().numel(), t.meta().dtype, size);
}

// Checks a received header against the receive tensor; throws DTypeError / ShapeError naming
// both, ProtocolError for a header that cannot be one. `name()` gives the call's name (only
// formatted for an error).
template <typename Name>
void check_header(const Header& h, int from, const local::Tensor& t, Name&& name) {
  if (h.magic != kHeaderMagic || h.version != kHeaderVersion) {
    throw ProtocolError(
        fmt::format("{}: rank {} sent a message that is not a dtr header", name(), from));
  }
  if (h.src != from || h.dtype > static_cast<uint8_t>(DType::BFloat16) || h.numel < 0 ||
      h.bytes != static_cast<uint64_t>(h.numel) * element_size(static_cast<DType>(h.dtype)) ||
      h.bytes > kMaxPayloadBytes ||
      (h.inline_payload != 0 && h.bytes > LibraryGroup::kInlineBytes)) {
    throw ProtocolError(fmt::format(
        "{}: rank {} sent a malformed header (sender {}, dtype {}, {} elements, {} bytes)", name(),
        from, h.src, h.dtype, h.numel, h.bytes));
  }
  const auto got = static_cast<DType>(h.dtype);
  const DType dt = t.meta().dtype;
  const int64_t n = t.meta().numel();
  if (got != dt) {
    throw DTypeError(fmt::format(
        "{}: rank {} sent {} with {} elements, the receive tensor is {} with {} elements", name(),
        from, dtype_name(got), h.numel, dtype_name(dt), n));
  }
  if (h.numel != n) {
    throw ShapeError(fmt::format("{}: rank {} sent {} elements, the receive tensor has {} ({})",
                                 name(), from, h.numel, n, describe(t.meta())));
  }
}

// A group of one: each collective is a local copy, or nothing.
void run_single(CollectiveArgs& a) {
  auto copy = [](const local::Tensor& dst, const local::Tensor& src) {
    if (dst.raw_data() != src.raw_data()) {
      std::memcpy(dst.raw_data(), src.raw_data(), src.meta().numel() * element_size(src.dtype()));
    }
  };
  switch (a.op) {
    case CommOp::AllGather:
    case CommOp::Gather:
      copy(a.outputs[0], a.inputs[0]);
      break;
    case CommOp::Scatter:
    case CommOp::ReduceScatter:
      copy(a.outputs[0], a.inputs[0]);
      break;
    default:
      break;  // broadcast, all_reduce, reduce, barrier: the tensor is the result
  }
}

}  // namespace

FlatBlocks::FlatBlocks(const std::vector<local::Tensor>& blocks, bool copy_in) {
  if (blocks.empty()) return;
  const size_t bytes = blocks[0].meta().numel() * element_size(blocks[0].dtype());
  bool adjacent = true;
  for (size_t i = 1; i < blocks.size() && adjacent; ++i) {
    adjacent = blocks[i].storage() == blocks[0].storage() &&
               static_cast<char*>(blocks[i].raw_data()) ==
                   static_cast<char*>(blocks[0].raw_data()) + i * bytes;
  }
  if (adjacent) {
    data_ = static_cast<char*>(blocks[0].raw_data());
    return;
  }
  auto st = Storage::allocate(std::max<size_t>(1, bytes * blocks.size()));
  data_ = static_cast<char*>(st->data());
  staging_ = st;
  if (!copy_in || bytes == 0) return;
  for (size_t i = 0; i < blocks.size(); ++i) {
    std::memcpy(data_ + i * bytes, blocks[i].raw_data(), bytes);
  }
}

void FlatBlocks::copy_out(const std::vector<local::Tensor>& blocks) const {
  if (!staging_ || blocks.empty()) return;
  const size_t bytes = blocks[0].meta().numel() * element_size(blocks[0].dtype());
  if (bytes == 0) return;
  for (size_t i = 0; i < blocks.size(); ++i) {
    std::memcpy(blocks[i].raw_data(), data_ + i * bytes, bytes);
  }
}

namespace {
// A message's bytes: the header's kHeaderBytes zeroed, the rest not initialized. Up to
// `Local` bytes after the header lie inside the object (no allocation of their own: the
// operation holding it is one allocation); a larger message goes to the heap.
template <size_t Local>
class MessageBuffer {
 public:
  MessageBuffer() = default;
  MessageBuffer(const MessageBuffer&) = delete;
  MessageBuffer& operator=(const MessageBuffer&) = delete;
  void resize(size_t size) {
    if (size > sizeof local_) heap_.reset(new char[size]);
    size_ = size;
    std::memset(data(), 0, std::min(size, LibraryGroup::kHeaderBytes));
  }
  char* data() { return heap_ ? heap_.get() : local_; }
  size_t size() const { return size_; }

 private:
  alignas(8) char local_[LibraryGroup::kHeaderBytes + Local];
  std::unique_ptr<char[]> heap_;
  size_t size_ = 0;
};
}  // namespace

// A point-to-point call's name in messages ("send from rank 0 to rank 1 (tag 5, mpi)"),
// formatted on first use: an error, or a non-blocking call's Work. A blocking call that
// succeeds never formats it. Used by one thread at a time (the caller, then the pool).
struct LibraryGroup::P2PName {
  const LibraryGroup* group;
  bool send;
  int peer;  // destination, source, or kAnySource
  int tag;
  std::string text;

  const std::string& str() {
    if (!text.empty()) return text;
    const int me = group->rank_;
    if (send) {
      text =
          concat("send from rank ", me, " to rank ", peer, " (tag ", tag, ", ", group->name_, ")");
    } else if (peer == kAnySource) {
      text = concat("recv on rank ", me, " from any rank (tag ", tag, ", ", group->name_, ")");
    } else {
      text =
          concat("recv on rank ", me, " from rank ", peer, " (tag ", tag, ", ", group->name_, ")");
    }
    return text;
  }
};

struct LibraryGroup::SendOp {
  P2PName what;
  Clock::time_point deadline;
  // Header and inline payload; a payload of up to 192 bytes needs no allocation of its own.
  MessageBuffer<192> message;
  std::shared_ptr<void> keepalive;    // the tensor's storage while its payload is sent
  std::shared_ptr<Transfer> header;   // the header message
  std::shared_ptr<Transfer> payload;  // the payload message, when not inline
};

struct LibraryGroup::RecvOp {
  P2PName what;
  Clock::time_point deadline;
  local::Tensor tensor;
  // Room for a header and the largest inline payload, inside the operation. Only the
  // header's bytes are zeroed (a message shorter than a header then fails the magic check):
  // a 16 KiB memset per receive was most of a small receive's time.
  MessageBuffer<kInlineBytes> message;
  std::shared_ptr<Transfer> header;
};

LibraryGroup::LibraryGroup(std::string name, int rank, std::vector<int> world_ranks,
                           const ProcessGroupOptions& options)
    : name_(std::move(name)),
      rank_(rank),
      members_(std::move(world_ranks)),
      options_(options),
      call_suffix_(fmt::format(" on rank {} of a group of {} ({})", rank_, members_.size(), name_)),
      payload_ids_(members_.size()) {
  for (int q = 0; q < size(); ++q) {
    auto done = std::make_shared<Work::State>("a completed receive");
    done->complete(nullptr, q);
    done_from_.push_back(std::move(done));
  }
}

LibraryGroup::~LibraryGroup() {
  stop_threads();
}

void LibraryGroup::stop_threads() {
  exec_.stop();
  pool_.stop();
}

void LibraryGroup::mark_broken(const std::string& why) {
  std::lock_guard lock(m_);
  if (broken_.empty()) broken_ = why;
  is_broken_ = true;
}

void LibraryGroup::check_usable(const std::string& what) const {
  if (closing_.load()) throw TransportError(what + ": the process group was shut down");
  if (!is_broken_.load()) return;  // the common case takes no lock
  std::lock_guard lock(m_);
  if (!broken_.empty()) {
    throw TransportError(fmt::format(
        "{}: this {} group cannot be used after an earlier failure (neither gloo nor MPI can "
        "resume after one): {}",
        what, name_, broken_));
  }
}

std::shared_ptr<Transfer> LibraryGroup::track(std::shared_ptr<Transfer> t) {
  std::lock_guard lock(m_);
  transfers_.push_back(t);
  if (closing_.load()) t->abort();
  return t;
}

void LibraryGroup::untrack(const std::shared_ptr<Transfer>& t) {
  std::lock_guard lock(m_);
  // Few transfers are pending at once: a search, and the last moved into the hole, keep the
  // vector's memory (no allocation per message once it has grown).
  for (auto& slot : transfers_) {
    if (slot != t) continue;
    if (&slot != &transfers_.back()) slot = std::move(transfers_.back());
    transfers_.pop_back();
    return;
  }
}

int LibraryGroup::await(const std::shared_ptr<Transfer>& t, Clock::time_point deadline,
                        P2PName& what) {
  try {
    const int peer = t->wait(deadline);
    untrack(t);
    return peer;
  } catch (const TimeoutError& e) {
    untrack(t);
    throw TimeoutError(what.str() + ": " + e.what());
  } catch (const TransportError& e) {
    untrack(t);
    throw TransportError(what.str() + ": " + e.what());
  } catch (...) {
    untrack(t);
    throw;
  }
}

void LibraryGroup::check_p2p(P2PName& what, int tag) const {
  if (closing_.load() || is_broken_.load()) check_usable(what.str());
  std::string refused = unsupported_tag(tag);
  if (!refused.empty()) throw InvalidArgument(what.str() + ": " + refused);
}

namespace {
std::shared_ptr<Work::State> failed_state(const std::string& what, std::exception_ptr e) {
  auto work = std::make_shared<Work::State>(what);
  work->complete(std::move(e));
  return work;
}
}  // namespace

template <typename Body>
Work LibraryGroup::complete_with(bool blocking, P2PName& what, Body body) {
  if (blocking) {
    try {
      const int source = body();
      // Shared completed states: a blocking call that succeeds allocates none.
      return Work(source >= 0 && static_cast<size_t>(source) < done_from_.size()
                      ? done_from_[static_cast<size_t>(source)]
                      : done_work_state());
    } catch (...) {
      return Work(failed_state(what.str(), std::current_exception()));
    }
  }
  auto work = std::make_shared<Work::State>(what.str());
  pool_.post([work, body = std::move(body)] {
    try {
      const int source = body();
      work->complete(nullptr, source);
    } catch (...) {
      work->complete(std::current_exception());
    }
  });
  return Work(work);
}

// ---------------------------------------------------------------- point to point

Work LibraryGroup::isend(const local::Tensor& t, int dst, int tag, bool blocking) {
  auto op = std::make_shared<SendOp>();
  op->what = P2PName{this, true, dst, tag, {}};
  op->deadline = coarse_now() + options_.timeout;
  try {
    check_p2p(op->what, tag);
    Header h;
    h.dtype = static_cast<uint8_t>(t.meta().dtype);
    h.src = rank_;
    h.numel = t.meta().numel();
    h.bytes = static_cast<uint64_t>(h.numel) * element_size(t.meta().dtype);
    h.payload_id = payload_ids_[dst]++;
    h.inline_payload = h.bytes <= kInlineBytes ? 1 : 0;
    op->message.resize(kHeaderBytes + (h.inline_payload ? h.bytes : 0));
    std::memcpy(op->message.data(), &h, sizeof h);
    if (h.inline_payload && h.bytes > 0) {
      std::memcpy(op->message.data() + kHeaderBytes, t.raw_data(), h.bytes);
    }
    const Channel header{Channel::Kind::Header, static_cast<uint64_t>(static_cast<int64_t>(tag))};
    op->header = track(post_send(dst, header, op->message.data(), op->message.size(), op));
    if (!h.inline_payload) {
      op->keepalive = t.storage();
      const Channel payload{Channel::Kind::Payload, h.payload_id};
      op->payload = track(post_send(dst, payload, t.raw_data(), h.bytes, op));
    }
  } catch (...) {
    if (op->header) {  // its transfer holds `op`: drop it so that neither outlives the other
      untrack(op->header);
      op->header.reset();
    }
    return Work(failed_state(op->what.str(), std::current_exception()));
  }
  return complete_with(blocking, op->what, [this, op] {
    finish_send(*op);
    return -1;
  });
}

void LibraryGroup::finish_send(SendOp& op) {
  await(op.header, op.deadline, op.what);
  if (op.payload) await(op.payload, op.deadline, op.what);
}

Work LibraryGroup::irecv(const local::Tensor& t, int src, int tag, bool blocking) {
  auto op = std::make_shared<RecvOp>();
  op->what = P2PName{this, false, src, tag, {}};
  op->deadline = coarse_now() + options_.timeout;
  op->tensor = t;
  try {
    check_p2p(op->what, tag);
    op->message.resize(kHeaderBytes + kInlineBytes);
    const Channel header{Channel::Kind::Header, static_cast<uint64_t>(static_cast<int64_t>(tag))};
    op->header = track(post_recv(src, header, op->message.data(), op->message.size(), op));
  } catch (...) {
    return Work(failed_state(op->what.str(), std::current_exception()));
  }
  return complete_with(blocking, op->what, [this, op] { return finish_recv(*op); });
}

int LibraryGroup::finish_recv(RecvOp& op) {
  const int from = await(op.header, op.deadline, op.what);
  Header h;
  std::memcpy(&h, op.message.data(), sizeof h);
  const local::Tensor& t = op.tensor;
  const DType dt = t.meta().dtype;
  const int64_t n = t.meta().numel();
  if (h.inline_payload) {
    check_header(h, from, t, [&op]() -> const std::string& { return op.what.str(); });
    copy_elements(t.raw_data(), op.message.data() + kHeaderBytes, n, dt);
    return from;
  }
  try {
    check_header(h, from, t, [&op]() -> const std::string& { return op.what.str(); });
  } catch (const InvalidArgument&) {
    // Take the payload anyway (into scratch memory), so that the sender's send completes
    // and the channel stays clean.
    auto scratch = std::make_shared<std::vector<char>>(h.bytes);
    const Channel payload{Channel::Kind::Payload, h.payload_id};
    await(track(post_recv(from, payload, scratch->data(), scratch->size(), scratch)), op.deadline,
          op.what);
    throw;
  }
  const Channel payload{Channel::Kind::Payload, h.payload_id};
  await(track(post_recv(from, payload, t.raw_data(), h.bytes, t.storage())), op.deadline, op.what);
  if (dt == DType::Bool) copy_elements(t.raw_data(), t.raw_data(), n, dt);  // bytes to 0 or 1
  return from;
}

// ---------------------------------------------------------------- collectives

Work LibraryGroup::collective(CollectiveArgs args) {
  return run_in_issue_order(IssueOrder{m_, seq_, exec_, inline_what_, call_suffix_},
                            std::move(args),
                            [this](CollectiveArgs& a, uint64_t seq, const std::string& what) {
                              return execute(a, seq, what);
                            });
}

std::exception_ptr LibraryGroup::execute(CollectiveArgs& a, uint64_t seq, const std::string& what) {
  // A deadline of seconds: the coarse clock's few ms do not matter, its cost per call does.
  const auto deadline = coarse_now() + options_.timeout;
  try {
    check_usable(what);
    if (size() == 1) {
      run_single(a);
    } else {
      if (options_.verify_collectives) verify(a, seq, what, deadline);
      run(a, collective_tag(seq, false), what, deadline);
    }
    finish_average(a, rank_, size());
    return nullptr;
  } catch (const TimeoutError& e) {
    mark_broken(e.what());
    return std::current_exception();
  } catch (const TransportError& e) {
    mark_broken(e.what());
    return std::current_exception();
  } catch (...) {
    return std::current_exception();
  }
}

void LibraryGroup::verify(const CollectiveArgs& a, uint64_t seq, const std::string& what,
                          Clock::time_point deadline) {
  WordGather g = all_gather_words(collective_signature(a, -1, -1), size());
  run(g.args, collective_tag(seq, true), what + " (signature check)", deadline);
  check_signatures(what, a.op, g.all.data<int64_t>(), size());
}

void LibraryGroup::run_in_order(const std::string& what, const std::function<void()>& body) {
  auto work = std::make_shared<Work::State>(what);
  auto task = [work, body] {
    try {
      body();
      work->complete();
    } catch (...) {
      work->complete(std::current_exception());
    }
  };
  {
    std::unique_lock lock(m_);
    if (exec_.try_begin_inline()) {
      lock.unlock();
      task();
      exec_.end_inline();
    } else {
      exec_.post(task);
    }
  }
  Work(work).wait(options_.timeout * 2 + std::chrono::seconds(10));
}

void LibraryGroup::shutdown() {
  if (closing_.exchange(true)) return;
  {
    std::lock_guard lock(m_);
    for (auto& t : transfers_) t->abort();
  }
  close_library();
}

}  // namespace dtr::pg
