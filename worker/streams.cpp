// Stream scheduler (worker/streams.hpp).
#include "worker/streams.hpp"

#include <fmt/format.h>

#include "common/trace_clock.hpp"
#include "worker/recorder.hpp"
#include "worker/trace_slices.hpp"

namespace dtr::worker::detail {

namespace {

bool task_failed(const Task& t) {
  if (t.out) return t.out->failed.load(std::memory_order_acquire);
  return t.in[0] && t.in[0]->failed.load(std::memory_order_acquire);
}

// Before each attempt at task `t`: its start (the first attempt), and the trace's times.
void attempt(Recorder& rec, Task& t) {
  const bool tracing = rec.tracer.on();
  if (t.attempts++ == 0) {
    rec.flight.started(t.flight, FlightRecorder::coarse_now_ns());
    if (tracing) t.trace_begin = trace::ticks();
  } else if (tracing && t.trace_begin != 0) {
    t.trace_last = trace::ticks();
  }
}

// Task `t` of `s` is done.
void done(Recorder& rec, StreamQueue& s, Task& t) {
  if (!t.is_barrier())  // a barrier's record ends with the barrier
    rec.flight.finished(t.flight, task_failed(t), FlightRecorder::coarse_now_ns());
  if (t.trace_begin != 0 && rec.tracer.on()) trace_task(rec.tracer, s, t, trace::ticks());
}

}  // namespace

void wake(const StreamQueuePtr& s) {
  std::lock_guard lock(s->mu);
  if (s->state == StreamQueue::State::Parked) {
    s->state = StreamQueue::State::Scheduled;
    s->owner.executor.schedule(s);
  } else {
    s->wake_pending = true;
  }
}

bool StreamQueue::idle() {
  std::lock_guard lock(mu);
  return queue.empty();
}

void StreamQueue::run() {
  StreamQueuePtr self = shared_from_this();
  for (int n = 0; n < kTasksPerSlice; ++n) {
    Task* t;
    {
      std::lock_guard lock(mu);
      if (queue.empty()) {
        state = State::Idle;
        return;
      }
      t = &queue.front();  // stays valid: only this thread pops, push_back keeps references
    }
    attempt(owner.recorder, *t);
    if (!owner.runner.execute(*this, self, *t)) {
      owner.recorder.flight.waiting(t->flight, protocol::WaitKind::None, 0,
                                    FlightRecorder::coarse_now_ns());
      std::lock_guard lock(mu);
      if (wake_pending) {
        wake_pending = false;
        --n;
        continue;  // woken already: run the task again
      }
      state = State::Parked;
      return;
    }
    done(owner.recorder, *this, *t);
    Task finished;
    {
      std::lock_guard lock(mu);
      finished = std::move(queue.front());
      queue.pop_front();
    }
    owner.queued_.fetch_sub(1, std::memory_order_relaxed);
  }
  owner.executor.schedule(self);  // let other streams have the thread
}

void fail_output(StreamQueue& s, Task& t, Failure f) {
  fail_output(s, *t.out, std::move(f));
}

void fail_output(StreamQueue& s, Slot& out, Failure f) {
  if (!s.pending_failure) s.pending_failure = f;
  out.fail(std::move(f));
}

bool arrive(StreamQueue& s, Barrier& b) {
  // A sync point covers the device work the stream queued, not only its tasks.
  std::string why = s.cuda.finish();
  if (!why.empty()) {
    std::lock_guard lock(b.mu);
    if (b.device_failure.empty()) b.device_failure = fmt::format("stream {}: {}", s.id, why);
  }
  return b.remaining.fetch_sub(1) == 1;
}

void waiting_for_tensor(StreamQueue& s, const Task& t, protocol::TensorId id) {
  s.owner.recorder.flight.waiting(t.flight, protocol::WaitKind::Tensor, id,
                                  FlightRecorder::coarse_now_ns());
}

Streams::Streams(Executor& executor, TaskRunner& runner, Recorder& recorder)
    : executor(executor), runner(runner), recorder(recorder) {
  live_[0] = std::make_shared<StreamQueue>(*this, 0);
}

const StreamQueuePtr& Streams::find(uint32_t id) const {
  static const StreamQueuePtr kNone;
  auto it = live_.find(id);
  return it == live_.end() ? kNone : it->second;
}

std::optional<std::string> Streams::create(uint32_t id) {
  if (id == 0 || live_.count(id)) return fmt::format("stream {} already exists", id);
  prune_retired();
  if (live_.size() + retired_.size() > protocol::kMaxStreams)
    return fmt::format("stream {}: this worker allows at most {} streams per session", id,
                       protocol::kMaxStreams);
  live_[id] = std::make_shared<StreamQueue>(*this, id);
  return std::nullopt;
}

std::optional<std::string> Streams::destroy(uint32_t id) {
  if (id == 0) return std::string("the default stream (0) cannot be destroyed");
  auto it = live_.find(id);
  if (it == live_.end()) return fmt::format("stream {} does not exist on this worker", id);
  retired_.push_back(std::move(it->second));
  live_.erase(it);
  return std::nullopt;
}

void Streams::stage(const StreamQueuePtr& s, Task&& t) {
  ++staged_count_;
  known_idle_ = nullptr;
  for (auto& [stream, tasks] : staged_) {
    if (stream == s) {
      tasks.push_back(std::move(t));
      return;
    }
  }
  staged_.emplace_back(s, std::vector<Task>{});
  staged_.back().second.push_back(std::move(t));
}

void Streams::flush(const std::shared_ptr<const protocol::Batch>& batch) {
  for (auto& [s, tasks] : staged_) {
    // Every staged task comes from the current batch. The last task of each stream keeps
    // it alive: a stream's earlier tasks have run by the time its last one is done.
    if (!tasks.back().batch) tasks.back().batch = batch;
    queued_.fetch_add(tasks.size(), std::memory_order_relaxed);
    std::lock_guard lock(s->mu);
    for (Task& t : tasks) s->queue.push_back(std::move(t));
    if (s->state == StreamQueue::State::Idle) {
      s->state = StreamQueue::State::Scheduled;
      executor.schedule(s);
    }
  }
  staged_.clear();
  staged_count_ = 0;
}

bool Streams::idle_now(const StreamQueuePtr& s) const {
  if (s.get() == known_idle_) return true;
  for (auto& [stream, tasks] : staged_)
    if (stream == s) return false;
  std::lock_guard lock(s->mu);
  const bool idle = s->state == StreamQueue::State::Idle && s->queue.empty();
  if (idle) known_idle_ = s.get();
  return idle;
}

void Streams::prune_retired() {
  known_idle_ = nullptr;  // the stream it names may be freed here
  std::erase_if(retired_, [](const StreamQueuePtr& s) { return s->idle(); });
}

template <class F>
void Streams::for_each(F&& f) {
  for (auto& [id, s] : live_) f(s);
  for (auto& s : retired_) f(s);
}

void Streams::barrier(const std::shared_ptr<Barrier>& b) {
  prune_retired();
  b->remaining.store(live_.size() + retired_.size());
  for_each([&](const StreamQueuePtr& s) {
    Task t;
    t.cmd = BarrierArrival{};
    t.barrier = b;
    stage(s, std::move(t));
  });
}

std::vector<std::pair<uint32_t, size_t>> Streams::queue_depths() {
  std::vector<std::pair<uint32_t, size_t>> out;
  for_each([&](const StreamQueuePtr& s) {
    size_t staged = 0;
    for (auto& [stream, tasks] : staged_)
      if (stream == s) staged = tasks.size();
    std::lock_guard lock(s->mu);
    out.emplace_back(s->id, s->queue.size() + staged);
  });
  return out;
}

void Streams::drop_queued(std::vector<Task>& graveyard) {
  for_each([&](const StreamQueuePtr& s) {
    std::lock_guard lock(s->mu);
    // The task at the front may be running: keep it where it is (erasing at the end of a
    // deque leaves references to the other elements valid).
    size_t keep = s->state == StreamQueue::State::Scheduled && !s->queue.empty() ? 1 : 0;
    for (size_t i = keep; i < s->queue.size(); ++i) graveyard.push_back(std::move(s->queue[i]));
    s->queue.erase(s->queue.begin() + static_cast<std::ptrdiff_t>(keep), s->queue.end());
  });
}

void Streams::clear() {
  for_each([](const StreamQueuePtr& s) {
    std::lock_guard lock(s->mu);
    s->queue.clear();
  });
}

}  // namespace dtr::worker::detail
