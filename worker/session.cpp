// The session: one handler per command, which checks and resolves it with the worker's
// parts (worker/session.hpp says which) and stages its task; and the task dispatch.
#include "worker/session.hpp"

#include <fmt/format.h>

#include <array>
#include <optional>

#include "protocol/codec.hpp"
#include "protocol/same_host.hpp"
#include "protocol/trace_clock.hpp"
#include "worker/collectives.hpp"
#include "worker/device_order.hpp"
#include "worker/events.hpp"
#include "worker/executor.hpp"
#include "worker/failures.hpp"
#include "worker/graph.hpp"
#include "worker/outbox.hpp"
#include "worker/peer_copy.hpp"
#include "worker/recorder.hpp"
#include "worker/streams.hpp"
#include "worker/tensor_table.hpp"
#include "worker/trace_slices.hpp"

namespace dtr::worker {

using protocol::CmdType;
using protocol::Command;
using protocol::command_name;
using Payloads = std::span<const PayloadFrame>;
namespace cmd = protocol::cmd;
using protocol::RemoteFailure;
using protocol::TensorId;
using namespace detail;

namespace {

// Inline execution: an op (not a matrix product) or a get whose stream is idle and whose
// CPU inputs are ready and hold at most kInlineElements elements each runs at once on the
// dispatch thread, without a task hand-off to the executor; a reply it makes goes out
// from that thread. kInlineBudget bounds the elements one batch runs this way, so the
// dispatch thread is soon back at its socket (heartbeats).
constexpr int64_t kInlineElements = int64_t{1} << 15;
constexpr int64_t kInlineBudget = int64_t{1} << 22;

// Ops whose work is not bounded by their inputs' size (matrix products, convolutions):
// never run inline on the dispatch thread.
bool heavy_op(const OpDef& d) {
  return d.kind == OpKind::Linalg || d.id == OpId::linear || d.id == OpId::conv2d ||
         d.id == OpId::conv2d_input_grad || d.id == OpId::conv2d_weight_grad;
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

}  // namespace

struct Session::Impl final : TaskRunner {
  Impl(Emit emit, SessionOptions options)
      : options(options),
        recorder_holder(options.recorder ? options.recorder : std::make_shared<Recorder>()),
        rec(*recorder_holder),
        outbox(std::move(emit), failures),
        executor(options.threads),
        table(failures),
        streams(executor, *this, rec) {}
  ~Impl() override;

  // ---- dispatch (one thread): one handler per command ----
  void dispatch(const Command& c, Payloads payloads);
  // One command: its handler, its flight record, its count and (tracing) its slice.
  template <class C>
  void dispatch_one(const C& c, Payloads payloads);
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
  void on(const cmd::NodeLost& c);
  void on(const cmd::ClockSync& c);
  void on(const cmd::Trace& c);
  void on(const cmd::FlightDump& c);
  void on(const cmd::Metrics& c);
  void on(const cmd::Attach& c);
  void on(const cmd::PutFrom& c);
  void on(const cmd::Release& c);
  void on(const cmd::GraphUpload& c);
  void on(const cmd::GraphReplay& c);
  void on(const cmd::GraphFree& c);
  GraphEnv graph_env();
  // Put's tensor from its frame; the failure when it cannot be made.
  void put(const cmd::Put& c, Payloads payloads);
  void barrier(CmdType type, uint64_t request, int32_t device);
  // A task of kind `kind` for command `c`.
  template <class C>
  Task task(Task::Kind kind, const C& c) const;
  // The command's stream, and its device exists here; otherwise null, the failure
  // recorded (for the command's output when it makes one), a request answered.
  template <class C>
  const StreamPtr& stream_of(const C& c);
  // A command's device exists here; otherwise the failure is recorded (for its output when
  // it makes one) and false returned.
  template <class C>
  bool check_device(const C& c);
  template <class C>
  EventPtr event_of(const C& c);
  template <class C>
  void reply_failure(const C& c, RemoteFailure f);
  // The event's waiters' answer, or a reply now: EventQuery and EventSync.
  void answer_event(EventState& e, uint64_t request, bool sync);
  // The wait for `c.token` from `c.peer`; null (and a failure recorded for `tensor`, and
  // the command's output failed) when the peer or the limit is wrong.
  template <class C>
  RemoteWaitPtr remote_wait(const C& c, std::string_view op, TensorId tensor);

  // Small CPU work on an idle stream whose inputs (`in`, n_inputs of them) are ready: true
  // when it may run at once on the dispatch thread (it is then charged to this batch's
  // inline budget).
  bool may_run_inline(const StreamPtr& s, Slot* const* in, uint8_t n_inputs);
  // Op `c`, just run at once on the dispatch thread (may_run_inline): its slice.
  void trace_inline(Stream& s, const cmd::RunOp& c, Slot& out);

  // ---- execution (any executor thread) ----
  bool execute(Stream& s, const StreamPtr& self, Task& t) override;
  bool run_op(Stream& s, const StreamPtr& self, Task& t);
  // Runs op `c` on `s` once its inputs are ready (the task path and the inline path); with
  // `into` (a graph's bound temporary), into that tensor. False when it failed the output.
  bool run_op_ready(Stream& s, const cmd::RunOp& c, Slot* const* in, Slot& out,
                    const local::Tensor* into = nullptr);
  // A part of a graph's replay from its cursor: true when done; false when it waits (its
  // stream parked), or, `now` (on the dispatch thread), at a step that cannot run at once.
  bool run_graph_part(Stream& s, const StreamPtr& self, Task& t, bool now);
  bool run_graph_step(Stream& s, const StreamPtr& self, GraphRun& run, GraphStep& st, bool now);
  bool run_graph_op(Stream& s, const StreamPtr& self, GraphRun& run, GraphStep& st, bool now);
  bool run_get(Stream& s, const StreamPtr& self, Task& t);
  bool run_to_device(Stream& s, const StreamPtr& self, Task& t);
  bool run_put_from(Stream& s, const StreamPtr& self, Task& t);
  // A pulled Get's bytes stay here until the master's Release (false: too many are held
  // already, the reply carries them instead).
  bool pin_pulled(uint64_t request, local::Tensor bytes);
  void finish_barrier(Barrier& b);
  // The live figures (Session::metrics()).
  protocol::NodeMetrics session_metrics();
  // Op `c` ran on CUDA stream of `s` between `mark` and now: its device slice.
  // Its first kMaxTraceTensors - 1 inputs are named on the slice.
  void trace_device_op(Stream& s, const cmd::RunOp& c, const local::Tensor* inputs,
                       const local::Tensor& result, Tracer::DeviceMark mark);

