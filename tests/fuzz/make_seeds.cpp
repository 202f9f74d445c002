// Writes the seed corpus of the fuzz targets, encoded with the real encoders:
//   <out>/worker_batch/seed-*   prefix (payload count, flags, token, payload seed, sizes)
//                               and a batch header: every command type, every op of the
//                               table, streams and events, peer waits and copies, collectives
//   <out>/codec/seed-*          payload count and a frame of every message type
//   <out>/graph_upload/seed-*   control byte and a batch of graph uploads (every kind of
//                               command a graph holds, refused uploads), replays and frees
//   <out>/<target>/regress-*    minimal reproducers of the fixed findings (docs/fuzzing.md)
//   <findings>/<target>/open-*  reproducers of open findings (kept out of the corpus)
// Usage: fuzz_make_seeds OUT_DIR [FINDINGS_DIR]
//   (scripts/fuzz.sh --seeds runs it into tests/fuzz/corpus and tests/fuzz/findings)
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>
#include <string>
#include <vector>

#include "dtr/op_table.hpp"
#include "protocol/codec.hpp"
#include "protocol/messages.hpp"

namespace {

namespace fs = std::filesystem;
using namespace dtr;
using namespace dtr::protocol;

// Flags of fuzz_worker_batch.cpp's input prefix.
constexpr uint8_t kNoSetup = 1 << 0;
constexpr uint8_t kNotifyBefore = 1 << 1;
constexpr uint8_t kNotifyAfter = 1 << 2;
constexpr uint8_t kNotifyFailed = 1 << 3;
constexpr uint8_t kNotifyPayload = 1 << 4;
constexpr uint8_t kLoopBack = 1 << 6;
constexpr uint8_t kTwice = 1 << 7;

void write(const fs::path& p, const std::string& bytes) {
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (!out) {
    std::fprintf(stderr, "cannot write %s\n", p.c_str());
    std::exit(1);
  }
}

cmd::RunOp run_op(OpId op, TensorId out, std::vector<TensorId> inputs, OpAttrs attrs = {}) {
  cmd::RunOp c{.op = op, .out = out, .attrs = std::move(attrs)};
  for (TensorId id : inputs) c.inputs.push_back(id);
  return c;
}
cmd::RunOp inplace(OpId op, std::vector<TensorId> inputs, OpAttrs attrs = {}) {
  cmd::RunOp c = run_op(op, kNoTensor, std::move(inputs), std::move(attrs));
  c.inplace = true;
  return c;
}
cmd::Put put(TensorId out, DType dtype, Shape shape, uint32_t payload) {
  return cmd::Put{.out = out, .meta = TensorMeta::contiguous(dtype, shape), .payload = payload};
}
template <class C>
C with_input(TensorId input, uint64_t request = 0) {
  C c;
  c.input = input;
  if constexpr (requires { c.request; }) c.request = request;
  return c;
}
template <class C>
C request(uint64_t req) {
  C c;
  c.request = req;
  return c;
}
template <class C>
C on_stream(uint32_t stream) {
  C c;
  c.stream = stream;
  return c;
}
template <class C>
C event_cmd(uint64_t event, uint32_t stream = 0, uint64_t req = 0) {
  C c;
  c.event = event;
  c.stream = stream;
  if constexpr (requires { c.request; }) c.request = req;
  return c;
}
template <class C>
C peer_cmd(uint32_t peer, uint64_t token) {
  C c;
  c.peer = peer;
  c.token = token;
  return c;
}

// Attributes that make each op of the table valid on a float32 [4, 4] input (and a
// float32 [4] second input for the binary and linalg ops).
OpAttrs attrs_for(const OpDef& d) {
  OpAttrs a;
  std::string_view n = d.name;
  if (n == "view" || n == "reshape") a.ints = {2, -1};
  if (n == "transpose") a.ints = {0, 1};
  if (n == "permute") a.ints = {1, 0};
  if (n == "narrow") a.ints = {0, 1, 2};
  if (n == "slice") a.ints = {1, 0, 4, 2};
  if (n == "select") a.ints = {0, 3};
  if (n == "expand") a.ints = {2, 4, 4};
  if (n == "unsqueeze") a.ints = {1};
  if (n == "to") a.dtype = DType::Float64;
  if (n == "fill_") a.scalars[0] = Scalar(1.5);
  if (n == "clamp") a.scalars = {Scalar(-0.5), Scalar(0.5), Scalar()};
  if (n == "norm") a.scalars[0] = Scalar(2.0);
  if (n == "var" || n == "std") {
    a.scalars[0] = Scalar(int64_t{1});
    a.ints = {1};
    a.keepdim = true;
  }
  if (d.kind == OpKind::Reduce && n != "sum") a.ints = {0};
  if (n == "uniform_" || n == "normal_") {
    a.scalars = {Scalar(0.0), Scalar(1.0), Scalar()};
    a.seed = 7;
  }
  if (n == "empty" || n == "rand" || n == "randn")
    a = creation::random({3, 4}, DType::Float32, 9, 2);
  if (n == "full") a = creation::full({2, 2}, Scalar(int64_t{3}), DType::Int32);
  if (n == "arange")
    a = creation::arange(Scalar(int64_t{0}), Scalar(int64_t{10}), Scalar(int64_t{3}));
  if (n == "linspace") a = creation::linspace(0.0, 1.0, 5, DType::Float64);
  return a;
}

// One worker_batch input: the prefix, then the encoded batch.
std::string worker_input(const Batch& b, const std::vector<uint16_t>& payload_sizes,
                         uint8_t flags = 0, uint8_t token = 0, uint8_t seed = 0) {
  std::string s;
  s.push_back(static_cast<char>(payload_sizes.size()));
  s.push_back(static_cast<char>(flags));
  s.push_back(static_cast<char>(token));
  s.push_back(static_cast<char>(seed));
  for (uint16_t n : payload_sizes) {
    s.push_back(static_cast<char>(n & 0xFF));
    s.push_back(static_cast<char>(n >> 8));
  }
  return s + encode(b);
}
std::string codec_input(const std::string& frame, uint8_t payloads = 0) {
  return std::string(1, static_cast<char>(payloads)) + frame;
}

struct Seeds {
  fs::path dir_batch, dir_codec;
  int n_batch = 0, n_codec = 0;

