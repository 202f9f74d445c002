// Session::Impl: the session's parts, and what it does with each command. Private to the
// worker's session files (worker/session.hpp is the API; namespace dtr::worker).
//
// The session is a thin multiplexer (worker/session.cpp): dispatch() visits a command and
// calls its handler, on(const cmd::X&), on the dispatch thread; execute() visits a task's
// command (Task::cmd, worker/streams.hpp) and calls its runner, run(..., const cmd::X&), on
// an executor thread. A command without a handler, or a task's command (a struct that says
// kOnStream) without a runner, does not compile. The handlers and runners live by area:
//   worker/op_commands.cpp          RunOp: its checks, the inline path, its run;
//   worker/transfer_commands.cpp    a tensor's bytes in and out: Put, PutFrom, Get, Release,
//                                   Attach (same host), ToDevice, and Free;
//   worker/stream_commands.cpp      streams and events: CreateStream, DestroyStream, Record,
//                                   WaitEvent, EventQuery, EventSync, DestroyEvent;
//   worker/cross_node_commands.cpp  what involves other nodes: NotifyPeer, WaitRemote,
//                                   SendPeer, RecvPeer, NewGroup, Collective, NodeLost;
//   worker/barrier_commands.cpp     barriers over every stream (the structs that say
//                                   kBarrier): Sync, Stats, Trace's Stop, and their replies;
//   worker/observer_commands.cpp    ClockSync, Trace, FlightDump, Metrics;
//   worker/graph_commands.cpp       GraphUpload, GraphReplay (its parts' runs), GraphFree.
// The work that has a part of its own is there (worker/session.hpp lists the parts): the
// handlers check and resolve, the parts and runners do.
//
// Resolution (below, shared by the handlers): a command's stream, device, event and
// cross-node wait, each either found or its failure recorded and any request answered.
//
// Thread safety: as worker/session.hpp says. Handlers, resolution and the members marked
// "dispatch thread" are the dispatch thread's; runners run on the executor thread running
// their stream (and, for small work on an idle stream, on the dispatch thread), and use
// only the parts' thread-safe entry points, the task's slots and `pulled` under its lock.
#pragma once

#include <fmt/format.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <variant>

#include "common/same_host.hpp"
#include "protocol/codec.hpp"
#include "worker/collectives.hpp"
#include "worker/events.hpp"
#include "worker/executor.hpp"
#include "worker/failures.hpp"
#include "worker/graph.hpp"
#include "worker/outbox.hpp"
#include "worker/recorder.hpp"
#include "worker/session.hpp"
#include "worker/streams.hpp"
#include "worker/tensor_table.hpp"

namespace dtr::worker {

namespace detail {

// Inline execution: an op (not a matrix product) or a get whose stream is idle and whose
// CPU inputs are ready and hold at most kInlineElements elements each runs at once on the
// dispatch thread, without a task hand-off to the executor; a reply it makes goes out
// from that thread. kInlineBudget bounds the elements one batch runs this way, so the
// dispatch thread is soon back at its socket (heartbeats).
inline constexpr int64_t kInlineElements = int64_t{1} << 15;
inline constexpr int64_t kInlineBudget = int64_t{1} << 22;

// The tensor a command reads or writes first (kNoTensor when none).
template <class C>
protocol::TensorId input_of(const C& c) {
  if constexpr (std::is_same_v<C, protocol::cmd::RunOp>)
    return c.inputs.n > 0 ? c.inputs.ids[0] : protocol::kNoTensor;
  else if constexpr (requires { c.input; })
    return c.input;
  else
    return protocol::kNoTensor;
}

}  // namespace detail

struct Session::Impl final : detail::TaskRunner {
  using Payloads = std::span<const PayloadFrame>;
  using StreamQueue = detail::StreamQueue;
  using StreamQueuePtr = detail::StreamQueuePtr;
  using Task = detail::Task;
  using Slot = detail::Slot;
  using SlotPtr = detail::SlotPtr;
  using EventPtr = detail::EventPtr;
  using RemoteWaitPtr = detail::RemoteWaitPtr;

  Impl(Emit emit, SessionOptions options);
  ~Impl() override;

  // ---- the multiplexer (worker/session.cpp) ----
  void dispatch(const protocol::Command& c, Payloads payloads);
  // One command: its handler, its flight record, its count and (tracing) its slice.
  template <class C>
  void dispatch_one(const C& c, Payloads payloads);
  bool execute(StreamQueue& s, const StreamQueuePtr& self, Task& t) override;
  bool run(StreamQueue& s, const StreamQueuePtr& self, Task& t, std::monostate);  // nothing to run

