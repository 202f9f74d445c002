// Observability of a worker::Session (docs/observability.md): a traced batch (every
// command a slice on its stream, in order, with tensors, bytes and the arrows of copies and
// cross-node waits), the flight recorder naming what waits on what, the live figures, the
// clock, and the dump a lost peer makes.
#include <doctest/doctest.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "common/flight_text.hpp"
#include "common/trace_clock.hpp"
#include "protocol/codec.hpp"
#include "worker/session.hpp"

namespace {

using namespace dtr;
using protocol::Batch;
using protocol::CmdType;
using protocol::Command;
using protocol::Reply;
namespace reply = protocol::reply;
using protocol::TraceEvent;
using protocol::TraceFlow;
namespace cmd = protocol::cmd;

struct Rig {
  Rig() : session([this](worker::Outgoing&& o) { keep(std::move(o)); }, options()) {}
  static worker::SessionOptions options() {
    worker::SessionOptions o;
    o.threads = 2;
    return o;
  }
  void keep(worker::Outgoing&& o) {
    std::lock_guard lock(mu);
    (o.peer < 0 ? replies : peers).push_back(std::move(o));
  }
  // Runs the commands (payload frames: `frames`), waits until the streams have run what
  // they can; the replies to the master, decoded.
  std::vector<Reply> run(std::vector<Command> commands) {
    auto b = std::make_shared<Batch>();
    b->commands = std::move(commands);
    session.run(b, frames);
    frames.clear();
    REQUIRE(session.wait_idle(std::chrono::seconds(30)));
    std::lock_guard lock(mu);
    std::vector<Reply> out;
    for (auto& o : replies) out.push_back(protocol::decode_reply(o.header, o.payloads.size()));
    replies.clear();
    return out;
  }
  // The one reply of type R among `rs`.
  template <class R>
  static R only(const std::vector<Reply>& rs) {
    std::vector<R> of;
    for (const Reply& r : rs)
      if (const R* x = std::get_if<R>(&r)) of.push_back(*x);
    REQUIRE(of.size() == 1);
    return of[0];
  }
  uint32_t frame_of(const local::Tensor& t) {
    auto bytes = std::make_shared<std::vector<char>>(static_cast<size_t>(t.numel()) * 4);
    std::memcpy(bytes->data(), t.raw_data(), bytes->size());
    frames.push_back(worker::PayloadFrame{bytes->data(), bytes->size(), bytes});
    return static_cast<uint32_t>(frames.size());
  }

