// Session tests: batches driven straight into a worker::Session, replies decoded with the
// codec, results compared with the local tensor library.
#include <doctest/doctest.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "dtr/error.hpp"
#include "dtr/tensor.hpp"
#include "protocol/codec.hpp"
#include "protocol/messages.hpp"
#include "support/replies.hpp"
#include "worker/session.hpp"

namespace {

using namespace dtr;
using dtr::local::Tensor;
using protocol::Batch;
using protocol::CmdType;
using protocol::Command;
namespace cmd = protocol::cmd;
using protocol::RemoteFailure;
namespace reply = protocol::reply;
using protocol::TensorId;
using test::decode_as;
using worker::Outgoing;
using worker::PayloadFrame;
using worker::Session;

// ---- commands ----

cmd::RunOp op(OpId id, TensorId out, std::vector<TensorId> inputs, OpAttrs attrs = {}) {
  cmd::RunOp c{.op = id, .out = out, .attrs = std::move(attrs)};
  for (TensorId t : inputs) c.inputs.push_back(t);
  return c;
}

cmd::RunOp inplace(OpId id, TensorId self, std::vector<TensorId> others, OpAttrs attrs = {}) {
  others.insert(others.begin(), self);
  cmd::RunOp c = op(id, protocol::kNoTensor, others, std::move(attrs));
  c.inplace = true;
  return c;
}

cmd::Put put(TensorId out, const TensorMeta& meta, uint32_t frame) {
  return cmd::Put{.out = out, .meta = meta, .payload = frame};
}

cmd::Get get(TensorId id, uint64_t request) {
  return cmd::Get{.input = id, .request = request};
}

cmd::Free free_cmd(TensorId id) {
  return cmd::Free{.input = id};
}

// A Sync or Stats command.
Command request(CmdType type, uint64_t request) {
  if (type == CmdType::Stats) return cmd::Stats{.request = request};
  return cmd::Sync{.request = request};
}

OpAttrs ints(Dims values) {
  OpAttrs a;
  a.ints = values;
  return a;
}

OpAttrs scalar(Scalar s) {
  OpAttrs a;
  a.scalars[0] = s;
  return a;
}

protocol::PeerNotify peer_notify(uint64_t session, uint32_t from, uint64_t token) {
  protocol::PeerNotify n;
  n.session = session;
  n.from_node = from;
  n.token = token;
  return n;
}

// ---- a session with helpers that decode what it replies ----

struct Harness {
  explicit Harness(unsigned threads = 2)
      : session([this](Outgoing&& o) { collect(std::move(o)); }, options(threads)) {}

  static worker::SessionOptions options(unsigned threads) {
    worker::SessionOptions o;
    o.threads = threads;
    return o;
  }

  void collect(Outgoing&& o) {
    std::lock_guard lock(mu);
    (o.peer < 0 ? emitted : to_peers).push_back(std::move(o));
  }
  std::vector<Outgoing> take() {
    std::lock_guard lock(mu);
    std::vector<Outgoing> out;
    out.swap(emitted);
    return out;
  }
  std::vector<Outgoing> take_peer_messages() {
    std::lock_guard lock(mu);
    std::vector<Outgoing> out;
    out.swap(to_peers);
    return out;
  }

  std::mutex mu;
  std::vector<Outgoing> emitted;
  std::vector<Outgoing> to_peers;
  Session session;
  // Payload frames as a receiving server has them: bytes owned by something else.
  std::vector<PayloadFrame> frames;

  uint32_t add_frame(const Tensor& t) {
    auto bytes = std::make_shared<std::vector<char>>(static_cast<size_t>(t.numel()) *
                                                     element_size(t.dtype()));
    if (!bytes->empty()) std::memcpy(bytes->data(), t.contiguous().raw_data(), bytes->size());
    frames.push_back(PayloadFrame{bytes->data(), bytes->size(), bytes});
    return static_cast<uint32_t>(frames.size());
  }
  uint32_t add_raw_frame(size_t size) {
    auto bytes = std::make_shared<std::vector<char>>(size, 0);
    frames.push_back(PayloadFrame{bytes->data(), bytes->size(), bytes});
    return static_cast<uint32_t>(frames.size());
  }

  // Dispatches the commands, waits (bounded) until every stream has run what it could,
  // and returns the replies emitted meanwhile.
  std::vector<Outgoing> run(std::vector<Command> commands) {
    auto b = std::make_shared<Batch>();
    b->commands = std::move(commands);
    session.run(b, frames);
    frames.clear();
    REQUIRE(session.wait_idle(std::chrono::seconds(30)));
    return take();
  }

  void put_tensor(TensorId id, const Tensor& t) {
    uint32_t f = add_frame(t);
    CHECK(run({put(id, TensorMeta::contiguous(t.dtype(), t.shape()), f)}).empty());
  }