  // ---- resolution (dispatch thread; below) ----
  // A task for command `c` (of a struct that says kOnStream), with its flight record.
  template <class C>
  Task task(const C& c) const;
  // The command's stream, and its device exists here; otherwise null, the failure
  // recorded (for the command's output when it makes one), a request answered.
  template <class C>
  const StreamQueuePtr& stream_of(const C& c);
  // A command's device exists here; otherwise the failure is recorded (for its output when
  // it makes one) and false returned.
  template <class C>
  bool check_device(const C& c);
  template <class C>
  EventPtr event_of(const C& c);
  template <class C>
  void reply_failure(const C& c, protocol::RemoteFailure f);
  // The wait for `c.token` from `c.peer`; null (and a failure recorded for `tensor`, and
  // the command's output failed) when the peer or the limit is wrong.
  template <class C>
  RemoteWaitPtr remote_wait(const C& c, std::string_view op, protocol::TensorId tensor);

  // ---- ops (worker/op_commands.cpp) ----
  void on(const protocol::cmd::RunOp& c);
  bool run(StreamQueue& s, const StreamQueuePtr& self, Task& t, const protocol::cmd::RunOp& c);
  // Runs op `c` on `s` once its inputs are ready (the task path and the inline path); with
  // `into` (a graph's bound temporary), into that tensor. False when it failed the output.
  bool run_op_ready(StreamQueue& s, const protocol::cmd::RunOp& c, Slot* const* in, Slot& out,
                    const local::Tensor* into = nullptr);
  // Cancel (the master interrupted its program): ops dispatched before it that have not
  // started are skipped when their turn comes (cancelled_before, read by run()), their
  // outputs failed as dependents of one root failure per cancel (cancel_cause()).
  void on(const protocol::cmd::Cancel& c);
  bool skip_cancelled(StreamQueue& s, const Task& t, const protocol::cmd::RunOp& c);
  detail::Failure cancel_cause();
  // Small CPU work on an idle stream whose inputs (`in`, n_inputs of them) are ready: true
  // when it may run at once on the dispatch thread (it is then charged to this batch's
  // inline budget).
  bool may_run_inline(const StreamQueuePtr& s, Slot* const* in, uint8_t n_inputs);
  // Op `c`, just run at once on the dispatch thread (may_run_inline): its slice.
  void trace_inline(StreamQueue& s, const protocol::cmd::RunOp& c, Slot& out);
  // Op `c` ran on CUDA stream of `s` between `mark` and now: its device slice.
  // Its first kMaxTraceTensors - 1 inputs are named on the slice.
  void trace_device_op(StreamQueue& s, const protocol::cmd::RunOp& c, const local::Tensor* inputs,
                       const local::Tensor& result, detail::Tracer::DeviceMark mark);

  // ---- a tensor's bytes in and out (worker/transfer_commands.cpp) ----
  void on(const protocol::cmd::Put& c, Payloads payloads);
  // Put's tensor from its frame; the failure when it cannot be made.
  void put(const protocol::cmd::Put& c, Payloads payloads);
  void on(const protocol::cmd::PutFrom& c);
  bool run(StreamQueue& s, const StreamQueuePtr& self, Task& t, const protocol::cmd::PutFrom& c);
  void on(const protocol::cmd::Get& c);
  bool run(StreamQueue& s, const StreamQueuePtr& self, Task& t, const protocol::cmd::Get& c);
  // A pulled Get's bytes stay here until the master's Release (false: too many are held
  // already, the reply carries them instead).
  bool pin_pulled(uint64_t request, local::Tensor bytes);
  void on(const protocol::cmd::Release& c);
  void on(const protocol::cmd::Attach& c);
  void on(const protocol::cmd::ToDevice& c);
  bool run(StreamQueue& s, const StreamQueuePtr& self, Task& t, const protocol::cmd::ToDevice& c);
  void on(const protocol::cmd::Free& c);

