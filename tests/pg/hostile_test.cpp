// Hostile input on a process group's sockets: strangers connecting to a rank's mesh
// endpoint while collectives run, a member (played here by raw sockets) sending frames that
// disagree with their header or with the operation, and the rendezvous store's server and
// client facing malformed or oversized messages. Every wait is bounded.
#include <doctest/doctest.h>

#include <atomic>
#include <cstring>
#include <future>
#include <map>
#include <mutex>
#include <optional>
#include <random>
#include <thread>
#include <zmq.hpp>

#include "support/disconnect_monitor.hpp"

#include "pg/zmq/wire.hpp"
#include "pg_test_util.hpp"
#include "support/message_of.hpp"

using namespace dtr;
using namespace dtr::pgtest;
using Clock = std::chrono::steady_clock;

namespace {

using dtr::test::message_of;

constexpr auto kWait = 5s;  // the most any single wait of these tests takes

// A store that remembers the rendezvous token and endpoints the ranks publish (rank 0
// deletes them once the group is formed), so that the test can forge messages of the job.
class RecordingStore : public Store {
 public:
  void set(const std::string& key, const std::string& value) override {
    {
      std::lock_guard lock(m_);
      seen_[key] = value;
    }
    inner_->set(key, value);
  }
  std::string get(const std::string& key, std::chrono::milliseconds timeout) override {
    return inner_->get(key, timeout);
  }
  int64_t add(const std::string& key, int64_t delta) override { return inner_->add(key, delta); }
  void delete_prefix(const std::string& prefix) override { inner_->delete_prefix(prefix); }
  std::string describe() const override { return inner_->describe(); }
  // A value set under `key` (even if deleted since); waits for it (bounded).
  std::string seen(const std::string& key) {
    auto deadline = Clock::now() + kWait;
    while (Clock::now() < deadline) {
      {
        std::lock_guard lock(m_);
        auto it = seen_.find(key);
        if (it != seen_.end()) return it->second;
      }
      std::this_thread::sleep_for(5ms);
    }
    throw TimeoutError("no key " + key + " was set");
  }
  uint64_t token() { return static_cast<uint64_t>(std::stoll(seen("dtr-pg//token"))); }
  std::string endpoint(int rank) { return seen("dtr-pg//ep/" + std::to_string(rank)); }

 private:
  std::shared_ptr<Store> inner_ = make_hash_store();
  std::mutex m_;
  std::map<std::string, std::string> seen_;
};

pg::WireHeader header(pg::MsgKind kind, uint64_t token, int src) {
  pg::WireHeader h;
  h.kind = static_cast<uint8_t>(kind);
  h.token = token;
  h.src = src;
  return h;
}

std::string bytes_of(const pg::WireHeader& h) {
  return std::string(reinterpret_cast<const char*>(&h), sizeof h);
}

// A raw DEALER; records whether ZeroMQ dropped its connection (a socket monitor).
class RawDealer {
 public:
  RawDealer(zmq::context_t& ctx, const std::string& endpoint, const std::string& identity = {})
      : sock_(ctx, zmq::socket_type::dealer), mon_(ctx, zmq::socket_type::pair) {
    static std::atomic<int> counter{0};
    const std::string mon = "inproc://pg-hostile-mon-" + std::to_string(counter++);
    REQUIRE(zmq_socket_monitor(sock_.handle(), mon.c_str(), ZMQ_EVENT_DISCONNECTED) == 0);
    mon_.connect(mon);
    sock_.set(zmq::sockopt::linger, 1000);  // what it sent leaves even if it closes at once
    sock_.set(zmq::sockopt::sndhwm, 0);
    // A send never blocks for good: once a CURVE server refuses the handshake, ZeroMQ drops
    // the socket's only pipe and a DEALER without a pipe blocks in send.
    sock_.set(zmq::sockopt::sndtimeo, static_cast<int>(kWait / 1ms));
    if (!identity.empty()) sock_.set(zmq::sockopt::routing_id, identity);
    sock_.connect(endpoint);
  }
  ~RawDealer() {
    zmq_socket_monitor(sock_.handle(), nullptr, 0);
    mon_.close();
    sock_.close();
  }
  void send(const std::vector<std::string>& frames) { REQUIRE(try_send(frames)); }
  // False when ZeroMQ would not take the message within kWait (no connection to queue it on).
  bool try_send(const std::vector<std::string>& frames) {
    for (size_t i = 0; i < frames.size(); ++i) {
      if (!sock_.send(zmq::buffer(frames[i]),
                      i + 1 < frames.size() ? zmq::send_flags::sndmore : zmq::send_flags::none)) {
        return false;
      }
    }
    return true;
  }
  // Waits (bounded) for the connection to be dropped.
  bool dropped(std::chrono::milliseconds limit = kWait) {
    return dtr::test::wait_disconnected(mon_, limit);
  }
  zmq::socket_t& socket() { return sock_; }

