// Hostile input against a real dtr-worker: raw ZeroMQ clients send garbage, malformed and
// oversized messages, and commands naming another session's tensors, while a master
// session on the same worker does checked work on another thread the whole time. Each
// message gets the reply the protocol defines for it (decoded with the codec) or, for a
// frame over --max-message-bytes, a dropped connection; the live session sees no error and
// every result it checks is right; the worker then still serves a new master. A second case
// plays a master itself and sends malformed batches inside its own session. Every wait is
// bounded.
#include <doctest/doctest.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <mutex>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>
#include <zmq.hpp>

#include "support/disconnect_monitor.hpp"

#include "master/cluster.hpp"
#include "protocol/codec.hpp"
#include "protocol/messages.hpp"
#include "protocol/transport.hpp"
#include "support/commands.hpp"
#include "support/replies.hpp"

namespace {

using namespace dtr;
using namespace dtr::test;
using dtr::local::Tensor;
using protocol::CmdType;
using protocol::Command;
using protocol::MsgType;
using protocol::Reply;
using ErrorReply = protocol::reply::ProtocolError;
using GetReply = protocol::reply::Get;
using Clock = std::chrono::steady_clock;

constexpr auto kWait = std::chrono::seconds(5);  // the most any single wait may take
constexpr int64_t kMaxMessage = int64_t{1} << 20;

std::vector<std::string> worker_args() {
  return {"--max-message-bytes", std::to_string(kMaxMessage), "--heartbeat-ms", "100"};
}

std::string_view view_of(const zmq::message_t& m) {
  return {m.data<char>(), m.size()};
}

std::string random_bytes(std::mt19937& rng, size_t n) {
  std::string s(n, '\0');
  for (char& c : s) c = static_cast<char>(rng());
  return s;
}

// A raw DEALER dialing the worker, with a monitor that sees its connection dropped.
class RawClient {
 public:
  RawClient(zmq::context_t& ctx, const std::string& endpoint)
      : sock_(ctx, zmq::socket_type::dealer), mon_(ctx, zmq::socket_type::pair) {
    static std::atomic<int> counter{0};
    const std::string mon = "inproc://hostile-client-mon-" + std::to_string(counter++);
    REQUIRE(zmq_socket_monitor(sock_.handle(), mon.c_str(), ZMQ_EVENT_DISCONNECTED) == 0);
    mon_.connect(mon);
    protocol::configure_socket(sock_, int64_t{1} << 30);
    sock_.connect(endpoint);
  }
  ~RawClient() {
    zmq_socket_monitor(sock_.handle(), nullptr, 0);
    mon_.close();
    sock_.close();
  }
  RawClient(const RawClient&) = delete;
  RawClient& operator=(const RawClient&) = delete;

  void send(const std::vector<std::string>& frames) {
    for (size_t i = 0; i < frames.size(); ++i)
      REQUIRE(sock_.send(zmq::buffer(frames[i]),
                         i + 1 < frames.size() ? zmq::send_flags::sndmore : zmq::send_flags::none));
  }
  void send(std::string header) { send(std::vector<std::string>{std::move(header)}); }

  // The next message that is not a heartbeat, within `limit`.
  std::optional<protocol::Received> next(std::chrono::milliseconds limit = kWait) {
    auto deadline = Clock::now() + limit;
    while (true) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
      if (left.count() <= 0) return std::nullopt;
      zmq::pollitem_t item{sock_.handle(), 0, ZMQ_POLLIN, 0};
      zmq::poll(&item, 1, std::min(left, std::chrono::milliseconds(50)));
      auto msg = protocol::try_recv(sock_, protocol::kMaxPayloadFrames + 1);
      if (!msg || msg->frames.empty()) continue;
      if (protocol::peek_type(view_of(msg->frames[0])) == MsgType::Heartbeat) continue;
      return msg;
    }
  }
  Reply reply() {
    auto msg = next();
    REQUIRE_MESSAGE(msg.has_value(), "no reply within " << kWait.count() << " s");
    return protocol::decode_reply(view_of(msg->frames[0]), msg->frames.size() - 1);
  }
  // Expects a ProtocolError reply (request 0); returns its message.
  std::string protocol_error() {
    auto r = reply_as<ErrorReply>(reply());
    CHECK(r.request == 0);
    return r.message;
  }
  std::string protocol_error_for(std::vector<std::string> frames) {
    send(frames);
    return protocol_error();
  }
  std::string protocol_error_for(std::string header) {
    return protocol_error_for(std::vector<std::string>{std::move(header)});
  }
  protocol::HelloReply hello_reply() {
    auto msg = next();
    REQUIRE_MESSAGE(msg.has_value(), "no hello reply within " << kWait.count() << " s");
    return protocol::decode_hello_reply(view_of(msg->frames[0]));
  }
  protocol::HelloReply hello(uint16_t version = protocol::kVersion, std::string name = "raw:1") {
    send(protocol::encode(protocol::Hello{version, std::move(name)}));
    return hello_reply();
  }
  // Nothing but heartbeats arrives for `limit`.
  bool silent(std::chrono::milliseconds limit) { return !next(limit).has_value(); }
  // Waits (bounded) for ZeroMQ to report the connection dropped.
  bool dropped(std::chrono::milliseconds limit = kWait) {
    return dtr::test::wait_disconnected(mon_, limit);
  }

