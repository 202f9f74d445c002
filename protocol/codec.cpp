// Header-frame codec: a fixed prefix, then Cereal's portable binary archive for the body.
// Counts and strings are read by hand so that each is checked against its limit and the
// bytes left before anything is allocated.
#include "protocol/codec.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cereal/archives/portable_binary.hpp>
#include <cstring>
#include <istream>
#include <ostream>
#include <streambuf>

#include "dtr/error.hpp"

namespace dtr::protocol {

namespace {

// ---- streams over memory ----

class StringSink : public std::streambuf {
 public:
  explicit StringSink(std::string& out) : out_(out) {}

 protected:
  std::streamsize xsputn(const char* p, std::streamsize n) override {
    out_.append(p, static_cast<size_t>(n));
    return n;
  }
  int_type overflow(int_type c) override {
    if (c != traits_type::eof()) out_.push_back(static_cast<char>(c));
    return c;
  }

 private:
  std::string& out_;
};

class SpanSource : public std::streambuf {
 public:
  explicit SpanSource(std::string_view bytes) {
    char* p = const_cast<char*>(bytes.data());
    setg(p, p, p + bytes.size());
  }
  size_t left() const { return static_cast<size_t>(egptr() - gptr()); }

 protected:
  // One memcpy per field instead of the generic buffer walk.
  std::streamsize xsgetn(char* out, std::streamsize n) override {
    std::streamsize take = std::min<std::streamsize>(n, egptr() - gptr());
    std::memcpy(out, gptr(), static_cast<size_t>(take));
    gbump(static_cast<int>(take));
    return take;
  }
};

// ---- writing ----

class Writer {
 public:
  Writer(std::string& out, MsgType type) : sink_(out), os_(&sink_), ar_(os_) {
    // The prefix precedes the archive's own first byte (its endianness tag).
    out.insert(0, prefix(type));
  }
  static std::string prefix(MsgType type) {
    std::string p(kPrefixBytes, '\0');
    uint32_t magic = kMagic;
    uint16_t version = kVersion;
    for (int i = 0; i < 4; ++i) p[i] = static_cast<char>((magic >> (8 * i)) & 0xff);
    p[4] = static_cast<char>(version & 0xff);
    p[5] = static_cast<char>(version >> 8);
    p[6] = static_cast<char>(type);
    return p;
  }
  template <typename T>
  void put(T v) {
    ar_(v);
  }
  void str(const std::string& s) {
    auto n = static_cast<uint32_t>(std::min(s.size(), kMaxStringBytes));
    ar_(n);
    ar_.saveBinary<1>(s.data(), n);
  }
  void meta(const TensorMeta& m) {
    put(static_cast<uint8_t>(m.dtype));
    put(static_cast<uint8_t>(m.shape.size()));
    for (int64_t s : m.shape) put(s);
  }
  void failure(const RemoteFailure& f) {
    put(f.tensor);
    put(f.device);
    str(f.op);
    str(f.message);
    put(f.cause_tensor);
    str(f.cause_op);
    str(f.cause_message);
  }
  void command(const Command& c);

