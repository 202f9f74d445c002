// The zmq backend's same-host path: when every member of a group runs on this host,
// its collectives bypass the sockets.
//
// Each process has one Arena per mesh: a memfd mapped shared, holding a Slot for every
// group it takes part in (kSlots at most). Peers map each other's arenas through
// /proc/PID/fd/N. A slot holds the owner's progress words (posted, stage, done, abort), a
// futex word that waiters sleep on, and two posts (by the parity of the collective number).
// A post carries the call's signature (op, dtype, count, reduce op, root) and either its
// tensors' bytes inline (up to kInlineBytes) or their addresses, which peers then read in
// place with process_vm_readv: one copy, from the owner's tensor into the reader's.
//
// A collective on this path: wait until every peer is done reading this rank's post of
// two collectives ago; post; wait until every peer has posted this collective and check
// their signatures against this rank's (a mismatch fails every rank, naming both ranks and
// both values, as on the sockets); read what the algorithm needs; publish done; and, when
// peers read this rank's tensors in place, wait until they all are done. Every rank of a
// reduction computes each element in the same order (rank 0's value first), so all of them
// end with the same bits. Large all_reduce splits the tensor into one chunk per rank:
// rank r folds chunk r from every rank, publishes `stage`, then copies the other chunks
// from their owners.
//
// Waits spin for up to 100 us (barely, when the group's ranks outnumber this process's
// CPUs), then sleep on the peer's futex word in slices of at most 1 ms, checking between slices the
// deadline, the mesh's verdict on every member (a dead or lost rank fails the call with the mesh's
// reason), the peers' abort words (a rank whose call failed publishes the error and every peer
// fails with it) and whether the peer still holds the group's slot.
//
// Whether a group uses the path is agreed at its first collective, over the sockets: the
// members all-gather a Desc (pid, memfd, the arena's random nonce and where it lies in the
// owner's memory, slot, boot id, PID namespace, the group's point-to-point rings,
// pg/zmq/p2p_ring.hpp), each maps every peer's arena (and rings) and checks
// the nonce there and by process_vm_readv at the announced address (which proves the
// file is that process's arena and that its memory may be read), then they all-gather a
// yes/no; the path is used only when every rank said yes. Memory is bounded: one arena of
// about 4.1 MiB of address space per process and mesh (its pages touched as slots are
// used), mapped once per peer per group; being a memfd, it is freed by the kernel when the
// last process mapping it exits or unmaps it.
//
// Thread safety: Arena may be used from any thread. A GroupPath runs one collective at a
// time (the group's executor or an inline caller).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "pg/backend.hpp"

namespace dtr::pg::shm {

using Clock = std::chrono::steady_clock;

inline constexpr int kMaxRanks = 64;
inline constexpr int kSlots = 32;
inline constexpr size_t kInlineBytes = size_t{64} << 10;

struct Slot;
struct ArenaLayout;

// What a rank tells the others at a group's first collective (sent as kDescWords int64).
struct Desc {
  int64_t ok = 0;  // 1: this rank can take part (arena made, slot free, path enabled)
  int64_t pid = 0;
  int64_t fd = -1;
  int64_t slot = -1;
  int64_t nonce = 0;
  int64_t nonce_address = 0;
  int64_t boot = 0;       // hash of /proc/sys/kernel/random/boot_id
  int64_t pidns = 0;      // inode of /proc/self/ns/pid
  int64_t rings_fd = -1;  // the group's point-to-point rings (pg/zmq/p2p_ring.hpp)
};
inline constexpr int kDescWords = 9;
static_assert(sizeof(Desc) == kDescWords * sizeof(int64_t));

// This process's arena (one per mesh).
class Arena {
 public:
  // nullptr when it cannot be made; `why` then says why.
  static std::shared_ptr<Arena> create(std::string* why);
  ~Arena();
  Arena(const Arena&) = delete;
  Arena& operator=(const Arena&) = delete;

  // A free slot claimed for `group` (reset), or -1 when all kSlots are taken.
  int acquire(uint64_t group);
  void release(int slot);
  Slot& slot(int i);
  Desc describe(int slot) const;

 private:
  Arena() = default;
  int fd_ = -1;
  ArenaLayout* layout_ = nullptr;
  std::mutex m_;
  std::vector<bool> used_;
};

// One group's path, after every member agreed to it.
class GroupPath {
 public:
  // Maps every peer's arena and checks it; nullptr with `why` when any check fails. The
  // path releases this rank's slot (all[rank].slot) when destroyed; on failure the caller
  // still holds it.
  static std::unique_ptr<GroupPath> open(std::shared_ptr<Arena> mine, uint64_t group,
                                         const std::vector<Desc>& all, int rank, std::string* why);
  ~GroupPath();
  GroupPath(const GroupPath&) = delete;
  GroupPath& operator=(const GroupPath&) = delete;

  // Runs one collective (numbered `seq`, the group's collective count) of `dtype` and
  // `count` (ProcessGroup's per-rank element count), bounded by `timeout`; `check(q)` throws
  // when group rank q, the one waited for, is lost or left, or the group is shut down. Only
  // the rank waited for counts: one that has done its part and left (shut down) fails nothing.
  // Throws as the sockets path does.
  void run(const CollectiveArgs& a, uint64_t seq, DType dtype, int64_t count,
           std::chrono::milliseconds timeout, const std::string& what,
           const std::function<void(int)>& check);

 private:
  struct Peer;
  class Call;
  GroupPath() = default;

  std::shared_ptr<Arena> arena_;
  uint64_t group_ = 0;
  int rank_ = -1;
  int slot_ = -1;
  std::vector<Peer*> peers_;  // by group rank; this rank's entry maps its own slot
  bool crowded_ = false;      // the group's ranks outnumber this process's CPUs: poll less
  std::vector<char> tmp_a_, tmp_b_;
};

// Collectives run on the shared-memory path in this process (for tests).
uint64_t collectives_run();

}  // namespace dtr::pg::shm
