// Command dispatch and stream execution for one master session.
#include "worker/session.hpp"

#include <fmt/format.h>

#include <array>
#include <atomic>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <functional>
#include <future>
#include <limits>
#include <mutex>
#include <new>
#include <optional>
#include <thread>
#include <unordered_map>

#include "dtr/process_group.hpp"
#include "protocol/codec.hpp"
#include "tensor/cuda/cuda.hpp"
#include "worker/executor.hpp"

namespace dtr::worker {

using protocol::CmdType;
using protocol::Command;
using protocol::command_name;
using Payloads = std::span<const PayloadFrame>;
namespace cmd = protocol::cmd;
using protocol::RemoteFailure;
using protocol::TensorId;
using Failure = std::shared_ptr<const RemoteFailure>;

namespace {

constexpr int kTasksPerSlice = 256;  // a stream yields its thread after this many tasks
constexpr size_t kStageFlush = 256;  // dispatched tasks handed to the streams at once

RemoteFailure make_failure(TensorId tensor, std::string_view op, std::string message) {
  RemoteFailure f;
  f.tensor = tensor;
  f.op = std::string(op);
  f.message = std::move(message);
  f.cause_tensor = tensor;
  f.cause_op = f.op;
  f.cause_message = f.message;
  return f;
}

// The tensor a command makes (kNoTensor when it makes none).
template <class C>
TensorId output_of(const C& c) {
  if constexpr (std::is_same_v<C, cmd::RunOp>)
    return c.inplace ? protocol::kNoTensor : c.out;
  else if constexpr (std::is_same_v<C, cmd::Collective>)
    return c.makes_tensor() ? c.out : protocol::kNoTensor;
  else if constexpr (requires { c.out; })
    return c.out;
  else
    return protocol::kNoTensor;
}

// The tensor a command reads or writes first (kNoTensor when none).
template <class C>
TensorId input_of(const C& c) {
  if constexpr (std::is_same_v<C, cmd::RunOp>)
    return c.inputs.n > 0 ? c.inputs.ids[0] : protocol::kNoTensor;
  else if constexpr (requires { c.input; })
    return c.input;
  else
    return protocol::kNoTensor;
}

Failure dependent_failure(TensorId tensor, std::string_view op, TensorId input,
                          const RemoteFailure& cause) {
  auto f = std::make_shared<RemoteFailure>();
  f->tensor = tensor;
  f->op = std::string(op);
  f->message = fmt::format("input %{} is failed", input);
  f->cause_tensor = cause.cause_tensor;
  f->cause_op = cause.cause_op;
  f->cause_message = cause.cause_message;
  return f;
}

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

struct Stream;
using StreamPtr = std::shared_ptr<Stream>;

// Something a parked stream waits for. wake() is called once per successful park.
void wake(const StreamPtr& s);

// One tensor of the table. `tensor` is written once by its producer before `ready`;
// `failure` may be set later (an in-place op failing), under `mu`.
struct Slot {
  local::Tensor tensor;
  std::atomic<bool> ready{false};
  std::atomic<bool> failed{false};
  std::mutex mu;
  Failure failure;
  std::vector<StreamPtr> waiters;
  // A CUDA tensor: its latest write's completion on the device, and the CUDA stream that
  // wrote it (under mu). Readers on other CUDA streams wait for it on the device.
  std::shared_ptr<cuda::Event> written;
  cuda::StreamHandle written_on = nullptr;

  static std::shared_ptr<Slot> of(local::Tensor t) {
    auto s = std::make_shared<Slot>();
    s->tensor = std::move(t);
    s->ready.store(true, std::memory_order_relaxed);
    return s;
  }
  static std::shared_ptr<Slot> failed_with(Failure f) {
    auto s = std::make_shared<Slot>();
    s->failure = std::move(f);
    s->failed.store(true, std::memory_order_relaxed);
    s->ready.store(true, std::memory_order_relaxed);
    return s;
  }
  Failure get_failure() {
    if (!failed.load(std::memory_order_acquire)) return nullptr;
    std::lock_guard lock(mu);
    return failure;
  }
  // True when ready; otherwise `s` is woken once it is.
  bool ready_or_park(const StreamPtr& s) {
    if (ready.load(std::memory_order_acquire)) return true;
    std::lock_guard lock(mu);
    if (ready.load(std::memory_order_relaxed)) return true;
    waiters.push_back(s);
    return false;
  }
  void publish(local::Tensor t) {
    tensor = std::move(t);
    finish(nullptr);
  }
  void fail(Failure f) { finish(std::move(f)); }

 private:
  void finish(Failure f) {
    std::vector<StreamPtr> woken;
    {
      std::lock_guard lock(mu);
      if (f) {
        failure = std::move(f);
        failed.store(true, std::memory_order_release);
      }
      ready.store(true, std::memory_order_release);
      woken.swap(waiters);
    }
    for (const StreamPtr& s : woken) wake(s);
  }
};
using SlotPtr = std::shared_ptr<Slot>;

// An event on this node. `issued` is the dispatcher's count of records; `completed` the
// highest record that has run.
struct EventState {
  uint64_t id = 0;
  uint64_t issued = 0;  // dispatch thread only
  std::mutex mu;
  uint64_t completed = 0;
  Failure failure;  // carried by the latest completed record
  int64_t time_ns = 0;
  bool timing = false;
  struct Waiter {
    uint64_t target = 0;
    StreamPtr stream;      // a stream parked on a wait
    uint64_t request = 0;  // or an EventSync request to answer
    int32_t peer = -1;     // or a peer to notify of `token`
    uint64_t token = 0;
  };
  std::vector<Waiter> waiters;
};
using EventPtr = std::shared_ptr<EventState>;

// A cross-node wait: the notification for one token.
struct RemoteWait {
  std::mutex mu;
  bool arrived = false;
  StreamPtr waiter;
  uint32_t from = 0;
  // A copy's bytes, or why the sender could not send them.
  std::optional<PayloadFrame> payload;
  std::optional<RemoteFailure> failure;
};
using RemoteWaitPtr = std::shared_ptr<RemoteWait>;

struct Barrier {
  std::atomic<size_t> remaining{0};
  CmdType type = CmdType::Sync;
  uint64_t request = 0;
  int64_t live_tensors = 0;
  int32_t device = -1;  // Stats: whose memory
  std::mutex mu;
  std::string device_failure;  // a stream's CUDA work failed (reported with the reply)
};

struct Task {
  enum class Kind : uint8_t {
    Op,
    Get,
    Record,
    WaitEvent,
    WaitRemote,
    Barrier,
    SendPeer,
    RecvPeer,
    Collective,
    ToDevice
  };
  Kind kind = Kind::Op;
  // The command (of the type `kind` implies); it lives in the batch that the stream's last
  // task of it holds.
  const void* cmd = nullptr;
  template <class C>
  const C& command() const {
    return *static_cast<const C*>(cmd);
  }
  std::shared_ptr<const protocol::Batch> batch;
  SlotPtr in[2];
  SlotPtr out;  // a new output, or the target of an in-place op (in[0])
  EventPtr event;
  uint64_t target = 0;
  RemoteWaitPtr remote;
  std::shared_ptr<Barrier> barrier;
  std::shared_ptr<struct Group> group;
};

// A process group of the session (the whole one, or a subgroup), made in order on the
// group thread.
struct Group {
  std::shared_future<ProcessGroup> ready;
};
using GroupPtr = std::shared_ptr<Group>;

// Runs jobs one at a time, in order, on its own thread: process-group creation, which
// every node must do in the same order and which blocks until the peers have joined
// (bounded by the collective timeout). Jobs capture only values, so a session that ends
// while one still waits for its peers does not wait for it: the thread is detached,
// finishes that job on its own and exits; jobs not started are dropped.
class GroupThread {
 public:
  GroupThread() : state_(std::make_shared<State>()) {
    std::thread([s = state_] { loop(*s); }).detach();
  }
  ~GroupThread() {
    {
      std::lock_guard lock(state_->mu);
      state_->stop = true;
      state_->jobs.clear();
    }
    state_->cv.notify_one();
  }
  void post(std::function<void()> job) {
    {
      std::lock_guard lock(state_->mu);
      state_->jobs.push_back(std::move(job));
    }
    state_->cv.notify_one();
  }