  std::mutex mu;
  std::vector<worker::Outgoing> replies, peers;
  std::vector<worker::PayloadFrame> frames;
  worker::Session session;
};

cmd::RunOp run_op(OpId id, protocol::TensorId out, std::vector<protocol::TensorId> in,
                  uint32_t stream = 0) {
  cmd::RunOp c{.stream = stream, .op = id, .out = out};
  c.inputs.n = static_cast<uint8_t>(in.size());
  for (size_t i = 0; i < in.size(); ++i) c.inputs.ids[i] = in[i];
  return c;
}

protocol::PeerNotify notify(uint64_t token) {
  protocol::PeerNotify n;
  n.session = 5;
  n.from_node = 1;
  n.token = token;
  return n;
}

// The names of stream `stream`'s own slices (not the dispatch track's), in time order,
// notifications left out.
std::vector<std::string> stream_names(const std::vector<TraceEvent>& events, uint32_t stream) {
  std::vector<const TraceEvent*> on;
  for (const TraceEvent& e : events)
    if (e.stream == stream && e.device < 0 && !e.dispatched && e.kind != CmdType::NotifyPeer)
      on.push_back(&e);
  std::sort(on.begin(), on.end(), [](auto* a, auto* b) { return a->begin_ns < b->begin_ns; });
  std::vector<std::string> names;
  for (auto* e : on) names.push_back(common::event_name(e->kind, static_cast<uint16_t>(e->op)));
  return names;
}

TEST_CASE("observability: a traced batch, every command a slice on its stream with arrows") {
  Rig r;
  r.session.setup(0, 2, 5);
  reply::Trace started = Rig::only<reply::Trace>(
      r.run({cmd::Trace{.action = protocol::TraceAction::Start, .request = 1}}));
  CHECK(started.trace.events.empty());
  const uint32_t x = r.frame_of(local::ones({2, 3}));
  r.run({cmd::CreateStream{.stream = 1},
         cmd::Put{.out = 1, .meta = TensorMeta::contiguous(DType::Float32, {2, 3}), .payload = x},
         run_op(OpId::add, 2, {1, 1}),                       // inline, on stream 0
         run_op(OpId::matmul, 3, {2, 2}, 1),                 // a task on stream 1 (bad shapes)
         cmd::Record{.stream = 1, .event = 9},               // after it, on stream 1
         cmd::WaitEvent{.event = 9},                         // stream 0 waits for stream 1
         cmd::SendPeer{.input = 2, .peer = 1, .token = 77},  // a copy to node 1
         cmd::WaitRemote{.stream = 1, .peer = 1, .token = 78},
         cmd::NotifyPeer{.event = 9, .peer = 1, .token = 79}});
  CHECK(r.session.notify(notify(78)));  // node 1's notification: stream 1 goes on
  reply::Trace stopped = Rig::only<reply::Trace>(
      r.run({cmd::Trace{.action = protocol::TraceAction::Stop, .request = 2}}));
  CHECK(stopped.request == 2);
  CHECK(stopped.trace.more);  // the slices follow on Collect
  CHECK(stopped.trace.events.empty());
  CHECK(stopped.trace.dropped == 0);
  reply::Trace all = Rig::only<reply::Trace>(
      r.run({cmd::Trace{.action = protocol::TraceAction::Collect, .request = 3}}));
  CHECK_FALSE(all.trace.more);
  stopped.trace = all.trace;
  std::map<std::string, std::vector<TraceEvent>> by_name;
  for (const TraceEvent& e : stopped.trace.events) {
    CHECK(e.end_ns >= e.begin_ns);
    by_name[common::event_name(e.kind, static_cast<uint16_t>(e.op))].push_back(e);
  }
  for (const char* name : {"create_stream", "put", "add", "matmul", "record_event", "wait_event",
                           "send_to_node", "notify_peer"}) {
    CAPTURE(name);
    CHECK(by_name.count(name) == 1);
  }
  REQUIRE(by_name["add"].size() == 1);
  const TraceEvent& add = by_name["add"][0];
  CHECK(add.stream == 0);
  CHECK(add.bytes == 24);
  REQUIRE(add.tensors.size() == 3);
  CHECK(add.inputs == 2);
  CHECK(add.tensors[2].id == 2);
  CHECK(add.tensors[2].meta.shape == Shape{2, 3});
  // Its inputs, named by id at dispatch, got their shapes at collection (from the put).
  CHECK(add.tensors[0].id == 1);
  CHECK(add.tensors[0].shaped);
  CHECK(add.tensors[0].meta.shape == Shape{2, 3});
  const TraceEvent& mm = by_name["matmul"].at(0);
  CHECK(mm.stream == 1);
  CHECK(mm.failed);  // [2,3] @ [2,3]
  // Both waits: the local one (event 9) and the cross-node one, which ends an arrow.
  REQUIRE(by_name["wait_event"].size() == 2);
  bool local = false, remote = false;
  for (const TraceEvent& w : by_name["wait_event"]) {
    if (w.kind == CmdType::WaitEvent) local = w.stream == 0 && w.detail == 9;
    if (w.kind == CmdType::WaitRemote)
      remote = w.stream == 1 && w.flow == TraceFlow::In && w.flow_id == 78 && w.peer == 1;
  }
  CHECK(local);
  CHECK(remote);
  const TraceEvent& send = by_name["send_to_node"].at(0);
  CHECK(send.flow == TraceFlow::Out);
  CHECK(send.flow_id == 77);
  CHECK(send.bytes == 24);
  const TraceEvent& notified = by_name["notify_peer"].at(0);
  CHECK(notified.flow == TraceFlow::Out);
  CHECK(notified.flow_id == 79);
  // Stream 1's slices in the order its commands ran (the notification inside the record).
  std::vector<std::string> want{"matmul", "record_event", "wait_event"};
  CHECK(stream_names(stopped.trace.events, 1) == want);
  // Collected: nothing more.
  reply::Trace more = Rig::only<reply::Trace>(
      r.run({cmd::Trace{.action = protocol::TraceAction::Collect, .request = 4}}));
  CHECK(more.trace.events.empty());
}

TEST_CASE("observability: the flight recorder says what waits on what, and the live figures") {
  Rig r;
  r.session.setup(0, 2, 5);
  const uint32_t x = r.frame_of(local::ones({4}));
  r.run({cmd::CreateStream{.stream = 3},
         cmd::Put{.out = 1, .meta = TensorMeta::contiguous(DType::Float32, {4}), .payload = x},
         cmd::RecvPeer{.stream = 3,
                       .out = 2,
                       .meta = TensorMeta::contiguous(DType::Float32, {4}),
                       .peer = 1,
                       .token = 40},
         run_op(OpId::neg, 3, {2}, 3), run_op(OpId::neg, 4, {1})});
  reply::Flight dump = Rig::only<reply::Flight>(r.run({cmd::FlightDump{.request = 5}}));
  CHECK(dump.request == 5);
  const protocol::FlightSnapshot& d = dump.flight;
  // The dump itself is recorded once answered: not in it.
  CHECK(d.total == 6);
  REQUIRE(d.records.size() == 5);
  CHECK(d.records[0].kind == CmdType::CreateStream);
  CHECK(d.records[2].kind == CmdType::RecvPeer);
  CHECK(d.records[2].state == protocol::FlightState::Waiting);
  CHECK(d.records[2].wait == protocol::WaitKind::Peer);
  CHECK(d.records[2].wait_on == 40);
  CHECK(d.records[3].state == protocol::FlightState::Queued);  // behind it on stream 3
  CHECK(d.records[4].state == protocol::FlightState::Done);
  std::string text = common::describe(d);
  INFO(text);
  CHECK(text.find("recv_from_node out %2 on stream 3: waiting for token 40 from node 1") !=
        std::string::npos);
  CHECK(text.find("neg out %3 in %2 on stream 3: queued for") != std::string::npos);

  reply::Metrics m = Rig::only<reply::Metrics>(r.run({cmd::Metrics{.request = 6}}));
  std::map<std::string, uint64_t> commands;
  for (const auto& c : m.metrics.commands)
    commands[std::string(protocol::command_type_name(c.kind))] = c.value;
  CHECK(commands["op"] == 2);
  CHECK(commands["recv_from_node"] == 1);
  CHECK(commands["metrics"] == 1);
  bool stream3 = false;
  for (const auto& q : m.metrics.queues) stream3 = stream3 || (q.stream == 3 && q.depth == 2);
  CHECK(stream3);
  REQUIRE(!m.metrics.devices.empty());
  CHECK(m.metrics.devices[0].device == -1);
  CHECK(m.metrics.devices[0].live_tensors == 2);  // %1 and %4 (%2, %3 not made yet)
  CHECK(m.metrics.threads == 2);
  uint64_t put_bytes = 0;
  for (const auto& b : m.metrics.bytes)
    if (b.kind == static_cast<uint8_t>(CmdType::Put)) put_bytes = b.value;
  CHECK(put_bytes == 16);

  // The peer is lost: its wait fails, and the master gets the dump unasked, first.
  std::vector<Reply> lost = r.run({cmd::NodeLost{.node = 1}});
  reply::Flight unasked = Rig::only<reply::Flight>(lost);
  CHECK(unasked.request == 0);
  CHECK(unasked.flight.reason == "node 1 was lost");
  bool named = false;
  for (const auto& f : unasked.flight.records)
    named = named || (f.kind == CmdType::RecvPeer && f.state == protocol::FlightState::Waiting);
  CHECK(named);
  reply::Flight after = Rig::only<reply::Flight>(r.run({cmd::FlightDump{.request = 7}}));
  CHECK(after.flight.records[2].state == protocol::FlightState::Failed);
}

TEST_CASE("observability: the clock reply is the worker's steady clock") {
  Rig r;
  const int64_t before = trace::steady_ns();
  reply::Clock c = Rig::only<reply::Clock>(r.run({cmd::ClockSync{.request = 4}}));
  CHECK(c.request == 4);
  CHECK(c.time_ns >= before);
  CHECK(c.time_ns <= trace::steady_ns());
}

}  // namespace