  void batch(const std::string& name, const Batch& b, const std::vector<uint16_t>& sizes,
             uint8_t flags = 0, uint8_t token = 0, uint8_t seed = 0) {
    write(dir_batch / ("seed-" + name), worker_input(b, sizes, flags, token, seed));
    // The same batch for the codec target, with its payload count.
    write(dir_codec / ("seed-batch-" + name),
          codec_input(encode(b), static_cast<uint8_t>(sizes.size())));
    n_batch++;
    n_codec++;
  }
  void codec(const std::string& name, const std::string& frame, uint8_t payloads = 0) {
    write(dir_codec / ("seed-" + name), codec_input(frame, payloads));
    n_codec++;
  }
};

// The replies of the observability and same-host commands (protocol/replies.hpp).
void observability_seeds(Seeds& s) {
  s.codec("reply-clock", encode(reply::Clock{.request = 9, .time_ns = 123456789012345}));
  reply::Trace trace{.request = 10};
  TraceEvent e;
  e.kind = CmdType::SendPeer;
  e.stream = 3;
  e.begin_ns = 100;
  e.end_ns = 250;
  e.wait_ns = 50;
  e.bytes = 64;
  e.peer = 1;
  e.flow = TraceFlow::Out;
  e.flow_id = 77;
  e.inputs = 1;
  e.tensors = {TraceTensor{4, true, TensorMeta::contiguous(DType::Float32, {4, 4})}};
  TraceEvent op = e;
  op.kind = CmdType::RunOp;
  op.op = OpId::matmul;
  op.device = 0;
  op.flow = TraceFlow::None;
  op.tensors.push_back(TraceTensor{5, false, {}});
  trace.trace.events = {e, op};
  trace.trace.dropped = 3;
  trace.trace.more = true;
  s.codec("reply-trace", encode(trace));
  reply::Flight flight;  // request 0: sent unasked
  flight.flight.reason = "SIGUSR1";
  flight.flight.total = 2;
  flight.flight.capacity = 4096;
  FlightRecord r;
  r.seq = 2;
  r.kind = CmdType::RecvPeer;
  r.state = FlightState::Waiting;
  r.wait = WaitKind::Peer;
  r.wait_on = 77;
  r.peer = 1;
  r.out = 9;
  r.queued_ns = 5;
  flight.flight.records = {r};
  s.codec("reply-flight", encode(flight));
  reply::Metrics metrics{.request = 11};
  metrics.metrics.commands = {{static_cast<uint8_t>(CmdType::RunOp), 10}};
  metrics.metrics.bytes = {{static_cast<uint8_t>(CmdType::Get), 4096}};
  metrics.metrics.queues = {{0, 1}};
  metrics.metrics.devices = {{-1, 3, 48}};
  metrics.metrics.master_heartbeat_age_ns = 1000;
  s.codec("reply-metrics", encode(metrics));
  s.codec("reply-attach",
          encode(reply::Attach{.request = 12, .done = true, .address = 0x7ffd00000010ull}));
  s.codec("reply-attach-refused",
          encode(reply::Attach{.request = 12, .message = "DTR_SAME_HOST=0 on the worker"}));
  s.codec("reply-get-pulled",
          encode(reply::Get{.request = 13,
                            .meta = TensorMeta::contiguous(DType::Float32, {1 << 16}),
                            .address = 0x7f0000000000ull}));
}

// Regression inputs of the findings (fixed in 6c60154), kept in the corpus.
// Finding 1: a shape with a zero dim has numel 0, so the decoder's numel_of check passes,
// but contiguous_strides multiplies the other sizes (2^32 * 2^32) and overflows int64
// (UBSan: signed-integer-overflow in dtr::contiguous_strides, tensor/dims.cpp), from
// Reader::meta (protocol/codec.cpp) for any Put, RecvPeer or Collective meta, and from a
// Get reply's meta on the master.
void write_findings(const fs::path& dir) {
  fs::create_directories(dir / "worker_batch");
  fs::create_directories(dir / "codec");
  Batch b{{put(1, DType::Float32, {0, int64_t{1} << 32, int64_t{1} << 32}, 1)}};
  write(dir / "worker_batch" / "regress-1-strides-overflow-put", worker_input(b, {0}));
  write(dir / "codec" / "regress-1-strides-overflow-put", codec_input(encode(b), 1));
  reply::Get get{
      .request = 1,
      .meta = TensorMeta{DType::Float32, {0, int64_t{1} << 32, int64_t{1} << 32}, {0, 0, 0}, 0}};
  write(dir / "codec" / "regress-1-strides-overflow-reply", codec_input(encode(get), 1));

  // Finding 2: view/reshape with a -1 size: resolve_shape (tensor/op_table.cpp) multiplies
  // the other sizes (2^48 * 2^45) without an overflow check, in dtr::infer, which the
  // worker runs for every RunOp (and the master for every op it checks).
  OpAttrs huge;
  huge.ints = {-1, int64_t{1} << 48, int64_t{1} << 45};
  Batch v{{put(1, DType::Float32, {4}, 1), run_op(OpId::view, 2, {1}, huge),
           run_op(OpId::reshape, 3, {1}, huge), request<cmd::Sync>(1)}};
  write(dir / "worker_batch" / "regress-2-resolve-shape-overflow-view", worker_input(v, {16}));

  // Finding 3 (fixed with dtr::saturating_cast): a float too large for an integer dtype,
  // converted in copy_into: full([1], 1e38).to(int32).
  OpAttrs big = creation::full({1}, Scalar(1e38), DType::Float32);
  OpAttrs to_int;
  to_int.dtype = DType::Int32;
  Batch f{{run_op(OpId::full, 1, {}, big), run_op(OpId::to, 2, {1}, to_int),
           with_input<cmd::Get>(2, 1), request<cmd::Sync>(2)}};
  write(dir / "worker_batch" / "regress-3-float-to-int-overflow", worker_input(f, {}));
}

// ---- graph_upload (fuzz_graph_upload.cpp): the session holds tensors 1 to 6 (float32 [4],
// float32 [2, 3], int64 [3], float32 [], bool [4], float32 [3, 2] a transposed view of 2),
// streams 1 and 2 and event 9 (recorded on stream 1) ----

constexpr uint8_t kGraphFree = 1 << 3;
constexpr uint8_t kGraphAnswer = 1 << 4;
constexpr uint8_t kGraphLoopBack = 1 << 5;

std::vector<GraphInput> graph_inputs(std::vector<TensorId> ids) {
  std::vector<GraphInput> out;
  for (TensorId id : ids) {
    TensorMeta m;
    switch (id) {
      case 1:
        m = TensorMeta::contiguous(DType::Float32, {4});
        break;
      case 2:
        m = TensorMeta::contiguous(DType::Float32, {2, 3});
        break;
      case 3:
        m = TensorMeta::contiguous(DType::Int64, {3});
        break;
      case 4:
        m = TensorMeta::contiguous(DType::Float32, {});
        break;
      case 5:
        m = TensorMeta::contiguous(DType::Bool, {4});
        break;
      default:
        m = TensorMeta::contiguous(DType::Float32, {3, 2});
        m.strides = {1, 3};
    }
    out.push_back(GraphInput{id, m});
  }
  return out;
}

cmd::GraphUpload graph(uint64_t id, std::vector<Command> program, std::vector<TensorId> inputs,
                       std::vector<TensorId> outputs = {}) {
  auto p = std::make_shared<Batch>();
  p->commands = std::move(program);
  return cmd::GraphUpload{.graph = id,
                          .outputs = std::move(outputs),
                          .inputs = graph_inputs(std::move(inputs)),
                          .program = std::move(p)};
}

std::string graph_input(uint8_t control, const Batch& b) {
  std::string s = encode(b);
  s.insert(s.begin(), static_cast<char>(control));
  return s;
}

int write_graph_seeds(const fs::path& dir, const fs::path& batch_dir) {
  fs::create_directories(dir);
  OpAttrs one;
  one.scalars[0] = Scalar(int64_t{1});
  OpAttrs t01;
  t01.ints = {0, 1};
  int n = 0;
  auto seed = [&](const std::string& name, uint8_t control, const Batch& b) {
    write(dir / ("seed-" + name), graph_input(control, b));
    ++n;
  };
  // Ops, views, in place, a reduction; outputs; replays in the batch and after; freed.
  cmd::GraphUpload ops =
      graph(1,
            {run_op(OpId::matmul, 20, {2, 6}), run_op(OpId::transpose, 21, {20}, t01),
             run_op(OpId::mul, 22, {21}, one), inplace(OpId::add, {1}, one),
             run_op(OpId::sum, 23, {22}), inplace(OpId::add, {1, 23}), run_op(OpId::neg, 24, {3})},
            {1, 2, 3, 6}, {20, 24});
  seed("ops", 3 | kGraphFree,
       Batch{{ops, cmd::GraphReplay{.graph = 1, .replay = 1}, with_input<cmd::Get>(20, 5)}});
  // Small in-place chains (prepared kernels, inline parts).
  std::vector<Command> chain;
  for (int i = 0; i < 16; ++i) chain.push_back(inplace(i % 2 ? OpId::mul : OpId::add, {1}, one));
  seed("chain", 7, Batch{{graph(2, chain, {1})}});
  // Streams and events: records and waits across streams 1 and 2, event 9 and a new one.
  cmd::RunOp on1 = run_op(OpId::exp, 30, {1});
  on1.stream = 1;
  cmd::RunOp on2 = run_op(OpId::add, 31, {30, 1});
  on2.stream = 2;
  seed("streams-events", 2 | kGraphFree,
       Batch{{graph(
           3,
           {on1, cmd::Record{.stream = 1, .event = 10}, cmd::WaitEvent{.stream = 2, .event = 10},
            cmd::WaitEvent{.stream = 2, .event = 9}, on2},
           {1}, {31})}});
  // Cross-node: notifications, waits and copies with node 1, answered and looped back.
  cmd::RecvPeer recv{
      .out = 40, .meta = TensorMeta::contiguous(DType::Float32, {4}), .peer = 1, .token = 12};
  Batch peers{{graph(4,
                     {cmd::Record{.event = 9}, cmd::NotifyPeer{.event = 9, .peer = 1, .token = 10},
                      cmd::WaitRemote{.peer = 1, .token = 11}, recv, run_op(OpId::add, 41, {40, 1}),
                      cmd::SendPeer{.input = 41, .peer = 1, .token = 13}},
                     {1}, {41})}};
  seed("peers", 3 | kGraphAnswer | kGraphLoopBack | kGraphFree, peers);
  seed("peers-unanswered", 1, peers);
  // A collective (the session has no process group: it fails) and a device copy (refused:
  // the node has no device).
  seed("collective", 2,
       Batch{{graph(5, {cmd::Collective{.input = 1}, run_op(OpId::neg, 50, {1})}, {1}, {50})}});
  seed("to-device", 1, Batch{{graph(6, {cmd::ToDevice{.input = 1, .out = 60, .device = 0}}, {1})}});
  // Refused uploads: an undeclared input, a wrong declared meta, a reused output, a read
  // before a make, a bad token, an unknown stream; then replays of them.
  std::vector<GraphInput> wrong = graph_inputs({1});
  wrong[0].meta = TensorMeta::contiguous(DType::Float32, {5});
  cmd::GraphUpload bad_meta = graph(8, {run_op(OpId::neg, 80, {1})}, {});
  bad_meta.inputs = wrong;
  cmd::RunOp lost = run_op(OpId::neg, 91, {1});
  lost.stream = 7;
  seed("refused", 2,
       Batch{{graph(7, {run_op(OpId::neg, 70, {2})}, {1}), bad_meta,
              graph(9, {run_op(OpId::neg, 1, {1})}, {1}),
              graph(10, {run_op(OpId::add, 100, {101, 1})}, {1}),
              graph(11, {cmd::WaitRemote{.peer = 1, .token = 0}}, {}), graph(12, {lost}, {1}),
              cmd::GraphReplay{.graph = 7, .replay = 1}, request<cmd::Sync>(1)}});
  // Numbering, free and replay after free, free of an unknown graph, a second upload.
  seed("lifecycle", 1,
       Batch{{graph(13, {inplace(OpId::neg, {1})}, {1}), cmd::GraphReplay{.graph = 13, .replay = 2},
              cmd::GraphReplay{.graph = 13, .replay = 1}, graph(13, {inplace(OpId::neg, {1})}, {1}),
              cmd::GraphFree{.graph = 13}, cmd::GraphReplay{.graph = 13, .replay = 2},
              cmd::GraphFree{.graph = 99}, request<cmd::Sync>(2)}});
  // The same kinds inside worker_batch's inputs (a bare session: no preamble).
  write(batch_dir / "seed-graph-ops",
        worker_input(
            Batch{{run_op(OpId::full, 1, {}, creation::full({4}, 2.0, DType::Float32)),
                   graph(1, {inplace(OpId::add, {1}, one), run_op(OpId::neg, 2, {1})}, {1}, {2}),
                   cmd::GraphReplay{.graph = 1, .replay = 1}, with_input<cmd::Get>(2, 1),
                   cmd::GraphFree{.graph = 1}}},
            {}));
  return n;
}

// Reproducers of open findings go to FINDINGS_DIR/<target>/open-*; none is open now.
void write_open_findings(const fs::path& dir) {
  fs::create_directories(dir / "worker_batch");
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2 && argc != 3) {
    std::fprintf(stderr, "usage: %s OUT_DIR [FINDINGS_DIR]\n", argv[0]);
    return 2;
  }
  write_findings(argv[1]);
  if (argc == 3) write_open_findings(argv[2]);
  Seeds s;
  s.dir_batch = fs::path(argv[1]) / "worker_batch";
  s.dir_codec = fs::path(argv[1]) / "codec";
  fs::create_directories(s.dir_batch);
  fs::create_directories(s.dir_codec);