 private:
  zmq::socket_t sock_;
  zmq::socket_t mon_;
};

// Receives one message within `limit`; nullopt when none came.
std::optional<std::vector<zmq::message_t>> receive(zmq::socket_t& s,
                                                   std::chrono::milliseconds limit = kWait) {
  auto deadline = Clock::now() + limit;
  while (Clock::now() < deadline) {
    zmq::pollitem_t item{s.handle(), 0, ZMQ_POLLIN, 0};
    zmq::poll(&item, 1, 20ms);
    std::vector<zmq::message_t> frames;
    zmq::message_t m;
    if (!s.recv(m, zmq::recv_flags::dontwait)) continue;
    while (true) {
      const bool more = m.more();
      frames.push_back(std::move(m));
      if (!more) break;
      m = zmq::message_t();
      (void)s.recv(m, zmq::recv_flags::none);
    }
    return frames;
  }
  return std::nullopt;
}

bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

// Rank 1 of a group of two played by raw sockets: it joins the rendezvous of a real rank
// 0 (created on another thread) and then sends whatever a test makes it send.
class FakeRank1 {
 public:
  explicit FakeRank1(std::chrono::milliseconds timeout = 3s)
      : router_(ctx_, zmq::socket_type::router) {
    ProcessGroupOptions o;
    o.timeout = timeout;
    auto store = std::make_shared<RecordingStore>();
    rank0_ =
        std::async(std::launch::async, [store, o] { return ProcessGroup::create(store, 0, 2, o); });
    token_ = store->token();
    router_.set(zmq::sockopt::linger, 0);
    router_.bind("tcp://127.0.0.1:*");
    store->set("dtr-pg//ep/1", router_.get(zmq::sockopt::last_endpoint));
    dealer_.emplace(ctx_, store->endpoint(0), "r1");
    dealer_->send({bytes_of(header(pg::MsgKind::Hello, token_, 1))});
    REQUIRE(rank0_.wait_for(kWait) == std::future_status::ready);
    group_ = rank0_.get();
    // Rank 0's hello to us.
    auto hello = receive(router_);
    REQUIRE(hello.has_value());
  }
  ~FakeRank1() {
    group_.shutdown();
    dealer_.reset();
    router_.close();
  }
  ProcessGroup& group() { return group_; }
  uint64_t token() const { return token_; }
  RawDealer& dealer() { return *dealer_; }
  // The next data message rank 0 sends us: its header.
  pg::WireHeader next_from_rank0() {
    while (true) {
      auto m = receive(router_);
      REQUIRE_MESSAGE(m.has_value(), "rank 0 sent nothing");
      REQUIRE(m->size() >= 2);
      REQUIRE((*m)[1].size() == sizeof(pg::WireHeader));
      pg::WireHeader h;
      std::memcpy(&h, (*m)[1].data(), sizeof h);
      if (h.kind != static_cast<uint8_t>(pg::MsgKind::Data)) continue;
      // The same-host agreement before the world group's first collective (its own channel,
      // pg/zmq/shm_path.hpp): answered with zeros, "rank 1 keeps to sockets".
      if (h.group != 1) {
        pg::WireHeader a = h;
        a.src = 1;
        a.payload = h.count * sizeof(int64_t);
        dealer().send({std::string(reinterpret_cast<const char*>(&a), sizeof a),
                       std::string(a.payload, '\0')});
        continue;
      }
      return h;
    }
  }

