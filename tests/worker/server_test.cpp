// Server tests over loopback TCP: a worker::Server runs in a thread and raw cppzmq sockets
// play the master (DEALERs dialing a listening worker, a ROUTER for connect mode). Every
// wait is bounded; each test stops and joins its server and closes its sockets.
#include <doctest/doctest.h>
#include <fmt/format.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <exception>
#include <optional>
#include <string>
#include <thread>
#include <vector>
#include <zmq.hpp>

#include "dtr/error.hpp"
#include "dtr/tensor.hpp"
#include "protocol/codec.hpp"
#include "protocol/messages.hpp"
#include "protocol/transport.hpp"
#include "support/commands.hpp"
#include "support/replies.hpp"
#include "worker/server.hpp"

namespace {

using namespace dtr;
using namespace dtr::test;
using namespace std::chrono_literals;
using dtr::local::Tensor;
using protocol::CmdType;
using protocol::Command;
using protocol::MsgType;
using protocol::Reply;
using GetReply = protocol::reply::Get;
using ErrorReply = protocol::reply::ProtocolError;
using Clock = std::chrono::steady_clock;

constexpr auto kWait = 5s;  // the most any single wait in these tests may take

// A Server running in its own thread; stopped and joined on destruction.
class ServerThread {
 public:
  explicit ServerThread(worker::ServerOptions options) : server_(std::move(options)) {
    thread_ = std::thread([this] {
      try {
        server_.run();
      } catch (...) {
        error_ = std::current_exception();
      }
      finished_.store(true);
    });
  }
  ~ServerThread() { join(); }
  void join() {
    server_.stop();
    if (thread_.joinable()) thread_.join();
  }
  // Waits (bounded) for run() to return by itself.
  bool wait_finished(std::chrono::milliseconds limit = kWait) {
    auto deadline = Clock::now() + limit;
    while (!finished_.load() && Clock::now() < deadline) std::this_thread::sleep_for(5ms);
    return finished_.load();
  }
  std::exception_ptr error() const { return finished_.load() ? error_ : nullptr; }
  std::string endpoint() const { return server_.endpoint(); }
  void stall_loop_for_test(std::chrono::milliseconds d) { server_.stall_loop_for_test(d); }

 private:
  worker::Server server_;
  std::exception_ptr error_;
  std::atomic<bool> finished_{false};
  std::thread thread_;
};

worker::ServerOptions listen_options(std::chrono::milliseconds heartbeat = 10s) {
  worker::ServerOptions o;
  o.listen = "tcp://127.0.0.1:*";
  o.name = "test-worker";
  o.heartbeat = heartbeat;
  return o;
}

std::string_view view_of(const zmq::message_t& m) {
  return {m.data<char>(), m.size()};
}

// Receives one message within `limit`, skipping heartbeats unless asked for them.
std::optional<protocol::Received> receive(zmq::socket_t& s, bool skip_heartbeats = true,
                                          std::chrono::milliseconds limit = kWait,
                                          size_t header_index = 0) {
  auto deadline = Clock::now() + limit;
  while (true) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    if (left.count() <= 0) return std::nullopt;
    zmq::pollitem_t item{s.handle(), 0, ZMQ_POLLIN, 0};
    zmq::poll(&item, 1, left);
    auto msg = protocol::try_recv(s, protocol::kMaxPayloadFrames + 2);
    if (!msg) continue;
    if (skip_heartbeats && msg->frames.size() > header_index &&
        protocol::peek_type(view_of(msg->frames[header_index])) == MsgType::Heartbeat)
      continue;
    return msg;
  }
}