 private:
  struct State {
    std::mutex mu;
    std::condition_variable cv;
    std::deque<std::function<void()>> jobs;
    bool stop = false;
  };
  static void loop(State& s) {
    std::unique_lock lock(s.mu);
    while (true) {
      s.cv.wait(lock, [&] { return s.stop || !s.jobs.empty(); });
      if (s.stop) return;
      std::function<void()> job = std::move(s.jobs.front());
      s.jobs.pop_front();
      lock.unlock();
      job();
      lock.lock();
    }
  }
  std::shared_ptr<State> state_;
};

}  // namespace

struct Session::Impl {
  Impl(Emit emit, SessionOptions options)
      : emit(std::move(emit)), options(options), executor(options.threads) {}
  ~Impl();

  // ---- dispatch (one thread): one handler per command ----
  void dispatch(const Command& c, Payloads payloads);
  void on(const cmd::RunOp& c);
  void on(const cmd::Put& c, Payloads payloads);
  void on(const cmd::Get& c);
  void on(const cmd::Free& c);
  void on(const cmd::Sync& c);
  void on(const cmd::Stats& c);
  void on(const cmd::CreateStream& c);
  void on(const cmd::DestroyStream& c);
  void on(const cmd::Record& c);
  void on(const cmd::WaitEvent& c);
  void on(const cmd::NotifyPeer& c);
  void on(const cmd::WaitRemote& c);
  void on(const cmd::EventQuery& c);
  void on(const cmd::EventSync& c);
  void on(const cmd::DestroyEvent& c);
  void on(const cmd::SendPeer& c);
  void on(const cmd::RecvPeer& c);
  void on(const cmd::NewGroup& c);
  void on(const cmd::Collective& c);
  void on(const cmd::ToDevice& c);
  void put(const cmd::Put& c, Payloads payloads);
  bool check_new_id(TensorId id, std::string_view op);
  void barrier(CmdType type, uint64_t request, int32_t device);
  void stage(const StreamPtr& s, Task&& t);
  void flush_staged();
  // The command's stream, and its device exists here; otherwise null, the failure
  // recorded (for the command's output when it makes one), a request answered.
  template <class C>
  StreamPtr stream_of(const C& c);
  template <class C>
  EventPtr event_of(const C& c);
  // Answers an EventQuery / EventSync; call without the event's lock.
  void reply_event(uint64_t request, bool done, int64_t time_ns, const Failure& failure);
  template <class C>
  void reply_failure(const C& c, RemoteFailure f);
  // The event's waiters' answer, or a reply now: EventQuery and EventSync.
  void answer_event(const EventPtr& e, uint64_t request, bool sync);
  void prune_retired();
  // Nothing queued, staged or running on `s` (dispatch thread).
  bool idle_now(const StreamPtr& s);

  // ---- execution (any executor thread) ----
  bool execute(Stream& s, const StreamPtr& self, Task& t);
  bool run_op(Stream& s, const StreamPtr& self, Task& t);
  bool run_get(const StreamPtr& self, Task& t);
  void run_record(Stream& s, Task& t);
  void finish_barrier(Barrier& b);

  // ---- shared ----
  // `device`: where the failed tensor lives (-1 the CPU), named in the master's error.
  Failure root_failure(TensorId tensor, std::string_view op, std::string message,
                       int32_t device = -1);
  void mark_reported(const RemoteFailure& f);
  void send_notify(int32_t peer, uint64_t token, const RemoteFailure* failure = nullptr);
  // The wait for `token` from `peer`: the entry its notification made, or a new one.
  // Null (and a failure recorded for `tensor`) when the peer or the limit is wrong.
  template <class C>
  RemoteWaitPtr remote_wait(const C& c, std::string_view op, TensorId tensor);
  // Why `peer` cannot be talked to (no Setup, out of range, this node); nullopt if it can.
  std::optional<std::string> peer_problem(uint32_t peer) const;
  // Fails the task's output and, first on its stream since the last record, notes the
  // failure for the stream's next event (every kind of task that makes or writes a tensor).
  static void fail_output(Stream& s, Task& t, Failure f);
  bool run_send_peer(const StreamPtr& self, Task& t);
  bool run_collective(const StreamPtr& self, Task& t);
  bool run_recv_peer(const StreamPtr& self, Task& t);
  bool run_to_device(Stream& s, const StreamPtr& self, Task& t);
  // A command's device exists here; otherwise the failure is recorded (for its output when
  // it makes one) and false returned.
  template <class C>
  bool check_device(const C& c);
  // ---- CUDA (executor threads) ----
  // `slot`'s tensor, ready to be read or written by stream `s`: a CUDA tensor last written
  // on another CUDA stream is waited for on the device, and its memory kept from reuse
  // until what `s` queues on it has run.
  static local::Tensor use(Stream& s, Slot& slot);
  // Notes that `s` has just queued a write of `t` (a CUDA tensor) into `slot`.
  static void wrote(Stream& s, Slot& slot, const local::Tensor& t);

  Emit emit;
  SessionOptions options;
  // The session's process groups: 0 is the whole one. The group thread outlives nothing
  // that uses it: it is joined before the executor (members are destroyed in reverse).
  std::unordered_map<uint64_t, GroupPtr> groups;  // dispatch thread only
  std::unique_ptr<GroupThread> group_thread;
  Executor executor;

  // dispatch thread only
  std::unordered_map<TensorId, SlotPtr> table;
  std::unordered_map<uint32_t, StreamPtr> streams;
  std::vector<StreamPtr> retired;  // destroyed streams still running their queue
  std::unordered_map<uint64_t, EventPtr> events;
  std::unordered_map<uint64_t, RemoteWaitPtr> tokens;
  std::vector<std::pair<StreamPtr, std::vector<Task>>> staged;
  size_t staged_count = 0;
  std::atomic<size_t> queued{0};     // tasks handed to streams and not yet done
  std::atomic<bool> closing{false};  // the session is ending: stop waiting for groups
  std::shared_ptr<const protocol::Batch> current_batch;  // during run()
  bool has_setup = false;
  uint32_t node = 0;
  uint32_t nodes = 1;
  uint64_t session_id = 0;

  mutable std::mutex failures_mu;  // guards unreported and dropped_failures
  std::vector<RemoteFailure> unreported;
  size_t dropped_failures = 0;
};

namespace {

struct Stream : Runnable, std::enable_shared_from_this<Stream> {
  Stream(Session::Impl& impl, uint32_t id) : impl(impl), id(id) {}

  void run() override;
  bool idle() {
    std::lock_guard lock(mu);
    return queue.empty();
  }

