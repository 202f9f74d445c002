// Flight recorder: the worker's last N commands and what became of them (queued, waiting
// on what, running, done, failed), always on, dumped when something goes wrong
// (docs/observability.md).
//
// Terms. Command number `seq` (from 1, in dispatch order, across sessions) has a *slot*
// in a ring of `capacity` (a power of two) slots, seq % capacity, until command
// seq + capacity takes it. What a command is (its kind, op, stream, tensors, peer, event,
// token, group) is not copied: it stays in its decoded *batch*, which the recorder keeps
// (one reference per batch) while any of its commands is among the last `capacity`. A
// slot holds only what happens to the command: its seq and state, what a wait is on when
// that is not in the command (a tensor: which input), and when it started and ended. So
// recording a command is one store of an atomic word: no allocation, no lock, no
// formatting, no clock read (a command done at dispatch says so in its tag, and started
// and ended when its batch arrived, a time read once per batch by the caller). Executor threads
// move a record on with the coarse clock (CLOCK_MONOTONIC_COARSE: a few ms of resolution, a few ns
// to read) and a compare-and-swap on the slot's tag (seq and state), so a late update of a command
// whose slot was reused changes nothing but, at worst, a time. dump() joins slots and batches into
// wire records (protocol::FlightSnapshot); common/flight_text.hpp puts them into words.
//
// Thread safety: add_batch() and dispatched() from one dispatch thread at a time; the
// updates from any thread; dump(), total() from any thread (a record being rewritten while
// dump() reads it is left out). `batches_mu_` guards the kept batches (taken once per
// batch by the dispatch thread, and by dump()).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>

#include "protocol/commands.hpp"
#include "protocol/messages.hpp"

namespace dtr::worker::detail {

inline constexpr size_t kDefaultFlightRecords = 4096;

class FlightRecorder {
 public:
  // `capacity` is rounded up to a power of two (at least 16, at most kMaxFlightRecords).
  explicit FlightRecorder(size_t capacity = kDefaultFlightRecords);

  // Dispatch thread: the commands of `batch` (arrived at `queued_ns`) take the next seqs;
  // returns the first one. The batch is kept while any of its commands is recorded.
  uint64_t add_batch(std::shared_ptr<const protocol::Batch> batch, int64_t queued_ns);
  // Dispatch thread: what became of command `seq` of the last batch at dispatch: Queued (a
  // task not yet on its stream), or Done / Failed (it started and ended as its batch
  // arrived).
  void dispatched(uint64_t seq, protocol::FlightState state) {
    const uint64_t at_dispatch = state == protocol::FlightState::Queued ? 0 : kAtDispatch;
    slots_[seq & mask_].tag.store(seq << 8 | at_dispatch | static_cast<uint64_t>(state),
                                  std::memory_order_release);
  }

  // Any thread: record `seq`'s new state at `at_ns` (ignored when its slot was reused). A
  // wait on a tensor names one of the command's inputs (`wait_on`, its id); other waits
  // are on what the command names, or on the other streams (`wait_on` unused).
  void started(uint64_t seq, int64_t at_ns);
  void waiting(uint64_t seq, protocol::WaitKind wait, uint64_t wait_on, int64_t at_ns);
  void finished(uint64_t seq, bool failed, int64_t at_ns);
  // Running again after a wait (a collective whose members have all joined).
  void resumed(uint64_t seq);

  // The ring's records, oldest first, and the clock now.
  protocol::FlightSnapshot dump(std::string reason) const;
  uint64_t total() const { return total_.load(std::memory_order_relaxed); }
  size_t capacity() const { return capacity_; }

  // CLOCK_MONOTONIC_COARSE in ns (the steady clock's time base, at its tick resolution).
  static int64_t coarse_now_ns();

 private:
  // A tag's bit: the command was done at dispatch (it started and ended as its batch
  // arrived; the slot's times are not its own).
  static constexpr uint64_t kAtDispatch = 8;
  struct alignas(32) Slot {
    // seq << 8 | (a tensor wait on input 1) << 7 | wait << 4 | at dispatch << 3 | state
    std::atomic<uint64_t> tag{0};
    // Steady ns, written before the tag's state says they were reached (running, waiting:
    // started; done, failed: ended), unless done at dispatch.
    std::atomic<int64_t> started{0}, ended{0};
  };
  struct BatchRef {
    uint64_t first = 0;  // the seq of its command 0
    int64_t queued_ns = 0;
    std::shared_ptr<const protocol::Batch> batch;
  };
  // Sets the state (and wait kind, and which input a tensor wait is on) of `seq`, unless
  // its slot holds another command now or the record has finished; false then.
  bool move(uint64_t seq, protocol::FlightState state, protocol::WaitKind wait,
            bool input1 = false);
  // Command `seq` and its batch's arrival, when its batch is kept (under batches_mu_).
  const protocol::Command* command(uint64_t seq, int64_t* queued_ns) const;

  size_t capacity_;
  size_t mask_;
  std::unique_ptr<Slot[]> slots_;
  std::atomic<uint64_t> total_{0};
  mutable std::mutex batches_mu_;
  std::deque<BatchRef> batches_;
};

// The fields a record shows of a command (every command struct of protocol/commands.hpp);
// also a trace slice's (worker/trace_slices.hpp).
struct CommandFields {
  protocol::CmdType kind = protocol::CmdType::RunOp;
  uint16_t op = 0;  // RunOp: the op; Collective: its kind
  uint32_t stream = 0;
  protocol::TensorId out = 0, in0 = 0, in1 = 0;
  uint64_t detail = 0;  // the event, token, group or request it names
  uint32_t peer = protocol::kNoPeer;
  // What it waits for when it waits, if the command says (an event, a token, a group:
  // `detail`).
  protocol::WaitKind wait = protocol::WaitKind::None;
};

template <class C>
CommandFields fields_of(const C& c) {
  namespace cmd = protocol::cmd;
  CommandFields f;
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
  } else if constexpr (std::is_same_v<C, cmd::WaitRemote> || std::is_same_v<C, cmd::RecvPeer>) {
    f.wait = protocol::WaitKind::Peer;
  } else if constexpr (std::is_same_v<C, cmd::Collective>) {
    f.op = static_cast<uint16_t>(c.kind);
    f.wait = protocol::WaitKind::Group;
  }
  return f;
}

inline CommandFields fields_of(const protocol::Command& c) {
  return std::visit([](const auto& x) { return fields_of(x); }, c);
}

}  // namespace dtr::worker::detail
