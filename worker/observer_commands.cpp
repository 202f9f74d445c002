// The observability commands (docs/observability.md), answered at dispatch: ClockSync
// (the worker's clock), Trace (start; stop, a barrier: worker/barrier_commands.cpp;
// collect), FlightDump (the flight recorder) and Metrics (the live figures). Part of
// Session::Impl (worker/session_impl.hpp).
#include <optional>
#include <vector>

#include "common/trace_clock.hpp"
#include "worker/session_impl.hpp"

namespace dtr::worker {

namespace cmd = protocol::cmd;
using protocol::TensorId;
using namespace detail;

void Session::Impl::on(const cmd::ClockSync& c) {
  protocol::reply::Clock r;
  r.request = c.request;
  r.time_ns = trace::steady_ns();
  outbox.reply(std::move(r));
}

void Session::Impl::on(const cmd::Trace& c) {
  switch (c.action) {
    case protocol::TraceAction::Start: {
      rec.tracer.start();
      protocol::reply::Trace r;
      r.request = c.request;
      outbox.reply(std::move(r));
      return;
    }
    case protocol::TraceAction::Stop:  // once every stream has run what came before
      return barrier(&c);
    case protocol::TraceAction::Collect: {
      protocol::reply::Trace r;
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
      outbox.reply(std::move(r));
      return;
    }
  }
}

void Session::Impl::on(const cmd::FlightDump& c) {
  protocol::reply::Flight r;
  r.request = c.request;
  r.flight = rec.flight.dump("asked by the master");
  outbox.reply(std::move(r));
}

void Session::Impl::on(const cmd::Metrics& c) {
  protocol::reply::Metrics r;
  r.request = c.request;
  r.metrics = session_metrics();
  outbox.reply(std::move(r));
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

}  // namespace dtr::worker