  // The Get reply for `id`: its decoded header and the tensor (undefined when failed).
  std::pair<reply::Get, Tensor> fetch(TensorId id) {
    std::vector<Outgoing> out = run({get(id, 1000 + id)});
    REQUIRE(out.size() == 1);
    auto r = decode_as<reply::Get>(out[0].header, out[0].payloads.size());
    CHECK(r.request == 1000 + id);
    Tensor t;
    if (!r.failure) {
      REQUIRE(out[0].payloads.size() == 1);
      t = out[0].payloads[0];
      CHECK(t.is_contiguous());
      CHECK(t.meta().shape == r.meta.shape);
      CHECK(t.dtype() == r.meta.dtype);
    }
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
    std::vector<Outgoing> out = run({request(CmdType::Sync, 7)});
    REQUIRE(out.size() == 1);
    auto r = decode_as<reply::Sync>(out[0].header, 0);
    CHECK(r.request == 7);
    return r.failures;
  }
  protocol::MemoryStatsWire stats() {
    std::vector<Outgoing> out = run({request(CmdType::Stats, 8)});
    REQUIRE(out.size() == 1);
    auto r = decode_as<reply::Stats>(out[0].header, 0);
    CHECK(r.request == 8);
    return r.stats;
  }
};

bool contains(const std::string& s, const std::string& needle) {
  return s.find(needle) != std::string::npos;
}

template <typename T>
void check_equal(const Tensor& got, const Tensor& want) {
  CHECK(got.dtype() == want.dtype());
  CHECK(got.shape() == want.shape());
  CHECK(got.to_vector<T>() == want.to_vector<T>());
}

Tensor iota(Shape shape, DType dtype = DType::Float32) {
  return local::arange(0, numel_of(shape), 1, dtype).reshape(shape);
}

}  // namespace

