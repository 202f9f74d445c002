// Streams and events: CreateStream and DestroyStream (at dispatch), Record (on its stream,
// or at once on an idle one), WaitEvent (its stream waits for the event's latest record),
// EventQuery and EventSync (answered by the event), DestroyEvent. The events themselves
// are worker/events.hpp's. Part of Session::Impl (worker/session_impl.hpp).
#include <fmt/format.h>

#include <optional>
#include <string>

#include "worker/session_impl.hpp"

namespace dtr::worker {

namespace cmd = protocol::cmd;
using namespace detail;

void Session::Impl::on(const cmd::CreateStream& c) {
  if (std::optional<std::string> problem = streams.create(c.stream))
    failures.root(protocol::kNoTensor, "create_stream", std::move(*problem));
}

void Session::Impl::on(const cmd::DestroyStream& c) {
  if (std::optional<std::string> problem = streams.destroy(c.stream))
    failures.root(protocol::kNoTensor, "destroy_stream", std::move(*problem));
}

void Session::Impl::on(const cmd::Record& c) {
  StreamQueuePtr stream = stream_of(c);
  if (!stream) return;
  std::string problem;
  EventPtr e = events.for_record(c.event, &problem);
  if (!e) {
    failures.root(protocol::kNoTensor, "record_event", std::move(problem));
    return;
  }
  Task t = task(c);
  t.target = ++e->issued;
  t.event = std::move(e);
  // On an idle stream the record is done at once (so that a query right after it sees an
  // idle stream as done). Only this thread makes an idle stream run.
  if (streams.idle_now(stream)) return run_record(*stream, *t.event, t.target, failures, outbox);
  streams.stage(stream, std::move(t));
}

bool Session::Impl::run(StreamQueue& s, const StreamQueuePtr&, Task& t, const cmd::Record&) {
  run_record(s, *t.event, t.target, failures, outbox);
  return true;
}

void Session::Impl::on(const cmd::WaitEvent& c) {
  StreamQueuePtr stream = stream_of(c);
  if (!stream) return;
  EventPtr e = event_of(c);
  if (!e) return;
  Task t = task(c);
  t.target = e->issued;
  t.event = std::move(e);
  streams.stage(stream, std::move(t));
}

bool Session::Impl::run(StreamQueue&, const StreamQueuePtr& self, Task& t, const cmd::WaitEvent&) {
  return t.event->reached_or_park(t.target, self);
}

void Session::Impl::on(const cmd::EventQuery& c) {
  if (EventPtr e = event_of(c)) answer_event(*e, c.request, false);
}

void Session::Impl::on(const cmd::EventSync& c) {
  if (EventPtr e = event_of(c)) answer_event(*e, c.request, true);
}

void Session::Impl::answer_event(EventState& e, uint64_t request, bool sync) {
  if (auto status = e.answer(request, sync))
    outbox.reply_event(request, status->done, status->time_ns, status->failure);
}

void Session::Impl::on(const cmd::DestroyEvent& c) {
  if (!events.erase(c.event))
    failures.root(protocol::kNoTensor, "destroy_event",
                  fmt::format("event {} was never recorded on this worker", c.event));
}

}  // namespace dtr::worker
