// The worker's recorder parts on their own (worker/flight_recorder.hpp, worker/tracer.hpp,
// worker/recorder.hpp): the flight recorder's ring and states, the tracer's slices and
// their collection in parts, its budget, and the Prometheus text of a node's figures.
#include <doctest/doctest.h>

#include <string>
#include <thread>
#include <vector>

#include "common/flight_text.hpp"
#include "common/trace_clock.hpp"
#include "worker/recorder.hpp"

namespace {

using namespace dtr;
using namespace dtr::worker::detail;
using protocol::CmdType;
using protocol::FlightState;
using protocol::WaitKind;

// A batch of `n` ops: add out %(first + i) in %(first + i - 1), on `stream`.
std::shared_ptr<protocol::Batch> adds(size_t n, protocol::TensorId first, uint32_t stream = 0) {
  auto b = std::make_shared<protocol::Batch>();
  for (size_t i = 0; i < n; ++i) {
    protocol::cmd::RunOp c{.stream = stream, .op = OpId::add, .out = first + i};
    c.inputs.n = 2;
    c.inputs.ids[0] = first + i - 1;
    c.inputs.ids[1] = 5;
    b->commands.push_back(c);
  }
  return b;
}

TEST_CASE("flight recorder: the last N commands, oldest first, with their states") {
  FlightRecorder r(16);
  CHECK(r.capacity() == 16);
  for (int batch = 0; batch < 4; ++batch) {  // 40 commands in batches of 10
    uint64_t seq = r.add_batch(adds(10, 101 + 10 * batch), 1'000'000 + batch);
    CHECK(seq == 1 + 10 * static_cast<uint64_t>(batch));
    for (int i = 0; i < 10; ++i) r.dispatched(seq + i, FlightState::Done);
  }
  protocol::FlightSnapshot d = r.dump("test");
  CHECK(d.reason == "test");
  CHECK(d.total == 40);
  CHECK(d.capacity == 16);
  REQUIRE(d.records.size() == 16);
  for (size_t i = 0; i < 16; ++i) {
    CHECK(d.records[i].seq == 25 + i);
    CHECK(d.records[i].out == 125 + i);
    CHECK(d.records[i].in0 == 124 + i);
    CHECK(d.records[i].in1 == 5);
    CHECK(d.records[i].kind == CmdType::RunOp);
    CHECK(d.records[i].op == OpId::add);
    CHECK(d.records[i].state == FlightState::Done);
    CHECK(d.records[i].queued_ns == d.records[i].started_ns);  // done at dispatch
  }
  CHECK(d.records[0].queued_ns == 1'000'002);
  CHECK(FlightRecorder(5).capacity() == 16);  // at least 16, a power of two
  CHECK(FlightRecorder(100).capacity() == 128);
}

TEST_CASE("flight recorder: a task's way, and updates of a reused slot change nothing") {
  FlightRecorder r(16);
  uint64_t seq = r.add_batch(adds(1, 7, 3), 10'000);
  r.dispatched(seq, FlightState::Queued);
  CHECK(r.dump("").records[0].state == FlightState::Queued);
  CHECK(r.dump("").records[0].started_ns == 0);
  r.started(seq, 20'000);
  CHECK(r.dump("").records[0].state == FlightState::Running);
  r.waiting(seq, WaitKind::Tensor, 5, 30'000);
  protocol::FlightRecord w = r.dump("").records[0];
  CHECK(w.state == FlightState::Waiting);
  CHECK(w.wait == WaitKind::Tensor);
  CHECK(w.wait_on == 5);  // its second input
  CHECK(w.started_ns == 20'000);
  CHECK(w.stream == 3);
  r.waiting(seq, WaitKind::Tensor, 6, 30'000);
  CHECK(r.dump("").records[0].wait_on == 6);  // its first
  r.resumed(seq);
  CHECK(r.dump("").records[0].state == FlightState::Running);
  r.finished(seq, true, 40'000);
  protocol::FlightRecord f = r.dump("").records[0];
  CHECK(f.state == FlightState::Failed);
  CHECK(f.ended_ns == 40'000);
  r.started(seq, 50'000);  // a finished record stays finished
  CHECK(r.dump("").records[0].state == FlightState::Failed);
  // Command seq + 16 takes the slot; late updates of `seq` are ignored.
  uint64_t next = r.add_batch(adds(16, 200), 60'000);
  for (int i = 0; i < 16; ++i) r.dispatched(next + i, FlightState::Queued);
  r.finished(seq, false, 70'000);
  protocol::FlightSnapshot d = r.dump("");
  REQUIRE(d.records.size() == 16);
  CHECK(d.records[0].seq == 2);
  CHECK(d.records.back().state == FlightState::Queued);
  CHECK(d.records.back().ended_ns == 0);
}

TEST_CASE("flight recorder: a wait the command names, and the text of it") {
  FlightRecorder r(16);
  auto b = std::make_shared<protocol::Batch>();
  b->commands.push_back(protocol::cmd::RecvPeer{.stream = 2,
                                                .out = 15,
                                                .meta = TensorMeta::contiguous(DType::Float32, {2}),
                                                .peer = 1,
                                                .token = 77});
  uint64_t seq = r.add_batch(b, trace::steady_ns() - 2'000'000'000);
  r.dispatched(seq, FlightState::Queued);
  r.waiting(seq, WaitKind::None, 0, trace::steady_ns() - 1'500'000'000);
  protocol::FlightSnapshot d = r.dump("node 1 was lost");
  REQUIRE(d.records.size() == 1);
  CHECK(d.records[0].wait == WaitKind::Peer);
  CHECK(d.records[0].wait_on == 77);
  CHECK(d.records[0].peer == 1);
  std::string text = common::describe(d);
  INFO(text);
  CHECK(text.find("#1 recv_from_node out %15 on stream 2: waiting for token 77 from node 1 for "
                  "1.5 s") != std::string::npos);
}

TEST_CASE("flight recorder: concurrent updates and dumps are consistent") {
  FlightRecorder r(64);
  std::atomic<bool> stop{false};
  std::thread dumper([&] {
    while (!stop.load()) {
      for (const protocol::FlightRecord& f : r.dump("").records) CHECK(f.out == f.seq + 1000);
    }
  });
  for (int batch = 0; batch < 200; ++batch) {
    uint64_t seq = r.add_batch(adds(100, 1001 + 100 * static_cast<uint64_t>(batch)), 1);
    for (uint64_t i = 0; i < 100; ++i) {
      r.dispatched(seq + i, FlightState::Queued);
      r.finished(seq + i, false, 2);
    }
  }
  stop.store(true);
  dumper.join();
  CHECK(r.total() == 20000);
}

std::vector<protocol::TraceEvent> collect_all(Tracer& t, size_t part = 1000) {
  std::vector<protocol::TraceEvent> all;
  for (int guard = 0; guard < 100000; ++guard) {
    protocol::TraceChunk c = t.collect(part);
    all.insert(all.end(), c.events.begin(), c.events.end());
    if (!c.more) break;
  }
  return all;
}

TEST_CASE("tracer: slices from several threads, collected in parts on the steady clock") {
  Tracer t(size_t{64} << 20);
  CHECK_FALSE(t.on());
  Tracer::Slice s;
  t.record(s, {});  // off: nothing
  t.start();
  CHECK(t.on());
  const int64_t before = trace::steady_ns();
  TensorMeta m = TensorMeta::contiguous(DType::Float16, {3, 5});
  auto work = [&](uint32_t stream) {
    for (int i = 0; i < 2000; ++i) {
      Tracer::Slice sl;
      sl.kind = CmdType::RunOp;
      sl.op = static_cast<uint16_t>(OpId::mul);
      sl.stream = stream;
      sl.begin = trace::ticks();
      sl.end = trace::ticks();
      sl.bytes = 30;
      sl.inputs = 1;
      Tracer::TensorRef refs[2] = {{static_cast<uint64_t>(i) + 1, &m}, {1000000, nullptr}};
      t.record(sl, refs);
    }
  };
  std::thread a(work, 1), b(work, 2);
  a.join();
  b.join();
  t.stop();
  const int64_t after = trace::steady_ns();
  std::vector<protocol::TraceEvent> all = collect_all(t, 777);
  REQUIRE(all.size() == 4000);
  int64_t last[3] = {0, 0, 0};
  int64_t next_id[3] = {1, 1, 1};
  for (const protocol::TraceEvent& e : all) {
    REQUIRE((e.stream == 1 || e.stream == 2));
    CHECK(e.op == OpId::mul);
    CHECK(e.begin_ns >= before - 1'000'000);
    CHECK(e.end_ns <= after + 1'000'000);
    CHECK(e.begin_ns >= last[e.stream]);  // each thread's slices in order
    last[e.stream] = e.begin_ns;
    REQUIRE(e.tensors.size() == 2);
    CHECK(e.tensors[0].id == static_cast<uint64_t>(next_id[e.stream]++));
    CHECK(e.tensors[0].shaped);
    CHECK(e.tensors[0].meta == m);
    CHECK_FALSE(e.tensors[1].shaped);
    CHECK(e.inputs == 1);
  }
  // Collected: the memory went; a second collection is empty.
  CHECK(collect_all(t).empty());
}

TEST_CASE("tracer: past its budget slices are dropped and counted, and a start forgets") {
  Tracer t(trace::ThreadLog::kChunkBytes);  // one chunk
  t.start();
  Tracer::Slice sl;
  for (int i = 0; i < 10000; ++i) {
    sl.begin = sl.end = trace::ticks();
    t.record(sl, {});
  }
  t.stop();
  const uint64_t dropped = t.dropped();
  CHECK(dropped > 0);
  protocol::TraceChunk c = t.collect(100000);
  CHECK(c.events.size() + c.dropped == 10000);
  CHECK(c.dropped == dropped);
  t.start();
  CHECK(t.dropped() == 0);
  t.stop();
  CHECK(t.collect(10).events.empty());
  // A session that ends with a trace recorded: cleared, off, nothing left.
  t.start();
  sl.begin = sl.end = trace::ticks();
  t.record(sl, {});
  t.clear();
  CHECK_FALSE(t.on());
  CHECK(t.collect(10).events.empty());
}

TEST_CASE("recorder: the figures and their Prometheus text") {
  Recorder r;
  r.counters.count_command(CmdType::RunOp);
  r.counters.count_command(CmdType::RunOp);
  r.counters.add_bytes<protocol::cmd::Put>(4096);
  r.counters.sessions.store(3);
  r.counters.refused.store(2);
  protocol::NodeMetrics m;
  r.fill(m);
  m.queues = {{0, 5}};
  m.devices = {{-1, 7, 1024}};
  m.threads = 4;
  std::string text = prometheus_text(m, "host:1\"x");
  INFO(text);
  auto has = [&](const std::string& line) { return text.find(line + "\n") != std::string::npos; };
  CHECK(has("# TYPE dtr_worker_commands_total counter"));
  CHECK(has(R"(dtr_worker_commands_total{worker="host:1\"x",kind="op"} 2)"));
  CHECK(has(R"(dtr_worker_commands_total{worker="host:1\"x",kind="sync"} 0)"));
  // One series per kind: WaitEvent and WaitRemote are told apart.
  CHECK(has(R"(dtr_worker_commands_total{worker="host:1\"x",kind="wait_event"} 0)"));
  CHECK(has(R"(dtr_worker_commands_total{worker="host:1\"x",kind="wait_remote"} 0)"));
  CHECK(has(R"(dtr_worker_bytes_total{worker="host:1\"x",kind="put"} 4096)"));
  CHECK(has(R"(dtr_worker_stream_queue_depth{worker="host:1\"x",stream="0"} 5)"));
  CHECK(has(R"(dtr_worker_live_tensors{worker="host:1\"x",device="cpu"} 7)"));
  CHECK(has(R"(dtr_worker_bytes_in_use{worker="host:1\"x",device="cpu"} 1024)"));
  CHECK(has(R"(dtr_worker_sessions_total{worker="host:1\"x"} 3)"));
  CHECK(has(R"(dtr_worker_refused_connections_total{worker="host:1\"x"} 2)"));
  CHECK(has(R"(dtr_worker_executor_threads{worker="host:1\"x"} 4)"));
  // No session: no heartbeat age.
  CHECK(text.find("dtr_worker_master_heartbeat_age_seconds{") == std::string::npos);
  // The memory limit: absent without one, in bytes with one.
  CHECK(text.find("dtr_worker_memory_limit_bytes{") == std::string::npos);
  set_cpu_memory_limit(int64_t{1} << 30);
  text = prometheus_text(m, "w");
  set_cpu_memory_limit(0);
  CHECK(has(R"(dtr_worker_memory_limit_bytes{worker="w",device="cpu"} 1073741824)"));
}

}  // namespace