  Session::Impl& impl;
  const uint32_t id;
  std::mutex mu;  // guards queue, state, wake_pending
  std::deque<Task> queue;
  enum class State : uint8_t { Idle, Scheduled, Parked } state = State::Idle;
  bool wake_pending = false;
  // Only the thread running the stream touches these.
  Failure pending_failure;  // first failure since the stream's last record
  // This stream's CUDA stream on each device it used, made on first use.
  std::vector<std::unique_ptr<cuda::Stream>> cuda_streams;
  cuda::StreamHandle cuda_stream(int device) {
    if (device < 0) return nullptr;
    if (cuda_streams.size() <= static_cast<size_t>(device))
      cuda_streams.resize(static_cast<size_t>(device) + 1);
    auto& cs = cuda_streams[static_cast<size_t>(device)];
    if (!cs) cs = std::make_unique<cuda::Stream>(device);
    return cs->handle();
  }
  // Waits until the CUDA work this stream queued has run; "" or why it failed.
  std::string finish_cuda() {
    std::string why;
    for (const auto& cs : cuda_streams) {
      if (!cs) continue;
      try {
        cs->synchronize();
      } catch (const std::exception& e) {
        if (why.empty()) why = e.what();
      }
    }
    return why;
  }
};

void wake(const StreamPtr& s) {
  std::lock_guard lock(s->mu);
  if (s->state == Stream::State::Parked) {
    s->state = Stream::State::Scheduled;
    s->impl.executor.schedule(s);
  } else {
    s->wake_pending = true;
  }
}

void Stream::run() {
  StreamPtr self = shared_from_this();
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
    if (!impl.execute(*this, self, *t)) {
      std::lock_guard lock(mu);
      if (wake_pending) {
        wake_pending = false;
        --n;
        continue;  // woken already: run the task again
      }
      state = State::Parked;
      return;
    }
    Task done;
    {
      std::lock_guard lock(mu);
      done = std::move(queue.front());
      queue.pop_front();
    }
    impl.queued.fetch_sub(1, std::memory_order_relaxed);
  }
  impl.executor.schedule(self);  // let other streams have the thread
}

}  // namespace

// ---- shared ----

Failure Session::Impl::root_failure(TensorId tensor, std::string_view op, std::string message,
                                    int32_t device) {
  auto f = std::make_shared<RemoteFailure>(make_failure(tensor, op, std::move(message)));
  f->device = device;
  std::lock_guard lock(failures_mu);
  if (unreported.size() < protocol::kMaxErrorsPerReply) {
    unreported.push_back(*f);
  } else {
    ++dropped_failures;
  }
  return f;
}

void Session::Impl::mark_reported(const RemoteFailure& f) {
  std::lock_guard lock(failures_mu);
  for (auto it = unreported.begin(); it != unreported.end(); ++it) {
    if (it->tensor == f.cause_tensor && it->op == f.cause_op && it->message == f.cause_message) {
      unreported.erase(it);
      return;
    }
  }
}

void Session::Impl::send_notify(int32_t peer, uint64_t token, const RemoteFailure* failure) {
  protocol::PeerNotify n;
  n.session = session_id;
  n.from_node = node;
  n.token = token;
  if (failure) {
    n.failed = true;
    n.failure = *failure;
  }
  emit(Outgoing{protocol::encode(n), {}, peer});
}

std::optional<std::string> Session::Impl::peer_problem(uint32_t peer) const {
  if (!has_setup) return std::string("the session has no peer table (no Setup)");
  if (peer >= nodes || peer == node)
    return fmt::format("node {} is not a peer of node {} ({} nodes)", peer, node, nodes);
  return std::nullopt;
}

template <class C>
RemoteWaitPtr Session::Impl::remote_wait(const C& c, std::string_view op, TensorId tensor) {
  if (std::optional<std::string> problem = peer_problem(c.peer)) {
    Failure f = root_failure(tensor, op, std::move(*problem));
    TensorId out = output_of(c);
    if (out != protocol::kNoTensor && !table.count(out)) table[out] = Slot::failed_with(f);
    return nullptr;
  }
  auto it = tokens.find(c.token);
  if (it != tokens.end()) {  // the notification came first
    RemoteWaitPtr w = std::move(it->second);
    tokens.erase(it);
    return w;
  }
  if (tokens.size() >= protocol::kMaxPendingWaits) {
    root_failure(tensor, op,
                 fmt::format("more than {} cross-node waits pending", protocol::kMaxPendingWaits));
    return nullptr;
  }
  auto w = std::make_shared<RemoteWait>();
  w->from = c.peer;
  tokens.emplace(c.token, w);
  return w;
}

// ---- dispatch ----

Session::Impl::~Impl() {
  closing.store(true);
  // Collectives blocked in a process group fail at once when it shuts down.
  for (auto& [id, g] : groups) {
    if (g->ready.valid() &&
        g->ready.wait_for(std::chrono::seconds(0)) == std::future_status::ready) {
      try {
        ProcessGroup pg = g->ready.get();
        if (pg.valid()) pg.shutdown();
      } catch (const std::exception&) {
      }
    }
  }
  // Queued tasks go first (they hold slots, events and streams in cycles); the executor's
  // destructor then waits for whatever is running.
  // Dropped tasks are kept until nothing runs: one of them may hold the batch that the
  // running task's command lives in.
  std::vector<Task> graveyard;
  auto drop = [&](const StreamPtr& s) {
    std::lock_guard lock(s->mu);
    // The task at the front may be running: keep it where it is (erasing at the end of a
    // deque leaves references to the other elements valid).
    size_t keep = s->state == Stream::State::Scheduled && !s->queue.empty() ? 1 : 0;
    for (size_t i = keep; i < s->queue.size(); ++i) graveyard.push_back(std::move(s->queue[i]));
    s->queue.erase(s->queue.begin() + static_cast<std::ptrdiff_t>(keep), s->queue.end());
  };
  for (auto& [id, s] : streams) drop(s);
  for (auto& s : retired) drop(s);
  executor.wait_idle(std::chrono::hours(24));
  graveyard.clear();
  for (auto& [id, s] : streams) {
    std::lock_guard lock(s->mu);
    s->queue.clear();
  }
  for (auto& s : retired) {
    std::lock_guard lock(s->mu);
    s->queue.clear();
  }
  for (auto& [id, e] : events) {
    std::lock_guard lock(e->mu);
    e->waiters.clear();
  }
  for (auto& [id, slot] : table) {
    std::lock_guard lock(slot->mu);
    slot->waiters.clear();
  }
  for (auto& [id, w] : tokens) {
    std::lock_guard lock(w->mu);
    w->waiter.reset();
  }
}

bool Session::Impl::check_new_id(TensorId id, std::string_view op) {
  if (id == protocol::kNoTensor) {
    root_failure(id, op, "output tensor id 0 is not a valid id");
    return false;
  }
  if (table.count(id)) {
    root_failure(id, op, fmt::format("output tensor id %{} is already in use", id));
    return false;
  }
  return true;
}

void Session::Impl::stage(const StreamPtr& s, Task&& t) {
  for (auto& [stream, tasks] : staged) {
    if (stream == s) {
      tasks.push_back(std::move(t));
      ++staged_count;
      return;
    }
  }
  staged.emplace_back(s, std::vector<Task>{});
  staged.back().second.push_back(std::move(t));
  ++staged_count;
}

void Session::Impl::flush_staged() {
  for (auto& [s, tasks] : staged) {
    // Every staged task comes from the current batch. The last task of each stream keeps
    // it alive: a stream's earlier tasks have run by the time its last one is done.
    if (!tasks.back().batch) tasks.back().batch = current_batch;
    queued.fetch_add(tasks.size(), std::memory_order_relaxed);
    std::lock_guard lock(s->mu);
    for (Task& t : tasks) s->queue.push_back(std::move(t));
    if (s->state == Stream::State::Idle) {
      s->state = Stream::State::Scheduled;
      executor.schedule(s);
    }
  }
  staged.clear();
  staged_count = 0;
}

template <class C>
void Session::Impl::reply_failure(const C& c, RemoteFailure f) {
  protocol::Reply r;
  r.type = std::is_same_v<C, cmd::Get> ? protocol::ReplyType::Get : protocol::ReplyType::Event;
  r.request = c.request;
  r.failures.push_back(std::move(f));
  emit(Outgoing{protocol::encode(r), {}, -1});
}

