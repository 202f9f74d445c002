// Captured graphs on a worker (worker/graph.hpp): uploads and replays driven straight into a
// worker::Session. A replay gives what the same commands give eagerly, each replay's
// failures are its own and name it, every check of an upload and a replay refuses with a
// message that says what is wrong, and cross-node tokens are derived per replay.
#include <doctest/doctest.h>
#include <fmt/format.h>

#include <chrono>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "dtr/tensor.hpp"
#include "protocol/codec.hpp"
#include "protocol/messages.hpp"
#include "support/replies.hpp"
#include "worker/session.hpp"

namespace {

using namespace dtr;
using dtr::local::Tensor;
using protocol::Batch;
using protocol::Command;
namespace cmd = protocol::cmd;
using protocol::GraphInput;
using protocol::RemoteFailure;
namespace reply = protocol::reply;
using protocol::TensorId;
using test::decode_as;
using worker::Outgoing;
using worker::PayloadFrame;

cmd::RunOp op(OpId id, TensorId out, std::vector<TensorId> inputs, OpAttrs attrs = {}) {
  cmd::RunOp c{.op = id, .out = out, .attrs = std::move(attrs)};
  c.inputs.n = static_cast<uint8_t>(inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) c.inputs.ids[i] = inputs[i];
  return c;
}
cmd::RunOp inplace(OpId id, TensorId self, std::vector<TensorId> others, OpAttrs attrs = {}) {
  others.insert(others.begin(), self);
  cmd::RunOp c = op(id, protocol::kNoTensor, others, std::move(attrs));
  c.inplace = true;
  return c;
}
OpAttrs scalar(Scalar s) {
  OpAttrs a;
  a.scalars[0] = s;
  return a;
}
Tensor iota(Shape shape, DType dtype = DType::Float32) {
  return local::arange(0, numel_of(shape), 1, dtype).reshape(shape);
}
bool contains(const std::string& s, const std::string& needle) {
  return s.find(needle) != std::string::npos;
}
bool same(const Tensor& a, const Tensor& b) {
  return a.dtype() == b.dtype() && a.shape() == b.shape() &&
         std::memcmp(a.contiguous().raw_data(), b.contiguous().raw_data(),
                     static_cast<size_t>(a.numel()) * element_size(a.dtype())) == 0;
}

cmd::GraphUpload upload(uint64_t graph, std::vector<Command> program,
                        std::vector<GraphInput> inputs, std::vector<TensorId> outputs = {}) {
  auto p = std::make_shared<Batch>();
  p->commands = std::move(program);
  return cmd::GraphUpload{
      .graph = graph, .outputs = std::move(outputs), .inputs = std::move(inputs), .program = p};
}
GraphInput declared(TensorId id, const Tensor& t) {
  return GraphInput{id, t.meta()};
}
cmd::GraphReplay replay(uint64_t graph, uint64_t n) {
  return cmd::GraphReplay{.graph = graph, .replay = n};
}

// A session with the helpers that decode its replies.
struct Harness {
  Harness()
      : session(
            [this](Outgoing&& o) {
              std::lock_guard lock(mu);
              (o.peer < 0 ? emitted : to_peers).push_back(std::move(o));
            },
            options()) {}
  static worker::SessionOptions options() {
    worker::SessionOptions o;
    o.threads = 2;
    return o;
  }
  std::vector<Outgoing> take(std::vector<Outgoing>& from) {
    std::lock_guard lock(mu);
    std::vector<Outgoing> out;
    out.swap(from);
    return out;
  }
  std::vector<Outgoing> run(std::vector<Command> commands, std::vector<PayloadFrame> frames = {}) {
    auto b = std::make_shared<Batch>();
    b->commands = std::move(commands);
    session.run(b, frames);
    REQUIRE(session.wait_idle(std::chrono::seconds(30)));
    return take(emitted);
  }
  void put(TensorId id, const Tensor& t) {
    auto bytes = std::make_shared<std::vector<char>>(static_cast<size_t>(t.numel()) *
                                                     element_size(t.dtype()));
    if (!bytes->empty()) std::memcpy(bytes->data(), t.contiguous().raw_data(), bytes->size());
    PayloadFrame f{bytes->data(), bytes->size(), bytes};
    CHECK(run({cmd::Put{
                  .out = id, .meta = TensorMeta::contiguous(t.dtype(), t.shape()), .payload = 1}},
              {f})
              .empty());
  }
  std::pair<reply::Get, Tensor> fetch(TensorId id) {
    std::vector<Outgoing> out = run({cmd::Get{.input = id, .request = 1000 + id}});
    REQUIRE(out.size() == 1);
    auto r = decode_as<reply::Get>(out[0].header, out[0].payloads.size());
    Tensor t;
    if (!r.failure) t = out[0].payloads.at(0);
    return {r, t};
  }
  Tensor value(TensorId id) {
    auto [r_, t] = fetch(id);
    const auto& r = r_;  // captured (clang 14: not a binding)
    REQUIRE_MESSAGE(!r.failure, (r.failure ? r.failure->message : ""));
    return t;
  }
  RemoteFailure failure(TensorId id) {
    auto [r, t] = fetch(id);
    REQUIRE(r.failure);
    return *r.failure;
  }
  std::vector<RemoteFailure> sync() {
    std::vector<Outgoing> out = run({cmd::Sync{.request = 7}});
    REQUIRE(out.size() == 1);
    return decode_as<reply::Sync>(out[0].header, 0).failures;
  }
  // The one failure a sync reports, which must contain `needle`.
  void expect_failure(const std::string& needle) {
    std::vector<RemoteFailure> f = sync();
    REQUIRE(f.size() == 1);
    INFO(f[0].message);
    CHECK(contains(f[0].message, needle));
  }
  protocol::MemoryStatsWire stats() {
    std::vector<Outgoing> out = run({cmd::Stats{.request = 8}});
    REQUIRE(out.size() == 1);
    return decode_as<reply::Stats>(out[0].header, 0).stats;
  }