 private:
  zmq::context_t ctx_;
  zmq::socket_t router_;
  std::optional<RawDealer> dealer_;
  std::future<ProcessGroup> rank0_;
  ProcessGroup group_;
  uint64_t token_ = 0;
};

// Runs `op` on rank 0 in the background; the test answers it as rank 1.
template <typename F>
std::future<std::string> in_background(F op) {
  return std::async(std::launch::async, [op] {
    try {
      op();
    } catch (const std::exception& e) {
      return std::string(e.what());
    }
    return std::string("<no exception>");
  });
}

std::string wait_result(std::future<std::string>& f) {
  REQUIRE(f.wait_for(10s) == std::future_status::ready);
  return f.get();
}

// A data message from rank 1 answering rank 0's `asked` (same op, group, sequence).
pg::WireHeader answer(const pg::WireHeader& asked, uint64_t payload) {
  pg::WireHeader h = asked;
  h.src = 1;
  h.payload = payload;
  return h;
}

}  // namespace

TEST_CASE("pg hostile: strangers on the mesh endpoints cannot disturb collectives in progress") {
  constexpr int kRanks = 3;
  constexpr int kMinRounds = 8;
  auto store = std::make_shared<RecordingStore>();
  std::atomic<bool> attack_done{false};
  std::mutex m;
  std::vector<std::string> errors;
  std::atomic<int> rounds{0};

  std::vector<std::thread> ranks;
  for (int r = 0; r < kRanks; ++r) {
    ranks.emplace_back([&, r] {
      try {
        ProcessGroup g = ProcessGroup::create(store, r, kRanks, fast_options(20s));
        for (int round = 0;; ++round) {
          // Small (recursive doubling) and large (ring, several segments) all_reduce.
          for (int64_t n : {int64_t{37}, int64_t{200003}}) {
            auto t = make_input(r + round, n, DType::Float32);
            g.all_reduce(t);
            std::string d = compare(t, [&](int64_t i) {
              double s = 0;
              for (int k = 0; k < kRanks; ++k)
                s += value_for(k + round, i, DType::Float32, ReduceOp::Sum);
              return s;
            });
            if (!d.empty()) throw Error("all_reduce round " + std::to_string(round) + ": " + d);
          }
          // Point to point around the ring, several frames per message.
          auto out = make_input(r * 7 + round, 300001, DType::Int32);
          auto in = local::zeros(Shape{300001}, DType::Int32);
          Work w = g.isend(out, (r + 1) % kRanks, round);
          g.recv(in, (r + kRanks - 1) % kRanks, round);
          w.wait(20s);
          const int from = (r + kRanks - 1) % kRanks;
          std::string d = compare(in, [&](int64_t i) {
            return value_for(from * 7 + round, i, DType::Int32, ReduceOp::Sum);
          });
          if (!d.empty()) throw Error("recv round " + std::to_string(round) + ": " + d);
          // Rank 0 says whether to go on, so that every rank stops at the same round.
          auto go = local::full(Shape{1},
                                r == 0 && (round + 1 < kMinRounds || !attack_done.load()) ? 1 : 0,
                                DType::Int32);
          g.broadcast(go, 0);
          if (r == 0) rounds.store(round + 1);
          if (go.to_vector<int32_t>()[0] == 0) break;
        }
        g.barrier();
        g.shutdown();
      } catch (const std::exception& e) {
        std::lock_guard lock(m);
        errors.push_back("rank " + std::to_string(r) + ": " + e.what());
      }
    });
  }

  // The attack, once the group is formed (a connection that claims a member's identity
  // before the member connects takes it over: see docs/process_groups.md), on every rank's
  // endpoint, from several sockets and threads at once.
  const uint64_t token = store->token();
  for (auto deadline = Clock::now() + 20s; rounds.load() < 1 && Clock::now() < deadline;)
    std::this_thread::sleep_for(5ms);
  std::vector<std::string> endpoints;
  for (int r = 0; r < kRanks; ++r) endpoints.push_back(store->endpoint(r));
  zmq::context_t ctx;
  std::atomic<int> oversized_dropped{0};
  auto attack = [&](int seed) {
    std::mt19937 rng(static_cast<uint32_t>(seed));
    auto random_bytes = [&](size_t n) {
      std::string s(n, '\0');
      for (char& c : s) c = static_cast<char>(rng());
      return s;
    };
    for (const std::string& ep : endpoints) {
      RawDealer anon(ctx, ep);
      // Garbage of every size around the header's, alone and as multipart messages.
      for (size_t n : {size_t{0}, size_t{1}, size_t{63}, size_t{64}, size_t{65}, size_t{5000}})
        anon.send({random_bytes(n)});
      anon.send({random_bytes(64), random_bytes(10), random_bytes(10), random_bytes(10)});
      // Headers of another job (no or a wrong token).
      pg::WireHeader wrong = header(pg::MsgKind::Goodbye, token ^ 1, 1);
      anon.send({bytes_of(wrong)});
      wrong.magic = 0x12345678;
      anon.send({bytes_of(wrong)});
      // With this job's token: a goodbye, an abort and data naming a member, sent by a
      // connection that is not that member.
      for (int src = 0; src < kRanks; ++src) {
        anon.send({bytes_of(header(pg::MsgKind::Goodbye, token, src))});
        pg::WireHeader abort = header(pg::MsgKind::Abort, token, src);
        abort.group = 1;
        abort.op = static_cast<uint8_t>(CommOp::AllReduce);
        abort.payload = 5;
        for (uint64_t seq = 1; seq < 40; ++seq) {
          abort.seq = seq;
          anon.send({bytes_of(abort), "boom!"});
        }
        pg::WireHeader data = header(pg::MsgKind::Data, token, src);
        data.op = static_cast<uint8_t>(CommOp::AllReduce);
        data.group = 1;
        data.count = 37;
        data.payload = 37 * 4;
        for (uint64_t seq = 1; seq < 40; ++seq) {
          data.seq = seq;
          anon.send({bytes_of(data), random_bytes(37 * 4)});
        }
      }
      // A payload over what its header says, split wrongly, far too many frames, and a
      // header announcing an enormous payload.
      pg::WireHeader big = header(pg::MsgKind::Data, token, 1);
      big.op = static_cast<uint8_t>(CommOp::Send);
      big.payload = 100;
      anon.send({bytes_of(big), random_bytes(60), random_bytes(40)});
      std::vector<std::string> many(200, "x");
      many[0] = bytes_of(big);
      anon.send(many);
      big.payload = uint64_t{1} << 62;
      anon.send({bytes_of(big), random_bytes(100)});
      // Connections claiming a member's identity, exact or spelled otherwise ("r01" and "r"
      // parse as ranks 1 and 0): they must neither pass as that member nor get it declared
      // dead by sending a malformed message in its name.
      for (const char* id : {"r1", "r01", "r+1", "r", "r2", "r0"}) {
        RawDealer liar(ctx, ep, id);
        liar.send({bytes_of(header(pg::MsgKind::Goodbye, token, 1))});
        pg::WireHeader bad = header(pg::MsgKind::Hello, token, 1);
        bad.payload = 3;  // malformed: a hello carries nothing
        liar.send({bytes_of(bad), "abc"});
      }
      // A frame over the mesh's limit: ZeroMQ drops the connection before reading it.
      RawDealer huge(ctx, ep);
      pg::WireHeader h = header(pg::MsgKind::Data, token, 1);
      h.op = static_cast<uint8_t>(CommOp::Send);
      h.payload = 2 * pg::kMaxFrameBytes;
      huge.send({bytes_of(h), std::string(2 * pg::kMaxFrameBytes, 'z')});
      if (huge.dropped()) ++oversized_dropped;
      std::this_thread::sleep_for(20ms);
    }
  };
  const int rounds_before = rounds.load();
  std::vector<std::thread> attackers;
  for (int i = 0; i < 3; ++i) attackers.emplace_back(attack, 100 + i);
  for (auto& t : attackers) t.join();
  const int rounds_during = rounds.load() - rounds_before;
  attack_done = true;
  for (auto& t : ranks) t.join();

  for (const auto& e : errors) FAIL_CHECK(e);
  CHECK(errors.empty());
  CHECK(rounds.load() >= kMinRounds);
  CHECK(oversized_dropped.load() == 3 * kRanks);
  MESSAGE(rounds.load(), " rounds of all_reduce, send/recv and broadcast, ", rounds_during,
          " of them during the attack");
}