template <class C>
StreamPtr Session::Impl::stream_of(const C& c) {
  auto it = streams.find(c.stream);
  if (it != streams.end()) return check_device(c) ? it->second : nullptr;
  const TensorId out = output_of(c);
  RemoteFailure f = make_failure(out != protocol::kNoTensor ? out : input_of(c), command_name(c),
                                 fmt::format("stream {} does not exist on this worker", c.stream));
  Failure shared = root_failure(f.tensor, f.op, f.message);
  // The output exists, failed, so that its users learn why; a request is still answered,
  // or the master would wait for it forever.
  if (out != protocol::kNoTensor && !table.count(out)) table[out] = Slot::failed_with(shared);
  if constexpr (requires { c.request; }) reply_failure(c, f);
  // A copy's receiver waits for the sender: tell it.
  if constexpr (std::is_same_v<C, cmd::SendPeer>)
    if (!peer_problem(c.peer)) send_notify(static_cast<int32_t>(c.peer), c.token, &f);
  return nullptr;
}

template <class C>
EventPtr Session::Impl::event_of(const C& c) {
  auto it = events.find(c.event);
  if (it != events.end()) return it->second;
  RemoteFailure f =
      make_failure(protocol::kNoTensor, command_name(c),
                   fmt::format("event {} was never recorded on this worker", c.event));
  if constexpr (requires { c.request; })
    reply_failure(c, f);
  else
    root_failure(f.tensor, f.op, f.message);
  return nullptr;
}

void Session::Impl::reply_event(uint64_t request, bool done, int64_t time_ns,
                                const Failure& failure) {
  protocol::Reply r;
  r.type = protocol::ReplyType::Event;
  r.request = request;
  r.done = done;
  r.time_ns = time_ns;
  if (done && failure) {
    r.failures.push_back(*failure);
    mark_reported(*failure);
  }
  emit(Outgoing{protocol::encode(r), {}, -1});
}

bool Session::Impl::idle_now(const StreamPtr& s) {
  for (auto& [stream, tasks] : staged)
    if (stream == s) return false;
  std::lock_guard lock(s->mu);
  return s->state == Stream::State::Idle && s->queue.empty();
}

void Session::Impl::prune_retired() {
  std::erase_if(retired, [](const StreamPtr& s) { return s->idle(); });
}

void Session::Impl::barrier(CmdType type, uint64_t request, int32_t device) {
  prune_retired();
  auto b = std::make_shared<Barrier>();
  b->type = type;
  b->request = request;
  b->live_tensors = static_cast<int64_t>(table.size());
  b->device = device;
  b->remaining.store(streams.size() + retired.size());
  auto add = [&](const StreamPtr& s) {
    Task t;
    t.kind = Task::Kind::Barrier;
    t.barrier = b;
    stage(s, std::move(t));
  };
  for (auto& [id, s] : streams) add(s);
  for (auto& s : retired) add(s);
}

void Session::Impl::put(const cmd::Put& c, Payloads payloads) {
  if (!check_new_id(c.out, "put")) return;
  auto fail = [&](std::string message) {
    table[c.out] = Slot::failed_with(root_failure(c.out, "put", std::move(message), c.device));
  };
  if (c.payload < 1 || c.payload > payloads.size())  // the decoder checks it too
    return fail(
        fmt::format("payload frame {} does not exist (1 to {})", c.payload, payloads.size()));
  const PayloadFrame& frame = payloads[c.payload - 1];
  const TensorMeta& m = c.meta;
  // numel * element size must not wrap around (2^61 float64 elements would need 0 bytes).
  if (static_cast<uint64_t>(m.numel()) >
      std::numeric_limits<int64_t>::max() / element_size(m.dtype))
    return fail(fmt::format("{} needs more bytes than int64 can count", describe(m)));
  size_t expected = static_cast<size_t>(m.numel()) * element_size(m.dtype);
  if (frame.size != expected)
    return fail(
        fmt::format("payload has {} bytes, {} needs {}", frame.size, describe(m), expected));
  try {
    std::shared_ptr<Storage> storage;
    bool aligned = reinterpret_cast<uintptr_t>(frame.data) % element_size(m.dtype) == 0;
    if (aligned && frame.owner) {
      storage = Storage::wrap(frame.data, frame.size, frame.owner);
    } else {
      storage = Storage::allocate(frame.size);
      if (frame.size) std::memcpy(storage->data(), frame.data, frame.size);
    }
    local::Tensor host(std::move(storage), TensorMeta::contiguous(m.dtype, m.shape));
    if (c.device < 0) {
      table[c.out] = Slot::of(std::move(host));
      return;
    }
    // On the device's default stream; streams that read it wait for its event.
    cuda::StreamScope scope(c.device, nullptr);
    local::Tensor on_device = host.to_device(c.device);
    auto written = std::make_shared<cuda::Event>(c.device);
    written->record(nullptr);
    SlotPtr slot = Slot::of(std::move(on_device));
    slot->written = std::move(written);
    table[c.out] = std::move(slot);
  } catch (const std::exception& e) {
    fail(e.what());
  }
}

void Session::Impl::dispatch(const Command& c, Payloads payloads) {
  std::visit(
      [&](const auto& x) {
        if constexpr (std::is_same_v<std::decay_t<decltype(x)>, cmd::Put>)
          on(x, payloads);
        else
          on(x);
      },
      c);
}

void Session::Impl::on(const cmd::RunOp& c) {
  StreamPtr stream = stream_of(c);
  if (!stream) return;
  const OpDef& d = op_def(c.op);
  TensorId target = c.inplace ? input_of(c) : c.out;
  if (c.inplace) {
    if (c.inputs.n == 0) {
      root_failure(protocol::kNoTensor, d.name, "an in-place command needs input 0 (its target)");
      return;
    }
    if (c.out != protocol::kNoTensor) {
      root_failure(c.out, d.name, fmt::format("an in-place command names output id %{}", c.out));
      return;
    }
  } else if (!check_new_id(c.out, d.name)) {
    return;
  }
  Task t;
  t.kind = Task::Kind::Op;
  t.cmd = &c;
  for (uint8_t i = 0; i < c.inputs.n; ++i) {
    auto it = table.find(c.inputs.ids[i]);
    if (it == table.end()) {
      Failure f = root_failure(target, d.name,
                               fmt::format("input tensor %{} does not exist", c.inputs.ids[i]));
      if (!c.inplace) table[c.out] = Slot::failed_with(f);
      return;
    }
    t.in[i] = it->second;
  }
  if (c.inplace) {
    t.out = t.in[0];
  } else {
    t.out = std::make_shared<Slot>();
    table[c.out] = t.out;
  }
  stage(stream, std::move(t));
}

void Session::Impl::on(const cmd::Put& c, Payloads payloads) {
  if (stream_of(c)) put(c, payloads);
}

void Session::Impl::on(const cmd::Get& c) {
  StreamPtr stream = stream_of(c);
  if (!stream) return;
  auto it = table.find(c.input);
  if (it == table.end()) {
    reply_failure(c,
                  make_failure(c.input, "get", fmt::format("tensor %{} does not exist", c.input)));
    return;
  }
  Task t;
  t.kind = Task::Kind::Get;
  t.cmd = &c;
  t.in[0] = it->second;
  stage(stream, std::move(t));
}

void Session::Impl::on(const cmd::Free& c) {
  if (table.erase(c.input) == 0)
    root_failure(c.input, "free", fmt::format("tensor %{} does not exist", c.input));
}

void Session::Impl::on(const cmd::Sync& c) {
  barrier(CmdType::Sync, c.request, -1);
}

void Session::Impl::on(const cmd::Stats& c) {
  if (c.device >= options.devices) {
    protocol::Reply r;
    r.type = protocol::ReplyType::ProtocolError;
    r.request = c.request;
    r.message = fmt::format("memory_stats: this node has no CUDA device {} (it has {})", c.device,
                            options.devices);
    emit(Outgoing{protocol::encode(r), {}, -1});
    return;
  }
  barrier(CmdType::Stats, c.request, c.device);
}