  SessionOptions options;
  std::shared_ptr<Recorder> recorder_holder;
  Recorder& rec;
  FailureLog failures;
  Outbox outbox;
  // Destroyed after the executor (members go in reverse): nothing running uses them then.
  Groups groups;
  Executor executor;
  // dispatch thread only (their contents are shared with tasks as their headers say)
  TensorTable table;
  Streams streams;
  EventTable events;
  Tokens tokens;
  Graphs graphs;
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
  // Same-host payloads (protocol/same_host.hpp): the attached master's process (0: none;
  // set by Attach on the dispatch thread before any PutFrom or pulled Get it orders), and
  // the bytes of pulled Gets awaiting their Release (executor threads add, dispatch drops).
  std::atomic<uint32_t> master_pid{0};
  const uint64_t challenge = protocol::random_challenge();  // HelloReply's, for the master
  uint64_t held_challenge = 0;                              // the master's (Attach)
  std::mutex pulled_mu;
  std::unordered_map<uint64_t, local::Tensor> pulled;
  static constexpr size_t kMaxPulled = 4096;
};

// ---- the session's end ----

Session::Impl::~Impl() {
  groups.close();
  // Queued tasks go first (they hold slots, events and streams in cycles); the executor's
  // destructor then waits for whatever is running.
  // Dropped tasks are kept until nothing runs: one of them may hold the batch that the
  // running task's command lives in.
  std::vector<Task> graveyard;
  streams.drop_queued(graveyard);
  executor.wait_idle(std::chrono::hours(24));
  graveyard.clear();
  streams.clear();
  graphs.clear();
  events.drop_waiters();
  table.drop_waiters();
  tokens.drop_waiters();
}

// ---- resolution helpers (dispatch thread) ----

template <class C>
Task Session::Impl::task(Task::Kind kind, const C& c) const {
  Task t;
  t.kind = kind;
  t.cmd = &c;
  t.flight = current_seq;
  return t;
}

template <class C>
void Session::Impl::reply_failure(const C& c, RemoteFailure f) {
  outbox.reply_failure(std::is_same_v<C, cmd::Get>, c.request, std::move(f));
}

template <class C>
const StreamPtr& Session::Impl::stream_of(const C& c) {
  static const StreamPtr kNone;
  if (const StreamPtr& s = streams.find(c.stream)) return check_device(c) ? s : kNone;
  const TensorId out = output_of(c);
  RemoteFailure f = make_failure(out != protocol::kNoTensor ? out : input_of(c), command_name(c),
                                 fmt::format("stream {} does not exist on this worker", c.stream));
  // The output exists, failed, so that its users learn why; a request is still answered,
  // or the master would wait for it forever.
  table.fail_new(out, failures.root(f.tensor, f.op, f.message));
  if constexpr (requires { c.request; }) reply_failure(c, f);
  // A copy's receiver waits for the sender: tell it.
  if constexpr (std::is_same_v<C, cmd::SendPeer>)
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
    const TensorId out = output_of(c);
    TensorId target = out != protocol::kNoTensor ? out : input_of(c);
    table.fail_new(out, failures.root(target, command_name(c), std::move(message), c.device));
    return false;
  }
}

template <class C>
EventPtr Session::Impl::event_of(const C& c) {
  if (EventPtr e = events.find(c.event)) return e;
  RemoteFailure f =
      make_failure(protocol::kNoTensor, command_name(c),
                   fmt::format("event {} was never recorded on this worker", c.event));
  if constexpr (requires { c.request; })
    reply_failure(c, f);
  else
    failures.root(f.tensor, f.op, f.message);
  return nullptr;
}

template <class C>
RemoteWaitPtr Session::Impl::remote_wait(const C& c, std::string_view op, TensorId tensor) {
  if (std::optional<std::string> problem = outbox.peer_problem(c.peer)) {
    table.fail_new(output_of(c), failures.root(tensor, op, std::move(*problem)));
    return nullptr;
  }
  std::string problem;
  RemoteWaitPtr w = tokens.wait(c.token, c.peer, &problem);
  if (!w) failures.root(tensor, op, std::move(problem));
  return w;
}

void Session::Impl::answer_event(EventState& e, uint64_t request, bool sync) {
  if (auto status = e.answer(request, sync))
    outbox.reply_event(request, status->done, status->time_ns, status->failure);
}

void Session::Impl::barrier(CmdType type, uint64_t request, int32_t device) {
  auto b = std::make_shared<Barrier>();
  b->flight = current_seq;
  b->type = type;
  b->request = request;
  b->live_tensors = static_cast<int64_t>(table.size());
  b->device = device;
  if (type == CmdType::Stats) b->graphs = graphs.all();
  streams.barrier(b);
}

// ---- handlers (dispatch thread) ----

void Session::Impl::dispatch(const Command& c, Payloads payloads) {
  std::visit([&](const auto& x) { dispatch_one(x, payloads); }, c);
}

template <class C>
void Session::Impl::dispatch_one(const C& c, Payloads payloads) {
  rec.counters.count_command(C::kType);
  const size_t staged = streams.staged();
  const uint64_t roots = failures.roots();
  const bool tracing = rec.tracer.on();
  // Tracing: a command traced at dispatch right before ended now (one clock read per
  // command run at dispatch: its slice includes the dispatcher's time for it).
  current_begin = tracing ? (last_end != 0 ? last_end : trace::ticks()) : 0;
  last_end = 0;
  inline_failed = false;
  traced_here = false;
  if constexpr (std::is_same_v<C, cmd::Put>)
    on(c, payloads);
  else
    on(c);
  // The record is written once its fate at dispatch is known (a staged task reaches its
  // stream only at the next flush, after this).
  const bool queued = streams.staged() != staged;
  const bool failed = inline_failed || failures.roots() != roots;
  rec.flight.dispatched(current_seq, queued   ? protocol::FlightState::Queued
                                     : failed ? protocol::FlightState::Failed
                                              : protocol::FlightState::Done);
  if (!tracing || queued || traced_here || !traced_kind(C::kType)) [[likely]]
    return;
  const CommandFields f = fields_of(c);
  last_end = trace::ticks();
  if constexpr (std::is_same_v<C, cmd::Put>) {
    trace_command(rec.tracer, f, current_begin, last_end, failed, &c.meta,
                  c.meta.numel() * static_cast<int64_t>(element_size(c.meta.dtype)));
  } else if constexpr (std::is_same_v<C, cmd::Free>) {
    trace_command(rec.tracer, f, current_begin, last_end, failed, nullptr, 0,
                  traced_meta ? &*traced_meta : nullptr);
  } else {
    trace_command(rec.tracer, f, current_begin, last_end, failed);
  }
}

void Session::Impl::on(const cmd::RunOp& c) {
  const StreamPtr& stream = stream_of(c);
  if (!stream) return;
  const OpDef& d = op_def(c.op);
  TensorId target = c.inplace ? input_of(c) : c.out;
  if (c.inplace) {
    if (c.inputs.n == 0) {
      failures.root(protocol::kNoTensor, d.name, "an in-place command needs input 0 (its target)");
      return;
    }
    if (c.out != protocol::kNoTensor) {
      failures.root(c.out, d.name, fmt::format("an in-place command names output id %{}", c.out));
      return;
    }
  } else if (!table.check_new_id(c.out, d.name)) {
    return;
  }
  // References into the table (no reference counting unless a task is made); only the
  // first c.inputs.n entries are set.
  const SlotPtr* in[protocol::Inputs::kMax];
  Slot* raw[protocol::Inputs::kMax];
  const uint8_t n = c.inputs.n;
  for (uint8_t i = 0; i < n; ++i) {
    in[i] = &table.input(c.inputs[i], target, d.name, output_of(c));
    if (!*in[i]) return;
    raw[i] = in[i]->get();
  }
  const SlotPtr& out = c.inplace ? *in[0] : table.make_output(c.out);
  if (!heavy_op(d) && c.device < 0 && may_run_inline(stream, raw, n)) {
    inline_failed = !run_op_ready(*stream, c, raw, *out);
    if (current_begin != 0) [[unlikely]]
      trace_inline(*stream, c, *out);
    return;
  }
  Task t = task(Task::Kind::Op, c);
  for (uint8_t i = 0; i < n && i < Task::kInlineInputs; ++i) t.in[i] = *in[i];
  if (n > Task::kInlineInputs) {
    t.more_in = std::make_unique<SlotPtr[]>(n - Task::kInlineInputs);
    for (uint8_t i = Task::kInlineInputs; i < n; ++i) t.more_in[i - Task::kInlineInputs] = *in[i];
  }
  t.out = out;
  streams.stage(stream, std::move(t));
}

void Session::Impl::on(const cmd::Put& c, Payloads payloads) {
  if (stream_of(c)) put(c, payloads);
}

void Session::Impl::put(const cmd::Put& c, Payloads payloads) {
  if (!table.check_new_id(c.out, "put")) return;
  auto fail = [&](std::string message) {
    table.set(c.out, Slot::failed_with(failures.root(c.out, "put", std::move(message), c.device)));
  };
  if (c.payload < 1 || c.payload > payloads.size())  // the decoder checks it too
    return fail(
        fmt::format("payload frame {} does not exist (1 to {})", c.payload, payloads.size()));
  const PayloadFrame& frame = payloads[c.payload - 1];
  rec.counters.add_bytes<cmd::Put>(static_cast<int64_t>(frame.size));
  const TensorMeta& m = c.meta;
  if (std::string problem = size_problem(m); !problem.empty()) return fail(std::move(problem));
  size_t expected = static_cast<size_t>(m.numel()) * element_size(m.dtype);
  if (frame.size != expected)
    return fail(
        fmt::format("payload has {} bytes, {} needs {}", frame.size, describe(m), expected));
  try {
    local::Tensor host = frame_tensor(frame, m);
    // On the device's default stream; streams that read it wait for its event.
    table.set(c.out, c.device < 0 ? Slot::of(std::move(host)) : uploaded(host, c.device));
  } catch (const std::exception& e) {
    fail(e.what());
  }
}

void Session::Impl::on(const cmd::Get& c) {
  const StreamPtr& stream = stream_of(c);
  if (!stream) return;
  SlotPtr in = table.find(c.input);
  if (!in) {
    reply_failure(c,
                  make_failure(c.input, "get", fmt::format("tensor %{} does not exist", c.input)));
    return;
  }
  Task t = task(Task::Kind::Get, c);
  t.in[0] = std::move(in);
  Slot* raw[1] = {t.in[0].get()};
  // On an idle stream with the tensor ready: answered from the dispatch thread.
  if (may_run_inline(stream, raw, 1) && run_get(*stream, stream, t)) return;
  streams.stage(stream, std::move(t));
}

void Session::Impl::trace_inline(Stream& s, const cmd::RunOp& c, Slot& out) {
  last_end = trace::ticks();
  trace_inline_op(rec.tracer, s.id, c, out, current_begin, last_end);
  traced_here = true;
}

bool Session::Impl::may_run_inline(const StreamPtr& s, Slot* const* in, uint8_t n_inputs) {
  if (n_inputs == 0) return false;  // a creation op's size is not bounded by its inputs
  int64_t work = 0;
  for (uint8_t i = 0; i < n_inputs; ++i) {
    const Slot& slot = *in[i];
    if (!slot.ready.load(std::memory_order_acquire)) return false;
    if (slot.failed.load(std::memory_order_acquire)) continue;  // fails at once
    const local::Tensor& x = slot.tensor;
    if (x.device() >= 0) return false;
    const int64_t n = x.numel();
    if (n > kInlineElements) return false;
    work += n + 1;
  }
  if (work > inline_budget || !streams.idle_now(s)) return false;
  inline_budget -= work;
  return true;
}

void Session::Impl::on(const cmd::Free& c) {
  if (current_begin != 0) {  // tracing: the freed tensor's shape goes with the free's slice
    SlotPtr s = table.find(c.input);
    traced_meta.reset();
    if (s && s->ready.load(std::memory_order_acquire) && !s->failed.load(std::memory_order_acquire))
      traced_meta = s->tensor.meta();
  }
  if (!table.erase(c.input))
    failures.root(c.input, "free", fmt::format("tensor %{} does not exist", c.input));
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
    outbox.reply(r);
    return;
  }
  barrier(CmdType::Stats, c.request, c.device);
}

