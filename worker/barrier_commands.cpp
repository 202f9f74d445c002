// Barriers over every stream (the commands whose structs say kBarrier: Sync, Stats, and
// Trace when it stops): one task on each stream, live or retired (worker/streams.hpp); the
// last stream to reach it sends the reply, which says what every stream ran before it.
// Part of Session::Impl (worker/session_impl.hpp).
#include <fmt/format.h>

#include <memory>
#include <mutex>
#include <string>

#include "worker/session_impl.hpp"

namespace dtr::worker {

namespace cmd = protocol::cmd;
using namespace detail;

void Session::Impl::on(const cmd::Sync& c) {
  barrier(&c);
}

void Session::Impl::on(const cmd::Stats& c) {
  if (c.device >= options.devices) {
    protocol::reply::ProtocolError r;
    r.request = c.request;
    r.message = fmt::format("memory_stats: this node has no CUDA device {} (it has {})", c.device,
                            options.devices);
    outbox.reply(std::move(r));
    return;
  }
  barrier(&c);
}

void Session::Impl::barrier(BarrierCommand c) {
  auto b = std::make_shared<Barrier>();
  b->flight = current_seq;
  b->cmd = c;
  b->live_tensors = static_cast<int64_t>(table.size());
  if (std::holds_alternative<const cmd::Stats*>(c)) b->graphs = graphs.all();
  streams.barrier(b);
}

bool Session::Impl::run(StreamQueue& s, const StreamQueuePtr&, Task& t, BarrierArrival) {
  if (arrive(s, *t.barrier))
    finish_barrier(*t.barrier);
  else
    rec.flight.waiting(t.barrier->flight, protocol::WaitKind::Streams, 0,
                       FlightRecorder::coarse_now_ns());
  return true;
}

void Session::Impl::finish_barrier(Barrier& b) {
  rec.flight.finished(b.flight, false, FlightRecorder::coarse_now_ns());
  std::visit([&](auto c) { finish(b, *c); }, b.cmd);
}

void Session::Impl::finish(Barrier& b, const cmd::Sync& c) {
  protocol::reply::Sync r;
  r.request = c.request;
  std::string device_failure;
  {
    std::lock_guard lock(b.mu);
    device_failure = b.device_failure;
  }
  r.failures = failures.take_for_sync(device_failure);
  outbox.reply(std::move(r));
}

void Session::Impl::finish(Barrier& b, const cmd::Stats& c) {
  GraphMemory g = graph_memory(b.graphs, c.device);
  outbox.reply(stats_reply(c.request, c.device, b.live_tensors, g.bytes, g.tensors));
}

// Trace's Stop: every stream has run what came before.
void Session::Impl::finish(Barrier&, const cmd::Trace& c) {
  rec.tracer.stop();
  protocol::reply::Trace r;
  r.request = c.request;
  // The slices follow on Collect, on the dispatch thread (which may read the tensors).
  r.trace.more = true;
  r.trace.dropped = rec.tracer.dropped();
  outbox.reply(std::move(r));
}

}  // namespace dtr::worker
