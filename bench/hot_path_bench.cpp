// The execution core's CPU cost per command, in one process and without sockets: the
// master's encoding of a batch (protocol::BatchWriter), the worker's decoding of it
// (protocol::decode_batch) and the worker session's dispatch and execution of its
// commands (worker::Session::run), for the dispatch benchmark's command, `x.add_(1)` on a
// one-element float tensor, in batches of the size the master sends under load.
//
// Baseline in the same run: copying the batch's bytes (memcpy), the least any receiver of
// the frame does. Every rep's result is checked (x == number of adds run). The figures are
// ns per command; `valgrind --tool=callgrind` over this program gives instruction counts
// per command that do not depend on the machine's load (docs/performance.md).
//
// With --trace 1 the session records a timeline meanwhile (cmd::Trace Start before the
// reps; the slices are collected and counted after): the worker's cost of tracing.
//
// Usage: dtr_hot_path_bench [--ops N] [--batch N] [--reps N] [--trace 0|1]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "dtr/op_table.hpp"
#include "protocol/codec.hpp"
#include "worker/session.hpp"

namespace {

using namespace dtr;
using Clock = std::chrono::steady_clock;
namespace cmd = protocol::cmd;

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

struct Args {
  int64_t ops = 2'000'000;
  int64_t batch = 4096;
  int reps = 5;
  bool trace = false;
};

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string k = argv[i];
    int64_t v = std::atoll(argv[i + 1]);
    if (k == "--ops")
      a.ops = v;
    else if (k == "--batch")
      a.batch = v;
    else if (k == "--reps")
      a.reps = static_cast<int>(v);
    else if (k == "--trace")
      a.trace = v != 0;
    else {
      std::fprintf(stderr, "usage: %s [--ops N] [--batch N] [--reps N] [--trace 0|1]\n", argv[0]);
      std::exit(2);
    }
  }
  if (a.ops <= 0 || a.batch <= 0 || a.reps <= 0) {
    std::fprintf(stderr, "--ops, --batch and --reps must be positive\n");
    std::exit(2);
  }
  return a;
}

protocol::Command add_one(protocol::TensorId x) {
  cmd::RunOp c{.op = OpId::add, .inplace = true};
  c.inputs.n = 1;
  c.inputs.ids[0] = x;
  c.attrs.scalars[0] = Scalar(1);
  return c;
}

// One encoded batch of `n` commands (the same frame every time: x.add_(1)).
std::string encode_batch(protocol::BatchWriter& w, const protocol::Command& c, int64_t n) {
  for (int64_t i = 0; i < n; ++i) w.add(c);
  return w.finish();
}

// Runs a cmd::Trace on the session; its reply.
protocol::reply::Trace trace(worker::Session& session, std::vector<worker::Outgoing>& sent,
                             protocol::TraceAction action) {
  protocol::Batch b;
  b.commands.push_back(cmd::Trace{.action = action, .request = 9});
  sent.clear();
  session.run(std::make_shared<protocol::Batch>(protocol::decode_batch(protocol::encode(b), 0)),
              {});
  session.wait_idle(std::chrono::seconds(60));
  return sent.size() == 1
             ? std::get<protocol::reply::Trace>(protocol::decode_reply(sent[0].header, 0))
             : protocol::reply::Trace{};
}

// Stops the trace and collects it: the slices recorded and dropped.
size_t collect_trace(worker::Session& session, std::vector<worker::Outgoing>& sent) {
  protocol::reply::Trace r = trace(session, sent, protocol::TraceAction::Stop);
  size_t slices = r.trace.events.size();
  while (r.trace.more) {
    r = trace(session, sent, protocol::TraceAction::Collect);
    slices += r.trace.events.size();
  }
  std::printf("  traced: %zu slices, %llu dropped\n", slices,
              static_cast<unsigned long long>(r.trace.dropped));
  return slices + r.trace.dropped;
}

}  // namespace