void Session::Impl::on(const cmd::CreateStream& c) {
  if (std::optional<std::string> problem = streams.create(c.stream))
    failures.root(protocol::kNoTensor, "create_stream", std::move(*problem));
}

void Session::Impl::on(const cmd::DestroyStream& c) {
  if (std::optional<std::string> problem = streams.destroy(c.stream))
    failures.root(protocol::kNoTensor, "destroy_stream", std::move(*problem));
}

void Session::Impl::on(const cmd::Record& c) {
  StreamPtr stream = stream_of(c);
  if (!stream) return;
  std::string problem;
  EventPtr e = events.for_record(c.event, &problem);
  if (!e) {
    failures.root(protocol::kNoTensor, "record_event", std::move(problem));
    return;
  }
  Task t = task(Task::Kind::Record, c);
  t.target = ++e->issued;
  t.event = std::move(e);
  // On an idle stream the record is done at once (so that a query right after it sees an
  // idle stream as done). Only this thread makes an idle stream run.
  if (streams.idle_now(stream)) return run_record(*stream, *t.event, t.target, failures, outbox);
  streams.stage(stream, std::move(t));
}

void Session::Impl::on(const cmd::WaitEvent& c) {
  StreamPtr stream = stream_of(c);
  if (!stream) return;
  EventPtr e = event_of(c);
  if (!e) return;
  Task t = task(Task::Kind::WaitEvent, c);
  t.target = e->issued;
  t.event = std::move(e);
  streams.stage(stream, std::move(t));
}