void Session::Impl::on(const cmd::CreateStream& c) {
  if (c.stream == 0 || streams.count(c.stream)) {
    root_failure(protocol::kNoTensor, "create_stream",
                 fmt::format("stream {} already exists", c.stream));
    return;
  }
  prune_retired();
  if (streams.size() + retired.size() > protocol::kMaxStreams) {
    root_failure(protocol::kNoTensor, "create_stream",
                 fmt::format("stream {}: this worker allows at most {} streams per session",
                             c.stream, protocol::kMaxStreams));
    return;
  }
  streams[c.stream] = std::make_shared<Stream>(*this, c.stream);
}

void Session::Impl::on(const cmd::DestroyStream& c) {
  if (c.stream == 0) {
    root_failure(protocol::kNoTensor, "destroy_stream",
                 "the default stream (0) cannot be destroyed");
    return;
  }
  auto it = streams.find(c.stream);
  if (it == streams.end()) {
    root_failure(protocol::kNoTensor, "destroy_stream",
                 fmt::format("stream {} does not exist on this worker", c.stream));
    return;
  }
  retired.push_back(std::move(it->second));
  streams.erase(it);
}

void Session::Impl::on(const cmd::Record& c) {
  StreamPtr stream = stream_of(c);
  if (!stream) return;
  if (c.event == 0) {
    root_failure(protocol::kNoTensor, "record_event", "event id 0 is not a valid id");
    return;
  }
  auto it = events.find(c.event);
  if (it == events.end()) {
    if (events.size() >= protocol::kMaxEvents) {
      root_failure(protocol::kNoTensor, "record_event",
                   fmt::format("event {}: this worker allows at most {} live events", c.event,
                               protocol::kMaxEvents));
      return;
    }
    auto e = std::make_shared<EventState>();
    e->id = c.event;
    it = events.emplace(c.event, std::move(e)).first;
  }
  Task t;
  t.kind = Task::Kind::Record;
  t.cmd = &c;
  t.event = it->second;
  t.target = ++t.event->issued;
  // On an idle stream the record is done at once (so that a query right after it sees an
  // idle stream as done). Only this thread makes an idle stream run.
  if (idle_now(stream)) return run_record(*stream, t);
  stage(stream, std::move(t));
}

void Session::Impl::on(const cmd::WaitEvent& c) {
  StreamPtr stream = stream_of(c);
  if (!stream) return;
  Task t;
  t.event = event_of(c);
  if (!t.event) return;
  t.kind = Task::Kind::WaitEvent;
  t.cmd = &c;
  t.target = t.event->issued;
  stage(stream, std::move(t));
}

void Session::Impl::on(const cmd::NotifyPeer& c) {
  if (std::optional<std::string> problem = peer_problem(c.peer)) {
    root_failure(protocol::kNoTensor, "notify_peer", std::move(*problem));
    return;
  }
  EventPtr e = event_of(c);
  if (!e) return;
  std::unique_lock lock(e->mu);
  if (e->completed >= e->issued) {
    lock.unlock();
    send_notify(static_cast<int32_t>(c.peer), c.token);
  } else {
    e->waiters.push_back({e->issued, nullptr, 0, static_cast<int32_t>(c.peer), c.token});
  }
}

void Session::Impl::on(const cmd::WaitRemote& c) {
  StreamPtr stream = stream_of(c);
  if (!stream) return;
  Task t;
  t.remote = remote_wait(c, "wait_event", protocol::kNoTensor);
  if (!t.remote) return;
  t.kind = Task::Kind::WaitRemote;
  t.cmd = &c;
  stage(stream, std::move(t));
}

void Session::Impl::answer_event(const EventPtr& e, uint64_t request, bool sync) {
  std::unique_lock lock(e->mu);
  bool done = e->completed >= e->issued;
  if (!done && sync) {
    e->waiters.push_back({e->issued, nullptr, request, -1, 0});
    return;
  }
  int64_t time_ns = e->time_ns;
  // A query only says whether; the failure is for whoever synchronizes.
  Failure failure = sync ? e->failure : nullptr;
  lock.unlock();
  reply_event(request, done, time_ns, failure);
}

void Session::Impl::on(const cmd::EventQuery& c) {
  if (EventPtr e = event_of(c)) answer_event(e, c.request, false);
}

void Session::Impl::on(const cmd::EventSync& c) {
  if (EventPtr e = event_of(c)) answer_event(e, c.request, true);
}

void Session::Impl::on(const cmd::DestroyEvent& c) {
  if (events.erase(c.event) == 0)
    root_failure(protocol::kNoTensor, "destroy_event",
                 fmt::format("event {} was never recorded on this worker", c.event));
}

void Session::Impl::on(const cmd::SendPeer& c) {
  StreamPtr stream = stream_of(c);
  if (!stream) return;
  if (std::optional<std::string> problem = peer_problem(c.peer)) {
    root_failure(c.input, "send_to_node", std::move(*problem));
    return;
  }
  auto it = table.find(c.input);
  if (it == table.end()) {
    // The receiver must still hear of it, or its stream would wait forever.
    RemoteFailure f =
        make_failure(c.input, "send_to_node", fmt::format("tensor %{} does not exist", c.input));
    root_failure(f.tensor, f.op, f.message);
    send_notify(static_cast<int32_t>(c.peer), c.token, &f);
    return;
  }
  Task t;
  t.kind = Task::Kind::SendPeer;
  t.cmd = &c;
  t.in[0] = it->second;
  stage(stream, std::move(t));
}

void Session::Impl::on(const cmd::RecvPeer& c) {
  StreamPtr stream = stream_of(c);
  if (!stream) return;
  if (!check_new_id(c.out, "recv_from_node")) return;
  const TensorMeta& m = c.meta;
  if (static_cast<uint64_t>(m.numel()) >
      std::numeric_limits<int64_t>::max() / element_size(m.dtype)) {
    table[c.out] = Slot::failed_with(
        root_failure(c.out, "recv_from_node",
                     fmt::format("{} needs more bytes than int64 can count", describe(m))));
    return;
  }
  Task t;
  t.remote = remote_wait(c, "recv_from_node", c.out);
  if (!t.remote) return;
  t.kind = Task::Kind::RecvPeer;
  t.cmd = &c;
  t.out = std::make_shared<Slot>();
  table[c.out] = t.out;
  stage(stream, std::move(t));
}

void Session::Impl::on(const cmd::ToDevice& c) {
  StreamPtr stream = stream_of(c);
  if (!stream) return;
  if (!check_new_id(c.out, "to_device")) return;
  auto it = table.find(c.input);
  if (it == table.end()) {
    table[c.out] = Slot::failed_with(
        root_failure(c.out, "to_device", fmt::format("input tensor %{} does not exist", c.input)));
    return;
  }
  Task t;
  t.kind = Task::Kind::ToDevice;
  t.cmd = &c;
  t.in[0] = it->second;
  t.out = std::make_shared<Slot>();
  table[c.out] = t.out;
  stage(stream, std::move(t));
}

// ---- execution ----