  // Puts, a broadcast add, a get and a sync.
  s.batch(
      "put-add-get",
      Batch{{put(1, DType::Float32, {2, 3}, 1), put(2, DType::Float32, {3}, 2),
             run_op(OpId::add, 3, {1, 2}), with_input<cmd::Get>(3, 11), request<cmd::Sync>(12)}},
      {24, 12});
  // The same with misaligned payloads (the session copies instead of wrapping).
  s.batch("put-misaligned",
          Batch{{put(1, DType::Float64, {2, 2}, 1), put(2, DType::Int64, {2}, 2),
                 run_op(OpId::mul, 3, {1, 2}), with_input<cmd::Get>(3, 1)}},
          {32, 16}, 0, 0, 1);

  // Every op of the table, one batch per op kind, on float32 [4, 4] and [4] inputs.
  for (OpKind kind :
       {OpKind::Unary, OpKind::Binary, OpKind::Reduce, OpKind::Clamp, OpKind::Norm, OpKind::Moment,
        OpKind::Linalg, OpKind::View, OpKind::Convert, OpKind::Mutate, OpKind::Create}) {
    Batch b{{put(1, DType::Float32, {4, 4}, 1), put(2, DType::Float32, {4}, 2)}};
    std::string name;
    TensorId out = 10;
    for (const OpDef& d : all_ops()) {
      if (d.kind != kind) continue;
      if (name.empty()) name = std::string(d.name);
      std::vector<TensorId> in;
      if (d.min_inputs >= 1) in.push_back(1);
      if (d.min_inputs >= 2 || d.kind == OpKind::Binary)
        in.push_back(d.kind == OpKind::Mutate ? 1 : 2);
      if (d.name == "dot") in = {2, 2};
      if (d.kind == OpKind::Mutate) {
        b.commands.push_back(inplace(d.id, in, attrs_for(d)));
      } else {
        b.commands.push_back(run_op(d.id, out, in, attrs_for(d)));
        b.commands.push_back(with_input<cmd::Get>(out, out));
        if (d.has_inplace_form) b.commands.push_back(inplace(d.id, in, attrs_for(d)));
        ++out;
      }
    }
    b.commands.push_back(request<cmd::Sync>(99));
    s.batch("ops-" + name, b, {64, 16}, 0, 0, 2);
  }
  // Scalar operands, dtype promotion, int and bool tensors.
  {
    OpAttrs sc;
    sc.scalars[0] = Scalar(int64_t{3});
    OpAttrs first = sc;
    first.scalar_first = true;
    OpAttrs to_bool;
    to_bool.dtype = DType::Bool;
    s.batch(
        "ops-scalar-int",
        Batch{{put(1, DType::Int32, {2, 2}, 1), put(2, DType::Int64, {2}, 2),
               run_op(OpId::add, 3, {1}, sc), run_op(OpId::div, 4, {1, 2}),
               run_op(OpId::pow, 5, {1}, first), run_op(OpId::to, 6, {1}, to_bool),
               run_op(OpId::sum, 7, {6}), inplace(OpId::add, {1, 2}), run_op(OpId::argmax, 8, {1}),
               with_input<cmd::Get>(5, 1), request<cmd::Sync>(2)}},
        {16, 16}, 0, 0, 4);
  }
  // float16 and bfloat16: puts, a mixed promotion (float16 + bfloat16 = float32), a matmul,
  // a reduction and conversions.
  {
    OpAttrs to_half;
    to_half.dtype = DType::Float16;
    OpAttrs to_bf16;
    to_bf16.dtype = DType::BFloat16;
    s.batch("ops-half",
            Batch{{put(1, DType::Float16, {2, 2}, 1), put(2, DType::BFloat16, {2, 2}, 2),
                   run_op(OpId::add, 3, {1, 2}), run_op(OpId::matmul, 4, {1, 1}),
                   run_op(OpId::sum, 5, {2}), run_op(OpId::to, 6, {3}, to_half),
                   run_op(OpId::to, 7, {6}, to_bf16), with_input<cmd::Get>(4, 1),
                   request<cmd::Sync>(2)}},
            {8, 8}, 0, 0, 4);
  }
  // Ops of more than two inputs and the NN ops: conv2d with a bias (3 inputs) and its
  // gradients, a cat of 9, where, gather, scatter_add, max_pool2d with its indices and
  // gradient, log_softmax, nll_loss (4 inputs in its gradient), dropout; an out-of-range
  // target fails on the worker.
  {
    auto ints = [](Dims v) {
      OpAttrs a;
      a.ints = v;
      return a;
    };
    OpAttrs drop = ints({1});
    drop.scalars[0] = Scalar(0.5);
    drop.seed = 3;
    drop.offset = 1;
    OpAttrs positive;
    positive.scalars[0] = Scalar(0.0);
    const OpAttrs conv = ints({1, 1, 1, 1, 1, 1, 1}), pool = ints({2, 2, 0, 0, 0, 0, 1, 1, 0});
    const OpAttrs nll = ints({1, -100});
    std::vector<TensorId> nine(9, 2);
    s.batch("ops-nn",
            Batch{{put(1, DType::Float32, {1, 2, 4, 4}, 1),
                   put(2, DType::Float32, {4}, 2),
                   put(3, DType::Float32, {3, 2, 3, 3}, 3),
                   put(4, DType::Float32, {3}, 4),
                   put(5, DType::Int64, {8}, 5),
                   run_op(OpId::conv2d, 10, {1, 3, 4}, conv),
                   run_op(OpId::conv2d_input_grad, 11, {10, 3}, ints({4, 4, 1, 1, 1, 1, 1, 1, 1})),
                   run_op(OpId::conv2d_weight_grad, 12, {10, 1}, ints({3, 3, 1, 1, 1, 1, 1, 1, 1})),
                   run_op(OpId::cat, 13, nine, ints({0})),
                   run_op(OpId::gt, 14, {2}, positive),
                   run_op(OpId::where, 15, {14, 2, 2}),
                   run_op(OpId::max_pool2d, 16, {1}, pool),
                   run_op(OpId::max_pool2d_indices, 17, {1}, pool),
                   run_op(OpId::max_pool2d_backward, 18, {16, 17}, ints({4, 4})),
                   run_op(OpId::view, 19, {1}, ints({8, 4})),
                   run_op(OpId::log_softmax, 20, {19}, ints({1})),
                   run_op(OpId::nll_loss, 21, {20, 5}, nll),
                   run_op(OpId::nll_loss_backward, 22, {21, 20, 5, 2}, nll),
                   run_op(OpId::gather, 23, {19, 5}, ints({0})),
                   run_op(OpId::dropout, 24, {1}, drop),
                   with_input<cmd::Get>(12, 1),
                   with_input<cmd::Get>(22, 2),
                   request<cmd::Sync>(3)}},
            {128, 16, 216, 12, 64}, 0, 0, 6);
  }
  // Failures: unknown input, reused and zero ids, free of an unknown id, a failing op and
  // its dependents, in-place ops on a failed tensor; run twice (every id then in use).
  {
    OpAttrs bad_view;
    bad_view.ints = {5, 5};
    s.batch("failures",
            Batch{{put(1, DType::Float32, {2, 2}, 1), run_op(OpId::neg, 2, {77}),
                   run_op(OpId::neg, 1, {1}), run_op(OpId::neg, 0, {1}),
                   run_op(OpId::view, 3, {1}, bad_view), run_op(OpId::exp, 4, {3}),
                   inplace(OpId::neg, {3}), with_input<cmd::Free>(55), with_input<cmd::Get>(4, 5),
                   with_input<cmd::Free>(1), run_op(OpId::neg, 5, {1}), request<cmd::Sync>(6)}},
            {16}, kTwice);
  }
  // Streams and events.
  s.batch("streams-events",
          Batch{{on_stream<cmd::CreateStream>(1), put(1, DType::Float32, {4}, 1),
                 event_cmd<cmd::Record>(5, 0), event_cmd<cmd::WaitEvent>(5, 1),
                 [] {
                   auto c = run_op(OpId::sin, 2, {1});
                   c.stream = 1;
                   return c;
                 }(),
                 event_cmd<cmd::Record>(6, 1), event_cmd<cmd::EventQuery>(6, 0, 7),
                 event_cmd<cmd::EventSync>(6, 0, 8), event_cmd<cmd::DestroyEvent>(5),
                 event_cmd<cmd::WaitEvent>(99, 0), on_stream<cmd::DestroyStream>(1),
                 on_stream<cmd::DestroyStream>(0), on_stream<cmd::CreateStream>(0),
                 with_input<cmd::Get>(2, 9), request<cmd::Stats>(10), request<cmd::Sync>(11)}},
          {16});
  {
    auto timed = event_cmd<cmd::Record>(1, 2);
    timed.timing = true;
    auto bad_stream = run_op(OpId::neg, 3, {1});
    bad_stream.stream = 9;
    s.batch("events-timing",
            Batch{{on_stream<cmd::CreateStream>(2), put(1, DType::Float32, {4}, 1), timed,
                   event_cmd<cmd::Record>(0), bad_stream, event_cmd<cmd::EventSync>(1, 0, 2),
                   event_cmd<cmd::EventQuery>(42, 0, 3), request<cmd::Sync>(4)}},
            {16});
  }
  // Cross-node waits: a notification to node 1 when an event's record is done, and a wait
  // for node 1's token, which the harness delivers after the batch.
  {
    auto notify = peer_cmd<cmd::NotifyPeer>(1, 3);
    notify.event = 5;
    auto bad_peer = peer_cmd<cmd::NotifyPeer>(0, 4);
    bad_peer.event = 5;
    s.batch("peer-wait",
            Batch{{put(1, DType::Float32, {4}, 1), event_cmd<cmd::Record>(5), notify, bad_peer,
                   peer_cmd<cmd::WaitRemote>(1, 3), run_op(OpId::cos, 2, {1}),
                   with_input<cmd::Get>(2, 1), request<cmd::Sync>(2)}},
            {16}, kNotifyAfter, 3);
    s.batch("peer-wait-before", Batch{{peer_cmd<cmd::WaitRemote>(1, 3), request<cmd::Sync>(2)}}, {},
            kNotifyBefore | kNotifyFailed, 3);
    s.batch("peer-no-setup",
            Batch{{notify, peer_cmd<cmd::WaitRemote>(1, 3), request<cmd::Sync>(2)}}, {},
            kNoSetup | kNotifyAfter, 3);
  }
  // The master lost node 1: a wait for it that was dispatched fails, a later copy from it
  // fails at dispatch; node_lost naming this node or no node is refused.
  {
    auto recv = peer_cmd<cmd::RecvPeer>(1, 9);
    recv.out = 2;
    recv.meta = TensorMeta::contiguous(DType::Float32, {3});
    s.batch("node-lost",
            Batch{{peer_cmd<cmd::WaitRemote>(1, 3), cmd::NodeLost{.node = 1}, recv,
                   cmd::NodeLost{.node = 0}, cmd::NodeLost{.node = 7}, with_input<cmd::Get>(2, 1),
                   request<cmd::Sync>(2)}},
            {}, 0, 3);
  }
  // Copies between nodes: a SendPeer to node 1 comes back (loop-back) as node 1's copy for
  // a RecvPeer of the same token; a RecvPeer fed from payload frame 1 by the harness.
  {
    auto send = peer_cmd<cmd::SendPeer>(1, 7);
    send.input = 1;
    auto recv = peer_cmd<cmd::RecvPeer>(1, 7);
    recv.out = 2;
    recv.meta = TensorMeta::contiguous(DType::Float32, {2, 3});
    auto recv_wrong = recv;
    recv_wrong.token = 8;
    recv_wrong.out = 3;
    recv_wrong.meta = TensorMeta::contiguous(DType::Float32, {7});
    auto send_missing = peer_cmd<cmd::SendPeer>(1, 8);
    send_missing.input = 66;
    s.batch("peer-copy-loopback",
            Batch{{put(1, DType::Float32, {2, 3}, 1), send, recv, send_missing, recv_wrong,
                   run_op(OpId::add, 4, {1, 2}), with_input<cmd::Get>(4, 1),
                   with_input<cmd::Get>(3, 2), request<cmd::Sync>(3)}},
            {24}, kLoopBack);
    auto recv5 = peer_cmd<cmd::RecvPeer>(1, 5);
    recv5.out = 1;
    recv5.meta = TensorMeta::contiguous(DType::Int32, {2, 2});
    s.batch(
        "peer-copy-notify",
        Batch{{put(9, DType::Int32, {2, 2}, 1), recv5, run_op(OpId::neg, 2, {1}),
               run_op(OpId::add, 3, {1, 9}), with_input<cmd::Get>(3, 1), request<cmd::Sync>(2)}},
        {16}, kNotifyAfter | kNotifyPayload, 5);
  }
  // Collectives: without a process group every one fails, naming why.
  {
    cmd::NewGroup group;
    group.group = 4;
    group.ranks = {0, 1};
    cmd::Collective coll;
    coll.kind = CollectiveKind::AllReduce;
    coll.input = 1;
    auto gather = coll;
    gather.kind = CollectiveKind::AllGather;
    gather.out = 2;
    gather.meta = TensorMeta::contiguous(DType::Float32, {2, 4});
    gather.group = 4;
    auto scatter = gather;
    scatter.kind = CollectiveKind::ReduceScatter;
    scatter.out = 3;
    scatter.meta = TensorMeta::contiguous(DType::Float32, {2});
    auto bcast = coll;
    bcast.kind = CollectiveKind::Broadcast;
    bcast.root = 1;
    s.batch("collectives",
            Batch{{put(1, DType::Float32, {4}, 1), group, coll, gather, scatter, bcast,
                   with_input<cmd::Get>(2, 1), request<cmd::Sync>(2)}},
            {16});
  }
  {
    // Devices (protocol 3): creation on cuda:0, a move there and back, device stats; on a
    // worker without that device each fails naming it.
    cmd::RunOp full;
    full.op = OpId::full;
    full.attrs = creation::full({4}, 2.0, DType::Float32);
    full.out = 1;
    full.device = 0;
    cmd::ToDevice to_gpu;
    to_gpu.input = 2;
    to_gpu.out = 3;
    to_gpu.device = 0;
    auto to_cpu = to_gpu;
    to_cpu.input = 3;
    to_cpu.out = 4;
    to_cpu.device = -1;
    auto stats = request<cmd::Stats>(5);
    stats.device = 0;
    s.batch("devices",
            Batch{{full, put(2, DType::Float32, {4}, 1), to_gpu, to_cpu, with_input<cmd::Get>(4, 3),
                   stats, request<cmd::Sync>(6)}},
            {16});
  }