TEST_CASE(
    "pg hostile: with a cluster key (CURVE) full frames fit the limit, strangers are shut out") {
  // CURVE wraps every frame (33 bytes more on the wire): frames of kMaxFrameBytes must still
  // pass the ROUTER's limit, in collectives and in multi-frame point-to-point messages.
  ProcessGroupOptions o = fast_options(20s);
  o.security = SecurityConfig{generate_cluster_key(), false, "test"};
  auto store = std::make_shared<RecordingStore>();
  std::atomic<bool> attacked{false};
  std::mutex m;
  std::vector<std::string> errors;
  std::thread stranger([&] {
    // Without the key: the handshake fails, nothing it sends is read. Once the refusal is
    // back ZeroMQ takes no more messages from the socket, so a send may time out: that is
    // the refusal too, not an error.
    try {
      zmq::context_t ctx;
      for (int r = 0; r < 3; ++r) {
        RawDealer raw(ctx, store->endpoint(r));
        if (raw.try_send({bytes_of(header(pg::MsgKind::Goodbye, 0, 1)), "x"})) {
          (void)raw.try_send({std::string(3 * pg::kMaxFrameBytes, 'g')});
        }
      }
    } catch (const std::exception& e) {
      std::lock_guard lock(m);
      errors.push_back(std::string("stranger: ") + e.what());
    }
    attacked = true;
  });
  const auto give_up = Clock::now() + 60s;
  std::vector<std::thread> ranks;
  for (int r = 0; r < 3; ++r) {
    ranks.emplace_back([&, r] {
      try {
        ProcessGroup g = ProcessGroup::create(store, r, 3, o);
        for (int round = 0;; ++round) {
          const int64_t n = 3 * static_cast<int64_t>(pg::kMaxFrameBytes / 4) + 5;
          auto t = make_input(r, n, DType::Float32);
          g.all_reduce(t);
          std::string d = compare(t, [&](int64_t i) {
            double sum = 0;
            for (int k = 0; k < 3; ++k) sum += value_for(k, i, DType::Float32, ReduceOp::Sum);
            return sum;
          });
          if (!d.empty()) throw Error("all_reduce: " + d);
          auto out = make_input(r + 10, n, DType::Int64);
          auto in = local::zeros(Shape{n}, DType::Int64);
          Work w = g.isend(out, (r + 1) % 3, round);
          g.recv(in, (r + 2) % 3, round);
          w.wait(20s);
          d = compare(in, [&](int64_t i) {
            return value_for((r + 2) % 3 + 10, i, DType::Int64, ReduceOp::Sum);
          });
          if (!d.empty()) throw Error("recv: " + d);
          // Rank 0 says whether to go on, so that every rank stops at the same round.
          // Bounded: the stranger's sends time out within seconds.
          const bool more = round < 2 || (!attacked.load() && Clock::now() < give_up);
          auto go = local::full(Shape{1}, more ? 1 : 0, DType::Int32);
          g.broadcast(go, 0);
          if (go.to_vector<int32_t>()[0] == 0) break;
        }
        g.barrier();
        g.shutdown();
      } catch (const std::exception& e) {
        std::lock_guard lock(m);
        errors.push_back("rank " + std::to_string(r) + ": " + e.what());
      }
    });
  }
  for (auto& t : ranks) t.join();
  stranger.join();
  check_no_errors(errors);
}