bool Session::Impl::execute(Stream& s, const StreamPtr& self, Task& t) {
  switch (t.kind) {
    case Task::Kind::Op:
      return run_op(s, self, t);
    case Task::Kind::Get:
      return run_get(self, t);
    case Task::Kind::Record:
      run_record(s, t);
      return true;
    case Task::Kind::WaitEvent: {
      std::lock_guard lock(t.event->mu);
      if (t.event->completed >= t.target) return true;
      t.event->waiters.push_back({t.target, self, 0, -1, 0});
      return false;
    }
    case Task::Kind::WaitRemote: {
      std::lock_guard lock(t.remote->mu);
      if (t.remote->arrived) return true;
      t.remote->waiter = self;
      return false;
    }
    case Task::Kind::Barrier: {
      // A sync point covers the device work the stream queued, not only its tasks.
      std::string why = s.finish_cuda();
      if (!why.empty()) {
        std::lock_guard lock(t.barrier->mu);
        if (t.barrier->device_failure.empty())
          t.barrier->device_failure = fmt::format("stream {}: {}", s.id, why);
      }
      if (t.barrier->remaining.fetch_sub(1) == 1) finish_barrier(*t.barrier);
      return true;
    }
    case Task::Kind::ToDevice:
      return run_to_device(s, self, t);
    case Task::Kind::SendPeer:
      return run_send_peer(self, t);
    case Task::Kind::RecvPeer:
      return run_recv_peer(self, t);
    case Task::Kind::Collective:
      return run_collective(self, t);
  }
  return true;
}

// ---- collectives ----

void Session::Impl::on(const cmd::NewGroup& c) {
  auto fail = [&](std::string message) {
    root_failure(protocol::kNoTensor, "new_group", std::move(message));
  };
  if (!groups.count(0)) return fail("the session has no process group (no Setup with endpoints)");
  if (c.group == 0 || groups.count(c.group))
    return fail(fmt::format("group id {} is reserved or already in use", c.group));
  std::vector<int> ranks;
  for (uint32_t r : c.ranks) {
    if (r >= nodes) return fail(fmt::format("rank {} is not a node (there are {})", r, nodes));
    for (int seen : ranks)
      if (seen == static_cast<int>(r)) return fail(fmt::format("rank {} appears twice", r));
    ranks.push_back(static_cast<int>(r));
  }
  if (ranks.empty()) return fail("a group needs at least one rank");
  auto promise = std::make_shared<std::promise<ProcessGroup>>();
  auto g = std::make_shared<Group>();
  g->ready = promise->get_future().share();
  std::shared_future<ProcessGroup> world = groups[0]->ready;
  groups.emplace(c.group, g);
  // Every node makes its subgroups in the order the master sent them.
  group_thread->post([promise, world, ranks] {
    try {
      promise->set_value(world.get().new_group(ranks));
    } catch (...) {
      promise->set_exception(std::current_exception());
    }
  });
}

void Session::Impl::on(const cmd::Collective& c) {
  StreamPtr stream = stream_of(c);
  if (!stream) return;
  Task t;
  t.kind = Task::Kind::Collective;
  t.cmd = &c;
  if (c.makes_tensor()) {
    if (!check_new_id(c.out, "collective")) return;
    t.out = std::make_shared<Slot>();
    table[c.out] = t.out;
  }
  // Whatever is wrong here, the task still runs: the other members wait for this one,
  // and learn from it that the collective cannot be done.
  auto it = table.find(c.input);
  if (it != table.end()) {
    t.in[0] = it->second;
  } else {
    t.in[0] = Slot::failed_with(
        root_failure(c.input, "collective", fmt::format("tensor %{} does not exist", c.input)));
  }
  if (!c.makes_tensor()) t.out = t.in[0];
  auto g = groups.find(c.group);
  if (g != groups.end()) t.group = g->second;
  stage(stream, std::move(t));
}

bool Session::Impl::run_collective(const StreamPtr& self, Task& t) {
  if (!t.in[0]->ready_or_park(self)) return false;
  const auto& c = t.command<cmd::Collective>();
  static constexpr std::string_view kNames[] = {"?", "all_reduce", "broadcast", "all_gather",
                                                "reduce_scatter"};
  std::string_view name = kNames[static_cast<int>(c.kind)];
  TensorId target = t.out == t.in[0] ? c.input : c.out;
  auto fail = [&](Failure f) {
    fail_output(*self, t, std::move(f));
    return true;
  };
  if (!t.group)
    return fail(root_failure(target, name,
                             c.group == 0 ? std::string("the session has no process group")
                                          : fmt::format("group {} does not exist", c.group)));
  ProcessGroup pg;
  try {
    auto deadline = std::chrono::steady_clock::now() + options.collective_timeout;
    while (t.group->ready.wait_for(std::chrono::milliseconds(100)) != std::future_status::ready) {
      if (closing.load())
        return fail(
            root_failure(target, name, "the session ended before its process group formed"));
      if (std::chrono::steady_clock::now() >= deadline)
        return fail(root_failure(target, name,
                                 fmt::format("the session's process group was not formed within "
                                             "{} ms",
                                             options.collective_timeout.count())));
    }
    pg = t.group->ready.get();
  } catch (const std::exception& e) {
    return fail(root_failure(target, name, fmt::format("process group: {}", e.what())));
  }
  if (!pg.is_member())
    return fail(root_failure(target, name,
                             fmt::format("node {} is not a member of group {}", node, c.group)));
  try {
    // The members agree first: whoever's input is failed says so, and nobody computes.
    // Each member also says whether its input is a CUDA tensor (flag 2): only when all are
    // does the group get device tensors (NCCL, or the group's own host staging); otherwise
    // every member stages its CUDA input through the host itself.
    local::Tensor flags = local::zeros({pg.size()}, DType::Int32);
    Failure own = t.in[0]->get_failure();
    const local::Tensor x = own ? local::Tensor() : use(*self, *t.in[0]);
    const int device = own ? -1 : x.device();
    static_cast<int32_t*>(flags.raw_data())[pg.rank()] = own ? 1 : (device >= 0 ? 2 : 0);
    pg.all_reduce(flags, ReduceOp::Max);
    if (own) return fail(dependent_failure(target, name, c.input, *own));
    const auto* f = static_cast<const int32_t*>(flags.raw_data());
    bool all_on_devices = true;
    // Not a root failure here: the node whose input failed reports its own cause.
    for (int r = 0; r < pg.size(); ++r) {
      if (f[r] == 1)
        return fail(std::make_shared<RemoteFailure>(
            make_failure(target, name,
                         fmt::format("the input on node {} (group rank {}) is failed",
                                     pg.ranks()[static_cast<size_t>(r)], r))));
      all_on_devices = all_on_devices && f[r] == 2;
    }
    const ReduceOp op = c.reduce_op;
    // CUDA work (copies, the collective's wait for earlier work) goes to this stream's CUDA
    // stream.
    std::optional<cuda::StreamScope> scope;
    if (device >= 0) scope.emplace(device, self->cuda_stream(device));
    // Where the group's tensors live: the device when every member's input is on one.
    const int pg_device = all_on_devices ? device : -1;
    const local::Tensor in = x.to_device(pg_device);
    auto publish = [&](local::Tensor out) {
      if (device >= 0) {
        out = out.to_device(device);
        wrote(*self, *t.out, out);
      }
      t.out->publish(std::move(out));
    };
    switch (c.kind) {
      case protocol::CollectiveKind::AllReduce:
      case protocol::CollectiveKind::Broadcast: {
        local::Tensor buf = in.is_contiguous() ? in : in.contiguous();
        if (c.kind == protocol::CollectiveKind::AllReduce)
          pg.all_reduce(buf, op);
        else
          pg.broadcast(buf, c.root);
        if (buf.storage() != x.storage()) local::Tensor(x).copy_(buf.to_device(device));
        if (device >= 0) wrote(*self, *t.in[0], x);
        break;
      }
      case protocol::CollectiveKind::AllGather: {
        local::Tensor out = local::empty(c.meta.shape, c.meta.dtype, pg_device);
        pg.all_gather_into_tensor(out, in.contiguous());
        publish(std::move(out));
        break;
      }
      case protocol::CollectiveKind::ReduceScatter: {
        local::Tensor out = local::empty(c.meta.shape, c.meta.dtype, pg_device);
        pg.reduce_scatter_tensor(out, in.contiguous(), op);
        publish(std::move(out));
        break;
      }
    }
  } catch (const std::exception& e) {
    return fail(root_failure(target, name, e.what()));
  }
  return true;
}