void Session::Impl::on(const cmd::NotifyPeer& c) {
  if (std::optional<std::string> problem = outbox.peer_problem(c.peer)) {
    failures.root(protocol::kNoTensor, "notify_peer", std::move(*problem));
    return;
  }
  EventPtr e = event_of(c);
  if (e && e->done_or_notify(static_cast<int32_t>(c.peer), c.token)) {
    trace_notify(rec.tracer, c.stream, c.event, c.peer, c.token, /*dispatched=*/true);
    outbox.send_notify(static_cast<int32_t>(c.peer), c.token);
  }
}

void Session::Impl::on(const cmd::WaitRemote& c) {
  StreamPtr stream = stream_of(c);
  if (!stream) return;
  RemoteWaitPtr w = remote_wait(c, "wait_event", protocol::kNoTensor);
  if (!w) return;
  Task t = task(Task::Kind::WaitRemote, c);
  t.remote = std::move(w);
  streams.stage(stream, std::move(t));
}

void Session::Impl::on(const cmd::EventQuery& c) {
  if (EventPtr e = event_of(c)) answer_event(*e, c.request, false);
}

void Session::Impl::on(const cmd::EventSync& c) {
  if (EventPtr e = event_of(c)) answer_event(*e, c.request, true);
}

void Session::Impl::on(const cmd::DestroyEvent& c) {
  if (!events.erase(c.event))
    failures.root(protocol::kNoTensor, "destroy_event",
                  fmt::format("event {} was never recorded on this worker", c.event));
}

void Session::Impl::on(const cmd::SendPeer& c) {
  StreamPtr stream = stream_of(c);
  if (!stream) return;
  if (std::optional<std::string> problem = outbox.peer_problem(c.peer)) {
    failures.root(c.input, "send_to_node", std::move(*problem));
    return;
  }
  SlotPtr in = table.find(c.input);
  if (!in) {
    // The receiver must still hear of it, or its stream would wait forever.
    RemoteFailure f =
        make_failure(c.input, "send_to_node", fmt::format("tensor %{} does not exist", c.input));
    failures.root(f.tensor, f.op, f.message);
    outbox.send_notify(static_cast<int32_t>(c.peer), c.token, &f);
    return;
  }
  Task t = task(Task::Kind::SendPeer, c);
  t.in[0] = std::move(in);
  streams.stage(stream, std::move(t));
}

void Session::Impl::on(const cmd::RecvPeer& c) {
  StreamPtr stream = stream_of(c);
  if (!stream) return;
  if (!table.check_new_id(c.out, "recv_from_node")) return;
  if (std::string problem = size_problem(c.meta); !problem.empty()) {
    table.set(c.out, Slot::failed_with(failures.root(c.out, "recv_from_node", problem)));
    return;
  }
  RemoteWaitPtr w = remote_wait(c, "recv_from_node", c.out);
  if (!w) return;
  Task t = task(Task::Kind::RecvPeer, c);
  t.remote = std::move(w);
  t.out = table.make_output(c.out);
  streams.stage(stream, std::move(t));
}

void Session::Impl::on(const cmd::ToDevice& c) {
  StreamPtr stream = stream_of(c);
  if (!stream) return;
  if (!table.check_new_id(c.out, "to_device")) return;
  Task t = task(Task::Kind::ToDevice, c);
  t.in[0] = table.input(c.input, c.out, "to_device", c.out);
  if (!t.in[0]) return;
  t.out = table.make_output(c.out);
  streams.stage(stream, std::move(t));
}

void Session::Impl::on(const cmd::NewGroup& c) {
  if (std::optional<std::string> problem = groups.new_group(c, outbox.nodes()))
    failures.root(protocol::kNoTensor, "new_group", std::move(*problem));
}

void Session::Impl::on(const cmd::Collective& c) {
  StreamPtr stream = stream_of(c);
  if (!stream) return;
  Task t = task(Task::Kind::Collective, c);
  if (c.makes_tensor()) {
    if (!table.check_new_id(c.out, "collective")) return;
    t.out = table.make_output(c.out);
  }
  // Whatever is wrong here, the task still runs: the other members wait for this one,
  // and learn from it that the collective cannot be done.
  t.in[0] = table.find(c.input);
  if (!t.in[0])
    t.in[0] = Slot::failed_with(
        failures.root(c.input, "collective", fmt::format("tensor %{} does not exist", c.input)));
  if (!c.makes_tensor()) t.out = t.in[0];
  t.group = groups.find(c.group);
  streams.stage(stream, std::move(t));
}

void Session::Impl::on(const cmd::NodeLost& c) {
  if (std::optional<std::string> problem = outbox.peer_problem(c.node)) {
    failures.root(protocol::kNoTensor, "node_lost", std::move(*problem));
    return;
  }
  std::string why = fmt::format(
      "node {} is lost to this session (the master lost it: silent for its heartbeat timeout, "
      "its connection closed, or it ended the session)",
      c.node);
  outbox.mark_lost(c.node, why);
  // What waited for the node, before it fails: the log and the master learn it.
  outbox.send_flight(rec.dump_to_log(fmt::format("node {} was lost", c.node)));
  tokens.fail_from(c.node, make_failure(protocol::kNoTensor, "node_lost", why));
  groups.lost(c.node, why);
}

void Session::Impl::on(const cmd::ClockSync& c) {
  protocol::Reply r;
  r.type = protocol::ReplyType::Clock;
  r.request = c.request;
  r.time_ns = trace::steady_ns();
  outbox.reply(r);
}

void Session::Impl::on(const cmd::Trace& c) {
  switch (c.action) {
    case protocol::TraceAction::Start: {
      rec.tracer.start();
      protocol::Reply r;
      r.type = protocol::ReplyType::Trace;
      r.request = c.request;
      outbox.reply(r);
      return;
    }
    case protocol::TraceAction::Stop:  // once every stream has run what came before
      return barrier(CmdType::Trace, c.request, -1);
    case protocol::TraceAction::Collect: {
      protocol::Reply r;
      r.type = protocol::ReplyType::Trace;
      r.request = c.request;
      // Shapes the slices lack come from the tensors still alive (dispatch thread).
      r.trace = rec.tracer.collect(protocol::kMaxTraceEventsPerReply,
                                   [this](TensorId id) -> std::optional<TensorMeta> {
                                     SlotPtr s = table.find(id);
                                     if (!s || !s->ready.load(std::memory_order_acquire) ||
                                         s->failed.load(std::memory_order_acquire))
                                       return std::nullopt;
                                     return s->tensor.meta();
                                   });
      outbox.reply(r);
      return;
    }
  }
}