  // Observability (docs/observability.md): a traced batch (start, work on two streams, a
  // flight dump, figures, the clock, stop, collect), and each again alone.
  {
    auto start = request<cmd::Trace>(1);
    start.action = TraceAction::Start;
    auto stop = request<cmd::Trace>(6);
    stop.action = TraceAction::Stop;
    auto collect = request<cmd::Trace>(7);
    collect.action = TraceAction::Collect;
    s.batch("observability",
            Batch{{start, on_stream<cmd::CreateStream>(2), put(1, DType::Float32, {4}, 1),
                   run_op(OpId::exp, 2, {1}), event_cmd<cmd::Record>(3),
                   event_cmd<cmd::WaitEvent>(3, 2), request<cmd::ClockSync>(2),
                   request<cmd::FlightDump>(3), request<cmd::Metrics>(4), stop, collect,
                   request<cmd::Sync>(8)}},
            {16});
    s.batch("observability-alone",
            Batch{{collect, stop, request<cmd::FlightDump>(3), request<cmd::Metrics>(4),
                   request<cmd::ClockSync>(2), start}},
            {});
  }

  // Same-host payloads (common/same_host.hpp): an Attach that fails (process 1 does not
  // hold the challenge), a PutFrom and a pulled Get on an unattached session, a Release.
  s.batch(
      "same-host",
      Batch{{cmd::Attach{.request = 1, .pid = 1, .address = 4096, .challenge = 7},
             cmd::PutFrom{
                 .out = 1, .meta = TensorMeta::contiguous(DType::Float32, {4}), .address = 4096},
             put(2, DType::Float32, {4}, 1), cmd::Get{.input = 2, .request = 2, .pull = true},
             cmd::Release{.request = 2}, request<cmd::Sync>(3)}},
      {16});