TEST_CASE("pg hostile: a member's frames that disagree with the header fail naming it") {
  SUBCASE("a payload frame shorter than the header says") {
    FakeRank1 fake;
    auto t = local::ones(Shape{4});
    auto result = in_background([&] { fake.group().all_reduce(t); });
    pg::WireHeader asked = fake.next_from_rank0();
    fake.dealer().send({bytes_of(answer(asked, 16)), std::string(12, '\0')});
    std::string e = wait_result(result);
    CHECK_MESSAGE(contains(e, "rank 1 (tcp://"), e);
    CHECK_MESSAGE(contains(e, "sent a malformed message"), e);
    CHECK_MESSAGE(contains(e, "payload frame 1 of 1 has 12 bytes, expected 16"), e);
  }
  SUBCASE("a payload split into more frames than its size needs") {
    FakeRank1 fake;
    auto t = local::ones(Shape{4});
    auto result = in_background([&] { fake.group().all_reduce(t); });
    pg::WireHeader asked = fake.next_from_rank0();
    fake.dealer().send({bytes_of(answer(asked, 16)), std::string(8, '\0'), std::string(8, '\0')});
    std::string e = wait_result(result);
    CHECK_MESSAGE(contains(e, "rank 1 (tcp://"), e);
    CHECK_MESSAGE(contains(e,
                           "header says 16 payload bytes (1 frames of at most 262144 bytes), "
                           "message has 2 payload frames"),
                  e);
  }
  SUBCASE("an unexpected payload on a goodbye") {
    FakeRank1 fake;
    auto t = local::ones(Shape{4});
    auto result = in_background([&] { fake.group().all_reduce(t); });
    (void)fake.next_from_rank0();
    pg::WireHeader bye = header(pg::MsgKind::Goodbye, fake.token(), 1);
    bye.payload = 5;
    fake.dealer().send({bytes_of(bye), "hello"});
    std::string e = wait_result(result);
    CHECK_MESSAGE(contains(e, "rank 1 (tcp://"), e);
    CHECK_MESSAGE(contains(e, "unexpected payload of 5 bytes"), e);
  }
  SUBCASE("a consistent message of the wrong size for the collective") {
    FakeRank1 fake;
    auto t = local::ones(Shape{4});
    auto result = in_background([&] { fake.group().all_reduce(t); });
    pg::WireHeader asked = fake.next_from_rank0();
    fake.dealer().send({bytes_of(answer(asked, 8)), std::string(8, '\0')});
    std::string e = wait_result(result);
    CHECK_MESSAGE(contains(e, "rank 1 sent 8 bytes where 16 were expected"), e);
  }
  SUBCASE("a frame over the limit drops the connection; the collective times out naming rank 1") {
    FakeRank1 fake(1500ms);
    auto t = local::ones(Shape{4});
    auto result = in_background([&] { fake.group().all_reduce(t); });
    pg::WireHeader asked = fake.next_from_rank0();
    const uint64_t n = 4 * pg::kMaxFrameBytes;
    fake.dealer().send({bytes_of(answer(asked, n)), std::string(n, '\0')});
    CHECK(fake.dealer().dropped());
    std::string e = wait_result(result);
    CHECK_MESSAGE(contains(e, "timed out"), e);
    CHECK_MESSAGE(contains(e, "rank 1 (tcp://"), e);
  }
  SUBCASE("point to point: counts and sizes that do not fit, and a wrongly cut payload") {
    FakeRank1 fake;
    const uint64_t token = fake.token();
    auto send_header = [&](int64_t count, uint64_t payload, int tag) {
      pg::WireHeader h = header(pg::MsgKind::Data, token, 1);
      h.op = static_cast<uint8_t>(CommOp::Send);
      h.group = 1;
      h.seq = static_cast<uint64_t>(tag);
      h.count = count;
      h.dtype = static_cast<uint8_t>(DType::Float32);
      h.payload = payload;
      return h;
    };
    auto t4 = local::zeros(Shape{4});
    // The header's count and payload agree with each other, not with the receive.
    fake.dealer().send({bytes_of(send_header(4, 8, 1)), std::string(8, '\0')});
    CHECK(contains(message_of<ProtocolError>([&] { fake.group().recv(t4, 1, 1); }),
                   "rank 1 sent 8 payload bytes for 4 elements (16 expected)"));
    // 300000 elements in five frames, for a receive of 4: the message is consumed.
    const int64_t big = 300000;
    std::vector<float> values(static_cast<size_t>(big));
    for (int64_t i = 0; i < big; ++i) values[static_cast<size_t>(i)] = static_cast<float>(i % 977);
    const std::string bytes(reinterpret_cast<const char*>(values.data()), values.size() * 4);
    std::vector<std::string> frames{bytes_of(send_header(big, bytes.size(), 2))};
    for (uint64_t i = 0; i < pg::frames_for(bytes.size()); ++i)
      frames.push_back(bytes.substr(i * pg::kMaxFrameBytes, pg::frame_bytes(bytes.size(), i)));
    REQUIRE(frames.size() == 6);
    fake.dealer().send(frames);
    CHECK(contains(message_of<ShapeError>([&] { fake.group().recv(t4, 1, 2); }),
                   "rank 1 sent 300000 elements, the receive tensor has 4"));
    // The same message for a receive that fits arrives whole.
    frames[0] = bytes_of(send_header(big, bytes.size(), 3));
    fake.dealer().send(frames);
    auto got = local::zeros(Shape{big});
    CHECK(fake.group().recv(got, 1, 3) == 1);
    CHECK(got.to_vector<float>() == values);
    // Frame 2 of 5 cut short: rank 1 is failed, naming the frame and both sizes.
    auto result = in_background([&] { fake.group().recv(got, 1, 4); });
    frames[0] = bytes_of(send_header(big, bytes.size(), 4));
    frames[2] = frames[2].substr(0, 100);
    fake.dealer().send(frames);
    std::string e = wait_result(result);
    CHECK_MESSAGE(contains(e, "rank 1 (tcp://"), e);
    CHECK_MESSAGE(contains(e, "payload frame 2 of 5 has 100 bytes, expected 262144"), e);
  }
  SUBCASE("point to point by address: refused from a rank never agreed to share this host") {
    FakeRank1 fake;
    pg::WireHeader h = header(pg::MsgKind::DataAt, fake.token(), 1);
    h.op = static_cast<uint8_t>(CommOp::Send);
    h.group = 1;
    h.seq = 1;
    h.count = 1 << 20;
    h.dtype = static_cast<uint8_t>(DType::Float32);
    h.payload = sizeof(pg::AddressPayload);
    pg::AddressPayload at;
    at.address = 4096;
    at.offer = 1;
    const std::string where(reinterpret_cast<const char*>(&at), sizeof at);
    fake.dealer().send({bytes_of(h), where});
    auto t = local::zeros(Shape{1 << 20});
    std::string e = message_of<ProtocolError>([&] { fake.group().recv(t, 1, 1); });
    CHECK_MESSAGE(contains(e, "sent its payload by address, but no group of both agreed"), e);
    // Well formed but not a send, and an address payload of the wrong size: rank 1 is failed.
    auto result = in_background([&] { fake.group().recv(t, 1, 2); });
    h.seq = 2;
    h.payload = 8;
    fake.dealer().send({bytes_of(h), where.substr(0, 8)});
    e = wait_result(result);
    CHECK_MESSAGE(contains(e, "rank 1 (tcp://"), e);
    CHECK_MESSAGE(contains(e, "payload by address of 8 bytes (expected 16)"), e);
  }
}

