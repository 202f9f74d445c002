// Internal: a lane, dtr's own TCP connection between the two ranks of a two-rank zmq group
// on the sockets (pg/zmq/zmq_backend.cpp), on which the group's large all_reduces move their
// bytes from the calling thread instead of through ZeroMQ's I/O threads.
//
// Why: through ZeroMQ a payload crosses two threads per process (the caller hands it to
// the I/O thread, whose reads sleep in epoll between segments). On the lane the calling
// thread spins while bytes move and reads 256 KiB at a time, folding each piece while it
// is in the cache. Over loopback that made a two-rank 4 MiB all_reduce 1.4-2.9x faster
// and a 64 MiB one up to 2.7x (docs/performance/history/collectives-issue-17.md, "Lanes").
//
// Setup happens in band, inside a collective: rank 0 of the group listens (LaneListener)
// on the address its group endpoint publishes, on a port the kernel picks, and sends the
// port and a random token in the collective's first message (a LaneOffer, over the mesh);
// rank 1 connects and presents the token; rank 0 keeps only a connection that presents it.
// Both then tell each other over the mesh whether they hold the lane; when either does not
// (nothing connected within zmq_backend's 5 s, as behind a firewall), the group keeps to
// ZeroMQ from then on.
// A lane never carries commands: a collective on it first exchanges a stamp (the lane's
// generation and the collective's sequence number), so that ranks out of step fail with
// ProtocolError instead of reading each other's payloads. Lanes are not used when the
// mesh is encrypted (CURVE): their bytes would travel in the clear.
//
// Waiting: exchange() spins on non-blocking send/recv while bytes move, and once nothing
// moved for kLaneSpin it sleeps in poll() for at most kLanePollSlice at a time; between
// sleeps it calls `check` (which throws when the group is shut down or the peer is known
// dead) and it throws TimeoutError at the deadline. Reads take at most one chunk (256 KiB)
// at a time, so that the bytes are folded while they are still in the cache.
//
// Thread safety: none; a lane and a listener belong to their group's collective order.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "pg/util.hpp"

namespace dtr::pg {

inline constexpr uint32_t kLaneMagic = 0x6c616e65;  // "lane"
// all_reduces of at least this many bytes per rank take the lane (above kSmallAllReduce,
// whose recursive doubling is faster; at 128 KiB the lane took 162-203 us against ZeroMQ's
// 252-319 us, at 256 KiB 135-172 against 376-400).
inline constexpr size_t kLaneMinBytes = size_t{128} << 10;
inline constexpr size_t kLaneChunkBytes = size_t{256} << 10;
inline constexpr auto kLaneSpin = std::chrono::microseconds(50);
inline constexpr auto kLanePollSlice = std::chrono::milliseconds(10);

// What each rank of a two-rank group sends before an all_reduce that may take the lane.
struct LaneOffer {
  uint32_t magic = kLaneMagic;
  uint32_t wants = 0;       // 1: this rank can take a lane for this call
  uint32_t port = 0;        // rank 0: where it listens for a new lane (0: it does not)
  uint32_t generation = 0;  // of the lane this rank holds (0: none)
  uint64_t token = 0;       // rank 0: what the connecting rank must present
};
static_assert(sizeof(LaneOffer) == 24);

// false when $DTR_LANES is "0" (every payload stays on ZeroMQ).
bool lanes_enabled();
// Tests only: while set, opening a lane fails on this process's side (as a firewall
// between two hosts would make it).
std::atomic<bool>& lane_fault_for_tests();
// "10.0.0.3" from "tcp://10.0.0.3:41234"; "" when the endpoint is not tcp.
std::string lane_host_of(const std::string& endpoint);

using Clock = std::chrono::steady_clock;
using LaneCheck = std::function<void()>;

class LaneListener {
 public:
  // Listens on `host` (the group endpoint's address), port chosen by the kernel; nullptr
  // with *why on failure.
  static std::unique_ptr<LaneListener> open(const std::string& host, std::string* why);
  ~LaneListener();
  LaneListener(const LaneListener&) = delete;
  LaneListener& operator=(const LaneListener&) = delete;

  uint16_t port() const { return port_; }
  uint64_t token() const { return token_; }
  // The first connection that presents this listener's token and `generation`; others are
  // closed. Throws TimeoutError at the deadline and whatever `check` throws.
  int accept(uint32_t generation, Clock::time_point deadline, const LaneCheck& check,
             const std::string& what);

 private:
  LaneListener(int fd, uint16_t port, uint64_t token) : fd_(fd), port_(port), token_(token) {}
  int fd_;
  uint16_t port_;
  uint64_t token_;
};

class Lane {
 public:
  // Connects to rank 0's listener and presents its token.
  static std::unique_ptr<Lane> connect(const std::string& host, uint16_t port, uint64_t token,
                                       uint32_t generation, Clock::time_point deadline,
                                       const LaneCheck& check, const std::string& what,
                                       const std::string& peer);
  // Takes a connection accepted by a LaneListener.
  Lane(int fd, uint32_t generation, std::string peer);
  ~Lane();
  Lane(const Lane&) = delete;
  Lane& operator=(const Lane&) = delete;

  uint32_t generation() const { return generation_; }

  // Where received bytes go: straight to `direct`, or chunk by chunk (kLaneChunkBytes,
  // the last one shorter) to `fold(offset, bytes, length)` through `chunk`.
  struct Sink {
    size_t bytes = 0;
    char* direct = nullptr;
    char* chunk = nullptr;
    std::function<void(size_t, const char*, size_t)> fold;
  };
  // Sends out_bytes from `out` and receives `in.bytes` at once. Throws TransportError when
  // the peer closes the lane or it breaks, TimeoutError at the deadline, and whatever
  // `check` throws.
  void exchange(const char* out, size_t out_bytes, const Sink& in, Clock::time_point deadline,
                const LaneCheck& check, const std::string& what);
  // Sends this side's stamp and checks the peer's: same generation and sequence number.
  void stamp(uint64_t seq, Clock::time_point deadline, const LaneCheck& check,
             const std::string& what);

 private:
  int fd_;
  uint32_t generation_;
  std::string peer_;  // "rank 1 (tcp://...)", for messages
};

}  // namespace dtr::pg