 private:
  zmq::socket_t sock_;
  zmq::socket_t mon_;
};

// Work a master does on another thread, checking every result against the local library,
// until told to stop (and at least `min_rounds` rounds).
class LiveSession {
 public:
  explicit LiveSession(int min_rounds) : min_rounds_(min_rounds) {
    thread_ = std::thread([this] { run(); });
  }
  ~LiveSession() { finish(); }
  void finish() {
    stop_.store(true);
    if (thread_.joinable()) thread_.join();
  }
  int rounds() const { return rounds_.load(); }
  std::vector<std::string> errors() {
    std::lock_guard lock(m_);
    return errors_;
  }

 private:
  void fail(std::string what) {
    std::lock_guard lock(m_);
    errors_.push_back(std::move(what));
  }
  void run() {
    try {
      Generator g(2024);
      // Lives the whole session: a stranger freeing or overwriting it would show.
      DistributedTensor acc = dtr::zeros({8}, DType::Float64);
      Tensor acc_local = local::zeros({8}, DType::Float64);
      for (int round = 0; !stop_.load() || round < min_rounds_; ++round) {
        Tensor a = local::randn({16, 16}, g), b = local::randn({16, 16}, g);
        DistributedTensor ra = dist_send(a), rb = dist_send(b);
        DistributedTensor rc = (ra.matmul(rb) + ra * 2).abs().sqrt().sum(1);
        Tensor lc = (a.matmul(b) + a * 2).abs().sqrt().sum(1);
        std::string why;
        if (!same_values(rc.to_local(), lc, &why))
          fail("round " + std::to_string(round) + ": " + why);
        acc.add_(round);
        acc_local.add_(round);
        if (round % 5 == 0 && !same_values(acc.to_local(), acc_local, &why))
          fail("accumulator at round " + std::to_string(round) + ": " + why);
        rounds_.store(round + 1);
      }
      synchronize();
      std::string why;
      if (!same_values(acc.to_local(), acc_local, &why)) fail("accumulator at the end: " + why);
    } catch (const std::exception& e) {
      fail(std::string("exception: ") + e.what());
    }
  }

  int min_rounds_;
  std::atomic<bool> stop_{false};
  std::atomic<int> rounds_{0};
  std::mutex m_;
  std::vector<std::string> errors_;
  std::thread thread_;
};

MasterOptions options_for(const WorkerProcess& w) {
  MasterOptions o = test_options();
  o.workers = {w.endpoint()};
  return o;
}

// A fresh master session against `w` does a checked computation.
void check_new_master_works(const WorkerProcess& w) {
  init_master_worker(options_for(w));
  SessionGuard guard;
  Tensor a = local::arange(0, 12).view({3, 4}).to(DType::Float32);
  check_same(dist_send(a) * 3 + 1, a * 3 + 1);
}

}  // namespace

