// Flight recorder: the worker's last N commands and what became of them (queued, waiting
// on what, running, done, failed), always on, dumped when something goes wrong
// (docs/observability.md).
//
// Terms. The *ring* holds `capacity` (a power of two) *slots*; command number `seq` (from
// 1, in dispatch order, across sessions) lives in slot seq % capacity until command
// seq + capacity takes it. A slot is a fixed set of atomic words: no allocation, no lock,
// no formatting and no clock read when a command is recorded (the time a command was
// queued is its batch's, read once per batch by the caller). Executor threads move a
// record on (running, waiting, done, failed) with the coarse clock (CLOCK_MONOTONIC_COARSE,
// a few ms of resolution, a few ns to read) and a compare-and-swap on the slot's tag (its
// seq and state), so a late update of a command whose slot was reused changes nothing but,
// at worst, a time. dump() formats nothing either: it copies the ring into wire records
// (protocol::FlightDump), which protocol/flight_text.hpp puts into words.
//
// Thread safety: add() from one dispatch thread at a time; the updates from any thread;
// dump(), total() from any thread (a record being rewritten while dump() reads it is left
// out of the dump).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "protocol/commands.hpp"
#include "protocol/messages.hpp"

namespace dtr::worker::detail {

inline constexpr size_t kDefaultFlightRecords = 4096;

class FlightRecorder {
 public:
  // `capacity` is rounded up to a power of two (at least 16, at most kMaxFlightRecords).
  explicit FlightRecorder(size_t capacity = kDefaultFlightRecords);

  // The fields a record keeps of a command (see record_of()).
  struct Fields {
    protocol::CmdType kind = protocol::CmdType::RunOp;
    uint16_t op = 0;
    uint32_t stream = 0;
    protocol::TensorId out = 0, in0 = 0, in1 = 0;
    uint64_t detail = 0;
    uint32_t peer = protocol::kNoPeer;
    protocol::WaitKind wait = protocol::WaitKind::None;  // what it will wait for, if known
    uint64_t wait_on = 0;
  };
  // Dispatch thread: the next command's seq, then its record (queued at `queued_ns`, in
  // `state`: Queued for a task not yet handed to its stream, or Done / Failed for a
  // command done at dispatch, whose start and end are then `queued_ns` too).
  uint64_t next_seq() {
    const uint64_t seq = total_.load(std::memory_order_relaxed) + 1;
    total_.store(seq, std::memory_order_relaxed);
    return seq;
  }
  void write(uint64_t seq, const Fields& f, int64_t queued_ns, protocol::FlightState state);
  // Any thread: record `seq`'s new state at `at_ns` (ignored when its slot was reused).
  void started(uint64_t seq, int64_t at_ns);
  void waiting(uint64_t seq, protocol::WaitKind wait, uint64_t wait_on, int64_t at_ns);
  void finished(uint64_t seq, bool failed, int64_t at_ns);
  // Running again after a wait (a collective whose members have all joined).
  void resumed(uint64_t seq);

  // The ring's records, oldest first, and the clock now.
  protocol::FlightDump dump(std::string reason) const;
  uint64_t total() const { return total_.load(std::memory_order_relaxed); }
  size_t capacity() const { return capacity_; }

  // CLOCK_MONOTONIC_COARSE in ns (the steady clock's time base, at its tick resolution).
  static int64_t coarse_now_ns();

 private:
  struct Slot {
    std::atomic<uint64_t> tag{0};   // seq << 8 | wait << 4 | state; 0 while (re)written
    std::atomic<uint64_t> what{0};  // kind | op << 8 | stream << 32
    std::atomic<uint64_t> out{0}, in0{0}, in1{0}, detail{0}, wait_on{0};
    std::atomic<uint32_t> peer{protocol::kNoPeer};
    std::atomic<int64_t> queued{0}, started{0}, ended{0};
  };
  // Sets the state (and wait kind) of `seq`, unless its slot holds another command now or
  // the record has finished; false then.
  bool move(uint64_t seq, protocol::FlightState state, protocol::WaitKind wait);

  size_t capacity_;
  size_t mask_;
  std::unique_ptr<Slot[]> slots_;
  std::atomic<uint64_t> total_{0};
};

// The record fields of a command (every command struct of protocol/commands.hpp).
template <class C>
FlightRecorder::Fields record_of(const C& c) {
  namespace cmd = protocol::cmd;
  FlightRecorder::Fields f;
  f.kind = C::kType;
  f.stream = c.stream;
  if constexpr (std::is_same_v<C, cmd::RunOp>) {
    f.op = static_cast<uint16_t>(c.op);
    f.out = c.out;
    f.in0 = c.inputs.n > 0 ? c.inputs.ids[0] : 0;
    f.in1 = c.inputs.n > 1 ? c.inputs.ids[1] : 0;
  } else {
    if constexpr (requires { c.out; }) f.out = c.out;
    if constexpr (requires { c.input; }) f.in0 = c.input;
    if constexpr (requires { c.request; }) f.detail = c.request;
    if constexpr (requires { c.event; }) f.detail = c.event;
    if constexpr (requires { c.group; }) f.detail = c.group;
    if constexpr (requires { c.token; }) f.detail = c.token;
    if constexpr (requires { c.peer; }) f.peer = c.peer;
    if constexpr (requires { c.node; }) f.peer = c.node;
  }
  if constexpr (std::is_same_v<C, cmd::WaitEvent>) {
    f.wait = protocol::WaitKind::Event;
    f.wait_on = c.event;
  } else if constexpr (std::is_same_v<C, cmd::WaitRemote> || std::is_same_v<C, cmd::RecvPeer>) {
    f.wait = protocol::WaitKind::Peer;
    f.wait_on = c.token;
  } else if constexpr (std::is_same_v<C, cmd::Collective>) {
    f.op = static_cast<uint16_t>(c.kind);
    f.wait = protocol::WaitKind::Group;
    f.wait_on = c.group;
  }
  return f;
}

}  // namespace dtr::worker::detail
