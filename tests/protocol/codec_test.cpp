// Codec tests: every message and command type survives a round trip, and every malformed
// header (built by encoding a valid one and patching bytes) is rejected with a
// ProtocolError whose message names the problem; no prefix of a valid batch decodes.
#include <doctest/doctest.h>
#include <fmt/format.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <string_view>
#include <vector>

#include "dtr/error.hpp"
#include "protocol/codec.hpp"
#include "protocol/messages.hpp"

namespace {

using namespace dtr;
using namespace dtr::protocol;

// The message of the ProtocolError `f` throws; fails the test when it throws nothing or
// something else.
template <typename F>
std::string protocol_error_of(F&& f) {
  try {
    f();
  } catch (const ProtocolError& e) {
    return e.what();
  } catch (const std::exception& e) {
    FAIL_CHECK("expected a ProtocolError, got another exception: " << e.what());
    return "";
  }
  FAIL_CHECK("expected a ProtocolError, nothing was thrown");
  return "";
}

#define CHECK_REJECTS(expr, needle)                                  \
  do {                                                               \
    std::string message_ = protocol_error_of([&] { (void)(expr); }); \
    INFO("error message: " << message_);                             \
    CHECK(message_.find(needle) != std::string::npos);               \
  } while (false)

// Offsets in a batch header: prefix, Cereal's endianness tag, the u32 command count, then
// the commands.
constexpr size_t kTagOffset = kPrefixBytes;
constexpr size_t kCountOffset = kPrefixBytes + 1;
constexpr size_t kFirstCommand = kCountOffset + 4;

// Overwrites frame[at..at+sizeof(T)) with `v` (little endian), checking first that the
// bytes there are `old` so that a layout change fails loudly instead of testing nothing.
template <typename T>
std::string patched(std::string frame, size_t at, T old, T v) {
  REQUIRE(at + sizeof(T) <= frame.size());
  T current;
  std::memcpy(&current, frame.data() + at, sizeof(T));
  REQUIRE(current == old);
  std::memcpy(frame.data() + at, &v, sizeof(T));
  return frame;
}

Command run_op(OpId op, TensorId out, std::vector<TensorId> inputs, OpAttrs attrs = {}) {
  Command c;
  c.type = CmdType::RunOp;
  c.op = op;
  c.out = out;
  c.n_inputs = static_cast<uint8_t>(inputs.size());
  for (size_t i = 0; i < inputs.size() && i < 2; ++i) c.inputs[i] = inputs[i];
  c.attrs = std::move(attrs);
  return c;
}

Command put(TensorId out, DType dtype, Shape shape, uint32_t payload) {
  Command c;
  c.type = CmdType::Put;
  c.out = out;
  c.meta = TensorMeta::contiguous(dtype, shape);
  c.payload = payload;
  return c;
}

Command simple(CmdType type, TensorId input, uint64_t request) {
  Command c;
  c.type = type;
  if (type == CmdType::Get || type == CmdType::Free) {
    c.inputs[0] = input;
    c.n_inputs = 1;
  }
  if (type != CmdType::Free) c.request = request;
  return c;
}

Batch batch_of(std::vector<Command> commands) {
  Batch b;
  b.commands = std::move(commands);
  return b;
}

void check_same_command(const Command& got, const Command& want) {
  CHECK(got.type == want.type);
  CHECK(got.stream == want.stream);
  CHECK(got.device == want.device);
  switch (want.type) {
    case CmdType::RunOp:
      CHECK(got.op == want.op);
      CHECK(got.inplace == want.inplace);
      CHECK(got.n_inputs == want.n_inputs);
      for (int i = 0; i < want.n_inputs; ++i) CHECK(got.inputs[i] == want.inputs[i]);
      CHECK(got.out == want.out);
      CHECK(got.attrs == want.attrs);
      break;
    case CmdType::Put:
      CHECK(got.out == want.out);
      CHECK(got.meta == want.meta);
      CHECK(got.payload == want.payload);
      break;
    case CmdType::Get:
      CHECK(got.inputs[0] == want.inputs[0]);
      CHECK(got.n_inputs == 1);
      CHECK(got.request == want.request);
      break;
    case CmdType::Free:
      CHECK(got.inputs[0] == want.inputs[0]);
      CHECK(got.n_inputs == 1);
      break;
    case CmdType::Sync:
    case CmdType::Stats:
      CHECK(got.request == want.request);
      break;
    case CmdType::CreateStream:
    case CmdType::DestroyStream:
      break;
    case CmdType::Record:
      CHECK(got.event == want.event);
      CHECK(got.timing == want.timing);
      break;
    case CmdType::WaitEvent:
    case CmdType::DestroyEvent:
      CHECK(got.event == want.event);
      break;
    case CmdType::NotifyPeer:
      CHECK(got.event == want.event);
      CHECK(got.peer == want.peer);
      CHECK(got.token == want.token);
      break;
    case CmdType::WaitRemote:
      CHECK(got.peer == want.peer);
      CHECK(got.token == want.token);
      break;
    case CmdType::EventQuery:
    case CmdType::EventSync:
      CHECK(got.event == want.event);
      CHECK(got.request == want.request);
      break;
    case CmdType::SendPeer:
      CHECK(got.inputs[0] == want.inputs[0]);
      CHECK(got.n_inputs == 1);
      CHECK(got.peer == want.peer);
      CHECK(got.token == want.token);
      break;
    case CmdType::RecvPeer:
      CHECK(got.out == want.out);
      CHECK(got.meta == want.meta);
      CHECK(got.peer == want.peer);
      CHECK(got.token == want.token);
      break;
    case CmdType::NewGroup:
      CHECK(got.group == want.group);
      CHECK(got.ranks == want.ranks);
      break;
    case CmdType::Collective:
      CHECK(got.group == want.group);
      CHECK(got.collective == want.collective);
      CHECK(got.reduce_op == want.reduce_op);
      CHECK(got.root == want.root);
      CHECK(got.inputs[0] == want.inputs[0]);
      CHECK(got.out == want.out);
      CHECK(got.meta == want.meta);
      break;
    case CmdType::ToDevice:
      CHECK(got.inputs[0] == want.inputs[0]);
      CHECK(got.n_inputs == 1);
      CHECK(got.out == want.out);
      break;
  }
}

void check_same_failure(const RemoteFailure& got, const RemoteFailure& want) {
  CHECK(got.tensor == want.tensor);
  CHECK(got.device == want.device);
  CHECK(got.op == want.op);
  CHECK(got.message == want.message);
  CHECK(got.cause_tensor == want.cause_tensor);
  CHECK(got.cause_op == want.cause_op);
  CHECK(got.cause_message == want.cause_message);
}

// Commands of every type, with attributes of every kind, and the payload frames they use.
Batch every_command() {
  std::vector<Command> cmds;
  OpAttrs scalars;
  scalars.scalars = {Scalar(true), Scalar(int64_t{-7}), Scalar(2.5)};
  scalars.scalar_first = true;
  cmds.push_back(run_op(OpId::add, 10, {1}, scalars));

  OpAttrs reduce;
  reduce.ints = {0, -1, 2};
  reduce.keepdim = true;
  reduce.scalars[0] = Scalar(std::numeric_limits<double>::infinity());
  cmds.push_back(run_op(OpId::norm, 11, {10}, reduce));

  OpAttrs extremes;
  extremes.ints = {std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max()};
  extremes.scalars = {Scalar(std::numeric_limits<int64_t>::min()), Scalar(false),
                      Scalar(std::nan(""))};
  cmds.push_back(run_op(OpId::clamp, 12, {11}, extremes));

  OpAttrs random;
  random.ints = {4, 5};
  random.dtype = DType::Float64;
  random.seed = 0xDEADBEEFCAFEF00Dull;
  random.offset = 123456789;
  cmds.push_back(run_op(OpId::randn, 13, {}, random));

  OpAttrs offset_only;
  offset_only.offset = 1;
  offset_only.dtype = DType::Bool;
  cmds.push_back(run_op(OpId::rand, 14, {}, offset_only));

  Command inplace = run_op(OpId::mul, kNoTensor, {13, 12});
  inplace.inplace = true;
  cmds.push_back(inplace);

  Command other_stream = run_op(OpId::matmul, 15, {13, 13});
  other_stream.stream = 7;
  cmds.push_back(other_stream);

  cmds.push_back(put(20, DType::Float32, {2, 3}, 2));
  cmds.push_back(put(21, DType::Int64, {}, 1));
  cmds.push_back(put(22, DType::Bool, {0, 4, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, 3));
  cmds.push_back(simple(CmdType::Get, 20, 1001));
  cmds.push_back(simple(CmdType::Free, 21, 0));
  cmds.push_back(simple(CmdType::Sync, 0, 1002));
  cmds.push_back(simple(CmdType::Stats, 0, std::numeric_limits<uint64_t>::max()));

  Command stream;
  stream.type = CmdType::CreateStream;
  stream.stream = 3;
  cmds.push_back(stream);
  stream.type = CmdType::DestroyStream;
  cmds.push_back(stream);
  Command ev;
  ev.type = CmdType::Record;
  ev.stream = 3;
  ev.event = 0xFFFFFFFFFFull;
  ev.timing = true;
  cmds.push_back(ev);
  ev.timing = false;
  cmds.push_back(ev);
  ev.type = CmdType::WaitEvent;
  cmds.push_back(ev);
  ev.type = CmdType::DestroyEvent;
  cmds.push_back(ev);
  ev.type = CmdType::NotifyPeer;
  ev.peer = 4095;
  ev.token = 77;
  cmds.push_back(ev);
  ev.type = CmdType::WaitRemote;
  ev.peer = 2;
  cmds.push_back(ev);
  ev.type = CmdType::EventQuery;
  ev.request = 1003;
  cmds.push_back(ev);
  ev.type = CmdType::EventSync;
  cmds.push_back(ev);
  Command send;
  send.type = CmdType::SendPeer;
  send.stream = 2;
  send.inputs[0] = 20;
  send.n_inputs = 1;
  send.peer = 3;
  send.token = 1u << 31;
  cmds.push_back(send);
  Command recv;
  recv.type = CmdType::RecvPeer;
  recv.out = 30;
  recv.meta = TensorMeta::contiguous(DType::Int32, {5, 0, 2});
  recv.peer = 1;
  recv.token = 9;
  cmds.push_back(recv);
  Command group;
  group.type = CmdType::NewGroup;
  group.group = 4;
  group.ranks = {3, 0, 7};
  cmds.push_back(group);
  Command coll;
  coll.type = CmdType::Collective;
  coll.stream = 1;
  coll.group = 4;
  coll.collective = protocol::CollectiveKind::ReduceScatter;
  coll.reduce_op = 4;
  coll.root = -1;
  coll.inputs[0] = 20;
  coll.out = 31;
  coll.meta = TensorMeta::contiguous(DType::Float64, {2, 2});
  coll.device = 1;
  cmds.push_back(coll);
  Command move;
  move.type = CmdType::ToDevice;
  move.inputs[0] = 20;
  move.n_inputs = 1;
  move.out = 32;
  move.device = 255;
  cmds.push_back(move);
  return batch_of(std::move(cmds));
}
constexpr size_t kEveryCommandPayloads = 3;

// A small batch with one RunOp (add %1 %2 -> %3, no ints, three None scalars) for patching.
std::string one_add() {
  return encode(batch_of({run_op(OpId::add, 3, {1, 2})}));
}
// Offsets of that command's fields.
constexpr size_t kCmdType = kFirstCommand;
constexpr size_t kCmdStream = kCmdType + 1;
constexpr size_t kCmdOp = kCmdStream + 4;
constexpr size_t kCmdFlags = kCmdOp + 2;
constexpr size_t kCmdNInputs = kCmdFlags + 1;
constexpr size_t kCmdInputs = kCmdNInputs + 1;
constexpr size_t kCmdOut = kCmdInputs + 16;
constexpr size_t kCmdNInts = kCmdOut + 8;
constexpr size_t kCmdScalars = kCmdNInts + 1;
constexpr size_t kCmdDType = kCmdScalars + 3;
constexpr size_t kCmdDevice = kCmdDType + 1;
constexpr uint16_t kAddCode = static_cast<uint16_t>(OpId::add);

}  // namespace

TEST_SUITE("protocol/codec") {
  TEST_CASE("hello round trip") {
    Hello h;
    h.client = "head-node:4242";
    std::string frame = encode(h);
    CHECK(peek_type(frame) == MsgType::Hello);
    Hello got = decode_hello(frame);
    CHECK(got.version == kVersion);
    CHECK(got.client == "head-node:4242");

    // Another version still decodes (the worker answers with a clear refusal).
    h.version = 9;
    CHECK(decode_hello(encode(h)).version == 9);
    // And so does a HELLO whose prefix names another version: its layout never changes.
    std::string v2 = patched<uint16_t>(encode(h), 4, kVersion, 2);
    CHECK(peek_type(v2) == MsgType::Hello);
    CHECK(decode_hello(v2).version == 9);
  }

  TEST_CASE("hello reply round trip") {
    HelloReply r;
    r.accepted = true;
    r.reason = "";
    r.worker = "box:99";
    r.threads = 64;
    DeviceInfo cpu;
    cpu.index = -1;
    cpu.name = "cpu";
    cpu.total_memory = uint64_t{512} << 30;
    cpu.free_memory = uint64_t{300} << 30;
    DeviceInfo gpu;
    gpu.index = 0;
    gpu.name = "NVIDIA H100";
    gpu.total_memory = uint64_t{80} << 30;
    gpu.free_memory = 1;
    gpu.compute_major = 9;
    gpu.compute_minor = 0;
    r.devices = {cpu, gpu};
    HelloReply got = decode_hello_reply(encode(r));
    CHECK(got.version == kVersion);
    CHECK(got.accepted);
    CHECK(got.worker == "box:99");
    CHECK(got.threads == 64);
    REQUIRE(got.devices.size() == 2);
    CHECK(got.devices[0].index == -1);
    CHECK(got.devices[0].name == "cpu");
    CHECK(got.devices[0].total_memory == cpu.total_memory);
    CHECK(got.devices[0].free_memory == cpu.free_memory);
    CHECK(got.devices[1].index == 0);
    CHECK(got.devices[1].name == "NVIDIA H100");
    CHECK(got.devices[1].compute_major == 9);
    CHECK(got.devices[1].compute_minor == 0);
    CHECK(got.peer_endpoint.empty());
    r.peer_endpoint = "tcp://10.0.0.7:41000";
    CHECK(decode_hello_reply(encode(r)).peer_endpoint == r.peer_endpoint);

    HelloReply no;
    no.reason = "busy: serving master x since y";
    HelloReply got_no = decode_hello_reply(encode(no));
    CHECK_FALSE(got_no.accepted);
    CHECK(got_no.reason == no.reason);
    CHECK(got_no.devices.empty());
  }

  TEST_CASE("batch round trip of every command type") {
    Batch b = every_command();
    std::string frame = encode(b);
    CHECK(peek_type(frame) == MsgType::Batch);
    Batch got = decode_batch(frame, kEveryCommandPayloads);
    REQUIRE(got.commands.size() == b.commands.size());
    for (size_t i = 0; i < b.commands.size(); ++i) {
      CAPTURE(i);
      check_same_command(got.commands[i], b.commands[i]);
    }
    // The decoded scalars keep their kinds.
    CHECK(got.commands[0].attrs.scalars[0].is_bool());
    CHECK(got.commands[0].attrs.scalars[1].is_integral());
    CHECK(got.commands[0].attrs.scalars[1].to_int() == -7);
    CHECK(got.commands[0].attrs.scalars[2].is_floating());
    CHECK(got.commands[0].attrs.scalars[2].to_double() == 2.5);
    CHECK(std::isnan(got.commands[2].attrs.scalars[2].to_double()));
    CHECK(got.commands[3].attrs.seed == 0xDEADBEEFCAFEF00Dull);
    CHECK(got.commands[3].attrs.offset == 123456789);
    CHECK(got.commands[4].attrs.seed == 0);
    CHECK(got.commands[4].attrs.offset == 1);
  }

  TEST_CASE("empty batch and the batch writer") {
    Batch empty = decode_batch(encode(Batch{}), 0);
    CHECK(empty.commands.empty());

    BatchWriter w;
    CHECK(w.count() == 0);
    size_t empty_bytes = w.bytes();
    w.add(run_op(OpId::neg, 2, {1}));
    w.add(simple(CmdType::Sync, 0, 5));
    CHECK(w.count() == 2);
    CHECK(w.bytes() > empty_bytes);
    std::string frame = w.finish();
    CHECK(w.count() == 0);
    Batch got = decode_batch(frame, 0);
    REQUIRE(got.commands.size() == 2);
    check_same_command(got.commands[0], run_op(OpId::neg, 2, {1}));
    check_same_command(got.commands[1], simple(CmdType::Sync, 0, 5));
    // The same bytes as encode() of the same commands; the writer is reusable.
    CHECK(frame == encode(batch_of({run_op(OpId::neg, 2, {1}), simple(CmdType::Sync, 0, 5)})));
    w.add(simple(CmdType::Stats, 0, 6));
    CHECK(decode_batch(w.finish(), 0).commands.size() == 1);
  }

  TEST_CASE("reply round trips") {
    SUBCASE("get with a tensor") {
      Reply r;
      r.type = ReplyType::Get;
      r.request = 77;
      r.meta = TensorMeta::contiguous(DType::Float64, {3, 0, 2});
      Reply got = decode_reply(encode(r), 1);
      CHECK(got.type == ReplyType::Get);
      CHECK(got.request == 77);
      CHECK(got.meta == r.meta);
      CHECK(got.failures.empty());
      CHECK_REJECTS(decode_reply(encode(r), 0), "expected 1");
    }
    SUBCASE("get of a failed tensor") {
      Reply r;
      r.type = ReplyType::Get;
      r.request = 78;
      RemoteFailure f;
      f.tensor = 5;
      f.device = 1;
      f.op = "add";
      f.message = "input %4 is failed";
      f.cause_tensor = 4;
      f.cause_op = "matmul";
      f.cause_message = "shapes do not fit";
      r.failures = {f};
      Reply got = decode_reply(encode(r), 0);
      REQUIRE(got.failures.size() == 1);
      check_same_failure(got.failures[0], f);
    }
    SUBCASE("sync") {
      Reply r;
      r.type = ReplyType::Sync;
      r.request = 79;
      for (int i = 0; i < 3; ++i) {
        RemoteFailure f;
        f.tensor = static_cast<TensorId>(i + 1);
        f.op = "op" + std::to_string(i);
        f.message = std::string(static_cast<size_t>(i) * 100, 'x');
        r.failures.push_back(f);
      }
      Reply got = decode_reply(encode(r), 0);
      REQUIRE(got.failures.size() == 3);
      for (int i = 0; i < 3; ++i) check_same_failure(got.failures[i], r.failures[i]);
      r.failures.clear();
      CHECK(decode_reply(encode(r), 0).failures.empty());
    }
    SUBCASE("stats") {
      Reply r;
      r.type = ReplyType::Stats;
      r.request = 80;
      r.stats = {int64_t{1} << 40, int64_t{1} << 41, 12345};
      Reply got = decode_reply(encode(r), 0);
      CHECK(got.stats.bytes_in_use == r.stats.bytes_in_use);
      CHECK(got.stats.peak_bytes == r.stats.peak_bytes);
      CHECK(got.stats.live_tensors == 12345);
    }
    SUBCASE("event") {
      Reply r;
      r.type = ReplyType::Event;
      r.request = 81;
      r.done = true;
      r.time_ns = -5;
      Reply got = decode_reply(encode(r), 0);
      CHECK(got.type == ReplyType::Event);
      CHECK(got.done);
      CHECK(got.time_ns == -5);
      CHECK(got.failures.empty());
      RemoteFailure f;
      f.op = "div";
      f.message = "bad";
      r.failures = {f};
      r.done = false;
      got = decode_reply(encode(r), 0);
      CHECK_FALSE(got.done);
      REQUIRE(got.failures.size() == 1);
      check_same_failure(got.failures[0], f);
      std::string frame = encode(r);
      for (size_t len = 0; len < frame.size(); ++len) {
        CAPTURE(len);
        CHECK_THROWS_AS(decode_reply(frame.substr(0, len), 0), ProtocolError);
      }
      // done flag (after prefix, endianness tag, type and request)
      CHECK_REJECTS(decode_reply(patched<uint8_t>(frame, kPrefixBytes + 1 + 1 + 8, 0, 2), 0),
                    "done flag 2");
    }
    SUBCASE("protocol error") {
      Reply r;
      r.type = ReplyType::ProtocolError;
      r.message = "batch: something was wrong";
      Reply got = decode_reply(encode(r), 0);
      CHECK(got.type == ReplyType::ProtocolError);
      CHECK(got.request == 0);
      CHECK(got.message == r.message);
    }
  }

  TEST_CASE("setup and peer notifications") {
    Setup s;
    s.node = 2;
    s.session = 0x1234567890ABCDEFull;
    s.peers = {"tcp://127.0.0.1:1", "tcp://127.0.0.1:2", "ipc:///tmp/x"};
    std::string frame = encode(s);
    CHECK(peek_type(frame) == MsgType::Setup);
    Setup got = decode_setup(frame);
    CHECK(got.node == 2);
    CHECK(got.session == s.session);
    CHECK(got.peers == s.peers);
    CHECK(got.pg_endpoints.empty());
    s.pg_endpoints = {"tcp://127.0.0.1:5", "tcp://127.0.0.1:6", "tcp://127.0.0.1:7"};
    CHECK(decode_setup(encode(s)).pg_endpoints == s.pg_endpoints);
    Setup uneven = s;
    uneven.pg_endpoints.pop_back();
    CHECK_REJECTS(decode_setup(encode(uneven)), "2 process group endpoints for 3 nodes");
    s.pg_endpoints.clear();
    for (size_t len = 0; len < frame.size(); ++len) {
      CAPTURE(len);
      CHECK_THROWS_AS(decode_setup(frame.substr(0, len)), ProtocolError);
    }
    s.node = 3;
    CHECK_REJECTS(decode_setup(encode(s)), "node index 3 is not below the node count 3");
    // A count that the bytes cannot hold allocates nothing.
    std::string huge =
        patched<uint32_t>(encode(Setup{0, 1, {"a"}, {}}), kPrefixBytes + 1 + 4 + 8, 1, 0xFFFFFFFF);
    CHECK_REJECTS(decode_setup(huge), "exceeds the limit");

    PeerNotify failed_send{s.session, 2, 5, true, {}};
    failed_send.failure.op = "pow";
    failed_send.failure.message = "negative exponent";
    PeerNotify gf = decode_peer_notify(encode(failed_send));
    CHECK(gf.failed);
    check_same_failure(gf.failure, failed_send.failure);

    PeerNotify n{s.session, 1, 99, false, {}};
    std::string pn = encode(n);
    CHECK(peek_type(pn) == MsgType::Peer);
    PeerNotify gn = decode_peer_notify(pn);
    CHECK(gn.session == n.session);
    CHECK(gn.from_node == 1);
    CHECK(gn.token == 99);
    CHECK_FALSE(gn.failed);
    CHECK_REJECTS(decode_peer_notify(patched<uint8_t>(pn, pn.size() - 1, 0, 7)), "failure flag 7");
    for (size_t len = 0; len < pn.size(); ++len)
      CHECK_THROWS_AS(decode_peer_notify(pn.substr(0, len)), ProtocolError);
    CHECK_REJECTS(decode_peer_notify(pn + "x"), "left over");
    CHECK_THROWS_AS(decode_setup(pn), ProtocolError);
  }

  TEST_CASE("goodbye and heartbeat") {
    CHECK(peek_type(encode_goodbye()) == MsgType::Goodbye);
    CHECK(peek_type(encode_heartbeat()) == MsgType::Heartbeat);
    CHECK_REJECTS(decode_batch(encode_heartbeat(), 0), "expected message type 3, got 6");
  }

  TEST_CASE("overlong strings are cut at the limit on encode and rejected on decode") {
    Hello h;
    h.client = std::string(kMaxStringBytes + 10, 'c');
    CHECK(decode_hello(encode(h)).client.size() == kMaxStringBytes);
    // A length field over the limit: "client" is a u32 length right after the version.
    Hello small;
    small.client = "ab";
    std::string frame = patched<uint32_t>(encode(small), kPrefixBytes + 1 + 2, 2,
                                          static_cast<uint32_t>(kMaxStringBytes + 1));
    CHECK_REJECTS(decode_hello(frame), "exceeds the limit");
    frame = patched<uint32_t>(encode(small), kPrefixBytes + 1 + 2, 2, 3);
    CHECK_REJECTS(decode_hello(frame), "needs at least 3 bytes, 2 left");
  }

  TEST_CASE("prefix rejections") {
    std::string good = one_add();
    CHECK_REJECTS(peek_type(""), "shorter than");
    CHECK_REJECTS(decode_batch("", 0), "shorter than");
    CHECK_REJECTS(decode_batch("DTR", 0), "shorter than");
    CHECK_REJECTS(decode_batch(good.substr(0, kPrefixBytes), 0), "shorter than");
    CHECK_REJECTS(decode_batch(patched<uint8_t>(good, 0, 0x44, 0x45), 0), "bad magic");
    CHECK_REJECTS(decode_batch(patched<uint16_t>(good, 4, kVersion, kVersion + 1), 0),
                  fmt::format("version {}", kVersion + 1));
    CHECK_REJECTS(peek_type(patched<uint16_t>(good, 4, kVersion, 1)), "version 1");
    CHECK_REJECTS(decode_batch(patched<uint8_t>(good, 6, 3, 9), 0), "unknown message type 9");
    CHECK_REJECTS(decode_batch(patched<uint8_t>(good, 6, 3, 0), 0), "unknown message type 0");
    CHECK_REJECTS(decode_hello(good), "expected message type 1, got 3");
    CHECK_REJECTS(decode_reply(good, 0), "expected message type");
  }

  TEST_CASE("command rejections") {
    std::string good = one_add();
    REQUIRE(decode_batch(good, 0).commands.size() == 1);
    CHECK_REJECTS(decode_batch(patched<uint8_t>(good, kCmdType, 1, 21), 0),
                  "command 0 has unknown type 21");
    Command coll;
    coll.type = CmdType::Collective;
    std::string c = encode(batch_of({coll}));
    // group (8) follows type and stream; then kind, reduce op.
    CHECK_REJECTS(decode_batch(patched<uint8_t>(c, kCmdType + 5 + 8, 1, 9), 0),
                  "collective) has unknown kind 9");
    CHECK_REJECTS(decode_batch(patched<uint8_t>(c, kCmdType + 5 + 9, 0, 5), 0),
                  "unknown reduce op 5");
    CHECK_REJECTS(decode_batch(patched<uint8_t>(good, kCmdType, 1, 0), 0),
                  "command 0 has unknown type 0");
    CHECK_REJECTS(decode_batch(patched<uint16_t>(good, kCmdOp, kAddCode, 0xFFFF), 0),
                  "unknown op code 65535");
    CHECK_REJECTS(decode_batch(patched<uint16_t>(good, kCmdOp, kAddCode, kMaxOpCode + 1), 0),
                  "unknown op code " + std::to_string(kMaxOpCode + 1));
    CHECK_REJECTS(decode_batch(patched<uint8_t>(good, kCmdFlags, 0, 0x80), 0), "unknown flag bits");
    CHECK_REJECTS(decode_batch(patched<uint8_t>(good, kCmdNInputs, 2, 3), 0),
                  "3 inputs, at most 2 allowed");
    CHECK_REJECTS(decode_batch(patched<uint8_t>(good, kCmdNInputs, 2, 255), 0),
                  "255 inputs, at most 2 allowed");
    CHECK_REJECTS(decode_batch(patched<uint8_t>(good, kCmdNInts, 0, kMaxDims + 1), 0),
                  "attribute ints count 13 exceeds the limit 12");
    CHECK_REJECTS(decode_batch(patched<uint8_t>(good, kCmdNInts, 0, 2), 0), "needs at least");
    CHECK_REJECTS(decode_batch(patched<uint8_t>(good, kCmdScalars, 0, 4), 0),
                  "unknown scalar kind 4");
    // The first code past the table (float16 = 5 and bfloat16 = 6 are valid).
    CHECK_REJECTS(decode_batch(patched<uint8_t>(good, kCmdDType, 0, dtr::kNumDTypes), 0),
                  "attribute dtype has unknown dtype code " + std::to_string(dtr::kNumDTypes));
    CHECK_REJECTS(decode_batch(patched<uint8_t>(good, kCmdDType, 0, 0xFF), 0),
                  "unknown dtype code 255");
    CHECK_REJECTS(decode_batch(patched<int32_t>(good, kCmdDevice, -1, -2), 0),
                  "command 0 has device -2, expected -1 (cpu) or 0 to 255");
    CHECK_REJECTS(decode_batch(patched<int32_t>(good, kCmdDevice, -1, 256), 0), "device 256");
  }

  TEST_CASE("count rejections allocate nothing from the count") {
    std::string good = one_add();
    CHECK_REJECTS(decode_batch(patched<uint32_t>(good, kCountOffset, 1, 0xFFFFFFFFu), 0),
                  "commands count 4294967295 exceeds the limit");
    CHECK_REJECTS(decode_batch(patched<uint32_t>(good, kCountOffset, 1,
                                                 static_cast<uint32_t>(kMaxCommandsPerBatch) + 1),
                               0),
                  "exceeds the limit");
    CHECK_REJECTS(decode_batch(patched<uint32_t>(good, kCountOffset, 1, 1000), 0),
                  "commands count 1000 needs at least");
    // More commands than the bytes hold, but few enough to pass the size estimate.
    CHECK_REJECTS(decode_batch(patched<uint32_t>(good, kCountOffset, 1, 2), 0), "truncated");
    CHECK_REJECTS(decode_batch(good, kMaxPayloadFrames + 1), "payload frames exceed the limit");

    Reply sync;
    sync.type = ReplyType::Sync;
    std::string frame = encode(sync);
    // type (1) + request (8) after the tag, then the u32 failure count.
    CHECK_REJECTS(decode_reply(patched<uint32_t>(frame, kPrefixBytes + 1 + 9, 0, 0xFFFFFFFFu), 0),
                  "failures count 4294967295 exceeds the limit");
    CHECK_REJECTS(decode_reply(patched<uint32_t>(frame, kPrefixBytes + 1 + 9, 0, 100), 0),
                  "needs at least");
    CHECK_REJECTS(decode_reply(patched<uint8_t>(frame, kPrefixBytes + 1, 2, 9), 0),
                  "unknown reply type 9");

    HelloReply hr;
    std::string hr_frame = encode(hr);
    // version (2) accepted (1) reason (4+0) worker (4+0) threads (4), then the u16 count.
    CHECK_REJECTS(decode_hello_reply(patched<uint16_t>(hr_frame, kPrefixBytes + 1 + 15, 0,
                                                       static_cast<uint16_t>(kMaxDevices + 1))),
                  "devices count 257 exceeds the limit");
  }

  TEST_CASE("every truncation of a valid batch is rejected") {
    std::string frame = encode(every_command());
    REQUIRE(decode_batch(frame, kEveryCommandPayloads).commands.size() ==
            every_command().commands.size());
    for (size_t len = 0; len < frame.size(); ++len) {
      CAPTURE(len);
      std::string prefix = frame.substr(0, len);
      CHECK_THROWS_AS(decode_batch(prefix, kEveryCommandPayloads), ProtocolError);
    }
  }

  TEST_CASE("every truncation of valid replies is rejected") {
    Reply get;
    get.type = ReplyType::Get;
    get.meta = TensorMeta::contiguous(DType::Int32, {4, 5});
    Reply failed;
    failed.type = ReplyType::Sync;
    RemoteFailure f;
    f.op = "pow";
    f.message = "bad";
    failed.failures = {f, f};
    HelloReply hr;
    hr.worker = "w:1";
    hr.devices.resize(2);
    for (const auto& [frame, frames] :
         std::vector<std::pair<std::string, size_t>>{{encode(get), 1}, {encode(failed), 0}}) {
      for (size_t len = 0; len < frame.size(); ++len) {
        CAPTURE(len);
        CHECK_THROWS_AS(decode_reply(frame.substr(0, len), frames), ProtocolError);
      }
    }
    std::string hr_frame = encode(hr);
    for (size_t len = 0; len < hr_frame.size(); ++len) {
      CAPTURE(len);
      CHECK_THROWS_AS(decode_hello_reply(hr_frame.substr(0, len)), ProtocolError);
    }
  }

  TEST_CASE("payload frame references") {
    std::string one_put = encode(batch_of({put(5, DType::Float32, {2}, 1)}));
    CHECK(decode_batch(one_put, 1).commands.size() == 1);
    CHECK_REJECTS(decode_batch(one_put, 0),
                  "references payload frame 1, the message has frames 1 to 0");
    // Payload index 2 of 1 frame, and index 0 (the device, 4 bytes, comes last).
    size_t payload_at = one_put.size() - 8;
    CHECK_REJECTS(decode_batch(patched<uint32_t>(one_put, payload_at, 1, 2), 1),
                  "references payload frame 2");
    CHECK_REJECTS(decode_batch(patched<uint32_t>(one_put, payload_at, 1, 0), 1),
                  "references payload frame 0");
    CHECK_REJECTS(decode_batch(one_put, 2), "payload frame 2 is not referenced by any command");

    std::string reused =
        encode(batch_of({put(5, DType::Float32, {2}, 1), put(6, DType::Float32, {2}, 2)}));
    CHECK(decode_batch(reused, 2).commands.size() == 2);
    CHECK_REJECTS(decode_batch(patched<uint32_t>(reused, reused.size() - 8, 2, 1), 2),
                  "command 1 (put) reuses payload frame 1");
  }

  TEST_CASE("put meta rejections") {
    // put: type, stream, out (8), dtype, ndim, sizes (8 each), payload.
    std::string frame = encode(batch_of({put(5, DType::Float32, {2, 3}, 1)}));
    size_t dtype_at = kFirstCommand + 1 + 4 + 8;
    size_t ndim_at = dtype_at + 1;
    size_t size0_at = ndim_at + 1;
    CHECK_REJECTS(decode_batch(patched<int64_t>(frame, size0_at, 2, -1), 1),
                  "negative size -1 in dim 0");
    CHECK_REJECTS(decode_batch(patched<uint8_t>(frame, dtype_at, 0, 9), 1),
                  "put meta has unknown dtype code 9");
    CHECK_REJECTS(decode_batch(patched<uint8_t>(frame, ndim_at, 2, 13), 1),
                  "put meta count 13 exceeds the limit 12");
    // Sizes whose product overflows int64.
    std::string huge = patched<int64_t>(frame, size0_at, 2, int64_t{1} << 62);
    huge = patched<int64_t>(huge, size0_at + 8, 3, int64_t{1} << 62);
    CHECK_REJECTS(decode_batch(huge, 1), "more elements than int64");
  }

  TEST_CASE("trailing bytes and endianness tag") {
    std::string good = one_add();
    CHECK_REJECTS(decode_batch(good + "xyz", 0), "3 bytes left over");
    Reply r;
    r.type = ReplyType::Stats;
    CHECK_REJECTS(decode_reply(encode(r) + std::string(1, '\0'), 0), "1 bytes left over");
    HelloReply hr;
    CHECK_REJECTS(decode_hello_reply(encode(hr) + "!"), "1 bytes left over");
    // The archive's endianness tag is 1 (little) on this side.
    CHECK(static_cast<uint8_t>(good[kTagOffset]) == 1);
  }

  TEST_CASE("random garbage never decodes as something else than a ProtocolError") {
    // A deterministic byte soup, with a valid prefix so that the body parser is exercised.
    uint64_t state = 0x9E3779B97F4A7C15ull;
    auto next = [&] {
      state ^= state << 13;
      state ^= state >> 7;
      state ^= state << 17;
      return static_cast<char>(state & 0xFF);
    };
    std::string prefix = one_add().substr(0, kPrefixBytes + 1);
    for (int round = 0; round < 2000; ++round) {
      std::string frame = prefix;
      size_t n = static_cast<size_t>(round % 97);
      for (size_t i = 0; i < n; ++i) frame.push_back(next());
      try {
        (void)decode_batch(frame, static_cast<size_t>(round % 3));
      } catch (const ProtocolError&) {
      }
    }
    CHECK(true);
  }
}
