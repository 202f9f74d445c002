// Point-to-point rings of the same-host path (pg/zmq/p2p_ring.hpp).
#include "pg/zmq/p2p_ring.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <new>

#include "dtr/error.hpp"

namespace dtr::pg::shm {
namespace {

constexpr uint64_t kRingMagic = 0x31676e722d727464ull;  // "dtr-rng1"
constexpr uint64_t kWrapBit = uint64_t{1} << 63;

constexpr size_t round8(size_t n) {
  return (n + 7) / 8 * 8;
}
// Groups of at most this many ranks fault their rings' pages in when they map them (a
// first pass over fresh pages costs a fault every 4 KiB, which showed in small messages'
// tail latency); larger groups fault them as records pass.
constexpr int kPrefaultRanks = 16;

// Faults in (writable) the pages under [p, p + bytes), best effort. madvise wants a
// page-aligned start (a ring begins 64-byte aligned in its file).
void prefault(void* p, size_t bytes) {
  const auto page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
  const uintptr_t start = reinterpret_cast<uintptr_t>(p) & ~(page - 1);
  const uintptr_t end = reinterpret_cast<uintptr_t>(p) + bytes;
  (void)::madvise(reinterpret_cast<void*>(start), end - start, MADV_POPULATE_WRITE);
}

}  // namespace

struct RingFileHeader {
  uint64_t magic = 0;
  uint32_t ranks = 0;
  uint32_t ring_bytes = 0;
  alignas(64) std::atomic<uint32_t> bell{0};  // 1: the owner sleeps, wake it
  std::atomic<uint32_t> spinners{0};          // the owner's threads polling its rings
};

// A ring's head and tail; its ring_bytes() of data follow (RingFile::data).
struct Ring {
  std::atomic<uint64_t> head{0};              // bytes published (producer)
  alignas(64) std::atomic<uint64_t> tail{0};  // bytes read (consumer)
};
static_assert(std::atomic<uint64_t>::is_always_lock_free);
static_assert(sizeof(Ring) % 64 == 0);

namespace {

constexpr size_t kHeaderBytes = (sizeof(RingFileHeader) + 63) / 64 * 64;
// What a process's own outgoing rings of a group may take at most, unless the group is so
// large that kMinRingBytes per peer is more (ring_bytes_for).
constexpr size_t kOutgoingBytes = size_t{4} << 20;

}  // namespace

size_t RingFile::ring_bytes_for(int ranks) {
  const size_t peers = ranks > 1 ? static_cast<size_t>(ranks - 1) : 1;
  size_t bytes = kMaxRingBytes;
  while (bytes > kMinRingBytes && bytes * peers > kOutgoingBytes) bytes /= 2;
  return bytes;
}

Ring& RingFile::ring(RingFileHeader* file, int d) const {
  char* base = reinterpret_cast<char*>(file) + kHeaderBytes;
  return *reinterpret_cast<Ring*>(base + static_cast<size_t>(d) * (sizeof(Ring) + ring_bytes_));
}

char* RingFile::data(Ring& r) const {
  return reinterpret_cast<char*>(&r) + sizeof(Ring);
}

std::shared_ptr<RingFile> RingFile::create(int ranks, int rank, std::string* why) {
  std::shared_ptr<RingFile> f(new RingFile());
  f->ranks_ = ranks;
  f->rank_ = rank;
  f->ring_bytes_ = ring_bytes_for(ranks);
  f->file_bytes_ = kHeaderBytes + static_cast<size_t>(ranks) * (sizeof(Ring) + f->ring_bytes_);
  f->fd_ = ::memfd_create("dtr-pg-rings", MFD_CLOEXEC);
  if (f->fd_ < 0) {
    *why = fmt::format("memfd_create failed: {}", std::strerror(errno));
    return nullptr;
  }
  if (::ftruncate(f->fd_, static_cast<off_t>(f->file_bytes_)) != 0) {
    *why = fmt::format("sizing the rings failed: {}", std::strerror(errno));
    return nullptr;
  }
  void* p = ::mmap(nullptr, f->file_bytes_, PROT_READ | PROT_WRITE, MAP_SHARED, f->fd_, 0);
  if (p == MAP_FAILED) {
    *why = fmt::format("mapping the rings failed: {}", std::strerror(errno));
    return nullptr;
  }
  auto* header = new (p) RingFileHeader;
  header->ranks = static_cast<uint32_t>(ranks);
  header->ring_bytes = static_cast<uint32_t>(f->ring_bytes_);
  header->bell.store(1);  // nobody reads yet: the first record rings
  for (int d = 0; d < ranks; ++d) new (&f->ring(header, d)) Ring;  // touches head and tail only
  std::atomic_thread_fence(std::memory_order_release);
  header->magic = kRingMagic;
  f->peers_.resize(static_cast<size_t>(ranks));
  f->peers_[static_cast<size_t>(rank)].file = header;
  f->push_m_ = std::make_unique<std::mutex[]>(static_cast<size_t>(ranks));
  return f;
}

RingFile::~RingFile() {
  for (auto& p : peers_) {
    if (p.file != nullptr) ::munmap(p.file, file_bytes_);
  }
  if (fd_ >= 0) ::close(fd_);
}

bool RingFile::map_peer(int q, int64_t pid, int64_t fd, std::string* why) {
  const std::string path = fmt::format("/proc/{}/fd/{}", pid, fd);
  const int mine = ::open(path.c_str(), O_RDWR | O_CLOEXEC);
  if (mine < 0) {
    *why = fmt::format("opening rank {}'s rings ({}) failed: {}", q, path, std::strerror(errno));
    return false;
  }
  struct stat st {};
  void* p = MAP_FAILED;
  if (::fstat(mine, &st) == 0 && static_cast<size_t>(st.st_size) == file_bytes_) {
    p = ::mmap(nullptr, file_bytes_, PROT_READ | PROT_WRITE, MAP_SHARED, mine, 0);
  }
  ::close(mine);
  if (p == MAP_FAILED) {
    *why = fmt::format("rank {}'s rings ({}) are not a group of {}'s", q, path, ranks_);
    return false;
  }
  auto* header = static_cast<RingFileHeader*>(p);
  if (header->magic != kRingMagic || header->ranks != static_cast<uint32_t>(ranks_) ||
      header->ring_bytes != ring_bytes_) {
    ::munmap(p, file_bytes_);
    *why = fmt::format("rank {}'s rings ({}) are not a group of {}'s", q, path, ranks_);
    return false;
  }
  peers_[static_cast<size_t>(q)].file = header;
  if (ranks_ <= kPrefaultRanks) {
    // The two rings this rank uses with q: its own to q, and q's to it. Best effort.
    prefault(&ring(peers_[static_cast<size_t>(rank_)].file, q), sizeof(Ring) + ring_bytes_);
    prefault(&ring(header, rank_), sizeof(Ring) + ring_bytes_);
  }
  return true;
}

bool RingFile::fits(size_t bytes) const {
  // The largest record: a ring always has room for one once it is empty, wherever it wraps.
  const size_t most = ring_bytes_ / 2;
  return bytes <= most && round8(kRecordHeadBytes + bytes) <= most;
}

bool RingFile::push(int d, const WireHeader& h, const void* payload, size_t bytes,
                    bool* ring_bell) {
  Ring& r = ring(peers_[static_cast<size_t>(rank_)].file, d);
  const size_t need = round8(kRecordHeadBytes + bytes);
  std::lock_guard lock(push_m_[static_cast<size_t>(d)]);
  const uint64_t head = r.head.load(std::memory_order_relaxed);
  const uint64_t tail = r.tail.load(std::memory_order_acquire);
  if (tail > head || head - tail > ring_bytes_) {
    throw ProtocolError(fmt::format(
        "the shared-memory ring to group rank {} is corrupt: its reader says it read {} bytes of "
        "the {} written",
        d, tail, head));
  }
  const size_t pos = head % ring_bytes_;
  const size_t skip = need > ring_bytes_ - pos ? ring_bytes_ - pos : 0;
  if (head + skip + need - tail > ring_bytes_) return false;
  if (skip != 0) {
    const uint64_t word = kWrapBit | skip;
    std::memcpy(data(r) + pos, &word, sizeof word);
  }
  char* at = data(r) + (head + skip) % ring_bytes_;
  const uint64_t word = need;
  std::memcpy(at, &word, sizeof word);
  std::memcpy(at + 8, &h, sizeof h);
  if (bytes != 0) std::memcpy(at + kRecordHeadBytes, payload, bytes);
  r.head.store(head + skip + need);  // seq_cst: ordered before the bell's load below
  *ring_bell = take_bell(d);
  return true;
}

bool RingFile::take_bell(int d) {
  RingFileHeader* file = peers_[static_cast<size_t>(d)].file;
  // seq_cst loads after the head's store: a spinner that leaves reads the rings again.
  if (file->spinners.load() != 0 || file->bell.load() == 0) return false;
  return file->bell.exchange(0) == 1;
}

int RingFile::drain(int q,
                    const std::function<std::string(const WireHeader&, const char*, size_t)>& f,
                    std::string* why) {
  Peer& p = peers_[static_cast<size_t>(q)];
  if (p.broken || p.file == nullptr) return 0;
  Ring& r = ring(p.file, rank_);
  const uint64_t head = r.head.load();
  uint64_t tail = p.tail;
  if (head == tail) return 0;
  auto fail = [&](std::string text) {
    p.broken = true;
    *why = std::move(text);
    return -1;
  };
  if (head < tail || head - tail > ring_bytes_) {
    return fail(fmt::format("it says it wrote {} bytes, {} were read, the ring holds {}", head,
                            tail, ring_bytes_));
  }
  int n = 0;
  while (tail < head) {
    const size_t pos = tail % ring_bytes_;
    uint64_t word = 0;
    std::memcpy(&word, data(r) + pos, sizeof word);
    if ((word & kWrapBit) != 0) {
      const uint64_t skip = word & ~kWrapBit;
      if (skip != ring_bytes_ - pos || skip > head - tail) {
        return fail(fmt::format("a skip of {} bytes at offset {} (expected {})", skip, pos,
                                ring_bytes_ - pos));
      }
      tail += skip;
      continue;
    }
    if (word < kRecordHeadBytes || word % 8 != 0 || word > ring_bytes_ - pos ||
        word > head - tail) {
      return fail(fmt::format("a record of {} bytes at offset {} with {} bytes published", word,
                              pos, head - tail));
    }
    WireHeader h;
    std::memcpy(&h, data(r) + pos + 8, sizeof h);
    if (h.payload > word - kRecordHeadBytes || round8(kRecordHeadBytes + h.payload) != word) {
      return fail(
          fmt::format("a record of {} bytes whose header says {} payload bytes", word, h.payload));
    }
    std::string bad = f(h, data(r) + pos + kRecordHeadBytes, static_cast<size_t>(h.payload));
    if (!bad.empty()) return fail(std::move(bad));
    tail += word;
    ++n;
    p.tail = tail;
    r.tail.store(tail, std::memory_order_release);
  }
  p.tail = tail;
  r.tail.store(tail, std::memory_order_release);
  return n;
}

void RingFile::scribble(int d, size_t pos, const void* bytes, size_t n, uint64_t head) {
  Ring& r = ring(peers_[static_cast<size_t>(rank_)].file, d);
  const auto* in = static_cast<const char*>(bytes);
  for (size_t i = 0; i < n && i < ring_bytes_; ++i) data(r)[(pos + i) % ring_bytes_] = in[i];
  r.head.store(head);
}

void RingFile::scribble_tail(int q, uint64_t tail) {
  ring(peers_[static_cast<size_t>(q)].file, rank_).tail.store(tail);
}

void RingFile::arm() {
  peers_[static_cast<size_t>(rank_)].file->bell.store(1);  // seq_cst: before the heads' loads
}

void RingFile::spin(int delta) {
  auto& n = peers_[static_cast<size_t>(rank_)].file->spinners;
  if (delta > 0) {
    n.fetch_add(1);
  } else {
    n.fetch_sub(1);  // seq_cst: before the heads' loads of the last look
  }
}

void RingFile::disarm() {
  peers_[static_cast<size_t>(rank_)].file->bell.store(0, std::memory_order_relaxed);
}

}  // namespace dtr::pg::shm