TEST_CASE("hostile raw clients get protocol errors and never disturb a live session") {
  WorkerProcess worker(worker_args());
  init_master_worker(options_for(worker));
  std::optional<SessionGuard> guard;
  guard.emplace();
  LiveSession live(20);
  // Attack once the session is busy (its master hands out tensor ids 1, 2, ...).
  for (auto deadline = Clock::now() + kWait; live.rounds() < 2 && Clock::now() < deadline;)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  const int rounds_before = live.rounds();

  zmq::context_t ctx;
  std::mt19937 rng(99);
  const std::string busy = "busy: serving master ";
  const std::string own_client = ":" + std::to_string(getpid());
  std::string good = batch({add_cmd(3, 1, 2), get_cmd(3, 9)});

  {  // garbage, short frames and bad prefixes are protocol errors naming the fault
    RawClient c(ctx, worker.endpoint());
    CHECK(contains(c.protocol_error_for(random_bytes(rng, 200)), "bad magic"));
    CHECK(contains(c.protocol_error_for(""), "shorter than"));
    CHECK(contains(c.protocol_error_for(good.substr(0, 5)), "shorter than"));
    std::string wrong_version = good;
    wrong_version[4] = static_cast<char>(protocol::kVersion + 1);
    CHECK(contains(c.protocol_error_for(wrong_version),
                   "version " + std::to_string(protocol::kVersion + 1)));
    std::string unknown_type = good;
    unknown_type[6] = 42;
    CHECK(contains(c.protocol_error_for(unknown_type), "unknown message type 42"));
    CHECK(contains(c.protocol_error_for(protocol::encode(protocol::HelloReply{})),
                   "unexpected message type 2"));
    CHECK(contains(c.protocol_error_for(protocol::encode(Reply{})), "unexpected message type 4"));
    // A hello prefix followed by garbage.
    std::string bad_hello = protocol::encode(protocol::Hello{protocol::kVersion, "x"});
    bad_hello.resize(protocol::kPrefixBytes);
    bad_hello += random_bytes(rng, 3);
    std::string m = c.protocol_error_for(bad_hello);
    CHECK_MESSAGE(contains(m, "hello: truncated"), m);
    // More frames than any message may have: read whole, answered once.
    std::vector<std::string> frames(protocol::kMaxPayloadFrames + 2);
    frames[0] = good;
    CHECK(contains(c.protocol_error_for(frames), "payload frames"));
  }

  {  // hellos: another version is refused by name, a right one is told busy
    RawClient c(ctx, worker.endpoint());
    const auto future = static_cast<uint16_t>(protocol::kVersion + 1);
    protocol::HelloReply old = c.hello(future, "future:1");
    CHECK_FALSE(old.accepted);
    CHECK(old.reason == "protocol version mismatch: master speaks " + std::to_string(future) +
                            ", worker speaks " + std::to_string(protocol::kVersion));
    protocol::HelloReply r = c.hello();
    CHECK_FALSE(r.accepted);
    CHECK(r.reason.rfind(busy, 0) == 0);
    CHECK_MESSAGE(contains(r.reason, own_client), r.reason);
    // Hello, then garbage: busy, then a protocol error.
    c.send(protocol::encode(protocol::Hello{protocol::kVersion, "raw:2"}));
    c.send(random_bytes(rng, 40));
    CHECK_FALSE(c.hello_reply().accepted);
    CHECK(contains(c.protocol_error(), "bad magic"));
  }

  {  // batches and setups from a stranger are refused whole, whatever they hold
    RawClient c(ctx, worker.endpoint());
    // Huge declared counts and sizes, truncated bodies, payloads that disagree with their
    // put, unknown ids: refused before decoding, naming the session's master.
    std::string huge_count = good;
    for (int i = 9; i < 13; ++i) huge_count[i] = static_cast<char>(0xFF);
    CHECK(contains(c.protocol_error_for(huge_count), busy));
    CHECK(contains(c.protocol_error_for(good.substr(0, good.size() - 3)), busy));
    CHECK(contains(
        c.protocol_error_for({batch({put_cmd(900001, Shape{1000000}, 1)}), std::string(12, 'p')}),
        busy));
    CHECK(contains(c.protocol_error_for(batch({get_cmd(424242, 1)})), busy));
    protocol::Setup setup;
    setup.node = 0;
    setup.session = 1;
    setup.peers = {"tcp://127.0.0.1:1"};
    CHECK(contains(c.protocol_error_for(protocol::encode(setup)), busy));
    // The live session's own ids: reads, frees and overwrites are all refused; nothing of
    // its tensors comes back.
    for (protocol::TensorId id = 1; id <= 64; ++id) {
      c.send(batch({get_cmd(id, id), free_cmd(id), fill_inplace_cmd(id, -1.0)}));
      auto r = reply_as<ErrorReply>(c.reply());
      CHECK(contains(r.message, busy));
    }
    // A goodbye, a heartbeat and peer notifications from a stranger get no answer (and the
    // goodbye does not end the live session: see the checks at the end).
    c.send(protocol::encode_goodbye());
    c.send(protocol::encode_heartbeat());
    protocol::PeerNotify n;
    n.session = 0x5eed;
    n.token = 1;
    c.send(protocol::encode(n));
    c.send({protocol::encode(n), std::string(64, 'b')});
    c.send({protocol::encode(n), "a", "b"});
    CHECK(c.silent(std::chrono::milliseconds(300)));
  }

  {  // a frame over --max-message-bytes drops the connection, unanswered
    RawClient c(ctx, worker.endpoint());
    c.send({batch({put_cmd(1, Shape{kMaxMessage / 4 + 1}, 1)}),
            std::string(static_cast<size_t>(kMaxMessage) + 4, 'x')});
    CHECK(c.dropped());
    // The same client (ZeroMQ reconnects it) is answered again afterwards.
    CHECK(contains(c.protocol_error_for("after the drop"), "bad magic"));
  }

  {  // several clients at once, each answered exactly
    constexpr int kClients = 4, kEach = 50;
    std::vector<std::thread> threads;
    std::vector<std::string> problems(kClients);
    for (int t = 0; t < kClients; ++t) {
      threads.emplace_back([&, t] {
        RawClient c(ctx, worker.endpoint());
        std::mt19937 local_rng(static_cast<uint32_t>(t));
        for (int i = 0; i < kEach; ++i) {
          c.send(random_bytes(local_rng, 1 + local_rng() % 300));
          c.send(protocol::encode(protocol::Hello{protocol::kVersion, "spam"}));
          c.send(batch({get_cmd(static_cast<protocol::TensorId>(i + 1), 1)}));
        }
        int errors = 0, refusals = 0, busy_batches = 0;
        for (int i = 0; i < 3 * kEach; ++i) {
          auto msg = c.next();
          if (!msg) {
            problems[t] = "missing replies after " + std::to_string(i);
            return;
          }
          std::string_view head = view_of(msg->frames[0]);
          if (protocol::peek_type(head) == MsgType::HelloReply) {
            protocol::HelloReply h = protocol::decode_hello_reply(head);
            if (!h.accepted && h.reason.rfind(busy, 0) == 0) ++refusals;
            continue;
          }
          Reply reply = protocol::decode_reply(head, msg->frames.size() - 1);
          const auto* r = std::get_if<ErrorReply>(&reply);
          if (!r) continue;
          if (contains(r->message, "bad magic") || contains(r->message, "shorter than")) ++errors;
          if (contains(r->message, busy)) ++busy_batches;
        }
        if (errors != kEach || refusals != kEach || busy_batches != kEach)
          problems[t] = "errors " + std::to_string(errors) + ", refusals " +
                        std::to_string(refusals) + ", busy batches " + std::to_string(busy_batches);
        else if (!c.silent(std::chrono::milliseconds(100)))
          problems[t] = "more replies than messages";
      });
    }
    for (auto& th : threads) th.join();
    for (int t = 0; t < kClients; ++t) CHECK_MESSAGE(problems[t].empty(), problems[t]);
  }

  // Whatever the attack, the live session saw nothing of it, and went on meanwhile.
  const int rounds_during = live.rounds() - rounds_before;
  live.finish();
  MESSAGE(rounds_during, " checked rounds of the live session during the attack, ", live.rounds(),
          " in all");
  CHECK(rounds_during > 0);
  for (const std::string& e : live.errors()) FAIL_CHECK(e);
  CHECK(live.rounds() >= 20);
  CHECK_NOTHROW(synchronize());
  CHECK(worker.running());
  guard.reset();  // the session ends
  check_new_master_works(worker);
  CHECK(worker.running());
}