  // ---- codec-only seeds: every other message type ----
  s.codec("hello", encode(Hello{kVersion, "head:1234"}));
  s.codec("hello-old", encode(Hello{1, "old"}));
  {
    HelloReply r;
    r.accepted = true;
    r.worker = "node1:77";
    r.threads = 8;
    r.devices = {DeviceInfo{-1, "cpu", 1 << 30, 1 << 29, 0, 0},
                 DeviceInfo{0, "gpu", 80ull << 30, 70ull << 30, 9, 0}};
    r.peer_endpoint = "tcp://10.0.0.2:7001";
    r.pg_endpoint = "tcp://10.0.0.2:7002";
    r.pid = 4242;
    r.challenge = 0x1234abcd5678ef90ull;
    r.max_message_bytes = int64_t{16} << 30;
    s.codec("hello-reply", encode(r));
    HelloReply busy;
    busy.reason = "busy";
    s.codec("hello-reply-busy", encode(busy));
  }
  {
    Setup st;
    st.node = 1;
    st.session = 0x1234567890ull;
    st.peers = {"tcp://a:1", "tcp://b:2", "tcp://c:3"};
    st.pg_endpoints = {"tcp://a:11", "tcp://b:12", "tcp://c:13"};
    s.codec("setup", encode(st));
    st.pg_endpoints.clear();
    s.codec("setup-no-pg", encode(st));
  }
  {
    PeerNotify n;
    n.session = 42;
    n.from_node = 1;
    n.token = 7;
    s.codec("peer", encode(n));
    n.failed = true;
    n.failure = RemoteFailure{5, -1, "neg", "input %4 is failed", 4, "view", "bad shape"};
    s.codec("peer-failed", encode(n));
    n.failed = false;
    n.pid = 4242;
    n.address = 0x7f0000001000ull;
    n.bytes = 1 << 20;
    s.codec("peer-at-address", encode(n));
    n.pid = 0;
    n.released = true;
    s.codec("peer-released", encode(n));
  }
  {
    RemoteFailure f{9, 0, "matmul", "shapes do not match", 3, "put", "payload too small"};
    reply::Get get{.request = 1, .meta = TensorMeta::contiguous(DType::Float64, {3, 4})};
    s.codec("reply-get", encode(get), 1);
    s.codec("reply-get-failed", encode(reply::Get{.request = 1, .failure = f}));
    s.codec("reply-sync", encode(reply::Sync{.request = 2, .failures = {f, f}}));
    s.codec("reply-stats",
            encode(reply::Stats{.request = 3, .stats = MemoryStatsWire{1 << 20, 2 << 20, 17}}));
    s.codec("reply-protocol-error",
            encode(reply::ProtocolError{.message = "batch: command 3: unknown op code 999"}));
    reply::Event ev{.request = 4, .done = true, .time_ns = std::numeric_limits<int64_t>::max()};
    s.codec("reply-event", encode(ev));
    ev.failure = f;
    s.codec("reply-event-failed", encode(ev));
    observability_seeds(s);
  }
  s.codec("goodbye", encode_goodbye());
  s.codec("goodbye_reason", encode(Goodbye{"master silent for more than 2500 ms"}));
  s.codec("heartbeat", encode_heartbeat());
  int n_graph = write_graph_seeds(fs::path(argv[1]) / "graph_upload", s.dir_batch);
  std::printf("wrote %d worker_batch, %d codec and %d graph_upload seeds\n", s.n_batch + 1,
              s.n_codec, n_graph);
  return 0;
}
