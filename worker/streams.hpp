// Stream scheduler: a session's streams, the tasks queued on them, and when they run.
//
// A StreamQueue (one per dtr stream of the session; not the public dtr::Stream handle nor
// a cuda::Stream) is a serial queue of Tasks on the executor (worker/executor.hpp): it runs
// on at most one thread at a time, in order, and yields its thread after kTasksPerSlice
// tasks. A task that cannot run yet (an input not ready, an event or a peer not there
// yet) makes execute() return false: the stream parks, and whoever completes the condition
// calls wake(), which schedules it again (a wake that comes while the stream is still
// running makes it retry the task at once). A task is removed from the queue only after it
// has run.
//
// Streams (the scheduler) owns the id -> stream map, the streams destroyed while still
// running their queue ("retired", kept until idle), and the staging of dispatched tasks:
// the dispatcher stages tasks per stream and flushes them to the queues in bulk (one lock
// and one schedule per stream per flush). Barriers (the commands that say kBarrier: Sync,
// Stats, Trace's Stop) put one task on every stream, live or retired; the last to reach it
// finishes the barrier.
//
// Tasks. A Task's `cmd` is a typed reference to the command it runs (TaskCommand: one
// alternative per command struct that says kOnStream, derived from protocol::Command, so
// the mapping from command to task is the structs' own), or a barrier arrival. It is a
// pointer and a tag, as cheap to move as the untyped pointer and kind it replaced; no
// allocation or std::function per task.
//
// Observability: StreamQueue::run tells the recorder (worker/recorder.hpp) when a task starts,
// parks and ends, and when tracing, times it and records its slice (worker/
// trace_slices.hpp).
//
// Thread safety: Streams' members are the dispatch thread's, except backlog() (any
// thread). A StreamQueue's `mu` guards its queue, state and wake_pending; only the thread
// running the stream touches the front task while it runs, `pending_failure` and `cuda`.
// wake() may be called from any thread, with no slot, event or token lock held. TaskRunner
// ::execute is called on executor threads, with no stream lock held.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <tuple>
#include <type_traits>
#include <unordered_map>
#include <utility>
#include <variant>
#include <vector>

#include "protocol/codec.hpp"
#include "worker/device_order.hpp"
#include "worker/executor.hpp"
#include "worker/failures.hpp"
#include "worker/tensor_table.hpp"

namespace dtr::worker::detail {

inline constexpr int kTasksPerSlice = 256;  // a stream yields its thread after this many tasks
inline constexpr size_t kStageFlush = 256;  // dispatched tasks handed to the streams at once

class Recorder;     // worker/recorder.hpp
struct EventState;  // worker/events.hpp
struct RemoteWait;  // worker/events.hpp
struct Group;       // worker/collectives.hpp
struct Graph;       // worker/graph.hpp
struct GraphRun;    // worker/graph.hpp

// The alternatives `const C*` of the commands C of protocol::Command whose fact Keep<C>
// holds, after `Head...`, as a std::variant: every list of "the commands that ..." below is
// derived from the commands' structs this way, never written out.
template <template <class> class Keep, class Variant, class... Head>
struct CommandRefs;
template <template <class> class Keep, class... C, class... Head>
struct CommandRefs<Keep, std::variant<C...>, Head...> {
  template <class... T>
  static std::variant<Head..., T...> of(std::tuple<T...>);
  using type = decltype(of(
      std::tuple_cat(std::conditional_t<Keep<C>::value, std::tuple<const C*>, std::tuple<>>{}...)));
};
template <class C>
struct OnStream : std::bool_constant<protocol::on_stream_v<C>> {};
template <class C>
struct IsBarrier : std::bool_constant<protocol::barrier_v<C>> {};

// The command a barrier is for: one alternative per struct that says kBarrier (Sync,
// Stats, Trace). Each stream's task of the barrier holds the batch it lives in.
using BarrierCommand = CommandRefs<IsBarrier, protocol::Command>::type;

// A barrier over every stream: each stream's task arrives, the last one finishes it.
struct Barrier {
  std::atomic<size_t> remaining{0};
  BarrierCommand cmd;
  int64_t live_tensors = 0;
  std::vector<std::shared_ptr<Graph>> graphs;  // Stats: the session's graphs at dispatch
  uint64_t flight = 0;                         // the command's flight record
  std::mutex mu;
  std::string device_failure;  // a stream's CUDA work failed (reported with the reply)
};

// A task's stream has reached its barrier (Task::barrier).
struct BarrierArrival {};

// What a task runs: the command it comes from, one alternative per struct that says
// kOnStream (protocol/commands.hpp: ops, gets, records, waits, copies, collectives, device
// copies, puts by address, a graph replay's parts), or its stream's arrival at a barrier;
// std::monostate only in a task not made for a command (a default-constructed one). The
// session runs a task by visiting it (one runner per alternative, or it does not compile).
using TaskCommand = CommandRefs<OnStream, protocol::Command, std::monostate, BarrierArrival>::type;

struct Task {
  // The command; it lives in the batch that the stream's last task of it holds (or in a
  // graph's program).
  TaskCommand cmd;
  template <class C>
  const C& command() const {
    return *std::get<const C*>(cmd);
  }
  bool is_barrier() const { return std::holds_alternative<BarrierArrival>(cmd); }
  std::shared_ptr<const protocol::Batch> batch;
  static constexpr uint8_t kInlineInputs = protocol::Inputs::kInline;
  SlotPtr in[kInlineInputs];
  std::unique_ptr<SlotPtr[]> more_in;  // an op's inputs past kInlineInputs
  SlotPtr& input(uint8_t i) { return i < kInlineInputs ? in[i] : more_in[i - kInlineInputs]; }
  SlotPtr out;  // a new output, or the target of an in-place op (in[0])
  std::shared_ptr<EventState> event;
  uint64_t target = 0;
  std::shared_ptr<RemoteWait> remote;
  std::shared_ptr<Barrier> barrier;
  std::shared_ptr<Group> group;
  // Observability (worker/recorder.hpp): the command's flight record, how often the
  // stream tried the task, and when tracing, the ticks of its first and last attempt.
  uint64_t flight = 0;
  uint32_t attempts = 0;
  int64_t trace_begin = 0;
  int64_t trace_last = 0;
  std::shared_ptr<GraphRun> graph_run;  // a GraphReplay's part: the replay, and which part
  uint32_t part = 0;
};
static_assert(std::is_trivially_copyable_v<TaskCommand>, "a task's command is a reference");

struct StreamQueue;
class TaskRunner {
 public:
  virtual ~TaskRunner() = default;
  // Runs `t`, the front task of `s` (`self` owns `s`): true when done, false when `self`
  // was parked to be woken later (the task then runs again).
  virtual bool execute(StreamQueue& s, const StreamQueuePtr& self, Task& t) = 0;
};

class Streams;
struct StreamQueue : Runnable, std::enable_shared_from_this<StreamQueue> {
  StreamQueue(Streams& owner, uint32_t id) : owner(owner), id(id) {}
  void run() override;
  bool idle();  // nothing queued (running or not)