TEST_CASE("a thousand bad messages from one peer leave the worker's log readable") {
  char tmpl[] = "/tmp/dtr-worker-log-XXXXXX";
  int fd = mkstemp(tmpl);
  REQUIRE(fd >= 0);
  close(fd);
  const std::string log_path = tmpl;
  int lines = 0;
  std::string log;
  {
    WorkerProcess worker(worker_args(), log_path);
    zmq::context_t ctx;
    std::mt19937 rng(7);
    RawClient master(ctx, worker.endpoint());
    REQUIRE(master.hello(protocol::kVersion, "raw:1").accepted);
    // A second master asking 50 times while the worker is busy.
    RawClient second(ctx, worker.endpoint());
    for (int i = 0; i < 50; ++i) CHECK_FALSE(second.hello(protocol::kVersion, "raw:2").accepted);
    // 1,000 garbage messages from a stranger: every one is still answered (the throttle is
    // for the log only).
    RawClient c(ctx, worker.endpoint());
    for (int i = 0; i < 1000; ++i) c.send(random_bytes(rng, 64));
    int answered = 0;
    for (auto deadline = Clock::now() + 4 * kWait; answered < 1000 && Clock::now() < deadline;)
      if (c.next(std::chrono::milliseconds(500))) ++answered;
    CHECK(answered == 1000);
  }
  std::ifstream in(log_path);
  for (std::string line; std::getline(in, line);) {
    ++lines;
    log += line + "\n";
  }
  std::remove(log_path.c_str());
  std::remove((log_path + ".2").c_str());
  INFO("the worker's log:\n", log);
  CHECK(lines >= 1);   // the first one is logged
  CHECK(lines <= 30);  // not one line per message
}

