// Point-to-point rings of a zmq group on the same-host path (pg/zmq/shm_path.hpp): once a
// group's members agreed that they share a host, every point-to-point message of the group
// between two of them travels through shared memory instead of the sockets. Payloads that
// fit a record (fits(): up to half a ring, 128 KiB less the record's head) are carried in
// the ring; larger ones are offered by address (a DataAt record, wire.hpp) and read in
// place by the receiver. One channel per ordered pair keeps MPI's order: messages from one
// rank to another are matched in the order they were sent.
//
// A ring's size follows the group's (ring_bytes_for): 1 MiB for groups of up to 5 ranks,
// 512 KiB up to 9, 256 KiB from 10 ranks on. A process's outgoing rings per group
// stay under max(4 MiB, 256 KiB per peer), and a small group carries payloads of up to
// 512 KiB in the ring (a 256 KiB ping-pong took 40-45 us so against 87-99 us by address).
//
// Each member makes one RingFile per group: a memfd mapped shared, holding a header (magic,
// ranks, the owner's bell word) and one single-producer single-consumer Ring per group
// rank. Ring d of rank q's file carries q's messages to d: q writes records and `head`, d
// reads them and writes `tail`. Peers map each other's files through /proc/PID/fd/N, from
// the pid the group's arena check proved (shm_path.hpp).
//
// A record is an 8-byte length word, a WireHeader and the payload, padded to 8 bytes; a
// length word with kWrapBit set skips the ring's last bytes. Everything the consumer reads
// is checked (head against tail and capacity, every length and the header's payload size)
// before it is used: a peer that writes nonsense fails as one whose socket sent a
// malformed message, and this process never reads outside the ring.
//
// Waking: a consumer that sleeps in poll() sets its file's bell word first and looks at its
// rings again; a producer that finds the bell set after publishing a record clears it and
// sends a Ring message over the sockets, which wakes the sleeper. A thread that polls the
// rings while it waits counts itself in the file's spinners word (and reads once more after
// it leaves): while it is there, producers do not ring.
//
// Memory is bounded: p rings of ring_bytes() per group and process, freed by the kernel
// when the last process that maps the file unmaps it. Groups of up to 16 ranks fault the
// rings they use in when they map their peers (a process's own outgoing ones: (p - 1)
// rings, at most 4 MiB); larger groups touch the pages as records pass.
//
// Thread safety: push() may be called from any thread (a mutex per ring); drain(),
// arm() and disarm() from one consumer thread at a time (the mesh's ROUTER holder).
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "pg/zmq/wire.hpp"

namespace dtr::pg::shm {

// The smallest and largest ring (ring_bytes_for).
inline constexpr size_t kMinRingBytes = size_t{256} << 10;
inline constexpr size_t kMaxRingBytes = size_t{1} << 20;
// A record's length word and header before its payload.
inline constexpr size_t kRecordHeadBytes = 8 + sizeof(WireHeader);

struct RingFileHeader;
struct Ring;

class RingFile {
 public:
  // This rank's file for a group of `ranks` members; nullptr with `why` when it cannot be
  // made.
  static std::shared_ptr<RingFile> create(int ranks, int rank, std::string* why);
  ~RingFile();
  RingFile(const RingFile&) = delete;
  RingFile& operator=(const RingFile&) = delete;

  int fd() const { return fd_; }
  // Maps peer q's file (process `pid`, descriptor `fd` there); false with `why` when it is
  // not a ring file of a group of this size.
  bool map_peer(int q, int64_t pid, int64_t fd, std::string* why);

  // Producer: appends one record (h, then `bytes` of payload) to the ring toward group
  // rank d. False when the ring lacks room now. `ring_bell`: set when d sleeps and must be
  // woken (its bell was set; this call cleared it). Throws ProtocolError when d's side of
  // the ring is corrupt (its tail is ahead of the records).
  bool push(int d, const WireHeader& h, const void* payload, size_t bytes, bool* ring_bell);
  // Whether a record of `bytes` payload bytes fits a ring of this file at all (up to half a
  // ring less the record's head).
  bool fits(size_t bytes) const;
  // The bytes of one ring of a group of `ranks` (a power of two, kMinRingBytes to
  // kMaxRingBytes), and of this file's rings.
  static size_t ring_bytes_for(int ranks);
  size_t ring_bytes() const { return ring_bytes_; }
  // Producer, with a full ring: clears d's bell; true when it was set (d must be woken).
  bool take_bell(int d);

  // Consumer: hands every record peer q has published to this rank, in order, to
  // f(header, payload, bytes), which must copy what it keeps and returns "" or what is
  // wrong with the record; then frees it. Returns how many were read. On a malformed ring
  // or record returns -1 with `why` and never reads that ring again.
  int drain(int q, const std::function<std::string(const WireHeader&, const char*, size_t)>& f,
            std::string* why);
  // Consumer: this process is about to sleep (arm) or awake again (disarm).
  void arm();
  void disarm();
  // Consumer: a thread of this process starts (+1) or stops (-1) polling the rings.
  void spin(int delta);

  int ranks() const { return ranks_; }
  int rank() const { return rank_; }

  // For tests and fuzzing, what a broken or hostile peer could do: writes `n` raw bytes
  // (at most ring_bytes()) into this rank's ring toward d from byte `pos`, wrapping, and
  // publishes `head`; or overwrites the `tail` of peer q's ring to this rank.
  void scribble(int d, size_t pos, const void* bytes, size_t n, uint64_t head);
  void scribble_tail(int q, uint64_t tail);
  // Consumer: bytes of peer q's ring read so far.
  uint64_t read_of(int q) const { return peers_[static_cast<size_t>(q)].tail; }

 private:
  RingFile() = default;
  struct Peer {
    RingFileHeader* file = nullptr;  // mapped (this rank's own for rank_)
    uint64_t tail = 0;               // consumer: bytes read of its ring to this rank
    bool broken = false;
  };
  Ring& ring(RingFileHeader* file, int d) const;
  char* data(Ring& r) const;

  int fd_ = -1;
  int ranks_ = 0;
  int rank_ = -1;
  size_t ring_bytes_ = 0;
  size_t file_bytes_ = 0;
  std::vector<Peer> peers_;
  std::unique_ptr<std::mutex[]> push_m_;  // by destination
};

}  // namespace dtr::pg::shm