TEST_CASE("pg hostile: the tcp store drops malformed and oversized requests and keeps serving") {
  const int port = test::free_port();
  auto store = make_tcp_store("127.0.0.1", port, true, 10s);
  const std::string ep = "tcp://127.0.0.1:" + std::to_string(port);
  store->set("k", "v");
  zmq::context_t ctx;
  // A waiting get is served after the attack.
  auto waiting = std::async(std::launch::async, [&] { return store->get("late", 10s); });
  {
    RawDealer raw(ctx, ep);
    raw.send({"garbage"});
    raw.send({"a", "b", "c"});
    raw.send(std::vector<std::string>(50, "x"));
    raw.send({std::string(8, '\1'), "G", "k", "", "extra", "frames"});
    // A well-formed request with an unknown op gets the error reply the protocol defines.
    raw.send({std::string(8, '\2'), "X", "k", ""});
    auto reply = receive(raw.socket());
    REQUIRE(reply.has_value());
    REQUIRE(reply->size() == 3);
    CHECK((*reply)[0].to_string() == std::string(8, '\2'));
    CHECK(*(*reply)[1].data<uint8_t>() == 1);
    CHECK((*reply)[2].to_string() == "unknown store op 88 (expected S, G, A or D)");
    // None of the malformed ones was answered.
    CHECK_FALSE(receive(raw.socket(), 200ms).has_value());
  }
  {
    RawDealer raw(ctx, ep);
    raw.send({std::string(8, '\3'), "S", "huge", std::string((1 << 20) + 1, 'h')});
    CHECK(raw.dropped());
  }
  CHECK(store->get("k", 1s) == "v");
  CHECK_THROWS_AS(store->get("huge", 100ms), TimeoutError);
  store->set("late", "served");
  REQUIRE(waiting.wait_for(kWait) == std::future_status::ready);
  CHECK(waiting.get() == "served");
}