 private:
  StringSink sink_;
  std::ostream os_;
  cereal::PortableBinaryOutputArchive ar_;
};

enum : uint8_t { kInplace = 1, kKeepdim = 2, kScalarFirst = 4, kRandom = 8 };

void Writer::command(const Command& c) {
  put(static_cast<uint8_t>(c.type));
  put(c.stream);
  switch (c.type) {
    case CmdType::RunOp: {
      const OpAttrs& a = c.attrs;
      uint8_t flags = (c.inplace ? kInplace : 0) | (a.keepdim ? kKeepdim : 0) |
                      (a.scalar_first ? kScalarFirst : 0) | (a.seed || a.offset ? kRandom : 0);
      put(static_cast<uint16_t>(c.op));
      put(flags);
      put(c.n_inputs);
      for (uint8_t i = 0; i < c.n_inputs && i < 2; ++i) put(c.inputs[i]);
      put(c.out);
      put(static_cast<uint8_t>(a.ints.size()));
      for (int64_t v : a.ints) put(v);
      for (const Scalar& s : a.scalars) {
        put(static_cast<uint8_t>(s.kind()));
        if (s.is_floating())
          put(s.float_bits());
        else if (!s.is_none())
          put(s.int_bits());
      }
      put(static_cast<uint8_t>(a.dtype));
      if (flags & kRandom) {
        put(a.seed);
        put(a.offset);
      }
      put(c.device);
      break;
    }
    case CmdType::Put:
      put(c.out);
      meta(c.meta);
      put(c.payload);
      put(c.device);
      break;
    case CmdType::Get:
      put(c.inputs[0]);
      put(c.request);
      break;
    case CmdType::Free:
      put(c.inputs[0]);
      break;
    case CmdType::Sync:
      put(c.request);
      break;
    case CmdType::Stats:
      put(c.request);
      put(c.device);
      break;
    case CmdType::CreateStream:
    case CmdType::DestroyStream:
      break;
    case CmdType::Record:
      put(c.event);
      put(static_cast<uint8_t>(c.timing));
      break;
    case CmdType::WaitEvent:
    case CmdType::DestroyEvent:
      put(c.event);
      break;
    case CmdType::NotifyPeer:
      put(c.event);
      put(c.peer);
      put(c.token);
      break;
    case CmdType::WaitRemote:
      put(c.peer);
      put(c.token);
      break;
    case CmdType::EventQuery:
    case CmdType::EventSync:
      put(c.event);
      put(c.request);
      break;
    case CmdType::SendPeer:
      put(c.inputs[0]);
      put(c.peer);
      put(c.token);
      break;
    case CmdType::RecvPeer:
      put(c.out);
      meta(c.meta);
      put(c.peer);
      put(c.token);
      put(c.device);
      break;
    case CmdType::NewGroup:
      put(c.group);
      put(static_cast<uint32_t>(std::min(c.ranks.size(), kMaxNodes)));
      for (size_t i = 0; i < c.ranks.size() && i < kMaxNodes; ++i) put(c.ranks[i]);
      break;
    case CmdType::Collective:
      put(c.group);
      put(static_cast<uint8_t>(c.collective));
      put(c.reduce_op);
      put(c.root);
      put(c.inputs[0]);
      put(c.out);
      meta(c.meta);
      put(c.device);
      break;
    case CmdType::ToDevice:
      put(c.inputs[0]);
      put(c.out);
      put(c.device);
      break;
  }
}

// ---- reading ----

class Reader {
 public:
  Reader(std::string_view frame, std::string_view what)
      : what_(what), src_(frame.substr(kPrefixBytes)), is_(&src_), ar_(is_) {}

  template <typename T>
  T get() {
    T v;
    ar_(v);
    return v;
  }
  // A count of items of at least `min_bytes` each, no more than `limit`.
  size_t count(const char* field, size_t limit, size_t min_bytes, uint64_t raw) {
    if (raw > limit) fail("{} count {} exceeds the limit {}", field, raw, limit);
    if (raw * min_bytes > src_.left())
      fail("{} count {} needs at least {} bytes, {} left", field, raw, raw * min_bytes,
           src_.left());
    return static_cast<size_t>(raw);
  }
  std::string str(const char* field) {
    size_t n = count(field, kMaxStringBytes, 1, get<uint32_t>());
    std::string s(n, '\0');
    ar_.loadBinary<1>(s.data(), static_cast<std::streamsize>(n));
    return s;
  }
  DType dtype(const char* field) {
    auto raw = get<uint8_t>();
    if (!is_valid_dtype(raw)) fail("{} has unknown dtype code {}", field, raw);
    return static_cast<DType>(raw);
  }
  // A command's device: -1 (the CPU) or a CUDA device index below kMaxDevices.
  int32_t device(size_t index) {
    auto d = get<int32_t>();
    if (d < -1 || d >= static_cast<int32_t>(kMaxDevices))
      fail("command {} has device {}, expected -1 (cpu) or 0 to {}", index, d, kMaxDevices - 1);
    return d;
  }
  TensorMeta meta(const char* field) {
    TensorMeta m;
    m.dtype = dtype(field);
    size_t nd = count(field, kMaxDims, 8, get<uint8_t>());
    for (size_t i = 0; i < nd; ++i) {
      auto s = get<int64_t>();
      if (s < 0) fail("{} has negative size {} in dim {}", field, s, i);
      m.shape.push_back(s);
    }
    try {
      numel_of(m.shape);
    } catch (const Error& e) {
      fail("{}: {}", field, e.what());
    }
    m.strides = contiguous_strides(m.shape);
    return m;
  }
  RemoteFailure failure() {
    RemoteFailure f;
    f.tensor = get<uint64_t>();
    f.device = get<int32_t>();
    f.op = str("failure op");
    f.message = str("failure message");
    f.cause_tensor = get<uint64_t>();
    f.cause_op = str("failure cause op");
    f.cause_message = str("failure cause message");
    return f;
  }
  // Decodes command `index` into c (in place: a Command is hundreds of bytes).
  void command(Command& c, size_t index, size_t payload_frames, std::vector<bool>& payload_used);
  void finish() {
    if (src_.left() != 0) fail("{} bytes left over after the message", src_.left());
  }
  template <typename... Args>
  [[noreturn]] void fail(fmt::format_string<Args...> format, Args&&... args) {
    throw ProtocolError(
        fmt::format("{}: {}", what_, fmt::format(format, std::forward<Args>(args)...)));
  }

