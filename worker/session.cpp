// The session as a multiplexer: each command to its handler (dispatch, on the dispatch
// thread), each task to its runner (execute, on an executor thread); the handlers and
// runners live by area (worker/session_impl.hpp says where). Also the Session API, and the
// session's start and end.
#include "worker/session.hpp"

#include "common/trace_clock.hpp"
#include "worker/session_impl.hpp"
#include "worker/trace_slices.hpp"

namespace dtr::worker {

using protocol::Command;
using namespace detail;

Session::Impl::Impl(Emit emit, SessionOptions options)
    : options(options),
      recorder_holder(options.recorder ? options.recorder : std::make_shared<Recorder>()),
      rec(*recorder_holder),
      outbox(std::move(emit), failures),
      executor(options.threads),
      table(failures),
      streams(executor, *this, rec) {}

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

// ---- commands to handlers (dispatch thread) ----

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
  if constexpr (std::is_same_v<C, protocol::cmd::Put>)
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
  if (!tracing || queued || traced_here || !protocol::traced_v<C>) [[likely]]
    return;
  const CommandFields f = fields_of(c);
  last_end = trace::ticks();
  if constexpr (std::is_same_v<C, protocol::cmd::Put>) {
    trace_command(rec.tracer, f, current_begin, last_end, failed, &c.meta,
                  c.meta.numel() * static_cast<int64_t>(element_size(c.meta.dtype)));
  } else if constexpr (std::is_same_v<C, protocol::cmd::Free>) {
    trace_command(rec.tracer, f, current_begin, last_end, failed, nullptr, 0,
                  traced_meta ? &*traced_meta : nullptr);
  } else {
    trace_command(rec.tracer, f, current_begin, last_end, failed);
  }
}

// ---- tasks to runners (executor threads) ----

bool Session::Impl::execute(StreamQueue& s, const StreamQueuePtr& self, Task& t) {
  return std::visit(
      [&](auto c) {
        if constexpr (std::is_pointer_v<decltype(c)>)
          return run(s, self, t, *c);
        else
          return run(s, self, t, c);
      },
      t.cmd);
}

bool Session::Impl::run(StreamQueue&, const StreamQueuePtr&, Task&, std::monostate) {
  return true;
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
  std::optional<protocol::RemoteFailure> failure;
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
