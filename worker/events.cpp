// Events and cross-node tokens (worker/events.hpp).
#include "worker/events.hpp"

#include <fmt/format.h>

#include <chrono>

#include "worker/recorder.hpp"
#include "worker/trace_slices.hpp"

namespace dtr::worker::detail {

namespace {

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace

bool EventState::reached_or_park(uint64_t target, const StreamQueuePtr& s) {
  std::lock_guard lock(mu);
  if (completed >= target) return true;
  waiters.push_back({target, s, 0, -1, 0});
  return false;
}

EventState::Released EventState::complete(uint64_t target, Failure f) {
  Released r;
  std::lock_guard lock(mu);
  if (target >= completed) {
    completed = target;
    failure = std::move(f);
    time_ns = now_ns();
  }
  std::erase_if(waiters, [&](Waiter& w) {
    if (w.target > completed) return false;
    r.waiters.push_back(std::move(w));
    return true;
  });
  r.time_ns = time_ns;
  r.failure = failure;
  return r;
}

bool EventState::done_or_notify(int32_t peer, uint64_t token) {
  std::lock_guard lock(mu);
  if (completed >= issued) return true;
  waiters.push_back({issued, nullptr, 0, peer, token});
  return false;
}

std::optional<EventState::Status> EventState::answer(uint64_t request, bool sync) {
  std::lock_guard lock(mu);
  bool done = completed >= issued;
  if (!done && sync) {
    waiters.push_back({issued, nullptr, request, -1, 0});
    return std::nullopt;
  }
  // A query only says whether; the failure is for whoever synchronizes.
  return Status{done, time_ns, sync ? failure : nullptr};
}

void run_record(StreamQueue& s, EventState& e, uint64_t target, FailureLog& failures,
                Outbox& outbox) {
  // The event completes when the device work queued before it has run too (waiters on
  // this node and on other nodes are told then).
  std::string why = s.cuda.finish();
  if (!why.empty() && !s.pending_failure)
    s.pending_failure = failures.root(protocol::kNoTensor, "record_event", why);
  EventState::Released r = e.complete(target, std::move(s.pending_failure));
  s.pending_failure.reset();
  // The notifications this record releases start the timeline's arrows to their nodes.
  for (const EventState::Waiter& w : r.waiters)
    if (w.peer >= 0)
      trace_notify(s.owner.recorder.tracer, s.id, e.id, static_cast<uint32_t>(w.peer), w.token);
  release(r, outbox);
}

void release(const EventState::Released& r, Outbox& outbox) {
  for (const EventState::Waiter& w : r.waiters) {
    if (w.stream) wake(w.stream);
    if (w.request) outbox.reply_event(w.request, true, r.time_ns, r.failure);
    if (w.peer >= 0) outbox.send_notify(w.peer, w.token);
  }
}

EventPtr EventTable::find(uint64_t id) const {
  auto it = events_.find(id);
  return it == events_.end() ? nullptr : it->second;
}

EventPtr EventTable::for_record(uint64_t id, std::string* problem) {
  if (id == 0) {
    *problem = "event id 0 is not a valid id";
    return nullptr;
  }
  auto it = events_.find(id);
  if (it != events_.end()) return it->second;
  if (events_.size() >= protocol::kMaxEvents) {
    *problem = fmt::format("event {}: this worker allows at most {} live events", id,
                           protocol::kMaxEvents);
    return nullptr;
  }
  auto e = std::make_shared<EventState>();
  e->id = id;
  events_.emplace(id, e);
  return e;
}

void EventTable::drop_waiters() {
  for (auto& [id, e] : events_) {
    std::lock_guard lock(e->mu);
    e->waiters.clear();
  }
}

bool RemoteWait::arrived_or_park(const StreamQueuePtr& s) {
  std::lock_guard lock(mu);
  if (arrived) return true;
  waiter = s;
  return false;
}

RemoteWaitPtr Tokens::wait(uint64_t token, uint32_t peer, std::string* problem) {
  auto it = waits_.find(token);
  if (it != waits_.end()) {  // the notification came first
    RemoteWaitPtr w = std::move(it->second);
    waits_.erase(it);
    return w;
  }
  if (waits_.size() >= protocol::kMaxPendingWaits) {
    *problem = fmt::format("more than {} cross-node waits pending", protocol::kMaxPendingWaits);
    return nullptr;
  }
  auto w = std::make_shared<RemoteWait>();
  w->from = peer;
  waits_.emplace(token, w);
  return w;
}

size_t Tokens::fail_from(uint32_t peer, const protocol::RemoteFailure& failure) {
  std::vector<StreamQueuePtr> wake_up;
  size_t failed = 0;
  for (auto it = waits_.begin(); it != waits_.end();) {
    RemoteWait& w = *it->second;
    std::unique_lock lock(w.mu);
    if (w.from != peer || w.arrived) {
      ++it;
      continue;
    }
    w.arrived = true;
    w.failure = failure;
    if (w.waiter) wake_up.push_back(std::move(w.waiter));
    lock.unlock();
    it = waits_.erase(it);
    ++failed;
  }
  for (const StreamQueuePtr& s : wake_up) wake(s);  // no lock held (session.hpp)
  return failed;
}

bool Tokens::arrive(uint64_t token, uint32_t from, const PayloadFrame* payload,
                    const std::optional<protocol::RemoteFailure>& failure,
                    const RemoteWait::At* at) {
  auto fill = [&](RemoteWait& w) {
    w.arrived = true;
    w.from = from;
    if (payload) w.payload = *payload;
    if (failure) w.failure = failure;
    if (at) w.at = *at;
  };
  auto it = waits_.find(token);
  if (it == waits_.end()) {  // the wait has not been dispatched yet
    if (waits_.size() >= protocol::kMaxPendingWaits) return false;
    auto w = std::make_shared<RemoteWait>();
    fill(*w);
    waits_.emplace(token, std::move(w));
    return true;
  }
  RemoteWaitPtr w = it->second;
  StreamQueuePtr waiter;
  {
    std::lock_guard lock(w->mu);
    // A second notification of one token, before its wait: refused, and the first one
    // stays for the wait to come.
    if (w->arrived) return false;
    fill(*w);
    waiter = std::move(w->waiter);
  }
  waits_.erase(it);
  if (waiter) wake(waiter);
  return true;
}

void Tokens::drop_waiters() {
  for (auto& [id, w] : waits_) {
    std::lock_guard lock(w->mu);
    w->waiter.reset();
  }
}

}  // namespace dtr::worker::detail
