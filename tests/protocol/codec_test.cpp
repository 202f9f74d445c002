// Codec tests: every message and command type survives a round trip, and every malformed
// header (built by encoding a valid one and patching bytes) is rejected with a
// ProtocolError whose message names the problem; no prefix of a valid batch decodes.
#include <doctest/doctest.h>
#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <variant>
#include <vector>

#include "dtr/error.hpp"
#include "protocol/codec.hpp"
#include "protocol/messages.hpp"
#include "support/message_of.hpp"

namespace {

using namespace dtr;
using namespace dtr::protocol;

#define CHECK_REJECTS(expr, needle)                                                     \
  do {                                                                                  \
    std::string message_ = dtr::test::message_of<ProtocolError>([&] { (void)(expr); }); \
    INFO("error message: " << message_);                                                \
    CHECK(message_.find(needle) != std::string::npos);                                  \
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

cmd::RunOp run_op(OpId op, TensorId out, std::vector<TensorId> inputs, OpAttrs attrs = {}) {
  cmd::RunOp c{.op = op, .out = out, .attrs = std::move(attrs)};
  for (TensorId id : inputs) c.inputs.push_back(id);
  return c;
}

cmd::Put put(TensorId out, DType dtype, Shape shape, uint32_t payload) {
  return cmd::Put{.out = out, .meta = TensorMeta::contiguous(dtype, shape), .payload = payload};
}

Batch batch_of(std::vector<Command> commands) {
  Batch b;
  b.commands = std::move(commands);
  return b;
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

// The observability commands (docs/observability.md).
void add_observability_commands(std::vector<Command>& cmds) {
  cmds.push_back(cmd::ClockSync{.stream = 2, .request = 1004});
  cmds.push_back(cmd::Trace{.action = TraceAction::Start, .request = 1005});
  cmds.push_back(cmd::Trace{.action = TraceAction::Stop, .request = 1006});
  cmds.push_back(cmd::Trace{.action = TraceAction::Collect, .request = 1007});
  cmds.push_back(cmd::FlightDump{.request = 1008});
  cmds.push_back(cmd::Metrics{.request = std::numeric_limits<uint64_t>::max()});
}

// The same-host commands (common/same_host.hpp).
void add_same_host_commands(std::vector<Command>& cmds) {
  cmds.push_back(cmd::Attach{.request = 1009,
                             .pid = 4194303,
                             .address = 0x7ffd12345678ull,
                             .challenge = std::numeric_limits<uint64_t>::max()});
  cmds.push_back(cmd::PutFrom{.stream = 2,
                              .out = 33,
                              .meta = TensorMeta::contiguous(DType::BFloat16, {7, 1 << 20}),
                              .address = 0x7f0000001000ull,
                              .device = 3});
  cmds.push_back(cmd::Get{.stream = 1, .input = 33, .request = 1010, .pull = true});
  cmds.push_back(cmd::Release{.request = 1010});
}

// A graph part: a program of every kind of command a graph may hold, a strided input and
// outputs.
cmd::GraphUpload graph_upload() {
  auto program = std::make_shared<Batch>();
  OpAttrs one;
  one.scalars[0] = Scalar(int64_t{1});
  program->commands = {
      run_op(OpId::add, 40, {20}, one),
      cmd::Record{.stream = 2, .event = 5, .timing = true},
      cmd::WaitEvent{.stream = 3, .event = 5},
      cmd::NotifyPeer{.event = 5, .peer = 1, .token = 6},
      cmd::WaitRemote{.stream = 3, .peer = 1, .token = 7},
      cmd::SendPeer{.input = 40, .peer = 1, .token = 8},
      cmd::RecvPeer{
          .out = 41, .meta = TensorMeta::contiguous(DType::Float32, {3}), .peer = 1, .token = 9},
      cmd::Collective{.kind = CollectiveKind::AllGather,
                      .input = 41,
                      .out = 42,
                      .meta = TensorMeta::contiguous(DType::Float32, {2, 3}),
                      .device = -1},
      cmd::ToDevice{.input = 42, .out = 43, .device = 0},
  };
  TensorMeta view = TensorMeta::contiguous(DType::Float64, {3, 4});
  view.strides = {1, 3};
  view.offset = 5;
  return cmd::GraphUpload{
      .graph = 9,
      .outputs = {40, 43},
      .inputs = {GraphInput{20, view}, GraphInput{21, TensorMeta::contiguous(DType::Int32, {})}},
      .program = std::move(program)};
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

  cmd::RunOp inplace = run_op(OpId::mul, kNoTensor, {13, 12});
  inplace.inplace = true;
  cmds.push_back(inplace);

  cmd::RunOp other_stream = run_op(OpId::matmul, 15, {13, 13});
  other_stream.stream = 7;
  other_stream.device = 3;
  cmds.push_back(other_stream);

  // Ops of more inputs than the inline two: conv2d with a bias, and a cat of many.
  OpAttrs conv;
  conv.ints = {1, 1, 0, 0, 1, 1, 1};
  cmds.push_back(run_op(OpId::conv2d, 16, {13, 14, 15}, conv));
  std::vector<TensorId> many;
  for (TensorId i = 0; i < 7; ++i) many.push_back(100 + i);
  OpAttrs dim;
  dim.ints = {1};
  cmds.push_back(run_op(OpId::cat, 17, many, dim));

  cmds.push_back(put(20, DType::Float32, {2, 3}, 2));
  cmds.push_back(put(21, DType::Int64, {}, 1));
  cmds.push_back(put(22, DType::Bool, {0, 4, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, 3));
  cmds.push_back(cmd::Get{.input = 20, .request = 1001});
  cmds.push_back(cmd::Free{.input = 21});
  cmds.push_back(cmd::Sync{.request = 1002});
  cmds.push_back(cmd::Stats{.request = std::numeric_limits<uint64_t>::max(), .device = 2});
  cmds.push_back(cmd::CreateStream{.stream = 3});
  cmds.push_back(cmd::DestroyStream{.stream = 3});
  const uint64_t event = 0xFFFFFFFFFFull;
  cmds.push_back(cmd::Record{.stream = 3, .event = event, .timing = true});
  cmds.push_back(cmd::Record{.stream = 3, .event = event});
  cmds.push_back(cmd::WaitEvent{.stream = 3, .event = event});
  cmds.push_back(cmd::DestroyEvent{.stream = 3, .event = event});
  cmds.push_back(cmd::NotifyPeer{.stream = 3, .event = event, .peer = 4095, .token = 77});
  cmds.push_back(cmd::WaitRemote{.stream = 3, .peer = 2, .token = 77});
  cmds.push_back(cmd::EventQuery{.stream = 3, .event = event, .request = 1003});
  cmds.push_back(cmd::EventSync{.stream = 3, .event = event, .request = 1003});
  cmds.push_back(cmd::SendPeer{.stream = 2, .input = 20, .peer = 3, .token = 1u << 31});
  cmds.push_back(cmd::RecvPeer{.out = 30,
                               .meta = TensorMeta::contiguous(DType::Int32, {5, 0, 2}),
                               .peer = 1,
                               .token = 9,
                               .device = 0});
  cmds.push_back(cmd::NewGroup{.group = 4, .ranks = {3, 0, 7}});
  cmds.push_back(cmd::Collective{.stream = 1,
                                 .group = 4,
                                 .kind = CollectiveKind::ReduceScatter,
                                 .reduce_op = ReduceOp::Avg,
                                 .root = 4095,
                                 .input = 20,
                                 .out = 31,
                                 .meta = TensorMeta::contiguous(DType::Float64, {2, 2}),
                                 .device = 1});
  cmds.push_back(cmd::ToDevice{.input = 20, .out = 32, .device = 255});
  cmds.push_back(cmd::NodeLost{.node = 4095});
  cmds.push_back(cmd::Cancel{});
  add_observability_commands(cmds);
  add_same_host_commands(cmds);
  cmds.push_back(graph_upload());
  cmds.push_back(cmd::GraphReplay{.graph = 9, .replay = std::numeric_limits<uint64_t>::max()});
  cmds.push_back(cmd::GraphFree{.graph = 9});
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

// Where each checked field of a command lies in its encoding, and a value there that the
// decoder must reject (with a message containing `needle`). Walks fields() as the codec
// does; unchecked u64 fields (ids, requests, tokens, events, groups) accept any value at
// the codec and are checked by the worker against its tables (worker/session_test.cpp).
struct Corruption {
  std::string field;
  size_t at;
  std::string bytes;
  std::string needle;
};

template <typename T>
std::string bytes_of(T v) {
  std::string s(sizeof(T), '\0');
  std::memcpy(s.data(), &v, sizeof(T));
  return s;
}

struct FieldProbe {
  size_t at = 0;
  std::vector<Corruption> out{};

  void add(const char* field, size_t where, std::string bytes, std::string needle) {
    out.push_back({field, where, std::move(bytes), std::move(needle)});
  }
  void operator()(const char* f, const bool&) {
    add(f, at, bytes_of<uint8_t>(2), "2, expected 0 or 1");
    at += 1;
  }
  void operator()(const char*, const uint64_t&) { at += 8; }
  void operator()(const char* f, const OpId&) {
    add(f, at, bytes_of<uint16_t>(kMaxOpCode + 1), "unknown op code");
    at += 2;
  }
  template <typename T>
  void operator()(const char* f, const T&, Range r) {
    using Raw = typename std::conditional_t<std::is_enum_v<T>, std::underlying_type<T>,
                                            std::type_identity<T>>::type;
    add(f, at, bytes_of<Raw>(static_cast<Raw>(r.hi + 1)),
        fmt::format("{} {}, expected {} to {}", f, r.hi + 1, r.lo, r.hi));
    if (r.lo > std::numeric_limits<Raw>::min())
      add(f, at, bytes_of<Raw>(static_cast<Raw>(r.lo - 1)), fmt::format("{} {},", f, r.lo - 1));
    at += sizeof(Raw);
  }
  template <typename T>
  requires std::is_arithmetic_v<T>
  void operator()(const char* f, const std::vector<T>& v, Limit l) {
    add(f, at, bytes_of<uint32_t>(static_cast<uint32_t>(l.max + 1)), "exceeds the limit");
    at += 4 + sizeof(T) * v.size();
  }
  void operator()(const char* f, const std::vector<GraphInput>& v, Limit l) {
    add(f, at, bytes_of<uint32_t>(static_cast<uint32_t>(l.max + 1)), "exceeds the limit");
    at += 4;
    for (const GraphInput& in : v) {
      at += 8;  // the id
      const size_t nd = in.meta.shape.size();
      add(f, at, bytes_of<uint8_t>(99), "has unknown dtype code 99");
      add(f, at + 1, bytes_of<uint8_t>(kMaxDims + 1), "dims, at most 12 allowed");
      if (nd > 0) {
        add(f, at + 2 + 8 * nd, bytes_of<int64_t>(-2), "negative stride -2 in dim 0");
        add(f, at + 2 + 8 * nd, bytes_of<int64_t>(std::numeric_limits<int64_t>::max()),
            "spans more elements than int64 can count");
      }
      add(f, at + 2 + 16 * nd, bytes_of<int64_t>(-1), "negative offset -1");
      at += 2 + 16 * nd + 8;
    }
  }
  // A graph program: its count, then each command probed as a batch's (the corruptions of
  // its fields are rejected naming the program).
  void operator()(const char* f, const GraphProgram& p, Limit l) {
    add(f, at, bytes_of<uint32_t>(static_cast<uint32_t>(l.max + 1)), "exceeds the limit");
    at += 4;
    for (const Command& c : p->commands) {
      add(f, at, bytes_of<uint8_t>(99), "of the graph program in command 0 has unknown type 99");
      add(f, at, bytes_of<uint8_t>(static_cast<uint8_t>(CmdType::Sync)),
          "(sync) cannot be part of a graph");
      at += 5;
      std::visit([&](const auto& x) { std::decay_t<decltype(x)>::fields(x, *this); }, c);
    }
  }
  void operator()(const char* f, const uint32_t&, PayloadRule) {
    add(f, at, bytes_of<uint32_t>(0), "references payload frame 0");
    add(f, at, bytes_of<uint32_t>(3), "references payload frame 3, the message has frames 1 to 2");
    at += 4;
  }
  void operator()(const char* f, const TensorMeta& m) {
    add(f, at, bytes_of<uint8_t>(99), "has unknown dtype code 99");
    add(f, at + 1, bytes_of<uint8_t>(kMaxDims + 1), "dims, at most 12 allowed");
    if (!m.shape.empty()) add(f, at + 2, bytes_of<int64_t>(-3), "negative size -3 in dim 0");
    at += 2 + 8 * m.shape.size();
  }
  void operator()(const char* f, const Inputs& in) {
    add(f, at, bytes_of<uint8_t>(Inputs::kMax + 1), "inputs 65, expected at most 64");
    add(f, at, bytes_of<uint8_t>(0xFF), "inputs 255, expected at most 64");
    at += 1 + 8 * in.n;
  }
  void operator()(const char* f, const bool&, const OpAttrs&, OpFlagsRule) {
    add(f, at, bytes_of<uint8_t>(0x10), "flags bits 0x10");
    at += 1;
  }
  void operator()(const char* f, const OpAttrs& a) {
    add(f, at, bytes_of<uint8_t>(kMaxDims + 1), "attribute ints count 13 exceeds");
    at += 1 + 8 * a.ints.size();
    for (const Scalar& s : a.scalars) {
      add(f, at, bytes_of<uint8_t>(9), "unknown scalar kind 9");
      at += 1 + (s.is_none() ? 0 : 8);
    }
    add(f, at, bytes_of<uint8_t>(0xEE), "attribute dtype has unknown dtype code 238");
    at += 1 + (a.seed || a.offset ? 16 : 0);
  }
};

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
    r.max_message_bytes = int64_t{16} << 30;
    HelloReply got = decode_hello_reply(encode(r));
    CHECK(got.version == kVersion);
    CHECK(got.accepted);
    CHECK(got.worker == "box:99");
    CHECK(got.threads == 64);
    CHECK(got.max_message_bytes == int64_t{16} << 30);
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
    CHECK(got.pid == 0);
    CHECK(got.challenge == 0);
    r.pid = 4194303;
    r.challenge = 0x0123456789abcdefull;
    HelloReply offered = decode_hello_reply(encode(r));
    CHECK(offered.pid == r.pid);
    CHECK(offered.challenge == r.challenge);

    // An accepting worker says what it takes, at least kMinMessageBytes.
    r.max_message_bytes = kMinMessageBytes - 1;
    CHECK_REJECTS(decode_hello_reply(encode(r)), "largest message is 65535 bytes");

    HelloReply no;
    no.reason = "busy: serving master x since y";
    HelloReply got_no = decode_hello_reply(encode(no));
    CHECK_FALSE(got_no.accepted);
    CHECK(got_no.reason == no.reason);
    CHECK(got_no.devices.empty());
  }

  TEST_CASE("batch round trip of every command type") {
    Batch b = every_command();
    // Every command struct appears.
    std::vector<bool> seen(std::variant_size_v<Command>, false);
    for (const Command& c : b.commands) seen[c.index()] = true;
    CHECK(std::count(seen.begin(), seen.end(), true) == std::variant_size_v<Command>);
    std::string frame = encode(b);
    CHECK(peek_type(frame) == MsgType::Batch);
    Batch got = decode_batch(frame, kEveryCommandPayloads);
    REQUIRE(got.commands.size() == b.commands.size());
    for (size_t i = 0; i < b.commands.size(); ++i) {
      CAPTURE(i);
      CHECK(command_type(got.commands[i]) == command_type(b.commands[i]));
      CHECK(got.commands[i] == b.commands[i]);
    }
    // The decoded scalars keep their kinds.
    auto attrs = [&](size_t i) { return std::get<cmd::RunOp>(got.commands[i]).attrs; };
    CHECK(attrs(0).scalars[0].is_bool());
    CHECK(attrs(0).scalars[1].is_integral());
    CHECK(attrs(0).scalars[1].to_int() == -7);
    CHECK(attrs(0).scalars[2].is_floating());
    CHECK(attrs(0).scalars[2].to_double() == 2.5);
    CHECK(std::isnan(attrs(2).scalars[2].to_double()));
    CHECK(attrs(3).seed == 0xDEADBEEFCAFEF00Dull);
    CHECK(attrs(3).offset == 123456789);
    CHECK(attrs(4).seed == 0);
    CHECK(attrs(4).offset == 1);
  }

  TEST_CASE("command names, types and streams") {
    CHECK(command_name(run_op(OpId::matmul, 2, {1, 1})) == "matmul");
    CHECK(command_name(cmd::Get{}) == "get");
    CHECK(command_name(cmd::WaitRemote{}) == "wait_event");
    CHECK(command_type(cmd::ToDevice{}) == CmdType::ToDevice);
    CHECK(command_stream(cmd::Record{.stream = 9}) == 9);
  }

  TEST_CASE("empty batch and the batch writer") {
    Batch empty = decode_batch(encode(Batch{}), 0);
    CHECK(empty.commands.empty());

    BatchWriter w;
    CHECK(w.count() == 0);
    size_t empty_bytes = w.bytes();
    w.add(run_op(OpId::neg, 2, {1}));
    w.add(cmd::Sync{.request = 5});
    CHECK(w.count() == 2);
    CHECK(w.bytes() > empty_bytes);
    std::string frame = w.finish();
    CHECK(w.count() == 0);
    Batch got = decode_batch(frame, 0);
    REQUIRE(got.commands.size() == 2);
    CHECK(got.commands[0] == Command(run_op(OpId::neg, 2, {1})));
    CHECK(got.commands[1] == Command(cmd::Sync{.request = 5}));
    // The same bytes as encode() of the same commands; the writer is reusable.
    CHECK(frame == encode(batch_of({run_op(OpId::neg, 2, {1}), cmd::Sync{.request = 5}})));
    w.add(cmd::Stats{.request = 6});
    CHECK(decode_batch(w.finish(), 0).commands.size() == 1);
  }

  TEST_CASE("reply round trips") {
    // After the prefix, endianness tag, type (1) and request (8): the reply's fields.
    const size_t body = kPrefixBytes + 1 + 1 + 8;
    SUBCASE("get with a tensor") {
      reply::Get r{.request = 77, .meta = TensorMeta::contiguous(DType::Float64, {3, 0, 2})};
      CHECK(r.payload_frames() == 1);
      Reply got = decode_reply(encode(r), 1);
      REQUIRE(std::holds_alternative<reply::Get>(got));
      CHECK(std::get<reply::Get>(got) == r);
      CHECK_FALSE(std::get<reply::Get>(got).failure);
      CHECK(reply_request(got) == 77);
      CHECK_REJECTS(decode_reply(encode(r), 0), "get reply carries 0 payload frames, expected 1");
    }
    SUBCASE("get of a tensor left on the worker (same host)") {
      reply::Get r{.request = 76,
                   .meta = TensorMeta::contiguous(DType::Int32, {1 << 20}),
                   .address = 0x7f1234560000ull};
      CHECK(r.payload_frames() == 0);
      std::string frame = encode(r);
      auto got = std::get<reply::Get>(decode_reply(frame, 0));
      CHECK(got.meta == r.meta);
      CHECK(got.address == r.address);
      CHECK_FALSE(got.failure);
      CHECK_REJECTS(decode_reply(frame, 1), "expected 0");
      // The failure flag leads the get reply's fields.
      CHECK_REJECTS(decode_reply(patched<uint8_t>(frame, body, 0, 2), 0),
                    "get reply has failure flag 2, expected 0 or 1");
      for (size_t len = 0; len < frame.size(); ++len) {
        CAPTURE(len);
        CHECK_THROWS_AS(decode_reply(frame.substr(0, len), 0), ProtocolError);
      }
    }
    SUBCASE("attach") {
      reply::Attach r{.request = 75, .done = true, .address = 0x7ffd00000008ull};
      std::string frame = encode(r);
      auto got = std::get<reply::Attach>(decode_reply(frame, 0));
      CHECK(got == r);
      CHECK(got.message.empty());
      CHECK_REJECTS(decode_reply(patched<uint8_t>(frame, body, 1, 2), 0),
                    "attach reply has done flag 2, expected 0 or 1");
      CHECK_REJECTS(decode_reply(patched<uint64_t>(frame, body + 1, r.address, 0), 0),
                    "attach reply has address 0, expected not 0");
      r.done = false;
      r.address = 0;
      r.message = "reading process 12's memory is not permitted";
      frame = encode(r);
      got = std::get<reply::Attach>(decode_reply(frame, 0));
      CHECK_FALSE(got.done);
      CHECK(got.address == 0);
      CHECK(got.message == r.message);
      for (size_t len = 0; len < frame.size(); ++len) {
        CAPTURE(len);
        CHECK_THROWS_AS(decode_reply(frame.substr(0, len), 0), ProtocolError);
      }
    }
    SUBCASE("get of a failed tensor") {
      RemoteFailure f{5, 1, "add", "input %4 is failed", 4, "matmul", "shapes do not fit"};
      reply::Get r{.request = 78, .failure = f};
      CHECK(r.payload_frames() == 0);
      auto got = std::get<reply::Get>(decode_reply(encode(r), 0));
      REQUIRE(got.failure);
      check_same_failure(*got.failure, f);
      // A failure's fields are named as its own.
      std::string frame = encode(r);
      CHECK_REJECTS(decode_reply(patched<int32_t>(frame, body + 1 + 8, 1, 256), 0),
                    "get reply failure has device 256, expected -1 to 255");
      CHECK_REJECTS(decode_reply(patched<uint32_t>(frame, body + 1 + 12, 3, 70000), 0),
                    "get reply failure op count 70000 exceeds the limit 65536");
    }
    SUBCASE("sync") {
      reply::Sync r{.request = 79};
      for (int i = 0; i < 3; ++i) {
        RemoteFailure f;
        f.tensor = static_cast<TensorId>(i + 1);
        f.op = "op" + std::to_string(i);
        f.message = std::string(static_cast<size_t>(i) * 100, 'x');
        r.failures.push_back(f);
      }
      auto got = std::get<reply::Sync>(decode_reply(encode(r), 0));
      REQUIRE(got.failures.size() == 3);
      for (int i = 0; i < 3; ++i) check_same_failure(got.failures[i], r.failures[i]);
      r.failures.clear();
      CHECK(std::get<reply::Sync>(decode_reply(encode(r), 0)).failures.empty());
    }
    SUBCASE("stats") {
      reply::Stats r{.request = 80, .stats = {int64_t{1} << 40, int64_t{1} << 41, 12345, 7, 8}};
      auto got = std::get<reply::Stats>(decode_reply(encode(r), 0));
      CHECK(got == r);
      CHECK(got.stats.live_tensors == 12345);
    }
    SUBCASE("event") {
      reply::Event r{.request = 81, .done = true, .time_ns = -5};
      auto got = std::get<reply::Event>(decode_reply(encode(r), 0));
      CHECK(got.done);
      CHECK(got.time_ns == -5);
      CHECK_FALSE(got.failure);
      RemoteFailure f;
      f.op = "div";
      f.message = "bad";
      r.failure = f;
      r.done = false;
      got = std::get<reply::Event>(decode_reply(encode(r), 0));
      CHECK_FALSE(got.done);
      REQUIRE(got.failure);
      check_same_failure(*got.failure, f);
      std::string frame = encode(r);
      for (size_t len = 0; len < frame.size(); ++len) {
        CAPTURE(len);
        CHECK_THROWS_AS(decode_reply(frame.substr(0, len), 0), ProtocolError);
      }
      CHECK_REJECTS(decode_reply(patched<uint8_t>(frame, body, 0, 2), 0),
                    "event reply has done flag 2, expected 0 or 1");
      CHECK_REJECTS(decode_reply(patched<uint8_t>(frame, body + 1 + 8, 1, 2), 0),
                    "event reply has failure flag 2, expected 0 or 1");
    }
    SUBCASE("protocol error") {
      reply::ProtocolError r{.message = "batch: something was wrong"};
      auto got = std::get<reply::ProtocolError>(decode_reply(encode(r), 0));
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
    // The workers' backend: "", "gloo" or "mpi"; any other name is refused, printed when it
    // can be.
    Setup gloo = s;
    gloo.backend = "gloo";
    CHECK(decode_setup(encode(gloo)).backend == "gloo");
    gloo.backend = "mpi";
    CHECK(decode_setup(encode(gloo)).backend == "mpi");
    gloo.backend = "nccl";
    CHECK_REJECTS(decode_setup(encode(gloo)), "backend 'nccl' is not one the workers");
    gloo.backend = std::string("\x01\xff", 2);
    CHECK_REJECTS(decode_setup(encode(gloo)), "backend of 2 bytes is not one the workers");
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
    failed_send.failure.device = 256;  // checked as in a reply
    CHECK_REJECTS(decode_peer_notify(encode(failed_send)),
                  "peer message: failure has device 256, expected -1 to 255");

    PeerNotify n{s.session, 1, 99, false, {}};
    std::string pn = encode(n);
    CHECK(peek_type(pn) == MsgType::Peer);
    PeerNotify gn = decode_peer_notify(pn);
    CHECK(gn.session == n.session);
    CHECK(gn.from_node == 1);
    CHECK(gn.token == 99);
    CHECK_FALSE(gn.failed);
    CHECK_FALSE(gn.released);
    CHECK(gn.pid == 0);
    CHECK_REJECTS(decode_peer_notify(patched<uint8_t>(pn, pn.size() - 1, 0, 7)), "form 7");
    for (size_t len = 0; len < pn.size(); ++len)
      CHECK_THROWS_AS(decode_peer_notify(pn.substr(0, len)), ProtocolError);
    CHECK_REJECTS(decode_peer_notify(pn + "x"), "left over");
    CHECK_THROWS_AS(decode_setup(pn), ProtocolError);

    // Same host: the bytes at an address in the sender, and their release.
    PeerNotify at{s.session, 1, 100, false, {}};
    at.pid = 4194304;
    at.address = 0x7f0000001000ull;
    at.bytes = uint64_t{1} << 40;
    std::string pa = encode(at);
    PeerNotify ga = decode_peer_notify(pa);
    CHECK_FALSE(ga.failed);
    CHECK_FALSE(ga.released);
    CHECK(ga.pid == at.pid);
    CHECK(ga.address == at.address);
    CHECK(ga.bytes == at.bytes);
    const size_t pid_at = pa.size() - 20;
    CHECK_REJECTS(decode_peer_notify(patched<uint32_t>(pa, pid_at, at.pid, 0)), "pid 0");
    CHECK_REJECTS(decode_peer_notify(patched<uint32_t>(pa, pid_at, at.pid, at.pid + 1)),
                  "pid 4194305");
    CHECK_REJECTS(decode_peer_notify(patched<uint64_t>(pa, pid_at + 4, at.address, 0)),
                  "address 0");
    for (size_t len = 0; len < pa.size(); ++len)
      CHECK_THROWS_AS(decode_peer_notify(pa.substr(0, len)), ProtocolError);
    PeerNotify released{s.session, 2, 100, false, {}};
    released.released = true;
    PeerNotify gr = decode_peer_notify(encode(released));
    CHECK(gr.released);
    CHECK(gr.token == 100);
    CHECK(gr.pid == 0);
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
    CHECK_REJECTS(decode_batch(patched<uint8_t>(good, kCmdType, 1, 30), 0),
                  "command 0 has unknown type 30");
    CHECK_REJECTS(decode_batch(patched<uint8_t>(good, kCmdType, 1, 0), 0),
                  "command 0 has unknown type 0");
    CHECK_REJECTS(decode_batch(patched<uint16_t>(good, kCmdOp, kAddCode, 0xFFFF), 0),
                  "unknown op code 65535");
    CHECK_REJECTS(decode_batch(patched<uint16_t>(good, kCmdOp, kAddCode, kMaxOpCode + 1), 0),
                  "unknown op code " + std::to_string(kMaxOpCode + 1));
    CHECK_REJECTS(decode_batch(patched<uint8_t>(good, kCmdFlags, 0, 0x80), 0),
                  "command 0 (add) has unknown flags bits 0x80");
    CHECK_REJECTS(decode_batch(patched<uint8_t>(good, kCmdNInputs, 2, Inputs::kMax + 1), 0),
                  "command 0 (add) has inputs 65, expected at most 64");
    CHECK_REJECTS(decode_batch(patched<uint8_t>(good, kCmdNInputs, 2, 255), 0),
                  "has inputs 255, expected at most 64");
    // More inputs than the bytes left hold: refused before anything is allocated for them.
    CHECK_REJECTS(decode_batch(patched<uint8_t>(good, kCmdNInputs, 2, Inputs::kMax), 0),
                  "inputs count 62 needs at least 496 bytes");
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
                  "command 0 (add) has device -2, expected -1 to 255");
    CHECK_REJECTS(decode_batch(patched<int32_t>(good, kCmdDevice, -1, 256), 0), "device 256");
  }

  TEST_CASE("a RunOp of more inputs: the same layout, every count up to the limit") {
    // Inputs past the inline two are the same u8 count and u64 ids: the encoding of a
    // 3-input command is the 2-input layout with one more id.
    std::string two = encode(batch_of({run_op(OpId::add, 3, {1, 2})}));
    std::string three = encode(batch_of({run_op(OpId::where, 3, {1, 2, 9})}));
    REQUIRE(three.size() == two.size() + 8);
    CHECK(static_cast<uint8_t>(three[kCmdNInputs]) == 3);
    CHECK(three.substr(kCmdInputs + 24) == two.substr(kCmdInputs + 16));
    for (size_t n : {size_t{0}, size_t{1}, size_t{2}, size_t{3}, size_t{17}, Inputs::kMax}) {
      CAPTURE(n);
      std::vector<TensorId> ids;
      for (size_t i = 0; i < n; ++i) ids.push_back(1000 + i);
      OpAttrs dim;
      dim.ints = {0};
      cmd::RunOp c = run_op(OpId::cat, 5000, ids, dim);
      Batch b = decode_batch(encode(batch_of({c})), 0);
      REQUIRE(b.commands.size() == 1);
      const auto& got = std::get<cmd::RunOp>(b.commands[0]);
      CHECK(got == c);
      for (size_t i = 0; i < n; ++i) CHECK(got.inputs[i] == 1000 + i);
      CHECK(got.inputs.more.size() == (n > Inputs::kInline ? n - Inputs::kInline : 0));
    }
  }

  TEST_CASE("every checked field of every command type rejects a corruption") {
    // Each command alone in a batch; its fields start after the type (1) and stream (4).
    Batch all = every_command();
    std::vector<bool> probed(std::variant_size_v<Command>, false);
    size_t corruptions = 0;
    for (const Command& c : all.commands) {
      if (probed[c.index()]) continue;
      probed[c.index()] = true;
      const bool put = std::holds_alternative<cmd::Put>(c);
      if (put) REQUIRE(std::get<cmd::Put>(c).payload == 2);
      std::string frame = encode(batch_of({c}));
      const size_t frames = put ? 2 : 0;
      // A Put alone references frame 2 of 2: frame 1 is then unused, which is fine for
      // the corruptions below (each is reported before the frame check).
      FieldProbe probe{kFirstCommand + 5};
      std::visit([&](const auto& x) { std::decay_t<decltype(x)>::fields(x, probe); }, c);
      CHECK(probe.at == frame.size());  // the probe walked every byte of the command
      for (const Corruption& k : probe.out) {
        CAPTURE(command_name(c));
        CAPTURE(k.field);
        std::string bad = frame;
        REQUIRE(k.at + k.bytes.size() <= bad.size());
        bad.replace(k.at, k.bytes.size(), k.bytes);
        CHECK_REJECTS(decode_batch(bad, frames), k.needle);
        ++corruptions;
      }
    }
    CHECK(std::count(probed.begin(), probed.end(), true) == std::variant_size_v<Command>);
    CHECK(corruptions > 40);
  }

  TEST_CASE("a graph program holds only commands a graph may hold, and nothing nested") {
    // Each command type that may not be part of a graph, alone in a program.
    std::vector<Command> refused = {put(20, DType::Float32, {2}, 1),
                                    cmd::Get{.input = 1, .request = 2},
                                    cmd::Free{.input = 1},
                                    cmd::Sync{.request = 3},
                                    cmd::Stats{.request = 4},
                                    cmd::CreateStream{.stream = 2},
                                    cmd::DestroyStream{.stream = 2},
                                    cmd::EventQuery{.event = 1, .request = 5},
                                    cmd::EventSync{.event = 1, .request = 6},
                                    cmd::DestroyEvent{.event = 1},
                                    cmd::NewGroup{.group = 1, .ranks = {0, 1}},
                                    cmd::NodeLost{.node = 1},
                                    cmd::GraphReplay{.graph = 1, .replay = 1},
                                    cmd::GraphFree{.graph = 1},
                                    graph_upload()};
    for (const Command& c : refused) {
      CAPTURE(command_name(c));
      auto program = std::make_shared<Batch>();
      program->commands = {run_op(OpId::neg, 2, {1}), c};
      Batch b = batch_of({cmd::RunOp{}, cmd::GraphUpload{.graph = 1, .program = program}});
      CHECK_REJECTS(decode_batch(encode(b), 0),
                    fmt::format("command 1 of the graph program in command 1 ({}) cannot be "
                                "part of a graph",
                                command_name(c)));
    }
    // Every command type a graph may hold round-trips inside one.
    Batch one = batch_of({graph_upload()});
    Batch got = decode_batch(encode(one), 0);
    REQUIRE(got.commands.size() == 1);
    CHECK(got.commands[0] == one.commands[0]);
    const auto& program = *std::get<cmd::GraphUpload>(got.commands[0]).program;
    CHECK(program.commands.size() == 9);
    CHECK(std::get<cmd::GraphUpload>(got.commands[0]).inputs[0].meta.strides == Strides{1, 3});
    CHECK(std::get<cmd::GraphUpload>(got.commands[0]).inputs[0].meta.offset == 5);
    // An empty program is a program.
    Batch empty = batch_of({cmd::GraphUpload{.graph = 3}});
    CHECK(decode_batch(encode(empty), 0).commands[0] == empty.commands[0]);
  }

  TEST_CASE("graph tokens are per replay and apart from the master's") {
    CHECK(graph_token(5, 1) != graph_token(5, 2));
    CHECK(graph_token(5, 1) != graph_token(6, 1));
    CHECK((graph_token(5, 1) >> 63) == 1);
    CHECK(graph_token(kGraphTokenLimit - 1, 7) != graph_token(0, 8));
    // Replays 2^23 apart share a token: more than any worker keeps pending.
    CHECK(graph_token(5, 1) == graph_token(5, 1 + (uint64_t{1} << 23)));
    CHECK((uint64_t{1} << 23) > kMaxPendingWaits);
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

    std::string frame = encode(reply::Sync{});
    // type (1) + request (8) after the tag, then the u32 failure count.
    CHECK_REJECTS(decode_reply(patched<uint32_t>(frame, kPrefixBytes + 1 + 9, 0, 0xFFFFFFFFu), 0),
                  "failures count 4294967295 exceeds the limit");
    CHECK_REJECTS(decode_reply(patched<uint32_t>(frame, kPrefixBytes + 1 + 9, 0, 100), 0),
                  "needs at least");
    CHECK_REJECTS(decode_reply(patched<uint8_t>(frame, kPrefixBytes + 1, 2, 11), 0),
                  "unknown reply type 11");

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
    reply::Get get{.meta = TensorMeta::contiguous(DType::Int32, {4, 5})};
    reply::Sync failed;
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
                  "command 0 (put) meta has unknown dtype code 9");
    CHECK_REJECTS(decode_batch(patched<uint8_t>(frame, ndim_at, 2, 13), 1),
                  "command 0 (put) meta has 13 dims, at most 12 allowed");
    // Sizes whose product overflows int64.
    std::string huge = patched<int64_t>(frame, size0_at, 2, int64_t{1} << 62);
    huge = patched<int64_t>(huge, size0_at + 8, 3, int64_t{1} << 62);
    CHECK_REJECTS(decode_batch(huge, 1), "more elements than int64");
  }

  TEST_CASE("trailing bytes and endianness tag") {
    std::string good = one_add();
    CHECK_REJECTS(decode_batch(good + "xyz", 0), "3 bytes left over");
    CHECK_REJECTS(decode_reply(encode(reply::Stats{}) + std::string(1, '\0'), 0),
                  "1 bytes left over");
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

// ---- replies (protocol/replies.hpp): round trips of every reply type and form, a
// corruption of every checked field of every reply (naming the reply, the item and the
// field), every truncation ----

namespace {

// Where a reply's body starts: prefix, endianness tag, type (1) and request (8).
constexpr size_t kReplyBody = kPrefixBytes + 1 + 1 + 8;

TraceEvent sample_event() {
  TraceEvent e;
  e.kind = CmdType::RecvPeer;
  e.op = OpId::add;
  e.stream = 7;
  e.device = 3;
  e.begin_ns = 1000;
  e.end_ns = 2000;
  e.wait_ns = 400;
  e.failed = true;
  e.bytes = 96;
  e.peer = 4095;
  e.flow = TraceFlow::In;
  e.flow_id = 1ull << 40;
  e.detail = 12;
  e.dispatched = true;
  e.inputs = 1;
  e.tensors = {TraceTensor{5, true, TensorMeta::contiguous(DType::BFloat16, {2, 3, 4})},
               TraceTensor{6, false, {}}};
  return e;
}

reply::Trace trace_reply() {
  reply::Trace r{.request = 90};
  r.trace.events = {sample_event(), TraceEvent{}};
  r.trace.dropped = 17;
  r.trace.more = true;
  return r;
}

reply::Flight flight_reply() {
  reply::Flight r;  // request 0: sent unasked
  r.flight.reason = "node 1 was lost";
  r.flight.now_ns = 123456789;
  r.flight.total = 5000;
  r.flight.capacity = 4096;
  FlightRecord f;
  f.seq = 4999;
  f.kind = CmdType::Collective;
  f.op = static_cast<OpId>(CollectiveKind::AllReduce);
  f.stream = 2;
  f.state = FlightState::Waiting;
  f.wait = WaitKind::Group;
  f.wait_on = 3;
  f.peer = kNoPeer;
  f.out = 0;
  f.in0 = 44;
  f.detail = 3;
  f.queued_ns = 100;
  f.started_ns = 200;
  FlightRecord g;
  g.seq = 5000;
  g.state = FlightState::Done;
  g.ended_ns = 300;
  r.flight.records = {f, g};
  return r;
}

reply::Metrics metrics_reply() {
  reply::Metrics r{.request = 91};
  NodeMetrics& m = r.metrics;
  m.commands = {{static_cast<uint8_t>(CmdType::RunOp), 1000000},
                {static_cast<uint8_t>(CmdType::Sync), 3}};
  m.bytes = {{static_cast<uint8_t>(CmdType::Put), 1ull << 33}};
  m.queues = {{0, 0}, {5, 12}};
  m.devices = {{-1, 10, 4096}, {0, 2, 1 << 20}};
  m.sessions = 4;
  m.session_active = true;
  m.refused = 2;
  m.master_heartbeat_age_ns = 250'000'000;
  m.threads = 16;
  m.flight_records = 1000003;
  m.tracing = true;
  m.trace_dropped = 9;
  return r;
}

// Replies of every type, in every form (a failure or not, bytes in a frame or at an
// address, done or not), with values at their limits.
std::vector<Reply> every_reply() {
  const RemoteFailure f{9, 3, "matmul", "shapes do not match", 3, "put", "payload too small"};
  std::vector<Reply> rs;
  rs.push_back(reply::Get{.request = 1, .meta = TensorMeta::contiguous(DType::Float64, {3, 4})});
  rs.push_back(reply::Get{.request = 2,
                          .meta = TensorMeta::contiguous(DType::BFloat16, {1 << 20}),
                          .address = 0x7f0000001000ull});
  rs.push_back(reply::Get{.request = 3, .failure = f});
  rs.push_back(reply::Sync{.request = 4, .failures = {f, RemoteFailure{}}});
  rs.push_back(reply::Sync{.request = 5});
  rs.push_back(reply::Stats{.request = 6, .stats = {1 << 20, 2 << 20, 17, 1 << 10, 2}});
  rs.push_back(reply::ProtocolError{.message = "batch: command 3 has unknown type 99"});
  rs.push_back(reply::ProtocolError{.request = 7, .message = "memory_stats: no device 3"});
  rs.push_back(
      reply::Event{.request = 8, .done = true, .time_ns = std::numeric_limits<int64_t>::max()});
  rs.push_back(reply::Event{.request = 9, .failure = f});
  rs.push_back(reply::Clock{.request = 10, .time_ns = std::numeric_limits<int64_t>::min()});
  rs.push_back(trace_reply());
  rs.push_back(reply::Trace{.request = 11});
  rs.push_back(flight_reply());
  rs.push_back(metrics_reply());
  rs.push_back(reply::Attach{.request = 12, .done = true, .address = 0x7ffd00000010ull});
  rs.push_back(reply::Attach{.request = 13, .message = "DTR_SAME_HOST=0 on the worker"});
  return rs;
}

// Walks a reply's fields() as the decoder does, recording where each checked field lies in
// the encoding, bytes there that the decoder must reject, and the message it must give:
// "<reply> reply <item> <index> ... has <field> <value>, expected ...".
struct ReplyProbe {
  size_t at = 0;
  std::vector<std::string> where{};  // "trace reply", "event 0", "tensor 1"
  std::vector<Corruption> out{};

  std::string here() const {
    std::string s;
    for (const std::string& w : where) s += (s.empty() ? "" : " ") + w;
    return s;
  }
  template <typename V>
  void refuse(const char* field, size_t where_at, std::string bytes, V value) {
    out.push_back({field, where_at, std::move(bytes),
                   fmt::format("{} has {} {}, expected", here(), field, value)});
  }
  void refuse_count(const char* field, size_t where_at, size_t limit) {
    out.push_back(
        {field, where_at, bytes_of<uint32_t>(static_cast<uint32_t>(limit + 1)),
         fmt::format("{} {} count {} exceeds the limit {}", here(), field, limit + 1, limit)});
  }

  template <typename T>
  requires std::is_arithmetic_v<T>
  void operator()(const char*, const T&) { at += sizeof(T); }
  void operator()(const char* f, const bool&) {
    refuse(f, at, bytes_of<uint8_t>(2), 2);
    at += 1;
  }
  void operator()(const char* f, const OpId&) {
    out.push_back({f, at, bytes_of<uint16_t>(kMaxOpCode + 1),
                   fmt::format("{} has unknown op code {}", here(), kMaxOpCode + 1)});
    at += 2;
  }
  template <typename T>
  void operator()(const char* f, const T&, Range r) {
    using Raw = typename std::conditional_t<std::is_enum_v<T>, std::underlying_type<T>,
                                            std::type_identity<T>>::type;
    if (r.hi < static_cast<int64_t>(std::numeric_limits<Raw>::max()))
      refuse(f, at, bytes_of<Raw>(static_cast<Raw>(r.hi + 1)), r.hi + 1);
    if (r.lo > static_cast<int64_t>(std::numeric_limits<Raw>::min()))
      refuse(f, at, bytes_of<Raw>(static_cast<Raw>(r.lo - 1)), r.lo - 1);
    at += sizeof(Raw);
  }
  template <typename T>
  void operator()(const char* f, const T&, RangeOrNone r) {
    if (r.range.hi + 1 != r.none)
      refuse(f, at, bytes_of<T>(static_cast<T>(r.range.hi + 1)), r.range.hi + 1);
    at += sizeof(T);
  }
  template <typename T>
  void operator()(const char* f, const T&, CommandCode) {
    refuse(f, at, bytes_of<uint8_t>(0), 0);
    refuse(f, at, bytes_of<uint8_t>(30), 30);  // 30-39: no command has them
    at += 1;
  }
  void operator()(const char* f, const uint64_t&, NonZero) {
    refuse(f, at, bytes_of<uint64_t>(0), 0);
    at += 8;
  }
  void operator()(const char* f, const std::string& s) {
    refuse_count(f, at, kMaxStringBytes);
    at += 4 + s.size();
  }
  void operator()(const char* f, const TensorMeta& m) {
    const std::string w = here() + " " + f;
    out.push_back({f, at, bytes_of<uint8_t>(99), w + " has unknown dtype code 99"});
    out.push_back({f, at + 1, bytes_of<uint8_t>(kMaxDims + 1), w + " has 13 dims, at most 12"});
    if (!m.shape.empty())
      out.push_back({f, at + 2, bytes_of<int64_t>(-3), w + " has negative size -3 in dim 0"});
    at += 2 + 8 * m.shape.size();
  }
  template <typename T>
  void operator()(const char* f, const std::optional<T>& v) {
    out.push_back(
        {f, at, bytes_of<uint8_t>(2), fmt::format("{} has {} flag 2, expected 0 or 1", here(), f)});
    at += 1;
    if (v) (*this)(f, *v);
  }
  // A struct: its fields, under its name.
  template <typename T>
  requires std::is_class_v<T>
  void operator()(const char* f, const T& v) {
    where.push_back(f);
    T::fields(v, *this);
    where.pop_back();
  }
  template <typename T>
  void operator()(const char* f, const std::vector<T>& v, Limit l) {
    refuse_count(f, at, l.max);
    at += 4;
    for (size_t i = 0; i < v.size(); ++i) {
      where.push_back(fmt::format("{} {}", l.item, i));
      T::fields(v[i], *this);
      where.pop_back();
    }
  }
};

// A corruption of a reply's frame at `at`, and what the decoder's error must contain.
struct Case {
  std::string frame;
  size_t at;
  std::string bytes;
  std::string needle;
};

void trace_cases(std::vector<Case>& cases) {
  const std::string trace = encode(trace_reply());
  // Event 0: kind (0), op (1), stream (3), device (7), begin (11), end (19), wait (27),
  // failed (35), bytes (36), peer (44), flow (48), flow id (49), detail (57), dispatched
  // (65), the tensors' count (66), tensor 0 (70: id, shape flag, meta of 3 dims), tensor
  // 1 (105: id, shape flag), inputs (114).
  const size_t e = kReplyBody + 4;
  auto t = [&](size_t at, std::string bytes, std::string needle) {
    cases.push_back({trace, at, std::move(bytes), std::move(needle)});
  };
  t(kReplyBody, bytes_of<uint32_t>(0xFFFFFFFFu),
    "trace reply events count 4294967295 exceeds the limit 65536");
  t(kReplyBody, bytes_of<uint32_t>(1000), "trace reply events count 1000 needs at least");
  t(e + 0, bytes_of<uint8_t>(0), "trace reply event 0 has kind 0, expected a command type's");
  t(e + 0, bytes_of<uint8_t>(200), "has kind 200, expected a command type's code");
  t(e + 1, bytes_of<uint16_t>(kMaxOpCode + 1), "trace reply event 0 has unknown op code");
  t(e + 7, bytes_of<int32_t>(-2), "trace reply event 0 has device -2, expected -1 to 255");
  t(e + 7, bytes_of<int32_t>(256), "device 256");
  t(e + 19, bytes_of<int64_t>(999),
    "trace reply event 0 has end 999, expected at least 1000 (its begin)");
  t(e + 27, bytes_of<int64_t>(-1), "has wait -1, expected 0 to 1000 (its duration)");
  t(e + 27, bytes_of<int64_t>(1001), "has wait 1001");
  t(e + 35, bytes_of<uint8_t>(2), "failed flag 2, expected 0 or 1");
  t(e + 36, bytes_of<int64_t>(-1), "bytes -1, expected at least 0");
  t(e + 44, bytes_of<uint32_t>(4096), "peer 4096, expected 0 to 4095 or none");
  t(e + 48, bytes_of<uint8_t>(3), "flow 3, expected 0 to 2");
  t(e + 65, bytes_of<uint8_t>(2), "dispatch flag 2");
  t(e + 66, bytes_of<uint32_t>(4), "trace reply event 0 tensors count 4 exceeds the limit 3");
  t(e + 70 + 8, bytes_of<uint8_t>(2), "trace reply event 0 tensor 0 has shape flag 2");
  t(e + 70 + 9, bytes_of<uint8_t>(99),
    "trace reply event 0 tensor 0 meta has unknown dtype code 99");
  t(e + 70 + 10, bytes_of<uint8_t>(kMaxDims + 1), "dims, at most 12 allowed");
  t(e + 70 + 11, bytes_of<int64_t>(-3), "negative size -3 in dim 0");
  t(e + 114, bytes_of<uint8_t>(3), "event 0 has inputs 3, expected 0 to 2 (its tensors)");
  t(trace.size() - 1, bytes_of<uint8_t>(2), "trace reply has more flag 2");
}

void flight_cases(std::vector<Case>& cases) {
  const std::string flight = encode(flight_reply());
  const size_t r0 = kReplyBody + 4 + flight_reply().flight.reason.size() + 8 + 8 + 4 + 4;
  auto f = [&](size_t at, std::string bytes, std::string needle) {
    cases.push_back({flight, at, std::move(bytes), std::move(needle)});
  };
  f(kReplyBody, bytes_of<uint32_t>(0xFFFFFFFFu), "flight reply reason count");
  f(r0 - 4, bytes_of<uint32_t>(0xFFFFFFFFu), "flight reply records count 4294967295 exceeds");
  f(r0 - 4, bytes_of<uint32_t>(3), "flight reply records count 3 needs at least");
  f(r0 + 8, bytes_of<uint8_t>(0), "flight reply record 0 has kind 0");
  f(r0 + 9, bytes_of<uint16_t>(kMaxOpCode + 1), "flight reply record 0 has unknown op code");
  f(r0 + 15, bytes_of<uint8_t>(0), "flight reply record 0 has state 0, expected 1 to 5");
  f(r0 + 15, bytes_of<uint8_t>(6), "state 6");
  f(r0 + 16, bytes_of<uint8_t>(6), "wait kind 6, expected 0 to 5");
  f(r0 + 25, bytes_of<uint32_t>(5000), "flight reply record 0 has peer 5000");
  f(r0 + 61, bytes_of<int64_t>(-1), "queued time -1");
  f(r0 + 69, bytes_of<int64_t>(-1), "start time -1");
  f(r0 + 77, bytes_of<int64_t>(-1), "end time -1");
}

void metrics_cases(std::vector<Case>& cases) {
  const std::string metrics = encode(metrics_reply());
  const size_t bytes0 = kReplyBody + 4 + 2 * 9;  // the bytes count
  const size_t queues0 = bytes0 + 4 + 9;
  const size_t devices0 = queues0 + 4 + 2 * 12;
  const size_t tail = devices0 + 4 + 2 * 20;  // sessions
  auto m = [&](size_t at, std::string bytes, std::string needle) {
    cases.push_back({metrics, at, std::move(bytes), std::move(needle)});
  };
  m(kReplyBody, bytes_of<uint32_t>(4097), "commands count 4097 exceeds the limit 4096");
  m(kReplyBody + 4, bytes_of<uint8_t>(0), "metrics reply commands entry 0 has kind 0");
  m(bytes0 + 4, bytes_of<uint8_t>(0), "metrics reply bytes entry 0 has kind 0");
  m(queues0, bytes_of<uint32_t>(4097), "metrics reply queues count 4097 exceeds");
  m(devices0, bytes_of<uint32_t>(258), "metrics reply devices count 258 exceeds the limit 257");
  m(devices0 + 4, bytes_of<int32_t>(-2), "metrics reply device 0 has device -2");
  m(devices0 + 8, bytes_of<int64_t>(-1), "live tensors -1");
  m(devices0 + 16, bytes_of<int64_t>(-1), "bytes in use -1");
  m(tail + 8, bytes_of<uint8_t>(2), "session flag 2");
  m(tail + 17, bytes_of<int64_t>(-2), "heartbeat age -2, expected at least -1");
  m(tail + 37, bytes_of<uint8_t>(2), "tracing flag 2");
  REQUIRE(metrics.size() == tail + 46);
}

}  // namespace

TEST_SUITE("protocol/codec") {
  TEST_CASE("every reply type round trips, in every form") {
    std::vector<bool> seen(std::variant_size_v<Reply>, false);
    for (const Reply& r : every_reply()) {
      CAPTURE(reply_name(r));
      seen[r.index()] = true;
      std::string frame = encode(r);
      CHECK(peek_type(frame) == MsgType::Reply);
      const size_t frames = reply_payload_frames(r);
      Reply got = decode_reply(frame, frames);
      CHECK(got == r);
      CHECK(reply_type(got) == reply_type(r));
      CHECK(encode(got) == frame);
      // The payload frames are the reply's own: one more or one less is refused.
      CHECK_REJECTS(decode_reply(frame, frames + 1),
                    fmt::format("{} reply carries {} payload frames, expected {}", reply_name(r),
                                frames + 1, frames));
    }
    CHECK(std::count(seen.begin(), seen.end(), true) == std::variant_size_v<Reply>);
    CHECK(reply_name(Reply{reply::ProtocolError{}}) == "protocol error");
    CHECK(command_type_name(static_cast<uint8_t>(CmdType::Metrics)) == "metrics");
    CHECK(command_type_name(0).empty());
  }

  TEST_CASE("reply codes: frozen, one per struct, found by the decoder from the variant") {
    // The frozen codes.
    CHECK(static_cast<int>(reply::Get::kType) == 1);
    CHECK(static_cast<int>(reply::Sync::kType) == 2);
    CHECK(static_cast<int>(reply::Stats::kType) == 3);
    CHECK(static_cast<int>(reply::ProtocolError::kType) == 4);
    CHECK(static_cast<int>(reply::Event::kType) == 5);
    CHECK(static_cast<int>(reply::Clock::kType) == 6);
    CHECK(static_cast<int>(reply::Trace::kType) == 7);
    CHECK(static_cast<int>(reply::Flight::kType) == 8);
    CHECK(static_cast<int>(reply::Metrics::kType) == 9);
    CHECK(static_cast<int>(reply::Attach::kType) == 10);
    // A reply struct added to the variant with a code another one has does not compile
    // (replies.hpp asserts this of Reply); the check itself catches a duplicate.
    static_assert(wire_codes_unique<Reply>());
    struct SecondGet : reply::Get {};
    static_assert(!wire_codes_unique<std::variant<reply::Get, reply::Sync, SecondGet>>());
    static_assert(wire_codes_unique<Command>());
    // A code the variant has is decoded as its struct; any other is refused.
    std::array<bool, 256> known{};
    for (const Reply& r : every_reply()) known[static_cast<uint8_t>(reply_type(r))] = true;
    std::string frame = encode(reply::Clock{});
    for (int code = 0; code < 256; ++code) {
      CAPTURE(code);
      std::string f = patched<uint8_t>(frame, kPrefixBytes + 1, 6, static_cast<uint8_t>(code));
      std::string message = dtr::test::message_of<ProtocolError>([&] { decode_reply(f, 0); });
      CHECK((message.find("unknown reply type") == std::string::npos) == known[code]);
    }
  }

  TEST_CASE("every checked field of every reply rejects a corruption, naming it") {
    size_t corruptions = 0;
    for (const Reply& r : every_reply()) {
      const std::string frame = encode(r);
      const size_t frames = reply_payload_frames(r);
      ReplyProbe probe{kReplyBody};
      std::visit(
          [&]<class R>(const R& x) {
            probe.where = {fmt::format("{} reply", R::kName)};
            R::fields(x, probe);
          },
          r);
      CHECK(probe.at == frame.size());  // the probe walked every byte of the reply
      for (const Corruption& k : probe.out) {
        CAPTURE(reply_name(r));
        CAPTURE(k.field);
        std::string bad = frame;
        REQUIRE(k.at + k.bytes.size() <= bad.size());
        bad.replace(k.at, k.bytes.size(), k.bytes);
        CHECK_REJECTS(decode_reply(bad, frames), "reply: " + k.needle);
        ++corruptions;
      }
    }
    CHECK(corruptions > 100);
  }

  TEST_CASE("every checked field of the observability replies rejects a corruption") {
    std::vector<Case> cases;
    trace_cases(cases);
    flight_cases(cases);
    metrics_cases(cases);
    for (const Case& c : cases) {
      CAPTURE(c.needle);
      std::string bad = c.frame;
      REQUIRE(c.at + c.bytes.size() <= bad.size());
      bad.replace(c.at, c.bytes.size(), c.bytes);
      CHECK_REJECTS(decode_reply(bad, 0), c.needle);
    }
  }

  TEST_CASE("a trace event's duration is taken without overflow") {
    reply::Trace r{.request = 1};
    TraceEvent e;
    e.begin_ns = std::numeric_limits<int64_t>::min();
    e.end_ns = std::numeric_limits<int64_t>::max();
    e.wait_ns = std::numeric_limits<int64_t>::max();  // within a duration past int64
    r.trace.events = {e};
    CHECK(decode_reply(encode(r), 0) == Reply{r});
    CHECK(span_ns(e.begin_ns, e.end_ns) == std::numeric_limits<int64_t>::max());
    CHECK(span_ns(e.end_ns, e.begin_ns) == std::numeric_limits<int64_t>::min());
    CHECK(span_ns(5, 9) == 4);
  }

  TEST_CASE("every truncation of the replies is rejected") {
    for (const Reply& r : every_reply()) {
      CAPTURE(reply_name(r));
      const size_t frames = reply_payload_frames(r);
      std::string frame = encode(r);
      for (size_t len = 0; len < frame.size(); ++len) {
        CAPTURE(len);
        CHECK_THROWS_AS(decode_reply(frame.substr(0, len), frames), ProtocolError);
      }
      CHECK_REJECTS(decode_reply(frame + "x", frames), "1 bytes left over");
    }
  }
}