  std::mutex mu;
  std::vector<Outgoing> emitted;
  std::vector<Outgoing> to_peers;
  worker::Session session;
};

}  // namespace

TEST_SUITE("worker/graph") {
  TEST_CASE("replays give what the commands give eagerly, temporaries bound, outputs readable") {
    Harness h;
    Tensor x = iota({4, 3});
    Tensor w = local::full({3, 2}, 0.5);
    h.put(1, x);
    h.put(2, w);
    h.put(101, x);  // the same commands run eagerly on 101 and 102
    h.put(102, w);
    // y = x @ w (an output), v = y.t() (a view), z = v * 2, x.add_(1), x.add_(z.sum())
    auto program = [](TensorId x, TensorId w, TensorId base) -> std::vector<Command> {
      return {op(OpId::matmul, base + 1, {x, w}),
              op(OpId::transpose, base + 2, {base + 1},
                 [] {
                   OpAttrs a;
                   a.ints = {0, 1};
                   return a;
                 }()),
              op(OpId::mul, base + 3, {base + 2}, scalar(Scalar(int64_t{2}))),
              inplace(OpId::add, x, {}, scalar(Scalar(int64_t{1}))),
              op(OpId::sum, base + 4, {base + 3}),
              inplace(OpId::add, x, {base + 4})};
    };
    h.run({upload(5, program(1, 2, 10), {declared(1, x), declared(2, w)}, {11, 14})});
    RemoteFailure before = h.failure(11);
    CHECK(contains(before.message, "graph 5 has not been replayed yet"));
    for (uint64_t k = 1; k <= 4; ++k) {
      CAPTURE(k);
      std::vector<Command> eager = program(101, 102, 100 * k + 1000);
      h.run({replay(5, k)});
      h.run(eager);
      CHECK(same(h.value(1), h.value(101)));
      CHECK(same(h.value(11), h.value(100 * k + 1001)));  // the output: this replay's
      CHECK(same(h.value(14), h.value(100 * k + 1004)));
    }
    CHECK(h.sync().empty());
    // The graph holds its temporaries: y (bound), the view (on y), z and the sum.
    protocol::MemoryStatsWire s = h.stats();
    CHECK(s.graph_tensors == 4);
    CHECK(s.graph_bytes >= static_cast<int64_t>((4 * 2 + 4 * 2 + 1) * sizeof(float)));
    // The master drops its handle of an output: the next replay no longer binds it.
    h.run({cmd::Free{.input = 11}, replay(5, 5)});
    CHECK(contains(h.failure(11).message, "does not exist"));
    CHECK(h.sync().empty());
    // Freed: its memory goes, and a replay says why it cannot run.
    h.run({cmd::GraphFree{.graph = 5}});
    CHECK(h.stats().graph_bytes == 0);
    h.run({replay(5, 6)});
    h.expect_failure("replay 6 of graph 5 did not run: graph 5 does not exist on this worker");
  }

  TEST_CASE("a chain of small in-place ops: inline, prepared kernels, bit for bit") {
    Harness h;
    h.put(1, local::zeros({3}));
    h.put(2, local::zeros({3}));
    std::vector<Command> program;
    for (int i = 0; i < 100; ++i) {
      program.push_back(inplace(OpId::add, 1, {}, scalar(Scalar(0.25 + i))));
      program.push_back(inplace(OpId::mul, 1, {}, scalar(Scalar(0.5))));
    }
    h.run({upload(1, program, {GraphInput{1, TensorMeta::contiguous(DType::Float32, {3})}})});
    for (int k = 1; k <= 50; ++k) {
      h.run({replay(1, static_cast<uint64_t>(k))});
      std::vector<Command> eager = program;
      for (Command& c : eager) std::get<cmd::RunOp>(c).inputs.ids[0] = 2;
      h.run(eager);
    }
    CHECK(same(h.value(1), h.value(2)));
    CHECK(h.sync().empty());
  }

  TEST_CASE("a failing op in a replay fails its dependents, names the replay, the next runs") {
    Harness h;
    h.put(1, local::full({3}, 2.0, DType::Int64));  // base
    h.put(2, local::full({3}, 1.0, DType::Int64));  // exponent, updated between replays
    // p = base ** exp; q = p + 1 (both outputs); base.add_(q) (in place)
    h.run({upload(7,
                  {op(OpId::pow, 10, {1, 2}), op(OpId::add, 11, {10}, scalar(Scalar(int64_t{1}))),
                   inplace(OpId::add, 1, {11})},
                  {declared(1, local::full({3}, 2.0, DType::Int64)),
                   declared(2, local::full({3}, 1.0, DType::Int64))},
                  {10, 11})});
    h.run({replay(7, 1)});
    CHECK(h.value(1).to_vector<int64_t>() == std::vector<int64_t>{5, 5, 5});
    h.run({inplace(OpId::fill_, 2, {}, scalar(Scalar(int64_t{-1})))});
    h.run({replay(7, 2)});
    std::vector<RemoteFailure> f = h.sync();  // before any read: Sync reports the root
    REQUIRE(f.size() == 1);                   // the root only
    CHECK(f[0].op == "pow");
    CHECK(contains(f[0].message, "replay 2 of graph 7"));
    RemoteFailure q = h.failure(11);
    CHECK(q.cause_op == "pow");
    CHECK(contains(q.cause_message, "negative integer powers"));
    CHECK(contains(q.cause_message, "replay 2 of graph 7, command 0"));
    // The in-place target failed with it (as in eager mode): it stays failed.
    RemoteFailure base = h.failure(1);
    CHECK(base.cause_op == "pow");
    CHECK(h.sync().empty());  // reported once
    // The next replay has fresh temporaries: p is made again; base is still failed.
    h.run({inplace(OpId::fill_, 2, {}, scalar(Scalar(int64_t{2})))});
    h.run({replay(7, 3)});
    CHECK(contains(h.failure(10).message, "input %1 is failed"));
  }

  TEST_CASE("every check of an upload refuses it, naming the command and the problem") {
    Harness h;
    Tensor x = iota({2, 2});
    h.put(1, x);
    GraphInput in1 = declared(1, x);
    struct Case {
      cmd::GraphUpload upload;
      std::string needle;
    };
    auto neg = [](TensorId out, TensorId in) { return op(OpId::neg, out, {in}); };
    cmd::RunOp on_stream = neg(10, 1);
    on_stream.stream = 9;
    cmd::RunOp on_device = neg(10, 1);
    on_device.device = 0;
    TensorMeta wrong = TensorMeta::contiguous(DType::Float32, {4});
    std::vector<Case> cases = {
        {upload(1, {on_stream}, {in1}), "command 0 (neg) runs on stream 9, which does not exist"},
        {upload(1, {neg(10, 1)}, {}), "command 0 (neg) reads tensor %1, which no earlier command"},
        {upload(1, {neg(10, 1)}, {GraphInput{3, x.meta()}}),
         "declares input %3, which does not exist on this worker"},
        {upload(1, {neg(10, 1)}, {GraphInput{1, wrong}}),
         "input %1 is float32[2, 2] (strides [2, 1], offset 0) on this worker, the graph was "
         "captured with float32[4]"},
        {upload(1, {neg(10, 1)}, {in1, in1}), "declares input %1 twice"},
        {upload(1, {neg(1, 1)}, {in1}), "command 0 (neg) makes tensor %1, which exists already"},
        {upload(1, {neg(10, 1), neg(10, 1)}, {in1}),
         "command 1 (neg) makes tensor %10, which an earlier command made"},
        {upload(1, {neg(10, 11), neg(11, 1)}, {in1}), "command 0 (neg) reads tensor %11"},
        {upload(1, {neg(0, 1)}, {in1}), "makes output id 0"},
        {upload(1, {on_device}, {in1}), "names CUDA device 0, this node has none"},
        {upload(1, {op(OpId::matmul, 10, {1, 1}), op(OpId::add, 11, {10, 12})}, {in1}),
         "command 1 (add) reads tensor %12"},
        {upload(1,
                {op(OpId::matmul, 10, {1, 1}), op(OpId::view, 11, {10},
                                                  [] {
                                                    OpAttrs a;
                                                    a.ints = {3};
                                                    return a;
                                                  }())},
                {in1}),
         "command 1 (view) fails its shape rule"},
        {upload(1, {cmd::WaitEvent{.event = 4}}, {}),
         "command 0 (wait_event) waits for event 4, which was recorded neither"},
        {upload(1, {cmd::Record{.event = 0}}, {}), "names event id 0"},
        {upload(1, {cmd::SendPeer{.input = 1, .peer = 1, .token = 5}}, {in1}),
         "command 0 (send_to_node)"},
        {upload(1, {neg(10, 1)}, {in1}, {1}), "names output %1, which the program does not make"},
        {upload(1, {cmd::Collective{.group = 3, .input = 1}}, {in1}),
         "names group 3, which does not exist"},
    };
    uint64_t id = 100;
    for (Case& c : cases) {
      CAPTURE(c.needle);
      c.upload.graph = ++id;
      h.run({c.upload});
      std::vector<RemoteFailure> f = h.sync();
      REQUIRE(f.size() == 1);
      INFO(f[0].message);
      CHECK(f[0].op == "capture");
      CHECK(contains(f[0].message, fmt::format("graph {} was refused: ", id)));
      CHECK(contains(f[0].message, c.needle));
      // A replay of it says why.
      h.run({replay(id, 1)});
      h.expect_failure(fmt::format("graph {} was refused at upload: ", id));
    }
    // Refused: nothing of it was kept (its outputs would say why when read).
    CHECK(h.stats().graph_tensors == 0);
    // One id, one graph.
    h.run({upload(200, {neg(10, 1)}, {in1})});
    h.run({upload(200, {neg(11, 1)}, {in1})});
    h.expect_failure("graph 200 was refused: it exists already");
  }

  TEST_CASE("replays are numbered in order, a freed or unknown graph does not replay") {
    Harness h;
    h.put(1, iota({2}));
    h.run({upload(3, {inplace(OpId::neg, 1, {})}, {declared(1, iota({2}))})});
    h.run({replay(3, 2)});
    h.expect_failure("replay 2 of graph 3 did not run: it came after replay 0");
    h.run({replay(3, 1), replay(3, 2)});
    CHECK(h.sync().empty());
    CHECK(same(h.value(1), iota({2})));
    h.run({replay(9, 1)});
    h.expect_failure("graph 9 does not exist on this worker");
    h.run({cmd::GraphFree{.graph = 9}});
    std::vector<RemoteFailure> f = h.sync();
    REQUIRE(f.size() == 1);
    CHECK(f[0].op == "free_graph");
    CHECK(f[0].message == "graph 9 does not exist on this worker");
  }

  TEST_CASE("two streams: a temporary made on one is waited for on the other") {
    Harness h;
    h.put(1, iota({64, 64}));
    cmd::RunOp big = op(OpId::matmul, 10, {1, 1});
    big.stream = 1;
    cmd::RunOp use = op(OpId::add, 11, {10, 1});
    use.stream = 2;
    h.run({cmd::CreateStream{.stream = 1}, cmd::CreateStream{.stream = 2},
           upload(4, {big, use}, {declared(1, iota({64, 64}))}, {11})});
    Tensor want = iota({64, 64}).matmul(iota({64, 64})) + iota({64, 64});
    for (uint64_t k = 1; k <= 5; ++k) {
      h.run({replay(4, k)});
      CHECK(same(h.value(11), want));
    }
    // A stream of the graph that is destroyed breaks it for good.
    h.run({cmd::DestroyStream{.stream = 2}, replay(4, 6)});
    h.expect_failure("replay 6 of graph 4 did not run: its stream 2 was destroyed");
    CHECK(contains(h.failure(11).message, "its stream 2 was destroyed"));
    h.run({replay(4, 7)});
    h.expect_failure("its stream 2 was destroyed");
  }

  TEST_CASE("events and cross-node tokens inside a replay are per replay") {
    Harness h;
    h.session.setup(0, 2, 77);
    h.put(1, iota({3}));
    cmd::RunOp bump = inplace(OpId::add, 1, {}, scalar(Scalar(int64_t{1})));
    bump.stream = 1;
    cmd::Record rec{.stream = 1, .event = 50};
    cmd::WaitEvent wait{.stream = 0, .event = 50};
    cmd::NotifyPeer notify{.event = 50, .peer = 1, .token = 600};
    cmd::WaitRemote remote{.stream = 0, .peer = 1, .token = 601};
    cmd::RunOp after = op(OpId::neg, 10, {1});
    h.run({cmd::CreateStream{.stream = 1},
           upload(2, {bump, rec, wait, notify, remote, after}, {declared(1, iota({3}))}, {10})});
    for (uint64_t k = 1; k <= 3; ++k) {
      CAPTURE(k);
      h.run({replay(2, k)});
      // The notification of this replay's record went to node 1 with this replay's token.
      std::vector<Outgoing> sent = h.take(h.to_peers);
      REQUIRE(sent.size() == 1);
      CHECK(protocol::decode_peer_notify(sent[0].header).token == protocol::graph_token(600, k));
      // The wait for node 1 holds the part until its token of this replay comes.
      CHECK(h.run({cmd::Get{.input = 10, .request = 5}}).empty());
      protocol::PeerNotify n;
      n.session = 77;
      n.from_node = 1;
      n.token = protocol::graph_token(601, k);
      CHECK(h.session.notify(n));
      REQUIRE(h.session.wait_idle(std::chrono::seconds(30)));
      std::vector<Outgoing> got = h.take(h.emitted);
      REQUIRE(got.size() == 1);
      Tensor v = got[0].payloads.at(0);
      CHECK(v.to_vector<float>() == (iota({3}) + static_cast<double>(k)).neg().to_vector<float>());
    }
  }

  TEST_CASE("a node the graph talks to is lost: its replays are refused, saying so") {
    Harness h;
    h.session.setup(0, 2, 9);
    h.put(1, iota({2}));
    h.run(
        {upload(6, {cmd::SendPeer{.input = 1, .peer = 1, .token = 3}}, {declared(1, iota({2}))})});
    h.run({replay(6, 1)});
    CHECK(h.take(h.to_peers).size() == 1);
    h.run({cmd::NodeLost{.node = 1}, replay(6, 2)});
    h.expect_failure("replay 2 of graph 6 did not run: node 1 is lost");
    CHECK(h.take(h.to_peers).empty());
  }

  TEST_CASE("an input's metadata is checked when a replay first reads it") {
    Harness h;
    h.session.setup(0, 2, 4);
    // Input 2 is made behind a cross-node wait: not ready when the graph is uploaded.
    h.put(1, iota({4}));
    cmd::WaitRemote w{.stream = 1, .peer = 1, .token = 8};
    cmd::RunOp make = op(OpId::neg, 2, {1});
    make.stream = 1;
    TensorMeta wrong = TensorMeta::contiguous(DType::Float32, {2, 2});
    h.run({cmd::CreateStream{.stream = 1}, w, make,
           upload(1, {op(OpId::exp, 10, {2})}, {GraphInput{2, wrong}}, {10})});
    protocol::PeerNotify n;
    n.session = 4;
    n.from_node = 1;
    n.token = 8;
    CHECK(h.session.notify(n));
    h.run({replay(1, 1)});
    h.expect_failure(
        "input %2 is float32[4] (strides [1], offset 0) on this worker, the graph was captured "
        "with float32[2, 2]");
  }
}
