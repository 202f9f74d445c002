// The zmq backend's same-host path (pg/zmq/shm_path.hpp).
#include "pg/zmq/shm_path.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <linux/futex.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>
#include <fstream>
#include <sstream>
#include <thread>

#include "common/same_host.hpp"
#include "pg/reduce.hpp"
#include "pg/zmq/mesh.hpp"

namespace dtr::pg::shm {
namespace {

constexpr uint64_t kMagic = 0x31686d732d727464ull;  // "dtr-shm1"
// Reductions and in-place reads go segment by segment, so that the operands stay in cache.
constexpr size_t kSegmentBytes = size_t{256} << 10;
// A wait polls for kSpinFor, then sleeps on the peer's futex word in slices of at most
// kSleepSlice. When the group's ranks outnumber this process's CPUs, a polling rank would
// only hold back the one it waits for (sched_yield does not reliably hand the CPU over): it
// polls kCrowdedSpins times and then sleeps.
constexpr auto kSpinFor = std::chrono::microseconds(100);
constexpr int kCrowdedSpins = 64;
constexpr auto kCrowdedYieldFor = std::chrono::milliseconds(2);
constexpr auto kSleepSlice = std::chrono::milliseconds(1);
constexpr size_t kAbortTextBytes = 512;
// How long a failed read of a peer's tensor waits for the mesh's verdict on that peer.
constexpr auto kVerdictWait = std::chrono::seconds(2);

std::atomic<uint64_t> g_collectives{0};

size_t round_up(size_t n, size_t to) {
  return (n + to - 1) / to * to;
}

void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

int64_t boot_hash() {
  std::ifstream f("/proc/sys/kernel/random/boot_id");
  std::stringstream ss;
  ss << f.rdbuf();
  return static_cast<int64_t>(std::hash<std::string>{}(ss.str()));
}

int64_t pidns_inode() {
  struct stat st {};
  if (::stat("/proc/self/ns/pid", &st) != 0) return 0;
  return static_cast<int64_t>(st.st_ino);
}

}  // namespace

// One collective's signature and tensors, as one rank posted them.
struct Post {
  uint8_t op = 0;
  uint8_t dtype = 0;
  uint8_t reduce = 0;
  uint8_t is_inline = 0;
  int32_t root = 0;
  int64_t count = 0;
  uint32_t nblocks = 0;
  uint32_t reserved = 0;
  uint64_t block_bytes = 0;
  uint64_t address[kMaxRanks] = {};
  alignas(64) char data[kInlineBytes];
};

// A collective that its rank failed: its number, the error's class and text (published
// last, after the text). A rank is at most one collective ahead of any peer (post() waits
// for s - 2), so one record per parity keeps the error of the collective a slower peer is
// still in when the rank fails the next one too.
struct Abort {
  std::atomic<uint64_t> seq{0};
  std::atomic<int32_t> code{0};
  char text[kAbortTextBytes];
};

// One group's words in its owner's arena (see shm_path.hpp). Only the owner writes them,
// except `sleepers`, which waiting peers count themselves in.
struct alignas(64) Slot {
  std::atomic<uint64_t> group{0};  // 0: free
  alignas(64) std::atomic<uint64_t> posted{0};
  alignas(64) std::atomic<uint64_t> stage{0};
  alignas(64) std::atomic<uint64_t> done{0};
  alignas(64) std::atomic<uint32_t> events{0};  // futex word: bumped at every publish
  std::atomic<uint32_t> sleepers{0};
  alignas(64) Abort abort[2];  // by the collective's parity
  Post post[2];
};

// The last collective `s` failed.
uint64_t last_abort(const Slot& s) {
  return std::max(s.abort[0].seq.load(), s.abort[1].seq.load());
}
static_assert(std::atomic<uint64_t>::is_always_lock_free);
static_assert(std::atomic<uint32_t>::is_always_lock_free);

struct ArenaLayout {
  uint64_t magic = 0;
  uint64_t nonce = 0;
  Slot slots[kSlots];
};
static_assert(sizeof(ArenaLayout) < (size_t{42} << 20) / 10, "shm_path.hpp says about 4.1 MiB");

namespace {

void wake(Slot& s) {
  s.events.fetch_add(1);
  if (s.sleepers.load() > 0) {
    syscall(SYS_futex, reinterpret_cast<uint32_t*>(&s.events), FUTEX_WAKE, INT_MAX, nullptr,
            nullptr, 0);
  }
}

void publish(Slot& s, std::atomic<uint64_t>& word, uint64_t seq) {
  word.store(seq);
  wake(s);
}

}  // namespace

// ---------------------------------------------------------------- Arena

std::shared_ptr<Arena> Arena::create(std::string* why) {
  std::shared_ptr<Arena> a(new Arena());
  a->fd_ = ::memfd_create("dtr-pg-arena", MFD_CLOEXEC);
  if (a->fd_ < 0) {
    *why = fmt::format("memfd_create failed: {}", std::strerror(errno));
    return nullptr;
  }
  if (::ftruncate(a->fd_, sizeof(ArenaLayout)) != 0) {
    *why = fmt::format("sizing the arena failed: {}", std::strerror(errno));
    return nullptr;
  }
  void* p = ::mmap(nullptr, sizeof(ArenaLayout), PROT_READ | PROT_WRITE, MAP_SHARED, a->fd_, 0);
  if (p == MAP_FAILED) {
    *why = fmt::format("mapping the arena failed: {}", std::strerror(errno));
    return nullptr;
  }
  // Default-initialized, not value-initialized: the memfd reads as zeros already, and
  // zeroing the whole arena would touch every page of it (the inline buffers are 4 MiB).
  a->layout_ = new (p) ArenaLayout;
  a->layout_->nonce = common::random_challenge();
  std::atomic_thread_fence(std::memory_order_release);
  a->layout_->magic = kMagic;
  a->used_.assign(kSlots, false);
  return a;
}

Arena::~Arena() {
  if (layout_ != nullptr) ::munmap(layout_, sizeof(ArenaLayout));
  if (fd_ >= 0) ::close(fd_);
}

int Arena::acquire(uint64_t group) {
  std::lock_guard lock(m_);
  for (int i = 0; i < kSlots; ++i) {
    if (used_[i]) continue;
    used_[i] = true;
    Slot& s = layout_->slots[i];
    s.posted.store(0);
    s.stage.store(0);
    s.done.store(0);
    s.abort[0].seq.store(0);
    s.abort[1].seq.store(0);
    s.group.store(group);
    return i;
  }
  return -1;
}

void Arena::release(int slot) {
  std::lock_guard lock(m_);
  Slot& s = layout_->slots[slot];
  s.group.store(0);
  wake(s);  // a peer still waiting on it looks again and finds the group gone
  used_[slot] = false;
}

Slot& Arena::slot(int i) {
  return layout_->slots[i];
}

Desc Arena::describe(int slot) const {
  Desc d;
  d.ok = 1;
  d.pid = ::getpid();
  d.fd = fd_;
  d.slot = slot;
  d.nonce = static_cast<int64_t>(layout_->nonce);
  d.nonce_address = static_cast<int64_t>(reinterpret_cast<uintptr_t>(&layout_->nonce));
  d.boot = boot_hash();
  d.pidns = pidns_inode();
  return d;
}

// ---------------------------------------------------------------- GroupPath

struct GroupPath::Peer {
  Slot* slot = nullptr;
  void* map = nullptr;  // the peer's arena, mapped here (nullptr for this rank)
  uint32_t pid = 0;
};

std::unique_ptr<GroupPath> GroupPath::open(std::shared_ptr<Arena> mine, uint64_t group,
                                           const std::vector<Desc>& all, int rank,
                                           std::string* why) {
  std::unique_ptr<GroupPath> g(new GroupPath());
  g->arena_ = std::move(mine);
  g->group_ = group;
  g->rank_ = rank;
  const Desc& me = all[rank];
  for (size_t q = 0; q < all.size(); ++q) {
    auto* peer = new Peer();
    g->peers_.push_back(peer);
    const Desc& d = all[q];
    peer->pid = static_cast<uint32_t>(d.pid);
    if (static_cast<int>(q) == rank) {
      peer->slot = &g->arena_->slot(static_cast<int>(me.slot));
      continue;
    }
    if (d.boot != me.boot || d.pidns != me.pidns) {
      *why = fmt::format("rank {} runs on another host or in another PID namespace", q);
      return nullptr;
    }
    if (d.slot < 0 || d.slot >= kSlots) {
      *why = fmt::format("rank {} announced slot {} of {}", q, d.slot, kSlots);
      return nullptr;
    }
    const std::string path = fmt::format("/proc/{}/fd/{}", d.pid, d.fd);
    const int fd = ::open(path.c_str(), O_RDWR | O_CLOEXEC);
    if (fd < 0) {
      *why = fmt::format("opening rank {}'s arena ({}) failed: {}", q, path, std::strerror(errno));
      return nullptr;
    }
    struct stat st {};
    void* p = MAP_FAILED;
    if (::fstat(fd, &st) == 0 && static_cast<size_t>(st.st_size) == sizeof(ArenaLayout)) {
      p = ::mmap(nullptr, sizeof(ArenaLayout), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    }
    ::close(fd);
    if (p == MAP_FAILED) {
      *why = fmt::format("rank {}'s arena ({}) is not one of dtr's", q, path);
      return nullptr;
    }
    peer->map = p;
    auto* layout = static_cast<ArenaLayout*>(p);
    if (layout->magic != kMagic || layout->nonce != static_cast<uint64_t>(d.nonce)) {
      *why = fmt::format("rank {}'s arena ({}) does not hold its nonce", q, path);
      return nullptr;
    }
    const std::string problem = common::challenge_problem(
        peer->pid, static_cast<uint64_t>(d.nonce_address), static_cast<uint64_t>(d.nonce));
    if (!problem.empty()) {
      *why = fmt::format("rank {}: {}", q, problem);
      return nullptr;
    }
    peer->slot = &layout->slots[d.slot];
  }
  g->crowded_ = static_cast<int>(all.size()) > affinity_cpus();
  g->tmp_a_.resize(kSegmentBytes);
  g->tmp_b_.resize(kSegmentBytes);
  g->slot_ = static_cast<int>(me.slot);  // released with the path from here on
  return g;
}

GroupPath::~GroupPath() {
  for (Peer* p : peers_) {
    if (p->map != nullptr) ::munmap(p->map, sizeof(ArenaLayout));
    delete p;
  }
  if (slot_ >= 0 && arena_) arena_->release(slot_);
}

uint64_t collectives_run() {
  return g_collectives.load();
}

// ---------------------------------------------------------------- one collective

class GroupPath::Call {
 public:
  Call(GroupPath& g, const CollectiveArgs& a, uint64_t seq, DType dtype, int64_t count,
       std::chrono::milliseconds timeout, const std::string& what,
       const std::function<void(int)>& check)
      : g_(g),
        a_(a),
        s_(seq),
        dtype_(dtype),
        count_(count),
        es_(element_size(dtype)),
        timeout_(timeout),
        deadline_(Clock::now() + timeout),
        what_(what),
        check_(check),
        p_(static_cast<int>(g.peers_.size())),
        r_(g.rank_),
        mine_(*g.peers_[g.rank_]->slot),
        post_(mine_.post[seq % 2]) {}

  void run();
  void fail(const std::exception_ptr& e);

 private:
  Slot& slot(int q) { return *g_.peers_[q]->slot; }
  const Post& post_of(int q) { return slot(q).post[s_ % 2]; }
  size_t bytes() const { return static_cast<size_t>(count_) * es_; }

  template <class Ready>
  void wait(int q, Ready ready, const char* for_what);
  // Throws the error a peer published for this collective, or that rank q (waited for) left.
  void check_peers(int q);
  void post(const std::vector<const char*>& blocks);
  void sync_posts();
  void check_signature(int q);
  const char* view(int q, int b, size_t off, size_t len, const char* own, std::vector<char>& tmp);
  void copy(int q, int b, size_t off, size_t len, char* dst, const char* own);
  void read_peer(int q, uint64_t address, char* dst, size_t len);
  void fold(char* out, const char* own, int b, int64_t first, int64_t n);
  void finish();

  void all_reduce();
  void broadcast();
  void reduce();
  void all_gather();
  void gather();
  void scatter();
  void reduce_scatter();

  GroupPath& g_;
  const CollectiveArgs& a_;
  const uint64_t s_;
  const DType dtype_;
  const int64_t count_;
  const size_t es_;
  const std::chrono::milliseconds timeout_;
  const Clock::time_point deadline_;
  const std::string& what_;
  const std::function<void(int)>& check_;
  const int p_, r_;
  Slot& mine_;
  Post& post_;
  bool in_place_ = false;  // peers read this rank's tensors in place: wait for their done
};

template <class Ready>
void GroupPath::Call::wait(int q, Ready ready, const char* for_what) {
  if (g_.crowded_) {
    for (int i = 0; i < kCrowdedSpins; ++i) {
      if (ready()) return;
      cpu_relax();
    }
  } else {
    const auto spin_until = Clock::now() + kSpinFor;
    for (int i = 1;; ++i) {
      if (ready()) return;
      cpu_relax();
      if (i % 256 == 0 && Clock::now() >= spin_until) break;
    }
  }
  Slot& peer = slot(q);
  const auto start = Clock::now();
  auto last_check = start;
  while (!ready()) {
    check_peers(q);
    const auto now = Clock::now();
    if (now >= deadline_) {
      throw TimeoutError(fmt::format("{}: timed out after {} ms waiting for rank {} ({})", what_,
                                     timeout_.count(), q, for_what));
    }
    if (now - last_check >= kSleepSlice) {
      try {
        check_(q);
      } catch (...) {
        // q may have done its part between ready() above and leaving the group: its leave
        // then fails nothing (seen as "left the process group" by the last rank to finish).
        if (ready()) return;
        throw;
      }
      last_check = now;
    }
    if (g_.crowded_ && now - start < kCrowdedYieldFor) {
      ::sched_yield();
      continue;
    }
    peer.sleepers.fetch_add(1);
    const uint32_t ev = peer.events.load();
    if (!ready()) {
      const auto slice = std::min<Clock::duration>(kSleepSlice, deadline_ - now);
      const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(slice).count();
      timespec ts{static_cast<time_t>(ns / 1000000000), static_cast<long>(ns % 1000000000)};
      syscall(SYS_futex, reinterpret_cast<uint32_t*>(&peer.events), FUTEX_WAIT, ev, &ts, nullptr,
              0);
    }
    peer.sleepers.fetch_sub(1);
  }
}

// A rank other than q that left after doing its part of this collective fails nothing.
void GroupPath::Call::check_peers(int q) {
  for (int o = 0; o < p_; ++o) {
    if (o == r_) continue;
    // This collective's record. A failure of the next one (s_ + 1: the peer is ahead, having
    // done its part of this one) fails nothing here; one further on can only come from a
    // peer that gave up waiting for this rank, and is thrown too.
    for (const Abort& ab : slot(o).abort) {
      const uint64_t seq = ab.seq.load();
      if (seq != s_ && seq < s_ + 2) continue;
      char text[kAbortTextBytes];
      std::memcpy(text, ab.text, sizeof text);
      text[sizeof text - 1] = '\0';
      throw_coded(static_cast<ErrCode>(ab.code.load()), text);
    }
  }
  if (slot(q).group.load() != g_.group_) {
    // Its group was destroyed, in order: named as the mesh names a goodbye (which may not
    // have arrived yet), so that callers tell an orderly leave from a failure alike.
    throw TransportError(fmt::format(
        "{}: rank {} left the process group (shut down): its group was destroyed", what_, q));
  }
}

void GroupPath::Call::post(const std::vector<const char*>& blocks) {
  const size_t bb = bytes();
  const size_t stride = round_up(bb, 64);
  if (s_ > 2) {  // peers are done with this parity's previous post
    for (int q = 0; q < p_; ++q) {
      if (q == r_) continue;
      Slot& peer = slot(q);
      wait(
          q, [&] { return peer.done.load() >= s_ - 2 || last_abort(peer) >= s_ - 2; },
          "its previous collective");
    }
  }
  post_.op = static_cast<uint8_t>(a_.op);
  post_.dtype = static_cast<uint8_t>(dtype_);
  post_.reduce = static_cast<uint8_t>(a_.reduce);
  post_.root = a_.root;
  post_.count = count_;
  post_.nblocks = static_cast<uint32_t>(blocks.size());
  post_.block_bytes = bb;
  post_.is_inline = blocks.size() * stride <= kInlineBytes;
  for (size_t b = 0; b < blocks.size(); ++b) {
    if (post_.is_inline) {
      if (bb > 0) std::memcpy(post_.data + b * stride, blocks[b], bb);
    } else {
      post_.address[b] = reinterpret_cast<uintptr_t>(blocks[b]);
    }
  }
  in_place_ = !post_.is_inline && !blocks.empty();
  publish(mine_, mine_.posted, s_);
}

void GroupPath::Call::check_signature(int q) {
  const Post& t = post_of(q);
  const auto their_op = static_cast<CommOp>(t.op);
  if (their_op != a_.op) {
    throw InvalidArgument(
        fmt::format("{}: rank {} called {} at the same point", what_, q, comm_op_name(their_op)));
  }
  if (a_.op == CommOp::Barrier) return;
  if (t.dtype != static_cast<uint8_t>(dtype_)) {
    throw DTypeError(fmt::format(
        "{}: dtype mismatch: rank {} has {}, rank {} has {}", what_, q,
        is_valid_dtype(t.dtype) ? dtype_name(static_cast<DType>(t.dtype)) : std::string_view("?"),
        r_, dtype_name(dtype_)));
  }
  if (t.count != count_) {
    throw ShapeError(
        fmt::format("{}: size mismatch: rank {} has {} elements per rank, rank {} has {}", what_, q,
                    t.count, r_, count_));
  }
  if (t.reduce != static_cast<uint8_t>(a_.reduce)) {
    throw InvalidArgument(fmt::format("{}: reduce op mismatch: rank {} uses {}, rank {} uses {}",
                                      what_, q, reduce_op_name(static_cast<ReduceOp>(t.reduce)), r_,
                                      reduce_op_name(a_.reduce)));
  }
  if (t.root != a_.root) {
    throw InvalidArgument(fmt::format("{}: root mismatch: rank {} uses root {}, rank {} uses {}",
                                      what_, q, t.root, r_, a_.root));
  }
  if (t.block_bytes != bytes() || t.nblocks > static_cast<uint32_t>(p_) ||
      (t.is_inline && t.nblocks * round_up(t.block_bytes, 64) > kInlineBytes)) {
    throw ProtocolError(fmt::format("{}: rank {} posted {} blocks of {} bytes, expected {} bytes",
                                    what_, q, t.nblocks, t.block_bytes, bytes()));
  }
}

void GroupPath::Call::sync_posts() {
  for (int q = 0; q < p_; ++q) {
    if (q == r_) continue;
    Slot& peer = slot(q);
    wait(
        q, [&] { return peer.posted.load() >= s_; }, "its call");
    check_signature(q);
  }
}

// Bytes [off, off + len) of block b as rank q posted it: this rank's own tensor, the
// peer's inline post, or a copy read from the peer's tensor into tmp.
const char* GroupPath::Call::view(int q, int b, size_t off, size_t len, const char* own,
                                  std::vector<char>& tmp) {
  const Post& t = post_of(q);
  if (static_cast<uint32_t>(b) >= t.nblocks) {
    throw ProtocolError(
        fmt::format("{}: rank {} posted {} blocks, block {} is needed", what_, q, t.nblocks, b));
  }
  if (t.is_inline) return t.data + b * round_up(t.block_bytes, 64) + off;
  if (q == r_) return own + off;
  read_peer(q, t.address[b] + off, tmp.data(), len);
  return tmp.data();
}

void GroupPath::Call::copy(int q, int b, size_t off, size_t len, char* dst, const char* own) {
  if (len == 0) return;
  const int64_t n = static_cast<int64_t>(len / es_);
  if (q == r_) {
    if (dst != own + off) std::memmove(dst, own + off, len);
    return;
  }
  const Post& t = post_of(q);
  if (static_cast<uint32_t>(b) >= t.nblocks) {
    throw ProtocolError(
        fmt::format("{}: rank {} posted {} blocks, block {} is needed", what_, q, t.nblocks, b));
  }
  if (t.is_inline) {
    copy_elements(dst, t.data + b * round_up(t.block_bytes, 64) + off, n, dtype_);
    return;
  }
  read_peer(q, t.address[b] + off, dst, len);
  if (dtype_ == DType::Bool) copy_elements(dst, dst, n, dtype_);  // a peer's byte may be any
}

// One direct read of a peer's tensor. When it fails (the process died, or freed the memory
// it posted), the mesh's verdict on the peer, which names its rank and endpoint, is waited
// for briefly and thrown instead; else the read's own error.
void GroupPath::Call::read_peer(int q, uint64_t address, char* dst, size_t len) {
  try {
    common::read_process_memory(g_.peers_[q]->pid, address, dst, len,
                                fmt::format("{}: reading rank {}'s tensor", what_, q));
  } catch (const TransportError&) {
    const auto until = std::min<Clock::time_point>(deadline_, Clock::now() + kVerdictWait);
    while (Clock::now() < until) {
      check_(q);
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    throw;
  }
}

// out[first, first + n) = block b of rank 0 (op) block b of rank 1 (op) ... in rank order,
// segment by segment. `own` is this rank's block b (may be `out`: it is read before the
// last step writes it).
void GroupPath::Call::fold(char* out, const char* own, int b, int64_t first, int64_t n) {
  const int64_t per = std::max<int64_t>(1, static_cast<int64_t>(kSegmentBytes / es_));
  for (int64_t at = first; at < first + n; at += per) {
    const int64_t len = std::min(per, first + n - at);
    const size_t off = static_cast<size_t>(at) * es_, bytes = static_cast<size_t>(len) * es_;
    const char* acc = view(0, b, off, bytes, own, g_.tmp_a_);
    for (int q = 1; q < p_; ++q) {
      const char* hi = view(q, b, off, bytes, own, g_.tmp_b_);
      char* dst = q == p_ - 1 ? out + off : g_.tmp_a_.data();
      reduce_into(dst, acc, hi, len, dtype_, a_.reduce);
      acc = dst;
    }
  }
}

void GroupPath::Call::finish() {
  publish(mine_, mine_.done, s_);
  if (!in_place_) return;
  for (int q = 0; q < p_; ++q) {
    if (q == r_) continue;
    Slot& peer = slot(q);
    wait(
        q, [&] { return peer.done.load() >= s_; }, "it to finish reading");
  }
}

void GroupPath::Call::all_reduce() {
  char* buf = static_cast<char*>(a_.outputs[0].raw_data());
  post({buf});
  sync_posts();
  if (post_.is_inline) {
    fold(buf, buf, 0, 0, count_);
    if (a_.reduce == ReduceOp::Avg) divide_by(buf, count_, dtype_, p_);
    finish();
    return;
  }
  // Chunk c is folded by rank c, then copied from it by the others.
  auto first = [&](int c) { return count_ * c / p_; };
  const int64_t mine_first = first(r_), mine_n = first(r_ + 1) - mine_first;
  fold(buf, buf, 0, mine_first, mine_n);
  if (a_.reduce == ReduceOp::Avg) divide_by(buf + mine_first * es_, mine_n, dtype_, p_);
  publish(mine_, mine_.stage, s_);
  for (int k = 1; k < p_; ++k) {
    const int q = (r_ + k) % p_;
    Slot& peer = slot(q);
    wait(
        q, [&] { return peer.stage.load() >= s_; }, "its share of the reduction");
    const size_t off = static_cast<size_t>(first(q)) * es_;
    copy(q, 0, off, static_cast<size_t>(first(q + 1) - first(q)) * es_, buf + off, buf);
  }
  finish();
}

void GroupPath::Call::broadcast() {
  char* buf = static_cast<char*>(a_.outputs[0].raw_data());
  post(r_ == a_.root ? std::vector<const char*>{buf} : std::vector<const char*>{});
  sync_posts();
  if (r_ != a_.root) copy(a_.root, 0, 0, bytes(), buf, buf);
  finish();
}

void GroupPath::Call::reduce() {
  char* buf = static_cast<char*>(a_.outputs[0].raw_data());
  post({buf});
  sync_posts();
  if (r_ == a_.root) {
    fold(buf, buf, 0, 0, count_);
    if (a_.reduce == ReduceOp::Avg) divide_by(buf, count_, dtype_, p_);
  }
  finish();
}

void GroupPath::Call::all_gather() {
  const char* in = static_cast<const char*>(a_.inputs[0].raw_data());
  post({in});
  sync_posts();
  for (int q = 0; q < p_; ++q) {
    copy(q, 0, 0, bytes(), static_cast<char*>(a_.outputs[q].raw_data()), in);
  }
  finish();
}

void GroupPath::Call::gather() {
  const char* in = static_cast<const char*>(a_.inputs[0].raw_data());
  post({in});
  sync_posts();
  if (r_ == a_.root) {
    for (int q = 0; q < p_; ++q) {
      copy(q, 0, 0, bytes(), static_cast<char*>(a_.outputs[q].raw_data()), in);
    }
  }
  finish();
}

void GroupPath::Call::scatter() {
  std::vector<const char*> blocks;
  if (r_ == a_.root) {
    for (const auto& t : a_.inputs) blocks.push_back(static_cast<const char*>(t.raw_data()));
  }
  post(blocks);
  sync_posts();
  char* out = static_cast<char*>(a_.outputs[0].raw_data());
  if (r_ == a_.root) {
    copy(r_, 0, 0, bytes(), out, blocks[r_]);
  } else {
    copy(a_.root, r_, 0, bytes(), out, nullptr);
  }
  finish();
}

void GroupPath::Call::reduce_scatter() {
  std::vector<const char*> blocks;
  for (const auto& t : a_.inputs) blocks.push_back(static_cast<const char*>(t.raw_data()));
  post(blocks);
  sync_posts();
  char* out = static_cast<char*>(a_.outputs[0].raw_data());
  fold(out, blocks[r_], r_, 0, count_);
  if (a_.reduce == ReduceOp::Avg) divide_by(out, count_, dtype_, p_);
  finish();
}

void GroupPath::Call::run() {
  switch (a_.op) {
    case CommOp::AllReduce:
      return all_reduce();
    case CommOp::Broadcast:
      return broadcast();
    case CommOp::Reduce:
      return reduce();
    case CommOp::AllGather:
      return all_gather();
    case CommOp::Gather:
      return gather();
    case CommOp::Scatter:
      return scatter();
    case CommOp::ReduceScatter:
      return reduce_scatter();
    case CommOp::Barrier:
      post({});
      sync_posts();
      return finish();
    default:
      throw InvalidArgument(fmt::format("{} is not a collective", comm_op_name(a_.op)));
  }
}

// Publishes the error so that every peer fails this collective with it.
void GroupPath::Call::fail(const std::exception_ptr& e) {
  std::string text;
  try {
    std::rethrow_exception(e);
  } catch (const std::exception& ex) {
    text = ex.what();
  } catch (...) {
    text = what_ + ": failed";
  }
  Abort& ab = mine_.abort[s_ % 2];
  const size_t n = std::min(text.size(), kAbortTextBytes - 1);
  std::memcpy(ab.text, text.data(), n);
  ab.text[n] = '\0';
  ab.code.store(static_cast<int32_t>(code_of(e)));
  publish(mine_, ab.seq, s_);
}

void GroupPath::run(const CollectiveArgs& a, uint64_t seq, DType dtype, int64_t count,
                    std::chrono::milliseconds timeout, const std::string& what,
                    const std::function<void(int)>& check) {
  Call call(*this, a, seq, dtype, count, timeout, what, check);
  try {
    call.run();
    g_collectives.fetch_add(1, std::memory_order_relaxed);
  } catch (...) {
    call.fail(std::current_exception());
    throw;
  }
}

}  // namespace dtr::pg::shm