// Runs `body` against a worker whose stderr goes to a file; returns that log.
template <class Body>
std::string worker_log_after(Body body) {
  char tmpl[] = "/tmp/dtr-worker-log-XXXXXX";
  int fd = mkstemp(tmpl);
  REQUIRE(fd >= 0);
  close(fd);
  const std::string log_path = tmpl;
  {
    WorkerProcess worker(worker_args(), log_path);
    body(worker);
  }
  std::ifstream in(log_path);
  std::string log((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::remove(log_path.c_str());
  return log;
}

size_t count_of(const std::string& text, std::string_view part) {
  size_t n = 0;
  for (size_t at = text.find(part); at != std::string::npos; at = text.find(part, at + 1)) ++n;
  return n;
}

// Issue 40, item 3: the client name in a HELLO went into the worker's log raw, so a client
// could forge log lines, terminal escapes and NUL bytes.
TEST_CASE("peer strings reach the worker's log escaped: no forged lines, escapes or NULs") {
  const std::string forged = std::string("raw:1\n2026-01-01 [info] FORGED LINE\x1b[2J") + '\0' +
                             "\r" + std::string(400, 'x');
  std::string log = worker_log_after([&](WorkerProcess& worker) {
    zmq::context_t ctx;
    RawClient master(ctx, worker.endpoint());
    REQUIRE(master.hello(protocol::kVersion, forged).accepted);
    // Refused while busy: the name goes into the refusal's log line too.
    RawClient second(ctx, worker.endpoint());
    CHECK_FALSE(second.hello(protocol::kVersion, forged).accepted);
    // An old version is refused before any session: logged with the name as well.
    RawClient third(ctx, worker.endpoint());
    CHECK_FALSE(third.hello(protocol::kVersion - 1, forged).accepted);
  });
  INFO("the worker's log:\n", log);
  CHECK(log.find("\nFORGED") == std::string::npos);
  CHECK(log.find("\n2026-01-01") == std::string::npos);  // no line starts as the forged one
  CHECK(log.find('\x1b') == std::string::npos);
  CHECK(log.find('\0') == std::string::npos);
  CHECK(log.find('\r') == std::string::npos);
  CHECK(count_of(log, "raw:1\\x0a2026-01-01 [info] FORGED LINE\\x1b[2J\\x00\\x0d") >= 1);
  CHECK(contains(log, "... (" + std::to_string(forged.size()) + " bytes)"));  // cut
}

// Issue 40, item 4: the once-a-minute limit was per routing id or claimed name, both the
// sender's choice: a client that reconnected for every message got one line per message.
TEST_CASE("log limits hold per source address and in total, however often a client reconnects") {
  std::string log = worker_log_after([&](WorkerProcess& worker) {
    zmq::context_t ctx;
    std::mt19937 rng(11);
    for (int i = 0; i < 200; ++i) {  // a new connection, a new routing id, every message
      RawClient c(ctx, worker.endpoint());
      c.send(random_bytes(rng, 64));
      REQUIRE(c.next(std::chrono::milliseconds(2000)).has_value());  // still answered
    }
    for (int i = 0; i < 100; ++i) {  // and a new claimed name each time
      RawClient c(ctx, worker.endpoint());
      CHECK_FALSE(c.hello(protocol::kVersion - 1, "raw:" + std::to_string(i)).accepted);
    }
  });
  INFO("the worker's log:\n", log);
  CHECK(count_of(log, "protocol error from") == 1);  // one source (127.0.0.1), one minute
  CHECK(count_of(log, "rejected master") == 1);
  CHECK(contains(log, "at 127.0.0.1"));
}

TEST_CASE("hostile raw master: malformed batches in its own session are named, nothing leaks") {
  WorkerProcess worker(worker_args());
  // A real master's session first, so that its ids were in use on this worker.
  {
    init_master_worker(options_for(worker));
    SessionGuard guard;
    std::vector<DistributedTensor> keep;
    for (int i = 0; i < 20; ++i) keep.push_back(dtr::full({4}, i));
    synchronize();
  }
  zmq::context_t ctx;
  RawClient c(ctx, worker.endpoint());
  // The previous master's session may take a heartbeat to be noticed gone.
  bool accepted = false;
  for (auto deadline = Clock::now() + kWait; !accepted && Clock::now() < deadline;) {
    protocol::HelloReply r = c.hello();
    accepted = r.accepted;
    if (!accepted) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  REQUIRE(accepted);

  std::string good = batch({add_cmd(3, 1, 2), sync_cmd(9)});
  std::string huge_count = good;
  for (int i = 9; i < 13; ++i) huge_count[i] = static_cast<char>(0xFF);
  CHECK(contains(c.protocol_error_for(huge_count), "exceeds the limit"));
  CHECK(contains(c.protocol_error_for(good.substr(0, good.size() - 3)), "truncated"));
  std::string unknown_op = good;
  unknown_op[18] = static_cast<char>(0xFF);
  unknown_op[19] = static_cast<char>(0xFF);
  CHECK(contains(c.protocol_error_for(unknown_op), "unknown op code 65535"));
  // Payload frames the header does not account for.
  std::string m = c.protocol_error_for({batch({sync_cmd(1)}), std::string(8, 'u')});
  CHECK_MESSAGE(contains(m, "payload frame 1 is not referenced"), m);
  m = c.protocol_error_for({batch({put_cmd(7, Shape{2}, 2)}), std::string(8, 'u')});
  CHECK_MESSAGE(contains(m, "payload"), m);

  // A payload whose size disagrees with its put, unknown inputs, id 0 and a reused id
  // fail their commands, reported at the next sync; the ids of the earlier session name
  // nothing here.
  Tensor four = local::from_vector<float>({1, 2, 3, 4}, {4});
  std::string four_bytes(static_cast<const char*>(four.raw_data()), 16);
  c.send({batch({put_cmd(1010, Shape{4}, 1), put_cmd(1011, Shape{4}, 2), add_cmd(1012, 1011, 999),
                 add_cmd(0, 1011, 1011), add_cmd(1011, 1011, 1011), sync_cmd(5)}),
          std::string(12, 'p'), four_bytes});
  auto sync = reply_as<protocol::reply::Sync>(c.reply());
  CHECK(sync.request == 5);
  std::string all;
  for (const auto& f : sync.failures) all += f.op + ": " + f.message + "\n";
  CHECK_MESSAGE(contains(all, "payload has 12 bytes"), all);
  CHECK_MESSAGE(contains(all, "needs 16"), all);
  CHECK_MESSAGE(contains(all, "input tensor %999 does not exist"), all);
  CHECK_MESSAGE(contains(all, "output tensor id 0 is not a valid id"), all);
  CHECK_MESSAGE(contains(all, "output tensor id %1011 is already in use"), all);
  for (protocol::TensorId id = 1; id <= 40; ++id) {
    c.send(batch({get_cmd(id, 100 + id)}));
    auto r = reply_as<GetReply>(c.reply());
    CHECK(r.request == 100 + id);
    REQUIRE(r.failure);
    CHECK(r.failure->message == "tensor %" + std::to_string(id) + " does not exist");
  }
  // The good put is intact.
  c.send(batch({get_cmd(1011, 77)}));
  auto got = c.next();
  REQUIRE(got.has_value());
  auto r = decode_as<GetReply>(view_of(got->frames[0]), got->frames.size() - 1);
  REQUIRE(!r.failure);
  REQUIRE(got->frames.size() == 2);
  CHECK(std::string(view_of(got->frames[1])) == four_bytes);

  // Its own frame over --max-message-bytes: the connection goes, and with it the session
  // (the worker cannot reach its master any more); a new master gets in.
  c.send({batch({put_cmd(20, Shape{kMaxMessage / 4 + 1}, 1)}),
          std::string(static_cast<size_t>(kMaxMessage) + 4, 'x')});
  CHECK(c.dropped());
  CHECK(worker.running());
  check_new_master_works(worker);
}