void Session::Impl::on(const cmd::FlightDump& c) {
  protocol::Reply r;
  r.type = protocol::ReplyType::Flight;
  r.request = c.request;
  r.flight = rec.flight.dump("asked by the master");
  outbox.reply(r);
}

void Session::Impl::on(const cmd::Attach& c) {
  protocol::Reply r;
  r.type = protocol::ReplyType::Attach;
  r.request = c.request;
  if (!protocol::same_host_enabled()) {
    r.message = "DTR_SAME_HOST=0 on the worker";
  } else {
    r.message = protocol::challenge_problem(c.pid, c.address, challenge);
    r.done = r.message.empty();
  }
  if (r.done) {
    held_challenge = c.challenge;  // for the master to read back
    r.address = reinterpret_cast<uint64_t>(&held_challenge);
  }
  master_pid.store(r.done ? c.pid : 0, std::memory_order_relaxed);
  outbox.reply(r);
}

void Session::Impl::on(const cmd::PutFrom& c) {
  StreamPtr stream = stream_of(c);
  if (!stream || !table.check_new_id(c.out, "put")) return;
  std::string problem = size_problem(c.meta);
  if (problem.empty() && master_pid.load(std::memory_order_relaxed) == 0)
    problem =
        "the master sent its tensor by address, but this worker has not attached to it "
        "(no successful Attach)";
  if (problem.empty() && c.address == 0 && c.meta.numel() > 0)
    problem = "the master's tensor is at address 0";
  if (!problem.empty()) {
    table.set(c.out, Slot::failed_with(failures.root(c.out, "put", std::move(problem), c.device)));
    return;
  }
  Task t = task(Task::Kind::PutFrom, c);
  t.out = table.make_output(c.out);
  streams.stage(stream, std::move(t));
}

void Session::Impl::on(const cmd::Release& c) {
  local::Tensor dropped;  // freed outside the lock
  std::lock_guard lock(pulled_mu);
  auto it = pulled.find(c.request);
  if (it == pulled.end()) return;  // a Get answered with a frame, or released before
  dropped = std::move(it->second);
  pulled.erase(it);
}

void Session::Impl::on(const cmd::Metrics& c) {
  protocol::Reply r;
  r.type = protocol::ReplyType::Metrics;
  r.request = c.request;
  r.metrics = session_metrics();
  outbox.reply(r);
}

// ---- captured graphs (worker/graph.hpp) ----

GraphEnv Session::Impl::graph_env() {
  return GraphEnv{table, streams, events, tokens, groups, outbox, options.devices, kInlineElements};
}

void Session::Impl::on(const cmd::GraphUpload& c) {
  std::string problem;
  GraphPtr g;
  if (graphs.contains(c.graph))
    problem = "it exists already";
  else if (graphs.size() >= protocol::kMaxGraphs)
    problem = fmt::format("this worker allows at most {} graphs per session", protocol::kMaxGraphs);
  else
    g = build_graph(c, graph_env(), &problem);
  if (g) return graphs.add(std::move(g));
  Failure f = failures.root(protocol::kNoTensor, "capture",
                            fmt::format("graph {} was refused: {}", c.graph, problem));
  if (!graphs.contains(c.graph) && graphs.size() < protocol::kMaxGraphs)
    graphs.refuse(c.graph, problem);
  // The tensors the master holds handles of say why when read.
  for (TensorId id : c.outputs) table.fail_new(id, f);
}

void Session::Impl::on(const cmd::GraphReplay& c) {
  std::string problem;
  GraphPtr g = graphs.find(c.graph, &problem);
  GraphRunPtr run = g ? start_run(g, c.replay, graph_env(), &problem) : nullptr;
  if (!run) {
    Failure f = failures.root(
        protocol::kNoTensor, "replay_graph",
        fmt::format("replay {} of graph {} did not run: {}", c.replay, c.graph, problem));
    if (g) fail_outputs(*g, table, f);
    return;
  }
  for (uint32_t p = 0; p < run->parts.size(); ++p) {
    const GraphPart& part = g->parts[p];
    if (part.steps.empty()) continue;
    Task t;
    t.kind = Task::Kind::GraphPart;
    t.graph_run = run;
    t.flight = current_seq;  // the replay's record follows its parts (ends with the last)
    t.part = p;
    // A small CPU part on an idle stream runs at once, as small eager work does.
    if (part.inline_work >= 0 && part.inline_work <= inline_budget &&
        streams.idle_now(part.stream)) {
      inline_budget -= part.inline_work;
      const int64_t begin = current_begin != 0 ? trace::ticks() : 0;
      if (run_graph_part(*part.stream, part.stream, t, true)) {
        if (begin != 0)
          trace_replay_part(rec.tracer, part.stream->id, c.replay, begin, trace::ticks());
        continue;
      }
    }
    streams.stage(part.stream, std::move(t));
  }
  traced_here = true;  // each part is a slice on its stream (above, or when its task ends)
}

void Session::Impl::on(const cmd::GraphFree& c) {
  if (!graphs.erase(c.graph))
    failures.root(protocol::kNoTensor, "free_graph",
                  fmt::format("graph {} does not exist on this worker", c.graph));
}

bool Session::Impl::run_graph_part(Stream& s, const StreamPtr& self, Task& t, bool now) {
  GraphRun& run = *t.graph_run;
  Graph& g = *run.graph;
  GraphRun::PartState& ps = run.parts[t.part];
  if (!ps.started) {
    if (!previous_done_or_park(g, run.replay, now ? nullptr : &self)) return false;
    ps.started = true;
    begin_device_work(g, run.replay, s.cuda);
  }
  GraphPart& part = g.parts[t.part];
  ReplayNote note(g.id, run.replay);
  while (ps.cursor < part.steps.size()) {
    GraphStep& st = g.steps[part.steps[ps.cursor]];
    note.at(st.index);
    while (ps.segment < part.segments.size() && part.segments[ps.segment].begin < ps.cursor)
      ++ps.segment;
    if (!now && ps.segment < part.segments.size() && part.segments[ps.segment].begin == ps.cursor) {
      CudaSegment& seg = part.segments[ps.segment];
      SegmentOutcome r = run_cuda_segment(s, self, run, part, seg, failures);
      if (r == SegmentOutcome::kParked) return false;
      ++ps.segment;
      if (r == SegmentOutcome::kRan) {
        ps.cursor = seg.end;
        continue;
      }
    }
    if (!run_graph_step(s, self, run, st, now)) return false;
    ++ps.cursor;
  }
  end_device_work(g, run.replay, s.cuda);
  finish_part(run, t.part);
  return true;
}