int main(int argc, char** argv) {
  Args a = parse(argc, argv);
  const int64_t batches = (a.ops + a.batch - 1) / a.batch;
  const int64_t ops = batches * a.batch;
  std::printf("hot path: %lld x.add_(1) in batches of %lld, %d reps; ns per command\n",
              static_cast<long long>(ops), static_cast<long long>(a.batch), a.reps);

  // The session: one tensor x = zeros({1}) (id 1), made by a first batch.
  std::vector<worker::Outgoing> sent;
  worker::Session session([&](worker::Outgoing&& o) { sent.push_back(std::move(o)); },
                          [] {
                            worker::SessionOptions o;
                            o.threads = 1;
                            return o;
                          }());
  {
    protocol::Batch b;
    cmd::RunOp make{.op = OpId::full, .out = 1};
    make.attrs = creation::full(Shape{1}, Scalar(0.0), DType::Float32);
    b.commands.push_back(make);
    std::string frame = protocol::encode(b);
    session.run(std::make_shared<protocol::Batch>(protocol::decode_batch(frame, 0)), {});
    // From here on the stream is idle when each batch arrives, as on a worker that keeps
    // up with its master: the adds run on the dispatch thread (Session::run).
    session.wait_idle(std::chrono::seconds(60));
  }
  if (a.trace) trace(session, sent, protocol::TraceAction::Start);
  const protocol::Command c = add_one(1);
  protocol::BatchWriter writer;
  const std::string frame = encode_batch(writer, c, a.batch);
  std::printf("  frame: %zu bytes, %.1f bytes per command\n", frame.size(),
              static_cast<double>(frame.size()) / static_cast<double>(a.batch));

  std::vector<double> enc_ns, dec_ns, run_ns, copy_ns;
  std::string sink(frame.size(), '\0');
  int64_t adds = 0;
  bool ok = true;
  for (int r = 0; r < a.reps; ++r) {
    auto t0 = Clock::now();
    size_t bytes = 0;
    for (int64_t b = 0; b < batches; ++b) bytes += encode_batch(writer, c, a.batch).size();
    auto t1 = Clock::now();
    if (bytes != frame.size() * static_cast<size_t>(batches)) ok = false;
    // Each batch decoded, then run, as the worker does (its memory stays warm).
    Clock::duration decode{}, run{};
    for (int64_t b = 0; b < batches; ++b) {
      auto d0 = Clock::now();
      auto decoded = std::make_shared<protocol::Batch>(protocol::decode_batch(frame, 0));
      auto d1 = Clock::now();
      session.run(std::move(decoded), {});
      decode += d1 - d0;
      run += Clock::now() - d1;
    }
    session.wait_idle(std::chrono::seconds(60));
    auto t4 = Clock::now();
    for (int64_t b = 0; b < batches; ++b) {
      std::memcpy(sink.data(), frame.data(), frame.size());
      asm volatile("" : : "r"(sink.data()) : "memory");
    }
    auto t5 = Clock::now();
    adds += ops;
    auto per = [&](Clock::time_point x, Clock::time_point y) {
      return std::chrono::duration<double, std::nano>(y - x).count() / static_cast<double>(ops);
    };
    auto per_op = [&](Clock::duration d) {
      return std::chrono::duration<double, std::nano>(d).count() / static_cast<double>(ops);
    };
    enc_ns.push_back(per(t0, t1));
    dec_ns.push_back(per_op(decode));
    run_ns.push_back(per_op(run));
    copy_ns.push_back(per(t4, t5));
  }

  if (a.trace && static_cast<int64_t>(collect_trace(session, sent)) < adds)
    ok = false;  // every add_ is a slice
  // Check: x == adds, read through a Get.
  protocol::Batch get;
  get.commands.push_back(cmd::Get{.input = 1, .request = 7});
  sent.clear();
  session.run(std::make_shared<protocol::Batch>(protocol::decode_batch(protocol::encode(get), 0)),
              {});
  session.wait_idle(std::chrono::seconds(60));
  float value = -1;
  if (sent.size() == 1 && sent[0].payloads.size() == 1)
    value = *static_cast<const float*>(sent[0].payloads[0].raw_data());
  // float32 counts exactly up to 2^24.
  bool value_ok = adds > (int64_t{1} << 24) || value == static_cast<float>(adds);
  std::printf("  %-34s %8.1f\n", "master encode (BatchWriter)", median(enc_ns));
  std::printf("  %-34s %8.1f\n", "worker decode (decode_batch)", median(dec_ns));
  std::printf("  %-34s %8.1f\n", "worker run (Session::run)", median(run_ns));
  std::printf("  %-34s %8.1f\n", "worker decode + run", median(dec_ns) + median(run_ns));
  std::printf("  %-34s %8.2f\n", "memcpy of the frame (baseline)", median(copy_ns));
  std::printf("  check x == %lld: %s (x = %.0f)\n", static_cast<long long>(adds),
              value_ok ? "ok" : "FAILED", static_cast<double>(value));
  std::printf(
      "RESULT {\"bench\":\"hot_path\",\"ops\":%lld,\"batch\":%lld,\"encode_ns\":%.2f,"
      "\"decode_ns\":%.2f,\"run_ns\":%.2f,\"memcpy_ns\":%.3f}\n",
      static_cast<long long>(ops), static_cast<long long>(a.batch), median(enc_ns), median(dec_ns),
      median(run_ns), median(copy_ns));
  return ok && value_ok ? 0 : 1;
}