  // ---- streams and events (worker/stream_commands.cpp) ----
  void on(const protocol::cmd::CreateStream& c);
  void on(const protocol::cmd::DestroyStream& c);
  void on(const protocol::cmd::Record& c);
  bool run(StreamQueue& s, const StreamQueuePtr& self, Task& t, const protocol::cmd::Record& c);
  void on(const protocol::cmd::WaitEvent& c);
  bool run(StreamQueue& s, const StreamQueuePtr& self, Task& t, const protocol::cmd::WaitEvent& c);
  void on(const protocol::cmd::EventQuery& c);
  void on(const protocol::cmd::EventSync& c);
  void on(const protocol::cmd::DestroyEvent& c);
  // The event's waiters' answer, or a reply now: EventQuery and EventSync.
  void answer_event(detail::EventState& e, uint64_t request, bool sync);

  // ---- what involves other nodes (worker/cross_node_commands.cpp) ----
  void on(const protocol::cmd::NotifyPeer& c);
  void on(const protocol::cmd::WaitRemote& c);
  bool run(StreamQueue& s, const StreamQueuePtr& self, Task& t, const protocol::cmd::WaitRemote& c);
  void on(const protocol::cmd::SendPeer& c);
  bool run(StreamQueue& s, const StreamQueuePtr& self, Task& t, const protocol::cmd::SendPeer& c);
  void on(const protocol::cmd::RecvPeer& c);
  bool run(StreamQueue& s, const StreamQueuePtr& self, Task& t, const protocol::cmd::RecvPeer& c);
  void on(const protocol::cmd::NewGroup& c);
  void on(const protocol::cmd::Collective& c);
  bool run(StreamQueue& s, const StreamQueuePtr& self, Task& t, const protocol::cmd::Collective& c);
  void on(const protocol::cmd::NodeLost& c);

  // ---- barriers (worker/barrier_commands.cpp) ----
  void on(const protocol::cmd::Sync& c);
  void on(const protocol::cmd::Stats& c);
  // A barrier over every stream for `c` (a command whose struct says kBarrier).
  void barrier(detail::BarrierCommand c);
  bool run(StreamQueue& s, const StreamQueuePtr& self, Task& t, detail::BarrierArrival);
  // The last stream has reached `b`: its reply goes (one finish per kBarrier struct).
  void finish_barrier(detail::Barrier& b);
  void finish(detail::Barrier& b, const protocol::cmd::Sync& c);
  void finish(detail::Barrier& b, const protocol::cmd::Stats& c);
  void finish(detail::Barrier& b, const protocol::cmd::Trace& c);

  // ---- observability (worker/observer_commands.cpp) ----
  void on(const protocol::cmd::ClockSync& c);
  void on(const protocol::cmd::Trace& c);
  void on(const protocol::cmd::FlightDump& c);
  void on(const protocol::cmd::Metrics& c);
  // The live figures (Session::metrics()).
  protocol::NodeMetrics session_metrics();

  // ---- captured graphs (worker/graph_commands.cpp) ----
  detail::GraphEnv graph_env();
  void on(const protocol::cmd::GraphUpload& c);
  void on(const protocol::cmd::GraphReplay& c);
  // A part of the replay (t.graph_run, t.part) on its stream.
  bool run(StreamQueue& s, const StreamQueuePtr& self, Task& t,
           const protocol::cmd::GraphReplay& c);
  void on(const protocol::cmd::GraphFree& c);
  // A part of a graph's replay from its cursor: true when done; false when it waits (its
  // stream parked), or, `now` (on the dispatch thread), at a step that cannot run at once.
  bool run_graph_part(StreamQueue& s, const StreamQueuePtr& self, Task& t, bool now);
  bool run_graph_step(StreamQueue& s, const StreamQueuePtr& self, detail::GraphRun& run,
                      detail::GraphStep& st, bool now);
  bool run_graph_op(StreamQueue& s, const StreamQueuePtr& self, detail::GraphRun& run,
                    detail::GraphStep& st, bool now);

