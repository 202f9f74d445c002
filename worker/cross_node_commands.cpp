// What involves other nodes: NotifyPeer (a peer told when an event's record has run),
// WaitRemote (a stream waits for a peer's notification), SendPeer and RecvPeer (a copy
// worker to worker; their runs are worker/peer_copy.hpp's), NewGroup and Collective (the
// session's process groups; the run is worker/collectives.hpp's), and NodeLost (the master
// lost a node: what waits for it fails). Part of Session::Impl (worker/session_impl.hpp).
#include <fmt/format.h>

#include <optional>
#include <string>

#include "worker/peer_copy.hpp"
#include "worker/session_impl.hpp"
#include "worker/trace_slices.hpp"

namespace dtr::worker {

namespace cmd = protocol::cmd;
using protocol::RemoteFailure;
using namespace detail;

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
  StreamQueuePtr stream = stream_of(c);
  if (!stream) return;
  RemoteWaitPtr w = remote_wait(c, "wait_event", protocol::kNoTensor);
  if (!w) return;
  Task t = task(c);
  t.remote = std::move(w);
  streams.stage(stream, std::move(t));
}

bool Session::Impl::run(StreamQueue&, const StreamQueuePtr& self, Task& t, const cmd::WaitRemote&) {
  return t.remote->arrived_or_park(self);
}

void Session::Impl::on(const cmd::SendPeer& c) {
  StreamQueuePtr stream = stream_of(c);
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
  Task t = task(c);
  t.in[0] = std::move(in);
  streams.stage(stream, std::move(t));
}

bool Session::Impl::run(StreamQueue& s, const StreamQueuePtr& self, Task& t, const cmd::SendPeer&) {
  return run_send_peer(s, self, t, failures, outbox);
}

void Session::Impl::on(const cmd::RecvPeer& c) {
  StreamQueuePtr stream = stream_of(c);
  if (!stream) return;
  if (!table.check_new_id(c.out, "recv_from_node")) return;
  if (std::string problem = size_problem(c.meta); !problem.empty()) {
    table.set(c.out, Slot::failed_with(failures.root(c.out, "recv_from_node", problem)));
    return;
  }
  RemoteWaitPtr w = remote_wait(c, "recv_from_node", c.out);
  if (!w) return;
  Task t = task(c);
  t.remote = std::move(w);
  t.out = table.make_output(c.out);
  streams.stage(stream, std::move(t));
}

bool Session::Impl::run(StreamQueue& s, const StreamQueuePtr& self, Task& t, const cmd::RecvPeer&) {
  return run_recv_peer(s, self, t, failures, outbox);
}

void Session::Impl::on(const cmd::NewGroup& c) {
  if (std::optional<std::string> problem = groups.new_group(c, outbox.nodes()))
    failures.root(protocol::kNoTensor, "new_group", std::move(*problem));
}

void Session::Impl::on(const cmd::Collective& c) {
  StreamQueuePtr stream = stream_of(c);
  if (!stream) return;
  Task t = task(c);
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

bool Session::Impl::run(StreamQueue& s, const StreamQueuePtr& self, Task& t,
                        const cmd::Collective&) {
  return run_collective(s, self, t,
                        {groups, failures, options.collective_timeout, outbox.node(), rec, outbox});
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

}  // namespace dtr::worker