bool Session::Impl::run_send_peer(const StreamPtr& self, Task& t) {
  if (!t.in[0]->ready_or_park(self)) return false;
  const auto& c = t.command<cmd::SendPeer>();
  auto peer = static_cast<int32_t>(c.peer);
  if (Failure f = t.in[0]->get_failure()) {
    send_notify(peer, c.token, f.get());
    return true;
  }
  protocol::PeerNotify n;
  n.session = session_id;
  n.from_node = node;
  n.token = c.token;
  try {
    local::Tensor packed = use(*self, *t.in[0]);
    if (packed.device() >= 0) {
      cuda::StreamScope scope(packed.device(), self->cuda_stream(packed.device()));
      packed = packed.cpu();
    }
    packed = packed.contiguous();
    emit(Outgoing{protocol::encode(n), {std::move(packed)}, peer});
  } catch (const std::exception& e) {
    RemoteFailure f = make_failure(c.input, "send_to_node", e.what());
    root_failure(f.tensor, f.op, f.message);
    send_notify(peer, c.token, &f);
  }
  return true;
}

bool Session::Impl::run_recv_peer(const StreamPtr& self, Task& t) {
  const auto& c = t.command<cmd::RecvPeer>();
  RemoteWait& w = *t.remote;
  {
    std::lock_guard lock(w.mu);
    if (!w.arrived) {
      w.waiter = self;
      return false;
    }
  }
  // Arrived: only this task touches the entry now.
  const TensorMeta& m = c.meta;
  if (w.failure) {
    Failure f = dependent_failure(c.out, "recv_from_node", w.failure->tensor, *w.failure);
    auto g = std::make_shared<RemoteFailure>(*f);
    g->message = fmt::format("the tensor sent by node {} is failed", c.peer);
    fail_output(*self, t, std::move(g));
    return true;
  }
  size_t expected = static_cast<size_t>(m.numel()) * element_size(m.dtype);
  if (!w.payload || w.payload->size != expected) {
    fail_output(
        *self, t,
        root_failure(c.out, "recv_from_node",
                     fmt::format("node {} sent {} bytes, {} needs {}", c.peer,
                                 w.payload ? w.payload->size : size_t{0}, describe(m), expected)));
    return true;
  }
  try {
    const PayloadFrame& frame = *w.payload;
    std::shared_ptr<Storage> storage;
    if (reinterpret_cast<uintptr_t>(frame.data) % element_size(m.dtype) == 0 && frame.owner) {
      storage = Storage::wrap(frame.data, frame.size, frame.owner);
    } else {
      storage = Storage::allocate(frame.size);
      if (frame.size) std::memcpy(storage->data(), frame.data, frame.size);
    }
    local::Tensor received(std::move(storage), TensorMeta::contiguous(m.dtype, m.shape));
    if (c.device >= 0) {
      cuda::StreamScope scope(c.device, self->cuda_stream(c.device));
      received = received.to_device(c.device);
      wrote(*self, *t.out, received);
    }
    w.payload.reset();
    t.out->publish(std::move(received));
  } catch (const std::exception& e) {
    fail_output(*self, t, root_failure(c.out, "recv_from_node", e.what()));
  }
  return true;
}

bool Session::Impl::run_op(Stream& s, const StreamPtr& self, Task& t) {
  const auto& c = t.command<cmd::RunOp>();
  const OpDef& d = op_def(c.op);
  const uint8_t n = c.inputs.n;
  TensorId target = c.inplace ? c.inputs.ids[0] : c.out;
  std::array<local::Tensor, 2> inputs;
  for (uint8_t i = 0; i < n; ++i) {
    if (!t.in[i]->ready_or_park(self)) return false;
  }
  for (uint8_t i = 0; i < n; ++i) {
    if (Failure cause = t.in[i]->get_failure()) {
      fail_output(s, t, dependent_failure(target, d.name, c.inputs.ids[i], *cause));
      return true;
    }
  }
  const int device = n > 0 ? t.in[0]->tensor.device() : c.device;
  try {
    for (uint8_t i = 0; i < n; ++i) inputs[i] = use(s, *t.in[i]);
    std::optional<cuda::StreamScope> scope;
    if (device >= 0) scope.emplace(device, s.cuda_stream(device));
    local::Tensor result = local::execute(c.op, std::span<const local::Tensor>(inputs.data(), n),
                                          c.attrs, c.inplace, c.device);
    if (result.device() >= 0) wrote(s, *t.out, result);
    if (!c.inplace) t.out->publish(std::move(result));
  } catch (const std::bad_alloc&) {
    fail_output(s, t, root_failure(target, d.name, "out of host memory", device));
  } catch (const std::exception& e) {
    fail_output(s, t, root_failure(target, d.name, e.what(), device));
  }
  return true;
}

local::Tensor Session::Impl::use(Stream& s, Slot& slot) {
  const local::Tensor& t = slot.tensor;
  if (t.device() < 0) return t;
  cuda::StreamHandle mine = s.cuda_stream(t.device());
  std::lock_guard lock(slot.mu);
  if (slot.written && slot.written_on != mine) {
    slot.written->block(mine);
    cuda::record_stream(*t.storage(), mine);
  }
  return t;
}

void Session::Impl::wrote(Stream& s, Slot& slot, const local::Tensor& t) {
  cuda::StreamHandle mine = s.cuda_stream(t.device());
  std::lock_guard lock(slot.mu);
  // The slot's event is recorded again rather than replaced by a new one per write (an
  // event create and destroy per op): only the slot holds it, readers block on it under
  // `mu`, and a stream that waits takes the record current at the time of its wait.
  if (!slot.written || slot.written->device() != t.device())
    slot.written = std::make_shared<cuda::Event>(t.device());
  slot.written->record(mine);
  slot.written_on = mine;
}

template <class C>
bool Session::Impl::check_device(const C& c) {
  if constexpr (!requires { c.device; }) {
    return true;
  } else {
    if (c.device < options.devices) return true;
    std::string message =
        options.devices == 0
            ? fmt::format("this node has no CUDA device (asked for cuda:{})", c.device)
            : fmt::format("this node has no CUDA device {} (it has cuda:0 to cuda:{})", c.device,
                          options.devices - 1);
    const TensorId out = output_of(c);
    TensorId target = out != protocol::kNoTensor ? out : input_of(c);
    Failure f = root_failure(target, command_name(c), std::move(message), c.device);
    if (out != protocol::kNoTensor && !table.count(out))
      table[out] = Slot::failed_with(std::move(f));
    return false;
  }
}

bool Session::Impl::run_to_device(Stream& s, const StreamPtr& self, Task& t) {
  const auto& c = t.command<cmd::ToDevice>();
  if (!t.in[0]->ready_or_park(self)) return false;
  if (Failure cause = t.in[0]->get_failure()) {
    fail_output(s, t, dependent_failure(c.out, "to_device", c.input, *cause));
    return true;
  }
  try {
    local::Tensor in = use(s, *t.in[0]);
    // Host to device runs on the target's stream; device to host or device to device on
    // the source's.
    const int device = in.device() >= 0 ? in.device() : c.device;
    std::optional<cuda::StreamScope> scope;
    if (device >= 0) scope.emplace(device, s.cuda_stream(device));
    local::Tensor out = in.to_device(c.device);
    if (out.device() >= 0) {
      if (out.device() != device) {
        // Device to device across devices: readers of `out` order on the target device.
        scope.reset();
        scope.emplace(out.device(), s.cuda_stream(out.device()));
      }
      wrote(s, *t.out, out);
    }
    t.out->publish(std::move(out));
  } catch (const std::exception& e) {
    fail_output(s, t, root_failure(c.out, "to_device", e.what(), c.device));
  }
  return true;
}