bool Session::Impl::run_graph_step(Stream& s, const StreamPtr& self, GraphRun& run, GraphStep& st,
                                   bool now) {
  if (st.type == CmdType::RunOp) return run_graph_op(s, self, run, st, now);
  if (now && st.type != CmdType::Record) return false;
  Graph& g = *run.graph;
  // The task eager mode would run, with the graph's slots, generations, waits and tokens.
  Task t;
  if (!st.in.empty()) t.in[0] = st.in[0].input ? st.in[0].input : run.temps[st.in[0].temp];
  if (st.out >= 0) t.out = run.temps[static_cast<size_t>(st.out)];
  if (st.event >= 0) t.event = g.events[static_cast<size_t>(st.event)];
  t.group = st.group;
  cmd::SendPeer send;   // a SendPeer with this replay's token
  std::string missing;  // why a remote wait could not be made
  std::visit(
      [&](const auto& c) {
        using C = std::decay_t<decltype(c)>;
        t.cmd = &c;
        if constexpr (std::is_same_v<C, cmd::Record> || std::is_same_v<C, cmd::WaitEvent>) {
          t.kind = std::is_same_v<C, cmd::Record> ? Task::Kind::Record : Task::Kind::WaitEvent;
          t.target = run.targets[static_cast<size_t>(st.slot)];
        } else if constexpr (std::is_same_v<C, cmd::WaitRemote> ||
                             std::is_same_v<C, cmd::RecvPeer>) {
          t.kind =
              std::is_same_v<C, cmd::WaitRemote> ? Task::Kind::WaitRemote : Task::Kind::RecvPeer;
          t.remote = run.remotes[static_cast<size_t>(st.slot)];
          if (!t.remote) missing = run.remote_problems[static_cast<size_t>(st.slot)];
        } else if constexpr (std::is_same_v<C, cmd::SendPeer>) {
          send = c;
          send.token = protocol::graph_token(c.token, run.replay);
          t.cmd = &send;
          t.kind = Task::Kind::SendPeer;
        } else if constexpr (std::is_same_v<C, cmd::Collective>) {
          t.kind = Task::Kind::Collective;
          if (!c.makes_tensor()) t.out = t.in[0];
        } else if constexpr (std::is_same_v<C, cmd::ToDevice>) {
          t.kind = Task::Kind::ToDevice;
        }
      },
      *st.cmd);
  const TensorId target =
      st.out >= 0 ? g.temps[static_cast<size_t>(st.out)].id : protocol::kNoTensor;
  Slot* in0 = t.in[0].get();
  if (std::string why = t.in[0] ? input_mismatch(g, st, &in0) : "";
      !why.empty() || !missing.empty()) {
    Failure f = failures.root(target, command_name(*st.cmd), why.empty() ? missing : why);
    if (t.out) fail_output(s, *t.out, std::move(f));
    return true;
  }
  return execute(s, self, t);
}

bool Session::Impl::run_graph_op(Stream& s, const StreamPtr& self, GraphRun& run, GraphStep& st,
                                 bool now) {
  const auto& c = std::get<cmd::RunOp>(*st.cmd);
  Graph& g = *run.graph;
  Slot* in[protocol::Inputs::kMax];  // the first n are set (no zeroing: up to 64 per op)
  const size_t n = st.in.size();
  bool failed = false;
  for (size_t i = 0; i < n; ++i) {
    in[i] = operand_slot(run, st.in[i]);
    if (now ? !in[i]->ready.load(std::memory_order_acquire) : !in[i]->ready_or_park(self))
      return false;
    failed = failed || in[i]->failed.load(std::memory_order_acquire);
  }
  GraphTemp* t = st.out >= 0 ? &g.temps[static_cast<size_t>(st.out)] : nullptr;
  Slot& out = t ? *run.temps[static_cast<size_t>(st.out)] : *in[0];
  if (st.fast && !failed) {  // the loop alone: every tensor is fixed and checked
    st.fast();
    if (t) out.publish(t->bound);
    return true;
  }
  const std::string_view name = op_def(c.op).name;
  const TensorId target = t ? t->id : c.inputs[0];
  if (std::string why = input_mismatch(g, st, in); !why.empty()) {
    fail_output(s, out, failures.root(target, name, std::move(why)));
    return true;
  }
  if (t && t->is_bound() && t->aliases) {  // a view, fixed since its first run
    if (failed) {
      for (size_t i = 0; i < n; ++i)
        if (Failure cause = in[i]->get_failure())
          return fail_output(s, out, dependent_failure(target, name, c.inputs[i], *cause)), true;
    }
    out.publish(t->bound);
    return true;
  }
  run_op_ready(s, c, in, out, t && t->is_bound() ? &t->bound : nullptr);
  if (t && !t->is_bound() && !out.failed.load(std::memory_order_acquire))
    bind(g, st, *t, out.tensor, n > 0 ? *in[0] : out);
  if (!st.tried_fast) prepare_fast(g, st, c, in);
  return true;
}

// ---- execution (executor threads) ----

bool Session::Impl::execute(Stream& s, const StreamPtr& self, Task& t) {
  switch (t.kind) {
    case Task::Kind::Op:
      return run_op(s, self, t);
    case Task::Kind::Get:
      return run_get(s, self, t);
    case Task::Kind::Record:
      run_record(s, *t.event, t.target, failures, outbox);
      return true;
    case Task::Kind::WaitEvent:
      return t.event->reached_or_park(t.target, self);
    case Task::Kind::WaitRemote:
      return t.remote->arrived_or_park(self);
    case Task::Kind::Barrier:
      if (arrive(s, *t.barrier))
        finish_barrier(*t.barrier);
      else
        rec.flight.waiting(t.barrier->flight, protocol::WaitKind::Streams, 0,
                           FlightRecorder::coarse_now_ns());
      return true;
    case Task::Kind::ToDevice:
      return run_to_device(s, self, t);
    case Task::Kind::PutFrom:
      return run_put_from(s, self, t);
    case Task::Kind::SendPeer:
      return run_send_peer(s, self, t, failures, outbox);
    case Task::Kind::RecvPeer:
      return run_recv_peer(s, self, t, failures, outbox);
    case Task::Kind::Collective:
      return run_collective(
          s, self, t, {groups, failures, options.collective_timeout, outbox.node(), rec, outbox});
    case Task::Kind::GraphPart:
      return run_graph_part(s, self, t, false);
  }
  return true;
}