  SessionOptions options;
  std::shared_ptr<detail::Recorder> recorder_holder;
  detail::Recorder& rec;
  detail::FailureLog failures;
  detail::Outbox outbox;
  // Destroyed after the executor (members go in reverse): nothing running uses them then.
  detail::Groups groups;
  Executor executor;
  // dispatch thread only (their contents are shared with tasks as their headers say)
  detail::TensorTable table;
  detail::Streams streams;
  detail::EventTable events;
  detail::Tokens tokens;
  detail::Graphs graphs;
  std::shared_ptr<const protocol::Batch> current_batch;  // during run()
  int64_t inline_budget = 0;  // elements the rest of this batch may still run inline
  // Observability, during run(): when the batch arrived (steady clock), the current
  // command's flight record and (tracing) the ticks of its start; whether its handler ran
  // an op at once that failed, or traced it itself.
  int64_t batch_ns = 0;
  uint64_t current_seq = 0;
  int64_t current_begin = 0;
  int64_t last_end = 0;  // the end of the command traced at dispatch just before, if any
  std::optional<TensorMeta> traced_meta;  // Free, tracing: the freed tensor's
  bool inline_failed = false;
  bool traced_here = false;
  // Same-host payloads (common/same_host.hpp): the attached master's process (0: none;
  // set by Attach on the dispatch thread before any PutFrom or pulled Get it orders), and
  // the bytes of pulled Gets awaiting their Release (executor threads add, dispatch drops).
  std::atomic<uint32_t> master_pid{0};
  // Cancel: ops whose flight number is below this were cancelled (dispatch thread writes,
  // executor threads read); the root failure they name (under cancel_mu; made by the first
  // op skipped after each Cancel, so that a Cancel with nothing queued reports nothing).
  std::atomic<uint64_t> cancelled_before{0};
  std::mutex cancel_mu;
  detail::Failure cancel_root;
  const uint64_t challenge = common::random_challenge();  // HelloReply's, for the master
  uint64_t held_challenge = 0;                            // the master's (Attach)
  std::mutex pulled_mu;
  std::unordered_map<uint64_t, local::Tensor> pulled;
  static constexpr size_t kMaxPulled = 4096;
};

// ---- resolution (dispatch thread) ----

template <class C>
detail::Task Session::Impl::task(const C& c) const {
  static_assert(protocol::on_stream_v<C>, "only a command that says kOnStream is a task");
  Task t;
  t.cmd = &c;
  t.flight = current_seq;
  return t;
}

template <class C>
void Session::Impl::reply_failure(const C& c, protocol::RemoteFailure f) {
  outbox.reply_failure(std::is_same_v<C, protocol::cmd::Get>, c.request, std::move(f));
}

template <class C>
const detail::StreamQueuePtr& Session::Impl::stream_of(const C& c) {
  static const StreamQueuePtr kNone;
  if (const StreamQueuePtr& s = streams.find(c.stream)) return check_device(c) ? s : kNone;
  const protocol::TensorId out = protocol::command_output(c);
  protocol::RemoteFailure f = detail::make_failure(
      out != protocol::kNoTensor ? out : detail::input_of(c), protocol::command_name(c),
      fmt::format("stream {} does not exist on this worker", c.stream));
  // The output exists, failed, so that its users learn why; a request is still answered,
  // or the master would wait for it forever.
  table.fail_new(out, failures.root(f.tensor, f.op, f.message));
  if constexpr (requires { c.request; }) reply_failure(c, f);
  // A copy's receiver waits for the sender: tell it.
  if constexpr (std::is_same_v<C, protocol::cmd::SendPeer>)
    if (!outbox.peer_problem(c.peer)) outbox.send_notify(static_cast<int32_t>(c.peer), c.token, &f);
  return kNone;
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
    const protocol::TensorId out = protocol::command_output(c);
    protocol::TensorId target = out != protocol::kNoTensor ? out : detail::input_of(c);
    table.fail_new(out,
                   failures.root(target, protocol::command_name(c), std::move(message), c.device));
    return false;
  }
}

template <class C>
detail::EventPtr Session::Impl::event_of(const C& c) {
  if (EventPtr e = events.find(c.event)) return e;
  protocol::RemoteFailure f =
      detail::make_failure(protocol::kNoTensor, protocol::command_name(c),
                           fmt::format("event {} was never recorded on this worker", c.event));
  if constexpr (requires { c.request; })
    reply_failure(c, f);
  else
    failures.root(f.tensor, f.op, f.message);
  return nullptr;
}

template <class C>
detail::RemoteWaitPtr Session::Impl::remote_wait(const C& c, std::string_view op,
                                                 protocol::TensorId tensor) {
  if (std::optional<std::string> problem = outbox.peer_problem(c.peer)) {
    table.fail_new(protocol::command_output(c), failures.root(tensor, op, std::move(*problem)));
    return nullptr;
  }
  std::string problem;
  RemoteWaitPtr w = tokens.wait(c.token, c.peer, &problem);
  if (!w) failures.root(tensor, op, std::move(problem));
  return w;
}

}  // namespace dtr::worker