void Session::Impl::fail_output(Stream& s, Task& t, Failure f) {
  if (!s.pending_failure) s.pending_failure = f;
  t.out->fail(std::move(f));
}

bool Session::Impl::run_get(const StreamPtr& self, Task& t) {
  if (!t.in[0]->ready_or_park(self)) return false;
  const auto& c = t.command<cmd::Get>();
  protocol::Reply r;
  r.type = protocol::ReplyType::Get;
  r.request = c.request;
  Outgoing out;
  if (Failure f = t.in[0]->get_failure()) {
    r.failures.push_back(*f);
  } else {
    try {
      local::Tensor packed = use(*self, *t.in[0]);
      if (packed.device() >= 0) {
        cuda::StreamScope scope(packed.device(), self->cuda_stream(packed.device()));
        packed = packed.cpu();  // returns once the bytes are here
      }
      packed = packed.contiguous();
      r.meta = packed.meta();
      out.payloads.push_back(std::move(packed));
    } catch (const std::exception& e) {
      r.failures.push_back(make_failure(c.input, "get", e.what()));
    }
  }
  out.header = protocol::encode(r);
  emit(std::move(out));
  return true;
}

void Session::Impl::run_record(Stream& s, Task& t) {
  EventState& e = *t.event;
  std::vector<EventState::Waiter> done;
  int64_t time_ns;
  Failure failure;
  // The event completes when the device work queued before it has run too (waiters on
  // this node and on other nodes are told then).
  std::string why = s.finish_cuda();
  if (!why.empty() && !s.pending_failure)
    s.pending_failure = root_failure(protocol::kNoTensor, "record_event", why);
  {
    std::lock_guard lock(e.mu);
    if (t.target >= e.completed) {
      e.completed = t.target;
      e.failure = std::move(s.pending_failure);
      e.time_ns = now_ns();
    }
    s.pending_failure.reset();
    std::erase_if(e.waiters, [&](EventState::Waiter& w) {
      if (w.target > e.completed) return false;
      done.push_back(std::move(w));
      return true;
    });
    time_ns = e.time_ns;
    failure = e.failure;
  }
  for (const EventState::Waiter& w : done) {
    if (w.stream) wake(w.stream);
    if (w.request) reply_event(w.request, true, time_ns, failure);
    if (w.peer >= 0) send_notify(w.peer, w.token);
  }
}

void Session::Impl::finish_barrier(Barrier& b) {
  protocol::Reply r;
  r.request = b.request;
  if (b.type == CmdType::Sync) {
    r.type = protocol::ReplyType::Sync;
    std::lock_guard lock(failures_mu);
    r.failures = std::move(unreported);
    unreported.clear();
    if (dropped_failures > 0) {
      RemoteFailure more =
          make_failure(protocol::kNoTensor, "sync",
                       fmt::format("{} more failures were not recorded", dropped_failures));
      if (r.failures.size() >= protocol::kMaxErrorsPerReply) r.failures.pop_back();
      r.failures.push_back(more);
    }
    dropped_failures = 0;
    std::lock_guard device_lock(b.mu);
    if (!b.device_failure.empty() && r.failures.size() < protocol::kMaxErrorsPerReply)
      r.failures.push_back(
          make_failure(protocol::kNoTensor, "sync", "CUDA work failed: " + b.device_failure));
  } else {
    r.type = protocol::ReplyType::Stats;
    if (b.device >= 0) {
      try {
        cuda::DeviceMemoryStats s = cuda::memory_stats(b.device);
        r.stats =
            protocol::MemoryStatsWire{s.allocated_bytes, s.peak_allocated_bytes, s.live_storages};
      } catch (const std::exception& e) {
        r.type = protocol::ReplyType::ProtocolError;
        r.message = fmt::format("memory_stats(cuda:{}): {}", b.device, e.what());
      }
    } else {
      MemoryStats s = cpu_memory_stats();
      r.stats = protocol::MemoryStatsWire{s.bytes_in_use, s.peak_bytes, b.live_tensors};
    }
  }
  emit(Outgoing{protocol::encode(r), {}, -1});
}

// ---- Session ----

Session::Session(Emit emit, SessionOptions options)
    : impl_(std::make_unique<Impl>(std::move(emit), options)) {
  impl_->streams[0] = std::make_shared<Stream>(*impl_, 0);
}

Session::~Session() = default;

void Session::run(std::shared_ptr<const protocol::Batch> batch,
                  std::span<const PayloadFrame> payloads) {
  impl_->current_batch = batch;
  for (const Command& c : batch->commands) {
    impl_->dispatch(c, payloads);
    if (impl_->staged_count >= kStageFlush) impl_->flush_staged();
  }
  impl_->flush_staged();
  impl_->current_batch.reset();
}

void Session::setup(uint32_t node, uint32_t nodes, uint64_t session_id,
                    std::vector<std::string> pg_endpoints) {
  Impl& s = *impl_;
  s.has_setup = true;
  s.node = node;
  s.nodes = nodes;
  s.session_id = session_id;
  if (pg_endpoints.size() != nodes || s.groups.count(0)) return;
  auto promise = std::make_shared<std::promise<ProcessGroup>>();
  auto world = std::make_shared<Group>();
  world->ready = promise->get_future().share();
  s.groups.emplace(0, world);
  s.group_thread = std::make_unique<GroupThread>();
  ProcessGroup::Options o;
  o.timeout = s.options.collective_timeout;
  o.security = s.options.security;
  o.group_name = fmt::format("dtr-session-{:x}", session_id);
  // With CUDA, collectives whose members all hold CUDA tensors run on NCCL (or the group's
  // host staging where NCCL cannot: workers sharing one GPU); host tensors use the mesh.
  if (backend_available("nccl")) o.backend = "nccl";
  s.group_thread->post([promise, pg_endpoints = std::move(pg_endpoints), node, o] {
    try {
      promise->set_value(ProcessGroup::create(pg_endpoints, static_cast<int>(node), o));
    } catch (...) {
      promise->set_exception(std::current_exception());
    }
  });
}

bool Session::notify(const protocol::PeerNotify& n, const PayloadFrame* payload) {
  Impl& s = *impl_;
  if (!s.has_setup || n.session != s.session_id || n.from_node >= s.nodes) return false;
  auto fill = [&](RemoteWait& w) {
    w.arrived = true;
    w.from = n.from_node;
    if (payload) w.payload = *payload;
    if (n.failed) w.failure = n.failure;
  };
  auto it = s.tokens.find(n.token);
  if (it == s.tokens.end()) {  // the wait has not been dispatched yet
    if (s.tokens.size() >= protocol::kMaxPendingWaits) return false;
    auto w = std::make_shared<RemoteWait>();
    fill(*w);
    s.tokens.emplace(n.token, std::move(w));
    return true;
  }
  RemoteWaitPtr w = std::move(it->second);
  s.tokens.erase(it);
  StreamPtr waiter;
  {
    std::lock_guard lock(w->mu);
    if (w->arrived) return false;  // a second notification of one token
    fill(*w);
    waiter = std::move(w->waiter);
  }
  if (waiter) wake(waiter);
  return true;
}

bool Session::wait_idle(std::chrono::milliseconds timeout) {
  return impl_->executor.wait_idle(timeout);
}

size_t Session::live_tensors() const {
  return impl_->table.size();
}

size_t Session::backlog() const {
  return impl_->queued.load(std::memory_order_relaxed);
}

size_t Session::streams() const {
  return impl_->streams.size();
}

unsigned Session::threads() const {
  return impl_->executor.threads();
}

protocol::MemoryStatsWire Session::stats() const {
  MemoryStats s = cpu_memory_stats();
  return protocol::MemoryStatsWire{s.bytes_in_use, s.peak_bytes,
                                   static_cast<int64_t>(impl_->table.size())};
}

}  // namespace dtr::worker
