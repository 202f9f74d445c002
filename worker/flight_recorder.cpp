// Flight recorder (worker/flight_recorder.hpp).
#include "worker/flight_recorder.hpp"

#include <time.h>

#include <algorithm>
#include <bit>

#include "protocol/trace_clock.hpp"

namespace dtr::worker::detail {

using protocol::FlightState;
using protocol::WaitKind;

namespace {

constexpr uint64_t kStateMask = 0xF;
constexpr uint64_t tag_of(uint64_t seq, WaitKind wait, FlightState state) {
  return seq << 8 | static_cast<uint64_t>(wait) << 4 | static_cast<uint64_t>(state);
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

void FlightRecorder::write(uint64_t seq, const Fields& f, int64_t queued_ns, FlightState state) {
  Slot& s = slots_[seq & mask_];
  constexpr auto r = std::memory_order_relaxed;
  s.tag.store(0, r);
  std::atomic_thread_fence(std::memory_order_release);  // readers see 0 before new fields
  s.what.store(static_cast<uint64_t>(f.kind) | uint64_t{f.op} << 8 | uint64_t{f.stream} << 32, r);
  s.out.store(f.out, r);
  s.in0.store(f.in0, r);
  s.in1.store(f.in1, r);
  s.detail.store(f.detail, r);
  s.wait_on.store(f.wait_on, r);
  s.peer.store(f.peer, r);
  s.queued.store(queued_ns, r);
  const int64_t at = state == FlightState::Queued ? 0 : queued_ns;
  s.started.store(at, r);
  s.ended.store(at, r);
  s.tag.store(tag_of(seq, f.wait, state), std::memory_order_release);
}

bool FlightRecorder::move(uint64_t seq, FlightState state, WaitKind wait) {
  Slot& s = slots_[seq & mask_];
  uint64_t tag = s.tag.load(std::memory_order_relaxed);
  while (true) {
    if (tag >> 8 != seq || is_finished(tag)) return false;
    // A wait kind known at dispatch stays unless a new one is given.
    WaitKind w = wait != WaitKind::None ? wait : static_cast<WaitKind>((tag >> 4) & kStateMask);
    if (s.tag.compare_exchange_weak(tag, tag_of(seq, w, state), std::memory_order_release,
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
  if (s.tag.load(std::memory_order_relaxed) >> 8 != seq) return;
  if (s.started.load(std::memory_order_relaxed) == 0)
    s.started.store(at_ns, std::memory_order_relaxed);
  if (wait == WaitKind::Tensor) s.wait_on.store(wait_on, std::memory_order_relaxed);
  move(seq, FlightState::Waiting, wait);
}

void FlightRecorder::finished(uint64_t seq, bool failed, int64_t at_ns) {
  if (seq == 0) return;
  Slot& s = slots_[seq & mask_];
  if (s.tag.load(std::memory_order_relaxed) >> 8 != seq) return;
  if (s.started.load(std::memory_order_relaxed) == 0)
    s.started.store(at_ns, std::memory_order_relaxed);
  s.ended.store(at_ns, std::memory_order_relaxed);
  move(seq, failed ? FlightState::Failed : FlightState::Done, WaitKind::None);
}

void FlightRecorder::resumed(uint64_t seq) {
  if (seq != 0) move(seq, FlightState::Running, WaitKind::None);
}

protocol::FlightDump FlightRecorder::dump(std::string reason) const {
  protocol::FlightDump d;
  d.reason = std::move(reason);
  d.now_ns = trace::steady_ns();
  d.total = total();
  d.capacity = static_cast<uint32_t>(capacity_);
  const uint64_t last = d.total;
  const uint64_t first = last > capacity_ ? last - capacity_ + 1 : 1;
  d.records.reserve(static_cast<size_t>(last - first + 1));
  constexpr auto r = std::memory_order_relaxed;
  for (uint64_t seq = first; seq <= last; ++seq) {
    const Slot& s = slots_[seq & mask_];
    const uint64_t tag = s.tag.load(std::memory_order_acquire);
    if (tag >> 8 != seq) continue;  // being rewritten, or already reused
    protocol::FlightRecord f;
    f.seq = seq;
    const uint64_t what = s.what.load(r);
    f.kind = static_cast<protocol::CmdType>(what & 0xFF);
    f.op = static_cast<OpId>((what >> 8) & 0xFFFF);
    f.stream = static_cast<uint32_t>(what >> 32);
    f.out = s.out.load(r);
    f.in0 = s.in0.load(r);
    f.in1 = s.in1.load(r);
    f.detail = s.detail.load(r);
    f.wait_on = s.wait_on.load(r);
    f.peer = s.peer.load(r);
    f.queued_ns = s.queued.load(r);
    f.started_ns = s.started.load(r);
    f.ended_ns = s.ended.load(r);
    std::atomic_thread_fence(std::memory_order_acquire);
    const uint64_t again = s.tag.load(r);
    if (again >> 8 != seq) continue;  // rewritten while read
    f.state = static_cast<FlightState>(again & kStateMask);
    f.wait = static_cast<WaitKind>((again >> 4) & kStateMask);
    d.records.push_back(f);
  }
  return d;
}

}  // namespace dtr::worker::detail