bool Session::Impl::run_op(Stream& s, const StreamPtr& self, Task& t) {
  const auto& c = t.command<cmd::RunOp>();
  Slot* in[protocol::Inputs::kMax];
  for (uint8_t i = 0; i < c.inputs.n; ++i) {
    in[i] = t.input(i).get();
    if (!in[i]->ready_or_park(self)) {
      waiting_for_tensor(s, t, c.inputs[i]);
      return false;
    }
  }
  run_op_ready(s, c, in, *t.out);
  return true;
}

bool Session::Impl::run_op_ready(Stream& s, const cmd::RunOp& c, Slot* const* in, Slot& out,
                                 const local::Tensor* into) {
  const OpDef& d = op_def(c.op);
  const uint8_t n = c.inputs.n;
  TensorId target = c.inplace ? c.inputs.ids[0] : c.out;
  for (uint8_t i = 0; i < n; ++i) {
    if (Failure cause = in[i]->get_failure()) {
      fail_output(s, out, dependent_failure(target, d.name, c.inputs[i], *cause));
      return false;
    }
  }
  const int device = n > 0 ? in[0]->tensor.device() : c.device;
  try {
    local::Tensor result;
    if (device < 0 && n <= 1 && !into) {
      // A CPU op of one input reads the slot's tensor where it is (a ready slot's handle
      // no longer changes).
      std::span<const local::Tensor> inputs;
      if (n == 1) inputs = std::span<const local::Tensor>(&in[0]->tensor, 1);
      if (c.inplace) {
        local::execute_inplace(c.op, inputs, c.attrs);
        return true;
      }
      result = local::execute(c.op, inputs, c.attrs, false, c.device);
    } else {
      std::array<local::Tensor, Task::kInlineInputs> few;
      std::vector<local::Tensor> many(n > few.size() ? n : 0);
      local::Tensor* inputs = n > few.size() ? many.data() : few.data();
      for (uint8_t i = 0; i < n; ++i) inputs[i] = use(s.cuda, *in[i]);
      std::optional<cuda::StreamScope> scope;
      Tracer::DeviceMark mark;
      if (device >= 0) {
        scope.emplace(device, s.cuda.get(device));
        mark = rec.tracer.mark_begin(device, s.cuda.get(device));
      }
      const std::span<const local::Tensor> operands(inputs, n);
      if (into) {
        local::run_kernel(c.op, operands, c.attrs, *into);
        result = *into;
      } else {
        result = local::execute(c.op, operands, c.attrs, c.inplace, c.device);
      }
      if (result.device() >= 0) wrote(s.cuda, out, result);
      if (mark.begin) trace_device_op(s, c, inputs, result, std::move(mark));
    }
    if (!c.inplace) out.publish(std::move(result));
    return true;
  } catch (const std::bad_alloc&) {
    fail_output(s, out, failures.root(target, d.name, "out of host memory", device));
  } catch (const std::exception& e) {
    fail_output(s, out, failures.root(target, d.name, e.what(), device));
  }
  return false;
}

bool Session::Impl::run_to_device(Stream& s, const StreamPtr& self, Task& t) {
  const auto& c = t.command<cmd::ToDevice>();
  if (!t.in[0]->ready_or_park(self)) {
    waiting_for_tensor(s, t, c.input);
    return false;
  }
  if (Failure cause = t.in[0]->get_failure()) {
    fail_output(s, t, dependent_failure(c.out, "to_device", c.input, *cause));
    return true;
  }
  try {
    local::Tensor in = use(s.cuda, *t.in[0]);
    // Host to device runs on the target's stream; device to host or device to device on
    // the source's.
    const int device = in.device() >= 0 ? in.device() : c.device;
    std::optional<cuda::StreamScope> scope;
    if (device >= 0) scope.emplace(device, s.cuda.get(device));
    local::Tensor out = in.to_device(c.device);
    rec.counters.add_bytes<cmd::ToDevice>(out.numel() *
                                          static_cast<int64_t>(element_size(out.dtype())));
    if (out.device() >= 0) {
      if (out.device() != device) {
        // Device to device across devices: readers of `out` order on the target device.
        scope.reset();
        scope.emplace(out.device(), s.cuda.get(out.device()));
      }
      wrote(s.cuda, *t.out, out);
    }
    t.out->publish(std::move(out));
  } catch (const std::exception& e) {
    fail_output(s, t, failures.root(c.out, "to_device", e.what(), c.device));
  }
  return true;
}

bool Session::Impl::run_put_from(Stream& s, const StreamPtr&, Task& t) {
  const auto& c = t.command<cmd::PutFrom>();
  try {
    const TensorMeta& m = c.meta;
    local::Tensor host = local::empty(m.shape, m.dtype);
    const size_t bytes = static_cast<size_t>(m.numel()) * element_size(m.dtype);
    protocol::read_process_memory(master_pid.load(std::memory_order_relaxed), c.address,
                                  host.raw_data(), bytes, "reading the master's tensor");
    rec.counters.add_bytes<cmd::Put>(static_cast<int64_t>(bytes));
    if (c.device < 0) {
      t.out->publish(std::move(host));
      return true;
    }
    cuda::StreamScope scope(c.device, s.cuda.get(c.device));
    local::Tensor out = host.to_device(c.device);
    wrote(s.cuda, *t.out, out);
    t.out->publish(std::move(out));
  } catch (const std::exception& e) {
    fail_output(s, t, failures.root(c.out, "put", e.what(), c.device));
  }
  return true;
}

bool Session::Impl::pin_pulled(uint64_t request, local::Tensor bytes) {
  std::lock_guard lock(pulled_mu);
  if (pulled.size() >= kMaxPulled) return false;
  pulled[request] = std::move(bytes);
  return true;
}

bool Session::Impl::run_get(Stream& s, const StreamPtr& self, Task& t) {
  const auto& c = t.command<cmd::Get>();
  if (!t.in[0]->ready_or_park(self)) {
    waiting_for_tensor(s, t, c.input);
    return false;
  }
  protocol::Reply r;
  r.type = protocol::ReplyType::Get;
  r.request = c.request;
  std::vector<local::Tensor> payloads;
  if (Failure f = t.in[0]->get_failure()) {
    r.failures.push_back(*f);
  } else {
    try {
      local::Tensor packed = use(s.cuda, *t.in[0]);
      if (packed.device() >= 0) {
        cuda::StreamScope scope(packed.device(), s.cuda.get(packed.device()));
        packed = packed.cpu();  // returns once the bytes are here
      }
      packed = packed.contiguous();
      r.meta = packed.meta();
      rec.counters.add_bytes<cmd::Get>(packed.numel() *
                                       static_cast<int64_t>(element_size(packed.dtype())));
      // Pulled: the master reads the bytes here (same host), once this reply is out.
      if (c.pull && master_pid.load(std::memory_order_relaxed) != 0 && packed.numel() > 0 &&
          pin_pulled(c.request, packed))
        r.address = reinterpret_cast<uint64_t>(packed.raw_data());
      else
        payloads.push_back(std::move(packed));
    } catch (const std::exception& e) {
      r.failures.push_back(make_failure(c.input, "get", e.what()));
    }
  }
  outbox.send_get(r, std::move(payloads));
  return true;
}