// A master's DEALER dialing the worker.
class Client {
 public:
  Client(zmq::context_t& ctx, const std::string& endpoint, std::string name)
      : socket_(ctx, zmq::socket_type::dealer), name_(std::move(name)) {
    protocol::configure_socket(socket_, int64_t{1} << 30);
    socket_.connect(endpoint);
  }
  void send(std::string header, std::span<const Tensor> payloads = {}) {
    REQUIRE(protocol::send_message(socket_, nullptr, std::move(header), payloads));
  }
  void send_frames(const std::vector<std::string>& frames) {
    for (size_t i = 0; i < frames.size(); ++i)
      socket_.send(zmq::buffer(frames[i]),
                   i + 1 < frames.size() ? zmq::send_flags::sndmore : zmq::send_flags::none);
  }
  protocol::Received receive_message() {
    auto msg = receive(socket_);
    REQUIRE_MESSAGE(msg.has_value(), "no reply within " << kWait.count() << " s");
    REQUIRE(!msg->frames.empty());
    return std::move(*msg);
  }
  protocol::HelloReply hello() {
    send(protocol::encode(protocol::Hello{protocol::kVersion, name_}));
    protocol::Received msg = receive_message();
    return protocol::decode_hello_reply(view_of(msg.frames[0]));
  }
  // The next reply; for a Get with a tensor, `payload` receives it.
  Reply reply(Tensor* payload = nullptr) {
    protocol::Received msg = receive_message();
    Reply r = protocol::decode_reply(view_of(msg.frames[0]), msg.frames.size() - 1);
    const auto* get = std::get_if<GetReply>(&r);
    if (payload && get && !get->failure) {
      zmq::message_t& f = msg.frames[1];
      Tensor t = local::empty(get->meta.shape, get->meta.dtype);
      REQUIRE(f.size() == static_cast<size_t>(t.numel()) * element_size(t.dtype()));
      if (f.size()) std::memcpy(t.raw_data(), f.data(), f.size());
      *payload = t;
    }
    return r;
  }
  // Sends `header` and expects a ProtocolError reply; returns its message.
  std::string protocol_error_for(std::string header) {
    send(std::move(header));
    auto r = reply_as<ErrorReply>(reply());
    CHECK(r.request == 0);
    return r.message;
  }
  void close() { socket_.close(); }
  zmq::socket_t& socket() { return socket_; }

 private:
  zmq::socket_t socket_;
  std::string name_;
};

// Puts `t` as %1 and %2, adds them into %3 and checks the result comes back.
void check_put_add_get(Client& c, uint64_t request) {
  Tensor t = local::from_vector<float>({1, 2, 3, 4}, {2, 2});
  std::vector<Tensor> payloads{t, t};
  c.send(batch({put_cmd(1, t, 1), put_cmd(2, t, 2), add_cmd(3, 1, 2), get_cmd(3, request)}),
         payloads);
  Tensor got;
  auto r = reply_as<GetReply>(c.reply(&got));
  CHECK(r.request == request);
  REQUIRE(!r.failure);
  CHECK(got.to_vector<float>() == std::vector<float>{2, 4, 6, 8});
}

int64_t live_tensors(Client& c, uint64_t request) {
  c.send(batch({stats_cmd(request)}));
  auto r = reply_as<protocol::reply::Stats>(c.reply());
  CHECK(r.request == request);
  return r.stats.live_tensors;
}

bool contains(const std::string& s, const std::string& needle) {
  return s.find(needle) != std::string::npos;
}

}  // namespace