  Streams& owner;
  const uint32_t id;
  std::mutex mu;  // guards queue, state, wake_pending
  std::deque<Task> queue;
  enum class State : uint8_t { Idle, Scheduled, Parked } state = State::Idle;
  bool wake_pending = false;
  // Only the thread running the stream touches these.
  Failure pending_failure;  // first failure since the stream's last record
  CudaStreams cuda;         // this stream's CUDA stream on each device it used
};

// Fails the task's output and, first on its stream since the last record, notes the
// failure for the stream's next event (every kind of task that makes or writes a tensor).
void fail_output(StreamQueue& s, Task& t, Failure f);
void fail_output(StreamQueue& s, Slot& out, Failure f);
// A barrier task has reached stream `s`: its CUDA work is waited for (a failure noted on
// `b`). True when `s` was the last stream the barrier waited for.
bool arrive(StreamQueue& s, Barrier& b);
// The running task of `s` parks until tensor `id` (made on another stream) is ready: the
// flight recorder notes what it waits for.
void waiting_for_tensor(StreamQueue& s, const Task& t, protocol::TensorId id);

class Streams {
 public:
  // Makes the default stream (0). Tasks' starts, waits and ends go to `recorder`.
  Streams(Executor& executor, TaskRunner& runner, Recorder& recorder);

  // The stream, or a null pointer when absent (a reference into the table: valid until
  // the stream is destroyed).
  const StreamQueuePtr& find(uint32_t id) const;
  size_t size() const { return live_.size(); }
  // Tasks handed to the streams and not yet done (any thread; approximate).
  size_t backlog() const { return queued_.load(std::memory_order_relaxed); }
  // A new stream; why not ("stream 3 already exists", the limit), nullopt when made.
  std::optional<std::string> create(uint32_t id);
  // Retires a stream (it runs its queue, then goes); why not, nullopt when done.
  std::optional<std::string> destroy(uint32_t id);

  // Queues `t` for `s` at the next flush.
  void stage(const StreamQueuePtr& s, Task&& t);
  size_t staged() const { return staged_count_; }
  // Hands the staged tasks to their streams and schedules the idle ones. `batch` (the
  // batch the commands live in) is held by each stream's last task of the flush.
  void flush(const std::shared_ptr<const protocol::Batch>& batch);
  // Nothing queued, staged or running on `s`. Remembers the answer for `s` until something
  // is staged (only the dispatch thread makes an idle stream run).
  bool idle_now(const StreamQueuePtr& s) const;
  // Stages one task of `b` on every stream, live or retired, and sets b->remaining.
  void barrier(const std::shared_ptr<Barrier>& b);

  // ---- the session's end (nothing dispatches any more) ----
  // Moves every queued task that is not running into `graveyard`.
  void drop_queued(std::vector<Task>& graveyard);
  // Empties every queue (nothing runs any more).
  void clear();

  // Tasks queued on each stream, live or retired, and not done (dispatch thread).
  std::vector<std::pair<uint32_t, size_t>> queue_depths();

  Executor& executor;
  TaskRunner& runner;
  Recorder& recorder;

 private:
  friend struct StreamQueue;
  void prune_retired();
  template <class F>
  void for_each(F&& f);

  std::unordered_map<uint32_t, StreamQueuePtr> live_;
  std::vector<StreamQueuePtr> retired_;  // destroyed streams still running their queue
  std::vector<std::pair<StreamQueuePtr, std::vector<Task>>> staged_;
  size_t staged_count_ = 0;
  // The stream idle_now() last found idle, while nothing has been staged since.
  mutable const StreamQueue* known_idle_ = nullptr;
  std::atomic<size_t> queued_{0};  // tasks handed to streams and not yet done
};

}  // namespace dtr::worker::detail
