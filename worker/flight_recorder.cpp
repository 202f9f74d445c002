// Flight recorder (worker/flight_recorder.hpp).
#include "worker/flight_recorder.hpp"

#include <time.h>

#include <algorithm>
#include <bit>

#include "common/trace_clock.hpp"

namespace dtr::worker::detail {

using protocol::CmdType;
using protocol::FlightState;
using protocol::WaitKind;

namespace {

constexpr uint64_t kStateMask = 0x7;
constexpr uint64_t kWaitMask = 0x7;
constexpr uint64_t kInput1 = uint64_t{1} << 7;

constexpr uint64_t tag_of(uint64_t seq, WaitKind wait, FlightState state, bool input1) {
  return seq << 8 | (input1 ? kInput1 : 0) | static_cast<uint64_t>(wait) << 4 |
         static_cast<uint64_t>(state);
}
bool is_finished(uint64_t tag) {
  auto s = static_cast<FlightState>(tag & kStateMask);
  return s == FlightState::Done || s == FlightState::Failed;
}

}  // namespace

FlightRecorder::FlightRecorder(size_t capacity)
    : capacity_(std::bit_ceil(std::clamp<size_t>(capacity, 16, protocol::kMaxFlightRecords))),
      mask_(capacity_ - 1),
      slots_(new Slot[capacity_]) {}

int64_t FlightRecorder::coarse_now_ns() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

uint64_t FlightRecorder::add_batch(std::shared_ptr<const protocol::Batch> batch,
                                   int64_t queued_ns) {
  const uint64_t first = total_.load(std::memory_order_relaxed) + 1;
  const uint64_t last = first + batch->commands.size() - 1;
  std::lock_guard lock(batches_mu_);
  // Batches whose commands are all older than the ring's go.
  while (!batches_.empty()) {
    const BatchRef& b = batches_.front();
    const uint64_t b_last = b.first + b.batch->commands.size() - 1;
    if (last < capacity_ || b_last > last - capacity_) break;
    batches_.pop_front();
  }
  if (!batch->commands.empty()) batches_.push_back(BatchRef{first, queued_ns, std::move(batch)});
  total_.store(last, std::memory_order_relaxed);
  return first;
}

bool FlightRecorder::move(uint64_t seq, FlightState state, WaitKind wait, bool input1) {
  Slot& s = slots_[seq & mask_];
  uint64_t tag = s.tag.load(std::memory_order_relaxed);
  while (true) {
    if (tag >> 8 != seq || is_finished(tag)) return false;
    // A wait kind noted before stays unless a new one is given.
    const bool keep = wait == WaitKind::None;
    WaitKind w = keep ? static_cast<WaitKind>((tag >> 4) & kWaitMask) : wait;
    bool in1 = keep ? (tag & kInput1) != 0 : input1;
    if (s.tag.compare_exchange_weak(tag, tag_of(seq, w, state, in1), std::memory_order_release,
                                    std::memory_order_relaxed))
      return true;
  }
}

void FlightRecorder::started(uint64_t seq, int64_t at_ns) {
  if (seq == 0) return;
  Slot& s = slots_[seq & mask_];
  if (s.tag.load(std::memory_order_relaxed) >> 8 != seq) return;
  s.started.store(at_ns, std::memory_order_relaxed);
  move(seq, FlightState::Running, WaitKind::None);
}

void FlightRecorder::waiting(uint64_t seq, WaitKind wait, uint64_t wait_on, int64_t at_ns) {
  if (seq == 0) return;
  Slot& s = slots_[seq & mask_];
  const uint64_t tag = s.tag.load(std::memory_order_relaxed);
  if (tag >> 8 != seq) return;
  if (static_cast<FlightState>(tag & kStateMask) == FlightState::Queued)
    s.started.store(at_ns, std::memory_order_relaxed);
  // A tensor wait is on input 0 unless it names input 1 (the command says which ids).
  bool input1 = false;
  if (wait == WaitKind::Tensor) {
    std::lock_guard lock(batches_mu_);
    int64_t queued = 0;
    if (const protocol::Command* c = command(seq, &queued)) {
      CommandFields f = fields_of(*c);
      input1 = wait_on == f.in1 && wait_on != f.in0;
    }
  }
  move(seq, FlightState::Waiting, wait, input1);
}

void FlightRecorder::finished(uint64_t seq, bool failed, int64_t at_ns) {
  if (seq == 0) return;
  Slot& s = slots_[seq & mask_];
  const uint64_t tag = s.tag.load(std::memory_order_relaxed);
  if (tag >> 8 != seq) return;
  if (static_cast<FlightState>(tag & kStateMask) == FlightState::Queued)
    s.started.store(at_ns, std::memory_order_relaxed);
  s.ended.store(at_ns, std::memory_order_relaxed);
  move(seq, failed ? FlightState::Failed : FlightState::Done, WaitKind::None);
}

void FlightRecorder::resumed(uint64_t seq) {
  if (seq != 0) move(seq, FlightState::Running, WaitKind::None);
}

const protocol::Command* FlightRecorder::command(uint64_t seq, int64_t* queued_ns) const {
  // Few batches are kept (those of the last `capacity` commands): a scan from the newest.
  for (auto it = batches_.rbegin(); it != batches_.rend(); ++it) {
    if (seq < it->first) continue;
    const size_t index = static_cast<size_t>(seq - it->first);
    if (index >= it->batch->commands.size()) return nullptr;
    *queued_ns = it->queued_ns;
    return &it->batch->commands[index];
  }
  return nullptr;
}

namespace {

// A record of command fields `f`, in the state its slot's tag says.
protocol::FlightRecord record_of(uint64_t seq, const CommandFields& f, uint64_t tag) {
  protocol::FlightRecord r;
  r.seq = seq;
  r.kind = f.kind;
  r.op = static_cast<OpId>(f.op);
  r.stream = f.stream;
  r.out = f.out;
  r.in0 = f.in0;
  r.in1 = f.in1;
  r.detail = f.detail;
  r.peer = f.peer;
  r.state = static_cast<FlightState>(tag & kStateMask);
  r.wait = static_cast<WaitKind>((tag >> 4) & kWaitMask);
  // A waiting command with no wait noted waits on what it names (WaitEvent: the event,
  // WaitRemote and RecvPeer: the token, Collective: the group).
  if (r.wait == WaitKind::None && r.state == FlightState::Waiting) r.wait = f.wait;
  switch (r.wait) {
    case WaitKind::Tensor:
      r.wait_on = (tag & kInput1) ? f.in1 : f.in0;
      break;
    case WaitKind::Event:
    case WaitKind::Peer:
    case WaitKind::Group:
      r.wait_on = f.detail;
      break;
    default:
      break;
  }
  return r;
}

}  // namespace

protocol::FlightSnapshot FlightRecorder::dump(std::string reason) const {
  protocol::FlightSnapshot d;
  d.reason = std::move(reason);
  d.now_ns = trace::steady_ns();
  d.capacity = static_cast<uint32_t>(capacity_);
  std::lock_guard lock(batches_mu_);
  d.total = total();
  const uint64_t last = d.total;
  const uint64_t first = last > capacity_ ? last - capacity_ + 1 : 1;
  d.records.reserve(static_cast<size_t>(last - first + 1));
  for (uint64_t seq = first; seq <= last; ++seq) {
    const Slot& s = slots_[seq & mask_];
    const uint64_t tag = s.tag.load(std::memory_order_acquire);
    if (tag >> 8 != seq) continue;  // not written yet, being rewritten, or reused
    const int64_t started = s.started.load(std::memory_order_relaxed);
    const int64_t ended = s.ended.load(std::memory_order_relaxed);
    std::atomic_thread_fence(std::memory_order_acquire);
    const uint64_t again = s.tag.load(std::memory_order_relaxed);
    int64_t queued = 0;
    const protocol::Command* c = command(seq, &queued);
    if (again >> 8 != seq || !c) continue;  // rewritten while read
    protocol::FlightRecord r = record_of(seq, fields_of(*c), again);
    r.queued_ns = queued;
    const bool at_dispatch = (again & kAtDispatch) != 0;
    const bool done = r.state == FlightState::Done || r.state == FlightState::Failed;
    if (r.state != FlightState::Queued) r.started_ns = at_dispatch ? queued : started;
    if (done) r.ended_ns = at_dispatch ? queued : ended;
    d.records.push_back(r);
  }
  return d;
}

}  // namespace dtr::worker::detail