void Session::Impl::finish_barrier(Barrier& b) {
  rec.flight.finished(b.flight, false, FlightRecorder::coarse_now_ns());
  if (b.type == CmdType::Trace) {  // Trace's Stop: every stream has run what came before
    rec.tracer.stop();
    protocol::Reply r;
    r.type = protocol::ReplyType::Trace;
    r.request = b.request;
    // The slices follow on Collect, on the dispatch thread (which may read the tensors).
    r.trace.more = true;
    r.trace.dropped = rec.tracer.dropped();
    return outbox.reply(r);
  }
  if (b.type != CmdType::Sync) {
    GraphMemory g = graph_memory(b.graphs, b.device);
    return outbox.reply(stats_reply(b.request, b.device, b.live_tensors, g.bytes, g.tensors));
  }
  protocol::Reply r;
  r.type = protocol::ReplyType::Sync;
  r.request = b.request;
  std::string device_failure;
  {
    std::lock_guard lock(b.mu);
    device_failure = b.device_failure;
  }
  r.failures = failures.take_for_sync(device_failure);
  outbox.reply(r);
}

// ---- Session ----

Session::Session(Emit emit, SessionOptions options)
    : impl_(std::make_unique<Impl>(std::move(emit), options)) {}

Session::~Session() = default;

void Session::run(std::shared_ptr<const protocol::Batch> batch,
                  std::span<const PayloadFrame> payloads) {
  impl_->current_batch = batch;
  impl_->inline_budget = kInlineBudget;
  impl_->batch_ns = trace::steady_ns();
  uint64_t seq = impl_->rec.flight.add_batch(batch, impl_->batch_ns);
  impl_->last_end = 0;
  for (const Command& c : batch->commands) {
    impl_->current_seq = seq++;
    impl_->dispatch(c, payloads);
    if (impl_->streams.staged() >= kStageFlush) impl_->streams.flush(impl_->current_batch);
  }
  impl_->streams.flush(impl_->current_batch);
  impl_->current_batch.reset();
}

void Session::setup(uint32_t node, uint32_t nodes, uint64_t session_id,
                    std::vector<std::string> pg_endpoints, std::string backend,
                    std::shared_ptr<void> port_hold) {
  Impl& s = *impl_;
  s.outbox.setup(node, nodes, session_id);
  s.groups.setup(std::move(pg_endpoints), node, nodes, session_id, s.options.collective_timeout,
                 s.options.security, backend, std::move(port_hold));
}

bool Session::notify(const protocol::PeerNotify& n, const PayloadFrame* payload) {
  Impl& s = *impl_;
  if (!s.outbox.has_setup() || n.session != s.outbox.session_id() ||
      n.from_node >= s.outbox.nodes())
    return false;
  if (n.released) {  // the peer has read a copy's bytes held here
    s.outbox.release(n.from_node, n.token);
    return true;
  }
  std::optional<RemoteFailure> failure;
  if (n.failed) failure = n.failure;
  if (n.pid == 0) return s.tokens.arrive(n.token, n.from_node, payload, failure);
  if (payload) return false;  // bytes both here and there
  const RemoteWait::At at{n.pid, n.address, n.bytes, n.token};
  return s.tokens.arrive(n.token, n.from_node, nullptr, failure, &at);
}

bool Session::wait_idle(std::chrono::milliseconds timeout) {
  return impl_->executor.wait_idle(timeout);
}

size_t Session::live_tensors() const {
  return impl_->table.size();
}

size_t Session::backlog() const {
  return impl_->streams.backlog();
}

size_t Session::streams() const {
  return impl_->streams.size();
}

unsigned Session::threads() const {
  return impl_->executor.threads();
}

uint64_t Session::same_host_challenge() const {
  return impl_->challenge;
}

void Session::Impl::trace_device_op(Stream& s, const cmd::RunOp& c, const local::Tensor* inputs,
                                    const local::Tensor& result, Tracer::DeviceMark mark) {
  Tracer::Slice sl = op_slice(s.id, c);
  Tracer::TensorRef refs[protocol::kMaxTraceTensors];
  size_t n = 0;
  for (uint8_t i = 0; i < c.inputs.n && i < 2; ++i)
    refs[n++] = {c.inputs.ids[i], &inputs[i].meta()};
  if (!c.inplace && result.defined()) refs[n++] = {c.out, &result.meta()};
  if (result.defined())
    sl.bytes = result.numel() * static_cast<int64_t>(element_size(result.dtype()));
  const int device = result.defined() ? result.device() : c.device;
  rec.tracer.mark_end(std::move(mark), device, s.cuda.get(device), sl,
                      std::span<const Tracer::TensorRef>(refs, n));
}

protocol::NodeMetrics Session::Impl::session_metrics() {
  protocol::NodeMetrics m;
  rec.fill(m);
  for (auto [stream, depth] : streams.queue_depths()) m.queues.push_back({stream, depth});
  // Live tensors per device: the CPU's first, then each CUDA device's.
  std::vector<protocol::NodeMetrics::Device> devices(static_cast<size_t>(options.devices) + 1);
  for (size_t i = 0; i < devices.size(); ++i) devices[i].device = static_cast<int32_t>(i) - 1;
  table.for_each([&](const Slot& slot) {
    if (!slot.ready.load(std::memory_order_acquire) || slot.failed.load(std::memory_order_acquire))
      return;
    const size_t index = static_cast<size_t>(slot.tensor.device() + 1);
    if (index < devices.size()) ++devices[index].live_tensors;
  });
  devices[0].bytes_in_use = cpu_memory_stats().bytes_in_use;
  for (size_t i = 1; i < devices.size(); ++i) {
    try {
      devices[i].bytes_in_use = cuda::memory_stats(static_cast<int>(i) - 1).allocated_bytes;
    } catch (const std::exception&) {
    }
  }
  m.devices = std::move(devices);
  m.threads = executor.threads();
  return m;
}

protocol::NodeMetrics Session::metrics() const {
  return impl_->session_metrics();
}

detail::Recorder& Session::recorder() {
  return impl_->rec;
}

protocol::MemoryStatsWire Session::stats() const {
  MemoryStats s = cpu_memory_stats();
  return protocol::MemoryStatsWire{s.bytes_in_use, s.peak_bytes,
                                   static_cast<int64_t>(impl_->table.size())};
}

}  // namespace dtr::worker