TEST_SUITE("worker/server") {
  TEST_CASE("options are checked and endpoints named in errors") {
    worker::ServerOptions none;
    CHECK_THROWS_AS(worker::Server{none}, InvalidArgument);
    worker::ServerOptions both = listen_options();
    both.master = "tcp://127.0.0.1:1";
    CHECK_THROWS_AS(worker::Server{both}, InvalidArgument);
    // Endpoints are checked before ZeroMQ sees them (it would bind port 70000 as 4464).
    for (const char* endpoint : {"tcp://127.0.0.1:70000", "127.0.0.1:5555", "tpc://127.0.0.1:5"}) {
      worker::ServerOptions typo = listen_options();
      typo.listen = endpoint;
      try {
        worker::Server s(typo);
        FAIL("listening on " << endpoint << " should be refused");
      } catch (const InvalidArgument& e) {
        CHECK(contains(e.what(), std::string("worker listen endpoint: expected tcp://HOST:PORT "
                                             "or ipc://PATH, got '") +
                                     endpoint + "'"));
      }
    }
    worker::ServerOptions dial_any = listen_options();
    dial_any.listen.clear();
    dial_any.master = "tcp://*:5555";
    CHECK_THROWS_WITH_AS(worker::Server{dial_any},
                         doctest::Contains("'*' is for listening: name the host to connect to"),
                         InvalidArgument);
    worker::ServerOptions bad = listen_options();
    bad.listen = "tcp://no-such-interface-xyz:5555";
    bad.security.insecure = true;  // past the key check, to the bind
    try {
      worker::Server s(bad);
      FAIL("bind should fail");
    } catch (const TransportError& e) {
      CHECK(contains(e.what(), "tcp://no-such-interface-xyz:5555"));
      CHECK(contains(e.what(), "a listen address is an address of this machine, an interface"));
    }
    // The port chosen for '*' is reported.
    worker::Server s(listen_options());
    CHECK(contains(s.endpoint(), "tcp://127.0.0.1:"));
    CHECK_FALSE(contains(s.endpoint(), "*"));
    // stop() before run(): run() returns at once.
    s.stop();
    s.run();
  }

  TEST_CASE("hello is accepted with a CPU device, and a session serves batches") {
    ServerThread server(listen_options());
    zmq::context_t ctx;
    Client c(ctx, server.endpoint(), "master-a:1");
    protocol::HelloReply hello = c.hello();
    CHECK(hello.accepted);
    CHECK(hello.version == protocol::kVersion);
    CHECK(contains(hello.worker, ":"));
    CHECK(hello.threads >= 1);
    REQUIRE(hello.devices.size() >= 1);
    CHECK(hello.devices[0].index == -1);
    CHECK(hello.devices[0].name == "cpu");
    CHECK(hello.devices[0].total_memory > 0);
    CHECK(hello.devices[0].free_memory > 0);
    CHECK(hello.devices[0].free_memory <= hello.devices[0].total_memory);
    check_put_add_get(c, 11);
    CHECK(live_tensors(c, 12) == 3);
    server.join();
    CHECK_FALSE(server.error());
  }

  TEST_CASE("a second master is busy until the first goes away") {
    ServerThread server(listen_options());
    zmq::context_t ctx;
    Client first(ctx, server.endpoint(), "master-one:100");
    Client second(ctx, server.endpoint(), "master-two:200");
    REQUIRE(first.hello().accepted);

    protocol::HelloReply busy = second.hello();
    CHECK_FALSE(busy.accepted);
    CHECK(busy.reason.rfind("busy: serving master master-one:100 since ", 0) == 0);
    // A batch from the second one is refused too, and runs nothing.
    std::string refused = second.protocol_error_for(batch({stats_cmd(1)}));
    CHECK(contains(refused, "busy: serving master master-one:100"));
    // The first one keeps working.
    check_put_add_get(first, 2);

    first.close();
    bool accepted = false;
    auto deadline = Clock::now() + kWait;
    while (!accepted && Clock::now() < deadline) {
      protocol::HelloReply r = second.hello();
      accepted = r.accepted;
      if (!accepted) {
        CHECK(contains(r.reason, "busy"));
        std::this_thread::sleep_for(20ms);
      }
    }
    REQUIRE(accepted);
    // A fresh session: the first master's tensors are gone.
    CHECK(live_tensors(second, 3) == 0);
    check_put_add_get(second, 4);
  }

  TEST_CASE("a batch without a session is refused") {
    ServerThread server(listen_options());
    zmq::context_t ctx;
    Client c(ctx, server.endpoint(), "m:1");
    CHECK(contains(c.protocol_error_for(batch({stats_cmd(1)})),
                   "no session with this master: send HELLO first"));
    REQUIRE(c.hello().accepted);
    CHECK(live_tensors(c, 2) == 0);
  }

  TEST_CASE("garbage gets ProtocolError replies and changes nothing") {
    ServerThread server(listen_options());
    zmq::context_t ctx;
    Client c(ctx, server.endpoint(), "m:1");
    // Before a hello as well as during a session.
    CHECK(contains(c.protocol_error_for("random bytes, not a dtr message"), "bad magic"));
    REQUIRE(c.hello().accepted);

    std::string good = batch({add_cmd(3, 1, 2), stats_cmd(9)});
    std::string random_bytes;
    uint32_t state = 12345;
    for (int i = 0; i < 200; ++i) {
      state = state * 1103515245u + 12345u;
      random_bytes.push_back(static_cast<char>(state >> 24));
    }
    CHECK(contains(c.protocol_error_for(random_bytes), "bad magic"));
    CHECK(contains(c.protocol_error_for(""), "shorter than"));
    CHECK(contains(c.protocol_error_for(good.substr(0, 5)), "shorter than"));
    CHECK(contains(c.protocol_error_for(good.substr(0, good.size() - 3)), "truncated"));

    std::string wrong_version = good;
    wrong_version[4] = static_cast<char>(protocol::kVersion + 1);
    CHECK(contains(c.protocol_error_for(wrong_version),
                   fmt::format("version {}", protocol::kVersion + 1)));

    std::string unknown_type = good;
    unknown_type[6] = 42;
    CHECK(contains(c.protocol_error_for(unknown_type), "unknown message type 42"));

    std::string unknown_op = good;
    // prefix (8), tag (1), count (4), command type (1), stream (4), then the u16 op.
    unknown_op[18] = static_cast<char>(0xFF);
    unknown_op[19] = static_cast<char>(0xFF);
    CHECK(contains(c.protocol_error_for(unknown_op), "unknown op code 65535"));

    std::string huge_count = good;
    for (int i = 9; i < 13; ++i) huge_count[i] = static_cast<char>(0xFF);
    CHECK(contains(c.protocol_error_for(huge_count), "exceeds the limit"));

    CHECK(contains(c.protocol_error_for(protocol::encode(protocol::HelloReply{})),
                   "unexpected message type 2"));
    CHECK(contains(c.protocol_error_for(protocol::encode(Reply{})), "unexpected message type 4"));

    // Payload frames that no command references, and one that a put references twice.
    Tensor t = local::from_vector<float>({1, 2}, {2});
    c.send(batch({stats_cmd(5)}), std::vector<Tensor>{t});
    auto r = reply_as<ErrorReply>(c.reply());
    CHECK(contains(r.message, "payload frame 1 is not referenced"));

    // More frames than any message may have.
    std::vector<std::string> frames(protocol::kMaxPayloadFrames + 2);
    frames[0] = good;
    c.send_frames(frames);
    r = reply_as<ErrorReply>(c.reply());
    CHECK(contains(r.message, "payload frames"));

    // None of it ran: a stats request sees no tensors, and real work still works.
    CHECK(live_tensors(c, 6) == 0);
    check_put_add_get(c, 7);
    server.join();
    CHECK_FALSE(server.error());
  }

  TEST_CASE("hello with another protocol version is refused by name") {
    ServerThread server(listen_options());
    zmq::context_t ctx;
    Client c(ctx, server.endpoint(), "m:1");
    const auto future = static_cast<uint16_t>(protocol::kVersion + 1);
    c.send(protocol::encode(protocol::Hello{future, "future-master:1"}));
    protocol::Received msg = c.receive_message();
    protocol::HelloReply r = protocol::decode_hello_reply(view_of(msg.frames[0]));
    CHECK_FALSE(r.accepted);
    CHECK(r.reason == "protocol version mismatch: master speaks " + std::to_string(future) +
                          ", worker speaks " + std::to_string(protocol::kVersion));
    // No session was opened: a right hello from someone else is accepted.
    Client other(ctx, server.endpoint(), "m:2");
    CHECK(other.hello().accepted);
  }

  TEST_CASE("goodbye ends the session and frees its tensors") {
    ServerThread server(listen_options());
    zmq::context_t ctx;
    Client c(ctx, server.endpoint(), "m:1");
    REQUIRE(c.hello().accepted);
    check_put_add_get(c, 1);
    CHECK(live_tensors(c, 2) == 3);
    c.send(protocol::encode_goodbye());
    CHECK(contains(c.protocol_error_for(batch({stats_cmd(3)})), "no session"));
    // Another master gets in at once, into an empty session.
    Client other(ctx, server.endpoint(), "m:2");
    REQUIRE(other.hello().accepted);
    CHECK(live_tensors(other, 4) == 0);
  }

  TEST_CASE("a hello from the session's own master restarts its session") {
    ServerThread server(listen_options());
    zmq::context_t ctx;
    Client c(ctx, server.endpoint(), "m:1");
    REQUIRE(c.hello().accepted);
    check_put_add_get(c, 1);
    REQUIRE(c.hello().accepted);
    CHECK(live_tensors(c, 2) == 0);
  }

  TEST_CASE("heartbeats flow while a session is open, and a vanished master loses it") {
    ServerThread server(listen_options(30ms));
    zmq::context_t ctx;
    Client c(ctx, server.endpoint(), "m:1");
    REQUIRE(c.hello().accepted);
    auto msg = receive(c.socket(), /*skip_heartbeats=*/false, kWait);
    REQUIRE(msg.has_value());
    CHECK(protocol::peek_type(view_of(msg->frames[0])) == MsgType::Heartbeat);
    c.close();
    // The server notices on its next heartbeat; a new master is then accepted at once.
    Client other(ctx, server.endpoint(), "m:2");
    bool accepted = false;
    auto deadline = Clock::now() + kWait;
    while (!accepted && Clock::now() < deadline) {
      std::this_thread::sleep_for(50ms);
      accepted = other.hello().accepted;
    }
    CHECK(accepted);
  }

  TEST_CASE("heartbeats go on while the loop is busy for many heartbeat intervals") {
    ServerThread server(listen_options(30ms));
    zmq::context_t ctx;
    Client c(ctx, server.endpoint(), "m:1");
    REQUIRE(c.hello().accepted);
    server.stall_loop_for_test(700ms);
    // The loop sleeps (as while it handles a GiB-sized message); the heartbeat thread does
    // not: about 16 in 500 ms, none from a stalled loop.
    int beats = 0;
    for (auto until = Clock::now() + 500ms; Clock::now() < until;) {
      auto msg = receive(c.socket(), /*skip_heartbeats=*/false, 50ms);
      if (msg && protocol::peek_type(view_of(msg->frames[0])) == MsgType::Heartbeat) ++beats;
    }
    CHECK_MESSAGE(beats >= 5, beats);
    check_put_add_get(c, 1);  // and the loop serves again
  }

  TEST_CASE("a session the worker dropped is reported as dropped, and why") {
    ServerThread server(listen_options(30ms));
    zmq::context_t ctx;
    Client c(ctx, server.endpoint(), "m:1");
    REQUIRE(c.hello().accepted);
    protocol::Setup setup;
    setup.node = 0;
    setup.session = 7;
    setup.peers = {server.endpoint()};
    setup.heartbeat_ms = 30;
    setup.master_timeout_ms = 200;  // this client sends no heartbeat: silent
    c.send(protocol::encode(setup));
    // The worker gives up on the silent master and says so.
    auto bye = receive(c.socket(), /*skip_heartbeats=*/true, kWait);
    REQUIRE(bye.has_value());
    REQUIRE(protocol::peek_type(view_of(bye->frames[0])) == MsgType::Goodbye);
    std::string why = protocol::decode_goodbye(view_of(bye->frames[0])).reason;
    CHECK_MESSAGE(contains(why, "master silent for more than 200 ms"), why);
    // A batch after that gets the same reason, not "send HELLO first".
    c.send(batch({stats_cmd(1)}));
    auto again = receive(c.socket(), /*skip_heartbeats=*/true, kWait);
    REQUIRE(again.has_value());
    REQUIRE(protocol::peek_type(view_of(again->frames[0])) == MsgType::Goodbye);
    CHECK(protocol::decode_goodbye(view_of(again->frames[0])).reason == why);
    // A new HELLO starts a new session.
    REQUIRE(c.hello().accepted);
    CHECK(live_tensors(c, 2) == 0);
  }

  TEST_CASE("connect mode: hello, batch, goodbye, then run() returns") {
    zmq::context_t ctx;
    zmq::socket_t router(ctx, zmq::socket_type::router);
    protocol::configure_socket(router, int64_t{1} << 30);
    router.set(zmq::sockopt::router_mandatory, 1);
    router.bind("tcp://127.0.0.1:*");
    std::string endpoint = router.get(zmq::sockopt::last_endpoint);

    worker::ServerOptions o;
    o.master = endpoint;
    o.heartbeat = 20ms;
    o.connect_timeout = kWait;
    ServerThread server(o);
    CHECK(server.endpoint() == endpoint);

    // The worker announces itself with a heartbeat.
    auto first = receive(router, /*skip_heartbeats=*/false, kWait, 1);
    REQUIRE(first.has_value());
    REQUIRE(first->frames.size() == 2);
    std::string identity(view_of(first->frames[0]));
    CHECK(protocol::peek_type(view_of(first->frames[1])) == MsgType::Heartbeat);

    auto send = [&](std::string header, std::span<const Tensor> payloads = {}) {
      REQUIRE(protocol::send_message(router, &identity, std::move(header), payloads));
    };
    auto next = [&] {
      auto msg = receive(router, true, kWait, 1);
      REQUIRE(msg.has_value());
      REQUIRE(msg->frames.size() >= 2);
      CHECK(view_of(msg->frames[0]) == identity);
      return std::move(*msg);
    };

    send(protocol::encode(protocol::Hello{protocol::kVersion, "router-master:1"}));
    protocol::HelloReply hello = protocol::decode_hello_reply(view_of(next().frames[1]));
    CHECK(hello.accepted);
    REQUIRE_FALSE(hello.devices.empty());
    CHECK(hello.devices[0].name == "cpu");

    Tensor t = local::from_vector<int32_t>({5, 6, 7}, {3});
    send(batch({put_cmd(1, t, 1), add_cmd(2, 1, 1), get_cmd(2, 77)}), std::vector<Tensor>{t});
    protocol::Received got = next();
    auto r = decode_as<GetReply>(view_of(got.frames[1]), got.frames.size() - 2);
    CHECK(r.request == 77);
    REQUIRE(!r.failure);
    REQUIRE(got.frames.size() == 3);
    std::vector<int32_t> values(3);
    REQUIRE(got.frames[2].size() == 12);
    std::memcpy(values.data(), got.frames[2].data(), 12);
    CHECK(values == std::vector<int32_t>{10, 12, 14});

    // Garbage is answered here too.
    send("garbage!!");
    protocol::Received err = next();
    auto e = decode_as<ErrorReply>(view_of(err.frames[1]), 0);
    CHECK(contains(e.message, "bad magic"));

    send(protocol::encode_goodbye());
    CHECK(server.wait_finished());
    CHECK_FALSE(server.error());
  }

  TEST_CASE("connect mode: heartbeats go on while the loop is busy, on their own connection") {
    // A worker that dialed its master (dtr-exec's jobs, mpirun's) sends its heartbeats from
    // a thread of its own once Setup opened the heartbeat connection, as a listening worker
    // does: its loop may be busy with a GiB-sized message, or starved of CPU, for longer
    // than the master's timeout (a 4 GiB transfer with 500 ms and two busy loops beside it
    // lost the node at 557 ms of silence when the loop sent them).
    zmq::context_t ctx;
    zmq::socket_t router(ctx, zmq::socket_type::router);
    protocol::configure_socket(router, int64_t{1} << 30);
    router.bind("tcp://127.0.0.1:*");
    const std::string endpoint = router.get(zmq::sockopt::last_endpoint);
    worker::ServerOptions o;
    o.master = endpoint;
    o.heartbeat = 30ms;
    o.connect_timeout = kWait;
    ServerThread server(o);
    auto first = receive(router, /*skip_heartbeats=*/false, kWait, 1);
    REQUIRE(first.has_value());
    const std::string identity(view_of(first->frames[0]));
    const std::string beat_identity = protocol::beat_identity(identity);
    REQUIRE(protocol::send_message(
        router, &identity, protocol::encode(protocol::Hello{protocol::kVersion, "m:1"}), {}));
    auto reply = receive(router, true, kWait, 1);
    REQUIRE(reply.has_value());
    REQUIRE(protocol::decode_hello_reply(view_of(reply->frames[1])).accepted);
    protocol::Setup setup;
    setup.node = 0;
    setup.session = 7;
    setup.peers = {endpoint};
    setup.heartbeat_ms = 30;
    setup.master_timeout_ms = 10000;
    REQUIRE(protocol::send_message(router, &identity, protocol::encode(setup), {}));
    // Heartbeats from the heartbeat connection, counted for `how_long`.
    auto beats_within = [&](std::chrono::milliseconds how_long) {
      int beats = 0;
      for (auto until = Clock::now() + how_long; Clock::now() < until;) {
        auto msg = receive(router, /*skip_heartbeats=*/false, 50ms, 1);
        if (msg && msg->frames.size() == 2 && view_of(msg->frames[0]) == beat_identity &&
            protocol::peek_type(view_of(msg->frames[1])) == MsgType::Heartbeat)
          ++beats;
      }
      return beats;
    };
    int up = 0;  // the heartbeat connection comes up
    for (auto until = Clock::now() + kWait; up == 0 && Clock::now() < until;)
      up = beats_within(100ms);
    REQUIRE(up > 0);
    server.stall_loop_for_test(700ms);
    std::this_thread::sleep_for(50ms);  // the loop takes the stall at its next turn
    // About 15 in 450 ms from the heartbeat thread; none from a stalled loop.
    const int beats = beats_within(450ms);
    CHECK_MESSAGE(beats >= 5, beats);
    REQUIRE(protocol::send_message(router, &identity, protocol::encode_goodbye(), {}));
    CHECK(server.wait_finished());
    CHECK_FALSE(server.error());
  }

  TEST_CASE("connect mode: no hello within the timeout is a TimeoutError naming the master") {
    zmq::context_t ctx;
    zmq::socket_t router(ctx, zmq::socket_type::router);
    protocol::configure_socket(router, int64_t{1} << 30);
    router.bind("tcp://127.0.0.1:*");
    std::string endpoint = router.get(zmq::sockopt::last_endpoint);
    worker::ServerOptions o;
    o.master = endpoint;
    o.connect_timeout = 200ms;
    ServerThread server(o);
    REQUIRE(server.wait_finished());
    REQUIRE(server.error());
    try {
      std::rethrow_exception(server.error());
    } catch (const TimeoutError& e) {
      CHECK(contains(e.what(), endpoint));
    } catch (const std::exception& e) {
      FAIL("expected a TimeoutError, got: " << e.what());
    }
  }

  TEST_CASE("connect mode: run() returns when the master goes away") {
    zmq::context_t ctx;
    auto router = std::make_unique<zmq::socket_t>(ctx, zmq::socket_type::router);
    protocol::configure_socket(*router, int64_t{1} << 30);
    router->bind("tcp://127.0.0.1:*");
    std::string endpoint = router->get(zmq::sockopt::last_endpoint);
    worker::ServerOptions o;
    o.master = endpoint;
    o.connect_timeout = kWait;
    ServerThread server(o);
    auto first = receive(*router, false, kWait, 1);
    REQUIRE(first.has_value());
    std::string identity(view_of(first->frames[0]));
    REQUIRE(protocol::send_message(
        *router, &identity, protocol::encode(protocol::Hello{protocol::kVersion, "m:1"}), {}));
    auto reply = receive(*router, true, kWait, 1);
    REQUIRE(reply.has_value());
    CHECK(protocol::decode_hello_reply(view_of(reply->frames[1])).accepted);
    router.reset();
    CHECK(server.wait_finished());
    CHECK_FALSE(server.error());
  }
}