TEST_SUITE("worker/session") {
  TEST_CASE("put then get returns the same values") {
    Harness h;
    Tensor f = local::from_vector<float>({1.5f, -2.f, 3.25f, 0.f, 1e30f, -0.f}, {2, 3});
    Tensor i = local::from_vector<int64_t>({int64_t{1} << 62, -5, 7}, {3});
    Tensor b = local::from_vector<bool>({true, false, true, true}, {2, 2});
    Tensor scalar = local::full({}, 42.0, DType::Float64);
    Tensor empty = local::empty({0, 3}, DType::Int32);
    h.put_tensor(1, f);
    h.put_tensor(2, i);
    h.put_tensor(3, b);
    h.put_tensor(4, scalar);
    h.put_tensor(5, empty);
    check_equal<float>(h.value(1), f);
    check_equal<int64_t>(h.value(2), i);
    check_equal<bool>(h.value(3), b);
    check_equal<double>(h.value(4), scalar);
    Tensor e = h.value(5);
    CHECK(e.shape() == Shape{0, 3});
    CHECK(e.dtype() == DType::Int32);
    CHECK(h.sync().empty());
  }

  TEST_CASE("small CPU work on an idle stream runs during run(), in order, failures carried") {
    Harness h;
    h.put_tensor(1, iota({4}));
    // neg, an in-place add, a failing op (shape mismatch), its dependent, and the gets:
    // all run on the dispatch thread, so every reply is out when run() returns, without
    // waiting for the executor.
    h.put_tensor(9, iota({3}));
    auto b = std::make_shared<Batch>();
    b->commands = {op(OpId::neg, 2, {1}),
                   inplace(OpId::add, 2, {1}),
                   op(OpId::add, 3, {1, 9}),
                   op(OpId::neg, 4, {3}),
                   get(2, 1),
                   get(4, 2)};
    h.session.run(b, {});
    std::vector<Outgoing> out = h.take();
    REQUIRE(out.size() == 2);
    auto r2 = decode_as<reply::Get>(out[0].header, out[0].payloads.size());
    auto r4 = decode_as<reply::Get>(out[1].header, out[1].payloads.size());
    CHECK(r2.request == 1);
    REQUIRE(!r2.failure);
    check_equal<float>(out[0].payloads[0], local::zeros({4}, DType::Float32));
    CHECK(r4.request == 2);
    REQUIRE(r4.failure);
    CHECK(r4.failure->cause_tensor == 3);
    CHECK(r4.failure->cause_op == "add");
    REQUIRE(h.session.wait_idle(std::chrono::seconds(30)));
    // The failure is reported once: the Get carried it (its cause), so the next sync does
    // not report it again (issue 40), as in the executor's path.
    CHECK(h.sync().empty());
  }

  TEST_CASE("work on a busy stream, and large or matrix work, still runs in order") {
    Harness h;
    const int64_t big = int64_t{1} << 16;  // over the inline limit
    h.put_tensor(1, local::full({big}, 1.0, DType::Float32));
    h.put_tensor(2, iota({2, 2}));
    // The big add goes to the executor; the small neg behind it on the same stream must
    // not overtake it (it reads its output); the matmul also goes to the executor.
    std::vector<Outgoing> out =
        h.run({op(OpId::add, 3, {1, 1}), op(OpId::sum, 4, {3}, ints({})), op(OpId::neg, 5, {4}),
               op(OpId::matmul, 6, {2, 2}), get(5, 1), get(6, 2)});
    REQUIRE(out.size() == 2);
    for (const Outgoing& o : out) {
      auto r = decode_as<reply::Get>(o.header, o.payloads.size());
      REQUIRE(!r.failure);
      if (r.request == 1) CHECK(o.payloads[0].item().to<double>() == -2.0 * big);
      if (r.request == 2)
        check_equal<float>(o.payloads[0], local::from_vector<float>({2, 3, 6, 11}, {2, 2}));
    }
  }

  TEST_CASE("several puts in one batch, with unaligned payload bytes") {
    Harness h;
    Tensor a = iota({4}, DType::Float64);
    Tensor b = iota({3}, DType::Int32);
    // A frame whose bytes start at an odd address: the session copies them.
    auto bytes = std::make_shared<std::vector<char>>(4 * 8 + 1);
    std::memcpy(bytes->data() + 1, a.raw_data(), 32);
    h.frames.push_back(PayloadFrame{bytes->data() + 1, 32, bytes});
    uint32_t fb = h.add_frame(b);
    CHECK(h.run({put(1, a.meta(), 1), put(2, b.meta(), fb)}).empty());
    check_equal<double>(h.value(1), a);
    check_equal<int32_t>(h.value(2), b);
  }

  TEST_CASE("ops give what the local library gives") {
    Harness h;
    Tensor a = iota({2, 3});
    Tensor b = local::from_vector<float>({10, 20, 30}, {3});
    Tensor m = iota({3, 4});
    h.put_tensor(1, a);
    h.put_tensor(2, b);
    h.put_tensor(3, m);
    h.run({op(OpId::add, 4, {1, 2}),                     // broadcast add
           op(OpId::matmul, 5, {1, 3}),                  // [2,3] @ [3,4]
           op(OpId::transpose, 6, {1}, ints({0, 1})),    // a view
           op(OpId::mul, 7, {6}, scalar(2.0)),           // scalar operand
           op(OpId::sum, 8, {5}, ints({1})),             // reduction
           op(OpId::narrow, 9, {3}, ints({1, 1, 2}))});  // a strided view
    check_equal<float>(h.value(4), a.add(b));
    check_equal<float>(h.value(5), a.matmul(m));
    check_equal<float>(h.value(6), a.t().contiguous());
    check_equal<float>(h.value(7), a.t().mul(2.0));
    check_equal<float>(h.value(8), a.matmul(m).sum(1));
    check_equal<float>(h.value(9), m.narrow(1, 1, 2).contiguous());
    CHECK(h.sync().empty());
  }

  TEST_CASE("in-place ops and creation ops") {
    Harness h;
    Tensor a = iota({2, 2});
    h.put_tensor(1, a);
    OpAttrs fill = ints({2, 2});
    fill.scalars[0] = 3.0;
    h.run({op(OpId::full, 2, {}, fill), inplace(OpId::add, 1, {2}), inplace(OpId::neg, 2, {})});
    check_equal<float>(h.value(1), a.add(3.0));
    check_equal<float>(h.value(2), local::full({2, 2}, -3.0));
    // A view aliases its base: writing the base shows through the view.
    h.run({op(OpId::view, 3, {1}, ints({4})), inplace(OpId::mul, 1, {}, scalar(0))});
    check_equal<float>(h.value(3), local::zeros({4}));
    CHECK(h.sync().empty());
  }

  TEST_CASE("unknown input id") {
    Harness h;
    h.run({op(OpId::neg, 2, {99})});
    std::vector<RemoteFailure> f = h.sync();
    REQUIRE(f.size() == 1);
    CHECK(f[0].tensor == 2);
    CHECK(f[0].op == "neg");
    CHECK(contains(f[0].message, "%99 does not exist"));
    // The output exists, failed, so that its users learn why.
    CHECK(contains(h.failure(2).message, "does not exist"));
    // A get of an id that was never made says so too.
    CHECK(contains(h.failure(55).message, "tensor %55 does not exist"));
  }

  TEST_CASE("reused and zero output ids") {
    Harness h;
    Tensor a = iota({3});
    h.put_tensor(1, a);
    h.put_tensor(2, a);
    h.run({op(OpId::neg, 2, {1})});
    uint32_t f = h.add_frame(a);
    h.run({put(1, a.meta(), f)});
    h.run({op(OpId::neg, protocol::kNoTensor, {1})});
    f = h.add_frame(a);
    h.run({put(protocol::kNoTensor, a.meta(), f)});
    std::vector<RemoteFailure> failures = h.sync();
    REQUIRE(failures.size() == 4);
    CHECK(contains(failures[0].message, "%2 is already in use"));
    CHECK(failures[0].op == "neg");
    CHECK(contains(failures[1].message, "%1 is already in use"));
    CHECK(failures[1].op == "put");
    CHECK(contains(failures[2].message, "not a valid id"));
    CHECK(contains(failures[3].message, "not a valid id"));
    // The tensors that were there are untouched.
    check_equal<float>(h.value(1), a);
    check_equal<float>(h.value(2), a);
    CHECK(h.stats().live_tensors == 2);
  }

  TEST_CASE("free of an unknown id is reported") {
    Harness h;
    h.run({free_cmd(42)});
    std::vector<RemoteFailure> f = h.sync();
    REQUIRE(f.size() == 1);
    CHECK(f[0].op == "free");
    CHECK(f[0].tensor == 42);
    CHECK(contains(f[0].message, "%42 does not exist"));
  }

  TEST_CASE("a failing op fails its output, dependents carry the root cause") {
    Harness h;
    Tensor i = local::from_vector<int64_t>({1, 2, 3}, {3});
    h.put_tensor(1, i);
    h.put_tensor(2, iota({2, 3}));
    h.put_tensor(3, iota({4, 5}));
    h.run({op(OpId::pow, 10, {1}, scalar(int64_t{-1})),            // integer to a negative power
           op(OpId::add, 11, {10, 1}),                             // depends on the failed one
           op(OpId::neg, 12, {11}),                                // and one more level down
           op(OpId::matmul, 20, {2, 3}),                           // mismatched shapes, sent raw
           op(OpId::relu, 21, {20}), op(OpId::add, 30, {1, 1})});  // unrelated work goes on
    // Only the two roots are reported, each once; the tensors stay failed when read.
    std::vector<RemoteFailure> f = h.sync();
    REQUIRE(f.size() == 2);
    CHECK(f[0].tensor == 10);
    CHECK(f[1].tensor == 20);
    CHECK(h.sync().empty());
    RemoteFailure root = h.failure(10);
    CHECK(root.tensor == 10);
    CHECK(root.op == "pow");
    CHECK(contains(root.message, "negative integer powers"));
    CHECK(root.cause_tensor == 10);

    RemoteFailure dep = h.failure(12);
    CHECK(dep.tensor == 12);
    CHECK(dep.op == "neg");
    CHECK(contains(dep.message, "input %11 is failed"));
    CHECK(dep.cause_tensor == 10);
    CHECK(dep.cause_op == "pow");
    CHECK(contains(dep.cause_message, "negative integer powers"));

    RemoteFailure mm = h.failure(21);
    CHECK(mm.cause_tensor == 20);
    CHECK(mm.cause_op == "matmul");
    CHECK(contains(mm.cause_message, "[2, 3]"));

    check_equal<int64_t>(h.value(30), i.add(i));
    h.run({op(OpId::mul, 31, {30, 1})});
    check_equal<int64_t>(h.value(31), i.add(i).mul(i));

    CHECK(h.sync().empty());  // reported above; reading them reports nothing new
    // Freeing a failed tensor works like any other.
    h.run({free_cmd(10), free_cmd(11)});
    CHECK(h.sync().empty());
  }

  TEST_CASE("ops of more than two inputs: resolved, run inline or as tasks, failures carried") {
    Harness h;
    Tensor x = iota({2, 3, 5, 5}), w = iota({4, 3, 3, 3}).mul(0.01), b = iota({4});
    Tensor cond = iota({2, 3}).gt(2.0);
    const int64_t big = int64_t{1} << 16;  // over the inline limit: a task with more_in
    Tensor large = local::full({big}, 2.0, DType::Float32);
    h.put_tensor(1, x);
    h.put_tensor(2, w);
    h.put_tensor(3, b);
    h.put_tensor(4, cond);
    h.put_tensor(5, iota({2, 3}));
    h.put_tensor(6, large);
    h.put_tensor(7, local::from_vector<int64_t>({1}, {1}));
    OpAttrs conv = ints({1, 1, 1, 1, 1, 1, 1});
    h.run({op(OpId::conv2d, 10, {1, 2, 3}, conv), op(OpId::where, 11, {4, 5, 5}),
           op(OpId::cat, 12, {5, 5, 5, 5, 5}, ints({1})), op(OpId::cat, 13, {6, 6, 6}, ints({0})),
           op(OpId::pow, 14, {7}, scalar(int64_t{-1})),  // fails
           op(OpId::where, 15, {4, 5, 14}),              // its third input failed
           op(OpId::cat, 16, {5, 5, 99}, ints({0}))});   // an unknown third input
    check_equal<float>(h.value(10), x.conv2d(w, b, 1, 1));
    check_equal<float>(h.value(11), dtr::where(cond, iota({2, 3}), iota({2, 3})));
    std::vector<Tensor> five(5, iota({2, 3}));
    check_equal<float>(h.value(12), dtr::cat(five, 1));
    check_equal<float>(h.value(13), local::full({3 * big}, 2.0, DType::Float32));
    RemoteFailure dep = h.failure(15);
    CHECK(dep.op == "where");
    CHECK(contains(dep.message, "input %14 is failed"));
    CHECK(dep.cause_tensor == 14);
    RemoteFailure missing = h.failure(16);
    CHECK(missing.op == "cat");
    CHECK(contains(missing.message, "%99"));
    CHECK(h.sync().empty());  // both roots were reported by the Gets above
  }

  TEST_CASE("put with a payload of the wrong size") {
    Harness h;
    uint32_t f = h.add_raw_frame(10);
    h.run({put(1, TensorMeta::contiguous(DType::Float32, {2, 2}), f)});
    RemoteFailure fail = h.failure(1);
    CHECK(fail.op == "put");
    CHECK(contains(fail.message, "payload has 10 bytes, float32[2, 2] needs 16"));
    CHECK(h.sync().empty());  // reported by the Get above
  }

  TEST_CASE("put of a shape whose byte size overflows is rejected") {
    Harness h;
    // 2^61 float64 elements are 2^64 bytes: 0 after wrapping around.
    uint32_t f = h.add_raw_frame(0);
    h.run({put(1, TensorMeta::contiguous(DType::Float64, {int64_t{1} << 61}), f),
           op(OpId::neg, 2, {1})});
    RemoteFailure fail = h.failure(1);
    CHECK(fail.op == "put");
    CHECK(h.failure(2).cause_tensor == 1);
  }

  TEST_CASE("stats count live tensors") {
    Harness h;
    CHECK(h.stats().live_tensors == 0);
    int64_t bytes_before = h.stats().bytes_in_use;
    Tensor a = iota({256});
    h.put_tensor(1, a);
    h.put_tensor(2, a);
    protocol::MemoryStatsWire s = h.stats();
    CHECK(s.live_tensors == 2);
    CHECK(s.bytes_in_use >= bytes_before + 2 * 256 * 4);
    CHECK(s.peak_bytes >= s.bytes_in_use);
    h.run({op(OpId::add, 3, {1, 2})});
    CHECK(h.stats().live_tensors == 3);
    h.run({free_cmd(1), free_cmd(3)});
    CHECK(h.stats().live_tensors == 1);
    h.run({free_cmd(2)});
    CHECK(h.stats().live_tensors == 0);
    CHECK(h.session.live_tensors() == 0);
    CHECK(h.sync().empty());
  }

  TEST_CASE("requests are answered in order within a batch") {
    Harness h;
    h.put_tensor(1, iota({2}));
    std::vector<Outgoing> out =
        h.run({get(1, 1), request(CmdType::Stats, 2), free_cmd(9), request(CmdType::Sync, 3)});
    REQUIRE(out.size() == 3);
    CHECK(decode_as<reply::Get>(out[0].header, 1).request == 1);
    CHECK(decode_as<reply::Stats>(out[1].header, 0).request == 2);
    auto sync = decode_as<reply::Sync>(out[2].header, 0);
    CHECK(sync.request == 3);
    CHECK(sync.failures.size() == 1);
  }

  TEST_CASE("commands on a stream that does not exist fail but are answered") {
    Harness h;
    h.put_tensor(1, iota({2}));
    auto g = get(1, 5);
    g.stream = 3;
    auto n = op(OpId::neg, 2, {1});
    n.stream = 3;
    cmd::Stats s{.request = 6};
    s.stream = 3;
    std::vector<Outgoing> out = h.run({n, g, s});
    REQUIRE(out.size() == 2);
    auto got = decode_as<reply::Get>(out[0].header, out[0].payloads.size());
    CHECK(got.request == 5);
    REQUIRE(got.failure);
    CHECK(contains(got.failure->message, "stream 3 does not exist"));
    CHECK(decode_as<reply::Stats>(out[1].header, 0).request == 6);
    CHECK(contains(h.failure(2).message, "stream 3 does not exist"));
  }

  TEST_CASE("in-place command without inputs, and with an output id") {
    Harness h;
    auto c = op(OpId::fill_, protocol::kNoTensor, {}, scalar(1.0));
    c.inplace = true;
    auto named = inplace(OpId::neg, 1, {});
    named.out = 5;
    h.put_tensor(1, iota({2}));
    h.run({c, named});
    std::vector<RemoteFailure> f = h.sync();
    REQUIRE(f.size() == 2);
    CHECK(contains(f[1].message, "names output id %5"));
    CHECK(h.stats().live_tensors == 1);
    check_equal<float>(h.value(1), iota({2}));
  }

  // ---- streams and events ----

  TEST_CASE("stream and event bookkeeping errors are failures naming the stream or event") {
    Harness h;
    auto on = [](auto c, uint32_t stream) -> Command {
      c.stream = stream;
      return c;
    };
    cmd::CreateStream create;
    cmd::DestroyStream destroy;
    cmd::WaitEvent wait;
    wait.event = 12;
    cmd::NotifyPeer notify;
    notify.event = 1;
    notify.peer = 1;
    cmd::Record record;
    record.event = 0;
    h.run({on(create, 0), on(create, 4), on(create, 4), on(destroy, 0), on(destroy, 9), wait,
           notify, record});
    std::vector<RemoteFailure> f = h.sync();
    REQUIRE(f.size() == 7);
    CHECK(contains(f[0].message, "stream 0 already exists"));
    CHECK(contains(f[1].message, "stream 4 already exists"));
    CHECK(contains(f[2].message, "default stream (0) cannot be destroyed"));
    CHECK(contains(f[3].message, "stream 9 does not exist"));
    CHECK(contains(f[4].message, "event 12 was never recorded"));
    CHECK(contains(f[5].message, "no peer table"));
    CHECK(contains(f[6].message, "event id 0 is not a valid id"));
    // A query of an unknown event is answered with the failure.
    cmd::EventQuery query;
    query.event = 77;
    query.request = 5;
    std::vector<Outgoing> out = h.run({query});
    REQUIRE(out.size() == 1);
    auto r = decode_as<reply::Event>(out[0].header, 0);
    CHECK(r.request == 5);
    REQUIRE(r.failure);
    CHECK(contains(r.failure->message, "event 77 was never recorded"));
    CHECK(h.session.streams() == 2);
  }

  TEST_CASE("a wait orders a stream after another stream's record") {
    Harness h(2);
    h.put_tensor(1, iota({64, 64}));
    cmd::CreateStream create;
    create.stream = 1;
    auto create2 = create;
    create2.stream = 2;
    h.run({create, create2, op(OpId::full, 2, {}, scalar(0.0))});
    for (int rep = 0; rep < 20; ++rep) {
      // stream 1: slow matmuls, then 2 += sum; record event 5. stream 2: wait, 3 = 2 * 1.
      std::vector<Command> cmds;
      TensorId id = 100;
      for (int i = 0; i < 4; ++i) {
        auto m = op(OpId::matmul, id, {1, 1});
        m.stream = 1;
        cmds.push_back(m);
        ++id;
      }
      auto s = op(OpId::sum, 50, {id - 1}, ints({}));
      s.stream = 1;
      auto add = inplace(OpId::add, 2, {50});
      add.stream = 1;
      cmd::Record rec;
      rec.stream = 1;
      rec.event = 5;
      cmd::WaitEvent w;
      w.stream = 2;
      w.event = 5;
      auto copy = op(OpId::mul, 60, {2}, scalar(1.0));
      copy.stream = 2;
      cmds.insert(cmds.end(), {s, add, rec, w, copy});
      for (TensorId t = 100; t < id; ++t) cmds.push_back(free_cmd(t));
      h.run(cmds);
      Tensor got = h.value(60);
      h.run({free_cmd(50), free_cmd(60)});
      Tensor a = iota({64, 64});
      double one = a.matmul(a).sum().item().to<double>();
      CHECK(got.item().to<double>() == doctest::Approx(one * (rep + 1)).epsilon(1e-5));
    }
    CHECK(h.sync().empty());
  }

  TEST_CASE("cross-node waits: the notification may come before or after the wait") {
    Harness h;
    h.session.setup(1, 3, 0xABC);
    h.put_tensor(1, iota({4}));
    // Notification first (a fast peer), then the wait: the stream does not block.
    CHECK(h.session.notify(peer_notify(0xABC, 0, 41)));
    cmd::WaitRemote w;
    w.peer = 0;
    w.token = 41;
    h.run({w, op(OpId::neg, 2, {1})});
    check_equal<float>(h.value(2), iota({4}).neg());
    // Wait first: the stream parks, later commands wait, then the notification frees it.
    w.token = 42;
    h.run({w, op(OpId::neg, 3, {2})});
    auto g = get(3, 9);
    CHECK(h.run({g}).empty());  // behind the wait on the same stream
    CHECK(h.session.notify(peer_notify(0xABC, 2, 42)));
    REQUIRE(h.session.wait_idle(std::chrono::seconds(30)));
    std::vector<Outgoing> out = h.take();
    REQUIRE(out.size() == 1);
    CHECK(decode_as<reply::Get>(out[0].header, 1).request == 9);
    // Strangers are turned away: another session, an unknown node.
    CHECK_FALSE(h.session.notify(peer_notify(0xABD, 0, 43)));
    CHECK_FALSE(h.session.notify(peer_notify(0xABC, 3, 43)));
    // Waits naming a node that is not a peer fail.
    w.peer = 1;  // this node
    w.token = 44;
    w.stream = 0;
    h.run({w});
    std::vector<RemoteFailure> f = h.sync();
    REQUIRE(f.size() == 1);
    CHECK(contains(f[0].message, "node 1 is not a peer of node 1"));
  }

  TEST_CASE("NotifyPeer sends the notification when the record has run, not before") {
    Harness h;
    h.session.setup(0, 2, 7);
    cmd::Record rec;
    rec.event = 3;
    cmd::NotifyPeer notify;
    notify.event = 3;
    notify.peer = 1;
    notify.token = 99;
    // The record is behind a cross-node wait of its own, so it cannot have run.
    cmd::WaitRemote w;
    w.peer = 1;
    w.token = 5;
    h.run({w, rec, notify});
    CHECK(h.take_peer_messages().empty());
    CHECK(h.session.notify(peer_notify(7, 1, 5)));
    REQUIRE(h.session.wait_idle(std::chrono::seconds(30)));
    std::vector<Outgoing> sent = h.take_peer_messages();
    REQUIRE(sent.size() == 1);
    CHECK(sent[0].peer == 1);
    protocol::PeerNotify n = protocol::decode_peer_notify(sent[0].header);
    CHECK(n.session == 7);
    CHECK(n.from_node == 0);
    CHECK(n.token == 99);
    // Once recorded, a new NotifyPeer is answered at once.
    notify.token = 100;
    h.run({notify});
    sent = h.take_peer_messages();
    REQUIRE(sent.size() == 1);
    CHECK(protocol::decode_peer_notify(sent[0].header).token == 100);
  }

  TEST_CASE("a session with parked streams and queued work ends cleanly") {
    Harness h;
    h.session.setup(0, 2, 1);
    cmd::WaitRemote w;
    w.peer = 1;
    w.token = 1;
    h.put_tensor(1, iota({8}));
    h.run({w, op(OpId::neg, 2, {1}), get(2, 3)});
    CHECK(h.take().empty());
    // ~Harness destroys the session with the stream parked forever: no hang, no leak.
  }

  TEST_CASE("copies between nodes: bytes, sizes checked, failures carried") {
    Harness h;
    h.session.setup(0, 2, 5);
    h.put_tensor(1, iota({2, 3}));
    cmd::SendPeer send;
    send.input = 1;
    send.peer = 1;
    send.token = 70;
    h.run({send});
    std::vector<Outgoing> sent = h.take_peer_messages();
    REQUIRE(sent.size() == 1);
    CHECK(sent[0].peer == 1);
    REQUIRE(sent[0].payloads.size() == 1);
    check_equal<float>(sent[0].payloads[0], iota({2, 3}));
    CHECK(protocol::decode_peer_notify(sent[0].header).token == 70);
    // An unknown source still tells the receiver, which would otherwise wait forever.
    send.input = 99;
    send.token = 71;
    h.run({send});
    sent = h.take_peer_messages();
    REQUIRE(sent.size() == 1);
    protocol::PeerNotify n = protocol::decode_peer_notify(sent[0].header);
    CHECK(n.failed);
    CHECK(contains(n.failure.message, "tensor %99 does not exist"));

    // Receiving: the right bytes make a tensor; a wrong size fails naming both sizes.
    cmd::RecvPeer recv;
    recv.out = 10;
    recv.meta = TensorMeta::contiguous(DType::Float32, {2, 3});
    recv.peer = 1;
    recv.token = 80;
    h.run({recv});
    h.add_frame(iota({2, 3}));
    PayloadFrame bytes = h.frames.back();
    h.frames.clear();
    CHECK(h.session.notify(peer_notify(5, 1, 80), &bytes));
    // A duplicate waits as an unmatched notification (bounded, freed with the session); it
    // changes nothing that exists.
    CHECK(h.session.notify(peer_notify(5, 1, 80), &bytes));
    check_equal<float>(h.value(10), iota({2, 3}));
    recv.out = 11;
    recv.token = 81;
    h.add_frame(iota({5}));
    bytes = h.frames.back();
    h.frames.clear();
    CHECK(h.session.notify(peer_notify(5, 1, 81), &bytes));  // before the command
    h.run({recv});
    RemoteFailure f = h.failure(11);
    CHECK(contains(f.message, "node 1 sent 20 bytes"));
    CHECK(contains(f.message, "needs 24"));
    // A failed source fails the copy, naming the first cause.
    recv.out = 12;
    recv.token = 82;
    protocol::PeerNotify failed = peer_notify(5, 1, 82);
    failed.failed = true;
    failed.failure.tensor = 3;
    failed.failure.op = "pow";
    failed.failure.message = "negative exponent";
    failed.failure.cause_tensor = 3;
    failed.failure.cause_op = "pow";
    failed.failure.cause_message = "negative exponent";
    CHECK(h.session.notify(failed));
    h.run({recv});
    f = h.failure(12);
    CHECK(contains(f.message, "sent by node 1 is failed"));
    CHECK(f.cause_op == "pow");
  }

  TEST_CASE("same host: attach, puts by address, pulled gets held until their release") {
    Harness h;
    // Before Attach: a PutFrom fails naming why, a pulled Get is answered with a frame.
    Tensor x = iota({64, 1024});
    const TensorMeta m = TensorMeta::contiguous(x.dtype(), x.shape());
    const auto here = reinterpret_cast<uint64_t>(x.raw_data());
    h.run({cmd::PutFrom{.out = 1, .meta = m, .address = here}});
    CHECK(contains(h.failure(1).message, "has not attached"));
    h.put_tensor(2, x);
    std::vector<Outgoing> out = h.run({cmd::Get{.input = 2, .request = 20, .pull = true}});
    REQUIRE(out.size() == 1);
    CHECK(out[0].payloads.size() == 1);
    CHECK(decode_as<reply::Get>(out[0].header, 1).address == 0);

    // Attach naming memory that does not hold the session's challenge: refused, with the
    // reason; naming memory of this process (the session runs in it) that does: attached,
    // and the master's challenge held where the reply says.
    const uint64_t theirs = h.session.same_host_challenge();
    const uint64_t wrong = theirs ^ 1;
    const auto pid = static_cast<uint32_t>(getpid());
    out = h.run({cmd::Attach{
        .request = 21, .pid = pid, .address = reinterpret_cast<uint64_t>(&wrong), .challenge = 5}});
    REQUIRE(out.size() == 1);
    auto r = decode_as<reply::Attach>(out[0].header, 0);
    CHECK_FALSE(r.done);
    CHECK(contains(r.message, "does not hold the challenge"));
    h.run({cmd::PutFrom{.out = 5, .meta = m, .address = here}});
    CHECK(contains(h.failure(5).message, "has not attached"));
    out = h.run({cmd::Attach{.request = 22,
                             .pid = pid,
                             .address = reinterpret_cast<uint64_t>(&theirs),
                             .challenge = 0x5eed}});
    REQUIRE(out.size() == 1);
    r = decode_as<reply::Attach>(out[0].header, 0);
    REQUIRE(r.done);
    CHECK(r.message.empty());
    CHECK(*reinterpret_cast<const uint64_t*>(r.address) == 0x5eed);

    h.run({cmd::PutFrom{.out = 3, .meta = m, .address = here}});
    check_equal<float>(h.value(3), x);
    // A bad address fails the tensor, naming the read.
    h.run({cmd::PutFrom{.out = 4, .meta = m, .address = 8}});
    RemoteFailure bad = h.failure(4);
    CHECK(bad.op == "put");
    CHECK(contains(bad.message, "reading the master's tensor"));
    CHECK(contains(bad.message, "Bad address"));

    // A pulled Get names the address of bytes that stay until Release, even once the
    // tensor itself is freed.
    const int64_t live = h.stats().live_tensors;
    out = h.run({cmd::Get{.input = 3, .request = 23, .pull = true}, free_cmd(3)});
    REQUIRE(out.size() == 1);
    CHECK(out[0].payloads.empty());
    auto pulled = decode_as<reply::Get>(out[0].header, 0);
    CHECK(pulled.meta == m);
    REQUIRE(pulled.address != 0);
    CHECK(std::memcmp(reinterpret_cast<const void*>(pulled.address), x.raw_data(),
                      static_cast<size_t>(x.numel()) * 4) == 0);
    CHECK(h.stats().live_tensors == live - 1);  // the table let 3 go; the pin did not
    CHECK(std::memcmp(reinterpret_cast<const void*>(pulled.address), x.raw_data(),
                      static_cast<size_t>(x.numel()) * 4) == 0);
    CHECK(h.run({cmd::Release{.request = 23}, cmd::Release{.request = 23},
                 cmd::Release{.request = 99}})
              .empty());
    for (const RemoteFailure& f : h.sync()) CHECK(f.op == "put");  // releases never fail
  }
}