TEST_CASE("pg hostile: a store client facing a bad server fails clearly and bounded") {
  zmq::context_t ctx;
  zmq::socket_t server(ctx, zmq::socket_type::router);
  server.set(zmq::sockopt::linger, 0);
  server.bind("tcp://127.0.0.1:*");
  const std::string ep = server.get(zmq::sockopt::last_endpoint);
  const int port = std::stoi(ep.substr(ep.rfind(':') + 1));
  auto client = make_tcp_store("127.0.0.1", port, false, 1500ms);
  auto answer_with = [&](std::vector<std::string> frames) {
    auto req = receive(server);
    REQUIRE(req.has_value());
    REQUIRE(req->size() == 5);
    server.send((*req)[0], zmq::send_flags::sndmore);
    for (size_t i = 0; i < frames.size(); ++i) {
      if (frames[i] == "<reqid>") frames[i] = (*req)[1].to_string();
      server.send(zmq::buffer(frames[i]),
                  i + 1 < frames.size() ? zmq::send_flags::sndmore : zmq::send_flags::none);
    }
  };
  {
    auto got = std::async(std::launch::async, [&] {
      return message_of<ProtocolError>([&] { (void)client->get("a", 1500ms); });
    });
    answer_with({"<reqid>", "ok"});
    REQUIRE(got.wait_for(kWait) == std::future_status::ready);
    std::string e = got.get();
    CHECK_MESSAGE(contains(e, "malformed reply: 2 frames of 8 and 2 bytes first, expected 3"), e);
  }
  {
    // A value over the limit: the client's connection is dropped before the value is
    // allocated, and the request times out.
    auto got = std::async(std::launch::async, [&] {
      return message_of<TimeoutError>([&] { (void)client->get("b", 1500ms); });
    });
    answer_with({"<reqid>", std::string(1, '\0'), std::string((1 << 20) + 1, 'v')});
    REQUIRE(got.wait_for(kWait) == std::future_status::ready);
    std::string e = got.get();
    CHECK_MESSAGE(contains(e, "no answer for key 'b'"), e);
  }
}