 private:
  std::string what_;
  SpanSource src_;
  std::istream is_;
  cereal::PortableBinaryInputArchive ar_;
};

void Reader::command(Command& c, size_t index, size_t payload_frames,
                     std::vector<bool>& payload_used) {
  auto type = get<uint8_t>();
  if (type < static_cast<uint8_t>(CmdType::RunOp) || type > static_cast<uint8_t>(CmdType::ToDevice))
    fail("command {} has unknown type {}", index, type);
  c.type = static_cast<CmdType>(type);
  c.stream = get<uint32_t>();
  switch (c.type) {
    case CmdType::RunOp: {
      auto op = get<uint16_t>();
      if (!is_valid_op(op))
        fail("command {} has unknown op code {} (no op has it; the largest code is {})", index, op,
             kMaxOpCode);
      c.op = static_cast<OpId>(op);
      auto flags = get<uint8_t>();
      if (flags & ~(kInplace | kKeepdim | kScalarFirst | kRandom))
        fail("command {} ({}) has unknown flag bits {:#x}", index, op_def(c.op).name, flags);
      c.inplace = flags & kInplace;
      c.n_inputs = get<uint8_t>();
      if (c.n_inputs > 2)
        fail("command {} ({}) has {} inputs, at most 2 allowed", index, op_def(c.op).name,
             c.n_inputs);
      for (uint8_t i = 0; i < c.n_inputs; ++i) c.inputs[i] = get<uint64_t>();
      c.out = get<uint64_t>();
      OpAttrs& a = c.attrs;
      a.keepdim = flags & kKeepdim;
      a.scalar_first = flags & kScalarFirst;
      size_t n_ints = count("attribute ints", kMaxDims, 8, get<uint8_t>());
      for (size_t i = 0; i < n_ints; ++i) a.ints.push_back(get<int64_t>());
      for (Scalar& s : a.scalars) {
        auto kind = get<uint8_t>();
        if (kind > static_cast<uint8_t>(Scalar::Kind::Float))
          fail("command {} ({}) has unknown scalar kind {}", index, op_def(c.op).name, kind);
        auto k = static_cast<Scalar::Kind>(kind);
        if (k == Scalar::Kind::Float)
          s = Scalar::from_parts(k, 0, get<double>());
        else if (k != Scalar::Kind::None)
          s = Scalar::from_parts(k, get<int64_t>(), 0);
      }
      a.dtype = dtype("attribute dtype");
      if (flags & kRandom) {
        a.seed = get<uint64_t>();
        a.offset = get<uint64_t>();
      }
      c.device = device(index);
      break;
    }
    case CmdType::Put: {
      c.out = get<uint64_t>();
      c.meta = meta("put meta");
      c.payload = get<uint32_t>();
      if (c.payload < 1 || c.payload > payload_frames)
        fail("command {} (put) references payload frame {}, the message has frames 1 to {}", index,
             c.payload, payload_frames);
      if (payload_used[c.payload])
        fail("command {} (put) reuses payload frame {}", index, c.payload);
      payload_used[c.payload] = true;
      c.device = device(index);
      break;
    }
    case CmdType::Get:
      c.inputs[0] = get<uint64_t>();
      c.n_inputs = 1;
      c.request = get<uint64_t>();
      break;
    case CmdType::Free:
      c.inputs[0] = get<uint64_t>();
      c.n_inputs = 1;
      break;
    case CmdType::Sync:
      c.request = get<uint64_t>();
      break;
    case CmdType::Stats:
      c.request = get<uint64_t>();
      c.device = device(index);
      break;
    case CmdType::CreateStream:
    case CmdType::DestroyStream:
      break;
    case CmdType::Record: {
      c.event = get<uint64_t>();
      auto timing = get<uint8_t>();
      if (timing > 1)
        fail("command {} (record) has timing flag {}, expected 0 or 1", index, timing);
      c.timing = timing != 0;
      break;
    }
    case CmdType::WaitEvent:
    case CmdType::DestroyEvent:
      c.event = get<uint64_t>();
      break;
    case CmdType::NotifyPeer:
      c.event = get<uint64_t>();
      c.peer = get<uint32_t>();
      c.token = get<uint64_t>();
      break;
    case CmdType::WaitRemote:
      c.peer = get<uint32_t>();
      c.token = get<uint64_t>();
      break;
    case CmdType::EventQuery:
    case CmdType::EventSync:
      c.event = get<uint64_t>();
      c.request = get<uint64_t>();
      break;
    case CmdType::SendPeer:
      c.inputs[0] = get<uint64_t>();
      c.n_inputs = 1;
      c.peer = get<uint32_t>();
      c.token = get<uint64_t>();
      break;
    case CmdType::RecvPeer:
      c.out = get<uint64_t>();
      c.meta = meta("recv meta");
      c.peer = get<uint32_t>();
      c.token = get<uint64_t>();
      c.device = device(index);
      break;
    case CmdType::NewGroup: {
      c.group = get<uint64_t>();
      size_t n = count("group ranks", kMaxNodes, 4, get<uint32_t>());
      c.ranks.reserve(n);
      for (size_t i = 0; i < n; ++i) c.ranks.push_back(get<uint32_t>());
      break;
    }
    case CmdType::Collective: {
      c.group = get<uint64_t>();
      auto kind = get<uint8_t>();
      if (kind < static_cast<uint8_t>(CollectiveKind::AllReduce) ||
          kind > static_cast<uint8_t>(CollectiveKind::ReduceScatter))
        fail("command {} (collective) has unknown kind {}", index, kind);
      c.collective = static_cast<CollectiveKind>(kind);
      c.reduce_op = get<uint8_t>();
      if (c.reduce_op > 4)
        fail("command {} (collective) has unknown reduce op {}", index, c.reduce_op);
      c.root = get<int32_t>();
      c.inputs[0] = get<uint64_t>();
      c.n_inputs = 1;
      c.out = get<uint64_t>();
      c.meta = meta("collective output meta");
      c.device = device(index);
      break;
    }
    case CmdType::ToDevice:
      c.inputs[0] = get<uint64_t>();
      c.n_inputs = 1;
      c.out = get<uint64_t>();
      c.device = device(index);
      break;
  }
}

// Runs a decoder, turning Cereal's truncation exceptions into ProtocolError.
template <typename F>
auto guarded(std::string_view what, F&& f) {
  try {
    return f();
  } catch (const cereal::Exception& e) {
    throw ProtocolError(fmt::format("{}: truncated or malformed header ({})", what, e.what()));
  }
}

void expect_type(std::string_view frame, MsgType want, std::string_view what) {
  MsgType got = peek_type(frame);
  if (got != want)
    throw ProtocolError(fmt::format("{}: expected message type {}, got {}", what,
                                    static_cast<int>(want), static_cast<int>(got)));
}

template <typename F>
std::string encode_with(MsgType type, F&& body) {
  std::string out;
  {
    Writer w(out, type);
    body(w);
  }
  return out;
}

}  // namespace

// ---- public API ----

MsgType peek_type(std::string_view frame) {
  if (frame.size() < kPrefixBytes + 1)
    throw ProtocolError(fmt::format("message header of {} bytes is shorter than the {}-byte prefix",
                                    frame.size(), kPrefixBytes + 1));
  auto byte = [&](int i) { return static_cast<uint32_t>(static_cast<uint8_t>(frame[i])); };
  uint32_t magic = byte(0) | byte(1) << 8 | byte(2) << 16 | byte(3) << 24;
  if (magic != kMagic)
    throw ProtocolError(
        fmt::format("bad magic {:#010x} (expected {:#010x}): not a dtr message", magic, kMagic));
  uint16_t version = static_cast<uint16_t>(byte(4) | byte(5) << 8);
  uint8_t type = static_cast<uint8_t>(byte(6));
  if (type < static_cast<uint8_t>(MsgType::Hello) || type > static_cast<uint8_t>(MsgType::Peer))
    throw ProtocolError(fmt::format("unknown message type {}", type));
  if (version != kVersion && static_cast<MsgType>(type) != MsgType::Hello)
    throw ProtocolError(fmt::format("protocol version {} is not supported (this side speaks {})",
                                    version, kVersion));
  return static_cast<MsgType>(type);
}

std::string encode(const Hello& m) {
  return encode_with(MsgType::Hello, [&](Writer& w) {
    w.put(m.version);
    w.str(m.client);
  });
}

std::string encode(const HelloReply& m) {
  return encode_with(MsgType::HelloReply, [&](Writer& w) {
    w.put(m.version);
    w.put(static_cast<uint8_t>(m.accepted));
    w.str(m.reason);
    w.str(m.worker);
    w.put(m.threads);
    w.put(static_cast<uint16_t>(std::min(m.devices.size(), kMaxDevices)));
    for (size_t i = 0; i < m.devices.size() && i < kMaxDevices; ++i) {
      const DeviceInfo& d = m.devices[i];
      w.put(d.index);
      w.str(d.name);
      w.put(d.total_memory);
      w.put(d.free_memory);
      w.put(d.compute_major);
      w.put(d.compute_minor);
    }
    w.str(m.peer_endpoint);
    w.str(m.pg_endpoint);
  });
}

std::string encode(const Setup& m) {
  return encode_with(MsgType::Setup, [&](Writer& w) {
    w.put(m.node);
    w.put(m.session);
    w.put(static_cast<uint32_t>(std::min(m.peers.size(), kMaxNodes)));
    for (size_t i = 0; i < m.peers.size() && i < kMaxNodes; ++i) w.str(m.peers[i]);
    w.put(static_cast<uint32_t>(std::min(m.pg_endpoints.size(), kMaxNodes)));
    for (size_t i = 0; i < m.pg_endpoints.size() && i < kMaxNodes; ++i) w.str(m.pg_endpoints[i]);
    w.put(m.heartbeat_ms);
    w.put(m.master_timeout_ms);
  });
}

std::string encode(const PeerNotify& m) {
  return encode_with(MsgType::Peer, [&](Writer& w) {
    w.put(m.session);
    w.put(m.from_node);
    w.put(m.token);
    w.put(static_cast<uint8_t>(m.failed));
    if (m.failed) w.failure(m.failure);
  });
}

std::string encode(const Batch& m) {
  BatchWriter w;
  for (const Command& c : m.commands) w.add(c);
  return w.finish();
}

std::string encode(const Reply& m) {
  return encode_with(MsgType::Reply, [&](Writer& w) {
    w.put(static_cast<uint8_t>(m.type));
    w.put(m.request);
    switch (m.type) {
      case ReplyType::Get:
        w.put(static_cast<uint8_t>(m.failures.empty()));
        if (m.failures.empty())
          w.meta(m.meta);
        else
          w.failure(m.failures[0]);
        break;
      case ReplyType::Sync:
        w.put(static_cast<uint32_t>(std::min(m.failures.size(), kMaxErrorsPerReply)));
        for (size_t i = 0; i < m.failures.size() && i < kMaxErrorsPerReply; ++i)
          w.failure(m.failures[i]);
        break;
      case ReplyType::Stats:
        w.put(m.stats.bytes_in_use);
        w.put(m.stats.peak_bytes);
        w.put(m.stats.live_tensors);
        break;
      case ReplyType::ProtocolError:
        w.str(m.message);
        break;
      case ReplyType::Event:
        w.put(static_cast<uint8_t>(m.done));
        w.put(m.time_ns);
        w.put(static_cast<uint8_t>(!m.failures.empty()));
        if (!m.failures.empty()) w.failure(m.failures[0]);
        break;
    }
  });
}

std::string encode_goodbye() {
  return encode_with(MsgType::Goodbye, [](Writer&) {});
}

std::string encode_heartbeat() {
  return encode_with(MsgType::Heartbeat, [](Writer&) {});
}

Hello decode_hello(std::string_view frame) {
  expect_type(frame, MsgType::Hello, "hello");
  return guarded("hello", [&] {
    Reader r(frame, "hello");
    Hello m;
    m.version = r.get<uint16_t>();
    m.client = r.str("client");
    return m;
  });
}

HelloReply decode_hello_reply(std::string_view frame) {
  expect_type(frame, MsgType::HelloReply, "hello reply");
  return guarded("hello reply", [&] {
    Reader r(frame, "hello reply");
    HelloReply m;
    m.version = r.get<uint16_t>();
    m.accepted = r.get<uint8_t>() != 0;
    m.reason = r.str("reason");
    m.worker = r.str("worker");
    m.threads = r.get<uint32_t>();
    size_t n = r.count("devices", kMaxDevices, 4, r.get<uint16_t>());
    for (size_t i = 0; i < n; ++i) {
      DeviceInfo d;
      d.index = r.get<int32_t>();
      d.name = r.str("device name");
      d.total_memory = r.get<uint64_t>();
      d.free_memory = r.get<uint64_t>();
      d.compute_major = r.get<int32_t>();
      d.compute_minor = r.get<int32_t>();
      m.devices.push_back(std::move(d));
    }
    m.peer_endpoint = r.str("peer endpoint");
    m.pg_endpoint = r.str("process group endpoint");
    r.finish();
    return m;
  });
}

Setup decode_setup(std::string_view frame) {
  expect_type(frame, MsgType::Setup, "setup");
  return guarded("setup", [&] {
    Reader r(frame, "setup");
    Setup m;
    m.node = r.get<uint32_t>();
    m.session = r.get<uint64_t>();
    size_t n = r.count("peers", kMaxNodes, 4, r.get<uint32_t>());
    for (size_t i = 0; i < n; ++i) m.peers.push_back(r.str("peer endpoint"));
    if (m.node >= n) r.fail("node index {} is not below the node count {}", m.node, n);
    size_t g = r.count("process group endpoints", kMaxNodes, 4, r.get<uint32_t>());
    if (g != 0 && g != n) r.fail("{} process group endpoints for {} nodes", g, n);
    for (size_t i = 0; i < g; ++i) m.pg_endpoints.push_back(r.str("process group endpoint"));
    m.heartbeat_ms = r.get<uint32_t>();
    m.master_timeout_ms = r.get<uint32_t>();
    r.finish();
    return m;
  });
}

PeerNotify decode_peer_notify(std::string_view frame) {
  expect_type(frame, MsgType::Peer, "peer message");
  return guarded("peer message", [&] {
    Reader r(frame, "peer message");
    PeerNotify m;
    m.session = r.get<uint64_t>();
    m.from_node = r.get<uint32_t>();
    m.token = r.get<uint64_t>();
    auto failed = r.get<uint8_t>();
    if (failed > 1) r.fail("failure flag {}, expected 0 or 1", failed);
    m.failed = failed != 0;
    if (m.failed) m.failure = r.failure();
    r.finish();
    return m;
  });
}

Batch decode_batch(std::string_view frame, size_t payload_frames) {
  expect_type(frame, MsgType::Batch, "batch");
  return guarded("batch", [&] {
    Reader r(frame, "batch");
    if (payload_frames > kMaxPayloadFrames)
      r.fail("{} payload frames exceed the limit {}", payload_frames, kMaxPayloadFrames);
    Batch b;
    size_t n = r.count("commands", kMaxCommandsPerBatch, 5, r.get<uint32_t>());
    // A decoded command is tens of times bigger than its bytes: reserve for a small batch
    // up front and let a big one grow as its commands actually decode.
    b.commands.reserve(std::min<size_t>(n, 1024));
    std::vector<bool> used(payload_frames + 1, false);
    for (size_t i = 0; i < n; ++i) r.command(b.commands.emplace_back(), i, payload_frames, used);
    r.finish();
    for (size_t i = 1; i <= payload_frames; ++i)
      if (!used[i]) r.fail("payload frame {} is not referenced by any command", i);
    return b;
  });
}

Reply decode_reply(std::string_view frame, size_t payload_frames) {
  expect_type(frame, MsgType::Reply, "reply");
  return guarded("reply", [&] {
    Reader r(frame, "reply");
    Reply m;
    auto type = r.get<uint8_t>();
    if (type < static_cast<uint8_t>(ReplyType::Get) ||
        type > static_cast<uint8_t>(ReplyType::Event))
      r.fail("unknown reply type {}", type);
    m.type = static_cast<ReplyType>(type);
    m.request = r.get<uint64_t>();
    size_t want_frames = 0;
    switch (m.type) {
      case ReplyType::Get:
        if (r.get<uint8_t>()) {
          m.meta = r.meta("get reply meta");
          want_frames = 1;
        } else {
          m.failures.push_back(r.failure());
        }
        break;
      case ReplyType::Sync: {
        size_t n = r.count("failures", kMaxErrorsPerReply, 32, r.get<uint32_t>());
        for (size_t i = 0; i < n; ++i) m.failures.push_back(r.failure());
        break;
      }
      case ReplyType::Stats:
        m.stats.bytes_in_use = r.get<int64_t>();
        m.stats.peak_bytes = r.get<int64_t>();
        m.stats.live_tensors = r.get<int64_t>();
        break;
      case ReplyType::ProtocolError:
        m.message = r.str("message");
        break;
      case ReplyType::Event: {
        auto done = r.get<uint8_t>();
        if (done > 1) r.fail("event reply has done flag {}, expected 0 or 1", done);
        m.done = done != 0;
        m.time_ns = r.get<int64_t>();
        auto failed = r.get<uint8_t>();
        if (failed > 1) r.fail("event reply has failure flag {}, expected 0 or 1", failed);
        if (failed) m.failures.push_back(r.failure());
        break;
      }
    }
    r.finish();
    if (payload_frames != want_frames)
      r.fail("reply type {} carries {} payload frames, expected {}", type, payload_frames,
             want_frames);
    return m;
  });
}

// ---- BatchWriter ----

struct BatchWriter::Impl {
  std::string out;
  std::unique_ptr<Writer> w;
  void start() {
    out.clear();
    w = std::make_unique<Writer>(out, MsgType::Batch);
  }
};

BatchWriter::BatchWriter() : impl_(new Impl) {
  impl_->start();
}
BatchWriter::~BatchWriter() {
  delete impl_;
}

void BatchWriter::add(const Command& c) {
  impl_->w->command(c);
  ++count_;
}

size_t BatchWriter::bytes() const {
  return impl_->out.size();
}

std::string BatchWriter::finish() {
  impl_->w.reset();
  // The count goes in front of the commands: prefix (8) + endianness tag (1) + u32.
  std::string out;
  {
    Writer w(out, MsgType::Batch);
    w.put(static_cast<uint32_t>(count_));
  }
  out.append(impl_->out, kPrefixBytes + 1, std::string::npos);
  impl_->start();
  count_ = 0;
  return out;
}

}  // namespace dtr::protocol
